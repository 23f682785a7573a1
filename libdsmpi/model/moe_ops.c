/*
 * The operators of an MoE layer's MLP part, as Megatron-Core's MoELayer
 * issues them with sequence parallelism: the pre-MLP norm; the router (a
 * hidden x experts GEMM, replicated on the TP ranks) and its softmax/top-k
 * over the experts; the tokens permuted into expert order (a row gather);
 * dispatch over the EP group (all-to-all of each token's top-k copies, or
 * with the allgather dispatcher an all-gather of the tokens); with etp > 1
 * an all-gather of the received tokens over the expert-TP group; the local
 * experts' fc1, activation and fc2 as grouped GEMMs (equal groups: a batched
 * GEMM over the rank's experts); the reverse path (reduce-scatter over etp,
 * combine, unpermute: the top-k copies gathered back and weighted); the
 * shared experts as a dense MLP split over tp; the residual add.
 *
 * Tokens per local expert: each EP rank sends rows x top-k copies, spread
 * over the E experts, so a rank's E/ep experts receive rows x top-k x ep / E
 * tokens each on average (x etp after the expert-TP gather).  The router is
 * not even: with ep > 1 the expert work is emitted for the mean rank and, as
 * DSI_EP_SLOWEST, for the rank whose experts get router-skew times the mean
 * (capped by the capacity factor when tokens beyond it are dropped).
 *
 * The auxiliary load-balancing loss is its own small operator (per-expert
 * sums of the probabilities and the routing map; backward its gradient).
 * Not priced: the all-reduce of its token counts over the TP group (one
 * number per expert), the router's fp32 casts and the routing-map exchange
 * of the allgather dispatcher (indices and probs, top-k numbers per token).
 *
 * Under fp8= the experts' grouped GEMMs run in FP8 as Transformer Engine's
 * grouped linear does in Megatron-Core: each expert's tokens padded to a
 * multiple of FP8_ALIGN_TOKENS (TE's Fp8Padding, Megatron-Core's
 * get_fp8_align_size for per-tensor scaling), fc1's input and fc2's input
 * cast to FP8 by kernels of their own (the permuted tokens and the
 * activation's output come from kernels that do not cast), in the backward
 * each GEMM's output gradient cast and transposed.  The router stays in the
 * training dtype.
 */
#include "dsi_ops.h"

#include <math.h>

typedef struct moe_sizes {
    int64_t experts, topk, ep, etp, local; /* local: experts on one EP rank */
    int64_t ffn, up;                       /* one expert's columns on an etp rank */
    int64_t mean, slowest;                 /* tokens per local expert */
    int64_t recv;                          /* tokens a rank receives (mean) before the etp gather */
    int64_t dispatch_bytes;                /* all-to-all buffer, or all-gather output */
    double dsize;
    bool fp8;                        /* the grouped GEMMs in FP8 */
    int64_t gemm_mean, gemm_slowest; /* tokens per local expert in the GEMMs (padded under fp8) */
} moe_sizes_t;

/* Rows of one expert's GEMM under FP8 with per-tensor scaling: cuBLASLt's
 * FP8 kernels need m, n and k multiples of 16, and TE pads each expert's
 * tokens to it. */
#define FP8_ALIGN_TOKENS 16
static int64_t fp8_padded(int64_t tokens)
{
    return (tokens + FP8_ALIGN_TOKENS - 1) / FP8_ALIGN_TOKENS * FP8_ALIGN_TOKENS;
}

