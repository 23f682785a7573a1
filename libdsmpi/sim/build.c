/*
 * Graph generation: the driver.  Placement classes and lanes (place.c) and
 * the schedule programs, buckets and per-iteration state are set up here;
 * then each of two iterations is built by the phases of `phases` (see
 * dsi_phase.h), in files phase_*.c.  The evaluation is engine.c's.
 */
#include "dsi_phase.h"

#include <string.h>

/* In table order at the end of an iteration: gradients are reduced before
 * the optimizer step, parameters gathered after it.  A new kind of
 * parallelism is a phase_*.c file and a row here. */
static const dsi_phase_t *const phases[] = {
    &dsi_phase_pipeline,         /* layer passes, point-to-point transfers */
    &dsi_phase_dp_gradients,     /* gradient buckets once per iteration */
    &dsi_phase_zero2,            /* gradient buckets after every backward */
    &dsi_phase_zero3,            /* parameter gathers, gradient reduce-scatters per part */
    &dsi_phase_sp_norm,          /* sequence-parallel norm gradients */
    &dsi_phase_columns,          /* embedding, overflow and gradient-norm collectives */
    &dsi_phase_expert_gradients, /* MoE expert gradients over the EDP group */
    &dsi_phase_optimizer,        /* the optimizer step */
    &dsi_phase_dp_parameters,    /* parameter gathers (ZeRO-1/2) and pulls after it */
};

#define NUM_PHASES ((int)(sizeof(phases) / sizeof(phases[0])))

const dsi_phase_t *const *dsi_sim_phases(int *count_p)
{
    *count_p = NUM_PHASES;
    return phases;
}

/* ---- nodes and lanes ---------------------------------------------------------------------- */

int64_t dsi_sim_lane_rank(const ds_sim_t *sim, int32_t lane, int t)
{
    const dsi_lane_t *l = &sim->plan.lanes[lane];
    return ds_strategy_rank_of(&sim->s, (ds_coords_t){t, l->d, l->p});
}

/* One node standing for the lane's current state (joins pending nodes). */
ds_status_t dsi_lane_state(ds_sim_t *sim, int32_t lane, int it, int32_t *id_p)
{
    dsi_lane_cursor_t *l = &sim->builder.cursors[lane];
    if (l->npend == 0) {
        *id_p = l->last;
        return DS_OK;
    }
    if (l->npend == 1) {
        *id_p = l->pend[0];
        return DS_OK;
    }
    int32_t id;
    DSI_TRY(dsi_build_node(sim, DSI_N_JOIN, it, lane, 0, &id));
    DSI_TRY(dsi_lane_edges_to(sim, l, id));
    l->pend[0] = id;
    l->npend = 1;
    *id_p = id;
    return DS_OK;
}

/* The lane also waits for `other` before its next event. */
ds_status_t dsi_lane_wait(ds_sim_t *sim, int32_t lane, int it, int32_t other)
{
    dsi_lane_cursor_t *l = &sim->builder.cursors[lane];
    if (other < 0)
        return DS_OK;
    if (l->npend == 0 && l->last >= 0)
        l->pend[l->npend++] = l->last;
    if (l->npend == DSI_MAX_PENDING) {
        int32_t join;
        DSI_TRY(dsi_lane_state(sim, lane, it, &join));
    }
    l->pend[l->npend++] = other;
    return DS_OK;
}

ds_status_t dsi_dp_cost(ds_sim_t *sim, int32_t group, ds_comm_op_t op, ds_dtype_t dtype,
                        int64_t params, int64_t *ns_p, int *assumed_p)
{
    const ds_strategy_t *s = &sim->s;
    int64_t bytes = params * (int64_t)ds_dtype_size(dtype);
    ds_event_key_t key = dsi_comm_step_key(s, op, DS_GROUP_DP, s->dp, dtype, bytes);
    dsi_key_set_layout(&key, &sim->plan.dpgroups[group].layout);
    return dsi_sim_cost(sim, &key, 0.0, (double)bytes, ns_p, assumed_p);
}

