/* Private parts of the events module, shared with the simulator. */
#ifndef DSI_EVENTS_H
#define DSI_EVENTS_H

#include <dsmpi/comm.h>
#include <dsmpi/events.h>

#include "dsi_core.h"
#include "model/dsi_model.h"

/* First-order cost of one occurrence on `cluster` in *seconds_p: the
 * roofline of its device for compute, the communication model without
 * samples for communication (every level, span, NIC count and
 * oversubscription of the cluster; comm/dsi_comm_assumed.h).  Used to order
 * and balance work before anything is measured, and by --estimate-missing
 * for what nothing measured covers (marked assumed).  Fails only with
 * DS_ERR_NO_MEMORY, when the communication model could not be built: an
 * estimate from a cruder formula would then differ from run to run. */
ds_status_t dsi_estimate_seconds(const ds_event_key_t *key, double flops, double bytes,
                                 const ds_cluster_t *cluster, double *seconds_p);
/* A communication key's estimate with `library`'s algorithms (the
 * profiler's own time budget runs on MPI, not NCCL); fails as above. */
ds_status_t dsi_estimate_comm_seconds(const ds_event_key_t *key, const ds_cluster_t *cluster,
                                      ds_comm_library_t library, double *seconds_p);
/* The roofline of a compute key on `cluster`'s device (never fails). */
double dsi_estimate_compute_seconds(const ds_event_key_t *key, double flops, double bytes,
                                    const ds_cluster_t *cluster);
/* The same, returned, with the band of its operator class in *low_p and
 * *high_p (multiples of it; ds_model_class_band). */
double dsi_estimate_compute_band(const ds_event_key_t *key, double flops, double bytes,
                                 const ds_cluster_t *cluster, double *low_p, double *high_p);

/* A stamp that changes with every change of the table's costs or bands and
 * differs between tables (0 for NULL): what a cost read before still holds
 * while it stays. */
uint64_t dsi_cost_table_version(const ds_cost_table_t *table);
/* Whether the table holds a communication key measured while compute ran
 * beside it (DS_COMM_FLAG_OVERLAPPED; false for NULL). */
bool dsi_cost_table_has_overlapped(const ds_cost_table_t *table);

/* ---- group layouts (layout.c) ------------------------------------------------------------
 * Where the members of a group sit decides the layout fields of a
 * communication key.  Event generation and the simulator share this code, so
 * the keys the simulator looks up are the keys the event set holds. */

typedef enum dsi_group_kind {
    DSI_KIND_TP,        /* index = dp coordinate, within a stage */
    DSI_KIND_DP,        /* index = tp coordinate, within a stage */
    DSI_KIND_MP,        /* index = dp coordinate: every tp and pp rank of one replica */
    DSI_KIND_EMBEDDING, /* index = tp + tp_size * dp: first and last stage */
    DSI_KIND_CP,        /* index = tp + tp_size * replica, within a stage (folded strategy) */
    DSI_KIND_EP,        /* index = etp + etp_size * edp, within a stage (dsi_expert_groups) */
    DSI_KIND_EDP,       /* index = etp + etp_size * ep, within a stage */
} dsi_group_kind_t;

/* Expert layers number a stage's tp x dp ranks tp-major, as Megatron-Core
 * does (local = t + tp * d), and split that index as etp (innermost), ep,
 * edp.  Groups of `kind` (EP or EDP) in one stage. */
int dsi_expert_groups(const ds_strategy_t *s, dsi_group_kind_t kind);

typedef struct dsi_layout {
    int32_t ranks_per_node; /* most members on one node */
    int32_t nodes;          /* nodes the group spans */
    int32_t concurrency;    /* groups of this kind with a member on the first member's node */
    int64_t devices;        /* generation: devices whose group has this layout */
    int32_t node_stride;    /* smallest distance between two of its nodes (0: one node) */
    int32_t leaf_nodes;     /* spread groups: nodes of the first member's leaf with a group of
                               this kind (their flows share its uplinks); 0 otherwise */
} dsi_layout_t;

/* Scratch for layout queries on one strategy and node size. */
typedef struct dsi_placement {
    const ds_strategy_t *s;
    int gpus_per_node;
    int nodes_per_leaf; /* the cluster's first switch level (0: one switch) */
    int64_t devices;
    int64_t num_nodes;
    int64_t *members; /* ranks of the group last filled by dsi_group_members */
    int64_t *sorted;
    int64_t *ids;
    int32_t *pairs_on_node; /* [node * 2 + intra]: pairs of the boundary pairs_from -> pairs_to */
    int pairs_from, pairs_to;
    int cp; /* context-parallel ranks within each dp position of the folded strategy (1: none) */
} dsi_placement_t;

ds_status_t dsi_placement_init(dsi_placement_t *p, const ds_strategy_t *strategy,
                               const ds_cluster_t *cluster);
void dsi_placement_free(dsi_placement_t *p);
int64_t dsi_placement_node_of(const dsi_placement_t *p, int64_t rank);
/* Fills p->members with group `index` of `kind` (stage used by TP and DP);
 * returns the member count. */
int dsi_group_members(dsi_placement_t *p, dsi_group_kind_t kind, int stage, int index);
/* Layout of the `size` members in p->members. */
dsi_layout_t dsi_group_layout(dsi_placement_t *p, dsi_group_kind_t kind, int size);
/* Layout of the point-to-point pair (t, d, from) -> (t, d, to): 2 ranks on
 * one node or 1 on each of 2 nodes; concurrency counts the pairs of the same
 * boundary leaving the sender's node the same way. */
