/*
 * Private model interface: the layer structure of a model and the ordered
 * operators of each layer pass, shared by event generation, the profiler and
 * the simulator.
 */
#ifndef DSI_MODEL_H
#define DSI_MODEL_H

#include <dsmpi/events.h>
#include <dsmpi/model.h>

#include "dsi_core.h"

/* ---- layer-list models ----------------------------------------------------- */

typedef enum dsi_generic_op_kind {
    DSI_GENERIC_LINEAR, /* rows x in_features -> rows x out_features */
    DSI_GENERIC_CONV2D, /* as an implicit GEMM */
    DSI_GENERIC_NORM,   /* layer or batch norm over `elements` with `channels` */
    DSI_GENERIC_RELU,
    DSI_GENERIC_GELU,
    DSI_GENERIC_SOFTMAX, /* rows x cols */
    DSI_GENERIC_DROPOUT,
    DSI_GENERIC_ADD,
    DSI_GENERIC_POOL,
} dsi_generic_op_kind_t;

typedef enum dsi_tp_split {
    DSI_TP_NONE = 0,   /* replicated on every tensor-parallel rank */
    DSI_TP_COLUMN = 1, /* output features split */
    DSI_TP_ROW = 2,    /* input features split, output all-reduced */
} dsi_tp_split_t;

/* One operator of a layer-list layer, per sample (a micro-batch multiplies
 * the rows). */
typedef struct dsi_generic_op {
    dsi_generic_op_kind_t kind;
    dsi_tp_split_t split;
    int64_t rows;   /* per sample: GEMM rows (tokens, output pixels) or elementwise rows */
    int64_t cols;   /* GEMM: out features; elementwise: columns */
    int64_t inner;  /* GEMM: in features (reduction length) */
    int64_t params; /* trainable parameters */
    char name[32];
} dsi_generic_op_t;

typedef struct dsi_generic_layer {
    char name[32];
    int num_ops;
    dsi_generic_op_t *ops;
} dsi_generic_layer_t;

struct ds_model {
    ds_model_info_t info;
    /* Layer-list models: the layers after "repeat" expansion share entries:
     * layer_of[i] indexes `generic` for pipeline layer i. */
    int num_generic;
    dsi_generic_layer_t *generic;
    int *layer_of;
    int64_t classes;      /* layer-list loss: output classes (0 = no loss op) */
    int hf_max_positions; /* > 0 when seq_len came from a HF config's limit */
    int seq_len_overridden;
    char seq_note[160];
};

/* ---- operators of a layer pass --------------------------------------------- */

/* Shape context of a pass: what changes a layer's operators. */
typedef struct dsi_shape_ctx {
    int mbs;
    int tp;
    int sp;
    ds_recompute_t recompute;
    ds_dtype_t dtype;
    int flash;    /* attention as one fused operator (strategy flash=on) */
    ds_fp8_t fp8; /* FP8 GEMMs in the transformer layers (strategy fp8=) */
    int cp;       /* context parallelism: each rank holds seq / cp tokens (1: none) */
    ds_cp_comm_t cp_comm;
    /* MoE layers (strategy ep=, etp=, ...; resolved) */
    int ep, etp;
    ds_moe_dispatcher_t moe_dispatcher;
    int moe_topk;        /* 0: the model's experts per token */
    double router_skew;  /* 0: DS_ROUTER_SKEW_DEFAULT */
    double moe_capacity; /* 0: dropless */
} dsi_shape_ctx_t;

/* Which ranks of an expert-parallel group run an operator: expert work is
 * emitted twice when ep > 1, for the mean rank and for the slowest (the
 * router's skew), the slowest's copy right after the mean's. */
typedef enum dsi_ep_role {
    DSI_EP_ALL = 0,     /* every rank */
    DSI_EP_MEAN = 1,    /* every rank but the slowest of its EP group */
    DSI_EP_SLOWEST = 2, /* the slowest rank only, in place of the operator before it */
} dsi_ep_role_t;

/* One operator of a pass, in issue order.  Communication operators are the
 * tensor-parallel collectives inside the layer (group DS_GROUP_TP) and the
 * context-parallel exchange of keys and values (group DS_GROUP_CP; a ring
 * transfer is hidden behind the attention step that follows it). */
