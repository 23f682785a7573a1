/* Hugging Face config.json files of the GPT-2, BERT, T5 and LLaMA/Mistral
 * families, their mixture-of-experts kin (Mixtral, Qwen-MoE, DeepSeek,
 * Llama-4) and DBRX, with the field names Hugging Face writes. */
#include "dsi_model.h"

#include "dsi_json.h"

#include <string.h>

#define HF_MAX 16777216 /* bound on every integer field */
#define HF_DEFAULT_GLOBAL_BATCH 512

typedef enum { FAMILY_GPT2, FAMILY_BERT, FAMILY_T5, FAMILY_LLAMA, FAMILY_DBRX } family_t;

/* LLaMA-like families read their experts (moe.c) and DeepSeek's latent
 * attention; llama4 reads its text_config. */
static const struct {
    const char *model_type;
    family_t family;
} families[] = {
    {"gpt2", FAMILY_GPT2},
    {"bert", FAMILY_BERT},
    {"roberta", FAMILY_BERT},
    {"t5", FAMILY_T5},
    {"mt5", FAMILY_T5},
    {"llama", FAMILY_LLAMA},
    {"mistral", FAMILY_LLAMA},
    {"qwen2", FAMILY_LLAMA},
    {"mixtral", FAMILY_LLAMA},
    {"qwen2_moe", FAMILY_LLAMA},
    {"qwen3_moe", FAMILY_LLAMA},
    {"deepseek_v2", FAMILY_LLAMA},
    {"deepseek_v3", FAMILY_LLAMA},
    {"llama4", FAMILY_LLAMA},
    {"llama4_text", FAMILY_LLAMA},
    {"dbrx", FAMILY_DBRX},
};
#define ACCEPTED_TYPES                                                                             \
    "gpt2, bert, roberta, t5, mt5, llama, mistral, qwen2, mixtral, qwen2_moe, qwen3_moe, "         \
    "deepseek_v2, deepseek_v3, llama4, dbrx"

/* Fields by which the Hugging Face families declare experts, looked up at the
 * top level and in sub-configs (dbrx's ffn_config, llama4's text_config, ...):
 * a number above `dense_max` declares a mixture of experts (one expert, or a
 * size of 0, is a dense MLP; null counts as absent). */
static const struct {
    const char *field;
    double dense_max;
} moe_fields[] = {
    {"num_local_experts", 1},   /* mixtral, phimoe, granitemoe, jetmoe, arctic, llama4, gpt_oss */
    {"num_experts", 1},         /* qwen2_moe, qwen3_moe, olmoe, jamba, grok-1 */
    {"n_routed_experts", 1},    /* deepseek_v2, deepseek_v3, glm4_moe */
    {"moe_num_experts", 1},     /* dbrx (ffn_config), ernie4_5_moe, aria */
    {"num_experts_per_tok", 1}, /* most families: experts chosen per token */
    {"num_experts_per_token", 1},
    {"experts_per_token", 1},               /* gpt_oss */
    {"moe_top_k", 1},                       /* dbrx (ffn_config) */
    {"moe_k", 1},                           /* ernie4_5_moe */
    {"n_shared_experts", 1},                /* deepseek_v2, deepseek_v3 */
    {"moe_intermediate_size", 0},           /* qwen2_moe, qwen3_moe, deepseek_v2/v3 */
    {"shared_expert_intermediate_size", 0}, /* qwen2_moe */
};
#define MOE_SUBCONFIG_DEPTH                                                                        \
    3 /* sub-configs in sub-configs: thinker_config.text_config.num_experts */

/* model_type values of mixture-of-experts families: refused as such even when
 * their expert fields are named otherwise.  Any model_type containing "moe"
 * is one as well. */
