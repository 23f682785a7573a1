/*
 * Private parts of the simulator: the graph arena, layer templates, the
 * lanes (tensor-parallel
 * groups), data-parallel group instances and replica columns.
 */
#ifndef DSI_SIM_H
#define DSI_SIM_H

#include <dsmpi/sim.h>

#include "dsi_core.h"
#include "events/dsi_events.h"
#include "model/dsi_model.h"
#include "schedule/dsi_schedule.h"

#include <string.h>

/* ---- graph ----------------------------------------------------------------------------- */

typedef enum dsi_node_kind {
    DSI_N_FWD = 0,  /* layer passes (forward) of a lane */
    DSI_N_BWD = 1,  /* layer passes (backward, recompute included) */
    DSI_N_OPT = 2,  /* optimizer step */
    DSI_N_XFER = 3, /* one point-to-point transfer between two lanes */
    DSI_N_DP = 4,   /* a collective of a data-parallel group instance */
    DSI_N_TP = 5,   /* a lane-level TP collective (SP norm gradients) */
    DSI_N_COL = 6,  /* a collective of a replica column (embedding, norm, overflow) */
    DSI_N_JOIN = 7, /* zero duration: waits for several nodes */
    DSI_N_KIND_COUNT_
} dsi_node_kind_t;

#define DSI_NODE_ASSUMED 1u

/* What a node stands for, one small struct per kind. */
typedef struct dsi_pass_node { /* DSI_N_FWD, DSI_N_BWD */
    int32_t mb;
    int16_t chunk;
    int16_t part0;    /* first part (layer) of the node in its chunk pass */
    int16_t nparts;   /* parts it covers; 0: bucket interference after part0 */
    int16_t op0, op1; /* operator range of a split single-part node; op1 = 0: whole */
    uint8_t sync;     /* of a pass split where gradient buckets complete: the segment's number
                         in its part (from 1, DSI_SYNC_UNNUMBERED beyond), else 0 */
} dsi_pass_node_t;

#define DSI_SYNC_UNNUMBERED 255

typedef struct dsi_xfer_node { /* DSI_N_XFER */
    int32_t seq;               /* the channel's seq-th transfer of the iteration */
    int16_t channel;           /* 0 forward (activations to the next stage), 1 backward */
    uint8_t view[2];           /* how the first and the second side see it: its cost */
} dsi_xfer_node_t;

typedef struct dsi_bucket_node { /* DSI_N_DP: gradient and parameter buckets */
    int32_t bucket;
    int16_t round; /* ZeRO-2: the backward whose gradients it reduces; else 0 */
} dsi_bucket_node_t;

typedef struct dsi_zero_node { /* DSI_N_DP with a DSI_L_Z3_* label */
    int32_t part;              /* the layer part's position in the stage's chunk */
} dsi_zero_node_t;

typedef union dsi_node_payload {
    dsi_pass_node_t pass;
    dsi_xfer_node_t xfer;
    dsi_bucket_node_t bucket;
    dsi_zero_node_t zero;
} dsi_node_payload_t;

/* Struct-of-arrays node and edge storage, reused across runs. */
typedef struct dsi_graph {
    int32_t n, cap;
    int64_t *dur;   /* duration, ns */
    int64_t *start; /* ready time while evaluating, then start, ns */
    int64_t *comp;  /* compute part of layer and optimizer nodes, ns */
    int64_t *wait;  /* part of a layer node spent waiting for the group's slowest member, ns */
    int32_t *bind;  /* the predecessor that decided the start, -1 */
    uint8_t *kind;
    uint8_t *iter; /* 1-based iteration */
    uint8_t *flags;
    int32_t *owner;              /* lane (FWD, BWD, OPT, TP, XFER: sender), DP instance, column */
    dsi_node_payload_t *payload; /* by kind; zero where the kind has none */
    uint8_t *label;              /* DP/COL/TP labels: index into dsi_node_labels */
    uint8_t *phase;              /* the phase that built it: index into build.c's table */
    /* edges, appended in any order */
    int64_t ne, ecap;
    int32_t *efrom, *eto;
    /* evaluation */
    int32_t *off; /* successors CSR, n + 1 */
    int32_t *adj;
    int32_t *indeg;
    int32_t *queue; /* topological order once evaluated */
    int32_t csr_cap;
    int64_t adj_cap;
    uint64_t generation; /* of the structure: changes with each build */
    bool same;           /* this graph's structure is the previous run's (repriced) */
    bool order_kept;     /* the evaluation order is kept for a repriced run */
    bool order_valid;    /* queue, off and adj hold this structure's evaluation order */
    bool binds;          /* the evaluation records bind (the critical path's, with a timeline) */
} dsi_graph_t;

