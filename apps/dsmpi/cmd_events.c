/* dsmpi events: the event set of one iteration, totals vs unique per kind,
 * and the unique events that cost the most. */
#include "commands.h"

#include <stdlib.h>
#include <string.h>

enum { OPT_TOP = 512, OPT_COST_TABLE_OUT, OPT_HELP };

static void help(void)
{
    printf("usage: dsmpi events --model M --strategy S --target-gpus N [options]\n"
           "       dsmpi events --demo\n\n"
           "Breaks one training iteration into events on every device of the target,\n"
           "deduplicates them, and prints per kind the events in the iteration and the\n"
           "unique ones that need measuring, then the unique events by expected cost\n"
           "(occurrences x an estimate on the target: the device model for compute, the\n"
           "communication model over every network level for communication).\n\n");
    inputs_print_help(stdout);
    printf(
        "Events:\n  --top N                  unique events to list by expected cost (default 10)\n"
        "  --cost-table-out FILE    add the device-model estimates of the compute events on the\n"
        "                           target device to the text cost table FILE (created when\n"
        "                           missing; costs already there are kept), marked modelled:\n"
        "                           synthetic costs for the replay backend\n");
}

typedef struct ranked {
    const ds_event_t *event;
    double total_s;
} ranked_t;

static int by_total_desc(const void *a, const void *b)
{
    double x = ((const ranked_t *)a)->total_s, y = ((const ranked_t *)b)->total_s;
    return (x < y) - (x > y);
}

static void print_table(const app_t *app, const inputs_t *in, const ds_event_set_t *set,
                        const ds_event_totals_t *t, const ranked_t *top, size_t num_top)
{
    ds_model_info_t info;
    ds_model_get_info(in->model, &info);
    char strategy[DS_STRATEGY_TEXT_MAX];
    ds_strategy_format(&in->strategy, strategy, sizeof(strategy));
    output_preamble(app, stdout);
    printf("# model: %s (%.3g B parameters, seq %d, %s)\n", info.name, info.num_parameters / 1e9,
           info.seq_len, ds_dtype_name(info.dtype));
    printf("# strategy: %s (%lld micro-batches)\n", strategy,
           (long long)ds_strategy_num_microbatches(&in->strategy));
    printf("# target: %s, %lld nodes x %d devices = %lld\n", in->cluster.name,
           (long long)in->cluster.nodes, in->cluster.gpus_per_node,
           (long long)ds_cluster_num_gpus(&in->cluster));
    const char *note = ds_model_seq_len_note(in->model);
    if (note != NULL)
        printf("# note: %s\n", note);
    printf("#\n# %-12s %16s %8s\n", "kind", "events", "unique");
    printf("# %-12s %16s %8s\n", "", "(count)", "(count)");
    int64_t total = 0, unique = 0;
    for (int c = 0; c < DS_CLASS_COUNT_; c++) {
        printf("  %-12s %16lld %8lld\n", ds_event_class_name((ds_event_class_t)c),
               (long long)t->total[c], (long long)t->unique[c]);
        total += t->total[c];
        unique += t->unique[c];
    }
    printf("  %-12s %16lld %8lld\n", "total", (long long)total, (long long)unique);
    printf("#\n# matmul FLOPs per iteration: %.4g (model, recompute excluded), %.4g (hardware)\n",
           t->model_flops, t->flops);
    printf("# communication bytes per iteration, summed over devices: %.4g\n", t->comm_bytes);
    printf("#\n# top %zu unique events by expected cost (estimate on %s, not measured)\n", num_top,
           in->cluster.device.name);
    printf("# %4s %-10s %12s %10s %10s %6s  %s\n", "rank", "class", "count", "each", "total",
           "share", "event  [where]");
    printf("# %4s %-10s %12s %10s %10s %6s\n", "", "", "(count)", "(us)", "(s)", "(%)");
    double sum = 0.0;
    for (size_t i = 0; i < ds_event_set_size(set); i++) {
        const ds_event_t *e = ds_event_set_at(set, i);
        sum += (double)e->count * e->estimated_s;
    }
    for (size_t i = 0; i < num_top; i++) {
        const ds_event_t *e = top[i].event;
        char key[256];
        ds_event_key_format(&e->key, key, sizeof(key));
        printf("  %4zu %-10s %12lld %10.1f %10.3f %6.2f  %s  [%s]\n", i + 1,
               ds_event_class_name(ds_event_class_of(&e->key)), (long long)e->count,
               e->estimated_s * 1e6, top[i].total_s, sum > 0 ? 100.0 * top[i].total_s / sum : 0.0,
               key, e->label);
    }
}