typedef struct dsi_op {
    ds_event_key_t key; /* zeroed, then filled; comm layout fields left 0 here */
    double flops;
    double bytes;
    int64_t grad_params; /* parameters whose gradient is complete after this op (reduced over dp;
                            expert weights' gradients go over edp and are not counted here) */
    const char *label;
    uint8_t ep_role; /* dsi_ep_role_t */
} dsi_op_t;

/* Pieces of a pipeline: the embedding before layer 0, the head after the
 * last layer, and transformer / layer-list layers in between. */
typedef enum dsi_part {
    DSI_PART_EMBEDDING = -1,
    DSI_PART_HEAD = -2,
} dsi_part_t;

/* Upper bound of operators in one pass of any part: a context-parallel
 * ring adds two per step (cp up to DSI_MAX_CP, twice with recompute). */
#define DSI_MAX_LAYER_OPS 512
/* Longest context-parallel ring modelled. */
#define DSI_MAX_CP 64

/* Fills ops[] with the operators of `pass` (forward or backward; a backward
 * pass starts with its recompute operators when the context asks for them)
 * of layer `layer` (0..num_layers-1) or part DSI_PART_EMBEDDING/HEAD. */
ds_status_t dsi_model_layer_ops(const ds_model_t *model, int layer, const dsi_shape_ctx_t *ctx,
                                ds_pass_t pass, dsi_op_t *ops, size_t max_ops, size_t *count_p);

/* The key of a framework's time between the operators of one pass of
 * `layer` (DS_OP_FRAMEWORK_GAP), whose operators are ops[0..count): a
 * framework spends it per operator it dispatches, whatever their shapes, so
 * the key holds the pass's compute operators and the part, not the shapes,
 * and a tensor-parallel split of the pass finds the unsplit run's.  False
 * for a pass without compute operators. */
bool dsi_pass_gap_key(const dsi_op_t *ops, size_t count, int layer, ds_pass_t pass,
                      ds_event_key_t *key);

/* Trainable parameters of a layer or part: as the model defines them, and
 * the share one tensor-parallel rank holds (vocabulary padded as Megatron
 * pads it to a multiple of 128 x tp). */
int64_t dsi_model_layer_params(const ds_model_t *model, int layer);
int64_t dsi_model_layer_params_tp(const ds_model_t *model, int layer, int tp);

/* Mixture of experts and latent attention (moe.c). */
bool dsi_model_layer_is_moe(const ds_model_t *model, int layer);
/* MoE layers among layers first .. first + count - 1. */
int dsi_model_moe_layers(const ds_model_t *model, int first, int count);
/* A dense MLP of `width` columns on one of `tp` ranks. */
int64_t dsi_model_mlp_params(const ds_model_info_t *info, int64_t width, int64_t tp);
/* An MoE layer's parameters outside the routed experts on one tensor-parallel
 * rank: router (replicated), shared experts (split over tp), their gate. */
int64_t dsi_model_moe_dense_params(const ds_model_info_t *info, int64_t tp);
/* Routed expert parameters one rank holds: num_experts / ep experts, each
 * split over etp ranks; 0 for a dense layer. */
int64_t dsi_model_layer_expert_params(const ds_model_t *model, int layer, int etp, int ep);
/* Multi-head latent attention's parameters on one tensor-parallel rank. */
int64_t dsi_model_mla_params(const ds_model_info_t *info, int64_t tp);
/* HF readers (json_root: a jansson object): the expert and latent-attention
 * fields of a LLaMA-like config, and a DBRX config. */
ds_status_t dsi_model_moe_from_hf(const void *json_root, const char *origin, const char *model_type,
                                  ds_model_info_t *info);
ds_status_t dsi_model_dbrx_from_hf(const void *json_root, const char *origin,
                                   ds_model_info_t *info);
ds_status_t dsi_model_moe_check(const ds_model_info_t *info, const char *origin);

/* Layers of a layer-list model, presets and HF configs: loaders. */
ds_status_t dsi_model_from_preset(const char *name, ds_model_t *model);
ds_status_t dsi_model_from_hf_config(const void *json_root, const char *origin, ds_model_t *model);
ds_status_t dsi_model_from_layer_list(const void *json_root, const char *origin, ds_model_t *model);
/* Derived fields (head_dim, parameters) after a loader filled the basics;
 * checks that the shape is consistent. */
ds_status_t dsi_model_finish(ds_model_t *model, const char *origin);

#endif /* DSI_MODEL_H */
