/* dsmpi plan: for each cluster size, the best strategy (a search), the time
 * to train on a token or sample budget, GPU-hours, node-hours, service
 * units, cost, goodput and scaling efficiency; a table to paste into a
 * proposal and a chart. */
#include "commands.h"
#include "plan_report.h"
#include "search_inputs.h"

#include <mpi.h>
#include <stdlib.h>
#include <string.h>

enum {
    OPT_TOKENS = 1024,
    OPT_SAMPLES,
    OPT_GPUS,
    OPT_PRICE,
    OPT_CHARGE,
    OPT_CKPT_INTERVAL,
    OPT_CKPT_COST,
    OPT_RESTART,
    OPT_MTBF,
    OPT_MARKDOWN,
    OPT_SVG,
    OPT_REPORT,
    OPT_FORCE,
    OPT_HELP,
};

#define MAX_SIZES 64

static void help(void)
{
    printf(
        "usage: dsmpi plan --model M (--tokens N | --samples N) --gpus N[,N...]\n"
        "                  (--cost-table F | --estimate-missing) [options]\n\n"
        "For each cluster size, searches the best strategy (as 'dsmpi search') and plans the\n"
        "training run: iteration time, tokens/s, days to train, GPU-hours, node-hours, service\n"
        "units, cost, goodput and scaling efficiency against the smallest size.\n\n"
        "  steps       = ceil(tokens / (global batch x sequence))   (or samples / global batch)\n"
        "  days        = steps x iteration time / goodput / 86400\n"
        "  GPU-hours   = GPUs x days x 24;  node-hours = nodes x days x 24\n"
        "  SU          = node-hours x charge factor;  cost = GPU-hours x price x charge factor\n"
        "  goodput     = tau / (tau + delta) x (1 - lambda (R + (tau + delta) / 2)), checkpoints\n"
        "                every tau of training costing delta, restarts of R, interruptions at\n"
        "                lambda = GPUs / MTBF per GPU (1 without checkpoints and failures)\n"
        "  efficiency  = GPU-hours(smallest size) / GPU-hours(size)\n"
        "  low, high   = the same at each end of the iteration time's band: every cost with a\n"
        "                band at its low or high end (communication extrapolated beyond the\n"
        "                nodes measured: dsmpi comm; compute from the device model, at its\n"
        "                operator class's measured error: dsmpi device)\n\n");
    printf("Budget and sizes:\n"
           "  --tokens N               training tokens, K/M/B/T = powers of 1000 (e.g. 1T, 300B)\n"
           "  --samples N              or training samples (sequences)\n"
           "  --gpus N[,N...]          cluster sizes, e.g. 256,512,1024,2048\n"
           "  --gpus-per-node G        devices per node (default 8)\n"
           "  --cluster FILE           network and device of the cluster (nodes set per size)\n"
           "  --target system=NAME     a real system ('dsmpi systems'): its network, device and\n"
           "                           charging unit; sizes beyond its partition refused\n"
           "  --systems FILE           a site's systems file: changes or adds systems\n"
           "  --device NAME            a100-40g|a100-80g|h100-sxm|h100-pcie|h200|gh200|b200|cpu\n"
           "Money and reliability:\n"
           "  --price-per-gpu-hour X   price of one GPU-hour (currency of your choice)\n"
           "  --charge-factor F        the site's charge per unit of use (default 1)\n"
           "  --checkpoint-interval-min M   minutes of training between checkpoints\n"
           "  --checkpoint-cost-s S    seconds a checkpoint stops training\n"
           "  --restart-min R          minutes from an interruption to training again\n"
           "  --mtbf-hours-per-gpu H   mean time between failures of one GPU (a 16384-GPU job\n"
           "                           interrupted every 3 h: 49152)\n"
           "Model:\n"
           "  --model NAME|FILE, --seq-len N, --global-batch N, --dtype fp32|bf16|fp16\n"
           "Strategy:\n"
           "  --strategy S             fixes the fields S names in every size's search, as\n"
           "                           --fix does (e.g. --strategy tp=8,pp=2 or --strategy sp)\n"
           "  Megatron-LM names the same: --tensor-model-parallel-size 8 is --fix tp=8;\n"
           "  --pipeline-model-parallel-size, --micro-batch-size, --sequence-parallel,\n"
           "  --recompute-granularity, --use-distributed-optimizer, --overlap-grad-reduce,\n"
           "  --use-flash-attn, --attention-backend, --fp8-format, --global-batch-size\n");
    search_inputs_print_help(stdout);
    printf("Output:\n"
           "  --markdown               a Markdown table to paste into a proposal\n"
           "  --csv, --json, --quiet\n"
           "  --svg FILE.svg           days to train, GPU-hours and cost against GPUs\n"
           "  --out DIR                plan.svg into DIR (created)\n"
           "  --report DIR             a proposal's report: report.md, report.html (CSS and\n"
           "                           charts inline, nothing external), plan.svg and\n"
           "                           sensitivity.svg (a network 20%% slower, kernels 10%%\n"
           "                           slower); DIR must be new or empty\n"
           "  --force                  with --report: write into a DIR that holds files\n");
}

typedef struct options {
    search_inputs_t si;
    int64_t gpus[MAX_SIZES];
    int num_gpus;
    int64_t tokens, samples;
    double price, charge, ckpt_interval_min, ckpt_cost_s, restart_min, mtbf_hours;
    bool charge_given, markdown, force;
    const char *svg;
    const char *report; /* --report DIR */
} options_t;

typedef struct plan_entry {
    bool found;
    ds_search_result_t best;
    ds_plan_row_t row;
    /* The row at the low and the high end of the iteration time's band
     * (best.iteration_low_s, best.iteration_high_s). */
    ds_plan_row_t low, high;
    ds_search_stats_t stats;
    char note[160];
    int faster; /* scaling stops here: the entry with fewer GPUs that trains faster; -1: none */
    plan_report_size_t report; /* --report: the sensitivity of the best strategy */
} plan_entry_t;

