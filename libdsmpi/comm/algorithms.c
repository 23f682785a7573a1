/* Collective algorithms as functions of bytes, group size and node spread,
 * and the tables of the communication libraries that run them. */
#include "dsi_comm.h"

#include <math.h>
#include <string.h>

/* ---- group shapes and level bandwidths ------------------------------------------------ */

void dsi_comm_shape_init(const ds_comm_model_t *model, int64_t n, int64_t nodes, int64_t r,
                         int32_t concurrency, int64_t servers, dsi_comm_shape_t *shape)
{
    const ds_cluster_t *c = &model->cluster;
    memset(shape, 0, sizeof(*shape));
    shape->n = n > 1 ? n : 1;
    nodes = nodes > 1 ? nodes : 1;
    shape->r = r < 1 ? 1 : (r > shape->n ? shape->n : r);
    shape->concurrency = concurrency > 1 ? concurrency : 1;
    shape->servers = servers;
    shape->units[0] = shape->n;
    if (nodes == 1) {
        shape->top = 0;
        shape->units[1] = 1;
        return;
    }
    shape->units[1] = nodes;
    int level = 1;
    while (level + 1 < c->num_levels && c->levels[level].span > 0 &&
           nodes > c->levels[level].span) {
        int64_t span = c->levels[level].span;
        shape->units[level + 1] = (nodes + span - 1) / span;
        level++;
    }
    shape->top = level;
    shape->units[level + 1] = 1;
}

static int nics_per_node(const ds_comm_model_t *model)
{
    int nics = model->cluster.levels[1].nics_per_node;
    return nics > 0 ? nics : model->cluster.gpus_per_node;
}

double dsi_comm_nic_share(const ds_comm_model_t *model, const dsi_comm_shape_t *shape)
{
    double nics = nics_per_node(model);
    double used = fmin((double)shape->r, nics);
    return fmin(used, nics / (double)shape->concurrency);
}

double dsi_comm_oversubscription(const ds_comm_model_t *model, int level)
{
    if (level < 2)
        return 1.0;
    double below = model->cluster.levels[level - 1].oversubscription;
    double here = model->cluster.levels[level].oversubscription;
    return fmax(1.0, fmax(below, here));
}

/* Level 0: interpolated in log(ranks per node) between the measured
 * layouts, the nearest beyond them.  Level >= 1: the nearest layout in
 * (domains spanned, ranks per node), the span weighing double (NCCL tunes
 * two nodes and more than two differently). */
static double curve_at(const dsi_comm_level_t *lv, int level, const dsi_comm_shape_t *shape,
                       double bytes)
{
    if (lv->num_curves == 0)
        return 0.0;
    if (lv->num_curves == 1)
        return dsi_comm_curve_eval(&lv->curves[0].curve, bytes);
    if (level == 0) {
        const dsi_comm_layout_curve_t *below = NULL, *above = NULL;
        for (int i = 0; i < lv->num_curves; i++) {
            const dsi_comm_layout_curve_t *c = &lv->curves[i];
            if (c->r <= shape->r && (below == NULL || c->r > below->r))
                below = c;
            if (c->r >= shape->r && (above == NULL || c->r < above->r))
                above = c;
        }
        if (below == NULL)
            return dsi_comm_curve_eval(&above->curve, bytes);
        if (above == NULL || above->r == below->r)
            return dsi_comm_curve_eval(&below->curve, bytes);
        double w = log((double)shape->r / below->r) / log((double)above->r / below->r);
        double lo = log(dsi_comm_curve_eval(&below->curve, bytes));
        double hi = log(dsi_comm_curve_eval(&above->curve, bytes));
        return exp(lo + w * (hi - lo));
    }
    const dsi_comm_layout_curve_t *best = NULL;
    double best_distance = INFINITY;
    for (int i = 0; i < lv->num_curves; i++) {
        const dsi_comm_layout_curve_t *c = &lv->curves[i];
        double d = 2.0 * fabs(log2((double)shape->units[level] / (double)c->units)) +
                   fabs(log2((double)shape->r / (double)c->r));
        if (d < best_distance) {
            best_distance = d;
            best = c;
        }
    }
    return dsi_comm_curve_eval(&best->curve, bytes);
}

