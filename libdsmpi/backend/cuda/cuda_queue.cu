// The executor's device queues on the CUDA backend: one stream for compute
// (the context's own), one for blocking collectives and transfers, one for
// the data-parallel buckets that overlap the backward, as Megatron-LM keeps
// its gradient reduction off the compute stream.  Queues wait for each other
// on the device (events), never on the host; marks are timing events the
// executor records on a queue and reads back, after the run, as offsets from
// mark 0 (exec/marks.c maps them to the aligned host clock).
#include "dsi_cuda_impl.h"

#include <stdlib.h>

int dsc_queues_open(dsc_ctx *ctx)
{
    ctx->queues[DSI_QUEUE_COMPUTE] = ctx->stream;
    for (int q = DSI_QUEUE_COMPUTE + 1; q < DSI_QUEUE_COUNT_; q++)
        DSC_CUDA_TRY(cudaStreamCreateWithFlags(&ctx->queues[q], cudaStreamNonBlocking));
    for (int q = 0; q < DSI_QUEUE_COUNT_; q++)
        DSC_CUDA_TRY(cudaEventCreateWithFlags(&ctx->joins[q], cudaEventDisableTiming));
    return DS_OK;
}

void dsc_queues_close(dsc_ctx *ctx)
{
    for (size_t i = 0; i < ctx->num_marks; i++)
        cudaEventDestroy(ctx->marks[i]);
    free(ctx->marks);
    ctx->marks = nullptr;
    ctx->num_marks = 0;
    for (int q = 0; q < DSI_QUEUE_COUNT_; q++) {
        if (ctx->joins[q] != nullptr)
            cudaEventDestroy(ctx->joins[q]);
        ctx->joins[q] = nullptr;
        if (q != DSI_QUEUE_COMPUTE && ctx->queues[q] != nullptr)
            cudaStreamDestroy(ctx->queues[q]);
        ctx->queues[q] = nullptr;
    }
}

static int check_queue(int queue)
{
    if (queue < 0 || queue >= DSI_QUEUE_COUNT_)
        return dsc_fail(DS_ERR_INVALID_ARG, "device queue %d (accepted: 0 to %d)", queue,
                        DSI_QUEUE_COUNT_ - 1);
    return DS_OK;
}

// Marks are made on demand, doubling, so that a run's first iteration sizes
// them and the timed ones create none.
static int marks_reserve(dsc_ctx *ctx, size_t count)
{
    if (count <= ctx->num_marks)
        return DS_OK;
    size_t want = ctx->num_marks > 0 ? ctx->num_marks : 1024;
    while (want < count)
        want *= 2;
    cudaEvent_t *grown =
        static_cast<cudaEvent_t *>(realloc(ctx->marks, want * sizeof(cudaEvent_t)));
    if (grown == nullptr)
        return dsc_fail(DS_ERR_NO_MEMORY, "out of memory for %zu CUDA events", want);
    ctx->marks = grown;
    while (ctx->num_marks < want) {
        DSC_CUDA_TRY(cudaEventCreate(&ctx->marks[ctx->num_marks]));
        ctx->num_marks++;
    }
    return DS_OK;
}

int dsc_marks_reserve(void *handle, size_t count)
{
    return marks_reserve(static_cast<dsc_ctx *>(handle), count);
}

int dsc_queue_mark(void *handle, int queue, size_t slot)
{
    dsc_ctx *ctx = static_cast<dsc_ctx *>(handle);
    DSC_TRY(check_queue(queue));
    DSC_TRY(marks_reserve(ctx, slot + 1));
    DSC_CUDA_TRY(cudaEventRecord(ctx->marks[slot], ctx->queues[queue]));
    return DS_OK;
}

int dsc_queue_join(void *handle, int from, int to)
{
    dsc_ctx *ctx = static_cast<dsc_ctx *>(handle);
    DSC_TRY(check_queue(from));
    DSC_TRY(check_queue(to));
    if (from == to)
        return DS_OK;
    // The wait takes the event's state now: reusing it for the next join is safe.
    DSC_CUDA_TRY(cudaEventRecord(ctx->joins[from], ctx->queues[from]));
    DSC_CUDA_TRY(cudaStreamWaitEvent(ctx->queues[to], ctx->joins[from], 0));
    return DS_OK;
}

int dsc_queue_wait_mark(void *handle, int queue, size_t slot)
{
    dsc_ctx *ctx = static_cast<dsc_ctx *>(handle);
    DSC_TRY(check_queue(queue));
    if (slot >= ctx->num_marks)
        return dsc_fail(DS_ERR_INVALID_ARG, "mark %zu was never recorded", slot);
    DSC_CUDA_TRY(cudaStreamWaitEvent(ctx->queues[queue], ctx->marks[slot], 0));
    return DS_OK;
}

int dsc_mark_done(void *handle, size_t slot, int *done_p)
{
    dsc_ctx *ctx = static_cast<dsc_ctx *>(handle);
    if (slot >= ctx->num_marks)
        return dsc_fail(DS_ERR_INVALID_ARG, "mark %zu was never recorded", slot);
    cudaError_t e = cudaEventQuery(ctx->marks[slot]);
    if (e == cudaErrorNotReady) {
        *done_p = 0;
        return DS_OK;
    }
    DSC_CUDA_TRY(e);
    *done_p = 1;
    return DS_OK;
}

int dsc_marks_read(void *handle, size_t count, double *offsets_s)
{
    dsc_ctx *ctx = static_cast<dsc_ctx *>(handle);
    if (count > ctx->num_marks)
        return dsc_fail(DS_ERR_INVALID_ARG, "%zu marks asked for, %zu made", count, ctx->num_marks);
    for (int q = 0; q < DSI_QUEUE_COUNT_; q++)
        DSC_CUDA_TRY(cudaStreamSynchronize(ctx->queues[q]));
    for (size_t i = 0; i < count; i++) {
        float ms = 0.0f;
        DSC_CUDA_TRY(cudaEventElapsedTime(&ms, ctx->marks[0], ctx->marks[i]));
        offsets_s[i] = 1e-3 * (double)ms;
    }
    return DS_OK;
}
