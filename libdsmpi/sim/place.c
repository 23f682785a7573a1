/*
 * Placement classes: which data-parallel replicas (columns) and which
 * data-parallel group instances share a timeline, from the layouts every
 * group of the target has; and the lanes (tensor-parallel groups) of the
 * simulated columns.  Symmetric mode simulates one column per class, full
 * mode every replica.
 */
#include "dsi_phase.h"

#include <string.h>

/* ---- signatures ------------------------------------------------------------------------------ */

typedef struct sigbuf {
    int32_t *v;
    size_t len, cap;
} sigbuf_t;

static ds_status_t sig_push(sigbuf_t *b, int32_t value)
{
    if (b->len == b->cap) {
        size_t cap = b->cap ? 2 * b->cap : 256;
        DSI_TRY(dsi_realloc_array(&b->v, cap, sizeof(*b->v)));
        b->cap = cap;
    }
    b->v[b->len++] = value;
    return DS_OK;
}

static ds_status_t sig_layout(sigbuf_t *b, const dsi_layout_t *l)
{
    DSI_TRY(sig_push(b, l->ranks_per_node));
    DSI_TRY(sig_push(b, l->nodes));
    DSI_TRY(sig_push(b, dsi_layout_key_stride(l)));
    return sig_push(b, l->concurrency);
}

static ds_status_t alloc_layouts(ds_sim_t *sim)
{
    const ds_strategy_t *s = &sim->s;
    size_t lanes_all = (size_t)s->dp * s->pp;
    size_t pairs = lanes_all * (size_t)s->tp;
    DSI_TRY(dsi_realloc_array(&sim->plan.tp_lay, lanes_all, sizeof(*sim->plan.tp_lay)));
    DSI_TRY(dsi_realloc_array(&sim->plan.dp_lay, (size_t)s->tp * s->pp, sizeof(*sim->plan.dp_lay)));
    DSI_TRY(dsi_realloc_array(&sim->plan.fwd_lay, pairs, sizeof(*sim->plan.fwd_lay)));
    DSI_TRY(dsi_realloc_array(&sim->plan.bwd_lay, pairs, sizeof(*sim->plan.bwd_lay)));
    DSI_TRY(
        dsi_realloc_array(&sim->plan.emb_lay, (size_t)s->dp * s->tp, sizeof(*sim->plan.emb_lay)));
    DSI_TRY(dsi_realloc_array(&sim->plan.mp_lay, (size_t)s->dp, sizeof(*sim->plan.mp_lay)));
    return DS_OK;
}

/* Layouts of every group of the target: O(devices log) work. */
static ds_status_t compute_layouts(ds_sim_t *sim)
{
    const ds_strategy_t *s = &sim->s;
    dsi_placement_t *pl = &sim->place;
    DSI_TRY(alloc_layouts(sim));
    for (int p = 0; p < s->pp; p++) {
        for (int d = 0; d < s->dp; d++) {
            int n = dsi_group_members(pl, DSI_KIND_TP, p, d);
            sim->plan.tp_lay[(size_t)d * s->pp + p] = dsi_group_layout(pl, DSI_KIND_TP, n);
        }
        for (int t = 0; t < s->tp; t++) {
            int n = dsi_group_members(pl, DSI_KIND_DP, p, t);
            sim->plan.dp_lay[(size_t)p * s->tp + t] = dsi_group_layout(pl, DSI_KIND_DP, n);
        }
        int q = dsi_schedule_next_stage(s, p);
        if (q < 0)
            continue;
        for (int d = 0; d < s->dp; d++)
            for (int t = 0; t < s->tp; t++)
                sim->plan.fwd_lay[((size_t)p * s->dp + d) * s->tp + t] =
                    dsi_p2p_layout(pl, p, q, t, d);
        for (int d = 0; d < s->dp; d++)
            for (int t = 0; t < s->tp; t++)
                sim->plan.bwd_lay[((size_t)p * s->dp + d) * s->tp + t] =
                    dsi_p2p_layout(pl, q, p, t, d);
    }
    if (dsi_has_tied_copy(&sim->info, s)) {
        for (int d = 0; d < s->dp; d++)
            for (int t = 0; t < s->tp; t++) {
                int n = dsi_group_members(pl, DSI_KIND_EMBEDDING, 0, t + s->tp * d);
                sim->plan.emb_lay[(size_t)d * s->tp + t] =
                    dsi_group_layout(pl, DSI_KIND_EMBEDDING, n);
            }
    }
    if (s->tp * s->pp > 1) {
        for (int d = 0; d < s->dp; d++) {
            int n = dsi_group_members(pl, DSI_KIND_MP, 0, d);
            sim->plan.mp_lay[d] = dsi_group_layout(pl, DSI_KIND_MP, n);
        }
    }
    return DS_OK;
}

