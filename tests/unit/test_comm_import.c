/* nccl-tests import: the real A100 logs in both dialects reproduce their
 * numbers, other layouts and primitives are read from their headers, and
 * malformed input fails with FILE:LINE and imports nothing. */
#include "check.h"

#include <stdlib.h>

static const char *data_dir = "tests/data";

static const ds_comm_sample_t *find(const ds_comm_samples_t *list, size_t first, int64_t bytes,
                                    int in_place)
{
    const ds_comm_sample_t *s = ds_comm_samples_data(list);
    for (size_t i = first; i < ds_comm_samples_size(list); i++)
        if (s[i].bytes == bytes && s[i].in_place == in_place)
            return &s[i];
    return NULL;
}

/* The time of one row, out-of-place or in-place, in microseconds (-1 when absent). */
static double row_us(const ds_comm_samples_t *list, size_t first, int64_t bytes, int in_place)
{
    const ds_comm_sample_t *s = find(list, first, bytes, in_place);
    return s ? s->mean_s * 1e6 : -1.0;
}

static void import(const char *name, const ds_comm_import_options_t *options,
                   ds_comm_samples_t *list, ds_comm_import_info_t *info)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s/nccl-tests/a100-azure-ndv4/%s", data_dir, name);
    CHECK_OK(ds_comm_import_nccl_tests(path, options, list, info));
}

static void test_real_logs(void)
{
    ds_comm_samples_t *list;
    CHECK_OK(ds_comm_samples_create(&list));
    ds_comm_import_options_t options;
    ds_comm_import_options_init(&options);
    options.source = "azure-ndv4";
    ds_comm_import_info_t info;

    /* 8 GPUs, one process (plain lines). */
    import("all_reduce_8.log", &options, list, &info);
    CHECK_INT(info.op, DS_COMM_ALLREDUCE);
    CHECK_INT(info.group_size, 8);
    CHECK_INT(info.nodes, 1);
    CHECK_INT(info.ranks_per_node, 8);
    CHECK_INT(info.prefixed, 0);
    CHECK_INT(info.rows, 28);
    CHECK_INT(info.samples, 56);
    CHECK_INT(info.min_bytes, 8);
    CHECK_INT(info.max_bytes, 1073741824);
    CHECK(strcmp(info.device, "A100-SXM4-40GB") == 0);
    CHECK(strcmp(info.device_spec, "a100-40g") == 0);
    CHECK_INT(ds_comm_samples_size(list), 56);
    CHECK_NEAR(row_us(list, 0, 8, 0), 31.44, 1e-9);
    CHECK_NEAR(row_us(list, 0, 8, 1), 32.30, 1e-9);
    CHECK_NEAR(row_us(list, 0, 1048576, 0), 72.53, 1e-9);
    CHECK_NEAR(row_us(list, 0, 1048576, 1), 70.07, 1e-9);
    CHECK_NEAR(row_us(list, 0, 67108864, 0), 566.1, 1e-9);
    CHECK_NEAR(row_us(list, 0, 1073741824, 1), 8139.6, 1e-9);
    const ds_comm_sample_t *s = find(list, 0, 4194304, 1);
    CHECK(s != NULL);
    if (s != NULL) {
        CHECK_INT(s->group_size, 8);
        CHECK_INT(s->nodes, 1);
        CHECK_INT(s->ranks_per_node, 8);
        CHECK_INT(s->concurrency, 1);
        CHECK_INT(s->dtype, DS_DTYPE_FP32);
        CHECK_INT(s->repetitions, 20);
        CHECK_INT(s->provenance, DS_PROV_IMPORTED);
        CHECK(strcmp(s->source, "azure-ndv4") == 0);
        CHECK_NEAR(s->median_s, 108.4e-6, 1e-9);
        CHECK_NEAR(s->p10_s, 108.4e-6, 1e-9);
    }

    /* 16 GPUs on two nodes, mpirun dialect ("[1,0]<stdout>:"). */
    size_t first = ds_comm_samples_size(list);
    import("all_reduce_16.log", &options, list, &info);
    CHECK_INT(info.prefixed, 1);
    CHECK_INT(info.group_size, 16);
    CHECK_INT(info.nodes, 2);
    CHECK_INT(info.ranks_per_node, 8);
    CHECK_INT(info.rows, 25);
    CHECK_INT(ds_comm_samples_size(list) - first, 50);
    CHECK_NEAR(row_us(list, first, 1024, 0), 34.66, 1e-9);
    CHECK_NEAR(row_us(list, first, 1024, 1), 34.47, 1e-9);
    CHECK_NEAR(row_us(list, first, 16777216, 0), 367.2, 1e-9);
    CHECK_NEAR(row_us(list, first, 16777216, 1), 382.6, 1e-9);
    CHECK_NEAR(row_us(list, first, 17179869184LL, 0), 251757.0, 1e-9);
    CHECK_NEAR(row_us(list, first, 17179869184LL, 1), 250681.0, 1e-9);
    s = find(list, first, 2097152, 0);
    CHECK(s != NULL && s->nodes == 2 && s->ranks_per_node == 8 && s->repetitions == 50);

    /* 1, 2 and 4 GPUs. */
    first = ds_comm_samples_size(list);
    import("all_reduce_2.log", &options, list, &info);
    CHECK_INT(info.group_size, 2);
    CHECK_NEAR(row_us(list, first, 2097152, 0), 68.69, 1e-9);
    CHECK_NEAR(row_us(list, first, 2097152, 1), 66.15, 1e-9);
    first = ds_comm_samples_size(list);
    import("all_reduce_4.log", &options, list, &info);
    CHECK_INT(info.group_size, 4);
    CHECK_NEAR(row_us(list, first, 33554432, 0), 279.2, 1e-9);
    CHECK_NEAR(row_us(list, first, 33554432, 1), 278.3, 1e-9);
    first = ds_comm_samples_size(list);
    import("all_reduce_1.log", &options, list, &info);
    CHECK_INT(info.group_size, 1);
    CHECK_NEAR(row_us(list, first, 8, 0), 4.47, 1e-9);
    CHECK_NEAR(row_us(list, first, 8, 1), 0.47, 1e-9);

    /* --gpus-per-node overrides the host names; an explicit primitive the file name. */
    ds_comm_samples_t *other;
    CHECK_OK(ds_comm_samples_create(&other));
    options.gpus_per_node = 4;
    options.op = DS_COMM_ALLGATHER;
    import("all_reduce_16.log", &options, other, &info);
    CHECK_INT(info.nodes, 4);
    CHECK_INT(info.ranks_per_node, 4);
    CHECK_INT(info.tests[0].hosts_known, 0); /* the option's layout, not the hosts' */
    CHECK_INT(info.op, DS_COMM_ALLGATHER);
    CHECK_INT(ds_comm_samples_data(other)[0].op, DS_COMM_ALLGATHER);
    CHECK_INT(ds_comm_samples_data(other)[0].nodes, 4);
    ds_comm_samples_destroy(other);
    ds_comm_samples_destroy(list);
}

