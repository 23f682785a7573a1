/* Options shared by `dsmpi search` and `dsmpi plan`. */
#include "search_inputs.h"

#include <stdlib.h>
#include <string.h>

enum {
    OPT_FIX = 768,
    OPT_MAX_TP,
    OPT_MAX_MBS,
    OPT_COST_TABLE,
    OPT_ESTIMATE,
    OPT_NCCL_TESTS,
    OPT_PEAK_TFLOPS,
    OPT_MEM_BW,
    OPT_LAYER_LEVEL,
    OPT_NO_BOUND,
    OPT_PROFILE_DB,
    OPT_FINGERPRINT,
    OPT_SPACE_TOP,
};

/* The options that shape the space alone, for `dsmpi profile --search`. */
const struct option search_space_long_options[] = {
    {"top", required_argument, NULL, OPT_SPACE_TOP},
    {"fix", required_argument, NULL, OPT_FIX},
    {"max-tp", required_argument, NULL, OPT_MAX_TP},
    {"max-mbs", required_argument, NULL, OPT_MAX_MBS},
    {NULL, 0, NULL, 0},
};

const struct option search_long_options[] = {
    {"fix", required_argument, NULL, OPT_FIX},
    {"max-tp", required_argument, NULL, OPT_MAX_TP},
    {"max-mbs", required_argument, NULL, OPT_MAX_MBS},
    {"cost-table", required_argument, NULL, OPT_COST_TABLE},
    {"estimate-missing", no_argument, NULL, OPT_ESTIMATE},
    {"nccl-tests", required_argument, NULL, OPT_NCCL_TESTS},
    {"peak-tflops", required_argument, NULL, OPT_PEAK_TFLOPS},
    {"mem-bw-gbs", required_argument, NULL, OPT_MEM_BW},
    {"layer-level", no_argument, NULL, OPT_LAYER_LEVEL},
    {"no-bound", no_argument, NULL, OPT_NO_BOUND},
    {"exhaustive", no_argument, NULL, OPT_NO_BOUND},
    {"profile-db", required_argument, NULL, OPT_PROFILE_DB},
    {"fingerprint", required_argument, NULL, OPT_FINGERPRINT},
    {NULL, 0, NULL, 0},
};

void search_inputs_init(search_inputs_t *si)
{
    memset(si, 0, sizeof(*si));
}

static int bad(const app_t *app, ds_status_t status)
{
    app_fail(app, status);
    return -1;
}

static int positive_double(const app_t *app, const char *name, const char *arg, double *out)
{
    double v;
    if (ds_parse_double(arg, name, 0.0, 1e9, &v) != DS_OK || !(v > 0.0)) {
        app_usage_error(app, "--%s '%s' (accepted: a positive number)", name, arg);
        return -1;
    }
    *out = v;
    return 1;
}

int search_inputs_handle(const app_t *app, search_inputs_t *si, int id, const char *arg)
{
    ds_status_t status = DS_OK;
    switch (id) {
    case OPT_FIX:
        if (si->num_fixes == SEARCH_MAX_FIXES) {
            app_usage_error(app, "more than %d --fix options", SEARCH_MAX_FIXES);
            return -1;
        }
        si->fixes[si->num_fixes++] = arg;
        return 1;
    case OPT_MAX_TP:
        status = ds_parse_count(arg, "max-tp", 1, 1 << 20, &si->max_tp);
        return status == DS_OK ? 1 : bad(app, status);
    case OPT_MAX_MBS:
        status = ds_parse_size(arg, "max-mbs", 1, 1 << 24, &si->max_mbs);
        return status == DS_OK ? 1 : bad(app, status);
    case OPT_COST_TABLE: si->cost_table = arg; return 1;
    case OPT_PROFILE_DB: si->profile_db = arg; return 1;
    case OPT_SPACE_TOP:
        status = ds_parse_count(arg, "top", 1, 100000, &si->top);
        return status == DS_OK ? 1 : (app_fail(app, status), -1);
    case OPT_FINGERPRINT: si->fingerprint = arg; return 1;
    case OPT_ESTIMATE: si->estimate = true; return 1;
    case OPT_NCCL_TESTS:
        return app_take_files(app, "nccl-tests", arg, si->logs, SEARCH_MAX_LOGS, &si->num_logs);
    case OPT_PEAK_TFLOPS: return positive_double(app, "peak-tflops", arg, &si->peak_tflops);
    case OPT_MEM_BW: return positive_double(app, "mem-bw-gbs", arg, &si->mem_bw);
    case OPT_LAYER_LEVEL: si->layer_level = true; return 1;
    case OPT_NO_BOUND: si->no_bound = true; return 1;
    default: return 0;
    }
}