static const char *const moe_model_types[] = {
    "mixtral",
    "phimoe",
    "jetmoe",
    "arctic",
    "minimax",
    "gpt_oss",
    "grok",
    "grok-1",
    "qwen2_moe",
    "qwen3_moe",
    "qwen3_next",
    "qwen3_omni_moe",
    "qwen3_vl_moe",
    "deepseek_v2",
    "deepseek_v3",
    "deepseek_vl_v2",
    "kimi_vl",
    "glm4_moe",
    "glm4v_moe",
    "dbrx",
    "llama4",
    "llama4_text",
    "jamba",
    "olmoe",
    "flex_olmo",
    "granitemoe",
    "granitemoeshared",
    "granitemoehybrid",
    "switch_transformers",
    "nllb_moe",
    "gptsan-japanese",
    "hunyuan_v1_moe",
    "ernie4_5_moe",
    "dots1",
    "bailing_moe",
    "aria",
    "aria_text",
    "longcat_flash",
};

/* The first expert field of `object` or of its sub-configs that declares a
 * mixture of experts: its dotted path and value. */
static bool find_moe_field(const json_t *object, const char *prefix, int depth, char *path,
                           size_t size, double *value_p)
{
    for (size_t i = 0; i < DSI_ARRAY_SIZE(moe_fields); i++) {
        const json_t *value = json_object_get(object, moe_fields[i].field);
        if (json_is_number(value) && json_number_value(value) > moe_fields[i].dense_max) {
            snprintf(path, size, "%s%s", prefix, moe_fields[i].field);
            *value_p = json_number_value(value);
            return true;
        }
    }
    if (depth == 0)
        return false;
    const char *key;
    json_t *member;
    json_object_foreach((json_t *)object, key, member)
    {
        if (!json_is_object(member))
            continue;
        char inner[128];
        snprintf(inner, sizeof(inner), "%s%s.", prefix, key);
        if (find_moe_field(member, inner, depth - 1, path, size, value_p))
            return true;
    }
    return false;
}

static bool is_moe_model_type(const char *model_type)
{
    for (size_t i = 0; i < DSI_ARRAY_SIZE(moe_model_types); i++)
        if (strcmp(model_type, moe_model_types[i]) == 0)
            return true;
    return strstr(model_type, "moe") != NULL;
}

/* Refuses experts in a family whose reader does not take them, whatever the
 * family calls the experts. */
static ds_status_t refuse_moe(const json_t *root, const char *origin, const char *model_type)
{
    char path[256];
    double value = 0;
    if (find_moe_field(root, "", MOE_SUBCONFIG_DEPTH, path, sizeof(path), &value))
        return DSI_ERROR(DS_ERR_BAD_FILE,
                         "%s: mixture-of-experts (%s = %.15g) in model_type \"%s\" is not "
                         "modelled (accepted: experts in model_type mixtral, qwen2, qwen2_moe, "
                         "qwen3_moe, deepseek_v2, deepseek_v3, llama4, dbrx)",
                         origin, path, value, model_type);
    if (is_moe_model_type(model_type))
        return DSI_ERROR(DS_ERR_BAD_FILE,
                         "%s: mixture-of-experts (model_type \"%s\") is not modelled (accepted: "
                         "model_type " ACCEPTED_TYPES ")",
                         origin, model_type);
    return DS_OK;
}

static ds_status_t get_int(const json_t *root, const char *key, const char *origin, bool required,
                           int *value_p)
{
    return dsi_json_int32(root, key, origin, 1, HF_MAX, required, value_p);
}

