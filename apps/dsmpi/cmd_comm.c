/* dsmpi comm: the communication model.  Imports nccl-tests logs, fits the
 * model and prints nccl-tests-style tables of predicted collectives for
 * group sizes up to thousands of GPUs, each number with its provenance. */
#include "commands.h"

#include <stdlib.h>
#include <string.h>

/* What the model takes from NCCL's tuning model and never fits. */
#define PRIORS_TEXT                                                                                \
    "the protocols' (LL, LL128, Simple) bandwidth efficiencies and per-hop latencies over LL's "   \
    "(NCCL's tuning model)"

enum {
    OPT_NCCL_TESTS = 512,
    OPT_OP,
    OPT_GPUS,
    OPT_GPUS_PER_NODE,
    OPT_CLUSTER,
    OPT_DEVICE,
    OPT_CLUSTER_TAG,
    OPT_ALGO,
    OPT_PS_SERVERS,
    OPT_CONCURRENCY,
    OPT_MIN_BYTES,
    OPT_MAX_BYTES,
    OPT_STEP_FACTOR,
    OPT_MODEL_ONLY,
    OPT_BAND_LEAVE_OUT,
    OPT_JSON,
    OPT_CSV,
    OPT_PROFILE_DB,
    OPT_HELP,
};

#define MAX_LOGS 256
#define MAX_GROUPS 64
#define MAX_SIZES 128

static const char *const algo_names[] = {"auto", "ring", "tree", "hierarchical", "ps"};

static void help(void)
{
    printf(
        "usage: dsmpi comm --nccl-tests LOG... --gpus N[,N...] [options]\n\n"
        "Fits the communication model on nccl-tests logs and prints, for each group size,\n"
        "a nccl-tests-style table of the predicted time, algorithm and bus bandwidth per\n"
        "message size, with where each number comes from: imported (the log's own value),\n"
        "interpolated (between logged sizes), extrapolated (the fitted model) or assumed\n"
        "(rests on the cluster's nominal latency and bandwidth).\n\n"
        "Inputs:\n"
        "  --nccl-tests LOG...      nccl-tests output (all_reduce_perf, all_gather_perf,\n"
        "                           reduce_scatter_perf, alltoall_perf, sendrecv_perf,\n"
        "                           broadcast_perf; plain or mpirun/srun-prefixed, several\n"
        "                           tests one after another; several files, or the option\n"
        "                           repeated); the primitive comes from each test's banner,\n"
        "                           else the file name (all_reduce_16.log)\n"
        "  --cluster-tag T          tag the imported samples with the cluster they come from\n"
        "  --profile-db FILE.h5     also the communication samples this database holds (with\n"
        "                           --cluster-tag, those of that cluster)\n"
        "  --gpus-per-node G        devices per node, for the logs and the predicted groups\n"
        "                           (default: the cluster's, else DS_GPUS_PER_NODE when set,\n"
        "                           else the most ranks on one host in the logs, else 8)\n"
        "  --cluster FILE           network levels, NICs per node and oversubscription\n"
        "  --device NAME            device whose nominal links back levels without data\n"
        "                           (default: the one the logs name, else DS_DEFAULT_DEVICE)\n"
        "Prediction:\n"
        "  --op NAME                allreduce (default), allgather, reduce_scatter, alltoall,\n"
        "                           sendrecv, broadcast, ps_push, ps_pull\n"
        "  --gpus N[,N...]          group sizes to predict, e.g. 16,32,64,128,1024 (placed\n"
        "                           contiguously, G per node; sendrecv: as sendrecv_perf on N)\n"
        "  --algo A                 auto (default: what NCCL picks), ring, tree, hierarchical, ps\n"
        "  --ps-servers S           parameter servers for ps_push/ps_pull (default: one per rank)\n"
        "  --concurrency C          groups sharing a node's NICs at once (default 1)\n"
        "  --min-bytes B            smallest size (default 8; B, KiB, MiB, GiB)\n"
        "  --max-bytes B            largest size (default 1GiB)\n"
        "  --step-factor F          size multiplier between rows (default 2)\n"
        "  --model-only             the fitted model everywhere, also where a log was measured\n"
        "  --band-leave-out SET     size the band beyond the measured nodes without the errors\n"
        "                           of data set SET (abci-a100-hdr, abci-v100-edr,\n"
        "                           h100-ib-cluster01): how the bench keeps the band honest\n"
        "Output:\n"
        "  --json, --csv\n\n"
        "busbw = algbw x F(n), algbw = size / time: F = 2(n-1)/n for allreduce, (n-1)/n for\n"
        "allgather, reduce_scatter and alltoall, 1 for broadcast, sendrecv and ps (as in\n"
        "nccl-tests' doc/PERFORMANCE.md).\n");
}

