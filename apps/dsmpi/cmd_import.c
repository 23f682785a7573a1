/* dsmpi import: measurements made elsewhere into a profile database.  Each
 * kind of source is one entry of the `importers` table: an option, a help
 * line and a function that reads the file and adds what it holds (event
 * costs, communication samples) to the database. */
#include "commands.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

typedef struct import_context {
    ds_profile_db_t *db;
    const char *fingerprint; /* device the imported event costs are valid for */
    const char *host;
    double imported_at_s;
    int gpus_per_node;       /* nccl-tests: devices per node (0: from the logs' host names) */
    const char *cluster_tag; /* nccl-tests: the system the logs come from */
    /* torch traces: the model and the traced run's strategy, the stage the
     * trace's rank ran, and every framework cost read (for calibration) */
    const ds_model_t *model;
    const ds_strategy_t *strategy;
    int stage;
    ds_cost_table_t *framework;
    const app_t *app;
    double unprofiled_s; /* torch traces: the job's iteration without the profiler (0: not given) */
} import_context_t;

#define IMPORT_MAX_COLLECTIVES 12

typedef struct import_result {
    size_t events;       /* event costs read */
    size_t comm_samples; /* communication samples read */
    size_t new_events;   /* of the events, keys the database did not hold */
    size_t replaced;     /* of the events, keys whose cost they replace */
    bool traced;         /* a torch trace: the fields below hold */
    ds_torch_trace_info_t trace;
    ds_framework_result_t mapped;
    size_t num_collectives; /* kinds of collectives with sizes; the first few kept */
    int gpus_per_node;      /* the layout their samples were stored with (0: one node) */
    ds_torch_collective_t collectives[IMPORT_MAX_COLLECTIVES];
} import_result_t;

typedef ds_status_t (*import_fn)(const import_context_t *context, const char *path,
                                 import_result_t *result);

typedef struct importer {
    const char *option; /* long option, also the source's name in the output */
    const char *help;
    import_fn run;
    bool several; /* the option takes several files (as --nccl-tests in every command) */
} importer_t;

/* One event cost of an import: a record of the context's device, replacing
 * the database's cost of the same key. */
static ds_status_t add_imported(const import_context_t *context, const ds_event_key_t *key,
                                const ds_cost_t *cost, import_result_t *result)
{
    ds_profile_record_t record;
    memset(&record, 0, sizeof(record));
    record.key = *key;
    record.cost = *cost;
    snprintf(record.fingerprint, sizeof(record.fingerprint), "%s", context->fingerprint);
    snprintf(record.host, sizeof(record.host), "%s", context->host);
    record.rank = -1;
    record.measured_at_s = context->imported_at_s;
    if (ds_profile_db_has(context->db, context->fingerprint, key))
        result->replaced++;
    else
        result->new_events++;
    result->events++;
    return ds_profile_db_add_record(context->db, &record);
}

/* A text cost table: every entry becomes an event cost marked imported. */
static ds_status_t import_cost_table(const import_context_t *context, const char *path,
                                     import_result_t *result)
{
    ds_cost_table_t *table = NULL;
    ds_status_t status = ds_cost_table_create(&table);
    if (status == DS_OK)
        status = ds_cost_table_load_text(table, path);
    for (size_t i = 0; status == DS_OK && i < ds_cost_table_size(table); i++) {
        const ds_event_key_t *key;
        const ds_cost_t *cost;
        ds_cost_table_at(table, i, &key, &cost);
        ds_cost_t imported = *cost;
        imported.provenance = DS_PROV_IMPORTED;
        status = add_imported(context, key, &imported, result);
    }
    ds_cost_table_destroy(table);
    return status;
}

/* Two traces' costs of one key: the mean over their occurrences together;
 * the quantiles weighted the same way (an approximation: the samples are gone). */
static void merge_costs(const ds_cost_t *a, const ds_cost_t *b, ds_cost_t *out)
{
    double na = (double)(a->repetitions > 0 ? a->repetitions : 1);
    double nb = (double)(b->repetitions > 0 ? b->repetitions : 1);
    double wa = na / (na + nb), wb = nb / (na + nb);
    *out = *b;
    out->mean_s = wa * a->mean_s + wb * b->mean_s;
    out->median_s = wa * a->median_s + wb * b->median_s;
    out->p10_s = a->p10_s < b->p10_s ? a->p10_s : b->p10_s;
    out->p90_s = a->p90_s > b->p90_s ? a->p90_s : b->p90_s;
    out->repetitions = (int64_t)(na + nb);
}

/* The trace's collectives as communication samples (imported, the median
 * occurrence; p10/p90 its fastest and slowest): the communication model is
 * then fitted on the collective library as the framework ran it inside
 * training.  A group spans ceil(ranks / --gpus-per-node) nodes; without
 * that option, one node.  Element types dsmpi has no key for are left out. */
