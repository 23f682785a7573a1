/* Loading, overriding and describing models. */
#include "dsi_model.h"

#include "dsi_json.h"

#include <string.h>
#include <sys/stat.h>

/* Limits that keep every product of shapes far from int64 overflow. */
#define MAX_LAYERS 100000
#define MAX_HIDDEN (1 << 20)
#define MAX_SEQ_LEN (1 << 24)
#define MAX_PARAMETERS 1e15 /* a thousand times the largest models trained */
#define MAX_GLOBAL_BATCH (1LL << 32)

static ds_status_t model_alloc(ds_model_t **model_p)
{
    ds_model_t *model;
    DSI_TRY(dsi_calloc(1, sizeof(*model), &model));
    *model_p = model;
    return DS_OK;
}

void ds_model_destroy(ds_model_t *model)
{
    if (model == NULL)
        return;
    for (int i = 0; i < model->num_generic; i++)
        dsi_free(model->generic[i].ops);
    dsi_free(model->generic);
    dsi_free(model->layer_of);
    dsi_free(model);
}

static bool looks_like_path(const char *spec)
{
    size_t n = strlen(spec);
    struct stat info;
    return strchr(spec, '/') != NULL || (n > 5 && strcmp(spec + n - 5, ".json") == 0) ||
           stat(spec, &info) == 0;
}

static ds_status_t load_json_root(json_t *root, const char *origin, ds_model_t *model)
{
    const char *format = NULL;
    DSI_TRY(dsi_json_string(root, "format", origin, false, &format));
    if (format != NULL && strcmp(format, "dsmpi-layers") == 0)
        return dsi_model_from_layer_list(root, origin, model);
    if (format != NULL)
        return DSI_ERROR(DS_ERR_BAD_FILE,
                         "%s: \"format\" is \"%s\" (accepted: \"dsmpi-layers\", or a Hugging Face "
                         "config without \"format\")",
                         origin, format);
    return dsi_model_from_hf_config(root, origin, model);
}

ds_status_t ds_model_load_json(const char *text, size_t size, const char *origin,
                               ds_model_t **model_p)
{
    ds_status_t status;
    ds_model_t *model = NULL;
    json_t *root = NULL;
    DSI_TRY_GOTO(model_alloc(&model), status, err);
    DSI_TRY_GOTO(dsi_json_load_text(text, size, origin, &root), status, err);
    DSI_TRY_GOTO(load_json_root(root, origin, model), status, err);
    json_decref(root);
    *model_p = model;
    return DS_OK;
err:
    json_decref(root);
    ds_model_destroy(model);
    return status;
}

ds_status_t ds_model_load(const char *spec, ds_model_t **model_p)
{
    ds_status_t status;
    ds_model_t *model = NULL;
    json_t *root = NULL;
    if (spec == NULL || *spec == '\0')
        return DSI_ERROR(DS_ERR_INVALID_ARG,
                         "model is empty (accepted: a preset name or a JSON file)");
    DSI_TRY_GOTO(model_alloc(&model), status, err);
    if (looks_like_path(spec)) {
        DSI_TRY_GOTO(dsi_json_load_file(spec, &root), status, err);
        DSI_TRY_GOTO(load_json_root(root, spec, model), status, err);
    } else {
        DSI_TRY_GOTO(dsi_model_from_preset(spec, model), status, err);
    }
    json_decref(root);
    *model_p = model;
    return DS_OK;
err:
    json_decref(root);
    ds_model_destroy(model);
    return status;
}

static int64_t layer_active_params(const ds_model_t *model, int layer);

static int64_t norm_params(const ds_model_info_t *info)
{
    return info->norm == DS_NORM_LAYERNORM ? 2LL * info->hidden_size : info->hidden_size;
}

