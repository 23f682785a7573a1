/* The Open MPI library of the communication model: its decision rules at
 * hand-checked points, collectives composed from synthetic point-to-point
 * samples (exact sums for hand-counted steps), NIC and uplink sharing; and
 * the text form of communication samples. */
#include "check.h"
#include "comm_support.h"

#include "comm/dsi_ompi.h"

#include <stdlib.h>

/* Point-to-point samples: intra-node latency 2 us at 100 GB/s, across nodes
 * 10 us at 20 GB/s (time = latency + bytes / bandwidth), both directions. */
#define INTRA_LAT 2e-6
#define INTRA_BW 100e9
#define INTER_LAT 10e-6
#define INTER_BW 20e9

static double p2p(int level, double bytes)
{
    return level == 0 ? INTRA_LAT + bytes / INTRA_BW : INTER_LAT + bytes / INTER_BW;
}

static size_t make_samples(ds_comm_sample_t *s, size_t max)
{
    size_t n = 0;
    for (int level = 0; level < 2; level++)
        for (int batched = 0; batched < 2; batched++)
            for (int64_t bytes = 1024; bytes <= (1 << 28) && n < max; bytes *= 2) {
                ds_comm_sample_t *x = &s[n++];
                fill_comm_sample(x, DS_COMM_SENDRECV, bytes, 2, level == 0 ? 1 : 2,
                                 level == 0 ? 2 : 1, p2p(level, (double)bytes), DS_PROV_MEASURED, 5,
                                 "replay:test");
                x->batched = batched;
            }
    return n;
}

static void test_rules(void)
{
    /* All-reduce: small messages recursive doubling, large Rabenseifner;
     * reduce + broadcast for small messages on 128..255 ranks. */
    CHECK_INT(dsi_ompi_choose(DS_COMM_ALLREDUCE, 8, 4096), DSI_OMPI_RECURSIVE_DOUBLING);
    CHECK_INT(dsi_ompi_choose(DS_COMM_ALLREDUCE, 8, 1 << 20), DSI_OMPI_RABENSEIFNER);
    CHECK_INT(dsi_ompi_choose(DS_COMM_ALLREDUCE, 64, 200000), DSI_OMPI_RECURSIVE_DOUBLING);
    CHECK_INT(dsi_ompi_choose(DS_COMM_ALLREDUCE, 64, 300000), DSI_OMPI_RABENSEIFNER);
    CHECK_INT(dsi_ompi_choose(DS_COMM_ALLREDUCE, 200, 4), DSI_OMPI_REDUCE_BCAST);
    CHECK_INT(dsi_ompi_choose(DS_COMM_ALLREDUCE, 2, 100000), DSI_OMPI_SEGMENTED_RING);
    CHECK_INT(dsi_ompi_choose(DS_COMM_ALLREDUCE, 5000, 10000), DSI_OMPI_SEGMENTED_RING);
    /* Reduce-scatter (total input): recursive halving below 256 KiB on 4..31 ranks. */
    CHECK_INT(dsi_ompi_choose(DS_COMM_REDUCE_SCATTER, 8, 65536), DSI_OMPI_RECURSIVE_HALVING);
    CHECK_INT(dsi_ompi_choose(DS_COMM_REDUCE_SCATTER, 8, 1 << 20), DSI_OMPI_RING);
    CHECK_INT(dsi_ompi_choose(DS_COMM_REDUCE_SCATTER, 2, 100), DSI_OMPI_RING);
    /* All-gather (one block): two ranks exchange, small groups double. */
    CHECK_INT(dsi_ompi_choose(DS_COMM_ALLGATHER, 2, 1 << 20), DSI_OMPI_PAIR);
    CHECK_INT(dsi_ompi_choose(DS_COMM_ALLGATHER, 16, 1 << 20), DSI_OMPI_RECURSIVE_DOUBLING);
    CHECK_INT(dsi_ompi_choose(DS_COMM_ALLGATHER, 100, 1 << 20), DSI_OMPI_RING);
    CHECK_INT(dsi_ompi_choose(DS_COMM_ALLGATHER, 100, 4096), DSI_OMPI_NEIGHBOR);
    CHECK(strcmp(dsi_ompi_algo_name(DSI_OMPI_RABENSEIFNER), "rabenseifner") == 0);

    ds_comm_library_t library;
    CHECK_OK(ds_comm_library_parse("ompi", &library));
    CHECK_INT(library, DS_COMM_LIBRARY_OMPI);
    CHECK(strcmp(ds_comm_library_name(DS_COMM_LIBRARY_NCCL), "nccl") == 0);
    CHECK_FAILS(ds_comm_library_parse("mpich", &library), DS_ERR_INVALID_ARG, "ompi");
}

