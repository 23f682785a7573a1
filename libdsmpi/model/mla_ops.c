/*
 * Multi-head latent attention (DeepSeek-V2/V3) as Megatron-Core's
 * MLASelfAttention issues it: queries through a low-rank down projection
 * (replicated on the TP ranks), its RMSNorm and a column-parallel up
 * projection (or one projection without q_lora_rank); keys and values
 * through a replicated down projection to kv_lora_rank plus the shared rope
 * key, its RMSNorm and a column-parallel up projection to each head's
 * non-rope key and value; rope on the rope parts; the attention core; the
 * row-parallel output projection.
 *
 * The attention core runs with query/key heads of nope + rope and value
 * heads of v_head_dim: it is priced as heads of the mean width, which does
 * the same FLOPs (QK^T and PV together: 2 s^2 (d_qk + d_v)) with operands
 * of about the same size; one key shape stands for both products.
 */
#include "dsi_ops.h"

typedef struct mla_sizes {
    int64_t qk, v, rope, q_rank, kv_rank, heads, core_dim;
} mla_sizes_t;

int64_t dsi_mla_core_dim(const ds_model_info_t *info)
{
    return ((int64_t)info->head_dim + info->qk_rope_head_dim + info->v_head_dim + 1) / 2;
}

static mla_sizes_t sizes_of(const ds_model_info_t *info, const dsi_mla_shape_t *m)
{
    mla_sizes_t z;
    z.qk = (int64_t)info->head_dim + info->qk_rope_head_dim;
    z.v = info->v_head_dim;
    z.rope = info->qk_rope_head_dim;
    z.q_rank = info->q_lora_rank;
    z.kv_rank = info->kv_lora_rank;
    z.heads = m->heads;
    z.core_dim = dsi_mla_core_dim(info);
    return z;
}

static void tp_collective(dsi_op_list_t *list, const dsi_mla_shape_t *m, ds_comm_op_t op,
                          const char *label)
{
    dsi_ops_collective(list, op, DS_GROUP_TP, list->ctx->tp, label, m->act_bytes);
}

void dsi_mla_forward(dsi_op_list_t *list, const ds_model_info_t *info, const dsi_mla_shape_t *m)
{
    mla_sizes_t z = sizes_of(info, m);
    int64_t T = m->tokens;
    dsi_ops_elementwise(list, m->norm_op, "attn.norm", m->rows, m->h, 0, 8.0, 2.0, 0);
    if (m->sp)
        tp_collective(list, m, DS_COMM_ALLGATHER, "attn.tp.gather");
    if (z.q_rank > 0) {
        dsi_ops_gemm(list, "mla.q.down", T, z.q_rank, m->h, DS_GEMM_TRANS_B, 0);
        dsi_ops_elementwise(list, DS_OP_RMSNORM, "mla.q.norm", T, z.q_rank, 0, 8.0, 2.0, 0);
        dsi_ops_gemm(list, "mla.q.up", T, z.heads * z.qk, z.q_rank, DS_GEMM_TRANS_B, 0);
    } else {
        dsi_ops_gemm(list, "mla.q", T, z.heads * z.qk, m->h, DS_GEMM_TRANS_B, 0);
    }
    dsi_ops_gemm(list, "mla.kv.down", T, z.kv_rank + z.rope, m->h, DS_GEMM_TRANS_B, 0);
    dsi_ops_elementwise(list, DS_OP_RMSNORM, "mla.kv.norm", T, z.kv_rank, 0, 8.0, 2.0, 0);
    dsi_ops_gemm(list, "mla.kv.up", T, z.heads * (info->head_dim + z.v), z.kv_rank, DS_GEMM_TRANS_B,
                 0);
    dsi_ops_elementwise(list, DS_OP_ROPE, "attn.rope", T, (z.heads + 1) * z.rope, 0, 6.0, 2.0, 0);
    dsi_ops_attention_core(list, m, z.core_dim);
    dsi_ops_fp8_cast(list, "attn.proj.cast", T, z.heads * z.v);
    dsi_ops_gemm(list, "attn.proj", T, m->h, z.heads * z.v, DS_GEMM_TRANS_B, 0);
    tp_collective(list, m, m->sp ? DS_COMM_REDUCE_SCATTER : DS_COMM_ALLREDUCE, "attn.tp.reduce");
    dsi_ops_elementwise(list, m->dropout ? DS_OP_DROPOUT_ADD : DS_OP_ADD, "attn.residual", m->rows,
                        m->h, 0, 3.0, 3.0, 0);
}

/* A linear's backward: data gradient, weight gradient carrying its
 * parameters (out x in). */
static void linear_backward(dsi_op_list_t *list, const char *dgrad, const char *wgrad, int64_t T,
                            int64_t in, int64_t out)
{
    dsi_ops_gemm(list, dgrad, T, in, out, 0, 0);
    dsi_ops_gemm(list, wgrad, out, in, T, DS_GEMM_TRANS_A, out * in);
}

void dsi_mla_backward(dsi_op_list_t *list, const ds_model_info_t *info, const dsi_mla_shape_t *m)
{
    mla_sizes_t z = sizes_of(info, m);
    int64_t T = m->tokens;
    dsi_ops_elementwise(list, m->dropout ? DS_OP_DROPOUT_ADD : DS_OP_ADD, "attn.residual", m->rows,
                        m->h, 0, 2.0, 3.0, 0);
    if (m->sp)
        tp_collective(list, m, DS_COMM_ALLGATHER, "attn.tp.gather");
    dsi_ops_fp8_cast(list, "fp8.cast.grad", T, m->h);
    linear_backward(list, "attn.proj.dgrad", "attn.proj.wgrad", T, z.heads * z.v, m->h);
    dsi_ops_attention_core(list, m, z.core_dim);
    dsi_ops_elementwise(list, DS_OP_ROPE, "attn.rope", T, (z.heads + 1) * z.rope, 0, 6.0, 2.0, 0);
    linear_backward(list, "mla.kv.up.dgrad", "mla.kv.up.wgrad", T, z.kv_rank,
                    z.heads * (info->head_dim + z.v));
    dsi_ops_elementwise(list, DS_OP_RMSNORM, "mla.kv.norm", T, z.kv_rank, 0, 10.0, 3.0, z.kv_rank);
    linear_backward(list, "mla.kv.down.dgrad", "mla.kv.down.wgrad", T, m->h, z.kv_rank + z.rope);
    if (z.q_rank > 0) {
        linear_backward(list, "mla.q.up.dgrad", "mla.q.up.wgrad", T, z.q_rank, z.heads * z.qk);
        dsi_ops_elementwise(list, DS_OP_RMSNORM, "mla.q.norm", T, z.q_rank, 0, 10.0, 3.0, z.q_rank);
        linear_backward(list, "mla.q.down.dgrad", "mla.q.down.wgrad", T, m->h, z.q_rank);
    } else {
        linear_backward(list, "mla.q.dgrad", "mla.q.wgrad", T, m->h, z.heads * z.qk);
    }
    tp_collective(list, m, m->sp ? DS_COMM_REDUCE_SCATTER : DS_COMM_ALLREDUCE, "attn.tp.reduce");
    dsi_ops_elementwise(list, m->norm_op, "attn.norm", m->rows, m->h, 0, 10.0, 3.0, m->norm_params);
}