ds_status_t dsi_lanes_wait_dp(ds_sim_t *sim, int it)
{
    for (int32_t lane = 0; lane < sim->plan.num_lanes; lane++) {
        const dsi_lane_t *l = &sim->plan.lanes[lane];
        for (int32_t i = 0; i < l->dp_count; i++)
            DSI_TRY(dsi_lane_wait(sim, lane, it,
                                  sim->builder.dp_last[sim->plan.lane_dp[l->dp_first + i]]));
    }
    return DS_OK;
}

/* ---- iterations ------------------------------------------------------------------------- */

static void reset_iteration_state(ds_sim_t *sim)
{
    size_t xfer_slots = (size_t)sim->plan.num_lanes * 2 * sim->builder.xfer_per_lane;
    for (size_t i = 0; i < xfer_slots; i++)
        sim->builder.xfer[i] = -1;
    memset(sim->builder.xfer_sides, 0, xfer_slots);
    size_t ready_slots = (size_t)sim->plan.num_lanes * sim->plan.rounds * sim->plan.max_buckets;
    for (size_t i = 0; i < ready_slots; i++)
        sim->builder.ready[i] = -1;
    memset(sim->builder.nic, 0, ready_slots * sizeof(*sim->builder.nic));
    for (size_t i = 0; i < (size_t)sim->plan.num_lanes * sim->plan.rounds; i++)
        sim->builder.round_end[i] = -1;
    memset(sim->builder.fwd_done_store, 0, (size_t)sim->plan.num_lanes * sim->s.vpp);
    for (int32_t lane = 0; lane < sim->plan.num_lanes; lane++) {
        dsi_lane_cursor_t *l = &sim->builder.cursors[lane];
        memset(l->seq, 0, sizeof(l->seq));
        l->nbwd = 0;
    }
}

/* The hooks of the phases kept for an iteration, each list in table order:
 * the walk calls only those a phase has, not every phase per action. */
typedef struct iteration_hooks {
    const dsi_phase_t *before_pass[NUM_PHASES], *lane_action[NUM_PHASES], *after_action[NUM_PHASES];
    /* each hook's phase: its index in `phases`, stamped on the nodes it builds */
    uint8_t before_pass_phase[NUM_PHASES], lane_action_phase[NUM_PHASES],
        after_action_phase[NUM_PHASES];
    int num_before_pass, num_lane_action, num_after_action;
} iteration_hooks_t;

static ds_status_t lane_action(ds_sim_t *sim, const iteration_hooks_t *h, int it, int32_t lane,
                               const dsi_action_t *a)
{
    if (a->type != DSI_ACT_COMM)
        for (int i = 0; i < h->num_before_pass; i++) {
            sim->builder.phase = h->before_pass_phase[i];
            DSI_TRY(h->before_pass[i]->before_pass(sim, it, lane, a));
        }
    for (int i = 0; i < h->num_lane_action; i++) {
        sim->builder.phase = h->lane_action_phase[i];
        DSI_TRY(h->lane_action[i]->lane_action(sim, it, lane, a));
    }
    return DS_OK;
}

/* Lane after lane: a lane's nodes stay together in memory.  Transfers meet
 * their other side whichever lane is built first. */
static ds_status_t walk_lane_major(ds_sim_t *sim, const iteration_hooks_t *h, int it)
{
    for (int32_t lane = 0; lane < sim->plan.num_lanes; lane++) {
        const dsi_program_t *prog = &sim->plan.programs[sim->plan.lanes[lane].p];
        for (int32_t a = 0; a < prog->count; a++)
            DSI_TRY(lane_action(sim, h, it, lane, &prog->actions[a]));
    }
    return DS_OK;
}

/* Action-major (pp = 1): every lane's action a, then the traffic that
 * couples the lanes after it. */
