/* The profiling plan on fake allocations: units cover every compute event,
 * ranks get balanced loads, reuse skips measured units, communication tasks
 * match the groups the allocation can form; the expected profiling time is
 * the measurement loop's warm-up, repetitions and budget on the time model,
 * summed over rounds and tasks as worked out by hand. */
#include "backend/dsi_backend.h"
#include "check.h"
#include "profile/dsi_profile.h"
#include "profile/dsi_profile_run.h"

#include <string.h>

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
        n += plan->shapes[i].size == size && plan->shapes[i].nodes == nodes &&
             plan->shapes[i].num_groups == groups;
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
    CHECK(count_shapes(plan, 2, 1, 1) == 1 && count_shapes(plan, 4, 1, 1) == 1 &&
          count_shapes(plan, 2, 1, 2) == 1);
    int sendrecv_on_4 = 0, exact = 0, sweep_1k = 0;
    for (size_t i = 0; i < plan->num_tasks; i++) {
        const dsi_comm_task_t *t = &plan->tasks[i];
        const ds_comm_sample_t *s = &t->sample;
        CHECK(s->bytes % ((int64_t)ds_dtype_size(s->dtype) *
                          (s->op == DS_COMM_SENDRECV ? 1 : s->group_size)) ==
              0);
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
    CHECK_FAILS(dsi_profile_plan_assign(plan, 0, two_nodes, NULL, &cpu, 1024, 4096),
                DS_ERR_INVALID_ARG, "0 ranks");
    dsi_profile_plan_destroy(plan);
}

/* The plan's group shapes as "NxP" (nodes x ranks per node), "NxP*2" for two
 * groups at once, in plan order. */
static void shapes_text(const dsi_profile_plan_t *plan, char *text, size_t size)
{
    size_t used = 0;
    text[0] = '\0';
    for (int i = 0; i < plan->num_shapes && used < size; i++) {
        const dsi_group_shape_t *s = &plan->shapes[i];
        used += (size_t)snprintf(text + used, size - used, "%s%dx%d%s", i ? " " : "", s->nodes,
                                 s->ranks_per_node, s->num_groups == 2 ? "*2" : "");
    }
}

static void check_shapes(dsi_profile_plan_t *plan, int num_ranks, const int *node_of_rank,
                         const char *expected, const char *what)
{
    ds_device_spec_t cpu;
    CHECK_OK(ds_device_spec_lookup("cpu", &cpu));
    CHECK_OK(dsi_profile_plan_assign(plan, num_ranks, node_of_rank, NULL, &cpu, 1024, 4096));
    char text[256];
    shapes_text(plan, text, sizeof(text));
    CHECK_MSG(strcmp(text, expected) == 0, "%s: shapes '%s', expected '%s'", what, text, expected);
}

/* Every node count the allocation forms is measured with one rank per node
 * (each depth of a tree over its nodes), on fake allocations. */
