/* The cuda backend (one rank, one GPU); exits 77 (skipped) where no GPU is
 * visible.  Every operator's output is compared with the cpu backend's on
 * the same key: both fill their buffers from the same generator, so fp32
 * results agree up to rounding.  Then bf16/fp16 kernels run, a bf16 GEMM
 * and a layer pass are measured, and NCCL moves the right values. */
#include "check.h"

#include "backend/cpu/dsi_cpu_backend.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static ds_event_key_t key_of(ds_op_t op, ds_pass_t pass, ds_dtype_t dtype, int64_t d0, int64_t d1,
                             int64_t d2, int64_t d3, unsigned variant)
{
    ds_event_key_t key;
    memset(&key, 0, sizeof(key));
    key.kind = DS_EVENT_COMPUTE;
    key.op = (uint8_t)op;
    key.pass = (uint8_t)pass;
    key.dtype = (uint8_t)dtype;
    key.variant = (uint8_t)variant;
    key.dims[0] = d0;
    key.dims[1] = d1;
    key.dims[2] = d2;
    key.dims[3] = d3;
    return key;
}

/* The buffer holding the kernel's work (plan order, see dsi_kernel_plan.h). */
static int result_of(const ds_kernel_t *k, const ds_event_key_t *key)
{
    int in = -1, out = -1, bf16 = 0;
    dsi_cpu_kernel_roles(k, &in, &out, &bf16);
    if (out >= 0)
        return out;
    return key->op == DS_OP_EMBEDDING ? 2 : key->op == DS_OP_CROSS_ENTROPY ? 3 : 0;
}

static void compare(ds_backend_t *cpu, ds_backend_t *gpu, const ds_event_key_t *key)
{
    char text[256];
    ds_event_key_format(key, text, sizeof(text));
    ds_kernel_t *a = NULL, *g = NULL;
    CHECK_OK(ds_kernel_prepare(cpu, key, &a));
    CHECK_OK(ds_kernel_prepare(gpu, key, &g));
    if (a == NULL || g == NULL) {
        ds_kernel_destroy(a);
        ds_kernel_destroy(g);
        return;
    }
    CHECK_OK(ds_kernel_run(a));
    CHECK_OK(ds_kernel_run(g));
    CHECK_OK(ds_backend_synchronize(gpu));
    int index = result_of(a, key);
    void *host = NULL;
    size_t bytes = 0;
    CHECK(dsi_cpu_kernel_buffer(a, index, &host, &bytes));
    float *device = malloc(bytes);
    CHECK_OK(dsi_cuda_kernel_read(g, index, device, bytes));
    const float *want = host;
    size_t n = bytes / sizeof(float), bad = 0;
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        double err = fabs((double)device[i] - want[i]);
        if (!(err <= 1e-4 + 2e-3 * fabs(want[i]))) {
            bad++;
            worst = fmax(worst, err);
        }
    }
    CHECK_MSG(bad == 0, "%s: %zu of %zu elements differ (worst by %g)", text, bad, n, worst);
    free(device);
    ds_kernel_destroy(a);
    ds_kernel_destroy(g);
}

static void test_against_cpu(ds_backend_t *cpu, ds_backend_t *gpu)
{
    const ds_dtype_t f = DS_DTYPE_FP32;
    for (int pass = DS_PASS_FORWARD; pass <= DS_PASS_BACKWARD; pass++) {
        ds_pass_t p = (ds_pass_t)pass;
        for (unsigned trans = 0; trans < 4; trans++) {
            ds_event_key_t gemm = key_of(DS_OP_GEMM, p, f, 96, 80, 72, 1, trans);
            compare(cpu, gpu, &gemm);
            ds_event_key_t bgemm = key_of(DS_OP_BATCHED_GEMM, p, f, 64, 48, 32, 3, trans);
            compare(cpu, gpu, &bgemm);
        }
        static const ds_op_t rows_ops[] = {
            DS_OP_SOFTMAX, DS_OP_LAYERNORM, DS_OP_RMSNORM,     DS_OP_GELU, DS_OP_RELU, DS_OP_SWIGLU,
            DS_OP_GEGLU,   DS_OP_DROPOUT,   DS_OP_DROPOUT_ADD, DS_OP_ADD,  DS_OP_ROPE, DS_OP_POOL};
        for (size_t i = 0; i < sizeof(rows_ops) / sizeof(rows_ops[0]); i++) {
            ds_event_key_t key = key_of(rows_ops[i], p, f, 96, 384, 0, 0, 0);
            compare(cpu, gpu, &key);
        }
        ds_event_key_t causal = key_of(DS_OP_SOFTMAX, p, f, 256, 128, 0, 0, 1);
        compare(cpu, gpu, &causal);
        ds_event_key_t embed = key_of(DS_OP_EMBEDDING, p, f, 64, 256, 1000, 0, 0);
        compare(cpu, gpu, &embed);
        ds_event_key_t loss = key_of(DS_OP_CROSS_ENTROPY, p, f, 64, 3000, 0, 0, 0);
        compare(cpu, gpu, &loss);
    }
    ds_event_key_t adam = key_of(DS_OP_OPTIMIZER, DS_PASS_STEP, f, 100000, 0, 0, 0, 0);
    compare(cpu, gpu, &adam);
}

