/* dsmpi systems: the catalogue of GPU systems --target system= takes, one
 * system's facts with their sources, and the cluster file it stands for. */
#include "commands.h"

#include <string.h>

static void help(void)
{
    printf("usage: dsmpi systems [NAME] [--json | --csv] [--systems FILE] [--print-cluster "
           "[--nodes N]]\n\n"
           "Lists the GPU systems dsmpi knows from their public documentation (GPUs per node,\n"
           "NICs, topology, largest partition, charging), or one system with the source of\n"
           "each group of facts, the date they were read and what the sources do not say.\n"
           "Predict, search and plan take one as their target: system=NAME[,nodes=N].\n\n"
           "  NAME                     one system (e.g. perlmutter, jupiter-booster, aws-p5)\n"
           "  --systems FILE           a site's systems file: changes or adds systems (README.md,\n"
           "                           \"GPU systems\", lists every key)\n"
           "  --print-cluster          print the cluster file NAME stands for (predict, search\n"
           "                           and plan on that file predict the same to the bit)\n"
           "  --nodes N                its nodes (default: the largest partition)\n"
           "  --json, --csv            the catalogue or the system as JSON or CSV\n");
}

static void json_system(const ds_system_t *s)
{
    printf("{\"name\": ");
    output_json_string(stdout, s->name);
    printf(", \"title\": ");
    output_json_string(stdout, s->title);
    printf(", \"device\": ");
    output_json_string(stdout, s->device);
    printf(", \"gpu_memory_GiB\": %.17g, \"gpus_per_node\": %d, \"intra_node\": ",
           s->gpu_memory_GiB, s->gpus_per_node);
    output_json_string(stdout, s->intra_node);
    printf(", \"intra_node_GBps\": %.17g, \"nvls\": %s, \"nics_per_node\": %d, \"nic_Gbps\": "
           "%.17g, \"injection_Gbps\": %.17g, \"topology\": ",
           s->intra_node_GBps, s->nvls ? "true" : "false", s->nics_per_node, s->nic_Gbps,
           s->injection_Gbps);
    output_json_string(stdout, s->topology);
    printf(", \"group_nodes\": %d, \"groups\": %d, \"oversubscription\": %.17g, \"max_nodes\": "
           "%lld, \"partition_gpus\": %lld, \"charge_unit\": ",
           s->group_nodes, s->groups, s->oversubscription, (long long)s->max_nodes,
           (long long)s->partition_gpus);
    output_json_string(stdout, s->charge_unit);
    printf(", \"charge_per_node_hour\": %.17g, \"charge_published\": %s", s->charge_per_node_hour,
           s->charge_published ? "true" : "false");
    const char *keys[] = {"nccl_tests",    "source_node", "source_network",
                          "source_charge", "read_on",     "not_published"};
    const char *values[] = {s->nccl_tests,    s->source_node, s->source_network,
                            s->source_charge, s->read_on,     s->not_published};
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
        printf(", \"%s\": ", keys[i]);
        output_json_string(stdout, values[i]);
    }
    printf("}");
}

static void csv_system(const ds_system_t *s)
{
    const char *texts[] = {s->name, s->title, s->device};
    for (size_t i = 0; i < 3; i++) {
        output_csv_field(stdout, texts[i]);
        putchar(',');
    }
    printf("%.17g,%d,%.17g,%d,%.17g,%.17g,", s->gpu_memory_GiB, s->gpus_per_node,
           s->intra_node_GBps, s->nics_per_node, s->nic_Gbps, s->injection_Gbps);
    output_csv_field(stdout, s->topology);
    printf(",%d,%d,%.17g,%lld,%lld,", s->group_nodes, s->groups, s->oversubscription,
           (long long)s->max_nodes, (long long)s->partition_gpus);
    output_csv_field(stdout, s->charge_unit);
    printf(",%.17g,%d,", s->charge_per_node_hour, s->charge_published ? 1 : 0);
    const char *sources[] = {s->source_node, s->source_network, s->source_charge, s->read_on};
    for (size_t i = 0; i < 4; i++) {
        output_csv_field(stdout, sources[i]);
        putchar(i < 3 ? ',' : '\n');
    }
}

static void print_list(const app_t *app)
{
    output_preamble(app, stdout);
    printf(
        "# GPU systems (dsmpi systems NAME for the sources; as a target: system=NAME[,nodes=N])\n");
    printf("# %-18s %-9s %4s %6s %4s %8s %10s %7s %14s  %s\n", "name", "device", "gpn", "GiB",
           "nics", "nic", "injection", "nodes", "charged in", "topology");
    printf("# %-18s %-9s %4s %6s %4s %8s %10s %7s %14s\n", "", "", "(GPU)", "(GiB)", "(NIC)",
           "(Gb/s)", "(Gb/s)", "(node)", "");
    for (size_t i = 0; i < ds_system_count(); i++) {
        const ds_system_t *s = ds_system_at(i);
        char nodes[24];
        if (s->max_nodes > 0)
            snprintf(nodes, sizeof(nodes), "%lld", (long long)s->max_nodes);
        else
            snprintf(nodes, sizeof(nodes), "-");
        printf("  %-18s %-9s %4d %6.4g %4d %8.4g %10.5g %7s %14s  %s\n", s->name, s->device,
               s->gpus_per_node, s->gpu_memory_GiB, s->nics_per_node, s->nic_Gbps,
               s->injection_Gbps, nodes, s->charge_unit, s->topology);
    }
}

