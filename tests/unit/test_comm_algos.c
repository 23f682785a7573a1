/* NCCL's algorithms on declared hardware: NVLS (the NVSwitches reduce),
 * CollNet (the network switches reduce, InfiniBand SHARP) and PAT (log-depth
 * all-gather and reduce-scatter at one device per node) on the cluster's
 * nominal links (no samples) against hand-computed times, and NCCL's choice:
 * each enters it only where the cluster file declares it. */
#include "check.h"

#include "comm/dsi_comm.h"

#include <math.h>
#include <stdlib.h>

/* 8 nodes of 4 devices: NVLink 2 us at 450 GB/s per device, InfiniBand 3
 * us at 25 GB/s per NIC, 4 NICs per node (one per device). */
#define NVLINK_US 2.0
#define NVLINK_BPS 450e9
#define IB_US 3.0
#define NIC_BPS 25e9
/* The fitted per-hop latency is the ring's LL row's: NVLink 0.6, network
 * 2.7 us in NCCL's priors; the algorithms' Simple rows add theirs over it. */
#define LL_NVLINK_US 0.6
#define LL_NET_US 2.7

static ds_cluster_t cluster(int nodes, const char *level0, const char *level1, const char *top)
{
    char json[1024];
    snprintf(
        json, sizeof(json),
        "{\"name\": \"leaf\", \"nodes\": %d, \"gpus_per_node\": 4, \"device\": \"h100-sxm\"%s,\n"
        " \"levels\": [{\"name\": \"nvlink\", \"latency_us\": 2, \"bandwidth_GBps\": 450%s},\n"
        "  {\"name\": \"ib\", \"latency_us\": 3, \"bandwidth_GBps\": 25%s}]}",
        nodes, top, level0, level1);
    ds_cluster_t c;
    memset(&c, 0, sizeof(c));
    CHECK_OK(ds_cluster_load_json(json, strlen(json), "leaf.json", &c));
    return c;
}

static ds_comm_model_t *model_of(const ds_cluster_t *c)
{
    ds_comm_model_t *model = NULL;
    CHECK_OK(ds_comm_model_create(c, NULL, 0, NULL, &model));
    return model;
}

static double algo_s(const ds_comm_model_t *model, ds_comm_algo_t id, ds_comm_op_t op, double bytes,
                     const dsi_comm_shape_t *shape)
{
    const dsi_comm_algo_t *algo =
        dsi_comm_library_find(dsi_comm_library_get(DS_COMM_LIBRARY_NCCL), id);
    CHECK(algo != NULL && algo->compose != NULL && algo->applies(op, shape));
    if (algo == NULL || algo->compose == NULL)
        return -1.0;
    return algo->compose(model, op, bytes, shape);
}

/* What NCCL picks for `op` of `bytes` on `shape`, and its time. */
static ds_comm_algo_t chosen(const ds_comm_model_t *model, ds_comm_op_t op, double bytes,
                             const dsi_comm_shape_t *shape, double *time_p)
{
    ds_comm_algo_t algo = DS_COMM_ALGO_DIRECT;
    double ring, tree;
    double t = dsi_comm_model_time(model, op, bytes, shape, DS_COMM_ALGO_DIRECT, false, &algo,
                                   &ring, &tree);
    if (time_p != NULL)
        *time_p = t;
    return algo;
}

/* NVLS inside one node: one switch operation at NVLink's hop plus NVLS's
 * 25 us over LL's 0.6; S (r-1)/r per device at 0.85 of NVLink.  Across 8
 * nodes (NVLS_TREE) the tree's 2 log2(8) network hops at 3 us plus 20.9
 * over 2.7, and 2S / 0.92 through the node's 4 NICs. */
