/*
 * The CPU backend's kernels: plain functions on explicit buffers, so tests
 * can check each against a reference loop.
 *
 * Tensors are row-major and stored as fp32 or bf16 (dsi_stype_t); every
 * kernel computes in fp32, converting a row (or a chunk) at a time.  State
 * that training keeps in fp32 (norm statistics, parameter gradients, the
 * optimizer's master weights and moments, the loss softmax) is fp32.
 * Scratch sizes are in floats.
 */
#ifndef DSI_CPU_H
#define DSI_CPU_H

#include "dsi_kernel_plan.h"

#include <stddef.h>
#include <stdint.h>

typedef enum dsi_stype {
    DSI_STYPE_F32 = 0,
    DSI_STYPE_BF16 = 1,
} dsi_stype_t;

size_t dsi_stype_size(dsi_stype_t type);

/* ---- number formats -------------------------------------------------------------------------- */

/* Round to nearest even; NaN stays NaN. */
uint16_t dsi_bf16_from_f32(float value);
float dsi_bf16_to_f32(uint16_t value);
/* The same, inline for loops that must vectorise (MPI reductions). */
static inline float dsi_bf16_widen(uint16_t value)
{
    union {
        uint32_t u;
        float f;
    } v = {(uint32_t)value << 16};
    return v.f;
}
static inline uint16_t dsi_bf16_round(float value)
{
    union {
        float f;
        uint32_t u;
    } v = {value};
    uint32_t rounded = (v.u + 0x7fffu + ((v.u >> 16) & 1u)) >> 16;
    uint32_t nan = (v.u >> 16) | 0x40u;
    return (uint16_t)((v.u & 0x7fffffffu) > 0x7f800000u ? nan : rounded);
}
uint16_t dsi_fp16_from_f32(float value);
float dsi_fp16_to_f32(uint16_t value);

/* Elements [offset, offset + n) of a stored tensor to / from fp32. */
void dsi_cpu_load(const void *base, dsi_stype_t type, int64_t offset, int64_t n, float *out);
void dsi_cpu_store(void *base, dsi_stype_t type, int64_t offset, int64_t n, const float *in);

/* ---- values like training's ---------------------------------------------------------------------
 * A counter-based generator: deterministic from (seed, index), so a buffer
 * is filled the same way whatever its chunking. */
uint64_t dsi_rng_u64(uint64_t seed, uint64_t index);
/* Approximately normal (see backend/dsi_rng.h). */
float dsi_rng_normal(uint64_t seed, uint64_t index);
/* n values offset + N(0, stddev^2) (offset + |N| when `positive`). */
void dsi_cpu_fill_normal(void *base, dsi_stype_t type, int64_t n, float stddev, float offset,
                         int positive, uint64_t seed);
/* n integers uniform in [0, limit). */
void dsi_cpu_fill_index(int32_t *base, int64_t n, int64_t limit, uint64_t seed);

/* ---- kernels ------------------------------------------------------------------------------------
 * Rows of a flat elementwise kernel are processed in chunks of
 * DSI_CPU_CHUNK elements. */
#define DSI_CPU_CHUNK 2048

/* GEMM, row-major C[m,n] = op(A) op(B) with DS_GEMM_TRANS_* bits in
 * `trans` (A stored k x m when transposed, B stored n x k when transposed).
 * bf16 needs `sbgemm` (cblas_sbgemm) and `scratch` of scratch_rows x n
 * floats (the product is computed scratch_rows rows at a time in fp32 and
 * rounded to bf16). */
typedef void (*dsi_sbgemm_fn)(int order, int trans_a, int trans_b, int m, int n, int k, float alpha,
                              const uint16_t *a, int lda, const uint16_t *b, int ldb, float beta,
                              float *c, int ldc);
void dsi_cpu_gemm(dsi_stype_t type, unsigned trans, int64_t m, int64_t n, int64_t k, const void *a,
                  const void *b, void *c, dsi_sbgemm_fn sbgemm, float *scratch,
                  int64_t scratch_rows);

/* Softmax over rows of `cols` of scale * x; causal: row r is query
 * r mod cols and sees columns 0..query (later ones get 0).  Backward:
 * dx = scale * y (dy - sum(y dy)).  Scratch: 2 cols. */
void dsi_cpu_softmax_fwd(dsi_stype_t type, int64_t rows, int64_t cols, int causal, float scale,
                         const void *x, void *y, float *scratch);