static void print_json(const inputs_t *in, const ds_event_totals_t *t, const ranked_t *top,
                       size_t num_top)
{
    output_json_open(in, true);
    printf(", \"target_gpus\": %lld, \"num_microbatches\": %lld, \"kinds\": [",
           (long long)ds_cluster_num_gpus(&in->cluster),
           (long long)ds_strategy_num_microbatches(&in->strategy));
    for (int c = 0; c < DS_CLASS_COUNT_; c++)
        printf("%s{\"kind\": \"%s\", \"events\": %lld, \"unique\": %lld}", c ? ", " : "",
               ds_event_class_name((ds_event_class_t)c), (long long)t->total[c],
               (long long)t->unique[c]);
    printf("], \"model_flops\": %.6e, \"hardware_flops\": %.6e, \"comm_bytes\": %.6e, \"top\": [",
           t->model_flops, t->flops, t->comm_bytes);
    for (size_t i = 0; i < num_top; i++) {
        char key[256];
        ds_event_key_format(&top[i].event->key, key, sizeof(key));
        printf("%s{\"event\": ", i ? ", " : "");
        output_json_string(stdout, key);
        printf(", \"where\": ");
        output_json_string(stdout, top[i].event->label);
        printf(", \"count\": %lld, \"each_us\": %.3f, \"total_s\": %.6f}",
               (long long)top[i].event->count, top[i].event->estimated_s * 1e6, top[i].total_s);
    }
    printf("]}\n");
}

static void print_csv(const ds_event_set_t *set)
{
    printf("class,op,pass,dtype,dims0,dims1,dims2,dims3,group,group_size,nodes,ranks_per_node,"
           "concurrency,batched,count,flops,bytes,estimate_us,where\n");
    for (size_t i = 0; i < ds_event_set_size(set); i++) {
        const ds_event_t *e = ds_event_set_at(set, i);
        const ds_event_key_t *k = &e->key;
        printf("%s,%s,%s,%s,%lld,%lld,%lld,%lld,%s,%d,%d,%d,%d,%d,%lld,%.6e,%.6e,%.3f,%s\n",
               ds_event_class_name(ds_event_class_of(k)), ds_event_key_op_name(k),
               ds_pass_name((ds_pass_t)k->pass), ds_dtype_name((ds_dtype_t)k->dtype),
               (long long)k->dims[0], (long long)k->dims[1], (long long)k->dims[2],
               (long long)k->dims[3], ds_group_name((ds_group_t)k->group), k->group_size, k->nodes,
               k->ranks_per_node, k->concurrency, (k->flags & DS_COMM_FLAG_BATCHED) != 0,
               (long long)e->count, e->flops, e->bytes, e->estimated_s * 1e6, e->label);
    }
}

typedef struct events_options {
    int64_t top;
    const char *cost_table_out;
} events_options_t;

static int events_option(const app_t *app, void *ctx, int id, const char *arg)
{
    events_options_t *o = ctx;
    if (id == OPT_COST_TABLE_OUT) {
        o->cost_table_out = arg;
        return 1;
    }
    if (id != OPT_TOP)
        return 0;
    ds_status_t status = ds_parse_count(arg, "top", 0, 100000, &o->top);
    return status == DS_OK ? 1 : (app_fail(app, status), -1);
}