static void test_measure(ds_backend_t *gpu)
{
    ds_measure_config_t cfg;
    ds_measure_config_default(&cfg);
    ds_measurement_t m;
    ds_event_key_t gemm =
        key_of(DS_OP_GEMM, DS_PASS_FORWARD, DS_DTYPE_BF16, 8192, 8192, 8192, 1, DS_GEMM_TRANS_B);
    CHECK_OK(ds_measure_compute(gpu, &gemm, &cfg, &m));
    CHECK(m.cost.median_s > 0.0 && m.cost.p10_s <= m.cost.median_s &&
          m.cost.median_s <= m.cost.p90_s);
    printf("bf16 GEMM 8192^3: median %.3f ms = %.0f TFLOP/s (%lld reps, %s)\n",
           m.cost.median_s * 1e3, 2.0 * 8192.0 * 8192.0 * 8192.0 / m.cost.median_s / 1e12,
           (long long)m.cost.repetitions, ds_stop_reason_name(m.stop));
    /* bf16 and fp16 versions of every row operator run and time. */
    for (int dtype = DS_DTYPE_BF16; dtype <= DS_DTYPE_FP16; dtype++)
        for (int op = DS_OP_SOFTMAX; op <= DS_OP_POOL; op++) {
            if (op == DS_OP_EMBEDDING || op == DS_OP_OPTIMIZER)
                continue;
            ds_event_key_t key =
                key_of((ds_op_t)op, DS_PASS_BACKWARD, (ds_dtype_t)dtype, 4096, 4096, 0, 0, 0);
            cfg.budget_s = 0.05;
            CHECK_OK(ds_measure_compute(gpu, &key, &cfg, &m));
        }
    /* A GPT-style MLP block as a unit. */
    ds_event_key_t keys[4] = {
        key_of(DS_OP_LAYERNORM, DS_PASS_FORWARD, DS_DTYPE_BF16, 8192, 4096, 0, 0, 0),
        key_of(DS_OP_GEMM, DS_PASS_FORWARD, DS_DTYPE_BF16, 8192, 16384, 4096, 1, DS_GEMM_TRANS_B),
        key_of(DS_OP_GELU, DS_PASS_FORWARD, DS_DTYPE_BF16, 8192, 16384, 0, 0, 0),
        key_of(DS_OP_GEMM, DS_PASS_FORWARD, DS_DTYPE_BF16, 8192, 4096, 16384, 1, DS_GEMM_TRANS_B)};
    ds_measurement_t total, per_op[4];
    cfg.budget_s = 0.5;
    CHECK_OK(ds_measure_layer(gpu, keys, 4, &cfg, &total, per_op));
    double sum = 0;
    for (int i = 0; i < 4; i++)
        sum += per_op[i].cost.mean_s;
    CHECK_NEAR(sum, total.cost.mean_s, 1e-3);
    printf("MLP block 8192 tokens x 4096: %.3f ms (ops %.3f %.3f %.3f %.3f ms)\n",
           total.cost.median_s * 1e3, per_op[0].cost.median_s * 1e3, per_op[1].cost.median_s * 1e3,
           per_op[2].cost.median_s * 1e3, per_op[3].cost.median_s * 1e3);
}

