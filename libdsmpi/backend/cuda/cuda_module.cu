// The CUDA backend module: device context, timing with CUDA events, and
// compute kernels (cuBLAS GEMMs with bf16/fp16 on tensor cores, the other
// operators in cuda_kernels.cu) on the buffers the shared plan describes
// (backend/dsi_kernel_plan.h).  Communication is in cuda_comm.cu.
#include "dsi_cuda_impl.h"

#include <cuda_bf16.h>
#include <nccl.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

// ---- errors -------------------------------------------------------------------------------------

static thread_local char last_message[512];

int dsc_fail(int status, const char *fmt, ...)
{
    va_list args;
    va_start(args, fmt);
    vsnprintf(last_message, sizeof(last_message), fmt, args);
    va_end(args);
    return status;
}

const char *dsc_last_error(void)
{
    return last_message;
}

// ---- devices ------------------------------------------------------------------------------------

static int device_count(void)
{
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
        (void)cudaGetLastError(); // no driver or no device: clear the sticky error
        return 0;
    }
    return count;
}

static void print_info(FILE *out)
{
    int runtime = 0, driver = 0, nccl = 0;
    int cublas_major = 0, cublas_minor = 0, cublas_patch = 0;
    cudaRuntimeGetVersion(&runtime);
    cudaDriverGetVersion(&driver);
    cublasGetProperty(MAJOR_VERSION, &cublas_major);
    cublasGetProperty(MINOR_VERSION, &cublas_minor);
    cublasGetProperty(PATCH_LEVEL, &cublas_patch);
    ncclGetVersion(&nccl);
    fprintf(out, "cuda-runtime %d.%d\n", runtime / 1000, (runtime % 1000) / 10);
    if (driver > 0)
        fprintf(out, "cuda-driver  %d.%d\n", driver / 1000, (driver % 1000) / 10);
    else
        fprintf(out, "cuda-driver  none\n");
    fprintf(out, "cublas       %d.%d.%d\n", cublas_major, cublas_minor, cublas_patch);
    fprintf(out, "nccl         %d.%d.%d\n", nccl / 10000, (nccl % 10000) / 100, nccl % 100);
    int count = device_count();
    fprintf(out, "cuda-devices %d\n", count);
    for (int i = 0; i < count; i++) {
        cudaDeviceProp prop;
        if (cudaGetDeviceProperties(&prop, i) == cudaSuccess)
            fprintf(out, "  device %d: %s, %.1f GiB, sm_%d%d, %d SMs\n", i, prop.name,
                    (double)prop.totalGlobalMem / (1024.0 * 1024.0 * 1024.0), prop.major,
                    prop.minor, prop.multiProcessorCount);
    }
}

static void close_ctx(void *handle)
{
    dsc_ctx *ctx = static_cast<dsc_ctx *>(handle);
    if (ctx == nullptr)
        return;
    cudaSetDevice(ctx->device);
    dsc_queues_close(ctx);
    for (size_t i = 0; i < ctx->num_stamps; i++)
        cudaEventDestroy(ctx->stamps[i]);
    free(ctx->stamps);
    if (ctx->cublas != nullptr)
        cublasDestroy(ctx->cublas);
    if (ctx->stream != nullptr)
        cudaStreamDestroy(ctx->stream);
    free(ctx);
}