typedef struct options {
    const char *logs[MAX_LOGS];
    const char *profile_db;
    int num_logs;
    ds_comm_op_t op;
    int64_t gpus[MAX_GROUPS];
    int num_gpus;
    int gpus_per_node;
    const char *cluster_file;
    const char *device;
    const char *tag;
    int algo;
    int64_t ps_servers;
    int64_t concurrency;
    int64_t min_bytes, max_bytes, step_factor;
    bool model_only;
    const char *band_leave_out;
    output_format_t format;
} options_t;

static int default_gpus_per_node(void)
{
    for (size_t i = 0; i < ds_param_count(); i++) {
        const char *env, *def, *what, *current;
        if (ds_param_describe(i, &env, &def, &what, &current) == DS_OK &&
            strcmp(env, "DS_GPUS_PER_NODE") == 0)
            return atoi(current);
    }
    return 8;
}

/* The most ranks any imported test ran on one host, from the rank lines'
 * host names; 0 when no test names its hosts. */
static int logged_gpus_per_node(const ds_comm_import_info_t *info, int num_logs)
{
    int most = 0;
    for (int i = 0; i < num_logs; i++)
        for (int t = 0; t < info[i].num_tests; t++)
            if (info[i].tests[t].hosts_known && info[i].tests[t].ranks_per_node > most)
                most = info[i].tests[t].ranks_per_node;
    return most;
}

static ds_status_t parse_gpus(const char *text, options_t *o)
{
    char copy[1024];
    if (strlen(text) >= sizeof(copy))
        return ds_set_error(DS_ERR_INVALID_ARG, "gpus list is too long (accepted: up to %d sizes)",
                            MAX_GROUPS);
    strcpy(copy, text);
    o->num_gpus = 0;
    for (char *save = NULL, *item = strtok_r(copy, ",", &save); item != NULL;
         item = strtok_r(NULL, ",", &save)) {
        if (o->num_gpus == MAX_GROUPS)
            return ds_set_error(DS_ERR_INVALID_ARG, "more than %d group sizes in --gpus",
                                MAX_GROUPS);
        ds_status_t status = ds_parse_count(item, "gpus", 1, 1LL << 24, &o->gpus[o->num_gpus]);
        if (status != DS_OK)
            return status;
        o->num_gpus++;
    }
    if (o->num_gpus == 0)
        return ds_set_error(DS_ERR_INVALID_ARG,
                            "gpus '%s' names no group size (accepted: e.g. 16,32,1024)", text);
    return DS_OK;
}