ds_status_t dsi_graph_reset(dsi_graph_t *g);
void dsi_graph_free(dsi_graph_t *g);
ds_status_t dsi_graph_grow_nodes(dsi_graph_t *g);
/* Appends a node; returns its index or -1 (out of memory, recorded). */
static inline int32_t dsi_graph_add(dsi_graph_t *g, dsi_node_kind_t kind, int iter, int32_t owner,
                                    int64_t dur)
{
    if (g->n == g->cap && dsi_graph_grow_nodes(g) != DS_OK)
        return -1;
    int32_t id = g->n++;
    g->dur[id] = dur;
    g->comp[id] = 0;
    g->wait[id] = 0;
    g->kind[id] = (uint8_t)kind;
    g->iter[id] = (uint8_t)iter;
    g->flags[id] = 0;
    g->owner[id] = owner;
    memset(&g->payload[id], 0, sizeof(g->payload[id]));
    g->label[id] = 0;
    g->phase[id] = 0;
    return id;
}
ds_status_t dsi_graph_grow_edges(dsi_graph_t *g);
static inline ds_status_t dsi_graph_edge(dsi_graph_t *g, int32_t from, int32_t to)
{
    if (from < 0) /* nothing before: the start of the simulation */
        return DS_OK;
    if (g->ne == g->ecap) {
        ds_status_t status = dsi_graph_grow_edges(g);
        if (status != DS_OK)
            return status;
    }
    g->efrom[g->ne] = from;
    g->eto[g->ne] = to;
    g->ne++;
    return DS_OK;
}
/* A graph just built: a new structure (generation), whose evaluation order
 * is kept for the runs that reprice it when `enabled`.  A build whose graph
 * happens to equal the last one's is rare in a search (the exhaustive one
 * builds each structure once), so it is not looked for. */
ds_status_t dsi_graph_note_structure(dsi_graph_t *g, bool enabled);
/* Longest-path sweep in topological order.  On a cycle, fills *cycle_p /
 * *cycle_len_p (nodes in dependency order, caller frees) and returns
 * DS_ERR_DEADLOCK without a message. */
ds_status_t dsi_graph_evaluate(dsi_graph_t *g, int32_t **cycle_p, int32_t *cycle_len_p);
/* The sweep again in the last evaluation's order, nodes 0 .. count - 1
 * (without predecessors) starting at first_starts. */
ds_status_t dsi_graph_sweep(dsi_graph_t *g, const int64_t *first_starts, int32_t count);

extern const char *const dsi_node_labels[];
enum {
    DSI_L_NONE = 0,
    DSI_L_GRAD_ALLREDUCE,
    DSI_L_GRAD_RS,
    DSI_L_PARAM_AG,
    DSI_L_PS_PUSH,
    DSI_L_PS_PULL,
    DSI_L_Z3_GATHER,
    DSI_L_Z3_RS,
    DSI_L_SP_NORM,
    DSI_L_EMBEDDING,
    DSI_L_OVERFLOW,
    DSI_L_GRAD_NORM,
    DSI_L_EXPERT_GRAD,
    DSI_L_NIC_SHARE,
    DSI_L_COUNT_
};

static inline bool dsi_node_is_zero_part(const dsi_graph_t *g, int32_t id)
{
    return g->kind[id] == DSI_N_DP &&
           (g->label[id] == DSI_L_Z3_GATHER || g->label[id] == DSI_L_Z3_RS);
}

/* The node's place flattened as (micro-batch, transfer, bucket or part: -1
 * when none; chunk, channel or round; first part; parts), the form the
 * timeline hash and the node descriptions are defined on. */
static inline void dsi_node_place(const dsi_graph_t *g, int32_t id, int64_t place[4])
{
    const dsi_node_payload_t *pl = &g->payload[id];
    place[0] = -1;
    place[1] = place[2] = place[3] = 0;
    switch ((dsi_node_kind_t)g->kind[id]) {
    case DSI_N_FWD:
    case DSI_N_BWD:
        place[0] = pl->pass.mb;
        place[1] = pl->pass.chunk;
        place[2] = pl->pass.part0;
        place[3] = pl->pass.nparts;
        break;
    case DSI_N_XFER:
        place[0] = pl->xfer.seq;
        place[1] = pl->xfer.channel;
        break;
    case DSI_N_DP:
        if (dsi_node_is_zero_part(g, id)) {
            place[0] = pl->zero.part;
        } else {
            place[0] = pl->bucket.bucket;
            place[1] = pl->bucket.round;
        }
        break;
    default: break;
    }
}

/* ---- layer templates ------------------------------------------------------------------- */

