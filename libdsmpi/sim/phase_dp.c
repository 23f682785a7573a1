/*
 * Data-parallel traffic on the streams of the DP group instances: gradient
 * buckets reduced as the backward completes them (all-reduce, ZeRO-1/2
 * reduce-scatter, parameter-server push), by round with ZeRO-2 (one per
 * micro-batch), and the parameters gathered (ZeRO-1/2) or pulled (parameter
 * server) after the optimizer step.
 */
#include "dsi_phase.h"

/* Cost of bucket k's gradient (which 0) or parameter (1) collective:
 * every bucket but the last has the full size. */
static ds_status_t bucket_cost(ds_sim_t *sim, int32_t group, int which, ds_comm_op_t op,
                               ds_dtype_t dtype, int64_t k, int64_t *ns_p, int *assumed_p)
{
    int p = sim->plan.dpgroups[group].p;
    dsi_bucket_costs_t *cache = &sim->builder.bucket_costs[group];
    int last = k == sim->plan.num_buckets[p] - 1;
    if (cache->ns[which][last] < 0) {
        int assumed;
        DSI_TRY(dsi_dp_cost(sim, group, op, dtype, dsi_bucket_size(sim, p, k),
                            &cache->ns[which][last], &assumed));
        cache->assumed[which][last] = (uint8_t)assumed;
    }
    *ns_p = cache->ns[which][last];
    *assumed_p = cache->assumed[which][last];
    return DS_OK;
}

/* Reuse: a gradient or parameter bucket of the kept graph.  Its label is
 * the one these phases give it now (the strategy's reduction). */
static ds_status_t bucket_reprice(ds_sim_t *sim, int32_t id, bool *ok_p)
{
    const ds_strategy_t *s = &sim->s;
    dsi_graph_t *g = &sim->g;
    bool ps = s->dp_algo == DS_DP_PS;
    uint8_t grad = ps ? DSI_L_PS_PUSH : s->zero == 0 ? DSI_L_GRAD_ALLREDUCE : DSI_L_GRAD_RS;
    uint8_t param = ps ? DSI_L_PS_PULL : DSI_L_PARAM_AG;
    int32_t group = g->owner[id];
    int64_t k = g->payload[id].bucket.bucket;
    /* A bucket's share of the interfaces follows the passes' transfers,
     * which this hook does not see: such a graph is built afresh. */
    *ok_p = g->kind[id] == DSI_N_DP && (g->label[id] == grad || g->label[id] == param) &&
            group < sim->plan.num_dpgroups &&
            k < sim->plan.num_buckets[sim->plan.dpgroups[group].p];
    if (!*ok_p)
        return DS_OK;
    int64_t ns;
    int assumed;
    if (g->label[id] == grad)
        DSI_TRY(bucket_cost(sim, group, 0, dsi_grad_reduce_op(s), s->grad_reduce_dtype, k, &ns,
                            &assumed));
    else
        DSI_TRY(bucket_cost(sim, group, 1, ps ? DS_COMM_PS_PULL : DS_COMM_ALLGATHER, sim->ctx.dtype,
                            k, &ns, &assumed));
    g->dur[id] = ns;
    dsi_node_reset_assumed(g, id, assumed);
    return DS_OK;
}

/* A group's buckets of one label: alike but the last (smaller). */
static uint64_t bucket_source(const ds_sim_t *sim, int32_t id)
{
    const dsi_graph_t *g = &sim->g;
    int32_t group = g->owner[id];
    int p = sim->plan.dpgroups[group].p;
    bool last = g->payload[id].bucket.bucket == sim->plan.num_buckets[p] - 1;
    if (!dsi_source_fits(group, 32))
        return 0;
    return 1u | (uint64_t)group << 4 | (uint64_t)g->label[id] << 36 | (uint64_t)last << 44;
}

/* The transfers leaving the node that member lanes' passes run while
 * bucket k of group g is reduced (sync_part's builder.nic, the most over the
 * lanes) go through the same interfaces: the group's stream carries them
 * after the bucket, in a node of their own.  Nothing without overlap, or
 * when no transfer leaves the node. */
