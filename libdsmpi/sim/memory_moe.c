/*
 * Device memory of mixture-of-experts layers, added to memory.c's model:
 *   expert weights, gradients and optimizer states: the routed experts one
 *     rank holds (num_experts / ep, each split over etp); under ZeRO >= 1
 *     the optimizer states are sharded over the expert-data-parallel group
 *     (the distributed optimizer), weights and gradients stay whole;
 *   activations of an MoE layer's MLP part, per micro-batch, in place of the
 *     dense MLP's: the router's fp32 logits and probabilities (rows x
 *     experts), the tokens the rank's experts receive (the slowest rank's:
 *     router-skew x the mean, capped by the capacity) kept as the experts'
 *     input (2 h bytes each), fc1's output and the activation's (2 and 1
 *     times f/etp, or one each ungated, 2 bytes), the experts' output for the
 *     unpermute's backward (2 h), the permuted copies before dispatch (2 h per
 *     top-k copy); the shared experts as a dense MLP split over tp; under
 *     fp8= fc1's and fc2's inputs are kept in one byte (TE saves the FP8
 *     copies for the weight gradients) and the experts' weights have an FP8
 *     copy and transpose (TE's weight cache, 2 bytes a parameter);
 *   buffers: the EP and EDP communicators, and the dispatch's send and
 *     receive buffers of the largest exchange.
 */
#include "dsi_sim.h"

#include <math.h>

typedef struct expert_tokens {
    double rows, topk, slowest, local, ffn;
} expert_tokens_t;

static expert_tokens_t tokens_of(const ds_sim_t *sim)
{
    const ds_model_info_t *info = &sim->info;
    const dsi_shape_ctx_t *ctx = &sim->ctx;
    expert_tokens_t e;
    /* a rank's tokens: seq / cp of each sequence, split over tp with sp */
    e.rows =
        (double)sim->s.mbs * info->seq_len / (ctx->cp > 1 ? ctx->cp : 1) / (ctx->sp ? ctx->tp : 1);
    e.topk = ctx->moe_topk > 0 ? ctx->moe_topk : info->experts_per_token;
    double mean = e.rows * e.topk * ctx->etp * ctx->ep / info->num_experts;
    double skew = ctx->router_skew > 0 ? ctx->router_skew : DS_ROUTER_SKEW_DEFAULT;
    if (ctx->moe_capacity > 0 && ctx->moe_capacity < skew)
        skew = ctx->moe_capacity;
    e.slowest = ctx->ep > 1 ? mean * skew : mean;
    e.local = (double)info->num_experts / ctx->ep;
    e.ffn = (double)info->moe_ffn_hidden_size / ctx->etp;
    return e;
}

double dsi_sim_moe_mlp_activation(const ds_sim_t *sim)
{
    const ds_model_info_t *info = &sim->info;
    double h = info->hidden_size, dsize = (double)ds_dtype_size(info->dtype);
    bool gated = info->activation == DS_ACT_SWIGLU || info->activation == DS_ACT_GEGLU;
    expert_tokens_t e = tokens_of(sim);
    double received = e.slowest * e.local;
    double bytes = e.rows * info->num_experts * 4.0 * 2.0; /* router logits and probabilities */
    bytes += received * (2.0 * h + e.ffn * (gated ? 3.0 : 2.0)) * dsize;
    if (sim->s.fp8 != DS_FP8_OFF) /* fc1's input (h) and fc2's (ffn) in one byte */
        bytes -= received * (h + e.ffn) * (dsize - 1.0);
    bytes += e.rows * e.topk * h * dsize; /* permuted copies */
    if (info->shared_ffn_hidden_size > 0)
        bytes += (double)sim->s.mbs * info->seq_len * info->shared_ffn_hidden_size / sim->s.tp *
                 (gated ? 3.0 : 2.0) * dsize;
    return bytes;
}

void dsi_sim_memory_experts(const ds_sim_t *sim, int stage, ds_sim_memory_t *mem)
{
    const ds_model_info_t *info = &sim->info;
    const ds_strategy_t *s = &sim->s;
    double P = (double)dsi_stage_expert_params(sim->model, s, stage);
    if (P == 0.0)
        return;
    double edp = dsi_expert_data_parallel(s);
    /* Expert weights and gradients stay whole on the rank at every ZeRO
     * stage: their gradients are reduced once per iteration (phase_moe.c),
     * with no per-layer gathers or per-micro-batch reductions modelled. */
    mem->weights_B += P * (double)ds_dtype_size(info->dtype);
    if (s->fp8 != DS_FP8_OFF)
        mem->weights_B += 2.0 * P;
    mem->grads_B += P * (double)ds_dtype_size(s->grad_reduce_dtype);
    double per_param = info->dtype == DS_DTYPE_FP32 ? 8.0 : 12.0;
    mem->optimizer_B += P * per_param / (s->zero >= 1 ? edp : 1.0);
    expert_tokens_t e = tokens_of(sim);
    double largest = DSI_MAX(e.rows * e.topk, e.slowest * e.local / sim->ctx.etp);
    if (s->moe_dispatcher == DS_MOE_DISPATCH_ALLGATHER)
        largest = DSI_MAX(largest, e.rows * sim->ctx.ep);
    double comms = (sim->ctx.ep > 1) + (edp > 1);
    mem->comm_buffers_B += comms * dsi_param_double(DSI_PARAM_SIM_COMM_MIB) * 1024.0 * 1024.0 +
                           2.0 * largest * info->hidden_size * (double)ds_dtype_size(info->dtype);
}
