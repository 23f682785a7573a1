/* nccl-tests logs as jobs print them: several collectives one after another
 * (split by each test's banner), srun --label, mpirun --tag-output and
 * MPICH -prepend-rank prefixes, the noise lines of NCCL, UCX and the
 * launchers inside and outside the tables, and the refusal of a test whose
 * collective cannot be told.
 *
 *   test_comm_dialects              the inline logs below
 *   test_comm_dialects SHARED_DATA  the public logs under ../shared/data
 *                                   (exit 77, skipped, where they are absent)
 */
#include "check.h"

#include <stdarg.h>
#include <stdlib.h>
#include <sys/stat.h>

/* ---- building logs ---------------------------------------------------------- */

typedef struct text {
    char data[1 << 17];
    size_t used;
} text_t;

static void add(text_t *t, const char *prefix, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* One line, after `prefix` (the launcher's tag). */
static void add(text_t *t, const char *prefix, const char *fmt, ...)
{
    t->used += (size_t)snprintf(t->data + t->used, sizeof(t->data) - t->used, "%s", prefix);
    va_list ap;
    va_start(ap, fmt);
    t->used += (size_t)vsnprintf(t->data + t->used, sizeof(t->data) - t->used, fmt, ap);
    va_end(ap);
    t->used += (size_t)snprintf(t->data + t->used, sizeof(t->data) - t->used, "\n");
}

/* Where noise goes inside a table (after its first row). */
typedef void (*noise_fn)(text_t *t, const char *prefix);

typedef struct test_shape {
    const char *collective; /* "all_gather_perf"; NULL: no version and banner lines */
    int ranks, per_node;
    int rows;
    double first_us; /* row i: out-of-place first_us * (i + 1), in-place + 0.5 */
} test_shape_t;

/* One test as nccl-tests 2.17 prints it: version, banner, parameters, rank
 * lines, the table with redop, root and #wrong columns, its end lines.
 * Sizes 1024 B, doubling. */
static int add_test(text_t *t, const char *prefix, const test_shape_t *shape, noise_fn noise)
{
    int first_line = 1;
    for (size_t i = 0; i < t->used; i++)
        first_line += t->data[i] == '\n';
    if (shape->collective != NULL) {
        add(t, prefix, "# nccl-tests version 2.17.8 nccl-headers=22902 nccl-library=22902");
        add(t, prefix, "# Collective test starting: %s", shape->collective);
    }
    add(t, prefix,
        "# nThread 1 nGpus 1 minBytes 1024 maxBytes 1048576 step: 2(factor) warmup iters: 5 "
        "iters: 20 agg iters: 1 validation: 1 graph: 0");
    add(t, prefix, "#");
    add(t, prefix, "# Using devices");
    for (int r = 0; r < shape->ranks; r++)
        add(t, prefix,
            "#  Rank %2d Group  0 Pid %6d on   node-%03d device  %d [0000:1b:00] NVIDIA H100 80GB "
            "HBM3",
            r, 1000 + r, r / shape->per_node, r % shape->per_node);
    add(t, prefix, "#");
    add(t, prefix,
        "#                                                              out-of-place          "
        "             in-place          ");
    add(t, prefix,
        "#       size         count      type   redop    root     time   algbw   busbw  #wrong "
        "    time   algbw   busbw  #wrong ");
    add(t, prefix,
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)         "
        "    (us)  (GB/s)  (GB/s)         ");
    for (int i = 0; i < shape->rows; i++) {
        long long bytes = 1024LL << i;
        add(t, prefix,
            "%12lld  %12lld     float     sum      -1  %7.2f    0.10    0.10       0  "
            "%7.2f    0.10    0.10     N/A",
            bytes, bytes / 4, shape->first_us * (i + 1), shape->first_us * (i + 1) + 0.5);
        if (i == 0 && noise != NULL)
            noise(t, prefix);
    }
    add(t, prefix, "# Out of bounds values : 0 OK");
    add(t, prefix, "# Avg bus bandwidth    : 0.1 ");
    add(t, prefix, "#");
    if (shape->collective != NULL) {
        add(t, prefix, "# Collective test concluded: %s", shape->collective);
        add(t, prefix, "#");
    }
    add(t, "", "%s", "");
    return first_line;
}

/* What real jobs print between the rows: NCCL's debug lines, UCX's warnings,
 * Slurm's and Open MPI's messages, tagged by the launcher or not. */
static void job_noise(text_t *t, const char *prefix)
{
    add(t, prefix, "node-000:1000:1042 [0] NCCL INFO comm 0x55d0 rank 0 nranks 16 - Init COMPLETE");
    add(t, "", "node-001:1009:1050 [1] NCCL WARN NET/IB : Got async event : port error");
    add(t, prefix,
        "[1622510437.752046] [node-000:1000:0]    ucp_context.c:1437 UCX  WARN  UCP version is "
        "incompatible, required: 1.8, actual: 1.7");
    add(t, "",
        "[1622510437.948284] [node-001:1009:0]     ib_iface.c:746  UCX  ERROR ibv_create_cq() "
        "failed: Cannot allocate memory");
    add(t, "", "srun: Job step 1234.0 aborted before step completely launched.");
    add(t, "", "slurmstepd: error: *** STEP 1234.0 ON node-000 CANCELLED AT 2024-01-01 ***");
    add(t, "", "[node-001:01009] 7 more processes have sent help message help-mpi-btl-openib.txt");
    add(t, "", "--------------------------------------------------------------------------");
    add(t, "", "WARNING: There was an error initializing an OpenFabrics device.");
    add(t, "", "Warning: Permanently added 'node-001' (ED25519) to the list of known hosts.");
    add(t, "[1,3]<stderr>:", "a message rank 3 wrote on its stderr");
}

static const ds_comm_sample_t *find(const ds_comm_samples_t *list, size_t first, int op,
                                    int64_t bytes, int in_place)
{
    const ds_comm_sample_t *s = ds_comm_samples_data(list);
    for (size_t i = first; i < ds_comm_samples_size(list); i++)
        if ((int)s[i].op == op && s[i].bytes == bytes && s[i].in_place == in_place)
            return &s[i];
    return NULL;
}

static double time_us(const ds_comm_samples_t *list, size_t first, int op, int64_t bytes,
                      int in_place)
{
    const ds_comm_sample_t *s = find(list, first, op, bytes, in_place);
    return s ? s->mean_s * 1e6 : -1.0;
}

/* ---- several collectives in one file ------------------------------------------------ */

static const test_shape_t job[] = {
    {"all_reduce_perf", 16, 8, 3, 20.0},
    {"all_gather_perf", 16, 8, 2, 30.0},
    {"sendrecv_perf", 16, 8, 1, 40.0},
    {"alltoall_perf", 16, 8, 4, 50.0},
};
#define JOB_TESTS ((int)(sizeof(job) / sizeof(job[0])))

static void check_job(const ds_comm_samples_t *list, size_t first,
                      const ds_comm_import_info_t *info, const int *lines, int prefixed)
{
    static const ds_comm_op_t ops[JOB_TESTS] = {DS_COMM_ALLREDUCE, DS_COMM_ALLGATHER,
                                                DS_COMM_SENDRECV, DS_COMM_ALLTOALL};
    CHECK_INT(info->num_tests, JOB_TESTS);
    CHECK_INT(info->rows, 3 + 2 + 1 + 4);
    CHECK_INT(info->samples, 2 * (3 + 2 + 1 + 4));
    CHECK_INT(ds_comm_samples_size(list) - first, 20);
    CHECK_INT(info->prefixed, prefixed);
    CHECK_INT(info->op, DS_COMM_ALLREDUCE); /* the first test's */
    CHECK_INT(info->group_size, 16);
    CHECK_INT(info->nodes, 2);
    CHECK_INT(info->min_bytes, 1024);
    CHECK_INT(info->max_bytes, 8192);
    CHECK(strcmp(info->device_spec, "h100-sxm") == 0);
    for (int i = 0; i < JOB_TESTS && i < info->num_tests; i++) {
        const ds_comm_import_test_t *t = &info->tests[i];
        CHECK_INT(t->op, ops[i]);
        CHECK_INT(t->rows, job[i].rows);
        CHECK_INT(t->samples, 2 * job[i].rows);
        CHECK_INT(t->group_size, 16);
        CHECK_INT(t->nodes, 2);
        CHECK_INT(t->ranks_per_node, 8);
        CHECK_INT(t->hosts_known, 1);
        CHECK_INT(t->line, lines[i]);
        CHECK_INT(t->min_bytes, 1024);
        CHECK_INT(t->max_bytes, 1024LL << (job[i].rows - 1));
    }
    /* Each test's rows carry its own primitive and time. */
    CHECK_NEAR(time_us(list, first, DS_COMM_ALLREDUCE, 4096, 0), 60.0, 1e-12);
    CHECK_NEAR(time_us(list, first, DS_COMM_ALLREDUCE, 4096, 1), 60.5, 1e-12);
    CHECK_NEAR(time_us(list, first, DS_COMM_ALLGATHER, 2048, 0), 60.0, 1e-12);
    CHECK_NEAR(time_us(list, first, DS_COMM_SENDRECV, 1024, 1), 40.5, 1e-12);
    CHECK_NEAR(time_us(list, first, DS_COMM_ALLTOALL, 8192, 0), 200.0, 1e-12);
    CHECK(find(list, first, DS_COMM_ALLGATHER, 4096, 0) == NULL);
    const ds_comm_sample_t *s = find(list, first, DS_COMM_SENDRECV, 1024, 0);
    CHECK(s != NULL && s->group_size == 2 && s->nodes == 2 && s->ranks_per_node == 1 &&
          s->batched == 1);
    s = find(list, first, DS_COMM_ALLTOALL, 1024, 0);
    CHECK(s != NULL && s->group_size == 16 && s->nodes == 2 && s->ranks_per_node == 8 &&
          s->repetitions == 20);
}

static void test_split(void)
{
    text_t *t = calloc(1, sizeof(*t));
    ds_comm_samples_t *list;
    CHECK_OK(ds_comm_samples_create(&list));
    int lines[JOB_TESTS];
    for (int i = 0; i < JOB_TESTS; i++)
        lines[i] = add_test(t, "", &job[i], NULL);
    CHECK_INT(lines[1], 1 + 34); /* 34 lines: a test of 16 ranks and 3 rows */
    ds_comm_import_info_t info;
    CHECK_OK(ds_comm_parse_nccl_tests(t->data, "job-1234.out", NULL, list, &info));
    check_job(list, 0, &info, lines, 0);

    /* Older nccl-tests print no version or banner lines: "# nThread" starts
     * the next test, and the file name gives the primitive. */
    t->used = 0;
    test_shape_t shape = {NULL, 8, 8, 2, 10.0};
    int first = add_test(t, "", &shape, NULL);
    shape.ranks = 16;
    shape.rows = 3;
    int second = add_test(t, "", &shape, NULL);
    size_t before = ds_comm_samples_size(list);
    CHECK_OK(ds_comm_parse_nccl_tests(t->data, "logs/all_reduce_8+16.log", NULL, list, &info));
    CHECK_INT(info.num_tests, 2);
    CHECK_INT(info.tests[0].op, DS_COMM_ALLREDUCE);
    CHECK_INT(info.tests[0].group_size, 8);
    CHECK_INT(info.tests[0].nodes, 1);
    CHECK_INT(info.tests[0].rows, 2);
    CHECK_INT(info.tests[0].line, first);
    CHECK_INT(info.tests[1].group_size, 16);
    CHECK_INT(info.tests[1].nodes, 2);
    CHECK_INT(info.tests[1].rows, 3);
    CHECK_INT(info.tests[1].line, second);
    CHECK_INT(ds_comm_samples_size(list) - before, 10);
    const ds_comm_sample_t *s = ds_comm_samples_data(list);
    CHECK_INT(s[before + 3].group_size, 8);
    CHECK_INT(s[before + 4].group_size, 16);

    /* A test cut off before its table adds nothing; the tests around it count. */
    t->used = 0;
    add_test(t, "", &job[0], NULL);
    add(t, "", "# nccl-tests version 2.17.8 nccl-headers=22902 nccl-library=22902");
    add(t, "", "# Collective test starting: all_gather_perf");
    add(t, "", "srun: error: node-001: task 9: Killed");
    add_test(t, "", &job[3], NULL);
    before = ds_comm_samples_size(list);
    CHECK_OK(ds_comm_parse_nccl_tests(t->data, "job.out", NULL, list, &info));
    CHECK_INT(info.num_tests, 2);
    CHECK_INT(info.tests[0].op, DS_COMM_ALLREDUCE);
    CHECK_INT(info.tests[1].op, DS_COMM_ALLTOALL);
    CHECK_INT(ds_comm_samples_size(list) - before, 14);

    /* An explicit primitive applies to every test. */
    ds_comm_import_options_t options;
    ds_comm_import_options_init(&options);
    options.op = DS_COMM_BROADCAST;
    CHECK_OK(ds_comm_parse_nccl_tests(t->data, "job.out", &options, list, &info));
    CHECK_INT(info.tests[0].op, DS_COMM_BROADCAST);
    CHECK_INT(info.tests[1].op, DS_COMM_BROADCAST);
    ds_comm_samples_destroy(list);
    free(t);
}

/* ---- launcher prefixes and noise ------------------------------------------------------ */

static void test_dialects(void)
{
    static const struct {
        const char *name;
        const char *prefix;
    } dialects[] = {
        {"srun --label", "0: "},
        {"srun --label, padded", " 0: "},
        {"mpirun --tag-output", "[1,0]<stdout>:"},
        {"mpirun --tag-output, Open MPI 5", "[1,0]<stdout>: "},
        {"MPICH -prepend-rank", "[0] "},
        {"plain, noise in the tables", ""},
    };
    text_t *t = calloc(1, sizeof(*t));
    for (size_t d = 0; d < sizeof(dialects) / sizeof(dialects[0]); d++) {
        t->used = 0;
        add(t, "", "srun: job 1234 queued and waiting for resources");
        add(t, "", "+ mpirun -np 16 --tag-output ./build/all_reduce_perf -b 1K -e 1M -f 2");
        int lines[JOB_TESTS];
        for (int i = 0; i < JOB_TESTS; i++)
            lines[i] = add_test(t, dialects[d].prefix, &job[i], job_noise);
        add(t, "", "srun: error: node-001: task 9: Exited with exit code 1");
        ds_comm_samples_t *list;
        CHECK_OK(ds_comm_samples_create(&list));
        ds_comm_import_info_t info;
        ds_status_t status = ds_comm_parse_nccl_tests(t->data, "job.out", NULL, list, &info);
        CHECK_MSG(status == DS_OK, "%s: %s", dialects[d].name, ds_last_error());
        /* The noise holds a line mpirun tagged: every file is "prefixed". */
        if (status == DS_OK)
            check_job(list, 0, &info, lines, 1);
        ds_comm_samples_destroy(list);
    }
    free(t);
}

/* ---- refusal ---------------------------------------------------------------------------- */

static void test_refusal(void)
{
    text_t *t = calloc(1, sizeof(*t));
    ds_comm_samples_t *list;
    CHECK_OK(ds_comm_samples_create(&list));

    /* A collective dsmpi does not model, in the second test of a file whose
     * name says all_reduce: the file is refused, nothing of it imported. */
    add_test(t, "", &job[0], NULL);
    test_shape_t other = job[1];
    other.collective = "hypercube_perf";
    int line = add_test(t, "", &other, NULL) + 1;
    char needle[256];
    snprintf(needle, sizeof(needle),
             "all_reduce_16.log:%d: collective 'hypercube_perf' is not one dsmpi models "
             "(accepted: all_reduce_perf, all_gather_perf, reduce_scatter_perf, alltoall_perf, "
             "sendrecv_perf, broadcast_perf)",
             line);
    CHECK_FAILS(ds_comm_parse_nccl_tests(t->data, "logs/all_reduce_16.log", NULL, list, NULL),
                DS_ERR_BAD_FILE, needle);
    CHECK(strchr(ds_last_error(), '\n') == NULL);
    CHECK_INT(ds_comm_samples_size(list), 0);
    /* nccl-tests' reduce_perf, gather_perf and scatter_perf are not modelled either. */
    t->used = 0;
    other.collective = "reduce_perf";
    add_test(t, "", &other, NULL);
    CHECK_FAILS(ds_comm_parse_nccl_tests(t->data, "all_reduce_8.log", NULL, list, NULL),
                DS_ERR_BAD_FILE, "all_reduce_8.log:2: collective 'reduce_perf' is not one");
    /* Unless the caller says what it is. */
    ds_comm_import_options_t options;
    ds_comm_import_options_init(&options);
    options.op = DS_COMM_ALLREDUCE;
    CHECK_OK(ds_comm_parse_nccl_tests(t->data, "all_reduce_8.log", &options, list, NULL));
    CHECK_INT(ds_comm_samples_size(list), 4);

    /* No banner and a file name that names no collective. */
    t->used = 0;
    test_shape_t bare = {NULL, 8, 8, 2, 10.0};
    add_test(t, "", &bare, NULL);
    CHECK_FAILS(ds_comm_parse_nccl_tests(t->data, "results/job-77.out", NULL, list, NULL),
                DS_ERR_BAD_FILE,
                "results/job-77.out: cannot tell the primitive: no '# Collective test starting: "
                "<name>_perf' line and the file name does not start with one (accepted: "
                "all_reduce, all_gather, reduce_scatter, alltoall, sendrecv, broadcast)");
    CHECK_INT(ds_comm_samples_size(list), 4);

    /* Text that is no known noise, inside a table, still fails at its line. */
    t->used = 0;
    add_test(t, "0: ", &job[0], NULL);
    char *row = strstr(t->data, "0:         2048");
    CHECK(row != NULL);
    if (row != NULL)
        memcpy(row, "0: core dumped  ", 16);
    CHECK_FAILS(ds_comm_parse_nccl_tests(t->data, "job.out", NULL, list, NULL), DS_ERR_BAD_FILE,
                "job.out:27: 14 values where the header names 13 columns");

    /* A second table without a banner before it. */
    t->used = 0;
    add_test(t, "", &bare, NULL);
    char *header = strstr(t->data, "#       size");
    size_t header_length = (size_t)(strchr(header, '\n') - header + 1);
    t->used += (size_t)snprintf(t->data + t->used, sizeof(t->data) - t->used, "%.*s",
                                (int)header_length, header);
    CHECK_FAILS(ds_comm_parse_nccl_tests(t->data, "all_reduce_8.log", NULL, list, NULL),
                DS_ERR_BAD_FILE,
                "all_reduce_8.log:22: a second results table without a test "
                "banner");

    /* At most DS_COMM_IMPORT_MAX_TESTS tests in one file. */
    t->used = 0;
    test_shape_t small = {"all_reduce_perf", 2, 8, 1, 5.0};
    for (int i = 0; i <= DS_COMM_IMPORT_MAX_TESTS; i++)
        add_test(t, "", &small, NULL);
    CHECK_FAILS(ds_comm_parse_nccl_tests(t->data, "all_reduce_2.log", NULL, list, NULL),
                DS_ERR_BAD_FILE, "more than 64 tests in one file");
    CHECK_INT(ds_comm_samples_size(list), 4);
    ds_comm_samples_destroy(list);
    free(t);
}

/* Rows of element types dsmpi has no key for are kept as fp32 rows of their bytes. */
static void test_element_types(void)
{
    static const char log[] =
        "# nThread 1 nGpus 1 minBytes 8 maxBytes 16 step: 2(factor) warmup iters: 5 iters: 20\n"
        "#  Rank  0 Group  0 Pid 1 on node-0 device  0 [0x00] NVIDIA H100 80GB HBM3\n"
        "#  Rank  1 Group  0 Pid 2 on node-0 device  1 [0x00] NVIDIA H100 80GB HBM3\n"
        "#       size         count      type   redop    root     time   algbw   busbw  #wrong "
        "    time   algbw   busbw  #wrong\n"
        "    33554432       4194304    double     sum      -1   182.87  183.49  321.10       0 "
        "  182.88  183.48  321.08       0\n"
        "    33554432       8388608     int32     sum      -1   180.00  183.49  321.10       0 "
        "  181.00  183.48  321.08     N/A\n"
        "    33554432      33554432     uint8     sum      -1   179.00  183.49  321.10       0 "
        "  178.00  183.48  321.08     N/A\n";
    ds_comm_samples_t *list;
    CHECK_OK(ds_comm_samples_create(&list));
    ds_comm_import_info_t info;
    CHECK_OK(ds_comm_parse_nccl_tests(log, "all_reduce_2.log", NULL, list, &info));
    CHECK_INT(info.rows, 3);
    CHECK_INT(ds_comm_samples_size(list), 6);
    const ds_comm_sample_t *s = ds_comm_samples_data(list);
    CHECK_INT(s[0].dtype, DS_DTYPE_FP32);
    CHECK_INT(s[0].bytes, 33554432);
    CHECK_NEAR(s[0].mean_s, 182.87e-6, 1e-12);
    CHECK_NEAR(s[3].mean_s, 181.00e-6, 1e-12);
    CHECK_NEAR(s[5].mean_s, 178.00e-6, 1e-12);
    ds_comm_samples_destroy(list);
}

/* ---- the public logs ------------------------------------------------------------------ */

static void import_shared(const char *dir, const char *name, ds_comm_samples_t *list,
                          ds_comm_import_info_t *info)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s/nccl-tests/%s", dir, name);
    ds_status_t status = ds_comm_import_nccl_tests(path, NULL, list, info);
    CHECK_MSG(status == DS_OK, "%s: %s", path, ds_last_error());
    if (status != DS_OK)
        memset(info, 0, sizeof(*info));
}

