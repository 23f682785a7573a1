/* The options every model-and-strategy subcommand shares, the Megatron-LM
 * aliases, and building the model, target and strategy from them. */
#include "app.h"

#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

enum {
    OPT_MODEL = 256,
    OPT_SEQ_LEN,
    OPT_GLOBAL_BATCH,
    OPT_DTYPE,
    OPT_STRATEGY,
    OPT_TARGET_GPUS,
    OPT_TARGET_GPUS_PER_NODE,
    OPT_TARGET_NODES,
    OPT_TARGET,
    OPT_CLUSTER,
    OPT_SYSTEMS,
    OPT_DEVICE,
    OPT_JSON,
    OPT_CSV,
    OPT_QUIET,
    OPT_DEMO,
    OPT_OUT,
    OPT_MEGATRON, /* Megatron-LM option names from here on */
};

static const struct option common_options[] = {
    {"model", required_argument, NULL, OPT_MODEL},
    {"seq-len", required_argument, NULL, OPT_SEQ_LEN},
    {"global-batch", required_argument, NULL, OPT_GLOBAL_BATCH},
    {"dtype", required_argument, NULL, OPT_DTYPE},
    {"strategy", required_argument, NULL, OPT_STRATEGY},
    {"target-gpus", required_argument, NULL, OPT_TARGET_GPUS},
    {"target-gpus-per-node", required_argument, NULL, OPT_TARGET_GPUS_PER_NODE},
    {"gpus-per-node", required_argument, NULL, OPT_TARGET_GPUS_PER_NODE},
    {"target-nodes", required_argument, NULL, OPT_TARGET_NODES},
    {"target", required_argument, NULL, OPT_TARGET},
    {"cluster", required_argument, NULL, OPT_CLUSTER},
    {"systems", required_argument, NULL, OPT_SYSTEMS},
    {"device", required_argument, NULL, OPT_DEVICE},
    {"json", no_argument, NULL, OPT_JSON},
    {"csv", no_argument, NULL, OPT_CSV},
    {"quiet", no_argument, NULL, OPT_QUIET},
    {"demo", no_argument, NULL, OPT_DEMO},
    {"out", required_argument, NULL, OPT_OUT},
};

/* Megatron-LM names; flags take no argument. */
static const struct {
    const char *name;
    int has_arg;
} megatron_options[] = {
    {"tensor-model-parallel-size", required_argument},
    {"pipeline-model-parallel-size", required_argument},
    {"num-layers-per-virtual-pipeline-stage", required_argument},
    {"virtual-pipeline-model-parallel-size", required_argument},
    {"decoder-first-pipeline-num-layers", required_argument},
    {"decoder-last-pipeline-num-layers", required_argument},
    {"account-for-embedding-in-pipeline-split", no_argument},
    {"account-for-loss-in-pipeline-split", no_argument},
    {"context-parallel-size", required_argument},
    {"cp-comm-type", required_argument},
    {"expert-model-parallel-size", required_argument},
    {"expert-tensor-parallel-size", required_argument},
    {"moe-token-dispatcher-type", required_argument},
    {"moe-router-topk", required_argument},
    {"moe-expert-capacity-factor", required_argument},
    {"moe-router-load-balancing-type", required_argument},
    {"moe-grouped-gemm", no_argument},
    {"micro-batch-size", required_argument},
    {"global-batch-size", required_argument},
    {"seq-length", required_argument},
    {"sequence-parallel", no_argument},
    {"recompute-granularity", required_argument},
    {"recompute-activations", no_argument},
    {"use-distributed-optimizer", no_argument},
    {"overlap-grad-reduce", no_argument},
    {"use-flash-attn", no_argument},
    {"attention-backend", required_argument},
    {"fp8-format", required_argument},
    {"fp8-amax-history-len", required_argument},
    {"fp8-amax-compute-algo", required_argument},
    {"bf16", no_argument},
    {"fp16", no_argument},
};

