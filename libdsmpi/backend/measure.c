/*
 * The measurement loop for compute: warm-up, then batches of timed
 * repetitions until the median's confidence interval is narrow enough or
 * the time budget is spent, and the statistics kept per key.
 *
 * One loop serves a single kernel and a layer pass: a repetition runs the
 * operators back to back with a device timestamp before each operator and
 * one after the last, so operator i of repetition r takes stamp
 * (r n + i + 1) - (r n + i) and the pass takes (r + 1) n - r n.  The device
 * is synchronised once per batch, never between operators, so on a GPU the
 * queue stays full as it does in training.
 */
#include "dsi_backend.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void ds_measure_config_default(ds_measure_config_t *config)
{
    config->warmup = (int)dsi_param_int(DSI_PARAM_MEASURE_WARMUP);
    config->warmup_s = dsi_param_double(DSI_PARAM_MEASURE_WARMUP_S);
    config->min_reps = (int)dsi_param_int(DSI_PARAM_MEASURE_MIN_REPS);
    config->max_reps = (int)dsi_param_int(DSI_PARAM_MEASURE_MAX_REPS);
    config->target_rel_ci = dsi_param_double(DSI_PARAM_MEASURE_TARGET_CI);
    config->budget_s = dsi_param_double(DSI_PARAM_MEASURE_BUDGET_S);
    config->copies = 1;
}

const char *ds_stop_reason_name(ds_stop_reason_t reason)
{
    switch (reason) {
    case DS_STOP_CONVERGED: return "converged";
    case DS_STOP_BUDGET: return "budget";
    case DS_STOP_MAX_REPS: return "max-reps";
    }
    return "unknown";
}

ds_status_t dsi_measure_check_config(const ds_measure_config_t *c)
{
    if (c == NULL)
        return DSI_ERROR(DS_ERR_INVALID_ARG, "no measurement configuration given");
    if (c->warmup < 0 || c->warmup_s < 0.0 || !(c->budget_s >= 0.0) || !(c->target_rel_ci >= 0.0))
        return DSI_ERROR(DS_ERR_INVALID_ARG,
                         "measurement warmup=%d warmup_s=%g budget_s=%g target_ci=%g: none may be "
                         "negative",
                         c->warmup, c->warmup_s, c->budget_s, c->target_rel_ci);
    if (c->copies < 0 || c->copies > 4096)
        return DSI_ERROR(DS_ERR_INVALID_ARG,
                         "measurement copies=%d (accepted: 0 or 1 = one copy, up to 4096)",
                         c->copies);
    if (c->min_reps < 1 || c->max_reps < c->min_reps || c->max_reps > 10000000)
        return DSI_ERROR(DS_ERR_INVALID_ARG,
                         "measurement min_reps=%d max_reps=%d: need 1 <= min_reps <= max_reps <= "
                         "10000000",
                         c->min_reps, c->max_reps);
    return DS_OK;
}

int dsi_warmup_more(const ds_measure_config_t *c, int done, double elapsed_s)
{
    if (done == 0)
        return c->warmup > 0 || c->warmup_s > 0.0;
    if (elapsed_s >= 0.25 * c->budget_s) /* a long kernel: one run warms it */
        return 0;
    return done < c->warmup || elapsed_s < c->warmup_s;
}

size_t dsi_measure_next_batch(const ds_measure_config_t *c, size_t reps, double rel_ci,
                              double spent_s, double per_rep_s, size_t max_batch,
                              ds_stop_reason_t *stop_p)
{
    size_t batch;
    if (reps < (size_t)c->min_reps) {
        batch = (size_t)c->min_reps - reps;
    } else if (rel_ci < c->target_rel_ci) {
        *stop_p = DS_STOP_CONVERGED;
        return 0;
    } else if (reps >= (size_t)c->max_reps) {
        *stop_p = DS_STOP_MAX_REPS;
        return 0;
    } else if (spent_s >= c->budget_s) {
        *stop_p = DS_STOP_BUDGET;
        return 0;
    } else {
        /* Grow by a quarter, within what the budget has left. */
        batch = DSI_MAX(reps / 4, (size_t)1);
        if (per_rep_s > 0.0)
            batch = DSI_MIN(batch, (size_t)DSI_MAX(1.0, (c->budget_s - spent_s) / per_rep_s));
        batch = DSI_MIN(batch, (size_t)c->max_reps - reps);
    }
    return DSI_MIN(batch, max_batch);
}

