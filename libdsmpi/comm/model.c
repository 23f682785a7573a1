/* The communication model: creation, predictions for event keys, filling
 * cost tables, and what the fit found. */
#include "dsi_comm.h"

#include <math.h>
#include <string.h>

static void find_p2p_series(ds_comm_model_t *model);

void ds_comm_model_options_init(ds_comm_model_options_t *options)
{
    memset(options, 0, sizeof(*options));
    options->library = DS_COMM_LIBRARY_NCCL;
    options->use_measurements = 1;
}

ds_status_t ds_comm_model_create(const ds_cluster_t *cluster, const ds_comm_sample_t *samples,
                                 size_t count, const ds_comm_model_options_t *options,
                                 ds_comm_model_t **model_p)
{
    ds_comm_model_options_t defaults;
    ds_comm_model_options_init(&defaults);
    const ds_comm_model_options_t *o = options ? options : &defaults;
    if (dsi_comm_library_get(o->library) == NULL)
        return DSI_ERROR(DS_ERR_INVALID_ARG,
                         "communication library %d is not known (accepted: 0 = nccl, 1 = ompi)",
                         (int)o->library);
    if (cluster->gpus_per_node < 1 || cluster->num_levels < 1 ||
        cluster->num_levels > DS_MAX_NET_LEVELS)
        return DSI_ERROR(DS_ERR_INVALID_ARG,
                         "cluster '%s' with %d devices per node and %d network levels (accepted: "
                         ">= 1 device, 1 to %d levels)",
                         cluster->name, cluster->gpus_per_node, cluster->num_levels,
                         DS_MAX_NET_LEVELS);
    for (int l = 0; l < cluster->num_levels; l++)
        if (!(cluster->levels[l].bandwidth_GBps > 0) || !(cluster->levels[l].latency_us >= 0))
            return DSI_ERROR(DS_ERR_INVALID_ARG,
                             "cluster '%s' level %d has bandwidth %g GB/s and latency %g us "
                             "(accepted: bandwidth > 0, latency >= 0)",
                             cluster->name, l, cluster->levels[l].bandwidth_GBps,
                             cluster->levels[l].latency_us);
    ds_comm_model_t *model;
    DSI_TRY(dsi_calloc(1, sizeof(*model), &model));
    model->cluster = *cluster;
    if (model->cluster.num_levels < 2) {
        /* A network level is needed for groups across nodes: the device's. */
        ds_net_level_t *l1 = &model->cluster.levels[1];
        memset(l1, 0, sizeof(*l1));
        snprintf(l1->name, sizeof(l1->name), "inter-node");
        l1->latency_us = cluster->device.network_latency_us;
        l1->bandwidth_GBps = cluster->device.network_GBps > 0 ? cluster->device.network_GBps
                                                              : cluster->levels[0].bandwidth_GBps;
        l1->oversubscription = 1.0;
        l1->nics_per_node = cluster->gpus_per_node;
        model->cluster.num_levels = 2;
    }
    model->options = *o;
    /* A data set the band's table has no rows of leaves nothing out. */
    model->options.band_leave_out =
        o->band_leave_out != NULL ? dsi_comm_band_data_set(o->band_leave_out) : NULL;
    model->library = dsi_comm_library_get(o->library);
    model->tree_efficiency = dsi_param_double(DSI_PARAM_COMM_TREE_EFFICIENCY);
    model->tolerance = dsi_param_double(DSI_PARAM_COMM_FIT_TOLERANCE);
    ds_status_t status = dsi_comm_fit(model, samples, count);
    if (status != DS_OK) {
        ds_comm_model_destroy(model);
        return status;
    }
    find_p2p_series(model);
    *model_p = model;
    return DS_OK;
}

void ds_comm_model_destroy(ds_comm_model_t *model)
{
    if (model == NULL)
        return;
    dsi_comm_series_free(model);
    dsi_free(model);
}