int search_inputs_positional(const app_t *app, const search_inputs_t *si, int first)
{
    /* --nccl-tests took the files that follow it; a word elsewhere is no log. */
    if (first < app->argc)
        return app_usage_error(
            app, "unexpected argument '%s' (%ssee 'dsmpi %s --help')", app->argv[first],
            si->num_logs > 0 ? "nccl-tests logs follow --nccl-tests; " : "", app->command);
    return APP_EXIT_OK;
}

int search_inputs_fix_strategy(const app_t *app, search_inputs_t *si, const inputs_t *in)
{
    if (in->strategy_unfixable != NULL)
        return app_usage_error(app,
                               "--%s cannot narrow the search (accepted: --strategy KEY=VALUE,... "
                               "or --fix KEY=VALUE with the strategy grammar's keys, e.g. vpp=2)",
                               in->strategy_unfixable);
    for (size_t i = 0; i < in->num_strategy_items; i++) {
        if (si->num_fixes == SEARCH_MAX_FIXES)
            return app_usage_error(app, "more than %d --fix options and strategy items",
                                   SEARCH_MAX_FIXES);
        si->fixes[si->num_fixes++] = in->strategy_items[i];
    }
    return APP_EXIT_OK;
}

int search_inputs_check(const app_t *app, const search_inputs_t *si)
{
    if (si->cost_table == NULL && si->profile_db == NULL && !si->estimate)
        return app_usage_error(app,
                               "no costs given (accepted: --profile-db FILE, --cost-table FILE, "
                               "--estimate-missing)");
    return APP_EXIT_OK;
}

/* The sources of the library's cost assembly that these options name (the
 * database itself is opened collectively by search_inputs_load). */
static ds_predict_sources_t predict_sources(const search_inputs_t *si)
{
    ds_predict_sources_t sources;
    ds_predict_sources_init(&sources);
    sources.fingerprint = si->fingerprint;
    sources.nccl_tests = si->logs;
    sources.num_nccl_tests = (size_t)si->num_logs;
    sources.gpus_per_node = si->logs_gpus_per_node;
    return sources;
}

ds_status_t search_inputs_load(search_inputs_t *si, MPI_Comm comm)
{
    ds_status_t status = ds_cost_table_create(&si->costs);
    if (status == DS_OK && si->profile_db != NULL)
        status = ds_profile_db_open(comm, si->profile_db, DS_PROFILE_DB_READ_ONLY, &si->db);
    if (status == DS_OK && si->cost_table != NULL)
        status = ds_cost_table_load_text(si->costs, si->cost_table);
    if (status == DS_OK) {
        ds_predict_sources_t sources = predict_sources(si);
        status = ds_predict_load_logs(&sources, &si->samples);
    }
    return status;
}

void search_inputs_apply_device(const search_inputs_t *si, ds_cluster_t *cluster)
{
    if (si->peak_tflops > 0) {
        cluster->device.peak_tflops_bf16 = si->peak_tflops;
        cluster->device.peak_tflops_fp32 = si->peak_tflops;
    }
    if (si->mem_bw > 0)
        cluster->device.mem_bw_GBps = si->mem_bw;
}

ds_status_t search_inputs_comm_model(const search_inputs_t *si, const ds_cluster_t *cluster,
                                     ds_comm_model_t **model_p)
{
    *model_p = NULL;
    if (si->samples == NULL)
        return DS_OK;
    return ds_comm_model_create(cluster, ds_comm_samples_data(si->samples),
                                ds_comm_samples_size(si->samples), NULL, model_p);
}

