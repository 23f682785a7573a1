/*
 * What the evaluated graph means: iteration boundaries, per-device busy,
 * communication (exposed vs hidden) and idle time, FLOP rates, the critical
 * path, and the per-device event lists the exports read.
 */
#include "dsi_sim.h"

#include <stdlib.h>
#include <string.h>

typedef struct span {
    int64_t a, b;
} span_t;

static int64_t node_end(const dsi_graph_t *g, int32_t i)
{
    return g->start[i] + g->dur[i];
}

ds_sim_category_t dsi_sim_node_category(const ds_sim_t *sim, int32_t i)
{
    switch ((dsi_node_kind_t)sim->g.kind[i]) {
    case DSI_N_FWD: return DS_SIM_CAT_FORWARD;
    case DSI_N_BWD:
        /* A bucket's interference on the compute stream is data-parallel work. */
        return sim->g.label[i] != 0 ? DS_SIM_CAT_DP : DS_SIM_CAT_BACKWARD;
    case DSI_N_OPT: return DS_SIM_CAT_OPTIMIZER;
    case DSI_N_XFER: return DS_SIM_CAT_PP;
    case DSI_N_DP: return DS_SIM_CAT_DP;
    case DSI_N_TP: return DS_SIM_CAT_TP;
    case DSI_N_COL: return DS_SIM_CAT_OTHER;
    case DSI_N_JOIN:
    case DSI_N_KIND_COUNT_: break;
    }
    return DS_SIM_CAT_WAIT;
}

void dsi_sim_locate(const ds_sim_t *sim, int64_t rank, int32_t *lane_p, int32_t *dp_p)
{
    ds_coords_t c = ds_strategy_coords_of(&sim->s, rank);
    *lane_p = sim->plan.columns[sim->plan.column_of[c.dp]].lane_first + c.pp;
    *dp_p = sim->s.dp > 1 ? sim->plan.dp_of[(size_t)c.pp * sim->s.tp + c.tp] : -1;
}

/* ---- per-owner node lists ---------------------------------------------------------------- */

static ds_status_t csr(int32_t owners, const int32_t *key, int32_t n, int32_t **off_p,
                       int32_t **list_p)
{
    DSI_TRY(dsi_realloc_array(off_p, (size_t)owners + 1, sizeof(**off_p)));
    int32_t *off = *off_p;
    memset(off, 0, ((size_t)owners + 1) * sizeof(*off));
    int32_t total = 0;
    for (int32_t i = 0; i < n; i++)
        if (key[i] >= 0) {
            off[key[i] + 1]++;
            total++;
        }
    for (int32_t o = 0; o < owners; o++)
        off[o + 1] += off[o];
    DSI_TRY(dsi_realloc_array(list_p, (size_t)(total ? total : 1), sizeof(**list_p)));
    int32_t *list = *list_p;
    for (int32_t i = 0; i < n; i++)
        if (key[i] >= 0)
            list[off[key[i]]++] = i;
    for (int32_t o = owners; o > 0; o--)
        off[o] = off[o - 1];
    off[0] = 0;
    return DS_OK;
}

ds_status_t dsi_sim_index_events(ds_sim_t *sim)
{
    const dsi_graph_t *g = &sim->g;
    int32_t n = g->n;
    int32_t *key = NULL;
    ds_status_t status = DS_OK;
    DSI_TRY(dsi_malloc(((size_t)n + 1) * sizeof(*key), &key));
    /* Lane nodes. */
    for (int32_t i = 0; i < n; i++) {
        uint8_t k = g->kind[i];
        key[i] = (k == DSI_N_FWD || k == DSI_N_BWD || k == DSI_N_OPT || k == DSI_N_TP) ? g->owner[i]
                                                                                       : -1;
    }
    DSI_TRY_GOTO(
        csr(sim->plan.num_lanes, key, n, &sim->results.lane_node_off, &sim->results.lane_nodes),
        status, out);
    for (int32_t i = 0; i < n; i++)
        key[i] = g->kind[i] == DSI_N_DP ? g->owner[i] : -1;
    DSI_TRY_GOTO(
        csr(sim->plan.num_dpgroups, key, n, &sim->results.dp_node_off, &sim->results.dp_node_nodes),
        status, out);
    for (int32_t i = 0; i < n; i++)
        key[i] = g->kind[i] == DSI_N_COL ? g->owner[i] : -1;
    DSI_TRY_GOTO(csr(sim->plan.num_columns, key, n, &sim->results.col_node_off,
                     &sim->results.col_node_nodes),
                 status, out);
    /* Transfers: listed under the sender, then again under the receiver. */
    {
        int32_t lanes = sim->plan.num_lanes;
        DSI_TRY_GOTO(dsi_realloc_array(&sim->results.xfer_lane_off, (size_t)lanes + 1,
                                       sizeof(*sim->results.xfer_lane_off)),
                     status, out);
        int32_t *off = sim->results.xfer_lane_off;
        memset(off, 0, ((size_t)lanes + 1) * sizeof(*off));
        int32_t total = 0;
        for (int32_t i = 0; i < n; i++) {
            if (g->kind[i] != DSI_N_XFER)
                continue;
            const dsi_lane_t *l = &sim->plan.lanes[g->owner[i]];
            int32_t peer = g->payload[i].xfer.channel == 0 ? l->next : l->prev;
            off[g->owner[i] + 1]++;
            off[peer + 1]++;
            total += 2;
        }
        for (int32_t o = 0; o < lanes; o++)
            off[o + 1] += off[o];
        DSI_TRY_GOTO(dsi_realloc_array(&sim->results.xfer_lane_nodes, (size_t)(total ? total : 1),
                                       sizeof(*sim->results.xfer_lane_nodes)),
                     status, out);
        for (int32_t i = 0; i < n; i++) {
            if (g->kind[i] != DSI_N_XFER)
                continue;
            const dsi_lane_t *l = &sim->plan.lanes[g->owner[i]];
            int32_t peer = g->payload[i].xfer.channel == 0 ? l->next : l->prev;
            sim->results.xfer_lane_nodes[off[g->owner[i]]++] = i;
            sim->results.xfer_lane_nodes[off[peer]++] = i;
        }
        for (int32_t o = lanes; o > 0; o--)
            off[o] = off[o - 1];
        off[0] = 0;
    }
out:
    dsi_free(key);
    return status;
}

