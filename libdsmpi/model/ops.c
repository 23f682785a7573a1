/*
 * The operators of one layer pass, in the order Megatron-LM issues them,
 * with shapes after the tensor- and sequence-parallel split.
 *
 * Conventions: tokens T = mbs x seq; with sequence parallelism the layer's
 * elementwise work runs on T/tp tokens and the TP collectives become
 * all-gather / reduce-scatter.  GEMMs are row-major C[m,n] = op(A) op(B):
 * forward y = x W^T is (m=T, n=out, k=in, B transposed); backward data
 * dx = dy W is (m=T, n=in, k=out); backward weight dW = dy^T x is
 * (m=out, n=in, k=T, A transposed).  A collective's bytes are the full buffer
 * (the nccl-tests "size": all-gather output, reduce-scatter input).
 */
#include "dsi_ops.h"

#include <string.h>

typedef dsi_op_list_t op_list_t;

static dsi_op_t *push(op_list_t *list, const char *label)
{
    if (list->count == list->max) {
        if (list->status == DS_OK)
            list->status =
                DSI_ERROR(DS_ERR_INTERNAL, "more than %zu operators in one layer pass", list->max);
        return NULL;
    }
    dsi_op_t *op = &list->ops[list->count++];
    memset(op, 0, sizeof(*op));
    op->key.pass = (uint8_t)list->pass;
    op->key.dtype = (uint8_t)list->ctx->dtype;
    op->label = label;
    return op;
}

static double dsize(const op_list_t *list)
{
    return (double)ds_dtype_size(list->ctx->dtype);
}

static void gemm(op_list_t *list, const char *label, int64_t m, int64_t n, int64_t k,
                 unsigned trans, int64_t grad_params)
{
    dsi_op_t *op = push(list, label);
    if (op == NULL)
        return;
    op->key.kind = DS_EVENT_COMPUTE;
    op->key.op = DS_OP_GEMM;
    op->key.variant = (uint8_t)trans;
    op->key.dims[0] = m;
    op->key.dims[1] = n;
    op->key.dims[2] = k;
    op->flops = 2.0 * (double)m * (double)n * (double)k;
    /* FP8: one-byte operands, the output in the training dtype. */
    double operand = list->fp8 ? 1.0 : dsize(list);
    if (list->fp8)
        op->key.dtype = DS_DTYPE_FP8;
    op->bytes = operand * ((double)m * k + (double)k * n) + dsize(list) * (double)m * n;
    op->grad_params = grad_params;
}

/* Under fp8=: a tensor cast to FP8 before a GEMM that reads it, where
 * Transformer Engine does not fuse the cast into the kernel that made it
 * (the norms before qkv and fc1, the activation before fc2 do): the
 * attention output in the forward, every linear's output gradient in the
 * backward (cast and transposed for the weight gradient).  Reads the
 * tensor twice (amax, then the cast), writes it in one byte (and its
 * transpose backward). */
static void fp8_cast(op_list_t *list, const char *label, int64_t rows, int64_t cols)
{
    if (!list->fp8)
        return;
    dsi_op_t *op = push(list, label);
    if (op == NULL)
        return;
    op->key.kind = DS_EVENT_COMPUTE;
    op->key.op = DS_OP_FP8_CAST;
    op->key.dims[0] = rows;
    op->key.dims[1] = cols;
    double elements = (double)rows * (double)cols;
    bool transpose = list->pass == DS_PASS_BACKWARD;
    op->flops = 3.0 * elements;
    op->bytes = elements * (2.0 * dsize(list) + (transpose ? 2.0 : 1.0));
}

static void typed_batched_gemm(op_list_t *list, const char *label, int64_t m, int64_t n, int64_t k,
                               int64_t batch, unsigned trans, bool fp8)
{
    dsi_op_t *op = push(list, label);
    if (op == NULL)
        return;
    op->key.kind = DS_EVENT_COMPUTE;
    op->key.op = DS_OP_BATCHED_GEMM;
    op->key.variant = (uint8_t)trans;
    op->key.dims[0] = m;
    op->key.dims[1] = n;
    op->key.dims[2] = k;
    op->key.dims[3] = batch;
    op->flops = 2.0 * (double)m * (double)n * (double)k * (double)batch;
    /* FP8 (the experts' grouped GEMMs): one-byte operands, the output in the training dtype. */
    double operand = fp8 ? 1.0 : dsize(list);
    if (fp8)
        op->key.dtype = DS_DTYPE_FP8;
    op->bytes =
        (double)batch * (operand * ((double)m * k + (double)k * n) + dsize(list) * (double)m * n);
}

/* Attention's batched GEMMs: in the training dtype under fp8= too (TE keeps
 * attention in bf16). */
static void batched_gemm(op_list_t *list, const char *label, int64_t m, int64_t n, int64_t k,
                         int64_t batch, unsigned trans)
{
    typed_batched_gemm(list, label, m, n, k, batch, trans, false);
}

/* Elementwise and reduction operators: `flops_per_element` and the number of
 * tensors of the output's size read and written give the roofline inputs. */
static void elementwise(op_list_t *list, ds_op_t kind, const char *label, int64_t rows,
                        int64_t cols, unsigned variant, double flops_per_element, double tensors,
                        int64_t grad_params)
{
    dsi_op_t *op = push(list, label);
    if (op == NULL)
        return;
    op->key.kind = DS_EVENT_COMPUTE;
    op->key.op = (uint8_t)kind;
    op->key.variant = (uint8_t)variant;
    op->key.dims[0] = rows;
    op->key.dims[1] = cols;
    double elements = (double)rows * (double)cols;
    op->flops = flops_per_element * elements;
    op->bytes = tensors * elements * dsize(list);
    /* A dropout keeps its mask, one byte per element, written forward and
     * read backward (PyTorch's and the backends' kernels alike). */
    if (kind == DS_OP_DROPOUT || kind == DS_OP_DROPOUT_ADD)
        op->bytes += elements;
    op->grad_params = grad_params;
}

