/*
 * Costs of the simulator's events: every key is looked up once per run in
 * the caller's cost table (mean seconds -> integer ns); a communication key
 * the table lacks is predicted by the communication model when one is given;
 * any other key the table lacks is recorded as missing, or estimated (compute
 * by the device model, marked modelled, with its class's band; communication
 * from the cluster's links, marked assumed).  Layer templates (the operators of one
 * layer pass on one TP layout, with their costs) and stage profiles (the
 * parts of each chunk and their fused sums) are memoised per run; a key's
 * worked-out cost is also kept across runs (dsi_cost_memo_t) while the
 * table, its version, the communication model, the cluster and the band
 * stay, so that a search prices each key once.
 */
#include "dsi_sim.h"

#include <math.h>
#include <string.h>

/* ---- keys looked up ---------------------------------------------------------------------- */

void dsi_sim_keys_reset(ds_sim_t *sim)
{
    sim->num_keys = 0;
    sim->num_missing = 0;
    if (sim->key_slots != NULL)
        memset(sim->key_slots, 0, sim->num_key_slots * sizeof(*sim->key_slots));
}

/* Open addressing over entries whose first member is their key (`stride`
 * bytes apart): slots hold an entry's index + 1, 0 when empty.  The slot
 * of `key`: its entry's, or the empty one where it goes. */
static size_t index_slot(const uint32_t *slots, size_t num_slots, const void *entries,
                         size_t stride, const ds_event_key_t *key, uint64_t hash)
{
    size_t mask = num_slots - 1;
    for (size_t i = hash & mask;; i = (i + 1) & mask) {
        uint32_t slot = slots[i];
        if (slot == 0 ||
            ds_event_key_equal(
                (const ds_event_key_t *)(const void *)((const char *)entries + (slot - 1) * stride),
                key))
            return i;
    }
}

/* The slots of the first `count` entries again, in *num_slots_p slots (at
 * least twice what `need` entries take; the table grows when it must). */
static ds_status_t index_build(uint32_t **slots_p, size_t *num_slots_p, const void *entries,
                               size_t stride, size_t count, size_t need)
{
    if (*num_slots_p < 2 * need || *slots_p == NULL) {
        size_t num_slots = *num_slots_p ? *num_slots_p : 256;
        while (num_slots < 2 * need)
            num_slots *= 2;
        uint32_t *slots;
        DSI_TRY(dsi_calloc(num_slots, sizeof(*slots), &slots));
        dsi_free(*slots_p);
        *slots_p = slots;
        *num_slots_p = num_slots;
    } else {
        memset(*slots_p, 0, *num_slots_p * sizeof(**slots_p));
    }
    for (size_t i = 0; i < count; i++) {
        const ds_event_key_t *key =
            (const ds_event_key_t *)(const void *)((const char *)entries + i * stride);
        (*slots_p)[index_slot(*slots_p, *num_slots_p, entries, stride, key,
                              ds_event_key_hash(key))] = (uint32_t)(i + 1);
    }
    return DS_OK;
}

static size_t key_slot(const ds_sim_t *sim, const ds_event_key_t *key, uint64_t hash)
{
    return index_slot(sim->key_slots, sim->num_key_slots, sim->keys, sizeof(*sim->keys), key, hash);
}

/* ---- costs kept across runs ------------------------------------------------------------ */

#define MEMO_MAX_ENTRIES ((size_t)1 << 16)

static void memo_from(const ds_sim_t *sim, dsi_cost_memo_from_t *from)
{
    memset(from, 0, sizeof(*from));
    from->costs = sim->costs;
    from->costs_version = dsi_cost_table_version(sim->costs);
    from->comm_model = sim->opt.comm_model;
    memcpy(&from->cluster, &sim->cluster, sizeof(from->cluster));
    from->num_devices = sim->num_devices;
    from->estimate_missing = sim->opt.estimate_missing;
    from->band = (int32_t)sim->opt.band;
}

static void memo_clear(dsi_cost_memo_t *memo)
{
    memo->count = 0;
    if (memo->slots != NULL)
        memset(memo->slots, 0, memo->num_slots * sizeof(*memo->slots));
}

