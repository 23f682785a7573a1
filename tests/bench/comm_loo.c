/* Leave-one-out accuracy of the communication model on nccl-tests logs:
 * for each log, fit on all the others and predict it; print the relative
 * time errors (median and max) per size band, and the fit's own error on
 * the points it was fitted on.
 *
 *   comm_loo [--device a100-40g] [--gpus-per-node 8] [--verbose] LOG...
 */
#include "comm_bench.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_LOGS 64
#define MAX_POINTS COMM_BENCH_MAX_POINTS

enum { BAND_SMALL, BAND_MEDIUM, BAND_LARGE, NUM_BANDS };
static const char *const band_names[NUM_BANDS] = {"<64KiB", "64KiB-1MiB", ">=1MiB"};

static int band_of(int64_t bytes)
{
    return bytes < 65536 ? BAND_SMALL : bytes < 1048576 ? BAND_MEDIUM : BAND_LARGE;
}

typedef struct errors {
    double values[NUM_BANDS][MAX_POINTS];
    int count[NUM_BANDS];
} errors_t;

static void print_errors(const char *what, errors_t *e, const char *note)
{
    printf("  %-24s", what);
    for (int b = 0; b < NUM_BANDS; b++) {
        if (e->count[b] == 0) {
            printf(" %8s %8s", "-", "-");
            continue;
        }
        double max = 0;
        for (int i = 0; i < e->count[b]; i++)
            max = fmax(max, e->values[b][i]);
        printf(" %8.1f %8.1f", 100.0 * comm_bench_median(e->values[b], e->count[b]), 100.0 * max);
    }
    printf("  %s\n", note);
}