static void tp_collective(op_list_t *list, ds_comm_op_t primitive, const char *label, int64_t bytes,
                          ds_dtype_t dtype)
{
    if (list->ctx->tp == 1)
        return;
    dsi_op_t *op = push(list, label);
    if (op == NULL)
        return;
    op->key.kind = DS_EVENT_COMM;
    op->key.op = (uint8_t)primitive;
    op->key.dtype = (uint8_t)dtype;
    op->key.group = DS_GROUP_TP;
    op->key.group_size = list->ctx->tp;
    op->key.dims[0] = bytes;
    op->bytes = (double)bytes;
}

/* ---- transformer layers ----------------------------------------------------- */

typedef struct shape {
    int64_t b, s, t;     /* micro-batch, sequence, tensor-parallel degree */
    int64_t tokens;      /* b * s */
    int64_t rows;        /* tokens of elementwise work: tokens / t with SP */
    int64_t h, d, q, kv; /* hidden, head dim, q heads and kv heads on this rank */
    int64_t ffn;         /* MLP columns on this rank */
    int64_t act_bytes;   /* bytes of a [tokens, h] activation */
    bool sp, gated, causal, dropout, rope, bias;
    bool flash; /* attention as one fused operator */
    bool moe;   /* the MLP is a mixture of experts (moe_ops.c) */
} shape_t;

static ds_op_t norm_op(const ds_model_info_t *info)
{
    return info->norm == DS_NORM_RMSNORM ? DS_OP_RMSNORM : DS_OP_LAYERNORM;
}

static ds_op_t activation_op(const ds_model_info_t *info)
{
    switch (info->activation) {
    case DS_ACT_RELU: return DS_OP_RELU;
    case DS_ACT_SWIGLU: return DS_OP_SWIGLU;
    case DS_ACT_GEGLU: return DS_OP_GEGLU;
    case DS_ACT_GELU: break;
    }
    return DS_OP_GELU;
}

static int64_t norm_param_count(const ds_model_info_t *info)
{
    return info->norm == DS_NORM_LAYERNORM ? 2LL * info->hidden_size : info->hidden_size;
}

static shape_t make_shape(const ds_model_info_t *info, const dsi_shape_ctx_t *ctx, int64_t seq,
                          bool causal)
{
    shape_t sh;
    sh.b = ctx->mbs;
    sh.s = ctx->cp > 1 ? seq / ctx->cp : seq; /* context parallelism: this rank's tokens */
    sh.t = ctx->tp;
    sh.tokens = sh.b * sh.s;
    sh.sp = ctx->sp && ctx->tp > 1;
    sh.rows = sh.sp ? sh.tokens / sh.t : sh.tokens;
    sh.h = info->hidden_size;
    sh.d = info->head_dim;
    sh.q = info->num_heads / sh.t;
    sh.kv = info->num_kv_heads >= sh.t ? info->num_kv_heads / sh.t : 1; /* replicated kv heads */
    sh.gated = info->activation == DS_ACT_SWIGLU || info->activation == DS_ACT_GEGLU;
    sh.ffn = info->ffn_hidden_size / sh.t;
    sh.act_bytes = sh.tokens * sh.h * (int64_t)ds_dtype_size(ctx->dtype);
    sh.causal = causal;
    sh.dropout = info->dropout != 0;
    sh.rope = !info->learned_positions && info->arch != DS_ARCH_ENCODER_DECODER;
    sh.bias = info->linear_bias != 0;
    sh.flash = ctx->flash != 0;
    sh.moe = false;
    return sh;
}

/* Entering a tensor-parallel region: all-gather the sequence (SP) in forward. */
static void tp_enter_forward(op_list_t *list, const shape_t *sh, const char *label)
{
    if (sh->sp)
        tp_collective(list, DS_COMM_ALLGATHER, label, sh->act_bytes, list->ctx->dtype);
}

/* Leaving it: all-reduce, or reduce-scatter with SP. */
static void tp_exit(op_list_t *list, const shape_t *sh, const char *label)
{
    tp_collective(list, sh->sp ? DS_COMM_REDUCE_SCATTER : DS_COMM_ALLREDUCE, label, sh->act_bytes,
                  list->ctx->dtype);
}

/* Query-key pairs a causal mask leaves visible (aligned at the end). */
static double visible_pairs(int64_t seq, int64_t kv_seq, bool causal)
{
    if (!causal)
        return (double)seq * (double)kv_seq;
    double pairs = 0.0;
    for (int64_t i = 0; i < seq; i++) {
        int64_t end = i + 1 + kv_seq - seq;
        pairs += (double)(end < 0 ? 0 : end > kv_seq ? kv_seq : end);
    }
    return pairs;
}

/* Fused attention: one operator per pass.  FLOPs as FlashAttention counts
 * them (forward QK^T and PV, 4 d per visible pair; backward 2.5 times that:
 * the scores again, dV, dP, dQ, dK); memory traffic Q, K, V, O and their
 * gradients once, the log-sum-exp per query, no scores. */
