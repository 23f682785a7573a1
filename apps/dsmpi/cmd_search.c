/* dsmpi search: every valid strategy of a model on a target, simulated and
 * ranked; the best strategy's exports.  In parallel when launched on several
 * MPI ranks. */
#include "commands.h"
#include "search_inputs.h"

#include <mpi.h>
#include <stdlib.h>
#include <string.h>

enum {
    OPT_TOP = 1024,
    OPT_TRACE,
    OPT_TIMELINE,
    OPT_SVG,
    OPT_ALL_VARIANTS,
    OPT_HELP,
};

static void help(void)
{
    printf("usage: dsmpi search --model M --target-gpus N (--cost-table F | --estimate-missing) "
           "[options]\n"
           "       mpirun -n R dsmpi search ...   (candidates evaluated on R ranks)\n\n"
           "Enumerates every valid hybrid-parallel strategy of the model on the target: tp\n"
           "(divisors of N up to --max-tp), pp (dividing the layers), cp (with flash, for\n"
           "sequences of 16k tokens or more), dp = N / (tp x pp x cp), micro-batch sizes,\n"
           "schedule (gpipe, 1f1b, interleaved with vpp 2 and 4), sequence\n"
           "parallelism, recompute, ZeRO stage and data-parallel algorithm, with\n"
           "--estimate-missing fused attention and fp8 (on devices with fp8) off and on; drops\n"
           "those that do\n"
           "not fit in device memory; simulates the others (symmetric mode, one cost table) and\n"
           "ranks them by iteration time.  The space, the bound and the formulas:\n"
           "include/dsmpi/search.h and include/dsmpi/sim.h.\n\n");
    printf("Model:\n"
           "  --model NAME|FILE        a preset, a Hugging Face config.json or a dsmpi layer list\n"
           "  --seq-len N              training sequence length (Megatron: --seq-length)\n"
           "  --global-batch N         sequences per iteration, every candidate's (default: the "
           "model's)\n"
           "  --dtype fp32|bf16|fp16   training precision (Megatron: --bf16, --fp16)\n"
           "Target:\n"
           "  --target-gpus N [--gpus-per-node G]   (default 8 per node)\n"
           "  --target-nodes N --gpus-per-node G     (as in #SBATCH)\n"
           "  --target nodes=N,gpus-per-node=G[,device=D]  or  --cluster cluster.json\n"
           "  --target system=NAME[,nodes=N]   a real system ('dsmpi systems' lists them)\n"
           "  --systems FILE           a site's systems file: changes or adds systems\n"
           "  --device a100-40g|a100-80g|h100-sxm|h100-pcie|h200|gh200|b200|cpu\n");
    search_inputs_print_help(stdout);
    printf(
        "Output:\n"
        "  --json, --csv, --quiet\n"
        "  --top K                  strategies ranked (default 10, DS_SEARCH_TOP_K); strategies\n"
        "                           whose simulated timelines (and memory) are equal share a row,\n"
        "                           the others named in it ('also: dp-algo=ring,tree')\n"
        "  --all-variants           rank every such equivalent variant in a row of its own\n"
        "  --trace FILE.json        Perfetto trace of the best strategy (DP replica 0)\n"
        "  --svg FILE.svg           Gantt chart of the best strategy\n"
        "  --timeline FILE.h5       HDF5 timeline of the best strategy\n"
        "  --out DIR                best-trace.json and best-timeline.svg into DIR (created)\n");
}

typedef struct options {
    search_inputs_t si;
    int64_t top;
    const char *trace, *timeline, *svg;
} options_t;

#define GIB (1024.0 * 1024.0 * 1024.0)

/* Canonical strategy text without the global batch (the same for all). */
static void strategy_text(const ds_strategy_t *s, char *text, size_t size)
{
    ds_strategy_t copy = *s;
    copy.gbs = 0;
    ds_strategy_format(&copy, text, size);
}

