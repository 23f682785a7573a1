/* What the executor's validation added to the simulator, on exact cases:
 * overlap interference (a data-parallel bucket issued during the backward
 * costs its members' compute stream what its DS_COMM_FLAG_OVERLAPPED key
 * says, nothing without such a cost or with the option off) and collective
 * skew (a tensor-parallel collective waits E[max of N] sigma for its slowest
 * member, sigma from the operators' p10..p90, counted as idle time). */
#include "sim_support.h"

#define FWD_NS 4000
#define BWD_NS 6000
#define LAYERS 8
#define LAYER_PARAMS (256 * 256)
#define GRAD_NS 2500

static double rule(const ds_event_key_t *key, const ds_event_t *event, void *arg)
{
    (void)event;
    (void)arg;
    if (key->kind == DS_EVENT_COMPUTE && key->op == DS_OP_GEMM)
        return key->pass == DS_PASS_FORWARD ? FWD_NS * 1e-9 : BWD_NS * 0.5e-9;
    if (key->kind == DS_EVENT_COMM && key->group == DS_GROUP_DP)
        return GRAD_NS * 1e-9;
    return 0.0;
}

/* Adds the overlapped twin of every data-parallel key, costing `ns`. */
static void add_interference(ds_cost_table_t *table, int64_t ns)
{
    size_t n = ds_cost_table_size(table);
    for (size_t i = 0; i < n; i++) {
        const ds_event_key_t *key;
        const ds_cost_t *cost;
        ds_cost_table_at(table, i, &key, &cost);
        if (key->kind != DS_EVENT_COMM || key->group != DS_GROUP_DP)
            continue;
        ds_event_key_t twin = *key;
        twin.flags |= DS_COMM_FLAG_OVERLAPPED;
        ds_cost_t c = *cost;
        c.mean_s = c.median_s = c.p10_s = c.p90_s = (double)ns * 1e-9;
        CHECK_OK(ds_cost_table_set(table, &twin, &c));
    }
}

static ds_sim_summary_t simulate(ds_sim_t *sim, const ds_model_t *model, const char *text,
                                 int64_t interference, int option)
{
    ds_strategy_t s;
    ds_cluster_t cluster;
    setup_strategy(model, text, 1, 2, &s, &cluster);
    ds_cost_table_t *table = synthetic_costs(model, &s, &cluster, rule, NULL);
    if (interference > 0)
        add_interference(table, interference);
    ds_sim_options_t o;
    ds_sim_options_init(&o);
    CHECK_INT(o.overlap_interference, 1);
    o.overlap_interference = option;
    o.mode = DS_SIM_FULL;
    ds_status_t status = ds_sim_run(sim, model, &s, &cluster, table, &o);
    CHECK_MSG(status == DS_OK, "%s: %s", text, ds_last_error());
    ds_sim_summary_t sum;
    ds_sim_get_summary(sim, &sum);
    ds_cost_table_destroy(table);
    return sum;
}

/* Two layers of a column-parallel then a row-parallel linear: forward two
 * GEMMs then an all-reduce; backward three GEMMs, an all-reduce, one GEMM. */
static ds_model_t *tp_model(void)
{
    const char *json =
        "{\"format\": \"dsmpi-layers\", \"name\": \"mlp\", \"dtype\": \"bf16\", \"global_batch\": "
        "2,"
        " \"classes\": 0, \"layers\": [{\"name\": \"block\", \"repeat\": 2, \"ops\": ["
        " {\"op\": \"linear\", \"in_features\": 256, \"out_features\": 512, \"parallel\": "
        "\"column\"},"
        " {\"op\": \"linear\", \"in_features\": 512, \"out_features\": 256, \"parallel\": "
        "\"row\"}]}]}";
    ds_model_t *model = NULL;
    CHECK_OK(ds_model_load_json(json, strlen(json), "mlp", &model));
    return model;
}

static double tp_rule(const ds_event_key_t *key, const ds_event_t *event, void *arg)
{
    (void)event;
    (void)arg;
    if (key->kind == DS_EVENT_COMPUTE && key->op == DS_OP_GEMM)
        return 1000e-9;
    if (key->kind == DS_EVENT_COMM && key->group == DS_GROUP_TP)
        return 500e-9;
    return 0.0;
}

