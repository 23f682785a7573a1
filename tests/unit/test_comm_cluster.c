/* Every level, span, NIC count and oversubscription of a cluster file
 * shapes communication costs, on the fitted model without samples and on
 * the estimated path (event estimates, --estimate-missing simulations),
 * as the model's formulas say (include/dsmpi/comm.h). */
#include "check.h"
#include "comm_support.h"

#include <stdlib.h>

#define NODES 256
#define PER_NODE 4
#define NVLINK_US 2.0
#define NVLINK_GBPS 450.0
#define GROUP_US 3.0
#define GLOBAL_US 5.0
#define NIC_GBPS 25.0

/* A dragonfly-like file: groups of `span` nodes of 4 devices, `nics`
 * interfaces per node, global links `oversubscription`:1 above the groups. */
static ds_cluster_t dragonfly(double oversubscription, int nics, int span)
{
    char json[1024];
    snprintf(json, sizeof(json),
             "{\"name\": \"df\", \"nodes\": %d, \"gpus_per_node\": %d, \"device\": \"h100-sxm\",\n"
             " \"levels\": [{\"name\": \"nvlink\", \"latency_us\": %g, \"bandwidth_GBps\": %g},\n"
             "  {\"name\": \"group\", \"latency_us\": %g, \"bandwidth_GBps\": %g, \"span\": %d,"
             " \"nics_per_node\": %d},\n"
             "  {\"name\": \"global\", \"latency_us\": %g, \"bandwidth_GBps\": %g,"
             " \"oversubscription\": %g}]}",
             NODES, PER_NODE, NVLINK_US, NVLINK_GBPS, GROUP_US, NIC_GBPS, span, nics, GLOBAL_US,
             NIC_GBPS, oversubscription);
    ds_cluster_t c;
    if (ds_cluster_load_json(json, strlen(json), "df.json", &c) != DS_OK) {
        fprintf(stderr, "df.json: %s\n", ds_last_error());
        exit(1);
    }
    return c;
}

static ds_comm_prediction_t predict(const ds_cluster_t *c, ds_comm_op_t op, int64_t bytes, int n)
{
    ds_comm_model_t *model = NULL;
    ds_event_key_t key;
    ds_comm_prediction_t p;
    memset(&p, 0, sizeof(p));
    CHECK_OK(ds_comm_model_create(c, NULL, 0, NULL, &model));
    CHECK_OK(ds_comm_key_init(&key, op, bytes, n, c->gpus_per_node));
    CHECK_OK(ds_comm_model_predict(model, &key, &p));
    ds_comm_model_destroy(model);
    return p;
}

/* The shape of the all-reduce on every device (1024 ranks, 4 per node):
 * level-1 groups of `span` nodes it spans (1 when it stays in one). */
static double groups_spanned(int span)
{
    return span >= NODES ? 1.0 : ceil((double)NODES / span);
}

/* Bandwidth of the slowest level a group on every device crosses: the
 * node's interfaces (min(4, nics) of them at NIC_GBPS) divided by the
 * oversubscription when the group leaves a group of `span` nodes, NVLink
 * inside the node. */
static double slowest_Bps(double oversubscription, int nics, int span)
{
    double divisor = groups_spanned(span) > 1.0 ? oversubscription : 1.0;
    return fmin(NIC_GBPS * 1e9 * fmin(PER_NODE, nics) / divisor, NVLINK_GBPS * 1e9);
}

/* NCCL's protocols as the model prices them: bandwidth efficiency, then
 * the prior per-hop latency (us) inside a node and across the network; a
 * protocol adds its own over LL's to the cluster's latencies (LL's). */
static const double RING_PROTOS[3][3] = {
    {0.25, 0.6, 2.7}, {0.95 * 120.0 / 128.0, 1.9, 4.0}, {1.0, 3.4, 14.0}};
static const double TREE_PROTOS[3][3] = {
    {1.0 / 3.8, 0.6, 5.0}, {120.0 / 128.0, 1.25, 8.5}, {1.0, 4.0, 14.0}};

/* NCCL's ring: 2(units[L] - units[L+1]) hops at each level L crossed, the
 * bus volume S 2(n-1)/n through the slowest level; the fastest protocol. */