static int parse_gpus(const app_t *app, options_t *o, const char *text)
{
    size_t count;
    ds_status_t status =
        ds_parse_int_list(text, "--gpus", 1, 1LL << 24, 1, o->gpus, MAX_SIZES, &count);
    if (status != DS_OK)
        return app_fail(app, status);
    o->num_gpus = (int)count;
    return APP_EXIT_OK;
}

static int nonnegative(const app_t *app, const char *name, const char *arg, double *out)
{
    double v;
    if (ds_parse_double(arg, name, 0.0, 1e15, &v) != DS_OK)
        return app_usage_error(app, "--%s '%s' (accepted: a number, 0 or above)", name, arg);
    *out = v;
    return APP_EXIT_OK;
}

/* plan's own options, then the search space's. */
static int plan_option(const app_t *app, void *ctx, int id, const char *arg)
{
    options_t *o = ctx;
    int rc = APP_EXIT_OK;
    ds_status_t status = DS_OK;
    switch (id) {
    case OPT_TOKENS: status = ds_parse_count(arg, "tokens", 1, INT64_MAX, &o->tokens); break;
    case OPT_SAMPLES: status = ds_parse_count(arg, "samples", 1, INT64_MAX, &o->samples); break;
    case OPT_GPUS: rc = parse_gpus(app, o, arg); break;
    case OPT_PRICE: rc = nonnegative(app, "price-per-gpu-hour", arg, &o->price); break;
    case OPT_CHARGE:
        rc = nonnegative(app, "charge-factor", arg, &o->charge);
        o->charge_given = true;
        break;
    case OPT_CKPT_INTERVAL:
        rc = nonnegative(app, "checkpoint-interval-min", arg, &o->ckpt_interval_min);
        break;
    case OPT_CKPT_COST: rc = nonnegative(app, "checkpoint-cost-s", arg, &o->ckpt_cost_s); break;
    case OPT_RESTART: rc = nonnegative(app, "restart-min", arg, &o->restart_min); break;
    case OPT_MTBF: rc = nonnegative(app, "mtbf-hours-per-gpu", arg, &o->mtbf_hours); break;
    case OPT_MARKDOWN: o->markdown = true; break;
    case OPT_SVG: o->svg = arg; break;
    case OPT_REPORT: o->report = arg; break;
    case OPT_FORCE: o->force = true; break;
    default: return search_inputs_handle(app, &o->si, id, arg);
    }
    if (status != DS_OK)
        rc = app_fail(app, status);
    return rc == APP_EXIT_OK ? 1 : -1;
}

/* -1: go on; else the exit code (APP_EXIT_OK after --help). */
static int parse(app_t *app, inputs_t *in, options_t *o)
{
    static const struct option own[] = {
        {"tokens", required_argument, NULL, OPT_TOKENS},
        {"samples", required_argument, NULL, OPT_SAMPLES},
        {"gpus", required_argument, NULL, OPT_GPUS},
        {"price-per-gpu-hour", required_argument, NULL, OPT_PRICE},
        {"charge-factor", required_argument, NULL, OPT_CHARGE},
        {"checkpoint-interval-min", required_argument, NULL, OPT_CKPT_INTERVAL},
        {"checkpoint-cost-s", required_argument, NULL, OPT_CKPT_COST},
        {"restart-min", required_argument, NULL, OPT_RESTART},
        {"mtbf-hours-per-gpu", required_argument, NULL, OPT_MTBF},
        {"markdown", no_argument, NULL, OPT_MARKDOWN},
        {"svg", required_argument, NULL, OPT_SVG},
        {"report", required_argument, NULL, OPT_REPORT},
        {"force", no_argument, NULL, OPT_FORCE},
        {"help", no_argument, NULL, OPT_HELP},
        {NULL, 0, NULL, 0},
    };
    app_option_handler_t handlers[] = {{plan_option, o}};
    int first = 0;
    int code = app_parse_options_positional(
        app, in, (const struct option *[]){search_long_options, own, NULL}, handlers, 1, OPT_HELP,
        help, &first);
    if (code >= 0)
        return code;
    if ((code = search_inputs_positional(app, &o->si, first)) != APP_EXIT_OK)
        return code;
    bool system_target = inputs_target_is_system(in) && strstr(in->target_text, "nodes=") == NULL;
    if (in->target_gpus != 0 || (in->target_text != NULL && !system_target) || in->demo)
        return app_usage_error(app, "plan takes the cluster sizes from --gpus N[,N...] (not "
                                    "--target-gpus, --target-nodes, --target other than "
                                    "system=NAME, or --demo)");
    /* --strategy and the Megatron options fix what they name, as --fix does. */
    if ((code = search_inputs_fix_strategy(app, &o->si, in)) != APP_EXIT_OK)
        return code;
    if (o->num_gpus == 0)
        return app_usage_error(app, "no cluster sizes given (accepted: --gpus 256,512,1024,2048)");
    if ((o->tokens > 0) == (o->samples > 0))
        return app_usage_error(
            app, "give the training budget once (accepted: --tokens N, e.g. 1T, or --samples N)");
    if (o->mtbf_hours > 0 && !(o->ckpt_interval_min > 0))
        return app_usage_error(app, "--mtbf-hours-per-gpu needs --checkpoint-interval-min (without "
                                    "checkpoints every interruption restarts the run)");
    if ((o->ckpt_cost_s > 0 || o->restart_min > 0) && !(o->ckpt_interval_min > 0) &&
        !(o->mtbf_hours > 0))
        return app_usage_error(app,
                               "--checkpoint-cost-s and --restart-min need "
                               "--checkpoint-interval-min (and --mtbf-hours-per-gpu for restarts)");
    if (o->force && o->report == NULL)
        return app_usage_error(app, "--force goes with --report DIR");
    ds_status_t status = o->report != NULL ? plan_report_check_dir(o->report, o->force) : DS_OK;
    if (status != DS_OK)
        return app_fail(app, status);
    code = search_inputs_check(app, &o->si);
    return code == APP_EXIT_OK ? -1 : code;
}