static void test_nccl(ds_backend_t *gpu)
{
    ds_comm_t *comm = NULL;
    CHECK_OK(ds_comm_create(gpu, MPI_COMM_WORLD, &comm));
    if (comm == NULL)
        return;
    static const ds_comm_op_t ops[] = {DS_COMM_ALLREDUCE, DS_COMM_ALLGATHER, DS_COMM_REDUCE_SCATTER,
                                       DS_COMM_ALLTOALL,  DS_COMM_BROADCAST, DS_COMM_PS_PUSH,
                                       DS_COMM_PS_PULL};
    for (size_t o = 0; o < sizeof(ops) / sizeof(ops[0]); o++)
        for (int dtype = DS_DTYPE_FP32; dtype <= DS_DTYPE_FP16; dtype++) {
            ds_event_key_t key;
            memset(&key, 0, sizeof(key));
            key.kind = DS_EVENT_COMM;
            key.op = (uint8_t)ops[o];
            key.dtype = (uint8_t)dtype;
            key.dims[0] = 1 << 20;
            int64_t errors = -1;
            CHECK_OK(ds_comm_verify(comm, &key, &errors));
            CHECK_MSG(errors == 0, "%s %s: %lld wrong", ds_event_key_op_name(&key),
                      ds_dtype_name((ds_dtype_t)dtype), (long long)errors);
            ds_measure_config_t cfg;
            ds_measure_config_default(&cfg);
            cfg.budget_s = 0.05;
            ds_comm_measurement_t m;
            CHECK_OK(ds_comm_measure(comm, &key, &cfg, &m));
            CHECK(m.cost.cost.median_s > 0.0);
        }
    /* In situ: the all-reduce right after the GEMM that produces its input. */
    ds_event_key_t gemm =
        key_of(DS_OP_GEMM, DS_PASS_FORWARD, DS_DTYPE_BF16, 4096, 4096, 4096, 1, DS_GEMM_TRANS_B);
    ds_kernel_t *producer = NULL;
    CHECK_OK(ds_kernel_prepare(gpu, &gemm, &producer));
    ds_event_key_t key;
    memset(&key, 0, sizeof(key));
    key.kind = DS_EVENT_COMM;
    key.op = DS_COMM_ALLREDUCE;
    key.dtype = DS_DTYPE_BF16;
    key.dims[0] = 4096LL * 4096 * 2;
    ds_measure_config_t cfg;
    ds_measure_config_default(&cfg);
    ds_comm_measurement_t m;
    CHECK_OK(ds_comm_measure_after(comm, &key, producer, &cfg, &m));
    CHECK(m.after_compute == 1 && m.cost.cost.median_s > 0.0);
    ds_kernel_destroy(producer);
    ds_comm_destroy(comm);
}

/* One byte of e4m3 (bias 7) or e5m2 (bias 15) as a float; NaNs as NaN. */
static double fp8_value(uint8_t bits, int e5m2)
{
    int mantissa_bits = e5m2 ? 2 : 3, bias = e5m2 ? 15 : 7;
    int sign = bits >> 7, exponent = (bits >> mantissa_bits) & (e5m2 ? 31 : 15);
    int mantissa = bits & ((1 << mantissa_bits) - 1);
    double magnitude = exponent == 0
                           ? ldexp((double)mantissa, 1 - bias - mantissa_bits)
                           : ldexp(1.0 + ldexp((double)mantissa, -mantissa_bits), exponent - bias);
    return sign ? -magnitude : magnitude;
}

static double bf16_value(uint16_t bits)
{
    uint32_t word = (uint32_t)bits << 16;
    float value;
    memcpy(&value, &word, sizeof(value));
    return value;
}

/* FP8 GEMMs through cuBLASLt: C[m,n] = A[m,k] B[n,k]^T from the one-byte
 * operands the kernel holds, checked in double at a few places (the output
 * is bf16: 2^-8 relative); the backward's main input is e5m2.  The
 * experts' grouped GEMM (a batched key of 3 groups) group by group.  Then
 * the cast to fp8 with its amax. */