static moe_sizes_t sizes_of(const dsi_op_list_t *list, const ds_model_info_t *info,
                            const dsi_moe_shape_t *sh)
{
    const dsi_shape_ctx_t *ctx = list->ctx;
    moe_sizes_t z;
    z.experts = info->num_experts;
    z.topk = ctx->moe_topk > 0 ? ctx->moe_topk : info->experts_per_token;
    z.ep = ctx->ep > 0 ? ctx->ep : 1;
    z.etp = ctx->etp > 0 ? ctx->etp : 1;
    z.local = z.experts / z.ep;
    z.ffn = info->moe_ffn_hidden_size / z.etp;
    z.up = z.ffn * (sh->gated ? 2 : 1);
    z.dsize = (double)ds_dtype_size(ctx->dtype);
    z.recv = sh->rows * z.topk;
    double mean =
        (double)sh->rows * (double)z.topk * (double)z.etp * (double)z.ep / (double)z.experts;
    double skew = ctx->router_skew > 0 ? ctx->router_skew : DS_ROUTER_SKEW_DEFAULT;
    if (ctx->moe_capacity > 0 && ctx->moe_capacity < skew)
        skew = ctx->moe_capacity; /* tokens beyond the capacity are dropped */
    z.mean = DSI_MAX((int64_t)llround(mean), 1);
    z.slowest = z.ep > 1 ? DSI_MAX((int64_t)llround(mean * skew), 1) : z.mean;
    z.fp8 = list->fp8;
    z.gemm_mean = z.fp8 ? fp8_padded(z.mean) : z.mean;
    z.gemm_slowest = z.fp8 ? fp8_padded(z.slowest) : z.slowest;
    z.dispatch_bytes = ctx->moe_dispatcher == DS_MOE_DISPATCH_ALLGATHER
                           ? z.ep * sh->rows * sh->h * (int64_t)z.dsize
                           : z.recv * sh->h * (int64_t)z.dsize;
    return z;
}

/* The last operator pushed, as the given EP role. */
static void set_role(dsi_op_list_t *list, dsi_ep_role_t role)
{
    if (list->count > 0 && list->status == DS_OK)
        list->ops[list->count - 1].ep_role = (uint8_t)role;
}

/* Expert work: grouped GEMM over the local experts with `tokens` each at
 * m (dims as a batched GEMM: m, n, k, groups), in FP8 under fp8=. */
static void expert_gemm(dsi_op_list_t *list, const moe_sizes_t *z, const char *label, bool rows_m,
                        int64_t a, int64_t b, unsigned trans)
{
    int64_t counts[2] = {z->gemm_mean, z->gemm_slowest};
    int copies = z->ep > 1 ? 2 : 1;
    bool fp8 = list->fp8;
    list->fp8 = z->fp8;
    for (int i = 0; i < copies; i++) {
        /* rows_m: tokens are the GEMM's m (data path); else its k (weight gradient) */
        if (rows_m)
            dsi_ops_grouped_gemm(list, label, counts[i], a, b, z->local, trans);
        else
            dsi_ops_grouped_gemm(list, label, a, b, counts[i], z->local, trans);
        if (copies == 2)
            set_role(list, i == 0 ? DSI_EP_MEAN : DSI_EP_SLOWEST);
    }
    list->fp8 = fp8;
}

/* Under fp8=: the local experts' padded tokens of `cols` columns cast to
 * FP8 before a grouped GEMM reads them (transposed too in the backward). */
static void expert_cast(dsi_op_list_t *list, const moe_sizes_t *z, const char *label, int64_t cols)
{
    if (!z->fp8)
        return;
    int64_t counts[2] = {z->gemm_mean, z->gemm_slowest};
    int copies = z->ep > 1 ? 2 : 1;
    bool fp8 = list->fp8;
    list->fp8 = true;
    for (int i = 0; i < copies; i++) {
        dsi_ops_fp8_cast(list, label, counts[i] * z->local, cols);
        if (copies == 2)
            set_role(list, i == 0 ? DSI_EP_MEAN : DSI_EP_SLOWEST);
    }
    list->fp8 = fp8;
}