ds_status_t search_inputs_create(const search_inputs_t *si, const ds_model_t *model,
                                 const ds_cluster_t *cluster, int64_t global_batch,
                                 const ds_comm_model_t *comm, int top_k, ds_search_t **search_p)
{
    ds_search_options_t o;
    ds_search_options_init(&o);
    o.max_tp = (int)si->max_tp;
    o.max_mbs = (int)si->max_mbs;
    if (top_k > 0)
        o.top_k = top_k;
    o.granularity = si->layer_level ? DS_SIM_LAYER : DS_SIM_STAGE;
    o.estimate_missing = si->estimate;
    o.comm_model = comm;
    o.peak_tflops = si->peak_tflops;
    o.bound = !si->no_bound;
    o.all_variants = si->all_variants;
    ds_strategy_t base;
    ds_strategy_init(&base);
    base.gbs = global_batch;
    ds_search_t *search = NULL;
    ds_status_t status = ds_search_create(model, cluster, &base, &o, &search);
    for (int i = 0; i < si->num_fixes && status == DS_OK; i++)
        status = ds_search_fix(search, si->fixes[i]);
    if (status != DS_OK) {
        ds_search_destroy(search);
        return status;
    }
    *search_p = search;
    return DS_OK;
}

ds_status_t search_inputs_costs_from_db(search_inputs_t *si, ds_search_t *search,
                                        const ds_cluster_t *cluster)
{
    ds_predict_sources_t sources = predict_sources(si);
    return ds_predict_search_costs(&sources, si->db, si->samples, search, cluster, si->costs,
                                   &si->db_report);
}

void search_inputs_free(search_inputs_t *si)
{
    ds_profile_db_close(si->db);
    si->db = NULL;
    ds_cost_table_destroy(si->costs);
    ds_comm_samples_destroy(si->samples);
    si->costs = NULL;
    si->samples = NULL;
}

int search_inputs_no_candidate(const app_t *app, const ds_search_stats_t *st,
                               const ds_cluster_t *cluster)
{
    if (st->enumerated == 0)
        return app_usage_error(
            app, "the space is empty: the fixes leave no combination (see 'dsmpi %s --help')",
            app->command);
    if (st->out_of_memory == 0)
        return app_usage_error(
            app,
            "no strategy of the space is valid: %lld combinations, all rejected (the first: %s)",
            (long long)st->enumerated, st->first_invalid);
    return app_usage_error(
        app,
        "no strategy fits in the %.0f GiB of a %s: %lld valid ones are out of memory "
        "(the smallest needs %.1f GiB), %lld invalid",
        cluster->device.memory_GiB, cluster->device.name, (long long)st->out_of_memory,
        st->min_oom_GiB, (long long)st->invalid);
}

int64_t search_inputs_max_mbs(const search_inputs_t *si)
{
    if (si->max_mbs > 0)
        return si->max_mbs;
    for (size_t i = 0; i < ds_param_count(); i++) {
        const char *env, *def, *what, *current;
        if (ds_param_describe(i, &env, &def, &what, &current) == DS_OK &&
            strcmp(env, "DS_SEARCH_MAX_MBS") == 0)
            return atoll(current);
    }
    return 8;
}

