/* Open MPI's fixed decision rules for collectives (tuned component, the
 * version SimGrid 3.31+ reproduces with --cfg=smpi/coll-selector:ompi).
 * Each primitive is a table of rows by communicator size; a row lists size
 * thresholds in bytes and the algorithm below each, then the algorithm for
 * larger messages. */
#include "dsi_ompi.h"

#include <dsmpi/events.h>

#include "dsi_core.h"

typedef struct cut {
    int64_t below; /* bytes */
    dsi_ompi_algo_t algo;
} cut_t;

#define MAX_CUTS 10

typedef struct row {
    int64_t ranks_below; /* the row applies to communicators smaller than this; 0 = any */
    int num_cuts;
    cut_t cuts[MAX_CUTS];
    dsi_ompi_algo_t otherwise;
} row_t;

#define RD DSI_OMPI_RECURSIVE_DOUBLING
#define RING DSI_OMPI_RING
#define SEG DSI_OMPI_SEGMENTED_RING
#define RAB DSI_OMPI_RABENSEIFNER
#define RB DSI_OMPI_REDUCE_BCAST
#define RH DSI_OMPI_RECURSIVE_HALVING
#define NONOV DSI_OMPI_NONOVERLAPPING
#define NEIGH DSI_OMPI_NEIGHBOR
#define BRUCK DSI_OMPI_BRUCK
#define LIN DSI_OMPI_LINEAR
#define PAIRW DSI_OMPI_PAIRWISE

/* All-reduce (commutative).  Open MPI's "nonoverlapping" and "basic linear"
 * are a reduce followed by a broadcast; its "ring" for the sizes where it
 * is chosen runs as the logical ring. */
static const row_t allreduce_rows[] = {
    {4, 6, {{8, RING}, {4096, RD}, {8192, RING}, {16384, RD}, {65536, RING}, {262144, SEG}}, RAB},
    {8, 2, {{16, RING}, {8192, RD}}, RAB},
    {16, 1, {{8192, RD}}, RAB},
    {32, 2, {{64, SEG}, {4096, RD}}, RAB},
    {64, 1, {{128, SEG}}, RAB},
    {128, 1, {{262144, RD}}, RAB},
    {256, 2, {{131072, RB}, {262144, RD}}, RAB},
    {512, 1, {{4096, RB}}, RAB},
    {2048, 2, {{2048, RB}, {16384, RD}}, RAB},
    {4096, 3, {{2048, RB}, {4096, SEG}, {16384, RD}}, RAB},
    {0, 3, {{2048, RB}, {16384, SEG}, {32768, RD}}, RAB},
};

/* Reduce-scatter (commutative; bytes = the whole input).  "Butterfly" runs
 * as the ring in SMPI's implementation of these rules. */
static const row_t reduce_scatter_rows[] = {
    {4, 0, {{0, RING}}, RING},
    {8, 2, {{8, NONOV}, {262144, RH}}, RING},
    {32, 1, {{262144, RH}}, RING},
    {64, 2, {{64, NONOV}, {2048, RH}}, RING},
    {128, 4, {{256, NONOV}, {512, RH}, {2048, RING}, {4096, RH}}, RING},
    {256, 2, {{256, NONOV}, {512, RH}}, RING},
    {512, 2, {{256, NONOV}, {1024, RH}}, RING},
    {1024, 4, {{512, NONOV}, {2048, RH}, {8192, RING}, {16384, RH}}, RING},
    {2048, 4, {{512, NONOV}, {4096, RH}, {16384, RING}, {32768, RH}}, RING},
    {4096, 2, {{512, NONOV}, {4096, RH}}, RING},
    {0, 2, {{1024, NONOV}, {8192, RH}}, RING},
};

/* All-gather (bytes = one rank's block); two ranks exchange once. */
static const row_t allgather_rows[] = {
    {32, 0, {{0, RD}}, RD},
    {64, 2, {{1024, RD}, {65536, NEIGH}}, RING},
    {128, 2, {{512, RD}, {65536, NEIGH}}, RING},
    {256, 4, {{512, RD}, {131072, NEIGH}, {524288, RING}, {1048576, NEIGH}}, RING},
    {512,
     6,
     {{32, RD}, {128, BRUCK}, {1024, RD}, {131072, NEIGH}, {524288, RING}, {1048576, NEIGH}},
     RING},
    {1024, 3, {{64, RD}, {256, BRUCK}, {2048, RD}}, NEIGH},
    {2048,
     7,
     {{4, RD}, {8, BRUCK}, {16, RD}, {32, BRUCK}, {256, RD}, {512, BRUCK}, {4096, RD}},
     NEIGH},
    {4096, 4, {{32, BRUCK}, {128, RD}, {512, BRUCK}, {4096, RD}}, NEIGH},
    {0, 5, {{2, RD}, {8, BRUCK}, {16, RD}, {512, BRUCK}, {4096, RD}}, NEIGH},
};