#define NUM_COMMON (sizeof(common_options) / sizeof(common_options[0]))
#define NUM_MEGATRON (sizeof(megatron_options) / sizeof(megatron_options[0]))

static size_t table_length(const struct option *table)
{
    size_t n = 0;
    while (table != NULL && table[n].name != NULL)
        n++;
    return n;
}

struct option *inputs_long_options_list(const struct option *const *tables)
{
    size_t total = NUM_COMMON + NUM_MEGATRON + 1;
    for (size_t t = 0; tables != NULL && tables[t] != NULL; t++)
        total += table_length(tables[t]);
    struct option *table = calloc(total, sizeof(*table));
    if (table == NULL)
        return NULL;
    size_t n = 0;
    for (size_t i = 0; i < NUM_COMMON; i++)
        table[n++] = common_options[i];
    for (size_t i = 0; i < NUM_MEGATRON; i++)
        table[n++] = (struct option){megatron_options[i].name, megatron_options[i].has_arg, NULL,
                                     OPT_MEGATRON + (int)i};
    for (size_t t = 0; tables != NULL && tables[t] != NULL; t++)
        for (size_t i = 0; i < table_length(tables[t]); i++)
            table[n++] = tables[t][i];
    return table;
}

struct option *inputs_long_options(const struct option *a, const struct option *b,
                                   const struct option *c)
{
    const struct option *list[4] = {NULL, NULL, NULL, NULL};
    size_t n = 0;
    if (a != NULL)
        list[n++] = a;
    if (b != NULL)
        list[n++] = b;
    if (c != NULL)
        list[n++] = c;
    return inputs_long_options_list(list);
}

void inputs_init(inputs_t *in)
{
    memset(in, 0, sizeof(*in));
    ds_strategy_init(&in->strategy);
}

/* The demo: what inputs_set_demo sets and the --demo help says. */
#define DEMO_MODEL "gpt2-medium"
#define DEMO_STRATEGY "dp=64,tp=4,pp=4,mbs=2,gbs=1024,schedule=1f1b"
#define DEMO_NODES 128
#define DEMO_GPUS_PER_NODE 8

void inputs_set_demo(inputs_t *in)
{
    static char target[64];
    snprintf(target, sizeof(target), "nodes=%d,gpus-per-node=%d", DEMO_NODES, DEMO_GPUS_PER_NODE);
    in->demo = true;
    in->model_spec = DEMO_MODEL;
    in->target_text = target;
    ds_strategy_init(&in->strategy);
    (void)ds_strategy_parse(DEMO_STRATEGY, &in->strategy);
    in->strategy_given = true;
}

/* The current value of a tunable (its environment variable, else its default). */
static const char *param_value(const char *env_name)
{
    for (size_t i = 0; i < ds_param_count(); i++) {
        const char *env, *def, *what, *current;
        if (ds_param_describe(i, &env, &def, &what, &current) == DS_OK &&
            strcmp(env, env_name) == 0)
            return current;
    }
    return "";
}

static int bad(const app_t *app, ds_status_t status)
{
    app_fail(app, status);
    return -1;
}

/* Keeps a strategy option as strategy-grammar text: `text` itself, or the
 * item of the Megatron option `megatron` with `value`. */
static void keep_strategy_item(inputs_t *in, const char *text, const char *megatron,
                               const char *value)
{
    size_t n = in->num_strategy_items;
    if (n == INPUTS_MAX_STRATEGY_ITEMS) {
        if (in->strategy_unfixable == NULL)
            in->strategy_unfixable = megatron != NULL ? megatron : "strategy";
        return;
    }
    if (megatron != NULL) {
        if (ds_strategy_megatron_item(megatron, value, in->megatron_items[n],
                                      sizeof(in->megatron_items[n])) != DS_OK) {
            if (in->strategy_unfixable == NULL)
                in->strategy_unfixable = megatron;
            return;
        }
        text = in->megatron_items[n];
        if (text[0] == '\0') /* checked, changes no field (--fp8-amax-*) */
            return;
    }
    in->strategy_items[in->num_strategy_items++] = text;
}