static void flash_attention(op_list_t *list, const shape_t *sh, int64_t kv_seq)
{
    dsi_op_t *op = push(list, list->pass == DS_PASS_BACKWARD ? "attn.flash.bwd" : "attn.flash");
    if (op == NULL)
        return;
    ds_attention_shape_t a = {sh->b, sh->q, sh->kv, sh->s, kv_seq, sh->d};
    op->key.kind = DS_EVENT_COMPUTE;
    op->key.op = DS_OP_FLASH_ATTENTION;
    op->key.variant = sh->causal ? 1 : 0;
    ds_attention_shape_set(&op->key, &a);
    bool bwd = list->pass == DS_PASS_BACKWARD;
    double heads = (double)sh->b * (double)sh->q;
    op->flops =
        (bwd ? 10.0 : 4.0) * (double)sh->d * heads * visible_pairs(sh->s, kv_seq, sh->causal);
    double q_side = heads * (double)sh->s * (double)sh->d;
    double kv_side = (double)sh->b * (double)sh->kv * (double)kv_seq * (double)sh->d;
    op->bytes = dsize(list) * (bwd ? 4.0 * (q_side + kv_side) : 2.0 * (q_side + kv_side)) +
                4.0 * heads * (double)sh->s;
}

/* ---- context parallelism (Megatron-Core with Transformer Engine) ----------------
 * A rank holds seq / cp tokens: chunks r and 2 cp - 1 - r of the 2 cp
 * chunks of c = seq / (2 cp) tokens, so that under the causal mask every
 * rank has the same work. */

static void cp_comm(op_list_t *list, ds_comm_op_t primitive, const char *label, int64_t bytes)
{
    dsi_op_t *op = push(list, label);
    if (op == NULL)
        return;
    op->key.kind = DS_EVENT_COMM;
    op->key.op = (uint8_t)primitive;
    op->key.group = DS_GROUP_CP;
    bool ring = primitive == DS_COMM_SENDRECV;
    /* A ring step sends to the next rank while receiving from the previous
     * one (TE's batched isend/irecv). */
    op->key.group_size = ring ? 2 : list->ctx->cp;
    op->key.flags = ring ? DS_COMM_FLAG_BATCHED : 0;
    op->key.dims[0] = bytes;
    op->bytes = (double)bytes;
}

/* The attention of step `step` of the ring (TE's AttnFuncWithCPAndKVP2P):
 * step 0 the local queries against the local K/V, causal; a block from an
 * earlier rank is seen whole by the queries but only its first chunk is
 * needed (2c queries x c keys), a block from a later rank only by the second
 * local chunk (c x 2c): the same pairs and FLOPs, one key (2c x c) stands for
 * both.  Without the causal mask every step is 2c x 2c. */
static void cp_ring_step(op_list_t *list, const shape_t *sh, int step)
{
    if (!sh->causal || step == 0) {
        flash_attention(list, sh, sh->s);
        return;
    }
    shape_t block = *sh;
    block.causal = false;
    flash_attention(list, &block, sh->s / 2);
}

/* p2p: cp steps; the K/V block of step i + 1 travels while step i computes.
 * Backward: the ring again for K/V, their gradients going around with them
 * (accumulated on the way) and a last hop home, not hidden. */
static void cp_ring(op_list_t *list, const shape_t *sh)
{
    int cp = list->ctx->cp;
    int64_t block = 2 * sh->b * sh->s * sh->kv * sh->d * (int64_t)dsize(list);
    bool bwd = list->pass == DS_PASS_BACKWARD;
    for (int step = 0; step < cp; step++) {
        bool kv = step < cp - 1, dkv = bwd && step > 0;
        if (kv || dkv)
            cp_comm(list, DS_COMM_SENDRECV,
                    kv && dkv ? "attn.cp.kv-dkv"
                    : kv      ? "attn.cp.kv"
                              : "attn.cp.dkv",
                    (kv ? block : 0) + (dkv ? block : 0));
        cp_ring_step(list, sh, step);
    }
    if (bwd)
        cp_comm(list, DS_COMM_SENDRECV, "attn.cp.dkv", block);
}

/* a2a (Ulysses): heads scattered, the sequence gathered: attention of the
 * whole sequence on heads / cp, between two all-to-alls. */
static void cp_all_to_all(op_list_t *list, const shape_t *sh)
{
    int cp = list->ctx->cp;
    int64_t token_bytes = sh->b * sh->s * sh->d * (int64_t)dsize(list);
    int64_t qkv = token_bytes * (sh->q + 2 * sh->kv), out = token_bytes * sh->q;
    bool bwd = list->pass == DS_PASS_BACKWARD;
    shape_t whole = *sh;
    whole.s = sh->s * cp;
    whole.q = sh->q / cp;
    whole.kv = sh->kv / cp;
    cp_comm(list, DS_COMM_ALLTOALL, "attn.cp.a2a", bwd ? out : qkv);
    flash_attention(list, &whole, whole.s);
    cp_comm(list, DS_COMM_ALLTOALL, "attn.cp.a2a", bwd ? qkv : out);
}

/* allgather (TE's AttnFuncWithCPAndKVAllGather): K/V of the whole sequence
 * gathered, each local chunk against the keys up to its end (causal); the
 * gradients of K/V reduce-scattered.  Rank r's chunks see (r + 1) c and
 * (2 cp - r) c keys; every rank's sum is that of r = cp - 1, the key used. */
static void cp_all_gather(op_list_t *list, const shape_t *sh)
{
    int cp = list->ctx->cp;
    int64_t kv_bytes = 2 * sh->b * sh->s * cp * sh->kv * sh->d * (int64_t)dsize(list);
    bool bwd = list->pass == DS_PASS_BACKWARD;
    cp_comm(list, DS_COMM_ALLGATHER, "attn.cp.kv-gather", kv_bytes);
    if (sh->causal) {
        shape_t chunk = *sh;
        chunk.s = sh->s / 2;
        flash_attention(list, &chunk, chunk.s * cp);
        flash_attention(list, &chunk, chunk.s * (cp + 1));
    } else {
        flash_attention(list, sh, sh->s * cp);
    }
    if (bwd)
        cp_comm(list, DS_COMM_REDUCE_SCATTER, "attn.cp.dkv-scatter", kv_bytes);
}

