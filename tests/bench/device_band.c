/* The device model's error on the CPU backend's measured kernels, per
 * operator class, with leave-out: for each case (a model, strategy and the
 * cost table `dsmpi profile --costs-out` measured for it), the `cpu`
 * description's GEMM rate and streaming bandwidth are set from the other
 * cases' kernels (medians of the achieved rates of the compute-bound GEMMs
 * and of the streaming kernels; no kernel of the case itself, nor one with
 * the same key), and the case's kernels are predicted with them.  Prints
 * measured / modelled per class over every case left out, and the band the
 * class gets (the 10th and 90th percentile, clamped to low <= 1 <= high: the
 * numbers of libdsmpi/events/device_band.c).
 *
 *   device_band [--verbose] CASE...
 *   CASE = MODEL;SEQ_LEN;GLOBAL_BATCH;STRATEGY;GPUS;COSTS_FILE
 *
 * tests/bench/device_band.sh profiles the cases and runs this. */
#include <dsmpi/dsmpi.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_CASES 16
#define MAX_ROWS 4096

typedef struct row {
    int case_index;
    ds_event_key_t key;
    double measured_s;
    double flops, bytes;
} row_t;

typedef struct bench_case {
    char text[512];
    ds_model_t *model;
    ds_strategy_t strategy;
    ds_cluster_t cluster; /* device: cpu */
} bench_case_t;

static bench_case_t cases[MAX_CASES];
static row_t rows[MAX_ROWS];
static int num_cases, num_rows;

static void die(const char *what)
{
    fprintf(stderr, "device_band: %s: %s\n", what, ds_last_error());
    exit(1);
}

static int compare(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Sorts v and returns its median. */
static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), compare);
    return n == 0 ? 0.0 : n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Loads a case's model, strategy, cpu cluster and its measured compute costs. */
static void load_case(const char *arg)
{
    if (num_cases == MAX_CASES) {
        fprintf(stderr, "device_band: more than %d cases\n", MAX_CASES);
        exit(2);
    }
    bench_case_t *c = &cases[num_cases];
    char copy[512], *field[6];
    snprintf(copy, sizeof(copy), "%s", arg);
    char *save = NULL;
    int n = 0;
    for (char *f = strtok_r(copy, ";", &save); f != NULL && n < 6; f = strtok_r(NULL, ";", &save))
        field[n++] = f;
    if (n != 6) {
        fprintf(stderr, "device_band: case '%s' (accepted: MODEL;SEQ;GBS;STRATEGY;GPUS;COSTS)\n",
                arg);
        exit(2);
    }
    /* Shown: the model's file name (not its directory) and the case, not the costs' file. */
    const char *slash = strrchr(field[0], '/');
    snprintf(c->text, sizeof(c->text), "%s seq %s gbs %s %s on %s", slash ? slash + 1 : field[0],
             field[1], field[2], field[3], field[4]);
    int64_t gpus = atoll(field[4]);
    if (ds_model_load(field[0], &c->model) != DS_OK ||
        ds_model_set_seq_len(c->model, atoll(field[1])) != DS_OK ||
        ds_model_set_global_batch(c->model, atoll(field[2])) != DS_OK)
        die(field[0]);
    if (ds_cluster_from_gpus(&c->cluster, gpus, (int)gpus) != DS_OK ||
        ds_device_spec_lookup("cpu", &c->cluster.device) != DS_OK)
        die("cluster");
    ds_strategy_init(&c->strategy);
    if (ds_strategy_parse(field[3], &c->strategy) != DS_OK ||
        ds_strategy_resolve(&c->strategy, c->model, gpus, (int)gpus) != DS_OK)
        die(field[3]);
    ds_cost_table_t *costs = NULL;
    ds_event_set_t *events = NULL;
    if (ds_cost_table_create(&costs) != DS_OK || ds_cost_table_load_text(costs, field[5]) != DS_OK)
        die(field[5]);
    if (ds_events_generate(c->model, &c->strategy, &c->cluster, &events) != DS_OK)
        die("events");
    for (size_t i = 0; i < ds_event_set_size(events); i++) {
        const ds_event_t *e = ds_event_set_at(events, i);
        const ds_cost_t *cost = ds_cost_table_find(costs, &e->key);
        if (e->key.kind != DS_EVENT_COMPUTE || cost == NULL ||
            cost->provenance != DS_PROV_MEASURED || num_rows == MAX_ROWS)
            continue;
        rows[num_rows++] = (row_t){num_cases, e->key, cost->mean_s, e->flops, e->bytes};
    }
    ds_event_set_destroy(events);
    ds_cost_table_destroy(costs);
    num_cases++;
}

static bool key_in_case(const ds_event_key_t *key, int case_index)
{
    for (int i = 0; i < num_rows; i++)
        if (rows[i].case_index == case_index && ds_event_key_equal(&rows[i].key, key))
            return true;
    return false;
}

/* The cpu description with the GEMM rate and bandwidth the rows outside
 * `left_out` achieve (-1: every row). */