double dsi_comm_level_bandwidth(const ds_comm_model_t *model, ds_comm_op_t op, int level,
                                double bytes, const dsi_comm_shape_t *shape)
{
    const dsi_comm_level_t *lv = &model->levels[dsi_comm_fit_op(op)][level];
    if (level == 0)
        return curve_at(lv, level, shape, bytes);
    /* Per interface: each of the group's interfaces carries its share of the
     * message, and runs at the rate that share ran at when measured. */
    double share = dsi_comm_nic_share(model, shape);
    double bw = curve_at(lv, level, shape, bytes / share);
    return bw * share / dsi_comm_oversubscription(model, shape->top);
}

ds_comm_op_t dsi_comm_fit_op(ds_comm_op_t op)
{
    return op == DS_COMM_PS_PUSH || op == DS_COMM_PS_PULL ? DS_COMM_SENDRECV : op;
}

double dsi_comm_terms_time(const ds_comm_model_t *model, ds_comm_op_t op,
                           const dsi_comm_shape_t *shape, const dsi_comm_terms_t *terms,
                           double bytes)
{
    const dsi_comm_level_t *lv = model->levels[dsi_comm_fit_op(op)];
    double latency = lv[0].base_s, transfer = 0.0;
    for (int level = 0; level <= shape->top; level++) {
        latency += terms->hops[level] * lv[level].hop_s;
        if (terms->volume[level] > 0.0) {
            double bw = dsi_comm_level_bandwidth(model, op, level, bytes, shape);
            transfer = fmax(transfer, bw > 0.0 ? terms->volume[level] / bw : INFINITY);
        }
    }
    return latency + transfer;
}

/* ---- NCCL's algorithms -------------------------------------------------------------------- */

static bool ring_applies(ds_comm_op_t op, const dsi_comm_shape_t *shape)
{
    return shape->n >= 2 && (op == DS_COMM_ALLREDUCE || op == DS_COMM_ALLGATHER ||
                             op == DS_COMM_REDUCE_SCATTER || op == DS_COMM_BROADCAST);
}

/* A ring visits every rank: all-reduce takes 2(n-1) steps (reduce-scatter
 * then all-gather), the others n-1; of those, the steps that leave a
 * level-(L-1) domain cross level L.  Every link of the ring carries the
 * bus volume S x F(n). */
static void ring_terms(const ds_comm_model_t *model, ds_comm_op_t op, double bytes,
                       const dsi_comm_shape_t *shape, dsi_comm_terms_t *terms)
{
    (void)model;
    memset(terms, 0, sizeof(*terms));
    double passes = op == DS_COMM_ALLREDUCE ? 2.0 : 1.0;
    double volume = bytes * ds_comm_busbw_factor(op, (int)DSI_MIN(shape->n, INT32_MAX));
    for (int level = 0; level <= shape->top; level++) {
        terms->hops[level] = passes * (double)(shape->units[level] - shape->units[level + 1]);
        if (level > 0 || shape->r >= 2)
            terms->volume[level] = volume;
    }
}

static bool tree_applies(ds_comm_op_t op, const dsi_comm_shape_t *shape)
{
    return op == DS_COMM_ALLREDUCE && shape->n >= 2;
}

static double ceil_log2(int64_t value)
{
    double bits = 0.0;
    for (int64_t v = 1; v < value; v *= 2)
        bits += 1.0;
    return bits;
}

/* Double binary tree: reduce up and broadcast down, through the chain of a
 * node's ranks and about log2(domains) hops at each level above; the
 * algorithm bandwidth is half the bus bandwidth (times the tree's
 * efficiency), so every level carries 2S / efficiency. */
static void tree_terms(const ds_comm_model_t *model, ds_comm_op_t op, double bytes,
                       const dsi_comm_shape_t *shape, dsi_comm_terms_t *terms)
{
    (void)op;
    memset(terms, 0, sizeof(*terms));
    double volume = 2.0 * bytes / model->tree_efficiency;
    terms->hops[0] = 2.0 * (double)(shape->r - 1);
    if (shape->r >= 2)
        terms->volume[0] = volume;
    for (int level = 1; level <= shape->top; level++) {
        double hops = ceil_log2(shape->units[level]) - ceil_log2(shape->units[level + 1]);
        terms->hops[level] = 2.0 * fmax(hops, 0.0);
        terms->volume[level] = volume;
    }
}

static bool direct_applies(ds_comm_op_t op, const dsi_comm_shape_t *shape)
{
    return shape->n >= 2 && (op == DS_COMM_SENDRECV || op == DS_COMM_ALLTOALL);
}

