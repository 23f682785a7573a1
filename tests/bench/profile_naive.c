/* Profiling cost with and without deduplication, from a profile database:
 * for each compute event of one data-parallel replica, the time its
 * measurement took (mean x (repetitions + warm-up)), summed once per unique
 * event (what dsmpi measures) and once per occurrence in the replica (what
 * profiling every event of one replica would take).
 *   profile_naive DB MODEL STRATEGY TARGET_GPUS [SEQ_LEN] */
#include <dsmpi/dsmpi.h>

#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: profile_naive DB MODEL STRATEGY TARGET_GPUS [SEQ_LEN]\n");
        return 2;
    }
    ds_model_t *model = NULL;
    ds_strategy_t s;
    ds_cluster_t cluster;
    ds_event_set_t *events = NULL;
    ds_profile_db_t *db = NULL;
    ds_strategy_init(&s);
    int64_t gpus = atoll(argv[4]);
    if (ds_model_load(argv[2], &model) != DS_OK ||
        (argc > 5 && ds_model_set_seq_len(model, atoll(argv[5])) != DS_OK) ||
        ds_strategy_parse(argv[3], &s) != DS_OK ||
        ds_cluster_from_gpus(&cluster, gpus, 8) != DS_OK ||
        ds_strategy_resolve(&s, model, gpus, 8) != DS_OK ||
        ds_events_generate(model, &s, &cluster, &events) != DS_OK ||
        ds_profile_db_open(MPI_COMM_NULL, argv[1], DS_PROFILE_DB_READ_ONLY, &db) != DS_OK) {
        fprintf(stderr, "profile_naive: %s\n", ds_last_error());
        return 1;
    }
    const char *fingerprint =
        ds_profile_db_num_fingerprints(db) ? ds_profile_db_fingerprint(db, 0) : "";
    double warmup = atof(getenv("DS_MEASURE_WARMUP") ? getenv("DS_MEASURE_WARMUP") : "2");
    double unique_s = 0, naive_s = 0, replica_events = 0;
    size_t unique = 0, missing = 0;
    for (size_t i = 0; i < ds_event_set_size(events); i++) {
        const ds_event_t *e = ds_event_set_at(events, i);
        if (e->key.kind != DS_EVENT_COMPUTE)
            continue;
        ds_profile_record_t record;
        if (ds_profile_db_lookup(db, fingerprint, &e->key, &record) != DS_OK) {
            missing++;
            continue;
        }
        double each = record.cost.mean_s * ((double)record.cost.repetitions + warmup);
        double in_replica = (double)e->count / s.dp;
        unique++;
        unique_s += each;
        naive_s += in_replica * each;
        replica_events += in_replica;
    }
    printf("# compute events of one data-parallel replica (%d devices): %.0f occurrences, %zu "
           "unique (%zu without a measurement)\n",
           s.tp * s.pp, replica_events, unique, missing);
    printf(
        "# measuring time: unique events %.1f s; every occurrence of one replica %.1f s (%.0fx)\n",
        unique_s, naive_s, unique_s > 0 ? naive_s / unique_s : 0.0);
    ds_profile_db_close(db);
    ds_event_set_destroy(events);
    ds_model_destroy(model);
    return 0;
}
