/*
 * dsmpi search: every valid hybrid-parallel strategy of a model on a target
 * cluster, ranked by simulated iteration time; and the plan of a training
 * run (best strategy, time to train, GPU-hours, node-hours, cost) over a list
 * of cluster sizes.
 *
 * ---- The space -------------------------------------------------------------------
 * Combinations of, in this order (the candidate index follows it):
 *   tp        1..max_tp dividing the N target devices (max_tp: devices per node)
 *   pp        1..layers with tp x pp dividing N; where pp x vpp does not
 *             divide the layers, every uneven layout whose middle stages hold
 *             the fewest layers (m = ceil(layers / pp) rounded up to a
 *             multiple of vpp) and whose two ends hold vpp..m each (the
 *             base strategy's first/last-stage layers, when given, instead)
 *   cp        1, and for sequences of at least DS_SEARCH_CP_MIN_SEQ tokens
 *             (16384) the powers of two dividing N / (tp x pp) that split the
 *             sequence into 2 cp chunks; cp > 1 only with flash (Megatron-Core
 *             needs fused attention for it); dp = N / (tp x pp x cp)
 *   mbs       powers of two up to max_mbs
 *   schedule  gpipe, 1f1b, interleaved with vpp 2 and 4 (pp > 1); pp = 1 runs
 *             1f1b only (no pipeline: the schedule changes nothing but gpipe's
 *             memory)
 *   layout    the uneven layouts of (pp, vpp) above, the first stage's
 *             layers increasing
 *   sp        off, on (tp > 1 only)
 *   recompute none, selective, full
 *   zero      0, 1, 2, 3 (dp x cp > 1 only)
 *   dp-algo   auto, ring, tree, hierarchical, ps (dp x cp > 1 only)
 *   flash     off and on with estimate_missing when the base strategy has it
 *             off; else the base strategy's (measured costs must hold the
 *             keys of what is searched); fixed values override both
 *   fp8       off and hybrid with estimate_missing when the base strategy has
 *             it off and the device has fp8 tensor cores (not the CPU); else
 *             the base strategy's; fixed values (off, hybrid, e4m3) override
 *   etp       MoE models: etp = tp and, with tp > 1, etp = 1 (the base's
 *             etp when it gives one)
 *   ep        MoE models: the divisors of the experts with which ep x etp
 *             divides dp x cp x tp; 1 for dense models
 * Everything else (gbs, bucket, overlap, clipping, placement order, ...) is
 * the base strategy's.  ds_search_fix narrows a dimension to the values
 * given, or sets a field of the base.  A combination is valid when
 * ds_strategy_resolve accepts it (heads, layers and micro-batch counts
 * divide, interleaving's micro-batch groups, zero >= 2 only without
 * pipelining, ...); a valid one is a candidate when it fits in device memory
 * by the simulator's memory model (ds_sim_estimate).
 *
 * ---- Evaluation ------------------------------------------------------------------
 * Every candidate is simulated in symmetric mode from one cost table (the
 * stage-level fast path by default: equal to the layer level) without its
 * timeline, and ranked by iteration time (ties: lower candidate index
 * first); the results shown (top K and worst) are simulated again with the
 * timeline for their bubble and exposed communication.  Branch and bound: the
 * candidates are visited in increasing order of a lower bound of their
 * iteration time (ds_sim_estimate: the busiest pipeline rank's forward and
 * backward passes); once K results are known, a candidate whose bound
 * exceeds the K-th best time cannot enter the top K and is skipped, with
 * every later one.  The top K is therefore the one an exhaustive search
 * finds.  The worst candidate is exact only when nothing was skipped;
 * otherwise it is the worst of those simulated, which include the K
 * candidates with the highest bounds.
 *
 * Equivalent variants: candidates whose simulated timelines are equal event
 * for event (ds_sim_summary_t.timeline_hash, with the same iteration time in
 * integer ns) and whose busiest device needs the same memory differ only in
 * fields that change nothing here (dp-algo ring or tree on a group inside one
 * node, ...).  They share one result: the candidate ranked first (lowest
 * index) stands for the others, which are listed in its `variants`; the top
 * K are K distinct timelines.  all_variants = 1 ranks every candidate on its
 * own instead.
 *
 * Under MPI the bounds are computed in parallel and shared, and the
 * candidates are dealt to the ranks in bound order; rank 0 merges the
 * results, which then go to every rank: the ranking does not depend on the
 * number of ranks.
 *
 * ---- Planning --------------------------------------------------------------------
 * For each cluster size N (nodes = ceil(N / G), G devices per node), with T
 * the best strategy's iteration time, B the global batch and S the sequence:
 *   tokens per iteration  B x S            (samples: B)
 *   steps                 ceil(training tokens / (B x S))   (or samples / B)
 *   tokens_per_s          B x S / T
 *   goodput               fraction of wall time that trains (below)
 *   time to train         steps x T / goodput;  days = that / 86400
 *   GPU-hours             N x days x 24
 *   node-hours            nodes x days x 24
 *   service units         node-hours x charge factor
 *   cost                  GPU-hours x price per GPU-hour x charge factor
 *   scaling efficiency    GPU-hours(smallest N) / GPU-hours(N)
 *   low, high             the same with T at the ends of its band
 *                         (ds_search_result_t.iteration_low_s, _high_s)
 *   scaling stops         at a size whose time to train is longer than that of
 *                         a size with fewer GPUs
 * Goodput (first-order checkpoint/restart model, Young/Daly): checkpoints
 * are written every tau seconds of training and take delta seconds;
 * interruptions arrive at rate lambda = N / MTBF_gpu (MTBF_gpu: mean time
 * between failures of one GPU; a 16,384-GPU job interrupted every 3 hours
 * has MTBF_gpu = 16,384 x 3 h); each interruption
 * costs the restart time R plus, on average, half a checkpoint period:
 *   goodput = tau / (tau + delta) x (1 - lambda (R + (tau + delta) / 2))
 * (1 when neither checkpoints nor failures are given; 0 means the run never
 * finishes: it fails faster than it checkpoints).
 */