void dsi_sim_memo_check(ds_sim_t *sim)
{
    dsi_cost_memo_from_t from;
    memo_from(sim, &from);
    if (memcmp(&from, &sim->memo.from, sizeof(from)) != 0 ||
        dsi_param_int(DSI_PARAM_SIM_REUSE) == 0) {
        memo_clear(&sim->memo);
        sim->memo.from = from;
    }
}

void dsi_sim_memo_free(ds_sim_t *sim)
{
    dsi_free(sim->memo.entries);
    dsi_free(sim->memo.slots);
    memset(&sim->memo, 0, sizeof(sim->memo));
}

static size_t memo_slot(const dsi_cost_memo_t *memo, const ds_event_key_t *key, uint64_t hash)
{
    return index_slot(memo->slots, memo->num_slots, memo->entries, sizeof(*memo->entries), key,
                      hash);
}

static const dsi_key_entry_t *memo_find(const dsi_cost_memo_t *memo, const ds_event_key_t *key,
                                        uint64_t hash, double flops, double bytes)
{
    if (memo->count == 0)
        return NULL;
    uint32_t slot = memo->slots[memo_slot(memo, key, hash)];
    if (slot == 0)
        return NULL;
    const dsi_cost_memo_entry_t *m = &memo->entries[slot - 1];
    return m->flops == flops && m->bytes == bytes ? &m->e : NULL;
}

/* Kept for later runs; a full memo starts again. */
static ds_status_t memo_add(dsi_cost_memo_t *memo, const dsi_key_entry_t *e, uint64_t hash,
                            double flops, double bytes)
{
    if (memo->count == MEMO_MAX_ENTRIES)
        memo_clear(memo);
    if (2 * (memo->count + 1) > memo->num_slots)
        DSI_TRY(index_build(&memo->slots, &memo->num_slots, memo->entries, sizeof(*memo->entries),
                            memo->count, memo->count + 1));
    if (memo->count == memo->cap) {
        size_t cap = memo->cap ? 2 * memo->cap : 256;
        DSI_TRY(dsi_realloc_array(&memo->entries, cap, sizeof(*memo->entries)));
        memo->cap = cap;
    }
    size_t i = memo_slot(memo, &e->key, hash);
    if (memo->slots[i] != 0) { /* the same key from other FLOPs or bytes: the newer stays */
        memo->entries[memo->slots[i] - 1] = (dsi_cost_memo_entry_t){*e, flops, bytes};
        return DS_OK;
    }
    memo->entries[memo->count] = (dsi_cost_memo_entry_t){*e, flops, bytes};
    memo->slots[i] = (uint32_t)++memo->count;
    return DS_OK;
}

/* The cost of a key this run has not looked up yet: the table's, the
 * communication model's, an estimate, or missing (*missing_p). */
static ds_status_t price_key(ds_sim_t *sim, const ds_event_key_t *key, double flops, double bytes,
                             dsi_key_entry_t *e, bool *missing_p)
{
    memset(e, 0, sizeof(*e));
    e->key = *key;
    *missing_p = false;
    const ds_cost_t *cost = sim->costs != NULL ? ds_cost_table_find(sim->costs, key) : NULL;
    double low = 1.0, high = 1.0;
    if (cost != NULL) {
        e->seconds = cost->mean_s;
        e->provenance = cost->provenance;
        ds_cost_table_band(sim->costs, key, &low, &high);
        /* A modelled compute cost (from a text table, or scaled from another
         * device) has its class's band on the target wherever it came from. */
        if (cost->provenance == DS_PROV_MODELLED && key->kind == DS_EVENT_COMPUTE && low == 1.0 &&
            high == 1.0)
            dsi_estimate_compute_band(key, flops, bytes, &sim->cluster, &low, &high);
    } else if (key->kind == DS_EVENT_COMM && sim->opt.comm_model != NULL) {
        ds_comm_prediction_t prediction;
        int64_t per_node = DSI_MAX(sim->cluster.gpus_per_node, 1);
        DSI_TRY(ds_comm_model_predict_in_job(
            sim->opt.comm_model, key, (sim->num_devices + per_node - 1) / per_node, &prediction));
        e->seconds = prediction.cost.mean_s;
        e->provenance = prediction.cost.provenance;
        ds_comm_prediction_band(&prediction, &low, &high);
    } else if (sim->opt.estimate_missing && key->kind == DS_EVENT_COMPUTE) {
        /* The device model, with the band of the operator's class. */
        e->seconds = dsi_estimate_compute_band(key, flops, bytes, &sim->cluster, &low, &high);
        e->provenance = DS_PROV_MODELLED;
    } else if (sim->opt.estimate_missing) {
        DSI_TRY(dsi_estimate_seconds(key, flops, bytes, &sim->cluster, &e->seconds));
        e->provenance = DS_PROV_ASSUMED;
    } else {
        e->seconds = 0.0;
        e->provenance = DS_PROV_ASSUMED;
        *missing_p = true;
    }
    e->banded = low != 1.0 || high != 1.0;
    if (sim->opt.band == DS_SIM_BAND_LOW)
        e->seconds *= low;
    else if (sim->opt.band == DS_SIM_BAND_HIGH)
        e->seconds *= high;
    e->ns = dsi_ns(e->seconds);
    return DS_OK;
}

