/* Built-in models, with the numbers their papers and released configs give. */
#include "dsi_model.h"

#include <string.h>

typedef struct preset {
    const char *name;
    ds_model_arch_t arch;
    int layers, encoder_layers, hidden, heads, kv_heads, ffn, vocab, max_positions;
    int seq_len, decoder_seq_len;
    ds_activation_t activation;
    ds_norm_t norm;
    int tied, bias, dropout, learned_positions;
    int global_batch;
} preset_t;

/* What a mixture-of-experts preset adds: head width (0: hidden / heads),
 * experts, top-k, expert width, shared experts' width, first dense layers;
 * latent attention: q and kv ranks, rope and value head widths (head_dim is
 * then the non-rope q/k width). */
typedef struct moe_preset {
    const char *name;
    int head_dim, experts, top_k, moe_ffn, shared_ffn, first_dense;
    int q_lora, kv_lora, qk_rope, v_head;
} moe_preset_t;

#define GPT(name, layers, hidden, heads, vocab, seq, gbs)                                          \
    {                                                                                              \
        name, DS_ARCH_DECODER, layers, 0, hidden, heads, heads, 4 * (hidden), vocab, seq, seq, 0,  \
            DS_ACT_GELU, DS_NORM_LAYERNORM, 1, 1, 1, 1, gbs                                        \
    }
#define LLAMA(name, layers, hidden, heads, kv, ffn, vocab, seq, gbs)                               \
    {                                                                                              \
        name, DS_ARCH_DECODER, layers, 0, hidden, heads, kv, ffn, vocab, seq, seq, 0,              \
            DS_ACT_SWIGLU, DS_NORM_RMSNORM, 0, 0, 0, 0, gbs                                        \
    }
#define BERT(name, layers, hidden, heads, gbs)                                                     \
    {                                                                                              \
        name, DS_ARCH_ENCODER, layers, layers, hidden, heads, heads, 4 * (hidden), 30522, 512,     \
            512, 0, DS_ACT_GELU, DS_NORM_LAYERNORM, 1, 1, 1, 1, gbs                                \
    }

static const preset_t presets[] = {
    BERT("bert-large", 24, 1024, 16, 256),
    /* DistSim's 48-layer BERT: BERT-large widths, twice the depth. */
    BERT("bert-exlarge", 48, 1024, 16, 16),
    GPT("gpt2-medium", 24, 1024, 16, 50257, 1024, 512),
    GPT("gpt2-xl", 48, 1600, 25, 50257, 1024, 512),
    {"t5-large", DS_ARCH_ENCODER_DECODER, 48, 24, 1024, 16, 16, 4096, 32128, 512, 512, 128,
     DS_ACT_RELU, DS_NORM_RMSNORM, 1, 0, 1, 0, 128},
    GPT("gpt3-175b", 96, 12288, 96, 50257, 2048, 1536),
    /* Megatron-LM's weak-scaling models (Narayanan et al., SC'21, table 1). */
    GPT("megatron-1.7b", 24, 2304, 24, 51200, 2048, 512),
    GPT("megatron-3.6b", 30, 3072, 32, 51200, 2048, 512),
    GPT("megatron-7.5b", 36, 4096, 32, 51200, 2048, 512),
    GPT("megatron-18b", 40, 6144, 48, 51200, 2048, 1024),
    GPT("megatron-39b", 48, 8192, 64, 51200, 2048, 1536),
    GPT("megatron-76b", 60, 10240, 80, 51200, 2048, 1792),
    GPT("megatron-145b", 80, 12288, 96, 51200, 2048, 2304),
    GPT("megatron-310b", 96, 16384, 128, 51200, 2048, 2160),
    GPT("megatron-530b", 105, 20480, 128, 51200, 2048, 2520),
    GPT("megatron-1t", 128, 25600, 160, 51200, 2048, 3072),
    LLAMA("llama2-7b", 32, 4096, 32, 32, 11008, 32000, 4096, 1024),
    LLAMA("llama2-70b", 80, 8192, 64, 8, 28672, 32000, 4096, 1024),
    LLAMA("llama3-8b", 32, 4096, 32, 8, 14336, 128256, 8192, 512),
    LLAMA("llama3-70b", 80, 8192, 64, 8, 28672, 128256, 8192, 512),
    LLAMA("llama3-405b", 126, 16384, 128, 8, 53248, 128256, 8192, 2048),
    /* Mixture of experts, from the released config.json files
     * (mistralai/Mixtral-8x7B-v0.1, Qwen/Qwen3-30B-A3B,
     * deepseek-ai/DeepSeek-V3); the training length and batch are choices of
     * this table, except DeepSeek-V3's 4K sequences and final batch of 15360
     * (DeepSeek-V3 technical report, sec. 4.2).  Their experts: moe_presets. */
    LLAMA("mixtral-8x7b", 32, 4096, 32, 8, 14336, 32000, 4096, 1024),
    LLAMA("qwen3-30b-a3b", 48, 2048, 32, 4, 6144, 151936, 4096, 1024),
    LLAMA("deepseek-v3", 61, 7168, 128, 128, 18432, 129280, 4096, 15360),
};

