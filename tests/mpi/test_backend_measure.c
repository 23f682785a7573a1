/* The backend interface on the cpu backend (one rank): opening, the
 * fingerprint, kernel preparation and its errors, prepared kernels that
 * compute the right thing on realistic values, the statistics, and the
 * measurement loop's stop rules, single kernels and layer passes, and
 * subnormals flushed to zero while the backend is open. */
#include "check.h"

#include "backend/cpu/dsi_cpu_backend.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static ds_event_key_t compute_key(ds_op_t op, ds_pass_t pass, int64_t d0, int64_t d1, int64_t d2,
                                  int64_t d3, unsigned variant)
{
    ds_event_key_t key;
    memset(&key, 0, sizeof(key));
    key.kind = DS_EVENT_COMPUTE;
    key.op = (uint8_t)op;
    key.pass = (uint8_t)pass;
    key.dtype = DS_DTYPE_FP32;
    key.variant = (uint8_t)variant;
    key.dims[0] = d0;
    key.dims[1] = d1;
    key.dims[2] = d2;
    key.dims[3] = d3;
    return key;
}

static void check_stats(const ds_measurement_t *m, const char *what)
{
    const ds_cost_t *c = &m->cost;
    CHECK_MSG(m->min_s <= c->p10_s && c->p10_s <= c->median_s && c->median_s <= c->p90_s &&
                  c->p90_s <= m->max_s,
              "%s: min %g p10 %g median %g p90 %g max %g", what, m->min_s, c->p10_s, c->median_s,
              c->p90_s, m->max_s);
    CHECK_MSG(c->mean_s >= m->min_s && c->mean_s <= m->max_s, "%s: mean %g", what, c->mean_s);
    CHECK_MSG(c->median_s > 0.0, "%s: median %g", what, c->median_s);
    CHECK_INT(c->provenance, DS_PROV_MEASURED);
    int64_t in_hist = 0;
    for (int i = 0; i < DS_HIST_BINS; i++)
        in_hist += m->hist[i];
    CHECK_INT(in_hist, c->repetitions);
    CHECK(m->hist_lo_s == m->min_s && m->hist_hi_s == m->max_s);
}

static void test_kinds(void)
{
    ds_backend_kind_t kind = DS_BACKEND_AUTO;
    CHECK_OK(ds_backend_kind_parse("cuda", &kind));
    CHECK_INT(kind, DS_BACKEND_CUDA);
    CHECK_OK(ds_backend_kind_parse("cpu", &kind));
    CHECK_INT(kind, DS_BACKEND_CPU);
    CHECK_FAILS(ds_backend_kind_parse("gpu", &kind), DS_ERR_INVALID_ARG, "auto");
    CHECK(strcmp(ds_backend_kind_name(DS_BACKEND_AUTO), "auto") == 0);
    if (!ds_backend_cuda_available()) {
        ds_backend_t *b = NULL;
        CHECK_FAILS(ds_backend_open(DS_BACKEND_CUDA, MPI_COMM_WORLD, &b), DS_ERR_NO_DEVICE,
                    "no GPU");
        CHECK(b == NULL);
        /* auto falls back to the cpu. */
        CHECK_OK(ds_backend_open(DS_BACKEND_AUTO, MPI_COMM_WORLD, &b));
        CHECK(b != NULL && ds_backend_kind(b) == DS_BACKEND_CPU);
        ds_backend_close(b);
    }
    ds_backend_close(NULL);
}

static void test_statistics(void)
{
    double samples[10] = {10, 2, 3, 4, 5, 6, 7, 8, 9, 1};
    ds_measurement_t m;
    CHECK_OK(ds_measurement_from_samples(samples, 10, &m));
    CHECK_NEAR(m.cost.mean_s, 5.5, 1e-12);
    CHECK_NEAR(m.cost.median_s, 5.5, 1e-12);
    CHECK_NEAR(m.cost.p10_s, 1.9, 1e-12);
    CHECK_NEAR(m.cost.p90_s, 9.1, 1e-12);
    CHECK_INT(m.cost.repetitions, 10);
    /* Order statistics 1 and 10 bound the median's 95% CI for n = 10. */
    CHECK_NEAR(m.rel_ci, 9.0 / 11.0, 1e-12);
    check_stats(&m, "1..10");
    CHECK_INT(m.hist[0], 1);
    CHECK_INT(m.hist[DS_HIST_BINS - 1], 1);
    /* With many equal samples the interval closes. */
    double flat[100];
    for (int i = 0; i < 100; i++)
        flat[i] = i == 0 ? 2.0 : 1.0;
    CHECK_OK(ds_measurement_from_samples(flat, 100, &m));
    CHECK(m.rel_ci == 0.0 && m.cost.median_s == 1.0 && m.max_s == 2.0);
    samples[3] = -1.0;
    CHECK_FAILS(ds_measurement_from_samples(samples, 10, &m), DS_ERR_INVALID_ARG, "sample 3");
    CHECK_FAILS(ds_measurement_from_samples(samples, 0, &m), DS_ERR_INVALID_ARG, "no samples");
}

