/* MPI error translation and private communicators. */
#include "dsi_mpi.h"

#include <stdio.h>
#include <string.h>

#ifdef DSMPI_SMPI
#include <simgrid/host.h>
#endif

ds_status_t dsi_mpi_error(const char *file, int line, const char *call, int code)
{
    char message[MPI_MAX_ERROR_STRING] = "";
    int length = 0;
    if (MPI_Error_string(code, message, &length) != MPI_SUCCESS)
        strcpy(message, "unknown MPI error");
    const char *paren = strchr(call, '(');
    int name_length = paren != NULL ? (int)(paren - call) : (int)strlen(call);
    return dsi_error_at(file, line, DS_ERR_MPI, "%.*s failed: %s", name_length, call, message);
}

ds_status_t dsi_mpi_agree(MPI_Comm comm, ds_status_t local)
{
    ds_status_t status = DS_OK;
    int rank = 0;
    DSI_MPI_TRY_GOTO(MPI_Comm_rank(comm, &rank), status, out);
    /* The lowest failing rank (value 0 where failed), then its reason. */
    int mine[2] = {local != DS_OK ? 0 : 1, rank}, first[2] = {1, 0};
    DSI_MPI_TRY_GOTO(MPI_Allreduce(mine, first, 1, MPI_2INT, MPI_MINLOC, comm), status, out);
    if (first[0] == 1)
        return DS_OK;
    struct {
        int code;
        char message[1000];
    } reason = {(int)local, ""};
    if (rank == first[1])
        snprintf(reason.message, sizeof(reason.message), "%s", ds_last_error());
    DSI_MPI_TRY_GOTO(MPI_Bcast(&reason, (int)sizeof(reason), MPI_BYTE, first[1], comm), status,
                     out);
    if (local != DS_OK)
        return local;
    status = DSI_ERROR((ds_status_t)reason.code, "%s", reason.message);
out:
    return status;
}

ds_status_t dsi_mpi_dup(MPI_Comm comm, MPI_Comm *dup_p)
{
    ds_status_t status = DS_OK;
    MPI_Comm dup = MPI_COMM_NULL;
    DSI_MPI_TRY_GOTO(MPI_Comm_dup(comm, &dup), status, out);
    DSI_MPI_TRY_GOTO(MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN), status, out);
    *dup_p = dup;
    dup = MPI_COMM_NULL;
out:
    if (dup != MPI_COMM_NULL)
        MPI_Comm_free(&dup);
    return status;
}

#ifdef DSMPI_SMPI
/* Simulated ranks run in one process: a node is the set of simulated hosts
 * whose "node" property (set in the platform file) is equal; a host without
 * one is a node of its own. */
ds_status_t dsi_mpi_split_node(MPI_Comm comm, int key, MPI_Comm *node_p)
{
    ds_status_t status = DS_OK;
    enum { NAME = 64 };
    char mine[NAME], *all = NULL;
    int size = 0, color = 0;
    sg_host_t host = sg_host_self();
    const char *node = sg_host_get_property_value(host, "node");
    snprintf(mine, sizeof(mine), "%s", node != NULL ? node : sg_host_get_name(host));
    DSI_MPI_TRY_GOTO(MPI_Comm_size(comm, &size), status, out);
    DSI_TRY_GOTO(dsi_calloc((size_t)size, NAME, &all), status, out);
    DSI_MPI_TRY_GOTO(MPI_Allgather(mine, NAME, MPI_CHAR, all, NAME, MPI_CHAR, comm), status, out);
    while (strncmp(all + (size_t)color * NAME, mine, NAME) != 0)
        color++;
    DSI_MPI_TRY_GOTO(MPI_Comm_split(comm, color, key, node_p), status, out);
out:
    dsi_free(all);
    return status;
}
#else
ds_status_t dsi_mpi_split_node(MPI_Comm comm, int key, MPI_Comm *node_p)
{
    ds_status_t status = DS_OK;
    DSI_MPI_TRY_GOTO(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, key, MPI_INFO_NULL, node_p),
                     status, out);
out:
    return status;
}
#endif