ds_status_t dsi_sim_cost(ds_sim_t *sim, const ds_event_key_t *key, double flops, double bytes,
                         int64_t *ns_p, int *assumed_p)
{
    if (2 * (sim->num_keys + 1) > sim->num_key_slots)
        DSI_TRY(index_build(&sim->key_slots, &sim->num_key_slots, sim->keys, sizeof(*sim->keys),
                            sim->num_keys, sim->num_keys + 1));
    uint64_t hash = ds_event_key_hash(key);
    size_t i = key_slot(sim, key, hash);
    if (sim->key_slots[i] != 0) {
        const dsi_key_entry_t *e = &sim->keys[sim->key_slots[i] - 1];
        *ns_p = e->ns;
        *assumed_p = e->provenance == DS_PROV_ASSUMED || e->provenance == DS_PROV_MODELLED;
        return DS_OK;
    }
    dsi_key_entry_t e;
    const dsi_key_entry_t *known = memo_find(&sim->memo, key, hash, flops, bytes);
    if (known != NULL) {
        e = *known;
        e.key = *key; /* the display-only group as this run names it */
    } else {
        bool missing;
        DSI_TRY(price_key(sim, key, flops, bytes, &e, &missing));
        if (missing) {
            if (sim->num_missing == sim->missing_cap) {
                size_t cap = sim->missing_cap ? 2 * sim->missing_cap : 32;
                DSI_TRY(dsi_realloc_array(&sim->missing, cap, sizeof(*sim->missing)));
                sim->missing_cap = cap;
            }
            sim->missing[sim->num_missing++] = *key;
        } else {
            DSI_TRY(memo_add(&sim->memo, &e, hash, flops, bytes));
        }
    }
    if (sim->num_keys == sim->keys_cap) {
        size_t cap = sim->keys_cap ? 2 * sim->keys_cap : 128;
        DSI_TRY(dsi_realloc_array(&sim->keys, cap, sizeof(*sim->keys)));
        sim->keys_cap = cap;
    }
    sim->keys[sim->num_keys++] = e;
    sim->key_slots[i] = (uint32_t)sim->num_keys;
    *ns_p = e.ns;
    *assumed_p = e.provenance == DS_PROV_ASSUMED || e.provenance == DS_PROV_MODELLED;
    return DS_OK;
}

/* ---- arrival skew ------------------------------------------------------------------------ */

/* Expected maximum of n independent standard normal draws (tabulated up to
 * 8, by the asymptotic expansion above). */
double dsi_expected_max_normal(int n)
{
    static const double table[9] = {0.0,    0.0,    0.5642, 0.8463, 1.0294,
                                    1.1630, 1.2672, 1.3522, 1.4236};
    if (n <= 1)
        return 0.0;
    if (n <= 8)
        return table[n];
    double l = sqrt(2.0 * log((double)n));
    return l - (log(log((double)n)) + log(4.0 * 3.14159265358979)) / (2.0 * l);
}

/* Variance (s^2) of one run of `key`, from its p10 and p90 taken as a
 * normal's (p90 - p10 = 2.5631 sigma); 0 when the table has no spread. */
double dsi_sim_cost_variance(const ds_cost_table_t *costs, const ds_event_key_t *key)
{
    const ds_cost_t *cost = ds_cost_table_find(costs, key);
    if (cost == NULL || !(cost->p90_s > cost->p10_s))
        return 0.0;
    double sigma = (cost->p90_s - cost->p10_s) / 2.5631;
    return sigma * sigma;
}