static void test_prepare_errors(ds_backend_t *b)
{
    ds_kernel_t *k = NULL;
    ds_event_key_t key = compute_key(DS_OP_GEMM, DS_PASS_FORWARD, 8, 8, 8, 1, 0);
    key.kind = DS_EVENT_COMM;
    CHECK_FAILS(ds_kernel_prepare(b, &key, &k), DS_ERR_INVALID_ARG, "communication event");
    key = compute_key(DS_OP_GEMM, DS_PASS_FORWARD, 8, 0, 8, 1, 0);
    CHECK_FAILS(ds_kernel_prepare(b, &key, &k), DS_ERR_INVALID_ARG, "positive");
    key = compute_key(DS_OP_FLASH_ATTENTION, DS_PASS_FORWARD, 8, 8, 8, 1, 0); /* no kv-heads */
    CHECK_FAILS(ds_kernel_prepare(b, &key, &k), DS_ERR_INVALID_ARG, "kv-heads");
    /* A well-formed one runs both passes (the backward's saved output and
     * log-sum-exp are made by the forward at prepare). */
    ds_attention_shape_t shape = {1, 4, 2, 96, 96, 32};
    for (int pass = 0; pass < 2; pass++) {
        key = compute_key(DS_OP_FLASH_ATTENTION, pass ? DS_PASS_BACKWARD : DS_PASS_FORWARD, 1, 1, 1,
                          1, 1);
        ds_attention_shape_set(&key, &shape);
        CHECK_OK(ds_kernel_prepare(b, &key, &k));
        CHECK_OK(ds_kernel_run(k));
        ds_kernel_destroy(k);
        k = NULL;
    }
    /* FP8 training's keys: an fp8 GEMM runs (at bf16 or fp32 here), the
     * cast to fp8 runs; an fp8 key of another operator is refused. */
    key = compute_key(DS_OP_GEMM, DS_PASS_FORWARD, 64, 64, 64, 1, DS_GEMM_TRANS_B);
    key.dtype = DS_DTYPE_FP8;
    CHECK_OK(ds_kernel_prepare(b, &key, &k));
    CHECK_OK(ds_kernel_run(k));
    ds_kernel_destroy(k);
    /* the experts' grouped GEMM under fp8: a batched key of 4 groups */
    key = compute_key(DS_OP_BATCHED_GEMM, DS_PASS_BACKWARD, 48, 64, 32, 4, DS_GEMM_TRANS_A);
    key.dtype = DS_DTYPE_FP8;
    CHECK_OK(ds_kernel_prepare(b, &key, &k));
    CHECK_OK(ds_kernel_run(k));
    ds_kernel_destroy(k);
    key = compute_key(DS_OP_FP8_CAST, DS_PASS_BACKWARD, 64, 96, 0, 0, 0);
    CHECK_OK(ds_kernel_prepare(b, &key, &k));
    CHECK_OK(ds_kernel_run(k));
    ds_kernel_destroy(k);
    /* The MoE load-balancing loss, both passes (rows x experts). */
    for (int pass = 0; pass < 2; pass++) {
        key = compute_key(DS_OP_MOE_AUX_LOSS, pass ? DS_PASS_BACKWARD : DS_PASS_FORWARD, 256, 8, 0,
                          0, 0);
        CHECK_OK(ds_kernel_prepare(b, &key, &k));
        CHECK_OK(ds_kernel_run(k));
        ds_kernel_destroy(k);
        k = NULL;
    }
    key = compute_key(DS_OP_MOE_AUX_LOSS, DS_PASS_FORWARD, 256, 0, 0, 0, 0);
    CHECK_FAILS(ds_kernel_prepare(b, &key, &k), DS_ERR_INVALID_ARG, "experts");
    key = compute_key(DS_OP_SOFTMAX, DS_PASS_FORWARD, 8, 8, 0, 0, 0);
    key.dtype = DS_DTYPE_FP8;
    CHECK_FAILS(ds_kernel_prepare(b, &key, &k), DS_ERR_UNSUPPORTED, "fp8 softmax");
    k = NULL;
    key = compute_key(DS_OP_SOFTMAX, DS_PASS_FORWARD, 1LL << 20, 1LL << 20, 0, 0, 0);
    CHECK_FAILS(ds_kernel_prepare(b, &key, &k), DS_ERR_NO_MEMORY, "GiB");
    key = compute_key(DS_OP_EMBEDDING, DS_PASS_FORWARD, 16, 8, 0, 0, 0);
    CHECK_FAILS(ds_kernel_prepare(b, &key, &k), DS_ERR_INVALID_ARG, "vocabulary");
    CHECK(k == NULL);
    size_t bytes = 0;
    key = compute_key(DS_OP_LAYERNORM, DS_PASS_BACKWARD, 32, 64, 0, 0, 0);
    CHECK_OK(ds_kernel_estimate_bytes(b, &key, &bytes));
    CHECK_OK(ds_kernel_prepare(b, &key, &k));
    CHECK_INT(ds_kernel_bytes(k), bytes);
    /* dy x dx of 32x64 fp32, gamma, dgamma, dbeta, mean, rstd, scratch */
    CHECK_INT(bytes, 4 * (3 * 32 * 64 + 3 * 64 + 2 * 32 + 4 * 64));
    ds_kernel_destroy(k);
    ds_kernel_destroy(NULL);
}