/* Send/recv: one hop on the highest level the pair crosses, S through it.
 * All-to-all: one message per peer, posted together; the peers reached
 * through level L are those outside the own level-(L-1) domain; a node's
 * ranks push (n - n/units[L])/n of their S through level L. */
static void direct_terms(const ds_comm_model_t *model, ds_comm_op_t op, double bytes,
                         const dsi_comm_shape_t *shape, dsi_comm_terms_t *terms)
{
    (void)model;
    memset(terms, 0, sizeof(*terms));
    if (op == DS_COMM_SENDRECV) {
        terms->hops[shape->top] = 1.0;
        terms->volume[shape->top] = bytes;
        return;
    }
    double n = (double)shape->n, r = (double)shape->r;
    terms->hops[0] = r - 1.0;
    if (shape->r >= 2)
        terms->volume[0] = bytes * (r - 1.0) / n;
    for (int level = 1; level <= shape->top; level++) {
        double inside_below = n / (double)shape->units[level];
        double inside = n / (double)shape->units[level + 1];
        terms->hops[level] = fmax(inside - inside_below, 0.0);
        terms->volume[level] = r * bytes * (n - inside_below) / n;
    }
}

static bool ps_applies(ds_comm_op_t op, const dsi_comm_shape_t *shape)
{
    return shape->n >= 2 && (op == DS_COMM_PS_PUSH || op == DS_COMM_PS_PULL);
}

/* Parameter server: every worker pushes (pulls) its S in `servers` shards
 * at once; a server's link takes n x S / servers.  Servers are spread
 * evenly over the group's nodes. */
static void ps_terms(const ds_comm_model_t *model, ds_comm_op_t op, double bytes,
                     const dsi_comm_shape_t *shape, dsi_comm_terms_t *terms)
{
    (void)model;
    (void)op;
    memset(terms, 0, sizeof(*terms));
    double n = (double)shape->n, r = (double)shape->r;
    double servers = shape->servers > 0 ? (double)shape->servers : n;
    double nodes = (double)shape->units[1];
    terms->hops[shape->top] = 1.0;
    if (shape->top == 0) {
        terms->volume[0] = bytes * fmax(1.0, n / servers);
        return;
    }
    double per_server_node = servers >= nodes ? ceil(servers / nodes) : 1.0;
    terms->volume[shape->top] = fmax(r * bytes, per_server_node * n * bytes / servers);
}

static bool hierarchical_applies(ds_comm_op_t op, const dsi_comm_shape_t *shape)
{
    return op == DS_COMM_ALLREDUCE && shape->r >= 2 && shape->top >= 1;
}

/* Intra-node reduce-scatter, all-reduce of each 1/r shard across nodes (the
 * r shards of a node at once, sharing its interfaces), intra-node
 * all-gather; each part as the library runs it. */
static double hierarchical_compose(const ds_comm_model_t *model, ds_comm_op_t op, double bytes,
                                   const dsi_comm_shape_t *shape)
{
    (void)op;
    dsi_comm_shape_t intra, inter;
    dsi_comm_shape_init(model, shape->r, 1, shape->r, 1, 0, &intra);
    dsi_comm_shape_init(model, shape->units[1], shape->units[1], 1,
                        (int32_t)DSI_MIN((int64_t)shape->concurrency * shape->r, INT32_MAX), 0,
                        &inter);
    ds_comm_algo_t algo;
    double ring, tree;
    double t = dsi_comm_model_time(model, DS_COMM_REDUCE_SCATTER, bytes, &intra,
                                   DS_COMM_ALGO_DIRECT, false, &algo, &ring, &tree);
    t += dsi_comm_model_time(model, DS_COMM_ALLREDUCE, bytes / (double)shape->r, &inter,
                             DS_COMM_ALGO_DIRECT, false, &algo, &ring, &tree);
    t += dsi_comm_model_time(model, DS_COMM_ALLGATHER, bytes, &intra, DS_COMM_ALGO_DIRECT, false,
                             &algo, &ring, &tree);
    return t;
}

static const dsi_comm_algo_t ring_algo = {DS_COMM_ALGO_RING, "ring", ring_applies, ring_terms,
                                          NULL};
static const dsi_comm_algo_t tree_algo = {DS_COMM_ALGO_TREE, "tree", tree_applies, tree_terms,
                                          NULL};
static const dsi_comm_algo_t direct_algo = {DS_COMM_ALGO_DIRECT, "direct", direct_applies,
                                            direct_terms, NULL};
