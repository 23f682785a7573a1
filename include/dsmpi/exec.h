/*
 * dsmpi exec: the executor.  It runs real training iterations of a model
 * under a strategy on the allocation itself (dp * cp * tp * pp = the ranks), with
 * the backend's kernels on real buffers, in the order the pipeline schedule
 * dictates, records every device's events on a clock aligned across ranks,
 * and compares what ran with what the simulator predicted (dsmpi validate).
 *
 * What one iteration runs on every rank (Megatron-LM semantics, as sim.h):
 * - The actions of its pipeline stage's schedule program, the simulator's
 *   own (GPipe, 1F1B, interleaved 1F1B).  A forward or backward pass of a
 *   model chunk runs the operators dsi_model_layer_ops lists for each of its
 *   parts (embedding, layers, head) in issue order: every compute operator
 *   is a kernel with buffers of its own (no two layers share weights; the
 *   activations of one layer share their buffers across micro-batches), each
 *   reading the previous operator's output where it fits; the tensor-parallel
 *   collectives between them are blocking calls.
 * - Context parallelism (cp > 1, fused attention only) as Megatron-Core with
 *   Transformer Engine runs it: every rank holds seq / cp tokens; the ranks
 *   of one sequence form the CP group, and dp x cp the gradient group (the
 *   strategy folded as the events fold it).  With cp-comm=p2p (cp = 2) each
 *   ring step's K/V block (backward: with their gradients) is a batched send
 *   and receive with the neighbour, started before the attention step it
 *   hides behind and waited for after it; the backward's last hop of the
 *   K/V gradients home is blocking.  cp-comm=a2a and allgather run their
 *   exchanges as blocking collectives over the CP group.
 * - Mixture of experts: dispatch and combine as blocking calls over the EP
 *   group, the experts' grouped GEMMs as the backend's batched GEMMs of the
 *   rank's experts.  Tokens are not routed by value: every rank runs the
 *   expert work of the mean rank's tokens, but the EP group's first rank
 *   (expert coordinate 0, the simulator's slowest) that of router-skew
 *   times the mean, as the event set counts them.  The iteration end adds
 *   the expert gradients' all-reduce over the expert-data-parallel group
 *   and the experts' Adam step.
 * - Point-to-point calls as the program posts them: every transfer of a call
 *   is started at once (non-blocking send and receive), then all are waited
 *   for, as Megatron's _communicate does: single transfers in warm-up and
 *   cool-down, the batched send + receive pairs of the 1F1B steady state.  A
 *   send completes only when the receiver has posted its receive (messages
 *   above the MPI eager limit).
 * - Data-parallel gradient buckets in reverse parameter order, of the
 *   strategy's bucket size.  With overlap on, during the last backward of
 *   each model chunk every bucket is started (non-blocking) as soon as its
 *   gradients are complete, in bucket order, and progressed by a test of the
 *   buckets in flight after every DS_EXEC_PROGRESS_OPS-th compute operator
 *   (on the cpu backend MPI advances a collective only inside MPI calls);
 *   the iteration end waits for them in order.  With overlap off they run
 *   blocking, one after the other, after the backward.
 * - The iteration end, in the simulator's order: data-parallel sync, the
 *   sequence-parallel norm all-reduce over TP, the tied-embedding all-reduce
 *   between first and last stage, the overflow check (fp16) and gradient-norm
 *   all-reduce (clipping) over the model-parallel group, the optimizer step
 *   (Adam on the stage's parameters).  No barrier between iterations.
 * Not run: ZeRO (zero >= 1), the parameter server, a forced DP algorithm,
 * context parallelism without fused attention or with the p2p ring over more
 * than 2 ranks, experts split over an etp other than tp (DS_ERR_UNSUPPORTED).
 *
 * On the cuda backend the same work is issued on CUDA streams and timed by
 * CUDA events: compute on one stream; TP collectives, transfers (a program
 * action's as one NCCL group) and the iteration end on a communication
 * stream the compute stream waits for; overlapped DP buckets on a stream of
 * their own, waited for by the compute stream at the iteration end.  The
 * events map to the aligned clock through two anchors around the run
 * (exec/marks.c); clock_error_s includes the anchors' bound.
 *
 * Clock: the processes of a node share CLOCK_MONOTONIC; every other node's
 * offset to rank 0's node is estimated by ping-pong (the round trip with the
 * smallest delay gives it within half that delay) when the executor is
 * created and again at the end of every run (the larger error is kept).
 *
 * Metrics of a run (iterations k = 0, 1, ...; the first `warmup` are not
 * reported; E_k = last end of an event of iteration k over all ranks,
 * B_k = first start of one):
 *   iteration time  T_k = E_k - E_(k-1); a run reports the median over its
 *                   measured iterations (as the simulator: end minus end)
 *   compute_s       time a rank ran compute operators (optimizer included)
 *   comm_exposed_s  over the rank's blocking communication calls: exit minus
 *                   the later of its own entry and the last member's entry
 *                   (the peers' matching calls; for point-to-point the
 *                   calls holding the other ends of its transfers; for a
 *                   ring transfer its wait after the attention step), plus
 *                   the time spent starting and testing non-blocking buckets
 *                   and starting ring transfers
 *   wait_s          the rest of those calls: waiting for the others to arrive
 *   idle_s          T - compute_s - comm_exposed_s (waits, pipeline bubble)
 *   busy_s          compute_s + comm_exposed_s = T - idle_s
 *   bubble          mean over ranks of idle_s / T
 *   micro-batch     forward / backward start and end of every (stage, chunk,
 *                   micro-batch) on data-parallel replica 0, TP rank 0: first
 *                   operator start to last operator end, from B_k
 * Per-rank numbers of a run are medians over its measured iterations.
 *
 * Comparison with a prediction (ds_exec_compare): over the runs not marked
 * noisy (all of them when every run is), measured = median of the runs'
 * values, spread = (max - min) / median of them, error = (predicted -
 * measured) / measured, "within noise" when |error| <= spread.
 */