static void cp_attention(op_list_t *list, const shape_t *sh)
{
    switch (list->ctx->cp_comm) {
    case DS_CP_COMM_A2A: cp_all_to_all(list, sh); return;
    case DS_CP_COMM_ALLGATHER: cp_all_gather(list, sh); return;
    case DS_CP_COMM_P2P: break;
    }
    cp_ring(list, sh);
}

/* Core attention: scores, softmax, dropout, context. */
static void attention_core_forward(op_list_t *list, const shape_t *sh, int64_t kv_seq)
{
    if (sh->flash && list->ctx->cp > 1) {
        cp_attention(list, sh);
        return;
    }
    if (sh->flash) {
        flash_attention(list, sh, kv_seq);
        return;
    }
    int64_t batch = sh->b * sh->q;
    batched_gemm(list, "attn.scores", sh->s, kv_seq, sh->d, batch, DS_GEMM_TRANS_B);
    elementwise(list, DS_OP_SOFTMAX, "attn.softmax", batch * sh->s, kv_seq, sh->causal ? 1 : 0, 5.0,
                2.0, 0);
    if (sh->dropout)
        elementwise(list, DS_OP_DROPOUT, "attn.dropout", batch * sh->s, kv_seq, 0, 2.0, 2.0, 0);
    batched_gemm(list, "attn.context", sh->s, sh->d, kv_seq, batch, 0);
}

static void attention_core_backward(op_list_t *list, const shape_t *sh, int64_t kv_seq)
{
    if (sh->flash && list->ctx->cp > 1) {
        cp_attention(list, sh);
        return;
    }
    if (sh->flash) {
        flash_attention(list, sh, kv_seq);
        return;
    }
    int64_t batch = sh->b * sh->q;
    batched_gemm(list, "attn.context.dprobs", sh->s, kv_seq, sh->d, batch, DS_GEMM_TRANS_B);
    batched_gemm(list, "attn.context.dvalue", kv_seq, sh->d, sh->s, batch, DS_GEMM_TRANS_A);
    if (sh->dropout)
        elementwise(list, DS_OP_DROPOUT, "attn.dropout", batch * sh->s, kv_seq, 0, 2.0, 2.0, 0);
    elementwise(list, DS_OP_SOFTMAX, "attn.softmax", batch * sh->s, kv_seq, sh->causal ? 1 : 0, 4.0,
                3.0, 0);
    batched_gemm(list, "attn.scores.dquery", sh->s, sh->d, kv_seq, batch, 0);
    batched_gemm(list, "attn.scores.dkey", kv_seq, sh->d, sh->s, batch, DS_GEMM_TRANS_A);
}

static dsi_mla_shape_t mla_shape_of(const ds_model_info_t *info, const shape_t *sh)
{
    dsi_mla_shape_t m = {sh->b,
                         sh->s,
                         sh->tokens,
                         sh->rows,
                         sh->h,
                         sh->q,
                         sh->act_bytes,
                         sh->sp,
                         sh->causal,
                         sh->dropout,
                         sh->flash,
                         norm_op(info),
                         norm_param_count(info)};
    return m;
}

/* A column-parallel linear's backward: data gradient, its TP reduction, then
 * the weight gradient (which overlaps the reduction). */
static void column_linear_backward(op_list_t *list, const shape_t *sh, const char *dgrad,
                                   const char *wgrad, const char *comm, int64_t in, int64_t out)
{
    if (sh->sp) /* Megatron gathers the input again for the weight gradient */
        tp_collective(list, DS_COMM_ALLGATHER, comm, sh->act_bytes, list->ctx->dtype);
    fp8_cast(list, "fp8.cast.grad", sh->tokens, out);
    gemm(list, dgrad, sh->tokens, in, out, 0, 0);
    tp_exit(list, sh, comm);
    gemm(list, wgrad, out, in, sh->tokens, DS_GEMM_TRANS_A, out * in + (sh->bias ? out : 0));
}

static void row_linear_backward(op_list_t *list, const shape_t *sh, const char *dgrad,
                                const char *wgrad, const char *comm, int64_t in, int64_t out)
{
    tp_enter_forward(list, sh, comm); /* SP: gather the output gradient */
    fp8_cast(list, "fp8.cast.grad", sh->tokens, out);
    gemm(list, dgrad, sh->tokens, in, out, 0, 0);
    gemm(list, wgrad, out, in, sh->tokens, DS_GEMM_TRANS_A, out * in + (sh->bias ? out : 0));
}

static void self_attention_forward(op_list_t *list, const ds_model_info_t *info, const shape_t *sh)
{
    if (info->kv_lora_rank > 0) { /* DeepSeek's latent attention: mla_ops.c */
        dsi_mla_shape_t m = mla_shape_of(info, sh);
        dsi_mla_forward(list, info, &m);
        return;
    }
    elementwise(list, norm_op(info), "attn.norm", sh->rows, sh->h, 0, 8.0, 2.0, 0);
    tp_enter_forward(list, sh, "attn.tp.gather");
    gemm(list, "attn.qkv", sh->tokens, (sh->q + 2 * sh->kv) * sh->d, sh->h, DS_GEMM_TRANS_B, 0);
    if (sh->rope)
        elementwise(list, DS_OP_ROPE, "attn.rope", sh->tokens, (sh->q + sh->kv) * sh->d, 0, 6.0,
                    2.0, 0);
    attention_core_forward(list, sh, sh->s);
    fp8_cast(list, "attn.proj.cast", sh->tokens, sh->q * sh->d);
    gemm(list, "attn.proj", sh->tokens, sh->h, sh->q * sh->d, DS_GEMM_TRANS_B, 0);
    tp_exit(list, sh, "attn.tp.reduce");
    elementwise(list, sh->dropout ? DS_OP_DROPOUT_ADD : DS_OP_ADD, "attn.residual", sh->rows, sh->h,
                0, 3.0, 3.0, 0);
}