/* Does lane `lane` take part in column node `i`? */
static bool in_column_node(const ds_sim_t *sim, int32_t lane, int32_t i)
{
    if (sim->g.label[i] != DSI_L_EMBEDDING)
        return true;
    int p = sim->plan.lanes[lane].p;
    return p == 0 || p == sim->s.pp - 1;
}

/* ---- interval arithmetic ------------------------------------------------------------------ */

static int by_span_start(const void *x, const void *y)
{
    int64_t a = ((const span_t *)x)->a, b = ((const span_t *)y)->a;
    return (a > b) - (a < b);
}

/* Sorts and merges spans in place; returns the merged count.  The spans come
 * nearly in order, but not always (a pipeline stage's forward and backward
 * transfers interleave over thousands of micro-batches): only a disorder is
 * sorted, in O(n log n). */
static size_t merge(span_t *s, size_t n)
{
    if (n == 0)
        return 0;
    for (size_t i = 1; i < n; i++) {
        if (s[i].a < s[i - 1].a) {
            qsort(s, n, sizeof(*s), by_span_start);
            break;
        }
    }
    size_t k = 0;
    for (size_t i = 1; i < n; i++) {
        if (s[i].a <= s[k].b) {
            if (s[i].b > s[k].b)
                s[k].b = s[i].b;
        } else {
            s[++k] = s[i];
        }
    }
    return k + 1;
}

static int64_t total_length(const span_t *s, size_t n)
{
    int64_t t = 0;
    for (size_t i = 0; i < n; i++)
        t += s[i].b - s[i].a;
    return t;
}

/* Length of merged spans `u` outside merged spans `busy`. */
static int64_t outside(const span_t *u, size_t nu, const span_t *busy, size_t nb)
{
    int64_t out = 0;
    size_t j = 0;
    for (size_t i = 0; i < nu; i++) {
        int64_t a = u[i].a, b = u[i].b, covered = 0;
        while (j < nb && busy[j].b <= a)
            j++;
        for (size_t k = j; k < nb && busy[k].a < b; k++) {
            int64_t lo = DSI_MAX(a, busy[k].a), hi = DSI_MIN(b, busy[k].b);
            if (hi > lo)
                covered += hi - lo;
        }
        out += (b - a) - covered;
    }
    return out;
}

typedef struct spanbuf {
    span_t *v;
    size_t n, cap;
} spanbuf_t;

static ds_status_t span_push(spanbuf_t *s, int64_t a, int64_t b)
{
    if (b <= a)
        return DS_OK;
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 1024;
        DSI_TRY(dsi_realloc_array(&s->v, cap, sizeof(*s->v)));
        s->cap = cap;
    }
    s->v[s->n].a = a;
    s->v[s->n].b = b;
    s->n++;
    return DS_OK;
}

/* ---- per-device numbers -------------------------------------------------------------------- */

typedef struct lane_numbers {
    int64_t compute, tp, pp, other, assumed, total;
    int64_t dp_compute_stream; /* buckets' interference on the compute stream */
    spanbuf_t busy;            /* compute stream, merged */
    spanbuf_t blocking;        /* transfers and column collectives */
} lane_numbers_t;

