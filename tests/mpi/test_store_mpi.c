/* The profile database under MPI.
 *
 *   test_store_mpi roundtrip DIR
 *       every rank's records land exactly once; what every rank holds after
 *       a commit equals what a fresh open reads back (every field); reuse
 *       finds the keys; checkpoints; fallbacks.
 *   test_store_mpi write DB GEN [N] [READY GO]
 *       adds generation GEN (N records per rank) and commits; with READY and
 *       GO, creates READY after opening and waits for GO before committing.
 *   test_store_mpi kill DB GEN STAGE VICTIM
 *       as write, but rank VICTIM (-1: every rank) raises SIGKILL at STAGE of
 *       the write (created, written, closed, renamed).
 *   test_store_mpi verify DB GEN [N]
 *       the database holds generations 1..GEN of N records per rank, exactly.
 * A failure is reported on stderr and the exit code is 1 (2 for bad usage). */
#include "check.h"

#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "store/dsi_store.h"

static int rank, size;

static ds_event_key_t key_of(int generation, int owner, int index)
{
    ds_event_key_t key;
    memset(&key, 0, sizeof(key));
    key.kind = DS_EVENT_COMPUTE;
    key.op = index % 3 == 0 ? DS_OP_GEMM : index % 3 == 1 ? DS_OP_SOFTMAX : DS_OP_LAYERNORM;
    key.pass = (uint8_t)(index % 2);
    key.dtype = DS_DTYPE_BF16;
    key.dims[0] = 1000000LL * generation + 1000LL * owner + index;
    key.dims[1] = 4096;
    key.dims[2] = key.op == DS_OP_GEMM ? 1024 : 0;
    return key;
}

static int same_cost(const ds_cost_t *a, const ds_cost_t *b)
{
    return a->mean_s == b->mean_s && a->median_s == b->median_s && a->p10_s == b->p10_s &&
           a->p90_s == b->p90_s && a->repetitions == b->repetitions &&
           a->provenance == b->provenance;
}

static ds_cost_t cost_of(int generation, int owner, int index)
{
    double mean = generation + owner * 1e-3 + index * 1e-6;
    ds_cost_t cost = {mean, mean * 0.5, mean * 0.25, mean * 2.0, 100 + index, DS_PROV_MEASURED};
    return cost;
}

static const char *fingerprint_of(int owner)
{
    return owner % 2 == 0 ? "cpu:even ranks" : "cpu:odd ranks";
}

static void add_generation(ds_profile_db_t *db, int generation, int count)
{
    for (int i = 0; i < count; i++) {
        ds_event_key_t key = key_of(generation, rank, i);
        ds_cost_t cost = cost_of(generation, rank, i);
        double samples[3] = {cost.p10_s, cost.median_s, cost.p90_s};
        ds_cost_histogram_t histogram;
        ds_cost_histogram_fill(samples, 3, &histogram);
        CHECK_OK(ds_profile_db_add(db, fingerprint_of(rank), &key, &cost, &histogram));
    }
}

static int count_temporaries(const char *path)
{
    char command[600];
    snprintf(command, sizeof(command), "ls -a \"$(dirname %s)\" | grep -c '\\.tmp\\.'", path);
    FILE *pipe = popen(command, "r");
    int count = -1;
    if (pipe != NULL) {
        if (fscanf(pipe, "%d", &count) != 1)
            count = -1;
        pclose(pipe);
    }
    return count;
}

/* Every record and sample of `a` equals its counterpart in `b`. */
static void check_same_contents(const ds_profile_db_t *a, const ds_profile_db_t *b)
{
    CHECK_INT(ds_profile_db_num_records(b), ds_profile_db_num_records(a));
    size_t n = ds_profile_db_num_records(a);
    size_t mismatches = 0;
    for (size_t i = 0; i < n && i < ds_profile_db_num_records(b); i++) {
        ds_profile_record_t x, y;
        CHECK_OK(ds_profile_db_get_record(a, i, &x));
        CHECK_OK(ds_profile_db_get_record(b, i, &y));
        /* Records are zeroed before filling: padding compares equal too. */
        mismatches += memcmp(&x, &y, sizeof(x)) != 0;
    }
    CHECK_MSG(mismatches == 0, "rank %d: %zu of %zu records differ after reading back", rank,
              mismatches, n);
    ds_comm_sample_t *s = NULL, *t = NULL;
    size_t ns = 0, nt = 0;
    CHECK_OK(ds_profile_db_get_comm_samples(a, NULL, &s, &ns));
    CHECK_OK(ds_profile_db_get_comm_samples(b, NULL, &t, &nt));
    CHECK_INT(nt, ns);
    CHECK(ns == nt && ns > 0 && memcmp(s, t, ns * sizeof(*s)) == 0);
    ds_comm_samples_free(s);
    ds_comm_samples_free(t);
    ds_profile_db_info_t ia, ib;
    ds_profile_db_get_info(a, &ia);
    ds_profile_db_get_info(b, &ib);
    CHECK(memcmp(&ia, &ib, sizeof(ia)) == 0);
}

