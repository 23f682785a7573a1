/* A program outside the dsmpi tree, built against its installed package. */
#include <dsmpi/dsmpi.h>

#include <stdio.h>

int main(void)
{
    ds_model_t *model = NULL;
    ds_strategy_t strategy;
    ds_cluster_t cluster;
    ds_event_set_t *events = NULL;
    ds_strategy_init(&strategy);
    if (ds_model_load("gpt2-medium", &model) != DS_OK ||
        ds_cluster_from_gpus(&cluster, 16, 8) != DS_OK ||
        ds_strategy_parse("tp=2,pp=2", &strategy) != DS_OK ||
        ds_strategy_resolve(&strategy, model, 16, 8) != DS_OK ||
        ds_events_generate(model, &strategy, &cluster, &events) != DS_OK) {
        fprintf(stderr, "consumer: %s\n", ds_last_error());
        return 1;
    }
    ds_model_info_t info;
    ds_model_get_info(model, &info);
    printf("%s: %lld parameters, %zu unique events\n", info.name, (long long)info.num_parameters,
           ds_event_set_size(events));
    ds_event_set_destroy(events);
    ds_model_destroy(model);
    return 0;
}
