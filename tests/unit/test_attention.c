/* Fused attention: the CPU kernel's forward and backward against explicit
 * attention in double precision (partial tiles, grouped KV heads, causal
 * masks aligned at the end when the key sequence is longer), the key's
 * text round trip, and the plan's refusals.  The cast to FP8 (E4M3). */
#include "check.h"

#include "backend/cpu/dsi_cpu.h"
#include "backend/dsi_kernel_plan.h"

#include <dsmpi/events.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAXQ (2 * 4 * 100 * 16)
#define MAXK (2 * 2 * 130 * 16)

static float q[MAXQ], o[MAXQ], dout[MAXQ], dq[MAXQ], k[MAXK], v[MAXK], dk[MAXK], dv[MAXK];
static float lse[2 * 4 * 100];
static float scratch_cast[4096];
static double ro[MAXQ], rdq[MAXQ], rdk[MAXK], rdv[MAXK];

/* Explicit attention of every head: o, and the gradients for dout. */
static void reference(const ds_attention_shape_t *sh, int causal)
{
    int64_t d = sh->head_dim, sq = sh->seq_q, sk = sh->seq_k, group = sh->heads / sh->kv_heads;
    double scale = 1.0 / sqrt((double)d);
    double *p = calloc((size_t)(sq * sk), sizeof(double)), *dp = calloc((size_t)(sq * sk), 8);
    memset(rdk, 0, sizeof(rdk));
    memset(rdv, 0, sizeof(rdv));
    for (int64_t bh = 0; bh < sh->batch * sh->heads; bh++) {
        int64_t kvh = (bh / sh->heads) * sh->kv_heads + (bh % sh->heads) / group;
        const float *Q = q + bh * sq * d, *K = k + kvh * sk * d, *V = v + kvh * sk * d;
        const float *dO = dout + bh * sq * d;
        for (int64_t i = 0; i < sq; i++) {
            int64_t end = causal ? i + 1 + sk - sq : sk;
            double max = -INFINITY, sum = 0;
            for (int64_t j = 0; j < sk; j++) {
                double s = 0;
                for (int64_t e = 0; e < d; e++)
                    s += (double)Q[i * d + e] * K[j * d + e];
                p[i * sk + j] = j < end ? s * scale : -INFINITY;
                max = fmax(max, p[i * sk + j]);
            }
            for (int64_t j = 0; j < sk; j++)
                sum += p[i * sk + j] = exp(p[i * sk + j] - max);
            for (int64_t j = 0; j < sk; j++)
                p[i * sk + j] /= sum;
            double D = 0;
            for (int64_t e = 0; e < d; e++) {
                double acc = 0;
                for (int64_t j = 0; j < sk; j++)
                    acc += p[i * sk + j] * V[j * d + e];
                ro[(bh * sq + i) * d + e] = acc;
                D += acc * dO[i * d + e];
            }
            for (int64_t j = 0; j < sk; j++) {
                double g = 0;
                for (int64_t e = 0; e < d; e++)
                    g += (double)dO[i * d + e] * V[j * d + e];
                dp[i * sk + j] = p[i * sk + j] * (g - D);
            }
        }
        for (int64_t i = 0; i < sq; i++)
            for (int64_t e = 0; e < d; e++) {
                double acc = 0;
                for (int64_t j = 0; j < sk; j++)
                    acc += dp[i * sk + j] * K[j * d + e];
                rdq[(bh * sq + i) * d + e] = acc * scale;
            }
        for (int64_t j = 0; j < sk; j++)
            for (int64_t e = 0; e < d; e++) {
                double gk = 0, gv = 0;
                for (int64_t i = 0; i < sq; i++) {
                    gk += dp[i * sk + j] * Q[i * d + e];
                    gv += p[i * sk + j] * dO[i * d + e];
                }
                rdk[(kvh * sk + j) * d + e] += gk * scale;
                rdv[(kvh * sk + j) * d + e] += gv;
            }
    }
    free(p);
    free(dp);
}

static int close_to(const char *what, const float *got, const double *want, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        if (!(fabs(got[i] - want[i]) <= 1e-4 + 1e-4 * fabs(want[i]))) {
            fprintf(stderr, "%s: element %lld = %.8g, expected %.8g\n", what, (long long)i, got[i],
                    want[i]);
            return 0;
        }
    return 1;
}

