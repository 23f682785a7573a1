/* The profiling plan on fake allocations: units cover every compute event,
 * ranks get balanced loads, reuse skips measured units, communication tasks
 * match the groups the allocation can form. */
#include "check.h"
#include "profile/dsi_profile.h"

static dsi_profile_plan_t *plan_for(const char *model_name, const char *strategy, int64_t gpus)
{
    ds_model_t *model = NULL;
    ds_strategy_t s;
    ds_cluster_t cluster;
    dsi_profile_plan_t *plan = NULL;
    ds_strategy_init(&s);
    CHECK_OK(ds_model_load(model_name, &model));
    CHECK_OK(ds_strategy_parse(strategy, &s));
    CHECK_OK(ds_cluster_from_gpus(&cluster, gpus, 8));
    CHECK_OK(ds_strategy_resolve(&s, model, gpus, 8));
    CHECK_OK(dsi_profile_plan_create(&plan));
    CHECK_OK(dsi_profile_plan_add(plan, model, &s, &cluster));
    ds_model_destroy(model);
    return plan;
}

static bool in_some_unit(const dsi_profile_plan_t *plan, const ds_event_key_t *key)
{
    for (size_t i = 0; i < plan->num_keys; i++)
        if (ds_event_key_equal(&plan->keys[i], key))
            return true;
    return false;
}

static void test_units_and_balance(void)
{
    dsi_profile_plan_t *plan = plan_for("gpt2-medium", "dp=64,tp=4,pp=4,mbs=2,gbs=1024", 1024);
    ds_device_spec_t cpu;
    CHECK_OK(ds_device_spec_lookup("cpu", &cpu));
    int nodes[2] = {0, 0};
    CHECK_OK(dsi_profile_plan_assign(plan, 2, nodes, NULL, &cpu, 1024, 1 << 20));
    size_t compute = 0;
    for (size_t i = 0; i < ds_event_set_size(plan->events); i++) {
        const ds_event_t *e = ds_event_set_at(plan->events, i);
        if (e->key.kind == DS_EVENT_COMPUTE) {
            compute++;
            CHECK(in_some_unit(plan, &e->key));
        }
    }
    CHECK(compute == 36);
    /* Identical layers share units: embedding, layer and head passes plus the optimizer steps. */
    CHECK_MSG(plan->num_units <= 2 * 3 + 4, "%zu units", plan->num_units);
    CHECK_INT(plan->units_to_measure, plan->num_units);
    double largest = 0, total = 0;
    for (size_t u = 0; u < plan->num_units; u++) {
        CHECK(plan->units[u].rank == 0 || plan->units[u].rank == 1);
        largest = DSI_MAX(largest, plan->units[u].estimate_s);
        total += plan->units[u].estimate_s;
    }
    CHECK_NEAR(plan->rank_load_s[0] + plan->rank_load_s[1], total, 1e-9);
    CHECK(fabs(plan->rank_load_s[0] - plan->rank_load_s[1]) <= largest); /* LPT bound */

    /* Reuse: with every key measured nothing is assigned. */
    ds_cost_table_t *measured = NULL;
    CHECK_OK(ds_cost_table_create(&measured));
    ds_cost_t cost = {1e-3, 1e-3, 1e-3, 1e-3, 10, DS_PROV_MEASURED};
    for (size_t i = 0; i < plan->num_keys; i++)
        CHECK_OK(ds_cost_table_set(measured, &plan->keys[i], &cost));
    CHECK_OK(dsi_profile_plan_assign(plan, 2, nodes, measured, &cpu, 1024, 1 << 20));
    CHECK_INT(plan->units_to_measure, 0);
    CHECK_INT(plan->units_reused, plan->num_units);
    CHECK(plan->rank_load_s[0] == 0.0 && plan->rank_load_s[1] == 0.0);
    ds_cost_table_destroy(measured);
    dsi_profile_plan_destroy(plan);
}

static int count_shapes(const dsi_profile_plan_t *plan, int size, int nodes, int groups)
{
    int n = 0;
    for (int i = 0; i < plan->num_shapes; i++)
        n += plan->shapes[i].size == size && plan->shapes[i].nodes == nodes && plan->shapes[i].num_groups == groups;
    return n;
}

static void test_comm_tasks(void)
{
    dsi_profile_plan_t *plan = plan_for("gpt2-medium", "dp=4,tp=2,pp=2,mbs=1,gbs=32", 16);
    ds_device_spec_t cpu;
    CHECK_OK(ds_device_spec_lookup("cpu", &cpu));
    /* One node with 4 ranks: pairs, the whole node, two pairs at once. */
    int one_node[4] = {0, 0, 0, 0};
    CHECK_OK(dsi_profile_plan_assign(plan, 4, one_node, NULL, &cpu, 1024, 1 << 20));
    CHECK_INT(plan->num_shapes, 3);
    CHECK(count_shapes(plan, 2, 1, 1) == 1 && count_shapes(plan, 4, 1, 1) == 1 && count_shapes(plan, 2, 1, 2) == 1);
    int sendrecv_on_4 = 0, exact = 0, sweep_1k = 0;
    for (size_t i = 0; i < plan->num_tasks; i++) {
        const dsi_comm_task_t *t = &plan->tasks[i];
        const ds_comm_sample_t *s = &t->sample;
        CHECK(s->bytes % ((int64_t)ds_dtype_size(s->dtype) * (s->op == DS_COMM_SENDRECV ? 1 : s->group_size)) == 0);
        CHECK(s->bytes <= (1 << 20)); /* exact sizes above the sweep are left to the fit */
        sendrecv_on_4 += s->op == DS_COMM_SENDRECV && s->group_size != 2;
        exact += t->exact;
        sweep_1k += s->bytes == 1024 && s->op == DS_COMM_ALLREDUCE && s->dtype == DS_DTYPE_BF16;
        if (i > 0)
            CHECK(plan->tasks[i - 1].shape <= t->shape);
    }
    CHECK_INT(sendrecv_on_4, 0);
    CHECK(exact > 0);
    CHECK_INT(sweep_1k, 3); /* one per shape */

    /* Two nodes with two ranks each: the DistSim allocation. */
    int two_nodes[4] = {0, 0, 1, 1};
    CHECK_OK(dsi_profile_plan_assign(plan, 4, two_nodes, NULL, &cpu, 1024, 4096));
    CHECK(count_shapes(plan, 2, 1, 1) == 1); /* intra pair */
    CHECK(count_shapes(plan, 2, 2, 1) == 1); /* inter pair, one rank per node */
    CHECK(count_shapes(plan, 4, 2, 1) == 1); /* two per node */
    CHECK(count_shapes(plan, 2, 2, 2) == 1); /* two cross-node pairs at once */
    for (int i = 0; i < plan->num_shapes; i++) {
        const dsi_group_shape_t *s = &plan->shapes[i];
        if (s->size == 2 && s->nodes == 2 && s->num_groups == 2)
            CHECK(s->ranks[0] == 0 && s->ranks[1] == 2 && s->ranks[2] == 1 && s->ranks[3] == 3);
    }
    CHECK_FAILS(dsi_profile_plan_assign(plan, 0, two_nodes, NULL, &cpu, 1024, 4096), DS_ERR_INVALID_ARG, "0 ranks");
    dsi_profile_plan_destroy(plan);
}

int main(void)
{
    test_units_and_balance();
    test_comm_tasks();
    return check_summary("test_profile_plan");
}
