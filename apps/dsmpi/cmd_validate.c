/* dsmpi validate: runs real training iterations of a strategy on this
 * allocation with the executor and compares them with the simulator's
 * prediction for the allocation itself as the target. */
#include "commands.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum {
    OPT_REPEATS = 512,
    OPT_RETRIES,
    OPT_MAX_ERROR,
    OPT_ALL,
    OPT_MICROBATCHES,
    OPT_COSTS,
    OPT_COMM_COSTS,
    OPT_NO_OVERLAP_MODEL,
    OPT_ABLATION,
    OPT_MAX_FOREIGN,
    OPT_PROFILE_BUDGET,
    OPT_COST_TABLE_OUT,
    OPT_PROFILE_DB,
    OPT_WAIT_QUIET,
    OPT_HELP,
};

#define MAX_MB_COUNTS 16
#define MAX_RANKS 4096
#define MAX_CASES 256

static void help(void)
{
    printf("usage: mpirun -n N dsmpi validate --model M --strategy S [options]\n"
           "       mpirun -n N dsmpi validate --model M --all [--microbatches 2,4,8] [options]\n\n"
           "Runs real training iterations of the strategy on this allocation (dp x tp x pp = N\n"
           "ranks) with the executor, and compares them with dsmpi's prediction for the\n"
           "allocation itself as the target: iteration time, per-rank busy, compute and idle\n"
           "time, forward/backward time per micro-batch and stage, the pipeline bubble.  The\n"
           "costs the prediction uses are measured here first (never taken from the runs it\n"
           "is compared with).  Every case runs --repeats times; the runs' spread is printed\n"
           "beside the error ('noise' when the error is inside it).  Runs during which other\n"
           "processes used more than --max-foreign of a rank's core are marked noisy and\n"
           "repeated up to --retries times.  Formulas: include/dsmpi/exec.h.\n\n"
           "Exit status: 0, or 1 when the iteration-time error of a case (of the mean\n"
           "absolute error with --all) exceeds --max-error.\n\n");
    inputs_print_help(stdout);
    printf(
        "Validation:\n"
        "  --iterations K           measured iterations per run (default 5)\n"
        "  --warmup W               iterations run before them (default 2)\n"
        "  --repeats R              runs per case (default 3)\n"
        "  --retries N              extra runs allowed to replace noisy ones (default 3)\n"
        "  --max-foreign F          a run is noisy above this foreign CPU share (default 0.05),\n"
        "                           or when a speed probe before or after it (a small GEMM on\n"
        "                           every rank) ran more than DS_EXEC_MAX_SLOWDOWN slower than\n"
        "                           the best probe of the session (time a hypervisor took)\n"
        "  --wait-quiet S           before measuring costs and before each run, wait up to S\n"
        "                           seconds for a quiet second and a probe as fast as the best\n"
        "  --max-error PCT          iteration-time error allowed, percent (default 5)\n"
        "  --microbatches LIST      micro-batches per iteration when gbs is not given\n"
        "                           (default 4; with --all every count of the list)\n"
        "  --all                    every strategy of N ranks: dp x tp x pp, with pp > 1 gpipe,\n"
        "                           1f1b and interleaved (vpp=2) where the layers allow\n"
        "Costs (ablations):\n"
        "  (default)                measured here for the validation: every layer pass as a\n"
        "                           unit in rotating copies (caches as cold as training leaves\n"
        "                           them), on every rank at once, in rounds; TP collectives\n"
        "                           right after their producer kernel, on the real groups\n"
        "  --profile-db FILE.h5     the profiler's database instead (dsmpi profile measures what\n"
        "                           it lacks first, then predict's costs: the communication\n"
        "                           model fitted on its samples)\n"
        "  --costs layer|operator   compute costs from layer passes (default) or operators alone\n"
        "  --comm-costs in-situ|isolated  TP collectives after their producer (default) or alone\n"
        "  --ablation               also predict from costs measured each other way (operators\n"
        "                           alone, collectives alone, warm caches, each rank its share,\n"
        "                           one round, the database), and with parts of the model off\n"
        "                           (bucket overlap free, TP members arriving together, every\n"
        "                           device as fast as the mean); print every variant's error\n"
        "  --profile-budget S       seconds spent measuring one event at most (default 0.3)\n"
        "  --cost-table-out FILE    write the measured costs (text cost table)\n"
        "  --backend cpu|cuda|auto  device backend (default: DS_BACKEND)\n"
        "Output:\n"
        "  --trace FILE.json        Perfetto trace of the last measured iteration (one case)\n");
}

typedef struct options {
    ds_exec_options_t exec;
    int repeats, retries;
    double max_error;
    bool all, ablation;
    int64_t mb_counts[MAX_MB_COUNTS];
    int num_mb_counts;
    ds_exec_cost_options_t costs;
    double budget;
    const char *profile_db;
    double wait_quiet;
    ds_backend_kind_t backend;
    const char *cost_table_out;
    const char *trace;
} options_t;

/* Prediction variants compared with the same runs: where the costs come
 * from and how they were measured.  Variant 0 is the headline: the
 * validation's own measurement, or the profile database with --profile-db. */
typedef enum variant {
    V_IN_SITU = 0,       /* layer passes in rotating copies on every rank at once, in rounds;
                            TP collectives after their producer */
    V_OPERATOR = 1,      /* every operator alone */
    V_ISOLATED = 2,      /* TP collectives alone */
    V_WARM = 3,          /* one copy of a layer pass: caches as warm as a tight loop leaves them */
    V_SHARE = 4,         /* each rank measures its share of the passes */
    V_ONE_ROUND = 5,     /* one round */
    V_DATABASE = 6,      /* the profiler's database (--profile-db) */
    V_FREE_OVERLAP = 7,  /* the headline's costs, bucket overlap with the backward free */
    V_NO_SKEW = 8,       /* the headline's costs, TP members arriving together */
    V_EQUAL_DEVICES = 9, /* the headline's costs, every device as fast as the mean */
    V_COUNT
} variant_t;