static void expert_activation(dsi_op_list_t *list, const moe_sizes_t *z, const dsi_moe_shape_t *sh,
                              bool backward)
{
    int64_t counts[2] = {z->mean, z->slowest};
    int copies = z->ep > 1 ? 2 : 1;
    double flops = backward ? (sh->gated ? 10.0 : 12.0) : (sh->gated ? 6.0 : 8.0);
    double tensors = backward ? (sh->gated ? 5.0 : 3.0) : (sh->gated ? 3.0 : 2.0);
    for (int i = 0; i < copies; i++) {
        dsi_ops_elementwise(list, sh->act_op, "moe.expert.act", counts[i] * z->local, z->ffn, 0,
                            flops, tensors, 0);
        if (copies == 2)
            set_role(list, i == 0 ? DSI_EP_MEAN : DSI_EP_SLOWEST);
    }
}

/* Token rows moved between token order and expert order: a gather of the
 * top-k copies (forward permute, backward of the unpermute) or its
 * scatter-add, as the embedding's row lookup and its gradient do. */
static void permute(dsi_op_list_t *list, const moe_sizes_t *z, const dsi_moe_shape_t *sh,
                    const char *label, int64_t table_rows)
{
    dsi_ops_elementwise(list, DS_OP_EMBEDDING, label, z->recv, sh->h, 0, 1.0,
                        list->pass == DS_PASS_BACKWARD ? 3.0 : 2.0, 0);
    if (list->status == DS_OK && list->count > 0)
        list->ops[list->count - 1].key.dims[2] = table_rows;
}

/* Toward the experts (dispatch forward, combine backward) or back (combine
 * forward, dispatch backward). */
static void exchange(dsi_op_list_t *list, const moe_sizes_t *z, bool toward_experts,
                     const char *label)
{
    ds_comm_op_t op = DS_COMM_ALLTOALL;
    if (list->ctx->moe_dispatcher == DS_MOE_DISPATCH_ALLGATHER)
        op = toward_experts ? DS_COMM_ALLGATHER : DS_COMM_REDUCE_SCATTER;
    dsi_ops_collective(list, op, DS_GROUP_EP, (int)z->ep, label, z->dispatch_bytes);
}

/* The expert-TP group (the TP ranks when etp = tp): the received tokens
 * gathered before the experts, their outputs reduce-scattered after. */
static void expert_tp(dsi_op_list_t *list, const moe_sizes_t *z, const dsi_moe_shape_t *sh,
                      bool gather, const char *label)
{
    int64_t bytes = z->etp * z->recv * sh->h * (int64_t)z->dsize;
    dsi_ops_collective(list, gather ? DS_COMM_ALLGATHER : DS_COMM_REDUCE_SCATTER, DS_GROUP_TP,
                       (int)z->etp, label, bytes);
}

/* Shared experts: a dense MLP over the sequence, split over tp. */
static void shared_forward(dsi_op_list_t *list, const ds_model_info_t *info,
                           const dsi_moe_shape_t *sh)
{
    int tp = list->ctx->tp;
    int64_t ffn = info->shared_ffn_hidden_size / tp, up = ffn * (sh->gated ? 2 : 1);
    if (info->shared_ffn_hidden_size == 0)
        return;
    if (sh->sp)
        dsi_ops_collective(list, DS_COMM_ALLGATHER, DS_GROUP_TP, tp, "moe.shared.tp.gather",
                           sh->act_bytes);
    dsi_ops_gemm(list, "moe.shared.fc1", sh->tokens, up, sh->h, DS_GEMM_TRANS_B, 0);
    dsi_ops_elementwise(list, sh->act_op, "moe.shared.act", sh->tokens, ffn, 0,
                        sh->gated ? 6.0 : 8.0, sh->gated ? 3.0 : 2.0, 0);
    dsi_ops_fp8_cast(list, "moe.shared.fc2.cast", sh->tokens, ffn);
    dsi_ops_gemm(list, "moe.shared.fc2", sh->tokens, sh->h, ffn, DS_GEMM_TRANS_B, 0);
    dsi_ops_collective(list, sh->sp ? DS_COMM_REDUCE_SCATTER : DS_COMM_ALLREDUCE, DS_GROUP_TP, tp,
                       "moe.shared.tp.reduce", sh->act_bytes);
    if (info->shared_expert_gate)
        dsi_ops_gemm(list, "moe.shared.gate", sh->rows, 1, sh->h, DS_GEMM_TRANS_B, 0);
}

