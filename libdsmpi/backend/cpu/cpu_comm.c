/*
 * Communication on the CPU backend: MPI on the group's communicator.
 *
 * 16-bit floats are reduced with user-defined MPI operations (MPI has no
 * bf16 or fp16 type), converting to fp32, adding and rounding, as a CPU
 * training run would.  The parameter server is every member reducing its
 * gradient shards to the servers (one reduce per server) and the servers
 * broadcasting the parameters back (one broadcast per server), all issued
 * at once with non-blocking collectives.
 */
#include "dsi_cpu_backend.h"

#include <string.h>

static void bf16_sum(void *in, void *inout, int *length, MPI_Datatype *type)
{
    const uint16_t *a = in;
    uint16_t *b = inout;
    for (int i = 0; i < *length; i++)
        b[i] = dsi_bf16_round(dsi_bf16_widen(a[i]) + dsi_bf16_widen(b[i]));
}

static void fp16_sum(void *in, void *inout, int *length, MPI_Datatype *type)
{
    const uint16_t *a = in;
    uint16_t *b = inout;
    for (int i = 0; i < *length; i++)
        b[i] = dsi_fp16_from_f32(dsi_fp16_to_f32(a[i]) + dsi_fp16_to_f32(b[i]));
}

ds_status_t dsi_cpu_comm_ops_create(cpu_backend_t *cpu)
{
    ds_status_t status = DS_OK;
    cpu->bf16_sum = cpu->fp16_sum = MPI_OP_NULL;
    DSI_MPI_TRY_GOTO(MPI_Op_create(bf16_sum, 1, &cpu->bf16_sum), status, out);
    DSI_MPI_TRY_GOTO(MPI_Op_create(fp16_sum, 1, &cpu->fp16_sum), status, out);
out:
    return status;
}

void dsi_cpu_comm_ops_free(cpu_backend_t *cpu)
{
    if (cpu->bf16_sum != MPI_OP_NULL)
        MPI_Op_free(&cpu->bf16_sum);
    if (cpu->fp16_sum != MPI_OP_NULL)
        MPI_Op_free(&cpu->fp16_sum);
}

ds_status_t dsi_cpu_comm_init(ds_comm_t *comm)
{
    comm->impl = NULL; /* MPI needs nothing beyond the group's communicator */
    return DS_OK;
}

void dsi_cpu_comm_fini(ds_comm_t *comm)
{
}

typedef struct cpu_comm_op {
    ds_comm_t *comm;
    dsi_comm_op_t op;
    MPI_Datatype type;
    MPI_Op sum;
    size_t element;
    void *send, *recv;
    MPI_Request *requests; /* parameter server: one per server */
    MPI_Request pending[2]; /* the executor's non-blocking calls */
    int num_pending;
} cpu_comm_op_t;

void dsi_cpu_comm_release(void *impl)
{
    cpu_comm_op_t *c = impl;
    if (c == NULL)
        return;
    for (int i = 0; i < c->num_pending; i++) /* a call left running: complete it first */
        (void)MPI_Wait(&c->pending[i], MPI_STATUS_IGNORE);
    dsi_free(c->send);
    dsi_free(c->recv);
    dsi_free(c->requests);
    dsi_free(c);
}

/* Element `i` of a buffer of `dtype` as fp32, and back. */
static float element_get(const void *base, ds_dtype_t dtype, int64_t i)
{
    switch (dtype) {
    case DS_DTYPE_FP32: return ((const float *)base)[i];
    case DS_DTYPE_BF16: return dsi_bf16_to_f32(((const uint16_t *)base)[i]);
    case DS_DTYPE_FP16: return dsi_fp16_to_f32(((const uint16_t *)base)[i]);
    case DS_DTYPE_FP8: break;
    }
    return (float)((const uint8_t *)base)[i];
}

static void element_set(void *base, ds_dtype_t dtype, int64_t i, float value)
{
    switch (dtype) {
    case DS_DTYPE_FP32: ((float *)base)[i] = value; return;
    case DS_DTYPE_BF16: ((uint16_t *)base)[i] = dsi_bf16_from_f32(value); return;
    case DS_DTYPE_FP16: ((uint16_t *)base)[i] = dsi_fp16_from_f32(value); return;
    case DS_DTYPE_FP8: break;
    }
    ((uint8_t *)base)[i] = (uint8_t)value;
}

static int is_reduction(ds_comm_op_t op)
{
    return op == DS_COMM_ALLREDUCE || op == DS_COMM_REDUCE_SCATTER || op == DS_COMM_PS_PUSH;
}

