/*
 * Communication operations carried out with MPI on the group's communicator
 * (dsi_mpi_op.h).  The parameter server is every member reducing its
 * gradient shards to the servers (one reduce per server) and the servers
 * broadcasting the parameters back (one broadcast per server), all issued
 * at once with non-blocking collectives.
 */
#include "dsi_mpi_op.h"

ds_status_t dsi_mpi_op_alloc_requests(dsi_mpi_op_t *c)
{
    return dsi_calloc((size_t)DSI_MAX(c->op.servers, 1), sizeof(MPI_Request), &c->requests);
}

ds_status_t dsi_mpi_op_run(dsi_mpi_op_t *c)
{
    ds_status_t status = DS_OK;
    const dsi_comm_op_t *op = &c->op;
    MPI_Comm mc = c->comm->comm;
    int rank = c->comm->rank;
    int count = (int)op->count;
    char *send = c->send, *recv = c->recv;
    switch (op->op) {
    case DS_COMM_ALLREDUCE:
        DSI_MPI_TRY_GOTO(MPI_Allreduce(send, recv, count, c->type, c->sum, mc), status, out);
        break;
    case DS_COMM_ALLGATHER:
        DSI_MPI_TRY_GOTO(MPI_Allgather(send, count, c->type, recv, count, c->type, mc), status,
                         out);
        break;
    case DS_COMM_REDUCE_SCATTER:
        DSI_MPI_TRY_GOTO(MPI_Reduce_scatter_block(send, recv, count, c->type, c->sum, mc), status,
                         out);
        break;
    case DS_COMM_ALLTOALL:
        DSI_MPI_TRY_GOTO(MPI_Alltoall(send, count, c->type, recv, count, c->type, mc), status, out);
        break;
    case DS_COMM_BROADCAST:
        DSI_MPI_TRY_GOTO(MPI_Bcast(rank == 0 ? send : recv, count, c->type, 0, mc), status, out);
        break;
    case DS_COMM_SENDRECV:
        if (op->batched) {
            int peer = 1 - rank;
            DSI_MPI_TRY_GOTO(MPI_Sendrecv(send, count, c->type, peer, 7, recv, count, c->type, peer,
                                          7, mc, MPI_STATUS_IGNORE),
                             status, out);
        } else if (rank == 0) {
            DSI_MPI_TRY_GOTO(MPI_Send(send, count, c->type, 1, 7, mc), status, out);
        } else {
            DSI_MPI_TRY_GOTO(MPI_Recv(recv, count, c->type, 0, 7, mc, MPI_STATUS_IGNORE), status,
                             out);
        }
        break;
    case DS_COMM_PS_PUSH:
        for (int s = 0; s < op->servers; s++)
            DSI_MPI_TRY_GOTO(MPI_Ireduce(send + (size_t)(s * op->count) * c->element,
                                         rank == s ? recv : NULL, count, c->type, c->sum, s, mc,
                                         &c->requests[s]),
                             status, out);
        DSI_MPI_TRY_GOTO(MPI_Waitall(op->servers, c->requests, MPI_STATUSES_IGNORE), status, out);
        break;
    case DS_COMM_PS_PULL:
        for (int s = 0; s < op->servers; s++)
            DSI_MPI_TRY_GOTO(MPI_Ibcast(recv + (size_t)(s * op->count) * c->element, count, c->type,
                                        s, mc, &c->requests[s]),
                             status, out);
        DSI_MPI_TRY_GOTO(MPI_Waitall(op->servers, c->requests, MPI_STATUSES_IGNORE), status, out);
        break;
    case DS_COMM_COUNT_:
        status = DSI_ERROR(DS_ERR_INTERNAL, "communication operator %d", (int)op->op);
        break;
    }
out:
    return status;
}

ds_status_t dsi_mpi_op_start(dsi_mpi_op_t *c, int role, int tag)
{
    ds_status_t status = DS_OK;
    const dsi_comm_op_t *op = &c->op;
    MPI_Comm mc = c->comm->comm;
    int count = (int)op->count, peer = 1 - c->comm->rank;
    MPI_Request *r = c->pending;
    if (c->num_pending != 0)
        return DSI_ERROR(DS_ERR_INTERNAL, "a communication call was started twice");
    switch (op->op) {
    case DS_COMM_ALLREDUCE:
        DSI_MPI_TRY_GOTO(MPI_Iallreduce(c->send, c->recv, count, c->type, c->sum, mc, &r[0]),
                         status, out);
        c->num_pending = 1;
        break;
    case DS_COMM_ALLGATHER:
        DSI_MPI_TRY_GOTO(
            MPI_Iallgather(c->send, count, c->type, c->recv, count, c->type, mc, &r[0]), status,
            out);
        c->num_pending = 1;
        break;
    case DS_COMM_REDUCE_SCATTER:
        DSI_MPI_TRY_GOTO(
            MPI_Ireduce_scatter_block(c->send, c->recv, count, c->type, c->sum, mc, &r[0]), status,
            out);
        c->num_pending = 1;
        break;
    case DS_COMM_ALLTOALL:
        DSI_MPI_TRY_GOTO(MPI_Ialltoall(c->send, count, c->type, c->recv, count, c->type, mc, &r[0]),
                         status, out);
        c->num_pending = 1;
        break;
    case DS_COMM_BROADCAST:
        DSI_MPI_TRY_GOTO(
            MPI_Ibcast(c->comm->rank == 0 ? c->send : c->recv, count, c->type, 0, mc, &r[0]),
            status, out);
        c->num_pending = 1;
        break;
    case DS_COMM_SENDRECV:
        if (role != DSI_CALL_SEND) {
            DSI_MPI_TRY_GOTO(MPI_Irecv(c->recv, count, c->type, peer, tag, mc, &r[c->num_pending]),
                             status, out);
            c->num_pending++;
        }
        if (role != DSI_CALL_RECV) {
            DSI_MPI_TRY_GOTO(MPI_Isend(c->send, count, c->type, peer, tag, mc, &r[c->num_pending]),
                             status, out);
            c->num_pending++;
        }
        break;
    case DS_COMM_PS_PUSH:
    case DS_COMM_PS_PULL:
    case DS_COMM_COUNT_:
        status = DSI_ERROR(DS_ERR_UNSUPPORTED,
                           "the executor has no non-blocking form of communication operator %d",
                           (int)op->op);
        break;
    }
out:
    return status;
}

ds_status_t dsi_mpi_op_test(dsi_mpi_op_t *c, int *done_p)
{
    ds_status_t status = DS_OK;
    int done = 1;
    if (c->num_pending > 0) {
        DSI_MPI_TRY_GOTO(MPI_Testall(c->num_pending, c->pending, &done, MPI_STATUSES_IGNORE),
                         status, out);
        if (done)
            c->num_pending = 0;
    }
    *done_p = done;
out:
    return status;
}

ds_status_t dsi_mpi_op_wait(dsi_mpi_op_t *c)
{
    ds_status_t status = DS_OK;
    if (c->num_pending > 0) {
        DSI_MPI_TRY_GOTO(MPI_Waitall(c->num_pending, c->pending, MPI_STATUSES_IGNORE), status, out);
        c->num_pending = 0;
    }
out:
    return status;
}

void dsi_mpi_op_drain(dsi_mpi_op_t *c)
{
    if (c->num_pending > 0)
        (void)MPI_Waitall(c->num_pending, c->pending, MPI_STATUSES_IGNORE);
    c->num_pending = 0;
}
