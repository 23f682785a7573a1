/* NCCL's protocols in the communication model: ring and tree all-reduce
 * on the cluster's nominal links (no samples) priced with LL, LL128 and
 * Simple against hand-computed times, and the choice of the fastest per
 * size: LL for small messages, LL128 in the middle, Simple for the largest. */
#include "check.h"

#include "comm/dsi_comm.h"

#include <math.h>
#include <stdlib.h>

/* 8 nodes of 4 devices: NVLink 2 us at 450 GB/s per device, InfiniBand 3
 * us at 25 GB/s per NIC, 4 NICs per node (one per device). */
#define NODES 8
#define PER_NODE 4
#define NVLINK_US 2.0
#define NVLINK_BPS 450e9
#define IB_US 3.0
#define NODE_BPS (4 * 25e9)

/* Efficiency, then per-hop latency inside a node and across, us (NCCL's
 * tuning model, as libdsmpi/comm/algorithms.c lists them). */
static const double RING[3][3] = {
    {0.25, 0.6, 2.7}, {0.95 * 120.0 / 128.0, 1.9, 4.0}, {1.0, 3.4, 14.0}};
static const double TREE[3][3] = {
    {1.0 / 3.8, 0.6, 5.0}, {120.0 / 128.0, 1.25, 8.5}, {1.0, 4.0, 14.0}};

static ds_cluster_t cluster(void)
{
    const char *json =
        "{\"name\": \"leaf\", \"nodes\": 8, \"gpus_per_node\": 4, \"device\": \"h100-sxm\",\n"
        " \"levels\": [{\"name\": \"nvlink\", \"latency_us\": 2, \"bandwidth_GBps\": 450},\n"
        "  {\"name\": \"ib\", \"latency_us\": 3, \"bandwidth_GBps\": 25}]}";
    ds_cluster_t c;
    memset(&c, 0, sizeof(c));
    CHECK_OK(ds_cluster_load_json(json, strlen(json), "leaf.json", &c));
    return c;
}

/* Ring all-reduce, protocol p: 2(n - nodes) NVLink hops and 2(nodes - 1)
 * network hops, each at the cluster's latency plus the protocol's over
 * LL's; the bus volume S 2(n-1)/n through the slower level. */
static double ring_s(int p, double bytes)
{
    double n = NODES * PER_NODE;
    double latency = 2.0 * (n - NODES) * (NVLINK_US + RING[p][1] - RING[0][1]) +
                     2.0 * (NODES - 1) * (IB_US + RING[p][2] - RING[0][2]);
    double volume = bytes * 2.0 * (n - 1.0) / n;
    return latency * 1e-6 + volume / (RING[p][0] * fmin(NVLINK_BPS, NODE_BPS));
}

/* The share of its bandwidth a tree keeps at 1 KiB, 16 MiB and 1 GiB per
 * protocol, read off the knots in algorithms.c by hand: LL 1 at 2^10,
 * 0.7 -> 1 over 2^22 .. 2^25; LL128 1 at 2^11, 0.9 -> 1 over 2^23 .. 2^27;
 * Simple 0.9 up to 2^12, 0.8 -> 0.7 over 2^23 .. 2^25, 1 from 2^29. */
static double tree_mid(int p, double bytes)
{
    static const double share[3][3] = {
        {1.0, 0.7 + 0.3 * 2.0 / 3.0, 1.0}, {1.0, 0.9 + 0.1 / 4.0, 1.0}, {0.9, 0.75, 1.0}};
    int size = bytes <= 1024.0 ? 0 : bytes <= 16.0 * 1048576.0 ? 1 : 2;
    return share[p][size];
}

/* Tree all-reduce, protocol p: the chain of a node's 4 devices up and
 * down, 2 log2(nodes) network hops; 2S / 0.92 through the slower level at
 * the tree's mid-size share. */
static double tree_s(int p, double bytes)
{
    double latency = 2.0 * (PER_NODE - 1) * (NVLINK_US + TREE[p][1] - TREE[0][1]) +
                     2.0 * log2(NODES) * (IB_US + TREE[p][2] - TREE[0][2]);
    return latency * 1e-6 +
           2.0 * bytes / 0.92 / (TREE[p][0] * fmin(NVLINK_BPS, NODE_BPS) * tree_mid(p, bytes));
}