typedef struct dsi_template {
    int layer;    /* a representative layer index, or DSI_PART_* */
    int type;     /* dsi_layer_type */
    uint8_t pass; /* forward or backward */
    uint8_t assumed;
    dsi_layout_t tp_layout;
    dsi_layout_t cp_layout; /* the context-parallel exchange (zero without cp) */
    dsi_layout_t ep_layout; /* MoE dispatch and combine (zero without ep) */
    bool expert_slowest;    /* the slowest EP rank's expert work (full mode) */
    int32_t op_first, op_count;
    int64_t dur, comp;               /* ns, unscaled */
    int64_t wait;                    /* arrival skew inside dur (see op_wait) */
    double mm_flops, mm_model_flops; /* matmul FLOPs (recompute included / excluded) */
} dsi_template_t;

/* A stage of one TP layout: the parts (embedding, layers, head) of each
 * chunk in forward order, with their templates and fused sums. */
typedef struct dsi_profile {
    int stage;
    dsi_layout_t tp_layout;
    bool expert_slowest; /* a lane holding its EP group's slowest rank (full mode) */
    int32_t *part_first; /* [vpp + 1]: parts of chunk c are [part_first[c], part_first[c+1]) */
    int64_t *fused_dur;  /* [vpp * 2]: chunk pass (c, pass) */
    int64_t *fused_comp;
    int64_t *fused_wait;
    uint8_t *fused_assumed;
    int64_t sp_dur, opt_dur; /* SP norm all-reduce, optimizer step (expert shard included) */
    uint8_t sp_assumed, opt_assumed;
    int64_t expert_grad_dur; /* expert gradients over the EDP group (phase_moe.c) */
    uint8_t expert_grad_assumed;
    double mm_flops, mm_model_flops; /* one micro-batch through every chunk, fwd + bwd */
} dsi_profile_t;

/* ---- lanes, groups, columns -------------------------------------------------------------- */

#define DSI_MAX_PENDING 64

typedef struct dsi_lane {
    int32_t d, p;
    int32_t prof;
    int32_t next, prev;         /* simulated lanes of the next / previous pipeline rank, -1 */
    int32_t column;             /* simulated column */
    int32_t dp_first, dp_count; /* into plan.lane_dp: distinct DP instances of its members */
    double factor;              /* slowest member's speed factor */
} dsi_lane_t;

/* Costs a run has looked up for a lane's channels and a DP instance's
 * buckets; -1 until looked up. */
typedef struct dsi_channel_costs {
    /* one transfer on the channels the lane sends on, by [flag (0 single,
     * 1 batched) + 2 * (transfers sharing the link - 1)] */
    int64_t fwd[4], bwd[4];
    uint8_t fwd_assumed[4], bwd_assumed[4];
} dsi_channel_costs_t;

typedef struct dsi_bucket_costs {
    int64_t ns[2][2]; /* gradient / parameter collective of a full / last bucket */
    uint8_t assumed[2][2];
} dsi_bucket_costs_t;

/* Reuse: a segment of a backward part split where gradient buckets complete,
 * as building it now gives it (phase_pipeline.c). */
typedef struct dsi_sync_segment {
    int64_t dur, comp, wait;
    int64_t k_first, k_end; /* the buckets it completes: their interference follows it */
    int32_t op0, op1;       /* operator range; op1 = 0: the whole part */
    uint8_t assumed;
} dsi_sync_segment_t;

/* Where a lane's compute stream stands while the builder walks its program. */
typedef struct dsi_lane_cursor {
    int32_t last;  /* the last node on the stream, -1 */
    int32_t npend; /* nodes the next one waits for (instead of `last`) */
    int32_t pend[DSI_MAX_PENDING];
    int32_t seq[4];          /* transfers posted per dsi_dir_t this iteration */
    uint8_t *first_fwd_done; /* per chunk: its first forward of this iteration was built */
    int32_t nbwd;            /* backwards built this iteration */
    int64_t nic_bucket;      /* the bucket the sync pass made ready last (-1): the next segment's
                                transfers leaving the node share its interfaces */
} dsi_lane_cursor_t;

typedef struct dsi_dpgroup {
    int32_t p;
    int32_t t;     /* representative tp coordinate */
    int32_t count; /* tp coordinates it stands for in its stage (symmetric) */
    dsi_layout_t layout;
} dsi_dpgroup_t;

/* What the placement classes depend on: runs with equal keys reuse them. */
typedef struct dsi_place_key {
    int dp, tp, pp, gpus_per_node, wrap, tied, full, valid;
    ds_dim_t order[3];
    int cp; /* dp above is folded: dp x cp */
} dsi_place_key_t;

/* Placement classes of another key, kept for a later run (dsi_sim_plan_t's
 * fields of the same names). */
typedef struct dsi_place_classes {
    dsi_place_key_t key;
    uint64_t used; /* last use, for replacement */
    int32_t *column_of, *dp_of, *lane_dp;
    struct dsi_column *columns;
    dsi_dpgroup_t *dpgroups;
    int32_t num_columns, num_lane_dp, num_dpgroups;
    dsi_layout_t *tp_lay, *dp_lay, *fwd_lay, *bwd_lay, *emb_lay, *mp_lay;
} dsi_place_classes_t;