/* Signature of replica d: every layout its lanes, transfers and column
 * collectives see, and the speed factors of its devices. */
static ds_status_t column_signature(const ds_sim_t *sim, int d, sigbuf_t *b)
{
    const ds_strategy_t *s = &sim->s;
    b->len = 0;
    for (int p = 0; p < s->pp; p++) {
        DSI_TRY(sig_layout(b, &sim->plan.tp_lay[(size_t)d * s->pp + p]));
        if (dsi_schedule_next_stage(s, p) >= 0)
            for (int t = 0; t < s->tp; t++) {
                DSI_TRY(sig_layout(b, &sim->plan.fwd_lay[((size_t)p * s->dp + d) * s->tp + t]));
                DSI_TRY(sig_layout(b, &sim->plan.bwd_lay[((size_t)p * s->dp + d) * s->tp + t]));
            }
    }
    if (dsi_has_tied_copy(&sim->info, s))
        for (int t = 0; t < s->tp; t++)
            DSI_TRY(sig_layout(b, &sim->plan.emb_lay[(size_t)d * s->tp + t]));
    if (s->tp * s->pp > 1)
        DSI_TRY(sig_layout(b, &sim->plan.mp_lay[d]));
    return DS_OK;
}

static ds_status_t setup_classes(ds_sim_t *sim)
{
    const ds_strategy_t *s = &sim->s;
    bool full = sim->opt.mode == DS_SIM_FULL;
    ds_status_t status = DS_OK;
    DSI_TRY(compute_layouts(sim));
    DSI_TRY(dsi_realloc_array(&sim->plan.column_of, (size_t)s->dp, sizeof(*sim->plan.column_of)));
    DSI_TRY(dsi_realloc_array(&sim->plan.columns, (size_t)s->dp, sizeof(*sim->plan.columns)));
    sim->plan.num_columns = 0;
    /* Replica classes: equal signatures share a timeline. */
    sigbuf_t cur = {NULL, 0, 0}, reps = {NULL, 0, 0};
    size_t *rep_off = NULL;
    if (!full)
        DSI_TRY_GOTO(dsi_calloc((size_t)s->dp + 1, sizeof(*rep_off), &rep_off), status, out);
    for (int d = 0; d < s->dp; d++) {
        int32_t found = -1;
        if (!full) {
            DSI_TRY_GOTO(column_signature(sim, d, &cur), status, out);
            for (int32_t c = 0; c < sim->plan.num_columns && found < 0; c++) {
                size_t len = rep_off[c + 1] - rep_off[c];
                if (len == cur.len && memcmp(reps.v + rep_off[c], cur.v, len * sizeof(*cur.v)) == 0)
                    found = c;
            }
        }
        if (found < 0) {
            found = sim->plan.num_columns++;
            dsi_column_t *col = &sim->plan.columns[found];
            memset(col, 0, sizeof(*col));
            col->d = d;
            if (!full) {
                for (size_t i = 0; i < cur.len; i++)
                    DSI_TRY_GOTO(sig_push(&reps, cur.v[i]), status, out);
                rep_off[found + 1] = reps.len;
            }
        }
        sim->plan.column_of[d] = found;
        sim->plan.columns[found].represents++;
    }
out:
    dsi_free(cur.v);
    dsi_free(reps.v);
    dsi_free(rep_off);
    return status;
}