static int open_ctx(int device, void **ctx_p)
{
    dsc_ctx *ctx = static_cast<dsc_ctx *>(calloc(1, sizeof(dsc_ctx)));
    if (ctx == nullptr)
        return dsc_fail(DS_ERR_NO_MEMORY, "out of memory for a CUDA context");
    ctx->device = device;
    int status = DS_OK;
    cudaDeviceProp prop;
    cublasStatus_t cs;
    cudaError_t e = cudaSetDevice(device);
    if (e == cudaSuccess)
        e = cudaStreamCreateWithFlags(&ctx->stream, cudaStreamNonBlocking);
    if (e == cudaSuccess)
        e = cudaGetDeviceProperties(&prop, device);
    if (e != cudaSuccess) {
        status = dsc_fail(DS_ERR_CUDA, "opening CUDA device %d: %s", device, cudaGetErrorString(e));
        goto fail;
    }
    snprintf(ctx->name, sizeof(ctx->name), "%s", prop.name);
    status = dsc_queues_open(ctx);
    if (status != DS_OK)
        goto fail;
    cs = cublasCreate(&ctx->cublas);
    if (cs == CUBLAS_STATUS_SUCCESS)
        cs = cublasSetStream(ctx->cublas, ctx->stream);
    if (cs != CUBLAS_STATUS_SUCCESS) {
        status =
            dsc_fail(DS_ERR_CUBLAS, "cuBLAS on device %d: %s", device, cublasGetStatusString(cs));
        goto fail;
    }
    *ctx_p = ctx;
    return DS_OK;
fail:
    close_ctx(ctx);
    return status;
}

static void describe(void *handle, char *name, size_t name_size, char *fingerprint,
                     size_t fingerprint_size)
{
    dsc_ctx *ctx = static_cast<dsc_ctx *>(handle);
    int runtime = 0, driver = 0, nccl = 0, clock_khz = 0, memory_khz = 0;
    int cublas_major = 0, cublas_minor = 0, cublas_patch = 0;
    cudaRuntimeGetVersion(&runtime);
    cudaDriverGetVersion(&driver);
    cublasGetProperty(MAJOR_VERSION, &cublas_major);
    cublasGetProperty(MINOR_VERSION, &cublas_minor);
    cublasGetProperty(PATCH_LEVEL, &cublas_patch);
    ncclGetVersion(&nccl);
    cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, ctx->device);
    cudaDeviceGetAttribute(&memory_khz, cudaDevAttrMemoryClockRate, ctx->device);
    cudaDeviceProp prop;
    memset(&prop, 0, sizeof(prop));
    cudaGetDeviceProperties(&prop, ctx->device);
    snprintf(name, name_size, "%s", ctx->name);
    snprintf(fingerprint, fingerprint_size,
             "cuda: %s, sm_%d%d, %d SMs, %.0f GiB | driver %d.%d, runtime %d.%d | cublas %d.%d.%d "
             "(bf16/fp16 GemmEx on tensor cores, fp32 without TF32) | nccl %d.%d.%d | clock: "
             "peak %d MHz sm, %d MHz memory (application clocks not read)",
             ctx->name, prop.major, prop.minor, prop.multiProcessorCount,
             (double)prop.totalGlobalMem / 1073741824.0, driver / 1000, (driver % 1000) / 10,
             runtime / 1000, (runtime % 1000) / 10, cublas_major, cublas_minor, cublas_patch,
             nccl / 10000, (nccl % 10000) / 100, nccl % 100, clock_khz / 1000, memory_khz / 1000);
}

// ---- timing -------------------------------------------------------------------------------------

static int stamps_reserve(void *handle, size_t count)
{
    dsc_ctx *ctx = static_cast<dsc_ctx *>(handle);
    if (count <= ctx->num_stamps)
        return DS_OK;
    cudaEvent_t *grown =
        static_cast<cudaEvent_t *>(realloc(ctx->stamps, count * sizeof(cudaEvent_t)));
    if (grown == nullptr)
        return dsc_fail(DS_ERR_NO_MEMORY, "out of memory for %zu CUDA events", count);
    ctx->stamps = grown;
    while (ctx->num_stamps < count) {
        DSC_CUDA_TRY(cudaEventCreate(&ctx->stamps[ctx->num_stamps]));
        ctx->num_stamps++;
    }
    return DS_OK;
}

static int stamp(void *handle, size_t slot)
{
    dsc_ctx *ctx = static_cast<dsc_ctx *>(handle);
    DSC_CUDA_TRY(cudaEventRecord(ctx->stamps[slot], ctx->stream));
    return DS_OK;
}