/* The target of one size. */
static ds_status_t cluster_of(const inputs_t *in, const ds_cluster_t *template_cluster,
                              int64_t gpus, ds_cluster_t *cluster)
{
    ds_status_t status;
    if (in->system != NULL && in->system->max_nodes > 0 &&
        gpus > in->system->max_nodes * in->system->gpus_per_node)
        return ds_set_error(DS_ERR_INVALID_ARG,
                            "%lld GPUs are beyond system %s's largest partition (accepted: up to "
                            "%lld GPUs, %lld nodes of %d)",
                            (long long)gpus, in->system->name,
                            (long long)(in->system->max_nodes * in->system->gpus_per_node),
                            (long long)in->system->max_nodes, in->system->gpus_per_node);
    if (in->cluster_file != NULL || in->system != NULL) {
        *cluster = *template_cluster;
        return ds_cluster_set_gpus(cluster, gpus,
                                   in->system != NULL ? in->system->name : in->cluster_file);
    }
    status = ds_cluster_from_gpus(cluster, gpus, in->target_gpus_per_node);
    ds_device_spec_t spec;
    if (status == DS_OK && in->device != NULL &&
        (status = ds_device_spec_lookup(in->device, &spec)) == DS_OK)
        ds_cluster_on_device(cluster, &spec); /* the device's links, not the default's */
    return status;
}

/* --target system=NAME: the system's cluster at its largest partition (or the
 * largest size where it publishes none), and its charging unless
 * --charge-factor says otherwise. */
static ds_status_t plan_system_template(inputs_t *in, options_t *o, ds_cluster_t *cluster)
{
    const ds_system_t *system;
    ds_status_t status = ds_system_lookup(in->target_text + 7, &system);
    if (status != DS_OK)
        return status;
    int64_t largest = 0;
    for (int i = 0; i < o->num_gpus; i++)
        largest = o->gpus[i] > largest ? o->gpus[i] : largest;
    char text[DS_NAME_MAX + 64];
    if (system->max_nodes > 0)
        snprintf(text, sizeof(text), "system=%s", system->name);
    else
        snprintf(text, sizeof(text), "system=%s,nodes=%lld", system->name,
                 (long long)((largest + system->gpus_per_node - 1) / system->gpus_per_node));
    status = inputs_system_target(in, text, cluster);
    if (status == DS_OK && !o->charge_given) {
        o->charge = system->charge_per_node_hour;
        o->charge_given = true;
    }
    return status;
}

/* --gpus-per-node other than the cluster file's is an error; sizes beyond
 * the file's nodes a warning (its network is taken to extend to them). */
static ds_status_t check_cluster_file(const app_t *app, const inputs_t *in, const options_t *o,
                                      const ds_cluster_t *file)
{
    ds_status_t status =
        ds_cluster_check_gpus_per_node(file, in->target_gpus_per_node, in->cluster_file);
    int64_t largest = 0;
    for (int i = 0; i < o->num_gpus; i++)
        largest = o->gpus[i] > largest ? o->gpus[i] : largest;
    if (status == DS_OK && largest > ds_cluster_num_gpus(file))
        app_warning(app,
                    "sizes up to %lld GPUs (%lld nodes) are larger than the %lld nodes of cluster "
                    "file %s: its network is taken to extend to them",
                    (long long)largest, (long long)(largest / file->gpus_per_node),
                    (long long)file->nodes, in->cluster_file);
    return status;
}

static void plan_inputs(const options_t *o, int gpus_per_node, ds_plan_inputs_t *p)
{
    ds_plan_inputs_init(p);
    p->tokens = (double)o->tokens;
    p->samples = (double)o->samples;
    if (gpus_per_node > 0)
        p->gpus_per_node = gpus_per_node;
    p->price_per_gpu_hour = o->price;
    p->charge_factor = o->charge_given ? o->charge : 1.0;
    p->checkpoint_interval_s = o->ckpt_interval_min * 60.0;
    p->checkpoint_cost_s = o->ckpt_cost_s;
    p->restart_s = o->restart_min * 60.0;
    p->mtbf_gpu_s = o->mtbf_hours * 3600.0;
}

static void strategy_text(const ds_strategy_t *s, char *text, size_t size)
{
    ds_strategy_t copy = *s;
    copy.gbs = 0;
    ds_strategy_format(&copy, text, size);
}

static const char *count_text(double value, char *text, size_t size)
{
    static const char suffix[] = " KMBT";
    int i = 0;
    while (value >= 1000.0 && i < 4) {
        value /= 1000.0;
        i++;
    }
    if (i == 0)
        snprintf(text, size, "%.0f", value);
    else
        snprintf(text, size, "%.4g%c", value, suffix[i]);
    return text;
}

/* The global batch every size ran: the best strategies' (a --fix gbs= sets it), else the
 * option's or the model's. */
static int64_t plan_global_batch(const inputs_t *in, const plan_entry_t *e, int n)
{
    for (int i = 0; i < n; i++)
        if (e[i].found && e[i].best.strategy.gbs > 0)
            return e[i].best.strategy.gbs;
    ds_model_info_t info;
    ds_model_get_info(in->model, &info);
    return in->global_batch > 0 ? in->global_batch : info.global_batch;
}

/* Lowest and highest assumed share of the sizes with a strategy; false when none has one. */
static bool assumed_range(const plan_entry_t *e, int n, double *min_p, double *max_p)
{
    bool any = false;
    double lo = 1.0, hi = 0.0;
    for (int i = 0; i < n; i++) {
        if (!e[i].found)
            continue;
        any = true;
        lo = e[i].best.assumed_share < lo ? e[i].best.assumed_share : lo;
        hi = e[i].best.assumed_share > hi ? e[i].best.assumed_share : hi;
    }
    *min_p = any ? lo : 0.0;
    *max_p = hi;
    return any;
}

/* "scaling stops here: 2.1 days, longer than the 1.9 days of 1024 GPUs". */
static void scaling_note(const plan_entry_t *e, int i, char *text, size_t size)
{
    const plan_entry_t *f = &e[e[i].faster];
    snprintf(text, size, "scaling stops here: %.4g days, longer than the %.4g days of %lld GPUs",
             e[i].row.days, f->row.days, (long long)f->row.gpus);
}