/* ---- layer templates ------------------------------------------------------------------- */

/* Profiles, templates, operators and parts cut back to the first ones. */
static void templates_cut(ds_sim_t *sim, int32_t profiles, int32_t templates, int32_t ops,
                          int32_t parts)
{
    for (int32_t i = profiles; i < sim->num_profiles; i++) {
        dsi_free(sim->profiles[i].part_first);
        dsi_free(sim->profiles[i].fused_dur);
        dsi_free(sim->profiles[i].fused_comp);
        dsi_free(sim->profiles[i].fused_wait);
        dsi_free(sim->profiles[i].fused_assumed);
    }
    sim->num_profiles = profiles;
    sim->num_templates = templates;
    sim->num_ops = ops;
    sim->num_parts = parts;
}

void dsi_sim_templates_reset(ds_sim_t *sim)
{
    templates_cut(sim, 0, 0, 0, 0);
}

ds_status_t dsi_sim_caches_cut(ds_sim_t *sim, const dsi_plan_mark_t *mark)
{
    templates_cut(sim, mark->num_profiles, mark->num_templates, mark->num_ops, mark->num_parts);
    sim->num_keys = mark->num_keys;
    sim->num_missing = mark->num_missing;
    return index_build(&sim->key_slots, &sim->num_key_slots, sim->keys, sizeof(*sim->keys),
                       sim->num_keys, sim->num_keys);
}

static ds_status_t grow_ops(ds_sim_t *sim, int32_t need)
{
    if (sim->num_ops + need <= sim->ops_cap)
        return DS_OK;
    int32_t cap = DSI_MAX(sim->ops_cap * 2, sim->num_ops + need + 256);
    DSI_TRY(dsi_realloc_array(&sim->op_dur, (size_t)cap, sizeof(*sim->op_dur)));
    DSI_TRY(dsi_realloc_array(&sim->op_wait, (size_t)cap, sizeof(*sim->op_wait)));
    DSI_TRY(dsi_realloc_array(&sim->op_nic, (size_t)cap, sizeof(*sim->op_nic)));
    DSI_TRY(dsi_realloc_array(&sim->op_comm, (size_t)cap, sizeof(*sim->op_comm)));
    DSI_TRY(dsi_realloc_array(&sim->op_assumed, (size_t)cap, sizeof(*sim->op_assumed)));
    DSI_TRY(dsi_realloc_array(&sim->op_grad, (size_t)cap, sizeof(*sim->op_grad)));
    DSI_TRY(dsi_realloc_array(&sim->op_label, (size_t)cap, sizeof(*sim->op_label)));
    sim->ops_cap = cap;
    return DS_OK;
}

/* A context-parallel ring transfer runs while the attention step after it
 * computes (Megatron-Core/TE issue step i + 1's K/V before step i's
 * kernel): only what it takes beyond that step shows, *ns_p is reduced to
 * it.  The backward's last hop of the K/V gradients home is waited for
 * before the operator after the attention (it needs them).  Other
 * operators keep their duration. */
static ds_status_t hide_behind_next(ds_sim_t *sim, const dsi_op_t *ops, size_t count, size_t i,
                                    int64_t *ns_p)
{
    const ds_event_key_t *key = &ops[i].key;
    if (key->kind != DS_EVENT_COMM || key->group != DS_GROUP_CP || key->op != DS_COMM_SENDRECV ||
        i + 1 >= count || ops[i + 1].key.kind != DS_EVENT_COMPUTE ||
        ops[i + 1].key.op != DS_OP_FLASH_ATTENTION)
        return DS_OK;
    int64_t next = 0;
    int assumed = 0;
    DSI_TRY(
        dsi_sim_cost(sim, &ops[i + 1].key, ops[i + 1].flops, ops[i + 1].bytes, &next, &assumed));
    *ns_p = *ns_p > next ? *ns_p - next : 0;
    return DS_OK;
}

/* The group of `kind` on `stage` spanning the most nodes (they are alike
 * under the usual placements). */