/* Classes of this many other keys are kept, for targets of at most
 * DSI_PLACE_CACHE_DEVICES devices (their layouts grow with the target). */
#define DSI_PLACE_CACHE 8
#define DSI_PLACE_CACHE_DEVICES 65536

typedef struct dsi_column {
    int32_t d;
    int64_t represents; /* columns with this timeline */
    int32_t lane_first; /* simulated lanes of this column: lane_first + p */
} dsi_column_t;

/* ---- the simulator ------------------------------------------------------------------------ */

/* What every run is given, as the reuse keys compare it (memcmp: zeroed
 * before it is filled; the options' slow devices left out, they are not
 * kept past a run): dsi_run_inputs. */
typedef struct dsi_run_inputs {
    const ds_model_t *model;
    ds_model_info_t info; /* another model may come at the same address */
    const ds_cost_table_t *costs;
    uint64_t costs_version; /* a table changed in place prices everything anew */
    ds_cluster_t cluster;
    ds_sim_options_t opt;
    int64_t m;
    int32_t unbatched_p2p;
} dsi_run_inputs_t;

/* What a graph's structure is built from, besides costs: runs with equal
 * keys build the same nodes and edges unless a cost decides a node (which
 * the phases' reprice hooks check).  Durations-only strategy fields
 * (recompute, flash, fp8, the DP algorithm but a parameter server) and the
 * band end are cleared.  Compared with memcmp: zeroed before it is filled. */
typedef struct dsi_reuse_key {
    dsi_run_inputs_t in;
    ds_strategy_t s;
    int64_t zero3_prefetch;
    int32_t sp, dtype, twice;
    int32_t cp, cp_comm; /* the strategy as given: s is folded to dp x cp */
    uint32_t phases;     /* the phases that apply, a bit each */
} dsi_reuse_key_t;

/* What the plan (placement classes, lanes, their profiles and templates)
 * is computed from: everything of the run but the DP algorithm, which
 * prices DP collectives only (their keys are registered after the plan). */
typedef struct dsi_plan_key {
    dsi_run_inputs_t in;
    ds_strategy_t given; /* dp_algo: ps or auto */
} dsi_plan_key_t;

/* The last run's plan and how far the run's caches (keys, missing keys,
 * profiles, templates, operators, parts) had grown once it was computed:
 * a run with an equal key (a search's next DP algorithm) cuts the caches
 * back to that point and keeps the plan, which leaves it where computing
 * the plan again would. */
typedef struct dsi_plan_mark {
    dsi_plan_key_t key;
    bool valid;    /* the last run finished on this plan, which may be kept */
    bool keepable; /* the plan priced no DP collective */
    bool kept;     /* this run keeps it */
    /* The stages' memory without a timeline (peak, out of memory), which
     * depends on the plan's inputs only: kept with it once computed. */
    bool memory_known;
    double peak_memory_GiB;
    int oom;
    size_t num_keys, num_missing;
    int32_t num_profiles, num_templates, num_ops, num_parts;
} dsi_plan_mark_t;

/* The graph of the last run, kept for the next run with an equal key. */
typedef struct dsi_sim_reuse {
    dsi_reuse_key_t key;
    bool valid;                /* the graph, its order and key are those of a successful run */
    bool armed;                /* this run may be kept: reuse is on for it */
    int64_t repriced, rebuilt; /* runs, for tests and measurements */
    int64_t unchanged;         /* repriced runs whose durations were all the last run's */
    int64_t kept_sources;      /* groups of nodes not repriced: dsi_phase_t.kept */
    int64_t plans_kept;        /* runs that kept the last run's plan (dsi_plan_mark_t) */
    /* The kept graph's evaluation and summary are current (the last run
     * finished), and its nodes hold their sources' values (it repriced). */
    bool finished, settled;
    uint64_t run; /* runs that tried, numbering this run's caches */
    /* The cost-only fields of the last run (its strategy's recompute, flash
     * attention and FP8, its band end), and whether this run differs from
     * it in the DP algorithm at most (dsi_phase_t.kept). */
    int last_recompute, last_flash, last_fp8, last_band;
    bool only_dp_algo;
    /* Nodes that reprice alike (dsi_phase_t.source), for the kept graph:
     * node_source[node] (-1: none), reps[source] the node repriced for it,
     * and the others of its group: members[member_off[source] ..
     * member_off[source + 1]). */
    bool sources_valid;
    int32_t *node_source, *reps, *member_off, *members;
    int32_t num_sources, sources_cap;
    /* map_sources' open-addressing table, kept between runs: a fresh one
     * of a large graph costs a page fault a page. */
    int32_t *slots;
    uint64_t *slot_keys;
    size_t slots_cap;
} dsi_sim_reuse_t;