static int synchronize(void *handle)
{
    dsc_ctx *ctx = static_cast<dsc_ctx *>(handle);
    DSC_CUDA_TRY(cudaStreamSynchronize(ctx->stream));
    return DS_OK;
}

static int elapsed(void *handle, size_t from, size_t to, double *seconds_p)
{
    dsc_ctx *ctx = static_cast<dsc_ctx *>(handle);
    float ms = 0.0f;
    DSC_CUDA_TRY(cudaEventElapsedTime(&ms, ctx->stamps[from], ctx->stamps[to]));
    *seconds_p = 1e-3 * (double)ms;
    return DS_OK;
}

// ---- kernels ------------------------------------------------------------------------------------

struct dsc_kernel {
    dsc_ctx *ctx;
    ds_event_key_t key;
    dsi_kernel_plan_t plan;
    dsc_type type;
    void *buf[DSI_PLAN_MAX_BUFFERS];
    size_t bytes[DSI_PLAN_MAX_BUFFERS];
    const void *in;
    size_t total_bytes;
    int64_t runs;
    void *fp8_gemm;  // an fp8 GEMM's cuBLASLt state (cuda_fp8.cu)
    void *attention; // a fused attention's cuDNN plan (cuda_attention.cu)
};

// Fused attention (cuda_attention.cu).
int dsc_attention_prepare(const ds_event_key_t *key, cudaStream_t stream, void **attention_p);
int dsc_attention_run(void *attention, const void *q, const void *k, const void *v, void *o,
                      void *lse);
void dsc_attention_release(void *attention);

// FP8 (cuda_fp8.cu).
int dsc_fp8_gemm_check(const ds_event_key_t *key);
int dsc_fp8_gemm_prepare(const ds_event_key_t *key, void **gemm_p);
int dsc_fp8_gemm_run(void *gemm, cudaStream_t s, const void *a, const void *b, void *d);
void dsc_fp8_gemm_release(void *gemm);
int dsc_fill_fp8(cudaStream_t s, void *p, int64_t count, float scale, uint64_t seed, int e5m2);
int dsc_fp8_cast(cudaStream_t s, dsc_type t, int64_t n, const void *x, uint8_t *y, float *amax);

// An fp8 GEMM (or the experts' grouped one, a batched key): one-byte
// operands (buffers 0 and 1), the output in bf16.
static bool is_fp8_gemm(const ds_event_key_t *key)
{
    return key->dtype == DS_DTYPE_FP8 && (key->op == DS_OP_GEMM || key->op == DS_OP_BATCHED_GEMM);
}

// The storage type of a key's STORED buffers: an fp8 GEMM's output is bf16.
static dsc_type storage_of(const ds_event_key_t *key)
{
    return key->dtype == DS_DTYPE_FP8 ? DSC_BF16 : dsc_type_of((ds_dtype_t)key->dtype);
}

static size_t buffer_bytes(const ds_event_key_t *key, const dsi_kernel_plan_t *plan, int i)
{
    size_t stored = is_fp8_gemm(key) && i < 2 ? 1 : dsc_type_size(storage_of(key));
    return dsi_kernel_plan_buffer_bytes(&plan->buffers[i], stored);
}

static size_t plan_bytes(const ds_event_key_t *key, const dsi_kernel_plan_t *plan)
{
    size_t total = 0;
    for (int i = 0; i < plan->num_buffers; i++)
        total += buffer_bytes(key, plan, i);
    return total;
}