static void fit(int left_out, ds_device_spec_t *spec)
{
    static double gemm[MAX_ROWS], stream[MAX_ROWS];
    int ng = 0, ns = 0;
    ds_device_model_t model;
    if (ds_device_model_lookup("cpu", &model) != DS_OK)
        die("cpu model");
    double launch = model.launch_us * 1e-6;
    for (int i = 0; i < num_rows; i++) {
        const row_t *r = &rows[i];
        if (r->case_index == left_out || (left_out >= 0 && key_in_case(&r->key, left_out)))
            continue;
        double t = fmax(r->measured_s - launch, 1e-9);
        ds_model_class_t c =
            ds_model_class_of(&r->key, r->flops, r->bytes, &cases[r->case_index].cluster);
        if (c == DS_MODEL_GEMM_COMPUTE)
            gemm[ng++] = r->flops / t;
        else if (c == DS_MODEL_STREAMING)
            stream[ns++] = r->bytes / t;
    }
    ds_device_spec_lookup("cpu", spec);
    if (ng > 0)
        spec->peak_tflops_bf16 = spec->peak_tflops_fp32 = median(gemm, ng) * 1e-12;
    if (ns > 0)
        spec->mem_bw_GBps = median(stream, ns) * 1e-9;
}

int main(int argc, char **argv)
{
    bool verbose = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--verbose") == 0)
            verbose = true;
        else
            load_case(argv[i]);
    }
    if (num_cases < 2) {
        fprintf(stderr, "usage: device_band [--verbose] CASE CASE...\n"
                        "  CASE = MODEL;SEQ_LEN;GLOBAL_BATCH;STRATEGY;GPUS;COSTS_FILE\n");
        return 2;
    }
    static double ratios[DS_MODEL_CLASS_COUNT_][MAX_ROWS];
    int count[DS_MODEL_CLASS_COUNT_] = {0};
    printf("# device_band: the cpu device model vs the CPU backend's measured kernels, each case\n"
           "# predicted with the GEMM rate and bandwidth of the other cases' kernels; compute:\n"
           "# the iteration's compute time (each kernel x its occurrences), measured / modelled\n");
    printf("# %-4s %9s %9s %7s %7s  %s\n", "case", "gemm", "stream", "kernels", "compute", "case");
    printf("# %-4s %9s %9s %7s %7s\n", "", "(GFLOP/s)", "(GB/s)", "(count)", "(x)");
    for (int f = 0; f < num_cases; f++) {
        bench_case_t *c = &cases[f];
        ds_cluster_t fitted = c->cluster;
        fit(f, &fitted.device);
        ds_event_set_t *events = NULL;
        if (ds_events_generate(c->model, &c->strategy, &fitted, &events) != DS_OK)
            die("events");
        int used = 0;
        double measured = 0.0, modelled = 0.0;
        for (int i = 0; i < num_rows; i++) {
            if (rows[i].case_index != f)
                continue;
            const ds_event_t *e = ds_event_set_find(events, &rows[i].key);
            if (e == NULL || !(e->estimated_s > 0.0))
                continue;
            ds_model_class_t k = ds_model_class_of(&e->key, e->flops, e->bytes, &fitted);
            double ratio = rows[i].measured_s / e->estimated_s;
            ratios[k][count[k]++] = ratio;
            measured += rows[i].measured_s * (double)e->count;
            modelled += e->estimated_s * (double)e->count;
            used++;
            if (verbose) {
                char text[256];
                ds_event_key_format(&e->key, text, sizeof(text));
                printf("  %4d %-12s %8.3f  %10.2f us  %s\n", f, ds_model_class_name(k), ratio,
                       rows[i].measured_s * 1e6, text);
            }
        }
        ds_event_set_destroy(events);
        printf("  %-4d %9.2f %9.2f %7d %7.3f  %s\n", f, fitted.device.peak_tflops_bf16 * 1e3,
               fitted.device.mem_bw_GBps, used, modelled > 0.0 ? measured / modelled : 0.0,
               c->text);
    }
    printf("#\n# measured / modelled over the kernels left out, per class; band: p10 and p90\n"
           "# clamped to low <= 1 <= high\n");
    printf("# %-13s %7s %7s %7s %7s %7s %7s %7s %7s\n", "class", "kernels", "min", "p10", "median",
           "p90", "max", "low", "high");
    for (int k = 0; k < DS_MODEL_CLASS_COUNT_; k++) {
        int n = count[k];
        if (n == 0) {
            printf("  %-13s %7d %7s %7s %7s %7s %7s %7s %7s\n", ds_model_class_name(k), 0, "-", "-",
                   "-", "-", "-", "-", "-");
            continue;
        }
        double *v = ratios[k];
        median(v, n);
        printf("  %-13s %7d %7.3f %7.3f %7.3f %7.3f %7.3f %7.3f %7.3f\n", ds_model_class_name(k), n,
               v[0], v[(n - 1) / 10], v[n / 2], v[(9 * (n - 1)) / 10], v[n - 1],
               fmin(v[(n - 1) / 10], 1.0), fmax(v[(9 * (n - 1)) / 10], 1.0));
    }
    for (int f = 0; f < num_cases; f++)
        ds_model_destroy(cases[f].model);
    return 0;
}
