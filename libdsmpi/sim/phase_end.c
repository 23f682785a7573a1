/*
 * Phases that close an iteration on every lane: the sequence-parallel norm
 * gradients (a TP all-reduce on the compute stream), the collectives of a
 * replica column (tied-embedding gradients, fp16 overflow check, gradient
 * norm) and the optimizer step.
 */
#include "dsi_phase.h"

/* ---- sequence-parallel norms -------------------------------------------------------------- */

static bool sp_norm_applies(const ds_sim_t *sim)
{
    return sim->ctx.sp;
}

static ds_status_t sp_norm_at_end(ds_sim_t *sim, int it)
{
    for (int32_t lane = 0; lane < sim->plan.num_lanes; lane++) {
        const dsi_profile_t *pr = &sim->profiles[sim->plan.lanes[lane].prof];
        int32_t x;
        DSI_TRY(dsi_lane_node(sim, lane, DSI_N_TP, it, pr->sp_dur, &x));
        sim->g.label[x] = DSI_L_SP_NORM;
        dsi_node_set_assumed(sim, x, pr->sp_assumed);
    }
    return DS_OK;
}

static ds_status_t sp_norm_reprice(ds_sim_t *sim, int32_t id, bool *ok_p)
{
    dsi_graph_t *g = &sim->g;
    *ok_p = g->kind[id] == DSI_N_TP && g->label[id] == DSI_L_SP_NORM;
    if (*ok_p) {
        const dsi_profile_t *pr = &sim->profiles[sim->plan.lanes[g->owner[id]].prof];
        g->dur[id] = pr->sp_dur;
        dsi_node_reset_assumed(g, id, pr->sp_assumed);
    }
    return DS_OK;
}

/* Lane nodes of sp_norm and optimizer: alike for lanes of one profile. */
static uint64_t profile_source(const ds_sim_t *sim, int32_t id)
{
    int32_t prof = sim->plan.lanes[sim->g.owner[id]].prof;
    return dsi_source_fits(prof, 32) ? 1u | (uint64_t)prof << 4 : 0;
}

const dsi_phase_t dsi_phase_sp_norm = {
    .name = "sequence-parallel norms",
    .applies = sp_norm_applies,
    .at_end = sp_norm_at_end,
    .reprice = sp_norm_reprice,
    .source = profile_source,
};

/* ---- replica-column collectives ----------------------------------------------------------- */

static ds_status_t column_collective(ds_sim_t *sim, int it, int32_t column, int64_t ns, int assumed,
                                     uint8_t label, bool ends_only)
{
    const ds_strategy_t *s = &sim->s;
    int32_t x;
    DSI_TRY(dsi_build_node(sim, DSI_N_COL, it, column, ns, &x));
    sim->g.label[x] = label;
    dsi_node_set_assumed(sim, x, assumed);
    for (int p = 0; p < s->pp; p++) {
        if (ends_only && p != 0 && p != s->pp - 1)
            continue;
        int32_t lane = sim->plan.columns[column].lane_first + p;
        dsi_lane_cursor_t *l = &sim->builder.cursors[lane];
        DSI_TRY(dsi_lane_edges_to(sim, l, x));
        l->pend[0] = x;
        l->npend = 1;
    }
    return DS_OK;
}

/* The slowest tensor-parallel member's all-reduce of the tied embedding's
 * gradients between the first and last stage of replica d. */
static ds_status_t embedding_cost(ds_sim_t *sim, int d, int64_t *ns_p, int *assumed_p)
{
    const ds_strategy_t *s = &sim->s;
    int64_t worst = 0;
    int any = 0;
    for (int t = 0; t < s->tp; t++) {
        ds_event_key_t key =
            dsi_comm_step_key(s, DS_COMM_ALLREDUCE, DS_GROUP_EMBEDDING, 2, DS_DTYPE_FP32,
                              dsi_embedding_grad_bytes(sim->model, s));
        dsi_key_set_layout(&key, &sim->plan.emb_lay[(size_t)d * s->tp + t]);
        int64_t ns;
        int assumed;
        DSI_TRY(dsi_sim_cost(sim, &key, 0.0, (double)key.dims[0], &ns, &assumed));
        worst = DSI_MAX(worst, ns);
        any |= assumed;
    }
    *ns_p = worst;
    *assumed_p = any;
    return DS_OK;
}

static bool columns_apply(const ds_sim_t *sim)
{
    (void)sim;
    return true; /* which collectives, if any, is decided per column */
}