static int roundtrip(const char *directory)
{
    char path[512], site[512];
    snprintf(path, sizeof(path), "%s/roundtrip.h5", directory);
    snprintf(site, sizeof(site), "%s/site.h5", directory);
    if (rank == 0) {
        remove(path);
        remove(site);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    const int per_rank = 37;
    double t0 = (double)time(NULL) - 1.0;

    ds_profile_db_t *db = NULL;
    CHECK_OK(ds_profile_db_open(MPI_COMM_WORLD, path, 0, &db));
    if (db == NULL)
        return 1;
    add_generation(db, 1, per_rank);
    /* One key every rank measures: the highest rank's record is kept. */
    ds_event_key_t shared = key_of(9, 0, 0);
    ds_cost_t shared_cost = cost_of(9, rank, 0);
    CHECK_OK(ds_profile_db_add(db, "cpu:shared", &shared, &shared_cost, NULL));
    /* Communication samples: two of this rank's own and one every rank has. */
    ds_comm_sample_t samples[3];
    memset(samples, 0, sizeof(samples));
    for (int i = 0; i < 3; i++) {
        samples[i].op = i == 2 ? DS_COMM_ALLGATHER : DS_COMM_ALLREDUCE;
        samples[i].dtype = DS_DTYPE_FP32;
        samples[i].bytes = 1024LL << i;
        samples[i].group_size = size;
        samples[i].nodes = 1;
        samples[i].ranks_per_node = size;
        samples[i].concurrency = 1;
        samples[i].mean_s = 1e-5 * (rank + 1) + 1e-7 * i;
        samples[i].median_s = samples[i].p10_s = samples[i].p90_s = samples[i].mean_s;
        samples[i].repetitions = 50;
        samples[i].provenance = DS_PROV_MEASURED;
        snprintf(samples[i].source, sizeof(samples[i].source), i == 2 ? "shared" : "rank %d", rank);
    }
    CHECK_OK(ds_profile_db_add_comm_samples(db, samples, 3));
    CHECK_INT(ds_profile_db_num_pending(db), per_rank + 1 + 3);
    CHECK_OK(ds_profile_db_set_run_info(db, "cpu", "test-cpu", "test_store_mpi roundtrip"));
    CHECK_OK(ds_profile_db_commit(db));
    CHECK_INT(ds_profile_db_num_pending(db), 0);

    /* Every rank's records, exactly once, on every rank. */
    CHECK_INT(ds_profile_db_num_records(db), size * per_rank + 1);
    int *seen = calloc((size_t)size * per_rank, sizeof(int));
    char host[DS_NAME_MAX];
    gethostname(host, sizeof(host));
    host[strcspn(host, ".")] = '\0';
    for (size_t i = 0; i < ds_profile_db_num_records(db); i++) {
        ds_profile_record_t record;
        CHECK_OK(ds_profile_db_get_record(db, i, &record));
        if (strcmp(record.fingerprint, "cpu:shared") == 0) {
            CHECK_INT(record.rank, size - 1);
            CHECK(record.cost.mean_s == cost_of(9, size - 1, 0).mean_s);
            continue;
        }
        int generation = (int)(record.key.dims[0] / 1000000);
        int owner = (int)(record.key.dims[0] / 1000 % 1000);
        int index = (int)(record.key.dims[0] % 1000);
        if (generation != 1 || owner >= size || index >= per_rank) {
            CHECK_MSG(0, "unexpected record %lld", (long long)record.key.dims[0]);
            continue;
        }
        seen[owner * per_rank + index]++;
        ds_event_key_t key = key_of(1, owner, index);
        ds_cost_t cost = cost_of(1, owner, index);
        CHECK(ds_event_key_equal(&record.key, &key));
        CHECK(same_cost(&record.cost, &cost));
        CHECK_INT(record.rank, owner);
        CHECK(strcmp(record.fingerprint, fingerprint_of(owner)) == 0);
        CHECK(strcmp(record.host, host) == 0); /* all ranks run on this host here */
        CHECK(record.measured_at_s >= t0 && record.measured_at_s <= (double)time(NULL) + 1.0);
        CHECK(record.histogram.min_s == cost.p10_s && record.histogram.max_s == cost.p90_s &&
              record.histogram.counts[0] == 1 && record.histogram.counts[15] == 1);
    }
    int wrong = 0;
    for (int i = 0; i < size * per_rank; i++)
        wrong += seen[i] != 1;
    CHECK_MSG(wrong == 0, "rank %d: %d records are missing or duplicated", rank, wrong);
    free(seen);
    ds_comm_sample_t *got = NULL;
    size_t count = 0;
    CHECK_OK(ds_profile_db_get_comm_samples(db, NULL, &got, &count));
    CHECK_INT(count, 2 * size + 1);
    ds_comm_samples_free(got);
    CHECK_OK(ds_profile_db_get_comm_samples(db, "shared", &got, &count));
    CHECK(count == 1 && got[0].mean_s == 1e-5 * size + 2e-7);
    ds_comm_samples_free(got);
    ds_profile_db_info_t info;
    ds_profile_db_get_info(db, &info);
    CHECK_INT(info.ranks, size);
    CHECK_INT(info.nodes, 1);
    CHECK_INT(info.max_ranks_per_node, size);
    CHECK(strcmp(info.command_line, "test_store_mpi roundtrip") == 0);

    /* What every rank holds equals what a fresh open reads back. */
    ds_profile_db_t *again = NULL;
    CHECK_OK(ds_profile_db_open(MPI_COMM_WORLD, path, DS_PROFILE_DB_READ_ONLY, &again));
    if (again != NULL) {
        check_same_contents(db, again);
        ds_profile_db_close(again);
    }

    /* A second generation through checkpoints (DS_DB_CHECKPOINT_EVENTS is
     * set low by the test), then reuse: every key is found after reopening. */
    add_generation(db, 2, per_rank);
    int written = -1;
    CHECK_OK(ds_profile_db_checkpoint(db, &written));
    CHECK_INT(written, 1);
    CHECK_OK(ds_profile_db_checkpoint(db, &written));
    CHECK_INT(written, 0);
    ds_profile_db_close(db);
    CHECK_INT(count_temporaries(path), 0);

    CHECK_OK(ds_profile_db_open(MPI_COMM_WORLD, path, 0, &db));
    if (db == NULL)
        return 1;
    CHECK_INT(ds_profile_db_num_records(db), 2 * size * per_rank + 1);
    int missing = 0;
    for (int g = 1; g <= 2; g++)
        for (int owner = 0; owner < size; owner++)
            for (int i = 0; i < per_rank; i++) {
                ds_event_key_t key = key_of(g, owner, i);
                missing += !ds_profile_db_has(db, fingerprint_of(owner), &key);
            }
    CHECK_INT(missing, 0);
    ds_event_key_t other = key_of(3, 0, 0);
    CHECK(!ds_profile_db_has(db, fingerprint_of(0), &other));

    /* A fallback under MPI: read by rank 0, seen by every rank. */
    ds_profile_db_t *site_db = NULL;
    CHECK_OK(ds_profile_db_open(MPI_COMM_WORLD, site, 0, &site_db));
    if (site_db != NULL) {
        if (rank == 0) {
            ds_cost_t cost = cost_of(5, 0, 0);
            CHECK_OK(ds_profile_db_add(site_db, "gpu:site", &other, &cost, NULL));
        }
        CHECK_OK(ds_profile_db_commit(site_db));
        ds_profile_db_close(site_db);
    }
    CHECK_OK(ds_profile_db_add_fallback(db, site));
    CHECK(ds_profile_db_has(db, "gpu:site", &other));
    CHECK_INT(ds_profile_db_num_fingerprints(db), 4);
    ds_profile_db_close(db);
    return 0;
}

/* ---- crash tests ------------------------------------------------------------------ */

static const char *kill_stage;
static int kill_victim;

static void kill_hook(const char *stage, int hook_rank)
{
    if (strcmp(stage, kill_stage) == 0 && (kill_victim < 0 || kill_victim == hook_rank))
        raise(SIGKILL);
}

static void wait_for(const char *path)
{
    struct stat info;
    for (int i = 0; i < 600 && stat(path, &info) != 0; i++)
        nanosleep(&(struct timespec){0, 50000000}, NULL);
}

static int write_generation(const char *path, int generation, int count, const char *ready,
                            const char *go)
{
    ds_profile_db_t *db = NULL;
    ds_status_t status = ds_profile_db_open(MPI_COMM_WORLD, path, 0, &db);
    if (status != DS_OK) {
        if (rank == 0)
            fprintf(stderr, "test_store_mpi: %s\n", ds_last_error());
        return 1;
    }
    add_generation(db, generation, count);
    if (ready != NULL) {
        if (rank == 0) {
            FILE *file = fopen(ready, "w");
            if (file != NULL)
                fclose(file);
            wait_for(go);
        }
        MPI_Barrier(MPI_COMM_WORLD);
    }
    status = ds_profile_db_commit(db);
    if (status != DS_OK && rank == 0)
        fprintf(stderr, "test_store_mpi: %s\n", ds_last_error());
    ds_profile_db_close(db);
    return status == DS_OK ? 0 : 1;
}

static int verify(const char *path, int generations, int count)
{
    ds_profile_db_t *db = NULL;
    CHECK_OK(ds_profile_db_open(MPI_COMM_WORLD, path, DS_PROFILE_DB_READ_ONLY, &db));
    if (db == NULL)
        return 1;
    CHECK_INT(ds_profile_db_num_records(db), (size_t)generations * (size_t)size * (size_t)count);
    int wrong = 0;
    for (int g = 1; g <= generations + 1; g++)
        for (int owner = 0; owner < size; owner++)
            for (int i = 0; i < count; i++) {
                ds_event_key_t key = key_of(g, owner, i);
                ds_profile_record_t record;
                if (g > generations) {
                    wrong += ds_profile_db_has(db, fingerprint_of(owner), &key);
                    continue;
                }
                ds_cost_t cost = cost_of(g, owner, i);
                wrong += ds_profile_db_lookup(db, fingerprint_of(owner), &key, &record) != DS_OK ||
                         !same_cost(&record.cost, &cost) || record.rank != owner;
            }
    CHECK_MSG(wrong == 0, "rank %d: %d records of generations 1..%d wrong or generation %d present",
              rank, wrong, generations, generations + 1);
    ds_profile_db_close(db);
    return 0;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    ds_log_set_rank(rank);
    if (getenv("TEST_STORE_NO_SPACE_CHECK") != NULL)
        dsi_store_space_check = false;
    int code = 0;
    const char *mode = argc > 2 ? argv[1] : "";
    if (strcmp(mode, "roundtrip") == 0 && argc == 3) {
        code = roundtrip(argv[2]);
    } else if (strcmp(mode, "write") == 0 && (argc == 4 || argc == 5 || argc == 7)) {
        code = write_generation(argv[2], atoi(argv[3]), argc >= 5 ? atoi(argv[4]) : 20,
                                argc == 7 ? argv[5] : NULL, argc == 7 ? argv[6] : NULL);
    } else if (strcmp(mode, "kill") == 0 && argc == 6) {
        kill_stage = argv[4];
        kill_victim = atoi(argv[5]);
        dsi_store_write_hook = kill_hook;
        code = write_generation(argv[2], atoi(argv[3]), 20, NULL, NULL);
    } else if (strcmp(mode, "verify") == 0 && (argc == 4 || argc == 5)) {
        code = verify(argv[2], atoi(argv[3]), argc == 5 ? atoi(argv[4]) : 20);
    } else {
        if (rank == 0)
            fprintf(stderr, "usage: test_store_mpi roundtrip DIR | write DB GEN [N [READY GO]] | "
                            "kill DB GEN STAGE VICTIM | verify DB GEN [N]\n");
        MPI_Finalize();
        return 2;
    }
    /* Every rank's verdict counts. */
    int failed = code != 0 || check_failures != 0, any = 0;
    MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (check_failures != 0)
        fprintf(stderr, "test_store_mpi %s: rank %d: %d of %d checks failed\n", mode, rank,
                check_failures, check_count);
    else if (rank == 0 && !any && check_count > 0)
        printf("test_store_mpi %s: %d checks passed on rank 0 (%d ranks)\n", mode, check_count,
               size);
    MPI_Finalize();
    return any ? 1 : 0;
}