static ds_status_t add_traced_collectives(const import_context_t *context,
                                          const ds_torch_collective_t *list, size_t count,
                                          import_result_t *result)
{
    ds_comm_sample_t *samples = NULL;
    size_t n = 0;
    if (count == 0)
        return DS_OK;
    samples = calloc(count, sizeof(*samples));
    if (samples == NULL)
        return ds_set_error(DS_ERR_NO_MEMORY, "out of memory for %zu traced collectives", count);
    char tag[64] = "";
    if (context->cluster_tag != NULL)
        snprintf(tag, sizeof(tag), "%s", context->cluster_tag);
    else
        ds_fingerprint_source_tag(context->fingerprint, tag, sizeof(tag));
    for (size_t i = 0; i < count; i++) {
        const ds_torch_collective_t *c = &list[i];
        if (c->dtype < 0 || c->ranks < 2 || c->bytes <= 0 || !(c->median_s > 0.0))
            continue;
        int32_t per_node = context->gpus_per_node > 0 && context->gpus_per_node < c->ranks
                               ? context->gpus_per_node
                               : c->ranks;
        ds_comm_sample_t *x = &samples[n++];
        x->op = c->op;
        x->dtype = (ds_dtype_t)c->dtype;
        x->bytes = c->bytes;
        x->group_size = c->ranks;
        x->nodes = (c->ranks + per_node - 1) / per_node;
        x->ranks_per_node = per_node;
        x->concurrency = 1;
        x->mean_s = x->median_s = c->median_s;
        x->p10_s = c->min_s;
        x->p90_s = c->max_s;
        x->repetitions = (int64_t)c->count;
        x->provenance = DS_PROV_IMPORTED;
        snprintf(x->source, sizeof(x->source), "%s", tag);
    }
    ds_status_t status = n > 0 ? ds_profile_db_add_comm_samples(context->db, samples, n) : DS_OK;
    if (status == DS_OK)
        result->comm_samples += n;
    result->gpus_per_node = context->gpus_per_node;
    free(samples);
    return status;
}

/* A torch.profiler trace: its layer passes mapped onto the model, every
 * cost marked framework, its collectives communication samples; a warning
 * when it covers too little. */
static ds_status_t import_torch_trace(const import_context_t *context, const char *path,
                                      import_result_t *result)
{
    if (context->model == NULL)
        return ds_set_error(DS_ERR_INVALID_ARG,
                            "--torch-trace %s needs the traced run's --model and --strategy "
                            "(see 'dsmpi import --help')",
                            path);
    ds_torch_trace_t *trace = NULL;
    ds_cost_table_t *table = NULL;
    ds_status_t status = ds_torch_trace_load(path, &trace);
    if (status == DS_OK && context->unprofiled_s > 0.0)
        status = ds_torch_trace_set_unprofiled_s(trace, context->unprofiled_s, NULL);
    if (status == DS_OK)
        status = ds_cost_table_create(&table);
    if (status == DS_OK)
        status = ds_torch_trace_map(trace, context->model, context->strategy, context->stage, table,
                                    &result->mapped);
    if (status == DS_OK) {
        ds_torch_collective_t *list = NULL;
        status = ds_torch_trace_collectives(trace, &list, &result->num_collectives);
        for (size_t i = 0; i < result->num_collectives && i < IMPORT_MAX_COLLECTIVES; i++)
            result->collectives[i] = list[i];
        if (status == DS_OK)
            status = add_traced_collectives(context, list, result->num_collectives, result);
        ds_torch_collectives_free(list);
    }
    if (status == DS_OK) {
        ds_torch_trace_get_info(trace, &result->trace);
        result->traced = true;
        if (result->mapped.keys == 0)
            status = ds_set_error(DS_ERR_BAD_FILE,
                                  "%s: no layer pass of the trace maps onto the model (accepted: "
                                  "ranges named layer:N:fwd|bwd, embedding:fwd|bwd, "
                                  "head:fwd|bwd, Optimizer.step#..., or with_stack's "
                                  "\"nn.Module: TransformerLayer_N\"-style module events)",
                                  path);
    }
    for (size_t i = 0; status == DS_OK && i < ds_cost_table_size(table); i++) {
        const ds_event_key_t *key;
        const ds_cost_t *cost;
        ds_cost_table_at(table, i, &key, &cost);
        ds_cost_t merged = *cost;
        const ds_cost_t *earlier = ds_cost_table_find(context->framework, key);
        if (earlier != NULL) /* an earlier trace of this import: the mean over both */
            merge_costs(earlier, cost, &merged);
        status = add_imported(context, key, &merged, result);
        if (status == DS_OK)
            status = ds_cost_table_set(context->framework, key, &merged);
    }
    if (status == DS_OK && result->mapped.coverage < DS_FRAMEWORK_MIN_COVERAGE) {
        const ds_framework_unmapped_t *u = result->mapped.unmapped;
        app_warning(context->app,
                    "%s: the mapped layer passes cover %.1f%% of the traced iterations (under "
                    "%.0f%%); largest unmapped: %s (%.1f%%)",
                    path, 100.0 * result->mapped.coverage, 100.0 * DS_FRAMEWORK_MIN_COVERAGE,
                    result->mapped.num_unmapped > 0 ? u->name : "none",
                    result->mapped.num_unmapped > 0 ? 100.0 * u->share : 0.0);
    }
    ds_cost_table_destroy(table);
    ds_torch_trace_destroy(trace);
    return status;
}

