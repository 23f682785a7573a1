/*
 * Open MPI's decision logic for collectives: which algorithm the tuned
 * component runs for a primitive, a communicator size and a message size
 * (its fixed decision rules, measured by the Open MPI developers and
 * reproduced by SimGrid's SMPI with --cfg=smpi/coll-selector:ompi).  Used
 * by the communication model (the "ompi" library) and by the replay
 * backend's non-blocking all-reduce, so both run what the blocking call
 * would.  Commutative reductions only (the only kind dsmpi issues).
 *
 * Sizes are the collective's total bytes as Open MPI's rules read them:
 * all-reduce and broadcast the buffer; reduce-scatter the sum of the
 * receive counts (the full input); all-gather and all-to-all one rank's
 * block.
 */
#ifndef DSI_OMPI_H
#define DSI_OMPI_H

#include <stdint.h>

typedef enum dsi_ompi_algo {
    DSI_OMPI_REDUCE_BCAST = 0,   /* all-reduce: binomial reduce to rank 0, then broadcast */
    DSI_OMPI_RECURSIVE_DOUBLING, /* all-reduce, all-gather: log2 n exchanges (doubling) */
    DSI_OMPI_RING,               /* ring: 2(n-1) steps (all-reduce) or n-1 of S/n */
    DSI_OMPI_SEGMENTED_RING,     /* the ring in pipelined segments */
    DSI_OMPI_RABENSEIFNER,       /* reduce-scatter by recursive halving, all-gather by doubling */
    DSI_OMPI_RECURSIVE_HALVING,  /* reduce-scatter */
    DSI_OMPI_NONOVERLAPPING,     /* reduce-scatter: reduce to rank 0, then scatter */
    DSI_OMPI_PAIR,               /* all-gather of two ranks: one exchange */
    DSI_OMPI_NEIGHBOR,           /* all-gather: neighbour exchange, n/2 steps */
    DSI_OMPI_BRUCK,              /* all-gather, all-to-all: ceil(log2 n) steps */
    DSI_OMPI_LINEAR,             /* all-to-all: every message posted at once */
    DSI_OMPI_PAIRWISE,           /* all-to-all: n-1 exchanges */
    DSI_OMPI_BINOMIAL,           /* broadcast: binomial tree */
    DSI_OMPI_PIPELINE,           /* broadcast: chain of segments */
    DSI_OMPI_SCATTER_ALLGATHER,  /* broadcast: scatter, then all-gather */
    DSI_OMPI_ALGO_COUNT_
} dsi_ompi_algo_t;

const char *dsi_ompi_algo_name(dsi_ompi_algo_t algo);

/* The algorithm Open MPI's tuned rules pick; `op` is a ds_comm_op_t
 * (all-reduce, all-gather, reduce-scatter, all-to-all, broadcast). */
dsi_ompi_algo_t dsi_ompi_choose(int op, int64_t ranks, int64_t bytes);

#endif /* DSI_OMPI_H */