int inputs_handle(const app_t *app, inputs_t *in, int id, const char *arg)
{
    ds_status_t status = DS_OK;
    switch (id) {
    case OPT_MODEL: in->model_spec = arg; return 1;
    case OPT_SEQ_LEN:
        status = ds_parse_size(arg, "seq-len", 1, 1 << 24, &in->seq_len);
        return status == DS_OK ? 1 : bad(app, status);
    case OPT_GLOBAL_BATCH:
        status = ds_parse_size(arg, "global-batch", 1, 1LL << 32, &in->global_batch);
        return status == DS_OK ? 1 : bad(app, status);
    case OPT_DTYPE: in->dtype = arg; return 1;
    case OPT_STRATEGY:
        status = ds_strategy_parse(arg, &in->strategy);
        in->strategy_given = true;
        if (status == DS_OK)
            keep_strategy_item(in, arg, NULL, NULL);
        return status == DS_OK ? 1 : bad(app, status);
    case OPT_TARGET_GPUS:
        status = ds_parse_count(arg, "target-gpus", 1, 1LL << 40, &in->target_gpus);
        return status == DS_OK ? 1 : bad(app, status);
    case OPT_TARGET_GPUS_PER_NODE: {
        int64_t value = 0;
        status = ds_parse_count(arg, "gpus-per-node", 1, 1024, &value);
        in->target_gpus_per_node = (int)value;
        return status == DS_OK ? 1 : bad(app, status);
    }
    case OPT_TARGET_NODES: {
        int64_t nodes = 0;
        status = ds_parse_count(arg, "target-nodes", 1, 1LL << 40, &nodes);
        if (status != DS_OK)
            return bad(app, status);
        in->target_gpus = -nodes; /* resolved with the per-node count in inputs_build */
        return 1;
    }
    case OPT_TARGET: in->target_text = arg; return 1;
    case OPT_CLUSTER: in->cluster_file = arg; return 1;
    case OPT_SYSTEMS:
        in->systems_file = arg;
        status = ds_systems_load(arg);
        return status == DS_OK ? 1 : bad(app, status);
    case OPT_DEVICE: in->device = arg; return 1;
    case OPT_JSON: in->format = OUTPUT_JSON; return 1;
    case OPT_CSV: in->format = OUTPUT_CSV; return 1;
    case OPT_QUIET: in->quiet = true; return 1;
    case OPT_DEMO: inputs_set_demo(in); return 1;
    case OPT_OUT: in->out_dir = arg; return 1;
    default: break;
    }
    if (id >= OPT_MEGATRON && id < OPT_MEGATRON + (int)NUM_MEGATRON) {
        const char *name = megatron_options[id - OPT_MEGATRON].name;
        if (strcmp(name, "seq-length") == 0)
            return inputs_handle(app, in, OPT_SEQ_LEN, arg);
        if (strcmp(name, "bf16") == 0 || strcmp(name, "fp16") == 0) {
            in->dtype = name;
            return 1;
        }
        status = ds_strategy_apply_megatron(&in->strategy, name, arg);
        in->strategy_given = true;
        if (status == DS_OK)
            keep_strategy_item(in, NULL, name, arg);
        return status == DS_OK ? 1 : bad(app, status);
    }
    return 0;
}

ds_status_t inputs_build_model(inputs_t *in)
{
    if (in->model_spec == NULL)
        return ds_set_error(
            DS_ERR_INVALID_ARG,
            "no model given (accepted: --model NAME|config.json|layers.json, or --demo)");
    ds_model_destroy(in->model); /* built again from the options */
    in->model = NULL;
    ds_status_t status = ds_model_load(in->model_spec, &in->model);
    if (status != DS_OK)
        return status;
    if (in->seq_len > 0 && (status = ds_model_set_seq_len(in->model, in->seq_len)) != DS_OK)
        return status;
    if (in->dtype != NULL) {
        ds_dtype_t dtype;
        if ((status = ds_dtype_parse(in->dtype, &dtype)) != DS_OK ||
            (status = ds_model_set_dtype(in->model, dtype)) != DS_OK)
            return status;
    }
    return DS_OK;
}