/* All-to-all (bytes = one rank's block to one peer); "linear sync" and
 * "two proc" post their messages as the linear algorithm does. */
static const row_t alltoall_rows[] = {
    {3,
     9,
     {{2, PAIRW},
      {4, LIN},
      {16, PAIRW},
      {64, LIN},
      {256, PAIRW},
      {4096, LIN},
      {32768, PAIRW},
      {262144, LIN},
      {1048576, LIN}},
     PAIRW},
    {8, 5, {{8192, LIN}, {16384, LIN}, {65536, LIN}, {524288, LIN}, {1048576, PAIRW}}, LIN},
    {16, 0, {{0, LIN}}, LIN},
    {32, 2, {{4, LIN}, {512, BRUCK}}, LIN},
    {64, 1, {{512, BRUCK}}, LIN},
    {128, 2, {{1024, BRUCK}, {262144, LIN}}, PAIRW},
    {256, 2, {{1024, BRUCK}, {262144, LIN}}, PAIRW},
    {512, 2, {{1024, BRUCK}, {32768, LIN}}, PAIRW},
    {1024, 4, {{512, BRUCK}, {16384, LIN}, {131072, LIN}, {262144, LIN}}, PAIRW},
    {0, 1, {{512, BRUCK}}, LIN},
};

static dsi_ompi_algo_t lookup(const row_t *rows, size_t count, int64_t ranks, int64_t bytes)
{
    for (size_t i = 0; i < count; i++) {
        const row_t *r = &rows[i];
        if (r->ranks_below != 0 && ranks >= r->ranks_below)
            continue;
        for (int c = 0; c < r->num_cuts; c++)
            if (bytes < r->cuts[c].below)
                return r->cuts[c].algo;
        return r->otherwise;
    }
    return rows[count - 1].otherwise;
}

dsi_ompi_algo_t dsi_ompi_choose(int op, int64_t ranks, int64_t bytes)
{
    switch ((ds_comm_op_t)op) {
    case DS_COMM_ALLREDUCE:
        return lookup(allreduce_rows, DSI_ARRAY_SIZE(allreduce_rows), ranks, bytes);
    case DS_COMM_REDUCE_SCATTER:
        return lookup(reduce_scatter_rows, DSI_ARRAY_SIZE(reduce_scatter_rows), ranks, bytes);
    case DS_COMM_ALLGATHER:
        if (ranks == 2)
            return DSI_OMPI_PAIR;
        return lookup(allgather_rows, DSI_ARRAY_SIZE(allgather_rows), ranks, bytes);
    case DS_COMM_ALLTOALL:
        return lookup(alltoall_rows, DSI_ARRAY_SIZE(alltoall_rows), ranks, bytes);
    case DS_COMM_BROADCAST:
        /* Simplified: trees for small messages, scatter + all-gather for large. */
        return bytes < 1048576 ? DSI_OMPI_BINOMIAL : DSI_OMPI_SCATTER_ALLGATHER;
    default: return DSI_OMPI_LINEAR;
    }
}

const char *dsi_ompi_algo_name(dsi_ompi_algo_t algo)
{
    static const char *const names[DSI_OMPI_ALGO_COUNT_] = {"reduce+bcast",
                                                            "recursive-doubling",
                                                            "ring",
                                                            "segmented-ring",
                                                            "rabenseifner",
                                                            "recursive-halving",
                                                            "nonoverlapping",
                                                            "pair",
                                                            "neighbor",
                                                            "bruck",
                                                            "linear",
                                                            "pairwise",
                                                            "binomial",
                                                            "pipeline",
                                                            "scatter-allgather"};
    return (unsigned)algo < DSI_OMPI_ALGO_COUNT_ ? names[algo] : "?";
}
