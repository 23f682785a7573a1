/* Collective algorithms as functions of bytes, group size and node spread,
 * and the tables of the communication libraries that run them. */
#include "dsi_comm.h"
#include "dsi_ompi.h"

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
    shape->node_stride = 1;
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

void dsi_comm_shape_spread(const ds_comm_model_t *model, dsi_comm_shape_t *shape, int stride,
                           int64_t leaf_nodes)
{
    const ds_cluster_t *c = &model->cluster;
    if (stride < 2 || shape->top == 0)
        return;
    shape->node_stride = stride;
    shape->leaf_nodes = leaf_nodes;
    int64_t nodes = shape->units[1];
    int64_t extent = (nodes - 1) * stride + 1; /* from its first node to its last */
    int level = 1;
    while (level + 1 < c->num_levels && c->levels[level].span > 0 &&
           extent > c->levels[level].span) {
        int64_t span = c->levels[level].span;
        shape->units[level + 1] = DSI_MIN((extent + span - 1) / span, nodes);
        level++;
    }
    shape->top = level;
    shape->units[level + 1] = 1;
}

bool dsi_comm_spans_job(ds_comm_op_t op, int64_t nodes)
{
    return dsi_comm_fit_op(op) == DS_COMM_SENDRECV && nodes >= 2;
}

void dsi_comm_shape_span(const ds_comm_model_t *model, dsi_comm_shape_t *shape, int64_t span_nodes)
{
    const ds_cluster_t *c = &model->cluster;
    if (shape->top == 0 || span_nodes <= shape->units[1])
        return;
    shape->units[1] = span_nodes;
    for (int level = 1; level < shape->top; level++)
        if (c->levels[level].span > 0)
            shape->units[level + 1] =
                DSI_MAX(shape->units[level + 1],
                        (span_nodes + c->levels[level].span - 1) / c->levels[level].span);
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
                       double bytes, int64_t *units_p)
{
    if (units_p != NULL)
        *units_p = lv->num_curves > 0 ? lv->curves[0].units : 1;
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
    /* Between two spans measured for that layout: in log(span), as the
     * congestion fitted between them is per doubling. */
    const dsi_comm_layout_curve_t *below = NULL, *above = NULL;
    int64_t target = shape->units[level];
    for (int i = 0; i < lv->num_curves; i++) {
        const dsi_comm_layout_curve_t *c = &lv->curves[i];
        if (c->r != best->r || c->curve.count == 0)
            continue;
        if (c->units < target && (below == NULL || c->units > below->units))
            below = c;
        if (c->units > target && (above == NULL || c->units < above->units))
            above = c;
    }
    if (below != NULL && above != NULL) {
        double w = log((double)target / below->units) / log((double)above->units / below->units);
        double lo = log(dsi_comm_curve_eval(&below->curve, bytes));
        double hi = log(dsi_comm_curve_eval(&above->curve, bytes));
        if (units_p != NULL)
            *units_p = target;
        return exp(lo + w * (hi - lo));
    }
    if (units_p != NULL)
        *units_p = best->units;
    return dsi_comm_curve_eval(&best->curve, bytes);
}

double dsi_comm_level_bandwidth(const ds_comm_model_t *model, ds_comm_op_t op, int level,
                                double bytes, const dsi_comm_shape_t *shape)
{
    const dsi_comm_level_t *lv = &model->levels[dsi_comm_fit_op(op)][level];
    if (level == 0)
        return curve_at(lv, level, shape, bytes, NULL);
    /* Per interface: each of the group's interfaces carries its share of the
     * message, and runs at the rate that share ran at when measured; less
     * the congestion of every doubling of the span beyond the curve's. */
    double share = dsi_comm_nic_share(model, shape);
    int64_t units = 1;
    double bw = curve_at(lv, level, shape, bytes / share, &units);
    /* Two domains are what the nominal or measured bandwidth holds for;
     * doublings up to the widest span measured lose the fitted share, those
     * beyond it congestion_beyond. */
    double measured = fmax((double)units, 2.0), target = (double)shape->units[level];
    if (model->library->congestion && target > measured) {
        double widest = fmax((double)lv->widest_units, measured);
        double inside = log2(fmin(target, widest) / measured);
        double beyond = target > widest ? log2(target / widest) : 0.0;
        bw *= pow(1.0 - lv->congestion, inside) * pow(1.0 - lv->congestion_beyond, beyond);
    }
    return bw * share / dsi_comm_oversubscription(model, shape->top);
}

ds_comm_op_t dsi_comm_fit_op(ds_comm_op_t op)
{
    return op == DS_COMM_PS_PUSH || op == DS_COMM_PS_PULL ? DS_COMM_SENDRECV : op;
}

double dsi_comm_proto_hop_extra_s(const dsi_comm_terms_t *terms, int proto, int level)
{
    if (terms->protos == NULL || proto < 0 || proto >= terms->num_protos)
        return 0.0;
    const dsi_comm_proto_t *reference =
        terms->reference != NULL ? terms->reference : &terms->protos[0];
    int where = level > 0 ? 1 : 0;
    return fmax(terms->protos[proto].hop_us[where] - reference->hop_us[where], 0.0) * 1e-6;
}

double dsi_comm_proto_efficiency(const dsi_comm_terms_t *terms, int proto)
{
    if (terms->protos == NULL || proto < 0 || proto >= terms->num_protos)
        return 1.0;
    return terms->protos[proto].bw_efficiency;
}

