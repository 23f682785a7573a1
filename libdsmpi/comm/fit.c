/* Fitting the communication model: samples merged into series per group
 * shape, then per network level (bottom up) and primitive a latency law
 * from the smallest sizes and bus-bandwidth curves from the rest, by
 * inverting the library's algorithms. */
#include "dsi_comm.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Primitives fitted on their own data, in the order another primitive
 * without data at a level borrows from them. */
static const ds_comm_op_t fit_ops[] = {DS_COMM_ALLREDUCE, DS_COMM_REDUCE_SCATTER, DS_COMM_ALLGATHER,
                                       DS_COMM_BROADCAST, DS_COMM_ALLTOALL,       DS_COMM_SENDRECV};

/* Sizes at or below this are in the latency regime when a log starts there. */
#define LATENCY_REGIME_BYTES 65536.0
/* The smallest sizes whose minimum time is taken as the latency floor. */
#define FLOOR_POINTS 3

/* ---- series ------------------------------------------------------------------------------ */

void dsi_comm_series_free(ds_comm_model_t *model)
{
    for (size_t i = 0; i < model->num_series; i++) {
        dsi_free(model->series[i].bytes);
        dsi_free(model->series[i].cost);
    }
    dsi_free(model->series);
    model->series = NULL;
    model->num_series = 0;
}

/* A pair's samples taken while the job's other pairs crossed the network
 * too are a series of that span; every other sample spans its own nodes. */
static int32_t sample_span(const ds_comm_sample_t *x)
{
    return dsi_comm_spans_job(x->op, x->nodes) ? DSI_MAX(x->span_nodes, x->nodes) : x->nodes;
}

static bool same_shape(const dsi_comm_series_t *s, const ds_comm_sample_t *x)
{
    return s->op == x->op && s->n == x->group_size && s->nodes == x->nodes &&
           s->r == x->ranks_per_node && s->concurrency == DSI_MAX(x->concurrency, 1) &&
           s->batched == (x->batched != 0) && s->span == sample_span(x);
}

static ds_status_t check_sample(const ds_comm_sample_t *x, size_t index)
{
    if ((unsigned)x->op >= DS_COMM_COUNT_ || !(x->mean_s > 0.0) || x->bytes <= 0 ||
        x->group_size < 1 || x->nodes < 1 || x->ranks_per_node < 1 ||
        x->ranks_per_node > x->group_size || x->nodes > x->group_size ||
        (int64_t)x->nodes * x->ranks_per_node < x->group_size)
        return DSI_ERROR(DS_ERR_INVALID_ARG,
                         "communication sample %zu (op %d, %lld bytes, %g s, %d ranks on %d nodes, "
                         "%d per node) is not valid (accepted: a known primitive, bytes > 0, "
                         "time > 0, a group layout that fits its nodes)",
                         index, (int)x->op, (long long)x->bytes, x->mean_s, x->group_size, x->nodes,
                         x->ranks_per_node);
    return DS_OK;
}

typedef struct indexed {
    const ds_comm_sample_t *sample;
} indexed_t;

static int by_bytes(const void *a, const void *b)
{
    int64_t x = ((const indexed_t *)a)->sample->bytes, y = ((const indexed_t *)b)->sample->bytes;
    return (x > y) - (x < y);
}

/* Merges the samples of one shape, sorted by size, equal sizes averaged. */
static ds_status_t fill_series(dsi_comm_series_t *s, indexed_t *items, size_t count)
{
    qsort(items, count, sizeof(*items), by_bytes);
    DSI_TRY(dsi_calloc(count, sizeof(*s->bytes), &s->bytes));
    DSI_TRY(dsi_calloc(count, sizeof(*s->cost), &s->cost));
    s->provenance = DS_PROV_IMPORTED;
    for (size_t i = 0; i < count;) {
        size_t j = i;
        ds_cost_t sum = {0, 0, 0, 0, 0, DS_PROV_IMPORTED};
        while (j < count && items[j].sample->bytes == items[i].sample->bytes) {
            const ds_comm_sample_t *x = items[j].sample;
            sum.mean_s += x->mean_s;
            sum.median_s += x->median_s > 0 ? x->median_s : x->mean_s;
            sum.p10_s += x->p10_s > 0 ? x->p10_s : x->mean_s;
            sum.p90_s += x->p90_s > 0 ? x->p90_s : x->mean_s;
            sum.repetitions += x->repetitions;
            if (x->provenance == DS_PROV_MEASURED)
                sum.provenance = s->provenance = DS_PROV_MEASURED;
            j++;
        }
        double k = (double)(j - i);
        sum.mean_s /= k;
        sum.median_s /= k;
        sum.p10_s /= k;
        sum.p90_s /= k;
        s->bytes[s->count] = (double)items[i].sample->bytes;
        s->cost[s->count] = sum;
        s->count++;
        i = j;
    }
    return DS_OK;
}