static void print_header(const app_t *app, const inputs_t *in, const options_t *o,
                         const ds_plan_inputs_t *p, const ds_cluster_t *first,
                         const plan_entry_t *e, int n, const char *prefix)
{
    ds_model_info_t info;
    ds_model_get_info(in->model, &info);
    int64_t gbs = plan_global_batch(in, e, n);
    char a[32], b[32];
    if (app != NULL)
        output_preamble(app, stdout);
    printf("%smodel: %s (%.3g B parameters, seq %d, %s), global batch %lld = %s tokens per "
           "iteration\n",
           prefix, info.name, info.num_parameters / 1e9, info.seq_len, ds_dtype_name(info.dtype),
           (long long)gbs, count_text((double)gbs * info.seq_len, a, sizeof(a)));
    const char *note = ds_model_seq_len_note(in->model);
    if (note != NULL)
        printf("%snote: %s\n", prefix, note);
    if (o->tokens > 0)
        printf("%sbudget: %s tokens\n", prefix, count_text((double)o->tokens, b, sizeof(b)));
    else
        printf("%sbudget: %s samples\n", prefix, count_text((double)o->samples, b, sizeof(b)));
    printf("%sdevice: %s, %d per node; the best strategy of each size is searched as 'dsmpi "
           "search' does\n",
           prefix, first->device.name, first->gpus_per_node);
    if (in->system != NULL)
        printf("%ssystem: %s (%s); charged in %s, %.4g per node-hour%s (column SU)\n", prefix,
               in->system->name, in->system->title, in->system->charge_unit, p->charge_factor,
               in->system->charge_published ? "" : ", not published");
    if (o->si.num_fixes > 0) {
        printf("%sfixed:", prefix);
        for (int i = 0; i < o->si.num_fixes; i++)
            printf(" %s", o->si.fixes[i]);
        printf(" (--fix, --strategy, Megatron options)\n");
    }
    cost_origin_t origin = search_inputs_cost_origin(&o->si, false);
    char costs[1024];
    cost_origin_describe(&origin, costs, sizeof(costs));
    printf("%scosts: %s\n", prefix, costs);
    double lo, hi;
    if (assumed_range(e, n, &lo, &hi) && hi > 0.0) {
        char share[64];
        cost_origin_share_text(lo, hi, share, sizeof(share));
        printf("%sASSUMED: %s of the simulated event time of a size rests on assumed costs "
               "(column 'assumed')\n",
               prefix, share);
    }
    if (p->checkpoint_interval_s > 0 && p->mtbf_gpu_s > 0)
        printf("%sgoodput: checkpoint every %.4g min (%.4g s each), restart %.4g min, MTBF %.6g h "
               "per GPU\n",
               prefix, p->checkpoint_interval_s / 60.0, p->checkpoint_cost_s, p->restart_s / 60.0,
               p->mtbf_gpu_s / 3600.0);
    else if (p->checkpoint_interval_s > 0)
        printf("%sgoodput: checkpoint every %.4g min (%.4g s each); no failures modelled "
               "(--mtbf-hours-per-gpu)\n",
               prefix, p->checkpoint_interval_s / 60.0, p->checkpoint_cost_s);
    else
        printf("%sgoodput: 100%% (no checkpoints or failures given: --checkpoint-interval-min, "
               "--mtbf-hours-per-gpu)\n",
               prefix);
    if (o->price > 0 || o->charge_given)
        printf("%sservice units = node-hours x %.4g; cost = GPU-hours x %.4g per GPU-hour x %.4g\n",
               prefix, p->charge_factor, p->price_per_gpu_hour, p->charge_factor);
    printf(
        "%sdays = steps x iteration / goodput / 86400; GPU-hours = GPUs x days x 24; efficiency = "
        "GPU-hours(smallest) / GPU-hours\n",
        prefix);
}

/* The band of each size: its low and high ends (the table above: expected). */
static void print_band(const options_t *o, const plan_entry_t *e, int n)
{
    int64_t band_comm = 0, band_device = 0;
    for (int i = 0; i < n; i++) {
        if (!e[i].found)
            continue;
        band_comm = e[i].best.band_comm_keys > band_comm ? e[i].best.band_comm_keys : band_comm;
        band_device = e[i].best.band_device_model_keys > band_device
                          ? e[i].best.band_device_model_keys
                          : band_device;
    }
    printf("#\n# band: every cost that has a band at its low and its high end\n");
    cost_origin_band_lines(stdout, "#   ", "up to ", band_comm, band_device);
    printf("# %7s %10s %10s %9s %9s %12s %12s %12s %12s", "gpus", "iter_low", "iter_high",
           "days_low", "days_high", "GPU-h_low", "GPU-h_high", "node-h_low", "node-h_high");
    if (o->charge_given)
        printf(" %12s %12s", "SU_low", "SU_high");
    if (o->price > 0)
        printf(" %14s %14s", "cost_low", "cost_high");
    printf("\n# %7s %10s %10s %9s %9s %12s %12s %12s %12s", "(count)", "(s)", "(s)", "(day)",
           "(day)", "(GPU-h)", "(GPU-h)", "(node-h)", "(node-h)");
    if (o->charge_given)
        printf(" %12s %12s", "(SU)", "(SU)");
    if (o->price > 0)
        printf(" %14s %14s", "(currency)", "(currency)");
    printf("\n");
    for (int i = 0; i < n; i++) {
        if (!e[i].found)
            continue;
        const ds_plan_row_t *l = &e[i].low, *h = &e[i].high;
        printf("  %7lld %10.4f %10.4f %9.3f %9.3f %12.4g %12.4g %12.4g %12.4g", (long long)l->gpus,
               l->iteration_s, h->iteration_s, l->days, h->days, l->gpu_hours, h->gpu_hours,
               l->node_hours, h->node_hours);
        if (o->charge_given)
            printf(" %12.4g %12.4g", l->service_units, h->service_units);
        if (o->price > 0)
            printf(" %14.2f %14.2f", l->cost, h->cost);
        printf("\n");
    }
}

