/*
 * Mixture-of-experts layers and multi-head latent attention: the fields of
 * the Hugging Face families that declare them, which layers are MoE layers,
 * and their parameters (total, per rank, active per token).
 *
 * An MoE layer (Megatron-Core's MoELayer) keeps attention and norms as a
 * dense layer does, and replaces the MLP by a router (a hidden x experts
 * linear, replicated on the tensor-parallel ranks), `num_experts` routed
 * expert MLPs of moe_ffn_hidden_size (split over ep ranks, each expert's
 * columns over etp ranks), and shared experts (a dense MLP of
 * shared_ffn_hidden_size, split over tp).
 */
#include "dsi_model.h"

#include "dsi_json.h"

#include <string.h>

#define HF_MAX 16777216
/* Bounds that keep experts x width x hidden far from int64 overflow; the
 * largest published MoE models have 384 experts. */
#define MAX_EXPERTS 4096
#define MAX_EXPERT_WIDTH (1 << 22)

bool dsi_model_layer_is_moe(const ds_model_t *model, int layer)
{
    const ds_model_info_t *info = &model->info;
    if (info->num_experts == 0 || layer < info->first_dense_layers)
        return false;
    return (layer + 1) % DSI_MAX(info->moe_layer_freq, 1) == 0;
}

int dsi_model_moe_layers(const ds_model_t *model, int first, int count)
{
    int moe = 0;
    for (int layer = first; layer < first + count; layer++)
        moe += dsi_model_layer_is_moe(model, layer);
    return moe;
}

static bool gated(const ds_model_info_t *info)
{
    return info->activation == DS_ACT_SWIGLU || info->activation == DS_ACT_GEGLU;
}

int64_t dsi_model_mlp_params(const ds_model_info_t *info, int64_t width, int64_t tp)
{
    int64_t h = info->hidden_size, f = width / tp;
    int64_t up = h * f * (gated(info) ? 2 : 1) + info->linear_bias * f * (gated(info) ? 2 : 1);
    int64_t down = f * h + info->linear_bias * h;
    return up + down;
}

int64_t dsi_model_moe_dense_params(const ds_model_info_t *info, int64_t tp)
{
    int64_t router = (int64_t)info->hidden_size * info->num_experts;
    int64_t shared = info->shared_ffn_hidden_size > 0
                         ? dsi_model_mlp_params(info, info->shared_ffn_hidden_size, tp)
                         : 0;
    int64_t gate = info->shared_expert_gate ? info->hidden_size : 0;
    return router + shared + gate;
}

int64_t dsi_model_layer_expert_params(const ds_model_t *model, int layer, int etp, int ep)
{
    const ds_model_info_t *info = &model->info;
    if (!dsi_model_layer_is_moe(model, layer))
        return 0;
    return (int64_t)(info->num_experts / ep) *
           dsi_model_mlp_params(info, info->moe_ffn_hidden_size, etp);
}

int64_t dsi_model_mla_params(const ds_model_info_t *info, int64_t tp)
{
    /* The down projections (and their norms) are replicated on the TP ranks;
     * the up projections are column-parallel, the output row-parallel. */
    int64_t h = info->hidden_size, heads = info->num_heads / tp;
    int64_t qk = (int64_t)info->head_dim + info->qk_rope_head_dim;
    int64_t q = info->q_lora_rank > 0 ? h * info->q_lora_rank + info->q_lora_rank +
                                            (int64_t)info->q_lora_rank * heads * qk
                                      : h * heads * qk;
    int64_t kv_down = h * (info->kv_lora_rank + info->qk_rope_head_dim) + info->kv_lora_rank;
    int64_t kv_up = (int64_t)info->kv_lora_rank * heads * (info->head_dim + info->v_head_dim);
    int64_t out = heads * info->v_head_dim * h;
    return q + kv_down + kv_up + out;
}

/* ---- Hugging Face fields ------------------------------------------------------------------- */

static ds_status_t get_int(const json_t *object, const char *key, const char *origin, bool required,
                           int *value_p)
{
    return dsi_json_int32(object, key, origin, 0, HF_MAX, required, value_p);
}