#ifndef DSMPI_SEARCH_H
#define DSMPI_SEARCH_H

#include <dsmpi/cluster.h>
#include <dsmpi/comm.h>
#include <dsmpi/core.h>
#include <dsmpi/events.h>
#include <dsmpi/model.h>
#include <dsmpi/sim.h>
#include <dsmpi/strategy.h>

#include <mpi.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ds_search ds_search_t;

typedef struct ds_search_options {
    int max_tp;  /* largest tp enumerated; 0 (default): the cluster's devices per node */
    int max_mbs; /* largest micro-batch size enumerated; 0 (default): DS_SEARCH_MAX_MBS */
    int top_k;   /* results ranked (default 10) */
    ds_sim_granularity_t granularity;  /* default DS_SIM_STAGE (equal to DS_SIM_LAYER) */
    int estimate_missing;              /* costs the table lacks from the device roofline */
    const ds_comm_model_t *comm_model; /* predicts communication keys the table lacks */
    double peak_tflops;                /* > 0: the peak MFU divides by */
    int bound; /* 1 (default): skip candidates that cannot enter the top K; 0: simulate all */
    int all_variants; /* 1: equivalent variants ranked one by one; 0 (default): one result each */
} ds_search_options_t;

DS_API void ds_search_options_init(ds_search_options_t *options);

/* A search of `model` on `cluster`.  `base` (NULL: ds_strategy_init) gives
 * what the space does not vary; its gbs (0: the model's) is the global batch
 * of every candidate.  The model and the options' comm_model must outlive
 * the search; the cluster, base and options are copied.  Caller frees with
 * ds_search_destroy. */
DS_API ds_status_t ds_search_create(const ds_model_t *model, const ds_cluster_t *cluster,
                                    const ds_strategy_t *base, const ds_search_options_t *options,
                                    ds_search_t **search_p);
DS_API void ds_search_destroy(ds_search_t *search);

/* Narrows the space with strategy-grammar items ("tp=4", "schedule=1f1b",
 * "no-sp", "bucket=80M", several separated by commas).  Enumerated keys (tp
 * pp dp mbs schedule vpp sp zero recompute dp-algo) keep only the values
 * fixed; fixing a key again adds a value ("tp=2" then "tp=4": tp in {2, 4}).
 * Other keys set that field of every candidate.  Fails on items
 * ds_strategy_parse rejects. */