/* --cluster FILE with --gpus-per-node, --target-gpus or --target-nodes: a
 * devices-per-node count other than the file's is an error (the file's
 * spans, NICs and bandwidths are per node of its size: the input would be
 * ambiguous); the target size sets the nodes on the file's network, with a
 * warning when that is more nodes than the file has (a machine larger than
 * the one described, a question worth asking). */
static ds_status_t cluster_from_file(inputs_t *in)
{
    ds_status_t status = ds_cluster_load(in->cluster_file, &in->cluster);
    if (status == DS_OK)
        status = ds_cluster_check_gpus_per_node(&in->cluster, in->target_gpus_per_node,
                                                in->cluster_file);
    if (status != DS_OK || in->target_gpus == 0)
        return status;
    int64_t file_nodes = in->cluster.nodes;
    int64_t gpus =
        in->target_gpus > 0 ? in->target_gpus : -in->target_gpus * in->cluster.gpus_per_node;
    status = ds_cluster_set_gpus(&in->cluster, gpus, in->cluster_file);
    if (status == DS_OK && in->cluster.nodes > file_nodes)
        app_warning(in->app,
                    "a target of %lld GPUs (%lld nodes) is larger than the %lld nodes of cluster "
                    "file %s: its network is taken to extend to them",
                    (long long)gpus, (long long)in->cluster.nodes, (long long)file_nodes,
                    in->cluster_file);
    return status;
}

ds_status_t inputs_build_target(inputs_t *in)
{
    ds_status_t status = inputs_build_model(in);
    if (status != DS_OK)
        return status;
    if (inputs_target_is_system(in))
        status = inputs_system_target(in, in->target_text, &in->cluster);
    else if (in->cluster_file != NULL)
        status = cluster_from_file(in);
    else if (in->target_text != NULL)
        status = ds_cluster_parse_target(in->target_text, &in->cluster);
    else if (in->target_gpus < 0)
        status = ds_cluster_init(&in->cluster, -in->target_gpus,
                                 in->target_gpus_per_node > 0 ? in->target_gpus_per_node : 8,
                                 in->device);
    else if (in->target_gpus > 0)
        status = ds_cluster_from_gpus(&in->cluster, in->target_gpus, in->target_gpus_per_node);
    else
        return ds_set_error(
            DS_ERR_INVALID_ARG,
            "no target given (accepted: --target-gpus N, --target-nodes N --gpus-per-node G, "
            "--target nodes=N,gpus-per-node=G, or --cluster FILE)");
    if (status != DS_OK)
        return status;
    if (in->device != NULL) {
        ds_device_spec_t spec;
        if ((status = ds_device_spec_lookup(in->device, &spec)) != DS_OK)
            return status;
        if (in->cluster_file == NULL && !inputs_target_is_system(in))
            ds_cluster_on_device(&in->cluster, &spec); /* its links too */
        else
            in->cluster.device = spec; /* the file's or the system's network stays */
    }
    return DS_OK;
}

ds_status_t inputs_build(inputs_t *in)
{
    ds_status_t status = inputs_build_target(in);
    if (status != DS_OK)
        return status;
    if (in->global_batch > 0)
        in->strategy.gbs = in->global_batch;
    status = ds_strategy_resolve(&in->strategy, in->model, ds_cluster_num_gpus(&in->cluster),
                                 in->cluster.gpus_per_node);
    if (status != DS_OK)
        return status;
    return ds_strategy_check_device(&in->strategy, &in->cluster.device);
}

bool inputs_target_names_device(const inputs_t *in)
{
    return in->device != NULL || in->cluster_file != NULL || inputs_target_is_system(in) ||
           (in->target_text != NULL && strstr(in->target_text, "device=") != NULL);
}