static const char *const variant_names[V_COUNT] = {
    "in-situ",   "operators-alone", "collectives-alone", "warm-caches", "rank-shares",
    "one-round", "profile-db",      "overlap-free",      "no-skew",     "equal-devices"};

/* Variants predicted from the headline's costs with the simulator changed. */
static bool model_variant(variant_t v)
{
    return v == V_FREE_OVERLAP || v == V_NO_SKEW || v == V_EQUAL_DEVICES;
}

typedef struct result {
    char strategy[DS_STRATEGY_TEXT_MAX];
    int64_t microbatches;
    ds_exec_comparison_t *cmp[V_COUNT];
    ds_exec_summary_t first;
    double costs_s;
    ds_exec_load_t costs_load; /* while the costs were measured (the last variant) */
} result_t;

/* "2,4,8" into counts. */
static int parse_counts(const app_t *app, options_t *o, const char *arg)
{
    o->num_mb_counts = 0;
    const char *p = arg;
    while (*p != '\0') {
        char *end;
        long long v = strtoll(p, &end, 10);
        if (end == p || v < 1 || v > 100000 || o->num_mb_counts == MAX_MB_COUNTS)
            return app_usage_error(app,
                                   "--microbatches '%s' (accepted: up to %d counts of 1..100000, "
                                   "e.g. 2,4,8)",
                                   arg, MAX_MB_COUNTS);
        o->mb_counts[o->num_mb_counts++] = v;
        p = *end == ',' ? end + 1 : end;
        if (*end != ',' && *end != '\0')
            return app_usage_error(app, "--microbatches '%s' (accepted: e.g. 2,4,8)", arg);
    }
    return o->num_mb_counts > 0 ? APP_EXIT_OK
                                : app_usage_error(app, "--microbatches '%s' is empty", arg);
}

static int parse_positive(const app_t *app, const char *name, const char *arg, double min,
                          double max, double *out)
{
    double v;
    if (ds_parse_double(arg, name, min, max, &v) != DS_OK)
        return app_usage_error(app, "--%s '%s' (accepted: a number from %g to %g)", name, arg, min,
                               max);
    *out = v;
    return APP_EXIT_OK;
}

/* ---- one case ----------------------------------------------------------------------------------
 */

typedef struct context {
    const app_t *app;
    inputs_t *in;
    options_t *o;
    ds_backend_t *backend;
    ds_cost_table_t *costs[V_COUNT];
    variant_t order[V_COUNT]; /* variants computed, the headline first */
    double best_probe;        /* the fastest speed probe of the session (seconds) */
    double *factors[V_COUNT]; /* each rank's speed factor measured with the variant's costs */
    int num_variants;
    ds_sim_t *sim;
    int64_t ranks;
    int gpus_per_node;
} context_t;

static void saw_probe(context_t *cx, const ds_exec_load_t *load)
{
    if (load->probe_s > 0.0 && (cx->best_probe == 0.0 || load->probe_s < cx->best_probe))
        cx->best_probe = load->probe_s;
}

/* Waits (up to --wait-quiet seconds) for a second without foreign load and
 * a speed probe within DS_EXEC_MAX_SLOWDOWN of the best.  Collective. */
static ds_status_t wait_quiet(context_t *cx)
{
    double start = MPI_Wtime();
    while (cx->o->wait_quiet > 0.0) {
        ds_exec_options_t rules = cx->o->exec;
        rules.reference_probe_s = cx->best_probe;
        ds_exec_load_t load;
        ds_status_t status = ds_exec_probe(cx->backend, 1.0, &rules, &load);
        if (status != DS_OK)
            return status;
        saw_probe(cx, &load);
        /* Every rank decides as rank 0 does (its clock differs a little). */
        int go = !load.noisy || MPI_Wtime() - start >= cx->o->wait_quiet;
        MPI_Bcast(&go, 1, MPI_INT, 0, MPI_COMM_WORLD);
        if (go)
            return DS_OK;
    }
    return DS_OK;
}

static ds_status_t copy_costs(const ds_cost_table_t *from, ds_cost_table_t *to)
{
    for (size_t i = 0; i < ds_cost_table_size(from); i++) {
        const ds_event_key_t *key;
        const ds_cost_t *cost;
        ds_cost_table_at(from, i, &key, &cost);
        if (ds_cost_table_find(to, key) == NULL) {
            ds_status_t status = ds_cost_table_set(to, key, cost);
            if (status != DS_OK)
                return status;
        }
    }
    return DS_OK;
}

/* Measures what the variant's table lacks for `s`, again while the machine
 * was noisy and retries are left. */
static ds_status_t measure_variant(context_t *cx, const ds_strategy_t *s, variant_t v,
                                   ds_exec_load_t *load_p)
{
    ds_exec_cost_options_t co = cx->o->costs;
    switch (v) {
    case V_OPERATOR: co.compute = DS_EXEC_COSTS_OPERATOR; break;
    case V_ISOLATED: co.comm_in_situ = 0; break;
    case V_WARM: co.rotate = 0; break;
    case V_SHARE: co.together = 0; break;
    case V_ONE_ROUND: co.rounds = 1; break;
    case V_IN_SITU:
    case V_DATABASE:
    case V_FREE_OVERLAP:
    case V_NO_SKEW:
    case V_EQUAL_DEVICES:
    case V_COUNT: break;
    }
    co.max_foreign = cx->o->exec.max_foreign;
    ds_status_t status = DS_OK;
    double factors[MAX_RANKS];
    for (int attempt = 0;; attempt++) {
        ds_cost_table_t *fresh = NULL;
        if ((status = wait_quiet(cx)) != DS_OK)
            return status;
        co.reference_probe_s = cx->best_probe;
        status = ds_cost_table_create(&fresh);
        if (status == DS_OK)
            status = copy_costs(cx->costs[v], fresh);
        if (status == DS_OK)
            status = ds_exec_measure_costs(cx->backend, cx->in->model, s, &cx->in->cluster, &co,
                                           fresh, load_p, factors);
        if (status == DS_OK)
            saw_probe(cx, load_p);
        bool again = status == DS_OK && load_p->noisy && attempt < cx->o->retries;
        if (status == DS_OK && !again) {
            status = copy_costs(fresh, cx->costs[v]);
            /* New factors when this measurement had units to compare the devices on. */
            bool changed = false;
            for (int64_t r = 0; r < cx->ranks; r++)
                changed |= factors[r] != 1.0;
            for (int64_t r = 0; r < cx->ranks && changed; r++)
                cx->factors[v][r] = factors[r];
        }
        ds_cost_table_destroy(fresh);
        if (!again)
            return status;
        if (cx->app->rank == 0)
            fprintf(stderr,
                    "dsmpi validate: costs measured while other processes took %.1f%% of a core "
                    "(steal %.1f%%, probe %.1f%% slower than the best): measuring again\n",
                    100.0 * load_p->foreign_cpu, 100.0 * load_p->steal,
                    100.0 * (load_p->probe_s / cx->best_probe - 1.0));
    }
}