DS_API ds_status_t ds_search_fix(ds_search_t *search, const char *text);

/* Enumerates the space: resolves every combination and drops those that do
 * not fit in device memory.  Not collective (every rank computes the same). */
DS_API ds_status_t ds_search_enumerate(ds_search_t *search);

/* Candidates (valid and fitting), in enumeration order. */
DS_API size_t ds_search_candidate_count(const ds_search_t *search);
DS_API const ds_strategy_t *ds_search_candidate_at(const ds_search_t *search, size_t index);

/* The union of the events of every candidate (counts add): what profiling
 * the whole space needs, for the profiler to measure once.  Caller frees with
 * ds_event_set_destroy. */
DS_API ds_status_t ds_search_events(const ds_search_t *search, ds_event_set_t **set_p);

/* Simulates the candidates with `costs` (may be NULL with estimate_missing)
 * and ranks them; enumerates first if that was not done.  Collective over
 * `comm` (MPI_COMM_NULL: this process alone); the results are the same on
 * every rank.  Fails with DS_ERR_NOT_FOUND when costs are missing (the
 * message names the first), on every rank. */
DS_API ds_status_t ds_search_run(ds_search_t *search, const ds_cost_table_t *costs, MPI_Comm comm);

/* Equivalent variants a result lists by candidate index (more are counted). */
#define DS_SEARCH_MAX_VARIANTS 16

typedef struct ds_search_result {
    ds_strategy_t strategy;
    int64_t candidate;  /* index in ds_search_candidate_at */
    double iteration_s; /* ranks the results */
    /* The band of iteration_s (ds_sim_options_t.band: every cost with a
     * band, communication extrapolated and compute from the device model, at
     * the low, then the high end of it), simulated for the ranked results
     * and the worst only; equal to iteration_s when no cost has a band. */
    double iteration_low_s, iteration_high_s;
    /* The unique keys behind that band, by source (ds_sim_summary_t's
     * banded_comm_keys and banded_compute_keys); ranked results and worst. */
    int64_t band_comm_keys, band_device_model_keys;
    double samples_per_s, tokens_per_s;
    double model_tflops_per_gpu, mfu, hfu;
    double bubble_fraction;
    double comm_exposed_s;  /* mean over devices */
    double memory_GiB;      /* busiest device */
    double lower_bound_s;   /* what branch and bound used */
    double assumed_share;   /* share of the simulated time resting on assumed costs */
    uint64_t timeline_hash; /* ds_sim_summary_t.timeline_hash of its simulation */
    /* Equivalent variants it stands for (see above): how many, and the
     * candidate indices of the first DS_SEARCH_MAX_VARIANTS of them in index
     * order.  0 with all_variants. */
    int32_t num_variants;
    int64_t variants[DS_SEARCH_MAX_VARIANTS];
} ds_search_result_t;

/* What the variants of `result` change against it, as strategy items:
 * "dp-algo=ring,tree" when they differ from it in one field,
 * "zero=2+dp-algo=ring" for a variant differing in several; groups of
 * variants separated by "; ", ", and N more" when more than the stored ones.
 * "" without variants.  Truncated to `size`. */
DS_API void ds_search_variants_text(const ds_search_t *search, const ds_search_result_t *result,
                                    char *text, size_t size);

/* The ranked results (best first), at most top_k. */
DS_API size_t ds_search_result_count(const ds_search_t *search);
DS_API ds_status_t ds_search_result_at(const ds_search_t *search, size_t rank,
                                       ds_search_result_t *result_p);
/* The slowest candidate simulated (see worst_exact). */
DS_API ds_status_t ds_search_worst(const ds_search_t *search, ds_search_result_t *result_p);

