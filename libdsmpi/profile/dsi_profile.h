/*
 * The profiling plan: which unique events this allocation measures, grouped
 * and assigned to ranks, before anything runs.
 *
 * Compute events are measured as whole layer passes ("units"): the operators
 * of one pass run back to back as training runs them, each timed in context
 * (METHOD.md, measuring in context).  Units are deduplicated by their key
 * sequence and spread over the ranks by longest-processing-time-first on a
 * roofline estimate, so ranks finish together.  Communication is measured by
 * groups the allocation can form (inside a node, across nodes, two groups at
 * once), at the exact sizes the target needs plus a power-of-two sweep for
 * the model fit; one task at a time.
 */
#ifndef DSI_PROFILE_H
#define DSI_PROFILE_H

#include <dsmpi/backend.h>
#include <dsmpi/cluster.h>
#include <dsmpi/comm.h>
#include <dsmpi/events.h>

#include <mpi.h>

#include "dsi_core.h"

typedef struct dsi_unit {
    uint64_t hash;    /* of the key sequence */
    size_t first_key; /* into plan->keys */
    size_t num_keys;
    double estimate_s; /* one run of the unit on the profiling device */
    int rank;          /* who measures it; -1 = nobody (already measured) */

    char label[64]; /* "gpt2-medium layer 0 fwd" */
} dsi_unit_t;

/* One communication measurement: `num_groups` groups of `sample.group_size`
 * ranks each run `sample.op` of `sample.bytes` at the same time. */
typedef struct dsi_comm_task {
    ds_comm_sample_t sample; /* what is measured (layout fields filled; times empty) */
    int num_groups;
    int shape; /* index of the group shape (for communicator reuse) */
    int exact; /* a size some target event has (else a sweep point) */
} dsi_comm_task_t;

/* A set of groups of the allocation; ranks[g * size + i]. */
typedef struct dsi_group_shape {
    int size;
    int nodes;
    int ranks_per_node;
    int num_groups; /* 1, or 2 for a concurrency measurement */
    int *ranks;
} dsi_group_shape_t;

typedef struct dsi_profile_plan {
    ds_event_set_t *events; /* union of every added strategy's events */
    ds_event_key_t *keys;   /* unit key sequences, concatenated */
    double *key_bytes;      /* their kernels' buffers on the backend (dsi_profile_plan_buffers)
                               for the first num_key_bytes keys; 0: not known, the roofline
                               bytes stand for them */
    size_t num_key_bytes;
    size_t num_keys, keys_capacity;
    dsi_unit_t *units;
    size_t num_units, units_capacity;
    dsi_group_shape_t *shapes;
    int num_shapes;
    dsi_comm_task_t *tasks;
    size_t num_tasks, tasks_capacity;
    int num_ranks;
    double *rank_load_s; /* predicted busy time of each rank */
    size_t units_to_measure;
    size_t units_reused;
} dsi_profile_plan_t;

ds_status_t dsi_profile_plan_create(dsi_profile_plan_t **plan_p);
void dsi_profile_plan_destroy(dsi_profile_plan_t *plan);

/* Adds the units and events of one (model, strategy, target). */
ds_status_t dsi_profile_plan_add(dsi_profile_plan_t *plan, const ds_model_t *model,
                                 const ds_strategy_t *strategy, const ds_cluster_t *target);

/* Assigns units to `num_ranks` ranks (node_of_rank[r] = node index), skipping
 * units whose keys all have a cost in `measured` (may be NULL), estimating
 * on `device`; then lists the communication tasks with sizes from
 * `sweep_min` to `sweep_max` bytes (powers of two). */
ds_status_t dsi_profile_plan_assign(dsi_profile_plan_t *plan, int num_ranks,
                                    const int *node_of_rank, const ds_cost_table_t *measured,
                                    const ds_device_spec_t *device, int64_t sweep_min,
                                    int64_t sweep_max);

/* Replaces the plan's group shapes with those of `num_ranks` ranks, rank r
 * on node node_of_rank[r] (what dsi_profile_plan_assign measures). */
ds_status_t dsi_profile_plan_shapes(dsi_profile_plan_t *plan, int num_ranks,
                                    const int *node_of_rank);

/* ---- how long measuring the plan takes (estimate.c, calibrate.c) ------------------------------
 * The estimate runs the measurement loop's own rules (dsi_measure_expect)
 * on a time model of every layer pass and communication task, with the
 * tunables the loop reads (ds_measure_config_t), plus what the profiler
 * does around the loop: preparing buffers, agreeing after each round or
 * task, setting communicators up, checkpointing and committing the database.
 * The time model comes from a short calibration on the allocation. */

/* A class of compute operators: one speed factor each. */
typedef struct dsi_speed_class {
    uint8_t op, pass, dtype; /* pass: forward (recompute too), backward or step */
    double factor;           /* measured time / roofline estimate on the device spec */
    double fill_s_per_byte;  /* preparing its kernels: seconds per byte of their buffers */
} dsi_speed_class_t;

#define DSI_SPEED_CLASSES 96
#define DSI_SPEED_RANKS 256
#define DSI_SPREAD_DRAWS 3