#ifndef DSMPI_EXEC_H
#define DSMPI_EXEC_H

#include <dsmpi/backend.h>
#include <dsmpi/cluster.h>
#include <dsmpi/core.h>
#include <dsmpi/events.h>
#include <dsmpi/model.h>
#include <dsmpi/sim.h>
#include <dsmpi/strategy.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ds_exec ds_exec_t;

typedef struct ds_exec_options {
    int warmup;         /* iterations run before the measured ones (>= 1) */
    int iterations;     /* measured iterations (>= 1) */
    int progress_ops;   /* a test of the buckets in flight every this many compute operators
                           (0 = the DS_EXEC_PROGRESS_OPS tunable) */
    double max_foreign; /* a run is noisy when other processes and the hypervisor took more
                           than this fraction of a rank's core (0 = DS_EXEC_MAX_FOREIGN) */
    /* A run is noisy too when the speed probe before or after it took more
     * than (1 + DS_EXEC_MAX_SLOWDOWN) x this (the best probe seen so far;
     * 0 = no such check): a hypervisor may take time from a virtual core
     * without counting it anywhere the guest can read. */
    double reference_probe_s;
} ds_exec_options_t;

/* Defaults: 2 warm-up and 5 measured iterations, the tunables. */
DS_API void ds_exec_options_init(ds_exec_options_t *options);

/* Prepares the rank's part of `model` under `strategy` (resolved for as many
 * devices as `backend` has ranks): its process groups, kernels, buffers and
 * schedule.  Collective over the backend's ranks.  `model` must outlive the
 * executor.  Fails with DS_ERR_INVALID_ARG when dp * cp * tp * pp is not the
 * number of ranks, DS_ERR_UNSUPPORTED for what the executor does not run (see
 * above).  Caller frees with ds_exec_destroy. */