double dsi_measure_expected_ci(double spread, size_t n)
{
    if (n == 0)
        return INFINITY;
    return 1.96 * 1.2533141373155003 * spread / sqrt((double)n); /* 1.96 sqrt(pi / 2) */
}

void dsi_measure_expect(const ds_measure_config_t *c, const dsi_loop_model_t *m,
                        dsi_loop_expectation_t *out)
{
    dsi_loop_expectation_t e;
    memset(&e, 0, sizeof(e));
    e.stop = DS_STOP_MAX_REPS;
    double elapsed = 0.0;
    while (dsi_warmup_more(c, e.warmup, elapsed)) {
        elapsed += m->warmup_s;
        e.warmup++;
    }
    double warm = elapsed, timed = 0.0;
    for (;;) {
        double per_rep = 0.0;
        if (e.reps > 0)
            per_rep =
                m->rate_from_wall ? (elapsed - warm) / (double)e.reps : timed / (double)e.reps;
        double ci =
            e.reps >= (size_t)c->min_reps ? dsi_measure_expected_ci(m->spread, e.reps) : INFINITY;
        size_t batch =
            dsi_measure_next_batch(c, e.reps, ci, elapsed, per_rep, m->max_batch, &e.stop);
        if (batch == 0)
            break;
        elapsed += (double)batch * m->rep_wall_s + m->batch_wall_s;
        timed += (double)batch * m->run_s;
        e.reps += batch;
        e.batches++;
    }
    e.seconds = elapsed;
    *out = e;
}

/* ---- statistics ------------------------------------------------------------------------------ */

/* Quantile q of sorted samples by linear interpolation (type 7). */
static double quantile(const double *sorted, size_t n, double q)
{
    double position = q * (double)(n - 1);
    size_t below = (size_t)position;
    if (below + 1 >= n)
        return sorted[n - 1];
    double fraction = position - (double)below;
    return sorted[below] + fraction * (sorted[below + 1] - sorted[below]);
}

/* Statistics of sorted samples. */
static void stats_of_sorted(const double *sorted, size_t n, double sum, ds_measurement_t *m)
{
    memset(m, 0, sizeof(*m));
    m->cost.mean_s = sum / (double)n;
    m->cost.median_s = quantile(sorted, n, 0.5);
    m->cost.p10_s = quantile(sorted, n, 0.1);
    m->cost.p90_s = quantile(sorted, n, 0.9);
    m->cost.repetitions = (int64_t)n;
    m->cost.provenance = DS_PROV_MEASURED;
    m->min_s = sorted[0];
    m->max_s = sorted[n - 1];
    /* Distribution-free 95% CI of the median (order statistics, 1-based). */
    double half = 1.96 * sqrt((double)n) / 2.0;
    double lo = floor((double)n / 2.0 - half), hi = ceil(1.0 + (double)n / 2.0 + half);
    size_t j = lo < 1.0 ? 1 : (size_t)lo, k = hi > (double)n ? n : (size_t)hi;
    double median = m->cost.median_s;
    m->rel_ci = median > 0.0 ? (sorted[k - 1] - sorted[j - 1]) / (2.0 * median)
                             : (sorted[k - 1] > sorted[j - 1] ? INFINITY : 0.0);
    m->hist_lo_s = m->min_s;
    m->hist_hi_s = m->max_s;
    double width = (m->max_s - m->min_s) / DS_HIST_BINS;
    for (size_t i = 0; i < n; i++) {
        int bin = width > 0.0 ? (int)((sorted[i] - m->min_s) / width) : 0;
        m->hist[bin >= DS_HIST_BINS ? DS_HIST_BINS - 1 : bin]++;
    }
}

