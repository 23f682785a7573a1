/* The simulator on random strategies: every key it looks up is a key event
 * generation produces; symmetric and full modes give the same nanoseconds;
 * the stage-level fast path equals the layer level; every dependency is
 * respected and starts are exactly the latest predecessor end; no stream of
 * a device runs two events at once; a broken schedule is reported as a
 * deadlock with its cycle. */
#include "sim_support.h"

#include "sim/dsi_sim.h"

static uint64_t rng_state = 0x5eed5eedULL;

static uint64_t next_random(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static int pick(int n)
{
    return (int)(next_random() % (uint64_t)n);
}

/* A cost per key from its hash: different keys, different costs. */
static double hashed_rule(const ds_event_key_t *key, const ds_event_t *event, void *arg)
{
    (void)event;
    (void)arg;
    uint64_t h = ds_event_key_hash(key);
    return (double)(1000 + h % 99000) * 1e-9; /* 1 to 100 us */
}

static const char *const models[] = {"uniform", "gpt2-medium", "llama2-7b", "bert-large",
                                     "t5-large"};

static ds_model_t *load_model(int which)
{
    if (which == 0)
        return uniform_model(12, 64);
    ds_model_t *model = NULL;
    if (ds_model_load(models[which], &model) != DS_OK) {
        fprintf(stderr, "%s: %s\n", models[which], ds_last_error());
        exit(1);
    }
    /* Keep shapes small: the test is about structure. */
    if (ds_model_set_seq_len(model, 128) != DS_OK)
        exit(1);
    return model;
}

/* A random valid strategy for `model`; false when none was found. */
static bool random_strategy(const ds_model_t *model, ds_strategy_t *s, ds_cluster_t *cluster,
                            char *text, size_t size)
{
    static const int per_node_choices[] = {1, 2, 3, 4, 8};
    static const char *const orders[] = {"tp-dp-pp", "dp-tp-pp", "tp-pp-dp",
                                         "pp-dp-tp", "dp-pp-tp", "pp-tp-dp"};
    for (int attempt = 0; attempt < 200; attempt++) {
        int tp = 1 << pick(3), pp = 1 + pick(4), dp = 1 + pick(4);
        int mbs = 1 + pick(2), m = 1 + pick(6);
        int schedule = pick(3), vpp = 2 + pick(2), zero = pick(4), recompute = pick(3);
        if (schedule == 2) {
            if (pp < 2)
                pp = 2;
            m = pp * (1 + pick(3));
        }
        if (zero >= 2)
            pp = 1, schedule = 1;
        int per_node = per_node_choices[pick(5)];
        int64_t devices = (int64_t)tp * dp * pp;
        if (devices % per_node != 0)
            per_node = 1;
        int n = snprintf(
            text, size, "dp=%d,tp=%d,pp=%d,mbs=%d,gbs=%d,schedule=%s,order=%s,recompute=%s,zero=%d",
            dp, tp, pp, mbs, dp * mbs * m,
            schedule == 0   ? "gpipe"
            : schedule == 1 ? "1f1b"
                            : "interleaved",
            orders[pick(6)],
            recompute == 0   ? "none"
            : recompute == 1 ? "selective"
                             : "full",
            zero);
        if (schedule == 2)
            n += snprintf(text + n, size - n, ",vpp=%d", vpp);
        if (pick(2))
            n += snprintf(text + n, size - n, ",sp");
        if (pick(3) == 0)
            n += snprintf(text + n, size - n, ",no-overlap");
        if (pick(3) == 0)
            n += snprintf(text + n, size - n, ",no-clip");
        if (pick(2))
            n += snprintf(text + n, size - n, ",bucket=%dM", 1 + pick(8));
        if (schedule != 2 && pp >= 3 && pick(3) == 0)
            n += snprintf(text + n, size - n, ",first-stage-layers=%d,last-stage-layers=%d",
                          1 + pick(3), 1 + pick(3));
        if (zero == 0 && pick(4) == 0)
            n += snprintf(text + n, size - n, ",dp-algo=ps,ps-servers=%d", 1 + pick(dp));
        else if (pick(4) == 0)
            n += snprintf(text + n, size - n, ",dp-algo=ring");
        if (ds_cluster_init(cluster, devices / per_node, per_node, "a100-80g") != DS_OK)
            continue;
        ds_strategy_init(s);
        ds_log_set_level(DS_LOG_ERROR);
        if (ds_strategy_parse(text, s) == DS_OK &&
            ds_strategy_resolve(s, model, devices, per_node) == DS_OK)
            return true;
    }
    return false;
}

static bool same_events(ds_sim_t *a, ds_sim_t *b, int64_t rank, const char *what, const char *text)
{
    const ds_sim_event_t *ea, *eb;
    size_t na, nb;
    CHECK_OK(ds_sim_device_events(a, rank, &ea, &na));
    ds_sim_event_t *copy = malloc((na ? na : 1) * sizeof(*copy));
    memcpy(copy, ea, na * sizeof(*copy));
    CHECK_OK(ds_sim_device_events(b, rank, &eb, &nb));
    bool same = na == nb;
    for (size_t i = 0; i < na && same; i++)
        same = copy[i].start_ns == eb[i].start_ns && copy[i].end_ns == eb[i].end_ns &&
               copy[i].stream == eb[i].stream && copy[i].category == eb[i].category &&
               copy[i].microbatch == eb[i].microbatch;
    CHECK_MSG(same, "%s: rank %lld events differ (%zu vs %zu) for %s", what, (long long)rank, na,
              nb, text);
    free(copy);
    return same;
}

/* Internal invariants of an evaluated graph. */
static void check_graph(const ds_sim_t *sim, const char *text)
{
    const dsi_graph_t *g = &sim->g;
    int64_t *latest = calloc((size_t)g->n, sizeof(*latest));
    bool ok = true;
    for (int64_t e = 0; e < g->ne && ok; e++) {
        int32_t u = g->efrom[e], v = g->eto[e];
        int64_t end = g->start[u] + g->dur[u];
        ok = g->start[v] >= end;
        if (end > latest[v])
            latest[v] = end;
    }
    CHECK_MSG(ok, "a dependency is violated for %s", text);
    for (int32_t i = 0; i < g->n && ok; i++)
        ok = g->start[i] == latest[i];
    CHECK_MSG(ok, "a start is not its latest predecessor's end for %s", text);
    free(latest);
    /* Compute streams and DP streams never run two events at once. */
    for (int32_t lane = 0; lane < sim->plan.num_lanes; lane++) {
        int64_t prev_end = -1;
        for (int32_t k = sim->results.lane_node_off[lane]; k < sim->results.lane_node_off[lane + 1];
             k++) {
            int32_t i = sim->results.lane_nodes[k];
            if (g->kind[i] == DSI_N_TP)
                continue;
            CHECK_MSG(g->start[i] >= prev_end, "lane %d runs two compute events at once for %s",
                      lane, text);
            prev_end = g->start[i] + g->dur[i];
        }
    }
    for (int32_t grp = 0; grp < sim->plan.num_dpgroups; grp++) {
        int64_t prev_end = -1;
        for (int32_t k = sim->results.dp_node_off[grp]; k < sim->results.dp_node_off[grp + 1];
             k++) {
            int32_t i = sim->results.dp_node_nodes[k];
            CHECK_MSG(g->start[i] >= prev_end, "DP group %d runs two collectives at once for %s",
                      grp, text);
            prev_end = g->start[i] + g->dur[i];
        }
    }
}

static void random_strategies(void)
{
    ds_sim_t *sym = NULL, *full = NULL, *stage = NULL;
    CHECK_OK(ds_sim_create(&sym));
    CHECK_OK(ds_sim_create(&full));
    CHECK_OK(ds_sim_create(&stage));
    int done = 0;
    for (int round = 0; round < 120; round++) {
        int which = pick((int)DSI_N(models));
        ds_model_t *model = load_model(which);
        ds_strategy_t s;
        ds_cluster_t cluster;
        char text[512];
        if (!random_strategy(model, &s, &cluster, text, sizeof(text))) {
            ds_model_destroy(model);
            continue;
        }
        char label[600];
        snprintf(label, sizeof(label), "%s %s on %lldx%d", models[which], text,
                 (long long)cluster.nodes, cluster.gpus_per_node);
        ds_event_set_t *set = NULL;
        CHECK_OK(ds_events_generate(model, &s, &cluster, &set));
        ds_cost_table_t *costs = synthetic_costs(model, &s, &cluster, hashed_rule, NULL);
        ds_sim_options_t o;
        ds_sim_options_init(&o);
        ds_status_t st = ds_sim_run(sym, model, &s, &cluster, costs, &o);
        CHECK_MSG(st == DS_OK, "symmetric %s: %s", label, ds_last_error());
        o.mode = DS_SIM_FULL;
        ds_status_t sf = ds_sim_run(full, model, &s, &cluster, costs, &o);
        CHECK_MSG(sf == DS_OK, "full %s: %s", label, ds_last_error());
        o.mode = DS_SIM_SYMMETRIC;
        o.granularity = DS_SIM_STAGE;
        ds_status_t ss = ds_sim_run(stage, model, &s, &cluster, costs, &o);
        CHECK_MSG(ss == DS_OK, "stage level %s: %s", label, ds_last_error());
        if (st == DS_OK && sf == DS_OK && ss == DS_OK) {
            done++;
            /* Keys looked up are keys generated. */
            for (size_t i = 0; i < ds_sim_key_count(full); i++) {
                const ds_event_key_t *key = ds_sim_key_at(full, i, NULL, NULL);
                char k[256];
                ds_event_key_format(key, k, sizeof(k));
                CHECK_MSG(ds_event_set_find(set, key) != NULL,
                          "%s looks up '%s', not in the event set", label, k);
            }
            ds_sim_summary_t a, b, c;
            ds_sim_get_summary(sym, &a);
            ds_sim_get_summary(full, &b);
            ds_sim_get_summary(stage, &c);
            if (getenv("SIM_TEST_VERBOSE") != NULL)
                printf("%s: %lld of %lld devices simulated, %.6f s\n", label,
                       (long long)a.simulated_devices, (long long)b.num_devices, a.iteration_s);
            CHECK_MSG(to_ns(a.iteration_s) == to_ns(b.iteration_s),
                      "%s: symmetric %.9f s, full %.9f s", label, a.iteration_s, b.iteration_s);
            CHECK_MSG(to_ns(a.iteration_s) == to_ns(c.iteration_s),
                      "%s: layer %.9f s, stage %.9f s", label, a.iteration_s, c.iteration_s);
            CHECK_MSG(a.simulated_devices <= b.simulated_devices &&
                          b.simulated_devices == b.num_devices,
                      "%s: %lld and %lld simulated devices", label, (long long)a.simulated_devices,
                      (long long)b.simulated_devices);
            /* Every rank: the same timeline in both modes (symmetric: its representative's). */
            for (int64_t rank = 0; rank < b.num_devices; rank++)
                if (!same_events(sym, full, rank, "symmetric vs full", label))
                    break;
            /* Stage level: the same per-device totals and micro-batch times. */
            for (int64_t rank = 0; rank < b.num_devices; rank++) {
                ds_sim_device_t x, y;
                CHECK_OK(ds_sim_device_of_rank(sym, rank, &x));
                CHECK_OK(ds_sim_device_of_rank(stage, rank, &y));
                CHECK_MSG(to_ns(x.compute_s) == to_ns(y.compute_s) &&
                              to_ns(x.idle_s) == to_ns(y.idle_s) &&
                              to_ns(x.comm_exposed_s) == to_ns(y.comm_exposed_s),
                          "%s: rank %lld layer vs stage level totals differ", label,
                          (long long)rank);
            }
            for (size_t i = 0; i < ds_sim_microbatch_count(sym); i++) {
                ds_sim_microbatch_t x, y;
                CHECK_OK(ds_sim_microbatch_at(sym, i, &x));
                CHECK_OK(ds_sim_microbatch_at(stage, i, &y));
                CHECK_MSG(to_ns(x.fwd_start_s) == to_ns(y.fwd_start_s) &&
                              to_ns(x.bwd_end_s) == to_ns(y.bwd_end_s),
                          "%s: micro-batch %zu timings differ between levels", label, i);
            }
            check_graph(sym, label);
            check_graph(full, label);
            check_graph(stage, label);
            /* A straggler: full mode at layer and stage level still agree. */
            ds_sim_slow_device_t slow = {(int64_t)pick((int)b.num_devices),
                                         1.0 + 0.25 * (1 + pick(4))};
            ds_sim_options_t so;
            ds_sim_options_init(&so);
            so.mode = DS_SIM_FULL;
            so.slow_devices = &slow;
            so.num_slow_devices = 1;
            CHECK_OK(ds_sim_run(full, model, &s, &cluster, costs, &so));
            so.granularity = DS_SIM_STAGE;
            CHECK_OK(ds_sim_run(stage, model, &s, &cluster, costs, &so));
            ds_sim_summary_t d, e;
            ds_sim_get_summary(full, &d);
            ds_sim_get_summary(stage, &e);
            CHECK_MSG(
                to_ns(d.iteration_s) == to_ns(e.iteration_s) && d.iteration_s >= b.iteration_s,
                "%s with rank %lld slowed by %g: layer %.9f s, stage %.9f s, without %.9f s", label,
                (long long)slow.rank, slow.factor, d.iteration_s, e.iteration_s, b.iteration_s);
            check_graph(full, label);
        }
        ds_cost_table_destroy(costs);
        ds_event_set_destroy(set);
        ds_model_destroy(model);
    }
    CHECK_MSG(done >= 80, "only %d random strategies ran", done);
    ds_sim_destroy(sym);
    ds_sim_destroy(full);
    ds_sim_destroy(stage);
}

static void deadlock(void)
{
    ds_model_t *model = uniform_model(8, 1);
    ds_strategy_t s;
    ds_cluster_t cluster;
    setup_strategy(model, "dp=1,pp=4,mbs=1,gbs=8,schedule=1f1b", 1, 4, &s, &cluster);
    ds_cost_table_t *costs = synthetic_costs(model, &s, &cluster, hashed_rule, NULL);
    ds_sim_t *sim = NULL;
    CHECK_OK(ds_sim_create(&sim));
    ds_sim_options_t o;
    ds_sim_options_init(&o);
    o.estimate_missing = 1; /* unbatched calls look up single-call keys */
    CHECK_OK(ds_sim_run(sim, model, &s, &cluster, costs, &o));
    /* Megatron's steady state with independent blocking send-then-receive. */
    dsi_sim_set_unbatched_p2p(sim, 1);
    CHECK_FAILS(ds_sim_run(sim, model, &s, &cluster, costs, &o), DS_ERR_DEADLOCK, "deadlocks");
    const char *msg = ds_last_error();
    CHECK_MSG(strstr(msg, "send-forward") != NULL && strstr(msg, "send-backward") != NULL &&
                  strstr(msg, "from stage ") != NULL && strstr(msg, "rank ") != NULL &&
                  strstr(msg, "call ") != NULL,
              "deadlock message names the transfers, stages and schedule positions: %s", msg);
    /* Interleaved too. */
    ds_cost_table_destroy(costs);
    ds_model_destroy(model);
    model = uniform_model(16, 1);
    setup_strategy(model, "dp=1,pp=4,mbs=1,gbs=8,vpp=2", 1, 4, &s, &cluster);
    costs = synthetic_costs(model, &s, &cluster, hashed_rule, NULL);
    CHECK_FAILS(ds_sim_run(sim, model, &s, &cluster, costs, &o), DS_ERR_DEADLOCK, "deadlocks");
    dsi_sim_set_unbatched_p2p(sim, 0);
    CHECK_OK(ds_sim_run(sim, model, &s, &cluster, costs, &o));
    ds_sim_destroy(sim);
    ds_cost_table_destroy(costs);
    ds_model_destroy(model);
}

int main(void)
{
    random_strategies();
    deadlock();
    return check_summary("test_sim_random");
}
