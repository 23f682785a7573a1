/*
 * Mixture of experts at the end of an iteration: the expert weights'
 * gradients, reduced over the expert-data-parallel group (all-reduce, or
 * reduce-scatter and all-gather under the distributed optimizer) on each
 * lane before the optimizer step, whose cost includes the expert shard.
 * Dispatch, combine and the slowest expert's wait are inside the layer
 * templates (costs.c, model/moe_ops.c).
 */
#include "dsi_phase.h"

ds_status_t dsi_sim_expert_costs(ds_sim_t *sim, int stage, dsi_profile_t *pr)
{
    const ds_strategy_t *s = &sim->s;
    int64_t params = dsi_stage_expert_params(sim->model, s, stage);
    pr->expert_grad_dur = 0;
    pr->expert_grad_assumed = 0;
    if (params == 0)
        return DS_OK;
    int assumed = 0;
    if (dsi_expert_data_parallel(s) > 1) {
        dsi_layout_t layout;
        DSI_TRY(dsi_sim_stage_expert_layout(sim, DSI_KIND_EDP, stage, &layout));
        dsi_expert_grad_op_t ops[2];
        int n = dsi_expert_grad_ops(s, sim->ctx.dtype, params, ops);
        for (int i = 0; i < n; i++) {
            int64_t ns;
            dsi_key_set_layout(&ops[i].key, &layout);
            DSI_TRY(dsi_sim_cost(sim, &ops[i].key, 0.0, (double)ops[i].key.dims[0], &ns, &assumed));
            pr->expert_grad_dur = dsi_ns_add(pr->expert_grad_dur, ns);
            pr->expert_grad_assumed |= (uint8_t)assumed;
        }
    }
    int64_t shard = dsi_expert_optimizer_shard(s, params);
    ds_event_key_t opt = dsi_optimizer_key(shard);
    int64_t ns;
    DSI_TRY(dsi_sim_cost(sim, &opt, 12.0 * (double)shard, 36.0 * (double)shard, &ns, &assumed));
    pr->opt_dur = dsi_ns_add(pr->opt_dur, ns);
    pr->opt_assumed |= (uint8_t)assumed;
    return DS_OK;
}

static bool expert_grads_apply(const ds_sim_t *sim)
{
    return sim->info.num_experts > 0 && dsi_expert_data_parallel(&sim->s) > 1;
}

/* On the lane, like the sequence-parallel norms: every rank of a lane
 * holds experts of its own. */
static ds_status_t expert_grads_at_end(ds_sim_t *sim, int it)
{
    for (int32_t lane = 0; lane < sim->plan.num_lanes; lane++) {
        const dsi_profile_t *pr = &sim->profiles[sim->plan.lanes[lane].prof];
        if (pr->expert_grad_dur == 0)
            continue;
        int32_t x;
        DSI_TRY(dsi_lane_node(sim, lane, DSI_N_TP, it, pr->expert_grad_dur, &x));
        sim->g.label[x] = DSI_L_EXPERT_GRAD;
        dsi_node_set_assumed(sim, x, pr->expert_grad_assumed);
    }
    return DS_OK;
}

const dsi_phase_t dsi_phase_expert_gradients = {
    .name = "expert gradients",
    .applies = expert_grads_apply,
    .at_end = expert_grads_at_end,
};