DS_API ds_status_t ds_exec_create(ds_backend_t *backend, const ds_model_t *model,
                                  const ds_strategy_t *strategy, ds_exec_t **exec_p);
/* Collective over the backend's ranks; NULL is a no-op. */
DS_API void ds_exec_destroy(ds_exec_t *exec);

/* Runs warmup + iterations training iterations and keeps the run's results
 * (every rank gets them).  Collective. */
DS_API ds_status_t ds_exec_run(ds_exec_t *exec, const ds_exec_options_t *options);
/* Runs kept so far; ds_exec_clear forgets them. */
DS_API size_t ds_exec_run_count(const ds_exec_t *exec);
DS_API void ds_exec_clear(ds_exec_t *exec);

/* What else ran on the ranks' cores during a run (the worst rank). */
typedef struct ds_exec_load {
    double foreign_cpu; /* fraction of the core other processes used */
    double steal;       /* fraction the hypervisor gave to other guests */
    double loadavg_1m;  /* /proc/loadavg when the run ended */
    int pinned;         /* every rank ran pinned to a core of its own */
    /* The speed probe (a fixed small GEMM, median of a few runs, on every
     * rank at once) before and after: the slowest rank's slower one. */
    double probe_s;
    int noisy; /* foreign_cpu + steal above max_foreign, or the probe slower than allowed */
} ds_exec_load_t;

/* Probes the allocation: the speed probe on every rank at once, then
 * `window_s` seconds of sleep during which the foreign CPU load is read;
 * noisy by the rules of `options` (max_foreign, reference_probe_s; NULL:
 * the defaults).  Collective over the backend's ranks.  For waiting until a
 * shared machine is quiet before measuring. */
DS_API ds_status_t ds_exec_probe(ds_backend_t *backend, double window_s,
                                 const ds_exec_options_t *options, ds_exec_load_t *load_p);

typedef struct ds_exec_summary {
    int64_t microbatches;
    int warmup, iterations;
    double iteration_s;                      /* median of the measured iterations */
    double iteration_min_s, iteration_max_s; /* over the measured iterations */
    /* Means over the ranks. */
    double compute_s, comm_exposed_s, wait_s, idle_s, busy_s;
    double bubble_fraction;
    double clock_error_s; /* bound on the alignment error between nodes (0 on one node) */
    double wall_s;        /* the whole run */
    ds_exec_load_t load;
} ds_exec_summary_t;

DS_API ds_status_t ds_exec_get_summary(const ds_exec_t *exec, size_t run,
                                       ds_exec_summary_t *summary_p);

typedef struct ds_exec_device {
    int64_t rank;
    ds_coords_t coords;
    double compute_s, comm_exposed_s, wait_s, idle_s, busy_s;
    double tp_s, pp_s, dp_s, other_s; /* exposed communication by kind (other: CP, EP, EDP, ...) */
} ds_exec_device_t;

/* Rank `rank`'s numbers in run `run`. */
DS_API ds_status_t ds_exec_device_at(const ds_exec_t *exec, size_t run, int64_t rank,
                                     ds_exec_device_t *device_p);

typedef struct ds_exec_microbatch {
    int stage, chunk, microbatch;
    double fwd_start_s, fwd_end_s, bwd_start_s, bwd_end_s;
} ds_exec_microbatch_t;

/* pp x vpp x micro-batches entries, stage-major, then chunk, then micro-batch. */
DS_API size_t ds_exec_microbatch_count(const ds_exec_t *exec);
DS_API ds_status_t ds_exec_microbatch_at(const ds_exec_t *exec, size_t run, size_t index,
                                         ds_exec_microbatch_t *mb_p);

/* Perfetto / Chrome trace of the measured iterations of run `run`: one
 * track per rank (compute, then communication calls), every operator an
 * event.  Rank 0 writes it; collective only in that every rank must call. */
DS_API ds_status_t ds_exec_write_trace(const ds_exec_t *exec, size_t run, const char *path);