static ds_status_t lane_measure(ds_sim_t *sim, int32_t lane, lane_numbers_t *ln)
{
    const dsi_graph_t *g = &sim->g;
    ln->compute = ln->tp = ln->pp = ln->other = ln->assumed = ln->total = 0;
    ln->dp_compute_stream = 0;
    ln->busy.n = ln->blocking.n = 0;
    for (int32_t k = sim->results.lane_node_off[lane]; k < sim->results.lane_node_off[lane + 1];
         k++) {
        int32_t i = sim->results.lane_nodes[k];
        if (g->iter[i] != 2)
            continue;
        if (g->kind[i] == DSI_N_TP) {
            /* A collective of its own on the compute stream (the sp norms'
             * all-reduce, the expert gradients'): exposed as TP time, and
             * what overlaps it is not exposed a second time. */
            ln->tp += g->dur[i];
            DSI_TRY(span_push(&ln->busy, g->start[i], node_end(g, i)));
        } else if (g->kind[i] == DSI_N_BWD && g->label[i] != 0) {
            ln->dp_compute_stream += g->dur[i];
            DSI_TRY(span_push(&ln->busy, g->start[i], node_end(g, i)));
        } else {
            /* A layer node: compute, TP collectives and waits for the slowest
             * member before them (idle, not communication). */
            ln->compute += g->comp[i];
            ln->tp += g->dur[i] - g->comp[i] - g->wait[i];
            DSI_TRY(span_push(&ln->busy, g->start[i], node_end(g, i)));
        }
        ln->total += g->dur[i];
        if (g->flags[i] & DSI_NODE_ASSUMED)
            ln->assumed += g->dur[i];
    }
    size_t before = ln->blocking.n;
    for (int32_t k = sim->results.xfer_lane_off[lane]; k < sim->results.xfer_lane_off[lane + 1];
         k++) {
        int32_t i = sim->results.xfer_lane_nodes[k];
        if (g->iter[i] != 2)
            continue;
        DSI_TRY(span_push(&ln->blocking, g->start[i], node_end(g, i)));
        if (g->flags[i] & DSI_NODE_ASSUMED)
            ln->assumed += g->dur[i];
        ln->total += g->dur[i];
    }
    /* P2P busy time: the union of the transfers (a batched call's overlap). */
    {
        size_t n = ln->blocking.n - before;
        size_t merged = merge(ln->blocking.v + before, n);
        ln->pp = total_length(ln->blocking.v + before, merged);
        ln->blocking.n = before + merged;
    }
    int32_t column = sim->plan.lanes[lane].column;
    for (int32_t k = sim->results.col_node_off[column]; k < sim->results.col_node_off[column + 1];
         k++) {
        int32_t i = sim->results.col_node_nodes[k];
        if (g->iter[i] != 2 || !in_column_node(sim, lane, i))
            continue;
        ln->other += g->dur[i];
        ln->total += g->dur[i];
        if (g->flags[i] & DSI_NODE_ASSUMED)
            ln->assumed += g->dur[i];
        DSI_TRY(span_push(&ln->blocking, g->start[i], node_end(g, i)));
    }
    ln->busy.n = merge(ln->busy.v, ln->busy.n);
    return DS_OK;
}

static ds_status_t device_numbers(ds_sim_t *sim, int32_t lane, int t, const lane_numbers_t *ln,
                                  spanbuf_t *scratch, ds_sim_device_t *dev)
{
    const dsi_graph_t *g = &sim->g;
    const ds_strategy_t *s = &sim->s;
    const dsi_lane_t *l = &sim->plan.lanes[lane];
    int64_t T = sim->results.it_end[2] - sim->results.it_end[1];
    memset(dev, 0, sizeof(*dev));
    dev->rank = ds_strategy_rank_of(s, (ds_coords_t){t, l->d, l->p});
    dev->coords = (ds_coords_t){t, l->d, l->p};
    dev->node = dev->rank / sim->cluster.gpus_per_node;
    dev->represents = sim->plan.columns[l->column].represents;
    dev->speed_factor = sim->device_factor != NULL ? sim->device_factor[dev->rank] : 1.0;
    /* A faster member of a TP group waits for the slowest inside its
     * collectives: its compute shrinks, its TP time grows. */
    double own = (double)ln->compute * dev->speed_factor / l->factor;
    int64_t dp_busy = 0, assumed = ln->assumed, total = ln->total;
    scratch->n = 0;
    for (size_t i = 0; i < ln->blocking.n; i++)
        DSI_TRY(span_push(scratch, ln->blocking.v[i].a, ln->blocking.v[i].b));
    int32_t dp = s->dp > 1 ? sim->plan.dp_of[(size_t)l->p * s->tp + t] : -1;
    if (dp >= 0)
        for (int32_t k = sim->results.dp_node_off[dp]; k < sim->results.dp_node_off[dp + 1]; k++) {
            int32_t i = sim->results.dp_node_nodes[k];
            if (g->iter[i] != 2)
                continue;
            dp_busy += g->dur[i];
            total += g->dur[i];
            if (g->flags[i] & DSI_NODE_ASSUMED)
                assumed += g->dur[i];
            DSI_TRY(span_push(scratch, g->start[i], node_end(g, i)));
        }
    size_t merged = merge(scratch->v, scratch->n);
    int64_t beyond = outside(scratch->v, merged, ln->busy.v, ln->busy.n);
    dp_busy += ln->dp_compute_stream; /* exposed: it runs on the compute stream */
    double tp = (double)ln->tp + ((double)ln->compute - own);
    double comm = tp + (double)ln->pp + (double)ln->other + (double)dp_busy;
    double exposed = tp + (double)beyond + (double)ln->dp_compute_stream;
    dev->compute_s = own * 1e-9;
    dev->tp_s = tp * 1e-9;
    dev->pp_s = (double)ln->pp * 1e-9;
    dev->dp_s = (double)dp_busy * 1e-9;
    dev->other_s = (double)ln->other * 1e-9;
    dev->comm_s = comm * 1e-9;
    dev->comm_exposed_s = exposed * 1e-9;
    dev->comm_hidden_s = (comm - exposed) * 1e-9;
    double idle = (double)T - own - exposed;
    dev->idle_s = (idle > 0 ? idle : 0.0) * 1e-9;
    dev->assumed_share = total > 0 ? (double)assumed / (double)total : 0.0;
    dsi_sim_memory(sim, l->p, &dev->memory);
    return DS_OK;
}