/* -1: go on; else the exit code (APP_EXIT_OK after --help). */
static int parse_options(app_t *app, options_t *o)
{
    static const struct option long_options[] = {
        {"nccl-tests", required_argument, NULL, OPT_NCCL_TESTS},
        {"op", required_argument, NULL, OPT_OP},
        {"gpus", required_argument, NULL, OPT_GPUS},
        {"gpus-per-node", required_argument, NULL, OPT_GPUS_PER_NODE},
        {"cluster", required_argument, NULL, OPT_CLUSTER},
        {"device", required_argument, NULL, OPT_DEVICE},
        {"cluster-tag", required_argument, NULL, OPT_CLUSTER_TAG},
        {"algo", required_argument, NULL, OPT_ALGO},
        {"ps-servers", required_argument, NULL, OPT_PS_SERVERS},
        {"concurrency", required_argument, NULL, OPT_CONCURRENCY},
        {"min-bytes", required_argument, NULL, OPT_MIN_BYTES},
        {"max-bytes", required_argument, NULL, OPT_MAX_BYTES},
        {"step-factor", required_argument, NULL, OPT_STEP_FACTOR},
        {"model-only", no_argument, NULL, OPT_MODEL_ONLY},
        {"band-leave-out", required_argument, NULL, OPT_BAND_LEAVE_OUT},
        {"json", no_argument, NULL, OPT_JSON},
        {"csv", no_argument, NULL, OPT_CSV},
        {"profile-db", required_argument, NULL, OPT_PROFILE_DB},
        {"help", no_argument, NULL, OPT_HELP},
        {NULL, 0, NULL, 0},
    };
    memset(o, 0, sizeof(*o));
    o->op = DS_COMM_ALLREDUCE;
    o->concurrency = 1;
    o->min_bytes = 8;
    o->max_bytes = 1LL << 30;
    o->step_factor = 2;
    int id;
    opterr = 0;
    optind = 1;
    while ((id = getopt_long(app->argc, app->argv, "", long_options, NULL)) != -1) {
        ds_status_t status = DS_OK;
        int64_t value = 0;
        switch (id) {
        case OPT_HELP:
            if (app->rank == 0)
                help();
            return APP_EXIT_OK;
        case OPT_NCCL_TESTS:
            if (app_take_files(app, "nccl-tests", optarg, o->logs, MAX_LOGS, &o->num_logs) < 0)
                return APP_EXIT_USAGE;
            break;
        case OPT_OP: status = ds_comm_op_parse(optarg, &o->op); break;
        case OPT_GPUS: status = parse_gpus(optarg, o); break;
        case OPT_GPUS_PER_NODE:
            status = ds_parse_count(optarg, "gpus-per-node", 1, 1024, &value);
            o->gpus_per_node = (int)value;
            break;
        case OPT_CLUSTER: o->cluster_file = optarg; break;
        case OPT_DEVICE: o->device = optarg; break;
        case OPT_CLUSTER_TAG: o->tag = optarg; break;
        case OPT_ALGO: {
            o->algo = -1;
            for (size_t i = 0; i < sizeof(algo_names) / sizeof(algo_names[0]); i++)
                if (strcmp(optarg, algo_names[i]) == 0)
                    o->algo = (int)i;
            if (o->algo < 0)
                return app_usage_error(
                    app, "algo '%s' is not known (accepted: auto, ring, tree, hierarchical, ps)",
                    optarg);
            break;
        }
        case OPT_PS_SERVERS:
            status = ds_parse_count(optarg, "ps-servers", 1, 1LL << 24, &o->ps_servers);
            break;
        case OPT_CONCURRENCY:
            status = ds_parse_count(optarg, "concurrency", 1, 1024, &o->concurrency);
            break;
        case OPT_MIN_BYTES: status = ds_comm_parse_size(optarg, "min-bytes", &o->min_bytes); break;
        case OPT_MAX_BYTES: status = ds_comm_parse_size(optarg, "max-bytes", &o->max_bytes); break;
        case OPT_STEP_FACTOR:
            status = ds_parse_count(optarg, "step-factor", 2, 1024, &o->step_factor);
            break;
        case OPT_MODEL_ONLY: o->model_only = true; break;
        case OPT_BAND_LEAVE_OUT: o->band_leave_out = optarg; break;
        case OPT_JSON: o->format = OUTPUT_JSON; break;
        case OPT_CSV: o->format = OUTPUT_CSV; break;
        case OPT_PROFILE_DB: o->profile_db = optarg; break;
        default: return app_option_error(app, NULL);
        }
        if (status != DS_OK)
            return app_fail(app, status);
    }
    /* "--nccl-tests A B C" took the logs that follow it. */
    if (optind < app->argc)
        return app_usage_error(app,
                               "unexpected argument '%s' (nccl-tests logs follow "
                               "--nccl-tests; see 'dsmpi comm --help')",
                               app->argv[optind]);
    if (o->num_gpus == 0)
        return app_usage_error(app, "no group sizes given (accepted: --gpus 16,32,64,128,1024)");
    if (o->min_bytes < 1 || o->max_bytes < o->min_bytes)
        return app_usage_error(app,
                               "sizes %lld to %lld bytes (accepted: 1 <= min-bytes <= max-bytes)",
                               (long long)o->min_bytes, (long long)o->max_bytes);
    return -1;
}