static void check_algo(const ds_comm_model_t *model, ds_comm_algo_t id, double (*hand)(int, double))
{
    const dsi_comm_algo_t *algo =
        dsi_comm_library_find(dsi_comm_library_get(DS_COMM_LIBRARY_NCCL), id);
    CHECK(algo != NULL && algo->terms != NULL);
    if (algo == NULL || algo->terms == NULL)
        return;
    dsi_comm_shape_t shape;
    dsi_comm_shape_init(model, NODES * PER_NODE, NODES, PER_NODE, 1, 0, &shape);
    /* 1 KiB: latency-bound, LL; 16 MiB: LL128's 3.6x bandwidth over LL pays
     * for its latency, and Simple's 7% more does not yet; 1 GiB: Simple. */
    const double sizes[] = {1024.0, 16.0 * 1048576.0, 1073741824.0};
    const int expected[] = {0, 1, 2};
    for (int i = 0; i < 3; i++) {
        dsi_comm_terms_t terms;
        algo->terms(model, DS_COMM_ALLREDUCE, sizes[i], &shape, &terms);
        CHECK_INT(terms.num_protos, 3);
        int proto = -1;
        double t =
            dsi_comm_terms_time_proto(model, DS_COMM_ALLREDUCE, &shape, &terms, sizes[i], &proto);
        double fastest = INFINITY;
        int fastest_proto = -1;
        for (int p = 0; p < 3; p++)
            if (hand(p, sizes[i]) < fastest) {
                fastest = hand(p, sizes[i]);
                fastest_proto = p;
            }
        CHECK_MSG(fabs(t - fastest) <= 1e-9 * fastest, "%s, %.0f B: %.6g s, by hand %.6g s",
                  algo->name, sizes[i], t, fastest);
        CHECK_INT(proto, fastest_proto);
        CHECK_INT(proto, expected[i]);
    }
}

/* A protocol below full efficiency never runs faster than its share of the
 * nominal bandwidth, whatever the curve says. */
static void check_caps(const ds_comm_model_t *model)
{
    dsi_comm_shape_t shape;
    dsi_comm_shape_init(model, NODES * PER_NODE, NODES, PER_NODE, 1, 0, &shape);
    const dsi_comm_algo_t *ring =
        dsi_comm_library_find(dsi_comm_library_get(DS_COMM_LIBRARY_NCCL), DS_COMM_ALGO_RING);
    dsi_comm_terms_t terms;
    ring->terms(model, DS_COMM_ALLREDUCE, 1e6, &shape, &terms);
    CHECK_NEAR(dsi_comm_proto_bandwidth(model, &terms, 0, 1, &shape, 1e15, 1024.0), 0.25 * NODE_BPS,
               1e-12);
    CHECK_NEAR(dsi_comm_proto_bandwidth(model, &terms, 0, 1, &shape, 1e9, 1024.0), 0.25 * 1e9,
               1e-12);
    CHECK_NEAR(dsi_comm_proto_bandwidth(model, &terms, 2, 1, &shape, 1e15, 1024.0), 1e15, 1e-12);
    CHECK_NEAR(dsi_comm_proto_hop_extra_s(&terms, 2, 1), (14.0 - 2.7) * 1e-6, 1e-12);
    CHECK_NEAR(dsi_comm_proto_hop_extra_s(&terms, 1, 0), (1.9 - 0.6) * 1e-6, 1e-12);
    CHECK_NEAR(dsi_comm_proto_hop_extra_s(&terms, 0, 1), 0.0, 1e-12);
    /* Rings keep their bandwidth at every size; trees lose most at mid sizes. */
    CHECK_NEAR(dsi_comm_proto_mid_size(&terms, 2, 262144.0), 1.0, 1e-12);
    const dsi_comm_algo_t *tree =
        dsi_comm_library_find(dsi_comm_library_get(DS_COMM_LIBRARY_NCCL), DS_COMM_ALGO_TREE);
    tree->terms(model, DS_COMM_ALLREDUCE, 1e6, &shape, &terms);
    CHECK_NEAR(dsi_comm_proto_mid_size(&terms, 0, 524288.0), 0.4, 1e-12);
    CHECK_NEAR(dsi_comm_proto_mid_size(&terms, 2, 262144.0), 0.5, 1e-12);
    CHECK_NEAR(dsi_comm_proto_mid_size(&terms, 2, 4096.0), 0.9, 1e-12);
    CHECK_NEAR(dsi_comm_proto_mid_size(&terms, 2, 1073741824.0), 1.0, 1e-12);
    CHECK_NEAR(dsi_comm_proto_bandwidth(model, &terms, 2, 1, &shape, 1e9, 262144.0), 0.5e9, 1e-12);
}

int main(void)
{
    /* The times below are computed by hand without the congestion prior. */
    setenv("DS_COMM_CONGESTION_PRIOR", "0", 1);
    ds_cluster_t c = cluster();
    ds_comm_model_t *model = NULL;
    CHECK_OK(ds_comm_model_create(&c, NULL, 0, NULL, &model));
    check_algo(model, DS_COMM_ALGO_RING, ring_s);
    check_algo(model, DS_COMM_ALGO_TREE, tree_s);
    check_caps(model);
    ds_comm_model_destroy(model);
    return check_summary("test_comm_protocols");
}