/* One iteration built and evaluated twice (twice.c), for a symmetric run
 * without a timeline.  Kept with the graph: a reused graph is this way too. */
typedef struct dsi_sim_twice {
    bool active;       /* the graph holds one iteration (nodes stamped 2) after its carry nodes */
    int32_t num_carry; /* carry nodes: ids 0 .. num_carry - 1 */
    /* carry node c starts, in the second evaluation, at the latest end in the
     * first of from[from_off[c] .. from_off[c + 1]) */
    int32_t *from_off, *from;
    int32_t carry_cap, from_cap;
    int64_t *carry_start; /* [num_carry] */
    int64_t *start1;      /* [n] starts of the first evaluation: iteration 1 */
    int32_t start1_cap;
    /* A chunk's first forward that iteration 1 builds as one fused node and
     * this graph in parts: the first part's node and the number of parts. */
    int32_t *fused_first, *fused_count;
    int32_t num_fused, fused_cap;
} dsi_sim_twice_t;

typedef struct dsi_sim_estimate_cache dsi_sim_estimate_cache_t;

/* What places the expert groups: the folded strategy's tp, dp, pp, ep, etp
 * and order, and the cluster's node and leaf sizes. */
typedef struct dsi_expert_place {
    int32_t tp, dp, pp, ep, etp, gpus_per_node, nodes_per_leaf;
    int32_t order[3];
} dsi_expert_place_t;

/* The stages' EP and EDP layouts the simulator prices the experts on
 * (costs.c), kept across runs and estimates while the expert groups stay
 * where they were: candidates that differ in costs only (micro-batches,
 * recompute, flash, fp8, ZeRO) share them, and finding them visits every
 * group of a stage. */
typedef struct dsi_expert_layouts {
    dsi_expert_place_t place;
    dsi_layout_t *lay; /* [stage * 2 + (kind == DSI_KIND_EDP)] */
    uint8_t *known;
    int32_t stages; /* allocated */
} dsi_expert_layouts_t;

typedef struct dsi_key_entry {
    ds_event_key_t key;
    int64_t ns;
    ds_provenance_t provenance;
    double seconds;
    bool banded; /* its band is not 1, 1 */
} dsi_key_entry_t;

/* Costs worked out by earlier runs (a table's with its band, the
 * communication model's, estimates), so that a search prices each key once:
 * key -> entry with the FLOPs and bytes it was estimated from, kept while
 * what they came from (`from`) is unchanged.  Missing keys are not kept. */
typedef struct dsi_cost_memo_entry {
    dsi_key_entry_t e;
    double flops, bytes;
} dsi_cost_memo_entry_t;

typedef struct dsi_cost_memo_from {
    const ds_cost_table_t *costs;
    uint64_t costs_version;
    const ds_comm_model_t *comm_model;
    ds_cluster_t cluster;
    int64_t num_devices; /* the job's span prices its point-to-point pairs */
    int32_t estimate_missing, band;
} dsi_cost_memo_from_t;

typedef struct dsi_cost_memo {
    dsi_cost_memo_from_t from;
    dsi_cost_memo_entry_t *entries;
    size_t count, cap;
    uint32_t *slots; /* entry + 1; 0: empty */
    size_t num_slots;
} dsi_cost_memo_t;

/* What a run builds on: the placement classes, lanes, schedule programs and
 * buckets of a strategy.  Set up before the graph is built and unchanged
 * while it is; placement classes are kept across runs with the same
 * placement (place_key), programs across runs with the same schedule
 * (program_key). */
typedef struct dsi_sim_plan {
    /* placement classes */
    int32_t *column_of; /* [dp]: simulated column of every replica */
    int32_t *dp_of;     /* [tp * pp]: simulated DP instance of every (t, p) */
    dsi_column_t *columns;
    int32_t num_columns;
    dsi_lane_t *lanes;
    int32_t num_lanes;
    int32_t *lane_dp;
    int32_t num_lane_dp;
    dsi_dpgroup_t *dpgroups;
    int32_t num_dpgroups;
    int32_t *stage_lanes;      /* lanes of stage p: stage_lanes[p * num_columns + i] */
    dsi_place_key_t place_key; /* of the classes above */
    /* layouts of every group of the target */
    dsi_layout_t *tp_lay;  /* [d * pp + p] */
    dsi_layout_t *dp_lay;  /* [p * tp + t] */
    dsi_layout_t *fwd_lay; /* [(p * dp + d) * tp + t]: pair (t,d,p) -> (t,d,next(p)) */
    dsi_layout_t *bwd_lay; /* [(p * dp + d) * tp + t]: pair (t,d,next(p)) -> (t,d,p) */
    dsi_layout_t *emb_lay; /* [d * tp + t] */
    dsi_layout_t *mp_lay;  /* [d] */

    dsi_place_classes_t kept[DSI_PLACE_CACHE]; /* other keys' classes */
    uint64_t place_clock;

    dsi_program_t *programs; /* one per pipeline rank */
    int32_t num_programs;
    int64_t program_key[5]; /* schedule, pp, m, vpp, unbatched of the programs */
    int64_t program_sync;   /* their bucket-issuing backwards: 0 none, 1 each chunk's last,
                               2 every one (ZeRO-2); -1 unknown */

    /* buckets of each stage: reverse parameter order */
    int64_t *stage_params;
    int64_t bucket;
    int32_t *num_buckets; /* [pp] */
    int32_t max_buckets;
    int32_t rounds; /* gradient reductions per iteration (m with ZeRO-2, else 1) */
} dsi_sim_plan_t;