double dsi_comm_proto_mid_size(const dsi_comm_terms_t *terms, int proto, double bytes)
{
    if (terms->protos == NULL || proto < 0 || proto >= terms->num_protos || !(bytes > 0))
        return 1.0;
    const dsi_comm_proto_t *p = &terms->protos[proto];
    if (p->mid_size == NULL || p->num_mid_size == 0)
        return 1.0;
    double x = log2(bytes);
    const dsi_comm_mid_size_t *k = p->mid_size;
    if (x <= k[0].log2_bytes)
        return k[0].share;
    for (int i = 1; i < p->num_mid_size; i++)
        if (x <= k[i].log2_bytes) {
            double w = (x - k[i - 1].log2_bytes) / (k[i].log2_bytes - k[i - 1].log2_bytes);
            return k[i - 1].share + w * (k[i].share - k[i - 1].share);
        }
    return k[p->num_mid_size - 1].share;
}

double dsi_comm_proto_latency(const ds_comm_model_t *model, ds_comm_op_t op,
                              const dsi_comm_terms_t *terms, int proto, int below)
{
    const dsi_comm_level_t *lv = model->levels[dsi_comm_fit_op(op)];
    double latency = lv[0].base_s;
    for (int level = 0; level < below; level++)
        latency += terms->hops[level] *
                   (lv[level].hop_s + dsi_comm_proto_hop_extra_s(terms, proto, level));
    return latency;
}

double dsi_comm_level_nominal(const ds_comm_model_t *model, int level,
                              const dsi_comm_shape_t *shape)
{
    double bw = model->cluster.levels[level].bandwidth_GBps * 1e9;
    if (level == 0)
        return bw;
    return bw * dsi_comm_nic_share(model, shape) / dsi_comm_oversubscription(model, shape->top);
}

double dsi_comm_proto_bandwidth(const ds_comm_model_t *model, const dsi_comm_terms_t *terms,
                                int proto, int level, const dsi_comm_shape_t *shape, double bw,
                                double bytes)
{
    double efficiency = dsi_comm_proto_efficiency(terms, proto);
    double mid = dsi_comm_proto_mid_size(terms, proto, bytes);
    if (efficiency >= 1.0)
        return bw * mid;
    return efficiency * fmin(bw, dsi_comm_level_nominal(model, level, shape)) * mid;
}

double dsi_comm_terms_time_proto(const ds_comm_model_t *model, ds_comm_op_t op,
                                 const dsi_comm_shape_t *shape, const dsi_comm_terms_t *terms,
                                 double bytes, int *proto_p)
{
    double bw[DS_MAX_NET_LEVELS];
    for (int level = 0; level <= shape->top; level++)
        bw[level] = terms->volume[level] > 0.0
                        ? dsi_comm_level_bandwidth(model, op, level, bytes, shape)
                        : 0.0;
    int count = terms->protos != NULL && terms->num_protos > 0 ? terms->num_protos : 1;
    double best = INFINITY;
    int best_proto = 0;
    for (int proto = 0; proto < count; proto++) {
        double latency = dsi_comm_proto_latency(model, op, terms, proto, shape->top + 1);
        double transfer = 0.0;
        for (int level = 0; level <= shape->top; level++) {
            if (terms->volume[level] <= 0.0)
                continue;
            double rate =
                dsi_comm_proto_bandwidth(model, terms, proto, level, shape, bw[level], bytes);
            transfer = fmax(transfer, rate > 0.0 ? terms->volume[level] / rate : INFINITY);
        }
        if (latency + transfer < best) {
            best = latency + transfer;
            best_proto = proto;
        }
    }
    if (proto_p != NULL)
        *proto_p = best_proto;
    return best;
}

double dsi_comm_terms_time(const ds_comm_model_t *model, ds_comm_op_t op,
                           const dsi_comm_shape_t *shape, const dsi_comm_terms_t *terms,
                           double bytes)
{
    return dsi_comm_terms_time_proto(model, op, shape, terms, bytes, NULL);
}

/* ---- NCCL's algorithms -------------------------------------------------------------------- */

/* NCCL's protocols per algorithm: LL (8-byte stores, half of them flags),
 * LL128 (128-byte lines, 8 bytes of flags), Simple (chunks behind fences).
 * Efficiencies are the share of the fitted (Simple) bandwidth a protocol
 * reaches, the fitted one capped at the level's nominal bandwidth; the
 * per-hop latencies (us, NVLink and network) are priors: a protocol's hop
 * costs the fitted hop (the smallest sizes', LL's) plus its prior over LL's. */
static const dsi_comm_proto_t ring_protos[] = {
    /* LL: bus bandwidth x 1/4 across nodes; hwLat NVLink 0.6, NET 2.7
     * (NVIDIA/nccl src/graph/tuning.cc, ring row) */
    {"LL", 0.25, {0.6, 2.7}, NULL, 0},
    /* LL128: 120 of 128 bytes are data, x 0.95 in tuning.cc; hwLat NVLink
     * 1.9, NET 4.0 (tuning.cc, ring row) */
    {"LL128", 0.95 * 120.0 / 128.0, {1.9, 4.0}, NULL, 0},
    /* Simple: the full bus bandwidth; hwLat NVLink 3.4, NET 14 (tuning.cc, ring row) */
    {"Simple", 1.0, {3.4, 14.0}, NULL, 0},
};

/* Trees fall short of their bandwidth at mid sizes, most at 128 KiB - 2 MiB
 * (too few chunks per channel to fill the pipeline up and down the tree);
 * NCCL's tuning model derates them by a static per-size table
 * (tuning.cc, "trees are not perfectly sticking to the model for medium
 * sizes").  The knots below follow its shape per protocol, coarsened:
 * log2(bytes), share kept. */
static const dsi_comm_mid_size_t tree_ll_mid[] = {{10, 1.0}, {12, 0.8}, {15, 0.7}, {17, 0.5},
                                                  {19, 0.4}, {22, 0.7}, {25, 1.0}};