static double predict(const ds_comm_model_t *model, ds_comm_op_t op, int64_t bytes, int n,
                      int nodes, int per_node, int concurrency, ds_comm_algo_t *algo_p)
{
    ds_event_key_t key;
    CHECK_OK(ds_comm_key_init(&key, op, bytes, n, per_node));
    key.nodes = nodes;
    key.ranks_per_node = per_node;
    key.concurrency = concurrency;
    ds_comm_prediction_t p;
    CHECK_OK(ds_comm_model_predict(model, &key, &p));
    if (algo_p != NULL)
        *algo_p = p.algo;
    return p.cost.mean_s;
}

static void test_composition(void)
{
    ds_comm_sample_t samples[200];
    size_t count = make_samples(samples, 200);
    ds_cluster_t cluster;
    /* 64 nodes of 8, 8 nodes per leaf, 8 NICs per node, 2:1 above the leaves. */
    CHECK_OK(ds_cluster_init(&cluster, 64, 8, "a100-80g"));
    cluster.num_levels = 3;
    cluster.levels[1].span = 8;
    cluster.levels[1].nics_per_node = 8;
    cluster.levels[2] = cluster.levels[1];
    snprintf(cluster.levels[2].name, sizeof(cluster.levels[2].name), "spine");
    cluster.levels[2].span = 0;
    cluster.levels[2].oversubscription = 2.0;
    ds_comm_model_options_t options;
    ds_comm_model_options_init(&options);
    options.library = DS_COMM_LIBRARY_OMPI;
    options.use_measurements = 0;
    ds_comm_model_t *model = NULL;
    CHECK_OK(ds_comm_model_create(&cluster, samples, count, &options, &model));
    if (model == NULL)
        return;
    ds_comm_algo_t algo;
    const double tol = 0.03; /* the fitted curves reproduce the samples within 2% */

    /* Point-to-point is the samples themselves. */
    CHECK_NEAR(predict(model, DS_COMM_SENDRECV, 1 << 20, 2, 2, 1, 1, NULL), p2p(1, 1 << 20), tol);

    /* 8 ranks in a node, 1 MiB: Rabenseifner, 3 halving and 3 doubling steps. */
    double S = 1 << 20, want = 2 * (p2p(0, S / 2) + p2p(0, S / 4) + p2p(0, S / 8));
    CHECK_NEAR(predict(model, DS_COMM_ALLREDUCE, 1 << 20, 8, 1, 8, 1, &algo), want, tol);
    CHECK_INT(algo, DS_COMM_ALGO_RABENSEIFNER);
    /* 16 ranks on 2 nodes of 8: the distance-8 steps cross nodes. */
    want = 2 * (p2p(0, S / 2) + p2p(0, S / 4) + p2p(0, S / 8) + p2p(1, S / 16));
    CHECK_NEAR(predict(model, DS_COMM_ALLREDUCE, 1 << 20, 16, 2, 8, 1, NULL), want, tol);
    /* The same with 2 groups per node: 16 flows on 8 NICs, half the bandwidth. */
    want =
        2 * (p2p(0, S / 2) + p2p(0, S / 4) + p2p(0, S / 8) + INTER_LAT + S / 16 / (INTER_BW / 2));
    CHECK_NEAR(predict(model, DS_COMM_ALLREDUCE, 1 << 20, 16, 2, 8, 2, NULL), want, tol);
    /* One rank per node on 16 nodes over 2 leaves, 8 groups (every device):
     * the distance-8 step crosses the spine at half the bandwidth. */
    double inside = 2 * (p2p(1, S / 2) + p2p(1, S / 4) + p2p(1, S / 8));
    double across = INTER_LAT + S / 16 / (INTER_BW / 2); /* latency scaled as the cluster's: 1x */
    double t16 = predict(model, DS_COMM_ALLREDUCE, 1 << 20, 16, 16, 1, 8, NULL);
    CHECK_NEAR(t16, inside + 2 * across, tol);
    /* Two members 16 nodes apart (the first and last stage), 8 groups per
     * node: their flows cross the spine, at half the bandwidth when every
     * node of the leaf sends alongside, at full when half of them do. */
    {
        double big = 1 << 26;
        ds_event_key_t spread;
        CHECK_OK(ds_comm_key_init(&spread, DS_COMM_ALLREDUCE, (int64_t)big, 2, 1));
        spread.nodes = 2;
        spread.concurrency = 8;
        ds_comm_prediction_t near, full, half;
        CHECK_OK(ds_comm_model_predict(model, &spread, &near));
        spread.node_stride = 16;
        spread.dims[2] = 8;
        CHECK_OK(ds_comm_model_predict(model, &spread, &full));
        spread.dims[2] = 4;
        CHECK_OK(ds_comm_model_predict(model, &spread, &half));
        CHECK_INT(near.level, 1);
        CHECK_INT(full.level, 2);
        CHECK_NEAR(full.cost.mean_s / near.cost.mean_s, 2.0, 0.02);
        CHECK_NEAR(half.cost.mean_s / near.cost.mean_s, 1.0, 0.02);
    }
    /* Small: recursive doubling, whole vector each step. */
    CHECK_NEAR(predict(model, DS_COMM_ALLREDUCE, 4096, 8, 1, 8, 1, &algo), 3 * p2p(0, 4096), tol);
    CHECK_INT(algo, DS_COMM_ALGO_RECURSIVE_DOUBLING);
    /* Not a power of two: a first and a last transfer of the whole vector. */
    CHECK_NEAR(predict(model, DS_COMM_ALLREDUCE, 4096, 6, 1, 6, 1, NULL),
               2 * p2p(0, 4096) + 2 * p2p(0, 4096), tol);
    /* All-gather of 8 blocks of 64 KiB in a node: doubling blocks. */
    double B = 65536;
    CHECK_NEAR(predict(model, DS_COMM_ALLGATHER, 8 * 65536, 8, 1, 8, 1, &algo),
               p2p(0, B) + p2p(0, 2 * B) + p2p(0, 4 * B), tol);
    CHECK_INT(algo, DS_COMM_ALGO_RECURSIVE_DOUBLING);
    /* Reduce-scatter of 128 KiB on 8: halving from the largest distance. */
    double R = 131072;
    CHECK_NEAR(predict(model, DS_COMM_REDUCE_SCATTER, 131072, 8, 1, 8, 1, &algo),
               p2p(0, R / 2) + p2p(0, R / 4) + p2p(0, R / 8), tol);
    CHECK_INT(algo, DS_COMM_ALGO_RECURSIVE_HALVING);
    /* Forcing the ring: 2(n-1) steps of S/n, one inter-node flow per boundary. */
    ds_event_key_t key;
    CHECK_OK(ds_comm_key_init(&key, DS_COMM_ALLREDUCE, 1 << 20, 16, 8));
    key.variant = DS_COMM_ALGO_RING;
    ds_comm_prediction_t p;
    CHECK_OK(ds_comm_model_predict(model, &key, &p));
    CHECK_INT(p.algo, DS_COMM_ALGO_RING);
    CHECK_NEAR(p.cost.mean_s, 30 * p2p(1, S / 16), tol);
    /* All-to-all of 8 MiB on 16 ranks, 2 nodes of 8: the linear algorithm,
     * every block posted at once.  Each rank streams its 7 blocks to its
     * node through NVLink and its 8 to the other node through its own NIC,
     * the first block at a message's whole cost, the others at bandwidth. */
    double A = (double)(8 << 20), b = A / 16;
    want = fmax(p2p(0, b) + 6 * b / INTRA_BW, p2p(1, b) + 7 * b / INTER_BW);
    CHECK_NEAR(predict(model, DS_COMM_ALLTOALL, 8 << 20, 16, 2, 8, 1, &algo), want, tol);
    CHECK_INT(algo, DS_COMM_ALGO_DIRECT);
    /* 4 nodes of 4, four such groups at once: 16 flows share each node's 8
     * NICs, the 12 blocks to other nodes at half the bandwidth. */
    want = p2p(1, b) + b / INTER_BW + 11 * b / (INTER_BW / 2);
    CHECK_NEAR(predict(model, DS_COMM_ALLTOALL, 8 << 20, 16, 4, 4, 4, NULL), want, tol);
    /* Larger groups never get faster. */
    double previous = 0.0;
    for (int n = 2; n <= 512; n *= 2) {
        double t = predict(model, DS_COMM_ALLREDUCE, 1 << 24, n, n / 8 > 0 ? n / 8 : 1,
                           n < 8 ? n : 8, 1, NULL);
        CHECK_MSG(t >= previous * 0.999, "allreduce on %d ranks %.6g s < %.6g s on fewer", n, t,
                  previous);
        previous = t;
    }
    ds_comm_model_destroy(model);
}