static ds_status_t walk_action_major(ds_sim_t *sim, const iteration_hooks_t *h, int it)
{
    int32_t longest = 0;
    for (int32_t lane = 0; lane < sim->plan.num_lanes; lane++)
        longest = DSI_MAX(longest, sim->plan.programs[sim->plan.lanes[lane].p].count);
    for (int32_t a = 0; a < longest; a++) {
        const dsi_action_t *shared = NULL;
        for (int32_t lane = 0; lane < sim->plan.num_lanes; lane++) {
            const dsi_program_t *prog = &sim->plan.programs[sim->plan.lanes[lane].p];
            if (a >= prog->count)
                continue;
            shared = &prog->actions[a];
            DSI_TRY(lane_action(sim, h, it, lane, shared));
        }
        if (shared == NULL || shared->type == DSI_ACT_COMM)
            continue;
        for (int i = 0; i < h->num_after_action; i++) {
            sim->builder.phase = h->after_action_phase[i];
            DSI_TRY(h->after_action[i]->after_action(sim, it, shared));
        }
    }
    return DS_OK;
}

static ds_status_t build_iteration(ds_sim_t *sim, int it)
{
    const dsi_phase_t *active[NUM_PHASES];
    uint8_t active_phase[NUM_PHASES];
    int num_active = 0;
    iteration_hooks_t h = {.num_before_pass = 0};
    sim->builder.split_parts = false;
    for (int i = 0; i < NUM_PHASES; i++) {
        const dsi_phase_t *ph = phases[i];
        if (!ph->applies(sim))
            continue;
        active_phase[num_active] = (uint8_t)i;
        active[num_active++] = ph;
        if (ph->before_pass != NULL) {
            h.before_pass_phase[h.num_before_pass] = (uint8_t)i;
            h.before_pass[h.num_before_pass++] = ph;
        }
        if (ph->lane_action != NULL) {
            h.lane_action_phase[h.num_lane_action] = (uint8_t)i;
            h.lane_action[h.num_lane_action++] = ph;
        }
        if (ph->after_action != NULL) {
            h.after_action_phase[h.num_after_action] = (uint8_t)i;
            h.after_action[h.num_after_action++] = ph;
        }
        sim->builder.split_parts |= ph->needs_parts;
    }
    reset_iteration_state(sim);
    if (h.num_after_action > 0)
        DSI_TRY(walk_action_major(sim, &h, it));
    else
        DSI_TRY(walk_lane_major(sim, &h, it));
    for (int i = 0; i < num_active; i++) {
        if (active[i]->at_end == NULL)
            continue;
        sim->builder.phase = active_phase[i];
        DSI_TRY(active[i]->at_end(sim, it));
    }
    return DS_OK;
}

/* ---- set-up ------------------------------------------------------------------------------- */

static ds_status_t setup_programs(ds_sim_t *sim)
{
    const ds_strategy_t *s = &sim->s;
    if (sim->plan.num_programs < s->pp) {
        DSI_TRY(dsi_realloc_array(&sim->plan.programs, (size_t)s->pp, sizeof(*sim->plan.programs)));
        memset(sim->plan.programs + sim->plan.num_programs, 0,
               (size_t)(s->pp - sim->plan.num_programs) * sizeof(*sim->plan.programs));
        sim->plan.num_programs = s->pp;
    }
    bool buckets_in_backward = s->dp > 1 && s->overlap_grad_reduce && s->zero != 3;
    int64_t key[5] = {s->schedule, s->pp, sim->m, s->vpp, sim->unbatched_p2p};
    bool cached = memcmp(key, sim->plan.program_key, sizeof(key)) == 0;
    /* Which backwards issue buckets: set below, kept with the programs. */
    int64_t sync_key = buckets_in_backward ? 1 + (s->zero == 2) : 0;
    if (cached && sync_key == sim->plan.program_sync)
        return DS_OK;
    memset(sim->plan.program_key, 0, sizeof(sim->plan.program_key));
    sim->plan.program_sync = -1;
    for (int p = 0; p < s->pp; p++) {
        dsi_program_t *prog = &sim->plan.programs[p];
        if (cached) {
            for (int32_t i = 0; i < prog->count; i++)
                prog->actions[i].sync = 0;
        } else {
            DSI_TRY(dsi_schedule_build(s, sim->m, p, sim->unbatched_p2p, prog));
        }
        if (!buckets_in_backward)
            continue;
        /* ZeRO-2: every backward; otherwise the last backward of each chunk. */
        for (int c = 0; c < s->vpp; c++) {
            for (int32_t i = prog->count - 1; i >= 0; i--) {
                dsi_action_t *a = &prog->actions[i];
                if (a->type == DSI_ACT_BWD && a->chunk == c) {
                    a->sync = 1;
                    if (s->zero != 2)
                        break;
                }
            }
        }
    }
    memcpy(sim->plan.program_key, key, sizeof(key));
    sim->plan.program_sync = sync_key;
    return DS_OK;
}

