/*
 * dsmpi parallel strategies: the text grammar of --strategy, the Megatron
 * option names, validation against a model and a target, and rank placement
 * (coordinates <-> global rank <-> node).
 */
#ifndef DSMPI_STRATEGY_H
#define DSMPI_STRATEGY_H

#include <dsmpi/core.h>
#include <dsmpi/model.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ds_schedule {
    DS_SCHEDULE_GPIPE = 0,
    DS_SCHEDULE_1F1B = 1,        /* PipeDream-flush / DAPPLE */
    DS_SCHEDULE_INTERLEAVED = 2, /* interleaved 1F1B with vpp virtual stages */
} ds_schedule_t;

typedef enum ds_recompute {
    DS_RECOMPUTE_NONE = 0,
    DS_RECOMPUTE_SELECTIVE = 1, /* the attention core (QK^T, softmax, dropout, AV) */
    DS_RECOMPUTE_FULL = 2,      /* the whole layer forward, again in backward */
} ds_recompute_t;

typedef enum ds_dp_algo {
    DS_DP_AUTO = 0, /* what the communication library picks */
    DS_DP_RING = 1,
    DS_DP_TREE = 2,
    DS_DP_HIERARCHICAL = 3, /* intra-node reduce-scatter, inter-node all-reduce, intra all-gather */
    DS_DP_PS = 4,           /* parameter server push/pull */
} ds_dp_algo_t;

/* Parallel dimensions, in placement order (see ds_strategy_t.order). */
typedef enum ds_dim {
    DS_DIM_TP = 0,
    DS_DIM_DP = 1,
    DS_DIM_PP = 2,
} ds_dim_t;

#define DS_STRATEGY_TEXT_MAX 256

/* A parallel strategy.  ds_strategy_init gives Megatron-LM's defaults; fields
 * left at 0 where noted are derived by ds_strategy_resolve. */
/* FP8 training (Transformer Engine's recipes, Megatron's --fp8-format):
 * hybrid = E4M3 forward, E5M2 gradients; e4m3 = E4M3 everywhere.  The
 * layers' linear GEMMs run in FP8 with per-tensor scaling; attention,
 * norms, the embedding and the output layer stay in the training dtype,
 * the master weights in fp32. */
typedef enum ds_fp8 {
    DS_FP8_OFF = 0,
    DS_FP8_HYBRID = 1,
    DS_FP8_E4M3 = 2,
} ds_fp8_t;

/* How context parallelism exchanges keys and values (Megatron-Core's
 * --cp-comm-type): p2p = a ring of K/V blocks, each step's send/recv
 * overlapped with the attention of the step before; a2a = all-to-all of the
 * heads before and after attention (Ulysses); allgather = K/V gathered
 * whole before attention, their gradients reduce-scattered. */
typedef enum ds_cp_comm {
    DS_CP_COMM_P2P = 0,
    DS_CP_COMM_A2A = 1,
    DS_CP_COMM_ALLGATHER = 2,
} ds_cp_comm_t;
/* How an MoE layer moves tokens to the expert-parallel ranks holding their
 * experts (Megatron's --moe-token-dispatcher-type). */
typedef enum ds_moe_dispatcher {
    DS_MOE_DISPATCH_ALLTOALL = 0,  /* all-to-all dispatch and combine over the EP group */
    DS_MOE_DISPATCH_ALLGATHER = 1, /* all-gather the tokens, reduce-scatter the outputs */
} ds_moe_dispatcher_t;

/* Default router skew: the slowest expert's tokens over the mean.  1.5 is
 * about 1 + the global maximal violation (0.52) Wang et al. report for an
 * auxiliary-loss-balanced 3B MoE ("Auxiliary-loss-free load balancing
 * strategy for mixture-of-experts", arXiv:2408.15664, 2024). */
#define DS_ROUTER_SKEW_DEFAULT 1.5