/* nccl-tests output: every row becomes communication samples of the
 * target system (the communication model is fitted on them). */
static ds_status_t import_nccl_tests(const import_context_t *context, const char *path,
                                     import_result_t *result)
{
    ds_comm_samples_t *samples = NULL;
    ds_comm_import_options_t options;
    ds_comm_import_options_init(&options);
    options.gpus_per_node = context->gpus_per_node;
    options.source = context->cluster_tag;
    ds_status_t status = ds_comm_samples_create(&samples);
    if (status == DS_OK)
        status = ds_comm_import_nccl_tests(path, &options, samples, NULL);
    if (status == DS_OK)
        status = ds_profile_db_add_comm_samples(context->db, ds_comm_samples_data(samples),
                                                ds_comm_samples_size(samples));
    if (status == DS_OK)
        result->comm_samples += ds_comm_samples_size(samples);
    ds_comm_samples_destroy(samples);
    return status;
}

/* Communication samples as text (ds_comm_samples_write_text): marked imported. */
static ds_status_t import_comm_samples(const import_context_t *context, const char *path,
                                       import_result_t *result)
{
    ds_comm_samples_t *samples = NULL;
    ds_status_t status = ds_comm_samples_create(&samples);
    if (status == DS_OK)
        status = ds_comm_samples_load_text(samples, path);
    size_t count = status == DS_OK ? ds_comm_samples_size(samples) : 0;
    ds_comm_sample_t *copy = count > 0 ? calloc(count, sizeof(*copy)) : NULL;
    if (count > 0 && copy == NULL)
        status = ds_set_error(DS_ERR_NO_MEMORY, "out of memory reading %s", path);
    if (status == DS_OK && count > 0) {
        memcpy(copy, ds_comm_samples_data(samples), count * sizeof(*copy));
        for (size_t i = 0; i < count; i++) {
            copy[i].provenance = DS_PROV_IMPORTED;
            if (copy[i].source[0] == '\0')
                snprintf(copy[i].source, sizeof(copy[i].source), "%s", "imported");
        }
        status = ds_profile_db_add_comm_samples(context->db, copy, count);
    }
    if (status == DS_OK)
        result->comm_samples += count;
    free(copy);
    ds_comm_samples_destroy(samples);
    return status;
}

static const importer_t importers[] = {
    {"nccl-tests",
     "nccl-tests output (all_reduce_perf, all_gather_perf, reduce_scatter_perf,\n"
     "                           sendrecv_perf, alltoall_perf, broadcast_perf; plain or\n"
     "                           mpirun/srun-prefixed; several files after the option;\n"
     "                           --gpus-per-node G, --cluster-tag T)",
     import_nccl_tests, true},
    {"cost-table",
     "text cost table, one event a line: '<event key> = <mean s>\n"
     "                           [<median s> <p10 s> <p90 s> <repetitions> <provenance>]',\n"
     "                           e.g. 'gemm fwd bf16 NN m=2048 n=3072 k=1024 = 1.5e-3'",
     import_cost_table, false},
    {"comm-samples",
     "communication samples as text, one a line: '<primitive> <dtype> bytes=B\n"
     "                           group=N nodes=K per-node=R [conc=C] [batched] = <mean s> ...'\n"
     "                           (what 'dsmpi profile --comm-samples-out' writes)",
     import_comm_samples, false},
    {"torch-trace",
     "torch.profiler trace (Kineto Chrome-trace JSON, or the legacy\n"
     "                           autograd-profiler array); several files after the option;\n"
     "                           needs the traced run's --model, --strategy (--seq-len,\n"
     "                           --dtype, --stage); costs marked 'framework', a key's\n"
     "                           the mean over every trace given; its collectives with\n"
     "                           sizes become communication samples (imported; groups\n"
     "                           on one node unless --gpus-per-node G)",
     import_torch_trace, true},
};
#define NUM_IMPORTERS (sizeof(importers) / sizeof(importers[0]))