typedef struct dsi_profile_speed {
    ds_cluster_t here;              /* the allocation as a cluster of its device spec (rooflines) */
    ds_comm_library_t comm_library; /* whose algorithms shape communication estimates: the
                                       backend's (MPI's on the cpu backend, NCCL's on cuda) */
    dsi_speed_class_t classes[DSI_SPEED_CLASSES];
    int num_classes;
    double default_factor;              /* for a class not calibrated */
    double fill_s_per_byte;             /* preparing a kernel: its buffers filled with values */
    double compute_spread;              /* relative spread of repeated compute runs */
    double rank_share[DSI_SPEED_RANKS]; /* cpu backend: the share of its core each of the first
                                           ranks had during the calibration (1: alone) */
    int num_rank_shares;
    double cpu_share;   /* ... their mean, for the others */
    double comm_factor; /* measured / roofline time of an operation of a few MiB here */
    /* The same per primitive (0: comm_factor) at comm_factor_bytes, and at
     * comm_huge_bytes (0: not measured), log-linear between; beyond, the
     * nearer one (messages out of the caches run slower per byte). */
    double comm_op_factor[DS_COMM_COUNT_], comm_op_huge_factor[DS_COMM_COUNT_];
    double comm_factor_bytes, comm_huge_bytes;
    double comm_fill_s_per_byte; /* preparing a communication buffer */
    /* Relative spread of repeated communication runs: of small operations
     * (up to comm_spread_small_bytes), per primitive at
     * comm_spread_large_bytes (0: the small one) and at comm_huge_bytes
     * (0: not measured), log-linear between; beyond, the nearer one.  Large
     * messages' spread changes from one loop to the next (one loop converges
     * in five runs, the next of the same size runs out of budget), so it is
     * DSI_SPREAD_DRAWS draws, each a short loop of its own: the estimate
     * takes the mean of the loop's time over the draws. */
    double comm_spread;
    double comm_op_spread[DS_COMM_COUNT_][DSI_SPREAD_DRAWS];
    double comm_op_huge_spread[DS_COMM_COUNT_][DSI_SPREAD_DRAWS];
    double comm_spread_small_bytes, comm_spread_large_bytes;
    double sync_s;              /* one barrier (or small collective) of the allocation */
    double comm_create_s;       /* setting up one communicator (backend and its warm-up) */
    double commit_s;            /* writing the database: a fixed part ... */
    double commit_s_per_record; /* ... and per record it holds */
    int calibrated;             /* measured here, not the defaults */
} dsi_profile_speed_t;

/* Defaults without a calibration: factors 1 (the device spec's roofline),
 * no spread, the database costs of the store benchmark. */
void dsi_profile_speed_init(dsi_profile_speed_t *speed, const ds_cluster_t *here);

/* The share of its core `rank` has (cpu backend; 1 elsewhere). */
double dsi_profile_speed_share(const dsi_profile_speed_t *speed, int rank);

/* The class of a compute key (NULL: not calibrated). */
const dsi_speed_class_t *dsi_profile_speed_class(const dsi_profile_speed_t *speed,
                                                 const ds_event_key_t *key);

/* Measures the speeds on this allocation (calibrate.c): for `compute` a
 * scaled-down instance of the costliest key of every operator class the
 * plan measures (the classes spread over the ranks); for `comm_tasks`
 * barriers, one communicator's set-up, a small all-reduce and every
 * primitive of the plan at 4 MiB.  Under a second on a quiet machine.
 * Collective over `comm`; every rank gets the same speeds. */
/* Fills key_bytes from the backend's kernel sizes.  Not collective. */
ds_status_t dsi_profile_plan_buffers(dsi_profile_plan_t *plan, const ds_backend_t *backend);

ds_status_t dsi_profile_calibrate(ds_backend_t *backend, MPI_Comm comm,
                                  const dsi_profile_plan_t *plan, bool compute, bool comm_tasks,
                                  dsi_profile_speed_t *speed);

typedef struct dsi_profile_estimate {
    double *unit_s;  /* per unit: preparing and measuring it (0: not measured by this run) */
    double *rank_s;  /* per rank: its units */
    double *round_s; /* per compute round: the slowest rank's unit, the agreement, a checkpoint */
    size_t num_rounds;
    double *task_s;   /* per task: communicators when the shape changes, preparing, measuring,
                         agreeing (0: reused) */
    double compute_s; /* the layer-pass phase: the rounds */
    double comm_s;    /* the communication phase (setup_s included) */
    double setup_s;   /* of which communicator set-up */
    double commit_s;  /* the final write */
} dsi_profile_estimate_t;

/* What measuring the assigned plan takes with `config` at `speed`.
 * `task_reused` (NULL: none) marks tasks not measured; `db_records` is what
 * the database holds already (-1: no database, text outputs).  Free with
 * dsi_profile_estimate_free. */
ds_status_t dsi_profile_estimate(const dsi_profile_plan_t *plan, const ds_measure_config_t *config,
                                 const dsi_profile_speed_t *speed, const unsigned char *task_reused,
                                 bool compute, bool comm, int64_t db_records,
                                 dsi_profile_estimate_t *estimate_p);
void dsi_profile_estimate_free(dsi_profile_estimate_t *estimate);

#endif /* DSI_PROFILE_H */
