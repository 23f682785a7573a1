// Communication on the CUDA backend: NCCL on the device's stream, timed
// with CUDA events around the operation (comm.c turns this into entry and
// exit on the aligned host clock).  The parameter server is one reduce per
// server (push) and one broadcast per server (pull), grouped.
#include "dsi_cuda_impl.h"

#include <nccl.h>

#include <stdlib.h>
#include <string.h>

#define DSC_NCCL_TRY(call)                                                                         \
    do {                                                                                           \
        ncclResult_t dsc_n_ = (call);                                                              \
        if (dsc_n_ != ncclSuccess)                                                                 \
            return dsc_fail(DS_ERR_NCCL, "%s failed: %s (%s:%d)", #call,                           \
                            ncclGetErrorString(dsc_n_), __FILE__, __LINE__);                       \
    } while (0)

int dsc_nccl_unique_id(unsigned char id[DSI_NCCL_ID_BYTES])
{
    ncclUniqueId unique;
    static_assert(sizeof(unique) <= DSI_NCCL_ID_BYTES, "NCCL id larger than expected");
    DSC_NCCL_TRY(ncclGetUniqueId(&unique));
    memcpy(id, &unique, sizeof(unique));
    return DS_OK;
}

int dsc_nccl_comm_create(void *handle, int size, int rank,
                         const unsigned char id[DSI_NCCL_ID_BYTES], void **nccl_p)
{
    dsc_ctx *ctx = static_cast<dsc_ctx *>(handle);
    ncclUniqueId unique;
    memcpy(&unique, id, sizeof(unique));
    ncclComm_t comm = nullptr;
    DSC_CUDA_TRY(cudaSetDevice(ctx->device));
    DSC_NCCL_TRY(ncclCommInitRank(&comm, size, unique, rank));
    *nccl_p = comm;
    return DS_OK;
}

void dsc_nccl_comm_destroy(void *nccl)
{
    if (nccl != nullptr)
        ncclCommDestroy(static_cast<ncclComm_t>(nccl));
}

struct dsc_comm_op {
    dsc_ctx *ctx;
    ncclComm_t comm;
    int size, rank;
    dsi_comm_op_t op;
    ncclDataType_t type;
    size_t element;
    void *send, *recv;
    cudaEvent_t start, issued, stop;
};

void dsc_comm_release(void *handle)
{
    dsc_comm_op *c = static_cast<dsc_comm_op *>(handle);
    if (c == nullptr)
        return;
    cudaSetDevice(c->ctx->device);
    cudaStreamSynchronize(c->ctx->stream);
    if (c->send != nullptr)
        cudaFree(c->send);
    if (c->recv != nullptr)
        cudaFree(c->recv);
    if (c->start != nullptr)
        cudaEventDestroy(c->start);
    if (c->issued != nullptr)
        cudaEventDestroy(c->issued);
    if (c->stop != nullptr)
        cudaEventDestroy(c->stop);
    free(c);
}

static int is_reduction(ds_comm_op_t op)
{
    return op == DS_COMM_ALLREDUCE || op == DS_COMM_REDUCE_SCATTER || op == DS_COMM_PS_PUSH;
}

static int prepare(dsc_comm_op *c, int verify)
{
    const dsi_comm_op_t *op = &c->op;
    cudaStream_t s = c->ctx->stream;
    DSC_CUDA_TRY(cudaSetDevice(c->ctx->device));
    DSC_CUDA_TRY(cudaEventCreate(&c->start));
    DSC_CUDA_TRY(cudaEventCreate(&c->issued));
    DSC_CUDA_TRY(cudaEventCreate(&c->stop));
    DSC_CUDA_TRY(cudaMalloc(&c->send, op->send_bytes > 0 ? op->send_bytes : 1));
    DSC_CUDA_TRY(cudaMalloc(&c->recv, op->recv_bytes > 0 ? op->recv_bytes : 1));
    DSC_CUDA_TRY(cudaMemsetAsync(c->recv, 0, op->recv_bytes > 0 ? op->recv_bytes : 1, s));
    int64_t sends = (int64_t)(op->send_bytes / c->element);
    int64_t recvs = (int64_t)(op->recv_bytes / c->element);
    if (op->dtype == DS_DTYPE_FP8) {
        DSC_CUDA_TRY(cudaMemsetAsync(c->send, 0x3c, op->send_bytes, s)); // bytes move as they are
    } else {
        dsc_type t = dsc_type_of(op->dtype);
        if (verify)
            DSC_TRY(dsc_fill_verify(s, c->send, t, sends, c->rank, 0));
        else
            DSC_TRY(dsc_fill(s, c->send, DSI_ELEM_STORED, t, sends, DSI_FILL_NORMAL, 1.0f, 0,
                             (uint64_t)c->rank + 1));
        if (!verify)
            DSC_TRY(
                dsc_fill(s, c->recv, DSI_ELEM_STORED, t, recvs, DSI_FILL_NORMAL, 1.0f, 0, 0x5eed));
    }
    if (op->op == DS_COMM_PS_PULL && c->rank < op->servers) { // a server holds its shard
        size_t offset = (size_t)(c->rank * op->count) * c->element;
        DSC_CUDA_TRY(cudaMemcpyAsync(static_cast<char *>(c->recv) + offset,
                                     static_cast<char *>(c->send) + offset,
                                     (size_t)op->count * c->element, cudaMemcpyDeviceToDevice, s));
    }
    DSC_CUDA_TRY(cudaStreamSynchronize(s));
    return DS_OK;
}