/* Spread of a buffer of floats. */
static double stddev_of(const float *v, size_t n)
{
    double s = 0, q = 0;
    for (size_t i = 0; i < n; i++) {
        s += v[i];
        q += (double)v[i] * v[i];
    }
    return sqrt(q / (double)n - (s / (double)n) * (s / (double)n));
}

static void test_prepared_kernels(ds_backend_t *b)
{
    /* A forward GEMM y = x W^T: realistic inputs, the right product. */
    const int64_t m = 33, n = 17, k = 65;
    ds_event_key_t key = compute_key(DS_OP_GEMM, DS_PASS_FORWARD, m, n, k, 1, DS_GEMM_TRANS_B);
    ds_kernel_t *kernel = NULL;
    CHECK_OK(ds_kernel_prepare(b, &key, &kernel));
    if (kernel == NULL)
        return;
    int in = -1, out = -1, bf16 = 0;
    dsi_cpu_kernel_roles(kernel, &in, &out, &bf16);
    CHECK_INT(in, 0);
    CHECK_INT(out, 2);
    CHECK_INT(bf16, 0);
    void *pa = NULL, *pb = NULL, *pc = NULL;
    size_t na = 0, nb = 0, nc = 0;
    CHECK(dsi_cpu_kernel_buffer(kernel, 0, &pa, &na) &&
          dsi_cpu_kernel_buffer(kernel, 1, &pb, &nb) && dsi_cpu_kernel_buffer(kernel, 2, &pc, &nc));
    CHECK_INT(na, 4 * m * k);
    CHECK_INT(nb, 4 * k * n);
    CHECK_INT(nc, 4 * m * n);
    CHECK(!dsi_cpu_kernel_buffer(kernel, 3, &pa, &na));
    /* Activations ~ N(0, 1), weights ~ N(0, 0.02^2): not zeros. */
    CHECK_NEAR(stddev_of(pa, (size_t)(m * k)), 1.0, 0.1);
    CHECK_NEAR(stddev_of(pb, (size_t)(k * n)), 0.02, 0.1);
    CHECK_OK(ds_kernel_run(kernel));
    CHECK_OK(ds_backend_synchronize(b));
    const float *A = pa, *W = pb, *C = pc;
    int bad = 0;
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            double s = 0;
            for (int64_t l = 0; l < k; l++)
                s += (double)A[i * k + l] * W[j * k + l];
            bad += fabs(C[i * n + j] - s) > 1e-5 + 1e-5 * fabs(s);
        }
    CHECK_INT(bad, 0);
    ds_kernel_destroy(kernel);

    /* A causal softmax backward: its saved probabilities are real softmax rows. */
    key = compute_key(DS_OP_SOFTMAX, DS_PASS_BACKWARD, 64, 16, 0, 0, 1);
    CHECK_OK(ds_kernel_prepare(b, &key, &kernel));
    void *py = NULL;
    size_t ny = 0;
    CHECK(dsi_cpu_kernel_buffer(kernel, 1, &py, &ny));
    const float *y = py;
    for (int r = 0; r < 64; r++) {
        double sum = 0;
        for (int j = 0; j < 16; j++)
            sum += y[r * 16 + j];
        CHECK_NEAR(sum, 1.0, 1e-5);
        CHECK(r % 16 == 15 || y[r * 16 + 15] == 0.0f); /* masked above the diagonal */
    }
    CHECK_OK(ds_kernel_run(kernel));
    ds_kernel_destroy(kernel);
}

