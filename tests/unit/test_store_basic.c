/* The profile database without MPI (this process alone): additions,
 * commit, reopen and round trip of every field, replacement, queries,
 * fallbacks, communication samples, checkpoints, histograms, read-only. */
#include "check.h"

#include <dirent.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static ds_event_key_t gemm_key(int64_t m)
{
    ds_event_key_t key;
    memset(&key, 0, sizeof(key));
    key.kind = DS_EVENT_COMPUTE;
    key.op = DS_OP_GEMM;
    key.pass = DS_PASS_BACKWARD;
    key.dtype = DS_DTYPE_BF16;
    key.variant = DS_GEMM_TRANS_B;
    key.dims[0] = m;
    key.dims[1] = 3072;
    key.dims[2] = 1024;
    return key;
}

static ds_event_key_t allreduce_key(int64_t bytes)
{
    ds_event_key_t key;
    memset(&key, 0, sizeof(key));
    key.kind = DS_EVENT_COMM;
    key.op = DS_COMM_ALLREDUCE;
    key.pass = DS_PASS_STEP;
    key.dtype = DS_DTYPE_FP32;
    key.group = DS_GROUP_DP;
    key.flags = DS_COMM_FLAG_BATCHED;
    key.group_size = 8;
    key.ranks_per_node = 4;
    key.nodes = 2;
    key.concurrency = 3;
    key.dims[0] = bytes;
    return key;
}

static ds_cost_t cost_of(double mean, ds_provenance_t provenance)
{
    ds_cost_t cost = {mean, mean * 0.99, mean * 0.9, mean * 1.3, 17, provenance};
    return cost;
}

static ds_comm_sample_t sample_of(ds_comm_op_t op, int64_t bytes, const char *source, double mean)
{
    ds_comm_sample_t s;
    memset(&s, 0, sizeof(s));
    s.op = op;
    s.dtype = DS_DTYPE_BF16;
    s.bytes = bytes;
    s.group_size = 4;
    s.nodes = 2;
    s.ranks_per_node = 2;
    s.concurrency = 1;
    s.in_place = 1;
    s.batched = 0;
    s.mean_s = mean;
    s.median_s = mean * 0.98;
    s.p10_s = mean * 0.9;
    s.p90_s = mean * 1.2;
    s.repetitions = 20;
    s.provenance = DS_PROV_IMPORTED;
    snprintf(s.source, sizeof(s.source), "%s", source);
    return s;
}

static int count_temporaries(const char *directory)
{
    int count = 0;
    DIR *dir = opendir(directory);
    if (dir == NULL)
        return -1;
    struct dirent *entry;
    while ((entry = readdir(dir)) != NULL)
        count += strstr(entry->d_name, ".tmp.") != NULL;
    closedir(dir);
    return count;
}

static void test_histogram(void)
{
    ds_cost_histogram_t h;
    double samples[] = {1.0, 2.0, 4.0, 8.0};
    ds_cost_histogram_fill(samples, 4, &h);
    CHECK_NEAR(h.min_s, 1.0, 0);
    CHECK_NEAR(h.max_s, 8.0, 0);
    /* Geometric bins: log2(x)/3 * 16 -> 0, 5, 10, 15. */
    CHECK_INT(h.counts[0], 1);
    CHECK_INT(h.counts[5], 1);
    CHECK_INT(h.counts[10], 1);
    CHECK_INT(h.counts[15], 1);
    uint32_t sum = 0;
    for (int i = 0; i < DS_COST_HISTOGRAM_BINS; i++)
        sum += h.counts[i];
    CHECK_INT(sum, 4);
    double same[] = {3e-6, 3e-6, 3e-6};
    ds_cost_histogram_fill(same, 3, &h);
    CHECK_INT(h.counts[0], 3);
    ds_cost_histogram_fill(NULL, 0, &h);
    CHECK_INT(h.counts[0], 0);
    CHECK_NEAR(h.max_s, 0.0, 0);
}