static void test_fp8(ds_backend_t *gpu)
{
    for (int run = 0; run < 4; run++) {
        int pass = run % 2;
        int64_t m = 64, n = 48, k = 80, groups = run < 2 ? 1 : 3;
        ds_event_key_t key = key_of(groups > 1 ? DS_OP_BATCHED_GEMM : DS_OP_GEMM,
                                    pass ? DS_PASS_BACKWARD : DS_PASS_FORWARD, DS_DTYPE_FP8, m, n,
                                    k, groups > 1 ? groups : 0, DS_GEMM_TRANS_B);
        ds_kernel_t *g = NULL;
        CHECK_OK(ds_kernel_prepare(gpu, &key, &g));
        if (g == NULL)
            return;
        CHECK_OK(ds_kernel_run(g));
        CHECK_OK(ds_backend_synchronize(gpu));
        size_t ab = (size_t)(groups * m * k), bb = (size_t)(groups * n * k),
               cb = (size_t)(groups * m * n) * 2;
        uint8_t *a = malloc(ab), *b = malloc(bb);
        uint16_t *c = malloc(cb);
        CHECK_OK(dsi_cuda_kernel_read(g, 0, a, ab));
        CHECK_OK(dsi_cuda_kernel_read(g, 1, b, bb));
        CHECK_OK(dsi_cuda_kernel_read(g, 2, c, cb));
        double worst = 0.0;
        for (int64_t e = 0; e < groups; e++)
            for (int64_t i = 0; i < m; i += 7)
                for (int64_t j = 0; j < n; j += 5) {
                    const uint8_t *ae = a + e * m * k, *be = b + e * n * k;
                    double want = 0.0, scale = 0.0;
                    for (int64_t l = 0; l < k; l++) {
                        double term = fp8_value(ae[i * k + l], pass) * fp8_value(be[j * k + l], 0);
                        want += term;
                        scale += fabs(term);
                    }
                    double error =
                        fabs(bf16_value(c[e * m * n + i * n + j]) - want) / (scale > 0 ? scale : 1);
                    worst = error > worst ? error : worst;
                }
        CHECK_MSG(worst<1e-2, "fp8 %s GEMM (%s): worst relative error %g", groups> 1 ? "grouped"
                                                                                     : "plain",
                  pass ? "bwd" : "fwd", worst);
        free(a);
        free(b);
        free(c);
        ds_kernel_destroy(g);
    }
    ds_event_key_t cast = key_of(DS_OP_FP8_CAST, DS_PASS_FORWARD, DS_DTYPE_BF16, 128, 96, 0, 0, 0);
    ds_kernel_t *kc = NULL;
    CHECK_OK(ds_kernel_prepare(gpu, &cast, &kc));
    if (kc != NULL) {
        CHECK_OK(ds_kernel_run(kc));
        uint16_t *x = malloc(128 * 96 * 2);
        uint8_t *y = malloc(128 * 96);
        float amax = 0.0f;
        CHECK_OK(dsi_cuda_kernel_read(kc, 0, x, 128 * 96 * 2));
        CHECK_OK(dsi_cuda_kernel_read(kc, 1, y, 128 * 96));
        CHECK_OK(dsi_cuda_kernel_read(kc, 2, &amax, sizeof(amax)));
        double want = 0.0;
        for (int i = 0; i < 128 * 96; i++)
            want = fabs(bf16_value(x[i])) > want ? fabs(bf16_value(x[i])) : want;
        CHECK_NEAR(amax, want, 0.0);
        /* The largest input becomes e4m3's largest finite value, 448. */
        double largest = 0.0;
        for (int i = 0; i < 128 * 96; i++)
            largest = fabs(fp8_value(y[i], 0)) > largest ? fabs(fp8_value(y[i], 0)) : largest;
        CHECK_NEAR(largest, 448.0, 0.0);
        free(x);
        free(y);
        ds_kernel_destroy(kc);
    }
    /* Shapes FP8 does not run are refused, naming the rule. */
    ds_event_key_t odd = key_of(DS_OP_GEMM, DS_PASS_FORWARD, DS_DTYPE_FP8, 60, 48, 80, 0, 2);
    ds_kernel_t *ko = NULL;
    CHECK_FAILS(ds_kernel_prepare(gpu, &odd, &ko), DS_ERR_UNSUPPORTED, "multiples of 16");
}

/* The fused attention's forward (cuDNN) against the cpu backend's tiled
 * kernel on the same bf16 inputs: output and log-sum-exp, causal or not,
 * with grouped key/value heads; the backward is refused, naming it. */