static dsi_layout_t widest_expert_group(ds_sim_t *sim, dsi_group_kind_t kind, int stage)
{
    dsi_layout_t worst = {0, 0, 0, 0, 0, 0};
    int groups = dsi_expert_groups(&sim->s, kind);
    for (int index = 0; index < groups; index++) {
        int n = dsi_group_members(&sim->place, kind, stage, index);
        dsi_layout_t l = dsi_group_layout(&sim->place, kind, n);
        if (index == 0 || l.nodes > worst.nodes ||
            (l.nodes == worst.nodes && l.concurrency > worst.concurrency))
            worst = l;
    }
    return worst;
}

void dsi_sim_expert_layouts_free(ds_sim_t *sim)
{
    dsi_free(sim->expert_layouts.lay);
    dsi_free(sim->expert_layouts.known);
    memset(&sim->expert_layouts, 0, sizeof(sim->expert_layouts));
}

ds_status_t dsi_sim_stage_expert_layout(ds_sim_t *sim, dsi_group_kind_t kind, int stage,
                                        dsi_layout_t *layout_p)
{
    const ds_strategy_t *s = &sim->s;
    dsi_expert_layouts_t *c = &sim->expert_layouts;
    /* int32_t fields only: no padding, so memcmp compares the values */
    const dsi_expert_place_t place = {
        s->tp,
        s->dp,
        s->pp,
        s->ep,
        s->etp,
        sim->place.gpus_per_node,
        sim->place.nodes_per_leaf,
        {(int32_t)s->order[0], (int32_t)s->order[1], (int32_t)s->order[2]}};
    if (memcmp(&place, &c->place, sizeof(place)) != 0 || c->stages < s->pp) {
        if (c->stages < s->pp) {
            DSI_TRY(dsi_realloc_array(&c->lay, (size_t)s->pp * 2, sizeof(*c->lay)));
            DSI_TRY(dsi_realloc_array(&c->known, (size_t)s->pp * 2, sizeof(*c->known)));
            c->stages = s->pp;
        }
        memset(c->known, 0, (size_t)c->stages * 2);
        c->place = place;
    }
    size_t slot = (size_t)stage * 2 + (kind == DSI_KIND_EDP);
    if (!c->known[slot]) {
        c->lay[slot] = widest_expert_group(sim, kind, stage);
        c->known[slot] = 1;
    }
    *layout_p = c->lay[slot];
    return DS_OK;
}

/* The framework's time between the operators of the pass, at its end, where
 * the costs come from a framework's trace that measured it (dsmpi's own
 * profile times its operators back to back: no gap of their own). */
static ds_status_t add_framework_gap(ds_sim_t *sim, int layer, ds_pass_t pass, const dsi_op_t *ops,
                                     size_t count, dsi_template_t *t)
{
    ds_event_key_t key;
    if (sim->costs == NULL || !dsi_pass_gap_key(ops, count, layer, pass, &key) ||
        ds_cost_table_find(sim->costs, &key) == NULL)
        return DS_OK;
    int64_t ns = 0;
    int assumed = 0;
    DSI_TRY(dsi_sim_cost(sim, &key, 0.0, 0.0, &ns, &assumed));
    int32_t o = sim->num_ops++;
    sim->op_dur[o] = ns;
    sim->op_wait[o] = 0;
    sim->op_nic[o] = 0;
    sim->op_comm[o] = false;
    sim->op_assumed[o] = (uint8_t)assumed;
    sim->op_grad[o] = 0;
    sim->op_label[o] = "framework.gap";
    t->dur = dsi_ns_add(t->dur, ns);
    t->comp = dsi_ns_add(t->comp, ns);
    return DS_OK;
}

/* `slowest`: the template of a lane holding its EP group's slowest rank
 * (full mode): its expert operators at the slowest rank's tokens, no wait
 * at the EP collectives; the others wait for it there. */
