/* The CPU backend's kernels against reference loops in double precision,
 * on small shapes, for fp32 and bf16 storage: values, not just "it runs". */
#include "check.h"

#include "backend/cpu/dsi_cpu.h"
#include "backend/dsi_backend.h"
#include "backend/dsi_kernel_plan.h"

#include <math.h>
#include <stdlib.h>

#define MAXN 4096

static const dsi_stype_t types[] = {DSI_STYPE_F32, DSI_STYPE_BF16};

/* Random values rounded to the stored type: the reference sees exactly
 * what the kernel reads. */
static void make(dsi_stype_t t, int64_t n, float stddev, uint64_t seed, void *stored, double *ref)
{
    float v[MAXN];
    for (int64_t i = 0; i < n; i++)
        v[i] = stddev * dsi_rng_normal(seed, (uint64_t)i);
    dsi_cpu_store(stored, t, 0, n, v);
    dsi_cpu_load(stored, t, 0, n, v);
    for (int64_t i = 0; i < n; i++)
        ref[i] = v[i];
}

static double tol_of(dsi_stype_t t)
{
    return t == DSI_STYPE_F32 ? 2e-5 : 1.2e-2; /* bf16 keeps 8 bits: output rounding */
}

/* Every element within atol + rtol |want|; returns the worst excess. */
static int close_all(const char *what, dsi_stype_t t, const void *got_stored, const double *want,
                     int64_t n, double atol)
{
    float got[MAXN];
    dsi_cpu_load(got_stored, t, 0, n, got);
    double rtol = tol_of(t);
    for (int64_t i = 0; i < n; i++) {
        if (!(fabs(got[i] - want[i]) <= atol + rtol * fabs(want[i]))) {
            fprintf(stderr, "%s (%s): element %lld = %.8g, expected %.8g\n", what,
                    t == DSI_STYPE_F32 ? "fp32" : "bf16", (long long)i, got[i], want[i]);
            return 0;
        }
    }
    return 1;
}

static int close_f32(const char *what, const float *got, const double *want, int64_t n, double atol,
                     double rtol)
{
    for (int64_t i = 0; i < n; i++)
        if (!(fabs(got[i] - want[i]) <= atol + rtol * fabs(want[i]))) {
            fprintf(stderr, "%s: element %lld = %.8g, expected %.8g\n", what, (long long)i, got[i],
                    want[i]);
            return 0;
        }
    return 1;
}

static float scratch[1 << 16];
static unsigned char sa[MAXN * 4], sb[MAXN * 4], sc[MAXN * 4], sd[MAXN * 4];
static double ra[MAXN], rb[MAXN], rc[MAXN], rd[MAXN], want[MAXN], want2[MAXN];

static void test_formats(void)
{
    /* bf16: exact values, round to nearest even, NaN stays NaN. */
    CHECK_INT(dsi_bf16_from_f32(1.0f), 0x3f80);
    CHECK_INT(dsi_bf16_from_f32(-2.0f), 0xc000);
    CHECK(dsi_bf16_to_f32(dsi_bf16_from_f32(3.140625f)) == 3.140625f);
    CHECK_INT(dsi_bf16_from_f32(1.00390625f), 0x3f80); /* halfway: rounds to even */
    CHECK_INT(dsi_bf16_from_f32(1.01171875f), 0x3f82); /* halfway: rounds to even (up) */
    CHECK(isnan(dsi_bf16_to_f32(dsi_bf16_from_f32(NAN))));
    /* fp16: normal, subnormal, overflow, rounding. */
    CHECK_INT(dsi_fp16_from_f32(1.0f), 0x3c00);
    CHECK_INT(dsi_fp16_from_f32(-0.5f), 0xb800);
    CHECK_INT(dsi_fp16_from_f32(65504.0f), 0x7bff);
    CHECK_INT(dsi_fp16_from_f32(70000.0f), 0x7c00);
    CHECK_INT(dsi_fp16_from_f32(5.9604645e-8f), 0x0001);         /* smallest subnormal */
    CHECK_INT(dsi_fp16_from_f32(1.0f + 1.0f / 2048.0f), 0x3c00); /* halfway: even */
    CHECK(dsi_fp16_to_f32(0x0001) == 5.9604645e-8f);
    CHECK(dsi_fp16_to_f32(0x7bff) == 65504.0f);
    CHECK(isinf(dsi_fp16_to_f32(0x7c00)));
    for (int i = -2000; i <= 2000; i += 7) { /* round trips of representable values */
        float v = (float)i / 64.0f;
        CHECK(dsi_fp16_to_f32(dsi_fp16_from_f32(v)) == v);
    }
}