static void test_shared_logs(const char *dir)
{
    static const ds_comm_op_t every[] = {DS_COMM_ALLREDUCE, DS_COMM_ALLGATHER,
                                         DS_COMM_REDUCE_SCATTER, DS_COMM_ALLTOALL,
                                         DS_COMM_SENDRECV};
    ds_comm_samples_t *list;
    CHECK_OK(ds_comm_samples_create(&list));
    ds_comm_import_info_t info;

    /* H100, one node: five collectives back to back, 10 sizes each (32 MiB .. 16 GiB). */
    import_shared(dir, "h100-ib-cluster01/allcollectives_8.log", list, &info);
    CHECK_INT(info.num_tests, 5);
    CHECK_INT(info.rows, 50);
    CHECK_INT(ds_comm_samples_size(list), 100);
    for (int i = 0; i < 5 && i < info.num_tests; i++) {
        CHECK_INT(info.tests[i].op, every[i]);
        CHECK_INT(info.tests[i].rows, 10);
        CHECK_INT(info.tests[i].group_size, 8);
        CHECK_INT(info.tests[i].nodes, 1);
        CHECK_INT(info.tests[i].min_bytes, 33554432);
        CHECK_INT(info.tests[i].max_bytes, 17179869184LL);
    }
    CHECK_INT(info.tests[1].line, 36);
    CHECK_NEAR(time_us(list, 0, DS_COMM_ALLREDUCE, 33554432, 0), 182.87, 1e-12);
    CHECK_NEAR(time_us(list, 0, DS_COMM_ALLGATHER, 33554432, 0), 123.44, 1e-12);
    CHECK_NEAR(time_us(list, 0, DS_COMM_REDUCE_SCATTER, 17179869184LL, 1), 41174.3, 1e-12);
    CHECK_NEAR(time_us(list, 0, DS_COMM_ALLTOALL, 67108864, 1), 212.09, 1e-12);
    CHECK_NEAR(time_us(list, 0, DS_COMM_SENDRECV, 17179869184LL, 0), 46779.2, 1e-12);

    /* Ten nodes. */
    size_t first = ds_comm_samples_size(list);
    import_shared(dir, "h100-ib-cluster01/allcollectives_80.log", list, &info);
    CHECK_INT(info.num_tests, 5);
    for (int i = 0; i < 5 && i < info.num_tests; i++) {
        CHECK_INT(info.tests[i].op, every[i]);
        CHECK_INT(info.tests[i].rows, 10);
        CHECK_INT(info.tests[i].group_size, 80);
        CHECK_INT(info.tests[i].nodes, 10);
        CHECK_INT(info.tests[i].ranks_per_node, 8);
    }
    CHECK_INT(ds_comm_samples_size(list) - first, 100);

    /* Two nodes: all-to-all and send/recv, 4 to 16 GiB. */
    first = ds_comm_samples_size(list);
    import_shared(dir, "h100-ib-cluster01/alltoall+sendrecv_16.log", list, &info);
    CHECK_INT(info.num_tests, 2);
    CHECK_INT(info.tests[0].op, DS_COMM_ALLTOALL);
    CHECK_INT(info.tests[0].rows, 3);
    CHECK_INT(info.tests[0].nodes, 2);
    CHECK_INT(info.tests[1].op, DS_COMM_SENDRECV);
    CHECK_INT(info.tests[1].rows, 3);
    CHECK_INT(info.tests[1].line, 37);
    CHECK_NEAR(time_us(list, first, DS_COMM_ALLTOALL, 17179869184LL, 0), 174994.0, 1e-12);
    CHECK_NEAR(time_us(list, first, DS_COMM_SENDRECV, 4294967296LL, 1), 93633.6, 1e-12);

    /* ABCI V100, 32 nodes of 4, with the UCX warnings of every rank before the table. */
    first = ds_comm_samples_size(list);
    import_shared(dir, "abci-v100-edr/all_reduce_128.log", list, &info);
    CHECK_INT(info.num_tests, 1);
    CHECK_INT(info.rows, 24);
    CHECK_INT(info.group_size, 128);
    CHECK_INT(info.nodes, 32);
    CHECK_INT(info.ranks_per_node, 4);
    CHECK_INT(info.min_bytes, 4);
    CHECK_INT(info.max_bytes, 33554432);
    CHECK_INT(ds_comm_samples_size(list) - first, 48);

    /* ABCI A100, 16 nodes of 8. */
    import_shared(dir, "abci-a100-hdr/all_reduce_128.log", list, &info);
    CHECK_INT(info.rows, 24);
    CHECK_INT(info.nodes, 16);
    CHECK_INT(info.ranks_per_node, 8);
    CHECK(strcmp(info.device_spec, "a100-40g") == 0);
    ds_comm_samples_destroy(list);
}

int main(int argc, char **argv)
{
    if (argc > 1) {
        struct stat st;
        char logs[1024];
        snprintf(logs, sizeof(logs), "%s/nccl-tests", argv[1]);
        if (stat(logs, &st) != 0 || !S_ISDIR(st.st_mode)) {
            printf("test_comm_dialects: skipped: no public nccl-tests logs at %s (configure "
                   "with -DDSMPI_SHARED_DATA=DIR where DIR/nccl-tests holds them)\n",
                   logs);
            return 77;
        }
        test_shared_logs(argv[1]);
        return check_summary("test_comm_dialects (shared logs)");
    }
    test_split();
    test_dialects();
    test_refusal();
    test_element_types();
    return check_summary("test_comm_dialects");
}
