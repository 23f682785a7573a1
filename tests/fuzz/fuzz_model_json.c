/* Fuzz target: model JSON (Hugging Face configs and dsmpi layer lists), then
 * the events of a small strategy on the model when it loads. */
#include <dsmpi/dsmpi.h>

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ds_model_t *model = NULL;
    if (ds_model_load_json((const char *)data, size, "fuzz.json", &model) != DS_OK)
        return 0;
    ds_strategy_t strategy;
    ds_cluster_t cluster;
    ds_event_set_t *events = NULL;
    ds_strategy_init(&strategy);
    strategy.gbs = 8;
    if (ds_cluster_from_gpus(&cluster, 8, 8) == DS_OK &&
        ds_strategy_parse("tp=2,pp=2", &strategy) == DS_OK &&
        ds_strategy_resolve(&strategy, model, 8, 8) == DS_OK &&
        ds_events_generate(model, &strategy, &cluster, &events) == DS_OK) {
        ds_event_totals_t totals;
        ds_event_set_totals(events, &totals);
    }
    ds_event_set_destroy(events);
    ds_model_destroy(model);
    return 0;
}