static ds_status_t activation_from_name(const char *name, const char *origin, const char *field,
                                        bool gated_default, ds_activation_t *act_p)
{
    static const struct {
        const char *name;
        ds_activation_t plain, gated;
    } acts[] = {
        {"gelu", DS_ACT_GELU, DS_ACT_GEGLU},
        {"gelu_new", DS_ACT_GELU, DS_ACT_GEGLU},
        {"gelu_fast", DS_ACT_GELU, DS_ACT_GEGLU},
        {"gelu_pytorch_tanh", DS_ACT_GELU, DS_ACT_GEGLU},
        {"relu", DS_ACT_RELU, DS_ACT_RELU},
        {"silu", DS_ACT_SWIGLU, DS_ACT_SWIGLU},
        {"swish", DS_ACT_SWIGLU, DS_ACT_SWIGLU},
        {"gated-gelu", DS_ACT_GEGLU, DS_ACT_GEGLU},
        {"gated-silu", DS_ACT_SWIGLU, DS_ACT_SWIGLU},
    };
    for (size_t i = 0; i < DSI_ARRAY_SIZE(acts); i++) {
        if (strcmp(name, acts[i].name) == 0) {
            *act_p = gated_default ? acts[i].gated : acts[i].plain;
            return DS_OK;
        }
    }
    return DSI_ERROR(DS_ERR_BAD_FILE,
                     "%s: \"%s\" = \"%s\" is not supported (accepted: gelu, gelu_new, gelu_fast, "
                     "gelu_pytorch_tanh, relu, silu, swish, gated-gelu, gated-silu)",
                     origin, field, name);
}

static void name_from_origin(const json_t *root, const char *origin, ds_model_info_t *info)
{
    const char *name = NULL;
    if (dsi_json_string(root, "_name_or_path", origin, false, &name) != DS_OK || name == NULL ||
        *name == '\0') {
        name = strrchr(origin, '/') ? strrchr(origin, '/') + 1 : origin;
    } else if (strrchr(name, '/') != NULL) {
        name = strrchr(name, '/') + 1;
    }
    snprintf(info->name, sizeof(info->name), "%s", name);
    char *dot = strstr(info->name, ".json");
    if (dot != NULL)
        *dot = '\0';
}

static ds_status_t parse_gpt2(const json_t *root, const char *origin, ds_model_info_t *info)
{
    const char *act = "gelu_new";
    info->arch = DS_ARCH_DECODER;
    DSI_TRY(get_int(root, "n_layer", origin, true, &info->num_layers));
    DSI_TRY(get_int(root, "n_embd", origin, true, &info->hidden_size));
    DSI_TRY(get_int(root, "n_head", origin, true, &info->num_heads));
    DSI_TRY(get_int(root, "vocab_size", origin, true, &info->vocab_size));
    info->max_positions = 1024;
    DSI_TRY(get_int(root, "n_ctx", origin, false, &info->max_positions));
    DSI_TRY(get_int(root, "n_positions", origin, false, &info->max_positions));
    info->ffn_hidden_size = 4 * info->hidden_size;
    DSI_TRY(get_int(root, "n_inner", origin, false, &info->ffn_hidden_size));
    DSI_TRY(dsi_json_string(root, "activation_function", origin, false, &act));
    DSI_TRY(activation_from_name(act, origin, "activation_function", false, &info->activation));
    info->norm = DS_NORM_LAYERNORM;
    info->linear_bias = 1;
    info->learned_positions = 1;
    double dropout = 0.1;
    DSI_TRY(dsi_json_double(root, "resid_pdrop", origin, 0.0, 1.0, false, &dropout));
    info->dropout = dropout > 0.0;
    info->tied_embeddings = 1;
    return DS_OK;
}

static ds_status_t parse_bert(const json_t *root, const char *origin, ds_model_info_t *info)
{
    const char *act = "gelu";
    info->arch = DS_ARCH_ENCODER;
    DSI_TRY(get_int(root, "num_hidden_layers", origin, true, &info->num_layers));
    DSI_TRY(get_int(root, "hidden_size", origin, true, &info->hidden_size));
    DSI_TRY(get_int(root, "num_attention_heads", origin, true, &info->num_heads));
    DSI_TRY(get_int(root, "intermediate_size", origin, true, &info->ffn_hidden_size));
    DSI_TRY(get_int(root, "vocab_size", origin, true, &info->vocab_size));
    info->max_positions = 512;
    DSI_TRY(get_int(root, "max_position_embeddings", origin, false, &info->max_positions));
    DSI_TRY(dsi_json_string(root, "hidden_act", origin, false, &act));
    DSI_TRY(activation_from_name(act, origin, "hidden_act", false, &info->activation));
    info->norm = DS_NORM_LAYERNORM;
    info->linear_bias = 1;
    info->learned_positions = 1;
    double dropout = 0.1;
    DSI_TRY(dsi_json_double(root, "hidden_dropout_prob", origin, 0.0, 1.0, false, &dropout));
    info->dropout = dropout > 0.0;
    info->tied_embeddings = 1;
    return DS_OK;
}

