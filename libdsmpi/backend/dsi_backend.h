/*
 * Private interface of the backend module: the device operations each
 * backend implements, and the objects behind the public handles.
 *
 * The measurement loop (measure.c) and the communication timing (comm.c) are
 * written once on top of these operations; cpu/ and the CUDA loader
 * (cuda_loader.c, which forwards to the module in cuda/) fill them.
 */
#ifndef DSI_BACKEND_H
#define DSI_BACKEND_H

#include <dsmpi/backend.h>

#include "dsi_comm_op.h"
#include "dsi_core.h"
#include "dsi_mpi.h"

typedef struct dsi_backend_ops {
    /* Device memory `key` needs. */
    ds_status_t (*kernel_estimate)(const ds_backend_t *backend, const ds_event_key_t *key,
                                   size_t *bytes_p);
    ds_status_t (*kernel_prepare)(ds_backend_t *backend, const ds_event_key_t *key, void **impl_p);
    ds_status_t (*kernel_run)(void *impl);
    size_t (*kernel_bytes)(const void *impl);
    /* Makes `consumer` read its main input from `producer`'s main output
     * when it fits; *chained_p says whether it did. */
    ds_status_t (*kernel_chain)(void *consumer, const void *producer, int *chained_p);
    void (*kernel_destroy)(void *impl);

    /* Timestamps on the device's queue: `reserve` makes slots 0..count-1
     * usable, `stamp` records slot i when the device reaches it,
     * `elapsed` reads the seconds between two recorded slots after a
     * synchronize. */
    ds_status_t (*stamps_reserve)(ds_backend_t *backend, size_t count);
    ds_status_t (*stamp)(ds_backend_t *backend, size_t slot);
    ds_status_t (*synchronize)(ds_backend_t *backend);
    ds_status_t (*elapsed)(ds_backend_t *backend, size_t from, size_t to, double *seconds_p);

    /* Communication: backend state of a group (NCCL communicator), buffers
     * of one operation, one blocking timed run returning the seconds from
     * issue to completion on this member. */
    ds_status_t (*comm_init)(ds_comm_t *comm);
    void (*comm_fini)(ds_comm_t *comm);
    ds_status_t (*comm_prepare)(ds_comm_t *comm, const dsi_comm_op_t *op, int verify,
                                void **impl_p);
    /* `before` (a kernel impl, or NULL) runs first, on the same queue:
     * *lead_s gets its time, *seconds_p the operation's. */
    ds_status_t (*comm_run_timed)(void *impl, void *before, double *lead_s, double *seconds_p);
    /* After one run of an operation prepared with verify = 1: wrong elements. */
    ds_status_t (*comm_check)(void *impl, int64_t *errors_p);
    void (*comm_release)(void *impl);
    /* The executor's calls (may be NULL: the backend cannot run the
     * executor).  `start` issues the operation without waiting (a
     * point-to-point operation only this member's side: `role` is one of
     * dsi_call_role_t, `tag` keeps directions apart); `test` progresses it
     * and says whether it completed; `wait` blocks until it has. */
    ds_status_t (*comm_start)(void *impl, int role, int tag);
    ds_status_t (*comm_test)(void *impl, int *done_p);
    ds_status_t (*comm_wait)(void *impl);
    /* The executor's device queues (dsi_queue_t), where the device runs
     * work after the call that issued it returns (cuda; NULL on cpu and
     * replay, whose calls return when the work is done): see queue.c. */
    ds_status_t (*queue_mark)(ds_backend_t *backend, int queue, size_t slot);
    ds_status_t (*marks_reserve)(ds_backend_t *backend, size_t count);
    ds_status_t (*queue_join)(ds_backend_t *backend, int from, int to);
    ds_status_t (*queue_wait_mark)(ds_backend_t *backend, int queue, size_t slot);
    ds_status_t (*mark_done)(ds_backend_t *backend, size_t slot, int *done_p);
    ds_status_t (*marks_read)(ds_backend_t *backend, size_t count, double *offsets_s);
    ds_status_t (*comm_issue)(void *impl, int queue, int role, int tag);
    ds_status_t (*group_start)(ds_backend_t *backend);
    ds_status_t (*group_end)(ds_backend_t *backend);

    void (*close)(ds_backend_t *backend);
} dsi_backend_ops_t;

struct ds_backend {
    ds_backend_kind_t kind;
    const dsi_backend_ops_t *ops;
    MPI_Comm comm; /* duplicate of the comm given to open */
    int rank, size;
    int local_rank, local_size;
    char device_name[128];
    char fingerprint[1024];
    char placement[128];
    void *impl; /* the backend's own state */
};

