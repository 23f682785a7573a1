/*
 * dsmpi events: the compute and communication events of one training
 * iteration on every device of the target, their keys, and deduplication to
 * the unique keys that need measuring.
 *
 * Two events with equal keys cost the same.  A compute key holds the
 * operator, every operand shape after the tensor/sequence-parallel split
 * (GEMM transposition and batch count included), the dtype and the pass; a
 * communication key holds the primitive, bytes, dtype, group size, how the
 * group spans nodes, its concurrency class and whether it is batched with
 * the opposite direction.  The micro-batch index never enters a key.
 */
#ifndef DSMPI_EVENTS_H
#define DSMPI_EVENTS_H

#include <dsmpi/cluster.h>
#include <dsmpi/core.h>
#include <dsmpi/model.h>
#include <dsmpi/strategy.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ds_event_kind {
    DS_EVENT_COMPUTE = 0,
    DS_EVENT_COMM = 1,
} ds_event_kind_t;

/* Compute operators. */
typedef enum ds_op {
    DS_OP_GEMM = 0,             /* dims: m, n, k; variant: transposition bits */
    DS_OP_BATCHED_GEMM = 1,     /* dims: m, n, k, batch */
    DS_OP_SOFTMAX = 2,          /* dims: rows, cols; variant 1 = causal mask */
    DS_OP_LAYERNORM = 3,        /* dims: rows, cols */
    DS_OP_RMSNORM = 4,          /* dims: rows, cols */
    DS_OP_GELU = 5,             /* dims: rows, cols */
    DS_OP_RELU = 6,             /* dims: rows, cols */
    DS_OP_SWIGLU = 7,           /* dims: rows, cols (output columns) */
    DS_OP_GEGLU = 8,            /* dims: rows, cols (output columns) */
    DS_OP_DROPOUT_ADD = 9,      /* bias + dropout + residual add; dims: rows, cols */
    DS_OP_ADD = 10,             /* residual add without dropout; dims: rows, cols */
    DS_OP_DROPOUT = 11,         /* dims: rows, cols */
    DS_OP_ROPE = 12,            /* rotary embedding of q and k; dims: rows, cols */
    DS_OP_EMBEDDING = 13,       /* lookup (fwd) or scatter-add (bwd); dims: tokens, hidden, vocab */
    DS_OP_CROSS_ENTROPY = 14,   /* dims: tokens, vocab (this rank's share) */
    DS_OP_OPTIMIZER = 15,       /* Adam step; dims: parameters */
    DS_OP_POOL = 16,            /* dims: rows, cols (layer-list models) */
    DS_OP_FLASH_ATTENTION = 17, /* fused attention (softmax(QK^T/sqrt(d)) V in tiles, no
                                   scores stored); dims: see ds_attention_shape_t;
                                   variant 1 = causal */
    DS_OP_FP8_CAST = 18,        /* a tensor to FP8 with its amax and scale (Transformer Engine's
                                   cast-transpose); dims: rows, cols; dtype: the source's */
    DS_OP_MOE_AUX_LOSS = 19,    /* MoE load-balancing loss: per-expert sums of the router's
                                   probabilities and routed tokens (backward: their gradient
                                   broadcast); dims: rows, experts */
    DS_OP_FRAMEWORK_GAP = 20,   /* a framework's time between the operators of one layer pass
                                   (dispatch, autograd, operators the model has no event for),
                                   imported from a trace, never measured; dims: the pass's
                                   compute operators, the part (0 layer, 1 embedding, 2 head) */
    DS_OP_COUNT_
} ds_op_t;

/* Communication primitives. */
typedef enum ds_comm_op {
    DS_COMM_SENDRECV = 0, /* one point-to-point transfer (flag: batched with the reverse) */
    DS_COMM_ALLREDUCE = 1,
    DS_COMM_ALLGATHER = 2,
    DS_COMM_REDUCE_SCATTER = 3,
    DS_COMM_ALLTOALL = 4,
    DS_COMM_BROADCAST = 5,
    DS_COMM_PS_PUSH = 6, /* workers push gradients to parameter servers */
    DS_COMM_PS_PULL = 7, /* workers pull parameters back */
    DS_COMM_COUNT_
} ds_comm_op_t;