static void test_measure(ds_backend_t *b)
{
    ds_event_key_t key = compute_key(DS_OP_GEMM, DS_PASS_FORWARD, 64, 64, 64, 1, 0);
    ds_measure_config_t cfg;
    ds_measure_config_default(&cfg);
    CHECK(cfg.min_reps >= 1 && cfg.max_reps >= cfg.min_reps && cfg.budget_s > 0);
    ds_measurement_t m;

    /* Never converges: the budget stops it, after at least min_reps. */
    cfg.warmup = 1;
    cfg.warmup_s = 0.0;
    cfg.min_reps = 5;
    cfg.max_reps = 1000000;
    cfg.target_rel_ci = 0.0;
    cfg.budget_s = 0.1;
    CHECK_OK(ds_measure_compute(b, &key, &cfg, &m));
    CHECK_INT(m.stop, DS_STOP_BUDGET);
    CHECK(m.cost.repetitions >= 5);
    CHECK_MSG(m.wall_s >= 0.1 && m.wall_s < 0.5, "wall %g", m.wall_s);
    check_stats(&m, "budget");

    /* A loose target converges at the minimum. */
    cfg.target_rel_ci = 100.0;
    CHECK_OK(ds_measure_compute(b, &key, &cfg, &m));
    CHECK_INT(m.stop, DS_STOP_CONVERGED);
    CHECK_INT(m.cost.repetitions, 5);
    CHECK(m.rel_ci < 100.0);

    /* The repetition cap. */
    cfg.target_rel_ci = 0.0;
    cfg.min_reps = 3;
    cfg.max_reps = 7;
    cfg.budget_s = 100.0;
    CHECK_OK(ds_measure_compute(b, &key, &cfg, &m));
    CHECK_INT(m.stop, DS_STOP_MAX_REPS);
    CHECK_INT(m.cost.repetitions, 7);

    /* A zero budget still does the minimum. */
    cfg.budget_s = 0.0;
    CHECK_OK(ds_measure_compute(b, &key, &cfg, &m));
    CHECK_INT(m.cost.repetitions, 3);
    CHECK_INT(m.stop, DS_STOP_BUDGET);

    /* A bigger GEMM takes longer (8x the work). */
    cfg.min_reps = 5;
    cfg.max_reps = 50;
    cfg.target_rel_ci = 0.05;
    cfg.budget_s = 0.5;
    ds_measurement_t big;
    ds_event_key_t big_key = compute_key(DS_OP_GEMM, DS_PASS_FORWARD, 256, 256, 256, 1, 0);
    key = compute_key(DS_OP_GEMM, DS_PASS_FORWARD, 128, 128, 128, 1, 0);
    CHECK_OK(ds_measure_compute(b, &key, &cfg, &m));
    CHECK_OK(ds_measure_compute(b, &big_key, &cfg, &big));
    CHECK_MSG(big.cost.median_s > 3.0 * m.cost.median_s, "256^3 %g s vs 128^3 %g s",
              big.cost.median_s, m.cost.median_s);

    cfg.min_reps = 0;
    CHECK_FAILS(ds_measure_compute(b, &key, &cfg, &m), DS_ERR_INVALID_ARG, "min_reps");
    cfg.min_reps = 5;
    cfg.budget_s = -1.0;
    CHECK_FAILS(ds_measure_compute(b, &key, &cfg, &m), DS_ERR_INVALID_ARG, "negative");

    /* Calibration: a fixed GEMM. */
    ds_measure_config_default(&cfg);
    cfg.budget_s = 0.3;
    CHECK_OK(ds_backend_calibrate(b, &cfg, &m));
    CHECK(m.cost.median_s > 0.0 && m.cost.repetitions >= cfg.min_reps);
}