static ds_status_t template_of(ds_sim_t *sim, int layer, ds_pass_t pass, const dsi_layout_t *tp,
                               const dsi_layout_t *cp, const dsi_layout_t *ep, bool slowest,
                               int32_t *id_p)
{
    int type = dsi_layer_type(sim->model, layer);
    for (int32_t i = 0; i < sim->num_templates; i++) {
        const dsi_template_t *t = &sim->templates[i];
        if (t->type == type && t->pass == pass && dsi_layout_equal(&t->tp_layout, tp) &&
            dsi_layout_equal(&t->cp_layout, cp) && dsi_layout_equal(&t->ep_layout, ep) &&
            t->expert_slowest == slowest) {
            *id_p = i;
            return DS_OK;
        }
    }
    if (sim->num_templates == sim->templates_cap) {
        int32_t cap = sim->templates_cap ? 2 * sim->templates_cap : 16;
        DSI_TRY(dsi_realloc_array(&sim->templates, (size_t)cap, sizeof(*sim->templates)));
        sim->templates_cap = cap;
    }
    dsi_op_t ops[DSI_MAX_LAYER_OPS];
    size_t count = 0;
    DSI_TRY(
        dsi_model_layer_ops(sim->model, layer, &sim->ctx, pass, ops, DSI_ARRAY_SIZE(ops), &count));
    DSI_TRY(grow_ops(sim, (int32_t)count + 1));
    dsi_template_t t;
    memset(&t, 0, sizeof(t));
    t.layer = layer;
    t.type = type;
    t.pass = (uint8_t)pass;
    t.tp_layout = *tp;
    t.cp_layout = *cp;
    t.ep_layout = *ep;
    t.expert_slowest = slowest;
    t.op_first = sim->num_ops;
    bool tied_head = layer == DSI_PART_HEAD && pass == DS_PASS_BACKWARD &&
                     dsi_has_tied_copy(&sim->info, &sim->s);
    double variance = 0.0;   /* of the compute since the last collective, s^2 */
    int64_t expert_skew = 0; /* the slowest EP rank's extra expert time, not yet waited for */
    int64_t expert_mean = 0; /* the last expert operator's time on the mean rank */
    for (size_t i = 0; i < count; i++) {
        ds_event_key_t key = ops[i].key;
        bool comm = key.kind == DS_EVENT_COMM;
        if (comm)
            dsi_key_set_layout(&key, key.group == DS_GROUP_CP   ? cp
                                     : key.group == DS_GROUP_EP ? ep
                                                                : tp);
        int64_t ns = 0;
        int assumed = 0;
        DSI_TRY(dsi_sim_cost(sim, &key, ops[i].flops, ops[i].bytes, &ns, &assumed));
        /* What it keeps the node's interfaces busy: all of it, hidden or not. */
        int64_t nic = comm && key.nodes > 1 ? ns : 0;
        DSI_TRY(hide_behind_next(sim, ops, count, i, &ns));
        /* FLOPs: the mean rank's on every lane (the router conserves tokens). */
        if (!comm && ops[i].ep_role != DSI_EP_SLOWEST) {
            double hardware, model;
            dsi_matmul_flops(&key, ops[i].flops, &hardware, &model);
            t.mm_flops += hardware;
            t.mm_model_flops += model;
        }
        if (ops[i].ep_role == (slowest ? DSI_EP_MEAN : DSI_EP_SLOWEST)) {
            /* The other ranks wait for the slowest at the next EP collective. */
            expert_skew += slowest ? 0 : DSI_MAX(ns - expert_mean, 0);
            t.assumed |= (uint8_t)assumed;
            continue;
        }
        if (ops[i].ep_role == DSI_EP_MEAN)
            expert_mean = ns;
        int64_t wait = 0;
        if (sim->opt.collective_skew && sim->costs != NULL) {
            if (!comm) {
                variance += dsi_sim_cost_variance(sim->costs, &key);
            } else {
                /* The collective starts when its slowest member arrives. */
                wait = dsi_ns(dsi_expected_max_normal(key.group_size) * sqrt(variance));
                variance = 0.0;
            }
        }
        if (comm && key.group == DS_GROUP_EP) {
            wait += expert_skew;
            expert_skew = 0;
        }
        ns += wait;
        int32_t o = sim->num_ops++;
        sim->op_dur[o] = ns;
        sim->op_wait[o] = wait;
        sim->op_nic[o] = nic;
        sim->op_comm[o] = comm;
        sim->op_assumed[o] = (uint8_t)assumed;
        sim->op_grad[o] = ops[i].grad_params;
        sim->op_label[o] = ops[i].label;
        /* The last stage's copy of tied embeddings gets its gradient from
         * the logits' weight gradient. */
        if (tied_head && !comm && key.op == DS_OP_GEMM && (key.variant & DS_GEMM_TRANS_A)) {
            sim->op_grad[o] += dsi_vocab_share(&sim->info, sim->s.tp) * sim->info.hidden_size;
            tied_head = false;
        }
        t.dur = dsi_ns_add(t.dur, ns);
        t.wait = dsi_ns_add(t.wait, wait);
        if (!comm)
            t.comp = dsi_ns_add(t.comp, ns);
        t.assumed |= (uint8_t)assumed;
    }
    DSI_TRY(add_framework_gap(sim, layer, pass, ops, count, &t));
    t.op_count = sim->num_ops - t.op_first;
    sim->templates[sim->num_templates] = t;
    *id_p = sim->num_templates++;
    return DS_OK;
}