enum {
    OPT_HELP = 512,
    OPT_PROFILE_DB,
    OPT_FINGERPRINT,
    OPT_GPUS_PER_NODE,
    OPT_CLUSTER_TAG,
    OPT_JSON,
    OPT_CSV,
    OPT_QUIET,
    OPT_MODEL,
    OPT_STRATEGY,
    OPT_SEQ_LEN,
    OPT_DTYPE,
    OPT_STAGE,
    OPT_CALIBRATE_FROM,
    OPT_UNPROFILED_S,
    OPT_SOURCE
};

static void help(void)
{
    printf("usage: dsmpi import SOURCE... --profile-db FILE.h5 [--fingerprint F] [options]\n\n"
           "Adds measurements made elsewhere to a profile database (created when missing),\n"
           "marked 'imported'.  A cost already in the database for the same device\n"
           "fingerprint and event key is replaced.  Runs on one process.\n\n"
           "Sources (each may be given several times):\n");
    for (size_t i = 0; i < NUM_IMPORTERS; i++)
        printf("  --%-22s %s\n", importers[i].option, importers[i].help);
    printf("\nOptions:\n"
           "  --profile-db FILE.h5     the database to add to (required)\n"
           "  --fingerprint F          device fingerprint the event costs are valid for\n"
           "                           (default 'imported')\n"
           "  --model M, --strategy S  torch traces: the traced run's model and strategy\n"
           "  --seq-len N, --dtype D   (as in 'dsmpi predict'; dp, tp, pp, mbs as it ran)\n"
           "  --stage N                torch traces: the pipeline stage the traced rank ran (0)\n"
           "  --calibrate-from F       torch traces: scale dsmpi's own costs of device\n"
           "                           fingerprint F to the framework (ratio per operator\n"
           "                           class on the keys both hold) for every key the traces\n"
           "                           lack; marked 'calibrated'\n"
           "  --unprofiled-s T         torch traces (CPU): the traced job's iteration time\n"
           "                           without the profiler (median, seconds); every cost\n"
           "                           is scaled by T / the traced median\n"
           "  --json, --csv            machine-readable output\n"
           "  --quiet                  no output on success\n"
           "  --help                   this text\n\n"
           "Profile databases on file systems without file locking may need\n"
           "HDF5_USE_FILE_LOCKING=FALSE in the environment.\n");
}

typedef struct source {
    size_t importer;
    const char *path;
    import_result_t result;
} source_t;

static void print_table(const app_t *app, const char *db_path, const char *fingerprint,
                        const source_t *sources, size_t num_sources,
                        const ds_profile_db_info_t *info)
{
    output_preamble(app, stdout);
    printf("# profile database: %s\n# device fingerprint of the event costs: %s\n#\n", db_path,
           fingerprint);
    printf("# %-12s %10s %12s %10s %10s  %s\n", "source", "events", "comm_samples", "new",
           "replaced", "file");
    printf("# %-12s %10s %12s %10s %10s\n", "", "(count)", "(count)", "(count)", "(count)");
    for (size_t i = 0; i < num_sources; i++) {
        const import_result_t *r = &sources[i].result;
        printf("  %-12s %10zu %12zu %10zu %10zu  %s\n", importers[sources[i].importer].option,
               r->events, r->comm_samples, r->new_events, r->replaced, sources[i].path);
    }
    printf("#\n# the database now holds %zu events for %zu device fingerprints and %zu "
           "communication samples\n",
           info->num_records, info->num_fingerprints, info->num_comm_samples);
}

static void print_json(const char *db_path, const char *fingerprint, const source_t *sources,
                       size_t num_sources, const ds_profile_db_info_t *info)
{
    printf("{\"profile_db\": ");
    output_json_string(stdout, db_path);
    printf(", \"fingerprint\": ");
    output_json_string(stdout, fingerprint);
    printf(", \"sources\": [");
    for (size_t i = 0; i < num_sources; i++) {
        const import_result_t *r = &sources[i].result;
        printf("%s{\"source\": \"%s\", \"file\": ", i ? ", " : "",
               importers[sources[i].importer].option);
        output_json_string(stdout, sources[i].path);
        printf(", \"events\": %zu, \"comm_samples\": %zu, \"new\": %zu, \"replaced\": %zu}",
               r->events, r->comm_samples, r->new_events, r->replaced);
    }
    printf("], \"database\": {\"events\": %zu, \"fingerprints\": %zu, \"comm_samples\": %zu}}\n",
           info->num_records, info->num_fingerprints, info->num_comm_samples);
}

static void print_csv(const source_t *sources, size_t num_sources)
{
    printf("source,file,events,comm_samples,new,replaced\n");
    for (size_t i = 0; i < num_sources; i++) {
        const import_result_t *r = &sources[i].result;
        printf("%s,%s,%zu,%zu,%zu,%zu\n", importers[sources[i].importer].option, sources[i].path,
               r->events, r->comm_samples, r->new_events, r->replaced);
    }
}

