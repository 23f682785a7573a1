/*
 * ZeRO-3 (pp = 1): parameters are gathered before each part of a pass,
 * prefetched DS_SIM_ZERO3_PREFETCH parts ahead, and gradients reduce-scattered
 * after each backward part, on every DP instance's stream.  The lanes'
 * passes are built part by part (needs_parts) so that each collective can
 * hang on the end of the part that issues it.
 */
#include "dsi_phase.h"

static bool zero3_applies(const ds_sim_t *sim)
{
    return sim->s.zero == 3 && sim->s.dp > 1;
}

/* Where the pass starts: what the first gathers are issued after. */
static ds_status_t zero3_before_pass(ds_sim_t *sim, int it, int32_t lane, const dsi_action_t *a)
{
    (void)a;
    return dsi_lane_state(sim, lane, it, &sim->builder.pass_start[lane]);
}

typedef struct zero3_pass {
    int it;
    bool fwd;
    int32_t part_first, parts; /* the pass's parts in the profile */
} zero3_pass_t;

/* On group g: the gather (or reduce-scatter) of the part at position j of
 * the pass, issued once `issued_after` of every lane is done (-1: the start
 * of the pass); a gather comes before the part's compute. */
static ds_status_t zero3_collective(ds_sim_t *sim, const zero3_pass_t *zp, int32_t g, bool gather,
                                    int j, int issued_after)
{
    const ds_strategy_t *s = &sim->s;
    int32_t part = zp->part_first + (zp->fwd ? j : zp->parts - 1 - j);
    if (sim->part_params[part] == 0)
        return DS_OK;
    int64_t ns;
    int assumed;
    if (gather)
        DSI_TRY(dsi_dp_cost(sim, g, DS_COMM_ALLGATHER, sim->ctx.dtype, sim->part_params[part], &ns,
                            &assumed));
    else
        DSI_TRY(dsi_dp_cost(sim, g, DS_COMM_REDUCE_SCATTER, s->grad_reduce_dtype,
                            sim->part_params[part], &ns, &assumed));
    int32_t x;
    DSI_TRY(dsi_build_node(sim, DSI_N_DP, zp->it, g, ns, &x));
    sim->g.payload[x].zero.part = part - zp->part_first;
    sim->g.label[x] = gather ? DSI_L_Z3_GATHER : DSI_L_Z3_RS;
    dsi_node_set_assumed(sim, x, assumed);
    if (sim->builder.dp_last[g] >= 0)
        DSI_TRY(dsi_graph_edge(&sim->g, sim->builder.dp_last[g], x));
    sim->builder.dp_last[g] = x;
    for (int32_t lane = 0; lane < sim->plan.num_lanes; lane++) {
        const int32_t *ends = sim->builder.part_end + (size_t)lane * sim->builder.part_end_stride;
        DSI_TRY(dsi_graph_edge(
            &sim->g, issued_after < 0 ? sim->builder.pass_start[lane] : ends[issued_after], x));
        if (gather)
            DSI_TRY(dsi_graph_edge(&sim->g, x, ends[j]));
    }
    return DS_OK;
}

/* After compute action `a` of every lane, on every group, in issue order:
 * the gathers of parts 0..depth when the pass starts, then after each part
 * x its reduce-scatter (backward) and the gather of part x + depth + 1. */
static ds_status_t zero3_after_action(ds_sim_t *sim, int it, const dsi_action_t *a)
{
    int depth = (int)dsi_param_int(DSI_PARAM_SIM_ZERO3_PREFETCH);
    /* All lanes share the profile's parts (pp = 1, vpp = 1). */
    const dsi_profile_t *pr = &sim->profiles[sim->plan.lanes[0].prof];
    zero3_pass_t zp = {it, a->type == DSI_ACT_FWD, pr->part_first[0],
                       pr->part_first[1] - pr->part_first[0]};
    for (int32_t g = 0; g < sim->plan.num_dpgroups; g++) {
        for (int j = 0; j <= depth && j < zp.parts; j++)
            DSI_TRY(zero3_collective(sim, &zp, g, true, j, -1));
        for (int x = 0; x < zp.parts; x++) {
            if (!zp.fwd)
                DSI_TRY(zero3_collective(sim, &zp, g, false, x, x));
            if (x + depth + 1 < zp.parts)
                DSI_TRY(zero3_collective(sim, &zp, g, true, x + depth + 1, x));
        }
    }
    return DS_OK;
}

/* Reuse: a gather or reduce-scatter of the kept graph. */
static ds_status_t zero3_reprice(ds_sim_t *sim, int32_t id, bool *ok_p)
{
    const ds_strategy_t *s = &sim->s;
    dsi_graph_t *g = &sim->g;
    const dsi_profile_t *pr = &sim->profiles[sim->plan.lanes[0].prof];
    int32_t part = pr->part_first[0] + g->payload[id].zero.part;
    bool gather = g->label[id] == DSI_L_Z3_GATHER;
    *ok_p = dsi_node_is_zero_part(g, id) && part < pr->part_first[1] &&
            sim->part_params[part] != 0 && g->owner[id] < sim->plan.num_dpgroups;
    if (!*ok_p)
        return DS_OK;
    int64_t ns;
    int assumed;
    if (gather)
        DSI_TRY(dsi_dp_cost(sim, g->owner[id], DS_COMM_ALLGATHER, sim->ctx.dtype,
                            sim->part_params[part], &ns, &assumed));
    else
        DSI_TRY(dsi_dp_cost(sim, g->owner[id], DS_COMM_REDUCE_SCATTER, s->grad_reduce_dtype,
                            sim->part_params[part], &ns, &assumed));
    g->dur[id] = ns;
    dsi_node_reset_assumed(g, id, assumed);
    return DS_OK;
}

/* One group's collective of one part and label, in every pass and iteration. */
static uint64_t zero3_source(const ds_sim_t *sim, int32_t id)
{
    const dsi_graph_t *g = &sim->g;
    int32_t part = g->payload[id].zero.part;
    if (!dsi_source_fits(g->owner[id], 28) || !dsi_source_fits(part, 24))
        return 0;
    return 1u | (uint64_t)g->owner[id] << 4 | (uint64_t)g->label[id] << 32 | (uint64_t)part << 40;
}

const dsi_phase_t dsi_phase_zero3 = {
    .name = "zero-3",
    .applies = zero3_applies,
    .needs_parts = true,
    .before_pass = zero3_before_pass,
    .after_action = zero3_after_action,
    .at_end = dsi_lanes_wait_dp, /* the optimizer waits for the group streams */
    .reprice = zero3_reprice,
    .source = zero3_source,
};