static ds_status_t add_part(ds_sim_t *sim, int layer, const dsi_layout_t *tp,
                            const dsi_layout_t *cp, const dsi_layout_t *ep, bool slowest)
{
    if (sim->num_parts == sim->parts_cap) {
        int32_t cap = sim->parts_cap ? 2 * sim->parts_cap : 64;
        DSI_TRY(dsi_realloc_array(&sim->part_layer, (size_t)cap, sizeof(*sim->part_layer)));
        DSI_TRY(dsi_realloc_array(&sim->part_tf, (size_t)cap, sizeof(*sim->part_tf)));
        DSI_TRY(dsi_realloc_array(&sim->part_tb, (size_t)cap, sizeof(*sim->part_tb)));
        DSI_TRY(dsi_realloc_array(&sim->part_params, (size_t)cap, sizeof(*sim->part_params)));
        DSI_TRY(dsi_realloc_array(&sim->part_rev, (size_t)cap, sizeof(*sim->part_rev)));
        sim->parts_cap = cap;
    }
    int32_t i = sim->num_parts;
    sim->part_layer[i] = layer;
    DSI_TRY(template_of(sim, layer, DS_PASS_FORWARD, tp, cp, ep, slowest, &sim->part_tf[i]));
    DSI_TRY(template_of(sim, layer, DS_PASS_BACKWARD, tp, cp, ep, slowest, &sim->part_tb[i]));
    int64_t params = dsi_model_layer_params_tp(sim->model, layer, sim->s.tp);
    if (layer == DSI_PART_HEAD && dsi_has_tied_copy(&sim->info, &sim->s))
        params += dsi_vocab_share(&sim->info, sim->s.tp) * sim->info.hidden_size;
    sim->part_params[i] = params;
    sim->part_rev[i] = 0;
    sim->num_parts++;
    return DS_OK;
}

ds_status_t dsi_sim_profile_of(ds_sim_t *sim, int stage, const dsi_layout_t *tp, int32_t *id_p)
{
    return dsi_sim_lane_profile_of(sim, stage, tp, false, id_p);
}