/* Collectives the trace records with sizes (also stored as communication
 * samples; `dsmpi validate --torch-trace` compares them with the model
 * fitted on --nccl-tests logs). */
static void print_collectives(const import_result_t *r)
{
    printf("#   collectives with sizes (record_param_comms): %zu kinds, stored as communication "
           "samples (",
           r->num_collectives);
    if (r->gpus_per_node > 0)
        printf("%d devices per node)\n", r->gpus_per_node);
    else
        printf("each group on one node: --gpus-per-node says otherwise)\n");
    printf("#   %-16s %6s %12s %6s %7s %12s\n", "collective", "dtype", "bytes", "ranks", "count",
           "median (s)");
    for (size_t i = 0; i < r->num_collectives && i < IMPORT_MAX_COLLECTIVES; i++) {
        const ds_torch_collective_t *c = &r->collectives[i];
        printf("    %-16s %6s %12lld %6d %7zu %12.6f\n", ds_comm_op_name(c->op),
               c->dtype >= 0 ? ds_dtype_name((ds_dtype_t)c->dtype) : "other", (long long)c->bytes,
               c->ranks, c->count, c->median_s);
    }
    if (r->num_collectives > IMPORT_MAX_COLLECTIVES)
        printf("#   ... %zu more\n", r->num_collectives - IMPORT_MAX_COLLECTIVES);
}

/* The torch traces: what each holds, what it maps, what it leaves out. */
static void print_traces(const source_t *sources, size_t num_sources, const char *calibrate_from,
                         const ds_framework_calibration_t *c)
{
    for (size_t i = 0; i < num_sources; i++) {
        const import_result_t *r = &sources[i].result;
        if (!r->traced)
            continue;
        const ds_framework_result_t *m = &r->mapped;
        printf("#\n# %s: %s trace, %d iterations, median %.4f s (min %.4f, max %.4f), %zu "
               "events (%zu with shapes)\n",
               sources[i].path, r->trace.format == DS_TORCH_TRACE_KINETO ? "kineto" : "legacy",
               r->trace.iterations, r->trace.iteration_median_s, r->trace.iteration_min_s,
               r->trace.iteration_max_s, r->trace.events, r->trace.with_shapes);
        printf("#   mapped: %zu ranges onto %zu keys (%zu operator occurrences), %.1f%% of the "
               "iterations' time; framework time between operators %.1f%% of it\n",
               m->ranges_mapped, m->keys, m->occurrences, 100.0 * m->coverage,
               m->mapped_s > 0.0 ? 100.0 * m->between_s / m->mapped_s : 0.0);
        if (m->shapes_checked > 0)
            printf("#   shapes: the Input Dims of %zu traced GEMMs agree with the model's\n",
                   m->shapes_checked);
        if (r->trace.kernels > 0)
            printf("#   device work: %zu kernels, copies and memsets, %zu linked to their launches "
                   "(correlation ids)%s\n",
                   r->trace.kernels, r->trace.kernels_linked,
                   m->device_timed ? "" : ": costs are CPU operator times");
        if (m->device_timed) {
            double idle =
                m->device_gap_s > m->kernel_other_s ? m->device_gap_s - m->kernel_other_s : 0.0;
            double all = m->kernel_s + m->device_gap_s;
            printf("#   costs are device time: %.6f s of the matched operators' work; %.6f s "
                   "launched in the passes by operators of no known kind and %.6f s idle "
                   "between kernels (%.1f%% of the charged time); both in the passes' "
                   "framework gap\n",
                   m->kernel_s, m->kernel_other_s, idle, all > 0.0 ? 100.0 * idle / all : 0.0);
        }
        if (m->unprofiled_scale > 0.0)
            printf("#   without the profiler: costs x %.4f (the unprofiled iteration over the "
                   "traced median), %.6f s taken off in all\n",
                   m->unprofiled_scale, m->profiler_removed_s);
        if (m->collective_s > 0.0)
            printf("#   collectives inside the passes: %.1f%% of the mapped time (left to the "
                   "communication model)\n",
                   100.0 * m->collective_s / m->mapped_s);
        if (r->num_collectives > 0)
            print_collectives(r);
        if (m->ranges_skipped > 0 || m->model_ops_unmatched > 0)
            printf("#   not mapped: %zu ranges; model operators without a traced match: %zu\n",
                   m->ranges_skipped, m->model_ops_unmatched);
        printf("#   %-40s %10s %7s\n", "unmapped", "time", "share");
        printf("#   %-40s %10s %7s\n", "", "(s)", "(%)");
        for (size_t j = 0; j < m->num_unmapped; j++)
            printf("    %-40.40s %10.4f %7.2f\n", m->unmapped[j].name, m->unmapped[j].seconds,
                   100.0 * m->unmapped[j].share);
    }
    if (calibrate_from == NULL)
        return;
    printf("#\n# calibrated from '%s': %zu costs (%zu from their operator's keys at their size, "
           "the rest by their class); framework / dsmpi ratio per class:",
           calibrate_from, c->calibrated, c->by_operator);
    for (int i = 0; i < DS_FRAMEWORK_CLASS_COUNT_; i++)
        if (c->common[i] > 0)
            printf(" %s %.3f (%zu keys)", ds_framework_class_name((ds_framework_class_t)i),
                   c->ratio[i], c->common[i]);
    printf(", overall %.3f\n", c->overall);
}