/* ---- critical path --------------------------------------------------------------------------- */

static void critical_path(ds_sim_t *sim)
{
    const dsi_graph_t *g = &sim->g;
    ds_sim_critical_t *cr = &sim->results.critical;
    memset(cr, 0, sizeof(*cr));
    int64_t lo = sim->results.it_end[1], hi = sim->results.it_end[2];
    int32_t last = -1;
    for (int32_t i = 0; i < g->n; i++)
        if (g->iter[i] == 2 && node_end(g, i) == hi && (last < 0 || g->kind[i] != DSI_N_JOIN))
            last = i;
    if (last < 0)
        return;
    dsi_sim_describe_node(sim, last, cr->ends_with, sizeof(cr->ends_with));
    int64_t covered = 0, assumed = 0;
    int32_t prev_lane = -1;
    for (int32_t v = last; v >= 0 && node_end(g, v) > lo; v = g->bind[v]) {
        int64_t a = DSI_MAX(g->start[v], lo), b = DSI_MIN(node_end(g, v), hi);
        if (b <= a)
            continue;
        int64_t len = b - a;
        ds_sim_category_t cat = dsi_sim_node_category(sim, v);
        if (cat == DS_SIM_CAT_WAIT)
            continue;
        cr->events++;
        if ((g->kind[v] == DSI_N_FWD || g->kind[v] == DSI_N_BWD) && cat != DS_SIM_CAT_DP) {
            /* Split the clipped length between compute and TP in proportion. */
            double share = g->dur[v] > 0 ? (double)len / (double)g->dur[v] : 0.0;
            int64_t comp = (int64_t)((double)g->comp[v] * share);
            int64_t wait = (int64_t)((double)g->wait[v] * share);
            cr->seconds[cat] += (double)comp * 1e-9;
            cr->seconds[DS_SIM_CAT_WAIT] += (double)wait * 1e-9;
            cr->seconds[DS_SIM_CAT_TP] += (double)(len - comp - wait) * 1e-9;
        } else {
            cr->seconds[cat] += (double)len * 1e-9;
        }
        covered += len;
        if (g->flags[v] & DSI_NODE_ASSUMED)
            assumed += len;
        uint8_t k = g->kind[v];
        if (k == DSI_N_FWD || k == DSI_N_BWD || k == DSI_N_OPT || k == DSI_N_TP) {
            if (prev_lane >= 0 && g->owner[v] != prev_lane)
                cr->devices_crossed++;
            prev_lane = g->owner[v];
        }
    }
    int64_t T = hi - lo;
    cr->seconds[DS_SIM_CAT_WAIT] += (double)(T - covered > 0 ? T - covered : 0) * 1e-9;
    sim->results.summary.critical_assumed_share = T > 0 ? (double)assumed / (double)T : 0.0;
}

/* ---- entry ------------------------------------------------------------------------------------
 */

#define TIMELINE_SEED 0x7157

/* A node's identity hashed in two steps: what does not depend on the
 * iteration (kind, owner, place) in three words, one multiplication each;
 * then the iteration and the splitmix finaliser, so that twice.c's two
 * copies of a node share the first step.  The identity is equality only,
 * never written out. */
static inline uint64_t identity_word(uint64_t h, uint64_t word)
{
    h = (h ^ word) * 0x9e3779b97f4a7c15ULL;
    return h ^ h >> 32;
}

static inline uint64_t identity_base(int kind, int32_t owner, const int64_t place[4])
{
    uint64_t h = identity_word(TIMELINE_SEED, (uint64_t)kind | (uint64_t)(uint32_t)owner << 32);
    h = identity_word(h, (uint64_t)place[0] ^ (uint64_t)place[1] << 40);
    return identity_word(h, (uint64_t)place[2] ^ (uint64_t)place[3] << 32);
}

static inline uint64_t node_identity(uint64_t base, int iter)
{
    return dsi_hash_mix64(base ^ (uint64_t)iter << 56);
}

/* The timeline hash of a node starts from the hash of its identity (kind,
 * iteration, owner, place): it depends on the graph's structure only, and is
 * kept while that lasts. */
static ds_status_t hash_prefixes(ds_sim_t *sim)
{
    const dsi_graph_t *g = &sim->g;
    dsi_sim_results_t *r = &sim->results;
    if (g->same && r->hash_prefix_generation == g->generation)
        return DS_OK;
    r->hash_prefix_generation = 0;
    /* One iteration evaluated twice (twice.c): its nodes as iteration 2, then as 1. */
    int copies = sim->twice.active ? 2 : 1;
    if (r->hash_prefix_cap < copies * g->n) {
        DSI_TRY(dsi_realloc_array(&r->hash_prefix, (size_t)copies * g->n, sizeof(*r->hash_prefix)));
        r->hash_prefix_cap = copies * g->n;
    }
    for (int32_t i = 0; i < g->n; i++) {
        int64_t place[4];
        dsi_node_place(g, i, place);
        uint64_t base = identity_base(g->kind[i], g->owner[i], place);
        r->hash_prefix[i] = node_identity(base, g->iter[i]);
        if (copies == 2)
            r->hash_prefix[(size_t)g->n + i] = node_identity(base, 1);
    }
    r->hash_prefix_generation = g->generation;
    return DS_OK;
}

