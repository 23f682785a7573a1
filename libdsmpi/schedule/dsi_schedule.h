/*
 * Pipeline schedules shared by the simulator and the executor: the program
 * of one pipeline rank (Megatron-Core's order of forward/backward passes and
 * send/receive calls) and the pipeline ranks next to a stage.
 */
#ifndef DSI_SCHEDULE_H
#define DSI_SCHEDULE_H

#include <dsmpi/strategy.h>

#include "dsi_core.h"

typedef enum dsi_action_type {
    DSI_ACT_FWD = 0,
    DSI_ACT_BWD = 1,
    DSI_ACT_COMM = 2
} dsi_action_type_t;

/* Directions of a transfer seen from the lane that posts it. */
typedef enum dsi_dir {
    DSI_SEND_NEXT = 0, /* activation to the next virtual stage */
    DSI_RECV_PREV = 1, /* activation from the previous one */
    DSI_SEND_PREV = 2, /* gradient to the previous virtual stage */
    DSI_RECV_NEXT = 3, /* gradient from the next one */
} dsi_dir_t;

typedef struct dsi_action {
    uint8_t type;    /* dsi_action_type_t */
    uint8_t batched; /* COMM: Megatron's batched steady-state call */
    uint8_t nx;      /* COMM: transfers */
    uint8_t sync;    /* BWD: gradient buckets become ready inside (set by the user) */
    int16_t chunk;
    int32_t mb;
    uint8_t x[4]; /* dsi_dir_t */
} dsi_action_t;

typedef struct dsi_program {
    dsi_action_t *actions;
    int32_t count, cap;
    int32_t forwards, backwards;
    int32_t peak_inflight; /* most forwards whose backward has not run */
} dsi_program_t;

/* Builds the program of pipeline rank `stage`: Megatron-Core's order of
 * forward/backward passes and send/receive calls.  `unbatched` splits every
 * batched call into blocking single calls, sends first (the schedule
 * Megatron avoids: it deadlocks in steady state).  `program` keeps its
 * memory across calls; free it with dsi_program_free. */
ds_status_t dsi_schedule_build(const ds_strategy_t *s, int64_t microbatches, int stage,
                               int unbatched, dsi_program_t *program);
void dsi_program_free(dsi_program_t *program);

/* The pipeline rank after / before `p` (interleaved: the last wraps to the
 * first), -1 when none. */
int dsi_schedule_next_stage(const ds_strategy_t *s, int p);
int dsi_schedule_prev_stage(const ds_strategy_t *s, int p);

#endif /* DSI_SCHEDULE_H */