/* A newer layout (redop, root and #wrong columns), srun --label prefixes, the
 * primitive from the "Collective test starting" line, noise to ignore. */
static const char all_gather_text[] =
    "0: # Collective test starting: all_gather_perf\n"
    "0: # nThread 1 nGpus 1 minBytes 1024 maxBytes 4096 step: 2(factor) warmup iters: 5 "
    "iters: 40 agg iters: 1 validation: 1 graph: 0\n"
    "0: #\n"
    "0: # Using devices\n"
    "0: #  Rank  0 Group  0 Pid  101 on     hostA device  0 [0000:07:00] NVIDIA H100 80GB HBM3\n"
    "0: #  Rank  1 Group  0 Pid  102 on     hostA device  1 [0000:0b:00] NVIDIA H100 80GB HBM3\n"
    "0: #  Rank  2 Group  0 Pid  201 on     hostB device  0 [0000:07:00] NVIDIA H100 80GB HBM3\n"
    "0: #  Rank  3 Group  0 Pid  202 on     hostB device  1 [0000:0b:00] NVIDIA H100 80GB HBM3\n"
    "hostA:101:101 [0] NCCL INFO Bootstrap : Using eth0\n"
    "Warning: some launcher message outside the table\n"
    "0: #\n"
    "0: #                                                              out-of-place         "
    "              in-place          \n"
    "0: #       size         count      type   redop    root     time   algbw   busbw #wrong "
    "    time   algbw   busbw #wrong\n"
    "0: #        (B)    (elements)                               (us)  (GB/s)  (GB/s)       "
    "     (us)  (GB/s)  (GB/s)       \n"
    "0:         1024            64  bfloat16    none      -1    20.50    0.05    0.04      0 "
    "   19.90    0.05    0.04      0\n"
    "hostA:101:150 [0] NCCL INFO comm 0x55 rank 0 nranks 4 - Init COMPLETE\n"
    "0:         2048           128  bfloat16    none      -1    21.00    0.10    0.07      0 "
    "   20.10    0.10    0.08      0\n"
    "0:         4096           256  bfloat16    none      -1    22.25    0.18    0.14      0 "
    "   21.75    0.19    0.14      0\n"
    "0: # Out of bounds values : 0 OK\n"
    "0: # Avg bus bandwidth    : 0.08\n"
    "trailing launcher line\n";