static void print_text(const app_t *app, const inputs_t *in, const options_t *o,
                       const ds_plan_inputs_t *p, const ds_cluster_t *first, const plan_entry_t *e,
                       int n)
{
    print_header(app, in, o, p, first, e, n, "# ");
    printf("#\n# %7s %6s %10s %12s %6s %7s %9s %12s %12s", "gpus", "nodes", "iter_time", "tokens/s",
           "MFU", "goodput", "days", "GPU-hours", "node-hours");
    if (o->charge_given)
        printf(" %12s", "SU");
    if (o->price > 0)
        printf(" %14s", "cost");
    printf(" %6s %7s  %s\n", "eff", "assumed", "strategy");
    printf("# %7s %6s %10s %12s %6s %7s %9s %12s %12s", "(count)", "(count)", "(s)", "(token/s)",
           "(%)", "(%)", "(day)", "(GPU-h)", "(node-h)");
    if (o->charge_given)
        printf(" %12s", "(SU)");
    if (o->price > 0)
        printf(" %14s", "(currency)");
    printf(" %6s %7s\n", "(%)", "(%)");
    for (int i = 0; i < n; i++) {
        const ds_plan_row_t *r = &e[i].row;
        if (!e[i].found) {
            printf("  %7lld %6lld  %s\n", (long long)o->gpus[i], (long long)r->nodes, e[i].note);
            continue;
        }
        char text[DS_STRATEGY_TEXT_MAX];
        strategy_text(&e[i].best.strategy, text, sizeof(text));
        printf("  %7lld %6lld %10.4f %12.4g %6.2f %7.2f %9.3f %12.4g %12.4g", (long long)r->gpus,
               (long long)r->nodes, r->iteration_s, r->tokens_per_s, 100.0 * e[i].best.mfu,
               100.0 * r->goodput, r->days, r->gpu_hours, r->node_hours);
        if (o->charge_given)
            printf(" %12.4g", r->service_units);
        if (o->price > 0)
            printf(" %14.2f", r->cost);
        printf(" %6.1f %7.3g  %s\n", 100.0 * r->efficiency, 100.0 * e[i].best.assumed_share, text);
        if (e[i].faster >= 0) {
            char note[160];
            scaling_note(e, i, note, sizeof(note));
            printf("# %7lld GPUs: %s\n", (long long)r->gpus, note);
        }
    }
    print_band(o, e, n);
    for (int i = 0; i < n; i++)
        if (e[i].found)
            printf(
                "# %lld GPUs: %lld candidates, %lld simulated, %lld skipped by the bound, %.2f s\n",
                (long long)o->gpus[i], (long long)e[i].stats.candidates,
                (long long)e[i].stats.simulated, (long long)e[i].stats.bounded,
                e[i].stats.enumerate_s + e[i].stats.bound_s + e[i].stats.simulate_s);
}

static void print_markdown(const inputs_t *in, const options_t *o, const ds_plan_inputs_t *p,
                           const ds_cluster_t *first, const plan_entry_t *e, int n)
{
    ds_model_info_t info;
    ds_model_get_info(in->model, &info);
    char budget[32];
    count_text(o->tokens > 0 ? (double)o->tokens : (double)o->samples, budget, sizeof(budget));
    printf(
        "| GPUs | nodes | best strategy | iteration (s) | tokens/s | MFU | goodput | days to train "
        "| (low - high) | GPU-hours | (low - high) | node-hours | (low - high) |%s%s scaling "
        "efficiency |\n",
        o->charge_given ? " service units | (low - high) |" : "",
        o->price > 0 ? " cost | (low - high) |" : "");
    printf("|---:|---:|:---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|%s%s---:|\n",
           o->charge_given ? "---:|---:|" : "", o->price > 0 ? "---:|---:|" : "");
    for (int i = 0; i < n; i++) {
        const ds_plan_row_t *r = &e[i].row;
        if (!e[i].found) {
            printf("| %lld | %lld | %s | | | | | | | | | | |%s%s |\n", (long long)o->gpus[i],
                   (long long)r->nodes, e[i].note, o->charge_given ? " | |" : "",
                   o->price > 0 ? " | |" : "");
            continue;
        }
        char text[DS_STRATEGY_TEXT_MAX];
        strategy_text(&e[i].best.strategy, text, sizeof(text));
        const ds_plan_row_t *l = &e[i].low, *h = &e[i].high;
        printf("| %lld | %lld | `%s` | %.3f | %.3g | %.1f%% | %.1f%% | %.1f | %.1f - %.1f | %.0f | "
               "%.0f - %.0f | %.0f | %.0f - %.0f |",
               (long long)r->gpus, (long long)r->nodes, text, r->iteration_s, r->tokens_per_s,
               100.0 * e[i].best.mfu, 100.0 * r->goodput, r->days, l->days, h->days, r->gpu_hours,
               l->gpu_hours, h->gpu_hours, r->node_hours, l->node_hours, h->node_hours);
        if (o->charge_given)
            printf(" %.0f | %.0f - %.0f |", r->service_units, l->service_units, h->service_units);
        if (o->price > 0)
            printf(" %.0f | %.0f - %.0f |", r->cost, l->cost, h->cost);
        printf(" %.1f%% |\n", 100.0 * r->efficiency);
    }
    for (int i = 0; i < n; i++)
        if (e[i].found && e[i].faster >= 0) {
            char note[160];
            scaling_note(e, i, note, sizeof(note));
            printf("\n**%lld GPUs**: %s.\n", (long long)e[i].row.gpus, note);
        }
    cost_origin_t origin = search_inputs_cost_origin(&o->si, false);
    double lo, hi;
    assumed_range(e, n, &lo, &hi);
    char basis[1200];
    cost_origin_basis(&origin, lo, hi, basis, sizeof(basis));
    printf("\n*%s, %s %s on %s (%d per node), global batch %lld x %d tokens; predicted with dsmpi "
           "%s from %s. "
           "Days = steps x iteration time / goodput; GPU-hours = GPUs x days x 24; efficiency = "
           "GPU-hours "
           "of the smallest size / GPU-hours. Low - high: every cost with a band at its ends "
           "(communication extrapolated beyond the node counts measured; compute from the device "
           "model, at its operator class's measured error).*\n",
           info.name, budget, o->tokens > 0 ? "tokens" : "samples", first->device.name,
           first->gpus_per_node, (long long)plan_global_batch(in, e, n), info.seq_len,
           DS_VERSION_STRING, basis);
    (void)p;
}