ds_status_t ds_measurement_from_samples(const double *samples, size_t count,
                                        ds_measurement_t *measurement_p)
{
    ds_status_t status = DS_OK;
    double *sorted = NULL, sum = 0.0;
    if (count == 0)
        return DSI_ERROR(DS_ERR_INVALID_ARG, "statistics of no samples");
    for (size_t i = 0; i < count; i++) {
        if (!isfinite(samples[i]) || samples[i] < 0.0)
            return DSI_ERROR(DS_ERR_INVALID_ARG,
                             "sample %zu is %g seconds (accepted: finite, not negative)", i,
                             samples[i]);
        sum += samples[i];
    }
    DSI_TRY(dsi_malloc(count * sizeof(*sorted), &sorted));
    memcpy(sorted, samples, count * sizeof(*sorted));
    qsort(sorted, count, sizeof(*sorted), dsi_compare_double);
    ds_measurement_t m;
    stats_of_sorted(sorted, count, sum, &m);
    *measurement_p = m;
    dsi_free(sorted);
    return status;
}

/* ---- the loop -------------------------------------------------------------------------------- */

typedef struct samples {
    double *data;
    size_t count, capacity;
} samples_t;

static ds_status_t samples_reserve(samples_t *s, size_t count)
{
    if (count <= s->capacity)
        return DS_OK;
    size_t capacity = DSI_MAX(count, 2 * s->capacity);
    DSI_TRY(dsi_realloc_array(&s->data, capacity, sizeof(*s->data)));
    s->capacity = capacity;
    return DS_OK;
}

/* Runs every operator of the sequence once, stamping before each operator
 * (slot base + i) when `stamp` is set. */
static ds_status_t run_sequence(ds_backend_t *b, void *const *impls, size_t n, int stamp,
                                size_t base)
{
    const dsi_backend_ops_t *ops = b->ops;
    for (size_t i = 0; i < n; i++) {
        if (stamp)
            DSI_TRY(ops->stamp(b, base + i));
        if (impls[i] != NULL)
            DSI_TRY(ops->kernel_run(impls[i]));
    }
    return DS_OK;
}

/* Stamps a batch may use: the batch size is limited so that every
 * repetition's stamps fit. */
#define STAMP_SLOTS 8192

size_t dsi_measure_max_batch(size_t ops)
{
    return DSI_MAX((size_t)1, (STAMP_SLOTS - 1) / DSI_MAX(ops, (size_t)1));
}

/* Measures the sequence impls[0..n-1] (NULL entries are skipped but keep a
 * slot, so per-operator indices match the caller's), or `copies` such
 * sequences one after the other in impls[c n .. c n + n - 1], repetition r
 * running copy r mod copies.  per_op may be NULL. */
/* Copies of a sequence differ only in where their buffers landed.  A copy
 * whose runs take more than SLOW_COPY times the fastest copy's (median
 * against median) is the placement, not the work: on a virtual machine some
 * buffers stream several times slower than others of the same kernel for as
 * long as they live.  Its runs are left out of `total` and `each` (rep r ran
 * copy r mod copies). */
#define SLOW_COPY 1.5

size_t dsi_measure_drop_slow_copies(double *total, size_t count, double *const *each, size_t n,
                                    size_t copies)
{
    double median[64], v[4096];
    if (copies < 2 || copies > DSI_ARRAY_SIZE(median) || count < 2 * copies ||
        count > DSI_ARRAY_SIZE(v))
        return count;
    double fastest = INFINITY;
    for (size_t c = 0; c < copies; c++) {
        size_t m = 0;
        for (size_t r = c; r < count; r += copies)
            v[m++] = total[r];
        qsort(v, m, sizeof(*v), dsi_compare_double);
        median[c] = v[m / 2];
        fastest = DSI_MIN(fastest, median[c]);
    }
    size_t kept = 0;
    for (size_t r = 0; r < count; r++) {
        if (median[r % copies] > SLOW_COPY * fastest)
            continue;
        total[kept] = total[r];
        for (size_t i = 0; i < n && each != NULL; i++)
            each[i][kept] = each[i][r];
        kept++;
    }
    if (kept < count)
        DSI_DEBUG("%zu of %zu runs left out: their copies ran over %.1fx the fastest copy",
                  count - kept, count, SLOW_COPY);
    return kept;
}

