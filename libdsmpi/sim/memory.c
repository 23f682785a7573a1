/*
 * Device memory of one pipeline stage:
 *   weights      P x dtype bytes (/dp with ZeRO-3); under fp8= the layers'
 *                linear weights also in fp8 and transposed (2 bytes each:
 *                Transformer Engine's weight cache across micro-batches;
 *                not with ZeRO-3, whose layers are gathered one at a time)
 *   gradients    P x grad-reduce dtype bytes (Megatron's fp32 main_grad buffer;
 *                /dp with ZeRO-2 and 3)
 *   optimizer    P x 12 bytes (fp32 master copy + Adam moments; 8 when training
 *                in fp32), /dp with ZeRO >= 1, the server share with a
 *                parameter server
 *   activations  per layer and micro-batch after Korthikanti et al. (MLSys'23):
 *                replicated s b h (10 or 8 without dropout), split over TP
 *                s b (2 (q + 2 kv) + 2 q) for attention inputs plus the MLP
 *                (4 f s b, 6 f s b gated), attention scores 5 a s^2 b / t (2
 *                without dropout; none with selective recompute; with fused
 *                attention none either, but the fp32 log-sum-exp, 4 a s b / t);
 *                under fp8= the inputs of the four linears are kept in one
 *                byte (Transformer Engine saves the fp8 copies for the weight
 *                gradient); with SP the
 *                replicated part is split too; full recompute keeps only each
 *                layer's input (2 s b h, / t with SP) plus one layer's working
 *                set.  Times the peak of in-flight (chunk, micro-batch) passes of
 *                the schedule; the last stage adds one micro-batch of fp32
 *                logits.
 *   buffers      DS_SIM_COMM_MIB per communicator the device is in, and two
 *                pipeline receive buffers per chunk; with cp the K/V
 *                exchange of one layer's attention (cp_buffer_bytes); with
 *                ZeRO-3 the gathered weights of two layers and one layer's
 *                unsharded gradient (zero3_gathered_bytes)
 *   cp           context parallelism: every rank holds seq / cp tokens, so
 *                activations, logits and pipeline buffers scale with it; the
 *                optimizer and ZeRO shard over dp x cp (Megatron-Core's
 *                data-parallel group with context parallelism)
 *   context      DS_SIM_CONTEXT_MIB + DS_SIM_WORKSPACE_MIB
 *   margin       DS_SIM_FRAGMENTATION x the tensors above
 * MoE layers: expert weights, gradients, optimizer states, the MLP part's
 * activations and the dispatch buffers in memory_moe.c.
 * Not modelled: temporary buffers inside kernels beyond the stored
 * activations, the allocator caching more than the margin, the data
 * loader, checkpointing and evaluation passes.
 */
#include "dsi_sim.h"

#include <math.h>
#include <string.h>

#define MIB (1024.0 * 1024.0)

/* Activation bytes one layer keeps for one micro-batch until its backward. */
static double layer_activation_bytes(const ds_sim_t *sim, int layer, ds_recompute_t recompute)
{
    const ds_model_info_t *info = &sim->info;
    const ds_strategy_t *s = &sim->s;
    double b = s->mbs, t = s->tp, scale = (double)ds_dtype_size(info->dtype) / 2.0;
    if (info->arch == DS_ARCH_LAYER_LIST) {
        const dsi_generic_layer_t *gl = &sim->model->generic[sim->model->layer_of[layer]];
        double bytes = 0.0;
        for (int i = 0; i < gl->num_ops; i++) {
            const dsi_generic_op_t *op = &gl->ops[i];
            double cols = op->split == DSI_TP_COLUMN ? (double)op->cols / t : (double)op->cols;
            bytes += b * (double)op->rows * cols * (double)ds_dtype_size(info->dtype);
        }
        return bytes;
    }
    bool t5_decoder = info->arch == DS_ARCH_ENCODER_DECODER && layer >= info->num_encoder_layers;
    double seq = (t5_decoder ? info->decoder_seq_len : info->seq_len) / (double)sim->ctx.cp;
    double h = info->hidden_size, a = info->num_heads, f = info->ffn_hidden_size;
    double q = (double)info->num_heads * info->head_dim,
           kv = (double)info->num_kv_heads * info->head_dim;
    bool gated = info->activation == DS_ACT_SWIGLU || info->activation == DS_ACT_GEGLU;
    bool sp = sim->ctx.sp;
    double sbh = seq * b * h;
    if (recompute == DS_RECOMPUTE_FULL)
        return 2.0 * sbh / (sp ? t : 1.0) * scale;
    double replicated = sbh * (info->dropout ? 10.0 : 8.0);
    bool moe = dsi_model_layer_is_moe(sim->model, layer); /* its MLP part: memory_moe.c */
    double split = seq * b * (2.0 * (q + 2.0 * kv) + 2.0 * q) +
                   (moe ? 0.0 : seq * b * f * (gated ? 6.0 : 4.0));
    if (s->fp8 != DS_FP8_OFF) { /* qkv and fc1 inputs (replicated), proj and fc2 inputs (split) */
        replicated -= 2.0 * sbh;
        split -= seq * b * (q + (moe ? 0.0 : f)); /* the experts stay in the training dtype */
    }
    bool flash = s->flash_attention != 0;
    double scores = flash ? 0.0
                    : recompute == DS_RECOMPUTE_SELECTIVE
                        ? 0.0
                        : (info->dropout ? 5.0 : 2.0) * a * seq * seq * b;
    /* Fused attention keeps one fp32 log-sum-exp per query and head. */
    double lse = flash ? 4.0 * a * seq * b / t / scale : 0.0;
    double per_layer = replicated / (sp ? t : 1.0) + split / t + scores / t + lse;
    if (t5_decoder) /* cross-attention: another attention block over the encoder tokens */
        per_layer +=
            (sbh * 4.0) / (sp ? t : 1.0) + seq * b * 4.0 * q / t + lse +
            (recompute == DS_RECOMPUTE_SELECTIVE || flash ? 0.0
                                                          : 5.0 * a * seq * info->seq_len * b / t);
    return per_layer * scale + (moe ? dsi_sim_moe_mlp_activation(sim) : 0.0);
}