/* Every field of a record, compared exactly (doubles must round-trip bit
 * for bit through the file and the broadcast). */
static void check_record(const ds_profile_record_t *got, const ds_profile_record_t *want)
{
    CHECK(ds_event_key_equal(&got->key, &want->key));
    CHECK_INT(got->key.group, want->key.group);
    CHECK(got->cost.mean_s == want->cost.mean_s && got->cost.median_s == want->cost.median_s &&
          got->cost.p10_s == want->cost.p10_s && got->cost.p90_s == want->cost.p90_s);
    CHECK_INT(got->cost.repetitions, want->cost.repetitions);
    CHECK_INT(got->cost.provenance, want->cost.provenance);
    CHECK(memcmp(&got->histogram, &want->histogram, sizeof(got->histogram)) == 0);
    CHECK_MSG(strcmp(got->fingerprint, want->fingerprint) == 0, "%s vs %s", got->fingerprint,
              want->fingerprint);
    CHECK_MSG(strcmp(got->host, want->host) == 0, "%s vs %s", got->host, want->host);
    CHECK_INT(got->rank, want->rank);
    CHECK(got->measured_at_s == want->measured_at_s);
}

int main(void)
{
    setenv("DS_DB_CHECKPOINT_EVENTS", "3", 1);
    setenv("DS_DB_CHECKPOINT_SECONDS", "0", 1);
    char directory[] = "store_basic_XXXXXX";
    if (mkdtemp(directory) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    char path[256], site[256], fresh[256];
    snprintf(path, sizeof(path), "%s/profile.h5", directory);
    snprintf(site, sizeof(site), "%s/site.h5", directory);
    snprintf(fresh, sizeof(fresh), "%s/empty.h5", directory);
    test_histogram();

    /* A new database starts empty. */
    ds_profile_db_t *db = NULL;
    CHECK_OK(ds_profile_db_open(MPI_COMM_NULL, path, 0, &db));
    if (db == NULL)
        return check_summary("test_store_basic");
    CHECK_INT(ds_profile_db_num_records(db), 0);
    ds_profile_db_info_t info;
    ds_profile_db_get_info(db, &info);
    CHECK_INT(info.format_version, 0);
    CHECK(strcmp(ds_profile_db_path(db), path) == 0);

    /* Six records: four on device A (one of them communication), two on B,
     * one key shared by both devices. */
    double t0 = (double)time(NULL) - 1.0;
    ds_event_key_t keys[4] = {gemm_key(1024), gemm_key(2048), gemm_key(4096),
                              allreduce_key(1 << 20)};
    double samples[] = {1e-3, 1.1e-3, 0.9e-3, 1.5e-3, 1.02e-3};
    ds_cost_histogram_t hist;
    ds_cost_histogram_fill(samples, 5, &hist);
    for (int i = 0; i < 4; i++) {
        ds_cost_t first = cost_of(0.5, DS_PROV_ASSUMED);
        ds_cost_t second = {1e-3 * (i + 1), 1e-3 * (i + 1), 0.9e-3,
                            1.2e-3,         10 + i,         DS_PROV_MEASURED};
        CHECK_OK(ds_profile_db_add(db, "cpu:A", &keys[i], &first, NULL));
        CHECK_OK(ds_profile_db_add(db, "cpu:A", &keys[i], &second, i == 0 ? &hist : NULL));
    }
    /* The second addition of each key replaced the first (zero cost) one. */
    CHECK_OK(ds_profile_db_add(db, "cpu:B", &keys[0],
                               &(ds_cost_t){5e-3, 5e-3, 4e-3, 6e-3, 3, DS_PROV_MEASURED}, NULL));
    CHECK_OK(ds_profile_db_add(db, "cpu:B", &keys[2],
                               &(ds_cost_t){6e-3, 6e-3, 5e-3, 7e-3, 3, DS_PROV_MEASURED}, NULL));
    CHECK_INT(ds_profile_db_num_pending(db), 10);
    /* Queries see committed contents only. */
    CHECK(!ds_profile_db_has(db, "cpu:A", &keys[0]));
    CHECK_OK(ds_profile_db_set_run_info(db, "cpu", "cpu-x86", "dsmpi profile --model gpt2-small"));
    CHECK_OK(ds_profile_db_commit(db));
    CHECK_INT(ds_profile_db_num_pending(db), 0);
    CHECK_INT(ds_profile_db_num_records(db), 6);
    CHECK_INT(count_temporaries(directory), 0);
    for (int i = 0; i < 4; i++)
        CHECK(ds_profile_db_has(db, "cpu:A", &keys[i]));
    CHECK(ds_profile_db_has(db, "cpu:B", &keys[2]));
    CHECK(!ds_profile_db_has(db, "cpu:B", &keys[1]));
    CHECK(!ds_profile_db_has(db, "gpu:H100", &keys[0]));
    /* The display-only group byte does not change a key. */
    ds_event_key_t regrouped = keys[3];
    regrouped.group = DS_GROUP_TP;
    CHECK(ds_profile_db_has(db, "cpu:A", &regrouped));
    CHECK_INT(ds_profile_db_num_fingerprints(db), 2);
    CHECK(strcmp(ds_profile_db_fingerprint(db, 0), "cpu:A") == 0);
    CHECK(strcmp(ds_profile_db_fingerprint(db, 1), "cpu:B") == 0);
    CHECK(ds_profile_db_fingerprint(db, 2) == NULL);

    ds_profile_db_get_info(db, &info);
    CHECK_INT(info.format_version, DS_PROFILE_DB_FORMAT_VERSION);
    CHECK(strcmp(info.library_version, DS_VERSION_STRING) == 0);
    CHECK(strcmp(info.backend, "cpu") == 0);
    CHECK(strcmp(info.device, "cpu-x86") == 0);
    CHECK(strcmp(info.command_line, "dsmpi profile --model gpt2-small") == 0);
    CHECK_INT(info.ranks, 1);
    CHECK_INT(info.nodes, 1);
    CHECK_INT(info.max_ranks_per_node, 1);
    {
        char me[256];
        gethostname(me, sizeof(me));
        me[strcspn(me, ".")] = '\0';
        CHECK_MSG(strcmp(info.hosts, me) == 0, "hosts '%s', expected '%s'", info.hosts, me);
    }
    CHECK(info.written_at_s >= t0 && info.written_at_s <= (double)time(NULL) + 1.0);
    CHECK(strlen(info.written_at) == 20 && info.written_at[19] == 'Z');
    CHECK_INT(info.num_records, 6);
    CHECK_INT(info.num_fingerprints, 2);

    ds_profile_record_t record;
    CHECK_OK(ds_profile_db_lookup(db, "cpu:A", &keys[0], &record));
    CHECK_NEAR(record.cost.mean_s, 1e-3, 0);
    CHECK_INT(record.cost.repetitions, 10);
    CHECK(memcmp(&record.histogram, &hist, sizeof(hist)) == 0);
    CHECK_INT(record.rank, 0);
    char host[256];
    gethostname(host, sizeof(host));
    host[strcspn(host, ".")] = '\0';
    CHECK_MSG(strcmp(record.host, host) == 0, "host %s, expected %s", record.host, host);
    CHECK(record.measured_at_s >= t0 && record.measured_at_s <= (double)time(NULL) + 1.0);
    CHECK_FAILS(ds_profile_db_lookup(db, "cpu:B", &keys[1], &record), DS_ERR_NOT_FOUND, "cpu:B");

    /* Reopen: every record and attribute is read back as committed. */
    ds_profile_db_t *again = NULL;
    CHECK_OK(ds_profile_db_open(MPI_COMM_NULL, path, DS_PROFILE_DB_READ_ONLY, &again));
    if (again != NULL) {
        CHECK_INT(ds_profile_db_num_records(again), ds_profile_db_num_records(db));
        for (size_t i = 0; i < ds_profile_db_num_records(db); i++) {
            ds_profile_record_t a, b;
            CHECK_OK(ds_profile_db_get_record(db, i, &a));
            CHECK_OK(ds_profile_db_get_record(again, i, &b));
            check_record(&b, &a);
        }
        ds_profile_db_info_t info2;
        ds_profile_db_get_info(again, &info2);
        CHECK(memcmp(&info, &info2, sizeof(info)) == 0);
        /* Read-only handles refuse additions. */
        CHECK_FAILS(ds_profile_db_add(again, "cpu:A", &keys[0], &record.cost, NULL),
                    DS_ERR_INVALID_ARG, "read-only");
        CHECK_FAILS(ds_profile_db_commit(again), DS_ERR_INVALID_ARG, "read-only");
        ds_profile_db_close(again);
    }

    /* fill_costs: every key of one device, exact values. */
    ds_cost_table_t *table = NULL;
    CHECK_OK(ds_cost_table_create(&table));
    size_t added = 0;
    CHECK_OK(ds_profile_db_fill_costs(db, "cpu:A", table, &added));
    CHECK_INT(added, 4);
    CHECK_INT(ds_cost_table_size(table), 4);
    for (int i = 0; i < 4; i++) {
        const ds_cost_t *cost = ds_cost_table_find(table, &keys[i]);
        CHECK(cost != NULL && cost->mean_s == 1e-3 * (i + 1) && cost->repetitions == 10 + i);
    }
    ds_cost_table_destroy(table);

    /* Replacing a record keeps one row per (device, key). */
    CHECK_OK(ds_profile_db_add(db, "cpu:A", &keys[1],
                               &(ds_cost_t){9e-3, 9e-3, 8e-3, 1e-2, 99, DS_PROV_MEASURED}, NULL));
    CHECK_OK(ds_profile_db_commit(db));
    CHECK_INT(ds_profile_db_num_records(db), 6);
    CHECK_OK(ds_profile_db_lookup(db, "cpu:A", &keys[1], &record));
    CHECK_INT(record.cost.repetitions, 99);

    /* Communication samples: put, get, filter, replace. */
    ds_comm_sample_t in[3] = {sample_of(DS_COMM_ALLREDUCE, 1 << 20, "nccl-tests:siteA", 1e-4),
                              sample_of(DS_COMM_ALLREDUCE, 1 << 24, "nccl-tests:siteA", 1e-3),
                              sample_of(DS_COMM_ALLGATHER, 1 << 20, "cpu:A", 2e-4)};
    in[2].span_nodes = 5; /* kept through the file */
    CHECK_OK(ds_profile_db_add_comm_samples(db, in, 3));
    CHECK_OK(ds_profile_db_commit(db));
    ds_comm_sample_t *out = NULL;
    size_t count = 0;
    CHECK_OK(ds_profile_db_get_comm_samples(db, NULL, &out, &count));
    CHECK_INT(count, 3);
    if (count == 3)
        CHECK(memcmp(out, in, sizeof(in)) == 0);
    ds_comm_samples_free(out);
    CHECK_OK(ds_profile_db_get_comm_samples(db, "cpu:A", &out, &count));
    CHECK_INT(count, 1);
    CHECK(count == 1 && out[0].op == DS_COMM_ALLGATHER);
    ds_comm_samples_free(out);
    ds_comm_sample_t newer = sample_of(DS_COMM_ALLREDUCE, 1 << 24, "nccl-tests:siteA", 7e-4);
    CHECK_OK(ds_profile_db_add_comm_samples(db, &newer, 1));
    ds_comm_sample_t bad = newer;
    bad.group_size = 0;
    CHECK_FAILS(ds_profile_db_add_comm_samples(db, &bad, 1), DS_ERR_INVALID_ARG, "group of 0");
    CHECK_OK(ds_profile_db_commit(db));
    CHECK_OK(ds_profile_db_get_comm_samples(db, "nccl-tests:siteA", &out, &count));
    CHECK_INT(count, 2);
    CHECK(count == 2 && out[1].mean_s == 7e-4);
    ds_comm_samples_free(out);

    /* Invalid additions. */
    ds_cost_t good = cost_of(1e-3, DS_PROV_MEASURED);
    CHECK_FAILS(ds_profile_db_add(db, "", &keys[0], &good, NULL), DS_ERR_INVALID_ARG,
                "fingerprint");
    ds_cost_t negative = cost_of(-1.0, DS_PROV_MEASURED);
    CHECK_FAILS(ds_profile_db_add(db, "cpu:A", &keys[0], &negative, NULL), DS_ERR_INVALID_ARG,
                "-1");
    ds_cost_t unknown = cost_of(1e-3, (ds_provenance_t)9);
    CHECK_FAILS(ds_profile_db_add(db, "cpu:A", &keys[0], &unknown, NULL), DS_ERR_INVALID_ARG,
                "provenance 9");
    ds_event_key_t weird = keys[0];
    weird.op = 200;
    CHECK_FAILS(ds_profile_db_add(db, "cpu:A", &weird, &good, NULL), DS_ERR_INVALID_ARG, "op 200");
    CHECK_INT(ds_profile_db_num_pending(db), 0);

    /* Checkpoints write once DS_DB_CHECKPOINT_EVENTS (3 here) records are new. */
    int written = -1;
    CHECK_OK(ds_profile_db_add(db, "cpu:C", &keys[0], &good, NULL));
    CHECK_OK(ds_profile_db_add(db, "cpu:C", &keys[1], &good, NULL));
    CHECK_OK(ds_profile_db_checkpoint(db, &written));
    CHECK_INT(written, 0);
    CHECK(!ds_profile_db_has(db, "cpu:C", &keys[0]));
    CHECK_OK(ds_profile_db_add(db, "cpu:C", &keys[2], &good, NULL));
    CHECK_OK(ds_profile_db_checkpoint(db, &written));
    CHECK_INT(written, 1);
    CHECK(ds_profile_db_has(db, "cpu:C", &keys[2]));
    CHECK_INT(ds_profile_db_num_records(db), 9);
    ds_profile_db_close(db);

    /* A site database as fallback: own costs first, the fallback fills the rest. */
    ds_profile_db_t *site_db = NULL;
    CHECK_OK(ds_profile_db_open(MPI_COMM_NULL, site, 0, &site_db));
    ds_event_key_t only_site = gemm_key(8192);
    CHECK_OK(ds_profile_db_add(site_db, "cpu:A", &keys[0],
                               &(ds_cost_t){42.0, 42.0, 42.0, 42.0, 1, DS_PROV_MEASURED}, NULL));
    CHECK_OK(ds_profile_db_add(site_db, "cpu:A", &only_site,
                               &(ds_cost_t){7.0, 7.0, 7.0, 7.0, 1, DS_PROV_IMPORTED}, NULL));
    CHECK_OK(ds_profile_db_add(site_db, "gpu:H100", &keys[0], &good, NULL));
    ds_comm_sample_t shadowed = sample_of(DS_COMM_ALLREDUCE, 1 << 20, "nccl-tests:siteA", 5.0);
    ds_comm_sample_t extra = sample_of(DS_COMM_ALLTOALL, 1 << 20, "nccl-tests:siteA", 3e-4);
    CHECK_OK(ds_profile_db_add_comm_samples(site_db, &shadowed, 1));
    CHECK_OK(ds_profile_db_add_comm_samples(site_db, &extra, 1));
    CHECK_OK(ds_profile_db_commit(site_db));
    ds_profile_db_close(site_db);

    CHECK_OK(ds_profile_db_open(MPI_COMM_NULL, path, 0, &db));
    CHECK_FAILS(ds_profile_db_add_fallback(db, fresh), DS_ERR_NOT_FOUND, "empty.h5");
    CHECK_OK(ds_profile_db_add_fallback(db, site));
    CHECK(ds_profile_db_has(db, "cpu:A", &only_site));
    CHECK(ds_profile_db_has(db, "gpu:H100", &keys[0]));
    CHECK_OK(ds_profile_db_lookup(db, "cpu:A", &keys[0], &record));
    CHECK_NEAR(record.cost.mean_s, 1e-3, 0);
    CHECK_OK(ds_profile_db_lookup(db, "cpu:A", &only_site, &record));
    CHECK_NEAR(record.cost.mean_s, 7.0, 0);
    CHECK_INT(ds_profile_db_num_fingerprints(db), 4); /* A, B, C, then H100 from the site */
    CHECK(strcmp(ds_profile_db_fingerprint(db, 3), "gpu:H100") == 0);
    CHECK_OK(ds_cost_table_create(&table));
    CHECK_OK(ds_cost_table_set(table, &only_site, &good));
    CHECK_OK(ds_profile_db_fill_costs(db, "cpu:A", table, &added));
    CHECK_INT(added, 4); /* the own four; the site's keys[0] is shadowed, only_site kept */
    CHECK_INT(ds_cost_table_size(table), 5);
    CHECK(ds_cost_table_find(table, &keys[0])->mean_s == 1e-3);
    CHECK(ds_cost_table_find(table, &only_site)->mean_s == good.mean_s);
    ds_cost_table_destroy(table);
    CHECK_OK(ds_profile_db_get_comm_samples(db, NULL, &out, &count));
    CHECK_INT(count, 4); /* three own, the site's alltoall; its allreduce is shadowed */
    for (size_t i = 0; i < count; i++)
        CHECK(out[i].mean_s != 5.0);
    ds_comm_samples_free(out);
    /* The fallback is never written: its file keeps its two events. */
    CHECK_OK(ds_profile_db_commit(db));
    ds_profile_db_close(db);
    CHECK_OK(ds_profile_db_open(MPI_COMM_NULL, site, DS_PROFILE_DB_READ_ONLY, &site_db));
    CHECK_INT(ds_profile_db_num_records(site_db), 3);
    ds_profile_db_close(site_db);

    /* An empty database is a valid file. */
    CHECK_OK(ds_profile_db_open(MPI_COMM_NULL, fresh, 0, &db));
    CHECK_OK(ds_profile_db_commit(db));
    ds_profile_db_close(db);
    CHECK_OK(ds_profile_db_open(MPI_COMM_NULL, fresh, DS_PROFILE_DB_READ_ONLY, &db));
    ds_profile_db_get_info(db, &info);
    CHECK_INT(info.format_version, DS_PROFILE_DB_FORMAT_VERSION);
    CHECK_INT(ds_profile_db_num_records(db), 0);
    ds_profile_db_close(db);

    /* Paths that cannot hold a database. */
    db = NULL;
    CHECK_FAILS(ds_profile_db_open(MPI_COMM_NULL, "no/such/dir/p.h5", 0, &db), DS_ERR_NOT_FOUND,
                "no/such/dir");
    CHECK_FAILS(ds_profile_db_open(MPI_COMM_NULL, "missing.h5", DS_PROFILE_DB_READ_ONLY, &db),
                DS_ERR_NOT_FOUND, "does not exist");
    CHECK_FAILS(ds_profile_db_open(MPI_COMM_NULL, "", 0, &db), DS_ERR_INVALID_ARG, "empty");
    CHECK(db == NULL);
    ds_profile_db_close(NULL);
    CHECK_INT(count_temporaries(directory), 0);

    remove(path);
    remove(site);
    remove(fresh);
    rmdir(directory);
    return check_summary("test_store_basic");
}