static void test_other_layouts(void)
{
    ds_comm_samples_t *list;
    CHECK_OK(ds_comm_samples_create(&list));
    ds_comm_import_info_t info;
    CHECK_OK(ds_comm_parse_nccl_tests(all_gather_text, "job-1234.out", NULL, list, &info));
    CHECK_INT(info.op, DS_COMM_ALLGATHER);
    CHECK_INT(info.group_size, 4);
    CHECK_INT(info.nodes, 2);
    CHECK_INT(info.ranks_per_node, 2);
    CHECK_INT(info.prefixed, 1);
    CHECK_INT(info.rows, 3);
    CHECK(strcmp(info.device_spec, "h100-sxm") == 0);
    CHECK_INT(ds_comm_samples_size(list), 6);
    CHECK_NEAR(row_us(list, 0, 4096, 0), 22.25, 1e-9);
    CHECK_NEAR(row_us(list, 0, 2048, 1), 20.10, 1e-9);
    const ds_comm_sample_t *s = find(list, 0, 1024, 0);
    CHECK(s != NULL && s->dtype == DS_DTYPE_BF16 && s->repetitions == 40 &&
          strcmp(s->source, "nccl-tests") == 0);

    /* send/recv on 8 GPUs of one node: pairs, batched, 8 at once. */
    char text[4096];
    int used = snprintf(text, sizeof(text),
                        "# nThread 1 nGpus 8 minBytes 8 maxBytes 16 step: 2(factor) warmup "
                        "iters: 5 iters: 20 validation: 1\n# Using devices\n");
    for (int r = 0; r < 8; r++)
        used += snprintf(text + used, sizeof(text) - (size_t)used,
                         "#  Rank %2d Pid 1 on node-1 device %d [0x00] A100-SXM4-80GB\n", r, r);
    snprintf(text + used, sizeof(text) - (size_t)used,
             "#       size         count      type   redop     time   algbw   busbw  error     "
             "time   algbw   busbw  error\n"
             "          64            16     float     sum    10.00    0.01    0.01  0e+00    "
             "10.50    0.01    0.01  0e+00\n");
    size_t before = ds_comm_samples_size(list);
    CHECK_OK(ds_comm_parse_nccl_tests(text, "logs/sendrecv_8.log", NULL, list, &info));
    CHECK_INT(info.op, DS_COMM_SENDRECV);
    CHECK(strcmp(info.device_spec, "a100-80g") == 0);
    s = find(list, before, 64, 1);
    CHECK(s != NULL && s->op == DS_COMM_SENDRECV && s->group_size == 2 && s->batched == 1 &&
          s->nodes == 1 && s->ranks_per_node == 2 && s->concurrency == 8 && s->span_nodes == 0);
    /* Across 2 and 4 nodes: one pair per node leaves it, the same pair,
     * while all the job's nodes' pairs cross the network. */
    ds_comm_import_options_t options;
    ds_comm_import_options_init(&options);
    for (int per_node = 4; per_node >= 2; per_node /= 2) {
        options.gpus_per_node = per_node;
        before = ds_comm_samples_size(list);
        CHECK_OK(ds_comm_parse_nccl_tests(text, "logs/sendrecv_8.log", &options, list, &info));
        s = find(list, before, 64, 0);
        CHECK(s != NULL && s->nodes == 2 && s->ranks_per_node == 1 && s->concurrency == 1 &&
              s->span_nodes == 8 / per_node);
    }
    ds_comm_samples_destroy(list);
}

