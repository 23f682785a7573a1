/* Backend figures: GEMM throughput on this device, and the time to prepare
 * and measure every unique compute event of a model's iteration (by
 * default the `dsmpi events --demo` case: GPT-2 medium, dp=64, tp=4, pp=4,
 * mbs=2 on 1024 GPUs).  Run on one rank: tests/bench/backend.sh. */
#include <dsmpi/dsmpi.h>

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int fail(const char *what)
{
    fprintf(stderr, "bench_backend: %s: %s\n", what, ds_last_error());
    return 1;
}

static int bench_gemm(ds_backend_t *b, int64_t m, int64_t n, int64_t k, double budget)
{
    printf("# GEMM C[m,n] = A[m,k] B[k,n]^T, one device, median of repetitions\n");
    printf("# %-5s %6s %6s %6s %10s %10s %10s %6s %9s\n", "dtype", "m", "n", "k", "median", "p10",
           "p90", "reps", "rate");
    printf("# %-5s %6s %6s %6s %10s %10s %10s %6s %9s\n", "", "", "", "", "(ms)", "(ms)", "(ms)",
           "", "(GFLOP/s)");
    for (int d = 0; d < 2; d++) {
        ds_event_key_t key;
        memset(&key, 0, sizeof(key));
        key.kind = DS_EVENT_COMPUTE;
        key.op = DS_OP_GEMM;
        key.dtype = d == 0 ? DS_DTYPE_FP32 : DS_DTYPE_BF16;
        key.variant = DS_GEMM_TRANS_B;
        key.dims[0] = m;
        key.dims[1] = n;
        key.dims[2] = k;
        key.dims[3] = 1;
        ds_measure_config_t cfg;
        ds_measure_config_default(&cfg);
        cfg.min_reps = 10;
        cfg.target_rel_ci = 0.01;
        cfg.budget_s = budget;
        ds_measurement_t r;
        if (ds_measure_compute(b, &key, &cfg, &r) != DS_OK)
            return fail("gemm");
        printf("  %-5s %6lld %6lld %6lld %10.3f %10.3f %10.3f %6lld %9.1f\n",
               ds_dtype_name((ds_dtype_t)key.dtype), (long long)m, (long long)n, (long long)k,
               r.cost.median_s * 1e3, r.cost.p10_s * 1e3, r.cost.p90_s * 1e3,
               (long long)r.cost.repetitions, 2.0 * (double)m * n * k / r.cost.median_s / 1e9);
    }
    return 0;
}

static int bench_events(ds_backend_t *b, const char *model_name, const char *strategy_text,
                        int64_t gpus, int verbose)
{
    ds_model_t *model = NULL;
    ds_strategy_t strategy;
    ds_cluster_t cluster;
    ds_event_set_t *set = NULL;
    if (ds_model_load(model_name, &model) != DS_OK)
        return fail("model");
    ds_strategy_init(&strategy);
    if (ds_strategy_parse(strategy_text, &strategy) != DS_OK ||
        ds_cluster_from_gpus(&cluster, gpus, 8) != DS_OK ||
        ds_strategy_resolve(&strategy, model, gpus, 8) != DS_OK ||
        ds_events_generate(model, &strategy, &cluster, &set) != DS_OK)
        return fail("events");
    ds_measure_config_t cfg;
    ds_measure_config_default(&cfg);
    printf("#\n# unique compute events of %s %s on %lld GPUs, measured on one device\n", model_name,
           strategy_text, (long long)gpus);
    printf("# measurement: warm-up %d / %.3g s, %d..%d repetitions, target CI %.3g, budget %.3g s "
           "per event\n",
           cfg.warmup, cfg.warmup_s, cfg.min_reps, cfg.max_reps, cfg.target_rel_ci, cfg.budget_s);
    if (verbose) {
        printf("# %4s %10s %10s %6s %-9s %9s  %s\n", "n", "prepare", "median", "reps", "stop",
               "buffers", "event");
        printf("# %4s %10s %10s %6s %-9s %9s\n", "", "(ms)", "(ms)", "", "", "(MiB)");
    }
    double start = now(), prepare_total = 0.0, measure_total = 0.0, busy = 0.0;
    int count = 0;
    for (size_t i = 0; i < ds_event_set_size(set); i++) {
        const ds_event_t *e = ds_event_set_at(set, i);
        if (e->key.kind != DS_EVENT_COMPUTE)
            continue;
        char text[256];
        ds_event_key_format(&e->key, text, sizeof(text));
        double t0 = now();
        ds_kernel_t *kernel = NULL;
        if (ds_kernel_prepare(b, &e->key, &kernel) != DS_OK)
            return fail(text);
        double t1 = now();
        ds_measurement_t r;
        if (ds_kernel_measure(kernel, &cfg, &r) != DS_OK)
            return fail(text);
        double t2 = now();
        size_t bytes = ds_kernel_bytes(kernel);
        ds_kernel_destroy(kernel);
        prepare_total += t1 - t0;
        measure_total += t2 - t1;
        busy += (double)e->count / (double)gpus * r.cost.mean_s;
        count++;
        if (verbose)
            printf("  %4d %10.1f %10.3f %6lld %-9s %9.1f  %s\n", count, (t1 - t0) * 1e3,
                   r.cost.median_s * 1e3, (long long)r.cost.repetitions,
                   ds_stop_reason_name(r.stop), (double)bytes / 1048576.0, text);
    }
    double total = now() - start;
    printf("# %d unique compute events: %.1f s in all (prepare %.1f s, measure %.1f s)\n", count,
           total, prepare_total, measure_total);
    printf("# compute per device per iteration on this device (sum of count x mean / devices): "
           "%.1f s\n",
           busy);
    ds_event_set_destroy(set);
    ds_model_destroy(model);
    return 0;
}