/* Buffers of one layer's context-parallel K/V exchange (bytes, their TP
 * share): p2p, TE's two K/V blocks (the one computed on, the one arriving)
 * and backward their gradients' two; allgather, K/V of the whole sequence
 * and backward their gradients; a2a, Q/K/V and the output re-laid out. */
static double cp_buffer_bytes(const ds_sim_t *sim)
{
    const ds_model_info_t *info = &sim->info;
    int cp = sim->ctx.cp;
    if (cp <= 1 || info->arch == DS_ARCH_LAYER_LIST)
        return 0.0;
    double tokens = (double)sim->s.mbs * info->seq_len / cp, t = sim->s.tp;
    double kv_heads = info->num_kv_heads >= t ? info->num_kv_heads / t : 1.0;
    double dsize = (double)ds_dtype_size(info->dtype);
    double block = 2.0 * tokens * kv_heads * info->head_dim * dsize; /* K and V */
    switch (sim->ctx.cp_comm) {
    case DS_CP_COMM_P2P: return 4.0 * block;
    case DS_CP_COMM_ALLGATHER: return 2.0 * block * cp;
    case DS_CP_COMM_A2A: break;
    }
    double q_heads = info->num_heads / t;
    return 2.0 * tokens * (2.0 * q_heads + 2.0 * kv_heads) * info->head_dim * dsize;
}

/* Parameters of one layer's linears (qkv, proj, fc1, fc2: their TP share;
 * MoE layers count their shared experts, the routed ones are memory_moe.c's). */
static double layer_linear_params(const ds_sim_t *sim, int layer)
{
    const ds_model_info_t *info = &sim->info;
    const ds_strategy_t *s = &sim->s;
    double h = info->hidden_size, f = info->ffn_hidden_size;
    double q = (double)info->num_heads * info->head_dim,
           kv = (double)info->num_kv_heads * info->head_dim;
    bool gated = info->activation == DS_ACT_SWIGLU || info->activation == DS_ACT_GEGLU;
    double attention = (h * (q + 2.0 * kv) + q * h) / s->tp;
    double mlp = dsi_model_layer_is_moe(sim->model, layer) ? info->shared_ffn_hidden_size : f;
    return attention + (h * mlp * (gated ? 2.0 : 1.0) + mlp * h) / s->tp;
}

/* The linear parameters of this stage's layers: their sum (the layers run in
 * fp8 under fp8=) and the largest layer's (what ZeRO-3 gathers at a time). */
static void stage_linear_params(const ds_sim_t *sim, int stage, double *total_p, double *largest_p)
{
    const ds_strategy_t *s = &sim->s;
    double total = 0.0, largest = 0.0;
    for (int c = 0; c < s->vpp; c++) {
        int first, n;
        ds_strategy_chunk_layers(s, sim->info.num_layers, stage, c, &first, &n);
        for (int layer = first; layer < first + n; layer++) {
            double params = layer_linear_params(sim, layer);
            total += params;
            largest = fmax(largest, params);
        }
    }
    *total_p = total;
    *largest_p = largest;
}

/* ZeRO-3 gathers a layer's weights before its pass and frees them after, as
 * FSDP does: the layer running and the one prefetched are whole at once
 * (FSDP's default prefetch of one layer, forward and backward), and in the
 * backward the running layer's unsharded gradient waits for its
 * reduce-scatter.  Under fp8= their fp8 copies exist only while gathered
 * (FSDP's fp8 all-gather casts the shard; nothing is cached across
 * micro-batches). */
#define ZERO3_GATHERED_LAYERS 2.0
static double zero3_gathered_bytes(const ds_sim_t *sim, double largest_layer)
{
    const ds_strategy_t *s = &sim->s;
    double weight = (double)ds_dtype_size(sim->info.dtype) + (s->fp8 != DS_FP8_OFF ? 2.0 : 0.0);
    return largest_layer *
           (ZERO3_GATHERED_LAYERS * weight + (double)ds_dtype_size(s->grad_reduce_dtype));
}