/* Scratch of the graph builder: costs looked up in this run, and the
 * state of the iteration being built. */
typedef struct dsi_sim_builder {
    dsi_channel_costs_t *channel_costs; /* [lane] */
    dsi_bucket_costs_t *bucket_costs;   /* [dpgroup] */
    dsi_lane_cursor_t *cursors;         /* [lane] */
    int32_t *dp_last;        /* [dpgroup]: last collective on its stream, -1 (both iterations) */
    uint8_t *fwd_done_store; /* [lane][chunk]: dsi_lane_cursor_t.first_fwd_done */
    int32_t *ready; /* [lane][round][bucket] node where the bucket is ready, this iteration */
    /* [lane][round][bucket] ns of the pass's transfers leaving the node
     * between the bucket's readiness and the next bucket's (nic_sharing) */
    int64_t *nic;
    int32_t *gather;    /* [dpgroup][bucket] param all-gather nodes, previous iteration */
    int32_t *round_end; /* [lane][round]: state at the end of a round's backward (no overlap) */
    int32_t *optimizer; /* [lane]: the optimizer step of the iteration */
    bool split_parts;   /* a phase needs the passes part by part (dsi_phase_t.needs_parts) */
    int32_t *part_end;  /* split_parts: [lane][part in pass order] last node of the current pass */
    int32_t part_end_stride;
    int32_t *pass_start; /* [lane]: the lane's state before its current pass (before_pass) */
    uint8_t phase;       /* the phase whose hook is building (stamped on its nodes) */
    /* reuse (phase_pipeline.c), for run `segs_run`: the segments of split
     * parts (part_segs[part] the first, -1 until needed; part_num_segs), and
     * each lane's interference of a full and of the last bucket (-1) */
    dsi_sync_segment_t *segs;
    int32_t num_segs, segs_cap;
    int32_t *part_segs, *part_num_segs;
    int32_t part_segs_cap;
    int64_t *lane_interference;
    int32_t lane_interference_cap;
    uint64_t segs_run;
    /* (dsi_phase_t.kept) each lane's interference of a full and of the last
     * bucket in run `last_xf_run` (count values), and whether it equals that
     * of the run before */
    int64_t *last_xf;
    int32_t last_xf_count, last_xf_cap;
    uint64_t last_xf_run;
    bool last_xf_same;

    /* channels: transfer node of [lane][dir 0 fwd / 1 bwd][seq] */
    int32_t *xfer;
    uint8_t *xfer_sides;
    uint8_t *xfer_flag; /* the first side's view of the transfer (transfer_view) */
    int32_t xfer_per_lane;
} dsi_sim_builder_t;

/* What the evaluated graph gives: the summary, per-device numbers and the
 * indexes of the event queries. */
typedef struct dsi_sim_results {
    int evaluated;
    int64_t it_end[3]; /* end of iterations 1 and 2 */
    int64_t it2_begin; /* first start of an iteration-2 event */
    ds_sim_summary_t summary;
    ds_sim_device_t *devices;
    size_t num_devices_out;
    int32_t *mb_nodes; /* [pp][vpp][m][4]: first/last node of fwd and bwd, replica 0 */
    ds_sim_critical_t critical;
    /* event queries */
    int32_t *lane_node_off, *lane_nodes;
    int32_t *dp_node_off, *dp_node_nodes;
    int32_t *col_node_off, *col_node_nodes;
    int32_t *xfer_lane_off, *xfer_lane_nodes; /* transfers each lane sends or receives */
    ds_sim_event_t *events;
    size_t events_cap;
    double build_s, eval_s;
    /* The timeline hash's state after each node's identity (kind, iteration,
     * owner, place), for the graph structure of this generation. */
    uint64_t *hash_prefix;
    int32_t hash_prefix_cap;
    uint64_t hash_prefix_generation; /* 0: none */
    bool reused;        /* the graph was the previous run's, its durations set anew (reuse.c) */
    bool same_timeline; /* reused with every duration the previous run's: its evaluation,
                           node summary and timeline hash hold */
    bool hashed;        /* summary.timeline_hash is computed */
} dsi_sim_results_t;