/* The model and strategy of a traced run, when --model is given. */
static ds_status_t traced_run(const char *model_spec, const char *strategy_text, int64_t seq_len,
                              const char *dtype_text, int stage, ds_model_t **model_p,
                              ds_strategy_t *strategy)
{
    ds_strategy_init(strategy);
    *model_p = NULL;
    if (model_spec == NULL) {
        if (strategy_text != NULL)
            return ds_set_error(DS_ERR_INVALID_ARG, "--strategy needs --model (the traced run's)");
        return DS_OK;
    }
    if (strategy_text == NULL)
        return ds_set_error(
            DS_ERR_INVALID_ARG,
            "--model needs --strategy: the traced run's, e.g. dp=2,tp=1,pp=1,mbs=2");
    ds_model_t *model = NULL;
    ds_status_t status = app_model_load(model_spec, seq_len, dtype_text, &model);
    if (status == DS_OK)
        status = ds_strategy_parse(strategy_text, strategy);
    if (status == DS_OK) {
        int64_t gpus = (int64_t)(strategy->dp > 0 ? strategy->dp : 1) * strategy->tp *
                       strategy->pp * (strategy->cp > 0 ? strategy->cp : 1);
        status = ds_strategy_resolve(strategy, model, gpus, (int)gpus);
    }
    if (status == DS_OK && stage >= strategy->pp)
        status = ds_set_error(DS_ERR_INVALID_ARG, "--stage %d (accepted: 0 to %d, pp=%d)", stage,
                              strategy->pp - 1, strategy->pp);
    if (status != DS_OK) {
        ds_model_destroy(model);
        return status;
    }
    *model_p = model;
    return DS_OK;
}

/* Every compute cost of device `own` the traces lack, scaled to the framework. */
static ds_status_t calibrate(const import_context_t *context, const char *own,
                             ds_framework_calibration_t *calibration)
{
    ds_cost_table_t *mine = NULL, *out = NULL;
    ds_status_t status = ds_cost_table_create(&mine);
    if (status == DS_OK)
        status = ds_cost_table_create(&out);
    if (status == DS_OK)
        status = ds_profile_db_fill_costs(context->db, own, mine, NULL);
    if (status == DS_OK && ds_cost_table_size(mine) == 0)
        status = ds_set_error(DS_ERR_NOT_FOUND,
                              "--calibrate-from '%s': the database holds no cost of that device "
                              "fingerprint",
                              own);
    /* The framework costs: those the database held for this device, then this run's. */
    ds_cost_table_t *theirs = NULL, *held = NULL;
    if (status == DS_OK)
        status = ds_cost_table_create(&theirs);
    if (status == DS_OK)
        status = ds_cost_table_create(&held);
    if (status == DS_OK)
        status = ds_profile_db_fill_costs(context->db, context->fingerprint, held, NULL);
    for (size_t i = 0; status == DS_OK && i < ds_cost_table_size(held); i++) {
        const ds_event_key_t *key;
        const ds_cost_t *cost;
        ds_cost_table_at(held, i, &key, &cost);
        if (cost->provenance == DS_PROV_FRAMEWORK)
            status = ds_cost_table_set(theirs, key, cost);
    }
    for (size_t i = 0; status == DS_OK && i < ds_cost_table_size(context->framework); i++) {
        const ds_event_key_t *key;
        const ds_cost_t *cost;
        ds_cost_table_at(context->framework, i, &key, &cost);
        status = ds_cost_table_set(theirs, key, cost);
    }
    if (status == DS_OK)
        status = ds_framework_calibrate(theirs, mine, out, calibration);
    ds_cost_table_destroy(theirs);
    ds_cost_table_destroy(held);
    if (status == DS_OK && calibration->overall <= 0.0)
        status = ds_set_error(DS_ERR_NOT_FOUND,
                              "--calibrate-from '%s': no compute key in common with the traces "
                              "(profile the traced run's model and strategy first)",
                              own);
    import_result_t ignored;
    memset(&ignored, 0, sizeof(ignored));
    for (size_t i = 0; status == DS_OK && i < ds_cost_table_size(out); i++) {
        const ds_event_key_t *key;
        const ds_cost_t *cost;
        ds_cost_table_at(out, i, &key, &cost);
        status = add_imported(context, key, cost, &ignored);
    }
    ds_cost_table_destroy(mine);
    ds_cost_table_destroy(out);
    return status;
}