void inputs_default_device(inputs_t *in, const ds_device_spec_t *spec)
{
    if (inputs_target_names_device(in))
        return;
    ds_cluster_on_device(&in->cluster, spec);
}

const char *inputs_out_path(const inputs_t *in, const char *name, char *path, size_t size)
{
    if (in->out_dir == NULL)
        return NULL;
    /* mkdir -p: each prefix of the directory. */
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s", in->out_dir);
    for (char *c = dir + 1; *c != '\0'; c++) {
        if (*c == '/') {
            *c = '\0';
            mkdir(dir, 0777);
            *c = '/';
        }
    }
    mkdir(dir, 0777);
    snprintf(path, size, "%s/%s", in->out_dir, name);
    return path;
}

void inputs_free(inputs_t *in)
{
    ds_model_destroy(in->model);
    in->model = NULL;
}

void inputs_print_help(FILE *out)
{
    fputs("Model:\n"
          "  --model NAME|FILE        a preset, a Hugging Face config.json or a dsmpi layer list\n"
          "  --seq-len N              training sequence length (Megatron: --seq-length)\n"
          "  --global-batch N         sequences per iteration (Megatron: --global-batch-size)\n"
          "                           sizes take K/M/G as powers of 1024: --seq-len 8K = 8192\n"
          "  --dtype fp32|bf16|fp16   training precision (Megatron: --bf16, --fp16)\n"
          "Strategy:\n"
          "  --strategy S             e.g. dp=16,tp=8,pp=8,mbs=1,schedule=1f1b[,vpp=2,sp,zero=1,\n"
          "                           "
          "recompute=selective,dp-algo=ring,bucket=40M,no-overlap,order=tp-dp-pp]\n"
          "                           dp is derived from the target when left out\n"
          "  Megatron-LM names: --tensor-model-parallel-size, --pipeline-model-parallel-size,\n"
          "  --num-layers-per-virtual-pipeline-stage, --micro-batch-size, --sequence-parallel,\n"
          "  --decoder-first-pipeline-num-layers, --decoder-last-pipeline-num-layers,\n"
          "  --account-for-embedding-in-pipeline-split, --account-for-loss-in-pipeline-split\n"
          "  (embedding-in-split, loss-in-split: the embedding and the loss each take a layer's\n"
          "  slot when the layers are split over the virtual stages),\n"
          "  --recompute-granularity, --use-distributed-optimizer, --overlap-grad-reduce,\n"
          "  --use-flash-attn, --attention-backend flash|fused|auto|unfused|local,\n"
          "  --fp8-format hybrid|e4m3 (--fp8-amax-history-len, --fp8-amax-compute-algo are\n"
          "  checked and change nothing: the work is the same), --context-parallel-size,\n"
          "  --cp-comm-type p2p|a2a|allgather, --expert-model-parallel-size,\n"
          "  --expert-tensor-parallel-size, --moe-token-dispatcher-type alltoall|allgather,\n"
          "  --moe-router-topk, --moe-expert-capacity-factor (MoE models; see ep, etp,\n"
          "  moe-dispatcher, moe-topk, router-skew, moe-capacity in the strategy)\n"
          "Target:\n"
          "  --target-gpus N [--gpus-per-node G]   (default 8 per node)\n"
          "  --target-nodes N --gpus-per-node G     (as in #SBATCH)\n"
          "  --target nodes=N,gpus-per-node=G[,device=D]  or  --cluster cluster.json\n"
          "  --target system=NAME[,nodes=N]   a real system ('dsmpi systems' lists them;\n"
          "                           nodes default to its largest partition)\n"
          "  --systems FILE           a site's systems file: changes or adds systems\n"
          "  --device a100-40g|a100-80g|h100-sxm|h100-pcie|h200|gh200|b200|cpu\n"
          "Output:\n"
          "  --json, --csv, --quiet\n"
          "  --out DIR                write the command's files into DIR (created): predict's\n"
          "                           trace, timeline and chart, profile's summary, search's and\n"
          "                           plan's charts\n",
          out);
    /* The demo's target names no device: the one of --device, else the one measured (run
     * profiles it, a --profile-db holds it), else the default device. */
    fprintf(out,
            "  --demo                   " DEMO_MODEL " with " DEMO_STRATEGY "\n"
            "                           on %d nodes x %d devices (%d): the device of --device,\n"
            "                           else the one profiled (run) or whose costs the profile\n"
            "                           database holds, else DS_DEFAULT_DEVICE (now %s)\n",
            DEMO_NODES, DEMO_GPUS_PER_NODE, DEMO_NODES * DEMO_GPUS_PER_NODE,
            param_value("DS_DEFAULT_DEVICE"));
}