static const dsi_comm_mid_size_t tree_ll128_mid[] = {{11, 1.0}, {13, 0.8}, {15, 0.7}, {16, 0.6},
                                                     {21, 0.6}, {22, 0.8}, {23, 0.9}, {27, 1.0}};
static const dsi_comm_mid_size_t tree_simple_mid[] = {{12, 0.9}, {15, 0.7}, {17, 0.5}, {20, 0.5},
                                                      {23, 0.8}, {25, 0.7}, {27, 0.9}, {29, 1.0}};

static const dsi_comm_proto_t tree_protos[] = {
    /* LL: bus bandwidth / 3.8 on trees; hwLat NVLink 0.6, NET 5.0
     * (tuning.cc, tree row) */
    {"LL", 1.0 / 3.8, {0.6, 5.0}, tree_ll_mid, (int)DSI_ARRAY_SIZE(tree_ll_mid)},
    /* LL128: 120 of 128 bytes are data; hwLat NVLink 1.25, NET 8.5
     * (tuning.cc, tree row) */
    {"LL128", 120.0 / 128.0, {1.25, 8.5}, tree_ll128_mid, (int)DSI_ARRAY_SIZE(tree_ll128_mid)},
    /* Simple: hwLat NVLink 4, NET 14 (tuning.cc, tree row) */
    {"Simple", 1.0, {4.0, 14.0}, tree_simple_mid, (int)DSI_ARRAY_SIZE(tree_simple_mid)},
};
_Static_assert(DSI_ARRAY_SIZE(ring_protos) <= DSI_COMM_MAX_PROTOS, "too many protocols");
_Static_assert(DSI_ARRAY_SIZE(tree_protos) <= DSI_COMM_MAX_PROTOS, "too many protocols");

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
    terms->protos = ring_protos;
    terms->num_protos = (int)DSI_ARRAY_SIZE(ring_protos);
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
    terms->protos = tree_protos;
    terms->num_protos = (int)DSI_ARRAY_SIZE(tree_protos);
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

static const dsi_comm_algo_t ring_algo = {DS_COMM_ALGO_RING, "ring", ring_applies,
                                          ring_terms,        NULL,   NULL};
static const dsi_comm_algo_t tree_algo = {DS_COMM_ALGO_TREE, "tree", tree_applies,
                                          tree_terms,        NULL,   NULL};
static const dsi_comm_algo_t direct_algo = {DS_COMM_ALGO_DIRECT, "direct", direct_applies,
                                            direct_terms,        NULL,     NULL};
static const dsi_comm_algo_t ps_algo = {DS_COMM_ALGO_PS, "ps", ps_applies, ps_terms, NULL, NULL};
static const dsi_comm_algo_t hierarchical_algo = {DS_COMM_ALGO_HIERARCHICAL, "hierarchical",
                                                  hierarchical_applies,      NULL,
                                                  hierarchical_compose,      NULL};

/* ---- NCCL's algorithms on declared hardware ----------------------------------------------
 * NVLS, CollNet and PAT run the Simple protocol only.  Their per-hop
 * latencies are NCCL's priors (hwLat, Simple column: NVLink, network), priced
 * over the ring's LL row, whose latency the fitted hop is.  They enter NCCL's
 * choice only where the cluster file declares the hardware (or, for PAT, the
 * NCCL version) and are not used to fit the levels.  Their numbers are NCCL
 * 2.2x's tuning tables (src/graph/tuning.cc; src/tuning/ in later releases)
 * as public analyses of them report (e.g. "Demystifying NCCL", arXiv
 * 2507.04786): priors, not checked against every release; nvlsEfficiency,
 * PAT's 0.75 and the network hwLat of NVLS_TREE (20.9), CollNetDirect (31)
 * and PAT (14) were seen in more than one of them. */

/* NVLS: hwLat NVLink 25 (NVLS), network 20.9 (NVLS_TREE). */
static const dsi_comm_proto_t nvls_protos[] = {{"Simple", 1.0, {25.0, 20.9}, NULL, 0}};
/* NVLS bandwidth efficiency: 0.85 on Hopper, 0.74 on Blackwell (nvlsEfficiency). */
#define NVLS_EFFICIENCY_HOPPER 0.85
#define NVLS_EFFICIENCY_BLACKWELL 0.74
/* CollNet (direct): hwLat NVLink 3.7; network 31 for one reduction through
 * the switches (CollNetDirect), taken here as two traversals (up, down) of
 * one switch level at 15.5 each: that split is this model's assumption. */
static const dsi_comm_proto_t collnet_protos[] = {{"Simple", 1.0, {3.7, 15.5}, NULL, 0}};
/* CollNet bus bandwidth x 0.9. */
#define COLLNET_EFFICIENCY 0.9
/* PAT: network latency hwLat 14 / 3.5 per step; NVLink 4.0 (the PAT row and
 * its latency formula). */
static const dsi_comm_proto_t pat_protos[] = {{"Simple", 1.0, {4.0, 14.0 / 3.5}, NULL, 0}};
/* PAT bus bandwidth x 0.75, and 2.8 us per rank added to its latency. */
#define PAT_EFFICIENCY 0.75
#define PAT_US_PER_RANK 2.8

static double nvls_efficiency(const ds_comm_model_t *model)
{
    return strncmp(model->cluster.device.name, "b200", 4) == 0 ? NVLS_EFFICIENCY_BLACKWELL
                                                               : NVLS_EFFICIENCY_HOPPER;
}

static double algo_terms_time(const ds_comm_model_t *model, ds_comm_op_t op, double bytes,
                              const dsi_comm_shape_t *shape, const dsi_comm_terms_t *terms)
{
    return dsi_comm_terms_time(model, op, shape, terms, bytes);
}

static bool nvls_applies(ds_comm_op_t op, const dsi_comm_shape_t *shape)
{
    return op == DS_COMM_ALLREDUCE && shape->r >= 2;
}

