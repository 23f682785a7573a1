/* dsmpi validate --torch-trace: dsmpi's prediction for a traced PyTorch run
 * beside what the traces measured (per iteration, per pass, collectives), so
 * that a user checks the model on their own job before extrapolating.  Runs
 * on one process; public API only. */
#include "commands.h"

#include <stdlib.h>
#include <string.h>

enum {
    OPT_HELP = 512,
    OPT_TRACE,
    OPT_MODEL,
    OPT_STRATEGY,
    OPT_SEQ_LEN,
    OPT_DTYPE,
    OPT_PROFILE_DB,
    OPT_FINGERPRINT,
    OPT_NCCL_TESTS,
    OPT_GPUS_PER_NODE,
    OPT_ESTIMATE_MISSING,
    OPT_JSON,
};

static void help(void)
{
    printf("usage: dsmpi validate --torch-trace T1 [T2...] --model M --strategy S\n"
           "                      [--profile-db DB --fingerprint F] [--nccl-tests LOG...]\n\n"
           "Compares dsmpi's prediction for the traced run (its model, strategy and\n"
           "allocation: one trace per rank, rank order; the iteration is the slowest rank's)\n"
           "with what the torch.profiler traces measured: the iteration, each kind of pass\n"
           "(layer forward and backward, embedding, head, optimizer) and the collectives.\n"
           "The prediction's costs come from --profile-db (e.g. the traces' own import:\n"
           "'dsmpi import --torch-trace') and the communication model from --nccl-tests.\n"
           "Error = (predicted - measured) / measured.  Runs on one process.\n\n"
           "Options:\n"
           "  --torch-trace T...       the traces, one per rank of the traced run\n"
           "  --model M, --strategy S  the traced run's (dp, tp, pp, mbs, gbs as it ran)\n"
           "  --seq-len N, --dtype D   as in 'dsmpi predict'\n"
           "  --profile-db FILE.h5     costs (dsmpi import / dsmpi profile)\n"
           "  --fingerprint F          which device's costs in it (default: the one with most)\n"
           "  --nccl-tests LOG...      the collective library's measurements (several files)\n"
           "  --gpus-per-node G        reading the logs (default: from their host names)\n"
           "  --estimate-missing       price what neither the database nor the logs hold\n"
           "                           with the device model (a partial trace's passes)\n"
           "  --json                   machine-readable output\n"
           "  --help                   this text\n");
}

typedef struct row {
    const char *name;
    double measured_s;
    double predicted_s;
    size_t count;   /* measured occurrences */
    size_t missing; /* predicted: keys without a cost */
} row_t;

static double error_of(const row_t *r)
{
    return r->measured_s > 0.0 ? (r->predicted_s - r->measured_s) / r->measured_s : 0.0;
}