/* ---- comparison with a prediction ------------------------------------------------------ */

/* A predicted number against the measured one (see the formulas above). */
typedef struct ds_exec_figure {
    double predicted;
    double measured;
    double spread; /* relative run-to-run spread of the measured value */
    double error;  /* (predicted - measured) / measured; 0 when measured is 0 */
    int within_noise;
} ds_exec_figure_t;

typedef struct ds_exec_device_figures {
    int64_t rank;
    ds_coords_t coords;
    ds_exec_figure_t busy, compute, idle;
    ds_exec_figure_t exposed; /* exposed communication */
} ds_exec_device_figures_t;

typedef struct ds_exec_stage_figures {
    int stage;
    ds_exec_figure_t forward, backward; /* one pass of every chunk, mean over micro-batches */
} ds_exec_stage_figures_t;

typedef struct ds_exec_comparison {
    size_t runs;       /* runs compared */
    size_t noisy_runs; /* runs of the executor marked noisy (excluded when others exist) */
    ds_exec_figure_t iteration;
    ds_exec_figure_t bubble; /* fractions */
    double busy_mean_abs_error, busy_max_abs_error;
    double compute_mean_abs_error, compute_max_abs_error;
    /* Micro-batch start and end times: mean absolute difference over every
     * (stage, chunk, micro-batch) of replica 0, as a fraction of the
     * measured iteration time. */
    double microbatch_time_error;
    ds_exec_load_t load; /* worst over the runs compared */
    size_t num_devices, num_stages;
    ds_exec_device_figures_t *devices; /* owned by the comparison */
    ds_exec_stage_figures_t *stages;
} ds_exec_comparison_t;

/* Compares the executor's runs with `sim`'s last run (the same model and
 * strategy on the allocation as the target).  Not collective.  Caller frees
 * with ds_exec_comparison_free. */
DS_API ds_status_t ds_exec_compare(const ds_exec_t *exec, const ds_sim_t *sim,
                                   ds_exec_comparison_t **comparison_p);
DS_API void ds_exec_comparison_free(ds_exec_comparison_t *comparison);

/* ---- costs of the strategy's events on this allocation ------------------------------------ */

typedef enum ds_exec_cost_method {
    /* Every unique layer pass run as a unit, back to back as training runs it,
     * with timestamps between operators: an operator's cost is its time in
     * that context (default). */
    DS_EXEC_COSTS_LAYER = 0,
    /* Every unique operator measured alone (ablation). */
    DS_EXEC_COSTS_OPERATOR = 1,
} ds_exec_cost_method_t;

typedef struct ds_exec_cost_options {
    ds_exec_cost_method_t compute;
    /* Tensor-parallel collectives measured in situ, right after the compute
     * operator that produces their input (default), or alone. */
    int comm_in_situ;
    /* Every unit is measured in this many rounds, one unit after the other
     * in each, and the rounds' means averaged: slow drifts of a device's
     * speed (seconds) then weigh on every unit alike. */
    int rounds;
    /* Layer passes: copies of the unit run in turn (ds_measure_config_t.copies),
     * as many as make the bytes touched between two runs of one copy those
     * training touches (the largest stage's buffers, at most four times the
     * last-level cache: DS_EXEC_CACHE_MIB); 0: one copy, warm caches. */
    int rotate;
    /* Data-parallel buckets that overlap the backward, on a backend without
     * device queues (cpu): timed as the executor issues them, started and
     * waited for, in copies that rotate as layer passes do (default); 0:
     * the blocking call's time (MPI's non-blocking collectives run other
     * algorithms). */
    int issued;
    /* Every rank measures every unit, all at once (averaged over the ranks),
     * rather than each its share: devices sharing a node's memory see the
     * traffic of the others as in training. */
    int together;
    ds_measure_config_t measure; /* per unit and round */
    double max_foreign;          /* the load_p verdict (0 = DS_EXEC_MAX_FOREIGN) */
    double reference_probe_s;    /* ... and the probe's (see ds_exec_options_t) */
} ds_exec_cost_options_t;