static bool nvls_declared(const ds_comm_model_t *model, const dsi_comm_shape_t *shape)
{
    (void)shape;
    return model->cluster.levels[0].nvls;
}

/* NVLS all-reduce: each device hands its S to the NVSwitch, which reduces
 * and multicasts; inside a node one switch operation (one hop) and, per
 * device, S (r-1)/r over NVLink at the NVLS efficiency (half the ring's
 * 2S (r-1)/r).  Across nodes (NCCL's NVLS_TREE) the node's result goes
 * through the double binary tree: 2 log2(domains) hops and 2S / tree
 * efficiency at each network level, as the tree. */
static double nvls_compose(const ds_comm_model_t *model, ds_comm_op_t op, double bytes,
                           const dsi_comm_shape_t *shape)
{
    dsi_comm_terms_t terms;
    memset(&terms, 0, sizeof(terms));
    double r = (double)shape->r;
    terms.hops[0] = 1.0;
    terms.volume[0] = bytes * (r - 1.0) / r / nvls_efficiency(model);
    for (int level = 1; level <= shape->top; level++) {
        double hops = ceil_log2(shape->units[level]) - ceil_log2(shape->units[level + 1]);
        terms.hops[level] = 2.0 * fmax(hops, 0.0);
        terms.volume[level] = 2.0 * bytes / model->tree_efficiency;
    }
    terms.protos = nvls_protos;
    terms.num_protos = (int)DSI_ARRAY_SIZE(nvls_protos);
    terms.reference = &ring_protos[0];
    return algo_terms_time(model, op, bytes, shape, &terms);
}

static bool collnet_applies(ds_comm_op_t op, const dsi_comm_shape_t *shape)
{
    return op == DS_COMM_ALLREDUCE && shape->top >= 1;
}

/* Every network level the group crosses reduces in its switches. */
static bool collnet_declared(const ds_comm_model_t *model, const dsi_comm_shape_t *shape)
{
    for (int level = 1; level <= shape->top; level++)
        if (!model->cluster.levels[level].sharp)
            return false;
    return true;
}

/* CollNet all-reduce (in-network reduction, InfiniBand SHARP): inside a
 * node a direct reduce-scatter and all-gather over NVLink (one hop each,
 * 2S (r-1)/r per device); each node sends its S up the switches once and
 * receives the result once, S / 0.9 per node at every network level (the
 * ring's is about 2S), and the latency is one traversal up and one down per
 * switch level crossed, whatever the node count. */
static double collnet_compose(const ds_comm_model_t *model, ds_comm_op_t op, double bytes,
                              const dsi_comm_shape_t *shape)
{
    dsi_comm_terms_t terms;
    memset(&terms, 0, sizeof(terms));
    double r = (double)shape->r;
    if (shape->r >= 2) {
        terms.hops[0] = 2.0;
        terms.volume[0] = 2.0 * bytes * (r - 1.0) / r;
    }
    for (int level = 1; level <= shape->top; level++) {
        terms.hops[level] = 2.0;
        terms.volume[level] = bytes / COLLNET_EFFICIENCY;
    }
    terms.protos = collnet_protos;
    terms.num_protos = (int)DSI_ARRAY_SIZE(collnet_protos);
    terms.reference = &ring_protos[0];
    return algo_terms_time(model, op, bytes, shape, &terms);
}

static bool pat_applies(ds_comm_op_t op, const dsi_comm_shape_t *shape)
{
    return (op == DS_COMM_ALLGATHER || op == DS_COMM_REDUCE_SCATTER) && shape->r == 1 &&
           shape->top >= 1;
}

static bool pat_declared(const ds_comm_model_t *model, const dsi_comm_shape_t *shape)
{
    (void)shape;
    return model->cluster.pat;
}

/* PAT (all-gather and reduce-scatter at one device per node, NCCL 2.23+):
 * log2(n) steps instead of the ring's n-1, about log2(domains) of them at
 * each level, plus NCCL's 2.8 us per rank; the ring's bus volume
 * S (n-1)/n at the PAT efficiency. */
static double pat_compose(const ds_comm_model_t *model, ds_comm_op_t op, double bytes,
                          const dsi_comm_shape_t *shape)
{
    dsi_comm_terms_t terms;
    memset(&terms, 0, sizeof(terms));
    double volume = bytes * ds_comm_busbw_factor(op, (int)DSI_MIN(shape->n, INT32_MAX));
    for (int level = 1; level <= shape->top; level++) {
        double hops = ceil_log2(shape->units[level]) - ceil_log2(shape->units[level + 1]);
        terms.hops[level] = fmax(hops, 0.0);
        terms.volume[level] = volume / PAT_EFFICIENCY;
    }
    terms.protos = pat_protos;
    terms.num_protos = (int)DSI_ARRAY_SIZE(pat_protos);
    terms.reference = &ring_protos[0];
    return algo_terms_time(model, op, bytes, shape, &terms) +
           PAT_US_PER_RANK * 1e-6 * (double)shape->n;
}

static const dsi_comm_algo_t nvls_algo = {DS_COMM_ALGO_NVLS, "nvls",       nvls_applies, NULL,
                                          nvls_compose,      nvls_declared};
static const dsi_comm_algo_t collnet_algo = {
    DS_COMM_ALGO_COLLNET, "collnet", collnet_applies, NULL, collnet_compose, collnet_declared};
static const dsi_comm_algo_t pat_algo = {DS_COMM_ALGO_PAT, "pat",       pat_applies, NULL,
                                         pat_compose,      pat_declared};

/* NCCL picks among ring and tree for all-reduce (and NVLS and CollNet where
 * the cluster has them), runs the other collectives as rings (or PAT) and
 * point-to-point directly; hierarchical all-reduce is what MPI and Horovod
 * layer on top, used when forced. */