static void shared_backward(dsi_op_list_t *list, const ds_model_info_t *info,
                            const dsi_moe_shape_t *sh)
{
    int tp = list->ctx->tp;
    int64_t ffn = info->shared_ffn_hidden_size / tp, up = ffn * (sh->gated ? 2 : 1);
    int64_t bias = info->linear_bias;
    if (info->shared_ffn_hidden_size == 0)
        return;
    if (info->shared_expert_gate)
        dsi_ops_gemm(list, "moe.shared.gate.wgrad", 1, sh->h, sh->rows, DS_GEMM_TRANS_A, sh->h);
    if (sh->sp)
        dsi_ops_collective(list, DS_COMM_ALLGATHER, DS_GROUP_TP, tp, "moe.shared.tp.gather",
                           sh->act_bytes);
    dsi_ops_fp8_cast(list, "fp8.cast.grad", sh->tokens, sh->h);
    dsi_ops_gemm(list, "moe.shared.fc2.dgrad", sh->tokens, ffn, sh->h, 0, 0);
    dsi_ops_gemm(list, "moe.shared.fc2.wgrad", sh->h, ffn, sh->tokens, DS_GEMM_TRANS_A,
                 sh->h * ffn + bias * sh->h);
    dsi_ops_elementwise(list, sh->act_op, "moe.shared.act", sh->tokens, ffn, 0,
                        sh->gated ? 10.0 : 12.0, sh->gated ? 5.0 : 3.0, 0);
    if (sh->sp) /* the input again, for the weight gradient */
        dsi_ops_collective(list, DS_COMM_ALLGATHER, DS_GROUP_TP, tp, "moe.shared.tp.gather",
                           sh->act_bytes);
    dsi_ops_fp8_cast(list, "fp8.cast.grad", sh->tokens, up);
    dsi_ops_gemm(list, "moe.shared.fc1.dgrad", sh->tokens, sh->h, up, 0, 0);
    dsi_ops_collective(list, sh->sp ? DS_COMM_REDUCE_SCATTER : DS_COMM_ALLREDUCE, DS_GROUP_TP, tp,
                       "moe.shared.tp.reduce", sh->act_bytes);
    dsi_ops_gemm(list, "moe.shared.fc1.wgrad", up, sh->h, sh->tokens, DS_GEMM_TRANS_A,
                 up * sh->h + bias * up);
}

void dsi_moe_forward(dsi_op_list_t *list, const ds_model_info_t *info, const dsi_moe_shape_t *sh)
{
    moe_sizes_t z = sizes_of(list, info, sh);
    bool fp8 = list->fp8;
    bool allgather = list->ctx->moe_dispatcher == DS_MOE_DISPATCH_ALLGATHER;
    dsi_ops_elementwise(list, sh->norm_op, "moe.norm", sh->rows, sh->h, 0, 8.0, 2.0, 0);
    list->fp8 = false; /* the router stays in the training dtype; expert_gemm sets FP8 */
    dsi_ops_gemm(list, "moe.router", sh->rows, z.experts, sh->h, DS_GEMM_TRANS_B, 0);
    dsi_ops_elementwise(list, DS_OP_SOFTMAX, "moe.router.topk", sh->rows, z.experts, 0, 5.0, 2.0,
                        0);
    /* probabilities and the one-byte routing map read, per-expert sums out */
    dsi_ops_elementwise(list, DS_OP_MOE_AUX_LOSS, "moe.aux-loss", sh->rows, z.experts, 0, 2.0, 1.5,
                        0);
    if (!allgather)
        permute(list, &z, sh, "moe.permute", sh->rows);
    exchange(list, &z, true, "moe.dispatch");
    if (allgather)
        permute(list, &z, sh, "moe.permute", z.ep * sh->rows);
    expert_tp(list, &z, sh, true, "moe.etp.gather");
    expert_cast(list, &z, "moe.expert.fc1.cast", sh->h);
    expert_gemm(list, &z, "moe.expert.fc1", true, z.up, sh->h, DS_GEMM_TRANS_B);
    expert_activation(list, &z, sh, false);
    expert_cast(list, &z, "moe.expert.fc2.cast", z.ffn);
    expert_gemm(list, &z, "moe.expert.fc2", true, sh->h, z.ffn, DS_GEMM_TRANS_B);
    expert_tp(list, &z, sh, false, "moe.etp.reduce");
    if (allgather)
        permute(list, &z, sh, "moe.unpermute", z.recv);
    exchange(list, &z, false, "moe.combine");
    if (!allgather)
        permute(list, &z, sh, "moe.unpermute", z.recv);
    list->fp8 = fp8;
    shared_forward(list, info, sh);
    dsi_ops_elementwise(list, sh->dropout ? DS_OP_DROPOUT_ADD : DS_OP_ADD, "moe.residual", sh->rows,
                        sh->h, 0, 3.0, 3.0, 0);
}

