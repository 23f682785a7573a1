/*
 * dsmpi profiler: measures the unique events of one or more (model,
 * strategy, target) on the running allocation, each rank its share, and
 * gathers the costs into the profile database.
 *
 * Compute events are measured as whole layer passes, the operators of one
 * pass back to back as training runs them (each operator's cost is the time
 * from the previous operator's end to its own end, so a pass's operators add
 * up to the pass).  Passes are spread over the ranks longest-first on a
 * roofline estimate.  Communication is measured by groups the allocation can
 * form (pairs and whole nodes inside a node; one and two ranks per node
 * across nodes; two groups at once), one task at a time, at the exact sizes
 * the targets need plus a power-of-two sweep for the communication model.
 * Events already in the database for this device are not measured again.
 */
#ifndef DSMPI_PROFILE_H
#define DSMPI_PROFILE_H

#include <dsmpi/backend.h>
#include <dsmpi/cluster.h>
#include <dsmpi/core.h>
#include <dsmpi/events.h>
#include <dsmpi/model.h>
#include <dsmpi/store.h>
#include <dsmpi/strategy.h>

#include <mpi.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ds_profile_options {
    const char *db_path;             /* the profile database (created when missing); NULL:
                                        none, the costs_out / comm_samples_out files instead */
    const char *const *fallback_dbs; /* read-only site databases, searched after db_path */
    size_t num_fallbacks;
    ds_backend_kind_t backend; /* DS_BACKEND_AUTO: cuda when every rank sees a GPU */
    int reprofile;             /* measure again what the database already holds */
    int compute_only;          /* skip the communication tasks */
    int comm_only;             /* skip the layer passes */
    int64_t sweep_min_bytes;   /* communication sweep, powers of two */
    int64_t sweep_max_bytes;   /* at most DS_PROFILE_SWEEP_LIMIT */
    int progress;              /* rank 0 prints progress on stderr */
    const char *command_line;  /* recorded in the database */
    /* Without a database (builds without parallel HDF5: SimGrid SMPI), rank 0
     * writes what the run measured at its end: the event costs as a text
     * cost table (ds_cost_table_write_text) and the communication samples as
     * text (ds_comm_samples_write_text), each replacing the file; either may
     * be NULL.  `dsmpi import --cost-table --comm-samples` loads them into a
     * database. */
    const char *costs_out;
    const char *comm_samples_out;
} ds_profile_options_t;

/* The largest message a communication sweep may reach (1 TiB). */
#define DS_PROFILE_SWEEP_LIMIT (INT64_C(1) << 40)

/* Defaults: backend from DS_BACKEND, sweep from DS_PROFILE_SWEEP_MIN/MAX,
 * progress on, everything else off/NULL. */
DS_API void ds_profile_options_init(ds_profile_options_t *options);

typedef struct ds_profiler ds_profiler_t;

/* Opens the backend and the database; collective over `comm`.  Caller frees
 * with ds_profiler_destroy (collective). */
DS_API ds_status_t ds_profiler_create(MPI_Comm comm, const ds_profile_options_t *options,
                                      ds_profiler_t **profiler_p);
DS_API void ds_profiler_destroy(ds_profiler_t *profiler);

/* Adds the events of one (model, strategy resolved for target, target).
 * Every rank adds the same in the same order. */
DS_API ds_status_t ds_profiler_add(ds_profiler_t *profiler, const ds_model_t *model,
                                   const ds_strategy_t *strategy, const ds_cluster_t *target);

/* What a run did (or, before running, what it would do). */
typedef struct ds_profile_summary {
    int ranks;
    int nodes;
    size_t units;                /* unique layer passes (and single events) of the targets */
    size_t units_measured;       /* ... measured by this run */
    size_t units_reused;         /* ... whose every event the database already held */
    size_t compute_keys;         /* unique compute events */
    size_t comm_keys;            /* unique communication events of the targets */
    size_t comm_tasks;           /* communication measurements the allocation runs */
    size_t comm_tasks_reused;    /* ... already in the database */
    int64_t target_events;       /* events in one iteration of the targets, over every device */
    double predicted_max_rank_s; /* plan: roofline time of the busiest rank's passes, run once */
    /* Plan: the expected wall time of each phase, from the measurement
     * loop's rules (warm-up, repetitions to the confidence target or the
     * minimum, the per-event budget) on speeds calibrated on this
     * allocation, rounds of passes, communicator set-up and database
     * writes (libdsmpi/profile/estimate.c). */
    double estimated_compute_s; /* the layer-pass phase */
    double estimated_comm_s;    /* the communication phase, set-up included */
    double estimated_setup_s;   /* ... of which setting communicators up */
    double estimated_commit_s;  /* writing the results at the end */
    double estimated_wall_s;    /* the three phases */
    size_t compute_rounds;      /* rounds of the layer-pass phase */
    int calibrated;             /* the speeds were measured here (else the device spec's) */
    double compute_factor;      /* calibration: operators' time / the spec's roofline (median) */
    double comm_factor;         /* ... a large all-reduce's time / the links' roofline */
    double sync_s;              /* ... one barrier of the allocation */
    double cpu_share;           /* ... cpu backend: the share of its core a rank had (mean) */
    size_t comm_keys_measured;  /* target communication keys this allocation measures as they are */
    size_t comm_keys_fitted;    /* ... predicted from measurements at the same network level */
    size_t comm_keys_assumed; /* ... from the cluster description (no measurement at that level) */
    double wall_s;            /* whole run */
    double compute_wall_s;
    double comm_wall_s;
    double commit_wall_s;
    int interrupted; /* stopped by ds_profiler_request_stop: saved, incomplete */
} ds_profile_summary_t;

