// FP8 on the CUDA backend, as Transformer Engine runs it: GEMMs through
// cuBLASLt on one-byte operands (e4m3; in the backward the gradient operand
// e5m2, the "hybrid" format) with fp32 accumulation and a bf16 output, and
// the cast of a tensor to e4m3 with its amax.  Every FP8 GEMM runs in the
// layout cuBLASLt supports for FP8 on Hopper, both operands K-major ("TN"):
// Transformer Engine brings its operands there with the cast-transpose,
// whose cost is the fp8_cast event's, so the key's transposition bits
// change the shapes' meaning, not the kernel.
#include "dsi_cuda_impl.h"

#include "dsi_rng.h"

#include <cublasLt.h>
#include <cuda_fp8.h>

#include <stdlib.h>

#define DSC_LT_TRY(call, label)                                                                    \
    do {                                                                                           \
        cublasStatus_t dsc_l_ = (call);                                                            \
        if (dsc_l_ != CUBLAS_STATUS_SUCCESS) {                                                     \
            status = dsc_fail(DS_ERR_CUBLAS, "%s failed: %s (%s:%d)", #call,                       \
                              cublasGetStatusString(dsc_l_), __FILE__, __LINE__);                  \
            goto label;                                                                            \
        }                                                                                          \
    } while (0)

namespace
{

const int kBlock = 256;
// cuBLASLt's workspace for the FP8 kernels (its documentation's advice for Hopper).
const size_t kWorkspaceBytes = (size_t)32 << 20;

unsigned grid_for(int64_t n)
{
    int64_t blocks = (n + kBlock - 1) / kBlock;
    return (unsigned)(blocks < 1 ? 1 : blocks > 65535 * 4 ? 65535 * 4 : blocks);
}

int launched(const char *what)
{
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        return dsc_fail(DS_ERR_CUDA, "launching %s: %s", what, cudaGetErrorString(e));
    return DS_OK;
}

__global__ void fill_fp8_k(uint8_t *p, int64_t n, float scale, uint64_t seed, int e5m2)
{
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x) {
        float v = scale * dsi_rng_normal_of(dsi_rng_bits(seed, (uint64_t)i));
        p[i] = __nv_cvt_float_to_fp8(v, __NV_SATFINITE, e5m2 ? __NV_E5M2 : __NV_E4M3);
    }
}

__device__ __forceinline__ float load_f(const void *x, int type, int64_t i)
{
    if (type == DSC_BF16)
        return __bfloat162float(static_cast<const __nv_bfloat16 *>(x)[i]);
    if (type == DSC_F16)
        return __half2float(static_cast<const __half *>(x)[i]);
    return static_cast<const float *>(x)[i];
}

// amax of |x| into *amax (which starts at 0): non-negative floats order as their bits.
__global__ void amax_k(const void *x, int type, int64_t n, float *amax)
{
    __shared__ float shared[kBlock / 32];
    float best = 0.0f;
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        best = fmaxf(best, fabsf(load_f(x, type, i)));
    for (int o = 16; o > 0; o >>= 1)
        best = fmaxf(best, __shfl_xor_sync(0xffffffffu, best, o));
    if (threadIdx.x % 32 == 0)
        shared[threadIdx.x / 32] = best;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < kBlock / 32; w++)
            best = fmaxf(best, shared[w]);
        atomicMax(reinterpret_cast<int *>(amax), __float_as_int(best));
    }
}

__global__ void cast_k(const void *x, int type, int64_t n, const float *amax, uint8_t *y)
{
    float a = *amax;
    float scale = a > 0.0f ? 448.0f / a : 1.0f; // e4m3's largest finite value over the amax
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (int64_t)gridDim.x * blockDim.x)
        y[i] = __nv_cvt_float_to_fp8(scale * load_f(x, type, i), __NV_SATFINITE, __NV_E4M3);
}

} // namespace

int dsc_fill_fp8(cudaStream_t s, void *p, int64_t count, float scale, uint64_t seed, int e5m2)
{
    fill_fp8_k<<<grid_for(count), kBlock, 0, s>>>(static_cast<uint8_t *>(p), count, scale, seed,
                                                  e5m2);
    return launched("the fp8 fill");
}