static void print_system(const ds_system_t *s)
{
    printf("%s: %s\n", s->name, s->title);
    printf("  GPUs:          %d x %s, %.4g GiB each\n", s->gpus_per_node, s->device,
           s->gpu_memory_GiB);
    printf("  inside a node: %s; modelled as %.4g GB/s per GPU per direction%s\n", s->intra_node,
           s->intra_node_GBps, s->nvls ? "; NVLink SHARP" : "");
    printf("  NICs:          %d x %.4g Gb/s = %.5g Gb/s per node\n", s->nics_per_node, s->nic_Gbps,
           s->injection_Gbps);
    printf("  topology:      %s", s->topology);
    if (s->group_nodes > 0)
        printf("; groups of %d nodes%s, oversubscription %.4g between them", s->group_nodes,
               s->groups > 0 ? "" : " (count not published)", s->oversubscription);
    printf("\n");
    if (s->max_nodes > 0)
        printf("  partition:     %lld nodes, %lld GPUs\n", (long long)s->max_nodes,
               (long long)s->partition_gpus);
    else
        printf("  partition:     not published (give nodes=N)\n");
    printf("  charged in:    %s, %.4g per node-hour%s\n", s->charge_unit, s->charge_per_node_hour,
           s->charge_published ? "" : " (not published: dsmpi's default)");
    printf(
        "  nccl-tests:    %s; import your own runs with their tag:\n"
        "                 dsmpi import --nccl-tests LOG... --cluster-tag %s --profile-db DB.h5\n",
        s->nccl_tests, s->name);
    printf("sources (read %s):\n  node:    %s\n  network: %s\n  charge:  %s\n", s->read_on,
           s->source_node, s->source_network, s->source_charge);
    printf("not published, and the default used: %s\n",
           s->not_published[0] != '\0' ? s->not_published : "-");
}

typedef struct options {
    const char *systems_file, *name;
    bool json, csv, print_cluster;
    int64_t nodes;
} options_t;

static int parse(app_t *app, options_t *o)
{
    enum { OPT_JSON = 256, OPT_CSV, OPT_SYSTEMS, OPT_PRINT_CLUSTER, OPT_NODES, OPT_HELP };
    static const struct option options[] = {
        {"json", no_argument, NULL, OPT_JSON},
        {"csv", no_argument, NULL, OPT_CSV},
        {"systems", required_argument, NULL, OPT_SYSTEMS},
        {"print-cluster", no_argument, NULL, OPT_PRINT_CLUSTER},
        {"nodes", required_argument, NULL, OPT_NODES},
        {"help", no_argument, NULL, OPT_HELP},
        {NULL, 0, NULL, 0},
    };
    static const char accepted[] =
        "accepted: NAME, --json, --csv, --systems FILE, --print-cluster, --nodes N, --help";
    int id;
    opterr = 0;
    optind = 1;
    while ((id = getopt_long(app->argc, app->argv, "", options, NULL)) != -1) {
        ds_status_t status = DS_OK;
        switch (id) {
        case OPT_HELP: help(); return APP_EXIT_OK;
        case OPT_JSON: o->json = true; break;
        case OPT_CSV: o->csv = true; break;
        case OPT_SYSTEMS: o->systems_file = optarg; break;
        case OPT_PRINT_CLUSTER: o->print_cluster = true; break;
        case OPT_NODES: status = ds_parse_count(optarg, "nodes", 1, 1LL << 32, &o->nodes); break;
        default: return app_option_error(app, accepted);
        }
        if (status != DS_OK)
            return app_fail(app, status);
    }
    if (optind < app->argc)
        o->name = app->argv[optind++];
    if (optind < app->argc)
        return app_usage_error(app, "unexpected argument '%s' (%s)", app->argv[optind], accepted);
    if ((o->print_cluster || o->nodes > 0) && o->name == NULL)
        return app_usage_error(app, "--print-cluster and --nodes need a system NAME (see 'dsmpi "
                                    "systems' for the names)");
    if (o->json && o->csv)
        return app_usage_error(app, "--json and --csv: give one of them");
    if (o->nodes > 0 && !o->print_cluster)
        return app_usage_error(app, "--nodes goes with --print-cluster");
    return -1;
}

int cmd_systems(app_t *app)
{
    options_t o = {0};
    int code = parse(app, &o);
    if (code >= 0)
        return code;
    code = app_mpi_start(app, false);
    if (code != APP_EXIT_OK || app->rank != 0) /* one rank prints */
        return code;
    ds_status_t status = DS_OK;
    if (o.systems_file != NULL && (status = ds_systems_load(o.systems_file)) != DS_OK)
        return app_fail(app, status);
    const ds_system_t *system = NULL;
    if (o.name != NULL && (status = ds_system_lookup(o.name, &system)) != DS_OK)
        return app_fail(app, status);
    if (o.print_cluster) {
        char text[2048];
        if ((status = ds_system_cluster_json(system, o.nodes, text, sizeof(text))) != DS_OK)
            return app_fail(app, status);
        fputs(text, stdout);
        return APP_EXIT_OK;
    }
    if (o.csv) {
        printf("name,title,device,gpu_memory_GiB,gpus_per_node,intra_node_GBps,nics_per_node,"
               "nic_Gbps,injection_Gbps,topology,group_nodes,groups,oversubscription,max_nodes,"
               "partition_gpus,charge_unit,charge_per_node_hour,charge_published,source_node,"
               "source_network,source_charge,read_on\n");
        for (size_t i = 0; i < ds_system_count(); i++)
            if (system == NULL || ds_system_at(i) == system)
                csv_system(ds_system_at(i));
    } else if (system != NULL && o.json) {
        json_system(system);
        printf("\n");
    } else if (system != NULL) {
        print_system(system);
    } else if (o.json) {
        printf("{\"systems\": [");
        for (size_t i = 0; i < ds_system_count(); i++) {
            printf("%s\n  ", i ? "," : "");
            json_system(ds_system_at(i));
        }
        printf("]}\n");
    } else {
        print_list(app);
    }
    return APP_EXIT_OK;
}
