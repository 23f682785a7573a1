/*
 * Private parts of the executor: the process groups of a strategy (shared
 * with the cost measurement), the prepared parts of a rank's stage, the
 * records of a run and the metrics computed from them.
 */
#ifndef DSI_EXEC_H
#define DSI_EXEC_H

#include <dsmpi/exec.h>

#include "backend/dsi_backend.h"
#include "dsi_core.h"
#include "dsi_mpi.h"
#include "events/dsi_events.h"
#include "model/dsi_model.h"
#include "schedule/dsi_schedule.h"

/* ---- process groups ------------------------------------------------------------------------ */

/* The groups this rank is in under a strategy: backend communicators (NULL
 * where the group has one member or the rank is not in one).  Pair
 * boundaries: boundary b carries activations from pipeline rank b to
 * next(b) (the sender is member 0) and gradients back.  Context
 * parallelism folded into data parallelism (dsi_strategy_fold_cp): dp is
 * the dp x cp gradient group, cp the ranks of one sequence (member c holds
 * its chunks c and 2 cp - 1 - c); ep and edp the expert-parallel and
 * expert-data-parallel groups of the events' numbering (layout.c). */
typedef struct dsi_groups {
    ds_comm_t *world; /* every rank: barriers and the aligned clock */
    ds_comm_t *tp, *dp, *mp, *emb;
    ds_comm_t *cp, *ep, *edp;
    ds_comm_t *pair_next; /* boundary stage -> next(stage), this rank member 0 */
    ds_comm_t *pair_prev; /* boundary prev(stage) -> stage, this rank member 1 */
    int next, prev;       /* pipeline ranks, -1 when none */
} dsi_groups_t;

/* Creates the groups of `s` (resolved for the backend's ranks, cp not
 * folded).  Collective over the backend's ranks. */
ds_status_t dsi_groups_create(ds_backend_t *backend, const ds_model_t *model,
                              const ds_strategy_t *s, dsi_groups_t *groups);
/* Collective; frees what dsi_groups_create made. */
void dsi_groups_destroy(dsi_groups_t *groups);

/* ---- what a rank runs ---------------------------------------------------------------------- */

typedef struct dsi_xop {
    ds_event_key_t key;
    ds_kernel_t *kernel;   /* compute */
    dsi_comm_call_t *call; /* tensor-parallel collective (shared by equal keys) */
    int64_t grad_params;   /* gradients complete after this operator */
    int source;            /* its index in dsi_model_layer_ops' list (records name it) */
} dsi_xop_t;

typedef struct dsi_xpart {
    int layer;         /* layer index or DSI_PART_* */
    int64_t params;    /* this rank's parameters of the part (the head's tied copy included) */
    int64_t rev;       /* where the part starts in reverse parameter order of the stage */
    dsi_xop_t *ops[2]; /* [0] forward, [1] backward (recompute first) */
    int num_ops[2];
} dsi_xpart_t;

typedef struct dsi_xchunk {
    dsi_xpart_t *parts;
    int num_parts;
} dsi_xchunk_t;

/* Kinds of recorded events. */
typedef enum dsi_xkind {
    DSI_XK_COMPUTE = 0, /* a compute operator of a pass */
    DSI_XK_TP = 1,      /* a tensor-parallel collective of a pass */
    DSI_XK_P2P = 2,     /* one point-to-point call (its transfers in xid) */
    DSI_XK_DP_START = 3,
    DSI_XK_DP_TEST = 4,
    DSI_XK_DP_WAIT = 5, /* completing a bucket (or running it, blocking) */
    DSI_XK_SP = 6,      /* sequence-parallel norm gradients over TP */
    DSI_XK_EMB = 7,     /* tied embedding gradients, first and last stage */
    DSI_XK_MP = 8,      /* overflow check, gradient norm */
    DSI_XK_OPT = 9,
    /* A bucket's all-reduce on the data-parallel queue of a queued backend,
     * overlapped with the backward: traced, not counted as exposed (its
     * exposed part is the compute queue's DSI_XK_DP_WAIT). */
    DSI_XK_DP_OVERLAP = 10,
    /* A context-parallel exchange of a pass: a blocking collective, or the
     * wait for a ring transfer posted before the attention step it hides
     * behind (DSI_XK_CP_POST). */
    DSI_XK_CP = 11,
    DSI_XK_CP_POST = 12,
    DSI_XK_EP = 13,  /* MoE dispatch or combine over the expert-parallel group */
    DSI_XK_EDP = 14, /* expert gradients over the expert-data-parallel group */
    DSI_XK_COUNT_
} dsi_xkind_t;