static ds_status_t parse_t5(const json_t *root, const char *origin, ds_model_info_t *info)
{
    const char *proj = "relu";
    int encoder = 0, decoder = 0;
    info->arch = DS_ARCH_ENCODER_DECODER;
    DSI_TRY(get_int(root, "num_layers", origin, true, &encoder));
    decoder = encoder;
    DSI_TRY(get_int(root, "num_decoder_layers", origin, false, &decoder));
    if (encoder + decoder > HF_MAX)
        return DSI_ERROR(DS_ERR_BAD_FILE, "%s: %d + %d layers is too many", origin, encoder,
                         decoder);
    info->num_layers = encoder + decoder;
    info->num_encoder_layers = encoder;
    DSI_TRY(get_int(root, "d_model", origin, true, &info->hidden_size));
    DSI_TRY(get_int(root, "num_heads", origin, true, &info->num_heads));
    DSI_TRY(get_int(root, "d_kv", origin, true, &info->head_dim));
    DSI_TRY(get_int(root, "d_ff", origin, true, &info->ffn_hidden_size));
    DSI_TRY(get_int(root, "vocab_size", origin, true, &info->vocab_size));
    DSI_TRY(dsi_json_string(root, "feed_forward_proj", origin, false, &proj));
    bool gated = strncmp(proj, "gated-", 6) == 0;
    DSI_TRY(activation_from_name(gated ? proj + 6 : proj, origin, "feed_forward_proj", gated,
                                 &info->activation));
    info->norm = DS_NORM_RMSNORM;
    info->linear_bias = 0;
    info->learned_positions = 0;
    double dropout = 0.1;
    DSI_TRY(dsi_json_double(root, "dropout_rate", origin, 0.0, 1.0, false, &dropout));
    info->dropout = dropout > 0.0;
    bool tied = true;
    DSI_TRY(dsi_json_bool(root, "tie_word_embeddings", origin, false, &tied));
    info->tied_embeddings = tied;
    /* T5 has relative positions and no length limit; its pretraining used 512
     * input and 114 target tokens, rounded to 128 here. */
    info->max_positions = 512;
    DSI_TRY(get_int(root, "n_positions", origin, false, &info->max_positions));
    info->decoder_seq_len = 128;
    return DS_OK;
}

static ds_status_t parse_llama(const json_t *root, const char *origin, ds_model_info_t *info)
{
    const char *act = "silu";
    info->arch = DS_ARCH_DECODER;
    DSI_TRY(get_int(root, "num_hidden_layers", origin, true, &info->num_layers));
    DSI_TRY(get_int(root, "hidden_size", origin, true, &info->hidden_size));
    DSI_TRY(get_int(root, "num_attention_heads", origin, true, &info->num_heads));
    info->num_kv_heads = info->num_heads;
    DSI_TRY(get_int(root, "num_key_value_heads", origin, false, &info->num_kv_heads));
    DSI_TRY(get_int(root, "head_dim", origin, false, &info->head_dim));
    DSI_TRY(get_int(root, "intermediate_size", origin, true, &info->ffn_hidden_size));
    DSI_TRY(get_int(root, "vocab_size", origin, true, &info->vocab_size));
    info->max_positions = 2048;
    DSI_TRY(get_int(root, "max_position_embeddings", origin, false, &info->max_positions));
    DSI_TRY(dsi_json_string(root, "hidden_act", origin, false, &act));
    if (strcmp(act, "silu") == 0 || strcmp(act, "swish") == 0)
        info->activation = DS_ACT_SWIGLU;
    else if (strncmp(act, "gelu", 4) == 0)
        info->activation = DS_ACT_GEGLU;
    else
        return DSI_ERROR(DS_ERR_BAD_FILE,
                         "%s: \"hidden_act\" = \"%s\" is not supported for gated MLPs (accepted: "
                         "silu, swish, gelu)",
                         origin, act);
    info->norm = DS_NORM_RMSNORM;
    bool bias = false;
    DSI_TRY(dsi_json_bool(root, "attention_bias", origin, false, &bias));
    info->linear_bias = bias;
    info->learned_positions = 0;
    info->dropout = 0;
    bool tied = false;
    DSI_TRY(dsi_json_bool(root, "tie_word_embeddings", origin, false, &tied));
    info->tied_embeddings = tied;
    return DS_OK;
}

