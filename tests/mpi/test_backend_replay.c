/* The replay backend on real MPI ranks: compute takes what the cost table
 * says (a busy wait here), keys the table lacks take their roofline
 * estimate, communication runs (blocking, and the non-blocking all-reduce
 * as rounds of Open MPI's algorithm), the fingerprint names the device and
 * the table; and the profiler without a database writes its text files. */
#include "check.h"

#include "backend/dsi_backend.h"

#include <mpi.h>
#include <stdlib.h>
#include <unistd.h>

static double now(void)
{
    return MPI_Wtime();
}

static ds_event_key_t gemm_key(int64_t m)
{
    ds_event_key_t key;
    memset(&key, 0, sizeof(key));
    key.kind = DS_EVENT_COMPUTE;
    key.op = DS_OP_GEMM;
    key.pass = DS_PASS_FORWARD;
    key.dtype = DS_DTYPE_BF16;
    key.variant = DS_GEMM_TRANS_B;
    key.dims[0] = m;
    key.dims[1] = 1024;
    key.dims[2] = 1024;
    return key;
}

static void test_compute(ds_backend_t *b)
{
    CHECK_INT(ds_backend_kind(b), DS_BACKEND_REPLAY);
    CHECK(strncmp(ds_backend_fingerprint(b), "replay: a100-80g, 1 compute costs #", 35) == 0);
    CHECK(strcmp(ds_backend_device_name(b), "a100-80g") == 0);
    ds_device_spec_t spec;
    CHECK_OK(ds_device_spec_match("replay", ds_backend_device_name(b), &spec));
    CHECK(strcmp(spec.name, "a100-80g") == 0);

    /* The table's key: 20 ms of busy wait. */
    ds_event_key_t key = gemm_key(2048);
    ds_kernel_t *kernel = NULL;
    CHECK_OK(ds_kernel_prepare(b, &key, &kernel));
    if (kernel != NULL) {
        CHECK_INT(ds_kernel_bytes(kernel), 0);
        double t0 = now();
        CHECK_OK(ds_kernel_run(kernel));
        double took = now() - t0;
        CHECK_MSG(took >= 0.020 && took < 0.5, "a 20 ms replayed kernel took %.4f s", took);
        ds_measure_config_t config;
        ds_measure_config_default(&config);
        config.warmup = 1;
        config.min_reps = 3;
        config.max_reps = 3;
        config.budget_s = 5;
        ds_measurement_t m;
        CHECK_OK(ds_kernel_measure(kernel, &config, &m));
        CHECK_MSG(m.cost.median_s >= 0.020 && m.cost.median_s < 0.1, "median %.4f s",
                  m.cost.median_s);
        ds_kernel_destroy(kernel);
    }
    /* A key the table lacks: its device-model estimate on the A100 (tiny). */
    key = gemm_key(64);
    CHECK_OK(ds_kernel_prepare(b, &key, &kernel));
    if (kernel != NULL) {
        double t0 = now();
        CHECK_OK(ds_kernel_run(kernel));
        CHECK_MSG(now() - t0 < 0.01, "an estimated kernel took %.4f s", now() - t0);
        ds_kernel_destroy(kernel);
    }
    size_t bytes = 1;
    CHECK_OK(ds_kernel_estimate_bytes(b, &key, &bytes));
    CHECK_INT(bytes, 0);
}

static void test_comm(ds_backend_t *b, MPI_Comm world)
{
    ds_comm_t *comm = NULL;
    CHECK_OK(ds_comm_create(b, world, &comm));
    if (comm == NULL)
        return;
    int size = ds_comm_size(comm);
    ds_measure_config_t config;
    ds_measure_config_default(&config);
    config.warmup = 1;
    config.min_reps = 3;
    config.max_reps = 5;
    config.budget_s = 1;
    ds_event_key_t key;
    CHECK_OK(ds_comm_key_init(&key, DS_COMM_ALLREDUCE, 1 << 20, size, size));
    ds_comm_measurement_t m;
    CHECK_OK(ds_comm_measure(comm, &key, &config, &m));
    CHECK(m.cost.cost.median_s > 0 && m.sample.op == DS_COMM_ALLREDUCE);
    CHECK(strncmp(m.sample.source, "replay:a100-80g#", 16) == 0);
    int64_t errors = 0;
    CHECK_FAILS(ds_comm_verify(comm, &key, &errors), DS_ERR_UNSUPPORTED, "replay");

    /* Non-blocking all-reduce of every size class: recursive doubling,
     * ring, Rabenseifner; several in flight on one communicator, completed
     * out of order by tests and waits. */
    int64_t sizes[] = {1024, 100000, 4 << 20};
    dsi_comm_call_t *calls[3] = {NULL, NULL, NULL};
    for (int i = 0; i < 3; i++) {
        CHECK_OK(ds_comm_key_init(&key, DS_COMM_ALLREDUCE, sizes[i], size, size));
        CHECK_OK(dsi_comm_call_prepare(comm, &key, DSI_CALL_ALL, 0, &calls[i]));
    }
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < 3; i++)
            if (calls[i] != NULL)
                CHECK_OK(dsi_comm_call_start(calls[i]));
        int done = 0;
        for (int spins = 0; spins < 1000 && !done; spins++)
            if (calls[2] != NULL)
                CHECK_OK(dsi_comm_call_test(calls[2], &done));
        for (int i = 0; i < 3; i++)
            if (calls[i] != NULL)
                CHECK_OK(dsi_comm_call_wait(calls[i]));
        /* Blocking calls on the same communicator in between. */
        if (calls[0] != NULL)
            CHECK_OK(dsi_comm_call_run(calls[0]));
    }
    for (int i = 0; i < 3; i++)
        dsi_comm_call_release(calls[i]);
    ds_comm_destroy(comm);
}