int dsc_comm_prepare(void *ctx, void *nccl, int size, int rank, const dsi_comm_op_t *op, int verify,
                     void **op_p)
{
    if (op->dtype == DS_DTYPE_FP8 && is_reduction(op->op))
        return dsc_fail(DS_ERR_UNSUPPORTED, "the cuda backend does not reduce fp8 values yet");
    dsc_comm_op *c = static_cast<dsc_comm_op *>(calloc(1, sizeof(dsc_comm_op)));
    if (c == nullptr)
        return dsc_fail(DS_ERR_NO_MEMORY, "out of memory for a communication operation");
    c->ctx = static_cast<dsc_ctx *>(ctx);
    c->comm = static_cast<ncclComm_t>(nccl);
    c->size = size;
    c->rank = rank;
    c->op = *op;
    c->element = op->dtype == DS_DTYPE_FP32 ? 4 : op->dtype == DS_DTYPE_FP8 ? 1 : 2;
    c->type = op->dtype == DS_DTYPE_BF16   ? ncclBfloat16
              : op->dtype == DS_DTYPE_FP16 ? ncclFloat16
              : op->dtype == DS_DTYPE_FP8  ? ncclUint8
                                           : ncclFloat32;
    int status = prepare(c, verify);
    if (status != DS_OK) {
        dsc_comm_release(c);
        return status;
    }
    *op_p = c;
    return DS_OK;
}

// Roles as dsi_call_role_t (backend/dsi_backend.h).
enum { ROLE_ALL = 0, ROLE_SEND = 1, ROLE_RECV = 2 };

static int issue(dsc_comm_op *c, cudaStream_t s, int role)
{
    const dsi_comm_op_t *op = &c->op;
    ncclComm_t comm = c->comm;
    size_t count = (size_t)op->count;
    char *send = static_cast<char *>(c->send), *recv = static_cast<char *>(c->recv);
    size_t chunk = count * c->element;
    switch (op->op) {
    case DS_COMM_ALLREDUCE:
        DSC_NCCL_TRY(ncclAllReduce(send, recv, count, c->type, ncclSum, comm, s));
        break;
    case DS_COMM_ALLGATHER: DSC_NCCL_TRY(ncclAllGather(send, recv, count, c->type, comm, s)); break;
    case DS_COMM_REDUCE_SCATTER:
        DSC_NCCL_TRY(ncclReduceScatter(send, recv, count, c->type, ncclSum, comm, s));
        break;
    case DS_COMM_ALLTOALL:
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0)
        DSC_NCCL_TRY(ncclAlltoAll(send, recv, count, c->type, comm, s));
#else
        DSC_NCCL_TRY(ncclGroupStart());
        for (int p = 0; p < c->size; p++) {
            DSC_NCCL_TRY(ncclSend(send + p * chunk, count, c->type, p, comm, s));
            DSC_NCCL_TRY(ncclRecv(recv + p * chunk, count, c->type, p, comm, s));
        }
        DSC_NCCL_TRY(ncclGroupEnd());
#endif
        break;
    case DS_COMM_BROADCAST: {
        void *buffer = c->rank == 0 ? send : recv; // in place on the root
        DSC_NCCL_TRY(ncclBroadcast(buffer, buffer, count, c->type, 0, comm, s));
        break;
    }
    case DS_COMM_SENDRECV: {
        int peer = 1 - c->rank;
        if (role == ROLE_SEND) { // the executor's side of a transfer
            DSC_NCCL_TRY(ncclSend(send, count, c->type, peer, comm, s));
        } else if (role == ROLE_RECV) {
            DSC_NCCL_TRY(ncclRecv(recv, count, c->type, peer, comm, s));
        } else if (op->batched) {
            DSC_NCCL_TRY(ncclGroupStart());
            DSC_NCCL_TRY(ncclSend(send, count, c->type, peer, comm, s));
            DSC_NCCL_TRY(ncclRecv(recv, count, c->type, peer, comm, s));
            DSC_NCCL_TRY(ncclGroupEnd());
        } else if (c->rank == 0) {
            DSC_NCCL_TRY(ncclSend(send, count, c->type, peer, comm, s));
        } else {
            DSC_NCCL_TRY(ncclRecv(recv, count, c->type, peer, comm, s));
        }
        break;
    }
    case DS_COMM_PS_PUSH:
        DSC_NCCL_TRY(ncclGroupStart());
        for (int server = 0; server < op->servers; server++)
            DSC_NCCL_TRY(ncclReduce(send + server * chunk,
                                    c->rank == server ? recv : send + server * chunk, count,
                                    c->type, ncclSum, server, comm, s));
        DSC_NCCL_TRY(ncclGroupEnd());
        break;
    case DS_COMM_PS_PULL:
        DSC_NCCL_TRY(ncclGroupStart());
        for (int server = 0; server < op->servers; server++)
            DSC_NCCL_TRY(ncclBroadcast(recv + server * chunk, recv + server * chunk, count, c->type,
                                       server, comm, s));
        DSC_NCCL_TRY(ncclGroupEnd());
        break;
    case DS_COMM_COUNT_: return dsc_fail(DS_ERR_INTERNAL, "communication operator %d", (int)op->op);
    }
    (void)chunk;
    return DS_OK;
}