/* A node's hash: its identity's (prefix), then its start and its duration,
 * each through the splitmix finaliser (two multiplications a word, where
 * FNV-1a takes eight). */
static inline uint64_t node_hash(uint64_t prefix, int64_t start, int64_t dur)
{
    return dsi_hash_mix64(dsi_hash_mix64(prefix ^ (uint64_t)start) + (uint64_t)dur);
}

/* The timeline hash: the sum of every event's hash (order-free). */
static uint64_t timeline_hash(const dsi_graph_t *g, const uint64_t *prefix)
{
    uint64_t timeline = 0;
    for (int32_t i = 0; i < g->n; i++)
        timeline += g->kind[i] != DSI_N_JOIN ? node_hash(prefix[i], g->start[i], g->dur[i]) : 0;
    return timeline;
}

/* The same for twice.c's graph: each node in iteration 2 (the last
 * evaluation) and in iteration 1 (the first), where a fused first forward
 * counts as the one node iteration 1 builds. */
static uint64_t timeline_hash_twice(const ds_sim_t *sim, const uint64_t *prefix)
{
    const dsi_graph_t *g = &sim->g;
    const dsi_sim_twice_t *tw = &sim->twice;
    const uint64_t *prefix1 = prefix + g->n;
    uint64_t timeline = 0;
    int32_t f = 0;
    for (int32_t i = tw->num_carry; i < g->n; i++) {
        if (g->kind[i] == DSI_N_JOIN)
            continue;
        timeline += node_hash(prefix[i], g->start[i], g->dur[i]);
        while (f < tw->num_fused && tw->fused_first[f] + tw->fused_count[f] <= i)
            f++;
        if (f < tw->num_fused && i >= tw->fused_first[f])
            continue; /* a part of a fused node of iteration 1 */
        timeline += node_hash(prefix1[i], tw->start1[i], g->dur[i]);
    }
    for (f = 0; f < tw->num_fused; f++) {
        int32_t first = tw->fused_first[f];
        int64_t dur = 0;
        for (int32_t j = 0; j < tw->fused_count[f]; j++)
            dur = dsi_ns_add(dur, g->dur[first + j]);
        const dsi_pass_node_t *pn = &g->payload[first].pass;
        int64_t place[] = {pn->mb, pn->chunk, 0, tw->fused_count[f]};
        timeline += node_hash(node_identity(identity_base(DSI_N_FWD, g->owner[first], place), 1),
                              tw->start1[first], dur);
    }
    return timeline;
}

ds_status_t dsi_sim_timeline_hash(ds_sim_t *sim)
{
    DSI_TRY(hash_prefixes(sim));
    sim->results.summary.timeline_hash = sim->twice.active
                                             ? timeline_hash_twice(sim, sim->results.hash_prefix)
                                             : timeline_hash(&sim->g, sim->results.hash_prefix);
    sim->results.hashed = true;
    return DS_OK;
}

/* The same for twice.c's graph: iteration 1's ends from the first
 * evaluation, everything of iteration 2 from the second. */
static void summarize_twice(ds_sim_t *sim)
{
    const dsi_graph_t *g = &sim->g;
    const dsi_sim_twice_t *tw = &sim->twice;
    dsi_sim_results_t *r = &sim->results;
    r->it_end[0] = r->it_end[1] = r->it_end[2] = 0;
    r->it2_begin = INT64_MAX;
    int64_t assumed = 0, total = 0;
    for (int32_t i = tw->num_carry; i < g->n; i++) {
        r->it_end[1] = DSI_MAX(r->it_end[1], tw->start1[i] + g->dur[i]);
        r->it_end[2] = DSI_MAX(r->it_end[2], node_end(g, i));
        if (g->kind[i] != DSI_N_JOIN) {
            r->it2_begin = DSI_MIN(r->it2_begin, g->start[i]);
            total += g->dur[i];
            if (g->flags[i] & DSI_NODE_ASSUMED)
                assumed += g->dur[i];
        }
    }
    if (r->it2_begin == INT64_MAX)
        r->it2_begin = r->it_end[1];
    r->summary.graph_nodes = g->n;
    r->summary.graph_edges = g->ne;
    r->summary.assumed_share = total > 0 ? (double)assumed / (double)total : 0.0;
}