static ds_status_t setup_dp_groups(ds_sim_t *sim)
{
    const ds_strategy_t *s = &sim->s;
    bool full = sim->opt.mode == DS_SIM_FULL;
    size_t n = (size_t)s->tp * s->pp;
    DSI_TRY(dsi_realloc_array(&sim->plan.dp_of, n, sizeof(*sim->plan.dp_of)));
    DSI_TRY(dsi_realloc_array(&sim->plan.dpgroups, n, sizeof(*sim->plan.dpgroups)));
    DSI_TRY(dsi_realloc_array(&sim->plan.lane_dp, n, sizeof(*sim->plan.lane_dp)));
    sim->plan.num_dpgroups = 0;
    sim->plan.num_lane_dp = 0;
    for (int p = 0; p < s->pp; p++) {
        int32_t first = sim->plan.num_dpgroups;
        for (int t = 0; t < s->tp; t++) {
            const dsi_layout_t *l = &sim->plan.dp_lay[(size_t)p * s->tp + t];
            int32_t found = -1;
            for (int32_t g = first; g < sim->plan.num_dpgroups && found < 0 && !full; g++)
                if (dsi_layout_equal(&sim->plan.dpgroups[g].layout, l))
                    found = g;
            if (found < 0) {
                found = sim->plan.num_dpgroups++;
                dsi_dpgroup_t *g = &sim->plan.dpgroups[found];
                memset(g, 0, sizeof(*g));
                g->p = p;
                g->t = t;
                g->layout = *l;
            }
            sim->plan.dpgroups[found].count++;
            sim->plan.dp_of[(size_t)p * s->tp + t] = found;
        }
        for (int32_t g = first; g < sim->plan.num_dpgroups; g++)
            sim->plan.lane_dp[sim->plan.num_lane_dp++] = g;
    }
    return DS_OK;
}

/* In full mode, the lanes of replica d holding the slowest rank of an EP
 * group (expert-parallel coordinate 0 of the tp-major expert numbering) run
 * the slowest rank's expert work; symmetric mode prices every lane as the
 * mean rank waiting for it. */
static bool lane_holds_slowest_expert(const ds_sim_t *sim, int d)
{
    const ds_strategy_t *s = &sim->s;
    if (sim->opt.mode != DS_SIM_FULL || sim->ctx.ep <= 1)
        return false;
    for (int t = 0; t < s->tp; t++) {
        int64_t local = t + (int64_t)s->tp * d;
        if (local / sim->ctx.etp % sim->ctx.ep == 0)
            return true;
    }
    return false;
}

ds_status_t dsi_sim_setup_lanes(ds_sim_t *sim)
{
    const ds_strategy_t *s = &sim->s;
    size_t num = (size_t)sim->plan.num_columns * s->pp;
    DSI_TRY(dsi_realloc_array(&sim->plan.lanes, num, sizeof(*sim->plan.lanes)));
    DSI_TRY(dsi_realloc_array(&sim->plan.stage_lanes, num, sizeof(*sim->plan.stage_lanes)));
    sim->plan.num_lanes = (int32_t)num;
    /* DP instances of each stage: consecutive in lane_dp, in stage order. */
    int32_t stage_first = 0;
    for (int p = 0; p < s->pp; p++) {
        int32_t count = 0;
        while (stage_first + count < sim->plan.num_lane_dp &&
               sim->plan.dpgroups[sim->plan.lane_dp[stage_first + count]].p == p)
            count++;
        for (int32_t c = 0; c < sim->plan.num_columns; c++) {
            int32_t id = c * s->pp + p;
            dsi_lane_t *l = &sim->plan.lanes[id];
            memset(l, 0, sizeof(*l));
            l->d = sim->plan.columns[c].d;
            l->p = p;
            l->column = c;
            l->dp_first = stage_first;
            l->dp_count = count;
            int q = dsi_schedule_next_stage(s, p), r = dsi_schedule_prev_stage(s, p);
            l->next = q >= 0 ? c * s->pp + q : -1;
            l->prev = r >= 0 ? c * s->pp + r : -1;
            l->factor = 1.0;
            if (sim->device_factor != NULL)
                for (int t = 0; t < s->tp; t++) {
                    double f =
                        sim->device_factor[ds_strategy_rank_of(s, (ds_coords_t){t, l->d, p})];
                    if (t == 0 || f > l->factor)
                        l->factor = f;
                }
            DSI_TRY(dsi_sim_lane_profile_of(sim, p, &sim->plan.tp_lay[(size_t)l->d * s->pp + p],
                                            lane_holds_slowest_expert(sim, l->d), &l->prof));
            sim->plan.stage_lanes[(size_t)p * sim->plan.num_columns + c] = id;
        }
        for (int32_t c = 0; c < sim->plan.num_columns; c++)
            sim->plan.columns[c].lane_first = c * s->pp;
        stage_first += count;
    }
    return DS_OK;
}