static void usage(FILE *out)
{
    fprintf(out, "usage: bench_backend [--backend auto|cpu|cuda] [--gemm MxNxK] [--budget S]\n"
                 "                     [--model M --strategy S --target-gpus N] [--no-events] "
                 "[--quiet]\n");
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    static const struct option options[] = {
        {"backend", required_argument, NULL, 'b'},  {"gemm", required_argument, NULL, 'g'},
        {"budget", required_argument, NULL, 't'},   {"model", required_argument, NULL, 'm'},
        {"strategy", required_argument, NULL, 's'}, {"target-gpus", required_argument, NULL, 'n'},
        {"no-events", no_argument, NULL, 'e'},      {"quiet", no_argument, NULL, 'q'},
        {"help", no_argument, NULL, 'h'},           {NULL, 0, NULL, 0}};
    ds_backend_kind_t kind = ds_backend_kind_default();
    long long m = 2048, n = 1024, k = 1024;
    double budget = 5.0;
    const char *model = "gpt2-medium", *strategy = "dp=64,tp=4,pp=4,mbs=2,gbs=1024,schedule=1f1b";
    long long gpus = 1024;
    int events = 1, verbose = 1, c, code = 0;
    while ((c = getopt_long(argc, argv, "", options, NULL)) != -1) {
        switch (c) {
        case 'b':
            if (ds_backend_kind_parse(optarg, &kind) != DS_OK)
                code = 2;
            break;
        case 'g':
            if (sscanf(optarg, "%lldx%lldx%lld", &m, &n, &k) != 3 || m < 1 || n < 1 || k < 1)
                code = 2;
            break;
        case 't': budget = atof(optarg); break;
        case 'm': model = optarg; break;
        case 's': strategy = optarg; break;
        case 'n': gpus = atoll(optarg); break;
        case 'e': events = 0; break;
        case 'q': verbose = 0; break;
        case 'h':
            usage(stdout);
            MPI_Finalize();
            return 0;
        default: code = 2; break;
        }
    }
    if (code != 0) {
        usage(stderr);
        MPI_Finalize();
        return code;
    }
    ds_backend_t *b = NULL;
    if (ds_backend_open(kind, MPI_COMM_WORLD, &b) != DS_OK) {
        code = fail("backend");
    } else {
        char host[64] = "";
        gethostname(host, sizeof(host) - 1);
        printf("# bench_backend, dsmpi %s, host %s\n# device: %s\n# placement: %s\n",
               DS_VERSION_STRING, host, ds_backend_fingerprint(b), ds_backend_placement(b));
        code = bench_gemm(b, m, n, k, budget);
        if (code == 0 && events)
            code = bench_events(b, model, strategy, gpus, verbose);
        ds_backend_close(b);
    }
    MPI_Finalize();
    return code;
}