static ds_status_t share_interfaces(ds_sim_t *sim, int it, int32_t g, int64_t k, int round,
                                    bool overlap)
{
    if (!overlap || !sim->opt.nic_sharing)
        return DS_OK;
    int p = sim->plan.dpgroups[g].p;
    int64_t ns = 0;
    for (int32_t c = 0; c < sim->plan.num_columns; c++) {
        int32_t lane = sim->plan.stage_lanes[(size_t)p * sim->plan.num_columns + c];
        ns = DSI_MAX(ns, sim->builder.nic[dsi_bucket_slot(sim, lane, round, k)]);
    }
    if (ns <= 0)
        return DS_OK;
    int32_t x;
    DSI_TRY(dsi_build_node(sim, DSI_N_DP, it, g, ns, &x));
    sim->g.payload[x].bucket = (dsi_bucket_node_t){(int32_t)k, (int16_t)round};
    sim->g.label[x] = DSI_L_NIC_SHARE;
    DSI_TRY(dsi_graph_edge(&sim->g, sim->builder.dp_last[g], x));
    sim->builder.dp_last[g] = x;
    return DS_OK;
}

/* Gradient reduction of round `round` on every DP instance: buckets in
 * order on the group's stream, each after its readiness on every member
 * lane.  `lanes_wait`: the lanes block until their groups finished. */
static ds_status_t build_grad_sync(ds_sim_t *sim, int it, int round, bool lanes_wait)
{
    const ds_strategy_t *s = &sim->s;
    ds_comm_op_t op = dsi_grad_reduce_op(s);
    uint8_t label = s->dp_algo == DS_DP_PS ? DSI_L_PS_PUSH
                    : s->zero == 0         ? DSI_L_GRAD_ALLREDUCE
                                           : DSI_L_GRAD_RS;
    bool overlap = s->overlap_grad_reduce;
    for (int32_t g = 0; g < sim->plan.num_dpgroups; g++) {
        int p = sim->plan.dpgroups[g].p;
        for (int64_t k = 0; k < sim->plan.num_buckets[p]; k++) {
            int64_t ns;
            int assumed;
            DSI_TRY(bucket_cost(sim, g, 0, op, s->grad_reduce_dtype, k, &ns, &assumed));
            int32_t x;
            DSI_TRY(dsi_build_node(sim, DSI_N_DP, it, g, ns, &x));
            sim->g.payload[x].bucket = (dsi_bucket_node_t){(int32_t)k, (int16_t)round};
            sim->g.label[x] = label;
            dsi_node_set_assumed(sim, x, assumed);
            if (sim->builder.dp_last[g] >= 0)
                DSI_TRY(dsi_graph_edge(&sim->g, sim->builder.dp_last[g], x));
            sim->builder.dp_last[g] = x;
            for (int32_t c = 0; c < sim->plan.num_columns; c++) {
                int32_t lane = sim->plan.stage_lanes[(size_t)p * sim->plan.num_columns + c];
                int32_t r;
                if (overlap)
                    r = sim->builder.ready[dsi_bucket_slot(sim, lane, round, k)];
                else
                    r = sim->builder.round_end[(size_t)lane * sim->plan.rounds + round];
                if (r < 0)
                    return DSI_ERROR(DS_ERR_INTERNAL, "bucket %lld of stage %d never became ready",
                                     (long long)k, p);
                DSI_TRY(dsi_graph_edge(&sim->g, r, x));
            }
            DSI_TRY(share_interfaces(sim, it, g, k, round, overlap));
        }
    }
    if (lanes_wait)
        DSI_TRY(dsi_lanes_wait_dp(sim, it));
    return DS_OK;
}

/* ---- gradients reduced once per iteration (no ZeRO, ZeRO-1, parameter server) ------------ */

static bool dp_gradients_apply(const ds_sim_t *sim)
{
    const ds_strategy_t *s = &sim->s;
    return s->dp > 1 && (s->zero <= 1 || s->dp_algo == DS_DP_PS);
}

static ds_status_t dp_gradients_at_end(ds_sim_t *sim, int it)
{
    /* Without overlap, buckets are ready when the backward ends. */
    if (!sim->s.overlap_grad_reduce)
        for (int32_t lane = 0; lane < sim->plan.num_lanes; lane++) {
            int32_t end;
            DSI_TRY(dsi_lane_state(sim, lane, it, &end));
            sim->builder.round_end[(size_t)lane * sim->plan.rounds] = end;
        }
    return build_grad_sync(sim, it, 0, true);
}