static void print_row(const ds_search_t *search, const char *label, const ds_search_result_t *r)
{
    char text[DS_STRATEGY_TEXT_MAX], also[1024] = "";
    strategy_text(&r->strategy, text, sizeof(text));
    ds_search_variants_text(search, r, also, sizeof(also));
    printf("  %5s %11.6f %11.2f %12.4g %9.2f %6.2f %6.2f %9.5f %8.2f %11.6f %11.6f  %s%s%s%s\n",
           label, r->iteration_s, r->samples_per_s, r->tokens_per_s, r->model_tflops_per_gpu,
           100.0 * r->mfu, 100.0 * r->bubble_fraction, r->comm_exposed_s, r->memory_GiB,
           r->iteration_low_s, r->iteration_high_s, text, also[0] ? "  (also: " : "", also,
           also[0] ? ")" : "");
}

static void print_counts(const ds_search_stats_t *st)
{
    printf("# space: %lld combinations, %lld invalid (ds_strategy_resolve), %lld out of memory, "
           "%lld candidates\n",
           (long long)st->enumerated, (long long)st->invalid, (long long)st->out_of_memory,
           (long long)st->candidates);
    printf("# evaluated: %lld simulated, %lld skipped by the lower bound (cannot reach the top), "
           "%lld failed\n",
           (long long)st->simulated, (long long)st->bounded, (long long)st->failed);
    double wall = st->bound_s + st->simulate_s;
    printf("# time: enumeration %.3f s, bounds %.3f s, simulation %.3f s on %d rank%s: %.0f "
           "candidates/s "
           "per rank (%.0f simulated/s per rank)\n",
           st->enumerate_s, st->bound_s, st->simulate_s, st->ranks, st->ranks == 1 ? "" : "s",
           wall > 0 ? (double)st->candidates / wall / st->ranks : 0.0,
           st->sim_cpu_s > 0 ? (double)st->simulated / st->sim_cpu_s : 0.0);
    if (st->failed > 0)
        printf("# FAILED: %lld simulations, the first: %s\n", (long long)st->failed,
               st->first_error);
}

static void print_table(const app_t *app, const inputs_t *in, const options_t *o,
                        ds_search_t *search)
{
    ds_model_info_t info;
    ds_model_get_info(in->model, &info);
    ds_search_stats_t st;
    ds_search_get_stats(search, &st);
    int64_t gbs = in->global_batch > 0 ? in->global_batch : info.global_batch;
    output_preamble(app, stdout);
    printf("# model: %s (%.3g B parameters, seq %d, %s), global batch %lld\n", info.name,
           info.num_parameters / 1e9, info.seq_len, ds_dtype_name(info.dtype), (long long)gbs);
    const char *note = ds_model_seq_len_note(in->model);
    if (note != NULL)
        printf("# note: %s\n", note);
    printf("# target: %s, %lld nodes x %d devices = %lld\n", in->cluster.name,
           (long long)in->cluster.nodes, in->cluster.gpus_per_node,
           (long long)ds_cluster_num_gpus(&in->cluster));
    search_inputs_print_costs(&o->si, &in->cluster, stdout);
    printf("# fixed:");
    for (int i = 0; i < o->si.num_fixes; i++)
        printf(" %s", o->si.fixes[i]);
    printf("%s; max tp %lld, max mbs %lld\n", o->si.num_fixes ? "" : " nothing",
           (long long)(o->si.max_tp > 0 ? o->si.max_tp : in->cluster.gpus_per_node),
           (long long)search_inputs_max_mbs(&o->si));
    print_counts(&st);
    printf("# simulation: symmetric mode, %s level; exposed = communication not under compute "
           "(mean per GPU); mem = busiest GPU\n",
           o->si.layer_level ? "layer" : "stage");
    size_t n = ds_search_result_count(search);
    int64_t variants = 0;
    ds_search_result_t worst;
    bool have_worst = ds_search_worst(search, &worst) == DS_OK;
    /* The band's sources over the rows shown. */
    int64_t band_comm = have_worst ? worst.band_comm_keys : 0;
    int64_t band_device = have_worst ? worst.band_device_model_keys : 0;
    for (size_t i = 0; i < n; i++) {
        ds_search_result_t r;
        if (ds_search_result_at(search, i, &r) == DS_OK) {
            band_comm = r.band_comm_keys > band_comm ? r.band_comm_keys : band_comm;
            band_device =
                r.band_device_model_keys > band_device ? r.band_device_model_keys : band_device;
        }
    }
    printf("# band: iter_low and iter_high simulate the rows shown again with every cost that has\n"
           "#   a band at its low and its high end; the ranking is by iter_time\n");
    cost_origin_band_lines(stdout, "#   ", "up to ", band_comm, band_device);
    printf("#\n# %5s %11s %11s %12s %9s %6s %6s %9s %8s %11s %11s  %s\n", "rank", "iter_time",
           "samples/s", "tokens/s", "TFLOP/s", "MFU", "bubble", "exposed", "mem", "iter_low",
           "iter_high", "strategy");
    printf("# %5s %11s %11s %12s %9s %6s %6s %9s %8s %11s %11s\n", "", "(s)", "(sample/s)",
           "(token/s)", "(per GPU)", "(%)", "(%)", "(s)", "(GiB)", "(s)", "(s)");
    for (size_t i = 0; i < n; i++) {
        ds_search_result_t r;
        char label[32];
        snprintf(label, sizeof(label), "%zu", i + 1);
        if (ds_search_result_at(search, i, &r) == DS_OK) {
            print_row(search, label, &r);
            variants += r.num_variants;
        }
    }
    if (variants > 0)
        printf("# also: %lld equivalent variants share these rows (the same simulated timeline and "
               "memory; --all-variants ranks each)\n",
               (long long)variants);
    ds_search_result_t best;
    (void)ds_search_result_at(search, 0, &best);
    if (have_worst) {
        printf(
            "#\n# worst %s:\n",
            st.worst_exact
                ? "of all candidates"
                : "of those simulated (the bound skipped others; --no-bound for the exact worst)");
        print_row(search, "worst", &worst);
        printf("# best/worst: the best strategy is %.2fx faster than the worst\n",
               best.iteration_s > 0 ? worst.iteration_s / best.iteration_s : 0.0);
    }
    if (o->si.estimate)
        printf("# ASSUMED: costs the table lacks come from the device model; the ranking rests "
               "on them\n");
}