/* Iteration ends and the share of assumed time, from every node. */
static void summarize_nodes(ds_sim_t *sim)
{
    if (sim->twice.active) {
        summarize_twice(sim);
        return;
    }
    const dsi_graph_t *g = &sim->g;
    ds_sim_summary_t *sum = &sim->results.summary;
    sim->results.it_end[0] = sim->results.it_end[1] = sim->results.it_end[2] = 0;
    sim->results.it2_begin = INT64_MAX;
    int64_t assumed = 0, total = 0;
    for (int32_t i = 0; i < g->n; i++) {
        int it = g->iter[i];
        int64_t end = node_end(g, i);
        if (end > sim->results.it_end[it])
            sim->results.it_end[it] = end;
        if (it == 2 && g->kind[i] != DSI_N_JOIN) {
            if (g->start[i] < sim->results.it2_begin)
                sim->results.it2_begin = g->start[i];
            total += g->dur[i];
            if (g->flags[i] & DSI_NODE_ASSUMED)
                assumed += g->dur[i];
        }
    }
    if (sim->results.it2_begin == INT64_MAX)
        sim->results.it2_begin = sim->results.it_end[1];
    sum->graph_nodes = g->n;
    sum->graph_edges = g->ne;
    sum->assumed_share = total > 0 ? (double)assumed / (double)total : 0.0;
}

/* Throughput, FLOP rates and their share of the peak, for an iteration of Ts seconds. */
static void summary_rates(ds_sim_t *sim, double Ts)
{
    const ds_strategy_t *s = &sim->s;
    ds_sim_summary_t *sum = &sim->results.summary;
    int64_t N = sim->num_devices;
    if (Ts > 0) {
        double sequences = (double)s->gbs / sim->ctx.cp; /* s is folded: gbs x cp */
        sum->samples_per_s = sequences / Ts;
        int64_t tokens = sim->info.arch == DS_ARCH_LAYER_LIST ? 1 : sim->info.seq_len;
        sum->tokens_per_s = sequences * (double)tokens / Ts;
    }
    /* Matmul FLOPs of one iteration over every device. */
    for (int p = 0; p < s->pp; p++) {
        const dsi_profile_t *pr =
            &sim->profiles[sim->plan.lanes[sim->plan.stage_lanes[(size_t)p * sim->plan.num_columns]]
                               .prof];
        double devices = (double)s->tp * s->dp;
        sum->model_flops += (double)sim->m * pr->mm_model_flops * devices;
        sum->hardware_flops += (double)sim->m * pr->mm_flops * devices;
    }
    sum->peak_tflops = sim->opt.peak_tflops > 0           ? sim->opt.peak_tflops
                       : sim->info.dtype == DS_DTYPE_FP32 ? sim->cluster.device.peak_tflops_fp32
                                                          : sim->cluster.device.peak_tflops_bf16;
    if (Ts > 0) {
        sum->model_tflops_per_gpu = sum->model_flops / Ts / (double)N / 1e12;
        sum->hardware_tflops_per_gpu = sum->hardware_flops / Ts / (double)N / 1e12;
        if (sum->peak_tflops > 0) {
            sum->mfu = sum->model_tflops_per_gpu / sum->peak_tflops;
            sum->hfu = sum->hardware_tflops_per_gpu / sum->peak_tflops;
        }
    }
}

/* Without the timeline (search): memory per stage, nothing per device. */
static void summary_stage_memory(ds_sim_t *sim)
{
    ds_sim_summary_t *sum = &sim->results.summary;
    dsi_plan_mark_t *mark = &sim->plan_mark;
    sim->results.num_devices_out = 0;
    sum->simulated_devices = (int64_t)sim->plan.num_lanes * sim->s.tp;
    if (mark->kept && mark->memory_known) {
        sum->peak_memory_GiB = mark->peak_memory_GiB;
        sum->oom = mark->oom;
        return;
    }
    for (int p = 0; p < sim->s.pp; p++) {
        ds_sim_memory_t mem;
        dsi_sim_memory(sim, p, &mem);
        if (mem.total_B / (1024.0 * 1024.0 * 1024.0) > sum->peak_memory_GiB)
            sum->peak_memory_GiB = mem.total_B / (1024.0 * 1024.0 * 1024.0);
        sum->oom |= mem.oom;
    }
    mark->peak_memory_GiB = sum->peak_memory_GiB;
    mark->oom = sum->oom;
    mark->memory_known = true;
}

/* The numbers of every simulated device: lane by lane, tensor-parallel
 * member by member. */
static ds_status_t measure_devices(ds_sim_t *sim, size_t ndev)
{
    const ds_strategy_t *s = &sim->s;
    DSI_TRY(dsi_realloc_array(&sim->results.devices, ndev, sizeof(*sim->results.devices)));
    sim->results.num_devices_out = ndev;
    lane_numbers_t ln;
    memset(&ln, 0, sizeof(ln));
    spanbuf_t scratch = {NULL, 0, 0};
    ds_status_t status = DS_OK;
    for (int32_t lane = 0; lane < sim->plan.num_lanes && status == DS_OK; lane++) {
        status = lane_measure(sim, lane, &ln);
        for (int t = 0; t < s->tp && status == DS_OK; t++) {
            ds_sim_device_t *dev = &sim->results.devices[(size_t)lane * s->tp + t];
            /* Members of one lane in the same DP instance have the same numbers. */
            int same = -1;
            for (int u = 0; u < t && same < 0 && sim->device_factor == NULL; u++)
                if (s->dp == 1 || sim->plan.dp_of[(size_t)sim->plan.lanes[lane].p * s->tp + u] ==
                                      sim->plan.dp_of[(size_t)sim->plan.lanes[lane].p * s->tp + t])
                    same = u;
            if (same < 0) {
                status = device_numbers(sim, lane, t, &ln, &scratch, dev);
            } else {
                *dev = sim->results.devices[(size_t)lane * s->tp + same];
                dev->coords.tp = t;
                dev->rank = ds_strategy_rank_of(s, dev->coords);
                dev->node = dev->rank / sim->cluster.gpus_per_node;
            }
        }
    }
    dsi_free(ln.busy.v);
    dsi_free(ln.blocking.v);
    dsi_free(scratch.v);
    return status;
}

