/* MPI error translation and private communicators. */
#include "dsi_mpi.h"

#include <string.h>

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
