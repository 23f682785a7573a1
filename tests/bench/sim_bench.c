/*
 * Simulation speed on GPT-3 175B (dp=16 tp=8 pp=8 mbs=1 gbs=1536 on 1024
 * H100s, 8 per node): symmetric mode at layer and stage level (time per
 * strategy, p50/p99, strategies/s, events/s), full mode on 1024 and 4096
 * devices (time, peak resident memory), and a strategy space simulated one
 * strategy after the other as a search would.  Costs are the roofline
 * estimates of the event set, put in a cost table first (as a profile
 * database would be); building that table is not timed.
 *
 *   sim_bench CASE [repeats]
 *   CASE: sym-layer sym-stage full-1024 full-4096 space-layer space-stage
 */
#include <dsmpi/dsmpi.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void die(const char *what)
{
    fprintf(stderr, "sim_bench: %s: %s\n", what, ds_last_error());
    exit(1);
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double peak_rss_MiB(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_maxrss / 1024.0;
}

/* Adds the roofline estimate of every event of `s` to `costs`. */
static void add_costs(const ds_model_t *model, const ds_strategy_t *s, const ds_cluster_t *cluster,
                      ds_cost_table_t *costs)
{
    ds_event_set_t *set = NULL;
    if (ds_events_generate(model, s, cluster, &set) != DS_OK)
        die("events");
    for (size_t i = 0; i < ds_event_set_size(set); i++) {
        const ds_event_t *e = ds_event_set_at(set, i);
        ds_cost_t c = {e->estimated_s, e->estimated_s, e->estimated_s, e->estimated_s, 0,
                       DS_PROV_ASSUMED};
        if (ds_cost_table_set(costs, &e->key, &c) != DS_OK)
            die("cost table");
    }
    ds_event_set_destroy(set);
}

static void resolve(const ds_model_t *model, const char *text, int64_t gpus, ds_strategy_t *s,
                    ds_cluster_t *cluster)
{
    if (ds_cluster_init(cluster, gpus / 8, 8, "h100-sxm") != DS_OK)
        die("cluster");
    ds_strategy_init(s);
    if (ds_strategy_parse(text, s) != DS_OK || ds_strategy_resolve(s, model, gpus, 8) != DS_OK)
        die(text);
}

static void one_strategy(const ds_model_t *model, const char *text, int64_t gpus,
                         ds_sim_mode_t mode, ds_sim_granularity_t granularity, int repeats,
                         const char *name)
{
    ds_strategy_t s;
    ds_cluster_t cluster;
    resolve(model, text, gpus, &s, &cluster);
    ds_cost_table_t *costs = NULL;
    ds_sim_t *sim = NULL;
    if (ds_cost_table_create(&costs) != DS_OK || ds_sim_create(&sim) != DS_OK)
        die("create");
    add_costs(model, &s, &cluster, costs);
    ds_sim_options_t o;
    ds_sim_options_init(&o);
    o.mode = mode;
    o.granularity = granularity;
    o.keep_timeline = mode == DS_SIM_FULL; /* predict's path: per-device numbers */
    double *t = calloc((size_t)repeats, sizeof(*t));
    double rss_before = peak_rss_MiB();
    ds_sim_summary_t sum;
    for (int i = 0; i < repeats; i++) {
        double t0 = now();
        if (ds_sim_run(sim, model, &s, &cluster, costs, &o) != DS_OK)
            die("run");
        t[i] = now() - t0;
    }
    ds_sim_get_summary(sim, &sum);
    double total = 0, first = t[0];
    for (int i = 0; i < repeats; i++)
        total += t[i];
    qsort(t, (size_t)repeats, sizeof(*t), by_value);
    double p50 = t[repeats / 2], p99 = t[(int)(0.99 * (repeats - 1))];
    printf("%-12s %s on %lld GPUs: %lld events (%lld simulated devices), first run %.3f ms, "
           "p50 %.3f ms, p99 %.3f ms, min %.3f ms, %.0f strategies/s (1/p50), %.0f (runs/total), "
           "%.3g events/s at p50, iteration %.4f s, peak RSS %.0f MiB (%.0f before the runs)\n",
           name, text, (long long)gpus, (long long)sum.graph_nodes,
           (long long)sum.simulated_devices, first * 1e3, p50 * 1e3, p99 * 1e3, t[0] * 1e3,
           1.0 / p50, repeats / total, (double)sum.graph_nodes / p50, sum.iteration_s,
           peak_rss_MiB(), rss_before);
    free(t);
    ds_sim_destroy(sim);
    ds_cost_table_destroy(costs);
}

/* Every resolvable strategy of a small space for GPT-3 on 1024 GPUs. */
static void space(const ds_model_t *model, ds_sim_granularity_t granularity, int repeats,
                  const char *name)
{
    static const int tps[] = {1, 2, 4, 8};
    static const int pps[] = {1, 2, 4, 8, 16, 32};
    static const int mbss[] = {1, 2, 4};
    char texts[1024][128];
    ds_strategy_t strategies[1024];
    int n = 0;
    ds_cluster_t cluster;
    ds_cost_table_t *costs = NULL;
    if (ds_cost_table_create(&costs) != DS_OK)
        die("create");
    ds_log_set_level(DS_LOG_ERROR);
    for (size_t a = 0; a < 4; a++)
        for (size_t b = 0; b < 6; b++)
            for (size_t c = 0; c < 3; c++)
                for (int sched = 0; sched < 2; sched++)
                    for (int sp = 0; sp < 2; sp++)
                        for (int zero = 0; zero < 2; zero++) {
                            char *t = texts[n];
                            snprintf(t, 128, "tp=%d,pp=%d,mbs=%d,gbs=1536,%s%s%s", tps[a], pps[b],
                                     mbss[c], sched ? "vpp=2" : "schedule=1f1b", sp ? ",sp" : "",
                                     zero ? ",zero=1" : "");
                            if (ds_cluster_init(&cluster, 128, 8, "h100-sxm") != DS_OK)
                                die("cluster");
                            ds_strategy_init(&strategies[n]);
                            if (ds_strategy_parse(t, &strategies[n]) != DS_OK ||
                                ds_strategy_resolve(&strategies[n], model, 1024, 8) != DS_OK)
                                continue;
                            add_costs(model, &strategies[n], &cluster, costs);
                            n++;
                        }
    ds_sim_t *sim = NULL;
    if (ds_sim_create(&sim) != DS_OK)
        die("create");
    ds_sim_options_t o;
    ds_sim_options_init(&o);
    o.granularity = granularity;
    o.keep_timeline = 0;
    double *t = calloc((size_t)n * repeats, sizeof(*t));
    double best = 1e30, total = 0;
    int best_i = -1, runs = 0, fits = 0;
    for (int r = 0; r < repeats; r++)
        for (int i = 0; i < n; i++) {
            double t0 = now();
            if (ds_sim_run(sim, model, &strategies[i], &cluster, costs, &o) != DS_OK)
                die(texts[i]);
            double dt = now() - t0;
            t[runs++] = dt;
            total += dt;
            ds_sim_summary_t sum;
            ds_sim_get_summary(sim, &sum);
            fits += r == 0 && !sum.oom;
            if (!sum.oom && sum.iteration_s < best) {
                best = sum.iteration_s;
                best_i = i;
            }
        }
    qsort(t, (size_t)runs, sizeof(*t), by_value);
    printf("%-12s %d strategies of GPT-3 175B on 1024 GPUs x %d: %.0f strategies/s (runs/total), "
           "%.0f (1/p50), p50 %.3f ms, p99 %.3f ms, total %.3f s; %d fit in memory, the fastest of "
           "them %s (%.3f s)\n",
           name, n, repeats, runs / total, 1.0 / t[runs / 2], t[runs / 2] * 1e3,
           t[(int)(0.99 * (runs - 1))] * 1e3, total, fits, best_i >= 0 ? texts[best_i] : "none",
           best);
    free(t);
    ds_sim_destroy(sim);
    ds_cost_table_destroy(costs);
}

int main(int argc, char **argv)
{
    const char *what = argc > 1 ? argv[1] : "sym-layer";
    int repeats = argc > 2 ? atoi(argv[2]) : 0;
    ds_model_t *model = NULL;
    if (ds_model_load("gpt3-175b", &model) != DS_OK)
        die("model");
    const char *gpt3 = "dp=16,tp=8,pp=8,mbs=1,gbs=1536,schedule=1f1b";
    if (strcmp(what, "sym-layer") == 0)
        one_strategy(model, gpt3, 1024, DS_SIM_SYMMETRIC, DS_SIM_LAYER, repeats ? repeats : 200,
                     what);
    else if (strcmp(what, "sym-stage") == 0)
        one_strategy(model, gpt3, 1024, DS_SIM_SYMMETRIC, DS_SIM_STAGE, repeats ? repeats : 1000,
                     what);
    else if (strcmp(what, "full-1024") == 0)
        one_strategy(model, gpt3, 1024, DS_SIM_FULL, DS_SIM_LAYER, repeats ? repeats : 5, what);
    else if (strcmp(what, "full-4096") == 0)
        one_strategy(model, "dp=64,tp=8,pp=8,mbs=1,gbs=1536,schedule=1f1b", 4096, DS_SIM_FULL,
                     DS_SIM_LAYER, repeats ? repeats : 3, what);
    else if (strcmp(what, "space-layer") == 0)
        space(model, DS_SIM_LAYER, repeats ? repeats : 1, what);
    else if (strcmp(what, "space-stage") == 0)
        space(model, DS_SIM_STAGE, repeats ? repeats : 3, what);
    else {
        fprintf(stderr,
                "sim_bench: case '%s' (accepted: sym-layer, sym-stage, full-1024, full-4096, "
                "space-layer, space-stage)\n",
                what);
        return 2;
    }
    ds_model_destroy(model);
    return 0;
}