/* The model-parallel group's all-reduce of one number (overflow, norm). */
static ds_status_t scalar_cost(ds_sim_t *sim, int d, int64_t *ns_p, int *assumed_p)
{
    const ds_strategy_t *s = &sim->s;
    int mp = s->tp * s->pp;
    ds_event_key_t key = dsi_comm_step_key(s, DS_COMM_ALLREDUCE, DS_GROUP_MP, mp, DS_DTYPE_FP32, 4);
    dsi_key_set_layout(&key, &sim->plan.mp_lay[d]);
    return dsi_sim_cost(sim, &key, 0.0, 4.0, ns_p, assumed_p);
}

static ds_status_t columns_at_end(ds_sim_t *sim, int it)
{
    const ds_strategy_t *s = &sim->s;
    int mp = s->tp * s->pp;
    for (int32_t c = 0; c < sim->plan.num_columns; c++) {
        int d = sim->plan.columns[c].d;
        if (dsi_has_tied_copy(&sim->info, s)) {
            int64_t ns;
            int assumed;
            DSI_TRY(embedding_cost(sim, d, &ns, &assumed));
            DSI_TRY(column_collective(sim, it, c, ns, assumed, DSI_L_EMBEDDING, true));
        }
        if (mp > 1 && (sim->ctx.dtype == DS_DTYPE_FP16 || s->grad_clip)) {
            int64_t ns;
            int assumed;
            DSI_TRY(scalar_cost(sim, d, &ns, &assumed));
            if (sim->ctx.dtype == DS_DTYPE_FP16)
                DSI_TRY(column_collective(sim, it, c, ns, assumed, DSI_L_OVERFLOW, false));
            if (s->grad_clip)
                DSI_TRY(column_collective(sim, it, c, ns, assumed, DSI_L_GRAD_NORM, false));
        }
    }
    return DS_OK;
}

static ds_status_t columns_reprice(ds_sim_t *sim, int32_t id, bool *ok_p)
{
    dsi_graph_t *g = &sim->g;
    uint8_t label = g->label[id];
    *ok_p = g->kind[id] == DSI_N_COL && g->owner[id] < sim->plan.num_columns &&
            (label == DSI_L_EMBEDDING || label == DSI_L_OVERFLOW || label == DSI_L_GRAD_NORM);
    if (!*ok_p)
        return DS_OK;
    int d = sim->plan.columns[g->owner[id]].d;
    int64_t ns;
    int assumed;
    if (label == DSI_L_EMBEDDING)
        DSI_TRY(embedding_cost(sim, d, &ns, &assumed));
    else
        DSI_TRY(scalar_cost(sim, d, &ns, &assumed));
    g->dur[id] = ns;
    dsi_node_reset_assumed(g, id, assumed);
    return DS_OK;
}

const dsi_phase_t dsi_phase_columns = {
    .name = "replica-column collectives",
    .applies = columns_apply,
    .at_end = columns_at_end,
    .reprice = columns_reprice,
};

/* ---- the optimizer step ------------------------------------------------------------------- */

static bool optimizer_applies(const ds_sim_t *sim)
{
    (void)sim;
    return true;
}

static ds_status_t optimizer_at_end(ds_sim_t *sim, int it)
{
    for (int32_t lane = 0; lane < sim->plan.num_lanes; lane++) {
        const dsi_lane_t *l = &sim->plan.lanes[lane];
        const dsi_profile_t *pr = &sim->profiles[l->prof];
        int32_t x;
        DSI_TRY(dsi_lane_node(sim, lane, DSI_N_OPT, it,
                              dsi_scaled(pr->opt_dur, pr->opt_dur, l->factor), &x));
        sim->g.comp[x] = sim->g.dur[x];
        dsi_node_set_assumed(sim, x, pr->opt_assumed);
        sim->builder.optimizer[lane] = x;
    }
    return DS_OK;
}

static ds_status_t optimizer_reprice(ds_sim_t *sim, int32_t id, bool *ok_p)
{
    dsi_graph_t *g = &sim->g;
    *ok_p = g->kind[id] == DSI_N_OPT;
    if (*ok_p) {
        const dsi_lane_t *l = &sim->plan.lanes[g->owner[id]];
        const dsi_profile_t *pr = &sim->profiles[l->prof];
        g->dur[id] = dsi_scaled(pr->opt_dur, pr->opt_dur, l->factor);
        g->comp[id] = g->dur[id];
        dsi_node_reset_assumed(g, id, pr->opt_assumed);
    }
    return DS_OK;
}

const dsi_phase_t dsi_phase_optimizer = {
    .name = "optimizer",
    .applies = optimizer_applies,
    .at_end = optimizer_at_end,
    .reprice = optimizer_reprice,
    .source = profile_source,
};
