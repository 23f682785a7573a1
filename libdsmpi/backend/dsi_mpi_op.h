/* A communication operation carried out with MPI on the group's
 * communicator: the cpu backend's, and the replay backend's (which moves the
 * same bytes and reduces them with an operation that only moves them). */
#ifndef DSI_MPI_OP_H
#define DSI_MPI_OP_H

#include "dsi_backend.h"
#include "dsi_comm_op.h"

#include <mpi.h>

typedef struct dsi_mpi_op {
    ds_comm_t *comm;
    dsi_comm_op_t op;
    MPI_Datatype type;
    MPI_Op sum; /* the reduction (MPI_OP_NULL where the dtype has none) */
    size_t element;
    void *send, *recv;
    MPI_Request *requests;  /* parameter server: one per server */
    MPI_Request pending[2]; /* the executor's non-blocking calls */
    int num_pending;
} dsi_mpi_op_t;

/* Allocates the per-server requests of `c` (c->op set). */
ds_status_t dsi_mpi_op_alloc_requests(dsi_mpi_op_t *c);

/* One blocking run of the operation (point-to-point: member 0 to 1, or
 * both ways when batched). */
ds_status_t dsi_mpi_op_run(dsi_mpi_op_t *c);

/* The executor's calls: starts the operation as non-blocking MPI calls
 * (`role` DSI_CALL_*: which sides of a point-to-point transfer this member
 * takes; `tag` tells concurrent transfers apart), tests and waits for them. */
ds_status_t dsi_mpi_op_start(dsi_mpi_op_t *c, int role, int tag);
ds_status_t dsi_mpi_op_test(dsi_mpi_op_t *c, int *done_p);
ds_status_t dsi_mpi_op_wait(dsi_mpi_op_t *c);

/* Completes a call left running (before the buffers are freed). */
void dsi_mpi_op_drain(dsi_mpi_op_t *c);

#endif /* DSI_MPI_OP_H */