void dsi_cpu_softmax_bwd(dsi_stype_t type, int64_t rows, int64_t cols, int causal, float scale,
                         const void *y, const void *dy, void *dx, float *scratch);

/* LayerNorm y = (x - mean) rstd gamma + beta, saving mean and rstd per row;
 * backward writes dx and adds to dgamma, dbeta.  RMSNorm likewise without
 * the mean and beta.  Scratch: 4 cols. */
void dsi_cpu_layernorm_fwd(dsi_stype_t type, int64_t rows, int64_t cols, const void *x,
                           const void *gamma, const void *beta, void *y, float *mean, float *rstd,
                           float *scratch);
void dsi_cpu_layernorm_bwd(dsi_stype_t type, int64_t rows, int64_t cols, const void *dy,
                           const void *x, const void *gamma, const float *mean, const float *rstd,
                           void *dx, float *dgamma, float *dbeta, float *scratch);
void dsi_cpu_rmsnorm_fwd(dsi_stype_t type, int64_t rows, int64_t cols, const void *x,
                         const void *gamma, void *y, float *rstd, float *scratch);
void dsi_cpu_rmsnorm_bwd(dsi_stype_t type, int64_t rows, int64_t cols, const void *dy,
                         const void *x, const void *gamma, const float *rstd, void *dx,
                         float *dgamma, float *scratch);

/* Activations on n elements (GeLU: the tanh approximation Megatron uses).
 * Backward: dx = dy act'(x).  Scratch: 3 DSI_CPU_CHUNK. */
float dsi_gelu(float x);
float dsi_gelu_grad(float x);
float dsi_silu(float x);
float dsi_silu_grad(float x);
void dsi_cpu_gelu_fwd(dsi_stype_t type, int64_t n, const void *x, void *y, float *scratch);
void dsi_cpu_gelu_bwd(dsi_stype_t type, int64_t n, const void *dy, const void *x, void *dx,
                      float *scratch);
void dsi_cpu_relu_fwd(dsi_stype_t type, int64_t n, const void *x, void *y, float *scratch);
void dsi_cpu_relu_bwd(dsi_stype_t type, int64_t n, const void *dy, const void *x, void *dx,
                      float *scratch);

/* Gated units: x is rows x 2 cols, [gate | up] per row; y = act(gate) up
 * (SwiGLU: act = SiLU; GeGLU: act = GeLU).  Backward: dx (rows x 2 cols)
 * from dy (rows x cols).  Scratch: 6 cols. */
void dsi_cpu_glu_fwd(dsi_stype_t type, int gelu, int64_t rows, int64_t cols, const void *x, void *y,
                     float *scratch);
void dsi_cpu_glu_bwd(dsi_stype_t type, int gelu, int64_t rows, int64_t cols, const void *dy,
                     const void *x, void *dx, float *scratch);

/* Dropout with probability p: the mask byte is 1 where kept, drawn from
 * (seed, element); kept values scale by 1 / (1 - p).  Scratch: 2 chunks. */
void dsi_cpu_dropout_fwd(dsi_stype_t type, int64_t n, float p, uint64_t seed, const void *x,
                         void *y, uint8_t *mask, float *scratch);
void dsi_cpu_dropout_bwd(dsi_stype_t type, int64_t n, float p, const void *dy, const uint8_t *mask,
                         void *dx, float *scratch);
/* out = residual + dropout(x + bias) over rows x cols; backward dx = dropout
 * of dout, dbias += column sums of dx (the residual's gradient is dout
 * itself: no work).  Scratch: 3 cols. */
void dsi_cpu_dropout_add_fwd(dsi_stype_t type, int64_t rows, int64_t cols, float p, uint64_t seed,
                             const void *x, const void *bias, const void *residual, void *out,
                             uint8_t *mask, float *scratch);
void dsi_cpu_dropout_add_bwd(dsi_stype_t type, int64_t rows, int64_t cols, float p,
                             const void *dout, const uint8_t *mask, void *dx, float *dbias,
                             float *scratch);
/* out = a + b (also the backward of a residual add: gradient accumulation).
 * Scratch: 3 chunks. */
void dsi_cpu_add(dsi_stype_t type, int64_t n, const void *a, const void *b, void *out,
                 float *scratch);