/* The costs of `s`'s events on the allocation from the profile database:
 * rank 0 reads and assembles them, every rank gets the table. */
static ds_status_t database_costs(context_t *cx, const ds_strategy_t *s, ds_cost_table_t *table)
{
    ds_status_t status = DS_OK;
    char *text = NULL;
    size_t size = 0;
    long long length = 0;
    if (cx->app->rank == 0) {
        ds_profile_db_t *db = NULL;
        ds_event_set_t *events = NULL;
        FILE *mem = open_memstream(&text, &size);
        status = mem != NULL ? DS_OK : ds_set_error(DS_ERR_NO_MEMORY, "out of memory");
        if (status == DS_OK)
            status =
                ds_profile_db_open(MPI_COMM_NULL, cx->o->profile_db, DS_PROFILE_DB_READ_ONLY, &db);
        if (status == DS_OK)
            status = ds_events_generate(cx->in->model, s, &cx->in->cluster, &events);
        if (status == DS_OK) {
            ds_cost_sources_t sources = {db, NULL, NULL, 0};
            ds_cost_report_t report;
            status = ds_costs_assemble(&sources, events, &cx->in->cluster, table, &report);
        }
        if (status == DS_OK)
            status = ds_cost_table_write_text(table, mem);
        if (mem != NULL)
            fclose(mem);
        ds_event_set_destroy(events);
        ds_profile_db_close(db);
        length = status == DS_OK ? (long long)size : -1;
    }
    MPI_Bcast(&length, 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD);
    if (length < 0) {
        free(text);
        return cx->app->rank == 0
                   ? status
                   : ds_set_error(DS_ERR_IO, "rank 0 could not read '%s'", cx->o->profile_db);
    }
    if (cx->app->rank != 0) {
        text = calloc((size_t)length + 1, 1);
        if (text == NULL)
            return ds_set_error(DS_ERR_NO_MEMORY, "out of memory");
    }
    MPI_Bcast(text, (int)length, MPI_CHAR, 0, MPI_COMM_WORLD);
    if (cx->app->rank != 0)
        status = ds_cost_table_parse(table, text, cx->o->profile_db);
    free(text);
    return status;
}

static ds_status_t predict(context_t *cx, const ds_strategy_t *s, variant_t v)
{
    ds_sim_options_t so;
    ds_sim_options_init(&so);
    so.mode = DS_SIM_FULL;
    ds_sim_slow_device_t devices[MAX_RANKS];
    bool factors = v != V_EQUAL_DEVICES;
    if (v == V_FREE_OVERLAP)
        so.overlap_interference = 0;
    if (v == V_NO_SKEW)
        so.collective_skew = 0;
    if (model_variant(v))
        v = cx->order[0];
    /* Devices at their measured speed (this allocation is the target). */
    for (int64_t r = 0; r < cx->ranks && factors; r++)
        devices[r] = (ds_sim_slow_device_t){r, cx->factors[v][r]};
    so.slow_devices = factors ? devices : NULL;
    so.num_slow_devices = factors ? (size_t)cx->ranks : 0;
    return ds_sim_run(cx->sim, cx->in->model, s, &cx->in->cluster, cx->costs[v], &so);
}

static ds_status_t run_case(context_t *cx, const ds_strategy_t *s, result_t *res)
{
    ds_status_t status = DS_OK;
    ds_exec_t *exec = NULL;
    options_t *o = cx->o;
    memset(res, 0, sizeof(*res));
    ds_strategy_format(s, res->strategy, sizeof(res->strategy));
    res->microbatches = ds_strategy_num_microbatches(s);
    double t0 = MPI_Wtime();
    for (int i = 0; i < cx->num_variants; i++) {
        variant_t v = cx->order[i];
        if (model_variant(v))
            continue; /* the headline's costs */
        ds_exec_load_t load;
        memset(&load, 0, sizeof(load));
        status = v == V_DATABASE ? database_costs(cx, s, cx->costs[v])
                                 : measure_variant(cx, s, v, &load);
        if (i == 0)
            res->costs_load = load;
        if (status != DS_OK)
            return status;
    }
    res->costs_s = MPI_Wtime() - t0;
    if ((status = ds_exec_create(cx->backend, cx->in->model, s, &exec)) != DS_OK)
        return status;
    /* Runs until `repeats` quiet ones, or the retries are spent. */
    int quiet = 0;
    for (int attempt = 0; attempt < o->repeats + o->retries && quiet < o->repeats; attempt++) {
        if ((status = wait_quiet(cx)) != DS_OK)
            goto out;
        o->exec.reference_probe_s = cx->best_probe;
        if ((status = ds_exec_run(exec, &o->exec)) != DS_OK)
            goto out;
        ds_exec_summary_t sum;
        (void)ds_exec_get_summary(exec, ds_exec_run_count(exec) - 1, &sum);
        saw_probe(cx, &sum.load);
        if (attempt == 0)
            res->first = sum;
        if (!sum.load.noisy)
            quiet++;
        else if (cx->app->rank == 0)
            fprintf(stderr,
                    "dsmpi validate: %s: run %d noisy (other processes took %.1f%% of a core, "
                    "steal %.1f%%, probe %.1f%% slower than the best)\n",
                    res->strategy, attempt + 1, 100.0 * sum.load.foreign_cpu,
                    100.0 * sum.load.steal, 100.0 * (sum.load.probe_s / cx->best_probe - 1.0));
    }
    for (int i = 0; i < cx->num_variants; i++) {
        variant_t v = cx->order[i];
        if ((status = predict(cx, s, v)) != DS_OK)
            goto out;
        if ((status = ds_exec_compare(exec, cx->sim, &res->cmp[i])) != DS_OK)
            goto out;
    }
    if (o->trace != NULL) { /* the last quiet run, or the last one */
        size_t pick = ds_exec_run_count(exec) - 1;
        for (size_t r = 0; r < ds_exec_run_count(exec); r++) {
            ds_exec_summary_t sum;
            if (ds_exec_get_summary(exec, r, &sum) == DS_OK && !sum.load.noisy)
                pick = r;
        }
        status = ds_exec_write_trace(exec, pick, o->trace);
    }
out:
    ds_exec_destroy(exec);
    return status;
}

