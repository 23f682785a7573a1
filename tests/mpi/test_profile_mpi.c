/* The profiler under real MPI ranks: every planned layer pass is measured by
 * exactly one rank, every compute event of the target lands in the database
 * once, what the run committed is what a fresh open reads back, and a second
 * run reuses everything. */
#include "check.h"

#include <mpi.h>
#include <stdlib.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    ds_log_set_rank(rank);
    const char *dir = argc > 1 ? argv[1] : ".";
    char path[512];
    snprintf(path, sizeof(path), "%s/profile_mpi_%d.h5", dir, size);
    if (rank == 0)
        unlink(path);
    MPI_Barrier(MPI_COMM_WORLD);

    ds_model_t *model = NULL;
    ds_strategy_t s;
    ds_cluster_t target;
    ds_event_set_t *events = NULL;
    ds_strategy_init(&s);
    CHECK_OK(ds_model_load("gpt2-medium", &model));
    CHECK_OK(ds_model_set_seq_len(model, 64));
    CHECK_OK(ds_strategy_parse("tp=2,pp=2,mbs=1,gbs=8", &s));
    CHECK_OK(ds_cluster_from_gpus(&target, 8, 8));
    CHECK_OK(ds_strategy_resolve(&s, model, 8, 8));
    CHECK_OK(ds_events_generate(model, &s, &target, &events));

    ds_profile_options_t options;
    ds_profile_options_init(&options);
    options.db_path = path;
    options.backend = DS_BACKEND_CPU;
    options.progress = 0;
    options.sweep_max_bytes = 16384;
    ds_profiler_t *profiler = NULL;
    CHECK_OK(ds_profiler_create(MPI_COMM_WORLD, &options, &profiler));
    CHECK_OK(ds_profiler_add(profiler, model, &s, &target));
    ds_profile_summary_t summary;
    CHECK_OK(ds_profiler_run(profiler, &summary));
    CHECK(summary.units > 0 && summary.units_measured == summary.units &&
          summary.units_reused == 0);
    CHECK(summary.comm_tasks > 0 && summary.comm_tasks_reused == 0 && !summary.interrupted);
    CHECK_INT(summary.ranks, size);

    /* Every compute event of the target has a cost, measured by a rank that
     * was assigned a pass holding it. */
    ds_profile_db_t *db = ds_profiler_db(profiler);
    size_t compute = 0;
    for (size_t i = 0; i < ds_event_set_size(events); i++) {
        const ds_event_t *e = ds_event_set_at(events, i);
        if (e->key.kind != DS_EVENT_COMPUTE)
            continue;
        compute++;
        ds_profile_record_t record;
        const ds_cost_t *cost = &record.cost;
        CHECK_MSG(ds_profile_db_lookup(db, ds_profiler_fingerprint(profiler), &e->key, &record) ==
                          DS_OK &&
                      cost->mean_s > 0 && cost->repetitions >= 1 && cost->p10_s <= cost->median_s &&
                      cost->median_s <= cost->p90_s && record.rank >= 0 && record.rank < size,
                  "compute event %zu has no sane cost", i);
    }
    size_t records = ds_profile_db_num_records(db);
    CHECK_MSG(records == compute, "%zu records for %zu compute events", records, compute);
    for (size_t r = 0; r < records; r++) {
        ds_profile_record_t record;
        CHECK_OK(ds_profile_db_get_record(db, r, &record));
        CHECK(record.rank >= 0 && record.rank < size);
    }
    /* Communication samples were measured on this device, one per task. */
    ds_comm_sample_t *samples = NULL;
    size_t num_samples = 0;
    CHECK_OK(ds_profile_db_get_comm_samples(db, ds_profiler_source_tag(profiler), &samples,
                                            &num_samples));
    CHECK_INT(num_samples, summary.comm_tasks);
    for (size_t i = 0; i < num_samples; i++)
        CHECK(samples[i].mean_s > 0 && samples[i].provenance == DS_PROV_MEASURED);
    ds_comm_samples_free(samples);

    /* What was committed is what a fresh open reads back (rank 0 alone). */
    if (rank == 0) {
        ds_profile_db_t *fresh = NULL;
        CHECK_OK(ds_profile_db_open(MPI_COMM_NULL, path, DS_PROFILE_DB_READ_ONLY, &fresh));
        ds_cost_table_t *a = NULL, *b = NULL;
        CHECK_OK(ds_cost_table_create(&a));
        CHECK_OK(ds_cost_table_create(&b));
        CHECK_OK(ds_profile_db_fill_costs(db, ds_profiler_fingerprint(profiler), a, NULL));
        CHECK_OK(ds_profile_db_fill_costs(fresh, ds_profiler_fingerprint(profiler), b, NULL));
        CHECK_INT(ds_cost_table_size(a), ds_cost_table_size(b));
        for (size_t i = 0; i < ds_cost_table_size(a); i++) {
            const ds_event_key_t *key;
            const ds_cost_t *ca, *cb;
            ds_cost_table_at(a, i, &key, &ca);
            cb = ds_cost_table_find(b, key);
            CHECK(cb != NULL && ca->mean_s == cb->mean_s && ca->median_s == cb->median_s &&
                  ca->p10_s == cb->p10_s && ca->p90_s == cb->p90_s &&
                  ca->repetitions == cb->repetitions && ca->provenance == cb->provenance);
        }
        ds_cost_table_destroy(a);
        ds_cost_table_destroy(b);
        ds_profile_db_close(fresh);
    }
    ds_profiler_destroy(profiler);

    /* A second run on the same database measures nothing. */
    profiler = NULL;
    CHECK_OK(ds_profiler_create(MPI_COMM_WORLD, &options, &profiler));
    CHECK_OK(ds_profiler_add(profiler, model, &s, &target));
    CHECK_OK(ds_profiler_run(profiler, &summary));
    CHECK_INT(summary.units_measured, 0);
    CHECK_INT(summary.units_reused, summary.units);
    CHECK_INT(summary.comm_tasks_reused, summary.comm_tasks);
    ds_profiler_destroy(profiler);

    /* A stop requested before the run: nothing measured, saved, interrupted. */
    options.reprofile = 1;
    profiler = NULL;
    CHECK_OK(ds_profiler_create(MPI_COMM_WORLD, &options, &profiler));
    CHECK_OK(ds_profiler_add(profiler, model, &s, &target));
    ds_profiler_request_stop();
    ds_status_t status = ds_profiler_run(profiler, &summary);
    CHECK_MSG(status == DS_ERR_INTERRUPTED &&
                  strstr(ds_last_error(), "a rerun measures the rest") != NULL,
              "%s: %s", ds_status_string(status), ds_last_error());
    CHECK(summary.interrupted);
    ds_profiler_destroy(profiler);

    ds_event_set_destroy(events);
    ds_model_destroy(model);
    int failures = check_failures, total = 0;
    MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0)
        printf("test_profile_mpi: %d ranks, %d failures\n", size, total);
    MPI_Finalize();
    return total != 0;
}