/* One recorded event of one rank; times on the aligned clock, seconds. */
typedef struct dsi_xrec {
    double start_s, end_s;
    int32_t rank;
    int32_t iteration;
    uint8_t kind;
    uint8_t fwd; /* passes: 1 forward, 0 backward */
    uint8_t nx;  /* P2P: transfers */
    uint8_t pad;
    int16_t chunk;
    int16_t part;
    int32_t mb;     /* micro-batch; DP: bucket */
    int32_t op;     /* operator index in its part's pass (dsi_model_layer_ops' list) */
    int32_t match;  /* collectives: the call's number in the iteration among calls of its kind */
    int32_t xid[4]; /* P2P: (boundary * 2 + channel) << 20 | sequence of each transfer */
    /* Queued backends: the device marks of start and end, turned into
     * start_s and end_s after the run (marks.c); -1 on host-timed backends. */
    int32_t mark[2];
} dsi_xrec_t;

#define DSI_XID(boundary, channel, seq) ((((boundary)*2 + (channel)) << 20) | (seq))

/* Per-run results, the same on every rank. */
typedef struct dsi_xrun {
    ds_exec_summary_t summary;
    ds_exec_device_t *devices; /* [ranks] */
    ds_exec_microbatch_t *mbs; /* [pp * vpp * m] */
    double *iteration_s;       /* [iterations] */
    dsi_xrec_t *recs;          /* rank 0: every rank's records (for traces); else NULL */
    size_t num_recs;
} dsi_xrun_t;

struct ds_exec {
    ds_backend_t *backend;
    const ds_model_t *model;
    ds_strategy_t s; /* context parallelism folded into dp (dsi_strategy_fold_cp) */
    int cp;          /* the strategy's cp: ctx splits the sequence by it */
    /* MoE with ep > 1: this rank runs its EP group's slowest expert work
     * (the router skew, as the simulator places it). */
    bool expert_slowest;
    dsi_shape_ctx_t ctx;
    MPI_Comm comm; /* duplicate of the backend's */
    int rank, size;
    ds_coords_t me;
    int64_t m;
    dsi_groups_t groups;
    dsi_program_t program;
    uint8_t *sync;        /* [program.count]: a backward action during which buckets fill */
    dsi_xchunk_t *chunks; /* [vpp] */
    /* collectives of the passes (TP, CP, EP), one per distinct key */
    dsi_comm_call_t **tp_calls;
    ds_event_key_t *tp_keys;
    int num_tp_calls;
    /* point-to-point calls per direction (dsi_dir_t) */
    dsi_comm_call_t *p2p[4];
    int p2p_boundary[4], p2p_channel[4];
    /* data-parallel buckets */
    int64_t stage_params, bucket;
    int num_buckets;
    dsi_comm_call_t **buckets;
    uint8_t *bucket_state; /* this iteration: 0 waiting, 1 ready, 2 in flight, 3 done */
    int32_t *bucket_mark;  /* queued backends: the mark each bucket in flight ends at */
    /* iteration end */
    dsi_comm_call_t *sp_call, *emb_call, *mp_call, *edp_call;
    ds_kernel_t *optimizer;
    ds_kernel_t *expert_optimizer; /* MoE: the expert weights' step (NULL without) */
    /* the run in progress */
    dsi_xrec_t *recs;
    size_t num_recs, cap_recs;
    double clock_offset_s, clock_error_s;
    /* Queued backends (cuda): events are timed by device marks (marks.c). */
    int queued;
    size_t num_marks;      /* marks recorded in the run so far (mark 0: the first anchor) */
    double anchor_host_s;  /* when the host saw mark 0, aligned clock */
    double anchor_error_s; /* the anchors' bound, the worst rank's once a run ends */
    /* runs kept */
    dsi_xrun_t *runs;
    size_t num_runs;
};

/* ---- the clock of queued backends (marks.c) ------------------------------------------------ */