static const dsi_comm_algo_t *const nccl_algos[] = {&ring_algo,    &tree_algo,         &direct_algo,
                                                    &ps_algo,      &hierarchical_algo, &nvls_algo,
                                                    &collnet_algo, &pat_algo};
static const bool nccl_automatic[] = {true, true, true, true, false, true, true, true};
_Static_assert(DSI_ARRAY_SIZE(nccl_algos) <= DSI_COMM_MAX_ALGOS, "too many algorithms");

/* ---- Open MPI's algorithms ------------------------------------------------------------------
 * Composed step by step from the send/recv fit of each level (comm.h). */

/* One point-to-point message of `m` bytes between members whose highest
 * common level is `level`, at `share` (<= 1) of the per-flow bandwidth:
 * the measured pair at that level (interpolated between its sizes; above
 * level 1 with the latency the levels add), else the fitted curve; the
 * bandwidth part slowed by the share. */
static double p2p_time(const ds_comm_model_t *model, int level, double m, double share)
{
    const dsi_comm_level_t *lv = model->levels[DS_COMM_SENDRECV];
    dsi_comm_shape_t pair;
    dsi_comm_shape_init(model, 2, level == 0 ? 1 : 2, level == 0 ? 2 : 1, 1, 0, &pair);
    double bw = curve_at(&lv[level], level, &pair, m, NULL);
    if (!(bw > 0.0))
        return INFINITY;
    const dsi_comm_series_t *measured = model->p2p[level == 0 ? 0 : 1];
    double t = measured != NULL ? dsi_comm_series_time(measured, m) : -1.0;
    if (t > 0.0 && level >= 2)
        t += fmax(lv[level].hop_s - lv[1].hop_s, 0.0);
    if (!(t > 0.0))
        t = lv[0].base_s + lv[level].hop_s + m / bw;
    share = fmin(share, 1.0);
    return t + (share < 1.0 ? m / bw * (1.0 / share - 1.0) : 0.0);
}

static double nodes_per_leaf(const ds_comm_model_t *model)
{
    int span = model->cluster.levels[1].span;
    return span > 0 ? (double)span : INFINITY;
}

/* Nodes of a spread group's leaf whose flows leave it with the group's. */
static double spread_leaf_nodes(const ds_comm_model_t *model, const dsi_comm_shape_t *shape)
{
    return shape->leaf_nodes > 0 ? fmin((double)shape->leaf_nodes, nodes_per_leaf(model))
                                 : nodes_per_leaf(model);
}

/* The level a step between members d apart crosses (members fill nodes in
 * order, r per node; nodes fill leaves in order). */
static int step_level(const ds_comm_model_t *model, const dsi_comm_shape_t *shape, int64_t d)
{
    if (d < shape->r || shape->top == 0)
        return 0;
    double node_distance = (double)(d / shape->r) * (double)shape->node_stride;
    int level = 1;
    while (level < shape->top && node_distance >= nodes_per_leaf(model))
        level++;
    return level;
}

/* Bandwidth share of a flow leaving its node when `node_flows` flows leave
 * each node and `leaf_flows` each leaf (level >= 2 only). */
static double flow_share(const ds_comm_model_t *model, int level, double node_flows,
                         double leaf_flows)
{
    double nics = nics_per_node(model);
    double share = fmin(1.0, nics / fmax(node_flows, 1.0));
    if (level >= 2) {
        double capacity = nodes_per_leaf(model) * (double)model->cluster.gpus_per_node /
                          dsi_comm_oversubscription(model, level);
        share = fmin(share, fmin(1.0, capacity / fmax(leaf_flows, 1.0)));
    }
    return share;
}

/* Every member exchanges `m` bytes with the member `d` away, all at once. */
static double step_time(const ds_comm_model_t *model, const dsi_comm_shape_t *shape, int64_t d,
                        double m)
{
    int level = step_level(model, shape, d);
    if (level == 0)
        return p2p_time(model, 0, m, 1.0);
    double c = (double)shape->concurrency;
    double node_flows = (double)shape->r * c;
    double leaf_nodes = fmin((double)shape->units[1], nodes_per_leaf(model));
    if (shape->node_stride > 1) /* the nodes between are other groups doing the same */
        leaf_nodes = spread_leaf_nodes(model, shape);
    double leaf_flows = node_flows * leaf_nodes;
    return p2p_time(model, level, m, flow_share(model, level, node_flows, leaf_flows));
}

/* Every member sends `m` bytes to the next around the ring, all at once: one
 * flow per node (and per leaf) leaves it. */
static double ring_step_time(const ds_comm_model_t *model, const dsi_comm_shape_t *shape, double m)
{
    double t = shape->r >= 2 ? p2p_time(model, 0, m, 1.0) : 0.0;
    if (shape->top >= 1) {
        /* One flow per group leaves each node, and each leaf: with the
         * group's nodes `stride` apart, the groups between them too. */
        double c = (double)shape->concurrency;
        double leaf_flows = c * fmin((double)shape->node_stride, spread_leaf_nodes(model, shape));
        t = fmax(t, p2p_time(model, shape->top, m, flow_share(model, shape->top, c, leaf_flows)));
    }
    return t;
}

static int64_t floor_pow2(int64_t n)
{
    int64_t p = 1;
    while (2 * p <= n)
        p *= 2;
    return p;
}

/* One rank's `count` messages of `block` bytes through a link of `level`
 * (its NVLink port, or its interface for level >= 1), posted at once: the
 * first costs a whole message (latency and protocol: the eager/rendezvous
 * switch of small blocks shows there), each further one its transfer at the
 * bandwidth a stream of them all reaches, slowed by the link's share. */