static ds_status_t setup_buckets(ds_sim_t *sim)
{
    const ds_strategy_t *s = &sim->s;
    DSI_TRY(
        dsi_realloc_array(&sim->plan.stage_params, (size_t)s->pp, sizeof(*sim->plan.stage_params)));
    DSI_TRY(
        dsi_realloc_array(&sim->plan.num_buckets, (size_t)s->pp, sizeof(*sim->plan.num_buckets)));
    sim->plan.bucket = dsi_dp_bucket_params(s);
    sim->plan.max_buckets = 1;
    for (int p = 0; p < s->pp; p++) {
        sim->plan.stage_params[p] = dsi_stage_params(sim->model, s, p);
        int64_t nb = (sim->plan.stage_params[p] + sim->plan.bucket - 1) / sim->plan.bucket;
        if (nb > (1 << 20))
            return DSI_ERROR(
                DS_ERR_INVALID_ARG,
                "bucket=%lld parameters makes %lld buckets on stage %d (accepted: at most 1048576)",
                (long long)sim->plan.bucket, (long long)nb, p);
        sim->plan.num_buckets[p] = (int32_t)nb;
        sim->plan.max_buckets = DSI_MAX(sim->plan.max_buckets, (int32_t)nb);
    }
    sim->plan.rounds = s->zero == 2 ? (int32_t)sim->m : 1;
    return DS_OK;
}