static void print_result_json(const ds_search_t *search, const ds_search_result_t *r, int rank)
{
    char text[DS_STRATEGY_TEXT_MAX], also[1024];
    ds_strategy_format(&r->strategy, text, sizeof(text));
    ds_search_variants_text(search, r, also, sizeof(also));
    printf("{\"rank\": %d, \"candidate\": %lld, \"strategy\": ", rank, (long long)r->candidate);
    output_json_string(stdout, text);
    printf(", \"dp\": %d, \"tp\": %d, \"pp\": %d, \"mbs\": %d, \"iter_time_s\": %.9g, "
           "\"iter_time_low_s\": %.9g, \"iter_time_high_s\": %.9g, \"samples_per_s\": %.6g, "
           "\"tokens_per_s\": %.6g, \"model_tflops_per_gpu\": %.6g, \"mfu\": %.6f, \"hfu\": %.6f, "
           "\"bubble_fraction\": %.6f, \"comm_exposed_s\": %.9g, \"mem_GiB\": %.6f, "
           "\"lower_bound_s\": %.9g, \"band_comm_keys\": %lld, \"band_device_model_keys\": %lld, "
           "\"assumed_share\": %.6f",
           r->strategy.dp, r->strategy.tp, r->strategy.pp, r->strategy.mbs, r->iteration_s,
           r->iteration_low_s, r->iteration_high_s, r->samples_per_s, r->tokens_per_s,
           r->model_tflops_per_gpu, r->mfu, r->hfu, r->bubble_fraction, r->comm_exposed_s,
           r->memory_GiB, r->lower_bound_s, (long long)r->band_comm_keys,
           (long long)r->band_device_model_keys, r->assumed_share);
    /* Equivalent variants: how many, the stored ones in full, what they change. */
    printf(", \"variant_count\": %d, \"variants\": [", (int)r->num_variants);
    int stored =
        r->num_variants < DS_SEARCH_MAX_VARIANTS ? r->num_variants : DS_SEARCH_MAX_VARIANTS;
    for (int i = 0; i < stored; i++) {
        const ds_strategy_t *s = ds_search_candidate_at(search, (size_t)r->variants[i]);
        if (s == NULL)
            continue;
        ds_strategy_format(s, text, sizeof(text));
        printf("%s{\"candidate\": %lld, \"strategy\": ", i ? ", " : "", (long long)r->variants[i]);
        output_json_string(stdout, text);
        printf("}");
    }
    printf("], \"also\": ");
    output_json_string(stdout, also);
    printf("}");
}