typedef enum ds_pass {
    DS_PASS_FORWARD = 0,
    DS_PASS_BACKWARD = 1,
    DS_PASS_RECOMPUTE = 2, /* forward work repeated during backward */
    DS_PASS_STEP = 3,      /* once per iteration: gradient sync, optimizer */
} ds_pass_t;

/* Which process group a communication event runs in. */
typedef enum ds_group {
    DS_GROUP_NONE = 0, /* compute */
    DS_GROUP_TP = 1,
    DS_GROUP_PP = 2, /* neighbouring pipeline stages */
    DS_GROUP_DP = 3,
    DS_GROUP_EMBEDDING = 4, /* first and last stage: tied embedding gradients */
    DS_GROUP_MP = 5,        /* model-parallel group (tp x pp): gradient norm, overflow check */
    DS_GROUP_CP = 6,        /* context-parallel group: K/V ring neighbours or the cp collective */
    DS_GROUP_EP = 7,        /* expert-parallel group: MoE token dispatch and combine */
    DS_GROUP_EDP = 8,       /* expert-data-parallel group: expert gradients */
    DS_GROUP_COUNT_
} ds_group_t;

/* GEMM variant bits: row-major C[m,n] = op(A)[m,k] op(B)[k,n]. */
#define DS_GEMM_TRANS_A 1u
#define DS_GEMM_TRANS_B 2u
/* Communication flag: issued together with the opposite direction. */
#define DS_COMM_FLAG_BATCHED 1u
/* Communication flag: the cost is the time the collective, issued to
 * overlap compute (data-parallel buckets during the backward), adds to its
 * members' compute: progress sharing the device (on the cpu backend MPI
 * advances a non-blocking collective only inside the calls made between
 * operators, on the core that computes).  Measured, never assumed: without
 * such a cost the simulator treats the overlap as free. */
#define DS_COMM_FLAG_OVERLAPPED 2u

/* The key of an event.  Always zero it before filling (keys are hashed and
 * compared as bytes); the layout has no padding. */
typedef struct ds_event_key {
    uint8_t kind;    /* ds_event_kind_t */
    uint8_t op;      /* ds_op_t or ds_comm_op_t */
    uint8_t pass;    /* ds_pass_t */
    uint8_t dtype;   /* ds_dtype_t of the operands / the message */
    uint8_t variant; /* GEMM: DS_GEMM_TRANS_*; softmax: 1 = causal; comm: forced ds_dp_algo_t */
    uint8_t flags;   /* comm: DS_COMM_FLAG_* */
    uint8_t group;   /* ds_group_t (for display; equal keys in different groups are one event) */
    uint8_t node_stride;    /* comm: nodes from one of the group's nodes to the next when they
                               are not neighbours (2..255, capped; 0: neighbours): the group
                               crosses more of the network than its node count says */
    int32_t group_size;     /* comm: ranks in the group */
    int32_t ranks_per_node; /* comm: most members on one node */
    int32_t nodes;          /* comm: nodes the group spans */
    int32_t concurrency;    /* comm: groups of this kind using one node's links at once */
    int64_t dims[4];        /* compute: see ds_op_t; comm: dims[0] = bytes per rank, dims[1]
                               parameter servers, dims[2] with node_stride: nodes of the first
                               member's leaf with a group of this kind (0: unknown) */
} ds_event_key_t;

/* The shape of a fused-attention key, this rank's share: query heads and
 * key/value heads (grouped-query attention when fewer), the query and the
 * key/value lengths (they differ under context parallelism), the head width.
 * Causal keys align the mask at the end: query i sees keys up to
 * i + seq_k - seq_q.  Packed into the key's four dims: batch; heads << 32 |
 * kv_heads; seq_q << 32 | seq_k; head_dim (each count below 2^31). */