/* Layer-level costs, in-situ collectives, DS_EXEC_COST_ROUNDS rounds, the
 * measurement tunables. */
DS_API void ds_exec_cost_options_init(ds_exec_cost_options_t *options);

/* Measures the unique events of `model` under `strategy` on the allocation
 * running it (`cluster` describes that allocation as a target) that `costs`
 * lacks, and adds them: compute events spread over the ranks, communication
 * events on the real process groups of the strategy (every group with the
 * event's layout at once, as training runs them).  *load_p (may be NULL)
 * gets the foreign CPU load while measuring (worst rank).  With every rank
 * measuring every unit (together), speed_factors (may be NULL; one entry
 * per rank) gets each rank's time for them over the ranks' mean (> 1: a
 * slower device, METHOD's device-to-device factor); otherwise 1.  Collective
 * over the backend's ranks; every rank ends with the same table. */
DS_API ds_status_t ds_exec_measure_costs(ds_backend_t *backend, const ds_model_t *model,
                                         const ds_strategy_t *strategy, const ds_cluster_t *cluster,
                                         const ds_exec_cost_options_t *options,
                                         ds_cost_table_t *costs, ds_exec_load_t *load_p,
                                         double *speed_factors);

/* ---- validation: real runs against the prediction (dsmpi validate) ----------------------- */

/* Where the costs of a prediction come from, or what of the simulator is
 * changed; every variant is compared with the same runs.  The headline is
 * DS_VALIDATE_IN_SITU, or DS_VALIDATE_PROFILE_DB when a database is given. */
typedef enum ds_validate_variant {
    DS_VALIDATE_IN_SITU = 0,       /* layer passes in rotating copies on every rank at once, in
                                      rounds; TP collectives after their producer */
    DS_VALIDATE_OPERATORS = 1,     /* every operator alone */
    DS_VALIDATE_ISOLATED = 2,      /* TP collectives alone */
    DS_VALIDATE_WARM_CACHES = 3,   /* one copy of a layer pass: caches as warm as a tight loop */
    DS_VALIDATE_RANK_SHARES = 4,   /* each rank measures its share of the passes */
    DS_VALIDATE_ONE_ROUND = 5,     /* one round */
    DS_VALIDATE_PROFILE_DB = 6,    /* the profiler's database (what it lacked profiled first) */
    DS_VALIDATE_OVERLAP_FREE = 7,  /* the headline's costs, bucket overlap with the backward free */
    DS_VALIDATE_NO_SKEW = 8,       /* the headline's costs, TP members arriving together */
    DS_VALIDATE_EQUAL_DEVICES = 9, /* the headline's costs, every device as fast as the mean */
    DS_VALIDATE_BLOCKING_BUCKETS = 10, /* overlapped buckets timed as blocking calls */
    DS_VALIDATE_VARIANT_COUNT
} ds_validate_variant_t;

/* "in-situ", "operators-alone", ...; "unknown" out of range. */
DS_API const char *ds_validate_variant_name(ds_validate_variant_t variant);

typedef enum ds_validate_notice {
    DS_VALIDATE_NOTICE_NOISY = 0, /* costs measured again, or a run marked noisy */
    DS_VALIDATE_NOTICE_CASE = 1,  /* a case is done */
} ds_validate_notice_t;