typedef struct ds_strategy {
    int dp;      /* data-parallel degree; 0 = target devices / (tp * pp) */
    int tp;      /* tensor-parallel degree (Megatron-style) */
    int pp;      /* pipeline stages */
    int cp;      /* context parallelism: the sequence split over cp ranks (2 cp chunks) */
    int ep;      /* expert parallelism: ranks the routed experts are spread over (MoE models) */
    int mbs;     /* micro-batch size, sequences */
    int64_t gbs; /* global batch, sequences; 0 = the model's default */
    ds_schedule_t schedule;
    int vpp;                      /* virtual stages per pipeline rank (interleaved only), >= 1 */
    int layers_per_virtual_stage; /* Megatron's way to give vpp; 0 = use vpp */
    int sp;                       /* sequence parallelism (needs tp > 1) */
    int zero;                     /* ZeRO stage 0..3; 1 = Megatron's distributed optimizer */
    ds_recompute_t recompute;
    ds_dp_algo_t dp_algo;
    int ps_servers;               /* parameter servers for dp_algo = ps; 0 = dp */
    int64_t bucket_params;        /* DP gradient bucket, parameters; 0 = max(40M, 1M * dp) */
    int overlap_grad_reduce;      /* DP gradient sync overlaps the backward pass */
    ds_dtype_t grad_reduce_dtype; /* Megatron reduces in fp32 by default */
    int grad_clip;                /* gradient clipping: a global norm all-reduce */
    int flash_attention;          /* attention as one fused operator (FlashAttention, cuDNN SDPA) */
    ds_fp8_t fp8; /* FP8 GEMMs in the transformer layers, as Transformer Engine runs them */
    int first_stage_layers; /* uneven pipeline: layers on the first stage; 0 = even */
    int last_stage_layers;  /* uneven pipeline: layers on the last stage; 0 = even */
    /* The embedding (loss) counts as one layer when the layers are split over
     * the pp x vpp virtual stages, so the first (last) virtual stage holds one
     * transformer layer fewer: Megatron-Core's --account-for-embedding-in-
     * pipeline-split (--account-for-loss-in-pipeline-split); Llama 3's layout. */
    int embedding_in_split;
    int loss_in_split;
    /* Mixture of experts (Megatron-Core): expert layers run on etp x ep x edp
     * x pp with edp = dp * tp / (etp * ep), the EP group carved out of the
     * data-parallel ranks. */
    int etp;                            /* expert-tensor parallelism; 0 = tp */
    ds_moe_dispatcher_t moe_dispatcher; /* token dispatch and combine */
    int moe_topk;         /* experts per token; 0 = the model's (Megatron --moe-router-topk) */
    double router_skew;   /* slowest expert's tokens / mean; 0 = DS_ROUTER_SKEW_DEFAULT */
    double moe_capacity;  /* expert capacity factor (tokens above it dropped); 0 = dropless */
    ds_dim_t order[3];    /* placement, innermost (fastest varying) first; default tp, dp, pp;
                             cp always sits just inside dp (Megatron-Core's tp-cp-dp-pp) */
    ds_cp_comm_t cp_comm; /* context-parallel exchange (cp > 1) */
} ds_strategy_t;

/* Megatron-LM defaults: dp derived, tp = pp = 1, mbs 1, 1F1B, vpp 1, no SP,
 * no ZeRO, no recompute, auto DP algorithm, overlap on, fp32 reduction,
 * clipping on, placement tp-dp-pp. */
DS_API void ds_strategy_init(ds_strategy_t *strategy);

/* Applies "key=value,key=value,flag" text onto *strategy (fields not named
 * keep their value).  Keys: dp tp pp cp ep mbs gbs schedule vpp sp zero
 * recompute dp-algo ps-servers bucket overlap grad-reduce-dtype clip flash
 * fp8 (off, hybrid, e4m3) first-stage-layers last-stage-layers order
 * cp-comm (p2p, a2a, allgather), and for MoE models etp moe-dispatcher
 * (alltoall, allgather) moe-topk router-skew moe-capacity.  Flags: sp, overlap,
 * no-overlap, no-sp, no-clip. */