static void self_attention_backward(op_list_t *list, const ds_model_info_t *info, const shape_t *sh)
{
    if (info->kv_lora_rank > 0) {
        dsi_mla_shape_t m = mla_shape_of(info, sh);
        dsi_mla_backward(list, info, &m);
        return;
    }
    elementwise(list, sh->dropout ? DS_OP_DROPOUT_ADD : DS_OP_ADD, "attn.residual", sh->rows, sh->h,
                0, 2.0, 3.0, 0);
    row_linear_backward(list, sh, "attn.proj.dgrad", "attn.proj.wgrad", "attn.tp.gather",
                        sh->q * sh->d, sh->h);
    attention_core_backward(list, sh, sh->s);
    if (sh->rope)
        elementwise(list, DS_OP_ROPE, "attn.rope", sh->tokens, (sh->q + sh->kv) * sh->d, 0, 6.0,
                    2.0, 0);
    column_linear_backward(list, sh, "attn.qkv.dgrad", "attn.qkv.wgrad", "attn.tp.reduce", sh->h,
                           (sh->q + 2 * sh->kv) * sh->d);
    elementwise(list, norm_op(info), "attn.norm", sh->rows, sh->h, 0, 10.0, 3.0,
                norm_param_count(info));
}

/* T5 decoder cross-attention: queries from the decoder, keys and values from
 * the encoder output of `enc_seq` tokens. */
static void cross_attention_forward(op_list_t *list, const ds_model_info_t *info, const shape_t *sh,
                                    int64_t enc_seq)
{
    int64_t enc_tokens = sh->b * enc_seq;
    elementwise(list, norm_op(info), "xattn.norm", sh->rows, sh->h, 0, 8.0, 2.0, 0);
    tp_enter_forward(list, sh, "xattn.tp.gather");
    gemm(list, "xattn.q", sh->tokens, sh->q * sh->d, sh->h, DS_GEMM_TRANS_B, 0);
    gemm(list, "xattn.kv", enc_tokens, 2 * sh->kv * sh->d, sh->h, DS_GEMM_TRANS_B, 0);
    shape_t cross = *sh;
    cross.causal = false;
    attention_core_forward(list, &cross, enc_seq);
    gemm(list, "xattn.proj", sh->tokens, sh->h, sh->q * sh->d, DS_GEMM_TRANS_B, 0);
    tp_exit(list, sh, "xattn.tp.reduce");
    elementwise(list, sh->dropout ? DS_OP_DROPOUT_ADD : DS_OP_ADD, "xattn.residual", sh->rows,
                sh->h, 0, 3.0, 3.0, 0);
}

static void cross_attention_backward(op_list_t *list, const ds_model_info_t *info,
                                     const shape_t *sh, int64_t enc_seq)
{
    int64_t enc_tokens = sh->b * enc_seq;
    int64_t kv_out = 2 * sh->kv * sh->d;
    elementwise(list, sh->dropout ? DS_OP_DROPOUT_ADD : DS_OP_ADD, "xattn.residual", sh->rows,
                sh->h, 0, 2.0, 3.0, 0);
    row_linear_backward(list, sh, "xattn.proj.dgrad", "xattn.proj.wgrad", "xattn.tp.gather",
                        sh->q * sh->d, sh->h);
    shape_t cross = *sh;
    cross.causal = false;
    attention_core_backward(list, &cross, enc_seq);
    gemm(list, "xattn.kv.dgrad", enc_tokens, sh->h, kv_out, 0, 0);
    gemm(list, "xattn.kv.wgrad", kv_out, sh->h, enc_tokens, DS_GEMM_TRANS_A,
         kv_out * sh->h + (sh->bias ? kv_out : 0));
    column_linear_backward(list, sh, "xattn.q.dgrad", "xattn.q.wgrad", "xattn.tp.reduce", sh->h,
                           sh->q * sh->d);
    elementwise(list, norm_op(info), "xattn.norm", sh->rows, sh->h, 0, 10.0, 3.0,
                norm_param_count(info));
}

static dsi_moe_shape_t moe_shape_of(const ds_model_info_t *info, const shape_t *sh)
{
    dsi_moe_shape_t m = {
        sh->tokens, sh->rows,    sh->h,         sh->act_bytes,       sh->sp,
        sh->gated,  sh->dropout, norm_op(info), activation_op(info), norm_param_count(info)};
    return m;
}

static void mlp_forward(op_list_t *list, const ds_model_info_t *info, const shape_t *sh)
{
    if (sh->moe) {
        dsi_moe_shape_t m = moe_shape_of(info, sh);
        dsi_moe_forward(list, info, &m);
        return;
    }
    int64_t up = sh->ffn * (sh->gated ? 2 : 1);
    elementwise(list, norm_op(info), "mlp.norm", sh->rows, sh->h, 0, 8.0, 2.0, 0);
    tp_enter_forward(list, sh, "mlp.tp.gather");
    gemm(list, "mlp.fc1", sh->tokens, up, sh->h, DS_GEMM_TRANS_B, 0);
    elementwise(list, activation_op(info), "mlp.act", sh->tokens, sh->ffn, 0, sh->gated ? 6.0 : 8.0,
                sh->gated ? 3.0 : 2.0, 0);
    gemm(list, "mlp.fc2", sh->tokens, sh->h, sh->ffn, DS_GEMM_TRANS_B, 0);
    tp_exit(list, sh, "mlp.tp.reduce");
    elementwise(list, sh->dropout ? DS_OP_DROPOUT_ADD : DS_OP_ADD, "mlp.residual", sh->rows, sh->h,
                0, 3.0, 3.0, 0);
}