static ds_status_t setup_state(ds_sim_t *sim)
{
    const ds_strategy_t *s = &sim->s;
    size_t lanes = (size_t)sim->plan.num_lanes;
    sim->builder.xfer_per_lane = (int32_t)(sim->m * s->vpp + 1);
    size_t xfer_slots = lanes * 2 * (size_t)sim->builder.xfer_per_lane;
    DSI_TRY(dsi_realloc_array(&sim->builder.xfer, xfer_slots, sizeof(*sim->builder.xfer)));
    DSI_TRY(dsi_realloc_array(&sim->builder.xfer_sides, xfer_slots, 1));
    DSI_TRY(dsi_realloc_array(&sim->builder.xfer_flag, xfer_slots, 1));
    DSI_TRY(dsi_realloc_array(&sim->builder.ready, lanes * sim->plan.rounds * sim->plan.max_buckets,
                              sizeof(*sim->builder.ready)));
    DSI_TRY(dsi_realloc_array(&sim->builder.nic, lanes * sim->plan.rounds * sim->plan.max_buckets,
                              sizeof(*sim->builder.nic)));
    DSI_TRY(dsi_realloc_array(&sim->builder.round_end, lanes * sim->plan.rounds,
                              sizeof(*sim->builder.round_end)));
    DSI_TRY(dsi_realloc_array(&sim->builder.optimizer, lanes, sizeof(*sim->builder.optimizer)));
    DSI_TRY(dsi_realloc_array(&sim->builder.cursors, lanes, sizeof(*sim->builder.cursors)));
    DSI_TRY(
        dsi_realloc_array(&sim->builder.channel_costs, lanes, sizeof(*sim->builder.channel_costs)));
    memset(sim->builder.channel_costs, 0xff, lanes * sizeof(*sim->builder.channel_costs));
    DSI_TRY(dsi_realloc_array(&sim->builder.fwd_done_store, lanes * (size_t)s->vpp, 1));
    size_t groups = (size_t)sim->plan.num_dpgroups;
    DSI_TRY(dsi_realloc_array(&sim->builder.dp_last, groups ? groups : 1,
                              sizeof(*sim->builder.dp_last)));
    for (size_t g = 0; g < groups; g++)
        sim->builder.dp_last[g] = -1;
    DSI_TRY(dsi_realloc_array(&sim->builder.bucket_costs, groups ? groups : 1,
                              sizeof(*sim->builder.bucket_costs)));
    memset(sim->builder.bucket_costs, 0xff, groups * sizeof(*sim->builder.bucket_costs));
    size_t gathers = (size_t)sim->plan.num_dpgroups * sim->plan.max_buckets;
    DSI_TRY(dsi_realloc_array(&sim->builder.gather, gathers ? gathers : 1,
                              sizeof(*sim->builder.gather)));
    for (size_t i = 0; i < gathers; i++)
        sim->builder.gather[i] = -1;
    int32_t parts = 1;
    for (int32_t i = 0; i < sim->num_profiles; i++)
        for (int c = 0; c < s->vpp; c++)
            parts =
                DSI_MAX(parts, sim->profiles[i].part_first[c + 1] - sim->profiles[i].part_first[c]);
    sim->builder.part_end_stride = parts;
    DSI_TRY(
        dsi_realloc_array(&sim->builder.part_end, lanes * parts, sizeof(*sim->builder.part_end)));
    DSI_TRY(dsi_realloc_array(&sim->builder.pass_start, lanes, sizeof(*sim->builder.pass_start)));
    size_t mb_slots = (size_t)s->pp * s->vpp * (size_t)sim->m * 4;
    DSI_TRY(dsi_realloc_array(&sim->results.mb_nodes, mb_slots, sizeof(*sim->results.mb_nodes)));
    for (size_t i = 0; i < mb_slots; i++)
        sim->results.mb_nodes[i] = -1;
    for (int32_t lane = 0; lane < sim->plan.num_lanes; lane++) {
        dsi_lane_cursor_t *cursor = &sim->builder.cursors[lane];
        cursor->last = -1;
        cursor->npend = 0;
        cursor->first_fwd_done = sim->builder.fwd_done_store + (size_t)lane * s->vpp;
    }
    return DS_OK;
}

ds_status_t dsi_sim_build(ds_sim_t *sim, bool keep_plan)
{
    if (!keep_plan) {
        DSI_TRY(dsi_sim_setup_placement(sim));
        DSI_TRY(dsi_sim_setup_lanes(sim));
        dsi_sim_plan_note(sim);
    }
    DSI_TRY(setup_programs(sim));
    if (!keep_plan) /* the buckets do not depend on the DP algorithm either */
        DSI_TRY(setup_buckets(sim));
    DSI_TRY(setup_state(sim));
    bool reused;
    DSI_TRY(dsi_sim_reprice(sim, &reused));
    if (reused)
        return DS_OK;
    DSI_TRY(dsi_graph_reset(&sim->g));
    sim->twice.active = dsi_twice_applies(sim);
    if (sim->twice.active) { /* iteration 2's nodes, evaluated as 1 and as 2 */
        DSI_TRY(dsi_twice_begin(sim));
        DSI_TRY(build_iteration(sim, 2));
        return dsi_twice_end(sim);
    }
    for (int it = 1; it <= 2; it++)
        DSI_TRY(build_iteration(sim, it));
    return DS_OK;
}
