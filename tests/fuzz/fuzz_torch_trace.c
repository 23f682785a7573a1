/* Fuzz target: torch.profiler traces.  The first byte picks the traced run
 * (tensor and pipeline degree, the stage, whether a model loads); the rest is
 * the trace, plain or gzip-compressed (capped at 4 MiB once inflated, through
 * DS_MAX_TRACE_BYTES, so that an input inflating a thousandfold stays a quick
 * run).  A trace that reads is mapped onto a small GPT-2-style model and its
 * costs calibrated against a small table of own costs. */
#include <dsmpi/dsmpi.h>

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char model_json[] =
    "{\"model_type\": \"gpt2\", \"n_embd\": 128, \"n_layer\": 2, \"n_head\": 4, "
    "\"vocab_size\": 4096, \"n_positions\": 128, \"activation_function\": \"gelu_new\"}";

static void map_and_calibrate(const ds_torch_trace_t *trace, uint8_t pick)
{
    ds_model_t *model = NULL;
    ds_cost_table_t *costs = NULL, *own = NULL, *out = NULL;
    if (ds_model_load_json(model_json, sizeof(model_json) - 1, "fuzz-model", &model) != DS_OK ||
        ds_model_set_seq_len(model, 64) != DS_OK)
        goto out;
    ds_strategy_t s;
    ds_strategy_init(&s);
    s.tp = (pick & 1) ? 2 : 1;
    s.pp = (pick & 2) ? 2 : 1;
    s.dp = (pick & 4) ? 2 : 1;
    s.mbs = 2;
    s.gbs = 4 * s.dp;
    int gpus = s.tp * s.pp * s.dp;
    if (ds_strategy_resolve(&s, model, gpus, gpus) != DS_OK)
        goto out;
    ds_framework_result_t result;
    if (ds_cost_table_create(&costs) != DS_OK || ds_cost_table_create(&own) != DS_OK ||
        ds_cost_table_create(&out) != DS_OK ||
        ds_torch_trace_map(trace, model, &s, (pick >> 3) & 1, costs, &result) != DS_OK)
        goto out;
    if (ds_cost_table_parse(own,
                            "gemm fwd fp32 NT m=128 n=384 k=128 = 1e-4\n"
                            "layernorm fwd fp32 rows=128 cols=128 = 1e-5\n"
                            "softmax bwd fp32 rows=512 cols=64 causal = 2e-5\n",
                            "own") == DS_OK) {
        ds_framework_calibration_t calibration;
        (void)ds_framework_calibrate(costs, own, out, &calibration);
    }
out:
    ds_cost_table_destroy(out);
    ds_cost_table_destroy(own);
    ds_cost_table_destroy(costs);
    ds_model_destroy(model);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static bool capped = false;
    if (!capped) { /* before the library first reads its tunables */
        setenv("DS_MAX_TRACE_BYTES", "4194304", 1);
        capped = true;
    }
    if (size < 1 || size > (1 << 20))
        return 0;
    ds_torch_trace_t *trace = NULL;
    if (ds_torch_trace_parse((const char *)data + 1, size - 1, "fuzz-trace.json", &trace) ==
        DS_OK) {
        ds_torch_trace_info_t info;
        ds_torch_trace_get_info(trace, &info);
        (void)ds_torch_trace_iteration_s(trace, info.iterations - 1);
        ds_torch_collective_t *collectives = NULL;
        size_t num_collectives = 0;
        if (ds_torch_trace_collectives(trace, &collectives, &num_collectives) == DS_OK)
            ds_torch_collectives_free(collectives);
        map_and_calibrate(trace, data[0]);
    }
    ds_torch_trace_destroy(trace);
    return 0;
}
