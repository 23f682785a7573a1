/* Costs a trace lacks, from dsmpi's own measurements scaled by the
 * framework-to-own ratio of their operator class (METHOD section 5b). */
#include "dsi_framework.h"

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

ds_status_t ds_framework_calibrate(const ds_cost_table_t *framework, const ds_cost_table_t *own,
                                   ds_cost_table_t *out, ds_framework_calibration_t *calibration)
{
    if (framework == NULL || own == NULL || out == NULL || calibration == NULL)
        return DSI_ERROR(DS_ERR_INVALID_ARG, "ds_framework_calibrate: a NULL argument");
    ds_framework_calibration_t c;
    memset(&c, 0, sizeof(c));
    double fw[DS_FRAMEWORK_CLASS_COUNT_] = {0}, mine[DS_FRAMEWORK_CLASS_COUNT_] = {0};
    double fw_all = 0.0, mine_all = 0.0;
    size_t common_all = 0;
    for (size_t i = 0; i < ds_cost_table_size(own); i++) {
        const ds_event_key_t *key;
        const ds_cost_t *cost;
        ds_cost_table_at(own, i, &key, &cost);
        const ds_cost_t *theirs = ds_cost_table_find(framework, key);
        if (key->kind != DS_EVENT_COMPUTE || theirs == NULL || !(cost->mean_s > 0.0))
            continue;
        ds_framework_class_t cls = ds_framework_class_of(key);
        fw[cls] += theirs->mean_s;
        mine[cls] += cost->mean_s;
        c.common[cls]++;
        fw_all += theirs->mean_s;
        mine_all += cost->mean_s;
        common_all++;
    }
    for (int i = 0; i < DS_FRAMEWORK_CLASS_COUNT_; i++)
        c.ratio[i] = c.common[i] > 0 ? fw[i] / mine[i] : 0.0;
    c.overall = common_all > 0 ? fw_all / mine_all : 0.0;
    for (size_t i = 0; common_all > 0 && i < ds_cost_table_size(own); i++) {
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
        DSI_TRY(ds_cost_table_set(out, key, &scaled));
        c.calibrated++;
    }
    *calibration = c;
    return DS_OK;
}