/* Means over all target devices (each simulated one weighs the devices it
 * represents), the peak memory and the bubble. */
static void summary_device_means(ds_sim_t *sim, double Ts)
{
    ds_sim_summary_t *sum = &sim->results.summary;
    size_t ndev = sim->results.num_devices_out;
    double weight = 0.0;
    for (size_t i = 0; i < ndev; i++) {
        const ds_sim_device_t *d = &sim->results.devices[i];
        double w = (double)d->represents;
        weight += w;
        sum->compute_s += w * d->compute_s;
        sum->comm_s += w * d->comm_s;
        sum->comm_exposed_s += w * d->comm_exposed_s;
        sum->comm_hidden_s += w * d->comm_hidden_s;
        sum->idle_s += w * d->idle_s;
        if (d->memory.total_B / (1024.0 * 1024.0 * 1024.0) > sum->peak_memory_GiB)
            sum->peak_memory_GiB = d->memory.total_B / (1024.0 * 1024.0 * 1024.0);
        sum->oom |= d->memory.oom;
    }
    if (weight > 0) {
        sum->compute_s /= weight;
        sum->comm_s /= weight;
        sum->comm_exposed_s /= weight;
        sum->comm_hidden_s /= weight;
        sum->idle_s /= weight;
    }
    sum->bubble_fraction = Ts > 0 ? sum->idle_s / Ts : 0.0;
    sum->simulated_devices = (int64_t)ndev;
}

ds_status_t dsi_sim_metrics(ds_sim_t *sim)
{
    ds_sim_summary_t *sum = &sim->results.summary;
    /* The last run's timeline, when it is this run's: what comes from the
     * nodes alone (iteration ends, assumed share, hash) holds. */
    ds_sim_summary_t last = *sum;
    memset(sum, 0, sizeof(*sum));
    if (sim->results.same_timeline) {
        sum->graph_nodes = last.graph_nodes;
        sum->graph_edges = last.graph_edges;
        sum->assumed_share = last.assumed_share;
        sum->timeline_hash = sim->results.hashed ? last.timeline_hash : 0;
    } else {
        sim->results.hashed = false;
        summarize_nodes(sim);
    }
    if (sim->opt.hash_timeline && !sim->results.hashed)
        DSI_TRY(dsi_sim_timeline_hash(sim));
    int64_t T = sim->results.it_end[2] - sim->results.it_end[1];
    double Ts = (double)T * 1e-9;
    sum->mode = sim->opt.mode;
    sum->granularity = sim->opt.granularity;
    sum->num_devices = sim->num_devices;
    sum->microbatches = sim->m;
    sum->iteration_s = Ts;
    for (size_t i = 0; i < sim->num_keys; i++) {
        sum->assumed_keys += sim->keys[i].provenance == DS_PROV_ASSUMED ||
                             sim->keys[i].provenance == DS_PROV_MODELLED;
        sum->modelled_keys += sim->keys[i].provenance == DS_PROV_MODELLED;
        bool compute = sim->keys[i].key.kind == DS_EVENT_COMPUTE;
        sum->banded_comm_keys += sim->keys[i].banded && !compute;
        sum->banded_compute_keys += sim->keys[i].banded && compute;
    }
    summary_rates(sim, Ts);
    if (sim->opt.keep_timeline) {
        DSI_TRY(dsi_sim_index_events(sim));
        DSI_TRY(measure_devices(sim, (size_t)sim->plan.num_lanes * sim->s.tp));
        summary_device_means(sim, Ts);
        critical_path(sim);
    } else {
        summary_stage_memory(sim);
    }
    sum->build_s = sim->results.build_s;
    sum->evaluate_s = sim->results.eval_s;
    return DS_OK;
}

/* ---- events of a device ------------------------------------------------------------------------
 */

static ds_status_t event_push(ds_sim_t *sim, size_t *count, const ds_sim_event_t *e)
{
    if (*count == sim->results.events_cap) {
        size_t cap = sim->results.events_cap ? 2 * sim->results.events_cap : 1024;
        DSI_TRY(dsi_realloc_array(&sim->results.events, cap, sizeof(*sim->results.events)));
        sim->results.events_cap = cap;
    }
    sim->results.events[(*count)++] = *e;
    return DS_OK;
}

static void fill_lane_event(const ds_sim_t *sim, int32_t i, ds_sim_event_t *e)
{
    const dsi_graph_t *g = &sim->g;
    memset(e, 0, sizeof(*e));
    e->id = i;
    e->iteration = g->iter[i];
    e->start_ns = g->start[i];
    e->end_ns = node_end(g, i);
    e->assumed = (g->flags[i] & DSI_NODE_ASSUMED) != 0;
    e->category = dsi_sim_node_category(sim, i);
    e->microbatch = -1;
    e->layer = -3;
    e->bucket = -1;
}