/* The columns after the strategy: the same on every row but the assumed share. */
static void print_csv(const inputs_t *in, const options_t *o, const ds_cluster_t *first,
                      const plan_entry_t *e, int n)
{
    ds_model_info_t info;
    ds_model_get_info(in->model, &info);
    long long gbs = (long long)plan_global_batch(in, e, n);
    printf(
        "gpus,nodes,iter_time_s,tokens_per_s,mfu,steps,goodput,train_s,days,gpu_hours,node_hours,"
        "service_units,cost,efficiency,strategy,assumed_share,seq_len,global_batch,device,"
        "scaling_stops,iter_time_low_s,iter_time_high_s,days_low,days_high,gpu_hours_low,"
        "gpu_hours_high,node_hours_low,node_hours_high,service_units_low,service_units_high,"
        "cost_low,cost_high\n");
    for (int i = 0; i < n; i++) {
        const ds_plan_row_t *r = &e[i].row;
        if (!e[i].found) {
            printf("%lld,%lld,,,,,,,,,,,,,,,%d,%lld,%s,,,,,,,,,,,,,\n", (long long)o->gpus[i],
                   (long long)r->nodes, info.seq_len, gbs, first->device.name);
            continue;
        }
        char text[DS_STRATEGY_TEXT_MAX];
        ds_strategy_format(&e[i].best.strategy, text, sizeof(text));
        printf("%lld,%lld,%.9g,%.6g,%.6f,%.0f,%.6f,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6f,\"%s\","
               "%.6f,%d,%lld,%s,%d,",
               (long long)r->gpus, (long long)r->nodes, r->iteration_s, r->tokens_per_s,
               e[i].best.mfu, r->steps, r->goodput, r->train_s, r->days, r->gpu_hours,
               r->node_hours, r->service_units, r->cost, r->efficiency, text,
               e[i].best.assumed_share, info.seq_len, gbs, first->device.name, e[i].faster >= 0);
        const ds_plan_row_t *l = &e[i].low, *h = &e[i].high;
        printf("%.9g,%.9g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g,%.6g\n", l->iteration_s,
               h->iteration_s, l->days, h->days, l->gpu_hours, h->gpu_hours, l->node_hours,
               h->node_hours, l->service_units, h->service_units, l->cost, h->cost);
    }
}

static void print_json(const inputs_t *in, const options_t *o, const ds_plan_inputs_t *p,
                       const ds_cluster_t *first, const plan_entry_t *e, int n)
{
    ds_model_info_t info;
    ds_model_get_info(in->model, &info);
    output_json_open(in, false);
    printf(", \"seq_len\": %d, \"global_batch\": %lld, \"device\": ", info.seq_len,
           (long long)plan_global_batch(in, e, n));
    output_json_string(stdout, first->device.name);
    search_inputs_print_json_costs(&o->si, false);
    printf(", \"nccl_tests_logs\": %d", o->si.num_logs);
    printf(
        ", \"tokens\": %lld, \"samples\": %lld, \"gpus_per_node\": %d, \"price_per_gpu_hour\": %g, "
        "\"charge_factor\": %g, \"checkpoint_interval_s\": %g, \"checkpoint_cost_s\": %g, "
        "\"restart_s\": %g, "
        "\"mtbf_gpu_s\": %g, \"estimate_missing\": %s, \"sizes\": [",
        (long long)o->tokens, (long long)o->samples, p->gpus_per_node, p->price_per_gpu_hour,
        p->charge_factor, p->checkpoint_interval_s, p->checkpoint_cost_s, p->restart_s,
        p->mtbf_gpu_s, o->si.estimate ? "true" : "false");
    for (int i = 0; i < n; i++) {
        const ds_plan_row_t *r = &e[i].row;
        printf("%s\n  {\"gpus\": %lld, \"nodes\": %lld, ", i ? "," : "", (long long)o->gpus[i],
               (long long)r->nodes);
        if (!e[i].found) {
            printf("\"strategy\": null, \"note\": ");
            output_json_string(stdout, e[i].note);
            printf("}");
            continue;
        }
        char text[DS_STRATEGY_TEXT_MAX];
        ds_strategy_format(&e[i].best.strategy, text, sizeof(text));
        printf("\"strategy\": ");
        output_json_string(stdout, text);
        printf(
            ", \"iter_time_s\": %.9g, \"tokens_per_s\": %.6g, \"mfu\": %.6f, \"steps\": %.0f, "
            "\"goodput\": %.6f, \"train_s\": %.6g, \"days\": %.6g, \"gpu_hours\": %.6g, "
            "\"node_hours\": %.6g, "
            "\"service_units\": %.6g, \"cost\": %.6g, \"efficiency\": %.6f, \"candidates\": %lld, "
            "\"simulated\": %lld, \"assumed_share\": %.6f, \"scaling_stops\": %s",
            r->iteration_s, r->tokens_per_s, e[i].best.mfu, r->steps, r->goodput, r->train_s,
            r->days, r->gpu_hours, r->node_hours, r->service_units, r->cost, r->efficiency,
            (long long)e[i].stats.candidates, (long long)e[i].stats.simulated,
            e[i].best.assumed_share, e[i].faster >= 0 ? "true" : "false");
        if (e[i].faster >= 0)
            printf(", \"faster_with_fewer_gpus\": %lld", (long long)e[e[i].faster].row.gpus);
        const ds_plan_row_t *l = &e[i].low, *h = &e[i].high;
        printf(",\n   \"iter_time_low_s\": %.9g, \"iter_time_high_s\": %.9g, \"train_s_low\": "
               "%.6g, \"train_s_high\": %.6g, \"days_low\": %.6g, \"days_high\": %.6g, "
               "\"gpu_hours_low\": %.6g, \"gpu_hours_high\": %.6g, \"node_hours_low\": %.6g, "
               "\"node_hours_high\": %.6g, \"service_units_low\": %.6g, \"service_units_high\": "
               "%.6g, \"cost_low\": %.6g, \"cost_high\": %.6g, \"band_comm_keys\": %lld, "
               "\"band_device_model_keys\": %lld}",
               l->iteration_s, h->iteration_s, l->train_s, h->train_s, l->days, h->days,
               l->gpu_hours, h->gpu_hours, l->node_hours, h->node_hours, l->service_units,
               h->service_units, l->cost, h->cost, (long long)e[i].best.band_comm_keys,
               (long long)e[i].best.band_device_model_keys);
    }
    printf("]}\n");
}