static void test_fill(void)
{
    /* Values like training's: mean ~0, the asked spread, never all zero. */
    static float v[100000];
    dsi_cpu_fill_normal(v, DSI_STYPE_F32, 100000, 0.02f, 0.0f, 0, 42);
    double sum = 0, sq = 0;
    int zeros = 0;
    for (int i = 0; i < 100000; i++) {
        sum += v[i];
        sq += (double)v[i] * v[i];
        zeros += v[i] == 0.0f;
    }
    double mean = sum / 1e5, spread = sqrt(sq / 1e5 - mean * mean);
    CHECK(fabs(mean) < 0.001);
    CHECK_NEAR(spread, 0.02, 0.03);
    CHECK(zeros < 10);
    int32_t ids[1000];
    dsi_cpu_fill_index(ids, 1000, 7, 3);
    int seen[7] = {0}, bad = 0;
    for (int i = 0; i < 1000; i++) {
        if (ids[i] < 0 || ids[i] >= 7)
            bad++;
        else
            seen[ids[i]]++;
    }
    CHECK_INT(bad, 0);
    for (int i = 0; i < 7; i++)
        CHECK(seen[i] > 100);
    /* Deterministic from (seed, index). */
    CHECK(dsi_rng_normal(5, 17) == dsi_rng_normal(5, 17));
    CHECK(dsi_rng_normal(5, 17) != dsi_rng_normal(6, 17));
}

static void test_gemm(void)
{
    const int64_t m = 7, n = 5, k = 9;
    for (unsigned trans = 0; trans < 4; trans++) {
        make(DSI_STYPE_F32, m * k, 1.0f, 1, sa, ra);
        make(DSI_STYPE_F32, k * n, 0.5f, 2, sb, rb);
        int ta = (trans & DS_GEMM_TRANS_A) != 0, tb = (trans & DS_GEMM_TRANS_B) != 0;
        for (int64_t i = 0; i < m; i++)
            for (int64_t j = 0; j < n; j++) {
                double s = 0;
                for (int64_t l = 0; l < k; l++)
                    s +=
                        (ta ? ra[l * m + i] : ra[i * k + l]) * (tb ? rb[j * k + l] : rb[l * n + j]);
                want[i * n + j] = s;
            }
        dsi_cpu_gemm(DSI_STYPE_F32, trans, m, n, k, sa, sb, sc, NULL, NULL, 0);
        CHECK_MSG(close_all("gemm", DSI_STYPE_F32, sc, want, m * n, 1e-5), "trans %u", trans);
    }
}

static void test_softmax(void)
{
    const int64_t rows = 12, cols = 6; /* 2 sequences of 6 queries */
    const float scale = 0.5f;
    for (size_t ti = 0; ti < 2; ti++) {
        dsi_stype_t t = types[ti];
        for (int causal = 0; causal <= 1; causal++) {
            make(t, rows * cols, 2.0f, 3, sa, ra);
            for (int64_t r = 0; r < rows; r++) {
                int64_t valid = causal ? r % cols + 1 : cols;
                double max = -1e300, sum = 0;
                for (int64_t j = 0; j < valid; j++)
                    max = fmax(max, scale * ra[r * cols + j]);
                for (int64_t j = 0; j < valid; j++)
                    sum += exp(scale * ra[r * cols + j] - max);
                for (int64_t j = 0; j < cols; j++)
                    want[r * cols + j] =
                        j < valid ? exp(scale * ra[r * cols + j] - max) / sum : 0.0;
            }
            dsi_cpu_softmax_fwd(t, rows, cols, causal, scale, sa, sb, scratch);
            CHECK_MSG(close_all("softmax fwd", t, sb, want, rows * cols, 1e-6), "causal %d",
                      causal);
            /* Masked entries are exactly zero. */
            if (causal) {
                float row0[6];
                dsi_cpu_load(sb, t, 0, cols, row0);
                CHECK(row0[0] > 0.999f && row0[1] == 0.0f && row0[5] == 0.0f);
            }
            /* Backward from the fp32-exact probabilities the kernel produced. */
            dsi_cpu_load(sb, t, 0, rows * cols, (float *)scratch);
            for (int64_t i = 0; i < rows * cols; i++)
                rb[i] = scratch[i];
            make(t, rows * cols, 1.0f, 4, sc, rc);
            for (int64_t r = 0; r < rows; r++) {
                int64_t valid = causal ? r % cols + 1 : cols;
                double dot = 0;
                for (int64_t j = 0; j < valid; j++)
                    dot += rb[r * cols + j] * rc[r * cols + j];
                for (int64_t j = 0; j < cols; j++)
                    want[r * cols + j] =
                        j < valid ? scale * rb[r * cols + j] * (rc[r * cols + j] - dot) : 0.0;
            }
            dsi_cpu_softmax_bwd(t, rows, cols, causal, scale, sb, sc, sd, scratch);
            CHECK_MSG(close_all("softmax bwd", t, sd, want, rows * cols, 2e-3), "causal %d",
                      causal);
        }
    }
}