static void free_result(result_t *r)
{
    for (int v = 0; v < V_COUNT; v++)
        ds_exec_comparison_free(r->cmp[v]);
    memset(r, 0, sizeof(*r));
}

/* ---- printing
 * -------------------------------------------------------------------------------------- */

static const char *noise_word(const ds_exec_figure_t *f)
{
    return f->within_noise ? "noise" : "";
}

static void print_preamble(const context_t *cx, const result_t *res, size_t cases)
{
    const inputs_t *in = cx->in;
    ds_model_info_t info;
    ds_model_get_info(in->model, &info);
    output_preamble(cx->app, stdout);
    printf("# model: %s (%.3g M parameters, %d layers, seq %d, %s)\n", info.name,
           info.num_parameters / 1e6, info.num_layers, info.seq_len, ds_dtype_name(info.dtype));
    printf("# allocation: %lld ranks on %lld node(s), %s backend: %s, %s\n", (long long)cx->ranks,
           (long long)in->cluster.nodes, ds_backend_kind_name(ds_backend_kind(cx->backend)),
           ds_backend_device_name(cx->backend),
           res->first.load.pinned ? "every rank pinned to a core" : "ranks not pinned");
    if (cx->o->profile_db != NULL)
        printf("# prediction: the allocation as the target, full mode, layer level; costs from the "
               "profile database\n#   %s (what it lacked profiled first), never from the runs "
               "compared\n",
               cx->o->profile_db);
    else
        printf("# prediction: the allocation as the target, full mode, layer level; costs measured "
               "here (%s compute,\n#   %s TP collectives), never from the runs compared\n",
               cx->o->costs.compute == DS_EXEC_COSTS_OPERATOR ? "operator" : "layer-pass",
               cx->o->costs.comm_in_situ ? "in-situ" : "isolated");
    printf("# ground truth: %d runs of %d iterations after %d warm-up per case; %zu case(s)\n",
           cx->o->repeats, cx->o->exec.iterations, cx->o->exec.warmup, cases);
}

static void print_case(const context_t *cx, const result_t *res)
{
    const ds_exec_comparison_t *c = res->cmp[0];
    print_preamble(cx, res, 1);
    printf("# strategy: %s (%lld micro-batches)\n", res->strategy, (long long)res->microbatches);
    printf("# load: foreign cpu %.1f%%, steal %.1f%%, loadavg %.2f, speed probe %.1f us (best "
           "%.1f); %zu run(s) compared, %zu noisy\n",
           100.0 * c->load.foreign_cpu, 100.0 * c->load.steal, c->load.loadavg_1m,
           1e6 * c->load.probe_s, 1e6 * cx->best_probe, c->runs, c->noisy_runs);
    printf("# costs: measured in %.1f s, foreign cpu %.1f%%, steal %.1f%%, speed probe %.1f us%s\n",
           res->costs_s, 100.0 * res->costs_load.foreign_cpu, 100.0 * res->costs_load.steal,
           1e6 * res->costs_load.probe_s, res->costs_load.noisy ? " (NOISY)" : "");
    printf("# device speed factors (time of the same layer passes over the ranks' mean):");
    for (int64_t r = 0; r < cx->ranks && r < 16; r++)
        printf(" %.4f", cx->factors[cx->order[0]][r]);
    printf("%s\n", cx->ranks > 16 ? " ..." : "");
    printf("#\n# %-18s %12s %12s %8s %8s %6s\n", "quantity", "predicted", "measured", "spread",
           "error", "");
    printf("# %-18s %12s %12s %8s %8s %6s\n", "", "(ms)", "(ms)", "(%)", "(%)", "");
    printf("  %-18s %12.3f %12.3f %8.2f %8.2f %6s\n", "iteration", 1e3 * c->iteration.predicted,
           1e3 * c->iteration.measured, 100.0 * c->iteration.spread, 100.0 * c->iteration.error,
           noise_word(&c->iteration));
    printf("  %-18s %12.2f %12.2f %8.2f %8.2f %6s   (percent of the iteration)\n", "bubble",
           100.0 * c->bubble.predicted, 100.0 * c->bubble.measured, 100.0 * c->bubble.spread,
           100.0 * c->bubble.error, noise_word(&c->bubble));
    printf("#\n# per rank (ms per iteration; busy = compute + exposed communication)\n");
    printf("# %4s %5s %3s %3s %10s %10s %7s %10s %10s %7s %10s %10s %10s %10s\n", "rank", "stage",
           "tp", "dp", "busy_pred", "busy_meas", "error", "comp_pred", "comp_meas", "error",
           "expo_pred", "expo_meas", "idle_pred", "idle_meas");
    printf("# %4s %5s %3s %3s %10s %10s %7s %10s %10s %7s %10s %10s %10s %10s\n", "", "", "", "",
           "(ms)", "(ms)", "(%)", "(ms)", "(ms)", "(%)", "(ms)", "(ms)", "(ms)", "(ms)");
    for (size_t i = 0; i < c->num_devices; i++) {
        const ds_exec_device_figures_t *d = &c->devices[i];
        printf("  %4lld %5d %3d %3d %10.3f %10.3f %7.2f %10.3f %10.3f %7.2f %10.3f %10.3f %10.3f "
               "%10.3f\n",
               (long long)d->rank, d->coords.pp, d->coords.tp, d->coords.dp,
               1e3 * d->busy.predicted, 1e3 * d->busy.measured, 100.0 * d->busy.error,
               1e3 * d->compute.predicted, 1e3 * d->compute.measured, 100.0 * d->compute.error,
               1e3 * d->exposed.predicted, 1e3 * d->exposed.measured, 1e3 * d->idle.predicted,
               1e3 * d->idle.measured);
    }
    printf("#\n# per stage: one forward and one backward of a micro-batch (every chunk), mean over "
           "micro-batches\n");
    printf("# %5s %10s %10s %7s %10s %10s %7s\n", "stage", "fwd_pred", "fwd_meas", "error",
           "bwd_pred", "bwd_meas", "error");
    printf("# %5s %10s %10s %7s %10s %10s %7s\n", "", "(ms)", "(ms)", "(%)", "(ms)", "(ms)", "(%)");
    for (size_t i = 0; i < c->num_stages; i++) {
        const ds_exec_stage_figures_t *st = &c->stages[i];
        printf("  %5d %10.3f %10.3f %7.2f %10.3f %10.3f %7.2f\n", st->stage,
               1e3 * st->forward.predicted, 1e3 * st->forward.measured, 100.0 * st->forward.error,
               1e3 * st->backward.predicted, 1e3 * st->backward.measured,
               100.0 * st->backward.error);
    }
    printf("# micro-batch start/end times: mean |predicted - measured| = %.2f%% of the iteration\n",
           100.0 * c->microbatch_time_error);
    printf(
        "# busy time: mean |error| %.2f%%, max %.2f%%; compute: mean |error| %.2f%%, max %.2f%%\n",
        100.0 * c->busy_mean_abs_error, 100.0 * c->busy_max_abs_error,
        100.0 * c->compute_mean_abs_error, 100.0 * c->compute_max_abs_error);
    if (cx->o->ablation) {
        printf("#\n# ablation: the same runs against predictions from other costs\n");
        printf("# %-18s %12s %8s %10s %10s\n", "costs", "predicted", "error", "busy_mean",
               "busy_max");
        printf("# %-18s %12s %8s %10s %10s\n", "", "(ms)", "(%)", "(%)", "(%)");
        for (int i = 0; i < cx->num_variants; i++)
            if (res->cmp[i] != NULL)
                printf("  %-18s %12.3f %8.2f %10.2f %10.2f\n", variant_names[cx->order[i]],
                       1e3 * res->cmp[i]->iteration.predicted, 100.0 * res->cmp[i]->iteration.error,
                       100.0 * res->cmp[i]->busy_mean_abs_error,
                       100.0 * res->cmp[i]->busy_max_abs_error);
    }
}