/* The command line as one string, for the database's attributes. */
static void join_command_line(const app_t *app, char *text, size_t size)
{
    size_t used = (size_t)snprintf(text, size, "dsmpi");
    for (int i = 0; i < app->argc && used < size; i++)
        used += (size_t)snprintf(text + used, size - used, " %s", app->argv[i]);
}

int cmd_import(app_t *app)
{
    int code = app_mpi_start(app, false);
    if (code != APP_EXIT_OK)
        return code;
    struct option options[NUM_IMPORTERS + 16];
    size_t n = 0;
    for (size_t i = 0; i < NUM_IMPORTERS; i++)
        options[n++] =
            (struct option){importers[i].option, required_argument, NULL, OPT_SOURCE + (int)i};
    options[n++] = (struct option){"profile-db", required_argument, NULL, OPT_PROFILE_DB};
    options[n++] = (struct option){"fingerprint", required_argument, NULL, OPT_FINGERPRINT};
    options[n++] = (struct option){"gpus-per-node", required_argument, NULL, OPT_GPUS_PER_NODE};
    options[n++] = (struct option){"cluster-tag", required_argument, NULL, OPT_CLUSTER_TAG};
    options[n++] = (struct option){"json", no_argument, NULL, OPT_JSON};
    options[n++] = (struct option){"csv", no_argument, NULL, OPT_CSV};
    options[n++] = (struct option){"quiet", no_argument, NULL, OPT_QUIET};
    options[n++] = (struct option){"help", no_argument, NULL, OPT_HELP};
    options[n++] = (struct option){"model", required_argument, NULL, OPT_MODEL};
    options[n++] = (struct option){"strategy", required_argument, NULL, OPT_STRATEGY};
    options[n++] = (struct option){"seq-len", required_argument, NULL, OPT_SEQ_LEN};
    options[n++] = (struct option){"dtype", required_argument, NULL, OPT_DTYPE};
    options[n++] = (struct option){"stage", required_argument, NULL, OPT_STAGE};
    options[n++] = (struct option){"calibrate-from", required_argument, NULL, OPT_CALIBRATE_FROM};
    options[n++] = (struct option){"unprofiled-s", required_argument, NULL, OPT_UNPROFILED_S};
    options[n] = (struct option){NULL, 0, NULL, 0};

    const char *db_path = NULL, *fingerprint = "imported", *cluster_tag = NULL;
    int64_t gpus_per_node = 0, seq_len = 0, stage = 0;
    const char *model_spec = NULL, *strategy_text = NULL, *dtype_text = NULL;
    const char *calibrate_from = NULL;
    double unprofiled_s = 0.0;
    output_format_t format = OUTPUT_TABLE;
    bool quiet = false;
    source_t *sources = calloc((size_t)app->argc + 1, sizeof(*sources));
    size_t num_sources = 0;
    if (sources == NULL)
        return app_usage_error(app, "out of memory");
    int id;
    opterr = 0;
    optind = 1;
    while ((id = getopt_long(app->argc, app->argv, "", options, NULL)) != -1) {
        if (id >= OPT_SOURCE && id < OPT_SOURCE + (int)NUM_IMPORTERS) {
            /* Every path is a word of argv: `sources` has room for them all. */
            size_t which = (size_t)(id - OPT_SOURCE);
            for (const char *path = optarg; path != NULL;
                 path = importers[which].several ? app_next_option_word(app) : NULL) {
                memset(&sources[num_sources], 0, sizeof(sources[num_sources]));
                sources[num_sources].importer = which;
                sources[num_sources++].path = path;
            }
            continue;
        }
        switch (id) {
        case OPT_HELP:
            if (app->rank == 0)
                help();
            free(sources);
            return APP_EXIT_OK;
        case OPT_PROFILE_DB: db_path = optarg; break;
        case OPT_FINGERPRINT: fingerprint = optarg; break;
        case OPT_CLUSTER_TAG: cluster_tag = optarg; break;
        case OPT_GPUS_PER_NODE: {
            ds_status_t status = ds_parse_count(optarg, "gpus-per-node", 1, 1024, &gpus_per_node);
            if (status != DS_OK) {
                free(sources);
                return app_fail(app, status);
            }
            break;
        }
        case OPT_MODEL: model_spec = optarg; break;
        case OPT_STRATEGY: strategy_text = optarg; break;
        case OPT_DTYPE: dtype_text = optarg; break;
        case OPT_CALIBRATE_FROM: calibrate_from = optarg; break;
        case OPT_UNPROFILED_S: {
            ds_status_t status = ds_parse_double(optarg, "unprofiled-s", 1e-9, 1e6, &unprofiled_s);
            if (status != DS_OK) {
                free(sources);
                return app_fail(app, status);
            }
            break;
        }
        case OPT_SEQ_LEN:
        case OPT_STAGE: {
            ds_status_t status = id == OPT_SEQ_LEN
                                     ? ds_parse_count(optarg, "seq-len", 1, 1 << 24, &seq_len)
                                     : ds_parse_count(optarg, "stage", 0, 4095, &stage);
            if (status != DS_OK) {
                free(sources);
                return app_fail(app, status);
            }
            break;
        }
        case OPT_JSON: format = OUTPUT_JSON; break;
        case OPT_CSV: format = OUTPUT_CSV; break;
        case OPT_QUIET: quiet = true; break;
        default: free(sources); return app_option_error(app, NULL);
        }
    }
    if (optind < app->argc) {
        free(sources);
        return app_usage_error(app, "unexpected argument '%s' (see 'dsmpi import --help')",
                               app->argv[optind]);
    }
    if (db_path == NULL || num_sources == 0) {
        free(sources);
        return app_usage_error(app, "%s (see 'dsmpi import --help')",
                               db_path == NULL ? "--profile-db FILE.h5 is required"
                                               : "no source given (accepted: --cost-table FILE, "
                                                 "--comm-samples FILE, --nccl-tests LOG, "
                                                 "--torch-trace TRACE.json)");
    }
    if (fingerprint[0] == '\0' || strlen(fingerprint) >= DS_FINGERPRINT_MAX) {
        free(sources);
        return app_usage_error(app, "--fingerprint '%s' (accepted: 1 to %d characters)",
                               fingerprint, DS_FINGERPRINT_MAX - 1);
    }
    /* One process does the work; other ranks of an MPI launch have none. */
    if (app->rank != 0) {
        free(sources);
        return APP_EXIT_OK;
    }
    ds_profile_db_t *db = NULL;
    ds_model_t *model = NULL;
    ds_strategy_t strategy;
    ds_cost_table_t *framework = NULL;
    ds_status_t status =
        traced_run(model_spec, strategy_text, seq_len, dtype_text, (int)stage, &model, &strategy);
    if (status == DS_OK)
        status = ds_cost_table_create(&framework);
    if (status == DS_OK)
        status = ds_profile_db_open(MPI_COMM_NULL, db_path, 0, &db);
    char host[DS_NAME_MAX] = "";
    if (gethostname(host, sizeof(host) - 1) != 0)
        strcpy(host, "unknown");
    host[strcspn(host, ".")] = '\0';
    import_context_t context = {
        db,          fingerprint, host,      (double)time(NULL), (int)gpus_per_node,
        cluster_tag, model,       &strategy, (int)stage,         framework,
        app,         unprofiled_s};
    for (size_t i = 0; status == DS_OK && i < num_sources; i++)
        status = importers[sources[i].importer].run(&context, sources[i].path, &sources[i].result);
    /* Compute costs carry to a target's device through the device model of
     * the fingerprint's device: one dsmpi does not know leaves them unused. */
    ds_device_spec_t measured_on;
    ds_cost_sources_t named = {NULL, fingerprint, NULL, 0};
    bool traced = false;
    for (size_t i = 0; i < num_sources; i++)
        traced |= sources[i].result.traced;
    if (status == DS_OK && traced && ds_costs_measured_device(&named, &measured_on) != DS_OK)
        app_warning(app,
                    "--fingerprint '%s' names no device dsmpi knows, so predictions will not use "
                    "these compute costs (accepted: 'cpu: ...', 'cuda: <device name>, ...', e.g. "
                    "'cuda: NVIDIA A100-SXM4-80GB, pytorch')",
                    fingerprint);
    ds_framework_calibration_t calibration;
    memset(&calibration, 0, sizeof(calibration));
    if (status == DS_OK && calibrate_from != NULL)
        status = calibrate(&context, calibrate_from, &calibration);
    char command_line[512];
    join_command_line(app, command_line, sizeof(command_line));
    if (status == DS_OK)
        status = ds_profile_db_set_run_info(db, "none (import)", "", command_line);
    if (status == DS_OK)
        status = ds_profile_db_commit(db);
    if (status != DS_OK) {
        code = app_fail(app, status);
        goto out;
    }
    ds_profile_db_info_t info;
    ds_profile_db_get_info(db, &info);
    if (!quiet) {
        if (format == OUTPUT_JSON)
            print_json(db_path, fingerprint, sources, num_sources, &info);
        else if (format == OUTPUT_CSV)
            print_csv(sources, num_sources);
        else
            print_table(app, db_path, fingerprint, sources, num_sources, &info);
        if (format == OUTPUT_TABLE)
            print_traces(sources, num_sources, calibrate_from, &calibration);
    }
    code = APP_EXIT_OK;
out:
    ds_profile_db_close(db);
    ds_model_destroy(model);
    ds_cost_table_destroy(framework);
    free(sources);
    return code;
}