/* Placement classes depend on the shape and placement only: a search that
 * varies micro-batches, schedules or ZeRO on one shape computes them once. */
#define SWAP(a, b)                                                                                 \
    do {                                                                                           \
        __typeof__(a) swap_tmp_ = (a);                                                             \
        (a) = (b);                                                                                 \
        (b) = swap_tmp_;                                                                           \
    } while (0)

/* Exchanges the plan's classes with kept ones (every array is sized by
 * whoever computes into it, so either side may be reused as storage). */
static void swap_classes(dsi_sim_plan_t *plan, dsi_place_classes_t *k)
{
    SWAP(plan->place_key, k->key);
    SWAP(plan->column_of, k->column_of);
    SWAP(plan->dp_of, k->dp_of);
    SWAP(plan->lane_dp, k->lane_dp);
    SWAP(plan->columns, k->columns);
    SWAP(plan->dpgroups, k->dpgroups);
    SWAP(plan->num_columns, k->num_columns);
    SWAP(plan->num_lane_dp, k->num_lane_dp);
    SWAP(plan->num_dpgroups, k->num_dpgroups);
    SWAP(plan->tp_lay, k->tp_lay);
    SWAP(plan->dp_lay, k->dp_lay);
    SWAP(plan->fwd_lay, k->fwd_lay);
    SWAP(plan->bwd_lay, k->bwd_lay);
    SWAP(plan->emb_lay, k->emb_lay);
    SWAP(plan->mp_lay, k->mp_lay);
}

/* A search interleaves shapes (candidates in bound order): the classes of
 * the last few keys are kept, and one found is swapped in; otherwise the
 * plan's current classes replace the least recently used kept ones and the
 * new ones are computed in their storage.  Returns whether `key` was found. */
static bool use_kept_classes(ds_sim_t *sim, const dsi_place_key_t *key)
{
    dsi_sim_plan_t *plan = &sim->plan;
    if ((int64_t)key->dp * key->tp * key->pp > DSI_PLACE_CACHE_DEVICES)
        return false;
    int victim = 0;
    for (int i = 0; i < DSI_PLACE_CACHE; i++) {
        dsi_place_classes_t *k = &plan->kept[i];
        if (k->key.valid && memcmp(&k->key, key, sizeof(*key)) == 0) {
            swap_classes(plan, k);
            k->used = ++plan->place_clock;
            return true;
        }
        if (k->used < plan->kept[victim].used)
            victim = i;
    }
    if (plan->place_key.valid) {
        swap_classes(plan, &plan->kept[victim]);
        plan->kept[victim].used = ++plan->place_clock;
    }
    return false;
}

ds_status_t dsi_sim_setup_placement(ds_sim_t *sim)
{
    const ds_strategy_t *s = &sim->s;
    dsi_place_key_t key;
    memset(&key, 0, sizeof(key));
    key.dp = s->dp;
    key.tp = s->tp;
    key.pp = s->pp;
    key.cp = sim->ctx.cp;
    key.gpus_per_node = sim->cluster.gpus_per_node;
    key.wrap = dsi_schedule_next_stage(s, s->pp - 1) >= 0;
    key.tied = dsi_has_tied_copy(&sim->info, s);
    key.full = sim->opt.mode == DS_SIM_FULL;
    key.valid = sim->device_factor == NULL;
    memcpy(key.order, s->order, sizeof(key.order));
    if (key.valid && memcmp(&key, &sim->plan.place_key, sizeof(key)) == 0) {
        return DS_OK;
    }
    if (key.valid && use_kept_classes(sim, &key))
        return DS_OK;
    sim->plan.place_key.valid = 0;
    DSI_TRY(setup_classes(sim));
    DSI_TRY(setup_dp_groups(sim));
    sim->plan.place_key = key;
    return DS_OK;
}
