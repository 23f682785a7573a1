/* dsmpi validate: runs real training iterations of a strategy on this
 * allocation with the executor and compares them with the simulator's
 * prediction for the allocation itself as the target.  The method is the
 * library's (ds_validate); this file parses the options and prints. */
#include "commands.h"

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

static void help(void)
{
    printf("usage: mpirun -n N dsmpi validate --model M --strategy S [options]\n"
           "       mpirun -n N dsmpi validate --model M --all [--microbatches 2,4,8] [options]\n\n"
           "Runs real training iterations of the strategy on this allocation (dp x cp x tp x\n"
           "pp = N ranks; cp=2 with fused attention, MoE models with ep) with the executor,\n"
           "and compares them with dsmpi's prediction for the\n"
           "allocation itself as the target: iteration time, per-rank busy, compute and idle\n"
           "time, forward/backward time per micro-batch and stage, the pipeline bubble.  The\n"
           "costs the prediction uses are measured here first (never taken from the runs it\n"
           "is compared with).  Every case runs --repeats times; the runs' spread is printed\n"
           "beside the error ('noise' when the error is inside it).  Runs during which other\n"
           "processes used more than --max-foreign of a rank's core are marked noisy and\n"
           "repeated up to --retries times.  Formulas: include/dsmpi/exec.h.\n\n"
           "Exit status: 0, or 1 when the iteration-time error of a case (of the mean\n"
           "absolute error with --all) exceeds --max-error.\n\n"
           "With --torch-trace T1 [T2...] it runs nothing: it compares the prediction for a\n"
           "traced PyTorch run with the traces ('dsmpi validate --torch-trace --help').\n\n");
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
        "                           one round, the database, overlapped buckets as blocking\n"
        "                           calls), and with parts of the model off\n"
        "                           (bucket overlap free, TP members arriving together, every\n"
        "                           device as fast as the mean); print every variant's error\n"
        "  --profile-budget S       seconds spent measuring one event at most (default 0.3)\n"
        "  --cost-table-out FILE    write the measured costs (text cost table)\n"
        "  --backend cpu|cuda|auto  device backend (default: DS_BACKEND)\n"
        "Output:\n"
        "  --trace FILE.json        Perfetto trace of the last measured iteration (one case)\n");
}

typedef struct options {
    ds_validate_options_t lib;
    double max_error;
    bool all;
    int64_t mb_counts[MAX_MB_COUNTS];
    int num_mb_counts;
    double budget;
    ds_backend_kind_t backend;
    const char *cost_table_out;
} options_t;

/* What the printing needs besides the result. */
typedef struct report {
    const app_t *app;
    const inputs_t *in;
    const options_t *o;
    const ds_backend_t *backend;
    const ds_validate_result_t *res;
} report_t;