/* Rotary embedding, rotate-half convention, heads of `head_dim` columns:
 * for a row at position r, pair (i, i + head_dim/2) of each head rotates by
 * r theta_i, theta_i = 10000^(-2i/head_dim); cos_sin holds cos then sin,
 * rows x head_dim/2 each (dsi_cpu_rope_table).  Backward rotates by -angle.
 * Scratch: 2 cols.  The head width comes from dsi_rope_head_dim. */
void dsi_cpu_rope_table(int64_t rows, int64_t head_dim, float *cos_sin);
void dsi_cpu_rope(dsi_stype_t type, int backward, int64_t rows, int64_t cols, int64_t head_dim,
                  const float *cos_sin, const void *x, void *y, float *scratch);

/* Embedding: out[t] = table[ids[t]] (rows of `hidden`); backward
 * dtable[ids[t]] += dout[t] (fp32).  Scratch: 1 hidden. */
void dsi_cpu_embedding_fwd(dsi_stype_t type, int64_t tokens, int64_t hidden, const int32_t *ids,
                           const void *table, void *out);
void dsi_cpu_embedding_bwd(dsi_stype_t type, int64_t tokens, int64_t hidden, const int32_t *ids,
                           const void *dout, float *dtable, float *scratch);

/* Cross-entropy over rows of `vocab` logits: softmax (fp32, kept for the
 * backward) and loss[t] = log sum exp - logit[target]; backward dlogits =
 * (softmax - onehot(target)) dloss[t].  Scratch: 1 vocab. */
void dsi_cpu_cross_entropy_fwd(dsi_stype_t type, int64_t tokens, int64_t vocab, const void *logits,
                               const int32_t *targets, float *softmax, float *loss, float *scratch);
void dsi_cpu_cross_entropy_bwd(dsi_stype_t type, int64_t tokens, int64_t vocab,
                               const float *softmax, const int32_t *targets, const float *dloss,
                               void *dlogits, float *scratch);

/* AdamW step `step` (1-based) on n fp32 parameters; writes the training
 * dtype copy `low` when not NULL (stored as `low_type`). */
typedef struct dsi_adam {
    float lr, beta1, beta2, eps, weight_decay;
} dsi_adam_t;
void dsi_cpu_adam(int64_t n, int64_t step, const dsi_adam_t *hp, float *w, float *m, float *v,
                  const float *grad, void *low, dsi_stype_t low_type);

/* Max pool over a window of 3 (centred, stride 1, edges clamped) along each
 * row; saves the argmax offset (-1, 0, 1).  Backward routes dy to the
 * argmax.  Scratch: 3 cols. */
void dsi_cpu_pool_fwd(dsi_stype_t type, int64_t rows, int64_t cols, const void *x, void *y,
                      int8_t *argmax, float *scratch);
void dsi_cpu_pool_bwd(dsi_stype_t type, int64_t rows, int64_t cols, const void *dy,
                      const int8_t *argmax, void *dx, float *scratch);

/* x to E4M3 bytes scaled by its amax (written to *amax_p). */
/* MoE load-balancing loss (Switch/GShard, as Megatron-Core computes it):
 * forward sums the router probabilities p[rows, experts] and the routing
 * map per expert and returns coeff x sum_e P_e T_e; backward writes
 * dL/dp[r, e] = coeff x T_e. */
void dsi_cpu_moe_aux_loss_fwd(dsi_stype_t type, int64_t rows, int64_t experts, const void *probs,
                              const uint8_t *map, float *prob_sums, float *tokens, float *loss,
                              float *scratch);
void dsi_cpu_moe_aux_loss_bwd(dsi_stype_t type, int64_t rows, int64_t experts, const float *tokens,
                              void *dprobs, float *scratch);
void dsi_cpu_fp8_cast(dsi_stype_t type, int64_t n, const void *x, uint8_t *y, float *amax_p,
                      float *scratch);

/* Fused attention (cpu_attention.c): scratch floats of a pass, forward and
 * backward (buffers as dsi_kernel_plan.h lists them). */
int64_t dsi_cpu_attention_scratch(const ds_attention_shape_t *shape, int backward);
void dsi_cpu_attention_fwd(dsi_stype_t type, const ds_attention_shape_t *shape, int causal,
                           const void *q, const void *k, const void *v, void *o, float *lse,
                           float *scratch);
void dsi_cpu_attention_bwd(dsi_stype_t type, const ds_attention_shape_t *shape, int causal,
                           const void *dout, const void *q, const void *k, const void *v,
                           const void *o, const float *lse, void *dq, void *dk, void *dv,
                           float *scratch);

#endif /* DSI_CPU_H */
