/*
 * Reuse of the previous run's graph.  A search simulates many candidates
 * whose graphs have the same nodes and edges and differ in durations only
 * (recompute, flash attention, FP8, the DP algorithm).  When this run's
 * structure key equals the last successful run's, every node is given this
 * run's duration by the phase that built it (dsi_phase_t.reprice) instead
 * of building the graph again; the evaluation then sweeps it in the kept
 * order.  A node whose phase has no reprice hook, or whose phase says the
 * node would be built otherwise now, makes the run build anew.  A run that
 * differs from the last in the DP algorithm at most also keeps its plan
 * (placement, lanes, profiles: dsi_plan_mark_t).
 */
#include "dsi_phase.h"

#include <string.h>

/* Runs that reuse: symmetric ones without a timeline (the search's), no
 * speed factors, DS_SIM_REUSE not 0. */
static bool reuse_enabled(const ds_sim_t *sim, int num_phases)
{
    return sim->opt.mode == DS_SIM_SYMMETRIC && !sim->opt.keep_timeline &&
           sim->device_factor == NULL && num_phases <= 32 &&
           dsi_param_int(DSI_PARAM_SIM_REUSE) != 0;
}

/* Into a zeroed *in: copied member by member with memcpy, so that padding
 * stays zero and keys compare with memcmp. */
static void run_inputs(const ds_sim_t *sim, dsi_run_inputs_t *in)
{
    in->model = sim->model;
    memcpy(&in->info, &sim->info, sizeof(in->info));
    in->costs = sim->costs;
    in->costs_version = dsi_cost_table_version(sim->costs);
    memcpy(&in->cluster, &sim->cluster, sizeof(in->cluster));
    memcpy(&in->opt, &sim->opt, sizeof(in->opt));
    in->opt.slow_devices = NULL;
    in->m = sim->m;
    in->unbatched_p2p = sim->unbatched_p2p;
}

static void reuse_key(const ds_sim_t *sim, const dsi_phase_t *const *phases, int num_phases,
                      dsi_reuse_key_t *key)
{
    memset(key, 0, sizeof(*key));
    run_inputs(sim, &key->in);
    key->in.opt.band = DS_SIM_BAND_EXPECTED;
    memcpy(&key->s, &sim->s, sizeof(key->s));
    /* Fields that change costs only: the phases' reprice hooks check the
     * rest of what they decide (a part's split where buckets complete). */
    key->s.recompute = DS_RECOMPUTE_NONE;
    key->s.flash_attention = 0;
    key->s.fp8 = DS_FP8_OFF;
    key->s.dp_algo = sim->s.dp_algo == DS_DP_PS ? DS_DP_PS : DS_DP_AUTO;
    key->zero3_prefetch = dsi_param_int(DSI_PARAM_SIM_ZERO3_PREFETCH);
    key->sp = sim->ctx.sp;
    key->dtype = (int32_t)sim->ctx.dtype;
    key->cp = sim->ctx.cp;
    key->cp_comm = (int32_t)sim->ctx.cp_comm;
    key->twice = dsi_twice_applies(sim);
    for (int i = 0; i < num_phases; i++)
        if (phases[i]->applies(sim))
            key->phases |= 1u << i;
}

/* Groups the kept graph's nodes by (phase, source key), the first node of
 * each group standing for it; *ok_p false when a node's phase cannot
 * reprice it.  The keys depend on the structure only: the map holds until
 * the graph is built again. */