static int compare_doubles(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The measured iteration: per iteration index the slowest rank, then the median. */
static double measured_iteration(ds_torch_trace_t *const *traces, size_t count, int *iterations_p)
{
    int iterations = 0;
    for (size_t i = 0; i < count; i++) {
        ds_torch_trace_info_t info;
        ds_torch_trace_get_info(traces[i], &info);
        iterations = i == 0 || info.iterations < iterations ? info.iterations : iterations;
    }
    double *slowest = calloc((size_t)(iterations > 0 ? iterations : 1), sizeof(double));
    if (slowest == NULL)
        return 0.0;
    for (int k = 0; k < iterations; k++)
        for (size_t i = 0; i < count; i++) {
            double t = ds_torch_trace_iteration_s(traces[i], k);
            slowest[k] = t > slowest[k] ? t : slowest[k];
        }
    qsort(slowest, (size_t)iterations, sizeof(double), compare_doubles);
    double median = iterations == 0 ? 0.0
                    : iterations % 2
                        ? slowest[iterations / 2]
                        : 0.5 * (slowest[iterations / 2 - 1] + slowest[iterations / 2]);
    free(slowest);
    *iterations_p = iterations;
    return median;
}

static void print_rows(const app_t *app, const row_t *rows, size_t count, int iterations,
                       size_t traces, bool json)
{
    if (json) {
        printf("{\"traces\": %zu, \"iterations\": %d, \"rows\": [", traces, iterations);
        for (size_t i = 0; i < count; i++)
            printf("%s{\"quantity\": \"%s\", \"measured_s\": %.9g, \"predicted_s\": %.9g, "
                   "\"error\": %.6f, \"measured_count\": %zu, \"missing_keys\": %zu}",
                   i ? ", " : "", rows[i].name, rows[i].measured_s, rows[i].predicted_s,
                   error_of(&rows[i]), rows[i].count, rows[i].missing);
        printf("]"); /* the object is closed after the collectives */
        return;
    }
    output_preamble(app, stdout);
    printf("# %zu traces, %d iterations each (the iteration: slowest rank, median)\n#\n", traces,
           iterations);
    printf("# %-26s %12s %12s %8s %8s %8s\n", "quantity", "measured", "predicted", "error", "count",
           "missing");
    printf("# %-26s %12s %12s %8s %8s %8s\n", "", "(s)", "(s)", "(%)", "(count)", "(keys)");
    for (size_t i = 0; i < count; i++)
        printf("  %-26s %12.6f %12.6f %8.1f %8zu %8zu\n", rows[i].name, rows[i].measured_s,
               rows[i].predicted_s, 100.0 * error_of(&rows[i]), rows[i].count, rows[i].missing);
    printf("# passes: measured = the mean range of that kind in the traces; predicted = the sum\n"
           "#   of its compute operators' costs and its framework gap (without the collectives\n"
           "#   inside it)\n"
           "# collectives: measured = their time inside the passes per iteration and rank;\n"
           "#   predicted = communication time per device and iteration\n");
}

/* One collective of the traces (ranks' occurrences merged) and what the
 * communication model predicts for it on the traced allocation. */
typedef struct collective_row {
    ds_torch_collective_t c; /* median_s: the mean of the ranks' medians, by count */
    double predicted_s;      /* < 0: not predicted (a group larger than the allocation) */
    size_t traces;
} collective_row_t;

static bool same_collective(const ds_torch_collective_t *a, const ds_torch_collective_t *b)
{
    return a->op == b->op && a->dtype == b->dtype && a->bytes == b->bytes && a->ranks == b->ranks;
}

/* The traces' collectives merged into rows (*rows_p, malloc'ed). */
static ds_status_t merge_collectives(ds_torch_trace_t *const *traces, size_t num_traces,
                                     collective_row_t **rows_p, size_t *count_p)
{
    collective_row_t *rows = NULL;
    size_t count = 0, capacity = 0;
    ds_status_t status = DS_OK;
    for (size_t i = 0; status == DS_OK && i < num_traces; i++) {
        ds_torch_collective_t *list = NULL;
        size_t n = 0;
        status = ds_torch_trace_collectives(traces[i], &list, &n);
        for (size_t j = 0; status == DS_OK && j < n; j++) {
            size_t r = 0;
            while (r < count && !same_collective(&rows[r].c, &list[j]))
                r++;
            if (r == count && count == capacity) {
                capacity = capacity ? 2 * capacity : 16;
                collective_row_t *grown = realloc(rows, capacity * sizeof(*rows));
                if (grown == NULL) {
                    status = ds_set_error(DS_ERR_NO_MEMORY, "out of memory");
                    break;
                }
                rows = grown;
            }
            if (r == count) {
                rows[count++] = (collective_row_t){list[j], -1.0, 1};
                continue;
            }
            collective_row_t *row = &rows[r];
            double total = (double)(row->c.count + list[j].count);
            row->c.median_s = (row->c.median_s * (double)row->c.count +
                               list[j].median_s * (double)list[j].count) /
                              total;
            row->c.min_s = list[j].min_s < row->c.min_s ? list[j].min_s : row->c.min_s;
            row->c.max_s = list[j].max_s > row->c.max_s ? list[j].max_s : row->c.max_s;
            row->c.count += list[j].count;
            row->traces++;
        }
        ds_torch_collectives_free(list);
    }
    if (status != DS_OK) {
        free(rows);
        return status;
    }
    *rows_p = rows;
    *count_p = count;
    return DS_OK;
}

/* What the communication model (fitted on the --nccl-tests logs; assumed
 * from the cluster without them) predicts for each row on `cluster`. */
static ds_status_t predict_collectives(const ds_predict_sources_t *sources,
                                       const ds_cluster_t *cluster, collective_row_t *rows,
                                       size_t count)
{
    ds_comm_samples_t *samples = NULL;
    ds_comm_model_t *cm = NULL;
    ds_status_t status = ds_predict_load_logs(sources, &samples);
    if (status == DS_OK)
        status = ds_comm_model_create(cluster, samples ? ds_comm_samples_data(samples) : NULL,
                                      samples ? ds_comm_samples_size(samples) : 0, NULL, &cm);
    int64_t gpus = ds_cluster_num_gpus(cluster);
    for (size_t i = 0; status == DS_OK && i < count; i++) {
        const ds_torch_collective_t *c = &rows[i].c;
        if (c->ranks > gpus || (c->op == DS_COMM_SENDRECV ? c->ranks > 2 : c->ranks < 2))
            continue;
        ds_event_key_t key;
        memset(&key, 0, sizeof(key));
        key.kind = DS_EVENT_COMM;
        key.op = (uint8_t)c->op;
        key.pass = DS_PASS_STEP;
        key.dtype = (uint8_t)(c->dtype >= 0 ? c->dtype : DS_DTYPE_FP32);
        key.group = DS_GROUP_DP;
        key.group_size = c->op == DS_COMM_SENDRECV ? 2 : c->ranks;
        key.ranks_per_node = key.group_size;
        key.nodes = 1;
        key.concurrency = 1;
        key.dims[0] = c->bytes;
        ds_comm_prediction_t p;
        status = ds_comm_model_predict(cm, &key, &p);
        if (status == DS_OK)
            rows[i].predicted_s = p.cost.mean_s;
    }
    ds_comm_model_destroy(cm);
    ds_comm_samples_destroy(samples);
    return status;
}

static void print_collectives(const collective_row_t *rows, size_t count, bool json)
{
    if (json) {
        printf("[");
        for (size_t i = 0; i < count; i++) {
            const ds_torch_collective_t *c = &rows[i].c;
            printf("%s{\"op\": \"%s\", \"dtype\": \"%s\", \"bytes\": %lld, \"ranks\": %d, "
                   "\"count\": %zu, \"measured_s\": %.9g, \"min_s\": %.9g, \"max_s\": %.9g, "
                   "\"predicted_s\": ",
                   i ? ", " : "", ds_comm_op_name(c->op),
                   c->dtype >= 0 ? ds_dtype_name((ds_dtype_t)c->dtype) : "other",
                   (long long)c->bytes, c->ranks, c->count, c->median_s, c->min_s, c->max_s);
            if (rows[i].predicted_s >= 0.0)
                printf("%.9g}", rows[i].predicted_s);
            else
                printf("null}");
        }
        printf("]");
        return;
    }
    if (count == 0)
        return;
    printf("#\n# collectives with sizes (record_param_comms), one occurrence:\n");
    printf("# %-16s %6s %12s %6s %7s %12s %12s %8s\n", "collective", "dtype", "bytes", "ranks",
           "count", "measured", "predicted", "error");
    printf("# %-16s %6s %12s %6s %7s %12s %12s %8s\n", "", "", "", "", "", "(s)", "(s)", "(%)");
    for (size_t i = 0; i < count; i++) {
        const ds_torch_collective_t *c = &rows[i].c;
        printf("  %-16s %6s %12lld %6d %7zu %12.6f", ds_comm_op_name(c->op),
               c->dtype >= 0 ? ds_dtype_name((ds_dtype_t)c->dtype) : "other", (long long)c->bytes,
               c->ranks, c->count, c->median_s);
        if (rows[i].predicted_s >= 0.0 && c->median_s > 0.0)
            printf(" %12.6f %8.1f\n", rows[i].predicted_s,
                   100.0 * (rows[i].predicted_s - c->median_s) / c->median_s);
        else
            printf(" %12s %8s\n", "-", "-");
    }
    printf("# measured: the median occurrence (the mean of the ranks' medians); predicted: the\n"
           "#   communication model on this allocation ('-': a group larger than it)\n");
}

static ds_status_t build(const char *model_spec, const char *strategy_text, int64_t seq_len,
                         const char *dtype_text, size_t ranks, ds_model_t **model_p,
                         ds_strategy_t *s)
{
    ds_model_t *model = NULL;
    ds_status_t status = app_model_load(model_spec, seq_len, dtype_text, &model);
    ds_strategy_init(s);
    if (status == DS_OK)
        status = ds_strategy_parse(strategy_text, s);
    if (status == DS_OK)
        status = ds_strategy_resolve(s, model, (int64_t)ranks, (int)ranks);
    if (status == DS_OK && (int64_t)s->dp * s->tp * s->pp != (int64_t)ranks)
        status = ds_set_error(DS_ERR_INVALID_ARG,
                              "--strategy %s has dp*tp*pp = %d ranks (accepted: the %zu traces, "
                              "one per rank)",
                              strategy_text, s->dp * s->tp * s->pp, ranks);
    if (status != DS_OK) {
        ds_model_destroy(model);
        return status;
    }
    *model_p = model;
    return DS_OK;
}

int validate_torch(app_t *app)
{
    static const struct option options[] = {
        {"torch-trace", required_argument, NULL, OPT_TRACE},
        {"model", required_argument, NULL, OPT_MODEL},
        {"strategy", required_argument, NULL, OPT_STRATEGY},
        {"seq-len", required_argument, NULL, OPT_SEQ_LEN},
        {"dtype", required_argument, NULL, OPT_DTYPE},
        {"profile-db", required_argument, NULL, OPT_PROFILE_DB},
        {"fingerprint", required_argument, NULL, OPT_FINGERPRINT},
        {"nccl-tests", required_argument, NULL, OPT_NCCL_TESTS},
        {"gpus-per-node", required_argument, NULL, OPT_GPUS_PER_NODE},
        {"estimate-missing", no_argument, NULL, OPT_ESTIMATE_MISSING},
        {"json", no_argument, NULL, OPT_JSON},
        {"help", no_argument, NULL, OPT_HELP},
        {NULL, 0, NULL, 0}};
    int code = app_mpi_start(app, false);
    if (code != APP_EXIT_OK)
        return code;
    for (int i = 0; i < app->argc; i++)
        if (strcmp(app->argv[i], "--help") == 0) { /* "--torch-trace --help" too */
            if (app->rank == 0)
                help();
            return APP_EXIT_OK;
        }
    const char **paths = calloc((size_t)app->argc + 1, sizeof(*paths));
    const char **logs = calloc((size_t)app->argc + 1, sizeof(*logs));
    ds_torch_trace_t **traces = calloc((size_t)app->argc + 1, sizeof(*traces));
    size_t num_paths = 0, num_logs = 0;
    const char *model_spec = NULL, *strategy_text = NULL, *dtype_text = NULL;
    const char *db_path = NULL, *fingerprint = NULL;
    int64_t seq_len = 0, gpus_per_node = 0;
    bool json = false, estimate_missing = false;
    ds_model_t *model = NULL;
    ds_cost_table_t *costs = NULL;
    ds_profile_db_t *db = NULL;
    ds_sim_t *sim = NULL;
    ds_status_t status = DS_OK;
    if (paths == NULL || logs == NULL || traces == NULL) {
        code = app_usage_error(app, "out of memory");
        goto out;
    }
    int id;
    opterr = 0;
    optind = 1;
    while ((id = getopt_long(app->argc, app->argv, "", options, NULL)) != -1) {
        switch (id) {
        case OPT_HELP:
            if (app->rank == 0)
                help();
            code = APP_EXIT_OK;
            goto out;
        case OPT_TRACE:
            for (const char *p = optarg; p != NULL; p = app_next_option_word(app))
                paths[num_paths++] = p;
            break;
        case OPT_NCCL_TESTS:
            for (const char *p = optarg; p != NULL; p = app_next_option_word(app))
                logs[num_logs++] = p;
            break;
        case OPT_MODEL: model_spec = optarg; break;
        case OPT_STRATEGY: strategy_text = optarg; break;
        case OPT_DTYPE: dtype_text = optarg; break;
        case OPT_PROFILE_DB: db_path = optarg; break;
        case OPT_FINGERPRINT: fingerprint = optarg; break;
        case OPT_JSON: json = true; break;
        case OPT_ESTIMATE_MISSING: estimate_missing = true; break;
        case OPT_SEQ_LEN:
        case OPT_GPUS_PER_NODE:
            status = id == OPT_SEQ_LEN
                         ? ds_parse_count(optarg, "seq-len", 1, 1 << 24, &seq_len)
                         : ds_parse_count(optarg, "gpus-per-node", 1, 1024, &gpus_per_node);
            if (status != DS_OK) {
                code = app_fail(app, status);
                goto out;
            }
            break;
        default: code = app_option_error(app, NULL); goto out;
        }
    }
    if (optind < app->argc || num_paths == 0 || model_spec == NULL || strategy_text == NULL) {
        code = app_usage_error(app, "%s (see 'dsmpi validate --help')",
                               optind < app->argc
                                   ? "unexpected argument"
                                   : "--torch-trace needs the traces, --model and --strategy");
        goto out;
    }
    if (app->rank != 0) {
        code = APP_EXIT_OK;
        goto out;
    }
    for (size_t i = 0; status == DS_OK && i < num_paths; i++)
        status = ds_torch_trace_load(paths[i], &traces[i]);
    ds_strategy_t s;
    if (status == DS_OK)
        status = build(model_spec, strategy_text, seq_len, dtype_text, num_paths, &model, &s);
    /* The prediction of the traced run's allocation. */
    ds_predict_sources_t sources;
    ds_predict_sources_init(&sources);
    sources.profile_db = db_path;
    sources.fingerprint = fingerprint;
    sources.nccl_tests = logs;
    sources.num_nccl_tests = num_logs;
    sources.gpus_per_node = (int)gpus_per_node;
    ds_cluster_t cluster;
    if (status == DS_OK)
        status = ds_cost_table_create(&costs);
    if (status == DS_OK)
        status = ds_predict_costs_open(&sources, NULL, costs, &db);
    if (status == DS_OK) {
        ds_device_spec_t spec;
        ds_cost_sources_t measured = {db, fingerprint, NULL, 0};
        const char *device =
            ds_costs_measured_device(&measured, &spec) == DS_OK ? spec.name : "cpu";
        status = ds_cluster_init(&cluster, 1, (int)num_paths, device);
    }
    int assembled = 0;
    ds_cost_report_t report;
    if (status == DS_OK)
        status = ds_predict_costs_assemble(&sources, db, model, &s, &cluster, costs, &report,
                                           &assembled);
    if (status == DS_OK)
        status = ds_sim_create(&sim);
    ds_sim_summary_t summary;
    if (status == DS_OK) {
        ds_sim_options_t so;
        ds_sim_options_init(&so);
        so.estimate_missing = estimate_missing;
        double low = 0.0, high = 0.0;
        status = ds_predict_run_band(sim, model, &s, &cluster, costs, &so, &low, &high);
        if (status == DS_ERR_NOT_FOUND) {
            char first[256] = "";
            if (ds_sim_missing_count(sim) > 0)
                ds_event_key_format(ds_sim_missing_at(sim, 0), first, sizeof(first));
            status = ds_set_error(DS_ERR_NOT_FOUND,
                                  "%zu events of the traced run have no cost, first '%s' (import "
                                  "the traces with 'dsmpi import --torch-trace' into "
                                  "--profile-db, --calibrate-from dsmpi's own profile, and give "
                                  "--nccl-tests logs for collectives)",
                                  ds_sim_missing_count(sim), first);
        }
    }
    if (status != DS_OK) {
        code = app_fail(app, status);
        goto out;
    }
    ds_sim_get_summary(sim, &summary);
    row_t rows[2 + DS_FRAMEWORK_PART_COUNT_];
    size_t num_rows = 0;
    int iterations = 0;
    rows[num_rows++] = (row_t){"iteration", measured_iteration(traces, num_paths, &iterations),
                               summary.iteration_s, (size_t)iterations, 0};
    for (int p = 0; status == DS_OK && p < DS_FRAMEWORK_PART_COUNT_; p++) {
        row_t r = {ds_framework_part_name((ds_framework_part_t)p), 0.0, 0.0, 0, 0};
        double sum = 0.0;
        int stages = 0;
        for (size_t i = 0; i < num_paths; i++) {
            size_t n = 0;
            double mean = 0.0;
            ds_torch_trace_part_time(traces[i], (ds_framework_part_t)p, &n, &mean);
            sum += mean * (double)n;
            r.count += n;
        }
        r.measured_s = r.count > 0 ? sum / (double)r.count : 0.0;
        /* Predicted: the mean over the stages that run the part. */
        double predicted = 0.0;
        for (int stage = 0; status == DS_OK && stage < s.pp; stage++) {
            bool runs = p <= DS_FRAMEWORK_LAYER_BACKWARD || p == DS_FRAMEWORK_OPTIMIZER ||
                        (p <= DS_FRAMEWORK_EMBEDDING_BACKWARD && stage == 0) ||
                        (p <= DS_FRAMEWORK_HEAD_BACKWARD && p >= DS_FRAMEWORK_HEAD_FORWARD &&
                         stage == s.pp - 1);
            if (!runs)
                continue;
            double seconds = 0.0;
            size_t missing = 0;
            status = ds_framework_part_seconds(model, &s, stage, costs, (ds_framework_part_t)p,
                                               &seconds, &missing);
            predicted += seconds;
            r.missing += missing;
            stages++;
        }
        r.predicted_s = stages > 0 ? predicted / stages : 0.0;
        if (r.count > 0)
            rows[num_rows++] = r;
    }
    /* Collectives inside the passes, per iteration and rank. */
    row_t coll = {"collectives", 0.0, summary.comm_s, 0, 0};
    for (size_t i = 0; status == DS_OK && i < num_paths; i++) {
        ds_cost_table_t *scratch = NULL;
        ds_framework_result_t r;
        ds_torch_trace_info_t info;
        ds_torch_trace_get_info(traces[i], &info);
        int stage = (int)(i / (size_t)(s.tp * s.dp)); /* Megatron's order: tp, dp, pp */
        status = ds_cost_table_create(&scratch);
        if (status == DS_OK)
            status =
                ds_torch_trace_map(traces[i], model, &s, stage < s.pp ? stage : 0, scratch, &r);
        if (status == DS_OK && info.iterations > 0)
            coll.measured_s += r.collective_s / info.iterations / (double)num_paths;
        coll.count += status == DS_OK && r.collective_s > 0.0;
        ds_cost_table_destroy(scratch);
    }
    if (status != DS_OK) {
        code = app_fail(app, status);
        goto out;
    }
    rows[num_rows++] = coll;
    collective_row_t *collectives = NULL;
    size_t num_collectives = 0;
    status = merge_collectives(traces, num_paths, &collectives, &num_collectives);
    if (status == DS_OK)
        status = predict_collectives(&sources, &cluster, collectives, num_collectives);
    if (status != DS_OK) {
        free(collectives);
        code = app_fail(app, status);
        goto out;
    }
    print_rows(app, rows, num_rows, iterations, num_paths, json);
    if (json)
        printf(", \"collectives\": ");
    print_collectives(collectives, num_collectives, json);
    if (json)
        printf("}\n");
    free(collectives);
    code = APP_EXIT_OK;
out:
    for (size_t i = 0; traces != NULL && i < num_paths; i++)
        ds_torch_trace_destroy(traces[i]);
    ds_sim_destroy(sim);
    ds_profile_db_close(db);
    ds_cost_table_destroy(costs);
    ds_model_destroy(model);
    free(traces);
    free(paths);
    free(logs);
    return code;
}