/* Plans without measuring (units, tasks, estimates): what --dry-run prints.
 * Collective. */
DS_API ds_status_t ds_profiler_plan(ds_profiler_t *profiler, ds_profile_summary_t *summary);

/* Measures every planned unit and task not yet in the database, checkpoints
 * the database as it goes, commits at the end.  Collective.  Returns
 * DS_ERR_INTERRUPTED (after saving what was measured) when a stop was
 * requested. */
DS_API ds_status_t ds_profiler_run(ds_profiler_t *profiler, ds_profile_summary_t *summary);

/* How the communication key `index` of the targets will be costed after this
 * allocation's measurements (after ds_profiler_plan). */
typedef enum ds_coverage {
    DS_COVERAGE_MEASURED = 0, /* the allocation forms the group and measures the size */
    DS_COVERAGE_FITTED = 1,   /* fitted from measurements at the same network level */
    DS_COVERAGE_ASSUMED =
        2, /* nothing measurable at its level here: imported data or the cluster file */
} ds_coverage_t;

DS_API const char *ds_coverage_name(ds_coverage_t coverage);
DS_API size_t ds_profiler_comm_key_count(const ds_profiler_t *profiler);
DS_API ds_status_t ds_profiler_comm_key_at(const ds_profiler_t *profiler, size_t index,
                                           const ds_event_key_t **key_p, ds_coverage_t *coverage_p,
                                           int64_t *count_p);

/* Per-rank figures of the layer-pass phase: the plan's expected measuring
 * time of the rank's passes (preparing each, then the measurement loop's
 * warm-up, repetitions and budget on the calibrated speeds) and the time the
 * rank really spent measuring them.  Arrays of summary.ranks entries, owned by the
 * profiler; the measured one is valid on rank 0 after a run. */
DS_API const double *ds_profiler_rank_predicted_s(const ds_profiler_t *profiler);
DS_API const double *ds_profiler_rank_busy_s(const ds_profiler_t *profiler);

/* The device fingerprint costs are stored under, and the short tag of it that
 * communication samples carry as `source`. */
DS_API const char *ds_profiler_fingerprint(const ds_profiler_t *profiler);
DS_API const char *ds_profiler_source_tag(const ds_profiler_t *profiler);
DS_API const char *ds_profiler_device_name(const ds_profiler_t *profiler);
/* The open backend and database (owned by the profiler; the database is
 * NULL when the profiler writes text files instead). */
DS_API ds_backend_t *ds_profiler_backend(ds_profiler_t *profiler);
DS_API ds_profile_db_t *ds_profiler_db(ds_profiler_t *profiler);

/* The short tag communication samples of a device fingerprint carry. */
DS_API void ds_fingerprint_source_tag(const char *fingerprint, char *tag, size_t size);

/* ---- from measurements to the costs of a target ---------------------------------
 * What a prediction uses: compute costs measured on the target's kind of
 * device as they are; measured on another device, scaled by the ratio of the
 * two devices' roofline estimates and marked assumed; communication from the
 * communication model fitted on the samples measured on the target's kind of
 * device and on imported ones (nccl-tests logs of the target system). */

typedef struct ds_cost_sources {
    const ds_profile_db_t *db;       /* may be NULL */
    const char *fingerprint;         /* NULL: the database's fingerprint with most records */
    const ds_comm_sample_t *samples; /* more communication samples (imported logs); may be NULL */
    size_t num_samples;
} ds_cost_sources_t;

typedef struct ds_cost_report {
    char fingerprint[DS_FINGERPRINT_MAX]; /* the fingerprint used, "" when none */
    char measured_device[32];             /* device spec of that fingerprint, "" when not known */
    size_t compute_measured;              /* compute keys of the events costed from measurements */
    size_t compute_scaled;                /* ... of which scaled from another device (assumed) */
    size_t comm_samples;                  /* samples the communication model was fitted on */
    size_t comm_filled;    /* communication keys of the events costed by that model */
    char comm_library[16]; /* whose algorithms it follows ("nccl", "ompi"; DS_COMM_LIBRARY) */
} ds_cost_report_t;