static void print_json(const inputs_t *in, const options_t *o, ds_search_t *search)
{
    ds_search_stats_t st;
    ds_search_get_stats(search, &st);
    output_json_open(in, false);
    printf(", \"target\": ");
    output_json_string(stdout, in->cluster.name);
    printf(", \"target_gpus\": %lld, \"gpus_per_node\": %d, \"device\": ",
           (long long)ds_cluster_num_gpus(&in->cluster), in->cluster.gpus_per_node);
    output_json_string(stdout, in->cluster.device.name);
    search_inputs_print_json_costs(&o->si, true);
    printf(", \"estimate_missing\": %s, \"nccl_tests_logs\": %d, \"granularity\": \"%s\", "
           "\"fixed\": [",
           o->si.estimate ? "true" : "false", o->si.num_logs,
           o->si.layer_level ? "layer" : "stage");
    for (int i = 0; i < o->si.num_fixes; i++) {
        printf("%s", i ? ", " : "");
        output_json_string(stdout, o->si.fixes[i]);
    }
    printf("],\n \"counts\": {\"enumerated\": %lld, \"invalid\": %lld, \"out_of_memory\": %lld, "
           "\"candidates\": %lld, \"simulated\": %lld, \"bounded\": %lld, \"failed\": %lld},\n"
           " \"time\": {\"enumerate_s\": %.6f, \"bound_s\": %.6f, \"simulate_s\": %.6f, "
           "\"sim_cpu_s\": %.6f, "
           "\"ranks\": %d},\n \"results\": [",
           (long long)st.enumerated, (long long)st.invalid, (long long)st.out_of_memory,
           (long long)st.candidates, (long long)st.simulated, (long long)st.bounded,
           (long long)st.failed, st.enumerate_s, st.bound_s, st.simulate_s, st.sim_cpu_s, st.ranks);
    size_t n = ds_search_result_count(search);
    ds_search_result_t best, worst;
    memset(&best, 0, sizeof(best));
    for (size_t i = 0; i < n; i++) {
        ds_search_result_t r;
        if (ds_search_result_at(search, i, &r) != DS_OK)
            continue;
        if (i == 0)
            best = r;
        printf("%s\n  ", i ? "," : "");
        print_result_json(search, &r, (int)i + 1);
    }
    printf("],\n \"worst\": ");
    if (n > 0 && ds_search_worst(search, &worst) == DS_OK) {
        print_result_json(search, &worst, 0);
        printf(", \"worst_exact\": %s, \"best_worst_ratio\": %.6f",
               st.worst_exact ? "true" : "false",
               best.iteration_s > 0 ? worst.iteration_s / best.iteration_s : 0.0);
    } else {
        printf("null");
    }
    printf("}\n");
}

static void print_csv(ds_search_t *search)
{
    printf("row,candidate,iter_time_s,samples_per_s,tokens_per_s,model_tflops_per_gpu,mfu,hfu,"
           "bubble_fraction,comm_exposed_s,mem_GiB,lower_bound_s,assumed_share,dp,tp,pp,mbs,"
           "strategy,variants,also,iter_time_low_s,iter_time_high_s\n");
    size_t n = ds_search_result_count(search);
    for (size_t i = 0; i <= n; i++) {
        ds_search_result_t r;
        char label[32];
        if (i < n) {
            if (ds_search_result_at(search, i, &r) != DS_OK)
                continue;
            snprintf(label, sizeof(label), "%zu", i + 1);
        } else {
            if (n == 0 || ds_search_worst(search, &r) != DS_OK)
                break;
            snprintf(label, sizeof(label), "worst");
        }
        char text[DS_STRATEGY_TEXT_MAX], also[1024];
        ds_strategy_format(&r.strategy, text, sizeof(text));
        ds_search_variants_text(search, &r, also, sizeof(also));
        printf(
            "%s,%lld,%.9g,%.6g,%.6g,%.6g,%.6f,%.6f,%.6f,%.9g,%.6f,%.9g,%.6f,%d,%d,%d,%d,\"%s\",%d,"
            "\"%s\",%.9g,%.9g\n",
            label, (long long)r.candidate, r.iteration_s, r.samples_per_s, r.tokens_per_s,
            r.model_tflops_per_gpu, r.mfu, r.hfu, r.bubble_fraction, r.comm_exposed_s, r.memory_GiB,
            r.lower_bound_s, r.assumed_share, r.strategy.dp, r.strategy.tp, r.strategy.pp,
            r.strategy.mbs, text, (int)r.num_variants, also, r.iteration_low_s, r.iteration_high_s);
    }
}