static int plan_of(const ds_event_key_t *key, dsi_kernel_plan_t *plan)
{
    char message[256];
    if (key->kind != DS_EVENT_COMPUTE)
        return dsc_fail(DS_ERR_INVALID_ARG, "a communication key given as a compute kernel");
    if (key->dtype > DS_DTYPE_FP8)
        return dsc_fail(DS_ERR_INVALID_ARG, "compute key dtype %u is not known",
                        (unsigned)key->dtype);
    if (key->dtype == DS_DTYPE_FP8)
        DSC_TRY(dsc_fp8_gemm_check(key));
    if (key->op == DS_OP_MOE_AUX_LOSS)
        return dsc_fail(DS_ERR_UNSUPPORTED,
                        "the cuda backend has no MoE load-balancing loss kernel yet");
    int code = dsi_kernel_plan_make(key, plan, message, sizeof(message));
    if (code != DS_OK)
        return dsc_fail(code, "%s", message);
    return DS_OK;
}

static int kernel_estimate(const ds_event_key_t *key, size_t *bytes_p)
{
    dsi_kernel_plan_t plan;
    DSC_TRY(plan_of(key, &plan));
    *bytes_p = plan_bytes(key, &plan);
    return DS_OK;
}

static void kernel_destroy(void *handle)
{
    dsc_kernel *k = static_cast<dsc_kernel *>(handle);
    if (k == nullptr)
        return;
    cudaSetDevice(k->ctx->device);
    cudaStreamSynchronize(k->ctx->stream);
    for (int i = 0; i < k->plan.num_buffers; i++)
        if (k->buf[i] != nullptr)
            cudaFree(k->buf[i]);
    k->ctx->memory_used -= k->total_bytes;
    dsc_fp8_gemm_release(k->fp8_gemm);
    dsc_attention_release(k->attention);
    free(k);
}

// What a backward kernel reads that its forward made (see cpu_backend.c).
static int make_saved_state(dsc_kernel *k)
{
    cudaStream_t s = k->ctx->stream;
    const ds_event_key_t *key = &k->key;
    int64_t rows = k->plan.rows, cols = k->plan.cols;
    void **b = k->buf;
    dsc_type t = k->type;
    if (key->op == DS_OP_ROPE)
        return dsc_rope_table(s, rows, k->plan.head_dim, static_cast<float *>(b[2]));
    if (!k->plan.backward)
        return DS_OK;
    switch ((ds_op_t)key->op) {
    case DS_OP_SOFTMAX:
        return dsc_softmax_fwd(s, t, rows, cols, k->plan.causal, DSI_SOFTMAX_SCALE, b[1], b[1]);
    case DS_OP_LAYERNORM:
        return dsc_norm_fwd(s, t, rows, cols, b[1], b[2], b[2], b[5], static_cast<float *>(b[3]),
                            static_cast<float *>(b[4]));
    case DS_OP_RMSNORM:
        return dsc_norm_fwd(s, t, rows, cols, b[1], b[2], nullptr, b[4], nullptr,
                            static_cast<float *>(b[3]));
    case DS_OP_DROPOUT:
    case DS_OP_DROPOUT_ADD:
        return dsc_dropout_fwd(s, t, rows * cols, DSI_DROPOUT_P, dsi_kernel_plan_seed(key, -1),
                               b[0], b[2], static_cast<uint8_t *>(b[1]));
    case DS_OP_POOL: return dsc_pool_fwd(s, t, rows, cols, b[0], b[2], static_cast<int8_t *>(b[1]));
    case DS_OP_CROSS_ENTROPY: {
        DSC_TRY(dsc_cross_entropy_fwd(s, DSC_F32, rows, cols, b[0],
                                      static_cast<const int32_t *>(b[1]),
                                      static_cast<float *>(b[0]), static_cast<float *>(b[2])));
        const dsi_buffer_plan_t *dl = &k->plan.buffers[2];
        return dsc_fill(s, b[2], dl->elem, t, dl->count, dl->fill, dl->scale, dl->limit,
                        dsi_kernel_plan_seed(key, 2));
    }
    default: return DS_OK;
    }
}