struct ds_sim {
    /* inputs of the last run */
    const ds_model_t *model;
    ds_model_info_t info;
    ds_strategy_t s;     /* folded to dp x cp replicas (dsi_strategy_fold_cp) */
    ds_strategy_t given; /* as the caller gave it */
    ds_cluster_t cluster;
    const ds_cost_table_t *costs;
    ds_sim_options_t opt;
    int unbatched_p2p; /* tests: the deadlocking schedule */
    int64_t m;         /* micro-batches */
    int64_t num_devices;
    dsi_shape_ctx_t ctx;
    dsi_placement_t place;
    double *device_factor; /* [devices] in full mode with speed factors, else NULL */

    /* keys looked up: open addressing over `keys` */
    dsi_key_entry_t *keys;
    size_t num_keys, keys_cap;
    uint32_t *key_slots;
    size_t num_key_slots;
    ds_event_key_t *missing;
    size_t num_missing, missing_cap;
    dsi_cost_memo_t memo;

    /* operators of the templates (SoA) */
    int64_t *op_dur;
    int64_t *op_wait; /* TP collectives: expected wait for the slowest member, inside op_dur */
    int64_t *op_nic;  /* communication leaving the node: its whole time (nic_sharing), else 0 */
    uint8_t *op_comm, *op_assumed;
    int64_t *op_grad;
    const char **op_label;
    int32_t num_ops, ops_cap;
    dsi_template_t *templates;
    int32_t num_templates, templates_cap;
    dsi_profile_t *profiles;
    int32_t num_profiles, profiles_cap;
    /* parts, shared by the profiles: layer index and templates */
    int32_t *part_layer, *part_tf, *part_tb;
    int64_t *part_params; /* parameters of the part (TP share; head with the tied copy) */
    int64_t *part_rev;    /* where the part starts in reverse parameter order of its stage */
    int32_t num_parts, parts_cap;

    dsi_sim_plan_t plan;
    dsi_sim_builder_t builder;
    dsi_graph_t g;
    dsi_sim_results_t results;
    dsi_sim_reuse_t reuse;
    dsi_plan_mark_t plan_mark;
    dsi_sim_twice_t twice;

    dsi_sim_estimate_cache_t *estimate_cache; /* estimate.c */
    dsi_expert_layouts_t expert_layouts;      /* costs.c */
};

/* Index of bucket k of `lane`'s round `round` in builder.ready and builder.nic. */
static inline size_t dsi_bucket_slot(const ds_sim_t *sim, int32_t lane, int round, int64_t k)
{
    return ((size_t)lane * (size_t)sim->plan.rounds + (size_t)round) *
               (size_t)sim->plan.max_buckets +
           (size_t)k;
}

/* costs.c */
void dsi_sim_keys_reset(ds_sim_t *sim);
/* The memo of costs kept if this run prices keys as the last did, else
 * emptied; its storage freed. */
void dsi_sim_memo_check(ds_sim_t *sim);
void dsi_sim_memo_free(ds_sim_t *sim);
double dsi_expected_max_normal(int n);
double dsi_sim_cost_variance(const ds_cost_table_t *costs, const ds_event_key_t *key);
/* The cost of `key` in ns (0 when missing; recorded).  `flops`/`bytes`
 * feed the roofline estimate. */
ds_status_t dsi_sim_cost(ds_sim_t *sim, const ds_event_key_t *key, double flops, double bytes,
                         int64_t *ns_p, int *assumed_p);
/* The same for a lane that holds its EP group's slowest rank or not. */
ds_status_t dsi_sim_lane_profile_of(ds_sim_t *sim, int stage, const dsi_layout_t *tp_layout,
                                    bool expert_slowest, int32_t *id_p);
ds_status_t dsi_sim_profile_of(ds_sim_t *sim, int stage, const dsi_layout_t *tp_layout,
                               int32_t *profile_p);
void dsi_sim_templates_reset(ds_sim_t *sim);
/* A stage's expert costs into its profile: the EDP gradient collectives and
 * the optimizer on the expert shard (added to opt_dur); phase_moe.c. */
ds_status_t dsi_sim_expert_costs(ds_sim_t *sim, int stage, dsi_profile_t *pr);

/* The run's caches cut back to the plan mark (keys, missing keys,
 * profiles, templates, operators, parts). */
ds_status_t dsi_sim_caches_cut(ds_sim_t *sim, const dsi_plan_mark_t *mark);

/* reuse.c, the plan kept: whether this run may keep the last run's plan
 * (called once at its start); the plan computed (after the lanes); the run
 * finished; the caches changed outside a run (estimate.c). */
bool dsi_sim_plan_kept(ds_sim_t *sim);
void dsi_sim_plan_note(ds_sim_t *sim);
void dsi_sim_plan_finish(ds_sim_t *sim);
void dsi_sim_plan_forget(ds_sim_t *sim);