int main(int argc, char **argv)
{
    const char *device = "a100-40g";
    int gpus_per_node = 8, verbose = 0;
    const char *logs[MAX_LOGS];
    int num_logs = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--device") == 0 && i + 1 < argc)
            device = argv[++i];
        else if (strcmp(argv[i], "--gpus-per-node") == 0 && i + 1 < argc)
            gpus_per_node = atoi(argv[++i]);
        else if (strcmp(argv[i], "--verbose") == 0)
            verbose = 1;
        else if (num_logs < MAX_LOGS)
            logs[num_logs++] = argv[i];
    }
    if (num_logs < 2 || gpus_per_node < 1) {
        fprintf(stderr,
                "usage: comm_loo [--device D] [--gpus-per-node G] [--verbose] LOG LOG...\n");
        return 2;
    }
    ds_comm_samples_t *each[MAX_LOGS];
    ds_comm_import_info_t info[MAX_LOGS];
    ds_comm_import_options_t options;
    ds_comm_import_options_init(&options);
    options.gpus_per_node = gpus_per_node;
    for (int i = 0; i < num_logs; i++) {
        if (ds_comm_samples_create(&each[i]) != DS_OK ||
            ds_comm_import_nccl_tests(logs[i], &options, each[i], &info[i]) != DS_OK) {
            fprintf(stderr, "comm_loo: %s\n", ds_last_error());
            return 1;
        }
    }
    int64_t max_gpus = 0;
    for (int i = 0; i < num_logs; i++)
        max_gpus = info[i].group_size > max_gpus ? info[i].group_size : max_gpus;
    ds_cluster_t cluster;
    if (ds_cluster_init(&cluster, (max_gpus + gpus_per_node - 1) / gpus_per_node, gpus_per_node,
                        device) != DS_OK) {
        fprintf(stderr, "comm_loo: %s\n", ds_last_error());
        return 1;
    }
    ds_comm_model_options_t model_options;
    ds_comm_model_options_init(&model_options);
    model_options.use_measurements = 0;

    printf("# comm_loo: leave-one-out relative time errors of the communication model (%%)\n");
    printf("# device %s, %d GPUs per node; each log predicted from all the others\n", device,
           gpus_per_node);
    printf("# %-24s", "dropped log");
    for (int b = 0; b < NUM_BANDS; b++)
        printf(" %8s %8s", "median", "max");
    printf("  provenance\n# %-24s", "");
    for (int b = 0; b < NUM_BANDS; b++)
        printf(" %17s", band_names[b]);
    printf("\n");
    int failures = 0;
    for (int drop = 0; drop < num_logs; drop++) {
        const char *base = strrchr(logs[drop], '/');
        base = base ? base + 1 : logs[drop];
        if (info[drop].group_size < 2) {
            printf("  %-24s  (a group of one rank: no communication to predict)\n", base);
            continue;
        }
        ds_comm_samples_t *rest = NULL;
        ds_comm_model_t *model = NULL;
        if (ds_comm_samples_create(&rest) != DS_OK)
            return 1;
        for (int i = 0; i < num_logs; i++)
            if (i != drop)
                ds_comm_samples_add(rest, ds_comm_samples_data(each[i]),
                                    ds_comm_samples_size(each[i]));
        if (ds_comm_model_create(&cluster, ds_comm_samples_data(rest), ds_comm_samples_size(rest),
                                 &model_options, &model) != DS_OK) {
            fprintf(stderr, "comm_loo: %s\n", ds_last_error());
            return 1;
        }
        comm_bench_target_t t;
        comm_bench_target_of(ds_comm_samples_data(each[drop]), ds_comm_samples_size(each[drop]),
                             &t);
        errors_t e;
        memset(&e, 0, sizeof(e));
        ds_provenance_t provenance = DS_PROV_MEASURED;
        for (int j = 0; j < t.count; j++) {
            ds_event_key_t key;
            ds_comm_prediction_t p;
            ds_comm_key_init(&key, info[drop].op, t.bytes[j], info[drop].group_size, gpus_per_node);
            if (ds_comm_model_predict(model, &key, &p) != DS_OK) {
                fprintf(stderr, "comm_loo: %s\n", ds_last_error());
                failures++;
                continue;
            }
            double err = fabs(p.cost.mean_s - t.time_s[j]) / t.time_s[j];
            int b = band_of(t.bytes[j]);
            e.values[b][e.count[b]++] = err;
            provenance = p.cost.provenance;
            if (verbose)
                printf("#   %-22s %12lld  measured %10.2f us  predicted %10.2f us  %+6.1f%%  %s\n",
                       base, (long long)t.bytes[j], t.time_s[j] * 1e6, p.cost.mean_s * 1e6,
                       100.0 * (p.cost.mean_s - t.time_s[j]) / t.time_s[j],
                       ds_comm_algo_name(p.algo));
        }
        print_errors(base, &e, ds_provenance_name(provenance));
        ds_comm_model_destroy(model);
        ds_comm_samples_destroy(rest);
    }

    /* The fit on everything, against the points it was fitted on. */
    ds_comm_samples_t *all = NULL;
    ds_comm_model_t *model = NULL;
    if (ds_comm_samples_create(&all) != DS_OK)
        return 1;
    for (int i = 0; i < num_logs; i++)
        ds_comm_samples_add(all, ds_comm_samples_data(each[i]), ds_comm_samples_size(each[i]));
    if (ds_comm_model_create(&cluster, ds_comm_samples_data(all), ds_comm_samples_size(all),
                             &model_options, &model) != DS_OK) {
        fprintf(stderr, "comm_loo: %s\n", ds_last_error());
        return 1;
    }
    printf("#\n# the fit on all logs, against the points it was fitted on (%%)\n");
    for (int i = 0; i < num_logs; i++) {
        if (info[i].group_size < 2)
            continue;
        const char *base = strrchr(logs[i], '/');
        base = base ? base + 1 : logs[i];
        comm_bench_target_t t;
        comm_bench_target_of(ds_comm_samples_data(each[i]), ds_comm_samples_size(each[i]), &t);
        errors_t e;
        memset(&e, 0, sizeof(e));
        for (int j = 0; j < t.count; j++) {
            ds_event_key_t key;
            ds_comm_prediction_t p;
            ds_comm_key_init(&key, info[i].op, t.bytes[j], info[i].group_size, gpus_per_node);
            if (ds_comm_model_predict(model, &key, &p) != DS_OK)
                continue;
            int b = band_of(t.bytes[j]);
            e.values[b][e.count[b]++] = fabs(p.cost.mean_s - t.time_s[j]) / t.time_s[j];
        }
        print_errors(base, &e, "fitted");
    }
    printf("#\n");
    ds_comm_model_print(model, DS_COMM_ALLREDUCE, stdout, "# ");
    ds_comm_model_destroy(model);
    ds_comm_samples_destroy(all);
    for (int i = 0; i < num_logs; i++)
        ds_comm_samples_destroy(each[i]);
    return failures ? 1 : 0;
}