static void mlp_backward(op_list_t *list, const ds_model_info_t *info, const shape_t *sh)
{
    if (sh->moe) {
        dsi_moe_shape_t m = moe_shape_of(info, sh);
        dsi_moe_backward(list, info, &m);
        return;
    }
    int64_t up = sh->ffn * (sh->gated ? 2 : 1);
    elementwise(list, sh->dropout ? DS_OP_DROPOUT_ADD : DS_OP_ADD, "mlp.residual", sh->rows, sh->h,
                0, 2.0, 3.0, 0);
    row_linear_backward(list, sh, "mlp.fc2.dgrad", "mlp.fc2.wgrad", "mlp.tp.gather", sh->ffn,
                        sh->h);
    elementwise(list, activation_op(info), "mlp.act", sh->tokens, sh->ffn, 0,
                sh->gated ? 10.0 : 12.0, sh->gated ? 5.0 : 3.0, 0);
    column_linear_backward(list, sh, "mlp.fc1.dgrad", "mlp.fc1.wgrad", "mlp.tp.reduce", sh->h, up);
    elementwise(list, norm_op(info), "mlp.norm", sh->rows, sh->h, 0, 10.0, 3.0,
                norm_param_count(info));
}

static void transformer_forward(op_list_t *list, const ds_model_info_t *info, const shape_t *sh,
                                bool t5_decoder)
{
    self_attention_forward(list, info, sh);
    if (t5_decoder)
        cross_attention_forward(list, info, sh, info->seq_len);
    mlp_forward(list, info, sh);
}

static void transformer_backward(op_list_t *list, const ds_model_info_t *info, const shape_t *sh,
                                 bool t5_decoder)
{
    if (list->ctx->recompute == DS_RECOMPUTE_FULL) {
        list->pass = DS_PASS_RECOMPUTE;
        transformer_forward(list, info, sh, t5_decoder);
    } else if (list->ctx->recompute == DS_RECOMPUTE_SELECTIVE) {
        list->pass = DS_PASS_RECOMPUTE;
        if (info->kv_lora_rank > 0) {
            dsi_mla_shape_t m = mla_shape_of(info, sh);
            dsi_ops_attention_core(list, &m, dsi_mla_core_dim(info));
        } else {
            attention_core_forward(list, sh, sh->s);
        }
        if (t5_decoder) {
            shape_t cross = *sh;
            cross.causal = false;
            attention_core_forward(list, &cross, info->seq_len);
        }
    }
    list->pass = DS_PASS_BACKWARD;
    mlp_backward(list, info, sh);
    if (t5_decoder)
        cross_attention_backward(list, info, sh, info->seq_len);
    self_attention_backward(list, info, sh);
}

/* ---- embedding and head ---------------------------------------------------- */

static int64_t vocab_share(const ds_model_info_t *info, int tp)
{
    int64_t multiple = 128LL * tp;
    return (info->vocab_size + multiple - 1) / multiple * multiple / tp;
}

static void embedding_pass(op_list_t *list, const ds_model_info_t *info, const shape_t *sh,
                           ds_pass_t pass, const char *label)
{
    int64_t vocab = vocab_share(info, list->ctx->tp);
    int64_t params = vocab * sh->h + (info->learned_positions ? info->max_positions * sh->h : 0);
    if (pass == DS_PASS_FORWARD) {
        elementwise(list, DS_OP_EMBEDDING, label, sh->tokens, sh->h, 0, 1.0, 2.0, 0);
        list->ops[list->count - 1].key.dims[2] = vocab;
        tp_exit(list, sh, "embed.tp.reduce"); /* vocab-parallel lookup sums the shards */
        if (sh->dropout)
            elementwise(list, DS_OP_DROPOUT, "embed.dropout", sh->rows, sh->h, 0, 2.0, 2.0, 0);
    } else {
        if (sh->dropout)
            elementwise(list, DS_OP_DROPOUT, "embed.dropout", sh->rows, sh->h, 0, 2.0, 2.0, 0);
        tp_enter_forward(list, sh, "embed.tp.gather");
        elementwise(list, DS_OP_EMBEDDING, label, sh->tokens, sh->h, 0, 1.0, 3.0, params);
        list->ops[list->count - 1].key.dims[2] = vocab;
    }
}

static void head_forward(op_list_t *list, const ds_model_info_t *info, const shape_t *sh)
{
    int64_t vocab = vocab_share(info, list->ctx->tp);
    if (info->arch != DS_ARCH_ENCODER) /* post-norm BERT has no final norm */
        elementwise(list, norm_op(info), "head.norm", sh->rows, sh->h, 0, 8.0, 2.0, 0);
    tp_enter_forward(list, sh, "head.tp.gather");
    if (info->arch == DS_ARCH_ENCODER) { /* BERT's MLM transform, replicated */
        gemm(list, "head.transform", sh->tokens, sh->h, sh->h, DS_GEMM_TRANS_B, 0);
        elementwise(list, DS_OP_GELU, "head.act", sh->tokens, sh->h, 0, 8.0, 2.0, 0);
        elementwise(list, norm_op(info), "head.transform.norm", sh->tokens, sh->h, 0, 8.0, 2.0, 0);
    }
    gemm(list, "head.logits", sh->tokens, vocab, sh->h, DS_GEMM_TRANS_B, 0);
    elementwise(list, DS_OP_CROSS_ENTROPY, "head.loss", sh->tokens, vocab, 0, 5.0, 2.0, 0);
    /* Vocab-parallel cross-entropy: max, sum of exponentials, target logit. */
    for (int i = 0; i < 3; i++)
        tp_collective(list, DS_COMM_ALLREDUCE, "head.loss.tp", sh->tokens * 4, DS_DTYPE_FP32);
}