static ds_status_t map_sources(ds_sim_t *sim, const dsi_phase_t *const *phases, int num_phases,
                               bool *ok_p)
{
    dsi_graph_t *g = &sim->g;
    dsi_sim_reuse_t *r = &sim->reuse;
    if (r->sources_cap < g->n) {
        DSI_TRY(dsi_realloc_array(&r->node_source, (size_t)g->n, sizeof(*r->node_source)));
        DSI_TRY(dsi_realloc_array(&r->reps, (size_t)g->n, sizeof(*r->reps)));
        DSI_TRY(dsi_realloc_array(&r->member_off, (size_t)g->n + 1, sizeof(*r->member_off)));
        DSI_TRY(dsi_realloc_array(&r->members, (size_t)g->n, sizeof(*r->members)));
        r->sources_cap = g->n;
    }
    /* Open addressing over (phase, key): slots hold source + 1 (0: empty;
     * a key is read only where its slot is taken). */
    size_t cap = 64;
    while (cap < 2 * (size_t)g->n)
        cap *= 2;
    if (r->slots_cap < cap) {
        DSI_TRY(dsi_realloc_array(&r->slots, cap, sizeof(*r->slots)));
        DSI_TRY(dsi_realloc_array(&r->slot_keys, cap, sizeof(*r->slot_keys)));
        r->slots_cap = cap;
    }
    int32_t *slots = r->slots;
    uint64_t *slot_keys = r->slot_keys;
    memset(slots, 0, cap * sizeof(*slots));
    r->num_sources = 0;
    *ok_p = true;
    for (int32_t id = 0; id < g->n && *ok_p; id++) {
        r->node_source[id] = -1;
        if (g->kind[id] == DSI_N_JOIN)
            continue; /* zero duration, whoever built it */
        const dsi_phase_t *ph = g->phase[id] < num_phases ? phases[g->phase[id]] : NULL;
        *ok_p = ph != NULL && ph->reprice != NULL;
        if (!*ok_p)
            break;
        uint64_t key = ph->source != NULL ? ph->source(sim, id) : 0;
        size_t i = (size_t)(dsi_hash_mix64(key ^ ((uint64_t)g->phase[id] << 56)) & (cap - 1));
        while (key != 0 && slots[i] != 0 &&
               !(slot_keys[i] == key && g->phase[r->reps[slots[i] - 1]] == g->phase[id]))
            i = (i + 1) & (cap - 1);
        if (key != 0 && slots[i] != 0) {
            r->node_source[id] = slots[i] - 1;
            continue;
        }
        int32_t source = r->num_sources++;
        r->reps[source] = id;
        r->node_source[id] = source;
        if (key != 0) {
            slots[i] = source + 1;
            slot_keys[i] = key;
        }
    }
    if (*ok_p) {
        /* Each group's other nodes, in node order (counted, then placed). */
        int32_t *off = r->member_off;
        memset(off, 0, ((size_t)r->num_sources + 1) * sizeof(*off));
        for (int32_t id = 0; id < g->n; id++) {
            int32_t source = r->node_source[id];
            if (source >= 0 && r->reps[source] != id)
                off[source + 1]++;
        }
        for (int32_t source = 0; source < r->num_sources; source++)
            off[source + 1] += off[source];
        for (int32_t id = 0; id < g->n; id++) {
            int32_t source = r->node_source[id];
            if (source >= 0 && r->reps[source] != id)
                r->members[off[source]++] = id;
        }
        for (int32_t source = r->num_sources; source > 0; source--)
            off[source] = off[source - 1];
        off[0] = 0;
    }
    r->sources_valid = *ok_p;
    return DS_OK;
}

/* What reprice sets on a node. */
typedef struct node_values {
    int64_t dur, comp, wait;
    uint8_t flags;
    dsi_node_payload_t payload;
} node_values_t;

static inline void node_values(const dsi_graph_t *g, int32_t id, node_values_t *v)
{
    v->dur = g->dur[id];
    v->comp = g->comp[id];
    v->wait = g->wait[id];
    v->flags = g->flags[id];
    v->payload = g->payload[id];
}

/* The payload compared as stored: reprice writes fields, never the padding. */
static inline bool node_values_kept(const dsi_graph_t *g, int32_t id, const node_values_t *v)
{
    return v->dur == g->dur[id] && v->comp == g->comp[id] && v->wait == g->wait[id] &&
           v->flags == g->flags[id] &&
           memcmp(&v->payload, &g->payload[id], sizeof(v->payload)) == 0;
}

/* Every node's duration from this run's costs: one node repriced per
 * source, the others of its group copy it; *ok_p false when a node cannot
 * be kept.  *same_p (asked for with `finished`: the last run evaluated this
 * graph and finished): no node's values changed.  `settled`: every node
 * already holds its source's values (the last run repriced the graph), so
 * only the groups whose source changed are copied. */
static ds_status_t reprice_sources(ds_sim_t *sim, const dsi_phase_t *const *phases, bool finished,
                                   bool settled, bool *ok_p, bool *same_p)
{
    dsi_graph_t *g = &sim->g;
    dsi_sim_reuse_t *r = &sim->reuse;
    bool same = finished;
    int64_t changed = 0;
    *ok_p = true;
    *same_p = false;
    for (int32_t s = 0; s < r->num_sources && *ok_p; s++) {
        int32_t rep = r->reps[s];
        const dsi_phase_t *ph = phases[g->phase[rep]];
        bool kept = r->only_dp_algo && ph->kept != NULL && ph->kept(sim, rep);
        if (kept) {
            r->kept_sources++; /* holds this run's values */
        } else {
            node_values_t before;
            if (finished)
                node_values(g, rep, &before);
            DSI_TRY(ph->reprice(sim, rep, ok_p));
            kept = finished && node_values_kept(g, rep, &before);
            same = same && kept;
        }
        if (settled && kept)
            continue; /* its group holds these values already */
        uint8_t assumed = g->flags[rep] & DSI_NODE_ASSUMED;
        for (int32_t k = r->member_off[s]; k < r->member_off[s + 1]; k++) {
            int32_t id = r->members[k];
            uint8_t flags = (uint8_t)((g->flags[id] & ~DSI_NODE_ASSUMED) | assumed);
            changed |= (g->dur[id] ^ g->dur[rep]) | (g->comp[id] ^ g->comp[rep]) |
                       (g->wait[id] ^ g->wait[rep]) | (g->flags[id] ^ flags);
            g->dur[id] = g->dur[rep];
            g->comp[id] = g->comp[rep];
            g->wait[id] = g->wait[rep];
            g->flags[id] = flags;
        }
    }
    *same_p = *ok_p && same && changed == 0;
    return DS_OK;
}