int ds_comm_model_num_levels(const ds_comm_model_t *model)
{
    return model->cluster.num_levels;
}

/* ---- predictions ----------------------------------------------------------------------- */

/* A measured series of this shape at `span` nodes, else (for a pair
 * crossing nodes) the one of the widest span below it.  Inside a node
 * groups do not share links, so the concurrency is not compared there. */
static const dsi_comm_series_t *find_series(const ds_comm_model_t *model, const ds_event_key_t *key,
                                            int64_t span)
{
    const dsi_comm_series_t *found = NULL, *narrower = NULL;
    int batched = (key->flags & DS_COMM_FLAG_BATCHED) != 0;
    if (key->node_stride > 0) /* measured on neighbouring nodes only */
        return NULL;
    for (size_t i = 0; i < model->num_series; i++) {
        const dsi_comm_series_t *s = &model->series[i];
        if (s->op != (ds_comm_op_t)key->op || s->n != key->group_size || s->nodes != key->nodes ||
            s->r != key->ranks_per_node || s->batched != batched)
            continue;
        bool concurrent = s->concurrency == DSI_MAX(key->concurrency, 1);
        if (s->span < span && concurrent && (narrower == NULL || s->span > narrower->span))
            narrower = s;
        if (s->span != span)
            continue;
        if (concurrent)
            return s;
        if (s->nodes == 1 && found == NULL)
            found = s;
    }
    return found != NULL ? found : narrower;
}

static double log_interpolate(double a, double b, double w)
{
    return a > 0 && b > 0 ? exp(log(a) + w * (log(b) - log(a))) : a + w * (b - a);
}

/* Interpolates the series at `bytes` in log-size; false outside its range. */
static bool from_series(const dsi_comm_series_t *s, double bytes, ds_cost_t *cost)
{
    if (s->count == 0 || bytes < s->bytes[0] || bytes > s->bytes[s->count - 1])
        return false;
    size_t i = 0;
    while (i + 1 < s->count && s->bytes[i + 1] < bytes)
        i++;
    if (s->bytes[i] == bytes || s->count == 1) {
        *cost = s->cost[i];
        cost->provenance = s->provenance;
        return true;
    }
    if (s->bytes[i + 1] == bytes) {
        *cost = s->cost[i + 1];
        cost->provenance = s->provenance;
        return true;
    }
    const ds_cost_t *a = &s->cost[i], *b = &s->cost[i + 1];
    double w = log(bytes / s->bytes[i]) / log(s->bytes[i + 1] / s->bytes[i]);
    cost->mean_s = log_interpolate(a->mean_s, b->mean_s, w);
    cost->median_s = log_interpolate(a->median_s, b->median_s, w);
    cost->p10_s = log_interpolate(a->p10_s, b->p10_s, w);
    cost->p90_s = log_interpolate(a->p90_s, b->p90_s, w);
    cost->repetitions = 0;
    cost->provenance = DS_PROV_INTERPOLATED;
    return true;
}

double dsi_comm_series_time(const dsi_comm_series_t *s, double bytes)
{
    ds_cost_t cost;
    return from_series(s, bytes, &cost) ? cost.mean_s : -1.0;
}

/* Whether point-to-point series `s` is a better step of MPI's collectives
 * than `best`: the narrowest span, the fewest concurrent pairs, both
 * directions at once, the most sizes. */
static bool better_p2p(const dsi_comm_series_t *s, const dsi_comm_series_t *best)
{
    if (best == NULL)
        return true;
    if (s->span != best->span)
        return s->span < best->span;
    if (s->concurrency != best->concurrency)
        return s->concurrency < best->concurrency;
    if (s->batched != best->batched)
        return s->batched > best->batched;
    return s->count > best->count;
}

/* The point-to-point series MPI's collective steps are made of: a pair
 * alone (the fewest concurrent pairs), both directions at once preferred
 * (a collective's step sends and receives; the reverse traffic costs). */