static void head_backward(op_list_t *list, const ds_model_info_t *info, const shape_t *sh)
{
    int64_t vocab = vocab_share(info, list->ctx->tp);
    elementwise(list, DS_OP_CROSS_ENTROPY, "head.loss", sh->tokens, vocab, 0, 4.0, 2.0, 0);
    gemm(list, "head.logits.dgrad", sh->tokens, sh->h, vocab, 0, 0);
    tp_exit(list, sh, "head.tp.reduce");
    gemm(list, "head.logits.wgrad", vocab, sh->h, sh->tokens, DS_GEMM_TRANS_A,
         info->tied_embeddings ? 0 : vocab * sh->h);
    if (info->arch == DS_ARCH_ENCODER) {
        elementwise(list, norm_op(info), "head.transform.norm", sh->tokens, sh->h, 0, 10.0, 3.0,
                    norm_param_count(info));
        elementwise(list, DS_OP_GELU, "head.act", sh->tokens, sh->h, 0, 12.0, 3.0, 0);
        gemm(list, "head.transform.dgrad", sh->tokens, sh->h, sh->h, 0, 0);
        gemm(list, "head.transform.wgrad", sh->h, sh->h, sh->tokens, DS_GEMM_TRANS_A,
             sh->h * sh->h + sh->h + vocab);
        return;
    }
    elementwise(list, norm_op(info), "head.norm", sh->rows, sh->h, 0, 10.0, 3.0,
                norm_param_count(info));
}

/* ---- layer-list models ------------------------------------------------------ */

static void generic_pass(op_list_t *list, const ds_model_t *model, const dsi_generic_layer_t *layer,
                         ds_pass_t pass)
{
    const dsi_shape_ctx_t *ctx = list->ctx;
    int64_t b = ctx->mbs, t = ctx->tp;
    int first = pass == DS_PASS_FORWARD ? 0 : layer->num_ops - 1;
    int step = pass == DS_PASS_FORWARD ? 1 : -1;
    for (int i = first; i >= 0 && i < layer->num_ops; i += step) {
        const dsi_generic_op_t *g = &layer->ops[i];
        int64_t rows = b * g->rows;
        int64_t out_bytes = rows * g->cols * (int64_t)ds_dtype_size(ctx->dtype);
        switch (g->kind) {
        case DSI_GENERIC_LINEAR:
        case DSI_GENERIC_CONV2D: {
            int64_t n = g->split == DSI_TP_COLUMN ? g->cols / t : g->cols;
            int64_t k = g->split == DSI_TP_ROW ? g->inner / t : g->inner;
            int64_t params = g->split == DSI_TP_NONE ? g->params : g->params / t;
            if (pass == DS_PASS_FORWARD) {
                gemm(list, g->name, rows, n, k, DS_GEMM_TRANS_B, 0);
                if (g->split == DSI_TP_ROW)
                    tp_collective(list, DS_COMM_ALLREDUCE, "layer.tp.reduce", out_bytes,
                                  ctx->dtype);
            } else {
                gemm(list, g->name, rows, k, n, 0, 0);
                if (g->split == DSI_TP_COLUMN)
                    tp_collective(list, DS_COMM_ALLREDUCE, "layer.tp.reduce",
                                  rows * g->inner * (int64_t)ds_dtype_size(ctx->dtype), ctx->dtype);
                gemm(list, g->name, n, k, rows, DS_GEMM_TRANS_A, params);
            }
            break;
        }
        case DSI_GENERIC_NORM:
            elementwise(list, DS_OP_LAYERNORM, g->name, rows, g->cols, 0,
                        pass == DS_PASS_FORWARD ? 8.0 : 10.0, pass == DS_PASS_FORWARD ? 2.0 : 3.0,
                        pass == DS_PASS_FORWARD ? 0 : g->params);
            break;
        case DSI_GENERIC_RELU:
        case DSI_GENERIC_GELU:
            elementwise(list, g->kind == DSI_GENERIC_RELU ? DS_OP_RELU : DS_OP_GELU, g->name, rows,
                        g->cols, 0, pass == DS_PASS_FORWARD ? 8.0 : 12.0,
                        pass == DS_PASS_FORWARD ? 2.0 : 3.0, 0);
            break;
        case DSI_GENERIC_SOFTMAX:
            elementwise(list, DS_OP_SOFTMAX, g->name, rows, g->cols, 0, 5.0, 2.0, 0);
            break;
        case DSI_GENERIC_DROPOUT:
            elementwise(list, DS_OP_DROPOUT, g->name, rows, g->cols, 0, 2.0, 2.0, 0);
            break;
        case DSI_GENERIC_ADD:
            elementwise(list, DS_OP_ADD, g->name, rows, g->cols, 0, 1.0, 3.0, 0);
            break;
        case DSI_GENERIC_POOL:
            elementwise(list, DS_OP_POOL, g->name, rows, g->cols, 0, 4.0, 2.0, 0);
            break;
        }
    }
}

/* ---- entry point -------------------------------------------------------------- */