void dsi_sim_memory(const ds_sim_t *sim, int stage, ds_sim_memory_t *mem)
{
    const ds_model_info_t *info = &sim->info;
    const ds_strategy_t *s = &sim->s;
    memset(mem, 0, sizeof(*mem));
    double P = (double)sim->plan.stage_params[stage];
    double dp = s->dp;
    double linear = 0.0, largest_linear = 0.0;
    if (info->arch != DS_ARCH_LAYER_LIST)
        stage_linear_params(sim, stage, &linear, &largest_linear);
    mem->weights_B = P * (double)ds_dtype_size(info->dtype) / (s->zero == 3 ? dp : 1.0);
    if (s->fp8 != DS_FP8_OFF && s->zero < 3) /* TE's fp8 copy and transpose, kept */
        mem->weights_B += 2.0 * linear;
    mem->grads_B = P * (double)ds_dtype_size(s->grad_reduce_dtype) / (s->zero >= 2 ? dp : 1.0);
    double per_param = info->dtype == DS_DTYPE_FP32 ? 8.0 : 12.0;
    double share = s->zero >= 1 ? dp : (s->dp_algo == DS_DP_PS && s->dp > 1 ? s->ps_servers : 1.0);
    mem->optimizer_B = P * per_param / share;
    /* Activations: each chunk's layers, times the peak of passes in flight. */
    const dsi_program_t *prog = &sim->plan.programs[stage];
    mem->inflight = prog->peak_inflight;
    double chunk_bytes = 0.0, largest_layer = 0.0;
    int L = info->num_layers;
    for (int c = 0; c < s->vpp; c++) {
        int first, n;
        ds_strategy_chunk_layers(s, L, stage, c, &first, &n);
        double bytes = 0.0;
        for (int layer = first; layer < first + n; layer++) {
            bytes += layer_activation_bytes(sim, layer, s->recompute);
            double whole = layer_activation_bytes(sim, layer, DS_RECOMPUTE_NONE);
            if (whole > largest_layer)
                largest_layer = whole;
        }
        if (bytes > chunk_bytes)
            chunk_bytes = bytes;
    }
    mem->activations_B = chunk_bytes * prog->peak_inflight;
    if (s->recompute == DS_RECOMPUTE_FULL) /* the layer being recomputed holds all of it */
        mem->activations_B += largest_layer;
    if (info->arch != DS_ARCH_LAYER_LIST) {
        double tokens =
            (double)s->mbs *
            (info->arch == DS_ARCH_ENCODER_DECODER ? info->decoder_seq_len : info->seq_len) /
            sim->ctx.cp;
        if (stage == s->pp - 1) /* fp32 logits and their gradient, one micro-batch */
            mem->activations_B += tokens * (double)dsi_vocab_share(info, s->tp) * 4.0 * 2.0;
        if (stage == 0) /* embedding output and dropout mask, per in-flight micro-batch */
            mem->activations_B += tokens * info->hidden_size * 3.0 / (sim->ctx.sp ? s->tp : 1) *
                                  (double)prog->peak_inflight / s->vpp;
    }
    /* Communicators: TP, DP, the pipeline neighbours, model-parallel, embedding. */
    int comms =
        (s->tp > 1) + (s->dp > 1) +
        (s->pp > 1 ? (stage > 0) + (stage < s->pp - 1 || s->vpp > 1) : 0) + (s->tp * s->pp > 1) +
        (dsi_has_tied_copy(info, s) && (stage == 0 || stage == s->pp - 1)) + (sim->ctx.cp > 1);
    double pp_buffers = 0.0;
    if (s->pp > 1)
        pp_buffers = 2.0 *
                     (double)dsi_p2p_boundary_bytes(sim->model, s, info->dtype,
                                                    stage > 0 ? stage : (s->pp > 1 ? 1 : 0)) /
                     sim->ctx.cp * s->vpp;
    mem->comm_buffers_B =
        comms * dsi_param_double(DSI_PARAM_SIM_COMM_MIB) * MIB + pp_buffers + cp_buffer_bytes(sim);
    if (s->zero == 3)
        mem->comm_buffers_B += zero3_gathered_bytes(sim, largest_linear);
    dsi_sim_memory_experts(sim, stage, mem);
    mem->context_B = (dsi_param_double(DSI_PARAM_SIM_CONTEXT_MIB) +
                      dsi_param_double(DSI_PARAM_SIM_WORKSPACE_MIB)) *
                     MIB;
    double tensors =
        mem->weights_B + mem->grads_B + mem->optimizer_B + mem->activations_B + mem->comm_buffers_B;
    mem->fragmentation_B = tensors * dsi_param_double(DSI_PARAM_SIM_FRAGMENTATION);
    mem->total_B = tensors + mem->context_B + mem->fragmentation_B;
    mem->device_B = sim->cluster.device.memory_GiB * 1024.0 * MIB;
    mem->oom = mem->device_B > 0 && mem->total_B > mem->device_B;
}