/* All-to-all samples measured under another algorithm (3x slower than the
 * linear one, as the rules' pairwise exchange on a few ranks can be) do not
 * move the linear algorithm's time: it is composed from send/recv. */
static void test_alltoall_from_sendrecv(void)
{
    ds_comm_sample_t samples[300];
    size_t count = make_samples(samples, 200);
    size_t base = count;
    for (int64_t bytes = 1 << 16; bytes <= (1 << 26); bytes *= 2)
        fill_comm_sample(&samples[count++], DS_COMM_ALLTOALL, bytes, 4, 2, 2,
                         3 * p2p(1, (double)bytes / 2), DS_PROV_MEASURED, 5, "replay:test");
    ds_cluster_t cluster;
    CHECK_OK(ds_cluster_init(&cluster, 4, 8, "a100-80g"));
    cluster.levels[1].nics_per_node = 8;
    ds_comm_model_options_t options;
    ds_comm_model_options_init(&options);
    options.library = DS_COMM_LIBRARY_OMPI;
    options.use_measurements = 0;
    ds_comm_model_t *with = NULL, *without = NULL;
    CHECK_OK(ds_comm_model_create(&cluster, samples, count, &options, &with));
    CHECK_OK(ds_comm_model_create(&cluster, samples, base, &options, &without));
    if (with != NULL && without != NULL) {
        double a = predict(with, DS_COMM_ALLTOALL, 4 << 20, 8, 2, 4, 2, NULL);
        double b = predict(without, DS_COMM_ALLTOALL, 4 << 20, 8, 2, 4, 2, NULL);
        double block = (double)(4 << 20) / 8;
        CHECK_NEAR(a, b, 1e-9);
        CHECK_NEAR(a, p2p(1, block) + 3 * block / INTER_BW, 0.03);
    }
    ds_comm_model_destroy(with);
    ds_comm_model_destroy(without);
}

