/*
 * The engine: node and edge arrays reused across runs, and one evaluation of
 * the whole graph as a longest-path sweep in topological order (Kahn's
 * algorithm over a successor CSR with 32-bit indices, integer ns).  Nodes
 * that never become ready lie on or behind a cycle: the cycle is extracted
 * and reported, never waited on.
 */
#include "dsi_sim.h"

#include <string.h>

const char *const dsi_node_labels[] = {
    "",
    "dp.grad-allreduce",
    "dp.grad-reduce-scatter",
    "dp.param-allgather",
    "dp.ps.push",
    "dp.ps.pull",
    "dp.zero3.param-gather",
    "dp.zero3.grad-scatter",
    "tp.sp-norm-grad-allreduce",
    "embedding.grad-allreduce",
    "overflow-check.allreduce",
    "grad-norm.allreduce",
    "edp.expert-grad",
    "dp.nic-shared",
};

_Static_assert(sizeof(dsi_node_labels) / sizeof(dsi_node_labels[0]) == DSI_L_COUNT_,
               "a name for every node label");

ds_status_t dsi_graph_grow_nodes(dsi_graph_t *g)
{
    /* Refused before it is allocated: about 90 bytes a node with its edges. */
    int64_t limit = DSI_MIN(dsi_param_int(DSI_PARAM_SIM_MAX_NODES), (int64_t)INT32_MAX - 1);
    if (g->cap >= limit)
        return DSI_ERROR(DS_ERR_OVERFLOW,
                         "the event graph exceeds %lld nodes (DS_SIM_MAX_NODES, about 90 bytes "
                         "each): simulate fewer micro-batches (a larger micro-batch or dp, a "
                         "smaller global batch), at stage level, or one device per role rather "
                         "than every device",
                         (long long)limit);
    int64_t cap = g->cap ? DSI_MIN(2 * (int64_t)g->cap, limit) : DSI_MIN(4096, limit);
    size_t n = (size_t)cap;
    DSI_TRY(dsi_realloc_array(&g->dur, n, sizeof(*g->dur)));
    DSI_TRY(dsi_realloc_array(&g->start, n, sizeof(*g->start)));
    DSI_TRY(dsi_realloc_array(&g->comp, n, sizeof(*g->comp)));
    DSI_TRY(dsi_realloc_array(&g->wait, n, sizeof(*g->wait)));
    DSI_TRY(dsi_realloc_array(&g->bind, n, sizeof(*g->bind)));
    DSI_TRY(dsi_realloc_array(&g->kind, n, sizeof(*g->kind)));
    DSI_TRY(dsi_realloc_array(&g->iter, n, sizeof(*g->iter)));
    DSI_TRY(dsi_realloc_array(&g->flags, n, sizeof(*g->flags)));
    DSI_TRY(dsi_realloc_array(&g->owner, n, sizeof(*g->owner)));
    DSI_TRY(dsi_realloc_array(&g->payload, n, sizeof(*g->payload)));
    DSI_TRY(dsi_realloc_array(&g->label, n, sizeof(*g->label)));
    DSI_TRY(dsi_realloc_array(&g->phase, n, sizeof(*g->phase)));
    g->cap = (int32_t)cap;
    return DS_OK;
}

ds_status_t dsi_graph_grow_edges(dsi_graph_t *g)
{
    int64_t cap = g->ecap ? 2 * g->ecap : 8192;
    if (cap > INT32_MAX)
        return DSI_ERROR(DS_ERR_OVERFLOW, "the event graph exceeds %d dependencies", INT32_MAX);
    DSI_TRY(dsi_realloc_array(&g->efrom, (size_t)cap, sizeof(*g->efrom)));
    DSI_TRY(dsi_realloc_array(&g->eto, (size_t)cap, sizeof(*g->eto)));
    g->ecap = cap;
    return DS_OK;
}

ds_status_t dsi_graph_reset(dsi_graph_t *g)
{
    g->n = 0;
    g->ne = 0;
    g->same = false; /* a graph built anew; a repriced one is the last (reuse.c) */
    return DS_OK;
}