static double stream_time(const ds_comm_model_t *model, int level, int64_t count, double block,
                          double share)
{
    if (count <= 0)
        return 0.0;
    const dsi_comm_level_t *lv = model->levels[DS_COMM_SENDRECV];
    dsi_comm_shape_t pair;
    dsi_comm_shape_init(model, 2, level == 0 ? 1 : 2, level == 0 ? 2 : 1, 1, 0, &pair);
    double bw = curve_at(&lv[level], level, &pair, (double)count * block, NULL);
    if (!(bw > 0.0))
        return INFINITY;
    return p2p_time(model, level, block, share) +
           (double)(count - 1) * block / (bw * fmin(share, 1.0));
}

/* Open MPI's linear all-to-all (`bytes` = one rank's buffer): every rank
 * posts its n-1 blocks at once, so each link streams its own: r-1 blocks
 * through the rank's NVLink port, the n-r to other nodes through its
 * interface (interfaces shared when the node's flows outnumber them; the
 * farthest level the group spans prices them).  Ranks do not wait for each
 * other's steps, unlike the pairwise exchange. */
static double ompi_linear_alltoall(const ds_comm_model_t *model, double bytes,
                                   const dsi_comm_shape_t *shape)
{
    double block = bytes / (double)shape->n;
    double t = stream_time(model, 0, shape->r - 1, block, 1.0);
    if (shape->top >= 1) {
        double c = (double)shape->concurrency;
        double node_flows = (double)shape->r * c;
        double leaf_nodes = shape->node_stride > 1
                                ? spread_leaf_nodes(model, shape)
                                : fmin((double)shape->units[1], nodes_per_leaf(model));
        double share = flow_share(model, shape->top, node_flows, node_flows * leaf_nodes);
        t = fmax(t, stream_time(model, shape->top, shape->n - shape->r, block, share));
    }
    return t;
}

/* Open MPI's algorithm `algo` for `op` of `bytes` (the key's size). */
static double ompi_time(const ds_comm_model_t *model, ds_comm_op_t op, dsi_ompi_algo_t algo,
                        double bytes, const dsi_comm_shape_t *shape)
{
    int64_t n = shape->n, p = floor_pow2(n);
    double S = bytes, t = 0.0;
    bool uneven = n != p;
    switch (op) {
    case DS_COMM_ALLREDUCE:
        switch (algo) {
        case DSI_OMPI_RING:
        case DSI_OMPI_SEGMENTED_RING:
            return 2.0 * (double)(n - 1) * ring_step_time(model, shape, S / (double)n);
        case DSI_OMPI_RABENSEIFNER:
            for (int64_t d = 1; d < p; d *= 2)
                t += 2.0 * step_time(model, shape, d, S / (2.0 * (double)d));
            break;
        case DSI_OMPI_REDUCE_BCAST:
            for (int64_t d = 1; d < p; d *= 2)
                t += 2.0 * step_time(model, shape, d, S);
            break;
        default: /* recursive doubling */
            for (int64_t d = 1; d < p; d *= 2)
                t += step_time(model, shape, d, S);
            break;
        }
        return t + (uneven ? 2.0 * step_time(model, shape, 1, S) : 0.0);
    case DS_COMM_REDUCE_SCATTER:
        switch (algo) {
        case DSI_OMPI_RING: return (double)(n - 1) * ring_step_time(model, shape, S / (double)n);
        case DSI_OMPI_NONOVERLAPPING:
            for (int64_t d = 1; d < p; d *= 2)
                t += step_time(model, shape, d, S) + step_time(model, shape, d, S / (double)n);
            break;
        default: /* recursive halving, largest distance first */
            for (int64_t d = p / 2; d >= 1; d /= 2)
                t += step_time(model, shape, d, S * (double)d / (double)p);
            break;
        }
        return t + (uneven
                        ? step_time(model, shape, 1, S) + step_time(model, shape, 1, S / (double)n)
                        : 0.0);
    case DS_COMM_ALLGATHER: {
        double block = S / (double)n;
        switch (algo) {
        case DSI_OMPI_RING: return (double)(n - 1) * ring_step_time(model, shape, block);
        case DSI_OMPI_NEIGHBOR: return (double)(n / 2) * ring_step_time(model, shape, 2.0 * block);
        case DSI_OMPI_PAIR: return step_time(model, shape, 1, block);
        default: /* recursive doubling, Bruck: blocks double with the distance */
            for (int64_t d = 1; d < n; d *= 2)
                t += step_time(model, shape, d, block * (double)DSI_MIN(d, n - d));
            return t;
        }
    }
    case DS_COMM_ALLTOALL: {
        double block = S / (double)n;
        switch (algo) {
        case DSI_OMPI_PAIRWISE:
            for (int64_t d = 1; d < n; d++)
                t += step_time(model, shape, d, block);
            return t;
        case DSI_OMPI_BRUCK:
            for (int64_t d = 1; d < n; d *= 2)
                t += step_time(model, shape, d, block * (double)(n / 2));
            return t;
        default: return ompi_linear_alltoall(model, bytes, shape);
        }
    }
    case DS_COMM_BROADCAST:
        if (algo == DSI_OMPI_SCATTER_ALLGATHER) {
            for (int64_t d = 1; d < p; d *= 2)
                t += step_time(model, shape, d, S * (double)d / (double)p);
            return t + (double)(n - 1) * ring_step_time(model, shape, S / (double)n);
        }
        for (int64_t d = 1; d < n; d *= 2)
            t += step_time(model, shape, d, S);
        return t;
    default: return 0.0;
    }
}

/* The rules' size: the buffer, except one rank's block for all-gather and all-to-all. */
static int64_t rule_bytes(ds_comm_op_t op, double bytes, int64_t n)
{
    if (op == DS_COMM_ALLGATHER || op == DS_COMM_ALLTOALL)
        return (int64_t)(bytes / (double)DSI_MAX(n, 1));
    return (int64_t)bytes;
}