/* The key of one row: a group of `gpus` placed G per node. */
static ds_status_t row_key(const options_t *o, int gpus_per_node, int64_t gpus, int64_t bytes,
                           ds_event_key_t *key)
{
    if (o->op == DS_COMM_SENDRECV) {
        /* As sendrecv_perf on `gpus`: every rank sends to the next. */
        int nodes = (int)((gpus + gpus_per_node - 1) / gpus_per_node);
        ds_status_t status = ds_comm_key_init(key, o->op, bytes, 2, nodes > 1 ? 1 : 2);
        key->concurrency = nodes > 1 ? (int32_t)o->concurrency : (int32_t)gpus;
        key->flags = DS_COMM_FLAG_BATCHED;
        return status;
    }
    ds_status_t status = ds_comm_key_init(key, o->op, bytes, (int)gpus, gpus_per_node);
    key->concurrency = (int32_t)o->concurrency;
    key->variant = (uint8_t)o->algo;
    if (o->op == DS_COMM_PS_PUSH || o->op == DS_COMM_PS_PULL)
        key->dims[1] = o->ps_servers > 0 ? o->ps_servers : gpus;
    return status;
}

static double elements_of(ds_comm_op_t op, int64_t bytes, int64_t gpus)
{
    double elements = (double)bytes / 4.0; /* float, as nccl-tests by default */
    if (op == DS_COMM_ALLGATHER || op == DS_COMM_REDUCE_SCATTER || op == DS_COMM_ALLTOALL)
        elements /= (double)gpus; /* per rank, as nccl-tests prints them */
    return elements;
}

/* Microseconds with 4 decimals, or `absent` for a time that does not apply. */
static void format_us(char *text, size_t size, double seconds, const char *absent)
{
    if (seconds < 0)
        snprintf(text, size, "%s", absent);
    else
        snprintf(text, size, "%.4f", seconds * 1e6);
}

static void print_us(double seconds)
{
    if (seconds < 0)
        printf(" %11s", "-");
    else
        printf(" %11.2f", seconds * 1e6);
}