static void test_norms(void)
{
    const int64_t rows = 5, cols = 16;
    const double eps = DSI_NORM_EPS;
    static float mean[16], rstd[16], dgamma[16], dbeta[16];
    for (size_t ti = 0; ti < 2; ti++) {
        dsi_stype_t t = types[ti];
        for (int layer = 0; layer <= 1; layer++) {
            make(t, rows * cols, 1.5f, 5, sa, ra); /* x */
            make(t, cols, 0.3f, 6, sb, rb);        /* gamma (scaled below) */
            for (int64_t j = 0; j < cols; j++)
                rb[j] += 1.0;
            {
                float g[16];
                for (int64_t j = 0; j < cols; j++)
                    g[j] = (float)rb[j];
                dsi_cpu_store(sb, t, 0, cols, g);
                dsi_cpu_load(sb, t, 0, cols, g);
                for (int64_t j = 0; j < cols; j++)
                    rb[j] = g[j];
            }
            make(t, cols, 0.2f, 7, sc, rc); /* beta */
            double xhat[MAXN], rs[16];
            for (int64_t r = 0; r < rows; r++) {
                double mu = 0, var = 0;
                if (layer) {
                    for (int64_t j = 0; j < cols; j++)
                        mu += ra[r * cols + j];
                    mu /= (double)cols;
                }
                for (int64_t j = 0; j < cols; j++)
                    var += (ra[r * cols + j] - mu) * (ra[r * cols + j] - mu);
                rs[r] = 1.0 / sqrt(var / (double)cols + eps);
                for (int64_t j = 0; j < cols; j++) {
                    xhat[r * cols + j] = (ra[r * cols + j] - mu) * rs[r];
                    want[r * cols + j] = xhat[r * cols + j] * rb[j] + (layer ? rc[j] : 0.0);
                }
            }
            if (layer)
                dsi_cpu_layernorm_fwd(t, rows, cols, sa, sb, sc, sd, mean, rstd, scratch);
            else
                dsi_cpu_rmsnorm_fwd(t, rows, cols, sa, sb, sd, rstd, scratch);
            CHECK_MSG(
                close_all(layer ? "layernorm fwd" : "rmsnorm fwd", t, sd, want, rows * cols, 1e-4),
                "layer %d", layer);
            double rstd_ref[16];
            for (int64_t r = 0; r < rows; r++)
                rstd_ref[r] = rs[r];
            CHECK(close_f32("norm rstd", rstd, rstd_ref, rows, 0, 1e-5));

            /* Backward: dx, dgamma (and dbeta) against the analytic gradient. */
            make(t, rows * cols, 1.0f, 8, sc, rc); /* dy */
            for (int64_t j = 0; j < cols; j++) {
                dgamma[j] = 0.25f; /* accumulates on top */
                dbeta[j] = -0.5f;
            }
            for (int64_t j = 0; j < cols; j++) {
                want2[j] = 0.25;
                rd[j] = -0.5;
            }
            for (int64_t r = 0; r < rows; r++) {
                double a = 0, b = 0;
                for (int64_t j = 0; j < cols; j++) {
                    double gdy = rb[j] * rc[r * cols + j];
                    a += gdy;
                    b += gdy * xhat[r * cols + j];
                    want2[j] += rc[r * cols + j] * xhat[r * cols + j];
                    rd[j] += rc[r * cols + j];
                }
                a /= (double)cols;
                b /= (double)cols;
                for (int64_t j = 0; j < cols; j++)
                    want[r * cols + j] = rs[r] * (rb[j] * rc[r * cols + j] - (layer ? a : 0.0) -
                                                  xhat[r * cols + j] * b);
            }
            if (layer)
                dsi_cpu_layernorm_bwd(t, rows, cols, sc, sa, sb, mean, rstd, sd, dgamma, dbeta,
                                      scratch);
            else
                dsi_cpu_rmsnorm_bwd(t, rows, cols, sc, sa, sb, rstd, sd, dgamma, scratch);
            CHECK_MSG(
                close_all(layer ? "layernorm bwd" : "rmsnorm bwd", t, sd, want, rows * cols, 2e-3),
                "layer %d", layer);
            CHECK(close_f32("norm dgamma", dgamma, want2, cols, 1e-4, 1e-4));
            if (layer)
                CHECK(close_f32("norm dbeta", dbeta, rd, cols, 1e-4, 1e-4));
        }
    }
}