/* Which public algorithm id an Open MPI algorithm is reported as. */
static ds_comm_algo_t ompi_public_id(dsi_ompi_algo_t algo)
{
    switch (algo) {
    case DSI_OMPI_RING:
    case DSI_OMPI_SEGMENTED_RING: return DS_COMM_ALGO_RING;
    case DSI_OMPI_RECURSIVE_DOUBLING:
    case DSI_OMPI_PAIR: return DS_COMM_ALGO_RECURSIVE_DOUBLING;
    case DSI_OMPI_RABENSEIFNER: return DS_COMM_ALGO_RABENSEIFNER;
    case DSI_OMPI_RECURSIVE_HALVING: return DS_COMM_ALGO_RECURSIVE_HALVING;
    case DSI_OMPI_BRUCK: return DS_COMM_ALGO_BRUCK;
    case DSI_OMPI_NEIGHBOR: return DS_COMM_ALGO_NEIGHBOR;
    case DSI_OMPI_PAIRWISE: return DS_COMM_ALGO_PAIRWISE;
    case DSI_OMPI_LINEAR: return DS_COMM_ALGO_DIRECT;
    case DSI_OMPI_PIPELINE:
    case DSI_OMPI_SCATTER_ALLGATHER: return DS_COMM_ALGO_RING;
    case DSI_OMPI_REDUCE_BCAST:
    case DSI_OMPI_NONOVERLAPPING:
    case DSI_OMPI_BINOMIAL:
    default: return DS_COMM_ALGO_TREE;
    }
}

static bool ompi_collective(ds_comm_op_t op)
{
    return op == DS_COMM_ALLREDUCE || op == DS_COMM_REDUCE_SCATTER || op == DS_COMM_ALLGATHER ||
           op == DS_COMM_ALLTOALL || op == DS_COMM_BROADCAST;
}

/* One entry per public id: its time is the rules' algorithm of that id
 * (reported as it); ring and tree may also be forced. */
#define OMPI_ENTRY(fn, id_value)                                                                   \
    static bool fn##_applies(ds_comm_op_t op, const dsi_comm_shape_t *shape)                       \
    {                                                                                              \
        return shape->n >= 2 && ompi_collective(op);                                               \
    }                                                                                              \
    static double fn##_compose(const ds_comm_model_t *model, ds_comm_op_t op, double bytes,        \
                               const dsi_comm_shape_t *shape)                                      \
    {                                                                                              \
        dsi_ompi_algo_t algo = dsi_ompi_choose(op, shape->n, rule_bytes(op, bytes, shape->n));     \
        if (ompi_public_id(algo) != (id_value))                                                    \
            algo = ompi_fallback(op, (id_value), algo);                                            \
        return ompi_time(model, op, algo, bytes, shape);                                           \
    }

/* The Open MPI algorithm run when public id `id` is forced on `op` (or
 * asked for while the rules pick `chosen`). */
static dsi_ompi_algo_t ompi_fallback(ds_comm_op_t op, ds_comm_algo_t id, dsi_ompi_algo_t chosen)
{
    switch (id) {
    case DS_COMM_ALGO_RING: return DSI_OMPI_RING;
    case DS_COMM_ALGO_TREE:
        return op == DS_COMM_REDUCE_SCATTER ? DSI_OMPI_NONOVERLAPPING
               : op == DS_COMM_BROADCAST    ? DSI_OMPI_BINOMIAL
                                            : DSI_OMPI_REDUCE_BCAST;
    case DS_COMM_ALGO_RECURSIVE_DOUBLING: return DSI_OMPI_RECURSIVE_DOUBLING;
    case DS_COMM_ALGO_RABENSEIFNER: return DSI_OMPI_RABENSEIFNER;
    case DS_COMM_ALGO_RECURSIVE_HALVING: return DSI_OMPI_RECURSIVE_HALVING;
    case DS_COMM_ALGO_BRUCK: return DSI_OMPI_BRUCK;
    case DS_COMM_ALGO_NEIGHBOR: return DSI_OMPI_NEIGHBOR;
    case DS_COMM_ALGO_PAIRWISE: return DSI_OMPI_PAIRWISE;
    default: return chosen;
    }
}

OMPI_ENTRY(ompi_ring, DS_COMM_ALGO_RING)
OMPI_ENTRY(ompi_tree, DS_COMM_ALGO_TREE)
OMPI_ENTRY(ompi_rd, DS_COMM_ALGO_RECURSIVE_DOUBLING)
OMPI_ENTRY(ompi_rab, DS_COMM_ALGO_RABENSEIFNER)
OMPI_ENTRY(ompi_rh, DS_COMM_ALGO_RECURSIVE_HALVING)
OMPI_ENTRY(ompi_bruck, DS_COMM_ALGO_BRUCK)
OMPI_ENTRY(ompi_neighbor, DS_COMM_ALGO_NEIGHBOR)
OMPI_ENTRY(ompi_pairwise, DS_COMM_ALGO_PAIRWISE)

static bool ompi_direct_applies(ds_comm_op_t op, const dsi_comm_shape_t *shape)
{
    return shape->n >= 2 && (op == DS_COMM_SENDRECV || op == DS_COMM_ALLTOALL);
}

/* Send/recv: one message through the level the pair crosses.  All-to-all:
 * the linear algorithm from the send/recv fit, not from all-to-all samples
 * (those mix the algorithms the rules picked at each measured size). */
static double ompi_direct_compose(const ds_comm_model_t *model, ds_comm_op_t op, double bytes,
                                  const dsi_comm_shape_t *shape)
{
    if (op == DS_COMM_ALLTOALL)
        return ompi_linear_alltoall(model, bytes, shape);
    dsi_comm_terms_t terms;
    direct_terms(model, op, bytes, shape, &terms);
    return dsi_comm_terms_time(model, op, shape, &terms, bytes);
}