static ds_status_t build_series(ds_comm_model_t *model, const ds_comm_sample_t *samples,
                                size_t count)
{
    ds_status_t status = DS_OK;
    indexed_t *items = NULL;
    bool *taken = NULL;
    for (size_t i = 0; i < count; i++)
        DSI_TRY(check_sample(&samples[i], i));
    if (count == 0)
        return DS_OK;
    DSI_TRY_GOTO(dsi_calloc(count, sizeof(*items), &items), status, out);
    DSI_TRY_GOTO(dsi_calloc(count, sizeof(*taken), &taken), status, out);
    size_t capacity = 0;
    for (size_t first = 0; first < count; first++) {
        if (taken[first])
            continue;
        const ds_comm_sample_t *x = &samples[first];
        dsi_comm_series_t s;
        memset(&s, 0, sizeof(s));
        s.op = x->op;
        s.n = x->group_size;
        s.nodes = x->nodes;
        s.r = x->ranks_per_node;
        s.concurrency = DSI_MAX(x->concurrency, 1);
        s.batched = x->batched != 0;
        s.span = sample_span(x);
        size_t members = 0;
        for (size_t i = first; i < count; i++) {
            if (!taken[i] && same_shape(&s, &samples[i])) {
                taken[i] = true;
                items[members++].sample = &samples[i];
            }
        }
        if (model->num_series == capacity) {
            capacity = capacity ? 2 * capacity : 16;
            DSI_TRY_GOTO(dsi_realloc_array(&model->series, capacity, sizeof(*model->series)),
                         status, out);
        }
        model->series[model->num_series++] = s;
        DSI_TRY_GOTO(fill_series(&model->series[model->num_series - 1], items, members), status,
                     out);
    }
out:
    dsi_free(items);
    dsi_free(taken);
    return status;
}

/* ---- latency ----------------------------------------------------------------------------- */

/* The latency floor of a series: the least time among its smallest sizes,
 * when it starts in the latency regime. */
static bool latency_floor(const dsi_comm_series_t *s, double *floor_p)
{
    if (s->count == 0 || s->bytes[0] > LATENCY_REGIME_BYTES)
        return false;
    double floor = INFINITY;
    for (size_t i = 0; i < s->count && i < FLOOR_POINTS; i++)
        if (s->bytes[i] <= LATENCY_REGIME_BYTES)
            floor = fmin(floor, s->cost[i].mean_s);
    *floor_p = floor;
    return isfinite(floor);
}

static void series_shape(const ds_comm_model_t *model, const dsi_comm_series_t *s,
                         dsi_comm_shape_t *shape)
{
    dsi_comm_shape_init(model, s->n, s->nodes, s->r, s->concurrency, 0, shape);
    dsi_comm_shape_span(model, shape, s->span);
}

/* The automatic term-based algorithms of the library that run `op` on `shape`. */
static int candidate_algos(const ds_comm_model_t *model, ds_comm_op_t op,
                           const dsi_comm_shape_t *shape, const dsi_comm_algo_t **algos)
{
    int count = 0;
    const dsi_comm_library_t *lib = model->library;
    for (size_t i = 0; i < lib->count; i++)
        if (lib->automatic[i] && lib->algos[i]->terms != NULL && lib->algos[i]->applies(op, shape))
            algos[count++] = lib->algos[i];
    return count;
}

/* Latency of the levels below `level` for one algorithm's terms. */
static double lower_latency(const dsi_comm_level_t *lv, const dsi_comm_terms_t *terms, int level)
{
    double t = lv[0].base_s;
    for (int l = 0; l < level; l++)
        t += terms->hops[l] * lv[l].hop_s;
    return t;
}

/* Level 0: base + hops x hop_s by least squares over the layouts; one
 * layout cannot separate them, so the cluster's per-hop latency is taken
 * where the floor allows it. */