static void find_p2p_series(ds_comm_model_t *model)
{
    for (int level = 0; level < 2; level++) {
        const dsi_comm_series_t *best = NULL;
        for (size_t i = 0; i < model->num_series; i++) {
            const dsi_comm_series_t *s = &model->series[i];
            if (s->op != DS_COMM_SENDRECV || s->n != 2 || s->count < 2 ||
                s->nodes != (level == 0 ? 1 : 2))
                continue;
            if (better_p2p(s, best))
                best = s;
        }
        model->p2p[level] = model->options.use_measurements ? best : NULL;
    }
}

static ds_status_t check_key(const ds_event_key_t *key)
{
    if (key->kind != DS_EVENT_COMM || key->op >= DS_COMM_COUNT_)
        return DSI_ERROR(DS_ERR_INVALID_ARG,
                         "event key of kind %d, op %d is not a communication event (accepted: "
                         "kind comm, a known primitive)",
                         key->kind, key->op);
    if (key->dims[0] < 0 || key->group_size < 1 || key->nodes < 1 || key->ranks_per_node < 1 ||
        key->ranks_per_node > key->group_size || key->nodes > key->group_size ||
        (int64_t)key->nodes * key->ranks_per_node < key->group_size || key->dims[1] < 0 ||
        key->variant > DS_COMM_ALGO_PS)
        return DSI_ERROR(DS_ERR_INVALID_ARG,
                         "%s key of %lld bytes on %d ranks, %d nodes, %d per node, algorithm %d "
                         "is not valid (accepted: bytes >= 0 and a layout whose nodes hold the "
                         "group)",
                         ds_comm_op_name((ds_comm_op_t)key->op), (long long)key->dims[0],
                         key->group_size, key->nodes, key->ranks_per_node, key->variant);
    return DS_OK;
}

/* Target span over the widest span a series of `op` (else of any
 * primitive) was measured on; 0 when nothing was measured. */
static double extrapolation_factor(const ds_comm_model_t *model, ds_comm_op_t op, int64_t span)
{
    int32_t most_op = 0, most = 0;
    for (size_t i = 0; i < model->num_series; i++) {
        const dsi_comm_series_t *s = &model->series[i];
        most = DSI_MAX(most, s->span);
        if (s->op == dsi_comm_fit_op(op))
            most_op = DSI_MAX(most_op, s->span);
    }
    most = most_op > 0 ? most_op : most;
    return most > 0 ? (double)span / (double)most : 0.0;
}

/* Assumed when any level the prediction rests on is. */
static ds_provenance_t model_provenance(const ds_comm_model_t *model, ds_comm_op_t op, int top)
{
    const dsi_comm_level_t *lv = model->levels[dsi_comm_fit_op(op)];
    for (int level = 0; level <= top; level++)
        if (lv[level].source == DS_COMM_FIT_ASSUMED)
            return DS_PROV_ASSUMED;
    return DS_PROV_EXTRAPOLATED;
}

/* The band of p->extrapolation, when it extrapolates. */
static void extrapolation_band(const ds_comm_model_t *model, ds_comm_prediction_t *p)
{
    if (p->extrapolation > 1.0 && p->cost.mean_s > 0) {
        double slow, fast;
        dsi_comm_band_rates(model->options.band_leave_out, &slow, &fast);
        dsi_comm_band(p->cost.mean_s, p->extrapolation, slow, fast, &p->low_s, &p->high_s);
    }
}

/* The pairs of a job spanning more nodes than were measured send their
 * flows across the fabric at once: on each rail the job's N nodes send N
 * flows into the N uplinks of a non-blocking tree, and routing that hashes
 * flows onto paths (ECMP, static tables) stacks several on one uplink,
 * which two nodes under one switch never show (sendrecv_perf on
 * h100-ib-cluster01: 45.9 GB/s on 2 nodes, 15.2 on 10).  The band's high
 * end holds the most loaded path at the band's quantile
 * (dsi_comm_collision_load) over the time at the widest span measured, as
 * if that one had no collision; NCCL's collectives keep the rate band, their
 * rings and trees being laid out rail by rail.  Not where a cluster file
 * puts the job under one leaf switch. */