ds_status_t dsi_model_finish(ds_model_t *model, const char *origin)
{
    ds_model_info_t *info = &model->info;
    if (info->arch != DS_ARCH_LAYER_LIST) {
        if (info->num_layers < 1 || info->num_layers > MAX_LAYERS)
            return DSI_ERROR(DS_ERR_BAD_FILE, "%s: %d layers (accepted: 1 to %d)", origin,
                             info->num_layers, MAX_LAYERS);
        if (info->hidden_size < 1 || info->hidden_size > MAX_HIDDEN)
            return DSI_ERROR(DS_ERR_BAD_FILE, "%s: hidden size %d (accepted: 1 to %d)", origin,
                             info->hidden_size, MAX_HIDDEN);
        if (info->num_heads < 1 || info->num_heads > info->hidden_size)
            return DSI_ERROR(DS_ERR_BAD_FILE,
                             "%s: %d attention heads (accepted: 1 to the hidden size %d)", origin,
                             info->num_heads, info->hidden_size);
        if (info->num_kv_heads == 0)
            info->num_kv_heads = info->num_heads;
        if (info->num_kv_heads < 1 || info->num_heads % info->num_kv_heads != 0)
            return DSI_ERROR(DS_ERR_BAD_FILE,
                             "%s: %d key/value heads do not divide %d attention heads (accepted: a "
                             "divisor of %d)",
                             origin, info->num_kv_heads, info->num_heads, info->num_heads);
        if (info->head_dim == 0) {
            if (info->hidden_size % info->num_heads != 0)
                return DSI_ERROR(DS_ERR_BAD_FILE,
                                 "%s: hidden size %d is not a multiple of %d heads (give head_dim)",
                                 origin, info->hidden_size, info->num_heads);
            info->head_dim = info->hidden_size / info->num_heads;
        }
        if (info->head_dim < 1 || info->head_dim > MAX_HIDDEN)
            return DSI_ERROR(DS_ERR_BAD_FILE, "%s: head dimension %d (accepted: 1 to %d)", origin,
                             info->head_dim, MAX_HIDDEN);
        if (info->ffn_hidden_size < 1 || info->ffn_hidden_size > 64 * MAX_HIDDEN)
            return DSI_ERROR(DS_ERR_BAD_FILE, "%s: MLP size %d (accepted: 1 to %d)", origin,
                             info->ffn_hidden_size, 64 * MAX_HIDDEN);
        if (info->vocab_size < 1 || info->vocab_size > (1 << 24))
            return DSI_ERROR(DS_ERR_BAD_FILE, "%s: vocabulary of %d (accepted: 1 to %d)", origin,
                             info->vocab_size, 1 << 24);
        if (info->arch == DS_ARCH_ENCODER_DECODER &&
            (info->num_encoder_layers < 1 || info->num_encoder_layers >= info->num_layers))
            return DSI_ERROR(DS_ERR_BAD_FILE,
                             "%s: %d encoder layers of %d (accepted: at least one encoder and one "
                             "decoder layer)",
                             origin, info->num_encoder_layers, info->num_layers);
        if (info->arch == DS_ARCH_ENCODER)
            info->num_encoder_layers = info->num_layers;
        if (info->arch == DS_ARCH_ENCODER_DECODER && info->decoder_seq_len == 0)
            info->decoder_seq_len = info->seq_len;
    }
    DSI_TRY(dsi_model_moe_check(info, origin));
    if (info->seq_len < 1 || info->seq_len > MAX_SEQ_LEN)
        return DSI_ERROR(DS_ERR_BAD_FILE, "%s: sequence length %d (accepted: 1 to %d)", origin,
                         info->seq_len, MAX_SEQ_LEN);
    if (info->global_batch < 1)
        info->global_batch = 1;
    /* In double: the largest dimensions allowed can multiply past int64. */
    double total = 0.0;
    for (int layer = DSI_PART_HEAD; layer < info->num_layers; layer++)
        total += (double)dsi_model_layer_params(model, layer);
    if (total > MAX_PARAMETERS)
        return DSI_ERROR(DS_ERR_BAD_FILE, "%s: %.3g parameters (accepted: at most %.0e)", origin,
                         total, MAX_PARAMETERS);
    info->num_parameters = (int64_t)total;
    info->num_active_parameters = 0;
    for (int layer = DSI_PART_HEAD; layer < info->num_layers; layer++)
        info->num_active_parameters += layer_active_params(model, layer);
    return DS_OK;
}