struct ds_kernel {
    ds_backend_t *backend;
    ds_event_key_t key;
    void *impl;
};

struct ds_comm {
    ds_backend_t *backend;
    MPI_Comm comm; /* duplicate of the group */
    int rank, size;
    int nodes, ranks_per_node;
    int *node_of;          /* node index (0..nodes-1) of each member */
    double clock_offset_s; /* add to this member's clock to get the aligned clock */
    double clock_error_s;
    void *impl; /* backend state (NCCL communicator) */
};

/* ---- shared helpers -------------------------------------------------------------------------- */

/* The measurement configuration is usable (DS_ERR_INVALID_ARG otherwise). */
ds_status_t dsi_measure_check_config(const ds_measure_config_t *config);
/* Whether warm-up goes on after `done` runs and `elapsed_s` seconds: at
 * least one run when any warm-up is asked for, then until both `warmup`
 * runs and `warmup_s` seconds are done, but never past a quarter of the
 * budget (a kernel that long is warm after one run). */
int dsi_warmup_more(const ds_measure_config_t *config, int done, double elapsed_s);

/* The loop's rule after `reps` timed repetitions (both loops, compute and
 * communication, and the estimate of what they will do follow it): below
 * min_reps the missing ones; then stop (0, the reason in *stop_p) once the
 * median's relative CI `rel_ci` is below the target, max_reps are done or
 * `spent_s` (since the warm-up began) reached the budget; else a quarter
 * more, no more than the budget has left at `per_rep_s` a repetition, and
 * at most `max_batch`. */
size_t dsi_measure_next_batch(const ds_measure_config_t *config, size_t reps, double rel_ci,
                              double spent_s, double per_rep_s, size_t max_batch,
                              ds_stop_reason_t *stop_p);

/* Repetitions a layer pass of `ops` operators runs per batch at most (its
 * timestamps fit in the stamp slots), and a communication measurement. */
size_t dsi_measure_max_batch(size_t ops);
#define DSI_COMM_MAX_BATCH 256

/* What one measurement will cost, for the estimate of a profiling run. */
typedef struct dsi_loop_model {
    double run_s;        /* the timed part of one repetition (what the loop measures) */
    double warmup_s;     /* wall time of one warm-up iteration */
    double rep_wall_s;   /* wall time of one timed repetition (run_s and what is around it) */
    double batch_wall_s; /* wall time added per batch (synchronisation, gathering the stamps) */
    double spread;       /* relative spread of the repetitions (standard deviation / median) */
    size_t max_batch;
    int rate_from_wall; /* the budget is shared out by wall time per repetition
                           (communication), not by the timed part (compute) */
} dsi_loop_model_t;

typedef struct dsi_loop_expectation {
    int warmup;  /* warm-up iterations */
    size_t reps; /* timed repetitions */
    size_t batches;
    double seconds; /* wall time, warm-up included */
    ds_stop_reason_t stop;
} dsi_loop_expectation_t;

/* The relative 95% CI of the median after `n` repetitions of relative
 * spread `spread`, for normally distributed times: 1.96 sqrt(pi / 2) spread
 * / sqrt(n) (the median's standard error is sqrt(pi / 2) sd / sqrt(n)). */
double dsi_measure_expected_ci(double spread, size_t n);

/* Runs the loop's rules (dsi_warmup_more, dsi_measure_next_batch) on the
 * model's times instead of the device's: what the loop will do. */
void dsi_measure_expect(const ds_measure_config_t *config, const dsi_loop_model_t *model,
                        dsi_loop_expectation_t *expectation_p);

/* Sizes the operation `key` describes for a group of `size` members, member
 * `rank`. */
ds_status_t dsi_comm_op_init(const ds_event_key_t *key, int size, int rank, dsi_comm_op_t *op);

/* ---- the two backends ------------------------------------------------------------------------ */

/* CPU: fills ops, device name, fingerprint and placement of an open backend
 * whose comm and ranks are set. */
ds_status_t dsi_cpu_open(ds_backend_t *backend);

/* Replay (replay.c): compute from `costs` (NULL: the DS_REPLAY_COSTS file),
 * estimates on device spec `device` (NULL: DS_REPLAY_DEVICE). */
ds_status_t dsi_replay_open(ds_backend_t *backend, const ds_cost_table_t *costs,
                            const char *device);

/* CUDA (cuda_loader.c): number of visible GPUs, 0 without the module or a
 * driver. */
int dsi_cuda_visible_devices(void);
ds_status_t dsi_cuda_open(ds_backend_t *backend);
/* For tests: copies `bytes` of buffer `index` of a cuda kernel to the host. */
ds_status_t dsi_cuda_kernel_read(const ds_kernel_t *kernel, int index, void *host, size_t bytes);