static const char header[] =
    "# nThread 1 nGpus 2 minBytes 8 maxBytes 16 step: 2(factor) warmup iters: 5 iters: 20\n"
    "#\n"
    "# Using devices\n"
    "#   Rank  0 Pid  1 on node-0 device  0 [0x00] A100-SXM4-40GB\n"
    "#   Rank  1 Pid  1 on node-0 device  1 [0x00] A100-SXM4-40GB\n"
    "#\n"
    "#       size         count      type   redop     time   algbw   busbw  error     time   "
    "algbw   busbw  error\n"
    "#        (B)    (elements)                       (us)  (GB/s)  (GB/s)            (us)  "
    "(GB/s)  (GB/s)       \n"
    "           8             2     float     sum     8.65    0.00    0.00  0e+00     8.51    "
    "0.00    0.00  0e+00\n";

/* `header` (9 lines) followed by `tail`, parsed as `name`. */
static ds_status_t parse_with(const char *tail, const char *name, ds_comm_samples_t *list)
{
    char text[4096];
    snprintf(text, sizeof(text), "%s%s", header, tail);
    return ds_comm_parse_nccl_tests(text, name, NULL, list, NULL);
}

static void test_malformed(void)
{
    ds_comm_samples_t *list;
    CHECK_OK(ds_comm_samples_create(&list));
    CHECK_OK(parse_with("", "all_reduce_2.log", list));
    CHECK_INT(ds_comm_samples_size(list), 2);

    CHECK_FAILS(parse_with("          16             4     float     sum     abc    0.00    0.00"
                           "  0e+00     8.49    0.00    0.00  0e+00\n",
                           "all_reduce_2.log", list),
                DS_ERR_BAD_FILE, "all_reduce_2.log:10: time 'abc'");
    CHECK_FAILS(parse_with("          16             4     float     sum     8.68    0.00\n",
                           "all_reduce_2.log", list),
                DS_ERR_BAD_FILE, "all_reduce_2.log:10: 6 values where the header names 12");
    CHECK_FAILS(parse_with("          16             4     float     sum     8.68    0.00    0.00"
                           "  0e+00     8.49    x.00    0.00  0e+00\n",
                           "all_reduce_2.log", list),
                DS_ERR_BAD_FILE, "all_reduce_2.log:10: algbw 'x.00'");
    CHECK_FAILS(parse_with("        16.5             4     float     sum     8.68    0.00    0.00"
                           "  0e+00     8.49    0.00    0.00  0e+00\n",
                           "all_reduce_2.log", list),
                DS_ERR_BAD_FILE, "all_reduce_2.log:10: size '16.5'");
    CHECK_FAILS(parse_with("          16             4  float128     sum     8.68    0.00    0.00"
                           "  0e+00     8.49    0.00    0.00  0e+00\n",
                           "all_reduce_2.log", list),
                DS_ERR_BAD_FILE, "type 'float128'");
    CHECK_FAILS(parse_with("#       size         count      type   redop     time   algbw   busbw"
                           "  error     time   algbw   busbw  error\n",
                           "all_reduce_2.log", list),
                DS_ERR_BAD_FILE, "all_reduce_2.log:10: a second results table");
    CHECK_FAILS(parse_with("", "mystery.log", list), DS_ERR_BAD_FILE, "cannot tell the primitive");
    /* A line nccl-tests never prints, inside the table. */
    CHECK_FAILS(parse_with("\nsegmentation fault in rank 3\n", "all_reduce_2.log", list),
                DS_ERR_BAD_FILE, "all_reduce_2.log:11:");
    CHECK_FAILS(
        ds_comm_parse_nccl_tests("# nThread 1\n           8   2  float  sum  8.65  0.00  0.00"
                                 "  0e+00  8.51  0.00  0.00  0e+00\n",
                                 "all_reduce_x.log", NULL, list, NULL),
        DS_ERR_BAD_FILE, "all_reduce_x.log:2: a result row before the nccl-tests column");
    CHECK_FAILS(ds_comm_parse_nccl_tests("# nThread 1\n# just comments\n", "all_reduce_x.log", NULL,
                                         list, NULL),
                DS_ERR_BAD_FILE, "no nccl-tests results table");
    /* No rank lines: the group size is unknown unless given. */
    const char *no_ranks = strstr(header, "#\n#       size");
    CHECK_FAILS(ds_comm_parse_nccl_tests(no_ranks, "all_reduce_x.log", NULL, list, NULL),
                DS_ERR_BAD_FILE, "group size is unknown");
    ds_comm_import_options_t options;
    ds_comm_import_options_init(&options);
    options.group_size = 4;
    CHECK_OK(ds_comm_parse_nccl_tests(no_ranks, "all_reduce_x.log", &options, list, NULL));
    CHECK_INT(ds_comm_samples_size(list), 4);
    CHECK_INT(ds_comm_samples_data(list)[3].group_size, 4);
    /* Nothing of a failing file was appended. */
    CHECK_INT(ds_comm_samples_size(list), 4);
    CHECK(ds_comm_import_nccl_tests("/nonexistent/all_reduce_2.log", NULL, list, NULL) != DS_OK);
    CHECK_INT(ds_comm_samples_size(list), 4);
    ds_comm_samples_destroy(list);
    ds_comm_samples_destroy(NULL);
}

