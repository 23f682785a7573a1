/* dsmpi allocation: the allocation dsmpi runs on, as it detects it (MPI's
 * shared-memory split for nodes, Slurm's variables cross-checked), so a batch
 * script can check its srun line before it spends the allocation. */
#include "commands.h"

#include <stdlib.h>
#include <string.h>

enum { OPT_JSON = 512, OPT_CSV, OPT_HELP };

static void help(void)
{
    printf("usage: srun dsmpi allocation [--json | --csv]\n\n"
           "Prints the allocation dsmpi runs on: MPI ranks, nodes (ranks that share memory),\n"
           "ranks per node and host names, and, inside a Slurm job, the job id and Slurm's\n"
           "nodes, tasks and GPUs per node, cross-checked against MPI.  Disagreements are\n"
           "warnings on stderr and counted in 'warnings'.  Runs under MPI (srun, mpiexec);\n"
           "started alone it is one rank.\n\n"
           "  --json    one JSON object\n"
           "  --csv     one row per node\n");
}

/* What every rank tells rank 0; rank 0 keeps the node leaders' records. */
typedef struct node_record {
    int node_index;
    int local_rank;
    int local_size;
    int rank;
    int warnings;
    char hostname[DS_NAME_MAX];
} node_record_t;

static void print_table(const app_t *app, const ds_allocation_t *a, const node_record_t *nodes,
                        int warnings)
{
    output_preamble(app, stdout);
    if (a->slurm_job_id != 0)
        printf("# slurm: job %lld, SLURM_NNODES %d, SLURM_NTASKS %d, SLURM_GPUS_ON_NODE %d\n",
               (long long)a->slurm_job_id, a->slurm_nnodes, a->slurm_ntasks, a->slurm_gpus_on_node);
    else
        printf("# slurm: not in a Slurm job\n");
    printf("# mpi: %d ranks on %d nodes, %d to %d ranks per node\n", a->world_size, a->num_nodes,
           a->min_local_size, a->max_local_size);
    printf("# warnings: %d\n#\n", warnings);
    printf("# %5s %-24s %8s %10s\n", "node", "host", "ranks", "first_rank");
    printf("# %5s %-24s %8s %10s\n", "", "", "(count)", "");
    for (int n = 0; n < a->num_nodes; n++)
        printf("  %5d %-24s %8d %10d\n", n, nodes[n].hostname, nodes[n].local_size, nodes[n].rank);
}

static void print_json(const ds_allocation_t *a, const node_record_t *nodes, int warnings)
{
    printf(
        "{\"ranks\": %d, \"nodes\": %d, \"ranks_per_node_min\": %d, \"ranks_per_node_max\": %d, ",
        a->world_size, a->num_nodes, a->min_local_size, a->max_local_size);
    if (a->slurm_job_id != 0)
        printf("\"slurm_job_id\": %lld, \"slurm_nnodes\": %d, \"slurm_ntasks\": %d, "
               "\"slurm_gpus_on_node\": %d, ",
               (long long)a->slurm_job_id, a->slurm_nnodes, a->slurm_ntasks, a->slurm_gpus_on_node);
    else
        printf("\"slurm_job_id\": null, ");
    printf("\"warnings\": %d, \"node_list\": [", warnings);
    for (int n = 0; n < a->num_nodes; n++) {
        printf("%s{\"node\": %d, \"host\": ", n ? ", " : "", n);
        output_json_string(stdout, nodes[n].hostname);
        printf(", \"ranks\": %d, \"first_rank\": %d}", nodes[n].local_size, nodes[n].rank);
    }
    printf("]}\n");
}

static void print_csv(const ds_allocation_t *a, const node_record_t *nodes)
{
    printf("node,host,ranks,first_rank\n");
    for (int n = 0; n < a->num_nodes; n++)
        printf("%d,%s,%d,%d\n", n, nodes[n].hostname, nodes[n].local_size, nodes[n].rank);
}

int cmd_allocation(app_t *app)
{
    static const struct option options[] = {
        {"json", no_argument, NULL, OPT_JSON},
        {"csv", no_argument, NULL, OPT_CSV},
        {"help", no_argument, NULL, OPT_HELP},
        {NULL, 0, NULL, 0},
    };
    /* MPI first when a launcher started us, so that only rank 0 prints a
     * usage error; otherwise after the options, so --help needs no MPI. */
    int code = app_mpi_start(app, false);
    if (code != APP_EXIT_OK)
        return code;
    output_format_t format = OUTPUT_TABLE;
    int id;
    opterr = 0;
    optind = 1;
    while ((id = getopt_long(app->argc, app->argv, "", options, NULL)) != -1) {
        if (id == OPT_HELP) {
            if (app->rank == 0)
                help();
            return APP_EXIT_OK;
        }
        if (id == OPT_JSON)
            format = OUTPUT_JSON;
        else if (id == OPT_CSV)
            format = OUTPUT_CSV;
        else
            return app_option_error(app, "accepted: --json, --csv, --help");
    }
    if (optind < app->argc)
        return app_usage_error(app, "unexpected argument '%s' (see 'dsmpi allocation --help')",
                               app->argv[optind]);

    if (!app->mpi && (code = app_mpi_start(app, true)) != APP_EXIT_OK)
        return code;
    ds_allocation_t a;
    ds_status_t status = ds_allocation_detect(MPI_COMM_WORLD, &a);
    if (status != DS_OK)
        return app_fail(app, status);

    node_record_t mine, *all = NULL, *nodes = NULL;
    memset(&mine, 0, sizeof(mine));
    mine.node_index = a.node_index;
    mine.local_rank = a.local_rank;
    mine.local_size = a.local_size;
    mine.rank = a.rank;
    mine.warnings = a.warnings;
    snprintf(mine.hostname, sizeof(mine.hostname), "%s", a.hostname);
    int failed = 0;
    if (app->rank == 0) {
        all = calloc((size_t)a.world_size, sizeof(*all));
        nodes = calloc((size_t)a.num_nodes, sizeof(*nodes));
        failed = all == NULL || nodes == NULL;
    }
    MPI_Bcast(&failed, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (failed) {
        code = app_fail(app, ds_set_error(DS_ERR_NO_MEMORY,
                                          "no memory to gather %d ranks on rank 0", a.world_size));
        goto out;
    }
    if (MPI_Gather(&mine, (int)sizeof(mine), MPI_BYTE, all, (int)sizeof(mine), MPI_BYTE, 0,
                   MPI_COMM_WORLD) != MPI_SUCCESS) {
        code = app_fail(app, ds_set_error(DS_ERR_MPI, "gathering the allocation on rank 0 failed"));
        goto out;
    }
    if (app->rank == 0) {
        /* Warnings are counted where they were found: take the largest count. */
        int warnings = 0;
        for (int r = 0; r < a.world_size; r++) {
            if (all[r].warnings > warnings)
                warnings = all[r].warnings;
            if (all[r].local_rank == 0 && all[r].node_index >= 0 && all[r].node_index < a.num_nodes)
                nodes[all[r].node_index] = all[r];
        }
        if (format == OUTPUT_JSON)
            print_json(&a, nodes, warnings);
        else if (format == OUTPUT_CSV)
            print_csv(&a, nodes);
        else
            print_table(app, &a, nodes, warnings);
    }
    code = APP_EXIT_OK;
out:
    free(nodes);
    free(all);
    return code;
}