int dsc_fp8_cast(cudaStream_t s, dsc_type t, int64_t n, const void *x, uint8_t *y, float *amax)
{
    DSC_CUDA_TRY(cudaMemsetAsync(amax, 0, sizeof(float), s));
    amax_k<<<grid_for(n), kBlock, 0, s>>>(x, (int)t, n, amax);
    DSC_TRY(launched("the fp8 amax"));
    cast_k<<<grid_for(n), kBlock, 0, s>>>(x, (int)t, n, amax, y);
    return launched("the fp8 cast");
}

// ---- GEMMs
// ---------------------------------------------------------------------------------------

struct dsc_fp8_gemm {
    cublasLtHandle_t lt;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t a, b, d;
    cublasLtMatmulHeuristicResult_t algo;
    void *workspace;
    float *scales; // device: the operands' dequantisation scales (1)
};

void dsc_fp8_gemm_release(void *handle)
{
    dsc_fp8_gemm *g = static_cast<dsc_fp8_gemm *>(handle);
    if (g == nullptr)
        return;
    if (g->d != nullptr)
        cublasLtMatrixLayoutDestroy(g->d);
    if (g->b != nullptr)
        cublasLtMatrixLayoutDestroy(g->b);
    if (g->a != nullptr)
        cublasLtMatrixLayoutDestroy(g->a);
    if (g->desc != nullptr)
        cublasLtMatmulDescDestroy(g->desc);
    if (g->lt != nullptr)
        cublasLtDestroy(g->lt);
    if (g->workspace != nullptr)
        cudaFree(g->workspace);
    if (g->scales != nullptr)
        cudaFree(g->scales);
    free(g);
}

int dsc_fp8_gemm_check(const ds_event_key_t *key)
{
    if (key->op != DS_OP_GEMM && key->op != DS_OP_BATCHED_GEMM)
        return dsc_fail(DS_ERR_UNSUPPORTED,
                        "fp8 non-GEMM keys are not run on the cuda backend (accepted: fp8 GEMMs "
                        "and grouped GEMMs; casts to fp8 are fp8_cast keys of the source dtype)");
    const int64_t *d = key->dims;
    if (key->op == DS_OP_BATCHED_GEMM && (d[3] < 1 || d[3] > INT32_MAX))
        return dsc_fail(DS_ERR_UNSUPPORTED, "fp8 grouped GEMM of %lld groups (accepted: 1 to %d)",
                        (long long)d[3], INT32_MAX);
    if (d[0] < 16 || d[1] < 16 || d[2] < 16 || d[0] % 16 || d[1] % 16 || d[2] % 16)
        return dsc_fail(DS_ERR_UNSUPPORTED,
                        "fp8 GEMM m=%lld n=%lld k=%lld: cuBLASLt runs FP8 for m, n, k multiples of "
                        "16 (as Transformer Engine requires)",
                        (long long)d[0], (long long)d[1], (long long)d[2]);
    return DS_OK;
}