DS_API ds_status_t ds_strategy_parse(const char *text, ds_strategy_t *strategy);

/* Applies one Megatron-LM option (without leading dashes), e.g.
 * ("tensor-model-parallel-size", "8") or ("sequence-parallel", NULL). */
DS_API ds_status_t ds_strategy_apply_megatron(ds_strategy_t *strategy, const char *option,
                                              const char *value);

/* The strategy-grammar item a Megatron-LM option stands for, into text[size]:
 * ("tensor-model-parallel-size", "8") is "tp=8", ("sequence-parallel",
 * NULL) is "sp", ("use-distributed-optimizer", NULL) is "zero=1".  Fails on
 * an unknown option, a bad value, and on options without an item
 * (num-layers-per-virtual-pipeline-stage: vpp depends on pp). */
DS_API ds_status_t ds_strategy_megatron_item(const char *option, const char *value, char *text,
                                             size_t size);

/* Canonical text of a strategy (parses back to the same strategy). */
DS_API void ds_strategy_format(const ds_strategy_t *strategy, char *text, size_t size);

/* Derives dp and gbs and checks that the strategy can run the model on
 * `target_gpus` devices with `gpus_per_node` per node.  Fails with one line
 * naming the value and what is accepted; warnings (tp spanning nodes) go to
 * the log. */
DS_API ds_status_t ds_strategy_resolve(ds_strategy_t *strategy, const ds_model_t *model,
                                       int64_t target_gpus, int gpus_per_node);

/* Micro-batches per iteration per pipeline: gbs / (dp * mbs). */
/* Checks what the strategy needs of the device the target runs on (fp8
 * tensor cores for fp8=hybrid|e4m3: ds_device_check_fp8); one line naming
 * the value and what is accepted. */
struct ds_device_spec; /* dsmpi/cluster.h */
DS_API ds_status_t ds_strategy_check_device(const ds_strategy_t *strategy,
                                            const struct ds_device_spec *device);
DS_API int64_t ds_strategy_num_microbatches(const ds_strategy_t *strategy);

/* Layers held by pipeline rank `stage` (all its virtual chunks) and by one
 * model chunk (stage, chunk); chunk in [0, vpp). */
DS_API int ds_strategy_stage_layers(const ds_strategy_t *strategy, int num_layers, int stage);
/* First layer index and count of model chunk `chunk` on pipeline rank `stage`. */
DS_API void ds_strategy_chunk_layers(const ds_strategy_t *strategy, int num_layers, int stage,
                                     int chunk, int *first_p, int *count_p);

/* ---- placement ----------------------------------------------------------- */

/* With cp > 1, dp counts dp x cp positions, the context-parallel rank
 * fastest (Megatron-Core's tp-cp-dp-pp): dp = replica * cp + cp rank; the
 * devices of one position hold the same weights, so the gradient reduction
 * runs over all dp x cp of them.  With cp = 1 the ranks are those of before. */
typedef struct ds_coords {
    int tp, dp, pp;
} ds_coords_t;

/* The context-parallel rank and the data-parallel replica of coords.dp. */
DS_API int ds_strategy_cp_rank(const ds_strategy_t *strategy, ds_coords_t coords);
DS_API int ds_strategy_dp_replica(const ds_strategy_t *strategy, ds_coords_t coords);

/* Global rank of the device with these coordinates under strategy->order. */
DS_API int64_t ds_strategy_rank_of(const ds_strategy_t *strategy, ds_coords_t coords);
/* Inverse of ds_strategy_rank_of. */
DS_API ds_coords_t ds_strategy_coords_of(const ds_strategy_t *strategy, int64_t rank);

#ifdef __cplusplus
}
#endif

#endif /* DSMPI_STRATEGY_H */