static double gelu_ref(double x)
{
    return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}

static double silu_ref(double x)
{
    return x / (1.0 + exp(-x));
}

/* Derivatives by central differences of the references. */
static double deriv(double (*f)(double), double x)
{
    double h = 1e-5;
    return (f(x + h) - f(x - h)) / (2 * h);
}

static double relu_ref(double x)
{
    return x > 0 ? x : 0;
}

static void test_activations(void)
{
    const int64_t n = 3000; /* more than one chunk */
    for (size_t ti = 0; ti < 2; ti++) {
        dsi_stype_t t = types[ti];
        make(t, n, 2.0f, 9, sa, ra);
        make(t, n, 1.0f, 10, sb, rb); /* dy */
        for (int64_t i = 0; i < n; i++)
            want[i] = gelu_ref(ra[i]);
        dsi_cpu_gelu_fwd(t, n, sa, sc, scratch);
        CHECK(close_all("gelu fwd", t, sc, want, n, 1e-5));
        for (int64_t i = 0; i < n; i++)
            want[i] = rb[i] * deriv(gelu_ref, ra[i]);
        dsi_cpu_gelu_bwd(t, n, sb, sa, sc, scratch);
        CHECK(close_all("gelu bwd", t, sc, want, n, 1e-4));
        for (int64_t i = 0; i < n; i++)
            want[i] = relu_ref(ra[i]);
        dsi_cpu_relu_fwd(t, n, sa, sc, scratch);
        CHECK(close_all("relu fwd", t, sc, want, n, 0));
        for (int64_t i = 0; i < n; i++)
            want[i] = ra[i] > 0 ? rb[i] : 0.0;
        dsi_cpu_relu_bwd(t, n, sb, sa, sc, scratch);
        CHECK(close_all("relu bwd", t, sc, want, n, 0));
        for (int64_t i = 0; i < n; i++)
            want[i] = ra[i] + rb[i];
        dsi_cpu_add(t, n, sa, sb, sc, scratch);
        CHECK(close_all("add", t, sc, want, n, 1e-6));
    }
    CHECK_NEAR(dsi_silu_grad(0.7f), deriv(silu_ref, 0.7), 1e-4);
    CHECK_NEAR(dsi_gelu_grad(-1.3f), deriv(gelu_ref, -1.3), 1e-4);
}

static void test_glu(void)
{
    const int64_t rows = 4, cols = 10;
    for (size_t ti = 0; ti < 2; ti++) {
        dsi_stype_t t = types[ti];
        for (int gelu = 0; gelu <= 1; gelu++) {
            double (*act)(double) = gelu ? gelu_ref : silu_ref;
            make(t, rows * 2 * cols, 1.5f, 11, sa, ra);
            for (int64_t r = 0; r < rows; r++)
                for (int64_t j = 0; j < cols; j++)
                    want[r * cols + j] = act(ra[r * 2 * cols + j]) * ra[r * 2 * cols + cols + j];
            dsi_cpu_glu_fwd(t, gelu, rows, cols, sa, sb, scratch);
            CHECK_MSG(close_all("glu fwd", t, sb, want, rows * cols, 1e-5), "gelu %d", gelu);
            make(t, rows * cols, 1.0f, 12, sc, rc); /* dy */
            for (int64_t r = 0; r < rows; r++)
                for (int64_t j = 0; j < cols; j++) {
                    double gate = ra[r * 2 * cols + j], up = ra[r * 2 * cols + cols + j];
                    double dy = rc[r * cols + j];
                    want[r * 2 * cols + j] = dy * up * deriv(act, gate);
                    want[r * 2 * cols + cols + j] = dy * act(gate);
                }
            dsi_cpu_glu_bwd(t, gelu, rows, cols, sc, sa, sd, scratch);
            CHECK_MSG(close_all("glu bwd", t, sd, want, rows * 2 * cols, 1e-4), "gelu %d", gelu);
        }
    }
}