typedef struct ds_attention_shape {
    int64_t batch, heads, kv_heads, seq_q, seq_k, head_dim;
} ds_attention_shape_t;

static inline ds_attention_shape_t ds_attention_shape_of(const ds_event_key_t *key)
{
    ds_attention_shape_t s;
    s.batch = key->dims[0];
    s.heads = (int64_t)((uint64_t)key->dims[1] >> 32);
    s.kv_heads = key->dims[1] & 0xffffffffLL;
    s.seq_q = (int64_t)((uint64_t)key->dims[2] >> 32);
    s.seq_k = key->dims[2] & 0xffffffffLL;
    s.head_dim = key->dims[3];
    return s;
}

static inline void ds_attention_shape_set(ds_event_key_t *key, const ds_attention_shape_t *s)
{
    key->dims[0] = s->batch;
    key->dims[1] = (int64_t)(((uint64_t)s->heads << 32) | ((uint64_t)s->kv_heads & 0xffffffffu));
    key->dims[2] = (int64_t)(((uint64_t)s->seq_q << 32) | ((uint64_t)s->seq_k & 0xffffffffu));
    key->dims[3] = s->head_dim;
}

/* An event with its number of occurrences in the iteration. */
typedef struct ds_event {
    ds_event_key_t key;
    uint64_t hash;
    int64_t count; /* occurrences in one iteration, summed over every target device */
    double flops;  /* per occurrence (0 for communication) */
    double bytes;  /* per occurrence: device memory traffic (compute) or message bytes (comm) */
    double estimated_s; /* per occurrence: the target device's roofline (compute), the
                           communication model without samples on its network (communication) */
    const char *label;  /* where it first appears ("layer.attn.qkv"); static string */
} ds_event_t;

typedef struct ds_event_set ds_event_set_t;

/* Generates every event of one iteration of `model` under `strategy` (already
 * resolved) on `cluster`, and deduplicates them.  Caller frees with
 * ds_event_set_destroy. */
DS_API ds_status_t ds_events_generate(const ds_model_t *model, const ds_strategy_t *strategy,
                                      const ds_cluster_t *cluster, ds_event_set_t **set_p);

DS_API ds_status_t ds_event_set_create(ds_event_set_t **set_p);
DS_API void ds_event_set_destroy(ds_event_set_t *set);

/* Adds `count` occurrences of the event `event` (key, costs, label). */
DS_API ds_status_t ds_event_set_add(ds_event_set_t *set, const ds_event_t *event, int64_t count);
/* Union of two sets (counts add); used to profile many strategies at once. */
DS_API ds_status_t ds_event_set_merge(ds_event_set_t *dst, const ds_event_set_t *src);

/* Unique events, in first-seen order. */
DS_API size_t ds_event_set_size(const ds_event_set_t *set);
DS_API const ds_event_t *ds_event_set_at(const ds_event_set_t *set, size_t index);
DS_API const ds_event_t *ds_event_set_find(const ds_event_set_t *set, const ds_event_key_t *key);

/* Totals per class of event. */
typedef enum ds_event_class {
    DS_CLASS_COMPUTE = 0,
    DS_CLASS_TP = 1,    /* tensor-parallel collectives */
    DS_CLASS_PP = 2,    /* pipeline point-to-point */
    DS_CLASS_DP = 3,    /* data-parallel gradient sync (and ZeRO traffic) */
    DS_CLASS_OTHER = 4, /* embedding, gradient-norm and overflow collectives */
    DS_CLASS_COUNT_
} ds_event_class_t;

typedef struct ds_event_totals {
    int64_t total[DS_CLASS_COUNT_];  /* events in the iteration */
    int64_t unique[DS_CLASS_COUNT_]; /* distinct keys */
    double flops;                    /* sum of count x flops over compute events */
    double model_flops;              /* the same without recompute passes */
    double comm_bytes;               /* sum of count x bytes over communication events */
} ds_event_totals_t;