/* The rows of the sizes with a strategy, as the chart draws them. */
typedef struct plan_chart {
    const ds_plan_row_t *rows;
    size_t count;
    const double *assumed;
    const ds_plan_row_t *lows, *highs;
} plan_chart_t;

static ds_status_t write_chart(const inputs_t *in, const options_t *o, const ds_cluster_t *first,
                               const plan_chart_t *c, const char *path)
{
    ds_model_info_t info;
    ds_model_get_info(in->model, &info);
    char title[160], budget[32];
    count_text(o->tokens > 0 ? (double)o->tokens : (double)o->samples, budget, sizeof(budget));
    snprintf(title, sizeof(title), "%s: %s %s on %s", info.name, budget,
             o->tokens > 0 ? "tokens" : "samples", first->device.name);
    ds_plan_chart_t chart = {
        .title = title, .assumed_share = c->assumed, .low = c->lows, .high = c->highs};
    return ds_plan_write_svg(c->rows, c->count, &chart, path);
}

/* --report DIR: plan.svg, sensitivity.svg, report.md and report.html. */
static ds_status_t write_report(const app_t *app, const inputs_t *in, const options_t *o,
                                const ds_cluster_t *first, plan_entry_t *e,
                                const plan_chart_t *chart)
{
    ds_status_t status = plan_report_make_dir(o->report);
    char path[4200];
    snprintf(path, sizeof(path), "%s/plan.svg", o->report);
    if (status == DS_OK && chart->count > 0)
        status = write_chart(in, o, first, chart, path);
    char command[2048] = "dsmpi plan", budget[64], costs[1024], basis[1200];
    for (int i = 1, used = (int)strlen(command); i < app->argc && used < (int)sizeof(command); i++)
        used += snprintf(command + used, sizeof(command) - (size_t)used, " %s", app->argv[i]);
    count_text(o->tokens > 0 ? (double)o->tokens : (double)o->samples, budget, sizeof(budget));
    strncat(budget, o->tokens > 0 ? " tokens" : " samples", sizeof(budget) - strlen(budget) - 1);
    cost_origin_t origin = search_inputs_cost_origin(&o->si, false);
    cost_origin_describe(&origin, costs, sizeof(costs));
    double lo, hi;
    assumed_range(e, o->num_gpus, &lo, &hi);
    cost_origin_basis(&origin, lo, hi, basis, sizeof(basis));
    for (int i = 0; i < o->num_gpus; i++) {
        plan_report_size_t *r = &e[i].report;
        r->gpus = o->gpus[i];
        r->nodes = e[i].row.nodes;
        r->found = e[i].found;
        r->note = e[i].note;
        r->strategy = e[i].best.strategy;
        r->mfu = e[i].best.mfu;
        r->assumed_share = e[i].best.assumed_share;
        r->row = e[i].row;
        r->low = e[i].low;
        r->high = e[i].high;
        r->band_comm_keys = e[i].best.band_comm_keys;
        r->band_device_model_keys = e[i].best.band_device_model_keys;
    }
    static plan_report_size_t sizes[MAX_SIZES];
    for (int i = 0; i < o->num_gpus; i++)
        sizes[i] = e[i].report;
    const char *unit = in->system != NULL ? in->system->charge_unit
                       : o->charge_given  ? "service units"
                                          : NULL;
    plan_report_t report = {o->report,
                            command,
                            in->model,
                            budget,
                            first,
                            in->system,
                            unit,
                            costs,
                            basis,
                            o->si.db,
                            sizes,
                            o->num_gpus,
                            chart->count > 0 ? "plan.svg" : NULL};
    if (status == DS_OK)
        status = plan_report_write(&report);
    return status;
}

/* One size: search, then the arithmetic.  Collective over comm. */
static ds_status_t plan_size(const app_t *app, const inputs_t *in, const options_t *o,
                             const ds_cluster_t *cluster, const ds_plan_inputs_t *p,
                             plan_entry_t *e)
{
    ds_comm_model_t *comm = NULL;
    ds_search_t *search = NULL;
    ds_status_t status = search_inputs_comm_model(&o->si, cluster, &comm);
    if (status == DS_OK)
        status =
            search_inputs_create(&o->si, in->model, cluster, in->global_batch, comm, 1, &search);
    if (status == DS_OK)
        status = search_inputs_costs_from_db((search_inputs_t *)&o->si, search, cluster);
    if (status == DS_OK)
        status = ds_search_run(search, o->si.costs, app->mpi ? MPI_COMM_WORLD : MPI_COMM_NULL);
    if (status == DS_ERR_NOT_FOUND)
        search_inputs_report_missing(app, &o->si, search);
    if (status == DS_OK) {
        ds_search_get_stats(search, &e->stats);
        e->found = ds_search_result_at(search, 0, &e->best) == DS_OK;
        if (e->found) {
            ds_model_info_t info;
            ds_model_get_info(in->model, &info);
            int64_t tokens = info.arch == DS_ARCH_LAYER_LIST ? 1 : info.seq_len;
            int64_t gpus = ds_cluster_num_gpus(cluster), gbs = e->best.strategy.gbs;
            status = ds_plan_row_compute(p, gpus, e->best.iteration_s, gbs, tokens, &e->row);
            if (status == DS_OK)
                status =
                    ds_plan_row_compute(p, gpus, e->best.iteration_low_s, gbs, tokens, &e->low);
            if (status == DS_OK)
                status =
                    ds_plan_row_compute(p, gpus, e->best.iteration_high_s, gbs, tokens, &e->high);
            if (status == DS_OK && o->report != NULL) {
                e->report.gpus = gpus;
                e->report.strategy = e->best.strategy;
                status =
                    plan_report_sensitivity(in->model, cluster, o->si.costs, comm, o->si.estimate,
                                            o->si.peak_tflops, p, tokens, &e->report);
            }
        } else {
            e->row.nodes = cluster->nodes;
            if (e->stats.out_of_memory > 0)
                snprintf(e->note, sizeof(e->note),
                         "no strategy fits: %lld valid ones are out of memory (the smallest needs "
                         "%.1f GiB)",
                         (long long)e->stats.out_of_memory, e->stats.min_oom_GiB);
            else
                snprintf(e->note, sizeof(e->note), "no valid strategy (%lld combinations)",
                         (long long)e->stats.enumerated);
        }
    }
    ds_search_destroy(search);
    ds_comm_model_destroy(comm);
    return status;
}