static void test_text(void)
{
    ds_comm_sample_t in[3];
    memset(in, 0, sizeof(in));
    in[0].op = DS_COMM_ALLREDUCE;
    in[0].dtype = DS_DTYPE_BF16;
    in[0].bytes = 1048576;
    in[0].group_size = 4;
    in[0].nodes = 2;
    in[0].ranks_per_node = 2;
    in[0].concurrency = 1;
    in[0].mean_s = 1.25e-4;
    in[0].median_s = 1.2e-4;
    in[0].p10_s = 1.1e-4;
    in[0].p90_s = 1.4e-4;
    in[0].repetitions = 17;
    in[0].provenance = DS_PROV_MEASURED;
    snprintf(in[0].source, sizeof(in[0].source), "cpu:AMD EPYC 7B13 64-Core#00ab");
    in[1] = in[0];
    in[1].op = DS_COMM_SENDRECV;
    in[1].group_size = 2;
    in[1].ranks_per_node = 1;
    in[1].concurrency = 2;
    in[1].batched = 1;
    in[1].in_place = 1;
    in[1].provenance = DS_PROV_IMPORTED;
    in[1].source[0] = '\0';
    in[2] = in[0];
    in[2].bytes = 3;

    char *text = NULL;
    size_t size = 0;
    FILE *out = open_memstream(&text, &size);
    CHECK_OK(ds_comm_samples_write_text(in, 3, out));
    fclose(out);
    ds_comm_samples_t *samples = NULL;
    CHECK_OK(ds_comm_samples_create(&samples));
    CHECK_OK(ds_comm_samples_parse_text(samples, text, "memory"));
    CHECK_INT(ds_comm_samples_size(samples), 3);
    const ds_comm_sample_t *got = ds_comm_samples_data(samples);
    for (int i = 0; i < 3 && ds_comm_samples_size(samples) == 3; i++) {
        CHECK_INT(got[i].op, in[i].op);
        CHECK_INT(got[i].dtype, in[i].dtype);
        CHECK_INT(got[i].bytes, in[i].bytes);
        CHECK_INT(got[i].group_size, in[i].group_size);
        CHECK_INT(got[i].nodes, in[i].nodes);
        CHECK_INT(got[i].ranks_per_node, in[i].ranks_per_node);
        CHECK_INT(got[i].concurrency, in[i].concurrency);
        CHECK_INT(got[i].batched, in[i].batched);
        CHECK_INT(got[i].in_place, in[i].in_place);
        CHECK_INT(got[i].repetitions, in[i].repetitions);
        CHECK_INT(got[i].provenance, in[i].provenance);
        CHECK_NEAR(got[i].mean_s, in[i].mean_s, 1e-9);
        CHECK_NEAR(got[i].p90_s, in[i].p90_s, 1e-9);
        CHECK_MSG(strcmp(got[i].source, in[i].source) == 0, "source '%s' != '%s'", got[i].source,
                  in[i].source);
    }
    free(text);

    /* Comments, blank lines, the minimal form; a bad line appends nothing. */
    CHECK_OK(ds_comm_samples_parse_text(samples,
                                        "# comment\n\n  allgather fp32 bytes=4096 group=2 nodes=1 "
                                        "per-node=2 = 5e-6\n",
                                        "memory"));
    CHECK_INT(ds_comm_samples_size(samples), 4);
    CHECK_FAILS(
        ds_comm_samples_parse_text(samples,
                                   "sendrecv fp32 bytes=8 group=2 nodes=1 per-node=2 = 1e-6\n"
                                   "sendrecv fp32 bytes=8 group=2 nodes=1 per-node=2 = -1\n",
                                   "bad.txt"),
        DS_ERR_BAD_FILE, "bad.txt:2:");
    CHECK_FAILS(ds_comm_samples_parse_text(
                    samples, "allsum fp32 bytes=8 group=2 nodes=1 per-node=2 = 1\n", "bad.txt"),
                DS_ERR_INVALID_ARG, "bad.txt:1: primitive 'allsum'");
    CHECK_FAILS(
        ds_comm_samples_parse_text(samples, "allreduce fp32 bytes=8 ranks=2 = 1\n", "bad.txt"),
        DS_ERR_BAD_FILE, "'ranks=2'");
    CHECK_FAILS(ds_comm_samples_parse_text(
                    samples, "allreduce fp32 bytes=8 group=2 nodes=1 per-node=2\n", "bad.txt"),
                DS_ERR_BAD_FILE, "bad.txt:1: expected");
    CHECK_INT(ds_comm_samples_size(samples), 4);
    CHECK_FAILS(ds_comm_samples_load_text(samples, "/nonexistent/samples.txt"), DS_ERR_NOT_FOUND,
                "samples.txt");
    ds_comm_samples_destroy(samples);
}

int main(void)
{
    test_rules();
    test_composition();
    test_alltoall_from_sendrecv();
    test_text();
    return check_summary("test_comm_ompi");
}