static void check_case(ds_attention_shape_t sh, int causal)
{
    int64_t nq = sh.batch * sh.heads * sh.seq_q * sh.head_dim;
    int64_t nk = sh.batch * sh.kv_heads * sh.seq_k * sh.head_dim;
    for (int64_t i = 0; i < nq; i++) {
        q[i] = dsi_rng_normal(1, (uint64_t)i);
        dout[i] = 0.1f * dsi_rng_normal(2, (uint64_t)i);
    }
    for (int64_t i = 0; i < nk; i++) {
        k[i] = dsi_rng_normal(3, (uint64_t)i);
        v[i] = dsi_rng_normal(4, (uint64_t)i);
    }
    int64_t fwd_floats = dsi_cpu_attention_scratch(&sh, 0);
    int64_t bwd_floats = dsi_cpu_attention_scratch(&sh, 1);
    float *scratch = calloc((size_t)(fwd_floats > bwd_floats ? fwd_floats : bwd_floats), 4);
    dsi_cpu_attention_fwd(DSI_STYPE_F32, &sh, causal, q, k, v, o, lse, scratch);
    dsi_cpu_attention_bwd(DSI_STYPE_F32, &sh, causal, dout, q, k, v, o, lse, dq, dk, dv, scratch);
    free(scratch);
    reference(&sh, causal);
    CHECK_MSG(close_to("o", o, ro, nq), "seq %lld/%lld causal %d", (long long)sh.seq_q,
              (long long)sh.seq_k, causal);
    CHECK_MSG(close_to("dq", dq, rdq, nq), "seq %lld/%lld causal %d", (long long)sh.seq_q,
              (long long)sh.seq_k, causal);
    CHECK_MSG(close_to("dk", dk, rdk, nk), "seq %lld/%lld causal %d", (long long)sh.seq_q,
              (long long)sh.seq_k, causal);
    CHECK_MSG(close_to("dv", dv, rdv, nk), "seq %lld/%lld causal %d", (long long)sh.seq_q,
              (long long)sh.seq_k, causal);
}

static void test_kernel(void)
{
    /* 70 = one full tile and a partial one; 4 query heads on 2 KV heads. */
    check_case((ds_attention_shape_t){2, 4, 2, 70, 70, 16}, 1);
    check_case((ds_attention_shape_t){2, 4, 2, 70, 70, 16}, 0);
    /* A query chunk against a longer key range (context parallelism). */
    check_case((ds_attention_shape_t){1, 2, 1, 40, 130, 16}, 1);
    check_case((ds_attention_shape_t){1, 2, 2, 100, 30, 8}, 0);
}

static void test_key(void)
{
    ds_event_key_t key, back;
    memset(&key, 0, sizeof(key));
    key.kind = DS_EVENT_COMPUTE;
    key.op = DS_OP_FLASH_ATTENTION;
    key.pass = DS_PASS_BACKWARD;
    key.dtype = DS_DTYPE_BF16;
    key.variant = 1;
    ds_attention_shape_t shape = {4, 32, 8, 8192, 16384, 128};
    ds_attention_shape_set(&key, &shape);
    ds_attention_shape_t again = ds_attention_shape_of(&key);
    CHECK(memcmp(&again, &shape, sizeof(shape)) == 0);
    char text[256];
    ds_event_key_format(&key, text, sizeof(text));
    CHECK_MSG(strcmp(text, "flash_attention bwd bf16 batch=4 heads=32 kv-heads=8 seq=8192 "
                           "kv-seq=16384 head-dim=128 causal") == 0,
              "%s", text);
    CHECK_OK(ds_event_key_parse(text, &back));
    CHECK(ds_event_key_equal(&key, &back));
    CHECK_FAILS(ds_event_key_parse("flash_attention fwd bf16 batch=1 rows=3", &back),
                DS_ERR_INVALID_ARG, "not an attention field");
    CHECK_FAILS(ds_event_key_parse("flash_attention fwd bf16 heads=4294967296", &back),
                DS_ERR_INVALID_ARG, "heads");

    /* The plan: nine buffers backward; heads not a multiple of kv-heads refused. */
    dsi_kernel_plan_t plan;
    char message[256];
    CHECK_INT(dsi_kernel_plan_make(&key, &plan, message, sizeof(message)), DS_OK);
    CHECK_INT(plan.num_buffers, 9);
    CHECK_INT(plan.buffers[0].count, 4LL * 32 * 8192 * 128);
    CHECK_INT(plan.buffers[2].count, 4LL * 8 * 16384 * 128);
    CHECK_INT(plan.buffers[5].count, 4LL * 32 * 8192);
    shape.kv_heads = 5;
    ds_attention_shape_set(&key, &shape);
    CHECK_INT(dsi_kernel_plan_make(&key, &plan, message, sizeof(message)), DS_ERR_INVALID_ARG);
    CHECK(strstr(message, "multiple of kv-heads") != NULL);
}

/* The cast to E4M3: scaled so the amax lands on 448, rounded to nearest
 * even, subnormals below 2^-6, saturating. */
static void test_fp8_cast(void)
{
    const float x[6] = {0.5f, -1.0f, 2.0f, 0.0f, 0.001f, 0.0001f};
    uint8_t y[6];
    float amax = 0.0f;
    dsi_cpu_fp8_cast(DSI_STYPE_F32, 6, x, y, &amax, scratch_cast);
    CHECK(amax == 2.0f);
    CHECK_INT(y[0], 0x6e); /* 112 = 1.75 x 2^6 */
    CHECK_INT(y[1], 0xf6); /* -224 = -1.75 x 2^7 */
    CHECK_INT(y[2], 0x7e); /* 448, the largest */
    CHECK_INT(y[3], 0x00);
    CHECK_INT(y[4], 0x26); /* 0.224: 1.75 x 2^-3 after rounding 1.792 */
    CHECK_INT(y[5], 0x0b); /* 0.0224 = 1.4336 x 2^-6: 1.375 (mantissa 3) */
}

int main(void)
{
    test_kernel();
    test_key();
    test_fp8_cast();
    return check_summary("test_attention");
}