int cmd_plan(app_t *app)
{
    int code = app_mpi_start(app, false);
    if (code != APP_EXIT_OK)
        return code;
    inputs_t in;
    inputs_init(&in);
    options_t *o = calloc(1, sizeof(*o));
    plan_entry_t *e = calloc(MAX_SIZES, sizeof(*e));
    char **original = calloc((size_t)app->argc + 1, sizeof(*original));
    if (o == NULL || e == NULL || original == NULL) {
        free(o);
        free(e);
        free(original);
        return app_usage_error(app, "out of memory");
    }
    memcpy(original, app->argv, (size_t)app->argc * sizeof(*original));
    for (int i = 0; i < MAX_SIZES; i++)
        e[i].faster = -1;
    search_inputs_init(&o->si);
    code = parse(app, &in, o);
    if (code >= 0)
        goto out;
    ds_cluster_t template_cluster, first;
    ds_status_t status = inputs_build_model(&in);
    if (status == DS_OK && in.cluster_file != NULL)
        status = ds_cluster_load(in.cluster_file, &template_cluster);
    if (status == DS_OK && in.cluster_file != NULL && in.device != NULL)
        status = ds_device_spec_lookup(in.device, &template_cluster.device);
    if (status == DS_OK && in.cluster_file != NULL)
        status = check_cluster_file(app, &in, o, &template_cluster);
    if (status == DS_OK && inputs_target_is_system(&in))
        status = plan_system_template(&in, o, &template_cluster);
    static char svg_path[4096];
    if (o->svg == NULL)
        o->svg = inputs_out_path(&in, "plan.svg", svg_path, sizeof(svg_path));
    o->si.logs_gpus_per_node = in.target_gpus_per_node;
    if (status == DS_OK)
        status = search_inputs_load(&o->si, app->mpi ? MPI_COMM_WORLD : MPI_COMM_NULL);
    static ds_device_spec_t measured_device;
    if (status == DS_OK && o->si.db != NULL && !inputs_target_names_device(&in)) {
        /* Targets that name no device are the device the costs were measured on. */
        ds_cost_sources_t sources = {o->si.db, o->si.fingerprint, NULL, 0};
        if (ds_costs_measured_device(&sources, &measured_device) == DS_OK)
            in.device = measured_device.name;
    }
    ds_plan_inputs_t p;
    bool costs_missing = false; /* plan_size reported the events without a cost */
    for (int i = 0; i < o->num_gpus && status == DS_OK; i++) {
        ds_cluster_t cluster;
        status = cluster_of(&in, &template_cluster, o->gpus[i], &cluster);
        if (status != DS_OK)
            break;
        search_inputs_apply_device(&o->si, &cluster);
        if (i == 0) {
            first = cluster;
            plan_inputs(o, cluster.gpus_per_node, &p);
        }
        status = plan_size(app, &in, o, &cluster, &p, &e[i]);
        costs_missing = status == DS_ERR_NOT_FOUND;
    }
    if (costs_missing) {
        code = APP_EXIT_USAGE;
        goto out;
    }
    if (status != DS_OK) {
        code = app_fail(app, status);
        goto out;
    }
    /* Efficiency against the smallest size with a strategy. */
    ds_plan_row_t rows[MAX_SIZES], lows[MAX_SIZES], highs[MAX_SIZES];
    double assumed[MAX_SIZES];
    int map[MAX_SIZES], nrows = 0;
    for (int i = 0; i < o->num_gpus; i++)
        if (e[i].found) {
            map[nrows] = i;
            assumed[nrows] = e[i].best.assumed_share;
            lows[nrows] = e[i].low;
            highs[nrows] = e[i].high;
            rows[nrows++] = e[i].row;
        }
    ds_plan_set_efficiency(rows, (size_t)nrows);
    for (int k = 0; k < nrows; k++) {
        size_t faster;
        e[map[k]].row.efficiency = rows[k].efficiency;
        e[map[k]].faster =
            ds_plan_scaling_stops(rows, (size_t)nrows, (size_t)k, &faster) ? map[faster] : -1;
    }
    code = APP_EXIT_OK;
    if (app->rank == 0) {
        app_t shown = *app;
        shown.argv = original;
        if (in.format == OUTPUT_JSON)
            print_json(&in, o, &p, &first, e, o->num_gpus);
        else if (in.format == OUTPUT_CSV)
            print_csv(&in, o, &first, e, o->num_gpus);
        else if (o->markdown)
            print_markdown(&in, o, &p, &first, e, o->num_gpus);
        else if (!in.quiet)
            print_text(&shown, &in, o, &p, &first, e, o->num_gpus);
        plan_chart_t chart = {rows, (size_t)nrows, assumed, lows, highs};
        if (o->svg != NULL && nrows > 0)
            status = write_chart(&in, o, &first, &chart, o->svg);
        if (status == DS_OK && o->report != NULL)
            status = write_report(&shown, &in, o, &first, e, &chart);
        if (status != DS_OK)
            code = app_fail(app, status);
    }
out:
    search_inputs_free(&o->si);
    inputs_free(&in);
    free(original);
    free(e);
    free(o);
    return code;
}