static void json_figure(const char *name, const ds_exec_figure_t *f, double scale)
{
    printf("\"%s\": {\"predicted\": %.9g, \"measured\": %.9g, \"spread\": %.6f, \"error\": %.6f, "
           "\"within_noise\": %s}",
           name, f->predicted * scale, f->measured * scale, f->spread, f->error,
           f->within_noise ? "true" : "false");
}

static void json_comparison(const ds_exec_comparison_t *c)
{
    printf("{");
    json_figure("iteration_s", &c->iteration, 1.0);
    printf(", ");
    json_figure("bubble_fraction", &c->bubble, 1.0);
    printf(", \"busy_mean_abs_error\": %.6f, \"busy_max_abs_error\": %.6f, "
           "\"compute_mean_abs_error\": %.6f, \"compute_max_abs_error\": %.6f, "
           "\"microbatch_time_error\": %.6f, \"runs\": %zu, \"noisy_runs\": %zu, "
           "\"load\": {\"foreign_cpu\": %.4f, \"steal\": %.4f, \"loadavg_1m\": %.2f, "
           "\"pinned\": %s},\n  \"devices\": [",
           c->busy_mean_abs_error, c->busy_max_abs_error, c->compute_mean_abs_error,
           c->compute_max_abs_error, c->microbatch_time_error, c->runs, c->noisy_runs,
           c->load.foreign_cpu, c->load.steal, c->load.loadavg_1m,
           c->load.pinned ? "true" : "false");
    for (size_t i = 0; i < c->num_devices; i++) {
        const ds_exec_device_figures_t *d = &c->devices[i];
        printf("%s{\"rank\": %lld, \"tp\": %d, \"dp\": %d, \"pp\": %d, ", i ? ", " : "",
               (long long)d->rank, d->coords.tp, d->coords.dp, d->coords.pp);
        json_figure("busy_s", &d->busy, 1.0);
        printf(", ");
        json_figure("compute_s", &d->compute, 1.0);
        printf(", ");
        json_figure("idle_s", &d->idle, 1.0);
        printf("}");
    }
    printf("],\n  \"stages\": [");
    for (size_t i = 0; i < c->num_stages; i++) {
        const ds_exec_stage_figures_t *st = &c->stages[i];
        printf("%s{\"stage\": %d, ", i ? ", " : "", st->stage);
        json_figure("forward_s", &st->forward, 1.0);
        printf(", ");
        json_figure("backward_s", &st->backward, 1.0);
        printf("}");
    }
    printf("]}");
}