void dsi_graph_free(dsi_graph_t *g)
{
    dsi_free(g->dur);
    dsi_free(g->start);
    dsi_free(g->comp);
    dsi_free(g->wait);
    dsi_free(g->bind);
    dsi_free(g->kind);
    dsi_free(g->iter);
    dsi_free(g->flags);
    dsi_free(g->owner);
    dsi_free(g->payload);
    dsi_free(g->label);
    dsi_free(g->phase);
    dsi_free(g->efrom);
    dsi_free(g->eto);
    dsi_free(g->off);
    dsi_free(g->adj);
    dsi_free(g->indeg);
    dsi_free(g->queue);
    memset(g, 0, sizeof(*g));
}

/* A cycle among the nodes Kahn's sweep never released: follow, from one of
 * them, predecessors that are also unreleased until a node repeats. */
static ds_status_t extract_cycle(const dsi_graph_t *g, int32_t **cycle_p, int32_t *len_p)
{
    ds_status_t status = DS_OK;
    int32_t n = g->n;
    int32_t *pred = NULL, *seen = NULL, *cycle = NULL;
    DSI_TRY_GOTO(dsi_malloc((size_t)n * sizeof(*pred), &pred), status, out);
    DSI_TRY_GOTO(dsi_malloc((size_t)n * sizeof(*seen), &seen), status, out);
    for (int32_t i = 0; i < n; i++) {
        pred[i] = -1;
        seen[i] = -1;
    }
    /* One unreleased predecessor per unreleased node. */
    for (int64_t e = 0; e < g->ne; e++) {
        int32_t from = g->efrom[e], to = g->eto[e];
        if (g->indeg[from] > 0 && g->indeg[to] > 0 && pred[to] < 0)
            pred[to] = from;
    }
    int32_t start = -1;
    for (int32_t i = 0; i < n && start < 0; i++)
        if (g->indeg[i] > 0)
            start = i;
    int32_t v = start, step = 0;
    while (v >= 0 && seen[v] < 0) {
        seen[v] = step++;
        v = pred[v];
    }
    if (v < 0) {
        status = DSI_ERROR(DS_ERR_INTERNAL, "unreleased events without a cycle");
        goto out;
    }
    /* v repeats: the cycle is v -> pred(v) -> ... -> v, reversed into dependency order. */
    int32_t len = 0;
    int32_t u = v;
    do {
        len++;
        u = pred[u];
    } while (u != v);
    DSI_TRY_GOTO(dsi_malloc((size_t)len * sizeof(*cycle), &cycle), status, out);
    u = v;
    for (int32_t i = len - 1; i >= 0; i--) {
        cycle[i] = u;
        u = pred[u];
    }
    *cycle_p = cycle;
    *len_p = len;
    cycle = NULL;
out:
    dsi_free(pred);
    dsi_free(seen);
    dsi_free(cycle);
    return status;
}

ds_status_t dsi_graph_note_structure(dsi_graph_t *g, bool enabled)
{
    g->same = false;
    g->order_valid = false;
    g->order_kept = enabled;
    g->generation++;
    return DS_OK;
}

static ds_status_t clock_overflow(void)
{
    return DSI_ERROR(DS_ERR_OVERFLOW,
                     "the iteration lasts longer than the simulator's clock counts "
                     "(%.0f years): the model, its batch or the device is out of scale",
                     (double)DSI_SIM_MAX_NS / 1e9 / 3.156e7);
}

/* The sweep of a graph evaluated before with this structure: the nodes in
 * the order Kahn's algorithm released them then, each start decided as it
 * was (first predecessor in that order reaching the latest end). */
/* Node u ends: each successor starts no earlier, bound to the predecessor
 * that ends last (the first one on a tie). */
static inline ds_status_t release(dsi_graph_t *g, int32_t u)
{
    int64_t end;
    if (__builtin_add_overflow(g->start[u], g->dur[u], &end) || end >= DSI_SIM_MAX_NS)
        return clock_overflow();
    for (int32_t e = g->off[u]; e < g->off[u + 1]; e++) {
        int32_t v = g->adj[e];
        if (end > g->start[v] || g->bind[v] < 0) {
            g->start[v] = end;
            g->bind[v] = u;
        }
    }
    return DS_OK;
}