static int kernel_prepare(void *handle, const ds_event_key_t *key, void **kernel_p)
{
    dsc_ctx *ctx = static_cast<dsc_ctx *>(handle);
    dsi_kernel_plan_t plan;
    DSC_TRY(plan_of(key, &plan));
    dsc_type t = storage_of(key);
    size_t need = plan_bytes(key, &plan);
    DSC_CUDA_TRY(cudaSetDevice(ctx->device));
    size_t free_bytes = 0, total_bytes = 0;
    DSC_CUDA_TRY(cudaMemGetInfo(&free_bytes, &total_bytes));
    const size_t margin = (size_t)256 << 20; // cuBLAS workspaces, NCCL buffers
    if (need + margin > free_bytes)
        return dsc_fail(DS_ERR_NO_MEMORY,
                        "compute event (operator %u) needs %.3g GiB of buffers; %.3g GiB of the "
                        "device's %.3g GiB are free",
                        (unsigned)key->op, (double)need / 1073741824.0,
                        (double)free_bytes / 1073741824.0, (double)total_bytes / 1073741824.0);
    dsc_kernel *k = static_cast<dsc_kernel *>(calloc(1, sizeof(dsc_kernel)));
    if (k == nullptr)
        return dsc_fail(DS_ERR_NO_MEMORY, "out of memory for a kernel");
    k->ctx = ctx;
    k->key = *key;
    k->plan = plan;
    k->type = t;
    k->total_bytes = need;
    ctx->memory_used += need;
    int status = DS_OK;
    if (key->op == DS_OP_FLASH_ATTENTION) // cuDNN's plan first: it may refuse the key
        status = dsc_attention_prepare(key, ctx->stream, &k->attention);
    for (int i = 0; i < plan.num_buffers && status == DS_OK; i++) {
        const dsi_buffer_plan_t *bp = &plan.buffers[i];
        k->bytes[i] = buffer_bytes(key, &plan, i);
        cudaError_t e = cudaMalloc(&k->buf[i], k->bytes[i] > 0 ? k->bytes[i] : 1);
        if (e == cudaSuccess)
            e = cudaMemsetAsync(k->buf[i], 0, k->bytes[i], ctx->stream);
        if (e != cudaSuccess) {
            k->buf[i] = nullptr;
            status =
                dsc_fail(e == cudaErrorMemoryAllocation ? DS_ERR_NO_MEMORY : DS_ERR_CUDA,
                         "allocating a %zu-byte buffer: %s", k->bytes[i], cudaGetErrorString(e));
            break;
        }
        if (is_fp8_gemm(key) && i < 2) // the main input is the gradient in the backward
            status = dsc_fill_fp8(ctx->stream, k->buf[i], bp->count, bp->scale,
                                  dsi_kernel_plan_seed(key, i),
                                  i == plan.in_index && key->pass == DS_PASS_BACKWARD);
        else
            status = dsc_fill(ctx->stream, k->buf[i], bp->elem, t, bp->count, bp->fill, bp->scale,
                              bp->limit, dsi_kernel_plan_seed(key, i));
    }
    if (status == DS_OK && is_fp8_gemm(key))
        status = dsc_fp8_gemm_prepare(key, &k->fp8_gemm);
    if (status == DS_OK)
        status = make_saved_state(k);
    if (status == DS_OK && cudaStreamSynchronize(ctx->stream) != cudaSuccess)
        status =
            dsc_fail(DS_ERR_CUDA, "preparing a kernel: %s", cudaGetErrorString(cudaGetLastError()));
    if (status != DS_OK) {
        kernel_destroy(k);
        return status;
    }
    k->in = plan.in_index >= 0 ? k->buf[plan.in_index] : nullptr;
    *kernel_p = k;
    return DS_OK;
}

static cudaDataType_t cuda_type(dsc_type t)
{
    return t == DSC_BF16 ? CUDA_R_16BF : t == DSC_F16 ? CUDA_R_16F : CUDA_R_32F;
}