// Row-major D[m,n] = A[m,k] B[n,k]^T is column-major D^T[n,m] = B^T A with
// cuBLASLt's first operand B (k x n, ld k, transposed) and second A (k x m,
// ld k): both K-major, the layout FP8 needs.
int dsc_fp8_gemm_prepare(const ds_event_key_t *key, void **gemm_p)
{
    DSC_TRY(dsc_fp8_gemm_check(key));
    int status = DS_OK;
    uint64_t m = (uint64_t)key->dims[0], n = (uint64_t)key->dims[1], k = (uint64_t)key->dims[2];
    // Backward: the gradient operand (the main input) in e5m2, as the hybrid format keeps it.
    cudaDataType_t input = key->pass == DS_PASS_BACKWARD ? CUDA_R_8F_E5M2 : CUDA_R_8F_E4M3;
    cublasOperation_t transpose = CUBLAS_OP_T, none = CUBLAS_OP_N;
    const float ones[2] = {1.0f, 1.0f};
    cublasLtMatmulPreference_t preference = nullptr;
    int found = 0;
    dsc_fp8_gemm *g = static_cast<dsc_fp8_gemm *>(calloc(1, sizeof(dsc_fp8_gemm)));
    if (g == nullptr)
        return dsc_fail(DS_ERR_NO_MEMORY, "out of memory for an fp8 GEMM");
    if (cudaMalloc(&g->workspace, kWorkspaceBytes) != cudaSuccess ||
        cudaMalloc(&g->scales, sizeof(ones)) != cudaSuccess ||
        cudaMemcpy(g->scales, ones, sizeof(ones), cudaMemcpyHostToDevice) != cudaSuccess) {
        status = dsc_fail(DS_ERR_NO_MEMORY, "allocating an fp8 GEMM's workspace: %s",
                          cudaGetErrorString(cudaGetLastError()));
        goto err;
    }
    DSC_LT_TRY(cublasLtCreate(&g->lt), err);
    DSC_LT_TRY(cublasLtMatmulDescCreate(&g->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), err);
    DSC_LT_TRY(cublasLtMatmulDescSetAttribute(g->desc, CUBLASLT_MATMUL_DESC_TRANSA, &transpose,
                                              sizeof(transpose)),
               err);
    DSC_LT_TRY(
        cublasLtMatmulDescSetAttribute(g->desc, CUBLASLT_MATMUL_DESC_TRANSB, &none, sizeof(none)),
        err);
    DSC_LT_TRY(cublasLtMatmulDescSetAttribute(g->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER,
                                              &g->scales, sizeof(g->scales)),
               err);
    {
        float *b_scale = g->scales + 1;
        DSC_LT_TRY(cublasLtMatmulDescSetAttribute(g->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER,
                                                  &b_scale, sizeof(b_scale)),
                   err);
    }
    DSC_LT_TRY(cublasLtMatrixLayoutCreate(&g->a, CUDA_R_8F_E4M3, k, n, k), err);
    DSC_LT_TRY(cublasLtMatrixLayoutCreate(&g->b, input, k, m, k), err);
    DSC_LT_TRY(cublasLtMatrixLayoutCreate(&g->d, CUDA_R_16BF, n, m, n), err);
    if (key->op == DS_OP_BATCHED_GEMM) {
        // The experts' grouped GEMM as a strided batch: one expert's operands
        // and output after another, as the batched buffers are laid out.
        int32_t groups = (int32_t)key->dims[3];
        int64_t strides[3] = {(int64_t)(k * n), (int64_t)(k * m), (int64_t)(n * m)};
        cublasLtMatrixLayout_t layouts[3] = {g->a, g->b, g->d};
        for (int i = 0; i < 3; i++) {
            DSC_LT_TRY(cublasLtMatrixLayoutSetAttribute(
                           layouts[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &groups, sizeof(groups)),
                       err);
            DSC_LT_TRY(cublasLtMatrixLayoutSetAttribute(layouts[i],
                                                        CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                        &strides[i], sizeof(strides[i])),
                       err);
        }
    }
    DSC_LT_TRY(cublasLtMatmulPreferenceCreate(&preference), err);
    DSC_LT_TRY(cublasLtMatmulPreferenceSetAttribute(preference,
                                                    CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                    &kWorkspaceBytes, sizeof(kWorkspaceBytes)),
               err);
    DSC_LT_TRY(cublasLtMatmulAlgoGetHeuristic(g->lt, g->desc, g->a, g->b, g->d, g->d, preference, 1,
                                              &g->algo, &found),
               err);
    if (found < 1) {
        status = dsc_fail(DS_ERR_UNSUPPORTED,
                          "cuBLASLt has no fp8 GEMM algorithm for m=%llu n=%llu k=%llu on this "
                          "device (FP8 needs compute capability 8.9 or later)",
                          (unsigned long long)m, (unsigned long long)n, (unsigned long long)k);
        goto err;
    }
    cublasLtMatmulPreferenceDestroy(preference);
    *gemm_p = g;
    return DS_OK;
err:
    if (preference != nullptr)
        cublasLtMatmulPreferenceDestroy(preference);
    dsc_fp8_gemm_release(g);
    return status;
}

int dsc_fp8_gemm_run(void *handle, cudaStream_t s, const void *a, const void *b, void *d)
{
    dsc_fp8_gemm *g = static_cast<dsc_fp8_gemm *>(handle);
    const float one = 1.0f, zero = 0.0f;
    cublasStatus_t e = cublasLtMatmul(g->lt, g->desc, &one, b, g->a, a, g->b, &zero, d, g->d, d,
                                      g->d, &g->algo.algo, g->workspace, kWorkspaceBytes, s);
    if (e != CUBLAS_STATUS_SUCCESS)
        return dsc_fail(DS_ERR_CUBLAS, "cublasLtMatmul (fp8) failed: %s", cublasGetStatusString(e));
    return DS_OK;
}