/* build.c: the graph of two iterations, or of one evaluated twice (twice.c),
 * phase by phase (dsi_phase.h).  `keep_plan`: the last run's plan stands
 * (dsi_plan_mark_t), the caches cut back to its mark. */
ds_status_t dsi_sim_build(ds_sim_t *sim, bool keep_plan);

/* twice.c: one iteration built, evaluated twice.  Whether this run does it;
 * before the iteration is built: the carry nodes in the builder's carried
 * slots; after: what the builder left in them. */
bool dsi_twice_applies(const ds_sim_t *sim);
ds_status_t dsi_twice_begin(ds_sim_t *sim);
ds_status_t dsi_twice_end(ds_sim_t *sim);
/* A first forward built in `count` parts from node `first` that iteration 1
 * builds as one node. */
ds_status_t dsi_twice_note_fused(ds_sim_t *sim, int32_t first, int32_t count);
/* After the first evaluation: keeps its starts and evaluates again from
 * where it ended. */
ds_status_t dsi_twice_second(ds_sim_t *sim);
void dsi_twice_free(dsi_sim_twice_t *tw);

/* reuse.c: the previous run's graph with this run's durations, when its
 * structure is this run's (*reused_p); otherwise nothing changed. */
ds_status_t dsi_sim_reprice(ds_sim_t *sim, bool *reused_p);
/* After a successful evaluation: keeps the key of the graph for the next run. */
void dsi_sim_reuse_note(ds_sim_t *sim);
/* After the run's summary: a repriced graph's results are current. */
void dsi_sim_reuse_settle(ds_sim_t *sim);
/* A representative global rank of the lane. */
int64_t dsi_sim_lane_rank(const ds_sim_t *sim, int32_t lane, int t);

/* describe.c */
/* A readable description of a node for messages: "rank 3 (stage 1) bwd mb 4 layer 7". */
void dsi_sim_describe_node(const ds_sim_t *sim, int32_t node, char *text, size_t size);

/* metrics.c */
ds_status_t dsi_sim_metrics(ds_sim_t *sim);
/* summary.timeline_hash of the evaluated graph. */
ds_status_t dsi_sim_timeline_hash(ds_sim_t *sim);
ds_status_t dsi_sim_index_events(ds_sim_t *sim);
ds_sim_category_t dsi_sim_node_category(const ds_sim_t *sim, int32_t node);
/* The simulated device (lane, DP instance) of a target rank. */
void dsi_sim_locate(const ds_sim_t *sim, int64_t rank, int32_t *lane_p, int32_t *dp_p);

/* memory.c */
void dsi_sim_memory(const ds_sim_t *sim, int stage, ds_sim_memory_t *memory);
/* memory_moe.c: an MoE layer's MLP-part activations for one micro-batch
 * (bytes, this rank), and the stage's expert weights, gradients, optimizer
 * states and dispatch buffers added to *memory. */
double dsi_sim_moe_mlp_activation(const ds_sim_t *sim);
void dsi_sim_memory_experts(const ds_sim_t *sim, int stage, ds_sim_memory_t *memory);

/* estimate.c */
void dsi_sim_estimate_free(ds_sim_t *sim);
/* The layout of `stage`'s EP or EDP groups the simulator prices dispatch,
 * combine and the expert gradients on: the one spanning the most nodes. */
ds_status_t dsi_sim_stage_expert_layout(ds_sim_t *sim, dsi_group_kind_t kind, int stage,
                                        dsi_layout_t *layout_p);
void dsi_sim_expert_layouts_free(ds_sim_t *sim);

/* Test hook: build the deadlocking unbatched schedule. */
void dsi_sim_set_unbatched_p2p(ds_sim_t *sim, int on);

/* Integer ns of a cost in seconds. */
/* The simulator's clock stops at DSI_SIM_MAX_NS (73 years): durations and
 * their sums saturate there, and an evaluation that reaches it is refused
 * (dsi_graph_evaluate), so that absurd costs never overflow. */
#define DSI_SIM_MAX_NS (INT64_MAX / 4)

static inline int64_t dsi_ns(double seconds)
{
    double ns = seconds * 1e9;
    if (ns <= 0.0)
        return 0;
    return ns < (double)DSI_SIM_MAX_NS ? (int64_t)(ns + 0.5) : DSI_SIM_MAX_NS; /* NaN: the limit */
}

/* a + b for durations in ns, saturating at DSI_SIM_MAX_NS. */
static inline int64_t dsi_ns_add(int64_t a, int64_t b)
{
    int64_t sum;
    return __builtin_add_overflow(a, b, &sum) || sum > DSI_SIM_MAX_NS ? DSI_SIM_MAX_NS : sum;
}

#endif /* DSI_SIM_H */