const dsi_phase_t dsi_phase_dp_gradients = {
    .name = "data-parallel gradients",
    .applies = dp_gradients_apply,
    .at_end = dp_gradients_at_end,
    .reprice = bucket_reprice,
    .source = bucket_source,
};

/* ---- ZeRO-2: gradients reduced after every backward (pp = 1) ------------------------------ */

static bool zero2_applies(const ds_sim_t *sim)
{
    return sim->s.zero == 2 && sim->s.dp > 1;
}

static ds_status_t zero2_after_action(ds_sim_t *sim, int it, const dsi_action_t *a)
{
    if (a->type != DSI_ACT_BWD)
        return DS_OK;
    int round = sim->builder.cursors[0].nbwd - 1;
    bool overlap = sim->s.overlap_grad_reduce;
    if (!overlap)
        for (int32_t lane = 0; lane < sim->plan.num_lanes; lane++) {
            int32_t end;
            DSI_TRY(dsi_lane_state(sim, lane, it, &end));
            sim->builder.round_end[(size_t)lane * sim->plan.rounds + round] = end;
        }
    return build_grad_sync(sim, it, round, !overlap);
}

const dsi_phase_t dsi_phase_zero2 = {
    .name = "zero-2 gradients",
    .applies = zero2_applies,
    .after_action = zero2_after_action,
    .at_end = dsi_lanes_wait_dp, /* the optimizer waits for the group streams */
    .reprice = bucket_reprice,
    .source = bucket_source,
};

/* ---- parameters after the optimizer (ZeRO-1/2, parameter server) -------------------------- */

static bool dp_parameters_apply(const ds_sim_t *sim)
{
    const ds_strategy_t *s = &sim->s;
    return s->dp > 1 && (s->dp_algo == DS_DP_PS || s->zero == 1 || s->zero == 2);
}

/* Parameter all-gather (ZeRO-1/2) or pull (parameter server) after the
 * optimizer: buckets in forward order (the last bucket first). */
static ds_status_t dp_parameters_at_end(ds_sim_t *sim, int it)
{
    const ds_strategy_t *s = &sim->s;
    bool ps = s->dp_algo == DS_DP_PS;
    ds_comm_op_t op = ps ? DS_COMM_PS_PULL : DS_COMM_ALLGATHER;
    for (int32_t g = 0; g < sim->plan.num_dpgroups; g++) {
        int p = sim->plan.dpgroups[g].p;
        for (int64_t k = sim->plan.num_buckets[p] - 1; k >= 0; k--) {
            int64_t ns;
            int assumed;
            DSI_TRY(bucket_cost(sim, g, 1, op, sim->ctx.dtype, k, &ns, &assumed));
            int32_t x;
            DSI_TRY(dsi_build_node(sim, DSI_N_DP, it, g, ns, &x));
            sim->g.payload[x].bucket = (dsi_bucket_node_t){.bucket = (int32_t)k};
            sim->g.label[x] = ps ? DSI_L_PS_PULL : DSI_L_PARAM_AG;
            dsi_node_set_assumed(sim, x, assumed);
            if (sim->builder.dp_last[g] >= 0)
                DSI_TRY(dsi_graph_edge(&sim->g, sim->builder.dp_last[g], x));
            if (k == sim->plan.num_buckets[p] - 1)
                for (int32_t c = 0; c < sim->plan.num_columns; c++)
                    DSI_TRY(dsi_graph_edge(
                        &sim->g,
                        sim->builder.optimizer
                            [sim->plan.stage_lanes[(size_t)p * sim->plan.num_columns + c]],
                        x));
            sim->builder.dp_last[g] = x;
            sim->builder.gather[(size_t)g * sim->plan.max_buckets + k] = x;
        }
    }
    if (ps || !s->overlap_grad_reduce)
        DSI_TRY(dsi_lanes_wait_dp(sim, it));
    return DS_OK;
}

const dsi_phase_t dsi_phase_dp_parameters = {
    .name = "data-parallel parameters",
    .applies = dp_parameters_apply,
    .at_end = dp_parameters_at_end,
    .reprice = bucket_reprice,
    .source = bucket_source,
};