ds_status_t dsi_model_layer_ops(const ds_model_t *model, int layer, const dsi_shape_ctx_t *ctx,
                                ds_pass_t pass, dsi_op_t *ops, size_t max_ops, size_t *count_p)
{
    const ds_model_info_t *info = &model->info;
    if (pass != DS_PASS_FORWARD && pass != DS_PASS_BACKWARD)
        return DSI_ERROR(DS_ERR_INTERNAL, "layer operators exist for forward and backward only");
    if (layer < DSI_PART_HEAD || layer >= info->num_layers)
        return DSI_ERROR(DS_ERR_INTERNAL, "layer %d out of range", layer);
    op_list_t list = {ops, 0, max_ops, ctx, pass, DS_OK, false};

    if (info->arch == DS_ARCH_LAYER_LIST) {
        if (layer >= 0) {
            generic_pass(&list, model, &model->generic[model->layer_of[layer]], pass);
        } else if (layer == DSI_PART_HEAD && model->classes > 0) {
            elementwise(&list, DS_OP_CROSS_ENTROPY, "head.loss", ctx->mbs, model->classes, 0, 5.0,
                        2.0, 0);
        }
        *count_p = list.count;
        return list.status;
    }

    bool encoder_decoder = info->arch == DS_ARCH_ENCODER_DECODER;
    bool t5_decoder = encoder_decoder && layer >= info->num_encoder_layers;
    bool causal = info->arch == DS_ARCH_DECODER || t5_decoder;
    int64_t seq = t5_decoder ? info->decoder_seq_len : info->seq_len;
    if (layer == DSI_PART_HEAD && encoder_decoder)
        seq = info->decoder_seq_len; /* the loss is on the target tokens */
    shape_t sh = make_shape(info, ctx, seq, causal);

    if (layer == DSI_PART_EMBEDDING) {
        embedding_pass(&list, info, &sh, pass, "embed.lookup");
        if (encoder_decoder) {
            shape_t dec = make_shape(info, ctx, info->decoder_seq_len, true);
            embedding_pass(&list, info, &dec, pass, "embed.decoder.lookup");
        }
    } else if (layer == DSI_PART_HEAD) {
        if (pass == DS_PASS_FORWARD)
            head_forward(&list, info, &sh);
        else
            head_backward(&list, info, &sh);
    } else {
        sh.moe = dsi_model_layer_is_moe(model, layer);
        list.fp8 = ctx->fp8 != DS_FP8_OFF; /* the embedding and the head stay in bf16 */
        if (pass == DS_PASS_FORWARD)
            transformer_forward(&list, info, &sh, t5_decoder);
        else
            transformer_backward(&list, info, &sh, t5_decoder);
    }
    *count_p = list.count;
    return list.status;
}

bool dsi_pass_gap_key(const dsi_op_t *ops, size_t count, int layer, ds_pass_t pass,
                      ds_event_key_t *key)
{
    memset(key, 0, sizeof(*key));
    int64_t compute = 0;
    for (size_t i = 0; i < count; i++)
        if (ops[i].key.kind == DS_EVENT_COMPUTE) {
            if (compute++ == 0)
                key->dtype = ops[i].key.dtype;
        }
    if (compute == 0)
        return false;
    key->kind = DS_EVENT_COMPUTE;
    key->op = DS_OP_FRAMEWORK_GAP;
    key->pass = (uint8_t)pass;
    key->dims[0] = compute;
    key->dims[1] = layer == DSI_PART_EMBEDDING ? 1 : layer == DSI_PART_HEAD ? 2 : 0;
    return true;
}

/* ---- emitters shared with moe_ops.c ------------------------------------------------------ */

dsi_op_t *dsi_ops_push(dsi_op_list_t *list, const char *label)
{
    return push(list, label);
}

void dsi_ops_gemm(dsi_op_list_t *list, const char *label, int64_t m, int64_t n, int64_t k,
                  unsigned trans, int64_t grad_params)
{
    gemm(list, label, m, n, k, trans, grad_params);
}

void dsi_ops_grouped_gemm(dsi_op_list_t *list, const char *label, int64_t m, int64_t n, int64_t k,
                          int64_t groups, unsigned trans)
{
    typed_batched_gemm(list, label, m, n, k, groups, trans, list->fp8);
}

void dsi_ops_elementwise(dsi_op_list_t *list, ds_op_t kind, const char *label, int64_t rows,
                         int64_t cols, unsigned variant, double flops_per_element, double tensors,
                         int64_t grad_params)
{
    elementwise(list, kind, label, rows, cols, variant, flops_per_element, tensors, grad_params);
}

void dsi_ops_fp8_cast(dsi_op_list_t *list, const char *label, int64_t rows, int64_t cols)
{
    fp8_cast(list, label, rows, cols);
}

void dsi_ops_collective(dsi_op_list_t *list, ds_comm_op_t primitive, ds_group_t group, int size,
                        const char *label, int64_t bytes)
{
    if (size <= 1)
        return;
    dsi_op_t *op = push(list, label);
    if (op == NULL)
        return;
    op->key.kind = DS_EVENT_COMM;
    op->key.op = (uint8_t)primitive;
    op->key.dtype = (uint8_t)list->ctx->dtype;
    op->key.group = (uint8_t)group;
    op->key.group_size = size;
    op->key.dims[0] = bytes;
    op->bytes = (double)bytes;
}

void dsi_ops_attention_core(dsi_op_list_t *list, const dsi_mla_shape_t *m, int64_t head_dim)
{
    shape_t sh;
    memset(&sh, 0, sizeof(sh));
    sh.b = m->b;
    sh.s = m->s;
    sh.tokens = m->tokens;
    sh.q = m->heads;
    sh.kv = m->heads;
    sh.d = head_dim;
    sh.causal = m->causal;
    sh.dropout = m->dropout;
    sh.flash = m->flash;
    if (list->pass == DS_PASS_BACKWARD)
        attention_core_backward(list, &sh, m->s);
    else
        attention_core_forward(list, &sh, m->s);
}