ds_status_t dsi_model_from_hf_config(const void *json_root, const char *origin, ds_model_t *model)
{
    const json_t *root = json_root;
    ds_model_info_t *info = &model->info;
    const char *model_type = NULL;
    DSI_TRY(dsi_json_string(root, "model_type", origin, false, &model_type));
    if (model_type == NULL)
        return DSI_ERROR(DS_ERR_BAD_FILE,
                         "%s: neither a Hugging Face config (no \"model_type\") nor a dsmpi layer "
                         "list (no \"format\": \"dsmpi-layers\")",
                         origin);
    size_t index = 0;
    while (index < DSI_ARRAY_SIZE(families) && strcmp(families[index].model_type, model_type) != 0)
        index++;
    family_t family = index < DSI_ARRAY_SIZE(families) ? families[index].family : FAMILY_GPT2;
    if (index == DSI_ARRAY_SIZE(families) || family == FAMILY_GPT2 || family == FAMILY_BERT ||
        family == FAMILY_T5)
        DSI_TRY(refuse_moe(root, origin, model_type));
    if (index == DSI_ARRAY_SIZE(families))
        return DSI_ERROR(DS_ERR_BAD_FILE,
                         "%s: model_type \"%s\" is not supported (accepted: " ACCEPTED_TYPES ")",
                         origin, model_type);
    /* Llama-4 keeps the language model's fields in text_config. */
    const json_t *text = json_object_get(root, "text_config");
    const json_t *fields = strcmp(model_type, "llama4") == 0 && json_is_object(text) ? text : root;
    memset(info, 0, sizeof(*info));
    name_from_origin(root, origin, info);
    info->source = DS_MODEL_HF_CONFIG;
    info->dtype = DS_DTYPE_BF16;
    info->global_batch = HF_DEFAULT_GLOBAL_BATCH;
    switch (family) {
    case FAMILY_GPT2: DSI_TRY(parse_gpt2(root, origin, info)); break;
    case FAMILY_BERT: DSI_TRY(parse_bert(root, origin, info)); break;
    case FAMILY_T5: DSI_TRY(parse_t5(root, origin, info)); break;
    case FAMILY_LLAMA:
        DSI_TRY(parse_llama(fields, origin, info));
        DSI_TRY(dsi_model_moe_from_hf(fields, origin, model_type, info));
        break;
    case FAMILY_DBRX: DSI_TRY(dsi_model_dbrx_from_hf(root, origin, info)); break;
    }
    /* max_position_embeddings is a limit, not the training length. */
    int cap = (int)DSI_MIN(dsi_param_int(DSI_PARAM_HF_SEQ_LEN_CAP), (int64_t)HF_MAX);
    info->seq_len = DSI_MIN(info->max_positions, cap > 0 ? cap : info->max_positions);
    model->hf_max_positions = info->max_positions;
    snprintf(
        model->seq_note, sizeof(model->seq_note),
        "seq-len %d taken from max_position_embeddings %d%s; set --seq-len for the training length",
        info->seq_len, info->max_positions, info->seq_len < info->max_positions ? " (capped)" : "");
    return dsi_model_finish(model, origin);
}