/* The most the device clock's rate may differ from the host's before the
 * anchors are taken as seen late and the rate as 1 (crystal oscillators
 * drift by parts per million). */
#define DSI_MARKS_MAX_DRIFT 1e-3

/* Maps offsets_s[0..count-1] (seconds after mark 0 on the device) onto the
 * host clock: mark 0 was seen at host_a_s, a mark offset_b_s after it at
 * host_b_s (the formula is in marks.c).  host_s may not alias offsets_s. */
void dsi_exec_marks_to_host(double host_a_s, double host_b_s, double offset_b_s,
                            const double *offsets_s, size_t count, double *host_s);
/* Before a run's first iteration: the first anchor (a no-op on host-timed
 * backends). */
ds_status_t dsi_exec_marks_begin(ds_exec_t *exec);
/* After its last: the second anchor, then every record's start_s and end_s
 * from its marks. */
ds_status_t dsi_exec_marks_finish(ds_exec_t *exec);

/* run.c: one iteration `it` of this rank. */
ds_status_t dsi_exec_iteration(ds_exec_t *exec, int it, int progress_ops);

/* metrics.c: gathers the run's records and computes its results. */
ds_status_t dsi_exec_finish_run(ds_exec_t *exec, const ds_exec_options_t *options,
                                const ds_exec_load_t *load, double wall_s, dsi_xrun_t *run);
void dsi_exec_run_free(dsi_xrun_t *run);
/* The numbers of a run from every rank's records (exec.h's formulas);
 * fills run's summary (but its load, clock and wall time), devices,
 * micro-batches and iteration times.  `s` is folded (dsi_strategy_fold_cp)
 * from a strategy of context-parallel degree `cp`. */
ds_status_t dsi_exec_compute_run(const ds_strategy_t *s, int cp, int64_t microbatches, int ranks,
                                 int warmup, int iterations, const dsi_xrec_t *recs, size_t n,
                                 dsi_xrun_t *run);

/* load.c: CPU time of this process and of its core. */
typedef struct dsi_load_probe {
    double wall_s;
    int64_t own_ticks; /* utime + stime of this process */
    int64_t core_busy; /* busy ticks of the core (all cores when not pinned) */
    int64_t core_steal;
    int64_t core_total;
    int cores; /* cores the counters cover */
} dsi_load_probe_t;

void dsi_load_probe(dsi_load_probe_t *probe);
/* Foreign CPU and steal fractions between two probes; `node_own` is the
 * CPU ticks every rank of the node used in between (for unpinned ranks). */
void dsi_load_between(const dsi_load_probe_t *a, const dsi_load_probe_t *b, int64_t node_own,
                      double *foreign_p, double *steal_p);
double dsi_load_average(void);
/* The worst rank's load between two probes of every rank (collective over
 * comm); `speed_s` is this rank's speed probe (0 = none).  Noisy when
 * foreign + steal exceed max_foreign, or when the slowest rank's speed
 * probe exceeds (1 + DS_EXEC_MAX_SLOWDOWN) x reference_s (> 0). */
ds_status_t dsi_load_report(MPI_Comm comm, const dsi_load_probe_t *before,
                            const dsi_load_probe_t *after, double speed_s, double max_foreign,
                            double reference_s, ds_exec_load_t *load_p);
/* The speed probe: median seconds of a fixed 256^3 fp32 GEMM over a few
 * runs on this rank's device. */
ds_status_t dsi_speed_probe(ds_backend_t *backend, double *seconds_p);

/* ---- costs measured by several ranks ---------------------------------------------------- */

/* Each rank's speed relative to the ranks' mean, from the times every rank
 * measured for the same units (times[r * units + u]; <= 0: not measured):
 * the median over units of the rank's time over the fastest rank's,
 * weighted by the unit's fastest time, so that one unit measured slow on
 * one rank (a fault, a burst of load) does not make the whole rank slower.
 * Factors average 1; all 1 without a unit every rank measured. */
void dsi_exec_speed_factors(const double *times, int ranks, size_t units, double *factors);

/* One key's cost from the ranks that measured it: values[i] are the ranks'
 * costs divided by their speed factors; those more than DS_EXEC_OUTLIER
 * above the lowest are left out (*kept_p of n), the rest averaged. */
double dsi_exec_combine(const double *values, int n, int *kept_p);

#endif /* DSI_EXEC_H */