static double ring_allreduce_s(double bytes, double oversubscription, int nics, int span)
{
    double n = NODES * PER_NODE, nodes = NODES, groups = groups_spanned(span);
    double best = INFINITY;
    for (int p = 0; p < 3; p++) {
        double intra = RING_PROTOS[p][1] - RING_PROTOS[0][1];
        double net = RING_PROTOS[p][2] - RING_PROTOS[0][2];
        double hops = 2.0 * (n - nodes) * (NVLINK_US + intra);
        if (groups > 1.0)
            hops += 2.0 * (nodes - groups) * (GROUP_US + net) +
                    2.0 * (groups - 1.0) * (GLOBAL_US + net);
        else
            hops += 2.0 * (nodes - 1.0) * (GROUP_US + net);
        double t =
            hops * 1e-6 + bytes * 2.0 * (n - 1.0) / n /
                              (slowest_Bps(oversubscription, nics, span) * RING_PROTOS[p][0]);
        best = fmin(best, t);
    }
    return best;
}

/* NCCL's double binary tree: the chain of a node's 4 ranks, then
 * log2(domains) - log2(domains above) hops up and down each level; 2S /
 * efficiency (DS_COMM_TREE_EFFICIENCY, 0.92) through the slowest level;
 * the fastest protocol. */
static double tree_allreduce_s(double bytes, double oversubscription, int nics, int span)
{
    double groups = groups_spanned(span);
    double best = INFINITY;
    for (int p = 0; p < 3; p++) {
        double intra = TREE_PROTOS[p][1] - TREE_PROTOS[0][1];
        double net = TREE_PROTOS[p][2] - TREE_PROTOS[0][2];
        double hops = 2.0 * (PER_NODE - 1) * (NVLINK_US + intra);
        if (groups > 1.0)
            hops += 2.0 * (log2(NODES) - ceil(log2(groups))) * (GROUP_US + net) +
                    2.0 * ceil(log2(groups)) * (GLOBAL_US + net);
        else
            hops += 2.0 * log2(NODES) * (GROUP_US + net);
        double t =
            hops * 1e-6 +
            2.0 * bytes / 0.92 / (slowest_Bps(oversubscription, nics, span) * TREE_PROTOS[p][0]);
        best = fmin(best, t);
    }
    return best;
}

/* What NCCL picks: the faster. */
static double allreduce_s(double bytes, double oversubscription, int nics, int span)
{
    return fmin(ring_allreduce_s(bytes, oversubscription, nics, span),
                tree_allreduce_s(bytes, oversubscription, nics, span));
}