static ds_status_t measure_sequence(ds_backend_t *b, void *const *impls, size_t n, size_t copies,
                                    const ds_measure_config_t *config, ds_measurement_t *total_p,
                                    ds_measurement_t *per_op)
{
    ds_status_t status = DS_OK;
    const dsi_backend_ops_t *ops = b->ops;
    samples_t total = {NULL, 0, 0};
    samples_t *each = NULL;
    DSI_TRY(dsi_measure_check_config(config));
    if (n == 0)
        return DSI_ERROR(DS_ERR_INVALID_ARG, "nothing to measure: an empty sequence");
    size_t max_batch = dsi_measure_max_batch(n);
    DSI_TRY(ops->stamps_reserve(b, max_batch * n + 1));
    if (per_op != NULL)
        DSI_TRY(dsi_calloc(n, sizeof(*each), &each));

    /* Warm-up (dsi_warmup_more); synchronising after each pass makes the
     * clock see device time, not launch time. */
    double start = dsi_now_s();
    for (int done = 0; dsi_warmup_more(config, done, dsi_now_s() - start); done++) {
        for (size_t c = 0; c < copies; c++)
            DSI_TRY_GOTO(run_sequence(b, impls + c * n, n, 0, 0), status, out);
        DSI_TRY_GOTO(ops->synchronize(b), status, out);
    }

    ds_measurement_t stats;
    memset(&stats, 0, sizeof(stats));
    ds_stop_reason_t stop = DS_STOP_MAX_REPS;
    double timed_s = 0.0;
    for (;;) {
        size_t reps = total.count;
        if (reps >= (size_t)config->min_reps)
            DSI_TRY_GOTO(ds_measurement_from_samples(total.data, reps, &stats), status, out);
        size_t batch = dsi_measure_next_batch(
            config, reps, reps > 0 ? stats.rel_ci : INFINITY, dsi_now_s() - start,
            reps > 0 ? timed_s / (double)reps : 0.0, max_batch, &stop);
        if (batch == 0)
            break;
        DSI_TRY_GOTO(samples_reserve(&total, reps + batch), status, out);
        for (size_t i = 0; i < n && each != NULL; i++)
            DSI_TRY_GOTO(samples_reserve(&each[i], reps + batch), status, out);
        for (size_t r = 0; r < batch; r++)
            DSI_TRY_GOTO(run_sequence(b, impls + ((reps + r) % copies) * n, n, 1, r * n), status,
                         out);
        DSI_TRY_GOTO(ops->stamp(b, batch * n), status, out);
        DSI_TRY_GOTO(ops->synchronize(b), status, out);
        for (size_t r = 0; r < batch; r++) {
            double seconds = 0.0;
            DSI_TRY_GOTO(ops->elapsed(b, r * n, (r + 1) * n, &seconds), status, out);
            total.data[total.count++] = seconds;
            timed_s += seconds;
            for (size_t i = 0; i < n && each != NULL; i++) {
                DSI_TRY_GOTO(ops->elapsed(b, r * n + i, r * n + i + 1, &seconds), status, out);
                each[i].data[each[i].count++] = seconds;
            }
        }
    }
    if (copies > 1) {
        double **columns = NULL;
        if (each != NULL) {
            DSI_TRY_GOTO(dsi_calloc(n, sizeof(*columns), &columns), status, out);
            for (size_t i = 0; i < n; i++)
                columns[i] = each[i].data;
        }
        size_t kept = dsi_measure_drop_slow_copies(total.data, total.count, columns, n, copies);
        dsi_free(columns);
        for (size_t i = 0; each != NULL && i < n; i++)
            each[i].count = kept;
        if (kept < total.count) {
            total.count = kept;
            DSI_TRY_GOTO(ds_measurement_from_samples(total.data, total.count, &stats), status, out);
        }
    }
    stats.stop = stop;
    stats.wall_s = dsi_now_s() - start;
    if (per_op != NULL) {
        for (size_t i = 0; i < n; i++) {
            if (impls[i] == NULL) {
                memset(&per_op[i], 0, sizeof(per_op[i]));
                continue;
            }
            DSI_TRY_GOTO(ds_measurement_from_samples(each[i].data, each[i].count, &per_op[i]),
                         status, out);
            per_op[i].stop = stop;
            per_op[i].wall_s = stats.wall_s;
        }
    }
    *total_p = stats;
out:
    if (each != NULL)
        for (size_t i = 0; i < n; i++)
            dsi_free(each[i].data);
    dsi_free(each);
    dsi_free(total.data);
    return status;
}