/* The first of `keys` the object has. */
static ds_status_t get_first(const json_t *object, const char *const *keys, size_t n,
                             const char *origin, int *value_p)
{
    for (size_t i = 0; i < n; i++)
        if (dsi_json_has(object, keys[i]))
            return get_int(object, keys[i], origin, false, value_p);
    return DS_OK;
}

static ds_status_t read_mla(const json_t *root, const char *origin, ds_model_info_t *info)
{
    DSI_TRY(get_int(root, "kv_lora_rank", origin, false, &info->kv_lora_rank));
    if (info->kv_lora_rank == 0)
        return DS_OK;
    DSI_TRY(get_int(root, "q_lora_rank", origin, false, &info->q_lora_rank));
    DSI_TRY(get_int(root, "qk_nope_head_dim", origin, true, &info->head_dim));
    DSI_TRY(get_int(root, "qk_rope_head_dim", origin, true, &info->qk_rope_head_dim));
    DSI_TRY(get_int(root, "v_head_dim", origin, true, &info->v_head_dim));
    return DS_OK;
}

ds_status_t dsi_model_moe_from_hf(const void *json_root, const char *origin, const char *model_type,
                                  ds_model_info_t *info)
{
    const json_t *root = json_root;
    static const char *const experts[] = {"num_local_experts", "num_experts", "n_routed_experts"};
    static const char *const top_k[] = {"num_experts_per_tok", "num_experts_per_token"};
    DSI_TRY(get_first(root, experts, DSI_ARRAY_SIZE(experts), origin, &info->num_experts));
    DSI_TRY(read_mla(root, origin, info));
    if (info->num_experts <= 1) { /* one expert, or none, is a dense MLP */
        info->num_experts = 0;
        return DS_OK;
    }
    info->experts_per_token = 2; /* Mixtral's, when a config leaves it out */
    DSI_TRY(get_first(root, top_k, DSI_ARRAY_SIZE(top_k), origin, &info->experts_per_token));
    /* Mixtral and Llama-4 give the expert width as intermediate_size. */
    info->moe_ffn_hidden_size = info->ffn_hidden_size;
    DSI_TRY(get_int(root, "moe_intermediate_size", origin, false, &info->moe_ffn_hidden_size));
    DSI_TRY(get_int(root, "intermediate_size_mlp", origin, false, &info->ffn_hidden_size));
    info->moe_layer_freq = 1;
    DSI_TRY(get_int(root, "decoder_sparse_step", origin, false, &info->moe_layer_freq));
    DSI_TRY(get_int(root, "interleave_moe_layer_step", origin, false, &info->moe_layer_freq));
    DSI_TRY(get_int(root, "moe_layer_freq", origin, false, &info->moe_layer_freq));
    DSI_TRY(get_int(root, "first_k_dense_replace", origin, false, &info->first_dense_layers));
    /* Shared experts: DeepSeek counts them (each of the routed width),
     * Qwen2-MoE gives their width and gates them, Llama-4 has one of the
     * routed width. */
    int shared = 0;
    DSI_TRY(get_int(root, "n_shared_experts", origin, false, &shared));
    info->shared_ffn_hidden_size = shared * info->moe_ffn_hidden_size;
    DSI_TRY(get_int(root, "shared_expert_intermediate_size", origin, false,
                    &info->shared_ffn_hidden_size));
    info->shared_expert_gate = dsi_json_has(root, "shared_expert_intermediate_size");
    if (strncmp(model_type, "llama4", 6) == 0)
        info->shared_ffn_hidden_size = info->moe_ffn_hidden_size;
    const json_t *mlp_only = json_object_get(root, "mlp_only_layers");
    if (json_is_array(mlp_only) && json_array_size(mlp_only) > 0)
        return DSI_ERROR(
            DS_ERR_BAD_FILE,
            "%s: \"mlp_only_layers\" with %zu layers is not modelled (accepted: an "
            "empty list; dense layers by first_k_dense_replace or decoder_sparse_step)",
            origin, json_array_size(mlp_only));
    return DS_OK;
}