DS_API void ds_event_set_totals(const ds_event_set_t *set, ds_event_totals_t *totals);

DS_API ds_event_class_t ds_event_class_of(const ds_event_key_t *key);
DS_API const char *ds_event_class_name(ds_event_class_t event_class);

DS_API uint64_t ds_event_key_hash(const ds_event_key_t *key);
DS_API int ds_event_key_equal(const ds_event_key_t *a, const ds_event_key_t *b);
/* Canonical text of a key, e.g. "gemm fwd bf16 NT m=2048 n=3072 k=1024" or
 * "allreduce bwd bf16 bytes=4194304 group=tp:4 nodes=1 per-node=4 conc=2";
 * ds_event_key_parse reads it back. */
DS_API void ds_event_key_format(const ds_event_key_t *key, char *text, size_t size);
DS_API ds_status_t ds_event_key_parse(const char *text, ds_event_key_t *key);
/* Operator or primitive name of a key ("gemm", "allreduce"). */
DS_API const char *ds_event_key_op_name(const ds_event_key_t *key);
DS_API const char *ds_pass_name(ds_pass_t pass);
DS_API const char *ds_group_name(ds_group_t group);

/* ---- costs ----------------------------------------------------------------
 * What an event costs, where the number comes from, and a table of them keyed
 * like the event set.  The profiler fills it from measurements, the store
 * reads and writes it, the communication model fills what was not measured,
 * the simulator reads it. */

typedef enum ds_provenance {
    DS_PROV_MEASURED = 0,     /* measured on this device type, this key */
    DS_PROV_INTERPOLATED = 1, /* between measured sizes */
    DS_PROV_EXTRAPOLATED = 2, /* from a model fitted on measurements, outside their range */
    DS_PROV_IMPORTED = 3,     /* imported from another tool's measurements (nccl-tests, traces) */
    DS_PROV_ASSUMED = 4,      /* from a device or cluster specification, not measured */
    DS_PROV_MODELLED = 5,     /* compute from the device model (cluster.h), not measured */
    DS_PROV_FRAMEWORK = 6,    /* from the user's framework's own trace (framework.h) */
    DS_PROV_CALIBRATED = 7,   /* dsmpi's measurement scaled by the framework-to-dsmpi ratio of
                                 its operator class (framework.h) */
    DS_PROV_COUNT_
} ds_provenance_t;

DS_API const char *ds_provenance_name(ds_provenance_t provenance);

typedef struct ds_cost {
    double mean_s;   /* compose means: an iteration is a sum */
    double median_s; /* display medians */
    double p10_s;
    double p90_s;
    int64_t repetitions; /* timed repetitions behind the statistics (0 if not measured) */
    ds_provenance_t provenance;
} ds_cost_t;

typedef struct ds_cost_table ds_cost_table_t;

DS_API ds_status_t ds_cost_table_create(ds_cost_table_t **table_p);
DS_API void ds_cost_table_destroy(ds_cost_table_t *table);
/* Sets (or replaces) the cost of `key`. */
DS_API ds_status_t ds_cost_table_set(ds_cost_table_t *table, const ds_event_key_t *key,
                                     const ds_cost_t *cost);
/* The cost of `key`, or NULL. */
DS_API const ds_cost_t *ds_cost_table_find(const ds_cost_table_t *table, const ds_event_key_t *key);
DS_API size_t ds_cost_table_size(const ds_cost_table_t *table);
/* Entry `index` (insertion order). */
DS_API void ds_cost_table_at(const ds_cost_table_t *table, size_t index,
                             const ds_event_key_t **key_p, const ds_cost_t **cost_p);

/* The band of a cost: how far its true value may lie below and above
 * cost.mean_s, as multiples of it (low <= 1 <= high).  The communication
 * model sets one on every cost it extrapolates beyond the node counts that
 * were measured (ds_comm_prediction_band), the cost assembly one on every
 * compute cost the device model scales to another device (ds_model_class_band);
 * every other cost, and a cost set again with ds_cost_table_set, has the
 * band 1, 1. */