static void fit_latency_level0(ds_comm_model_t *model, ds_comm_op_t op, const int *members,
                               int count, dsi_comm_level_t *lv)
{
    double sx = 0, sy = 0, sxx = 0, sxy = 0, k = 0, first_hops = -1;
    bool distinct = false;
    for (int m = 0; m < count; m++) {
        const dsi_comm_series_t *s = &model->series[members[m]];
        dsi_comm_shape_t shape;
        series_shape(model, s, &shape);
        const dsi_comm_algo_t *algos[8];
        double floor;
        if (candidate_algos(model, op, &shape, algos) == 0 || !latency_floor(s, &floor))
            continue;
        dsi_comm_terms_t terms;
        algos[0]->terms(model, op, s->bytes[0], &shape, &terms);
        double x = terms.hops[0];
        if (first_hops >= 0 && x != first_hops)
            distinct = true;
        if (first_hops < 0)
            first_hops = x;
        sx += x;
        sy += floor;
        sxx += x * x;
        sxy += x * floor;
        k += 1;
    }
    double assumed_hop = model->cluster.levels[0].latency_us * 1e-6;
    if (k == 0) {
        lv->base_s = 0.0;
        lv->hop_s = assumed_hop;
        return;
    }
    double mean_x = sx / k, mean_y = sy / k;
    if (!distinct) {
        double hop = mean_x > 0 ? fmin(assumed_hop, mean_y / mean_x) : 0.0;
        lv->hop_s = hop;
        lv->base_s = fmax(mean_y - mean_x * hop, 0.0);
        return;
    }
    double hop = (sxy - k * mean_x * mean_y) / (sxx - k * mean_x * mean_x);
    double base = mean_y - hop * mean_x;
    if (hop < 0) {
        hop = 0;
        base = mean_y;
    } else if (base < 0) {
        base = 0;
        hop = sxy / sxx;
    }
    lv->base_s = base;
    lv->hop_s = hop;
}

/* Level >= 1: per layout, the hop latency that makes the fastest candidate
 * algorithm meet the floor (the largest of the per-algorithm solutions,
 * since the library runs the fastest); the median over layouts. */
static void fit_latency_upper(ds_comm_model_t *model, ds_comm_op_t op, int level,
                              const int *members, int count, dsi_comm_level_t *lv)
{
    const dsi_comm_level_t *lower = model->levels[op];
    double solutions[64];
    int k = 0;
    for (int m = 0; m < count && k < 64; m++) {
        const dsi_comm_series_t *s = &model->series[members[m]];
        dsi_comm_shape_t shape;
        series_shape(model, s, &shape);
        const dsi_comm_algo_t *algos[8];
        int num = candidate_algos(model, op, &shape, algos);
        double floor, hop = -1.0;
        if (!latency_floor(s, &floor))
            continue;
        for (int a = 0; a < num; a++) {
            dsi_comm_terms_t terms;
            algos[a]->terms(model, op, s->bytes[0], &shape, &terms);
            if (terms.hops[level] <= 0)
                continue;
            double h = (floor - lower_latency(lower, &terms, level)) / terms.hops[level];
            hop = fmax(hop, fmax(h, 0.0));
        }
        if (hop >= 0)
            solutions[k++] = hop;
    }
    if (k == 0) {
        lv->hop_s = model->cluster.levels[level].latency_us * 1e-6;
        return;
    }
    qsort(solutions, (size_t)k, sizeof(double), dsi_compare_double);
    lv->hop_s = k % 2 ? solutions[k / 2] : 0.5 * (solutions[k / 2 - 1] + solutions[k / 2]);
}

/* ---- bandwidth curves ------------------------------------------------------------------ */

/* The level-`level` bandwidth (level 0: per rank; above: per network
 * interface) that makes the library's fastest candidate meet time `t` at
 * `bytes`: the least over the candidates of the bandwidth each needs.
 * False when no candidate can (the time is all latency, or a lower level
 * is the bottleneck). */