int app_parse_options(app_t *app, inputs_t *in, const struct option *const *tables,
                      const app_option_handler_t *handlers, size_t num_handlers, int help_id,
                      void (*help)(void))
{
    return app_parse_options_positional(app, in, tables, handlers, num_handlers, help_id, help,
                                        NULL);
}

const struct option app_run_long_options[] = {
    {"iterations", required_argument, NULL, APP_OPT_ITERATIONS},
    {"warmup", required_argument, NULL, APP_OPT_WARMUP},
    {"backend", required_argument, NULL, APP_OPT_BACKEND},
    {"trace", required_argument, NULL, APP_OPT_TRACE},
    {NULL, 0, NULL, 0},
};

int app_run_option(const app_t *app, void *ctx, int id, const char *arg)
{
    app_run_options_t *run = ctx;
    ds_status_t status = DS_OK;
    int64_t value = 0;
    switch (id) {
    case APP_OPT_ITERATIONS:
        status = ds_parse_count(arg, "iterations", 1, 100000, &value);
        run->exec->iterations = (int)value;
        break;
    case APP_OPT_WARMUP:
        status = ds_parse_count(arg, "warmup", 1, 100000, &value);
        run->exec->warmup = (int)value;
        break;
    case APP_OPT_BACKEND: status = ds_backend_kind_parse(arg, run->backend); break;
    case APP_OPT_TRACE: *run->trace = arg; return 1;
    default: return 0;
    }
    return status == DS_OK ? 1 : (app_fail(app, status), -1);
}

int app_parse_options_positional(app_t *app, inputs_t *in, const struct option *const *tables,
                                 const app_option_handler_t *handlers, size_t num_handlers,
                                 int help_id, void (*help)(void), int *first_positional)
{
    in->app = app;
    struct option *table = inputs_long_options_list(tables);
    if (table == NULL)
        return app_usage_error(app, "out of memory");
    int id, code = -1;
    opterr = 0;
    optind = 1;
    while (code < 0 && (id = getopt_long(app->argc, app->argv, "", table, NULL)) != -1) {
        if (id == help_id) {
            if (app->rank == 0)
                help();
            code = APP_EXIT_OK;
            break;
        }
        if (id == '?' || id == ':') {
            code = app_option_error(app, NULL);
            break;
        }
        int handled = 0;
        for (size_t i = 0; i < num_handlers && handled == 0; i++)
            handled = handlers[i].fn(app, handlers[i].ctx, id, optarg);
        if (handled == 0)
            handled = inputs_handle(app, in, id, optarg);
        if (handled < 0)
            code = APP_EXIT_USAGE;
        else if (handled == 0)
            code = app_usage_error(app, "option '%s' is not handled (see 'dsmpi %s --help')",
                                   app->argv[optind - 1], app->command);
    }
    free(table);
    if (first_positional != NULL)
        *first_positional = optind;
    else if (code < 0 && optind < app->argc)
        code = app_usage_error(app, "unexpected argument '%s' (see 'dsmpi %s --help')",
                               app->argv[optind], app->command);
    return code;
}