/* Timeline exports of the best strategy (layer level, as predict). */
static ds_status_t exports(const inputs_t *in, const options_t *o, ds_search_t *search,
                           const ds_comm_model_t *comm)
{
    if (o->trace == NULL && o->timeline == NULL && o->svg == NULL)
        return DS_OK;
    ds_search_result_t best;
    ds_status_t status = ds_search_result_at(search, 0, &best);
    if (status != DS_OK)
        return status;
    ds_sim_t *sim = NULL;
    if ((status = ds_sim_create(&sim)) != DS_OK)
        return status;
    ds_sim_options_t so;
    ds_sim_options_init(&so);
    so.estimate_missing = o->si.estimate;
    so.comm_model = comm;
    so.peak_tflops = o->si.peak_tflops;
    status = ds_sim_run(sim, in->model, &best.strategy, &in->cluster, o->si.costs, &so);
    if (status == DS_OK && o->trace != NULL)
        status = ds_sim_write_trace(sim, o->trace, NULL, 0, NULL, 0);
    if (status == DS_OK && o->timeline != NULL)
        status = ds_sim_write_timeline(sim, o->timeline);
    if (status == DS_OK && o->svg != NULL)
        status = ds_sim_write_svg(sim, o->svg, NULL, 0, 64);
    ds_sim_destroy(sim);
    return status;
}

/* search's own options, then the search space's. */
static int search_option(const app_t *app, void *ctx, int id, const char *arg)
{
    options_t *o = ctx;
    switch (id) {
    case OPT_TOP: {
        ds_status_t status = ds_parse_count(arg, "top", 1, 100000, &o->top);
        return status == DS_OK ? 1 : (app_fail(app, status), -1);
    }
    case OPT_TRACE: o->trace = arg; return 1;
    case OPT_TIMELINE: o->timeline = arg; return 1;
    case OPT_SVG: o->svg = arg; return 1;
    case OPT_ALL_VARIANTS: o->si.all_variants = true; return 1;
    default: return search_inputs_handle(app, &o->si, id, arg);
    }
}

/* -1: go on; else the exit code (APP_EXIT_OK after --help). */
static int parse(app_t *app, inputs_t *in, options_t *o)
{
    static const struct option own[] = {
        {"top", required_argument, NULL, OPT_TOP},
        {"trace", required_argument, NULL, OPT_TRACE},
        {"timeline", required_argument, NULL, OPT_TIMELINE},
        {"svg", required_argument, NULL, OPT_SVG},
        {"all-variants", no_argument, NULL, OPT_ALL_VARIANTS},
        {"help", no_argument, NULL, OPT_HELP},
        {NULL, 0, NULL, 0},
    };
    app_option_handler_t handlers[] = {{search_option, o}};
    int first = 0;
    int code = app_parse_options_positional(
        app, in, (const struct option *[]){search_long_options, own, NULL}, handlers, 1, OPT_HELP,
        help, &first);
    if (code >= 0)
        return code;
    if ((code = search_inputs_positional(app, &o->si, first)) != APP_EXIT_OK)
        return code;
    if (in->strategy_given)
        return app_usage_error(app, "search enumerates the strategies: narrow the space with --fix "
                                    "KEY=VALUE instead of --strategy or Megatron options");
    if (in->demo)
        return app_usage_error(
            app, "--demo is for predict and run (accepted here: --model and a target)");
    code = search_inputs_check(app, &o->si);
    return code == APP_EXIT_OK ? -1 : code;
}