static void collision_band(const ds_comm_model_t *model, const ds_event_key_t *key, int64_t span,
                           double at_measured_s, ds_comm_prediction_t *p)
{
    const ds_cluster_t *c = &model->cluster;
    bool under_one_leaf = c->num_levels > 2 && c->levels[1].span > 0 && span <= c->levels[1].span;
    if (!dsi_comm_spans_job((ds_comm_op_t)key->op, key->nodes) || p->extrapolation <= 1.0 ||
        under_one_leaf || !(at_measured_s > 0))
        return;
    p->high_s = fmax(p->high_s, at_measured_s * dsi_comm_collision_load(span));
}

static void key_shape(const ds_comm_model_t *model, const ds_event_key_t *key, int64_t span,
                      dsi_comm_shape_t *shape)
{
    dsi_comm_shape_init(model, key->group_size, key->nodes, key->ranks_per_node, key->concurrency,
                        key->dims[1], shape);
    dsi_comm_shape_spread(model, shape, key->node_stride, key->dims[2]);
    dsi_comm_shape_span(model, shape, span);
}

static double key_time(const ds_comm_model_t *model, const ds_event_key_t *key,
                       const dsi_comm_shape_t *shape, ds_comm_prediction_t *p)
{
    return dsi_comm_model_time(model, (ds_comm_op_t)key->op, (double)key->dims[0], shape,
                               (ds_comm_algo_t)key->variant, key->variant != 0, &p->algo,
                               &p->ring_s, &p->tree_s);
}

ds_status_t ds_comm_model_predict_in_job(const ds_comm_model_t *model, const ds_event_key_t *key,
                                         int64_t job_nodes, ds_comm_prediction_t *prediction_p)
{
    DSI_TRY(check_key(key));
    ds_comm_op_t op = (ds_comm_op_t)key->op;
    double bytes = (double)key->dims[0];
    ds_comm_prediction_t p;
    memset(&p, 0, sizeof(p));
    /* A pair crossing nodes sends while the job's other pairs do. */
    int64_t span = dsi_comm_spans_job(op, key->nodes) ? DSI_MAX(job_nodes, key->nodes) : key->nodes;
    dsi_comm_shape_t shape;
    key_shape(model, key, span, &shape);
    p.level = shape.top;
    if (key->group_size < 2 || bytes == 0) {
        /* A group of one rank, or an empty message, moves nothing. */
        p.cost.provenance = DS_PROV_ASSUMED;
        p.ring_s = p.tree_s = -1.0;
        p.algo = DS_COMM_ALGO_DIRECT;
        *prediction_p = p;
        return DS_OK;
    }
    bool force = key->variant != 0;
    double t = key_time(model, key, &shape, &p);
    p.low_s = p.high_s = t;
    if (p.ring_s >= 0 && p.tree_s >= 0) {
        p.low_s = fmin(p.ring_s, p.tree_s);
        p.high_s = fmax(p.ring_s, p.tree_s);
    }
    p.cost.mean_s = p.cost.median_s = p.cost.p10_s = p.cost.p90_s = t;
    p.cost.provenance = model_provenance(model, op, shape.top);
    p.extrapolation = extrapolation_factor(model, op, span);
    /* A pair measured on a narrower job: its values, slower by what the
     * model gives the wider span (1 where it models no congestion). */
    double widen = 1.0;
    const dsi_comm_series_t *s = NULL;
    if (model->options.use_measurements && !force)
        s = find_series(model, key, span);
    /* Without a series: the widest span measured (for the band below). */
    int64_t narrower_span = span;
    if (s != NULL)
        narrower_span = s->span;
    else if (dsi_comm_spans_job(op, key->nodes) && p.extrapolation > 1.0)
        narrower_span = DSI_MAX(key->nodes, llround((double)span / p.extrapolation));
    if (narrower_span != span) {
        dsi_comm_shape_t narrower;
        ds_comm_prediction_t unused;
        key_shape(model, key, narrower_span, &narrower);
        double at = key_time(model, key, &narrower, &unused);
        widen = at > 0 ? t / at : 1.0;
    }
    if (s != NULL) {
        ds_cost_t measured;
        if (from_series(s, bytes, &measured)) {
            p.cost = measured;
            if (widen != 1.0) {
                p.cost.mean_s *= widen;
                p.cost.median_s *= widen;
                p.cost.p10_s *= widen;
                p.cost.p90_s *= widen;
                /* Between the spans measured, or beyond the widest. */
                p.cost.provenance =
                    p.extrapolation > 1.0 ? DS_PROV_EXTRAPOLATED : DS_PROV_INTERPOLATED;
            }
        } else if (s->count > 0) {
            /* Beyond a measured shape's sizes the model continues from its
             * edge: never faster than its largest size, never slower than
             * its smallest. */
            const ds_cost_t *edge = bytes < s->bytes[0] ? &s->cost[0] : &s->cost[s->count - 1];
            double at_edge = edge->mean_s * widen;
            double clamped = bytes < s->bytes[0] ? fmin(t, at_edge) : fmax(t, at_edge);
            p.cost.mean_s = p.cost.median_s = p.cost.p10_s = p.cost.p90_s = clamped;
        }
    }
    extrapolation_band(model, &p);
    collision_band(model, key, span, p.cost.mean_s / widen, &p);
    if (p.cost.mean_s > 0) {
        p.algbw_GBps = bytes / p.cost.mean_s * 1e-9;
        p.busbw_GBps = p.algbw_GBps * ds_comm_busbw_factor(op, key->group_size);
    }
    *prediction_p = p;
    return DS_OK;
}

