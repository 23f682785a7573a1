/*
 * Graph generation: placement classes (which replicas and data-parallel
 * groups share a timeline), lanes (tensor-parallel groups) with their
 * schedule programs turned into layer nodes and point-to-point transfers,
 * gradient buckets and ZeRO traffic on data-parallel group streams, and the
 * iteration-end collectives.  Two iterations; the evaluation is engine.c's.
 */
#include "dsi_sim.h"

#include <stdlib.h>
#include <string.h>

/* ---- helpers ------------------------------------------------------------------------------- */

static int64_t scaled(int64_t dur, int64_t comp, double factor)
{
    if (factor == 1.0)
        return dur;
    return dsi_ns_add(dsi_ns((double)comp * factor * 1e-9), dur - comp);
}

int64_t dsi_sim_lane_rank(const ds_sim_t *sim, int32_t lane, int t)
{
    const dsi_lane_t *l = &sim->lanes[lane];
    return ds_strategy_rank_of(&sim->s, (ds_coords_t){t, l->d, l->p});
}

#define TRY(call)                                                                                  \
    do {                                                                                           \
        ds_status_t try_status_ = (call);                                                          \
        if (try_status_ != DS_OK)                                                                  \
            return try_status_;                                                                    \
    } while (0)

static ds_status_t node(ds_sim_t *sim, dsi_node_kind_t kind, int it, int32_t owner, int64_t dur,
                        int32_t *id_p)
{
    if (sim->g.n == sim->g.cap) /* growing says why it cannot: no memory, or too large */
        TRY(dsi_graph_grow_nodes(&sim->g));
    int32_t id = dsi_graph_add(&sim->g, kind, it, owner, dur);
    if (id < 0)
        return DS_ERR_NO_MEMORY;
    *id_p = id;
    return DS_OK;
}

/* ---- lane state: program order on the compute stream ---------------------------------------- */

/* The nodes the lane's next event waits for: the pending transfers and
 * collectives, or the last node. */
static ds_status_t lane_edges_to(ds_sim_t *sim, const dsi_lane_t *l, int32_t to)
{
    if (l->npend > 0) {
        for (int32_t i = 0; i < l->npend; i++)
            TRY(dsi_graph_edge(&sim->g, l->pend[i], to));
    } else if (l->last >= 0) {
        TRY(dsi_graph_edge(&sim->g, l->last, to));
    }
    return DS_OK;
}

/* A node on the lane's compute stream, after everything the lane waits for. */
static ds_status_t lane_node(ds_sim_t *sim, int32_t lane, dsi_node_kind_t kind, int it, int64_t dur,
                             int32_t *id_p)
{
    dsi_lane_t *l = &sim->lanes[lane];
    int32_t id;
    TRY(node(sim, kind, it, lane, dur, &id));
    TRY(lane_edges_to(sim, l, id));
    l->last = id;
    l->npend = 0;
    *id_p = id;
    return DS_OK;
}

/* One node standing for the lane's current state (joins pending nodes). */
static ds_status_t lane_state(ds_sim_t *sim, int32_t lane, int it, int32_t *id_p)
{
    dsi_lane_t *l = &sim->lanes[lane];
    if (l->npend == 0) {
        *id_p = l->last;
        return DS_OK;
    }
    if (l->npend == 1) {
        *id_p = l->pend[0];
        return DS_OK;
    }
    int32_t id;
    TRY(node(sim, DSI_N_JOIN, it, lane, 0, &id));
    TRY(lane_edges_to(sim, l, id));
    l->pend[0] = id;
    l->npend = 1;
    *id_p = id;
    return DS_OK;
}

/* The lane also waits for `other` before its next event. */
static ds_status_t lane_wait(ds_sim_t *sim, int32_t lane, int it, int32_t other)
{
    dsi_lane_t *l = &sim->lanes[lane];
    if (other < 0)
        return DS_OK;
    if (l->npend == 0 && l->last >= 0)
        l->pend[l->npend++] = l->last;
    if (l->npend == DSI_MAX_PENDING) {
        int32_t join;
        TRY(lane_state(sim, lane, it, &join));
    }
    l->pend[l->npend++] = other;
    return DS_OK;
}

/* ---- placement classes --------------------------------------------------------------------- */

typedef struct sigbuf {
    int32_t *v;
    size_t len, cap;
} sigbuf_t;

static ds_status_t sig_push(sigbuf_t *b, int32_t value)
{
    if (b->len == b->cap) {
        size_t cap = b->cap ? 2 * b->cap : 256;
        TRY(dsi_realloc_array(&b->v, cap, sizeof(*b->v)));
        b->cap = cap;
    }
    b->v[b->len++] = value;
    return DS_OK;
}

static ds_status_t sig_layout(sigbuf_t *b, const dsi_layout_t *l)
{
    TRY(sig_push(b, l->ranks_per_node));
    TRY(sig_push(b, l->nodes));
    TRY(sig_push(b, dsi_layout_key_stride(l)));
    return sig_push(b, l->concurrency);
}

static ds_status_t alloc_layouts(ds_sim_t *sim)
{
    const ds_strategy_t *s = &sim->s;
    size_t lanes_all = (size_t)s->dp * s->pp;
    size_t pairs = lanes_all * (size_t)s->tp;
    TRY(dsi_realloc_array(&sim->tp_lay, lanes_all, sizeof(*sim->tp_lay)));
    TRY(dsi_realloc_array(&sim->dp_lay, (size_t)s->tp * s->pp, sizeof(*sim->dp_lay)));
    TRY(dsi_realloc_array(&sim->fwd_lay, pairs, sizeof(*sim->fwd_lay)));
    TRY(dsi_realloc_array(&sim->bwd_lay, pairs, sizeof(*sim->bwd_lay)));
    TRY(dsi_realloc_array(&sim->emb_lay, (size_t)s->dp * s->tp, sizeof(*sim->emb_lay)));
    TRY(dsi_realloc_array(&sim->mp_lay, (size_t)s->dp, sizeof(*sim->mp_lay)));
    return DS_OK;
}