static void test_model_reads_every_level(void)
{
    const int64_t S = 1LL << 30; /* bandwidth-bound */
    const int n = NODES * PER_NODE;
    ds_cluster_t one = dragonfly(1.0, PER_NODE, 32), two = dragonfly(2.0, PER_NODE, 32),
                 sixteen = dragonfly(16.0, PER_NODE, 32);
    ds_comm_prediction_t p1 = predict(&one, DS_COMM_ALLREDUCE, S, n);
    ds_comm_prediction_t p2 = predict(&two, DS_COMM_ALLREDUCE, S, n);
    ds_comm_prediction_t p16 = predict(&sixteen, DS_COMM_ALLREDUCE, S, n);
    CHECK_INT(p16.level, 2);
    CHECK_INT(p16.cost.provenance, DS_PROV_ASSUMED);
    CHECK_NEAR(p1.ring_s, ring_allreduce_s((double)S, 1.0, PER_NODE, 32), 1e-9);
    CHECK_NEAR(p1.tree_s, tree_allreduce_s((double)S, 1.0, PER_NODE, 32), 1e-9);
    CHECK_NEAR(p1.cost.mean_s, allreduce_s((double)S, 1.0, PER_NODE, 32), 1e-9);
    CHECK_NEAR(p2.cost.mean_s, allreduce_s((double)S, 2.0, PER_NODE, 32), 1e-9);
    CHECK_NEAR(p16.cost.mean_s, allreduce_s((double)S, 16.0, PER_NODE, 32), 1e-9);
    /* At 1:1 the tree's few hops win (23.6 ms against the ring's 1536
     * NVLink and 496 group hops at the Simple protocol's latencies, 14.7
     * ms, on 21.5 ms of transfer); at 16:1 the ring's smaller volume. */
    CHECK_INT(p1.algo, DS_COMM_ALGO_TREE);
    CHECK_INT(p16.algo, DS_COMM_ALGO_RING);
    /* 16:1 against 1:1: 358.0 / 23.6 ms, 15.2 times slower; against 2:1
     * (the tree's 46.9 ms), 7.6 times. */
    CHECK(p16.cost.mean_s > 14.0 * p1.cost.mean_s && p16.cost.mean_s < 16.0 * p1.cost.mean_s);
    CHECK(p16.cost.mean_s > 7.0 * p2.cost.mean_s);

    /* One NIC per node instead of four: the node's network bandwidth is a quarter. */
    ds_cluster_t one_nic = dragonfly(2.0, 1, 32);
    ds_comm_prediction_t nic = predict(&one_nic, DS_COMM_ALLREDUCE, S, n);
    CHECK_NEAR(nic.cost.mean_s, allreduce_s((double)S, 2.0, 1, 32), 1e-9);
    CHECK(nic.cost.mean_s > 3.5 * p2.cost.mean_s);

    /* The span decides which level a group crosses: groups of 256 nodes
     * hold all of them, and the 16:1 global links are not crossed. */
    ds_cluster_t wide = dragonfly(16.0, PER_NODE, NODES);
    ds_comm_prediction_t inside = predict(&wide, DS_COMM_ALLREDUCE, S, n);
    CHECK_INT(inside.level, 1);
    CHECK_NEAR(inside.cost.mean_s, allreduce_s((double)S, 16.0, PER_NODE, NODES), 1e-9);
    CHECK(p16.cost.mean_s > 10.0 * inside.cost.mean_s);
    /* A group of 32 nodes (128 devices) stays in one group of 32, not of 16. */
    ds_cluster_t narrow = dragonfly(16.0, PER_NODE, 16);
    CHECK_INT(predict(&sixteen, DS_COMM_ALLREDUCE, S, 128).level, 1);
    CHECK_INT(predict(&narrow, DS_COMM_ALLREDUCE, S, 128).level, 2);
    CHECK(predict(&narrow, DS_COMM_ALLREDUCE, S, 128).cost.mean_s >
          10.0 * predict(&sixteen, DS_COMM_ALLREDUCE, S, 128).cost.mean_s);
}

/* The DP gradient all-reduce of a dp-only strategy, as events estimate it. */
static double dp_allreduce_estimate(const ds_model_t *model, const ds_strategy_t *s,
                                    const ds_cluster_t *c, ds_event_key_t *key_p)
{
    ds_event_set_t *set = NULL;
    CHECK_OK(ds_events_generate(model, s, c, &set));
    double largest = 0.0;
    for (size_t i = 0; set != NULL && i < ds_event_set_size(set); i++) {
        const ds_event_t *e = ds_event_set_at(set, i);
        if (e->key.kind == DS_EVENT_COMM && e->key.op == DS_COMM_ALLREDUCE &&
            e->key.group_size == NODES * PER_NODE && e->estimated_s > largest) {
            largest = e->estimated_s;
            *key_p = e->key;
        }
    }
    ds_event_set_destroy(set);
    return largest;
}

static double iteration_s(ds_sim_t *sim, const ds_model_t *model, const ds_strategy_t *s,
                          const ds_cluster_t *c)
{
    ds_sim_options_t o;
    ds_sim_options_init(&o);
    o.estimate_missing = 1;
    ds_sim_summary_t sum;
    memset(&sum, 0, sizeof(sum));
    CHECK_OK(ds_sim_run(sim, model, s, c, NULL, &o));
    ds_sim_get_summary(sim, &sum);
    return sum.iteration_s;
}