static bool invert_point(const ds_comm_model_t *model, ds_comm_op_t op, int level,
                         const dsi_comm_shape_t *shape, const dsi_comm_level_t *levels,
                         double bytes, double t, double *bw_p, double *allowed_p)
{
    const dsi_comm_algo_t *algos[8];
    int num = candidate_algos(model, op, shape, algos);
    double best = INFINITY, remainder = 0;
    (void)levels; /* read through model->levels by dsi_comm_proto_latency */
    for (int a = 0; a < num; a++) {
        dsi_comm_terms_t terms;
        algos[a]->terms(model, op, bytes, shape, &terms);
        if (terms.volume[level] <= 0)
            continue;
        int protos = terms.protos != NULL && terms.num_protos > 0 ? terms.num_protos : 1;
        for (int proto = 0; proto < protos; proto++) {
            double rest = t - dsi_comm_proto_latency(model, op, &terms, proto, level + 1);
            double lower = 0;
            for (int l = 0; l < level; l++)
                if (terms.volume[l] > 0)
                    lower =
                        fmax(lower,
                             terms.volume[l] /
                                 dsi_comm_proto_bandwidth(
                                     model, &terms, proto, l, shape,
                                     dsi_comm_level_bandwidth(model, op, l, bytes, shape), bytes));
            if (rest <= 0 || rest <= lower * (1.0 + 1e-9))
                continue;
            double efficiency = dsi_comm_proto_efficiency(&terms, proto);
            double mid = dsi_comm_proto_mid_size(&terms, proto, bytes);
            double bw = terms.volume[level] / (rest * efficiency * mid);
            /* A protocol capped below what the point needs cannot explain it. */
            if (efficiency < 1.0 && bw > dsi_comm_level_nominal(model, level, shape))
                continue;
            if (level > 0)
                bw *=
                    dsi_comm_oversubscription(model, shape->top) / dsi_comm_nic_share(model, shape);
            if (bw < best) {
                best = bw;
                remainder = rest;
            }
        }
    }
    if (!isfinite(best))
        return false;
    *bw_p = best;
    *allowed_p = model->tolerance * t / remainder;
    return true;
}

static int64_t layout_units(const dsi_comm_shape_t *shape, int level)
{
    return level == 0 ? shape->n : shape->units[level];
}

static ds_status_t fit_curves(ds_comm_model_t *model, ds_comm_op_t op, int level,
                              const int *members, int count, dsi_comm_level_t *lv)
{
    for (int m = 0; m < count; m++) {
        const dsi_comm_series_t *s = &model->series[members[m]];
        dsi_comm_shape_t shape;
        series_shape(model, s, &shape);
        int64_t units = layout_units(&shape, level);
        /* Layouts measured twice (other concurrency, batched or not) share a curve. */
        bool done = false;
        for (int c = 0; c < lv->num_curves && !done; c++)
            done = lv->curves[c].r == shape.r && lv->curves[c].units == units;
        if (done || lv->num_curves == DSI_COMM_MAX_CURVES)
            continue;
        dsi_comm_curve_point_t points[DSI_COMM_CURVE_MAX];
        int num_points = 0;
        for (int m2 = m; m2 < count; m2++) {
            const dsi_comm_series_t *t = &model->series[members[m2]];
            dsi_comm_shape_t other;
            series_shape(model, t, &other);
            if (other.r != shape.r || layout_units(&other, level) != units)
                continue;
            for (size_t i = 0; i < t->count && num_points < DSI_COMM_CURVE_MAX; i++) {
                /* Level >= 1 curves are per interface, over the bytes each carries. */
                double share = level > 0 ? dsi_comm_nic_share(model, &other) : 1.0;
                dsi_comm_curve_point_t p = {t->bytes[i] / share, 0, 0};
                if (invert_point(model, op, level, &other, model->levels[op], t->bytes[i],
                                 t->cost[i].mean_s, &p.bw, &p.allowed))
                    points[num_points++] = p;
            }
        }
        if (num_points == 0)
            continue;
        /* Several series: order by size (insertion sort, few points). */
        for (int i = 1; i < num_points; i++)
            for (int j = i; j > 0 && points[j].bytes < points[j - 1].bytes; j--) {
                dsi_comm_curve_point_t tmp = points[j];
                points[j] = points[j - 1];
                points[j - 1] = tmp;
            }
        dsi_comm_layout_curve_t *c = &lv->curves[lv->num_curves++];
        c->r = shape.r;
        c->units = units;
        dsi_comm_curve_fit(points, num_points, &c->curve);
        lv->points += (size_t)num_points;
    }
    return DS_OK;
}

/* ---- per level ----------------------------------------------------------------------------- */

/* Congestion at level >= 1 from curves of one ranks-per-node layout on two
 * spans (the pair farthest apart): the median over the bandwidth regime
 * (sizes from CONGESTION_MIN_BYTES to the largest both were measured at,
 * per octave) of the bandwidth lost per doubling of the span; else the
 * cluster file's prior.  Beyond the widest span measured, the larger of the
 * two: a few nodes share one leaf switch, and how they scale says nothing of
 * the uplinks above it. */
#define CONGESTION_MIN_BYTES 1048576.0

