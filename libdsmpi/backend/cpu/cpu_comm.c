/*
 * Communication on the CPU backend: MPI on the group's communicator.
 *
 * 16-bit floats are reduced with user-defined MPI operations (MPI has no
 * bf16 or fp16 type), converting to fp32, adding and rounding, as a CPU
 * training run would.  The calls themselves are dsi_mpi_op.h's.
 */
#include "dsi_cpu_backend.h"

#include "dsi_mpi_op.h"

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

typedef dsi_mpi_op_t cpu_comm_op_t;

void dsi_cpu_comm_release(void *impl)
{
    cpu_comm_op_t *c = impl;
    if (c == NULL)
        return;
    dsi_mpi_op_drain(c); /* a call left running: complete it first */
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
    DSI_TRY_GOTO(dsi_mpi_op_alloc_requests(c), status, err_free);

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

ds_status_t dsi_cpu_comm_run_timed(void *impl, void *before, double *lead_s, double *seconds_p)
{
    double start = dsi_now_s();
    if (before != NULL)
        DSI_TRY(dsi_cpu_kernel_run_impl(before));
    double issued = dsi_now_s();
    DSI_TRY(dsi_mpi_op_run(impl));
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
    return dsi_mpi_op_start(impl, role, tag);
}

ds_status_t dsi_cpu_comm_test(void *impl, int *done_p)
{
    return dsi_mpi_op_test(impl, done_p);
}

ds_status_t dsi_cpu_comm_wait(void *impl)
{
    return dsi_mpi_op_wait(impl);
}