// The producer kernel (if any) and the operation go on one stream back to
// back, as training issues them; the event between them is the arrival.
int dsc_comm_run_timed(void *handle, void *before, double *lead_s, double *seconds_p)
{
    dsc_comm_op *c = static_cast<dsc_comm_op *>(handle);
    cudaStream_t s = c->ctx->stream;
    DSC_CUDA_TRY(cudaEventRecord(c->start, s));
    if (before != nullptr)
        DSC_TRY(dsc_kernel_run(before));
    DSC_CUDA_TRY(cudaEventRecord(c->issued, s));
    DSC_TRY(issue(c, s, ROLE_ALL));
    DSC_CUDA_TRY(cudaEventRecord(c->stop, s));
    DSC_CUDA_TRY(cudaEventSynchronize(c->stop));
    float lead = 0.0f, ms = 0.0f;
    DSC_CUDA_TRY(cudaEventElapsedTime(&lead, c->start, c->issued));
    DSC_CUDA_TRY(cudaEventElapsedTime(&ms, c->issued, c->stop));
    *lead_s = 1e-3 * (double)lead;
    *seconds_p = 1e-3 * (double)ms;
    return DS_OK;
}

int dsc_comm_issue(void *handle, int queue, int role)
{
    dsc_comm_op *c = static_cast<dsc_comm_op *>(handle);
    if (queue < 0 || queue >= DSI_QUEUE_COUNT_)
        return dsc_fail(DS_ERR_INVALID_ARG, "device queue %d (accepted: 0 to %d)", queue,
                        DSI_QUEUE_COUNT_ - 1);
    if (role != ROLE_ALL && c->op.op != DS_COMM_SENDRECV)
        return dsc_fail(DS_ERR_INVALID_ARG, "a collective issued with a point-to-point role");
    return issue(c, c->ctx->queues[queue], role);
}

int dsc_group_start(void)
{
    DSC_NCCL_TRY(ncclGroupStart());
    return DS_OK;
}

int dsc_group_end(void)
{
    DSC_NCCL_TRY(ncclGroupEnd());
    return DS_OK;
}

static float verify_value(int member, int64_t index)
{
    return dsi_comm_verify_value(member, index);
}

int dsc_comm_check(void *handle, int64_t *errors_p)
{
    dsc_comm_op *c = static_cast<dsc_comm_op *>(handle);
    const dsi_comm_op_t *op = &c->op;
    size_t bytes = op->recv_bytes;
    void *host = malloc(bytes > 0 ? bytes : 1);
    if (host == nullptr)
        return dsc_fail(DS_ERR_NO_MEMORY, "out of memory checking a communication result");
    cudaError_t e = cudaMemcpy(host, c->recv, bytes, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) {
        free(host);
        return dsc_fail(DS_ERR_CUDA, "reading a communication result: %s", cudaGetErrorString(e));
    }
    int n = c->size, me = c->rank;
    int64_t k = op->count, errors = 0;
    dsc_type t = dsc_type_of(op->dtype);
    for (int64_t i = 0; i < (int64_t)(bytes / c->element); i++) {
        float want = 0.0f;
        int64_t chunk = i / k, j = i % k;
        switch (op->op) {
        case DS_COMM_ALLREDUCE:
            for (int r = 0; r < n; r++)
                want += verify_value(r, i);
            break;
        case DS_COMM_ALLGATHER: want = verify_value((int)chunk, j); break;
        case DS_COMM_REDUCE_SCATTER:
            for (int r = 0; r < n; r++)
                want += verify_value(r, me * k + i);
            break;
        case DS_COMM_ALLTOALL: want = verify_value((int)chunk, me * k + j); break;
        case DS_COMM_BROADCAST:
            if (me == 0)
                continue;
            want = verify_value(0, i);
            break;
        case DS_COMM_SENDRECV:
            if (!op->batched && me == 0)
                continue;
            want = verify_value(1 - me, i);
            break;
        case DS_COMM_PS_PUSH:
            if (me >= op->servers)
                continue;
            for (int r = 0; r < n; r++)
                want += verify_value(r, me * k + i);
            break;
        case DS_COMM_PS_PULL: want = verify_value((int)chunk, chunk * k + j); break;
        case DS_COMM_COUNT_: break;
        }
        float got = op->dtype == DS_DTYPE_FP8 ? want : dsc_to_float(host, t, i);
        if (got != want)
            errors++;
    }
    free(host);
    *errors_p = errors;
    return DS_OK;
}