/* dsmpi profile without a database: the text files, parsed back. */
static void test_profiler_text(MPI_Comm world, const char *dir, int rank)
{
    char costs[512], samples[512];
    snprintf(costs, sizeof(costs), "%s/replay-costs.txt", dir);
    snprintf(samples, sizeof(samples), "%s/replay-comm.txt", dir);
    if (rank == 0) {
        remove(costs);
        remove(samples);
    }
    MPI_Barrier(world);
    ds_profile_options_t o;
    ds_profile_options_init(&o);
    o.backend = DS_BACKEND_REPLAY;
    o.costs_out = costs;
    o.comm_samples_out = samples;
    o.progress = 0;
    o.sweep_min_bytes = 1024;
    o.sweep_max_bytes = 4096;
    ds_profiler_t *p = NULL;
    CHECK_OK(ds_profiler_create(world, &o, &p));
    if (p == NULL)
        return;
    CHECK(ds_profiler_db(p) == NULL);
    ds_model_t *model = NULL;
    ds_cluster_t target;
    ds_strategy_t s;
    char path[512];
    snprintf(path, sizeof(path), "%s/validate/tiny-gpt2.json", DSMPI_TEST_DATA);
    CHECK_OK(ds_model_load(path, &model));
    CHECK_OK(ds_model_set_seq_len(model, 64));
    CHECK_OK(ds_cluster_from_gpus(&target, 4, 2));
    ds_strategy_init(&s);
    CHECK_OK(ds_strategy_parse("dp=2,tp=1,pp=2,mbs=1,gbs=4", &s));
    CHECK_OK(ds_strategy_resolve(&s, model, 4, 2));
    CHECK_OK(ds_profiler_add(p, model, &s, &target));
    ds_profile_summary_t summary;
    CHECK_OK(ds_profiler_run(p, &summary));
    CHECK(summary.units_measured > 0 && summary.comm_tasks > 0);
    ds_profiler_destroy(p);
    ds_model_destroy(model);
    if (rank == 0) {
        ds_cost_table_t *table = NULL;
        CHECK_OK(ds_cost_table_create(&table));
        CHECK_OK(ds_cost_table_load_text(table, costs));
        CHECK(ds_cost_table_size(table) > 5);
        ds_cost_table_destroy(table);
        ds_comm_samples_t *list = NULL;
        CHECK_OK(ds_comm_samples_create(&list));
        CHECK_OK(ds_comm_samples_load_text(list, samples));
        CHECK_INT(ds_comm_samples_size(list), summary.comm_tasks);
        int sendrecv = 0;
        for (size_t i = 0; i < ds_comm_samples_size(list); i++)
            sendrecv += ds_comm_samples_data(list)[i].op == DS_COMM_SENDRECV;
        CHECK(sendrecv >= 6); /* every pair shape, both ways, 1..4 KiB */
        ds_comm_samples_destroy(list);
    }
    /* Neither a database nor text files: refused. */
    o.costs_out = o.comm_samples_out = NULL;
    CHECK_FAILS(ds_profiler_create(world, &o, &p), DS_ERR_INVALID_ARG, "--comm-samples-out");
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    ds_log_set_rank(rank);
    ds_backend_kind_t kind;
    CHECK_OK(ds_backend_kind_parse("replay", &kind));
    CHECK_INT(kind, DS_BACKEND_REPLAY);

    ds_cost_table_t *table = NULL;
    CHECK_OK(ds_cost_table_create(&table));
    ds_event_key_t key = gemm_key(2048);
    ds_cost_t cost = {0.020, 0.020, 0.020, 0.020, 5, DS_PROV_MEASURED};
    CHECK_OK(ds_cost_table_set(table, &key, &cost));
    ds_backend_t *b = NULL;
    CHECK_OK(ds_backend_open_replay(MPI_COMM_WORLD, table, "a100-80g", &b));
    if (b != NULL) {
        test_compute(b);
        test_comm(b, MPI_COMM_WORLD);
        ds_backend_close(b);
    }
    CHECK_FAILS(ds_backend_open_replay(MPI_COMM_WORLD, table, "tpu-v5", &b), DS_ERR_INVALID_ARG,
                "tpu-v5");
    ds_cost_table_destroy(table);
    if (argc > 1)
        test_profiler_text(MPI_COMM_WORLD, argv[1], rank);
    int failed = check_failures, any = 0;
    MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    int code = check_summary("test_backend_replay");
    MPI_Finalize();
    return any ? 1 : code;
}