static void test_shapes_every_node_count(void)
{
    dsi_profile_plan_t *plan = plan_for("gpt2-medium", "dp=4,tp=2,pp=2,mbs=1,gbs=32", 16);
    const int four_by_one[4] = {0, 1, 2, 3}, two_by_two[4] = {0, 0, 1, 1};
    const int one_by_four[4] = {0, 0, 0, 0}, eight_by_one[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    const int six_by_one[6] = {0, 1, 2, 3, 4, 5};
    check_shapes(plan, 4, four_by_one, "2x1 4x1", "4 nodes x 1");
    check_shapes(plan, 4, two_by_two, "1x2 2x1 2x2 2x1*2", "2 nodes x 2");
    check_shapes(plan, 4, one_by_four, "1x2 1x4 1x2*2", "1 node x 4");
    check_shapes(plan, 8, eight_by_one, "2x1 4x1 8x1", "8 nodes x 1");
    check_shapes(plan, 6, six_by_one, "2x1 4x1 6x1", "6 nodes x 1");
    /* Three nodes holding 2, 1 and 2 ranks: the two full nodes measure two
     * ranks per node and two pairs at once; all three one rank each. */
    const int uneven[5] = {0, 0, 1, 2, 2};
    check_shapes(plan, 5, uneven, "1x2 2x1 2x2 3x1 2x1*2", "3 uneven nodes");
    const int expected_ranks[][6] = {
        {0, 1}, {0, 3}, {0, 1, 3, 4}, {0, 2, 3}, {0, 3, 1, 4},
    };
    for (int i = 0; i < plan->num_shapes && i < 5; i++) {
        const dsi_group_shape_t *s = &plan->shapes[i];
        for (int k = 0; k < s->size * s->num_groups; k++)
            CHECK_MSG(s->ranks[k] == expected_ranks[i][k],
                      "uneven shape %d member %d: rank %d, expected %d", i, k, s->ranks[k],
                      expected_ranks[i][k]);
    }
    const int uneven_first_small[5] = {0, 1, 1, 2, 2};
    check_shapes(plan, 5, uneven_first_small, "1x2 2x1 2x2 3x1 2x1*2", "3 nodes, the first with 1");
    dsi_profile_plan_destroy(plan);
}

static void sizes_text(const int *sizes, int count, char *text, size_t size)
{
    size_t used = 0;
    text[0] = '\0';
    for (int i = 0; i < count && used < size; i++)
        used += (size_t)snprintf(text + used, size - used, "%s%d", i ? "," : "", sizes[i]);
}

/* One allocation's shape as ds_profile_shape_of describes it: group sizes
 * inside a node, node counts across nodes, ranks per node across nodes,
 * tree depths, extrapolation factor and band multipliers. */
static void check_shape(const ds_profile_shape_t *s, const char *intra, const char *cross,
                        int cross_per_node, int depth_min, int depth_max, double factor, double low,
                        double high, const char *what)
{
    char text[128];
    sizes_text(s->intra_sizes, s->num_intra_sizes, text, sizeof(text));
    CHECK_MSG(strcmp(text, intra) == 0, "%s: inside a node '%s', expected '%s'", what, text, intra);
    sizes_text(s->cross_nodes, s->num_cross_nodes, text, sizeof(text));
    CHECK_MSG(strcmp(text, cross) == 0, "%s: across nodes '%s', expected '%s'", what, text, cross);
    CHECK_MSG(s->cross_ranks_per_node == cross_per_node, "%s: %d per node across", what,
              s->cross_ranks_per_node);
    CHECK_MSG(s->tree_depth_min == depth_min && s->tree_depth_max == depth_max,
              "%s: depth %d-%d, expected %d-%d", what, s->tree_depth_min, s->tree_depth_max,
              depth_min, depth_max);
    CHECK_NEAR(s->factor, factor, 1e-12);
    CHECK_NEAR(s->band_low, low, 1e-8);
    CHECK_NEAR(s->band_high, high, 1e-8);
}

/* What each allocation measures for a target of 64 nodes x 8 GPUs (tree
 * depth 6), with band rates slow = 0.5 and fast = 0.25 per doubling: at
 * f = 16 the band is exp(-0.25 x 4) = 0.3679 to exp(0.5 x 4) = 7.389. */
static void test_shape_of_allocations(void)
{
    ds_cluster_t target;
    CHECK_OK(ds_cluster_init(&target, 64, 8, NULL));
    const double slow = 0.5, fast = 0.25;
    ds_profile_shape_t s;
    const int four_by_one[4] = {0, 1, 2, 3}, two_by_two[4] = {0, 0, 1, 1};
    const int one_by_four[4] = {0, 0, 0, 0}, eight_by_one[8] = {0, 1, 2, 3, 4, 5, 6, 7};
    const int uneven[5] = {0, 0, 1, 2, 2};
    CHECK_OK(ds_profile_shape_of(4, four_by_one, &target, slow, fast, &s));
    CHECK(s.ranks == 4 && s.nodes == 4 && s.ranks_per_node == 1 && s.target_tree_depth == 6);
    CHECK(s.lacks_intra_pair && !s.lacks_network);
    check_shape(&s, "", "2,4", 1, 1, 2, 16.0, 0.367879441, 7.3890561, "4x1");
    CHECK_OK(ds_profile_shape_of(4, two_by_two, &target, slow, fast, &s));
    CHECK(s.nodes == 2 && s.ranks_per_node == 2 && !s.lacks_intra_pair && !s.lacks_network);
    check_shape(&s, "2", "2", 2, 1, 1, 32.0, 0.286504797, 12.182494, "2x2");
    CHECK_OK(ds_profile_shape_of(4, one_by_four, &target, slow, fast, &s));
    CHECK(s.nodes == 1 && s.ranks_per_node == 4 && !s.lacks_intra_pair && s.lacks_network);
    check_shape(&s, "2,4", "", 0, 0, 0, 0.0, 0.0, 0.0, "1x4");
    CHECK_OK(ds_profile_shape_of(8, eight_by_one, &target, slow, fast, &s));
    check_shape(&s, "", "2,4,8", 1, 1, 3, 8.0, 0.472366553, 4.48168907, "8x1");
    /* 64 / 3 nodes: log2 = 4.415, the band exp(-1.104) to exp(2.208). */
    CHECK_OK(ds_profile_shape_of(5, uneven, &target, slow, fast, &s));
    CHECK(s.nodes == 3 && s.ranks_per_node == 2);
    check_shape(&s, "2", "2,3", 2, 1, 2, 64.0 / 3.0, 0.331622046, 9.09312606, "3 uneven nodes");
    /* A target smaller than the allocation: nothing extrapolated, the band is 1. */
    ds_cluster_t small;
    CHECK_OK(ds_cluster_init(&small, 2, 8, NULL));
    CHECK_OK(ds_profile_shape_of(4, four_by_one, &small, slow, fast, &s));
    check_shape(&s, "", "2,4", 1, 1, 2, 0.5, 1.0, 1.0, "4x1 for 2 nodes");
    CHECK_INT(s.target_tree_depth, 1);

    const int outside[2] = {0, 2};
    CHECK_FAILS(ds_profile_shape_of(2, outside, &target, slow, fast, &s), DS_ERR_INVALID_ARG,
                "rank 1 on node 2");
    CHECK_FAILS(ds_profile_shape_of(0, outside, &target, slow, fast, &s), DS_ERR_INVALID_ARG,
                "0 ranks");
    ds_cluster_t empty = target;
    empty.nodes = 0;
    CHECK_FAILS(ds_profile_shape_of(2, two_by_two, &empty, slow, fast, &s), DS_ERR_INVALID_ARG,
                "0 nodes");
}

/* The factorisations of a rank count, the most nodes first, and the best. */
static void check_compare(int ranks, int64_t nodes, int gpus_per_node, const char *expected,
                          int expected_best)
{
    ds_cluster_t target;
    CHECK_OK(ds_cluster_init(&target, nodes, gpus_per_node, NULL));
    ds_profile_shape_t *shapes = NULL;
    int count = 0, best = -1;
    CHECK_OK(ds_profile_shapes_compare(ranks, &target, 0.5, 0.25, &shapes, &count, &best));
    char text[256];
    size_t used = 0;
    text[0] = '\0';
    for (int i = 0; i < count && used < sizeof(text); i++)
        used += (size_t)snprintf(text + used, sizeof(text) - used, "%s%dx%d", i ? " " : "",
                                 shapes[i].nodes, shapes[i].ranks_per_node);
    CHECK_MSG(strcmp(text, expected) == 0 && best == expected_best,
              "%d ranks for %lld x %d: '%s' best %d, expected '%s' best %d", ranks,
              (long long)nodes, gpus_per_node, text, best, expected, expected_best);
    ds_profile_shapes_free(shapes);
}

static void test_shapes_compare(void)
{
    /* 8 GPUs per node: an intra-node pair and the most nodes (2x2, not 4x1). */
    check_compare(4, 64, 8, "4x1 2x2 1x4", 1);
    /* One GPU per node: nothing inside a node to measure, the most nodes. */
    check_compare(4, 64, 1, "4x1", 0);
    /* One node: no network, the largest group inside it. */
    check_compare(4, 1, 8, "4x1 2x2 1x4", 2);
    /* Two ranks cannot have both: the network (the levels of the tree) first. */
    check_compare(2, 64, 8, "2x1 1x2", 0);
    check_compare(8, 64, 8, "8x1 4x2 2x4 1x8", 1);
    /* No more ranks per node than a target node has GPUs. */
    check_compare(16, 64, 4, "16x1 8x2 4x4", 1);
    /* More nodes than the target has add nothing: 2x2 measures its 2 nodes and a pair. */
    check_compare(4, 2, 8, "4x1 2x2 1x4", 1);
    check_compare(6, 64, 8, "6x1 3x2 2x3 1x6", 1);
    ds_cluster_t target;
    CHECK_OK(ds_cluster_init(&target, 64, 8, NULL));
    ds_profile_shape_t *shapes = NULL;
    int count = 0, best = 0;
    CHECK_FAILS(ds_profile_shapes_compare(0, &target, 0.5, 0.25, &shapes, &count, &best),
                DS_ERR_INVALID_ARG, "0 ranks");
}

/* The band's multipliers (comm.h) at f = 4 are exp(-2 fast) and exp(2 slow). */
static void test_band_multipliers(void)
{
    double low = 0, high = 0, slow = 0, fast = 0;
    ds_comm_band_multipliers(4.0, 0.5, 0.25, &low, &high);
    CHECK_NEAR(low, exp(-0.5), 1e-12);
    CHECK_NEAR(high, exp(1.0), 1e-12);
    ds_comm_band_multipliers(0.5, 0.5, 0.25, &low, &high);
    CHECK(low == 1.0 && high == 1.0);
    ds_comm_band_rates(NULL, &slow, &fast);
    CHECK(slow > 0.0 && fast > 0.0);
}

/* The loop's rules on a time model, worked out by hand with the default
 * tunables: warm-up 2 runs and 0.02 s (one run once it took a quarter of
 * the 1 s budget), 5 to 1000 repetitions, a CI target of 2%. */
static void test_loop_expectation(void)
{
    ds_measure_config_t c;
    ds_measure_config_default(&c);
    CHECK(c.warmup == 2 && c.warmup_s == 0.02 && c.min_reps == 5 && c.max_reps == 1000 &&
          c.target_rel_ci == 0.02 && c.budget_s == 1.0);
    dsi_loop_model_t m;
    memset(&m, 0, sizeof(m));
    m.max_batch = 8191;
    dsi_loop_expectation_t e;
    /* A 0.3 s pass without noise: one warm-up run, the 5 repetitions, converged. */
    m.run_s = m.warmup_s = m.rep_wall_s = 0.3;
    dsi_measure_expect(&c, &m, &e);
    CHECK_INT(e.warmup, 1);
    CHECK_INT(e.reps, 5);
    CHECK_INT(e.stop, DS_STOP_CONVERGED);
    CHECK_NEAR(e.seconds, 6 * 0.3, 1e-12);
    /* Noisy: the CI after 5 (2.4565 x 0.5 / sqrt 5 = 55%) is far off, but
     * 1.8 s spent the budget. */
    m.spread = 0.5;
    CHECK_NEAR(dsi_measure_expected_ci(0.5, 5), 1.96 * 1.2533141373155003 * 0.5 / sqrt(5.0), 1e-12);
    dsi_measure_expect(&c, &m, &e);
    CHECK(e.warmup == 1 && e.reps == 5 && e.stop == DS_STOP_BUDGET);
    CHECK_NEAR(e.seconds, 1.8, 1e-12);
    /* 1/16 s runs: 2 warm-up (0.125 s), 5 repetitions (0.4375 s), then a
     * quarter more each time: 6, 7, 8 (one each), 10, 12 (two), then the
     * budget left (0.125 s) allows 2: 14 repetitions at exactly 1 s. */
    m.run_s = m.warmup_s = m.rep_wall_s = 0.0625;
    dsi_measure_expect(&c, &m, &e);
    CHECK_INT(e.warmup, 2);
    CHECK_INT(e.reps, 14);
    CHECK_INT(e.batches, 7);
    CHECK_INT(e.stop, DS_STOP_BUDGET);
    CHECK_NEAR(e.seconds, 1.0, 1e-12);
    /* 1/1024 s runs of 10% spread: warm-up until 0.02 s (21 runs); they
     * converge when 2.4565 x 0.1 / sqrt(n) < 0.02: n >= 151, reached
     * growing by a quarter from 5: 6 7 8 10 12 15 18 22 27 33 41 51 63 78 97
     * 121 151 (18 batches with the first), well within the budget. */
    m.run_s = m.warmup_s = m.rep_wall_s = 1.0 / 1024;
    m.spread = 0.1;
    dsi_measure_expect(&c, &m, &e);
    CHECK_INT(e.warmup, 21);
    CHECK_INT(e.reps, 151);
    CHECK_INT(e.batches, 18);
    CHECK_INT(e.stop, DS_STOP_CONVERGED);
    CHECK_NEAR(e.seconds, (21 + 151) / 1024.0, 1e-12);
    /* Batches stop at max_batch; max_reps ends it. */
    m.run_s = m.warmup_s = m.rep_wall_s = 1e-6;
    m.spread = 1.0;
    m.max_batch = 256;
    dsi_measure_expect(&c, &m, &e);
    CHECK_INT(e.reps, 1000);
    CHECK_INT(e.stop, DS_STOP_MAX_REPS);
    /* Communication: the budget is shared out by wall time per repetition
     * (a 1/16 s operation behind a 1/16 s barrier): warm-up 2 x 0.125 s, 5
     * repetitions of 0.125 s (0.875 s), then one more fills the budget. */
    m.run_s = 0.0625;
    m.warmup_s = m.rep_wall_s = 0.125;
    m.rate_from_wall = 1;
    m.spread = 0.5;
    dsi_measure_expect(&c, &m, &e);
    CHECK(e.warmup == 2 && e.reps == 6 && e.stop == DS_STOP_BUDGET);
    CHECK_NEAR(e.seconds, 1.0, 1e-12);
    /* The next-batch rule alone. */
    ds_stop_reason_t stop = DS_STOP_MAX_REPS;
    CHECK_INT(dsi_measure_next_batch(&c, 0, INFINITY, 0.0, 0.0, 8191, &stop), 5);
    CHECK_INT(dsi_measure_next_batch(&c, 40, 0.5, 0.5, 0.01, 8191, &stop), 10);
    CHECK_INT(dsi_measure_next_batch(&c, 40, 0.5, 0.95, 0.01, 8191, &stop), 5);
    CHECK_INT(dsi_measure_next_batch(&c, 40, 0.5, 0.5, 0.01, 3, &stop), 3);
    CHECK_INT(dsi_measure_next_batch(&c, 40, 0.01, 0.5, 0.01, 8191, &stop), 0);
    CHECK_INT(stop, DS_STOP_CONVERGED);
    CHECK_INT(dsi_measure_next_batch(&c, 40, 0.5, 1.0, 0.01, 8191, &stop), 0);
    CHECK_INT(stop, DS_STOP_BUDGET);
}

static ds_event_key_t compute_key(ds_op_t op, int64_t d0)
{
    ds_event_key_t k;
    memset(&k, 0, sizeof(k));
    k.kind = DS_EVENT_COMPUTE;
    k.op = (uint8_t)op;
    k.pass = DS_PASS_FORWARD;
    k.dtype = DS_DTYPE_BF16;
    k.dims[0] = d0;
    k.dims[1] = k.dims[2] = 1024;
    return k;
}

static void add_event(dsi_profile_plan_t *plan, const ds_event_key_t *key, double flops,
                      double bytes)
{
    ds_event_t e;
    memset(&e, 0, sizeof(e));
    e.key = *key;
    e.flops = flops;
    e.bytes = bytes;
    CHECK_OK(ds_event_set_add(plan->events, &e, 1));
}

static dsi_comm_task_t comm_task(ds_comm_op_t op, ds_dtype_t dtype, int64_t bytes, int batched,
                                 int shape)
{
    dsi_comm_task_t t;
    memset(&t, 0, sizeof(t));
    t.sample.op = op;
    t.sample.dtype = dtype;
    t.sample.bytes = bytes;
    t.sample.group_size = 2;
    t.sample.nodes = 1;
    t.sample.ranks_per_node = 2;
    t.sample.concurrency = 1;
    t.sample.batched = batched;
    t.num_groups = 1;
    t.shape = shape;
    return t;
}

/* The expected profiling time of a plan built by hand, worked out by hand:
 * a device of 1 TFLOP/s and 1 TB/s (a 4 us launch floor per kernel), one
 * 1 GB/s link of 10 us, no noise. */
static void test_estimate_by_hand(void)
{
    dsi_profile_plan_t *plan = NULL;
    CHECK_OK(dsi_profile_plan_create(&plan));
    ds_event_key_t g0 = compute_key(DS_OP_GEMM, 2048), g1 = compute_key(DS_OP_GEMM, 512),
                   ln = compute_key(DS_OP_LAYERNORM, 2048), g2 = compute_key(DS_OP_GEMM, 64);
    add_event(plan, &g0, 2.5e11, 1e8);
    add_event(plan, &g1, 5e10, 5e8);
    add_event(plan, &ln, 0.0, 2e8);
    add_event(plan, &g2, 1e10, 1e7);
    /* Units: {g0} on rank 0, {g1, ln} on rank 1, {g2} on rank 0. */
    CHECK_OK(dsi_calloc(4, sizeof(*plan->keys), &plan->keys));
    plan->keys[0] = g0, plan->keys[1] = g1, plan->keys[2] = ln, plan->keys[3] = g2;
    plan->num_keys = plan->keys_capacity = 4;
    CHECK_OK(dsi_calloc(3, sizeof(*plan->units), &plan->units));
    plan->units[0] = (dsi_unit_t){0, 0, 1, 3.0, 0, "u0"};
    plan->units[1] = (dsi_unit_t){0, 1, 2, 2.0, 1, "u1"};
    plan->units[2] = (dsi_unit_t){0, 3, 1, 1.0, 0, "u2"};
    plan->num_units = plan->units_capacity = 3;
    plan->num_ranks = 2;
    CHECK_OK(dsi_calloc(4, sizeof(*plan->tasks), &plan->tasks));
    plan->tasks[0] = comm_task(DS_COMM_SENDRECV, DS_DTYPE_FP32, 1000000, 0, 0);
    plan->tasks[1] = comm_task(DS_COMM_ALLREDUCE, DS_DTYPE_BF16, 4000000, 0, 0);
    plan->tasks[2] = comm_task(DS_COMM_SENDRECV, DS_DTYPE_FP32, 1000000, 1, 1);
    plan->tasks[3] = comm_task(DS_COMM_ALLREDUCE, DS_DTYPE_BF16, 64, 0, 1);
    plan->num_tasks = plan->tasks_capacity = 4;
    unsigned char reused[4] = {0, 0, 0, 1};

    ds_cluster_t here;
    CHECK_OK(ds_cluster_init(&here, 1, 2, "cpu"));
    here.device.peak_tflops_bf16 = 1.0;
    here.device.mem_bw_GBps = 1000.0;
    here.levels[0].bandwidth_GBps = 1.0;
    here.levels[0].latency_us = 10.0;
    dsi_profile_speed_t speed;
    dsi_profile_speed_init(&speed, &here);
    speed.classes[0] = (dsi_speed_class_t){DS_OP_GEMM, DS_PASS_FORWARD, DS_DTYPE_BF16, 2.0, 1e-9};
    speed.num_classes = 1;
    speed.default_factor = 3.0; /* the layernorm's class was not calibrated */
    speed.fill_s_per_byte = 2e-9;
    speed.sync_s = 1e-3;
    speed.comm_create_s = 0.5;
    speed.comm_fill_s_per_byte = 1e-9;
    speed.commit_s = 0.2;
    speed.commit_s_per_record = 1e-3;
    ds_measure_config_t config;
    ds_measure_config_default(&config);
    dsi_profile_estimate_t e;
    CHECK_OK(dsi_profile_estimate(plan, &config, &speed, reused, true, true, 10, &e));

    /* u0: a run = 2 x (2.5e11 / 1e12 + 4e-6) = 0.500008 s; one warm-up run
     * (it took a quarter of the budget) and 5 repetitions; preparing 1e8
     * bytes at 1 ns. */
    CHECK_NEAR(e.unit_s[0], 6 * 0.500008 + 0.1, 1e-12);
    /* u1: 2 x (0.05 + 4e-6) + 3 x (2e8 / 1e12 + 4e-6) = 0.10062 s; 2 warm-up
     * runs, 5 repetitions; 5e8 bytes at 1 ns, 2e8 at the default 2 ns. */
    CHECK_NEAR(e.unit_s[1], 7 * 0.10062 + 0.5 + 0.4, 1e-12);
    /* u2: 2 x (0.01 + 4e-6) = 0.020008 s: 2 warm-up runs, 5 repetitions. */
    CHECK_NEAR(e.unit_s[2], 7 * 0.020008 + 0.01, 1e-12);
    CHECK_NEAR(e.rank_s[0], e.unit_s[0] + e.unit_s[2], 1e-12);
    CHECK_NEAR(e.rank_s[1], e.unit_s[1], 1e-12);
    /* Rounds: the slower of u0 and u1, then u2; each then agrees (4 syncs). */
    CHECK_INT(e.num_rounds, 2);
    CHECK_NEAR(e.round_s[0], e.unit_s[0] + 0.004, 1e-12);
    CHECK_NEAR(e.round_s[1], e.unit_s[2] + 0.004, 1e-12);
    CHECK_NEAR(e.compute_s, 3.258104, 1e-12);

    /* Task 0, sendrecv of 1 MB: a run 10 us + 1 ms = 1.01 ms; preparing
     * 1 MB (the busier member) and an all-reduce; 7 warm-up iterations of
     * a run and 2 syncs until 0.02 s (0.02107 s); 5 repetitions of a run
     * and a barrier, a batch's 3 syncs (0.01305 s); 4 syncs; then the
     * agreement (4 syncs) and the communicator (0.5 s). */
    double t0 = 0.001 + 0.001 + 7 * 0.00301 + 5 * 0.00201 + 0.003 + 0.004;
    CHECK_NEAR(e.task_s[0], 0.5 + t0 + 0.004, 1e-12);
    /* Task 1, all-reduce of 4 MB in bf16 on 2: a ring of the Simple
     * protocol, 2 x (10 + 2.8) us + 4 MB / 1 GB/s = 4.0256 ms; both buffers
     * (8 MB); 4 warm-up iterations (0.0241024 s). */
    double t1 = 0.008 + 0.001 + 4 * 0.0060256 + 5 * 0.0050256 + 0.003 + 0.004;
    CHECK_NEAR(e.task_s[1], t1 + 0.004, 1e-12);
    /* Task 2: the next shape's communicator; batched: 2 MB to prepare. */
    CHECK_NEAR(e.task_s[2], 0.5 + t0 + 0.001 + 0.004, 1e-12);
    CHECK(e.task_s[3] == 0.0); /* reused */
    CHECK_NEAR(e.setup_s, 1.0, 1e-12);
    CHECK_NEAR(e.comm_s, e.task_s[0] + e.task_s[1] + e.task_s[2], 1e-12);
    /* The final write: 10 records held, 4 compute keys and 3 samples added. */
    CHECK_NEAR(e.commit_s, 0.2 + 17 * 1e-3, 1e-12);
    CHECK_INT(plan->num_key_bytes, 0); /* no backend: the roofline bytes stood for the buffers */
    dsi_profile_estimate_free(&e);

    /* The loop's tunables move the estimate as they move the loop: 7
     * repetitions at least. */
    config.min_reps = 7;
    CHECK_OK(dsi_profile_estimate(plan, &config, &speed, reused, true, false, -1, &e));
    CHECK_NEAR(e.unit_s[0], 8 * 0.500008 + 0.1, 1e-12);
    CHECK(e.comm_s == 0.0);
    CHECK_NEAR(e.commit_s, 0.2, 1e-12); /* no database: the text outputs */
    dsi_profile_estimate_free(&e);

    /* Large messages' spread in draws: task 1 (4 MB, at the large size)
     * takes the mean of the loop's time over the draws, and a draw that
     * spreads more costs more repetitions. */
    config.min_reps = 5;
    speed.comm_spread = 0.01;
    speed.comm_spread_small_bytes = 4096;
    speed.comm_spread_large_bytes = 4000000;
    double task1[3];
    const double draws[3][DSI_SPREAD_DRAWS] = {
        {0.02, 0.02, 0.02}, {0.2, 0.2, 0.2}, {0.02, 0.02, 0.2}};
    for (int d = 0; d < 3; d++) {
        memcpy(speed.comm_op_spread[DS_COMM_ALLREDUCE], draws[d], sizeof(draws[d]));
        CHECK_OK(dsi_profile_estimate(plan, &config, &speed, reused, false, true, -1, &e));
        task1[d] = e.task_s[1];
        dsi_profile_estimate_free(&e);
    }
    CHECK(task1[1] > 2.0 * task1[0]);
    CHECK_NEAR(task1[2], (2.0 * task1[0] + task1[1]) / 3.0, 1e-12);
    dsi_profile_plan_destroy(plan);
}

/* The progress line's ETA: the estimate's time still to come, scaled by
 * how the run compares with the estimate so far. */
static void test_progress_eta(void)
{
    dsi_progress_t p;
    dsi_progress_start(&p, "profiling", 10, 100.0, false);
    CHECK_NEAR(dsi_progress_eta(&p, 30.0), 70.0, 1e-12); /* nothing done: the estimate */
    CHECK(dsi_progress_eta(&p, 130.0) == 0.0);
    dsi_progress_step(&p, 4, 20.0); /* 4 of 10 done, the estimate's first 20 s, in 40 s */
    CHECK_NEAR(dsi_progress_eta(&p, 40.0), 80.0 * 40.0 / 20.0, 1e-12);
    dsi_progress_step(&p, 10, 100.0);
    CHECK(dsi_progress_eta(&p, 90.0) == 0.0);
    /* Without an estimate: by count. */
    dsi_progress_start(&p, "profiling", 10, 0.0, false);
    dsi_progress_step(&p, 4, 0.0);
    CHECK_NEAR(dsi_progress_eta(&p, 40.0), 60.0, 1e-12);
}

int main(void)
{
    test_units_and_balance();
    test_comm_tasks();
    test_shapes_every_node_count();
    test_shape_of_allocations();
    test_shapes_compare();
    test_band_multipliers();
    test_loop_expectation();
    test_estimate_by_hand();
    test_progress_eta();
    return check_summary("test_profile_plan");
}