/* The device the sources' measurements were made on (the fingerprint they
 * would use); DS_ERR_NOT_FOUND when there are none or the device is not
 * known.  A target that names no device takes this one. */
DS_API ds_status_t ds_costs_measured_device(const ds_cost_sources_t *sources,
                                            ds_device_spec_t *spec);

/* Fills `table` with costs for the keys of `events` on `target` from
 * `sources`; keys the table already holds are kept.  The communication
 * model follows Open MPI's algorithms when most samples were measured with
 * MPI (cpu and replay backends), NCCL's otherwise (DS_COMM_LIBRARY forces
 * one).  Events left without a
 * cost are for the caller to report or estimate.  Not collective. */
DS_API ds_status_t ds_costs_assemble(const ds_cost_sources_t *sources, const ds_event_set_t *events,
                                     const ds_cluster_t *target, ds_cost_table_t *table,
                                     ds_cost_report_t *report);

/* ---- which allocation shape to ask for ---------------------------------------------
 * What an allocation measures of a target's communication follows from its
 * shape (METHOD.md, what a small allocation can measure): inside its fullest
 * node groups of 2, 4, ... and all its ranks; across its nodes groups of 2,
 * 4, ... and all its nodes with one rank per node (and more per node where
 * the nodes hold them).  A tree over N nodes is ceil(log2 N) levels deep, so
 * m nodes measure the depths up to ceil(log2 m).  Beyond the most nodes
 * measured, communication times are extrapolated by the factor f = target
 * nodes / those nodes and carry the band of ds_comm_band_multipliers. */

#define DS_PROFILE_GROUP_SIZES 32

typedef struct ds_profile_shape {
    int ranks;                               /* of the allocation */
    int nodes;                               /* nodes holding them */
    int ranks_per_node;                      /* on its fullest node */
    int intra_sizes[DS_PROFILE_GROUP_SIZES]; /* group sizes measured inside a node, ascending */
    int num_intra_sizes;
    int cross_nodes[DS_PROFILE_GROUP_SIZES]; /* node counts measured one rank per node, ascending */
    int num_cross_nodes;
    int cross_ranks_per_node; /* most ranks per node in a group across nodes (0: none) */
    int tree_depth_min;       /* ceil(log2) of the fewest and most nodes measured (0: none) */
    int tree_depth_max;
    int64_t target_nodes;
    int target_gpus_per_node;
    int target_tree_depth; /* ceil(log2 target nodes) */
    double factor;         /* target nodes / most nodes measured (0: no network measured) */
    double band_low;       /* the band's multipliers at factor (1 when factor <= 1, */
    double band_high;      /* 0 when no network is measured: inter-node costs are assumed) */
    int lacks_intra_pair;  /* the target has several GPUs per node; no group inside a node */
    int lacks_network;     /* the target has several nodes; no group across nodes */
} ds_profile_shape_t;

/* What an allocation of `num_ranks` ranks, rank r on node node_of_rank[r]
 * (0, 1, ...), measures for `target`, with the band rates `slow` and `fast`
 * (ds_comm_band_rates).  DS_ERR_INVALID_ARG on an empty allocation, a node
 * index outside 0..num_ranks-1 or an empty target.  Not collective. */
DS_API ds_status_t ds_profile_shape_of(int num_ranks, const int *node_of_rank,
                                       const ds_cluster_t *target, double slow, double fast,
                                       ds_profile_shape_t *shape_p);

/* Every nodes x ranks-per-node factorisation of `num_ranks` whose nodes a
 * node of `target` holds (ranks per node <= its GPUs per node), the most
 * nodes first, each as ds_profile_shape_of describes it; *best_p is the
 * index of the one that measures most for the target: one that measures
 * both an intra-node group (where the target has several GPUs per node) and
 * groups across nodes (where it has several nodes) before one that does
 * not, then the most nodes up to the target's (the narrowest band), then
 * the largest intra-node group.  Caller frees *shapes_p with
 * ds_profile_shapes_free.  Not collective. */
DS_API ds_status_t ds_profile_shapes_compare(int num_ranks, const ds_cluster_t *target, double slow,
                                             double fast, ds_profile_shape_t **shapes_p,
                                             int *count_p, int *best_p);
DS_API void ds_profile_shapes_free(ds_profile_shape_t *shapes);

/* The node of each rank of the profiler's communicator (summary.ranks
 * entries, owned by the profiler). */
DS_API const int *ds_profiler_node_of_rank(const ds_profiler_t *profiler);

/* Asks a running profiler to stop after the event in hand, save what was
 * measured and return DS_ERR_INTERRUPTED.  Async-signal-safe: call it from
 * SIGTERM / SIGUSR1 handlers (what Slurm sends before a time limit). */
DS_API void ds_profiler_request_stop(void);

#ifdef __cplusplus
}
#endif

#endif /* DSMPI_PROFILE_H */