static void print_json(const context_t *cx, const result_t *res, size_t n, double mean, double max)
{
    output_json_open(cx->in, false);
    printf(", \"ranks\": %lld, \"backend\": \"%s\", \"repeats\": %d, \"iterations\": %d, "
           "\"warmup\": %d, \"max_error\": %.6f, \"mean_abs_error\": %.6f, "
           "\"max_abs_error\": %.6f, \"cases\": [",
           (long long)cx->ranks, ds_backend_kind_name(ds_backend_kind(cx->backend)), cx->o->repeats,
           cx->o->exec.iterations, cx->o->exec.warmup, cx->o->max_error / 100.0, mean, max);
    for (size_t i = 0; i < n; i++) {
        printf("%s\n {\"strategy\": ", i ? "," : "");
        output_json_string(stdout, res[i].strategy);
        printf(", \"num_microbatches\": %lld, \"costs_s\": %.3f, \"comparison\": ",
               (long long)res[i].microbatches, res[i].costs_s);
        json_comparison(res[i].cmp[0]);
        if (cx->o->ablation) {
            printf(", \"ablation\": {");
            for (int v = 0; v < cx->num_variants; v++) {
                printf("%s\"%s\": {\"iteration_error\": %.6f, \"busy_mean_abs_error\": %.6f, "
                       "\"busy_max_abs_error\": %.6f}",
                       v ? ", " : "", variant_names[cx->order[v]], res[i].cmp[v]->iteration.error,
                       res[i].cmp[v]->busy_mean_abs_error, res[i].cmp[v]->busy_max_abs_error);
            }
            printf("}");
        }
        printf("}");
    }
    printf("]}\n");
}

static void print_rows(const context_t *cx, const result_t *res, size_t n)
{
    print_preamble(cx, &res[0], n);
    printf("#\n# %-44s %4s %10s %10s %7s %7s %5s %8s %8s %7s %7s %6s\n", "strategy", "mb",
           "iter_pred", "iter_meas", "spread", "error", "", "busy_avg", "busy_max", "bub_pred",
           "bub_meas", "load");
    printf("# %-44s %4s %10s %10s %7s %7s %5s %8s %8s %7s %7s %6s\n", "", "", "(ms)", "(ms)", "(%)",
           "(%)", "", "(%)", "(%)", "(%)", "(%)", "(%)");
    for (size_t i = 0; i < n; i++) {
        const ds_exec_comparison_t *c = res[i].cmp[0];
        printf("  %-44s %4lld %10.3f %10.3f %7.2f %7.2f %5s %8.2f %8.2f %7.2f %7.2f %6.1f%s\n",
               res[i].strategy, (long long)res[i].microbatches, 1e3 * c->iteration.predicted,
               1e3 * c->iteration.measured, 100.0 * c->iteration.spread, 100.0 * c->iteration.error,
               noise_word(&c->iteration), 100.0 * c->busy_mean_abs_error,
               100.0 * c->busy_max_abs_error, 100.0 * c->bubble.predicted,
               100.0 * c->bubble.measured, 100.0 * c->load.foreign_cpu,
               c->noisy_runs > 0 ? " noisy" : "");
    }
}

static void print_csv(const context_t *cx, const result_t *res, size_t n)
{
    printf("strategy,microbatches,iter_pred_s,iter_meas_s,spread,error,within_noise,busy_mean_abs_"
           "error,busy_max_abs_error,compute_mean_abs_error,bubble_pred,bubble_meas,"
           "microbatch_time_error,foreign_cpu,noisy_runs,costs_foreign_cpu");
    for (int v = 1; v < cx->num_variants; v++)
        printf(",%s_error,%s_busy_mean_abs_error", variant_names[cx->order[v]],
               variant_names[cx->order[v]]);
    printf("\n");
    for (size_t i = 0; i < n; i++) {
        const ds_exec_comparison_t *c = res[i].cmp[0];
        printf("\"%s\",%lld,%.9g,%.9g,%.6f,%.6f,%d,%.6f,%.6f,%.6f,%.6f,%.6f,%.6f,%.4f,%zu,%.4f",
               res[i].strategy, (long long)res[i].microbatches, c->iteration.predicted,
               c->iteration.measured, c->iteration.spread, c->iteration.error,
               c->iteration.within_noise, c->busy_mean_abs_error, c->busy_max_abs_error,
               c->compute_mean_abs_error, c->bubble.predicted, c->bubble.measured,
               c->microbatch_time_error, c->load.foreign_cpu, c->noisy_runs,
               res[i].costs_load.foreign_cpu + res[i].costs_load.steal);
        for (int v = 1; v < cx->num_variants; v++)
            printf(",%.6f,%.6f", res[i].cmp[v]->iteration.error,
                   res[i].cmp[v]->busy_mean_abs_error);
        printf("\n");
    }
}

/* ---- strategies
 * ------------------------------------------------------------------------------------ */

/* Every strategy of `ranks` devices from the base (dp, tp, pp, schedule,
 * vpp and gbs replaced), for each micro-batch count. */
static size_t enumerate(const context_t *cx, ds_strategy_t *out, size_t max)
{
    const inputs_t *in = cx->in;
    ds_model_info_t info;
    ds_model_get_info(in->model, &info);
    size_t n = 0;
    int64_t N = cx->ranks;
    for (int64_t tp = 1; tp <= N; tp++) {
        if (N % tp)
            continue;
        for (int64_t pp = 1; pp <= N / tp; pp++) {
            if ((N / tp) % pp)
                continue;
            int64_t dp = N / tp / pp;
            static const ds_schedule_t schedules[] = {DS_SCHEDULE_GPIPE, DS_SCHEDULE_1F1B,
                                                      DS_SCHEDULE_INTERLEAVED};
            for (size_t k = 0; k < 3; k++) {
                if (pp == 1 && k != 1)
                    continue;
                for (int j = 0; j < cx->o->num_mb_counts && n < max; j++) {
                    ds_strategy_t s = in->strategy;
                    s.dp = (int)dp;
                    s.tp = (int)tp;
                    s.pp = (int)pp;
                    s.schedule = schedules[k];
                    s.vpp = k == 2 ? 2 : 1;
                    s.layers_per_virtual_stage = 0;
                    s.gbs = dp * s.mbs * cx->o->mb_counts[j];
                    if (k == 2 && (info.num_layers % (pp * 2) != 0))
                        continue;
                    ds_clear_error();
                    if (ds_strategy_resolve(&s, in->model, N, cx->gpus_per_node) != DS_OK)
                        continue;
                    out[n++] = s;
                }
            }
        }
    }
    return n;
}

/* The profiler measures what the database lacks for every case (the union
 * of their events, once).  Collective. */