static void skew(ds_sim_t *sim)
{
    ds_model_t *model = tp_model();
    if (model == NULL)
        return;
    ds_strategy_t s;
    ds_cluster_t cluster;
    setup_strategy(model, "dp=1,tp=2,pp=1,mbs=1,gbs=2", 1, 2, &s, &cluster);
    ds_cost_table_t *table = synthetic_costs(model, &s, &cluster, tp_rule, NULL);
    /* GEMMs spread with sigma = 100 ns (p90 - p10 = 2.5631 sigma). */
    for (size_t i = 0; i < ds_cost_table_size(table); i++) {
        const ds_event_key_t *key;
        const ds_cost_t *cost;
        ds_cost_table_at(table, i, &key, &cost);
        if (key->kind != DS_EVENT_COMPUTE || key->op != DS_OP_GEMM)
            continue;
        ds_cost_t c = *cost;
        c.p10_s = c.mean_s - 128.155e-9;
        c.p90_s = c.mean_s + 128.155e-9;
        ds_event_key_t k = *key;
        CHECK_OK(ds_cost_table_set(table, &k, &c));
    }
    ds_sim_options_t o;
    ds_sim_options_init(&o);
    CHECK_INT(o.collective_skew, 1);
    CHECK_OK(ds_sim_run(sim, model, &s, &cluster, table, &o));
    ds_sim_summary_t sum;
    ds_sim_get_summary(sim, &sum);
    /* Forward: 0.5642 x sqrt(2) x 100 = 80 ns; backward 0.5642 x sqrt(3) x 100 = 98 ns;
     * 2 micro-batches x 2 layers. */
    int64_t per_layer = 2 * 1000 + 500 + 80 + 4 * 1000 + 500 + 98;
    CHECK_INT(to_ns(sum.iteration_s), 2 * 2 * per_layer);
    ds_sim_device_t d;
    CHECK_OK(ds_sim_device_at(sim, 0, &d));
    CHECK_INT(to_ns(d.idle_s), 2 * 2 * (80 + 98));
    CHECK_INT(to_ns(d.tp_s), 2 * 2 * 2 * 500);
    CHECK_INT(to_ns(d.compute_s), 2 * 2 * 6 * 1000);
    ds_sim_critical_t cr;
    ds_sim_get_critical_path(sim, &cr);
    CHECK_INT(to_ns(cr.seconds[DS_SIM_CAT_WAIT]), 2 * 2 * (80 + 98));
    /* Off: the members arrive together. */
    o.collective_skew = 0;
    CHECK_OK(ds_sim_run(sim, model, &s, &cluster, table, &o));
    ds_sim_get_summary(sim, &sum);
    CHECK_INT(to_ns(sum.iteration_s), 2 * 2 * (per_layer - 80 - 98));
    ds_cost_table_destroy(table);
    ds_model_destroy(model);
}

int main(void)
{
    ds_model_t *model = uniform_model(LAYERS, 1);
    ds_sim_t *sim = NULL;
    CHECK_OK(ds_sim_create(&sim));
    int m = 3;
    int64_t compute = (int64_t)m * LAYERS * (FWD_NS + BWD_NS);
    char text[160];
    snprintf(text, sizeof(text), "dp=2,mbs=1,gbs=%d,bucket=%d", 2 * m, LAYER_PARAMS);

    /* Free overlap: only the last bucket shows. */
    ds_sim_summary_t sum = simulate(sim, model, text, 0, 1);
    CHECK_INT(to_ns(sum.iteration_s), compute + GRAD_NS);

    /* 1500 ns of each bucket land on the compute stream after the layer
     * that fills it: the lane ends 8 x 1500 later, the last bucket (issued
     * 7 x 1500 late) 2500 after its layer. */
    int64_t x = 1500;
    sum = simulate(sim, model, text, x, 1);
    CHECK_INT(to_ns(sum.iteration_s), compute + 7 * x + GRAD_NS);
    ds_sim_device_t d;
    CHECK_OK(ds_sim_device_at(sim, 0, &d));
    CHECK_INT(to_ns(d.compute_s), compute);
    CHECK_INT(to_ns(d.dp_s), LAYERS * (GRAD_NS + x));
    CHECK_INT(to_ns(d.comm_exposed_s), 7 * x + GRAD_NS);
    CHECK_INT(to_ns(d.idle_s), 0);
    /* The interference is data-parallel time on the critical path. */
    ds_sim_critical_t cr;
    ds_sim_get_critical_path(sim, &cr);
    CHECK(to_ns(cr.seconds[DS_SIM_CAT_DP]) >= 7 * x);
    /* Events of the compute stream name it. */
    const ds_sim_event_t *events = NULL;
    size_t count = 0, named = 0;
    CHECK_OK(ds_sim_device_events(sim, 0, &events, &count));
    for (size_t i = 0; i < count; i++)
        named += events[i].iteration == 2 && events[i].stream == DS_SIM_STREAM_COMPUTE &&
                 strcmp(events[i].name, "dp.overlap-interference") == 0;
    CHECK_INT(named, LAYERS);

    /* The option off: as if nothing were measured. */
    sum = simulate(sim, model, text, x, 0);
    CHECK_INT(to_ns(sum.iteration_s), compute + GRAD_NS);

    /* Overlap off in the strategy: buckets run after the backward, no interference. */
    snprintf(text, sizeof(text), "dp=2,mbs=1,gbs=%d,bucket=%d,no-overlap", 2 * m, LAYER_PARAMS);
    sum = simulate(sim, model, text, x, 1);
    CHECK_INT(to_ns(sum.iteration_s), compute + LAYERS * GRAD_NS);

    /* The key's text names the flag and reads back. */
    ds_event_key_t key;
    memset(&key, 0, sizeof(key));
    key.kind = DS_EVENT_COMM;
    key.op = DS_COMM_ALLREDUCE;
    key.pass = DS_PASS_STEP;
    key.group = DS_GROUP_DP;
    key.group_size = 2;
    key.nodes = 1;
    key.ranks_per_node = 2;
    key.concurrency = 1;
    key.dims[0] = 4096;
    key.flags = DS_COMM_FLAG_OVERLAPPED;
    char buf[256];
    ds_event_key_format(&key, buf, sizeof(buf));
    CHECK(strstr(buf, " overlapped") != NULL);
    ds_event_key_t back;
    CHECK_OK(ds_event_key_parse(buf, &back));
    CHECK(ds_event_key_equal(&key, &back));

    skew(sim);
    ds_sim_destroy(sim);
    ds_model_destroy(model);
    return check_summary("test_sim_interference");
}