typedef struct ds_validate_options {
    ds_exec_options_t exec;       /* every run (reference_probe_s is the session's best) */
    ds_exec_cost_options_t costs; /* the headline's measured costs; the ablations change one
                                     thing each (max_foreign is exec's) */
    int repeats;                  /* quiet runs per case (default 3) */
    int retries;  /* runs allowed to replace noisy ones, and measurements of costs repeated while
                     the machine was noisy (default 3) */
    int ablation; /* predict from every variant, not only the headline */
    const char *profile_db;            /* costs from this database (NULL: measured here) */
    ds_backend_kind_t profile_backend; /* the profiler's backend for what the database lacks */
    int profile_progress;              /* the profiler prints its progress (rank 0) */
    const char *command_line;          /* recorded by the profiler (may be NULL) */
    double wait_quiet_s; /* before measuring costs and before each run, wait up to this long for
                            a quiet second and a probe as fast as the best (0: never) */
    const char *trace;   /* Perfetto trace of each case's last quiet run (NULL: none) */
    /* Called on rank 0 with one line (no newline) as the validation goes. */
    void (*notice)(ds_validate_notice_t kind, const char *line, void *context);
    void *notice_context;
} ds_validate_options_t;

/* The defaults: ds_exec_options_init, ds_exec_cost_options_init, 3 repeats,
 * 3 retries, no ablation, costs measured here, no waiting, silent. */
DS_API void ds_validate_options_init(ds_validate_options_t *options);

typedef struct ds_validate_case {
    ds_strategy_t strategy;
    char strategy_text[DS_STRATEGY_TEXT_MAX];
    int64_t microbatches;
    /* One per variant of the result, in its order (the headline first). */
    ds_exec_comparison_t *comparisons[DS_VALIDATE_VARIANT_COUNT];
    ds_exec_summary_t first_run;
    double costs_s;            /* time spent measuring or assembling the case's costs */
    ds_exec_load_t costs_load; /* while the headline's costs were measured */
} ds_validate_case_t;

typedef struct ds_validate_result {
    int64_t ranks; /* of the communicator */
    size_t num_cases;
    ds_validate_case_t *cases;
    size_t num_variants;
    ds_validate_variant_t variants[DS_VALIDATE_VARIANT_COUNT]; /* the headline first */
    double best_probe_s; /* the fastest speed probe of the session (0: none) */
    /* `ranks` entries: each rank's speed factor behind the headline's
     * prediction (1 where no measurement compared the devices). */
    double *speed_factors;
    /* |iteration-time error| of the headline over the cases. */
    double mean_abs_error, max_abs_error;
    ds_cost_table_t *costs; /* the headline's costs, owned by the result */
} ds_validate_result_t;

/* Every strategy of `ranks` devices derived from `base` (dp, tp, pp,
 * schedule, vpp and gbs replaced; pp > 1 as GPipe, 1F1B and interleaved with
 * vpp = 2 where the layers allow), for each of `num_counts` micro-batch
 * counts, that resolves for `model`.  *num_cases_p may be 0.  Caller frees
 * *cases_p with ds_validate_cases_free. */
DS_API ds_status_t ds_validate_enumerate(const ds_model_t *model, const ds_strategy_t *base,
                                         int64_t ranks, int gpus_per_node,
                                         const int64_t *microbatch_counts, size_t num_counts,
                                         ds_strategy_t **cases_p, size_t *num_cases_p);
DS_API void ds_validate_cases_free(ds_strategy_t *cases);

/* Validates `num_cases` strategies of `model` (each resolved for the ranks
 * of `comm`) on this allocation, which `cluster` describes as the target:
 * costs measured here (or taken from options->profile_db, after profiling
 * what it lacks), then runs with the executor on `backend` (opened over
 * `comm`), compared with the simulator's prediction from every variant.
 * Collective over comm; a failure on one rank is every rank's.  Caller
 * frees *result_p with ds_validate_result_free. */
DS_API ds_status_t ds_validate(MPI_Comm comm, ds_backend_t *backend, const ds_model_t *model,
                               const ds_cluster_t *cluster, const ds_strategy_t *cases,
                               size_t num_cases, const ds_validate_options_t *options,
                               ds_validate_result_t **result_p);
/* NULL is a no-op. */
DS_API void ds_validate_result_free(ds_validate_result_t *result);

#ifdef __cplusplus
}
#endif

#endif /* DSMPI_EXEC_H */