static const dsi_comm_algo_t ps_algo = {DS_COMM_ALGO_PS, "ps", ps_applies, ps_terms, NULL};
static const dsi_comm_algo_t hierarchical_algo = {DS_COMM_ALGO_HIERARCHICAL, "hierarchical",
                                                  hierarchical_applies, NULL, hierarchical_compose};

/* NCCL picks among ring and tree for all-reduce, runs the other
 * collectives as rings and point-to-point directly; hierarchical
 * all-reduce is what MPI and Horovod layer on top, used when forced. */
static const dsi_comm_algo_t *const nccl_algos[] = {&ring_algo, &tree_algo, &direct_algo, &ps_algo,
                                                    &hierarchical_algo};
static const bool nccl_automatic[] = {true, true, true, true, false};
_Static_assert(DSI_ARRAY_SIZE(nccl_algos) <= DSI_COMM_MAX_ALGOS, "too many algorithms");

static const dsi_comm_library_t libraries[DS_COMM_LIBRARY_COUNT_] = {
    {"nccl", nccl_algos, nccl_automatic, DSI_ARRAY_SIZE(nccl_algos), NULL},
};

const dsi_comm_library_t *dsi_comm_library_get(ds_comm_library_t library)
{
    return (unsigned)library < DS_COMM_LIBRARY_COUNT_ ? &libraries[library] : NULL;
}

const dsi_comm_algo_t *dsi_comm_library_find(const dsi_comm_library_t *library, ds_comm_algo_t id)
{
    for (size_t i = 0; i < library->count; i++)
        if (library->algos[i]->id == id)
            return library->algos[i];
    return NULL;
}

const char *ds_comm_algo_name(ds_comm_algo_t algo)
{
    switch (algo) {
    case DS_COMM_ALGO_DIRECT: return "direct";
    case DS_COMM_ALGO_RING: return "ring";
    case DS_COMM_ALGO_TREE: return "tree";
    case DS_COMM_ALGO_HIERARCHICAL: return "hierarchical";
    case DS_COMM_ALGO_PS: return "ps";
    }
    return "?";
}

static double algo_time(const ds_comm_model_t *model, const dsi_comm_algo_t *algo, ds_comm_op_t op,
                        double bytes, const dsi_comm_shape_t *shape)
{
    if (algo->compose != NULL)
        return algo->compose(model, op, bytes, shape);
    dsi_comm_terms_t terms;
    algo->terms(model, op, bytes, shape, &terms);
    return dsi_comm_terms_time(model, op, shape, &terms, bytes);
}

double dsi_comm_model_time(const ds_comm_model_t *model, ds_comm_op_t op, double bytes,
                           const dsi_comm_shape_t *shape, ds_comm_algo_t forced, bool force,
                           ds_comm_algo_t *algo_p, double *ring_p, double *tree_p)
{
    const dsi_comm_library_t *lib = model->library;
    double times[DSI_COMM_MAX_ALGOS];
    int best = -1, wanted = -1;
    *ring_p = *tree_p = -1.0;
    for (size_t i = 0; i < lib->count; i++) {
        const dsi_comm_algo_t *algo = lib->algos[i];
        bool forced_here = force && algo->id == forced;
        times[i] = -1.0;
        if ((!lib->automatic[i] && !forced_here) || !algo->applies(op, shape))
            continue;
        times[i] = algo_time(model, algo, op, bytes, shape);
        if (algo->id == DS_COMM_ALGO_RING)
            *ring_p = times[i];
        if (algo->id == DS_COMM_ALGO_TREE)
            *tree_p = times[i];
        if (forced_here)
            wanted = (int)i;
        if (lib->automatic[i] && (best < 0 || times[i] < times[best]))
            best = (int)i;
    }
    if (wanted >= 0) {
        *algo_p = forced;
        return times[wanted];
    }
    if (lib->choose != NULL && best >= 0) {
        double automatic[DSI_COMM_MAX_ALGOS];
        for (size_t i = 0; i < lib->count; i++)
            automatic[i] = lib->automatic[i] ? times[i] : -1.0;
        int chosen = lib->choose(op, bytes, shape, automatic);
        if (chosen >= 0 && (size_t)chosen < lib->count && automatic[chosen] >= 0)
            best = chosen;
    }
    if (best < 0) {
        *algo_p = DS_COMM_ALGO_DIRECT;
        return 0.0;
    }
    *algo_p = lib->algos[best]->id;
    return times[best];
}