static void test_estimated_path(void)
{
    ds_model_t *model = NULL;
    CHECK_OK(ds_model_load("gpt2-medium", &model));
    ds_strategy_t s;
    ds_strategy_init(&s);
    CHECK_OK(ds_strategy_parse("dp=1024,mbs=1,gbs=1024", &s));
    CHECK_OK(ds_strategy_resolve(&s, model, NODES * PER_NODE, PER_NODE));
    ds_cluster_t two = dragonfly(2.0, PER_NODE, 32), sixteen = dragonfly(16.0, PER_NODE, 32),
                 one_nic = dragonfly(2.0, 1, 32), wide = dragonfly(16.0, PER_NODE, NODES);

    /* Event estimates are the model's predictions without samples. */
    ds_event_key_t key;
    memset(&key, 0, sizeof(key));
    double e2 = dp_allreduce_estimate(model, &s, &two, &key);
    ds_comm_model_t *comm = NULL;
    ds_comm_prediction_t p;
    CHECK_OK(ds_comm_model_create(&two, NULL, 0, NULL, &comm));
    CHECK_OK(ds_comm_model_predict(comm, &key, &p));
    CHECK_NEAR(e2, p.cost.mean_s, 1e-12);
    CHECK_INT(p.level, 2);
    ds_comm_model_destroy(comm);
    double e16 = dp_allreduce_estimate(model, &s, &sixteen, &key);
    CHECK(e16 > 5.0 * e2);
    CHECK(dp_allreduce_estimate(model, &s, &one_nic, &key) > 3.0 * e2);
    CHECK(dp_allreduce_estimate(model, &s, &wide, &key) < e16 / 5.0);

    /* --estimate-missing simulations: slower with 16:1, fewer NICs, a
     * narrower span. */
    ds_sim_t *sim = NULL;
    CHECK_OK(ds_sim_create(&sim));
    double t2 = iteration_s(sim, model, &s, &two), t16 = iteration_s(sim, model, &s, &sixteen);
    double nic = iteration_s(sim, model, &s, &one_nic), w = iteration_s(sim, model, &s, &wide);
    CHECK(t2 > 0.0);
    CHECK(t16 > 1.5 * t2);
    CHECK(nic > 1.2 * t2);
    CHECK(w < t16 / 1.5);
    ds_sim_destroy(sim);
    ds_model_destroy(model);
}

/* Congestion per doubling of the span, a prior from the cluster file: a
 * bandwidth-bound all-reduce on 8 nodes (two doublings beyond two) takes
 * 1 / (1 - c)^2 of the time without it; two nodes are not slowed; the fit
 * reports the prior as one. */
static void test_congestion_prior(void)
{
#define LEAF_JSON(congestion)                                                                      \
    "{\"name\": \"leaf\", \"nodes\": 64, \"gpus_per_node\": 4, \"device\": \"h100-sxm\",\n"        \
    " \"levels\": [{\"name\": \"nvlink\", \"latency_us\": 2, \"bandwidth_GBps\": 450},\n"          \
    "  {\"name\": \"ib\", \"latency_us\": 3, \"bandwidth_GBps\": 25,"                              \
    " \"congestion_per_doubling\": " congestion "}]}"
    ds_cluster_t plain, congested;
    const char *plain_json = LEAF_JSON("0"), *congested_json = LEAF_JSON("0.1");
    CHECK_OK(ds_cluster_load_json(plain_json, strlen(plain_json), "plain.json", &plain));
    CHECK_OK(
        ds_cluster_load_json(congested_json, strlen(congested_json), "congested.json", &congested));
    CHECK_NEAR(congested.levels[1].congestion_per_doubling, 0.1, 1e-12);
    const int64_t S = 16LL << 30;
    double t0 = predict(&plain, DS_COMM_ALLREDUCE, S, 32).cost.mean_s;
    double tc = predict(&congested, DS_COMM_ALLREDUCE, S, 32).cost.mean_s;
    CHECK_MSG(tc / t0 > 0.999 / (0.9 * 0.9) && tc / t0 <= 1.0 / (0.9 * 0.9) * 1.000001,
              "8 nodes: %.4f times slower, expected 1 / 0.81 less the latency", tc / t0);
    CHECK_NEAR(predict(&congested, DS_COMM_ALLREDUCE, S, 8).cost.mean_s,
               predict(&plain, DS_COMM_ALLREDUCE, S, 8).cost.mean_s, 1e-12);
    ds_comm_model_t *model = NULL;
    CHECK_OK(ds_comm_model_create(&congested, NULL, 0, NULL, &model));
    ds_comm_level_fit_t f;
    CHECK_OK(ds_comm_model_level_fit(model, 1, DS_COMM_ALLREDUCE, &f));
    CHECK_NEAR(f.congestion, 0.1, 1e-12);
    CHECK_INT(f.congestion_fitted, 0);
    ds_comm_model_destroy(model);
    /* Without the key: DS_COMM_CONGESTION_PRIOR, which main sets to 0 (its
     * default, 5%, is checked by tests/cli/cluster_cli.sh). */
    const char *unset_json = "{\"name\": \"leaf\", \"nodes\": 64, \"gpus_per_node\": 4,"
                             " \"device\": \"h100-sxm\", \"levels\": [{\"name\": \"nvlink\","
                             " \"latency_us\": 2, \"bandwidth_GBps\": 450}, {\"name\": \"ib\","
                             " \"latency_us\": 3, \"bandwidth_GBps\": 25}]}";
    ds_cluster_t unset;
    CHECK_OK(ds_cluster_load_json(unset_json, strlen(unset_json), "unset.json", &unset));
    CHECK(plain.levels[1].congestion_given && !unset.levels[1].congestion_given);
    CHECK_NEAR(predict(&unset, DS_COMM_ALLREDUCE, S, 32).cost.mean_s, t0, 1e-12);
    /* Open MPI's rules path keeps its own: no congestion. */
    ds_comm_model_options_t options;
    ds_comm_model_options_init(&options);
    options.library = DS_COMM_LIBRARY_OMPI;
    CHECK_OK(ds_comm_model_create(&congested, NULL, 0, &options, &model));
    CHECK_OK(ds_comm_model_level_fit(model, 1, DS_COMM_ALLREDUCE, &f));
    CHECK_NEAR(f.congestion, 0.0, 1e-12);
    ds_comm_model_destroy(model);
}

