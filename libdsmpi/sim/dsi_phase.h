/*
 * The graph builder's parts, shared by its files: the lane state on the
 * compute stream, node helpers, and the phases of an iteration.
 *
 * An iteration is built by the phases of the table in build.c, in table
 * order: each has work only for some strategies (`applies`).  The lanes'
 * schedule programs are walked once, action by action; phases that couple
 * the lanes after every action (ZeRO-2 rounds, ZeRO-3 traffic) make the walk
 * action-major, otherwise it is lane after lane.  Then every phase closes
 * the iteration (`at_end`), in table order.
 */
#ifndef DSI_PHASE_H
#define DSI_PHASE_H

#include "dsi_sim.h"

typedef struct dsi_phase {
    const char *name;
    /* Whether the phase has work for the run's strategy. */
    bool (*applies)(const ds_sim_t *sim);
    /* The lanes' passes are built part by part, the end of each part
     * recorded in sim->part_end (no fused stage-level nodes). */
    bool needs_parts;
    /* Before the compute action `a` of lane `lane` is built. */
    ds_status_t (*before_pass)(ds_sim_t *sim, int it, int32_t lane, const dsi_action_t *a);
    /* Action `a` of lane `lane`'s schedule program. */
    ds_status_t (*lane_action)(ds_sim_t *sim, int it, int32_t lane, const dsi_action_t *a);
    /* After the compute action `a` of every lane (traffic that couples the
     * lanes action by action; pp = 1). */
    ds_status_t (*after_action)(ds_sim_t *sim, int it, const dsi_action_t *a);
    /* After every program has been walked. */
    ds_status_t (*at_end)(ds_sim_t *sim, int it);
    /* Reuse (reuse.c): sets the duration of node `id`, which this phase
     * built in the previous run, from this run's costs (and its compute
     * part, wait and assumed flag where the phase sets them), as building it
     * now would.  *ok_p = false where building now would give another node
     * (a cost decided its existence or its split): the graph is rebuilt.
     * NULL: a graph holding nodes of this phase is always rebuilt. */
    ds_status_t (*reprice)(ds_sim_t *sim, int32_t id, bool *ok_p);
    /* Reuse: a key (not 0) shared by nodes whose reprice always gives the
     * same duration, compute part, wait and flag, and whose checks are the
     * same in runs of one structure key; 0: the node on its own (one whose
     * check depends on costs).  From the node's identity and the plan only:
     * it is asked once per kept graph, before any reprice, and later runs
     * reprice the first node of each key and copy it to the others.  NULL:
     * every node on its own. */
    uint64_t (*source)(const ds_sim_t *sim, int32_t id);
    /* Reuse, optional: node `id` (a source's first node) needs no reprice
     * this run: only the data-parallel algorithm changed since the last run
     * (sim->reuse.only_dp_algo), on which the node's costs do not depend, so
     * it holds this run's values already.  It may not look up costs then:
     * keys that a reprice would look up must be looked up all the same (the
     * summary counts them). */
    bool (*kept)(ds_sim_t *sim, int32_t id);
} dsi_phase_t;

/* A source key: `tag` (1..15) and fields packed from bit 4 up, each below
 * 2^bits (the caller's widths add up to at most 60). */
static inline bool dsi_source_fits(int64_t field, int bits)
{
    return field >= 0 && field >> bits == 0;
}

/* phase_pipeline.c: layer passes and point-to-point transfers */
extern const dsi_phase_t dsi_phase_pipeline;
/* phase_dp.c: data-parallel gradients (ZeRO-0/1, parameter server), ZeRO-2
 * rounds, parameter gathers and pulls after the optimizer */
extern const dsi_phase_t dsi_phase_dp_gradients;
extern const dsi_phase_t dsi_phase_zero2;
extern const dsi_phase_t dsi_phase_dp_parameters;
/* phase_zero3.c: ZeRO-3 parameter gathers and gradient reduce-scatters */
extern const dsi_phase_t dsi_phase_zero3;
/* phase_end.c: sequence-parallel norms, replica-column collectives, the
 * optimizer step */
extern const dsi_phase_t dsi_phase_sp_norm;
extern const dsi_phase_t dsi_phase_columns;
extern const dsi_phase_t dsi_phase_optimizer;
/* phase_moe.c: expert gradients over the expert-data-parallel group */
extern const dsi_phase_t dsi_phase_expert_gradients;

/* ---- nodes and lanes (build.c) ------------------------------------------------------------ */