ds_status_t dsi_sim_reprice(ds_sim_t *sim, bool *reused_p)
{
    int num_phases;
    const dsi_phase_t *const *phases = dsi_sim_phases(&num_phases);
    dsi_sim_reuse_t *r = &sim->reuse;
    *reused_p = false;
    sim->results.reused = false;
    sim->results.same_timeline = false;
    bool was_valid = r->valid, finished = r->finished, settled = r->settled;
    r->finished = r->settled = false; /* until this run's results are (dsi_sim_reuse_settle) */
    r->run++;
    r->valid = false; /* until this run's graph is evaluated (dsi_sim_reuse_note) */
    r->armed = reuse_enabled(sim, num_phases);
    bool mapped = r->sources_valid;
    r->sources_valid = false; /* until this run keeps the graph */
    if (!r->armed)
        return DS_OK;
    dsi_reuse_key_t key;
    reuse_key(sim, phases, num_phases, &key);
    bool same_key = was_valid && memcmp(&key, &r->key, sizeof(key)) == 0;
    r->key = key;
    /* Nodes hold the last run's values (it finished on this graph); only
     * the DP algorithm may have changed since. */
    r->only_dp_algo = same_key && finished && r->last_recompute == (int)sim->s.recompute &&
                      r->last_flash == sim->s.flash_attention && r->last_fp8 == (int)sim->s.fp8 &&
                      r->last_band == (int)sim->opt.band;
    r->last_recompute = (int)sim->s.recompute;
    r->last_flash = sim->s.flash_attention;
    r->last_fp8 = (int)sim->s.fp8;
    r->last_band = (int)sim->opt.band;
    bool ok = false, same = false;
    if (same_key && !mapped) {
        DSI_TRY(map_sources(sim, phases, num_phases, &mapped));
        settled = false; /* nodes still hold what the build gave them */
    }
    if (same_key && mapped)
        DSI_TRY(reprice_sources(sim, phases, finished, settled, &ok, &same));
    r->sources_valid = ok; /* the map stays with the graph */
    if (!ok) {
        r->rebuilt++;
        return DS_OK;
    }
    r->repriced++;
    r->unchanged += same;
    sim->results.same_timeline = same;
    sim->g.same = true; /* the structure noted last, evaluated in its kept order */
    sim->results.reused = true;
    *reused_p = true;
    return DS_OK;
}

void dsi_sim_reuse_note(ds_sim_t *sim)
{
    sim->reuse.valid = sim->reuse.armed && sim->g.order_valid;
}

void dsi_sim_reuse_settle(ds_sim_t *sim)
{
    sim->reuse.finished = sim->reuse.valid;
    sim->reuse.settled = sim->reuse.valid && sim->results.reused;
}

/* ---- the plan kept ------------------------------------------------------------------------ */

static void plan_key(const ds_sim_t *sim, dsi_plan_key_t *key)
{
    memset(key, 0, sizeof(*key));
    run_inputs(sim, &key->in);
    memcpy(&key->given, &sim->given, sizeof(key->given));
    key->given.dp_algo = sim->given.dp_algo == DS_DP_PS ? DS_DP_PS : DS_DP_AUTO;
}

bool dsi_sim_plan_kept(ds_sim_t *sim)
{
    dsi_plan_mark_t *mark = &sim->plan_mark;
    bool finished = mark->valid;
    mark->valid = false; /* until this run finishes */
    mark->kept = false;
    if (!finished || sim->device_factor != NULL || dsi_param_int(DSI_PARAM_SIM_REUSE) == 0)
        return false;
    dsi_plan_key_t key;
    plan_key(sim, &key);
    if (memcmp(&key, &mark->key, sizeof(key)) != 0)
        return false;
    sim->reuse.plans_kept++;
    mark->kept = true;
    return true;
}

void dsi_sim_plan_note(ds_sim_t *sim)
{
    dsi_plan_mark_t *mark = &sim->plan_mark;
    plan_key(sim, &mark->key);
    mark->num_keys = sim->num_keys;
    mark->num_missing = sim->num_missing;
    mark->num_profiles = sim->num_profiles;
    mark->num_templates = sim->num_templates;
    mark->num_ops = sim->num_ops;
    mark->num_parts = sim->num_parts;
    mark->memory_known = false;
    /* A plan that priced a DP collective would change with the algorithm. */
    mark->keepable = true;
    for (size_t k = 0; k < sim->num_keys; k++)
        if (sim->keys[k].key.kind == DS_EVENT_COMM && sim->keys[k].key.group == DS_GROUP_DP)
            mark->keepable = false;
}

void dsi_sim_plan_finish(ds_sim_t *sim)
{
    sim->plan_mark.valid = sim->plan_mark.keepable;
}

void dsi_sim_plan_forget(ds_sim_t *sim)
{
    sim->plan_mark.valid = false;
}