/* Everything after the options: costs, the search, the reports.  Collective. */
static int run_search(app_t *app, inputs_t *in, options_t *o, char **original)
{
    int code;
    static char trace[4096], svg[4096];
    if (o->trace == NULL && o->svg == NULL && o->timeline == NULL && in->out_dir != NULL) {
        o->trace = inputs_out_path(in, "best-trace.json", trace, sizeof(trace));
        o->svg = inputs_out_path(in, "best-timeline.svg", svg, sizeof(svg));
    }
    ds_search_t *search = NULL;
    ds_comm_model_t *comm = NULL;
    ds_status_t status = inputs_build_target(in);
    o->si.logs_gpus_per_node = in->target_gpus_per_node;
    if (status == DS_OK) {
        status = search_inputs_load(&o->si, app->mpi ? MPI_COMM_WORLD : MPI_COMM_NULL);
        ds_cost_sources_t sources = {o->si.db, o->si.fingerprint, NULL, 0};
        ds_device_spec_t spec;
        if (status == DS_OK && o->si.db != NULL &&
            ds_costs_measured_device(&sources, &spec) == DS_OK)
            inputs_default_device(in, &spec);
        search_inputs_apply_device(&o->si, &in->cluster);
    }
    if (status == DS_OK)
        status = search_inputs_comm_model(&o->si, &in->cluster, &comm);
    if (status == DS_OK)
        status = search_inputs_create(&o->si, in->model, &in->cluster, in->global_batch, comm,
                                      (int)o->top, &search);
    if (status == DS_OK)
        status = search_inputs_costs_from_db(&o->si, search, &in->cluster);
    if (status != DS_OK) {
        code = app_fail(app, status);
        goto done;
    }
    status = ds_search_run(search, o->si.costs, app->mpi ? MPI_COMM_WORLD : MPI_COMM_NULL);
    if (status == DS_ERR_NOT_FOUND) {
        search_inputs_report_missing(app, &o->si, search);
        code = APP_EXIT_USAGE;
        goto done;
    }
    if (status != DS_OK) {
        code = app_fail(app, status);
        goto done;
    }
    ds_search_stats_t st;
    ds_search_get_stats(search, &st);
    if (st.candidates == 0) {
        code = search_inputs_no_candidate(app, &st, &in->cluster);
        goto done;
    }
    code = APP_EXIT_OK;
    if (app->rank == 0) {
        app_t shown = *app;
        shown.argv = original;
        if (in->format == OUTPUT_JSON)
            print_json(in, o, search);
        else if (in->format == OUTPUT_CSV)
            print_csv(search);
        else if (!in->quiet)
            print_table(&shown, in, o, search);
        status = exports(in, o, search, comm);
        if (status != DS_OK)
            code = app_fail(app, status);
    }
done:
    ds_search_destroy(search);
    ds_comm_model_destroy(comm);
    return code;
}

int cmd_search(app_t *app)
{
    int code = app_mpi_start(app, false);
    if (code != APP_EXIT_OK)
        return code;
    inputs_t in;
    inputs_init(&in);
    options_t *o = calloc(1, sizeof(*o));
    char **original = calloc((size_t)app->argc + 1, sizeof(*original));
    if (o == NULL || original == NULL) {
        free(o);
        free(original);
        return app_usage_error(app, "out of memory");
    }
    /* getopt_long reorders argv; the preamble shows the command as typed. */
    memcpy(original, app->argv, (size_t)app->argc * sizeof(*original));
    search_inputs_init(&o->si);
    code = parse(app, &in, o);
    if (code < 0)
        code = run_search(app, &in, o, original);
    search_inputs_free(&o->si);
    inputs_free(&in);
    free(original);
    free(o);
    return code;
}

int search_execute(app_t *app, inputs_t *in, const search_inputs_t *space, const char *profile_db)
{
    options_t *o = calloc(1, sizeof(*o));
    if (o == NULL)
        return app_usage_error(app, "out of memory");
    o->si = *space;
    o->si.profile_db = profile_db;
    o->si.costs = NULL;
    o->si.samples = NULL;
    o->si.db = NULL;
    o->top = space->top > 0 ? space->top : 10;
    int code = run_search(app, in, o, app->argv);
    search_inputs_free(&o->si);
    free(o);
    return code;
}