static void test_dropout(void)
{
    const int64_t rows = 30, cols = 100, n = rows * cols;
    static uint8_t mask[MAXN], mask2[MAXN];
    const float p = DSI_DROPOUT_P, scale = 1.0f / (1.0f - p);
    for (size_t ti = 0; ti < 2; ti++) {
        dsi_stype_t t = types[ti];
        make(t, n, 1.0f, 13, sa, ra);
        dsi_cpu_dropout_fwd(t, n, p, 99, sa, sb, mask, scratch);
        int64_t kept = 0;
        for (int64_t i = 0; i < n; i++) {
            kept += mask[i];
            want[i] = mask[i] ? ra[i] * scale : 0.0;
        }
        CHECK(close_all("dropout fwd", t, sb, want, n, 1e-6));
        CHECK_NEAR((double)kept / (double)n, 1.0 - p, 0.03); /* about p dropped */
        /* Same seed, same mask; another seed, another mask. */
        dsi_cpu_dropout_fwd(t, n, p, 99, sa, sc, mask2, scratch);
        CHECK(memcmp(mask, mask2, (size_t)n) == 0);
        dsi_cpu_dropout_fwd(t, n, p, 100, sa, sc, mask2, scratch);
        CHECK(memcmp(mask, mask2, (size_t)n) != 0);
        make(t, n, 1.0f, 14, sc, rc); /* dy */
        for (int64_t i = 0; i < n; i++)
            want[i] = mask[i] ? rc[i] * scale : 0.0;
        dsi_cpu_dropout_bwd(t, n, p, sc, mask, sd, scratch);
        CHECK(close_all("dropout bwd", t, sd, want, n, 1e-6));

        /* Bias + dropout + residual. */
        make(t, cols, 0.1f, 15, sb, rb); /* bias */
        make(t, n, 1.0f, 16, sc, rc);    /* residual */
        dsi_cpu_dropout_add_fwd(t, rows, cols, p, 7, sa, sb, sc, sd, mask, scratch);
        for (int64_t i = 0; i < n; i++)
            want[i] = rc[i] + (mask[i] ? (ra[i] + rb[i % cols]) * scale : 0.0);
        CHECK(close_all("dropout-add fwd", t, sd, want, n, 1e-5));
        static float dbias[100];
        for (int64_t j = 0; j < cols; j++)
            dbias[j] = 0.0f;
        dsi_cpu_dropout_add_bwd(t, rows, cols, p, sc, mask, sd, dbias, scratch);
        double bias_want[100] = {0};
        for (int64_t i = 0; i < n; i++) {
            want[i] = mask[i] ? rc[i] * scale : 0.0;
            bias_want[i % cols] += want[i]; /* summed in fp32 before rounding */
        }
        CHECK(close_all("dropout-add bwd", t, sd, want, n, 1e-5));
        CHECK(close_f32("dropout-add dbias", dbias, bias_want, cols, 1e-4, 1e-4));
    }
}

static void test_rope(void)
{
    const int64_t rows = 6, cols = 48; /* three heads of 16 */
    int64_t hd = dsi_rope_head_dim(cols);
    CHECK_INT(hd, 16);
    CHECK_INT(dsi_rope_head_dim(128 * 3), 128);
    CHECK_INT(dsi_rope_head_dim(7), 0);
    static float table[6 * 16];
    dsi_cpu_rope_table(rows, hd, table);
    for (size_t ti = 0; ti < 2; ti++) {
        dsi_stype_t t = types[ti];
        make(t, rows * cols, 1.0f, 17, sa, ra);
        for (int64_t r = 0; r < rows; r++)
            for (int64_t h = 0; h < cols; h += hd)
                for (int64_t i = 0; i < hd / 2; i++) {
                    double theta = pow(10000.0, -2.0 * (double)i / (double)hd);
                    double c = cos((double)r * theta), s = sin((double)r * theta);
                    double a = ra[r * cols + h + i], b = ra[r * cols + h + hd / 2 + i];
                    want[r * cols + h + i] = a * c - b * s;
                    want[r * cols + h + hd / 2 + i] = b * c + a * s;
                }
        dsi_cpu_rope(t, 0, rows, cols, hd, table, sa, sb, scratch);
        CHECK(close_all("rope fwd", t, sb, want, rows * cols, 1e-5));
        /* The backward rotation undoes the forward one (exactly in fp32). */
        dsi_cpu_rope(t, 1, rows, cols, hd, table, sb, sc, scratch);
        CHECK(close_all("rope bwd(fwd(x)) = x", t, sc, ra, rows * cols, 2e-2 * (t != 0) + 1e-5));
    }
}