// Row-major C[m,n] = op(A) op(B) is column-major C^T = op(B)^T op(A)^T:
// cuBLAS gets B first, with the same transposition flags.
static int gemm(dsc_kernel *k)
{
    const int64_t *d = k->key.dims;
    int ta = (k->key.variant & DS_GEMM_TRANS_A) != 0, tb = (k->key.variant & DS_GEMM_TRANS_B) != 0;
    int m = (int)d[0], n = (int)d[1], kk = (int)d[2];
    int lda = ta ? m : kk, ldb = tb ? kk : n;
    cudaDataType_t type = cuda_type(k->type);
    const float one = 1.0f, zero = 0.0f;
    cublasOperation_t op_a = ta ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    if (k->key.op == DS_OP_GEMM) {
        DSC_CUBLAS_TRY(cublasGemmEx(k->ctx->cublas, op_b, op_a, n, m, kk, &one, k->buf[1], type,
                                    ldb, k->in, type, lda, &zero, k->buf[2], type, n,
                                    CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    } else {
        long long stride_a = (long long)d[0] * d[2], stride_b = (long long)d[2] * d[1],
                  stride_c = (long long)d[0] * d[1];
        DSC_CUBLAS_TRY(cublasGemmStridedBatchedEx(
            k->ctx->cublas, op_b, op_a, n, m, kk, &one, k->buf[1], type, ldb, stride_b, k->in, type,
            lda, stride_a, &zero, k->buf[2], type, n, stride_c, (int)d[3], CUBLAS_COMPUTE_32F,
            CUBLAS_GEMM_DEFAULT));
    }
    return DS_OK;
}

int dsc_kernel_run(void *handle)
{
    dsc_kernel *k = static_cast<dsc_kernel *>(handle);
    cudaStream_t s = k->ctx->stream;
    const ds_event_key_t *key = &k->key;
    int64_t rows = k->plan.rows, cols = k->plan.cols, n = rows * cols;
    dsc_type t = k->type;
    void **b = k->buf;
    const void *in = k->in;
    int bwd = k->plan.backward;
    uint64_t seed = dsi_kernel_plan_seed(key, -1) + (uint64_t)++k->runs;
    switch ((ds_op_t)key->op) {
    case DS_OP_GEMM:
    case DS_OP_BATCHED_GEMM:
        return k->fp8_gemm != nullptr ? dsc_fp8_gemm_run(k->fp8_gemm, s, in, b[1], b[2]) : gemm(k);
    case DS_OP_SOFTMAX:
        return bwd ? dsc_softmax_bwd(s, t, rows, cols, k->plan.causal, DSI_SOFTMAX_SCALE, b[1], in,
                                     b[2])
                   : dsc_softmax_fwd(s, t, rows, cols, k->plan.causal, DSI_SOFTMAX_SCALE, in, b[1]);
    case DS_OP_LAYERNORM:
        return bwd ? dsc_norm_bwd(s, t, rows, cols, in, b[1], b[2], static_cast<float *>(b[3]),
                                  static_cast<float *>(b[4]), b[5], static_cast<float *>(b[6]),
                                  static_cast<float *>(b[7]))
                   : dsc_norm_fwd(s, t, rows, cols, in, b[1], b[2], b[3],
                                  static_cast<float *>(b[4]), static_cast<float *>(b[5]));
    case DS_OP_RMSNORM:
        return bwd ? dsc_norm_bwd(s, t, rows, cols, in, b[1], b[2], nullptr,
                                  static_cast<float *>(b[3]), b[4], static_cast<float *>(b[5]),
                                  nullptr)
                   : dsc_norm_fwd(s, t, rows, cols, in, b[1], nullptr, b[2], nullptr,
                                  static_cast<float *>(b[3]));
    case DS_OP_GELU:
        return bwd ? dsc_map(s, t, DSC_GELU_GRAD, n, in, b[1], b[2])
                   : dsc_map(s, t, DSC_GELU, n, in, nullptr, b[1]);
    case DS_OP_RELU:
        return bwd ? dsc_map(s, t, DSC_RELU_GRAD, n, in, b[1], b[2])
                   : dsc_map(s, t, DSC_RELU, n, in, nullptr, b[1]);
    case DS_OP_SWIGLU:
    case DS_OP_GEGLU: {
        int gelu = key->op == DS_OP_GEGLU;
        return bwd ? dsc_glu_bwd(s, t, gelu, rows, cols, in, b[1], b[2])
                   : dsc_glu_fwd(s, t, gelu, rows, cols, in, b[1]);
    }
    case DS_OP_DROPOUT:
        return bwd ? dsc_dropout_bwd(s, t, n, DSI_DROPOUT_P, in, static_cast<uint8_t *>(b[1]), b[2])
                   : dsc_dropout_fwd(s, t, n, DSI_DROPOUT_P, seed, in, b[1],
                                     static_cast<uint8_t *>(b[2]));
    case DS_OP_DROPOUT_ADD:
        return bwd ? dsc_dropout_add_bwd(s, t, rows, cols, DSI_DROPOUT_P, in,
                                         static_cast<uint8_t *>(b[1]), b[2],
                                         static_cast<float *>(b[3]))
                   : dsc_dropout_add_fwd(s, t, rows, cols, DSI_DROPOUT_P, seed, in, b[1], b[2],
                                         b[3], static_cast<uint8_t *>(b[4]));
    case DS_OP_ADD: return dsc_map(s, t, DSC_ADD, n, in, b[1], b[2]);
    case DS_OP_ROPE:
        return dsc_rope(s, t, bwd, rows, cols, k->plan.head_dim, static_cast<float *>(b[2]), in,
                        b[1]);
    case DS_OP_EMBEDDING:
        return bwd ? dsc_embedding_bwd(s, t, rows, cols, static_cast<int32_t *>(b[1]), in,
                                       static_cast<float *>(b[2]))
                   : dsc_embedding_fwd(s, t, rows, cols, static_cast<int32_t *>(b[0]), b[1], b[2]);
    case DS_OP_CROSS_ENTROPY:
        return bwd ? dsc_cross_entropy_bwd(s, t, rows, cols, static_cast<float *>(b[0]),
                                           static_cast<int32_t *>(b[1]), static_cast<float *>(b[2]),
                                           b[3])
                   : dsc_cross_entropy_fwd(s, t, rows, cols, in, static_cast<int32_t *>(b[1]),
                                           static_cast<float *>(b[2]), static_cast<float *>(b[3]));
    case DS_OP_OPTIMIZER:
        return dsc_adam(s, rows, k->runs, static_cast<float *>(b[0]), static_cast<float *>(b[1]),
                        static_cast<float *>(b[2]), static_cast<float *>(b[3]),
                        static_cast<uint16_t *>(b[4]));
    case DS_OP_POOL:
        return bwd ? dsc_pool_bwd(s, t, rows, cols, in, static_cast<int8_t *>(b[1]), b[2])
                   : dsc_pool_fwd(s, t, rows, cols, in, b[1], static_cast<int8_t *>(b[2]));
    case DS_OP_FP8_CAST:
        return dsc_fp8_cast(s, t, n, in, static_cast<uint8_t *>(b[1]), static_cast<float *>(b[2]));
    case DS_OP_FLASH_ATTENTION:
        if (!bwd && k->attention != nullptr)
            return dsc_attention_run(k->attention, in, b[1], b[2], b[3], b[4]);
        break;
    case DS_OP_MOE_AUX_LOSS:
    case DS_OP_FRAMEWORK_GAP:
    case DS_OP_COUNT_: break;
    }
    return dsc_fail(DS_ERR_INTERNAL, "a kernel of operator %u was prepared", (unsigned)key->op);
}

static size_t kernel_bytes(const void *handle)
{
    return static_cast<const dsc_kernel *>(handle)->total_bytes;
}

static int kernel_chain(void *consumer, const void *producer, int *chained_p)
{
    dsc_kernel *c = static_cast<dsc_kernel *>(consumer);
    const dsc_kernel *p = static_cast<const dsc_kernel *>(producer);
    *chained_p = 0;
    // An fp8 GEMM reads what a cast made (fp8_cast events), not its producer's output.
    if (is_fp8_gemm(&c->key))
        return DS_OK;
    if (c->plan.in_index < 0 || p->plan.out_index < 0 || c->type != p->type)
        return DS_OK;
    if (p->bytes[p->plan.out_index] < c->bytes[c->plan.in_index])
        return DS_OK;
    c->in = p->buf[p->plan.out_index];
    *chained_p = 1;
    return DS_OK;
}

static int kernel_read(const void *handle, int index, void *host, size_t bytes)
{
    const dsc_kernel *k = static_cast<const dsc_kernel *>(handle);
    if (index < 0 || index >= k->plan.num_buffers || bytes > k->bytes[index])
        return dsc_fail(DS_ERR_INVALID_ARG, "buffer %d of %zu bytes does not exist", index, bytes);
    DSC_CUDA_TRY(cudaStreamSynchronize(k->ctx->stream));
    DSC_CUDA_TRY(cudaMemcpy(host, k->buf[index], bytes, cudaMemcpyDeviceToHost));
    return DS_OK;
}

// ---- the table ----------------------------------------------------------------------------------

int dsc_nccl_unique_id(unsigned char id[DSI_NCCL_ID_BYTES]);
int dsc_nccl_comm_create(void *ctx, int size, int rank, const unsigned char id[DSI_NCCL_ID_BYTES],
                         void **nccl_p);
void dsc_nccl_comm_destroy(void *nccl);
int dsc_comm_prepare(void *ctx, void *nccl, int size, int rank, const dsi_comm_op_t *op, int verify,
                     void **op_p);
int dsc_comm_run_timed(void *op, void *before, double *lead_s, double *seconds_p);
int dsc_comm_check(void *op, int64_t *errors_p);
void dsc_comm_release(void *op);
int dsc_comm_issue(void *op, int queue, int role);
int dsc_group_start(void);
int dsc_group_end(void);
int dsc_queue_mark(void *ctx, int queue, size_t slot);
int dsc_marks_reserve(void *ctx, size_t count);
int dsc_queue_join(void *ctx, int from, int to);
int dsc_queue_wait_mark(void *ctx, int queue, size_t slot);
int dsc_mark_done(void *ctx, size_t slot, int *done_p);
int dsc_marks_read(void *ctx, size_t count, double *offsets_s);

static const dsi_cuda_module_t module_table = {
    DSI_CUDA_ABI_VERSION,
    dsc_last_error,
    device_count,
    print_info,
    open_ctx,
    close_ctx,
    describe,
    kernel_estimate,
    kernel_prepare,
    dsc_kernel_run,
    kernel_bytes,
    kernel_chain,
    kernel_read,
    kernel_destroy,
    stamps_reserve,
    stamp,
    synchronize,
    elapsed,
    dsc_nccl_unique_id,
    dsc_nccl_comm_create,
    dsc_nccl_comm_destroy,
    dsc_comm_prepare,
    dsc_comm_run_timed,
    dsc_comm_check,
    dsc_comm_release,
    dsc_queue_mark,
    dsc_marks_reserve,
    dsc_queue_join,
    dsc_queue_wait_mark,
    dsc_mark_done,
    dsc_marks_read,
    dsc_comm_issue,
    dsc_group_start,
    dsc_group_end,
};

extern "C" __attribute__((visibility("default"))) const dsi_cuda_module_t *dsi_cuda_module_get(void)
{
    return &module_table;
}