/* ---- parameters ----------------------------------------------------------- */

static int64_t attention_params(const ds_model_info_t *info, int64_t tp, bool cross)
{
    if (info->kv_lora_rank > 0)
        return dsi_model_mla_params(info, tp);
    int64_t h = info->hidden_size, d = info->head_dim;
    int64_t q = info->num_heads * d / tp, kv = info->num_kv_heads * d / tp;
    int64_t bias = info->linear_bias;
    (void)
        cross; /* cross-attention has the same weights: q from the decoder, k/v from the encoder */
    int64_t qkv = h * (q + 2 * kv) + bias * (q + 2 * kv);
    int64_t proj = q * h + bias * h;
    return qkv + proj;
}

/* An MoE layer's routed experts are not split over tp: see
 * dsi_model_layer_expert_params. */
static int64_t mlp_params(const ds_model_t *model, int layer, int64_t tp)
{
    if (dsi_model_layer_is_moe(model, layer))
        return dsi_model_moe_dense_params(&model->info, tp);
    return dsi_model_mlp_params(&model->info, model->info.ffn_hidden_size, tp);
}

/* Megatron pads the vocabulary to a multiple of 128 x tp. */
static int64_t padded_vocab(const ds_model_info_t *info, int tp)
{
    int64_t multiple = 128LL * tp;
    return (info->vocab_size + multiple - 1) / multiple * multiple;
}

/* T5's relative position buckets (32 per head, first encoder and first
 * decoder layer), kept with the embedding. */
#define T5_RELATIVE_BUCKETS 32

static int64_t layer_params(const ds_model_t *model, int layer, int tp, bool pad_vocab)
{
    const ds_model_info_t *info = &model->info;
    if (info->arch == DS_ARCH_LAYER_LIST) {
        if (layer < 0)
            return 0;
        const dsi_generic_layer_t *g = &model->generic[model->layer_of[layer]];
        int64_t total = 0;
        for (int i = 0; i < g->num_ops; i++)
            total += g->ops[i].split == DSI_TP_NONE ? g->ops[i].params : g->ops[i].params / tp;
        return total;
    }
    int64_t h = info->hidden_size;
    int64_t vocab = (pad_vocab ? padded_vocab(info, tp) : info->vocab_size) / tp;
    if (layer == DSI_PART_EMBEDDING) {
        int64_t total = vocab * h;
        if (info->learned_positions)
            total += (int64_t)info->max_positions * h;
        if (info->arch == DS_ARCH_ENCODER)
            total += 2 * h + norm_params(info); /* token types, embedding LayerNorm */
        if (info->arch == DS_ARCH_ENCODER_DECODER)
            total += 2LL * T5_RELATIVE_BUCKETS * info->num_heads;
        return total;
    }
    if (layer == DSI_PART_HEAD) {
        /* BERT is post-norm: no final norm, but the MLM transform and bias. */
        int64_t total = info->arch == DS_ARCH_ENCODER ? 0 : norm_params(info);
        if (info->arch == DS_ARCH_ENCODER)
            total += h * h + h + norm_params(info) + vocab;
        if (info->arch == DS_ARCH_ENCODER_DECODER)
            total += norm_params(info); /* the encoder's final norm too */
        if (!info->tied_embeddings)
            total += vocab * h;
        return total;
    }
    bool decoder_of_t5 = info->arch == DS_ARCH_ENCODER_DECODER && layer >= info->num_encoder_layers;
    int64_t total =
        attention_params(info, tp, false) + mlp_params(model, layer, tp) + 2 * norm_params(info);
    if (decoder_of_t5)
        total += attention_params(info, tp, true) + norm_params(info);
    return total;
}

