/* One communication operation sized for a group: shared by the backend
 * module and the CUDA module (C and C++, no MPI or CUDA types). */
#ifndef DSI_COMM_OP_H
#define DSI_COMM_OP_H

#include <dsmpi/events.h>

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* What each primitive moves (n members, chunk = count elements):
 *   allreduce, broadcast, send/recv  one chunk (broadcast from member 0)
 *   all-gather      a chunk in, n chunks out
 *   reduce-scatter  n chunks in, a chunk out
 *   all-to-all      n chunks in, n chunks out (chunk j to member j)
 *   ps push         `servers` chunks in; server s receives the sum of chunk s
 *   ps pull         server s sends its chunk s to every member
 * `bytes` is the nccl-tests size: the largest buffer of the operation. */
typedef struct dsi_comm_op {
    ds_comm_op_t op;
    ds_dtype_t dtype;
    int batched;       /* point-to-point: both directions at once */
    int servers;       /* parameter server: the first `servers` members serve */
    int64_t count;     /* elements of one chunk */
    int64_t bytes;     /* the nccl-tests size actually moved */
    size_t send_bytes; /* this member's send buffer */
    size_t recv_bytes; /* this member's receive buffer */
} dsi_comm_op_t;

/* The device queues of a backend whose work runs asynchronously (cuda): the
 * executor issues compute on one, blocking collectives and transfers on
 * another, and overlapped data-parallel buckets on a third, as Megatron-LM
 * runs them on streams of their own. */
typedef enum dsi_queue {
    DSI_QUEUE_COMPUTE = 0,
    DSI_QUEUE_COMM = 1, /* tensor-parallel collectives, point-to-point, the iteration end */
    DSI_QUEUE_DP = 2,   /* data-parallel buckets overlapped with the backward */
    DSI_QUEUE_COUNT_
} dsi_queue_t;

/* The value member `member` puts at element `index` of its send buffer when
 * verifying: a small integer, exact in every dtype and in sums of up to 64
 * members. */
static inline float dsi_comm_verify_value(int member, int64_t index)
{
    return (float)((member + index) % 4 + 1);
}

#ifdef __cplusplus
}
#endif

#endif /* DSI_COMM_OP_H */