ds_status_t dsi_sim_lane_profile_of(ds_sim_t *sim, int stage, const dsi_layout_t *tp,
                                    bool expert_slowest, int32_t *id_p)
{
    for (int32_t i = 0; i < sim->num_profiles; i++) {
        if (sim->profiles[i].stage == stage && dsi_layout_equal(&sim->profiles[i].tp_layout, tp) &&
            sim->profiles[i].expert_slowest == expert_slowest) {
            *id_p = i;
            return DS_OK;
        }
    }
    if (sim->num_profiles == sim->profiles_cap) {
        int32_t cap = sim->profiles_cap ? 2 * sim->profiles_cap : 16;
        DSI_TRY(dsi_realloc_array(&sim->profiles, (size_t)cap, sizeof(*sim->profiles)));
        sim->profiles_cap = cap;
    }
    const ds_strategy_t *s = &sim->s;
    int v = s->vpp;
    dsi_profile_t *pr = &sim->profiles[sim->num_profiles];
    memset(pr, 0, sizeof(*pr));
    pr->stage = stage;
    pr->tp_layout = *tp;
    pr->expert_slowest = expert_slowest;
    sim->num_profiles++; /* owned from here: freed by dsi_sim_templates_reset */
    DSI_TRY(dsi_calloc((size_t)v + 1, sizeof(*pr->part_first), &pr->part_first));
    DSI_TRY(dsi_calloc((size_t)v * 2, sizeof(*pr->fused_dur), &pr->fused_dur));
    DSI_TRY(dsi_calloc((size_t)v * 2, sizeof(*pr->fused_comp), &pr->fused_comp));
    DSI_TRY(dsi_calloc((size_t)v * 2, sizeof(*pr->fused_wait), &pr->fused_wait));
    DSI_TRY(dsi_calloc((size_t)v * 2, sizeof(*pr->fused_assumed), &pr->fused_assumed));
    int L = sim->info.num_layers;
    dsi_layout_t cp = {0, 0, 0, 0, 0, 0};
    if (sim->ctx.cp > 1)
        cp = dsi_cp_stage_layout(&sim->place, sim->ctx.cp_comm, stage);
    dsi_layout_t ep = {0, 0, 0, 0, 0, 0};
    if (sim->ctx.ep > 1)
        DSI_TRY(dsi_sim_stage_expert_layout(sim, DSI_KIND_EP, stage, &ep));
    for (int c = 0; c < v; c++) {
        pr->part_first[c] = sim->num_parts;
        if (stage == 0 && c == 0)
            DSI_TRY(add_part(sim, DSI_PART_EMBEDDING, tp, &cp, &ep, expert_slowest));
        int first, n;
        ds_strategy_chunk_layers(s, L, stage, c, &first, &n);
        for (int layer = first; layer < first + n; layer++)
            DSI_TRY(add_part(sim, layer, tp, &cp, &ep, expert_slowest));
        if (stage == s->pp - 1 && c == v - 1)
            DSI_TRY(add_part(sim, DSI_PART_HEAD, tp, &cp, &ep, expert_slowest));
    }
    int32_t id = sim->num_profiles - 1;
    pr->part_first[v] = sim->num_parts;
    /* Fused sums, FLOPs, and each part's place in reverse parameter order. */
    int64_t total = 0;
    for (int32_t i = pr->part_first[0]; i < pr->part_first[v]; i++)
        total += sim->part_params[i];
    int64_t forward_pos = 0;
    for (int c = 0; c < v; c++) {
        for (int32_t i = pr->part_first[c]; i < pr->part_first[c + 1]; i++) {
            const dsi_template_t *tf = &sim->templates[sim->part_tf[i]];
            const dsi_template_t *tb = &sim->templates[sim->part_tb[i]];
            pr->fused_dur[c * 2] = dsi_ns_add(pr->fused_dur[c * 2], tf->dur);
            pr->fused_comp[c * 2] = dsi_ns_add(pr->fused_comp[c * 2], tf->comp);
            pr->fused_wait[c * 2] = dsi_ns_add(pr->fused_wait[c * 2], tf->wait);
            pr->fused_assumed[c * 2] |= tf->assumed;
            pr->fused_dur[c * 2 + 1] = dsi_ns_add(pr->fused_dur[c * 2 + 1], tb->dur);
            pr->fused_comp[c * 2 + 1] = dsi_ns_add(pr->fused_comp[c * 2 + 1], tb->comp);
            pr->fused_wait[c * 2 + 1] = dsi_ns_add(pr->fused_wait[c * 2 + 1], tb->wait);
            pr->fused_assumed[c * 2 + 1] |= tb->assumed;
            pr->mm_flops += tf->mm_flops + tb->mm_flops;
            pr->mm_model_flops += tf->mm_model_flops + tb->mm_model_flops;
            sim->part_rev[i] = total - forward_pos - sim->part_params[i];
            forward_pos += sim->part_params[i];
        }
    }
    /* Lane-level work at the iteration end. */
    int assumed = 0;
    if (sim->ctx.sp) {
        ds_event_key_t key =
            dsi_comm_step_key(s, DS_COMM_ALLREDUCE, DS_GROUP_TP, s->tp, DS_DTYPE_FP32,
                              dsi_sp_norm_params(sim->model, s, stage) * 4);
        dsi_key_set_layout(&key, tp);
        DSI_TRY(dsi_sim_cost(sim, &key, 0.0, (double)key.dims[0], &pr->sp_dur, &assumed));
        pr->sp_assumed = (uint8_t)assumed;
    }
    int64_t shard = dsi_optimizer_shard(s, dsi_stage_params(sim->model, s, stage));
    ds_event_key_t opt = dsi_optimizer_key(shard);
    DSI_TRY(dsi_sim_cost(sim, &opt, 12.0 * (double)shard, 36.0 * (double)shard, &pr->opt_dur,
                         &assumed));
    pr->opt_assumed = (uint8_t)assumed;
    DSI_TRY(dsi_sim_expert_costs(sim, stage, pr));
    *id_p = id;
    return DS_OK;
}