/* DBRX: its own field names, attention in attn_config, experts in ffn_config. */
ds_status_t dsi_model_dbrx_from_hf(const void *json_root, const char *origin, ds_model_info_t *info)
{
    const json_t *root = json_root;
    const json_t *attn = json_object_get(root, "attn_config");
    const json_t *ffn = json_object_get(root, "ffn_config");
    if (!json_is_object(attn) || !json_is_object(ffn))
        return DSI_ERROR(DS_ERR_BAD_FILE,
                         "%s: a dbrx config needs the objects \"attn_config\" and \"ffn_config\"",
                         origin);
    info->arch = DS_ARCH_DECODER;
    DSI_TRY(dsi_json_int32(root, "n_layers", origin, 1, HF_MAX, true, &info->num_layers));
    DSI_TRY(dsi_json_int32(root, "d_model", origin, 1, HF_MAX, true, &info->hidden_size));
    DSI_TRY(dsi_json_int32(root, "n_heads", origin, 1, HF_MAX, true, &info->num_heads));
    DSI_TRY(dsi_json_int32(root, "vocab_size", origin, 1, HF_MAX, true, &info->vocab_size));
    info->max_positions = 2048;
    DSI_TRY(dsi_json_int32(root, "max_seq_len", origin, 1, HF_MAX, false, &info->max_positions));
    info->num_kv_heads = info->num_heads;
    DSI_TRY(dsi_json_int32(attn, "kv_n_heads", origin, 1, HF_MAX, false, &info->num_kv_heads));
    DSI_TRY(
        dsi_json_int32(ffn, "ffn_hidden_size", origin, 1, HF_MAX, true, &info->ffn_hidden_size));
    DSI_TRY(dsi_json_int32(ffn, "moe_num_experts", origin, 1, HF_MAX, true, &info->num_experts));
    info->experts_per_token = 1;
    DSI_TRY(dsi_json_int32(ffn, "moe_top_k", origin, 1, HF_MAX, false, &info->experts_per_token));
    info->moe_ffn_hidden_size = info->ffn_hidden_size;
    info->moe_layer_freq = 1;
    if (info->num_experts == 1)
        info->num_experts = 0;
    info->activation = DS_ACT_SWIGLU; /* ffn_act_fn silu, gated (GLU experts) */
    info->norm = DS_NORM_LAYERNORM;
    info->linear_bias = 0;
    info->learned_positions = 0;
    info->dropout = 0;
    bool tied = false;
    DSI_TRY(dsi_json_bool(root, "tie_word_embeddings", origin, false, &tied));
    info->tied_embeddings = tied;
    return DS_OK;
}

ds_status_t dsi_model_moe_check(const ds_model_info_t *info, const char *origin)
{
    if (info->num_experts == 0)
        return DS_OK;
    if (info->num_experts < 2 || info->num_experts > MAX_EXPERTS)
        return DSI_ERROR(DS_ERR_BAD_FILE, "%s: %d experts (accepted: 2 to %d)", origin,
                         info->num_experts, MAX_EXPERTS);
    if (info->moe_ffn_hidden_size > MAX_EXPERT_WIDTH ||
        info->shared_ffn_hidden_size > MAX_EXPERT_WIDTH)
        return DSI_ERROR(DS_ERR_BAD_FILE, "%s: expert MLP size %d, shared %d (accepted: up to %d)",
                         origin, info->moe_ffn_hidden_size, info->shared_ffn_hidden_size,
                         MAX_EXPERT_WIDTH);
    if (info->experts_per_token < 1 || info->experts_per_token > info->num_experts)
        return DSI_ERROR(DS_ERR_BAD_FILE, "%s: %d experts per token of %d (accepted: 1 to %d)",
                         origin, info->experts_per_token, info->num_experts, info->num_experts);
    if (info->moe_ffn_hidden_size < 1)
        return DSI_ERROR(DS_ERR_BAD_FILE, "%s: expert MLP size %d (accepted: at least 1)", origin,
                         info->moe_ffn_hidden_size);
    if (info->moe_layer_freq < 1 || info->first_dense_layers >= info->num_layers)
        return DSI_ERROR(DS_ERR_BAD_FILE,
                         "%s: MoE layer frequency %d after %d dense layers of %d leaves no MoE "
                         "layer (accepted: a frequency >= 1, fewer dense layers than layers)",
                         origin, info->moe_layer_freq, info->first_dense_layers, info->num_layers);
    return DS_OK;
}