double dsi_comm_congestion_prior(const ds_comm_model_t *model, int level)
{
    const ds_net_level_t *lv = &model->cluster.levels[level];
    if (lv->congestion_given)
        return lv->congestion_per_doubling;
    return DSI_MIN(DSI_MAX(dsi_param_double(DSI_PARAM_COMM_CONGESTION_PRIOR), 0.0), 0.9);
}

static void fit_congestion(const ds_comm_model_t *model, int level, dsi_comm_level_t *lv)
{
    double prior = dsi_comm_congestion_prior(model, level);
    lv->congestion = prior;
    lv->congestion_beyond = prior;
    lv->congestion_fitted = false;
    lv->widest_units = 0;
    for (int i = 0; i < lv->num_curves; i++)
        lv->widest_units = DSI_MAX(lv->widest_units, lv->curves[i].units);
    const dsi_comm_layout_curve_t *low = NULL, *high = NULL;
    double best_doublings = 0.0;
    for (int i = 0; i < lv->num_curves; i++)
        for (int j = 0; j < lv->num_curves; j++) {
            const dsi_comm_layout_curve_t *a = &lv->curves[i], *b = &lv->curves[j];
            if (a->r != b->r || b->units <= a->units || a->curve.count == 0 || b->curve.count == 0)
                continue;
            double doublings = log2((double)b->units / (double)a->units);
            if (doublings > best_doublings) {
                best_doublings = doublings;
                low = a;
                high = b;
            }
        }
    if (low == NULL)
        return;
    double largest = exp(fmin(low->curve.log_bytes[low->curve.count - 1],
                              high->curve.log_bytes[high->curve.count - 1]));
    double losses[64];
    int count = 0;
    for (double bytes = CONGESTION_MIN_BYTES; bytes <= largest * 1.0001 && count < 64;
         bytes *= 2.0) {
        double ratio =
            dsi_comm_curve_eval(&high->curve, bytes) / dsi_comm_curve_eval(&low->curve, bytes);
        if (ratio > 0.0)
            losses[count++] = 1.0 - pow(ratio, 1.0 / best_doublings);
    }
    if (count == 0)
        return;
    qsort(losses, (size_t)count, sizeof(double), dsi_compare_double);
    double median =
        count % 2 ? losses[count / 2] : 0.5 * (losses[count / 2 - 1] + losses[count / 2]);
    lv->congestion = DSI_MIN(DSI_MAX(median, 0.0), 0.9);
    lv->congestion_beyond = DSI_MAX(lv->congestion, prior);
    lv->congestion_fitted = true;
}

static ds_status_t fit_from_data(ds_comm_model_t *model, ds_comm_op_t op, int level)
{
    int members[256];
    int count = 0;
    for (size_t i = 0; i < model->num_series && count < 256; i++) {
        const dsi_comm_series_t *s = &model->series[i];
        if (s->op != op || s->n < 2)
            continue;
        dsi_comm_shape_t shape;
        series_shape(model, s, &shape);
        if (shape.top == level)
            members[count++] = (int)i;
    }
    if (count == 0)
        return DS_OK;
    dsi_comm_level_t *lv = &model->levels[op][level];
    memset(lv, 0, sizeof(*lv));
    if (level == 0)
        fit_latency_level0(model, op, members, count, lv);
    else
        fit_latency_upper(model, op, level, members, count, lv);
    /* invert_point reads this level's latency through model->levels. */
    DSI_TRY(fit_curves(model, op, level, members, count, lv));
    if (lv->num_curves == 0) {
        memset(lv, 0, sizeof(*lv));
        return DS_OK;
    }
    if (level > 0)
        fit_congestion(model, level, lv);
    lv->resolved = true;
    lv->source = DS_COMM_FIT_DATA;
    lv->from_op = op;
    return DS_OK;
}

/* Nominal bandwidth of one network interface at `level` (>= 1): the
 * level's bandwidth, which the cluster gives per interface (a node has
 * nics_per_node of them, one per device unless told), so that fewer
 * interfaces mean less bandwidth for the node. */
static double nominal_nic_bw(const ds_comm_model_t *model, int level)
{
    return model->cluster.levels[level].bandwidth_GBps * 1e9;
}

static void set_constant_curve(dsi_comm_level_t *lv, double bw)
{
    lv->num_curves = 1;
    lv->curves[0].r = 1;
    lv->curves[0].units = 1;
    lv->curves[0].curve.count = 1;
    lv->curves[0].curve.log_bytes[0] = 0.0;
    lv->curves[0].curve.log_bw[0] = log(bw);
}

