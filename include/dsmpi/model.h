/*
 * dsmpi model descriptions: presets, Hugging Face config.json files and
 * generic layer-list files, turned into the numbers the event model needs.
 */
#ifndef DSMPI_MODEL_H
#define DSMPI_MODEL_H

#include <dsmpi/core.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ds_model ds_model_t;

typedef enum ds_model_arch {
    DS_ARCH_DECODER = 0,         /* GPT / LLaMA: causal self-attention + MLP */
    DS_ARCH_ENCODER = 1,         /* BERT: bidirectional self-attention + MLP */
    DS_ARCH_ENCODER_DECODER = 2, /* T5: encoder layers, then decoder layers with cross-attention */
    DS_ARCH_LAYER_LIST = 3,      /* anything else, described operator by operator */
} ds_model_arch_t;

typedef enum ds_activation {
    DS_ACT_GELU = 0,
    DS_ACT_RELU = 1,
    DS_ACT_SWIGLU = 2, /* gated: SiLU(x W_gate) * (x W_up) */
    DS_ACT_GEGLU = 3,  /* gated: GeLU(x W_gate) * (x W_up) */
} ds_activation_t;

typedef enum ds_norm {
    DS_NORM_LAYERNORM = 0,
    DS_NORM_RMSNORM = 1,
} ds_norm_t;

typedef enum ds_model_source {
    DS_MODEL_PRESET = 0,
    DS_MODEL_HF_CONFIG = 1,
    DS_MODEL_LAYER_LIST = 2,
} ds_model_source_t;

/* The numbers of a model, as loaded and overridden.  Transformer fields are
 * 0 for layer-list models. */
typedef struct ds_model_info {
    char name[64];
    ds_model_arch_t arch;
    ds_model_source_t source;
    int num_layers;         /* layers a pipeline splits (encoder + decoder for T5) */
    int num_encoder_layers; /* T5: the first num_encoder_layers are encoder layers */
    int hidden_size;
    int num_heads;
    int num_kv_heads; /* < num_heads: grouped-query attention */
    int head_dim;
    int ffn_hidden_size;
    int vocab_size;
    int max_positions;   /* a limit of the model, not the training length */
    int seq_len;         /* training sequence length (encoder length for T5) */
    int decoder_seq_len; /* T5 target length; 0 otherwise */
    ds_activation_t activation;
    ds_norm_t norm;
    int tied_embeddings;
    int linear_bias;       /* linear layers carry a bias */
    int dropout;           /* dropout layers run in training */
    int learned_positions; /* learned absolute position table (GPT-2, BERT) */
    ds_dtype_t dtype;      /* training dtype of weights and activations */
    int64_t global_batch;  /* default global batch, sequences (samples) */
    int64_t num_parameters;
    /* Mixture of experts, as Megatron-Core's MoE layer runs it; num_experts 0
     * is a dense model.  Layer i is an MoE layer when i >= first_dense_layers
     * and (i + 1) % moe_layer_freq == 0 (Llama-4's interleave step, Qwen's
     * decoder_sparse_step); the others keep the dense MLP of ffn_hidden_size. */
    int num_experts;            /* routed experts of an MoE layer */
    int experts_per_token;      /* top-k */
    int moe_ffn_hidden_size;    /* MLP width of one routed expert */
    int shared_ffn_hidden_size; /* MLP width of the shared experts together; 0: none */
    int shared_expert_gate;     /* a sigmoid gate (hidden -> 1) scales the shared experts (Qwen2) */
    int first_dense_layers;     /* DeepSeek's first_k_dense_replace */
    int moe_layer_freq;         /* 1: every layer from first_dense_layers on */
    /* Multi-head latent attention (DeepSeek-V2/V3); kv_lora_rank 0 is
     * standard attention.  head_dim then holds qk_nope_head_dim. */
    int q_lora_rank; /* 0: queries projected from the hidden state directly */
    int kv_lora_rank;
    int qk_rope_head_dim;
    int v_head_dim;
    int64_t num_active_parameters; /* parameters one token runs through (top-k routed experts) */
} ds_model_info_t;

/* Loads a model from `spec`: a preset name (see ds_model_preset_name), or the
 * path of a JSON file (a Hugging Face config.json, or a dsmpi layer list with
 * "format": "dsmpi-layers").  Caller frees with ds_model_destroy. */
DS_API ds_status_t ds_model_load(const char *spec, ds_model_t **model_p);

/* Same as ds_model_load for JSON text already in memory; `origin` names it in
 * error messages. */
DS_API ds_status_t ds_model_load_json(const char *text, size_t size, const char *origin,
                                      ds_model_t **model_p);

DS_API void ds_model_destroy(ds_model_t *model);

/* Overrides (the --seq-len, --global-batch and --dtype options). */
DS_API ds_status_t ds_model_set_seq_len(ds_model_t *model, int64_t seq_len);
DS_API ds_status_t ds_model_set_global_batch(ds_model_t *model, int64_t global_batch);
DS_API ds_status_t ds_model_set_dtype(ds_model_t *model, ds_dtype_t dtype);

DS_API void ds_model_get_info(const ds_model_t *model, ds_model_info_t *info);

/* A note to show the user about how the sequence length was chosen (a
 * Hugging Face config gives only max_position_embeddings), or NULL. */
DS_API const char *ds_model_seq_len_note(const ds_model_t *model);

/* Presets. */
DS_API size_t ds_model_preset_count(void);
DS_API const char *ds_model_preset_name(size_t index);

/* Model FLOPs of one iteration by the standard formula for GPT-style models
 * (Narayanan et al., SC'21, eq. 3):
 *   without recompute  72 B s l h^2 (1 + s/(6h) + V/(12 l h))
 *   full recompute     96 B s l h^2 (1 + s/(6h) + V/(16 l h))
 * with B the global batch, s the sequence, l layers, h hidden, V vocabulary.
 * It assumes an MLP of 4h and full multi-head attention. */
DS_API double ds_model_megatron_flops(const ds_model_t *model, int64_t global_batch,
                                      int full_recompute);

#ifdef __cplusplus
}
#endif

#endif /* DSMPI_MODEL_H */