static int run(app_t *app, const options_t *o)
{
    int code = APP_EXIT_OK;
    ds_status_t status = DS_OK;
    ds_comm_samples_t *samples = NULL;
    ds_comm_model_t *model = NULL;
    ds_comm_import_info_t *info = calloc((size_t)(o->num_logs ? o->num_logs : 1), sizeof(*info));
    if (info == NULL)
        return app_usage_error(app, "out of memory");
    ds_cluster_t cluster;
    if (o->cluster_file != NULL) {
        status = ds_cluster_load(o->cluster_file, &cluster);
        if (status != DS_OK)
            goto fail;
        if (o->gpus_per_node > 0 && o->gpus_per_node != cluster.gpus_per_node) {
            code = app_usage_error(app, "gpus-per-node %d disagrees with the %d of cluster file %s",
                                   o->gpus_per_node, cluster.gpus_per_node, o->cluster_file);
            goto out;
        }
    }
    ds_comm_import_options_t import;
    ds_comm_import_options_init(&import);
    import.gpus_per_node = o->gpus_per_node;
    import.source = o->tag;
    if ((status = ds_comm_samples_create(&samples)) != DS_OK)
        goto fail;
    for (int i = 0; i < o->num_logs; i++)
        if ((status = ds_comm_import_nccl_tests(o->logs[i], &import, samples, &info[i])) != DS_OK)
            goto fail;
    size_t from_logs = ds_comm_samples_size(samples);
    /* The logs are of the cluster asked about: without a cluster file or
     * --gpus-per-node, its nodes hold at least the most ranks a log ran on
     * one host (before, a 4-GPU cluster's logs were extrapolated on 8-GPU
     * nodes, half the nodes the job would span). */
    int from_hosts =
        o->cluster_file == NULL && o->gpus_per_node <= 0 && getenv("DS_GPUS_PER_NODE") == NULL
            ? logged_gpus_per_node(info, o->num_logs)
            : 0;
    int gpus_per_node = o->cluster_file        ? cluster.gpus_per_node
                        : o->gpus_per_node > 0 ? o->gpus_per_node
                        : from_hosts > 0       ? from_hosts
                                               : default_gpus_per_node();
    if (o->profile_db != NULL) {
        /* Samples a profile database holds: imported logs and measurements. */
        ds_profile_db_t *db = NULL;
        ds_comm_sample_t *stored = NULL;
        size_t count = 0;
        status = ds_profile_db_open(MPI_COMM_NULL, o->profile_db, DS_PROFILE_DB_READ_ONLY, &db);
        if (status == DS_OK)
            status = ds_profile_db_get_comm_samples(db, o->tag, &stored, &count);
        if (status == DS_OK)
            status = ds_comm_samples_add(samples, stored, count);
        ds_comm_samples_free(stored);
        ds_profile_db_close(db);
        if (status != DS_OK)
            goto fail;
    }
    if (o->cluster_file == NULL) {
        const char *device = o->device;
        for (int i = 0; i < o->num_logs && device == NULL; i++)
            if (info[i].device_spec[0] != '\0')
                device = info[i].device_spec;
        int64_t max_gpus = 1;
        for (int g = 0; g < o->num_gpus; g++)
            max_gpus = o->gpus[g] > max_gpus ? o->gpus[g] : max_gpus;
        status = ds_cluster_init(&cluster, (max_gpus + gpus_per_node - 1) / gpus_per_node,
                                 gpus_per_node, device);
        if (status != DS_OK)
            goto fail;
    } else if (o->device != NULL) {
        ds_device_spec_t spec;
        if ((status = ds_device_spec_lookup(o->device, &spec)) != DS_OK)
            goto fail;
        cluster.device = spec;
    }
    ds_comm_model_options_t model_options;
    ds_comm_model_options_init(&model_options);
    model_options.use_measurements = !o->model_only;
    model_options.band_leave_out = o->band_leave_out;
    /* The library the samples ran on, as predict assumes it (MPI samples of
     * a profile database are Open MPI's algorithms). */
    status = ds_comm_library_of(ds_comm_samples_data(samples), ds_comm_samples_size(samples),
                                &model_options.library);
    if (status == DS_OK)
        status = ds_comm_model_create(&cluster, ds_comm_samples_data(samples),
                                      ds_comm_samples_size(samples), &model_options, &model);
    if (status != DS_OK)
        goto fail;
    if (app->rank != 0)
        goto out;

    const char *op_name = ds_comm_op_name(o->op);
    if (o->format == OUTPUT_TABLE) {
        output_preamble(app, stdout);
        for (int i = 0; i < o->num_logs; i++) {
            /* One line per test; a file of several tests names where each starts. */
            for (int t = 0; t < info[i].num_tests; t++) {
                const ds_comm_import_test_t *test = &info[i].tests[t];
                char where[32] = "";
                if (info[i].num_tests > 1)
                    snprintf(where, sizeof(where), " (line %d)", test->line);
                printf("# imported %s%s: %s, %d ranks on %d node%s (%d per node)%s%s, %zu rows, "
                       "%s\n",
                       o->logs[i], where, ds_comm_op_name(test->op), test->group_size, test->nodes,
                       test->nodes == 1 ? "" : "s", test->ranks_per_node,
                       info[i].device[0] ? ", " : "", info[i].device, test->rows,
                       info[i].prefixed ? "launcher-prefixed lines" : "plain lines");
            }
        }
        if (o->profile_db != NULL)
            printf("# profile database %s: %zu communication samples\n", o->profile_db,
                   ds_comm_samples_size(samples) - from_logs);
        if (ds_comm_samples_size(samples) == 0)
            printf("# no measurements: every number rests on the cluster's nominal links\n");
        if (from_hosts > 0)
            printf("# gpus per node: %d, the most ranks on one host in the logs (--gpus-per-node "
                   "or --cluster to change)\n",
                   from_hosts);
        printf("# cluster %s: %d per node, device %s", cluster.name, gpus_per_node,
               cluster.device.name);
        bool declared = cluster.pat;
        for (int l = 0; l < cluster.num_levels; l++) {
            printf("%s %s %.3g us %.4g GB/s%s%s", l ? ";" : ",", cluster.levels[l].name,
                   cluster.levels[l].latency_us, cluster.levels[l].bandwidth_GBps,
                   cluster.levels[l].nvls ? " nvls" : "", cluster.levels[l].sharp ? " sharp" : "");
            declared = declared || cluster.levels[l].nvls || cluster.levels[l].sharp;
        }
        printf("%s\n", cluster.pat ? "; pat" : "");
        if (model_options.library == DS_COMM_LIBRARY_OMPI)
            printf("# library: ompi, Open MPI's algorithms composed from the send/recv fit (most "
                   "samples were measured with MPI; DS_COMM_LIBRARY=nccl to change)\n");
        ds_comm_model_print(model, o->op, stdout, "# fit: ");
        if (model_options.library == DS_COMM_LIBRARY_NCCL)
            printf("# priors: %s%s\n", PRIORS_TEXT,
                   declared ? "; NVLS', CollNet's and PAT's efficiencies and per-hop latencies"
                            : "");
        printf("# busbw = algbw x %s, algbw = size / time; provenance: imported/measured = the "
               "log's value,\n#   interpolated = between logged sizes, extrapolated = fitted "
               "model, assumed = cluster's nominal links\n",
               o->op == DS_COMM_ALLREDUCE ? "2(n-1)/n"
               : o->op == DS_COMM_ALLGATHER || o->op == DS_COMM_REDUCE_SCATTER ||
                       o->op == DS_COMM_ALLTOALL
                   ? "(n-1)/n"
                   : "1");
    } else if (o->format == OUTPUT_JSON) {
        printf("{\"op\": \"%s\", \"gpus_per_node\": %d, \"groups\": [", op_name, gpus_per_node);
    } else {
        printf("gpus,nodes,size_B,count,time_us,algbw_GBps,busbw_GBps,algo,ring_us,tree_us,"
               "low_us,high_us,provenance\n");
    }
    for (int g = 0; g < o->num_gpus; g++) {
        int64_t gpus = o->gpus[g];
        int64_t nodes = (gpus + gpus_per_node - 1) / gpus_per_node;
        if (o->format == OUTPUT_TABLE) {
            printf("#\n# %s on %lld GPUs (%lld node%s x %lld)\n", op_name, (long long)gpus,
                   (long long)nodes, nodes == 1 ? "" : "s",
                   (long long)(gpus < gpus_per_node ? gpus : gpus_per_node));
            printf("# %10s %13s %6s %11s %9s %9s  %-12s %11s %11s  %s\n", "size", "count", "type",
                   "time", "algbw", "busbw", "algo", "ring", "tree", "provenance");
            printf("# %10s %13s %6s %11s %9s %9s  %-12s %11s %11s\n", "(B)", "(elements)", "",
                   "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(us)");
        } else if (o->format == OUTPUT_JSON) {
            printf("%s{\"gpus\": %lld, \"nodes\": %lld, \"rows\": [", g ? ", " : "",
                   (long long)gpus, (long long)nodes);
        }
        int row = 0;
        for (int64_t bytes = o->min_bytes; bytes <= o->max_bytes && row < MAX_SIZES;
             bytes *= o->step_factor, row++) {
            ds_event_key_t key;
            ds_comm_prediction_t p;
            /* sendrecv_perf on `nodes` nodes: every node sends one pair
             * across the fabric at once. */
            if ((status = row_key(o, gpus_per_node, gpus, bytes, &key)) != DS_OK ||
                (status = ds_comm_model_predict_in_job(model, &key, nodes, &p)) != DS_OK)
                goto fail;
            double elements = elements_of(o->op, bytes, gpus);
            const char *provenance = ds_provenance_name(p.cost.provenance);
            if (o->format == OUTPUT_TABLE) {
                printf("  %10lld %13.0f %6s", (long long)bytes, elements, "float");
                print_us(p.cost.mean_s);
                printf(" %9.2f %9.2f  %-12s", p.algbw_GBps, p.busbw_GBps,
                       ds_comm_algo_name(p.algo));
                print_us(p.ring_s);
                print_us(p.tree_s);
                printf("  %s\n", provenance);
            } else if (o->format == OUTPUT_JSON) {
                char ring[32], tree[32];
                format_us(ring, sizeof(ring), p.ring_s, "null");
                format_us(tree, sizeof(tree), p.tree_s, "null");
                printf("%s{\"size_B\": %lld, \"count\": %.0f, \"time_us\": %.4f, "
                       "\"algbw_GBps\": %.4f, \"busbw_GBps\": %.4f, \"algo\": \"%s\", "
                       "\"ring_us\": %s, \"tree_us\": %s, \"low_us\": %.4f, "
                       "\"high_us\": %.4f, \"provenance\": \"%s\"}",
                       row ? ", " : "", (long long)bytes, elements, p.cost.mean_s * 1e6,
                       p.algbw_GBps, p.busbw_GBps, ds_comm_algo_name(p.algo), ring, tree,
                       p.low_s * 1e6, p.high_s * 1e6, provenance);
            } else {
                char ring[32], tree[32];
                format_us(ring, sizeof(ring), p.ring_s, "");
                format_us(tree, sizeof(tree), p.tree_s, "");
                printf("%lld,%lld,%lld,%.0f,%.4f,%.4f,%.4f,%s,%s,%s,%.4f,%.4f,%s\n",
                       (long long)gpus, (long long)nodes, (long long)bytes, elements,
                       p.cost.mean_s * 1e6, p.algbw_GBps, p.busbw_GBps, ds_comm_algo_name(p.algo),
                       ring, tree, p.low_s * 1e6, p.high_s * 1e6, provenance);
            }
            if (bytes > INT64_MAX / o->step_factor)
                break;
        }
        if (o->format == OUTPUT_JSON)
            printf("]}");
    }
    if (o->format == OUTPUT_JSON) {
        /* What the fit found per level, and what rests on priors. */
        static const char *const sources[] = {"fitted", "borrowed", "assumed"};
        printf("], \"fit\": [");
        for (int l = 0; l < ds_comm_model_num_levels(model); l++) {
            ds_comm_level_fit_t f;
            if (ds_comm_model_level_fit(model, l, o->op, &f) != DS_OK)
                continue;
            printf("%s{\"level\": %d, \"source\": \"%s\", \"hop_us\": %.6g, "
                   "\"congestion_per_doubling\": %.6g, \"congestion_source\": \"%s\", "
                   "\"congestion_beyond_widest\": %.6g}",
                   l ? ", " : "", l, sources[f.source], f.hop_us, f.congestion,
                   l == 0                ? "none"
                   : f.congestion_fitted ? "fitted"
                                         : "prior",
                   f.congestion_beyond);
        }
        printf("], \"library\": \"%s\", \"priors\": \"%s\"}\n",
               ds_comm_library_name(model_options.library),
               model_options.library == DS_COMM_LIBRARY_NCCL ? PRIORS_TEXT : "");
    }
    goto out;
fail:
    code = app_fail(app, status);
out:
    ds_comm_model_destroy(model);
    ds_comm_samples_destroy(samples);
    free(info);
    return code;
}

int cmd_comm(app_t *app)
{
    int code = app_mpi_start(app, false);
    if (code != APP_EXIT_OK)
        return code;
    options_t *o = calloc(1, sizeof(*o));
    char **original = calloc((size_t)app->argc + 1, sizeof(*original));
    if (o == NULL || original == NULL) {
        free(o);
        free(original);
        return app_usage_error(app, "out of memory");
    }
    /* getopt_long reorders argv; the preamble shows the command as typed. */
    memcpy(original, app->argv, (size_t)app->argc * sizeof(*original));
    code = parse_options(app, o);
    if (code < 0) {
        app_t shown = *app;
        shown.argv = original;
        code = run(&shown, o);
    }
    free(original);
    free(o);
    return code;
}