/* The same starts without the binding predecessors (g->binds false). */
static inline ds_status_t release_unbound(dsi_graph_t *g, int32_t u)
{
    int64_t end;
    if (__builtin_add_overflow(g->start[u], g->dur[u], &end) || end >= DSI_SIM_MAX_NS)
        return clock_overflow();
    int64_t *start = g->start;
    for (int32_t e = g->off[u]; e < g->off[u + 1]; e++) {
        int32_t v = g->adj[e];
        start[v] = end > start[v] ? end : start[v];
    }
    return DS_OK;
}

static ds_status_t sweep_in_order(dsi_graph_t *g)
{
    return dsi_graph_sweep(g, NULL, 0);
}

ds_status_t dsi_graph_sweep(dsi_graph_t *g, const int64_t *first_starts, int32_t count)
{
    memset(g->start, 0, (size_t)g->n * sizeof(*g->start));
    if (count > 0)
        memcpy(g->start, first_starts, (size_t)count * sizeof(*g->start));
    if (!g->binds) {
        for (int32_t q = 0; q < g->n; q++)
            DSI_TRY(release_unbound(g, g->queue[q]));
        return DS_OK;
    }
    for (int32_t i = 0; i < g->n; i++)
        g->bind[i] = -1;
    for (int32_t q = 0; q < g->n; q++)
        DSI_TRY(release(g, g->queue[q]));
    return DS_OK;
}

ds_status_t dsi_graph_evaluate(dsi_graph_t *g, int32_t **cycle_p, int32_t *cycle_len_p)
{
    if (g->same && g->order_valid)
        return sweep_in_order(g);
    g->order_valid = false;
    int32_t n = g->n;
    if (g->csr_cap < n + 1) {
        size_t cap = (size_t)g->cap + 1;
        DSI_TRY(dsi_realloc_array(&g->off, cap, sizeof(*g->off)));
        DSI_TRY(dsi_realloc_array(&g->indeg, cap, sizeof(*g->indeg)));
        DSI_TRY(dsi_realloc_array(&g->queue, cap, sizeof(*g->queue)));
        g->csr_cap = (int32_t)cap;
    }
    if (g->adj_cap < g->ne) {
        DSI_TRY(dsi_realloc_array(&g->adj, (size_t)g->ecap, sizeof(*g->adj)));
        g->adj_cap = g->ecap;
    }
    int32_t *off = g->off, *adj = g->adj, *indeg = g->indeg, *queue = g->queue;
    memset(off, 0, ((size_t)n + 1) * sizeof(*off));
    memset(indeg, 0, (size_t)n * sizeof(*indeg));
    for (int64_t e = 0; e < g->ne; e++) {
        off[g->efrom[e] + 1]++;
        indeg[g->eto[e]]++;
    }
    for (int32_t i = 0; i < n; i++)
        off[i + 1] += off[i];
    /* Scatter with off[] as the fill cursor, then shift back. */
    for (int64_t e = 0; e < g->ne; e++)
        adj[off[g->efrom[e]]++] = g->eto[e];
    for (int32_t i = n; i > 0; i--)
        off[i] = off[i - 1];
    off[0] = 0;

    int32_t head = 0, tail = 0;
    for (int32_t i = 0; i < n; i++) {
        g->start[i] = 0;
        g->bind[i] = -1;
        if (indeg[i] == 0)
            queue[tail++] = i;
    }
    while (head < tail) {
        int32_t u = queue[head++];
        DSI_TRY(g->binds ? release(g, u) : release_unbound(g, u));
        for (int32_t e = off[u]; e < off[u + 1]; e++)
            if (--indeg[adj[e]] == 0)
                queue[tail++] = adj[e];
    }
    if (tail == n) {
        g->order_valid = g->order_kept && n > 0; /* kept for the graph's reuse */
        return DS_OK;
    }
    DSI_TRY(extract_cycle(g, cycle_p, cycle_len_p));
    return DS_ERR_DEADLOCK;
}
