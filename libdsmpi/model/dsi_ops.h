/* Private to the model module: the operator list a layer pass fills, and the
 * emitters the dense layer (ops.c) and the MoE layer (moe_ops.c) share. */
#ifndef DSI_OPS_H
#define DSI_OPS_H

#include "dsi_model.h"

typedef struct dsi_op_list {
    dsi_op_t *ops;
    size_t count;
    size_t max;
    const dsi_shape_ctx_t *ctx;
    ds_pass_t pass; /* the pass of operators being appended */
    ds_status_t status;
    bool fp8; /* GEMMs in FP8: the transformer layers' linears under fp8= */
} dsi_op_list_t;

/* The MLP part of an MoE layer as the dense layer sees it: tokens of the
 * micro-batch (tokens, this rank's rows with SP), widths, and what the MLP
 * around it does. */
typedef struct dsi_moe_shape {
    int64_t tokens, rows, h;
    int64_t act_bytes; /* a [tokens, h] activation */
    bool sp, gated, dropout;
    ds_op_t norm_op, act_op;
    int64_t norm_params;
} dsi_moe_shape_t;

dsi_op_t *dsi_ops_push(dsi_op_list_t *list, const char *label);
void dsi_ops_gemm(dsi_op_list_t *list, const char *label, int64_t m, int64_t n, int64_t k,
                  unsigned trans, int64_t grad_params);
/* A grouped GEMM (the experts'): `groups` GEMMs of m x n x k as one batched
 * key, in FP8 when the list is. */
void dsi_ops_grouped_gemm(dsi_op_list_t *list, const char *label, int64_t m, int64_t n, int64_t k,
                          int64_t groups, unsigned trans);
void dsi_ops_elementwise(dsi_op_list_t *list, ds_op_t kind, const char *label, int64_t rows,
                         int64_t cols, unsigned variant, double flops_per_element, double tensors,
                         int64_t grad_params);
/* A collective of `group` (size `size`; none when size is 1). */
void dsi_ops_collective(dsi_op_list_t *list, ds_comm_op_t primitive, ds_group_t group, int size,
                        const char *label, int64_t bytes);
void dsi_ops_fp8_cast(dsi_op_list_t *list, const char *label, int64_t rows, int64_t cols);

/* Multi-head latent attention's view of a layer pass (mla_ops.c). */
typedef struct dsi_mla_shape {
    int64_t b, s, tokens, rows, h;
    int64_t heads;     /* query heads on this rank */
    int64_t act_bytes; /* a [tokens, h] activation */
    bool sp, causal, dropout, flash;
    ds_op_t norm_op;
    int64_t norm_params;
} dsi_mla_shape_t;

/* The attention core (explicit softmax or fused) over `heads` heads of
 * width `head_dim`, both key/value and query heads, in the list's pass. */
void dsi_ops_attention_core(dsi_op_list_t *list, const dsi_mla_shape_t *m, int64_t head_dim);
/* The head width the attention core of latent attention is priced at. */
int64_t dsi_mla_core_dim(const ds_model_info_t *info);
void dsi_mla_forward(dsi_op_list_t *list, const ds_model_info_t *info, const dsi_mla_shape_t *m);
void dsi_mla_backward(dsi_op_list_t *list, const ds_model_info_t *info, const dsi_mla_shape_t *m);

/* The MoE layer's MLP part (moe_ops.c): router, dispatch, experts, combine,
 * shared experts; forward, or backward in reverse. */
void dsi_moe_forward(dsi_op_list_t *list, const ds_model_info_t *info, const dsi_moe_shape_t *sh);
void dsi_moe_backward(dsi_op_list_t *list, const ds_model_info_t *info, const dsi_moe_shape_t *sh);

#endif /* DSI_OPS_H */