/* Adds the compute events' estimates to the cost table file `path`. */
static ds_status_t write_estimates(const ds_event_set_t *set, const char *path)
{
    ds_cost_table_t *table = NULL;
    ds_status_t status = ds_cost_table_create(&table);
    FILE *probe = status == DS_OK ? fopen(path, "r") : NULL;
    if (probe != NULL) {
        fclose(probe);
        status = ds_cost_table_load_text(table, path);
    }
    for (size_t i = 0; status == DS_OK && i < ds_event_set_size(set); i++) {
        const ds_event_t *e = ds_event_set_at(set, i);
        if (e->key.kind != DS_EVENT_COMPUTE || ds_cost_table_find(table, &e->key) != NULL)
            continue;
        ds_cost_t cost = {e->estimated_s,  e->estimated_s, e->estimated_s, e->estimated_s, 0,
                          DS_PROV_MODELLED};
        status = ds_cost_table_set(table, &e->key, &cost);
    }
    if (status == DS_OK) {
        FILE *out = fopen(path, "w");
        if (out == NULL)
            status = ds_set_error(DS_ERR_IO, "cannot write the cost table %s", path);
        else {
            fprintf(out, "# device-model estimates (dsmpi events --cost-table-out), seconds\n");
            status = ds_cost_table_write_text(table, out);
            if (fclose(out) != 0 && status == DS_OK)
                status = ds_set_error(DS_ERR_IO, "cannot write the cost table %s", path);
        }
    }
    ds_cost_table_destroy(table);
    return status;
}

int cmd_events(app_t *app)
{
    static const struct option extra[] = {
        {"top", required_argument, NULL, OPT_TOP},
        {"cost-table-out", required_argument, NULL, OPT_COST_TABLE_OUT},
        {"help", no_argument, NULL, OPT_HELP},
        {NULL, 0, NULL, 0},
    };
    int code = app_mpi_start(app, false);
    if (code != APP_EXIT_OK)
        return code;
    inputs_t in;
    inputs_init(&in);
    events_options_t eo = {10, NULL};
    app_option_handler_t handlers[] = {{events_option, &eo}};
    code = app_parse_options(app, &in, (const struct option *[]){extra, NULL}, handlers, 1,
                             OPT_HELP, help);
    if (code >= 0)
        return code;

    ds_status_t status = inputs_build(&in);
    ds_event_set_t *set = NULL;
    ranked_t *ranked = NULL;
    if (status == DS_OK)
        status = ds_events_generate(in.model, &in.strategy, &in.cluster, &set);
    if (status != DS_OK) {
        code = app_fail(app, status);
        goto out;
    }
    size_t n = ds_event_set_size(set);
    ranked = calloc(n ? n : 1, sizeof(*ranked));
    if (ranked == NULL) {
        code = app_usage_error(app, "out of memory");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        ranked[i].event = ds_event_set_at(set, i);
        ranked[i].total_s = (double)ranked[i].event->count * ranked[i].event->estimated_s;
    }
    qsort(ranked, n, sizeof(*ranked), by_total_desc);
    size_t num_top = (size_t)eo.top < n ? (size_t)eo.top : n;
    if (eo.cost_table_out != NULL && app->rank == 0 &&
        (status = write_estimates(set, eo.cost_table_out)) != DS_OK) {
        code = app_fail(app, status);
        goto out;
    }
    ds_event_totals_t totals;
    ds_event_set_totals(set, &totals);
    if (app->rank == 0) {
        if (in.format == OUTPUT_JSON)
            print_json(&in, &totals, ranked, num_top);
        else if (in.format == OUTPUT_CSV)
            print_csv(set);
        else
            print_table(app, &in, set, &totals, ranked, num_top);
    }
    code = APP_EXIT_OK;
out:
    free(ranked);
    ds_event_set_destroy(set);
    inputs_free(&in);
    return code;
}