/* "2,4,8" into counts. */
static int parse_counts(const app_t *app, options_t *o, const char *arg)
{
    size_t count;
    ds_status_t status =
        ds_parse_int_list(arg, "--microbatches", 1, 100000, 0, o->mb_counts, MAX_MB_COUNTS, &count);
    if (status != DS_OK)
        return app_fail(app, status);
    o->num_mb_counts = (int)count;
    return APP_EXIT_OK;
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
/* ---- printing
 * -------------------------------------------------------------------------------------- */

static const char *noise_word(const ds_exec_figure_t *f)
{
    return f->within_noise ? "noise" : "";
}

static void print_preamble(const report_t *rp, const ds_validate_case_t *res, size_t cases)
{
    const inputs_t *in = rp->in;
    ds_model_info_t info;
    ds_model_get_info(in->model, &info);
    output_preamble(rp->app, stdout);
    printf("# model: %s (%.3g M parameters, %d layers, seq %d, %s)\n", info.name,
           info.num_parameters / 1e6, info.num_layers, info.seq_len, ds_dtype_name(info.dtype));
    printf("# allocation: %lld ranks on %lld node(s), %s backend: %s, %s\n",
           (long long)rp->res->ranks, (long long)in->cluster.nodes,
           ds_backend_kind_name(ds_backend_kind(rp->backend)), ds_backend_device_name(rp->backend),
           res->first_run.load.pinned ? "every rank pinned to a core" : "ranks not pinned");
    if (rp->o->lib.profile_db != NULL)
        printf("# prediction: the allocation as the target, full mode, layer level; costs from the "
               "profile database\n#   %s (what it lacked profiled first), never from the runs "
               "compared\n",
               rp->o->lib.profile_db);
    else
        printf("# prediction: the allocation as the target, full mode, layer level; costs measured "
               "here (%s compute,\n#   %s TP collectives), never from the runs compared\n",
               rp->o->lib.costs.compute == DS_EXEC_COSTS_OPERATOR ? "operator" : "layer-pass",
               rp->o->lib.costs.comm_in_situ ? "in-situ" : "isolated");
    printf("# ground truth: %d runs of %d iterations after %d warm-up per case; %zu case(s)\n",
           rp->o->lib.repeats, rp->o->lib.exec.iterations, rp->o->lib.exec.warmup, cases);
}

static void print_case(const report_t *rp, const ds_validate_case_t *res)
{
    const ds_exec_comparison_t *c = res->comparisons[0];
    print_preamble(rp, res, 1);
    printf("# strategy: %s (%lld micro-batches)\n", res->strategy_text,
           (long long)res->microbatches);
    printf("# load: foreign cpu %.1f%%, steal %.1f%%, loadavg %.2f, speed probe %.1f us (best "
           "%.1f); %zu run(s) compared, %zu noisy\n",
           100.0 * c->load.foreign_cpu, 100.0 * c->load.steal, c->load.loadavg_1m,
           1e6 * c->load.probe_s, 1e6 * rp->res->best_probe_s, c->runs, c->noisy_runs);
    printf("# costs: measured in %.1f s, foreign cpu %.1f%%, steal %.1f%%, speed probe %.1f us%s\n",
           res->costs_s, 100.0 * res->costs_load.foreign_cpu, 100.0 * res->costs_load.steal,
           1e6 * res->costs_load.probe_s, res->costs_load.noisy ? " (NOISY)" : "");
    printf("# device speed factors (time of the same layer passes over the ranks' mean):");
    for (int64_t r = 0; r < rp->res->ranks && r < 16; r++)
        printf(" %.4f", rp->res->speed_factors[r]);
    printf("%s\n", rp->res->ranks > 16 ? " ..." : "");
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
    if (rp->o->lib.ablation) {
        printf("#\n# ablation: the same runs against predictions from other costs\n");
        printf("# %-18s %12s %8s %10s %10s\n", "costs", "predicted", "error", "busy_mean",
               "busy_max");
        printf("# %-18s %12s %8s %10s %10s\n", "", "(ms)", "(%)", "(%)", "(%)");
        for (size_t i = 0; i < rp->res->num_variants; i++)
            if (res->comparisons[i] != NULL)
                printf("  %-18s %12.3f %8.2f %10.2f %10.2f\n",
                       ds_validate_variant_name(rp->res->variants[i]),
                       1e3 * res->comparisons[i]->iteration.predicted,
                       100.0 * res->comparisons[i]->iteration.error,
                       100.0 * res->comparisons[i]->busy_mean_abs_error,
                       100.0 * res->comparisons[i]->busy_max_abs_error);
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

static void print_json(const report_t *rp)
{
    const ds_validate_case_t *res = rp->res->cases;
    size_t n = rp->res->num_cases;
    output_json_open(rp->in, false);
    printf(", \"ranks\": %lld, \"backend\": \"%s\", \"repeats\": %d, \"iterations\": %d, "
           "\"warmup\": %d, \"max_error\": %.6f, \"mean_abs_error\": %.6f, "
           "\"max_abs_error\": %.6f, \"cases\": [",
           (long long)rp->res->ranks, ds_backend_kind_name(ds_backend_kind(rp->backend)),
           rp->o->lib.repeats, rp->o->lib.exec.iterations, rp->o->lib.exec.warmup,
           rp->o->max_error / 100.0, rp->res->mean_abs_error, rp->res->max_abs_error);
    for (size_t i = 0; i < n; i++) {
        printf("%s\n {\"strategy\": ", i ? "," : "");
        output_json_string(stdout, res[i].strategy_text);
        printf(", \"num_microbatches\": %lld, \"costs_s\": %.3f, \"comparison\": ",
               (long long)res[i].microbatches, res[i].costs_s);
        json_comparison(res[i].comparisons[0]);
        if (rp->o->lib.ablation) {
            printf(", \"ablation\": {");
            for (size_t v = 0; v < rp->res->num_variants; v++) {
                printf("%s\"%s\": {\"iteration_error\": %.6f, \"busy_mean_abs_error\": %.6f, "
                       "\"busy_max_abs_error\": %.6f}",
                       v ? ", " : "", ds_validate_variant_name(rp->res->variants[v]),
                       res[i].comparisons[v]->iteration.error,
                       res[i].comparisons[v]->busy_mean_abs_error,
                       res[i].comparisons[v]->busy_max_abs_error);
            }
            printf("}");
        }
        printf("}");
    }
    printf("]}\n");
}

static void print_rows(const report_t *rp)
{
    const ds_validate_case_t *res = rp->res->cases;
    size_t n = rp->res->num_cases;
    print_preamble(rp, &res[0], n);
    printf("#\n# %-44s %4s %10s %10s %7s %7s %5s %8s %8s %7s %7s %6s\n", "strategy", "mb",
           "iter_pred", "iter_meas", "spread", "error", "", "busy_avg", "busy_max", "bub_pred",
           "bub_meas", "load");
    printf("# %-44s %4s %10s %10s %7s %7s %5s %8s %8s %7s %7s %6s\n", "", "", "(ms)", "(ms)", "(%)",
           "(%)", "", "(%)", "(%)", "(%)", "(%)", "(%)");
    for (size_t i = 0; i < n; i++) {
        const ds_exec_comparison_t *c = res[i].comparisons[0];
        printf("  %-44s %4lld %10.3f %10.3f %7.2f %7.2f %5s %8.2f %8.2f %7.2f %7.2f %6.1f%s\n",
               res[i].strategy_text, (long long)res[i].microbatches, 1e3 * c->iteration.predicted,
               1e3 * c->iteration.measured, 100.0 * c->iteration.spread, 100.0 * c->iteration.error,
               noise_word(&c->iteration), 100.0 * c->busy_mean_abs_error,
               100.0 * c->busy_max_abs_error, 100.0 * c->bubble.predicted,
               100.0 * c->bubble.measured, 100.0 * c->load.foreign_cpu,
               c->noisy_runs > 0 ? " noisy" : "");
    }
}

static void print_csv(const report_t *rp)
{
    const ds_validate_case_t *res = rp->res->cases;
    size_t n = rp->res->num_cases;
    printf("strategy,microbatches,iter_pred_s,iter_meas_s,spread,error,within_noise,busy_mean_abs_"
           "error,busy_max_abs_error,compute_mean_abs_error,bubble_pred,bubble_meas,"
           "microbatch_time_error,foreign_cpu,noisy_runs,costs_foreign_cpu");
    for (size_t v = 1; v < rp->res->num_variants; v++)
        printf(",%s_error,%s_busy_mean_abs_error", ds_validate_variant_name(rp->res->variants[v]),
               ds_validate_variant_name(rp->res->variants[v]));
    printf("\n");
    for (size_t i = 0; i < n; i++) {
        const ds_exec_comparison_t *c = res[i].comparisons[0];
        printf("\"%s\",%lld,%.9g,%.9g,%.6f,%.6f,%d,%.6f,%.6f,%.6f,%.6f,%.6f,%.6f,%.4f,%zu,%.4f",
               res[i].strategy_text, (long long)res[i].microbatches, c->iteration.predicted,
               c->iteration.measured, c->iteration.spread, c->iteration.error,
               c->iteration.within_noise, c->busy_mean_abs_error, c->busy_max_abs_error,
               c->compute_mean_abs_error, c->bubble.predicted, c->bubble.measured,
               c->microbatch_time_error, c->load.foreign_cpu, c->noisy_runs,
               res[i].costs_load.foreign_cpu + res[i].costs_load.steal);
        for (size_t v = 1; v < rp->res->num_variants; v++)
            printf(",%.6f,%.6f", res[i].comparisons[v]->iteration.error,
                   res[i].comparisons[v]->busy_mean_abs_error);
        printf("\n");
    }
} /* ---- entry
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
        o->lib.repeats = (int)value;
        break;
    case OPT_RETRIES:
        rc = parse_positive(app, "retries", arg, 0, 1000, &value);
        o->lib.retries = (int)value;
        break;
    case OPT_MAX_ERROR: rc = parse_positive(app, "max-error", arg, 0, 1e6, &o->max_error); break;
    case OPT_ALL: o->all = true; break;
    case OPT_MICROBATCHES: rc = parse_counts(app, o, arg); break;
    case OPT_COSTS:
        if (strcmp(arg, "layer") == 0)
            o->lib.costs.compute = DS_EXEC_COSTS_LAYER;
        else if (strcmp(arg, "operator") == 0)
            o->lib.costs.compute = DS_EXEC_COSTS_OPERATOR;
        else
            rc = app_usage_error(app, "--costs '%s' (accepted: layer, operator)", arg);
        break;
    case OPT_COMM_COSTS:
        if (strcmp(arg, "in-situ") == 0)
            o->lib.costs.comm_in_situ = 1;
        else if (strcmp(arg, "isolated") == 0)
            o->lib.costs.comm_in_situ = 0;
        else
            rc = app_usage_error(app, "--comm-costs '%s' (accepted: in-situ, isolated)", arg);
        break;
    case OPT_ABLATION: o->lib.ablation = 1; break;
    case OPT_MAX_FOREIGN:
        rc = parse_positive(app, "max-foreign", arg, 0, 1, &o->lib.exec.max_foreign);
        break;
    case OPT_PROFILE_BUDGET:
        rc = parse_positive(app, "profile-budget", arg, 0.001, 3600, &o->budget);
        break;
    case OPT_COST_TABLE_OUT: o->cost_table_out = arg; break;
    case OPT_PROFILE_DB: o->lib.profile_db = arg; break;
    case OPT_WAIT_QUIET:
        rc = parse_positive(app, "wait-quiet", arg, 0, 86400, &o->lib.wait_quiet_s);
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
    app_run_options_t run = {&o->lib.exec, &o->backend, &o->lib.trace};
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
    if (o->lib.trace != NULL && o->all)
        return app_usage_error(app, "--trace is for one case (not with --all)");
    return -1;
}
/* Progress of the library on stderr (rank 0): noisy measurements always,
 * finished cases when asked. */
static void print_notice(ds_validate_notice_t kind, const char *line, void *context)
{
    const bool *show_cases = context;
    if (kind == DS_VALIDATE_NOTICE_CASE && !*show_cases)
        return;
    fprintf(stderr, "dsmpi validate: %s\n", line);
}

/* The target is the allocation: its nodes, ranks per node and device. */
static ds_status_t build_inputs(inputs_t *in, const options_t *o, const ds_backend_t *backend,
                                int64_t ranks, int gpus_per_node)
{
    in->target_gpus = ranks;
    in->target_gpus_per_node = gpus_per_node;
    if (in->device == NULL && ds_backend_kind(backend) == DS_BACKEND_CPU)
        in->device = "cpu";
    if (!o->all && in->strategy.gbs == 0 && in->global_batch == 0) {
        /* The cp ranks of a sequence are not data-parallel replicas here. */
        int64_t model_parallel = (int64_t)in->strategy.tp * in->strategy.pp *
                                 (in->strategy.cp > 1 ? in->strategy.cp : 1);
        int64_t dp = in->strategy.dp > 0 ? in->strategy.dp : ranks / model_parallel;
        in->strategy.gbs = dp * in->strategy.mbs * o->mb_counts[0];
    }
    return inputs_build(in);
}

static void print_results(const report_t *rp)
{
    const ds_validate_result_t *res = rp->res;
    const options_t *o = rp->o;
    if (rp->in->format == OUTPUT_JSON) {
        print_json(rp);
    } else if (rp->in->format == OUTPUT_CSV) {
        print_csv(rp);
    } else if (!rp->in->quiet) {
        if (o->all)
            print_rows(rp);
        else
            print_case(rp, &res->cases[0]);
        printf("#\n# iteration time: mean |error| %.2f%%, max |error| %.2f%% over %zu case(s) "
               "(limit %.2f%%)\n",
               100.0 * res->mean_abs_error, 100.0 * res->max_abs_error, res->num_cases,
               o->max_error);
    }
    if (o->cost_table_out != NULL) {
        FILE *f = fopen(o->cost_table_out, "w");
        if (f == NULL || ds_cost_table_write_text(res->costs, f) != DS_OK)
            fprintf(stderr, "dsmpi validate: cannot write '%s'\n", o->cost_table_out);
        if (f != NULL)
            fclose(f);
    }
}

static void options_init(options_t *o)
{
    ds_validate_options_init(&o->lib);
    o->max_error = 5.0;
    o->mb_counts[0] = 4;
    o->num_mb_counts = 1;
    o->budget = 0.3;
    o->backend = ds_backend_kind_default();
}

int cmd_validate(app_t *app)
{
    for (int i = 0; i < app->argc; i++) /* the traces of a framework's run: no executor */
        if (strcmp(app->argv[i], "--torch-trace") == 0 ||
            strncmp(app->argv[i], "--torch-trace=", 14) == 0)
            return validate_torch(app);
    /* Under a launcher MPI starts first (rank 0 alone prints usage errors); a
     * process started alone parses its options before it. */
    int code = app_mpi_start(app, false);
    if (code != APP_EXIT_OK)
        return code;
    inputs_t in;
    inputs_init(&in);
    options_t *o = calloc(1, sizeof(*o));
    ds_backend_t *backend = NULL;
    ds_strategy_t *all_cases = NULL;
    ds_validate_result_t *res = NULL;
    if (o == NULL) {
        code = app_usage_error(app, "out of memory");
        goto out;
    }
    options_init(o);
    code = parse(app, &in, o);
    if (code < 0)
        code = app_mpi_require(app);
    if (code >= 0)
        goto out;
    o->lib.costs.measure.budget_s = o->budget;

    ds_allocation_t alloc;
    ds_status_t status = ds_allocation_detect(MPI_COMM_WORLD, &alloc);
    if (status == DS_OK)
        status = ds_backend_open(o->backend, MPI_COMM_WORLD, &backend);
    if (status == DS_OK)
        status = build_inputs(&in, o, backend, alloc.world_size, alloc.max_local_size);
    const ds_strategy_t *cases = &in.strategy;
    size_t num_cases = 1;
    if (status == DS_OK && o->all)
        status =
            ds_validate_enumerate(in.model, &in.strategy, alloc.world_size, alloc.max_local_size,
                                  o->mb_counts, (size_t)o->num_mb_counts, &all_cases, &num_cases);
    if (status != DS_OK) {
        code = app_fail(app, status);
        goto out;
    }
    if (o->all && num_cases == 0) {
        code = app_usage_error(app, "no strategy of %lld ranks fits this model",
                               (long long)alloc.world_size);
        goto out;
    }
    if (o->all)
        cases = all_cases;
    char command[512];
    app_command_line(app, command, sizeof(command));
    bool show_cases = o->all && !in.quiet;
    o->lib.command_line = command;
    o->lib.profile_backend = o->backend;
    o->lib.profile_progress = !in.quiet;
    o->lib.notice = print_notice;
    o->lib.notice_context = &show_cases;
    status = ds_validate(MPI_COMM_WORLD, backend, in.model, &in.cluster, cases, num_cases, &o->lib,
                         &res);
    if (status != DS_OK) {
        code = app_fail(app, status);
        goto out;
    }
    report_t rp = {app, &in, o, backend, res};
    if (app->rank == 0)
        print_results(&rp);
    double judged = o->all ? res->mean_abs_error : res->max_abs_error;
    code = 100.0 * judged > o->max_error ? APP_EXIT_FAILURE : APP_EXIT_OK;
    if (code != APP_EXIT_OK && app->rank == 0)
        fprintf(stderr, "dsmpi validate: iteration-time error %.2f%% exceeds --max-error %.2f%%\n",
                100.0 * judged, o->max_error);
out:
    ds_validate_result_free(res);
    ds_validate_cases_free(all_cases);
    ds_backend_close(backend);
    inputs_free(&in);
    free(o);
    return code;
}
