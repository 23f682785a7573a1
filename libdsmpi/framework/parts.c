/* Parts of an iteration (layer passes, embedding, head, optimizer) as a
 * trace times them and as a cost table prices them: what validate compares. */
#include "dsi_framework.h"

#include "events/dsi_events.h"
#include "model/dsi_model.h"

#include <string.h>

static const char *const part_names[DS_FRAMEWORK_PART_COUNT_] = {
    "layer fwd", "layer bwd", "embedding fwd", "embedding bwd",
    "head fwd",  "head bwd",  "optimizer"};

const char *ds_framework_part_name(ds_framework_part_t part)
{
    return (unsigned)part < DS_FRAMEWORK_PART_COUNT_ ? part_names[part] : "?";
}

static bool is_part(const dsi_trace_event_t *e, ds_framework_part_t part)
{
    if (e->role != DSI_ROLE_RANGE)
        return false;
    switch (part) {
    case DS_FRAMEWORK_LAYER_FORWARD: return e->layer >= 0 && e->pass == DS_PASS_FORWARD;
    case DS_FRAMEWORK_LAYER_BACKWARD: return e->layer >= 0 && e->pass == DS_PASS_BACKWARD;
    case DS_FRAMEWORK_EMBEDDING_FORWARD:
        return e->layer == DSI_PART_EMBEDDING && e->pass == DS_PASS_FORWARD;
    case DS_FRAMEWORK_EMBEDDING_BACKWARD:
        return e->layer == DSI_PART_EMBEDDING && e->pass == DS_PASS_BACKWARD;
    case DS_FRAMEWORK_HEAD_FORWARD: return e->layer == DSI_PART_HEAD && e->pass == DS_PASS_FORWARD;
    case DS_FRAMEWORK_HEAD_BACKWARD:
        return e->layer == DSI_PART_HEAD && e->pass == DS_PASS_BACKWARD;
    case DS_FRAMEWORK_OPTIMIZER: return e->layer == DSI_RANGE_OPTIMIZER;
    default: return false;
    }
}

void ds_torch_trace_part_time(const ds_torch_trace_t *trace, ds_framework_part_t part,
                              size_t *count_p, double *mean_s_p)
{
    size_t count = 0;
    double sum = 0.0;
    /* Each range against the iterations (few): the steps first. */
    size_t num_steps = 0;
    const dsi_trace_event_t **steps = NULL;
    if (trace != NULL &&
        dsi_calloc((size_t)trace->num_iterations + 1, sizeof(*steps), &steps) == DS_OK)
        for (size_t i = 0; i < trace->count && num_steps < (size_t)trace->num_iterations; i++)
            if (trace->events[i].role == DSI_ROLE_STEP)
                steps[num_steps++] = &trace->events[i];
    for (size_t i = 0; steps != NULL && i < trace->count; i++) {
        const dsi_trace_event_t *e = &trace->events[i];
        if (!is_part(e, part))
            continue;
        bool inside = false; /* in an iteration */
        for (size_t j = 0; j < num_steps && !inside; j++)
            inside = e->start_us >= steps[j]->start_us && e->start_us < steps[j]->end_us;
        if (!inside)
            continue;
        count++;
        sum += (dsi_trace_device_timed(trace) ? dsi_trace_device_elapsed_us(trace, i)
                                              : e->end_us - e->start_us) *
               1e-6;
    }
    dsi_free(steps);
    *count_p = count;
    *mean_s_p = count > 0 ? sum / (double)count : 0.0;
}

static ds_status_t pass_sum(const ds_model_t *model, const dsi_shape_ctx_t *ctx, int layer,
                            ds_pass_t pass, const ds_cost_table_t *costs, double *seconds_p,
                            size_t *missing_p)
{
    dsi_op_t *ops = NULL;
    size_t count = 0;
    DSI_TRY(dsi_calloc(DSI_MAX_LAYER_OPS, sizeof(*ops), &ops));
    ds_status_t status =
        dsi_model_layer_ops(model, layer, ctx, pass, ops, DSI_MAX_LAYER_OPS, &count);
    double sum = 0.0;
    for (size_t i = 0; status == DS_OK && i < count; i++) {
        if (ops[i].key.kind != DS_EVENT_COMPUTE)
            continue;
        const ds_cost_t *cost = ds_cost_table_find(costs, &ops[i].key);
        if (cost == NULL)
            (*missing_p)++;
        else
            sum += cost->mean_s;
    }
    ds_event_key_t gap; /* where the costs have it: the framework's time between the operators */
    if (status == DS_OK && dsi_pass_gap_key(ops, count, layer, pass, &gap)) {
        const ds_cost_t *cost = ds_cost_table_find(costs, &gap);
        sum += cost != NULL ? cost->mean_s : 0.0;
    }
    dsi_free(ops);
    if (status != DS_OK)
        return status;
    *seconds_p = sum;
    return DS_OK;
}

ds_status_t ds_framework_part_seconds(const ds_model_t *model, const ds_strategy_t *strategy,
                                      int stage, const ds_cost_table_t *costs,
                                      ds_framework_part_t part, double *seconds_p,
                                      size_t *missing_p)
{
    if (model == NULL || strategy == NULL || costs == NULL ||
        (unsigned)part >= DS_FRAMEWORK_PART_COUNT_)
        return DSI_ERROR(DS_ERR_INVALID_ARG, "ds_framework_part_seconds: a bad argument");
    if (stage < 0 || stage >= strategy->pp)
        return DSI_ERROR(DS_ERR_INVALID_ARG, "pipeline stage %d (accepted: 0 to %d)", stage,
                         strategy->pp - 1);
    dsi_shape_ctx_t ctx;
    dsi_shape_ctx_init(&ctx, model, strategy);
    ds_model_info_t info;
    ds_model_get_info(model, &info);
    size_t missing = 0;
    double seconds = 0.0;
    ds_pass_t pass = (part % 2 == 0) ? DS_PASS_FORWARD : DS_PASS_BACKWARD;
    if (part == DS_FRAMEWORK_OPTIMIZER) {
        int64_t params = dsi_stage_params(model, strategy, stage);
        ds_event_key_t key = dsi_optimizer_key(dsi_optimizer_shard(strategy, params));
        const ds_cost_t *cost = ds_cost_table_find(costs, &key);
        missing += cost == NULL;
        seconds = cost != NULL ? cost->mean_s : 0.0;
    } else if (part <= DS_FRAMEWORK_LAYER_BACKWARD) {
        for (int layer = 0; layer < info.num_layers; layer++) {
            double s = 0.0;
            DSI_TRY(pass_sum(model, &ctx, layer, pass, costs, &s, &missing));
            seconds += s / info.num_layers;
        }
    } else {
        int layer = part <= DS_FRAMEWORK_EMBEDDING_BACKWARD ? DSI_PART_EMBEDDING : DSI_PART_HEAD;
        DSI_TRY(pass_sum(model, &ctx, layer, pass, costs, &seconds, &missing));
    }
    *seconds_p = seconds;
    if (missing_p != NULL)
        *missing_p = missing;
    return DS_OK;
}