int64_t dsi_model_layer_params_tp(const ds_model_t *model, int layer, int tp)
{
    return layer_params(model, layer, tp, true);
}

int64_t dsi_model_layer_params(const ds_model_t *model, int layer)
{
    return layer_params(model, layer, 1, false) + dsi_model_layer_expert_params(model, layer, 1, 1);
}

/* Parameters a token runs through: the routed experts it is sent to. */
static int64_t layer_active_params(const ds_model_t *model, int layer)
{
    const ds_model_info_t *info = &model->info;
    int64_t active = layer_params(model, layer, 1, false);
    if (dsi_model_layer_is_moe(model, layer))
        active += (int64_t)info->experts_per_token *
                  dsi_model_mlp_params(info, info->moe_ffn_hidden_size, 1);
    return active;
}

/* ---- overrides and queries ------------------------------------------------ */

ds_status_t ds_model_set_seq_len(ds_model_t *model, int64_t seq_len)
{
    if (seq_len < 1 || seq_len > MAX_SEQ_LEN)
        return DSI_ERROR(DS_ERR_INVALID_ARG, "seq-len %lld is out of range (accepted: 1 to %d)",
                         (long long)seq_len, MAX_SEQ_LEN);
    if (model->info.arch == DS_ARCH_LAYER_LIST)
        return DSI_ERROR(
            DS_ERR_INVALID_ARG,
            "seq-len cannot change a layer-list model (its shapes are fixed per sample)");
    if (model->info.learned_positions && seq_len > model->info.max_positions)
        return DSI_ERROR(DS_ERR_INVALID_ARG,
                         "seq-len %lld exceeds the %d learned positions of %s (accepted: 1 to %d)",
                         (long long)seq_len, model->info.max_positions, model->info.name,
                         model->info.max_positions);
    model->info.seq_len = (int)seq_len;
    model->seq_len_overridden = 1;
    model->seq_note[0] = '\0';
    return DS_OK;
}

ds_status_t ds_model_set_global_batch(ds_model_t *model, int64_t global_batch)
{
    if (global_batch < 1 || global_batch > MAX_GLOBAL_BATCH)
        return DSI_ERROR(DS_ERR_INVALID_ARG,
                         "global-batch %lld is out of range (accepted: 1 to %lld)",
                         (long long)global_batch, MAX_GLOBAL_BATCH);
    model->info.global_batch = global_batch;
    return DS_OK;
}

ds_status_t ds_model_set_dtype(ds_model_t *model, ds_dtype_t dtype)
{
    if (dtype == DS_DTYPE_FP8)
        return DSI_ERROR(DS_ERR_INVALID_ARG,
                         "dtype fp8 is not modelled yet (accepted: fp32, bf16, fp16)");
    model->info.dtype = dtype;
    return DS_OK;
}

void ds_model_get_info(const ds_model_t *model, ds_model_info_t *info)
{
    *info = model->info;
}

const char *ds_model_seq_len_note(const ds_model_t *model)
{
    return model->seq_note[0] != '\0' ? model->seq_note : NULL;
}

double ds_model_megatron_flops(const ds_model_t *model, int64_t global_batch, int full_recompute)
{
    const ds_model_info_t *info = &model->info;
    double B = (double)global_batch, s = info->seq_len, l = info->num_layers;
    double h = info->hidden_size, V = (double)info->vocab_size;
    if (full_recompute)
        return 96.0 * B * s * l * h * h * (1.0 + s / (6.0 * h) + V / (16.0 * l * h));
    return 72.0 * B * s * l * h * h * (1.0 + s / (6.0 * h) + V / (12.0 * l * h));
}