static const moe_preset_t moe_presets[] = {
    {"mixtral-8x7b", 0, 8, 2, 14336, 0, 0, 0, 0, 0, 0},
    {"qwen3-30b-a3b", 128, 128, 8, 768, 0, 0, 0, 0, 0, 0},
    {"deepseek-v3", 128, 256, 8, 2048, 2048, 3, 1536, 512, 64, 128},
};

static void apply_moe_preset(ds_model_info_t *info)
{
    for (size_t i = 0; i < DSI_ARRAY_SIZE(moe_presets); i++) {
        const moe_preset_t *m = &moe_presets[i];
        if (strcmp(info->name, m->name) != 0)
            continue;
        info->head_dim = m->head_dim;
        info->num_experts = m->experts;
        info->experts_per_token = m->top_k;
        info->moe_ffn_hidden_size = m->moe_ffn;
        info->shared_ffn_hidden_size = m->shared_ffn;
        info->first_dense_layers = m->first_dense;
        info->moe_layer_freq = 1;
        info->q_lora_rank = m->q_lora;
        info->kv_lora_rank = m->kv_lora;
        info->qk_rope_head_dim = m->qk_rope;
        info->v_head_dim = m->v_head;
    }
}

size_t ds_model_preset_count(void)
{
    return DSI_ARRAY_SIZE(presets);
}

const char *ds_model_preset_name(size_t index)
{
    return index < DSI_ARRAY_SIZE(presets) ? presets[index].name : NULL;
}

ds_status_t dsi_model_from_preset(const char *name, ds_model_t *model)
{
    const char *names[DSI_ARRAY_SIZE(presets)];
    for (size_t i = 0; i < DSI_ARRAY_SIZE(presets); i++) {
        names[i] = presets[i].name;
        if (strcmp(name, presets[i].name) != 0)
            continue;
        const preset_t *p = &presets[i];
        ds_model_info_t *info = &model->info;
        snprintf(info->name, sizeof(info->name), "%s", p->name);
        info->arch = p->arch;
        info->source = DS_MODEL_PRESET;
        info->num_layers = p->layers;
        info->num_encoder_layers = p->encoder_layers;
        info->hidden_size = p->hidden;
        info->num_heads = p->heads;
        info->num_kv_heads = p->kv_heads;
        info->ffn_hidden_size = p->ffn;
        info->vocab_size = p->vocab;
        info->max_positions = p->max_positions;
        info->seq_len = p->seq_len;
        info->decoder_seq_len = p->decoder_seq_len;
        info->activation = p->activation;
        info->norm = p->norm;
        info->tied_embeddings = p->tied;
        info->linear_bias = p->bias;
        info->dropout = p->dropout;
        info->learned_positions = p->learned_positions;
        info->dtype = DS_DTYPE_BF16;
        info->global_batch = p->global_batch;
        apply_moe_preset(info);
        return dsi_model_finish(model, p->name);
    }
    int index = 0;
    DSI_TRY(dsi_parse_choice(name, "model", names, DSI_ARRAY_SIZE(presets), &index));
    return DS_ERR_INTERNAL; /* unreachable: the name was not found above */
}
