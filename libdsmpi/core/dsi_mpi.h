/* MPI error translation: one macro family turns an MPI return code into
 * DS_ERR_MPI with MPI's own message, logged once with file:line.  The library
 * runs MPI on communicators it duplicated with MPI_ERRORS_RETURN, so errors
 * come back here instead of aborting the job. */
#ifndef DSI_MPI_H
#define DSI_MPI_H

#include "dsi_core.h"

#include <mpi.h>

ds_status_t dsi_mpi_error(const char *file, int line, const char *call, int code);

#define DSI_MPI_TRY_GOTO(call, status, label)                                                      \
    do {                                                                                           \
        int dsi_mpi_code_ = (call);                                                                \
        if (dsi_mpi_code_ != MPI_SUCCESS) {                                                        \
            (status) = dsi_mpi_error(__FILE__, __LINE__, #call, dsi_mpi_code_);                    \
            goto label;                                                                            \
        }                                                                                          \
    } while (0)

/* Every rank of `comm` learns whether any failed: returns `local` where it
 * failed, else the status and message of the lowest failing rank, else
 * DS_OK.  For a step that may fail on one rank
 * only (memory, a file) before the next collective, which would otherwise
 * leave the other ranks waiting in it forever.  Collective over comm. */
ds_status_t dsi_mpi_agree(MPI_Comm comm, ds_status_t local);

/* Duplicates `comm` and sets MPI_ERRORS_RETURN on the copy; free with
 * MPI_Comm_free. */
ds_status_t dsi_mpi_dup(MPI_Comm comm, MPI_Comm *dup_p);

/* Splits `comm` by node: the ranks that share one node's memory (MPI's
 * shared-memory split; in a SimGrid SMPI build, the simulated hosts of one
 * node of the platform).  Ranks are ordered by `key`.  Collective over
 * comm; free the result with MPI_Comm_free. */
ds_status_t dsi_mpi_split_node(MPI_Comm comm, int key, MPI_Comm *node_p);

#endif /* DSI_MPI_H */