ds_status_t ds_comm_model_predict(const ds_comm_model_t *model, const ds_event_key_t *key,
                                  ds_comm_prediction_t *prediction_p)
{
    return ds_comm_model_predict_in_job(model, key, 0, prediction_p);
}

void ds_comm_prediction_band(const ds_comm_prediction_t *p, double *low_p, double *high_p)
{
    bool band = p->extrapolation > 1.0 && p->cost.mean_s > 0;
    *low_p = band ? fmin(p->low_s / p->cost.mean_s, 1.0) : 1.0;
    *high_p = band ? fmax(p->high_s / p->cost.mean_s, 1.0) : 1.0;
}

ds_status_t ds_comm_model_fill(const ds_comm_model_t *model, const ds_event_set_t *set,
                               ds_cost_table_t *table, size_t *filled_p)
{
    size_t filled = 0;
    for (size_t i = 0; i < ds_event_set_size(set); i++) {
        const ds_event_key_t *key = &ds_event_set_at(set, i)->key;
        if (key->kind != DS_EVENT_COMM || ds_cost_table_find(table, key) != NULL)
            continue;
        ds_comm_prediction_t p;
        DSI_TRY(ds_comm_model_predict_in_job(model, key, model->cluster.nodes, &p));
        DSI_TRY(ds_cost_table_set(table, key, &p.cost));
        double low, high;
        ds_comm_prediction_band(&p, &low, &high);
        if (low != 1.0 || high != 1.0)
            DSI_TRY(ds_cost_table_set_band(table, key, low, high));
        filled++;
    }
    if (filled_p != NULL)
        *filled_p = filled;
    return DS_OK;
}

/* ---- what the fit found ----------------------------------------------------------------- */