static void test_flash_attention(ds_backend_t *cpu, ds_backend_t *gpu)
{
    const ds_attention_shape_t shape = {2, 4, 2, 128, 128, 64};
    const size_t n = 2 * 4 * 128 * 64, rows = 2 * 4 * 128;
    for (unsigned causal = 0; causal < 2; causal++) {
        ds_event_key_t key =
            key_of(DS_OP_FLASH_ATTENTION, DS_PASS_FORWARD, DS_DTYPE_BF16, 0, 0, 0, 0, causal);
        ds_attention_shape_set(&key, &shape);
        ds_kernel_t *a = NULL, *g = NULL;
        CHECK_OK(ds_kernel_prepare(cpu, &key, &a));
        CHECK_OK(ds_kernel_prepare(gpu, &key, &g));
        if (a != NULL && g != NULL) {
            CHECK_OK(ds_kernel_run(a));
            CHECK_OK(ds_kernel_run(g));
            CHECK_OK(ds_backend_synchronize(gpu));
            int in = -1, out = -1, bf16 = 0;
            dsi_cpu_kernel_roles(a, &in, &out, &bf16);
            void *o_cpu = NULL, *lse_cpu = NULL;
            size_t bytes = 0;
            CHECK(dsi_cpu_kernel_buffer(a, 3, &o_cpu, &bytes));
            CHECK(dsi_cpu_kernel_buffer(a, 4, &lse_cpu, &bytes));
            uint16_t *o_gpu = malloc(n * 2);
            float *lse_gpu = malloc(rows * sizeof(float));
            CHECK_OK(dsi_cuda_kernel_read(g, 3, o_gpu, n * 2));
            CHECK_OK(dsi_cuda_kernel_read(g, 4, lse_gpu, rows * sizeof(float)));
            double worst_o = 0.0, worst_lse = 0.0;
            for (size_t i = 0; i < n; i++) {
                double want =
                    bf16 ? bf16_value(((const uint16_t *)o_cpu)[i]) : ((const float *)o_cpu)[i];
                worst_o = fmax(worst_o, fabs(bf16_value(o_gpu[i]) - want));
            }
            for (size_t i = 0; i < rows; i++)
                worst_lse = fmax(worst_lse, fabs(lse_gpu[i] - ((const float *)lse_cpu)[i]));
            /* Outputs are averages of N(0, 1) values: bf16 rounding of inputs,
             * scores and outputs stays within a few hundredths. */
            CHECK_MSG(worst_o < 3e-2 && worst_lse < 2e-2,
                      "flash attention (causal %u): worst |o| error %g, |lse| error %g", causal,
                      worst_o, worst_lse);
            free(o_gpu);
            free(lse_gpu);
        }
        ds_kernel_destroy(a);
        ds_kernel_destroy(g);
    }
    ds_event_key_t bwd =
        key_of(DS_OP_FLASH_ATTENTION, DS_PASS_BACKWARD, DS_DTYPE_BF16, 0, 0, 0, 0, 1);
    ds_attention_shape_set(&bwd, &shape);
    ds_kernel_t *kb = NULL;
    CHECK_FAILS(ds_kernel_prepare(gpu, &bwd, &kb), DS_ERR_UNSUPPORTED, "backward");
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    if (!ds_backend_cuda_available()) {
        printf("test_backend_cuda: no GPU visible, skipped\n");
        MPI_Finalize();
        return 77;
    }
    ds_backend_t *gpu = NULL, *cpu = NULL;
    CHECK_OK(ds_backend_open(DS_BACKEND_CUDA, MPI_COMM_WORLD, &gpu));
    CHECK_OK(ds_backend_open(DS_BACKEND_CPU, MPI_COMM_WORLD, &cpu));
    if (gpu != NULL && cpu != NULL) {
        const char *fp = ds_backend_fingerprint(gpu);
        printf("fingerprint: %s\n", fp);
        CHECK(strncmp(fp, "cuda: ", 6) == 0 && strstr(fp, "cublas") && strstr(fp, "nccl"));
        ds_backend_t *chosen = NULL;
        CHECK_OK(ds_backend_open(DS_BACKEND_AUTO, MPI_COMM_WORLD, &chosen));
        CHECK(chosen != NULL && ds_backend_kind(chosen) == DS_BACKEND_CUDA);
        ds_backend_close(chosen);
        test_against_cpu(cpu, gpu);
        test_measure(gpu);
        test_nccl(gpu);
        test_fp8(gpu);
        test_flash_attention(cpu, gpu);
    }
    ds_backend_close(cpu);
    ds_backend_close(gpu);
    int code = check_summary("test_backend_cuda");
    MPI_Finalize();
    return code;
}