void search_inputs_print_help(FILE *out)
{
    fputs(
        "Space:\n"
        "  --fix KEY=VALUE          narrow the space with a strategy item (repeatable; a key\n"
        "                           fixed twice takes both values), e.g. --fix mbs=1\n"
        "                           --fix schedule=1f1b --fix no-sp --fix zero=1 --fix bucket=80M\n"
        "  --max-tp N               largest tp enumerated (default: devices per node)\n"
        "  --max-mbs N              largest micro-batch size, powers of two (default 8, "
        "DS_SEARCH_MAX_MBS)\n"
        "Costs:\n"
        "  --profile-db FILE.h5     measured costs (dsmpi profile); another device's are scaled\n"
        "  --fingerprint TEXT       which device's measurements (default: the one with most)\n"
        "  --cost-table FILE        event costs, one '<event key> = <seconds>' a line\n"
        "  --estimate-missing       fill costs the table lacks: compute from the device model\n"
        "                           (modelled), communication from the cluster's links\n"
        "                           (assumed); every number resting on them is marked\n"
        "  --nccl-tests LOG...      fit the communication model on nccl-tests logs of the\n"
        "                           target system (several files, or the option repeated;\n"
        "                           read with --gpus-per-node G when given, else the logs'\n"
        "                           host names): it predicts every communication cost the\n"
        "                           table lacks (as in 'dsmpi comm')\n"
        "  --peak-tflops X          device peak for estimates and MFU (TFLOP/s)\n"
        "  --mem-bw-gbs X           device memory bandwidth for estimates (GB/s)\n"
        "Evaluation:\n"
        "  --layer-level            simulate at layer level (default: the stage-level fast\n"
        "                           path, equal results, faster)\n"
        "  --no-bound, --exhaustive simulate every candidate (default: skip those whose\n"
        "                           lower bound cannot reach the top K; same top K)\n",
        out);
}

cost_origin_t search_inputs_cost_origin(const search_inputs_t *si, bool counts)
{
    cost_origin_t c = {.cost_table = si->cost_table,
                       .profile_db = si->profile_db,
                       .num_logs = (size_t)si->num_logs,
                       .estimate = si->estimate,
                       .report = si->db != NULL ? &si->db_report : NULL,
                       .counts = counts};
    return c;
}

void search_inputs_print_costs(const search_inputs_t *si, const ds_cluster_t *cluster, FILE *out)
{
    cost_origin_t origin = search_inputs_cost_origin(si, true);
    char text[1024];
    cost_origin_describe(&origin, text, sizeof(text));
    fprintf(out, "# costs: %s\n# device %s: %.3g TFLOP/s, %.0f GB/s, %.0f GiB\n", text,
            cluster->device.name, cluster->device.peak_tflops_bf16, cluster->device.mem_bw_GBps,
            cluster->device.memory_GiB);
}

void search_inputs_report_missing(const app_t *app, const search_inputs_t *si, ds_search_t *search)
{
    if (app->rank != 0)
        return;
    ds_event_set_t *set = NULL;
    if (ds_search_events(search, &set) != DS_OK) {
        fprintf(stderr, "dsmpi %s: %s\n", app->command, ds_last_error());
        return;
    }
    size_t missing = 0, shown = 0;
    for (size_t i = 0; i < ds_event_set_size(set); i++) {
        const ds_event_t *e = ds_event_set_at(set, i);
        if (ds_cost_table_find(si->costs, &e->key) != NULL ||
            (e->key.kind == DS_EVENT_COMM && si->samples != NULL))
            continue;
        if (missing++ == 0) {
            cost_origin_t origin = search_inputs_cost_origin(si, false);
            char where[1200];
            cost_origin_missing_where(&origin, where, sizeof(where));
            fprintf(stderr, "dsmpi %s: events of the space have no cost%s:\n", app->command, where);
        }
        if (shown < 40) {
            char key[256];
            ds_event_key_format(&e->key, key, sizeof(key));
            fprintf(stderr, "  %s\n", key);
            shown++;
        }
    }
    if (missing > shown)
        fprintf(stderr, "  ... and %zu more\n", missing - shown);
    fprintf(stderr,
            "%zu of the %zu unique events of the %zu candidates lack a cost: profile them on a "
            "small allocation, or rerun with --estimate-missing (device-model estimates, marked "
            "modelled)\n",
            missing, ds_event_set_size(set), ds_search_candidate_count(search));
    ds_event_set_destroy(set);
}

void search_inputs_print_json_costs(const search_inputs_t *si, bool counts)
{
    cost_origin_t origin = search_inputs_cost_origin(si, counts);
    char costs[1200];
    cost_origin_describe(&origin, costs, sizeof(costs));
    printf(", \"costs\": ");
    output_json_string(stdout, costs);
    printf(", \"cost_table\": ");
    output_json_string_or_null(stdout, si->cost_table);
    printf(", \"profile_db\": ");
    output_json_string_or_null(stdout, si->profile_db);
}