static void test_embedding(void)
{
    const int64_t tokens = 9, hidden = 8, vocab = 13;
    int32_t ids[9];
    dsi_cpu_fill_index(ids, tokens, vocab, 18);
    ids[3] = ids[5]; /* a repeated token: its gradient rows add */
    static float dtable[13 * 8];
    for (size_t ti = 0; ti < 2; ti++) {
        dsi_stype_t t = types[ti];
        make(t, vocab * hidden, 1.0f, 19, sa, ra);
        for (int64_t i = 0; i < tokens; i++)
            for (int64_t j = 0; j < hidden; j++)
                want[i * hidden + j] = ra[ids[i] * hidden + j];
        dsi_cpu_embedding_fwd(t, tokens, hidden, ids, sa, sb);
        CHECK(close_all("embedding fwd", t, sb, want, tokens * hidden, 0));
        make(t, tokens * hidden, 1.0f, 20, sc, rc);
        for (int64_t i = 0; i < vocab * hidden; i++) {
            dtable[i] = 1.0f;
            want[i] = 1.0;
        }
        for (int64_t i = 0; i < tokens; i++)
            for (int64_t j = 0; j < hidden; j++)
                want[ids[i] * hidden + j] += rc[i * hidden + j];
        dsi_cpu_embedding_bwd(t, tokens, hidden, ids, sc, dtable, scratch);
        CHECK(close_f32("embedding bwd", dtable, want, vocab * hidden, 1e-6, 1e-6));
    }
}

static void test_cross_entropy(void)
{
    const int64_t tokens = 5, vocab = 37;
    int32_t targets[5];
    dsi_cpu_fill_index(targets, tokens, vocab, 21);
    static float softmax[5 * 37], loss[5], dloss[5];
    for (size_t ti = 0; ti < 2; ti++) {
        dsi_stype_t t = types[ti];
        make(t, tokens * vocab, 3.0f, 22, sa, ra);
        double loss_want[5];
        for (int64_t r = 0; r < tokens; r++) {
            double max = -1e300, sum = 0;
            for (int64_t j = 0; j < vocab; j++)
                max = fmax(max, ra[r * vocab + j]);
            for (int64_t j = 0; j < vocab; j++)
                sum += exp(ra[r * vocab + j] - max);
            for (int64_t j = 0; j < vocab; j++)
                want[r * vocab + j] = exp(ra[r * vocab + j] - max) / sum;
            loss_want[r] = log(sum) + max - ra[r * vocab + targets[r]];
        }
        dsi_cpu_cross_entropy_fwd(t, tokens, vocab, sa, targets, softmax, loss, scratch);
        CHECK(close_f32("cross-entropy softmax", softmax, want, tokens * vocab, 1e-7, 1e-5));
        CHECK(close_f32("cross-entropy loss", loss, loss_want, tokens, 1e-5, 1e-5));
        for (int64_t r = 0; r < tokens; r++)
            dloss[r] = 0.2f;
        for (int64_t r = 0; r < tokens; r++)
            for (int64_t j = 0; j < vocab; j++)
                want[r * vocab + j] = (softmax[r * vocab + j] - (j == targets[r])) * 0.2;
        dsi_cpu_cross_entropy_bwd(t, tokens, vocab, softmax, targets, dloss, sb, scratch);
        CHECK(close_all("cross-entropy bwd", t, sb, want, tokens * vocab, 1e-7));
    }
}