static void test_layer(ds_backend_t *b)
{
    /* A small MLP block forward, with a TP all-reduce inside. */
    const int64_t tokens = 64, h = 96, ffn = 384;
    ds_event_key_t keys[6];
    keys[0] = compute_key(DS_OP_LAYERNORM, DS_PASS_FORWARD, tokens, h, 0, 0, 0);
    keys[1] = compute_key(DS_OP_GEMM, DS_PASS_FORWARD, tokens, ffn, h, 1, DS_GEMM_TRANS_B);
    keys[2] = compute_key(DS_OP_GELU, DS_PASS_FORWARD, tokens, ffn, 0, 0, 0);
    keys[3] = compute_key(DS_OP_GEMM, DS_PASS_FORWARD, tokens, h, ffn, 1, DS_GEMM_TRANS_B);
    memset(&keys[4], 0, sizeof(keys[4]));
    keys[4].kind = DS_EVENT_COMM;
    keys[4].op = DS_COMM_ALLREDUCE;
    keys[4].dims[0] = tokens * h * 4;
    keys[5] = compute_key(DS_OP_DROPOUT_ADD, DS_PASS_FORWARD, tokens, h, 0, 0, 0);
    ds_measure_config_t cfg;
    ds_measure_config_default(&cfg);
    cfg.budget_s = 0.3;
    cfg.target_rel_ci = 0.01;
    ds_measurement_t total, per_op[6];
    CHECK_OK(ds_measure_layer(b, keys, 6, &cfg, &total, per_op));
    check_stats(&total, "layer total");
    CHECK(total.cost.repetitions >= cfg.min_reps);
    CHECK_INT(per_op[4].cost.repetitions, 0); /* communication: not run here */
    double sum = 0;
    for (int i = 0; i < 6; i++) {
        if (i != 4) {
            check_stats(&per_op[i], "layer op");
            CHECK_INT(per_op[i].cost.repetitions, total.cost.repetitions);
        }
        sum += per_op[i].cost.mean_s;
    }
    /* Timestamps between operators: the operators' times add up to the pass
     * (but for the empty slot of the communication event). */
    CHECK_NEAR(sum, total.cost.mean_s, 1e-3);

    CHECK_FAILS(ds_measure_layer(b, keys + 4, 1, &cfg, &total, NULL), DS_ERR_INVALID_ARG,
                "no compute");
    CHECK_FAILS(ds_measure_layer(b, keys, 0, &cfg, &total, NULL), DS_ERR_INVALID_ARG,
                "no operators");
}

/* A product whose exact value is subnormal (1e-40). */
static float subnormal_product(void)
{
    volatile float tiny = 1e-30f, scale = 1e-10f;
    return tiny * scale;
}

/* Subnormals are flushed while the backend is open (kernel times must not
 * depend on how small the values became), and not after. */
static void test_subnormals_flushed(void)
{
#if defined(__SSE2__) || defined(__aarch64__)
    CHECK(subnormal_product() != 0.0f);
    ds_backend_t *b = NULL;
    CHECK_OK(ds_backend_open(DS_BACKEND_CPU, MPI_COMM_WORLD, &b));
    CHECK(subnormal_product() == 0.0f);
    ds_backend_close(b);
    CHECK(subnormal_product() != 0.0f);
#endif
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    test_kinds();
    test_statistics();
    test_subnormals_flushed();
    ds_backend_t *b = NULL;
    CHECK_OK(ds_backend_open(DS_BACKEND_CPU, MPI_COMM_WORLD, &b));
    if (b != NULL) {
        CHECK_INT(ds_backend_kind(b), DS_BACKEND_CPU);
        CHECK(strlen(ds_backend_device_name(b)) > 0);
        const char *fp = ds_backend_fingerprint(b);
        CHECK(strstr(fp, "cpu: ") == fp && strstr(fp, "OpenBLAS") != NULL &&
              strstr(fp, "bf16: ") != NULL && strstr(fp, "mpi: ") != NULL);
        CHECK(strstr(ds_backend_placement(b), "cpu") != NULL);
        printf("fingerprint: %s\nplacement: %s\n", fp, ds_backend_placement(b));
        test_prepare_errors(b);
        test_prepared_kernels(b);
        test_measure(b);
        test_layer(b);
        ds_backend_close(b);
    }
    int code = check_summary("test_backend_measure");
    MPI_Finalize();
    return code;
}