static ds_status_t profile_cases(context_t *cx, const ds_strategy_t *cases, size_t n)
{
    ds_profile_options_t po;
    ds_profile_options_init(&po);
    po.db_path = cx->o->profile_db;
    po.backend = cx->o->backend;
    po.progress = !cx->in->quiet;
    char command[512];
    app_command_line(cx->app, command, sizeof(command));
    po.command_line = command;
    ds_profiler_t *p = NULL;
    ds_profile_summary_t summary;
    ds_status_t status = ds_profiler_create(MPI_COMM_WORLD, &po, &p);
    for (size_t i = 0; i < n && status == DS_OK; i++)
        status = ds_profiler_add(p, cx->in->model, &cases[i], &cx->in->cluster);
    if (status == DS_OK)
        status = ds_profiler_run(p, &summary);
    ds_profiler_destroy(p);
    return status;
}

/* ---- entry
 * ------------------------------------------------------------------------------------------ */

/* validate's own options. */
static int validate_option(const app_t *app, void *ctx, int id, const char *arg)
{
    options_t *o = ctx;
    int rc = APP_EXIT_OK;
    double value = 0.0;
    switch (id) {
    case OPT_REPEATS:
        rc = parse_positive(app, "repeats", arg, 1, 1000, &value);
        o->repeats = (int)value;
        break;
    case OPT_RETRIES:
        rc = parse_positive(app, "retries", arg, 0, 1000, &value);
        o->retries = (int)value;
        break;
    case OPT_MAX_ERROR: rc = parse_positive(app, "max-error", arg, 0, 1e6, &o->max_error); break;
    case OPT_ALL: o->all = true; break;
    case OPT_MICROBATCHES: rc = parse_counts(app, o, arg); break;
    case OPT_COSTS:
        if (strcmp(arg, "layer") == 0)
            o->costs.compute = DS_EXEC_COSTS_LAYER;
        else if (strcmp(arg, "operator") == 0)
            o->costs.compute = DS_EXEC_COSTS_OPERATOR;
        else
            rc = app_usage_error(app, "--costs '%s' (accepted: layer, operator)", arg);
        break;
    case OPT_COMM_COSTS:
        if (strcmp(arg, "in-situ") == 0)
            o->costs.comm_in_situ = 1;
        else if (strcmp(arg, "isolated") == 0)
            o->costs.comm_in_situ = 0;
        else
            rc = app_usage_error(app, "--comm-costs '%s' (accepted: in-situ, isolated)", arg);
        break;
    case OPT_ABLATION: o->ablation = true; break;
    case OPT_MAX_FOREIGN:
        rc = parse_positive(app, "max-foreign", arg, 0, 1, &o->exec.max_foreign);
        break;
    case OPT_PROFILE_BUDGET:
        rc = parse_positive(app, "profile-budget", arg, 0.001, 3600, &o->budget);
        break;
    case OPT_COST_TABLE_OUT: o->cost_table_out = arg; break;
    case OPT_PROFILE_DB: o->profile_db = arg; break;
    case OPT_WAIT_QUIET:
        rc = parse_positive(app, "wait-quiet", arg, 0, 86400, &o->wait_quiet);
        break;
    default: return 0;
    }
    return rc == APP_EXIT_OK ? 1 : -1;
}

/* -1: go on; else the exit code (APP_EXIT_OK after --help). */
static int parse(app_t *app, inputs_t *in, options_t *o)
{
    static const struct option extra[] = {
        {"repeats", required_argument, NULL, OPT_REPEATS},
        {"retries", required_argument, NULL, OPT_RETRIES},
        {"max-error", required_argument, NULL, OPT_MAX_ERROR},
        {"all", no_argument, NULL, OPT_ALL},
        {"microbatches", required_argument, NULL, OPT_MICROBATCHES},
        {"costs", required_argument, NULL, OPT_COSTS},
        {"comm-costs", required_argument, NULL, OPT_COMM_COSTS},
        {"ablation", no_argument, NULL, OPT_ABLATION},
        {"max-foreign", required_argument, NULL, OPT_MAX_FOREIGN},
        {"profile-budget", required_argument, NULL, OPT_PROFILE_BUDGET},
        {"cost-table-out", required_argument, NULL, OPT_COST_TABLE_OUT},
        {"profile-db", required_argument, NULL, OPT_PROFILE_DB},
        {"wait-quiet", required_argument, NULL, OPT_WAIT_QUIET},
        {"help", no_argument, NULL, OPT_HELP},
        {NULL, 0, NULL, 0},
    };
    app_run_options_t run = {&o->exec, &o->backend, &o->trace};
    app_option_handler_t handlers[] = {{validate_option, o}, {app_run_option, &run}};
    int code =
        app_parse_options(app, in, (const struct option *[]){app_run_long_options, extra, NULL},
                          handlers, 2, OPT_HELP, help);
    if (code >= 0)
        return code;
    if (in->target_text != NULL || in->cluster_file != NULL || in->target_gpus != 0)
        return app_usage_error(app, "validate predicts for this allocation itself: --target, "
                                    "--target-gpus and --cluster are not accepted");
    if (!in->strategy_given && !o->all)
        return app_usage_error(app, "no strategy given (accepted: --strategy S, or --all)");
    if (o->trace != NULL && o->all)
        return app_usage_error(app, "--trace is for one case (not with --all)");
    return -1;
}