static void test_adam(void)
{
    const int64_t n = 50;
    static float w[50], m[50], v[50], g[50];
    static uint16_t low[50];
    double wr[50], mr[50], vr[50];
    for (int64_t i = 0; i < n; i++) {
        w[i] = 0.02f * dsi_rng_normal(23, (uint64_t)i);
        m[i] = 1e-3f * dsi_rng_normal(24, (uint64_t)i);
        v[i] = fabsf(1e-6f * dsi_rng_normal(25, (uint64_t)i));
        g[i] = 1e-3f * dsi_rng_normal(26, (uint64_t)i);
        wr[i] = w[i];
        mr[i] = m[i];
        vr[i] = v[i];
    }
    const dsi_adam_t hp = {1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f};
    for (int step = 1; step <= 3; step++) {
        dsi_cpu_adam(n, step, &hp, w, m, v, g, low, DSI_STYPE_BF16);
        for (int64_t i = 0; i < n; i++) {
            mr[i] = 0.9 * mr[i] + 0.1 * g[i];
            vr[i] = 0.95 * vr[i] + 0.05 * (double)g[i] * g[i];
            double mhat = mr[i] / (1 - pow(0.9, step)), vhat = vr[i] / (1 - pow(0.95, step));
            wr[i] = wr[i] - 1e-3 * (mhat / (sqrt(vhat) + 1e-8) + 0.1 * wr[i]);
        }
    }
    CHECK(close_f32("adam m", m, mr, n, 1e-9, 1e-5));
    CHECK(close_f32("adam v", v, vr, n, 1e-12, 1e-5));
    CHECK(close_f32("adam w", w, wr, n, 1e-7, 1e-4));
    CHECK(dsi_bf16_to_f32(low[7]) == dsi_bf16_to_f32(dsi_bf16_from_f32(w[7])));
}

static void test_pool(void)
{
    const int64_t rows = 3, cols = 11;
    static int8_t argmax[33];
    for (size_t ti = 0; ti < 2; ti++) {
        dsi_stype_t t = types[ti];
        make(t, rows * cols, 1.0f, 27, sa, ra);
        for (int64_t r = 0; r < rows; r++)
            for (int64_t j = 0; j < cols; j++) {
                double best = ra[r * cols + j];
                if (j > 0)
                    best = fmax(best, ra[r * cols + j - 1]);
                if (j + 1 < cols)
                    best = fmax(best, ra[r * cols + j + 1]);
                want[r * cols + j] = best;
            }
        dsi_cpu_pool_fwd(t, rows, cols, sa, sb, argmax, scratch);
        CHECK(close_all("pool fwd", t, sb, want, rows * cols, 0));
        make(t, rows * cols, 1.0f, 28, sc, rc);
        for (int64_t i = 0; i < rows * cols; i++)
            want[i] = 0;
        for (int64_t r = 0; r < rows; r++)
            for (int64_t j = 0; j < cols; j++)
                want[r * cols + j + argmax[r * cols + j]] += rc[r * cols + j];
        dsi_cpu_pool_bwd(t, rows, cols, sc, argmax, sd, scratch);
        CHECK(close_all("pool bwd", t, sd, want, rows * cols, 1e-6));
    }
}

/* Copies of a measured sequence: one whose runs take over 1.5x the fastest
 * copy's is left out, with its per-operator samples; small differences are
 * kept. */
static void test_slow_copies(void)
{
    /* Run r ran copy r % 2: copy 0 at 95 ms, copy 1 at 17.5 ms. */
    double total[7] = {95, 17.5, 96, 17.4, 94, 17.6, 95}, op0[7], op1[7];
    for (int r = 0; r < 7; r++) {
        op0[r] = total[r] - 1.0;
        op1[r] = 1.0;
    }
    double *each[2] = {op0, op1};
    size_t kept = dsi_measure_drop_slow_copies(total, 7, each, 2, 2);
    CHECK_INT(kept, 3);
    CHECK_NEAR(total[0], 17.5, 0.0);
    CHECK_NEAR(total[2], 17.6, 0.0);
    CHECK_NEAR(op0[1], 16.4, 1e-12);
    /* 20% apart: both kept; too few runs to compare: all kept. */
    double close[4] = {1.2, 1.0, 1.2, 1.0};
    CHECK_INT(dsi_measure_drop_slow_copies(close, 4, NULL, 0, 2), 4);
    double few[3] = {9.0, 1.0, 9.0};
    CHECK_INT(dsi_measure_drop_slow_copies(few, 3, NULL, 0, 2), 3);
}

int main(void)
{
    test_slow_copies();
    test_formats();
    test_fill();
    test_gemm();
    test_softmax();
    test_norms();
    test_activations();
    test_glu();
    test_dropout();
    test_rope();
    test_embedding();
    test_cross_entropy();
    test_adam();
    test_pool();
    return check_summary("test_backend_kernels");
}