static int by_stream_start(const void *x, const void *y)
{
    const ds_sim_event_t *a = x, *b = y;
    if (a->stream != b->stream)
        return (int)a->stream - (int)b->stream;
    if (a->start_ns != b->start_ns)
        return (a->start_ns > b->start_ns) - (a->start_ns < b->start_ns);
    return (a->id > b->id) - (a->id < b->id);
}

ds_status_t ds_sim_device_events(ds_sim_t *sim, int64_t rank, const ds_sim_event_t **events_p,
                                 size_t *count_p)
{
    if (!sim->results.evaluated || !sim->opt.keep_timeline)
        return DSI_ERROR(DS_ERR_INVALID_ARG,
                         "no simulation with keep_timeline has run on this simulator");
    if (rank < 0 || rank >= sim->num_devices)
        return DSI_ERROR(DS_ERR_INVALID_ARG, "rank %lld (accepted: 0 to %lld)", (long long)rank,
                         (long long)sim->num_devices - 1);
    const dsi_graph_t *g = &sim->g;
    int32_t lane, dp;
    dsi_sim_locate(sim, rank, &lane, &dp);
    const dsi_lane_t *l = &sim->plan.lanes[lane];
    const dsi_profile_t *pr = &sim->profiles[l->prof];
    size_t count = 0;
    ds_sim_event_t e;
    for (int32_t k = sim->results.lane_node_off[lane]; k < sim->results.lane_node_off[lane + 1];
         k++) {
        int32_t i = sim->results.lane_nodes[k];
        fill_lane_event(sim, i, &e);
        e.stage = l->p;
        bool pass = g->kind[i] == DSI_N_FWD || g->kind[i] == DSI_N_BWD;
        const dsi_pass_node_t *pn = &g->payload[i].pass;
        e.chunk = pass ? pn->chunk : 0;
        if (g->kind[i] == DSI_N_TP) {
            e.stream = DS_SIM_STREAM_TP;
            e.name = dsi_node_labels[g->label[i]];
        } else {
            e.stream = DS_SIM_STREAM_COMPUTE;
            e.name = g->kind[i] == DSI_N_FWD ? "fwd"
                     : g->kind[i] == DSI_N_BWD
                         ? (g->label[i] != 0 ? "dp.overlap-interference" : "bwd")
                         : "optimizer";
            e.compute_ns = g->comp[i];
            if (g->kind[i] != DSI_N_OPT) {
                e.microbatch = pn->mb;
                int32_t part = pr->part_first[pn->chunk] + pn->part0;
                e.layer = sim->part_layer[part];
                e.num_layers = pn->nparts;
            }
        }
        DSI_TRY(event_push(sim, &count, &e));
    }
    /* Transfers, merged into the spans of the calls that posted them. */
    size_t first_pp = count;
    for (int32_t k = sim->results.xfer_lane_off[lane]; k < sim->results.xfer_lane_off[lane + 1];
         k++) {
        int32_t i = sim->results.xfer_lane_nodes[k];
        fill_lane_event(sim, i, &e);
        e.stream = DS_SIM_STREAM_PP;
        e.stage = l->p;
        e.name = "p2p";
        DSI_TRY(event_push(sim, &count, &e));
    }
    if (count > first_pp) {
        ds_sim_event_t *pp = sim->results.events + first_pp;
        size_t n = count - first_pp;
        qsort(pp, n, sizeof(*pp), by_stream_start);
        size_t k = 0;
        for (size_t i = 1; i < n; i++) {
            if (pp[i].start_ns < pp[k].end_ns && pp[i].iteration == pp[k].iteration) {
                if (pp[i].end_ns > pp[k].end_ns)
                    pp[k].end_ns = pp[i].end_ns;
                pp[k].assumed |= pp[i].assumed;
                pp[k].num_layers++;
            } else {
                pp[++k] = pp[i];
            }
        }
        count = first_pp + k + 1;
    }
    if (dp >= 0)
        for (int32_t k = sim->results.dp_node_off[dp]; k < sim->results.dp_node_off[dp + 1]; k++) {
            int32_t i = sim->results.dp_node_nodes[k];
            fill_lane_event(sim, i, &e);
            e.stream = DS_SIM_STREAM_DP;
            e.stage = l->p;
            e.bucket =
                dsi_node_is_zero_part(g, i) ? g->payload[i].zero.part : g->payload[i].bucket.bucket;
            e.name = dsi_node_labels[g->label[i]];
            DSI_TRY(event_push(sim, &count, &e));
        }
    for (int32_t k = sim->results.col_node_off[l->column];
         k < sim->results.col_node_off[l->column + 1]; k++) {
        int32_t i = sim->results.col_node_nodes[k];
        if (!in_column_node(sim, lane, i))
            continue;
        fill_lane_event(sim, i, &e);
        e.stream = DS_SIM_STREAM_OTHER;
        e.stage = l->p;
        e.name = dsi_node_labels[g->label[i]];
        DSI_TRY(event_push(sim, &count, &e));
    }
    qsort(sim->results.events, count, sizeof(*sim->results.events), by_stream_start);
    *events_p = sim->results.events;
    *count_p = count;
    return DS_OK;
}