int cmd_validate(app_t *app)
{
    /* Under a launcher MPI starts first (rank 0 alone prints usage errors); a
     * process started alone parses its options before it. */
    int code = app_mpi_start(app, false);
    if (code != APP_EXIT_OK)
        return code;
    inputs_t in;
    inputs_init(&in);
    options_t *o = calloc(1, sizeof(*o));
    ds_strategy_t *cases = calloc(MAX_CASES, sizeof(*cases));
    result_t *res = calloc(MAX_CASES, sizeof(*res));
    context_t cx;
    memset(&cx, 0, sizeof(cx));
    if (o == NULL || cases == NULL || res == NULL) {
        code = app_usage_error(app, "out of memory");
        goto out;
    }
    ds_exec_options_init(&o->exec);
    ds_exec_cost_options_init(&o->costs);
    o->repeats = 3;
    o->retries = 3;
    o->max_error = 5.0;
    o->mb_counts[0] = 4;
    o->num_mb_counts = 1;
    o->budget = 0.3;
    o->backend = ds_backend_kind_default();
    code = parse(app, &in, o);
    if (code < 0)
        code = app_mpi_require(app);
    if (code >= 0)
        goto out;
    o->costs.measure.budget_s = o->budget;

    ds_allocation_t alloc;
    ds_status_t status = ds_allocation_detect(MPI_COMM_WORLD, &alloc);
    if (status == DS_OK)
        status = ds_backend_open(o->backend, MPI_COMM_WORLD, &cx.backend);
    if (status != DS_OK) {
        code = app_fail(app, status);
        goto out;
    }
    cx.app = app;
    cx.in = &in;
    cx.o = o;
    cx.ranks = alloc.world_size;
    if (cx.ranks > MAX_RANKS) {
        code = app_usage_error(app, "validate runs on at most %d ranks (this job has %lld)",
                               MAX_RANKS, (long long)cx.ranks);
        goto out;
    }
    cx.gpus_per_node = alloc.max_local_size;
    /* The target is the allocation: its nodes, ranks per node and device. */
    in.target_gpus = cx.ranks;
    in.target_gpus_per_node = cx.gpus_per_node;
    if (in.device == NULL && ds_backend_kind(cx.backend) == DS_BACKEND_CPU)
        in.device = "cpu";
    if (!o->all && in.strategy.gbs == 0 && in.global_batch == 0) {
        int64_t model_parallel = (int64_t)in.strategy.tp * in.strategy.pp;
        int64_t dp = in.strategy.dp > 0 ? in.strategy.dp : cx.ranks / model_parallel;
        in.strategy.gbs = dp * in.strategy.mbs * o->mb_counts[0];
    }
    status = inputs_build(&in);
    if (status != DS_OK) {
        code = app_fail(app, status);
        goto out;
    }
    size_t n = 1;
    if (o->all) {
        n = enumerate(&cx, cases, MAX_CASES);
        if (n == 0) {
            code = app_usage_error(app, "no strategy of %lld ranks fits this model",
                                   (long long)cx.ranks);
            goto out;
        }
    } else {
        cases[0] = in.strategy;
    }
    /* The variants: the headline, then the ablations. */
    cx.order[cx.num_variants++] = o->profile_db != NULL ? V_DATABASE : V_IN_SITU;
    if (o->ablation)
        for (int v = 0; v < V_COUNT; v++)
            if (v != (int)cx.order[0] && (v != V_DATABASE || o->profile_db != NULL))
                cx.order[cx.num_variants++] = (variant_t)v;
    for (int v = 0; v < V_COUNT && status == DS_OK; v++) {
        status = ds_cost_table_create(&cx.costs[v]);
        cx.factors[v] = calloc((size_t)cx.ranks, sizeof(double));
        if (cx.factors[v] == NULL)
            status = ds_set_error(DS_ERR_NO_MEMORY, "out of memory");
        for (int64_t r = 0; cx.factors[v] != NULL && r < cx.ranks; r++)
            cx.factors[v][r] = 1.0;
    }
    if (status == DS_OK && o->profile_db != NULL)
        status = profile_cases(&cx, cases, n);
    /* The speed the probe reaches here when nothing disturbs it: the best of a few. */
    for (int i = 0; i < 3 && status == DS_OK && o->wait_quiet > 0.0; i++) {
        ds_exec_load_t load;
        status = ds_exec_probe(cx.backend, 0.2, NULL, &load);
        saw_probe(&cx, &load);
    }
    if (status == DS_OK)
        status = ds_sim_create(&cx.sim);
    for (size_t i = 0; i < n && status == DS_OK; i++) {
        status = run_case(&cx, &cases[i], &res[i]);
        if (status == DS_OK && o->all && app->rank == 0 && !in.quiet)
            fprintf(stderr, "dsmpi validate: case %zu of %zu: %s: error %.2f%%\n", i + 1, n,
                    res[i].strategy, 100.0 * res[i].cmp[0]->iteration.error);
    }
    if (status != DS_OK) {
        code = app_fail(app, status);
        goto out;
    }
    double mean = 0.0, max = 0.0;
    for (size_t i = 0; i < n; i++) {
        double e = fabs(res[i].cmp[0]->iteration.error);
        mean += e / (double)n;
        max = e > max ? e : max;
    }
    if (app->rank == 0) {
        if (in.format == OUTPUT_JSON) {
            print_json(&cx, res, n, mean, max);
        } else if (in.format == OUTPUT_CSV) {
            print_csv(&cx, res, n);
        } else if (!in.quiet) {
            if (o->all)
                print_rows(&cx, res, n);
            else
                print_case(&cx, &res[0]);
            printf("#\n# iteration time: mean |error| %.2f%%, max |error| %.2f%% over %zu case(s) "
                   "(limit %.2f%%)\n",
                   100.0 * mean, 100.0 * max, n, o->max_error);
        }
        if (o->cost_table_out != NULL) {
            FILE *f = fopen(o->cost_table_out, "w");
            if (f == NULL || ds_cost_table_write_text(cx.costs[cx.order[0]], f) != DS_OK)
                fprintf(stderr, "dsmpi validate: cannot write '%s'\n", o->cost_table_out);
            if (f != NULL)
                fclose(f);
        }
    }
    double judged = o->all ? mean : max;
    code = 100.0 * judged > o->max_error ? APP_EXIT_FAILURE : APP_EXIT_OK;
    if (code != APP_EXIT_OK && app->rank == 0)
        fprintf(stderr, "dsmpi validate: iteration-time error %.2f%% exceeds --max-error %.2f%%\n",
                100.0 * judged, o->max_error);
out:
    for (size_t i = 0; res != NULL && i < MAX_CASES; i++)
        free_result(&res[i]);
    for (int v = 0; v < V_COUNT; v++) {
        ds_cost_table_destroy(cx.costs[v]);
        free(cx.factors[v]);
    }
    ds_sim_destroy(cx.sim);
    ds_backend_close(cx.backend);
    inputs_free(&in);
    free(res);
    free(cases);
    free(o);
    return code;
}
