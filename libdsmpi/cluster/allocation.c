/* The allocation dsmpi runs on: MPI's shared-memory split says which ranks
 * share a node; Slurm's variables are read and cross-checked against it. */
#include <dsmpi/cluster.h>

#include "dsi_core.h"
#include "dsi_mpi.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

ds_status_t ds_slurm_parse_tasks_per_node(const char *text, int *counts, int max_nodes,
                                          int *num_nodes_p)
{
    /* "4(x2),3": four tasks on each of two nodes, then three. */
    int nodes = 0;
    const char *p = text;
    if (text == NULL || *text == '\0')
        goto bad;
    while (*p != '\0') {
        if (!isdigit((unsigned char)*p))
            goto bad;
        char *end;
        long tasks = strtol(p, &end, 10);
        long repeat = 1;
        p = end;
        if (*p == '(') {
            if (p[1] != 'x' || !isdigit((unsigned char)p[2]))
                goto bad;
            repeat = strtol(p + 2, &end, 10);
            if (*end != ')')
                goto bad;
            p = end + 1;
        }
        if (tasks < 1 || tasks > 1000000 || repeat < 1 || repeat > 1000000)
            goto bad;
        for (long r = 0; r < repeat; r++) {
            if (nodes >= max_nodes)
                return DSI_ERROR(DS_ERR_OVERFLOW,
                                 "SLURM_TASKS_PER_NODE '%s' describes more than %d nodes", text,
                                 max_nodes);
            counts[nodes++] = (int)tasks;
        }
        if (*p == ',')
            p++;
        else if (*p != '\0')
            goto bad;
    }
    *num_nodes_p = nodes;
    return DS_OK;
bad:
    return DSI_ERROR(DS_ERR_INVALID_ARG,
                     "SLURM_TASKS_PER_NODE '%s' is malformed (accepted: e.g. 4(x2),3)",
                     text ? text : "");
}

static int env_int(const char *name)
{
    const char *value = getenv(name);
    if (value == NULL || !isdigit((unsigned char)*value))
        return 0;
    return atoi(value);
}

static void cross_check_slurm(ds_allocation_t *a)
{
    const char *job = getenv("SLURM_JOB_ID");
    if (job == NULL)
        return;
    a->slurm_job_id = strtoll(job, NULL, 10);
    a->slurm_nnodes = env_int("SLURM_NNODES");
    a->slurm_ntasks = env_int("SLURM_NTASKS");
    a->slurm_gpus_on_node = env_int("SLURM_GPUS_ON_NODE");
    bool report = a->rank == 0;
    if (a->slurm_ntasks > 0 && a->slurm_ntasks != a->world_size) {
        a->warnings++;
        if (report)
            DSI_WARN("Slurm job %lld has SLURM_NTASKS=%d but MPI sees %d ranks; using MPI's",
                     (long long)a->slurm_job_id, a->slurm_ntasks, a->world_size);
    }
    if (a->slurm_nnodes > 0 && a->slurm_nnodes != a->num_nodes) {
        a->warnings++;
        if (report)
            DSI_WARN("Slurm job %lld has SLURM_NNODES=%d but MPI's shared-memory split finds %d "
                     "nodes; using MPI's",
                     (long long)a->slurm_job_id, a->slurm_nnodes, a->num_nodes);
    }
    const char *per_node = getenv("SLURM_TASKS_PER_NODE");
    int counts[1024], nodes = 0;
    if (per_node != NULL && a->num_nodes <= 1024 &&
        ds_slurm_parse_tasks_per_node(per_node, counts, 1024, &nodes) == DS_OK &&
        a->node_index < nodes && counts[a->node_index] != a->local_size &&
        a->slurm_ntasks == a->world_size) {
        a->warnings++;
        if (a->local_rank == 0) /* once per node, not once per rank */
            DSI_WARN("SLURM_TASKS_PER_NODE=%s gives %d tasks to node %d but %d ranks share it",
                     per_node, counts[a->node_index], a->node_index, a->local_size);
    }
}

ds_status_t ds_allocation_detect(MPI_Comm comm, ds_allocation_t *allocation)
{
    ds_status_t status = DS_OK;
    MPI_Comm world = MPI_COMM_NULL, node = MPI_COMM_NULL, leaders = MPI_COMM_NULL;
    ds_allocation_t a;
    memset(&a, 0, sizeof(a));
    DSI_TRY(dsi_mpi_dup(comm, &world));
    DSI_MPI_TRY_GOTO(MPI_Comm_rank(world, &a.rank), status, out);
    DSI_MPI_TRY_GOTO(MPI_Comm_size(world, &a.world_size), status, out);
    DSI_TRY_GOTO(dsi_mpi_split_node(world, a.rank, &node), status, out);
    DSI_MPI_TRY_GOTO(MPI_Comm_rank(node, &a.local_rank), status, out);
    DSI_MPI_TRY_GOTO(MPI_Comm_size(node, &a.local_size), status, out);
    /* Node leaders (local rank 0), ordered by world rank, number the nodes. */
    DSI_MPI_TRY_GOTO(MPI_Comm_split(world, a.local_rank == 0 ? 0 : MPI_UNDEFINED, a.rank, &leaders),
                     status, out);
    int ids[2] = {0, 0};
    if (leaders != MPI_COMM_NULL) {
        DSI_MPI_TRY_GOTO(MPI_Comm_rank(leaders, &ids[0]), status, out);
        DSI_MPI_TRY_GOTO(MPI_Comm_size(leaders, &ids[1]), status, out);
    }
    DSI_MPI_TRY_GOTO(MPI_Bcast(ids, 2, MPI_INT, 0, node), status, out);
    a.node_index = ids[0];
    a.num_nodes = ids[1];
    DSI_MPI_TRY_GOTO(MPI_Allreduce(&a.local_size, &a.min_local_size, 1, MPI_INT, MPI_MIN, world),
                     status, out);
    DSI_MPI_TRY_GOTO(MPI_Allreduce(&a.local_size, &a.max_local_size, 1, MPI_INT, MPI_MAX, world),
                     status, out);
    snprintf(a.hostname, sizeof(a.hostname), "%s", dsi_hostname());
    cross_check_slurm(&a);
    *allocation = a;
out:
    if (leaders != MPI_COMM_NULL)
        MPI_Comm_free(&leaders);
    if (node != MPI_COMM_NULL)
        MPI_Comm_free(&node);
    if (world != MPI_COMM_NULL)
        MPI_Comm_free(&world);
    return status;
}