void dsi_moe_backward(dsi_op_list_t *list, const ds_model_info_t *info, const dsi_moe_shape_t *sh)
{
    moe_sizes_t z = sizes_of(list, info, sh);
    bool fp8 = list->fp8;
    bool allgather = list->ctx->moe_dispatcher == DS_MOE_DISPATCH_ALLGATHER;
    dsi_ops_elementwise(list, sh->dropout ? DS_OP_DROPOUT_ADD : DS_OP_ADD, "moe.residual", sh->rows,
                        sh->h, 0, 2.0, 3.0, 0);
    shared_backward(list, info, sh);
    list->fp8 = false;
    if (!allgather)
        permute(list, &z, sh, "moe.unpermute", z.recv);
    exchange(list, &z, true, "moe.combine");
    if (allgather)
        permute(list, &z, sh, "moe.unpermute", z.recv);
    expert_tp(list, &z, sh, true, "moe.etp.gather");
    /* Expert weight gradients carry no grad_params: they are reduced over
     * the expert-data-parallel group, not with the dense buckets. */
    expert_cast(list, &z, "moe.expert.fc2.cast.grad", sh->h);
    expert_gemm(list, &z, "moe.expert.fc2.dgrad", true, z.ffn, sh->h, 0);
    expert_gemm(list, &z, "moe.expert.fc2.wgrad", false, sh->h, z.ffn, DS_GEMM_TRANS_A);
    expert_activation(list, &z, sh, true);
    expert_cast(list, &z, "moe.expert.fc1.cast.grad", z.up);
    expert_gemm(list, &z, "moe.expert.fc1.dgrad", true, sh->h, z.up, 0);
    expert_gemm(list, &z, "moe.expert.fc1.wgrad", false, z.up, sh->h, DS_GEMM_TRANS_A);
    expert_tp(list, &z, sh, false, "moe.etp.reduce");
    if (allgather)
        permute(list, &z, sh, "moe.permute", z.ep * sh->rows);
    exchange(list, &z, false, "moe.dispatch");
    if (!allgather)
        permute(list, &z, sh, "moe.permute", sh->rows);
    dsi_ops_elementwise(list, DS_OP_MOE_AUX_LOSS, "moe.aux-loss", sh->rows, z.experts, 0, 1.0, 1.0,
                        0);
    dsi_ops_elementwise(list, DS_OP_SOFTMAX, "moe.router.topk", sh->rows, z.experts, 0, 4.0, 3.0,
                        0);
    dsi_ops_gemm(list, "moe.router.dgrad", sh->rows, sh->h, z.experts, 0, 0);
    dsi_ops_gemm(list, "moe.router.wgrad", z.experts, sh->h, sh->rows, DS_GEMM_TRANS_A,
                 z.experts * sh->h);
    list->fp8 = fp8;
    dsi_ops_elementwise(list, sh->norm_op, "moe.norm", sh->rows, sh->h, 0, 10.0, 3.0,
                        sh->norm_params);
}
