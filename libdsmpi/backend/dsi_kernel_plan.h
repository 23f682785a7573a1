/*
 * What a compute event needs on a device: its buffers (element kind, count,
 * how they are filled) and which of them are the main input and output.
 * One plan for every backend, so a key gets the same buffers, in the same
 * order, filled with the same values, on the cpu and on a GPU.  Plain C with
 * no library dependency: the CUDA module compiles it too.
 *
 * Buffers per operator (forward; backward), main input first:
 *   gemm, bgemm   A, B, C                       (B: weights, or activations for dW)
 *   softmax       x, y ;  dy, y, dx
 *   layernorm     x, gamma, beta, y, mean, rstd ;  dy, x, gamma, mean, rstd, dx, dgamma, dbeta
 *   rmsnorm       x, gamma, y, rstd ;  dy, x, gamma, rstd, dx, dgamma
 *   gelu, relu    x, y ;  dy, x, dx
 *   swiglu, geglu x [rows, 2 cols], y ;  dy, x, dx [rows, 2 cols]
 *   dropout       x, y, mask ;  dy, mask, dx
 *   dropout-add   x, bias, residual, out, mask ;  dout, mask, dx, dbias
 *   add           a, b, out (both passes)
 *   rope          x, y, cos/sin table (both passes)
 *   embedding     ids, table, out ;  dout, ids, dtable
 *   cross-entropy logits, targets, softmax, loss ;  softmax, targets, dloss, dlogits
 *   optimizer     w, m, v, grad (fp32), w copy (bf16)
 *   pool          x, y, argmax ;  dy, argmax, dx
 *   attention     q, k, v, o, lse ;  do, q, k, v, o, lse, dq, dk, dv
 *   fp8 cast      x, y (one byte each), amax (both passes)
 */
#ifndef DSI_KERNEL_PLAN_H
#define DSI_KERNEL_PLAN_H

#include <dsmpi/events.h>

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum dsi_elem {
    DSI_ELEM_STORED = 0, /* the key's storage type on this backend */
    DSI_ELEM_F32 = 1,    /* state training keeps in fp32 */
    DSI_ELEM_BF16 = 2,   /* the optimizer's copy of the weights */
    DSI_ELEM_I32 = 3,    /* token ids, targets */
    DSI_ELEM_U8 = 4,     /* dropout masks */
    DSI_ELEM_I8 = 5,     /* pooling argmax offsets */
} dsi_elem_t;

typedef enum dsi_fill {
    DSI_FILL_NONE = 0,   /* written by the kernel (fp32 accumulators start at 0) */
    DSI_FILL_NORMAL,     /* N(0, scale^2) */
    DSI_FILL_ONE_NORMAL, /* 1 + N(0, scale^2): norm weights */
    DSI_FILL_POSITIVE,   /* |N(0, scale^2)|: second moments */
    DSI_FILL_INDEX,      /* int32 uniform in [0, limit) */
    DSI_FILL_CONSTANT,   /* `scale` everywhere */
    DSI_FILL_SAVED,      /* made by the forward at prepare (probabilities, statistics, masks) */
} dsi_fill_t;

#define DSI_PLAN_MAX_BUFFERS 10

typedef struct dsi_buffer_plan {
    int64_t count;
    dsi_elem_t elem;
    dsi_fill_t fill;
    float scale;
    int64_t limit;
} dsi_buffer_plan_t;

typedef struct dsi_kernel_plan {
    int num_buffers;
    dsi_buffer_plan_t buffers[DSI_PLAN_MAX_BUFFERS];
    int in_index, out_index; /* main input and output, for layer chaining; -1 = none */
    int backward;            /* the pass runs backward work */
    int causal;              /* softmax: causal mask */
    int64_t rows, cols;      /* row operators: rows x cols (output columns for GLUs);
                                attention: queries x head dim */
    int64_t head_dim;        /* rope: rotated head width (0 = nothing rotates) */
} dsi_kernel_plan_t;

/* Scale of the softmax (1/sqrt(64): the head dim is not in the key), and of
 * the values filled. */
#define DSI_SOFTMAX_SCALE 0.125f
#define DSI_WEIGHT_STD 0.02f /* GPT-2 / Megatron initialisation */
#define DSI_GRAD_STD 0.01f
/* Normalisation epsilon and dropout probability of every backend. */
#define DSI_NORM_EPS 1e-5f
#define DSI_DROPOUT_P 0.1f

/* Plans `key` (a compute key).  Returns 0, or a ds_status_t with a one-line
 * message in `message`. */
int dsi_kernel_plan_make(const ds_event_key_t *key, dsi_kernel_plan_t *plan, char *message,
                         size_t message_size);
/* Bytes of a buffer / of all buffers, with `stored` bytes per stored element. */
size_t dsi_kernel_plan_buffer_bytes(const dsi_buffer_plan_t *buffer, size_t stored);
size_t dsi_kernel_plan_bytes(const dsi_kernel_plan_t *plan, size_t stored);
/* Seed of the values of buffer `index` of `key` (the same on every backend). */
uint64_t dsi_kernel_plan_seed(const ds_event_key_t *key, int index);
/* Rotated head width of a rope of `cols` columns: the largest power of two
 * up to 128 dividing it (0 for odd widths). */
int64_t dsi_rope_head_dim(int64_t cols);

#ifdef __cplusplus
}
#endif

#endif /* DSI_KERNEL_PLAN_H */