ds_status_t dsi_cpu_comm_prepare(ds_comm_t *comm, const dsi_comm_op_t *op, int verify,
                                 void **impl_p)
{
    ds_status_t status = DS_OK;
    cpu_backend_t *cpu = comm->backend->impl;
    cpu_comm_op_t *c = NULL;
    if (op->dtype == DS_DTYPE_FP8 && is_reduction(op->op))
        return DSI_ERROR(DS_ERR_UNSUPPORTED, "the cpu backend cannot reduce fp8 values");
    DSI_TRY(dsi_calloc(1, sizeof(*c), &c));
    c->comm = comm;
    c->op = *op;
    c->element = ds_dtype_size(op->dtype);
    switch (op->dtype) {
    case DS_DTYPE_FP32:
        c->type = MPI_FLOAT;
        c->sum = MPI_SUM;
        break;
    case DS_DTYPE_BF16:
        c->type = MPI_UINT16_T;
        c->sum = cpu->bf16_sum;
        break;
    case DS_DTYPE_FP16:
        c->type = MPI_UINT16_T;
        c->sum = cpu->fp16_sum;
        break;
    case DS_DTYPE_FP8:
        c->type = MPI_UINT8_T;
        c->sum = MPI_OP_NULL;
        break;
    }
    DSI_TRY_GOTO(dsi_calloc(1, DSI_MAX(op->send_bytes, 1), &c->send), status, err_free);
    DSI_TRY_GOTO(dsi_calloc(1, DSI_MAX(op->recv_bytes, 1), &c->recv), status, err_free);
    DSI_TRY_GOTO(dsi_calloc((size_t)DSI_MAX(op->servers, 1), sizeof(MPI_Request), &c->requests),
                 status, err_free);

    int64_t send_count = (int64_t)(op->send_bytes / c->element);
    int64_t recv_count = (int64_t)(op->recv_bytes / c->element);
    for (int64_t i = 0; i < send_count; i++)
        element_set(c->send, op->dtype, i,
                    verify ? dsi_comm_verify_value(comm->rank, i)
                           : dsi_rng_normal((uint64_t)comm->rank + 1, (uint64_t)i));
    if (!verify) /* what the receive buffers held before: also realistic */
        for (int64_t i = 0; i < recv_count; i++)
            element_set(c->recv, op->dtype, i, dsi_rng_normal(0x5eed, (uint64_t)i));
    if (op->op == DS_COMM_PS_PULL && comm->rank < op->servers) /* a server holds its shard */
        memcpy((char *)c->recv + (size_t)(comm->rank * op->count) * c->element,
               (char *)c->send + (size_t)(comm->rank * op->count) * c->element,
               (size_t)op->count * c->element);
    *impl_p = c;
    return DS_OK;
err_free:
    dsi_cpu_comm_release(c);
    return status;
}

static ds_status_t run_once(cpu_comm_op_t *c)
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

ds_status_t dsi_cpu_comm_run_timed(void *impl, void *before, double *lead_s, double *seconds_p)
{
    double start = dsi_now_s();
    if (before != NULL)
        DSI_TRY(dsi_cpu_kernel_run_impl(before));
    double issued = dsi_now_s();
    DSI_TRY(run_once(impl));
    *lead_s = issued - start;
    *seconds_p = dsi_now_s() - issued;
    return DS_OK;
}

ds_status_t dsi_cpu_comm_check(void *impl, int64_t *errors_p)
{
    const cpu_comm_op_t *c = impl;
    const dsi_comm_op_t *op = &c->op;
    int n = c->comm->size, me = c->comm->rank;
    int64_t k = op->count, errors = 0;
    /* expected(i) for element i of the receive buffer, or skip. */
    for (int64_t i = 0; i < (int64_t)(op->recv_bytes / c->element); i++) {
        float want = 0.0f;
        int64_t chunk = i / k, j = i % k;
        switch (op->op) {
        case DS_COMM_ALLREDUCE:
            for (int r = 0; r < n; r++)
                want += dsi_comm_verify_value(r, i);
            break;
        case DS_COMM_ALLGATHER: want = dsi_comm_verify_value((int)chunk, j); break;
        case DS_COMM_REDUCE_SCATTER:
            for (int r = 0; r < n; r++)
                want += dsi_comm_verify_value(r, me * k + i);
            break;
        case DS_COMM_ALLTOALL: want = dsi_comm_verify_value((int)chunk, me * k + j); break;
        case DS_COMM_BROADCAST:
            if (me == 0)
                continue;
            want = dsi_comm_verify_value(0, i);
            break;
        case DS_COMM_SENDRECV:
            if (!op->batched && me == 0)
                continue;
            want = dsi_comm_verify_value(1 - me, i);
            break;
        case DS_COMM_PS_PUSH:
            if (me >= op->servers)
                continue;
            for (int r = 0; r < n; r++)
                want += dsi_comm_verify_value(r, me * k + i);
            break;
        case DS_COMM_PS_PULL: want = dsi_comm_verify_value((int)chunk, chunk * k + j); break;
        case DS_COMM_COUNT_: break;
        }
        if (element_get(c->recv, op->dtype, i) != want)
            errors++;
    }
    *errors_p = errors;
    return DS_OK;
}

/* ---- the executor's non-blocking calls ------------------------------------------------------- */

ds_status_t dsi_cpu_comm_start(void *impl, int role, int tag)
{
    ds_status_t status = DS_OK;
    cpu_comm_op_t *c = impl;
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
        DSI_MPI_TRY_GOTO(
            MPI_Ialltoall(c->send, count, c->type, c->recv, count, c->type, mc, &r[0]), status,
            out);
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

ds_status_t dsi_cpu_comm_test(void *impl, int *done_p)
{
    ds_status_t status = DS_OK;
    cpu_comm_op_t *c = impl;
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

ds_status_t dsi_cpu_comm_wait(void *impl)
{
    ds_status_t status = DS_OK;
    cpu_comm_op_t *c = impl;
    if (c->num_pending > 0) {
        DSI_MPI_TRY_GOTO(MPI_Waitall(c->num_pending, c->pending, MPI_STATUSES_IGNORE), status,
                         out);
        c->num_pending = 0;
    }
out:
    return status;
}