static void test_nvls(void)
{
    ds_cluster_t plain = cluster(8, "", "", ""), c = cluster(8, ", \"nvls\": true", "", "");
    ds_comm_model_t *model = model_of(&c), *plain_model = model_of(&plain);
    dsi_comm_shape_t node, wide;
    dsi_comm_shape_init(model, 4, 1, 4, 1, 0, &node);
    dsi_comm_shape_init(model, 32, 8, 4, 1, 0, &wide);
    const double S = 1073741824.0;
    double node_s = (NVLINK_US + 25.0 - LL_NVLINK_US) * 1e-6 + S * 0.75 / 0.85 / NVLINK_BPS;
    CHECK_NEAR(algo_s(model, DS_COMM_ALGO_NVLS, DS_COMM_ALLREDUCE, S, &node), node_s, 1e-9);
    double wide_s = (NVLINK_US + 25.0 - LL_NVLINK_US) * 1e-6 +
                    2.0 * 3.0 * (IB_US + 20.9 - LL_NET_US) * 1e-6 +
                    fmax(S * 0.75 / 0.85 / NVLINK_BPS, 2.0 * S / 0.92 / (4.0 * NIC_BPS));
    CHECK_NEAR(algo_s(model, DS_COMM_ALGO_NVLS, DS_COMM_ALLREDUCE, S, &wide), wide_s, 1e-9);

    /* 1 GiB in a node: NVLS (0.88 S against the ring's 1.5 S); 1 KiB: the
     * ring or the tree (12 us of hops against 26.4). */
    double t = 0.0;
    CHECK_INT(chosen(model, DS_COMM_ALLREDUCE, S, &node, &t), DS_COMM_ALGO_NVLS);
    CHECK_NEAR(t, node_s, 1e-9);
    CHECK(chosen(model, DS_COMM_ALLREDUCE, 1024.0, &node, NULL) != DS_COMM_ALGO_NVLS);
    /* Undeclared: never, and the times are those of the ring and the tree. */
    const double sizes[] = {1024.0, 1048576.0, S};
    for (int i = 0; i < 3; i++) {
        CHECK(chosen(plain_model, DS_COMM_ALLREDUCE, sizes[i], &node, NULL) != DS_COMM_ALGO_NVLS);
        CHECK(chosen(plain_model, DS_COMM_ALLREDUCE, sizes[i], &wide, NULL) != DS_COMM_ALGO_NVLS);
    }
    /* All-gather is not NVLS's here: declared or not, the same time. */
    double a = 0.0, b = 0.0;
    chosen(model, DS_COMM_ALLGATHER, S, &node, &a);
    chosen(plain_model, DS_COMM_ALLGATHER, S, &node, &b);
    CHECK_NEAR(a, b, 1e-12);
    ds_comm_model_destroy(model);
    ds_comm_model_destroy(plain_model);
}

/* CollNet on 8 nodes of 4 under one SHARP switch level: inside the node a
 * direct reduce-scatter and all-gather (2 hops at 2 us plus 3.7 over 0.6,
 * 2S 3/4 per device); one traversal up and one down (3 us plus 15.5 over
 * 2.7 each) and S / 0.9 through the node's 4 NICs. */
static void test_collnet(void)
{
    ds_cluster_t plain = cluster(8, "", "", ""), c = cluster(8, "", ", \"sharp\": true", "");
    ds_comm_model_t *model = model_of(&c), *plain_model = model_of(&plain);
    dsi_comm_shape_t wide;
    dsi_comm_shape_init(model, 32, 8, 4, 1, 0, &wide);
    const double S = 1073741824.0;
    double latency =
        2.0 * (NVLINK_US + 3.7 - LL_NVLINK_US) * 1e-6 + 2.0 * (IB_US + 15.5 - LL_NET_US) * 1e-6;
    double collnet_s = latency + fmax(2.0 * S * 0.75 / NVLINK_BPS, S / 0.9 / (4.0 * NIC_BPS));
    CHECK_NEAR(algo_s(model, DS_COMM_ALGO_COLLNET, DS_COMM_ALLREDUCE, S, &wide), collnet_s, 1e-9);
    /* The latency does not grow with the nodes under one switch level. */
    ds_cluster_t big = cluster(64, "", ", \"sharp\": true", "");
    ds_comm_model_t *big_model = model_of(&big);
    dsi_comm_shape_t wider;
    dsi_comm_shape_init(big_model, 256, 64, 4, 1, 0, &wider);
    CHECK_NEAR(algo_s(big_model, DS_COMM_ALGO_COLLNET, DS_COMM_ALLREDUCE, 8.0, &wider),
               algo_s(model, DS_COMM_ALGO_COLLNET, DS_COMM_ALLREDUCE, 8.0, &wide), 1e-9);

    /* 1 GiB: S / 0.9 against the ring's 2S 31/32 through the NICs; 1 KiB:
     * the tree's LL (30 us of hops against 41.8). */
    double t = 0.0;
    CHECK_INT(chosen(model, DS_COMM_ALLREDUCE, S, &wide, &t), DS_COMM_ALGO_COLLNET);
    CHECK_NEAR(t, collnet_s, 1e-9);
    CHECK_INT(chosen(model, DS_COMM_ALLREDUCE, 1024.0, &wide, NULL), DS_COMM_ALGO_TREE);
    CHECK(chosen(plain_model, DS_COMM_ALLREDUCE, S, &wide, NULL) != DS_COMM_ALGO_COLLNET);
    /* Inside one node there are no network switches to reduce in. */
    dsi_comm_shape_t node;
    dsi_comm_shape_init(model, 4, 1, 4, 1, 0, &node);
    CHECK(chosen(model, DS_COMM_ALLREDUCE, S, &node, NULL) != DS_COMM_ALGO_COLLNET);
    ds_comm_model_destroy(big_model);
    ds_comm_model_destroy(model);
    ds_comm_model_destroy(plain_model);
}