/* A level no primitive has data for: the cluster's latency, or the fitted
 * latency of the level below scaled as the cluster's latencies scale when
 * that is larger (a message crossing a spine also crosses the leaf, and the
 * cluster file rarely knows the software overheads the fit found); its
 * bandwidth with the efficiency and size dependence of the level below
 * where that was fitted (same library, other links), else the nominal
 * bandwidth. */
static void assume_level(ds_comm_model_t *model, ds_comm_op_t op, int level)
{
    const ds_cluster_t *c = &model->cluster;
    dsi_comm_level_t *lv = &model->levels[op][level];
    memset(lv, 0, sizeof(*lv));
    lv->resolved = true;
    lv->source = DS_COMM_FIT_ASSUMED;
    lv->from_op = op;
    lv->hop_s = c->levels[level].latency_us * 1e-6;
    lv->congestion = level > 0 ? dsi_comm_congestion_prior(model, level) : 0.0;
    lv->congestion_beyond = lv->congestion;
    const dsi_comm_level_t *below = level > 0 ? &model->levels[op][level - 1] : NULL;
    if (below != NULL && below->source != DS_COMM_FIT_ASSUMED && level >= 2 &&
        c->levels[level - 1].latency_us > 0.0)
        lv->hop_s = fmax(lv->hop_s, below->hop_s * c->levels[level].latency_us /
                                        c->levels[level - 1].latency_us);
    if (below == NULL) {
        set_constant_curve(lv, c->levels[0].bandwidth_GBps * 1e9);
        return;
    }
    if (below->source == DS_COMM_FIT_ASSUMED || below->num_curves == 0) {
        set_constant_curve(lv, nominal_nic_bw(model, level));
        return;
    }
    /* The layout with the most ranks per node ran closest to the links' peak. */
    const dsi_comm_layout_curve_t *widest = &below->curves[0];
    for (int i = 1; i < below->num_curves; i++)
        if (below->curves[i].r > widest->r)
            widest = &below->curves[i];
    double below_nominal =
        level == 1 ? c->levels[0].bandwidth_GBps * 1e9 : nominal_nic_bw(model, level - 1);
    lv->num_curves = 1;
    lv->curves[0] = *widest;
    lv->curves[0].r = 1;
    lv->curves[0].units = 1;
    dsi_comm_curve_t *curve = &lv->curves[0].curve;
    dsi_comm_curve_scale(curve, nominal_nic_bw(model, level) / below_nominal);
    /* Level 0 is over the collective's bytes, of which each of the r links
     * carries 1/r per step; level >= 1 is over the bytes of one interface. */
    if (level == 1)
        for (int k = 0; k < curve->count; k++)
            curve->log_bytes[k] -= log((double)widest->r);
}

static void resolve_level(ds_comm_model_t *model, ds_comm_op_t op, int level)
{
    dsi_comm_level_t *lv = &model->levels[op][level];
    if (lv->resolved)
        return;
    for (size_t i = 0; i < DSI_ARRAY_SIZE(fit_ops); i++) {
        const dsi_comm_level_t *other = &model->levels[fit_ops[i]][level];
        if (fit_ops[i] != op && other->resolved && other->source == DS_COMM_FIT_DATA) {
            *lv = *other;
            lv->source = DS_COMM_FIT_BORROWED;
            lv->from_op = fit_ops[i];
            if (level > 0) /* the constant belongs to the primitive's own level 0 */
                lv->base_s = 0.0;
            return;
        }
    }
    assume_level(model, op, level);
}

ds_status_t dsi_comm_fit(ds_comm_model_t *model, const ds_comm_sample_t *samples, size_t count)
{
    DSI_TRY(build_series(model, samples, count));
    for (int level = 0; level < model->cluster.num_levels; level++) {
        for (size_t i = 0; i < DSI_ARRAY_SIZE(fit_ops); i++)
            DSI_TRY(fit_from_data(model, fit_ops[i], level));
        for (size_t i = 0; i < DSI_ARRAY_SIZE(fit_ops); i++)
            resolve_level(model, fit_ops[i], level);
    }
    /* Parameter-server traffic is point-to-point: it reads the send/recv
     * levels (dsi_comm_fit_op); keep its own rows consistent for reports. */
    for (int level = 0; level < model->cluster.num_levels; level++) {
        model->levels[DS_COMM_PS_PUSH][level] = model->levels[DS_COMM_SENDRECV][level];
        model->levels[DS_COMM_PS_PULL][level] = model->levels[DS_COMM_SENDRECV][level];
    }
    return DS_OK;
}