/* Inline: the builder calls these for every node and edge. */
static inline ds_status_t dsi_build_node(ds_sim_t *sim, dsi_node_kind_t kind, int it, int32_t owner,
                                         int64_t dur, int32_t *id_p)
{
    if (sim->g.n == sim->g.cap) /* growing says why it cannot: no memory, or too large */
        DSI_TRY(dsi_graph_grow_nodes(&sim->g));
    int32_t id = dsi_graph_add(&sim->g, kind, it, owner, dur);
    if (id < 0)
        return DS_ERR_NO_MEMORY;
    sim->g.phase[id] = sim->builder.phase;
    *id_p = id;
    return DS_OK;
}

/* Edges from what the lane's next event waits for (its pending transfers
 * and collectives, or its last node) to `to`. */
static inline ds_status_t dsi_lane_edges_to(ds_sim_t *sim, const dsi_lane_cursor_t *l, int32_t to)
{
    if (l->npend > 0) {
        for (int32_t i = 0; i < l->npend; i++)
            DSI_TRY(dsi_graph_edge(&sim->g, l->pend[i], to));
    } else if (l->last >= 0) {
        DSI_TRY(dsi_graph_edge(&sim->g, l->last, to));
    }
    return DS_OK;
}

/* A node on the lane's compute stream, after everything the lane waits for. */
static inline ds_status_t dsi_lane_node(ds_sim_t *sim, int32_t lane, dsi_node_kind_t kind, int it,
                                        int64_t dur, int32_t *id_p)
{
    dsi_lane_cursor_t *l = &sim->builder.cursors[lane];
    int32_t id;
    DSI_TRY(dsi_build_node(sim, kind, it, lane, dur, &id));
    DSI_TRY(dsi_lane_edges_to(sim, l, id));
    l->last = id;
    l->npend = 0;
    *id_p = id;
    return DS_OK;
}
/* One node standing for the lane's current state (joins pending nodes). */
ds_status_t dsi_lane_state(ds_sim_t *sim, int32_t lane, int it, int32_t *id_p);
/* The lane also waits for `other` before its next event. */
ds_status_t dsi_lane_wait(ds_sim_t *sim, int32_t lane, int it, int32_t other);
/* Every lane waits for the last collective of each of its DP instances. */
ds_status_t dsi_lanes_wait_dp(ds_sim_t *sim, int it);
/* Cost of a collective of `params` parameters on DP instance `group`. */
ds_status_t dsi_dp_cost(ds_sim_t *sim, int32_t group, ds_comm_op_t op, ds_dtype_t dtype,
                        int64_t params, int64_t *ns_p, int *assumed_p);

/* The table of phases (build.c), in order. */
const dsi_phase_t *const *dsi_sim_phases(int *count_p);

/* place.c: placement classes (columns, DP instances) and lanes */
ds_status_t dsi_sim_setup_placement(ds_sim_t *sim);
ds_status_t dsi_sim_setup_lanes(ds_sim_t *sim);

static inline void dsi_node_set_assumed(ds_sim_t *sim, int32_t id, int assumed)
{
    if (assumed)
        sim->g.flags[id] |= DSI_NODE_ASSUMED;
}

/* Reuse: the flag as this run's costs set it. */
static inline void dsi_node_reset_assumed(dsi_graph_t *g, int32_t id, int assumed)
{
    g->flags[id] = (uint8_t)((g->flags[id] & ~DSI_NODE_ASSUMED) | (assumed ? DSI_NODE_ASSUMED : 0));
}

/* `dur` with its compute part `comp` run `factor` times slower. */
static inline int64_t dsi_scaled(int64_t dur, int64_t comp, double factor)
{
    if (factor == 1.0)
        return dur;
    return dsi_ns_add(dsi_ns((double)comp * factor * 1e-9), dur - comp);
}

/* Parameters of bucket k of stage p: every bucket but the last is full. */
static inline int64_t dsi_bucket_size(const ds_sim_t *sim, int p, int64_t k)
{
    int64_t P = sim->plan.stage_params[p], B = sim->plan.bucket;
    return DSI_MIN(B, P - k * B);
}

/* The collective that reduces gradient buckets. */
static inline ds_comm_op_t dsi_grad_reduce_op(const ds_strategy_t *s)
{
    return s->dp_algo == DS_DP_PS ? DS_COMM_PS_PUSH
           : s->zero == 0         ? DS_COMM_ALLREDUCE
                                  : DS_COMM_REDUCE_SCATTER;
}

#endif /* DSI_PHASE_H */