/* PAT all-gather of 256 ranks, one per node: log2(256) = 8 network steps
 * at 3 us plus 14/3.5 over 2.7, NCCL's 2.8 us per rank, and the ring's bus
 * volume S 255/256 at 0.75 of one NIC. */
static void test_pat(void)
{
    ds_cluster_t plain = cluster(256, "", "", ""), c = cluster(256, "", "", ", \"pat\": true");
    ds_comm_model_t *model = model_of(&c), *plain_model = model_of(&plain);
    dsi_comm_shape_t spread, full;
    dsi_comm_shape_init(model, 256, 256, 1, 1, 0, &spread);
    dsi_comm_shape_init(model, 1024, 256, 4, 1, 0, &full);
    const double S = 1048576.0;
    double pat_s = 8.0 * (IB_US + 14.0 / 3.5 - LL_NET_US) * 1e-6 + 2.8e-6 * 256.0 +
                   S * 255.0 / 256.0 / 0.75 / NIC_BPS;
    CHECK_NEAR(algo_s(model, DS_COMM_ALGO_PAT, DS_COMM_ALLGATHER, S, &spread), pat_s, 1e-9);
    CHECK_NEAR(algo_s(model, DS_COMM_ALGO_PAT, DS_COMM_REDUCE_SCATTER, S, &spread), pat_s, 1e-9);

    /* 1 MiB: PAT (807 us against the ring's 932 with LL, 1143 with LL128);
     * 1 GiB: the ring's Simple (full bandwidth against PAT's 0.75). */
    double t = 0.0;
    CHECK_INT(chosen(model, DS_COMM_ALLGATHER, S, &spread, &t), DS_COMM_ALGO_PAT);
    CHECK_NEAR(t, pat_s, 1e-9);
    CHECK_INT(chosen(model, DS_COMM_REDUCE_SCATTER, S, &spread, NULL), DS_COMM_ALGO_PAT);
    CHECK_INT(chosen(model, DS_COMM_ALLGATHER, 1073741824.0, &spread, NULL), DS_COMM_ALGO_RING);
    /* Not declared, or more than one device per node, or all-reduce: never. */
    CHECK_INT(chosen(plain_model, DS_COMM_ALLGATHER, S, &spread, NULL), DS_COMM_ALGO_RING);
    CHECK_INT(chosen(model, DS_COMM_ALLGATHER, S, &full, NULL), DS_COMM_ALGO_RING);
    CHECK(chosen(model, DS_COMM_ALLREDUCE, S, &spread, NULL) != DS_COMM_ALGO_PAT);
    ds_comm_model_destroy(model);
    ds_comm_model_destroy(plain_model);
}

int main(void)
{
    /* The times below are computed by hand without the congestion prior. */
    setenv("DS_COMM_CONGESTION_PRIOR", "0", 1);
    test_nvls();
    test_collnet();
    test_pat();
    CHECK(strcmp(ds_comm_algo_name(DS_COMM_ALGO_NVLS), "nvls") == 0);
    CHECK(strcmp(ds_comm_algo_name(DS_COMM_ALGO_COLLNET), "collnet") == 0);
    CHECK(strcmp(ds_comm_algo_name(DS_COMM_ALGO_PAT), "pat") == 0);
    return check_summary("test_comm_algos");
}
