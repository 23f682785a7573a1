// Private parts of the CUDA backend module (C++ / CUDA; never included by
// libdsmpi's C files).
#ifndef DSI_CUDA_IMPL_H
#define DSI_CUDA_IMPL_H

#include "dsi_cuda.h"

#include "dsi_kernel_plan.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <stddef.h>
#include <stdint.h>

// Records a one-line message for last_error() and returns `status`.
int dsc_fail(int status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
const char *dsc_last_error(void);

#define DSC_CUDA_TRY(call)                                                                         \
    do {                                                                                           \
        cudaError_t dsc_e_ = (call);                                                               \
        if (dsc_e_ != cudaSuccess)                                                                 \
            return dsc_fail(DS_ERR_CUDA, "%s failed: %s (%s:%d)", #call,                           \
                            cudaGetErrorString(dsc_e_), __FILE__, __LINE__);                       \
    } while (0)

#define DSC_CUBLAS_TRY(call)                                                                       \
    do {                                                                                           \
        cublasStatus_t dsc_s_ = (call);                                                            \
        if (dsc_s_ != CUBLAS_STATUS_SUCCESS)                                                       \
            return dsc_fail(DS_ERR_CUBLAS, "%s failed: %s (%s:%d)", #call,                         \
                            cublasGetStatusString(dsc_s_), __FILE__, __LINE__);                    \
    } while (0)

#define DSC_TRY(call)                                                                              \
    do {                                                                                           \
        int dsc_r_ = (call);                                                                       \
        if (dsc_r_ != DS_OK)                                                                       \
            return dsc_r_;                                                                         \
    } while (0)

struct dsc_ctx {
    int device;
    cudaStream_t stream; // the compute queue; also queues[DSI_QUEUE_COMPUTE]
    // The executor's queues and one event per queue for joining another to it.
    cudaStream_t queues[DSI_QUEUE_COUNT_];
    cudaEvent_t joins[DSI_QUEUE_COUNT_];
    cudaEvent_t *marks;
    size_t num_marks;
    cublasHandle_t cublas;
    cudaEvent_t *stamps;
    size_t num_stamps;
    size_t memory_used;
    char name[256];
};

// Element types the kernels are instantiated for.
enum dsc_type { DSC_F32 = 0, DSC_BF16 = 1, DSC_F16 = 2 };

static inline dsc_type dsc_type_of(ds_dtype_t dtype)
{
    return dtype == DS_DTYPE_BF16 ? DSC_BF16 : dtype == DS_DTYPE_FP16 ? DSC_F16 : DSC_F32;
}

static inline size_t dsc_type_size(dsc_type t)
{
    return t == DSC_F32 ? 4 : 2;
}

// ---- launchers (cuda_kernels.cu): asynchronous on `s`, return a ds_status_t ---------------------

// Fills `count` elements of `elem` (stored as `t` when elem is STORED).
int dsc_fill(cudaStream_t s, void *p, dsi_elem_t elem, dsc_type t, int64_t count, dsi_fill_t fill,
             float scale, int64_t limit, uint64_t seed);
// Element i = (member + offset + i) % 4 + 1 (communication checks).
int dsc_fill_verify(cudaStream_t s, void *p, dsc_type t, int64_t count, int member, int64_t offset);

int dsc_softmax_fwd(cudaStream_t s, dsc_type t, int64_t rows, int64_t cols, int causal, float scale,
                    const void *x, void *y);
int dsc_softmax_bwd(cudaStream_t s, dsc_type t, int64_t rows, int64_t cols, int causal, float scale,
                    const void *y, const void *dy, void *dx);
// beta / mean NULL: RMSNorm.
int dsc_norm_fwd(cudaStream_t s, dsc_type t, int64_t rows, int64_t cols, const void *x,
                 const void *gamma, const void *beta, void *y, float *mean, float *rstd);
int dsc_norm_bwd(cudaStream_t s, dsc_type t, int64_t rows, int64_t cols, const void *dy,
                 const void *x, const void *gamma, const float *mean, const float *rstd, void *dx,
                 float *dgamma, float *dbeta);

enum dsc_map_op { DSC_GELU, DSC_GELU_GRAD, DSC_RELU, DSC_RELU_GRAD, DSC_ADD };
int dsc_map(cudaStream_t s, dsc_type t, dsc_map_op op, int64_t n, const void *a, const void *b,
            void *out);
int dsc_glu_fwd(cudaStream_t s, dsc_type t, int gelu, int64_t rows, int64_t cols, const void *x,
                void *y);
int dsc_glu_bwd(cudaStream_t s, dsc_type t, int gelu, int64_t rows, int64_t cols, const void *dy,
                const void *x, void *dx);
int dsc_dropout_fwd(cudaStream_t s, dsc_type t, int64_t n, float p, uint64_t seed, const void *x,
                    void *y, uint8_t *mask);
int dsc_dropout_bwd(cudaStream_t s, dsc_type t, int64_t n, float p, const void *dy,
                    const uint8_t *mask, void *dx);
int dsc_dropout_add_fwd(cudaStream_t s, dsc_type t, int64_t rows, int64_t cols, float p,
                        uint64_t seed, const void *x, const void *bias, const void *residual,
                        void *out, uint8_t *mask);
int dsc_dropout_add_bwd(cudaStream_t s, dsc_type t, int64_t rows, int64_t cols, float p,
                        const void *dout, const uint8_t *mask, void *dx, float *dbias);
int dsc_rope_table(cudaStream_t s, int64_t rows, int64_t head_dim, float *cos_sin);
int dsc_rope(cudaStream_t s, dsc_type t, int backward, int64_t rows, int64_t cols, int64_t head_dim,
             const float *cos_sin, const void *x, void *y);
int dsc_embedding_fwd(cudaStream_t s, dsc_type t, int64_t tokens, int64_t hidden,
                      const int32_t *ids, const void *table, void *out);
int dsc_embedding_bwd(cudaStream_t s, dsc_type t, int64_t tokens, int64_t hidden,
                      const int32_t *ids, const void *dout, float *dtable);
int dsc_cross_entropy_fwd(cudaStream_t s, dsc_type t, int64_t tokens, int64_t vocab,
                          const void *logits, const int32_t *targets, float *softmax, float *loss);
int dsc_cross_entropy_bwd(cudaStream_t s, dsc_type t, int64_t tokens, int64_t vocab,
                          const float *softmax, const int32_t *targets, const float *dloss,
                          void *dlogits);
int dsc_adam(cudaStream_t s, int64_t n, int64_t step, float *w, float *m, float *v,
             const float *grad, uint16_t *low_bf16);
int dsc_pool_fwd(cudaStream_t s, dsc_type t, int64_t rows, int64_t cols, const void *x, void *y,
                 int8_t *argmax);
int dsc_pool_bwd(cudaStream_t s, dsc_type t, int64_t rows, int64_t cols, const void *dy,
                 const int8_t *argmax, void *dx);

// The executor's queues (cuda_queue.cu): made by open, released by close.
int dsc_queues_open(dsc_ctx *ctx);
void dsc_queues_close(dsc_ctx *ctx);

// Issues a prepared kernel on its context's stream (cuda_module.cu).
int dsc_kernel_run(void *kernel);

// Host-side conversions (cuda_kernels.cu).
float dsc_to_float(const void *p, dsc_type t, int64_t i);

#endif // DSI_CUDA_IMPL_H