ds_status_t ds_comm_model_level_fit(const ds_comm_model_t *model, int level, ds_comm_op_t op,
                                    ds_comm_level_fit_t *fit_p)
{
    if (level < 0 || level >= model->cluster.num_levels || (unsigned)op >= DS_COMM_COUNT_)
        return DSI_ERROR(DS_ERR_INVALID_ARG,
                         "level %d, primitive %d (accepted: levels 0 to %d, a known primitive)",
                         level, (int)op, model->cluster.num_levels - 1);
    const dsi_comm_level_t *lv = &model->levels[op][level];
    ds_comm_level_fit_t fit;
    memset(&fit, 0, sizeof(fit));
    fit.level = level;
    snprintf(fit.level_name, sizeof(fit.level_name), "%s", model->cluster.levels[level].name);
    fit.op = op;
    fit.source = lv->source;
    fit.from_op = lv->from_op;
    if (fit.source == DS_COMM_FIT_DATA && fit.from_op != op)
        fit.source = DS_COMM_FIT_BORROWED; /* parameter-server traffic reads send/recv */
    fit.base_us = level == 0 ? lv->base_s * 1e6 : 0.0;
    fit.hop_us = lv->hop_s * 1e6;
    for (int i = 0; i < lv->num_curves; i++) {
        fit.peak_busbw_GBps =
            fmax(fit.peak_busbw_GBps, dsi_comm_curve_peak(&lv->curves[i].curve) * 1e-9);
        fit.knots += lv->curves[i].curve.count;
    }
    fit.curves = lv->num_curves;
    fit.points = lv->points;
    fit.congestion = level > 0 && model->library->congestion ? lv->congestion : 0.0;
    fit.congestion_fitted = level > 0 && model->library->congestion && lv->congestion_fitted;
    fit.congestion_beyond = level > 0 && model->library->congestion ? lv->congestion_beyond : 0.0;
    *fit_p = fit;
    return DS_OK;
}

void ds_comm_model_print(const ds_comm_model_t *model, ds_comm_op_t op, FILE *out,
                         const char *prefix)
{
    static const char *const sources[] = {"fitted", "borrowed", "assumed"};
    for (int level = 0; level < model->cluster.num_levels; level++) {
        ds_comm_level_fit_t f;
        if (ds_comm_model_level_fit(model, level, op, &f) != DS_OK)
            continue;
        fprintf(out, "%s%s level %d (%s): %s", prefix, ds_comm_op_name(op), level, f.level_name,
                sources[f.source]);
        if (f.source == DS_COMM_FIT_DATA)
            fprintf(out, " on %zu sizes of %d layout%s", f.points, f.curves,
                    f.curves == 1 ? "" : "s");
        else if (f.source == DS_COMM_FIT_BORROWED)
            fprintf(out, " from %s", ds_comm_op_name(f.from_op));
        else
            fprintf(out, " from the cluster");
        if (level == 0)
            fprintf(out, ": %.2f us + %.3f us/hop", f.base_us, f.hop_us);
        else
            fprintf(out, ": %.3f us/hop", f.hop_us);
        fprintf(out, ", bus bandwidth up to %.1f GB/s %s (%d knots)", f.peak_busbw_GBps,
                level == 0 ? "per rank" : "per NIC", f.knots);
        const char *prior = model->cluster.levels[level].congestion_given
                                ? "prior: the cluster file's"
                                : "prior: DS_COMM_CONGESTION_PRIOR";
        if (level > 0 && model->library->congestion && f.congestion_fitted)
            fprintf(out,
                    ", %.1f%% of it lost per doubling of the span up to the widest measured "
                    "(fitted on two spans), %.1f%% beyond it (%s)",
                    100.0 * f.congestion, 100.0 * f.congestion_beyond,
                    f.congestion_beyond > f.congestion ? prior : "the fit");
        else if (level > 0 && model->library->congestion)
            fprintf(out, ", %.1f%% of it lost per doubling of the span beyond the measured (%s)",
                    100.0 * f.congestion, prior);
        fputc('\n', out);
    }
}