DS_API ds_status_t ds_cost_table_set_band(ds_cost_table_t *table, const ds_event_key_t *key,
                                          double low, double high);
/* The band of `key` (1, 1 when the table has none or lacks the key). */
DS_API void ds_cost_table_band(const ds_cost_table_t *table, const ds_event_key_t *key,
                               double *low_p, double *high_p);

/* ---- the device model's band ----------------------------------------------
 * A compute cost priced by the device model (provenance modelled: a key the
 * profile lacks under --estimate-missing, or a cost measured on another
 * device and scaled by the model) carries the band of its operator class:
 * how far the model's time was from measured kernels of that class that
 * were not used to set the model's parameters (leave-out).  The numbers and
 * where each was measured are in libdsmpi/events/device_band.c. */

typedef enum ds_model_class {
    DS_MODEL_GEMM_COMPUTE = 0, /* GEMM or batched GEMM the model finds compute-bound */
    DS_MODEL_GEMM_MEMORY = 1,  /* ... memory-bound (thin shapes) */
    DS_MODEL_ATTENTION = 2,    /* fused (flash) attention */
    DS_MODEL_STREAMING = 3,    /* norms, element-wise, softmax, loss, optimizer, embedding */
    DS_MODEL_CLASS_COUNT_
} ds_model_class_t;

/* "gemm-compute", "gemm-memory", "attention", "streaming"; "?" otherwise. */
DS_API const char *ds_model_class_name(ds_model_class_t model_class);
/* The class the device model puts a compute key in on `cluster`'s device
 * (`flops` and `bytes` per occurrence, as ds_event_t has them). */
DS_API ds_model_class_t ds_model_class_of(const ds_event_key_t *key, double flops, double bytes,
                                          const ds_cluster_t *cluster);
/* The band of a class on `device` (a device name: "cpu" has its own rows,
 * every other device the GPU rows), as multiples of the modelled cost
 * (low <= 1 <= high). */
DS_API void ds_model_class_band(ds_model_class_t model_class, const char *device, double *low_p,
                                double *high_p);
/* Where the numbers of ds_model_class_band were measured (one line, static). */
DS_API const char *ds_model_band_source(void);

/* One measurement of a collective or point-to-point transfer at one size, as
 * the profiler measures it or an nccl-tests log reports it.  The
 * communication model is fitted on these. */
typedef struct ds_comm_sample {
    ds_comm_op_t op;
    ds_dtype_t dtype;
    int64_t bytes; /* the nccl-tests "size": full buffer of the collective */
    int32_t group_size;
    int32_t nodes;          /* nodes the group spans */
    int32_t ranks_per_node; /* most members on one node */
    int32_t concurrency;    /* groups measured at the same time (1 = alone) */
    int32_t in_place;
    int32_t batched; /* point-to-point: both directions at once */
    /* Point-to-point: nodes of the job whose pairs crossed the network at
     * the same time (sendrecv_perf on N nodes: N); 0: the pair's own. */
    int32_t span_nodes;
    double mean_s;
    double median_s;
    double p10_s;
    double p90_s;
    int64_t repetitions;
    ds_provenance_t provenance; /* measured or imported */
    char source[64];            /* device fingerprint or cluster tag it came from */
} ds_comm_sample_t;

/* Cost tables as text, one entry a line: "<key text> = <mean seconds>
 * [median p10 p90 repetitions provenance]"; '#' starts a comment.  Used for
 * synthetic costs in tests and for files a simulated cluster writes. */
DS_API ds_status_t ds_cost_table_parse(ds_cost_table_t *table, const char *text,
                                       const char *origin);
DS_API ds_status_t ds_cost_table_load_text(ds_cost_table_t *table, const char *path);
DS_API ds_status_t ds_cost_table_write_text(const ds_cost_table_t *table, FILE *out);

#ifdef __cplusplus
}
#endif

#endif /* DSMPI_EVENTS_H */