ds_status_t ds_kernel_measure(ds_kernel_t *kernel, const ds_measure_config_t *config,
                              ds_measurement_t *measurement_p)
{
    return measure_sequence(kernel->backend, &kernel->impl, 1, 1, config, measurement_p, NULL);
}

ds_status_t ds_measure_compute(ds_backend_t *backend, const ds_event_key_t *key,
                               const ds_measure_config_t *config, ds_measurement_t *measurement_p)
{
    ds_status_t status = DS_OK;
    ds_kernel_t *kernel = NULL;
    DSI_TRY(dsi_measure_check_config(config));
    DSI_TRY(ds_kernel_prepare(backend, key, &kernel));
    status = ds_kernel_measure(kernel, config, measurement_p);
    ds_kernel_destroy(kernel);
    return status;
}

ds_status_t ds_measure_layer(ds_backend_t *backend, const ds_event_key_t *keys, size_t count,
                             const ds_measure_config_t *config, ds_measurement_t *total_p,
                             ds_measurement_t *per_op_p)
{
    ds_status_t status = DS_OK;
    void **impls = NULL;
    size_t computes = 0;
    DSI_TRY(dsi_measure_check_config(config));
    if (keys == NULL || count == 0)
        return DSI_ERROR(DS_ERR_INVALID_ARG, "a layer pass of no operators");
    size_t copies = config->copies > 1 ? (size_t)config->copies : 1;
    DSI_TRY(dsi_calloc(count * copies, sizeof(*impls), &impls));
    for (size_t c = 0; c < copies; c++) {
        void **copy = impls + c * count;
        const void *previous = NULL; /* the last compute operator: its output feeds the next */
        for (size_t i = 0; i < count; i++) {
            if (keys[i].kind != DS_EVENT_COMPUTE)
                continue;
            DSI_TRY_GOTO(backend->ops->kernel_prepare(backend, &keys[i], &copy[i]), status, out);
            computes++;
            if (previous != NULL) {
                int chained = 0;
                DSI_TRY_GOTO(backend->ops->kernel_chain(copy[i], previous, &chained), status, out);
            }
            previous = copy[i];
        }
    }
    if (computes == 0) {
        status = DSI_ERROR(DS_ERR_INVALID_ARG,
                           "a layer pass of %zu communication events and no compute event", count);
        goto out;
    }
    status = measure_sequence(backend, impls, count, copies, config, total_p, per_op_p);
out:
    for (size_t i = 0; i < count * copies; i++)
        if (impls[i] != NULL)
            backend->ops->kernel_destroy(impls[i]);
    dsi_free(impls);
    return status;
}

ds_status_t ds_backend_calibrate(ds_backend_t *backend, const ds_measure_config_t *config,
                                 ds_measurement_t *measurement_p)
{
    ds_event_key_t key;
    memset(&key, 0, sizeof(key));
    key.kind = DS_EVENT_COMPUTE;
    key.op = DS_OP_GEMM;
    key.pass = DS_PASS_FORWARD;
    key.dtype = backend->kind == DS_BACKEND_CUDA ? DS_DTYPE_BF16 : DS_DTYPE_FP32;
    key.variant = DS_GEMM_TRANS_B;
    int64_t size = backend->kind == DS_BACKEND_CUDA ? 8192 : 1024;
    key.dims[0] = key.dims[1] = key.dims[2] = size;
    key.dims[3] = 1;
    return ds_measure_compute(backend, &key, config, measurement_p);
}
