/* Helpers of the simulator tests: synthetic models, strategies and cost
 * tables built in code. */
#ifndef DSMPI_TEST_SIM_SUPPORT_H
#define DSMPI_TEST_SIM_SUPPORT_H

#include "check.h"

#include <stdlib.h>

#define DSI_N(a) (sizeof(a) / sizeof((a)[0]))

/* A layer-list model of `layers` identical layers of one linear each (no
 * embedding, head or loss): forward one GEMM, backward two. */
static inline ds_model_t *uniform_model(int layers, int64_t global_batch)
{
    char json[512];
    snprintf(
        json, sizeof(json),
        "{\"format\": \"dsmpi-layers\", \"name\": \"uniform\", \"dtype\": \"bf16\","
        " \"global_batch\": %lld, \"classes\": 0,"
        " \"layers\": [{\"name\": \"block\", \"repeat\": %d, \"ops\": ["
        "  {\"op\": \"linear\", \"in_features\": 256, \"out_features\": 256, \"bias\": false}]}]}",
        (long long)global_batch, layers);
    ds_model_t *model = NULL;
    if (ds_model_load_json(json, strlen(json), "uniform", &model) != DS_OK) {
        fprintf(stderr, "uniform model: %s\n", ds_last_error());
        exit(1);
    }
    return model;
}

/* Resolves `text` for `nodes` x `per_node` devices of `device`. */
static inline void setup_strategy(const ds_model_t *model, const char *text, int64_t nodes,
                                  int per_node, ds_strategy_t *s, ds_cluster_t *cluster)
{
    if (ds_cluster_init(cluster, nodes, per_node, "h100-sxm") != DS_OK) {
        fprintf(stderr, "cluster: %s\n", ds_last_error());
        exit(1);
    }
    ds_strategy_init(s);
    if (ds_strategy_parse(text, s) != DS_OK ||
        ds_strategy_resolve(s, model, ds_cluster_num_gpus(cluster), per_node) != DS_OK) {
        fprintf(stderr, "strategy %s: %s\n", text, ds_last_error());
        exit(1);
    }
}

/* A cost for every event of the iteration: `rule` gives seconds per key. */
typedef double (*cost_rule_t)(const ds_event_key_t *key, const ds_event_t *event, void *arg);

static inline ds_cost_table_t *synthetic_costs(const ds_model_t *model, const ds_strategy_t *s,
                                               const ds_cluster_t *cluster, cost_rule_t rule,
                                               void *arg)
{
    ds_event_set_t *set = NULL;
    ds_cost_table_t *table = NULL;
    if (ds_events_generate(model, s, cluster, &set) != DS_OK ||
        ds_cost_table_create(&table) != DS_OK) {
        fprintf(stderr, "synthetic costs: %s\n", ds_last_error());
        exit(1);
    }
    for (size_t i = 0; i < ds_event_set_size(set); i++) {
        const ds_event_t *e = ds_event_set_at(set, i);
        ds_cost_t cost = {0};
        cost.mean_s = cost.median_s = cost.p10_s = cost.p90_s = rule(&e->key, e, arg);
        cost.repetitions = 10;
        cost.provenance = DS_PROV_MEASURED;
        if (ds_cost_table_set(table, &e->key, &cost) != DS_OK) {
            fprintf(stderr, "synthetic costs: %s\n", ds_last_error());
            exit(1);
        }
    }
    ds_event_set_destroy(set);
    return table;
}

static inline int64_t to_ns(double seconds)
{
    double ns = seconds * 1e9;
    return (int64_t)(ns < 0 ? ns - 0.5 : ns + 0.5);
}

#endif /* DSMPI_TEST_SIM_SUPPORT_H */