/* ---- what the executor needs beyond the public interface (exec module) ------------------------
 */

/* Makes `consumer` read its main input from `producer`'s main output when it
 * fits (as a layer pass runs); *chained_p says whether it did. */
ds_status_t dsi_kernel_chain(ds_kernel_t *consumer, const ds_kernel_t *producer, int *chained_p);

/* Which side of a point-to-point operation a call runs. */
typedef enum dsi_call_role {
    DSI_CALL_ALL = 0,  /* collectives: every member; point-to-point: both directions at once */
    DSI_CALL_SEND = 1, /* point-to-point: send to the other member */
    DSI_CALL_RECV = 2, /* point-to-point: receive from the other member */
} dsi_call_role_t;

/* One communication operation of `key` on `comm` with buffers of its own,
 * prepared once and run many times: blocking (run) or started and then
 * tested or waited for.  Point-to-point calls need a group of 2 and run
 * the side `role` says, on message tag `tag`.  Preparing is local (not
 * collective); running is collective over the group as the operation is. */
typedef struct dsi_comm_call dsi_comm_call_t;

ds_status_t dsi_comm_call_prepare(ds_comm_t *comm, const ds_event_key_t *key, dsi_call_role_t role,
                                  int tag, dsi_comm_call_t **call_p);
void dsi_comm_call_release(dsi_comm_call_t *call);
ds_status_t dsi_comm_call_run(dsi_comm_call_t *call);
ds_status_t dsi_comm_call_start(dsi_comm_call_t *call);
ds_status_t dsi_comm_call_test(dsi_comm_call_t *call, int *done_p);
ds_status_t dsi_comm_call_wait(dsi_comm_call_t *call);
/* ---- device queues (queue.c): the executor on a backend whose work runs asynchronously ----------
 * Work is issued on queues (dsi_queue_t) and returns at once; queues wait
 * for each other on the device; marks record when a queue reaches them and
 * are read back as offsets from mark 0 after the queues have drained.  On
 * backends without queues (cpu, replay) every function but
 * dsi_backend_queued fails with DS_ERR_UNSUPPORTED. */

/* Non-zero when `backend` runs work on device queues (cuda). */
int dsi_backend_queued(const ds_backend_t *backend);
/* Records mark `slot` on `queue` (marks are made on demand). */
ds_status_t dsi_queue_mark(ds_backend_t *backend, dsi_queue_t queue, size_t slot);
/* Makes marks 0 .. count-1 now, so that recording them later costs no allocation. */
ds_status_t dsi_queue_reserve_marks(ds_backend_t *backend, size_t count);
/* `to` waits on the device for the work issued on `from` so far. */
ds_status_t dsi_queue_join(ds_backend_t *backend, dsi_queue_t from, dsi_queue_t to);
/* `queue` waits on the device until mark `slot` is reached. */
ds_status_t dsi_queue_wait_mark(ds_backend_t *backend, dsi_queue_t queue, size_t slot);
/* Whether mark `slot` has been reached, without blocking. */
ds_status_t dsi_queue_mark_done(ds_backend_t *backend, size_t slot, int *done_p);
/* Waits for every queue; offsets_s[i] = seconds from mark 0 to mark i. */
ds_status_t dsi_queue_read_marks(ds_backend_t *backend, size_t count, double *offsets_s);
/* Issues `call` on `queue` without waiting (its role as prepared). */
ds_status_t dsi_comm_call_issue(dsi_comm_call_t *call, dsi_queue_t queue);
/* Calls issued between these go to the communication library as one group
 * (as Megatron-LM batches its point-to-point transfers). */
ds_status_t dsi_comm_group_start(ds_backend_t *backend);
ds_status_t dsi_comm_group_end(ds_backend_t *backend);

/* Estimates the clock offsets of the group's nodes again (collective). */
ds_status_t dsi_comm_align_clocks(ds_comm_t *comm);
/* The clock offset of this member (add it to dsi_now_s() for the clock
 * aligned across the group) and the bound on its error. */
double dsi_comm_clock_offset(const ds_comm_t *comm, double *error_p);

/* Leaves out the runs of copies whose median exceeds 1.5x the fastest
 * copy's (run r ran copy r mod copies): total[] and each of the n per-operator
 * columns each[i][] are compacted alike.  Returns the runs kept. */
size_t dsi_measure_drop_slow_copies(double *total, size_t count, double *const *each, size_t n,
                                    size_t copies);

#endif /* DSI_BACKEND_H */