static const dsi_comm_algo_t ompi_algo_list[] = {
    {DS_COMM_ALGO_RING, "ring", ompi_ring_applies, NULL, ompi_ring_compose, NULL},
    {DS_COMM_ALGO_TREE, "tree", ompi_tree_applies, NULL, ompi_tree_compose, NULL},
    {DS_COMM_ALGO_RECURSIVE_DOUBLING, "recursive-doubling", ompi_rd_applies, NULL, ompi_rd_compose,
     NULL},
    {DS_COMM_ALGO_RABENSEIFNER, "rabenseifner", ompi_rab_applies, NULL, ompi_rab_compose, NULL},
    {DS_COMM_ALGO_RECURSIVE_HALVING, "recursive-halving", ompi_rh_applies, NULL, ompi_rh_compose,
     NULL},
    {DS_COMM_ALGO_BRUCK, "bruck", ompi_bruck_applies, NULL, ompi_bruck_compose, NULL},
    {DS_COMM_ALGO_NEIGHBOR, "neighbor", ompi_neighbor_applies, NULL, ompi_neighbor_compose, NULL},
    {DS_COMM_ALGO_PAIRWISE, "pairwise", ompi_pairwise_applies, NULL, ompi_pairwise_compose, NULL},
    {DS_COMM_ALGO_DIRECT, "direct", ompi_direct_applies, direct_terms, ompi_direct_compose, NULL},
};

static const dsi_comm_algo_t *const ompi_algos[] = {
    &ompi_algo_list[0], &ompi_algo_list[1], &ompi_algo_list[2], &ompi_algo_list[3],
    &ompi_algo_list[4], &ompi_algo_list[5], &ompi_algo_list[6], &ompi_algo_list[7],
    &ompi_algo_list[8], &ps_algo,           &hierarchical_algo};
static const bool ompi_automatic[] = {true, true, true, true, true, true,
                                      true, true, true, true, false};
_Static_assert(DSI_ARRAY_SIZE(ompi_algos) <= DSI_COMM_MAX_ALGOS, "too many algorithms");
_Static_assert(DSI_ARRAY_SIZE(ompi_automatic) == DSI_ARRAY_SIZE(ompi_algos), "one flag each");

/* The rules' pick among the automatic algorithms (all-to-all of the
 * "linear" kind is the direct algorithm). */
static int ompi_choose(ds_comm_op_t op, double bytes, const dsi_comm_shape_t *shape,
                       const double *times)
{
    if (!ompi_collective(op))
        return -1;
    ds_comm_algo_t id =
        ompi_public_id(dsi_ompi_choose(op, shape->n, rule_bytes(op, bytes, shape->n)));
    for (size_t i = 0; i < DSI_ARRAY_SIZE(ompi_algos); i++)
        if (ompi_algos[i]->id == id && times[i] >= 0.0)
            return (int)i;
    return -1;
}

static const dsi_comm_library_t libraries[DS_COMM_LIBRARY_COUNT_] = {
    {"nccl", nccl_algos, nccl_automatic, DSI_ARRAY_SIZE(nccl_algos), NULL, true},
    {"ompi", ompi_algos, ompi_automatic, DSI_ARRAY_SIZE(ompi_algos), ompi_choose, false},
};

const char *ds_comm_library_name(ds_comm_library_t library)
{
    return (unsigned)library < DS_COMM_LIBRARY_COUNT_ ? libraries[library].name : "?";
}

ds_status_t ds_comm_library_parse(const char *text, ds_comm_library_t *library_p)
{
    static const char *const names[] = {"nccl", "ompi"};
    int index = 0;
    DSI_TRY(dsi_parse_choice(text != NULL ? text : "", "communication library", names,
                             DSI_ARRAY_SIZE(names), &index));
    *library_p = (ds_comm_library_t)index;
    return DS_OK;
}

ds_status_t ds_comm_library_of(const ds_comm_sample_t *samples, size_t count,
                               ds_comm_library_t *library_p)
{
    const char *forced = dsi_param_string(DSI_PARAM_COMM_LIBRARY);
    if (forced != NULL && strcmp(forced, "auto") != 0) {
        ds_status_t status = ds_comm_library_parse(forced, library_p);
        if (status != DS_OK)
            return DSI_ERROR(status, "DS_COMM_LIBRARY=%s (accepted: auto, nccl, ompi)", forced);
        return DS_OK;
    }
    size_t mpi = 0;
    for (size_t i = 0; i < count; i++)
        mpi += strncmp(samples[i].source, "cpu:", 4) == 0 ||
               strncmp(samples[i].source, "replay:", 7) == 0;
    *library_p = 2 * mpi > count ? DS_COMM_LIBRARY_OMPI : DS_COMM_LIBRARY_NCCL;
    return DS_OK;
}

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
    case DS_COMM_ALGO_RECURSIVE_DOUBLING: return "recursive-doubling";
    case DS_COMM_ALGO_RABENSEIFNER: return "rabenseifner";
    case DS_COMM_ALGO_RECURSIVE_HALVING: return "recursive-halving";
    case DS_COMM_ALGO_BRUCK: return "bruck";
    case DS_COMM_ALGO_NEIGHBOR: return "neighbor";
    case DS_COMM_ALGO_PAIRWISE: return "pairwise";
    case DS_COMM_ALGO_NVLS: return "nvls";
    case DS_COMM_ALGO_COLLNET: return "collnet";
    case DS_COMM_ALGO_PAT: return "pat";
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
        if ((!lib->automatic[i] && !forced_here) || !algo->applies(op, shape) ||
            (algo->declared != NULL && !algo->declared(model, shape)))
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