/* Layouts of every group of the target: O(devices log) work. */
static ds_status_t compute_layouts(ds_sim_t *sim)
{
    const ds_strategy_t *s = &sim->s;
    dsi_placement_t *pl = &sim->place;
    TRY(alloc_layouts(sim));
    for (int p = 0; p < s->pp; p++) {
        for (int d = 0; d < s->dp; d++) {
            int n = dsi_group_members(pl, DSI_KIND_TP, p, d);
            sim->tp_lay[(size_t)d * s->pp + p] = dsi_group_layout(pl, DSI_KIND_TP, n);
        }
        for (int t = 0; t < s->tp; t++) {
            int n = dsi_group_members(pl, DSI_KIND_DP, p, t);
            sim->dp_lay[(size_t)p * s->tp + t] = dsi_group_layout(pl, DSI_KIND_DP, n);
        }
        int q = dsi_schedule_next_stage(s, p);
        if (q < 0)
            continue;
        for (int d = 0; d < s->dp; d++)
            for (int t = 0; t < s->tp; t++)
                sim->fwd_lay[((size_t)p * s->dp + d) * s->tp + t] = dsi_p2p_layout(pl, p, q, t, d);
        for (int d = 0; d < s->dp; d++)
            for (int t = 0; t < s->tp; t++)
                sim->bwd_lay[((size_t)p * s->dp + d) * s->tp + t] = dsi_p2p_layout(pl, q, p, t, d);
    }
    if (dsi_has_tied_copy(&sim->info, s)) {
        for (int d = 0; d < s->dp; d++)
            for (int t = 0; t < s->tp; t++) {
                int n = dsi_group_members(pl, DSI_KIND_EMBEDDING, 0, t + s->tp * d);
                sim->emb_lay[(size_t)d * s->tp + t] = dsi_group_layout(pl, DSI_KIND_EMBEDDING, n);
            }
    }
    if (s->tp * s->pp > 1) {
        for (int d = 0; d < s->dp; d++) {
            int n = dsi_group_members(pl, DSI_KIND_MP, 0, d);
            sim->mp_lay[d] = dsi_group_layout(pl, DSI_KIND_MP, n);
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
        TRY(sig_layout(b, &sim->tp_lay[(size_t)d * s->pp + p]));
        if (dsi_schedule_next_stage(s, p) >= 0)
            for (int t = 0; t < s->tp; t++) {
                TRY(sig_layout(b, &sim->fwd_lay[((size_t)p * s->dp + d) * s->tp + t]));
                TRY(sig_layout(b, &sim->bwd_lay[((size_t)p * s->dp + d) * s->tp + t]));
            }
    }
    if (dsi_has_tied_copy(&sim->info, s))
        for (int t = 0; t < s->tp; t++)
            TRY(sig_layout(b, &sim->emb_lay[(size_t)d * s->tp + t]));
    if (s->tp * s->pp > 1)
        TRY(sig_layout(b, &sim->mp_lay[d]));
    return DS_OK;
}

static ds_status_t setup_classes(ds_sim_t *sim)
{
    const ds_strategy_t *s = &sim->s;
    bool full = sim->opt.mode == DS_SIM_FULL;
    ds_status_t status = DS_OK;
    TRY(compute_layouts(sim));
    TRY(dsi_realloc_array(&sim->column_of, (size_t)s->dp, sizeof(*sim->column_of)));
    TRY(dsi_realloc_array(&sim->columns, (size_t)s->dp, sizeof(*sim->columns)));
    sim->num_columns = 0;
    /* Replica classes: equal signatures share a timeline. */
    sigbuf_t cur = {NULL, 0, 0}, reps = {NULL, 0, 0};
    size_t *rep_off = NULL;
    if (!full)
        DSI_TRY_GOTO(dsi_calloc((size_t)s->dp + 1, sizeof(*rep_off), &rep_off), status, out);
    for (int d = 0; d < s->dp; d++) {
        int32_t found = -1;
        if (!full) {
            DSI_TRY_GOTO(column_signature(sim, d, &cur), status, out);
            for (int32_t c = 0; c < sim->num_columns && found < 0; c++) {
                size_t len = rep_off[c + 1] - rep_off[c];
                if (len == cur.len && memcmp(reps.v + rep_off[c], cur.v, len * sizeof(*cur.v)) == 0)
                    found = c;
            }
        }
        if (found < 0) {
            found = sim->num_columns++;
            dsi_column_t *col = &sim->columns[found];
            memset(col, 0, sizeof(*col));
            col->d = d;
            if (!full) {
                for (size_t i = 0; i < cur.len; i++)
                    DSI_TRY_GOTO(sig_push(&reps, cur.v[i]), status, out);
                rep_off[found + 1] = reps.len;
            }
        }
        sim->column_of[d] = found;
        sim->columns[found].represents++;
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
    TRY(dsi_realloc_array(&sim->dp_of, n, sizeof(*sim->dp_of)));
    TRY(dsi_realloc_array(&sim->dpgroups, n, sizeof(*sim->dpgroups)));
    TRY(dsi_realloc_array(&sim->lane_dp, n, sizeof(*sim->lane_dp)));
    sim->num_dpgroups = 0;
    sim->num_lane_dp = 0;
    for (int p = 0; p < s->pp; p++) {
        int32_t first = sim->num_dpgroups;
        for (int t = 0; t < s->tp; t++) {
            const dsi_layout_t *l = &sim->dp_lay[(size_t)p * s->tp + t];
            int32_t found = -1;
            for (int32_t g = first; g < sim->num_dpgroups && found < 0 && !full; g++)
                if (dsi_layout_equal(&sim->dpgroups[g].layout, l))
                    found = g;
            if (found < 0) {
                found = sim->num_dpgroups++;
                dsi_dpgroup_t *g = &sim->dpgroups[found];
                memset(g, 0, sizeof(*g));
                g->p = p;
                g->t = t;
                g->layout = *l;
                g->last = -1;
                memset(g->cost, 0xff, sizeof(g->cost));
            }
            sim->dpgroups[found].count++;
            sim->dp_of[(size_t)p * s->tp + t] = found;
        }
        for (int32_t g = first; g < sim->num_dpgroups; g++)
            sim->lane_dp[sim->num_lane_dp++] = g;
    }
    return DS_OK;
}

static ds_status_t setup_lanes(ds_sim_t *sim)
{
    const ds_strategy_t *s = &sim->s;
    size_t num = (size_t)sim->num_columns * s->pp;
    TRY(dsi_realloc_array(&sim->lanes, num, sizeof(*sim->lanes)));
    TRY(dsi_realloc_array(&sim->stage_lanes, num, sizeof(*sim->stage_lanes)));
    TRY(dsi_realloc_array(&sim->fwd_done_store, num * (size_t)s->vpp, 1));
    sim->num_lanes = (int32_t)num;
    /* DP instances of each stage: consecutive in lane_dp, in stage order. */
    int32_t stage_first = 0;
    for (int p = 0; p < s->pp; p++) {
        int32_t count = 0;
        while (stage_first + count < sim->num_lane_dp &&
               sim->dpgroups[sim->lane_dp[stage_first + count]].p == p)
            count++;
        for (int32_t c = 0; c < sim->num_columns; c++) {
            int32_t id = c * s->pp + p;
            dsi_lane_t *l = &sim->lanes[id];
            memset(l, 0, sizeof(*l));
            l->d = sim->columns[c].d;
            l->p = p;
            l->column = c;
            l->dp_first = stage_first;
            l->dp_count = count;
            int q = dsi_schedule_next_stage(s, p), r = dsi_schedule_prev_stage(s, p);
            l->next = q >= 0 ? c * s->pp + q : -1;
            l->prev = r >= 0 ? c * s->pp + r : -1;
            for (int i = 0; i < 4; i++)
                l->fwd_cost[i] = l->bwd_cost[i] = -1;
            l->factor = 1.0;
            if (sim->device_factor != NULL)
                for (int t = 0; t < s->tp; t++) {
                    double f =
                        sim->device_factor[ds_strategy_rank_of(s, (ds_coords_t){t, l->d, p})];
                    if (t == 0 || f > l->factor)
                        l->factor = f;
                }
            l->first_fwd_done = sim->fwd_done_store + (size_t)id * s->vpp;
            TRY(dsi_sim_profile_of(sim, p, &sim->tp_lay[(size_t)l->d * s->pp + p], &l->prof));
            sim->stage_lanes[(size_t)p * sim->num_columns + c] = id;
        }
        for (int32_t c = 0; c < sim->num_columns; c++)
            sim->columns[c].lane_first = c * s->pp;
        stage_first += count;
    }
    return DS_OK;
}

/* ---- costs of transfers and group collectives ------------------------------------------------ */

/* Cost of the channel `ch` (0 forward, 1 backward) that lane `sender`
 * sends on, with Megatron's batching flag of one side: the slowest pair
 * over the tensor-parallel members. */
/* How a side sees a transfer: its key's flag (batched), plus 2 when the
 * side's call moves two transfers the same way at once (interleaved 1F1B's
 * steady state sends to both neighbours and receives from both): started
 * together they share the device's link and NIC, so each takes twice as
 * long as alone (the sizes pipelines send are bandwidth-bound). */
static uint8_t transfer_view(int flag, int same_way)
{
    return (uint8_t)(flag + (same_way >= 2 ? 2 : 0));
}

/* The time of one transfer on channel `ch` of lane `sender`, seen as `view`. */
static ds_status_t channel_cost(ds_sim_t *sim, int32_t sender, int ch, int view, int64_t *ns_p,
                                int *assumed_p)
{
    dsi_lane_t *l = &sim->lanes[sender];
    int index = view, flag = view & 1;
    int64_t *cache = ch == 0 ? &l->fwd_cost[index] : &l->bwd_cost[index];
    uint8_t *assumed_cache = ch == 0 ? &l->fwd_assumed[index] : &l->bwd_assumed[index];
    if (*cache < 0) {
        const ds_strategy_t *s = &sim->s;
        int64_t worst = 0;
        int any = 0;
        /* Forward: sender stage p -> next; backward: sender p -> prev, whose
         * forward boundary is prev -> p. */
        int from_stage = ch == 0 ? l->p : dsi_schedule_prev_stage(s, l->p);
        int into = ch == 0 ? dsi_schedule_next_stage(s, l->p) : l->p;
        const dsi_layout_t *lay = ch == 0 ? sim->fwd_lay : sim->bwd_lay;
        int64_t bytes = dsi_p2p_boundary_bytes(sim->model, s, sim->ctx.dtype, into);
        for (int t = 0; t < s->tp; t++) {
            const dsi_layout_t *pair = &lay[((size_t)from_stage * s->dp + l->d) * s->tp + t];
            if (t > 0 && dsi_layout_equal(pair, pair - 1))
                continue; /* same key as the previous member's */
            ds_event_key_t key = dsi_p2p_key(ch == 0 ? DS_PASS_FORWARD : DS_PASS_BACKWARD,
                                             sim->ctx.dtype, bytes, pair, flag);
            int64_t ns;
            int assumed;
            TRY(dsi_sim_cost(sim, &key, 0.0, (double)bytes, &ns, &assumed));
            worst = DSI_MAX(worst, ns);
            any |= assumed;
        }
        /* Two at once: bandwidth-bound, both end when twice the bytes would. */
        *cache = index >= 2 ? dsi_ns_add(worst, worst) : worst;
        *assumed_cache = (uint8_t)any;
    }
    *ns_p = *cache;
    *assumed_p = *assumed_cache;
    return DS_OK;
}

static ds_status_t dp_cost(ds_sim_t *sim, int32_t group, ds_comm_op_t op, ds_dtype_t dtype,
                           int64_t params, int64_t *ns_p, int *assumed_p)
{
    const ds_strategy_t *s = &sim->s;
    int64_t bytes = params * (int64_t)ds_dtype_size(dtype);
    ds_event_key_t key = dsi_comm_step_key(s, op, DS_GROUP_DP, s->dp, dtype, bytes);
    dsi_key_set_layout(&key, &sim->dpgroups[group].layout);
    return dsi_sim_cost(sim, &key, 0.0, (double)bytes, ns_p, assumed_p);
}

static int64_t bucket_size(const ds_sim_t *sim, int p, int64_t k);

/* Cost of bucket k's gradient (which 0) or parameter (1) collective:
 * every bucket but the last has the full size. */
static ds_status_t bucket_cost(ds_sim_t *sim, int32_t group, int which, ds_comm_op_t op,
                               ds_dtype_t dtype, int64_t k, int64_t *ns_p, int *assumed_p)
{
    dsi_dpgroup_t *grp = &sim->dpgroups[group];
    int last = k == sim->num_buckets[grp->p] - 1;
    if (grp->cost[which][last] < 0) {
        int assumed;
        TRY(dp_cost(sim, group, op, dtype, bucket_size(sim, grp->p, k), &grp->cost[which][last],
                    &assumed));
        grp->cost_assumed[which][last] = (uint8_t)assumed;
    }
    *ns_p = grp->cost[which][last];
    *assumed_p = grp->cost_assumed[which][last];
    return DS_OK;
}

static void set_assumed(ds_sim_t *sim, int32_t id, int assumed)
{
    if (assumed)
        sim->g.flags[id] |= DSI_NODE_ASSUMED;
}

/* ---- layer nodes of one forward or backward pass ------------------------------------------- */

typedef struct pass_ctx {
    int it;
    int32_t lane;
    const dsi_action_t *a;
    bool fwd;
    int round;
} pass_ctx_t;

static ds_status_t layer_node(ds_sim_t *sim, const pass_ctx_t *pc, int64_t dur, int64_t comp,
                              int64_t wait, int assumed, int part0, int nparts, int op0, int op1,
                              int32_t *id_p)
{
    const dsi_lane_t *l = &sim->lanes[pc->lane];
    int32_t id;
    TRY(lane_node(sim, pc->lane, pc->fwd ? DSI_N_FWD : DSI_N_BWD, pc->it,
                  scaled(dur, comp, l->factor), &id));
    dsi_graph_t *g = &sim->g;
    g->comp[id] = scaled(comp, comp, l->factor);
    g->wait[id] = wait;
    g->mb[id] = pc->a->mb;
    g->chunk[id] = pc->a->chunk;
    g->part0[id] = (int16_t)part0;
    g->nparts[id] = (int16_t)nparts;
    g->op0[id] = (int16_t)op0;
    g->op1[id] = (int16_t)op1;
    set_assumed(sim, id, assumed);
    *id_p = id;
    return DS_OK;
}

/* What bucket k of a lane's stage, issued to overlap the backward, costs
 * the lane's compute stream: its DS_COMM_FLAG_OVERLAPPED key's measured
 * cost (the worst over the lane's data-parallel groups), 0 when none is
 * in the table. */
static int64_t interference_ns(const ds_sim_t *sim, int32_t lane, int64_t k)
{
    const ds_strategy_t *s = &sim->s;
    if (!sim->opt.overlap_interference || sim->costs == NULL)
        return 0;
    ds_comm_op_t op = s->dp_algo == DS_DP_PS ? DS_COMM_PS_PUSH
                      : s->zero == 0         ? DS_COMM_ALLREDUCE
                                             : DS_COMM_REDUCE_SCATTER;
    const dsi_lane_t *l = &sim->lanes[lane];
    int64_t bytes = bucket_size(sim, l->p, k) * (int64_t)ds_dtype_size(s->grad_reduce_dtype);
    int64_t worst = 0;
    for (int32_t i = 0; i < l->dp_count; i++) {
        ds_event_key_t key =
            dsi_comm_step_key(s, op, DS_GROUP_DP, s->dp, s->grad_reduce_dtype, bytes);
        dsi_key_set_layout(&key, &sim->dpgroups[sim->lane_dp[l->dp_first + i]].layout);
        key.flags |= DS_COMM_FLAG_OVERLAPPED;
        const ds_cost_t *cost = ds_cost_table_find(sim->costs, &key);
        if (cost != NULL)
            worst = DSI_MAX(worst, dsi_ns(cost->mean_s));
    }
    return worst;
}

/* A backward part whose gradients complete buckets: split it after each
 * operator that completes one, recording where each bucket is ready; the
 * buckets' interference follows on the compute stream. */
static ds_status_t sync_part(ds_sim_t *sim, const pass_ctx_t *pc, int32_t part, int index,
                             int stage_buckets)
{
    const dsi_template_t *t = &sim->templates[sim->part_tb[part]];
    int64_t rev = sim->part_rev[part], params = sim->part_params[part];
    int64_t B = sim->bucket, P = sim->stage_params[sim->lanes[pc->lane].p];
    int32_t *ready = sim->ready + ((size_t)pc->lane * sim->rounds + pc->round) * sim->max_buckets;
    int64_t cum = 0, seg_dur = 0, seg_comp = 0, seg_wait = 0;
    int seg_assumed = 0, seg_first = 0;
    /* Next bucket to complete inside this part. */
    int64_t k = rev / B;
    for (int32_t i = 0; i < t->op_count; i++) {
        int32_t o = t->op_first + i;
        seg_dur = dsi_ns_add(seg_dur, sim->op_dur[o]);
        seg_wait = dsi_ns_add(seg_wait, sim->op_wait[o]);
        if (!sim->op_comm[o])
            seg_comp = dsi_ns_add(seg_comp, sim->op_dur[o]);
        seg_assumed |= sim->op_assumed[o];
        cum = DSI_MIN(cum + sim->op_grad[o], params);
        if (i == t->op_count - 1)
            cum = params;
        int64_t pos = rev + cum;
        bool completes = false;
        while (k < stage_buckets && DSI_MIN((k + 1) * B, P) <= pos && params > 0) {
            completes = true;
            k++;
        }
        if (!completes && i != t->op_count - 1)
            continue;
        int32_t id;
        bool whole = seg_first == 0 && i == t->op_count - 1;
        TRY(layer_node(sim, pc, seg_dur, seg_comp, seg_wait, seg_assumed, index, 1,
                       whole ? 0 : seg_first, whole ? 0 : i + 1, &id));
        int64_t interference = 0;
        for (int64_t b = rev / B; b < k; b++)
            if (ready[b] < 0 && DSI_MIN((b + 1) * B, P) <= pos) {
                ready[b] = id;
                interference += interference_ns(sim, pc->lane, b);
            }
        if (interference > 0) {
            int32_t x;
            TRY(lane_node(sim, pc->lane, DSI_N_BWD, pc->it, interference, &x));
            sim->g.mb[x] = pc->a->mb;
            sim->g.chunk[x] = pc->a->chunk;
            sim->g.part0[x] = (int16_t)index;
            sim->g.label[x] = DSI_L_GRAD_ALLREDUCE; /* communication on the compute stream */
        }
        seg_first = i + 1;
        seg_dur = seg_comp = seg_wait = 0;
        seg_assumed = 0;
    }
    return DS_OK;
}

/* The DP instances' all-gather node of the bucket that holds the start of
 * `part` in reverse order (the last one of its buckets to be gathered). */
static ds_status_t param_gather_waits(ds_sim_t *sim, const pass_ctx_t *pc, int32_t part, int32_t id)
{
    const dsi_lane_t *l = &sim->lanes[pc->lane];
    if (sim->part_params[part] == 0)
        return DS_OK;
    int64_t k = sim->part_rev[part] / sim->bucket;
    for (int32_t i = 0; i < l->dp_count; i++) {
        int32_t g = sim->lane_dp[l->dp_first + i];
        int32_t gather = sim->gather[(size_t)g * sim->max_buckets + k];
        if (gather >= 0)
            TRY(dsi_graph_edge(&sim->g, gather, id));
    }
    return DS_OK;
}

static ds_status_t build_pass(ds_sim_t *sim, int it, int32_t lane, const dsi_action_t *a)
{
    dsi_lane_t *l = &sim->lanes[lane];
    const dsi_profile_t *pr = &sim->profiles[l->prof];
    const ds_strategy_t *s = &sim->s;
    bool fwd = a->type == DSI_ACT_FWD;
    int c = a->chunk;
    pass_ctx_t pc = {it, lane, a, fwd, 0};
    int32_t pfirst = pr->part_first[c], pcount = pr->part_first[c + 1] - pfirst;
    bool zero3 = s->zero == 3 && s->dp > 1;
    bool gather_wait = fwd && !l->first_fwd_done[c] && it > 1 && (s->zero == 1 || s->zero == 2) &&
                       s->dp > 1 && s->overlap_grad_reduce;
    if (fwd)
        l->first_fwd_done[c] = 1;
    bool sync = !fwd && a->sync;
    if (!fwd) {
        pc.round = s->zero == 2 ? l->nbwd : 0;
        l->nbwd++;
    }
    int32_t first_node = -1, id = -1;
    if (zero3) {
        int32_t pre;
        TRY(lane_state(sim, lane, it, &pre));
        sim->zpre[lane] = pre;
    }
    if (!zero3 && !gather_wait && !sync && sim->opt.granularity == DS_SIM_STAGE) {
        int pass = fwd ? 0 : 1;
        int64_t dur = pr->fused_dur[c * 2 + pass], comp = pr->fused_comp[c * 2 + pass];
        int64_t wait = pr->fused_wait[c * 2 + pass];
        if (l->factor != 1.0) {
            /* Scale part by part, as the layer-level nodes are. */
            int64_t total = 0, total_comp = 0;
            for (int32_t j = 0; j < pcount; j++) {
                const dsi_template_t *t =
                    &sim->templates[fwd ? sim->part_tf[pfirst + j] : sim->part_tb[pfirst + j]];
                total = dsi_ns_add(total, scaled(t->dur, t->comp, l->factor));
                total_comp = dsi_ns_add(total_comp, scaled(t->comp, t->comp, l->factor));
            }
            dur = total;
            comp = total_comp;
            TRY(lane_node(sim, lane, fwd ? DSI_N_FWD : DSI_N_BWD, it, dur, &id));
            dsi_graph_t *g = &sim->g;
            g->comp[id] = comp;
            g->wait[id] = wait;
            g->mb[id] = a->mb;
            g->chunk[id] = (int16_t)c;
            g->part0[id] = 0;
            g->nparts[id] = (int16_t)pcount;
            set_assumed(sim, id, pr->fused_assumed[c * 2 + pass]);
        } else {
            TRY(layer_node(sim, &pc, dur, comp, wait, pr->fused_assumed[c * 2 + pass], 0, pcount, 0,
                           0, &id));
        }
        first_node = id;
    } else {
        int stage_buckets = sim->num_buckets[l->p];
        for (int32_t j = 0; j < pcount; j++) {
            int index = fwd ? j : pcount - 1 - j;
            int32_t part = pfirst + index;
            const dsi_template_t *t =
                &sim->templates[fwd ? sim->part_tf[part] : sim->part_tb[part]];
            int32_t before = sim->g.n;
            if (sync) {
                TRY(sync_part(sim, &pc, part, index, stage_buckets));
            } else {
                TRY(layer_node(sim, &pc, t->dur, t->comp, t->wait, t->assumed, index, 1, 0, 0,
                               &id));
            }
            id = sim->lanes[lane].last;
            if (first_node < 0)
                first_node = before;
            if (gather_wait)
                TRY(param_gather_waits(sim, &pc, part, before));
            if (zero3)
                sim->zparts[(size_t)lane * sim->zparts_stride + j] = id;
        }
    }
    /* Forward/backward start and end of replica 0, reported iteration. */
    if (it == 2 && l->column == sim->column_of[0] && sim->mb_nodes != NULL) {
        size_t slot =
            (((size_t)l->p * s->vpp + c) * (size_t)sim->m + (size_t)a->mb) * 4 + (fwd ? 0 : 2);
        sim->mb_nodes[slot] = first_node;
        sim->mb_nodes[slot + 1] = sim->lanes[lane].last;
    }
    /* Without overlap, buckets are ready when the round's backward ends. */
    return DS_OK;
}

/* ---- point-to-point ------------------------------------------------------------------------ */

static ds_status_t build_comm(ds_sim_t *sim, int it, int32_t lane, const dsi_action_t *a)
{
    dsi_lane_t *l = &sim->lanes[lane];
    int32_t pend[4];
    int npend = 0, sends = 0;
    for (int i = 0; i < a->nx; i++)
        sends += a->x[i] == DSI_SEND_NEXT || a->x[i] == DSI_SEND_PREV;
    for (int i = 0; i < a->nx; i++) {
        dsi_dir_t dir = (dsi_dir_t)a->x[i];
        int32_t chan_lane = dir == DSI_SEND_NEXT || dir == DSI_SEND_PREV ? lane
                            : dir == DSI_RECV_PREV                       ? l->prev
                                                                         : l->next;
        int ch = dir == DSI_SEND_NEXT || dir == DSI_RECV_PREV ? 0 : 1;
        bool sending = dir == DSI_SEND_NEXT || dir == DSI_SEND_PREV;
        uint8_t view = transfer_view(a->batched, sending ? sends : a->nx - sends);
        if (chan_lane < 0)
            return DSI_ERROR(DS_ERR_INTERNAL,
                             "stage %d posts a transfer to a stage that does not exist", l->p);
        int32_t seq = l->seq[dir]++;
        if (seq >= sim->xfer_per_lane)
            return DSI_ERROR(DS_ERR_INTERNAL, "stage %d posts more transfers than the schedule has",
                             l->p);
        size_t slot = ((size_t)chan_lane * 2 + ch) * sim->xfer_per_lane + seq;
        int32_t x = sim->xfer[slot];
        if (x < 0) {
            TRY(node(sim, DSI_N_XFER, it, chan_lane, 0, &x));
            sim->g.mb[x] = seq;
            sim->g.chunk[x] = (int16_t)ch;
            sim->xfer[slot] = x;
            sim->xfer_sides[slot] = 1;
            sim->xfer_flag[slot] = view;
        } else {
            sim->xfer_sides[slot]++;
            int64_t c1, c2;
            int a1, a2;
            TRY(channel_cost(sim, chan_lane, ch, sim->xfer_flag[slot], &c1, &a1));
            TRY(channel_cost(sim, chan_lane, ch, view, &c2, &a2));
            sim->g.dur[x] = DSI_MAX(c1, c2);
            set_assumed(sim, x, a1 | a2);
        }
        TRY(lane_edges_to(sim, l, x));
        pend[npend++] = x;
    }
    l->npend = npend;
    memcpy(l->pend, pend, (size_t)npend * sizeof(*pend));
    return DS_OK;
}

/* ---- data-parallel groups ------------------------------------------------------------------ */

static int64_t bucket_size(const ds_sim_t *sim, int p, int64_t k)
{
    int64_t P = sim->stage_params[p], B = sim->bucket;
    return DSI_MIN(B, P - k * B);
}

/* Gradient reduction of round `round` on every DP instance: buckets in
 * order on the group's stream, each after its readiness on every member
 * lane.  `lanes_wait`: the lanes block until their groups finished. */
static ds_status_t build_grad_sync(ds_sim_t *sim, int it, int round, bool lanes_wait)
{
    const ds_strategy_t *s = &sim->s;
    ds_comm_op_t op = s->dp_algo == DS_DP_PS ? DS_COMM_PS_PUSH
                      : s->zero == 0         ? DS_COMM_ALLREDUCE
                                             : DS_COMM_REDUCE_SCATTER;
    uint8_t label = s->dp_algo == DS_DP_PS ? DSI_L_PS_PUSH
                    : s->zero == 0         ? DSI_L_GRAD_ALLREDUCE
                                           : DSI_L_GRAD_RS;
    bool overlap = s->overlap_grad_reduce;
    for (int32_t g = 0; g < sim->num_dpgroups; g++) {
        dsi_dpgroup_t *grp = &sim->dpgroups[g];
        int p = grp->p;
        for (int64_t k = 0; k < sim->num_buckets[p]; k++) {
            int64_t ns;
            int assumed;
            TRY(bucket_cost(sim, g, 0, op, s->grad_reduce_dtype, k, &ns, &assumed));
            int32_t x;
            TRY(node(sim, DSI_N_DP, it, g, ns, &x));
            sim->g.mb[x] = (int32_t)k;
            sim->g.chunk[x] = (int16_t)round;
            sim->g.label[x] = label;
            set_assumed(sim, x, assumed);
            if (grp->last >= 0)
                TRY(dsi_graph_edge(&sim->g, grp->last, x));
            grp->last = x;
            for (int32_t c = 0; c < sim->num_columns; c++) {
                int32_t lane = sim->stage_lanes[(size_t)p * sim->num_columns + c];
                int32_t r;
                if (overlap)
                    r = sim->ready[((size_t)lane * sim->rounds + round) * sim->max_buckets + k];
                else
                    r = sim->round_end[(size_t)lane * sim->rounds + round];
                if (r < 0)
                    return DSI_ERROR(DS_ERR_INTERNAL, "bucket %lld of stage %d never became ready",
                                     (long long)k, p);
                TRY(dsi_graph_edge(&sim->g, r, x));
            }
        }
    }
    if (lanes_wait)
        for (int32_t lane = 0; lane < sim->num_lanes; lane++) {
            const dsi_lane_t *l = &sim->lanes[lane];
            for (int32_t i = 0; i < l->dp_count; i++)
                TRY(lane_wait(sim, lane, it, sim->dpgroups[sim->lane_dp[l->dp_first + i]].last));
        }
    return DS_OK;
}

/* Parameter all-gather (ZeRO-1/2) or pull (parameter server) after the
 * optimizer: buckets in forward order (the last bucket first). */
static ds_status_t build_param_sync(ds_sim_t *sim, int it, const int32_t *optimizer)
{
    const ds_strategy_t *s = &sim->s;
    bool ps = s->dp_algo == DS_DP_PS;
    ds_comm_op_t op = ps ? DS_COMM_PS_PULL : DS_COMM_ALLGATHER;
    for (int32_t g = 0; g < sim->num_dpgroups; g++) {
        dsi_dpgroup_t *grp = &sim->dpgroups[g];
        int p = grp->p;
        for (int64_t k = sim->num_buckets[p] - 1; k >= 0; k--) {
            int64_t ns;
            int assumed;
            TRY(bucket_cost(sim, g, 1, op, sim->ctx.dtype, k, &ns, &assumed));
            int32_t x;
            TRY(node(sim, DSI_N_DP, it, g, ns, &x));
            sim->g.mb[x] = (int32_t)k;
            sim->g.label[x] = ps ? DSI_L_PS_PULL : DSI_L_PARAM_AG;
            set_assumed(sim, x, assumed);
            if (grp->last >= 0)
                TRY(dsi_graph_edge(&sim->g, grp->last, x));
            if (k == sim->num_buckets[p] - 1)
                for (int32_t c = 0; c < sim->num_columns; c++)
                    TRY(dsi_graph_edge(
                        &sim->g, optimizer[sim->stage_lanes[(size_t)p * sim->num_columns + c]], x));
            grp->last = x;
            sim->gather[(size_t)g * sim->max_buckets + k] = x;
        }
    }
    bool wait = ps || !s->overlap_grad_reduce;
    if (wait)
        for (int32_t lane = 0; lane < sim->num_lanes; lane++) {
            const dsi_lane_t *l = &sim->lanes[lane];
            for (int32_t i = 0; i < l->dp_count; i++)
                TRY(lane_wait(sim, lane, it, sim->dpgroups[sim->lane_dp[l->dp_first + i]].last));
        }
    return DS_OK;
}

/* ZeRO-3 after action `a` of every lane (pp = 1): parameter gathers before
 * each part (prefetched `depth` parts ahead) and gradient reduce-scatters
 * after each backward part, on every DP instance's stream. */
static ds_status_t build_zero3_action(ds_sim_t *sim, int it, const dsi_action_t *a)
{
    const ds_strategy_t *s = &sim->s;
    bool fwd = a->type == DSI_ACT_FWD;
    int depth = (int)dsi_param_int(DSI_PARAM_SIM_ZERO3_PREFETCH);
    for (int32_t g = 0; g < sim->num_dpgroups; g++) {
        dsi_dpgroup_t *grp = &sim->dpgroups[g];
        /* All lanes share the profile's parts (pp = 1, vpp = 1). */
        const dsi_profile_t *pr = &sim->profiles[sim->lanes[0].prof];
        int32_t pfirst = pr->part_first[0], n = pr->part_first[1] - pfirst;
        /* Issue order: gathers of parts 0..depth, then per part x: (RS x), gather x+depth+1. */
        for (int step = -1; step < n; step++) {
            for (int kind = 0; kind < 2; kind++) {
                int j; /* part position in pass order */
                bool gather;
                if (step < 0) {
                    if (kind == 1)
                        continue;
                    for (j = 0; j <= depth && j < n; j++) {
                        int32_t part = pfirst + (fwd ? j : n - 1 - j);
                        if (sim->part_params[part] == 0)
                            continue;
                        int64_t ns;
                        int assumed;
                        TRY(dp_cost(sim, g, DS_COMM_ALLGATHER, sim->ctx.dtype,
                                    sim->part_params[part], &ns, &assumed));
                        int32_t x;
                        TRY(node(sim, DSI_N_DP, it, g, ns, &x));
                        sim->g.mb[x] = (int32_t)(part - pfirst);
                        sim->g.label[x] = DSI_L_Z3_GATHER;
                        set_assumed(sim, x, assumed);
                        if (grp->last >= 0)
                            TRY(dsi_graph_edge(&sim->g, grp->last, x));
                        grp->last = x;
                        for (int32_t lane = 0; lane < sim->num_lanes; lane++) {
                            TRY(dsi_graph_edge(&sim->g, sim->zpre[lane], x));
                            TRY(dsi_graph_edge(&sim->g, x,
                                               sim->zparts[(size_t)lane * sim->zparts_stride + j]));
                        }
                    }
                    continue;
                }
                gather = kind == 1;
                if (!gather && fwd)
                    continue;
                j = gather ? step + depth + 1 : step;
                if (j >= n)
                    continue;
                int32_t part = pfirst + (fwd ? j : n - 1 - j);
                if (sim->part_params[part] == 0)
                    continue;
                int64_t ns;
                int assumed;
                if (gather)
                    TRY(dp_cost(sim, g, DS_COMM_ALLGATHER, sim->ctx.dtype, sim->part_params[part],
                                &ns, &assumed));
                else
                    TRY(dp_cost(sim, g, DS_COMM_REDUCE_SCATTER, s->grad_reduce_dtype,
                                sim->part_params[part], &ns, &assumed));
                int32_t x;
                TRY(node(sim, DSI_N_DP, it, g, ns, &x));
                sim->g.mb[x] = (int32_t)(part - pfirst);
                sim->g.label[x] = gather ? DSI_L_Z3_GATHER : DSI_L_Z3_RS;
                set_assumed(sim, x, assumed);
                if (grp->last >= 0)
                    TRY(dsi_graph_edge(&sim->g, grp->last, x));
                grp->last = x;
                for (int32_t lane = 0; lane < sim->num_lanes; lane++) {
                    /* Issued when part `step` ends (its backward for a reduce-scatter). */
                    TRY(dsi_graph_edge(&sim->g,
                                       sim->zparts[(size_t)lane * sim->zparts_stride + step], x));
                    if (gather)
                        TRY(dsi_graph_edge(&sim->g, x,
                                           sim->zparts[(size_t)lane * sim->zparts_stride + j]));
                }
            }
        }
    }
    return DS_OK;
}

/* ---- the iteration end ----------------------------------------------------------------------- */

static ds_status_t column_collective(ds_sim_t *sim, int it, int32_t column, int64_t ns, int assumed,
                                     uint8_t label, bool ends_only)
{
    const ds_strategy_t *s = &sim->s;
    int32_t x;
    TRY(node(sim, DSI_N_COL, it, column, ns, &x));
    sim->g.label[x] = label;
    set_assumed(sim, x, assumed);
    for (int p = 0; p < s->pp; p++) {
        if (ends_only && p != 0 && p != s->pp - 1)
            continue;
        int32_t lane = sim->columns[column].lane_first + p;
        dsi_lane_t *l = &sim->lanes[lane];
        TRY(lane_edges_to(sim, l, x));
        l->pend[0] = x;
        l->npend = 1;
    }
    return DS_OK;
}

static ds_status_t build_iteration_end(ds_sim_t *sim, int it)
{
    const ds_strategy_t *s = &sim->s;
    bool has_dp = s->dp > 1;
    if (has_dp && (s->zero <= 1 || s->dp_algo == DS_DP_PS)) {
        if (!s->overlap_grad_reduce)
            for (int32_t lane = 0; lane < sim->num_lanes; lane++) {
                int32_t end;
                TRY(lane_state(sim, lane, it, &end));
                sim->round_end[(size_t)lane * sim->rounds] = end;
            }
        TRY(build_grad_sync(sim, it, 0, true));
    } else if (has_dp) {
        /* ZeRO-2 and 3: wait for the group streams. */
        for (int32_t lane = 0; lane < sim->num_lanes; lane++) {
            const dsi_lane_t *l = &sim->lanes[lane];
            for (int32_t i = 0; i < l->dp_count; i++)
                TRY(lane_wait(sim, lane, it, sim->dpgroups[sim->lane_dp[l->dp_first + i]].last));
        }
    }
    /* Sequence-parallel norm gradients over TP. */
    if (sim->ctx.sp)
        for (int32_t lane = 0; lane < sim->num_lanes; lane++) {
            const dsi_profile_t *pr = &sim->profiles[sim->lanes[lane].prof];
            int32_t x;
            TRY(lane_node(sim, lane, DSI_N_TP, it, pr->sp_dur, &x));
            sim->g.label[x] = DSI_L_SP_NORM;
            set_assumed(sim, x, pr->sp_assumed);
        }
    int mp = s->tp * s->pp;
    for (int32_t c = 0; c < sim->num_columns; c++) {
        int d = sim->columns[c].d;
        if (dsi_has_tied_copy(&sim->info, s)) {
            int64_t worst = 0;
            int any = 0;
            for (int t = 0; t < s->tp; t++) {
                ds_event_key_t key =
                    dsi_comm_step_key(s, DS_COMM_ALLREDUCE, DS_GROUP_EMBEDDING, 2, DS_DTYPE_FP32,
                                      dsi_embedding_grad_bytes(sim->model, s));
                dsi_key_set_layout(&key, &sim->emb_lay[(size_t)d * s->tp + t]);
                int64_t ns;
                int assumed;
                TRY(dsi_sim_cost(sim, &key, 0.0, (double)key.dims[0], &ns, &assumed));
                worst = DSI_MAX(worst, ns);
                any |= assumed;
            }
            TRY(column_collective(sim, it, c, worst, any, DSI_L_EMBEDDING, true));
        }
        if (mp > 1 && (sim->ctx.dtype == DS_DTYPE_FP16 || s->grad_clip)) {
            ds_event_key_t key =
                dsi_comm_step_key(s, DS_COMM_ALLREDUCE, DS_GROUP_MP, mp, DS_DTYPE_FP32, 4);
            dsi_key_set_layout(&key, &sim->mp_lay[d]);
            int64_t ns;
            int assumed;
            TRY(dsi_sim_cost(sim, &key, 0.0, 4.0, &ns, &assumed));
            if (sim->ctx.dtype == DS_DTYPE_FP16)
                TRY(column_collective(sim, it, c, ns, assumed, DSI_L_OVERFLOW, false));
            if (s->grad_clip)
                TRY(column_collective(sim, it, c, ns, assumed, DSI_L_GRAD_NORM, false));
        }
    }
    /* The optimizer step. */
    int32_t *optimizer = sim->round_end; /* reused: one slot per lane is enough here */
    for (int32_t lane = 0; lane < sim->num_lanes; lane++) {
        const dsi_lane_t *l = &sim->lanes[lane];
        const dsi_profile_t *pr = &sim->profiles[l->prof];
        int32_t x;
        TRY(lane_node(sim, lane, DSI_N_OPT, it, scaled(pr->opt_dur, pr->opt_dur, l->factor), &x));
        sim->g.comp[x] = sim->g.dur[x];
        set_assumed(sim, x, pr->opt_assumed);
        optimizer[lane] = x;
    }
    if (has_dp && (s->dp_algo == DS_DP_PS || s->zero == 1 || s->zero == 2))
        TRY(build_param_sync(sim, it, optimizer));
    return DS_OK;
}

/* ---- iterations ------------------------------------------------------------------------------ */

static ds_status_t build_iteration(ds_sim_t *sim, int it)
{
    const ds_strategy_t *s = &sim->s;
    size_t xfer_slots = (size_t)sim->num_lanes * 2 * sim->xfer_per_lane;
    for (size_t i = 0; i < xfer_slots; i++)
        sim->xfer[i] = -1;
    memset(sim->xfer_sides, 0, xfer_slots);
    size_t ready_slots = (size_t)sim->num_lanes * sim->rounds * sim->max_buckets;
    for (size_t i = 0; i < ready_slots; i++)
        sim->ready[i] = -1;
    for (size_t i = 0; i < (size_t)sim->num_lanes * sim->rounds; i++)
        sim->round_end[i] = -1;
    memset(sim->fwd_done_store, 0, (size_t)sim->num_lanes * s->vpp);
    int32_t longest = 0;
    for (int32_t lane = 0; lane < sim->num_lanes; lane++) {
        dsi_lane_t *l = &sim->lanes[lane];
        memset(l->seq, 0, sizeof(l->seq));
        l->nbwd = 0;
        longest = DSI_MAX(longest, sim->programs[l->p].count);
    }
    bool zero2 = s->zero == 2 && s->dp > 1, zero3 = s->zero == 3 && s->dp > 1;
    if (!zero2 && !zero3) {
        /* Lane after lane: a lane's nodes stay together in memory.  Transfers
         * meet their other side whichever lane is built first. */
        for (int32_t lane = 0; lane < sim->num_lanes; lane++) {
            const dsi_program_t *prog = &sim->programs[sim->lanes[lane].p];
            for (int32_t a = 0; a < prog->count; a++) {
                const dsi_action_t *act = &prog->actions[a];
                if (act->type == DSI_ACT_COMM)
                    TRY(build_comm(sim, it, lane, act));
                else
                    TRY(build_pass(sim, it, lane, act));
            }
        }
        longest = 0;
    }
    /* ZeRO-2/3 (pp = 1): action-major, every lane's action a, then the
     * group traffic that couples them. */
    for (int32_t a = 0; a < longest; a++) {
        const dsi_action_t *shared = NULL;
        for (int32_t lane = 0; lane < sim->num_lanes; lane++) {
            const dsi_program_t *prog = &sim->programs[sim->lanes[lane].p];
            if (a >= prog->count)
                continue;
            const dsi_action_t *act = &prog->actions[a];
            shared = act;
            if (act->type == DSI_ACT_COMM)
                TRY(build_comm(sim, it, lane, act));
            else
                TRY(build_pass(sim, it, lane, act));
        }
        if (shared == NULL || shared->type == DSI_ACT_COMM)
            continue;
        if (zero3)
            TRY(build_zero3_action(sim, it, shared));
        if (zero2 && shared->type == DSI_ACT_BWD) {
            int round = sim->lanes[0].nbwd - 1;
            if (!s->overlap_grad_reduce)
                for (int32_t lane = 0; lane < sim->num_lanes; lane++) {
                    int32_t end;
                    TRY(lane_state(sim, lane, it, &end));
                    sim->round_end[(size_t)lane * sim->rounds + round] = end;
                }
            TRY(build_grad_sync(sim, it, round, !s->overlap_grad_reduce));
        }
    }
    /* Every transfer needs its sender and its receiver. */
    for (size_t i = 0; i < xfer_slots; i++)
        if (sim->xfer[i] >= 0 && sim->xfer_sides[i] != 2)
            return DSI_ERROR(DS_ERR_INTERNAL, "a pipeline transfer of stage %d has no matching %s",
                             sim->lanes[i / (2 * (size_t)sim->xfer_per_lane)].p, "receive or send");
    return build_iteration_end(sim, it);
}

/* ---- entry --------------------------------------------------------------------------------- */

static ds_status_t setup_programs(ds_sim_t *sim)
{
    const ds_strategy_t *s = &sim->s;
    if (sim->num_programs < s->pp) {
        TRY(dsi_realloc_array(&sim->programs, (size_t)s->pp, sizeof(*sim->programs)));
        memset(sim->programs + sim->num_programs, 0,
               (size_t)(s->pp - sim->num_programs) * sizeof(*sim->programs));
        sim->num_programs = s->pp;
    }
    bool buckets_in_backward = s->dp > 1 && s->overlap_grad_reduce && s->zero != 3;
    int64_t key[5] = {s->schedule, s->pp, sim->m, s->vpp, sim->unbatched_p2p};
    bool cached = memcmp(key, sim->program_key, sizeof(key)) == 0;
    memset(sim->program_key, 0, sizeof(sim->program_key));
    for (int p = 0; p < s->pp; p++) {
        dsi_program_t *prog = &sim->programs[p];
        if (cached) {
            for (int32_t i = 0; i < prog->count; i++)
                prog->actions[i].sync = 0;
        } else {
            TRY(dsi_schedule_build(s, sim->m, p, sim->unbatched_p2p, prog));
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
    memcpy(sim->program_key, key, sizeof(key));
    return DS_OK;
}

static ds_status_t setup_buckets(ds_sim_t *sim)
{
    const ds_strategy_t *s = &sim->s;
    TRY(dsi_realloc_array(&sim->stage_params, (size_t)s->pp, sizeof(*sim->stage_params)));
    TRY(dsi_realloc_array(&sim->num_buckets, (size_t)s->pp, sizeof(*sim->num_buckets)));
    sim->bucket = dsi_dp_bucket_params(s);
    sim->max_buckets = 1;
    for (int p = 0; p < s->pp; p++) {
        sim->stage_params[p] = dsi_stage_params(sim->model, s, p);
        int64_t nb = (sim->stage_params[p] + sim->bucket - 1) / sim->bucket;
        if (nb > (1 << 20))
            return DSI_ERROR(
                DS_ERR_INVALID_ARG,
                "bucket=%lld parameters makes %lld buckets on stage %d (accepted: at most 1048576)",
                (long long)sim->bucket, (long long)nb, p);
        sim->num_buckets[p] = (int32_t)nb;
        sim->max_buckets = DSI_MAX(sim->max_buckets, (int32_t)nb);
    }
    sim->rounds = s->zero == 2 ? (int32_t)sim->m : 1;
    return DS_OK;
}

static ds_status_t setup_state(ds_sim_t *sim)
{
    const ds_strategy_t *s = &sim->s;
    size_t lanes = (size_t)sim->num_lanes;
    sim->xfer_per_lane = (int32_t)(sim->m * s->vpp + 1);
    size_t xfer_slots = lanes * 2 * (size_t)sim->xfer_per_lane;
    TRY(dsi_realloc_array(&sim->xfer, xfer_slots, sizeof(*sim->xfer)));
    TRY(dsi_realloc_array(&sim->xfer_sides, xfer_slots, 1));
    TRY(dsi_realloc_array(&sim->xfer_flag, xfer_slots, 1));
    TRY(dsi_realloc_array(&sim->ready, lanes * sim->rounds * sim->max_buckets,
                          sizeof(*sim->ready)));
    TRY(dsi_realloc_array(&sim->round_end, DSI_MAX(lanes * sim->rounds, lanes),
                          sizeof(*sim->round_end)));
    size_t gathers = (size_t)sim->num_dpgroups * sim->max_buckets;
    TRY(dsi_realloc_array(&sim->gather, gathers ? gathers : 1, sizeof(*sim->gather)));
    for (size_t i = 0; i < gathers; i++)
        sim->gather[i] = -1;
    int32_t parts = 1;
    for (int32_t i = 0; i < sim->num_profiles; i++)
        for (int c = 0; c < s->vpp; c++)
            parts =
                DSI_MAX(parts, sim->profiles[i].part_first[c + 1] - sim->profiles[i].part_first[c]);
    sim->zparts_stride = parts;
    TRY(dsi_realloc_array(&sim->zparts, lanes * parts, sizeof(*sim->zparts)));
    TRY(dsi_realloc_array(&sim->zpre, lanes, sizeof(*sim->zpre)));
    size_t mb_slots = (size_t)s->pp * s->vpp * (size_t)sim->m * 4;
    TRY(dsi_realloc_array(&sim->mb_nodes, mb_slots, sizeof(*sim->mb_nodes)));
    for (size_t i = 0; i < mb_slots; i++)
        sim->mb_nodes[i] = -1;
    for (int32_t lane = 0; lane < sim->num_lanes; lane++) {
        sim->lanes[lane].last = -1;
        sim->lanes[lane].npend = 0;
    }
    return DS_OK;
}

/* Placement classes depend on the shape and placement only: a search that
 * varies micro-batches, schedules or ZeRO on one shape computes them once. */
static ds_status_t setup_placement(ds_sim_t *sim)
{
    const ds_strategy_t *s = &sim->s;
    dsi_place_key_t key;
    memset(&key, 0, sizeof(key));
    key.dp = s->dp;
    key.tp = s->tp;
    key.pp = s->pp;
    key.gpus_per_node = sim->cluster.gpus_per_node;
    key.wrap = dsi_schedule_next_stage(s, s->pp - 1) >= 0;
    key.tied = dsi_has_tied_copy(&sim->info, s);
    key.full = sim->opt.mode == DS_SIM_FULL;
    key.valid = sim->device_factor == NULL;
    memcpy(key.order, s->order, sizeof(key.order));
    if (key.valid && memcmp(&key, &sim->place_key, sizeof(key)) == 0) {
        for (int32_t g = 0; g < sim->num_dpgroups; g++) {
            sim->dpgroups[g].last = -1;
            memset(sim->dpgroups[g].cost, 0xff, sizeof(sim->dpgroups[g].cost));
        }
        return DS_OK;
    }
    sim->place_key.valid = 0;
    TRY(setup_classes(sim));
    TRY(setup_dp_groups(sim));
    sim->place_key = key;
    return DS_OK;
}

ds_status_t dsi_sim_build(ds_sim_t *sim)
{
    TRY(setup_placement(sim));
    TRY(setup_lanes(sim));
    TRY(setup_programs(sim));
    TRY(setup_buckets(sim));
    TRY(setup_state(sim));
    TRY(dsi_graph_reset(&sim->g));
    for (int it = 1; it <= 2; it++)
        TRY(build_iteration(sim, it));
    return DS_OK;
}

/* ---- descriptions for messages ----------------------------------------------------------- */

static const char *const dir_names[4] = {"send-forward", "receive-forward", "send-backward",
                                         "receive-backward"};

/* Index of the action of `lane` that posts its `seq`-th transfer in `dir`. */
static int32_t action_of_transfer(const ds_sim_t *sim, int32_t lane, dsi_dir_t dir, int32_t seq)
{
    const dsi_program_t *prog = &sim->programs[sim->lanes[lane].p];
    int32_t count = 0;
    for (int32_t i = 0; i < prog->count; i++)
        for (int j = 0; j < prog->actions[i].nx; j++)
            if (prog->actions[i].x[j] == dir && count++ == seq)
                return i;
    return -1;
}

static void describe_position(const ds_sim_t *sim, int32_t lane, int32_t action, char *text,
                              size_t size)
{
    const dsi_program_t *prog = &sim->programs[sim->lanes[lane].p];
    /* The compute pass just before the call. */
    int32_t i = action;
    while (i >= 0 && prog->actions[i].type == DSI_ACT_COMM)
        i--;
    if (i < 0)
        snprintf(text, size, "call %d of the schedule, before any pass", action);
    else
        snprintf(text, size, "call %d of the schedule, after %s of micro-batch %d chunk %d", action,
                 prog->actions[i].type == DSI_ACT_FWD ? "the forward" : "the backward",
                 prog->actions[i].mb, prog->actions[i].chunk);
}

void dsi_sim_describe_node(const ds_sim_t *sim, int32_t id, char *text, size_t size)
{
    const dsi_graph_t *g = &sim->g;
    int32_t owner = g->owner[id];
    switch ((dsi_node_kind_t)g->kind[id]) {
    case DSI_N_FWD:
    case DSI_N_BWD:
    case DSI_N_OPT:
    case DSI_N_TP:
    case DSI_N_JOIN: {
        const dsi_lane_t *l = &sim->lanes[owner];
        snprintf(text, size, "stage %d (ranks from %lld) %s mb %d chunk %d, iteration %d", l->p,
                 (long long)dsi_sim_lane_rank(sim, owner, 0),
                 g->kind[id] == DSI_N_FWD   ? "forward"
                 : g->kind[id] == DSI_N_BWD ? "backward"
                 : g->kind[id] == DSI_N_OPT ? "optimizer"
                 : g->kind[id] == DSI_N_TP  ? "sp-norm allreduce"
                                            : "wait",
                 g->mb[id], g->chunk[id], g->iter[id]);
        return;
    }
    case DSI_N_XFER: {
        const dsi_lane_t *l = &sim->lanes[owner];
        int ch = g->chunk[id];
        int32_t peer = ch == 0 ? l->next : l->prev;
        dsi_dir_t send_dir = ch == 0 ? DSI_SEND_NEXT : DSI_SEND_PREV;
        dsi_dir_t recv_dir = ch == 0 ? DSI_RECV_PREV : DSI_RECV_NEXT;
        char from[160] = "", to[160] = "";
        describe_position(sim, owner, action_of_transfer(sim, owner, send_dir, g->mb[id]), from,
                          sizeof(from));
        if (peer >= 0)
            describe_position(sim, peer, action_of_transfer(sim, peer, recv_dir, g->mb[id]), to,
                              sizeof(to));
        snprintf(text, size,
                 "%s #%d of iteration %d from stage %d (rank %lld, %s) to stage %d (rank %lld, %s)",
                 dir_names[send_dir], g->mb[id], g->iter[id], l->p,
                 (long long)dsi_sim_lane_rank(sim, owner, 0), from,
                 peer >= 0 ? sim->lanes[peer].p : -1,
                 peer >= 0 ? (long long)dsi_sim_lane_rank(sim, peer, 0) : -1LL, to);
        (void)recv_dir;
        return;
    }
    case DSI_N_DP:
        snprintf(text, size, "%s bucket %d of the data-parallel group of stage %d, iteration %d",
                 dsi_node_labels[g->label[id]], g->mb[id], sim->dpgroups[owner].p, g->iter[id]);
        return;
    case DSI_N_COL:
        snprintf(text, size, "%s of replica %d, iteration %d", dsi_node_labels[g->label[id]],
                 sim->columns[owner].d, g->iter[id]);
        return;
    case DSI_N_KIND_COUNT_: break;
    }
    snprintf(text, size, "event %d", id);
}