dsi_layout_t dsi_p2p_layout(dsi_placement_t *p, int from, int to, int t, int d);
void dsi_key_set_layout(ds_event_key_t *key, const dsi_layout_t *l);
/* The node stride as a key holds it (0 for neighbouring nodes). */
uint8_t dsi_layout_key_stride(const dsi_layout_t *l);
/* Whether `key` has the layout `l`, and two layouts give equal keys. */
bool dsi_key_has_layout(const ds_event_key_t *key, const dsi_layout_t *l);
bool dsi_layout_equal(const dsi_layout_t *a, const dsi_layout_t *b);

/* Keys: once-per-iteration collectives (pass "step"), point-to-point
 * transfers, the optimizer step on `shard` parameters. */
ds_event_key_t dsi_comm_step_key(const ds_strategy_t *s, ds_comm_op_t op, ds_group_t group,
                                 int size, ds_dtype_t dtype, int64_t bytes);
ds_event_key_t dsi_p2p_key(ds_pass_t pass, ds_dtype_t dtype, int64_t bytes, const dsi_layout_t *l,
                           int batched);
ds_event_key_t dsi_optimizer_key(int64_t shard);
/* Parameters one device's optimizer updates (its ZeRO or server share). */
int64_t dsi_optimizer_shard(const ds_strategy_t *s, int64_t stage_params);

/* Sizes. */
int64_t dsi_dp_bucket_params(const ds_strategy_t *s);         /* max(40M, 1M x dp) unless set */
int64_t dsi_vocab_share(const ds_model_info_t *info, int tp); /* padded vocabulary / tp */
int dsi_has_tied_copy(const ds_model_info_t *info, const ds_strategy_t *s);
int64_t dsi_chunk_params(const ds_model_t *model, const ds_strategy_t *s, int stage, int chunk);
int64_t dsi_stage_params(const ds_model_t *model, const ds_strategy_t *s, int stage);
/* Bytes of the activation entering the stage that starts at `layer`, and of
 * the transfer into pipeline rank `to`. */
int64_t dsi_boundary_bytes(const ds_model_t *model, const ds_strategy_t *s, ds_dtype_t dtype,
                           int layer);
int64_t dsi_p2p_boundary_bytes(const ds_model_t *model, const ds_strategy_t *s, ds_dtype_t dtype,
                               int to);
/* Layers with identical operators share a type. */
int dsi_layer_type(const ds_model_t *model, int layer);
/* Norm parameters of a stage all-reduced over TP with sequence parallelism. */
int64_t dsi_sp_norm_params(const ds_model_t *model, const ds_strategy_t *s, int stage);
/* Bytes of the tied word-embedding gradient all-reduce (fp32). */
int64_t dsi_embedding_grad_bytes(const ds_model_t *model, const ds_strategy_t *s);
void dsi_shape_ctx_init(dsi_shape_ctx_t *ctx, const ds_model_t *model, const ds_strategy_t *s);

/* ---- context parallelism (context_parallel.c) ------------------------------------------
 * Events and the simulator run on the strategy folded to dp x cp replicas
 * (gbs x cp sequences of seq / cp tokens, the same micro-batches); build the
 * shape context from the strategy as given, then fold, and set the
 * placement's cp. */
ds_strategy_t dsi_strategy_fold_cp(const ds_strategy_t *s);
/* Layout of the K/V exchange of cp group (stage, tp rank t, replica) on the
 * folded placement p (p->cp > 1): the ring's slowest hop as a
 * point-to-point pair (p2p), or the cp group (a2a, allgather). */
dsi_layout_t dsi_cp_layout(dsi_placement_t *p, ds_cp_comm_t comm, int stage, int t, int replica);
/* The slowest of the stage's exchanges (most nodes, then fewest members on
 * a node, widest stride, most groups at once): every replica waits for the
 * slowest at the gradient reduction, so the simulator gives it to all. */
dsi_layout_t dsi_cp_stage_layout(dsi_placement_t *p, ds_cp_comm_t comm, int stage);

/* Matmul FLOPs of one compute event whose operator counts `flops`, as
 * MFU/HFU count them: *hardware_p what the kernels do (recompute
 * included), *model_p the model's share (recompute excluded); fused
 * attention as explicit attention, every query-key pair.  Both 0 for
 * operators that are not matmuls. */
void dsi_matmul_flops(const ds_event_key_t *key, double flops, double *hardware_p, double *model_p);
/* ---- experts (experts.c) ----------------------------------------------------------------- */

/* Expert-data-parallel degree: dp * tp / (etp * ep). */
int dsi_expert_data_parallel(const ds_strategy_t *s);
/* Routed expert parameters one rank of `stage` holds. */
int64_t dsi_stage_expert_params(const ds_model_t *model, const ds_strategy_t *s, int stage);
typedef struct dsi_expert_grad_op {
    ds_event_key_t key; /* layout fields left 0 */
    const char *label;
} dsi_expert_grad_op_t;
/* The once-per-iteration collectives of `params` expert parameters over
 * the EDP group: an all-reduce, or under ZeRO the gradients' reduce-scatter
 * and the parameters' all-gather.  Returns their number. */
int dsi_expert_grad_ops(const ds_strategy_t *s, ds_dtype_t dtype, int64_t params,
                        dsi_expert_grad_op_t ops[2]);
/* Expert parameters one rank's optimizer steps (its EDP share under ZeRO). */
int64_t dsi_expert_optimizer_shard(const ds_strategy_t *s, int64_t expert_params);

#endif /* DSI_EVENTS_H */