static void test_names_and_factors(void)
{
    ds_comm_op_t op;
    CHECK_OK(ds_comm_op_parse("all_reduce_perf", &op));
    CHECK_INT(op, DS_COMM_ALLREDUCE);
    CHECK_OK(ds_comm_op_parse("reduce_scatter", &op));
    CHECK_INT(op, DS_COMM_REDUCE_SCATTER);
    CHECK_OK(ds_comm_op_parse("alltoall", &op));
    CHECK_INT(op, DS_COMM_ALLTOALL);
    CHECK_FAILS(ds_comm_op_parse("allsum", &op), DS_ERR_INVALID_ARG, "'allsum' is not known");
    CHECK(strcmp(ds_comm_op_name(DS_COMM_PS_PULL), "ps_pull") == 0);
    CHECK_NEAR(ds_comm_busbw_factor(DS_COMM_ALLREDUCE, 16), 1.875, 1e-12);
    CHECK_NEAR(ds_comm_busbw_factor(DS_COMM_ALLGATHER, 8), 0.875, 1e-12);
    CHECK_NEAR(ds_comm_busbw_factor(DS_COMM_REDUCE_SCATTER, 4), 0.75, 1e-12);
    CHECK_NEAR(ds_comm_busbw_factor(DS_COMM_ALLTOALL, 2), 0.5, 1e-12);
    CHECK_NEAR(ds_comm_busbw_factor(DS_COMM_SENDRECV, 2), 1.0, 1e-12);
    CHECK_NEAR(ds_comm_busbw_factor(DS_COMM_BROADCAST, 64), 1.0, 1e-12);
    CHECK_NEAR(ds_comm_busbw_factor(DS_COMM_ALLREDUCE, 1), 0.0, 1e-12);
    int64_t bytes = 0;
    CHECK_OK(ds_comm_parse_size("64MiB", "size", &bytes));
    CHECK_INT(bytes, 64LL << 20);
    CHECK_FAILS(ds_comm_parse_size("12parsecs", "max-bytes", &bytes), DS_ERR_INVALID_ARG,
                "max-bytes");

    ds_event_key_t key;
    CHECK_OK(ds_comm_key_init(&key, DS_COMM_ALLREDUCE, 1 << 20, 1024, 8));
    CHECK_INT(key.kind, DS_EVENT_COMM);
    CHECK_INT(key.nodes, 128);
    CHECK_INT(key.ranks_per_node, 8);
    CHECK_INT(key.concurrency, 1);
    CHECK_INT(key.dims[0], 1 << 20);
    CHECK_OK(ds_comm_key_init(&key, DS_COMM_ALLREDUCE, 1 << 20, 4, 8));
    CHECK_INT(key.nodes, 1);
    CHECK_INT(key.ranks_per_node, 4);
    CHECK_OK(ds_comm_key_init(&key, DS_COMM_ALLREDUCE, 1 << 20, 12, 8));
    CHECK_INT(key.nodes, 2);
    CHECK_INT(key.ranks_per_node, 8);
    CHECK_FAILS(ds_comm_key_init(&key, DS_COMM_ALLREDUCE, -1, 4, 8), DS_ERR_INVALID_ARG,
                "-1 bytes");
}

int main(int argc, char **argv)
{
    if (argc > 1)
        data_dir = argv[1];
    test_real_logs();
    test_other_layouts();
    test_malformed();
    test_names_and_factors();
    return check_summary("test_comm_import");
}