typedef struct ds_search_stats {
    int64_t enumerated;    /* combinations of the space */
    int64_t invalid;       /* rejected by ds_strategy_resolve */
    int64_t out_of_memory; /* valid, but above the device memory */
    int64_t candidates;    /* valid and fitting */
    int64_t simulated;     /* fully simulated, all ranks */
    int64_t bounded;       /* skipped: their lower bound exceeds the K-th best time */
    int64_t failed;        /* the simulation failed (first message below) */
    int worst_exact;       /* the worst result is the worst of all candidates */
    int ranks;
    double enumerate_s;      /* wall time of the enumeration */
    double bound_s;          /* wall time of the lower bounds */
    double simulate_s;       /* wall time of the simulations and the merge */
    double sim_cpu_s;        /* time inside simulations, summed over ranks */
    double min_oom_GiB;      /* the smallest memory need among those out of memory */
    char first_invalid[256]; /* why the first invalid combination was rejected */
    char first_error[256];
} ds_search_stats_t;

DS_API void ds_search_get_stats(const ds_search_t *search, ds_search_stats_t *stats);

/* ---- planning ------------------------------------------------------------------- */

typedef struct ds_plan_inputs {
    double tokens;  /* tokens to train on; or 0 and samples */
    double samples; /* samples (sequences) to train on */
    int gpus_per_node;
    double price_per_gpu_hour;    /* 0: no cost */
    double charge_factor;         /* default 1 */
    double checkpoint_interval_s; /* 0: no checkpoints */
    double checkpoint_cost_s;
    double restart_s;
    double mtbf_gpu_s; /* one GPU's mean time between failures; 0: no failures */
} ds_plan_inputs_t;

/* No budget, 8 devices per node, charge factor 1, no checkpoints or failures. */
DS_API void ds_plan_inputs_init(ds_plan_inputs_t *inputs);

/* Goodput of a run on `gpus` devices (formula above), in [0, 1]. */
DS_API double ds_plan_goodput(const ds_plan_inputs_t *inputs, int64_t gpus);

typedef struct ds_plan_row {
    int64_t gpus, nodes;
    double iteration_s;
    int64_t samples_per_iteration; /* global batch */
    int64_t tokens_per_sample;     /* sequence length */
    double tokens_per_s;
    double steps;
    double goodput;
    double train_s, days;
    double gpu_hours, node_hours, service_units, cost;
    double efficiency; /* set by ds_plan_set_efficiency */
} ds_plan_row_t;

/* The arithmetic of one size.  Fails on non-positive inputs and on a goodput
 * of 0 (the message says why). */
DS_API ds_status_t ds_plan_row_compute(const ds_plan_inputs_t *inputs, int64_t gpus,
                                       double iteration_s, int64_t samples_per_iteration,
                                       int64_t tokens_per_sample, ds_plan_row_t *row_p);

/* Scaling efficiency of every row against the one with the fewest GPUs. */
DS_API void ds_plan_set_efficiency(ds_plan_row_t *rows, size_t count);

/* Scaling stops at rows[index] when a row with fewer GPUs trains in less
 * time (train_s): returns 1 and the index of the fastest such row in
 * *faster_p (written only then); 0 when every smaller row is slower. */
DS_API int ds_plan_scaling_stops(const ds_plan_row_t *rows, size_t count, size_t index,
                                 size_t *faster_p);

/* What the plan chart says besides the rows. */
typedef struct ds_plan_chart {
    const char *title; /* NULL: a generic one */
    /* Per row (count of them): the share of its predicted time resting on
     * assumed costs (ds_search_result_t.assumed_share); NULL: all measured. */
    const double *assumed_share;
    /* Per row (count of them): the row at the low and at the high end of
     * the iteration time's band, drawn as a shaded band around each series;
     * NULL: none. */
    const ds_plan_row_t *low;
    const ds_plan_row_t *high;
} ds_plan_chart_t;

/* SVG chart against GPUs (log2 axis): days to train, GPU-hours and, when
 * the rows have a cost, cost, each in its own panel from 0; the legend in a
 * band above the panels, the band of each series shaded when the chart has
 * one; under each size its scaling efficiency and, when
 * some cost is assumed, its assumed share (and "ASSUMED" under the title).
 * `chart` may be NULL.  Nothing is left at `path` on failure. */
DS_API ds_status_t ds_plan_write_svg(const ds_plan_row_t *rows, size_t count,
                                     const ds_plan_chart_t *chart, const char *path);

#ifdef __cplusplus
}
#endif

#endif /* DSMPI_SEARCH_H */
