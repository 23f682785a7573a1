/* Costs a trace lacks, from dsmpi's own measurements scaled by the
 * framework-to-own ratio of their operator class (METHOD section 5b). */
#include "dsi_framework.h"

#include <stdlib.h>
#include <string.h>

static const char *const class_names[DS_FRAMEWORK_CLASS_COUNT_] = {"gemm", "norm", "elementwise",
                                                                   "embedding-loss", "optimizer"};

const char *ds_framework_class_name(ds_framework_class_t cls)
{
    return (unsigned)cls < DS_FRAMEWORK_CLASS_COUNT_ ? class_names[cls] : "?";
}

ds_framework_class_t ds_framework_class_of(const ds_event_key_t *key)
{
    switch ((ds_op_t)key->op) {
    case DS_OP_GEMM:
    case DS_OP_BATCHED_GEMM:
    case DS_OP_FLASH_ATTENTION: return DS_FRAMEWORK_CLASS_GEMM;
    case DS_OP_LAYERNORM:
    case DS_OP_RMSNORM: return DS_FRAMEWORK_CLASS_NORM;
    case DS_OP_EMBEDDING:
    case DS_OP_CROSS_ENTROPY: return DS_FRAMEWORK_CLASS_EMBEDDING;
    case DS_OP_OPTIMIZER: return DS_FRAMEWORK_CLASS_OPTIMIZER;
    default: return DS_FRAMEWORK_CLASS_ELEMENTWISE;
    }
}

/* A key both tables hold: dsmpi's own time and the framework's. */
typedef struct common_key {
    const ds_event_key_t *key;
    double own_s, framework_s;
} common_key_t;

static int by_own_time(const void *a, const void *b)
{
    const common_key_t *x = a, *y = b;
    return x->own_s < y->own_s ? -1 : x->own_s > y->own_s;
}

/* The framework's time for `own_s` of dsmpi's own on the common keys of one
 * operator (sorted by own time, count >= 1).  A framework spends a time per
 * operator on top of the work (dispatch, autograd bookkeeping), so its ratio
 * to dsmpi's kernels falls as the work grows: between two keys the time is
 * the line through them (a fixed time plus a share of the work), beyond the
 * largest the largest's ratio (its fixed time is a small part there), below
 * the smallest the line through the two smallest, kept between the smallest's
 * ratio (an operator's fixed share only grows as its work shrinks) and the
 * smallest's time (less work never costs more).  One key: its ratio. */
static double framework_time_of(const common_key_t *k, size_t count, double own_s)
{
    if (count == 1 || own_s >= k[count - 1].own_s) {
        const common_key_t *nearest = own_s >= k[count - 1].own_s ? &k[count - 1] : &k[0];
        return own_s * nearest->framework_s / nearest->own_s;
    }
    size_t hi = 1;
    while (hi < count - 1 && k[hi].own_s < own_s)
        hi++;
    const common_key_t *a = &k[hi - 1], *b = &k[hi];
    double t = own_s;
    if (own_s < k[0].own_s) {
        a = &k[0];
        b = &k[1];
    }
    double line = b->own_s > a->own_s ? a->framework_s + (b->framework_s - a->framework_s) *
                                                             (t - a->own_s) / (b->own_s - a->own_s)
                                      : 0.5 * (a->framework_s + b->framework_s);
    if (own_s < k[0].own_s)
        line = DSI_MIN(DSI_MAX(line, own_s * k[0].framework_s / k[0].own_s), k[0].framework_s);
    return line;
}

/* The common keys of `key`'s operator in its pass (else in any pass), sorted
 * by own time, into `match`; their count (0: none). */
static size_t same_operator(const common_key_t *common, size_t count, const ds_event_key_t *key,
                            common_key_t *match)
{
    for (int any_pass = 0; any_pass <= 1; any_pass++) {
        size_t n = 0;
        for (size_t i = 0; i < count; i++)
            if (common[i].key->op == key->op && common[i].key->dtype == key->dtype &&
                (any_pass || common[i].key->pass == key->pass))
                match[n++] = common[i];
        if (n > 0) {
            qsort(match, n, sizeof(*match), by_own_time);
            return n;
        }
    }
    return 0;
}

ds_status_t ds_framework_calibrate(const ds_cost_table_t *framework, const ds_cost_table_t *own,
                                   ds_cost_table_t *out, ds_framework_calibration_t *calibration)
{
    if (framework == NULL || own == NULL || out == NULL || calibration == NULL)
        return DSI_ERROR(DS_ERR_INVALID_ARG, "ds_framework_calibrate: a NULL argument");
    ds_framework_calibration_t c;
    memset(&c, 0, sizeof(c));
    size_t size = ds_cost_table_size(own);
    double *ratios = NULL, *all = NULL;
    common_key_t *common = NULL, *match = NULL;
    ds_status_t status = DS_OK;
    DSI_TRY_GOTO(dsi_calloc(DS_FRAMEWORK_CLASS_COUNT_ * (size + 1), sizeof(double), &ratios),
                 status, out);
    DSI_TRY_GOTO(dsi_calloc(size + 1, sizeof(double), &all), status, out);
    DSI_TRY_GOTO(dsi_calloc(size + 1, sizeof(*common), &common), status, out);
    DSI_TRY_GOTO(dsi_calloc(size + 1, sizeof(*match), &match), status, out);
    size_t common_all = 0;
    for (size_t i = 0; i < size; i++) {
        const ds_event_key_t *key;
        const ds_cost_t *cost;
        ds_cost_table_at(own, i, &key, &cost);
        const ds_cost_t *theirs = ds_cost_table_find(framework, key);
        if (key->kind != DS_EVENT_COMPUTE || theirs == NULL || !(cost->mean_s > 0.0) ||
            !(theirs->mean_s > 0.0))
            continue;
        ds_framework_class_t cls = ds_framework_class_of(key);
        double ratio = theirs->mean_s / cost->mean_s;
        ratios[cls * (size + 1) + c.common[cls]++] = ratio;
        common[common_all] = (common_key_t){key, cost->mean_s, theirs->mean_s};
        all[common_all++] = ratio;
    }
    for (int i = 0; i < DS_FRAMEWORK_CLASS_COUNT_; i++)
        c.ratio[i] = dsi_median(ratios + i * (size + 1), c.common[i]);
    c.overall = dsi_median(all, common_all);
    for (size_t i = 0; common_all > 0 && i < size; i++) {
        const ds_event_key_t *key;
        const ds_cost_t *cost;
        ds_cost_table_at(own, i, &key, &cost);
        if (key->kind != DS_EVENT_COMPUTE || ds_cost_table_find(framework, key) != NULL)
            continue;
        ds_framework_class_t cls = ds_framework_class_of(key);
        double ratio = c.ratio[cls] > 0.0 ? c.ratio[cls] : c.overall;
        size_t n = same_operator(common, common_all, key, match);
        if (n > 0 && cost->mean_s > 0.0) {
            ratio = framework_time_of(match, n, cost->mean_s) / cost->mean_s;
            c.by_operator++;
        }
        ds_cost_t scaled = *cost;
        scaled.mean_s *= ratio;
        scaled.median_s *= ratio;
        scaled.p10_s *= ratio;
        scaled.p90_s *= ratio;
        scaled.provenance = DS_PROV_CALIBRATED;
        DSI_TRY_GOTO(ds_cost_table_set(out, key, &scaled), status, out);
        c.calibrated++;
    }
    *calibration = c;
out:
    dsi_free(ratios);
    dsi_free(all);
    dsi_free(common);
    dsi_free(match);
    return status;
}
