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

static int compare_doubles(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *values, size_t count)
{
    if (count == 0)
        return 0.0;
    qsort(values, count, sizeof(double), compare_doubles);
    return count % 2 ? values[count / 2] : 0.5 * (values[count / 2 - 1] + values[count / 2]);
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
    ds_status_t status = DS_OK;
    DSI_TRY_GOTO(dsi_calloc(DS_FRAMEWORK_CLASS_COUNT_ * (size + 1), sizeof(double), &ratios),
                 status, out);
    DSI_TRY_GOTO(dsi_calloc(size + 1, sizeof(double), &all), status, out);
    size_t common_all = 0;
    for (size_t i = 0; i < size; i++) {
        const ds_event_key_t *key;
        const ds_cost_t *cost;
        ds_cost_table_at(own, i, &key, &cost);
        const ds_cost_t *theirs = ds_cost_table_find(framework, key);
        if (key->kind != DS_EVENT_COMPUTE || theirs == NULL || !(cost->mean_s > 0.0))
            continue;
        ds_framework_class_t cls = ds_framework_class_of(key);
        double ratio = theirs->mean_s / cost->mean_s;
        ratios[cls * (size + 1) + c.common[cls]++] = ratio;
        all[common_all++] = ratio;
    }
    for (int i = 0; i < DS_FRAMEWORK_CLASS_COUNT_; i++)
        c.ratio[i] = median(ratios + i * (size + 1), c.common[i]);
    c.overall = median(all, common_all);
    for (size_t i = 0; common_all > 0 && i < size; i++) {
        const ds_event_key_t *key;
        const ds_cost_t *cost;
        ds_cost_table_at(own, i, &key, &cost);
        if (key->kind != DS_EVENT_COMPUTE || ds_cost_table_find(framework, key) != NULL)
            continue;
        ds_framework_class_t cls = ds_framework_class_of(key);
        double ratio = c.ratio[cls] > 0.0 ? c.ratio[cls] : c.overall;
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
    return status;
}