/* A fit on two spans that lose nothing (the same bus bandwidth on 2 and 4
 * nodes) prices doublings up to 4 nodes at the fit, 0, and those beyond the
 * widest span at the prior, 10% each: 16 nodes take 1 / 0.9^2 of the bus
 * time of 4; the fit reports both. */
static void test_congestion_beyond_widest(void)
{
    const char *json = LEAF_JSON("0.1");
    ds_cluster_t c;
    CHECK_OK(ds_cluster_load_json(json, strlen(json), "leaf.json", &c));
    const double busbw = 20e9; /* per NIC, 4 NICs per node */
    ds_comm_sample_t items[2 * 8];
    size_t count = 0;
    for (int nodes = 2; nodes <= 4; nodes *= 2)
        for (int octave = 0; octave < 8; octave++) {
            ds_comm_sample_t *x = &items[count++];
            int n = 4 * nodes;
            int64_t bytes = (int64_t)1 << (24 + octave);
            fill_comm_sample(x, DS_COMM_ALLREDUCE, bytes, n, nodes, 4,
                             2.0 * (n - 1) / n * (double)bytes / (4.0 * busbw), DS_PROV_IMPORTED,
                             20, "leaf");
        }
    ds_comm_model_t *model = NULL;
    CHECK_OK(ds_comm_model_create(&c, items, count, NULL, &model));
    ds_comm_level_fit_t f;
    CHECK_OK(ds_comm_model_level_fit(model, 1, DS_COMM_ALLREDUCE, &f));
    CHECK_INT(f.congestion_fitted, 1);
    CHECK_NEAR(f.congestion, 0.0, 1e-6);
    CHECK_NEAR(f.congestion_beyond, 0.1, 1e-12);
    const int64_t S = 1LL << 31;
    double bus[2];
    for (int i = 0; i < 2; i++) {
        int n = i == 0 ? 16 : 64;
        ds_event_key_t key;
        ds_comm_prediction_t p;
        CHECK_OK(ds_comm_key_init(&key, DS_COMM_ALLREDUCE, S, n, 4));
        CHECK_OK(ds_comm_model_predict(model, &key, &p));
        bus[i] = p.cost.mean_s * n / (2.0 * (n - 1));
    }
    CHECK_MSG(bus[1] / bus[0] > 0.99 / 0.81 && bus[1] / bus[0] < 1.01 / 0.81,
              "16 nodes: bus time %.4f of 4 nodes', expected 1 / 0.81", bus[1] / bus[0]);
    ds_comm_model_destroy(model);
}

int main(void)
{
    /* The times below are computed by hand without the congestion prior. */
    setenv("DS_COMM_CONGESTION_PRIOR", "0", 1);
    test_congestion_prior();
    test_congestion_beyond_widest();
    test_model_reads_every_level();
    test_estimated_path();
    return check_summary("test_comm_cluster");
}
