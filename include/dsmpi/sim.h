/*
 * dsmpi sim: the hierarchical timeline simulator.  It builds the event graph
 * of a training iteration on the target (layer level: the operators of each
 * layer pass with their tensor-parallel collectives; stage level: the
 * pipeline schedule with its point-to-point transfers; model level: gradient
 * buckets, ZeRO traffic, the iteration-end collectives and the optimizer),
 * evaluates it once, and reports the metrics and the timeline.
 *
 * Semantics (Megatron-LM / Megatron-Core):
 * - One graph, one evaluation: a topological longest-path sweep over all
 *   events in integer nanoseconds.  Each stream runs its events in issue
 *   order; a collective is one node for its whole group and finishes at the
 *   same time on every member.
 * - Inside a layer pass the tensor-parallel group runs in lock step (every
 *   pass holds TP collectives), so a layer pass is one node per TP group; its
 *   duration is the sum of its compute operators (scaled by the slowest
 *   member's speed factor) plus its TP collectives.
 * - Pipeline schedules as Megatron-Core issues them: GPipe; 1F1B with
 *   min(pp - r - 1, m) warm-up forwards on pipeline rank r; interleaved 1F1B
 *   with min((pp - r - 1) * 2 + (vpp - 1) * pp, m * vpp) warm-up chunks (all
 *   of them when m == pp).  Steady-state transfers are batched
 *   (send-forward + receive-backward complete together); a transfer starts
 *   when both sender and receiver have posted it, so a send completes only
 *   after the receiver posted its receive.  P2P calls block the compute
 *   stream as Megatron's do.
 * - Data-parallel gradient buckets (Megatron default max(40M, 1M x dp)
 *   parameters) fill in reverse parameter order during the LAST
 *   micro-batch's backward, are issued when complete and run in issue order
 *   on one communicator per data-parallel group; with overlap off they run
 *   after the backward.  ZeRO-1 (distributed optimizer) reduce-scatters
 *   once and all-gathers the parameters after the step (overlapping the next
 *   forward when overlap is on); ZeRO-2 reduce-scatters after every
 *   micro-batch's backward; ZeRO-3 all-gathers each layer's parameters
 *   before its forward and backward (prefetch depth DS_SIM_ZERO3_PREFETCH)
 *   and reduce-scatters after its backward.  The parameter server pushes
 *   buckets, the servers step, the workers pull.
 * - Iteration end: data-parallel sync, the sequence-parallel norm-gradient
 *   all-reduce over TP, the tied-embedding gradient all-reduce between first
 *   and last stage, the fp16 overflow check and the gradient-norm all-reduce
 *   over the model-parallel group, the optimizer step.
 * - Two iterations are simulated; the second is reported.  The iteration
 *   time is end(iteration 2) - end(iteration 1), ends taken over all events.
 * - Symmetric mode evaluates one representative data-parallel replica per
 *   class of replicas whose groups have the same layouts (derived from the
 *   placement), and one data-parallel group per class of groups; full mode
 *   evaluates every device and is needed for per-device speed factors.  With
 *   nothing breaking the symmetry both give the same nanoseconds.
 * - The stage-level fast path fuses each forward or backward pass of a model
 *   chunk into one node wherever nothing outside the pass interacts with it
 *   (gradient buckets of the last micro-batch, ZeRO parameter gathers keep
 *   their layer nodes); its results equal the layer level's.
 *
 * Metrics (per device d, iteration 2; T = iteration time):
 *   compute_s      sum of the compute operators d runs
 *   comm_s         time d's communication streams are busy (TP, PP, DP, other)
 *   comm_exposed_s communication not overlapped by compute: TP collectives and
 *                  P2P transfers block compute; DP and ZeRO traffic is exposed
 *                  where it runs outside compute and blocking communication
 *   comm_hidden_s  comm_s - comm_exposed_s
 *   idle_s         T - compute_s - comm_exposed_s (pipeline bubble, waiting for
 *                  peers and for data)
 *   bubble_fraction   mean over devices of idle_s / T
 *   samples_per_s  = gbs / T;  tokens_per_s = gbs * seq_len / T
 *   model_tflops_per_gpu = F_model / (T * N) / 1e12, F_model = matmul FLOPs of
 *                  one iteration without recompute (all devices)
 *   MFU            = model_tflops_per_gpu / peak_tflops
 *   HFU            = F_hw / (T * N) / 1e12 / peak_tflops, F_hw = matmul FLOPs
 *                  including recompute
 *   peak_tflops    dense bf16/fp16 tensor peak of the device (fp32 peak for
 *                  fp32 training), or the caller's value.
 */
#ifndef DSMPI_SIM_H
#define DSMPI_SIM_H

#include <dsmpi/cluster.h>
#include <dsmpi/comm.h>
#include <dsmpi/core.h>
#include <dsmpi/events.h>
#include <dsmpi/model.h>
#include <dsmpi/strategy.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ds_sim ds_sim_t;

typedef enum ds_sim_mode {
    DS_SIM_SYMMETRIC = 0, /* one representative per role class (search uses it) */
    DS_SIM_FULL = 1,      /* every device: speed factors, stragglers */
} ds_sim_mode_t;

typedef enum ds_sim_granularity {
    DS_SIM_LAYER = 0, /* one node per layer pass and TP group */
    DS_SIM_STAGE = 1, /* fast path: one node per chunk pass where exact */
} ds_sim_granularity_t;

/* A device running slower (factor > 1) or faster (< 1) than its peers:
 * its compute operators take factor x their cost. */
typedef struct ds_sim_slow_device {
    int64_t rank;
    double factor;
} ds_sim_slow_device_t;

/* Which end of the band (communication extrapolated, compute from the device
 * model) a run takes. */
typedef enum ds_sim_band {
    DS_SIM_BAND_EXPECTED = 0, /* every cost as the table or the model gives it */
    DS_SIM_BAND_LOW = 1,      /* each cost with a band times its band's low multiple */
    DS_SIM_BAND_HIGH = 2,     /* ... times its high multiple */
} ds_sim_band_t;

typedef struct ds_sim_options {
    ds_sim_mode_t mode;
    ds_sim_granularity_t granularity;
    int estimate_missing; /* fill costs the table lacks: compute from the device model
                             ("modelled"), communication from the cluster's links ("assumed") */
    const ds_sim_slow_device_t *slow_devices; /* full mode only */
    size_t num_slow_devices;
    double peak_tflops; /* > 0: the peak MFU and HFU divide by (default: the device's) */
    /* 1 (default): per-device numbers, micro-batch timings, the critical
     * path and event queries.  0 (search): the summary's iteration time,
     * throughput, FLOP rates and memory only; per-device means, the bubble
     * and the device, micro-batch, critical-path and event queries are left
     * empty. */
    int keep_timeline;
    /* Communication keys the cost table lacks are predicted by this model
     * (provenance of its prediction) before estimate_missing applies; NULL
     * (default): none.  Used only during ds_sim_run and ds_sim_estimate. */
    const ds_comm_model_t *comm_model;
    /* 1 (default): a data-parallel bucket issued during the backward also
     * costs its members' compute stream the time its key with
     * DS_COMM_FLAG_OVERLAPPED has in the cost table (the interference the
     * profile measured: on the cpu backend the collective progresses only
     * inside calls on the computing core); 0, or no such cost: the overlap
     * is free. */
    int overlap_interference;
    /* 1 (default): a data-parallel bucket issued during the backward shares
     * its members' network interfaces with the transfers inside the layer
     * passes that leave the node after it (a context-parallel ring, an
     * expert all-to-all or a tensor-parallel collective across nodes): the
     * bucket's stream carries their time too, so the gradient reduction
     * ends that much later.  0: the two do not meet. */
    int nic_sharing;
    /* 1 (default): a tensor-parallel collective inside a layer pass starts
     * when the slowest of its N members arrives: the members' compute since
     * the previous collective varies (the spread p10..p90 of the operators'
     * costs, taken as independent normals), and the wait E[max of N] x sigma
     * is counted as idle time inside the pass.  0: members arrive together. */
    int collective_skew;
    /* DS_SIM_BAND_EXPECTED (default); LOW or HIGH: every cost with a band
     * is taken at that end of it (ds_cost_table_band for a cost of the
     * table, ds_comm_prediction_band for one comm_model predicts,
     * ds_model_class_band for compute estimate_missing prices), so that a
     * run per end gives the iteration time's band with overlap and the
     * critical path simulated, not scaled.  A cost without a band (measured,
     * communication inside the measured node counts) is the same in the
     * three runs. */
    ds_sim_band_t band;
    /* 1 (default): the summary's timeline_hash; 0: left 0 in the summary,
     * computed only when ds_sim_timeline_hash asks (a search needs it for
     * few of its candidates). */
    int hash_timeline;
} ds_sim_options_t;

/* Defaults: symmetric, layer level, no estimates, keep the timeline,
 * overlap interference where measured, collective skew, the timeline hash. */
DS_API void ds_sim_options_init(ds_sim_options_t *options);

/* A simulator.  Its memory (an arena of node and edge arrays) is reused by
 * every ds_sim_run on it; results stay valid until the next run.  Caller
 * frees with ds_sim_destroy.  Not thread-safe: one simulator per thread. */
DS_API ds_status_t ds_sim_create(ds_sim_t **sim_p);
DS_API void ds_sim_destroy(ds_sim_t *sim);

/* Builds and evaluates the iteration of `model` under `strategy` (resolved
 * with ds_strategy_resolve for `cluster`) with every event's cost taken from
 * `costs` (cost.mean_s).  Fails with DS_ERR_NOT_FOUND when costs are missing
 * and options->estimate_missing is off (ds_sim_missing_count/at list them),
 * DS_ERR_DEADLOCK when the schedule's events wait on each other in a cycle
 * (the message names the devices, events and schedule positions), and
 * DS_ERR_INVALID_ARG for speed factors in symmetric mode.  The model, the
 * cluster and the cost table are not kept. */
DS_API ds_status_t ds_sim_run(ds_sim_t *sim, const ds_model_t *model, const ds_strategy_t *strategy,
                              const ds_cluster_t *cluster, const ds_cost_table_t *costs,
                              const ds_sim_options_t *options);

/* Event keys the last run needed and the cost table lacked (unique, first
 * seen first), with their kind of work for the message that profiles them. */
DS_API size_t ds_sim_missing_count(const ds_sim_t *sim);
DS_API const ds_event_key_t *ds_sim_missing_at(const ds_sim_t *sim, size_t index);

/* Event keys the last run looked up (unique), with the provenance of the
 * cost it used (DS_PROV_MODELLED for compute from the device model,
 * DS_PROV_ASSUMED for communication from the cluster's links). */
DS_API size_t ds_sim_key_count(const ds_sim_t *sim);
DS_API const ds_event_key_t *ds_sim_key_at(const ds_sim_t *sim, size_t index,
                                           ds_provenance_t *provenance_p, double *seconds_p);

/* ---- results -------------------------------------------------------------------------- */

/* What the time of the iteration is spent on (critical path, events). */
typedef enum ds_sim_category {
    DS_SIM_CAT_FORWARD = 0,   /* forward compute of layers, embedding and head */
    DS_SIM_CAT_BACKWARD = 1,  /* backward compute, recompute included */
    DS_SIM_CAT_OPTIMIZER = 2, /* optimizer step */
    DS_SIM_CAT_TP = 3,        /* tensor-parallel collectives */
    DS_SIM_CAT_PP = 4,        /* pipeline point-to-point transfers */
    DS_SIM_CAT_DP = 5,        /* data-parallel gradient sync, ZeRO, parameter server */
    DS_SIM_CAT_OTHER = 6,     /* embedding, gradient-norm and overflow collectives */
    DS_SIM_CAT_WAIT = 7,      /* nothing ran on the path (start-up, gaps) */
    DS_SIM_CAT_COUNT_
} ds_sim_category_t;

/* "forward", "backward", "optimizer", "tp-comm", "pp-p2p", "dp-comm",
 * "other-comm", "wait". */
DS_API const char *ds_sim_category_name(ds_sim_category_t category);

typedef struct ds_sim_summary {
    ds_sim_mode_t mode;
    ds_sim_granularity_t granularity;
    int64_t num_devices;       /* target devices */
    int64_t simulated_devices; /* devices with their own timeline */
    int64_t microbatches;
    double iteration_s;
    double samples_per_s;
    double tokens_per_s;
    double model_flops;    /* per iteration, all devices, recompute excluded */
    double hardware_flops; /* recompute included */
    double model_tflops_per_gpu;
    double hardware_tflops_per_gpu;
    double peak_tflops;
    double mfu;
    double hfu;
    double bubble_fraction;
    /* Means over all target devices, seconds per iteration. */
    double compute_s, comm_s, comm_exposed_s, comm_hidden_s, idle_s;
    /* Share of the events' simulated time that rests on assumed costs, and
     * of the critical path (costs not measured: assumed and modelled). */
    double assumed_share;
    double critical_assumed_share;
    int64_t assumed_keys;  /* unique keys whose cost is assumed or modelled */
    int64_t modelled_keys; /* of those, compute priced by the device model */
    /* Unique keys whose cost has a band (not 1, 1): communication
     * extrapolated beyond the node counts measured, and compute priced by
     * the device model (ds_model_class_band). */
    int64_t banded_comm_keys, banded_compute_keys;
    int64_t graph_nodes, graph_edges;
    double build_s, evaluate_s; /* wall time of the last run */
    double peak_memory_GiB;     /* largest total over devices */
    int oom;                    /* some device exceeds its memory */
    /* Hash of the simulated timeline: every event's kind, place (lane or
     * group, micro-batch, chunk, layers), start and duration in integer ns,
     * independent of the order the events were built in.  Equal for two runs
     * whose timelines are equal event for event (with or without
     * keep_timeline). */
    uint64_t timeline_hash;
} ds_sim_summary_t;

DS_API void ds_sim_get_summary(const ds_sim_t *sim, ds_sim_summary_t *summary);
/* The timeline hash of the last run (ds_sim_summary_t.timeline_hash), also
 * when it ran with hash_timeline 0; 0 when it failed. */
DS_API uint64_t ds_sim_timeline_hash(ds_sim_t *sim);

/* Memory of one device (bytes). */
typedef struct ds_sim_memory {
    double weights_B;
    double grads_B;
    double optimizer_B;     /* fp32 master copy and Adam moments, ZeRO-sharded */
    double activations_B;   /* stored for the in-flight micro-batches at the peak */
    double comm_buffers_B;  /* communication library and pipeline buffers */
    double context_B;       /* device context and library workspaces */
    double fragmentation_B; /* allocator margin */
    double total_B;
    double device_B;
    int inflight; /* peak in-flight (chunk, micro-batch) passes */
    int oom;
} ds_sim_memory_t;

typedef struct ds_sim_device {
    int64_t rank;
    int64_t node;
    ds_coords_t coords;
    int64_t represents; /* target devices with this timeline (symmetric mode) */
    double speed_factor;
    double compute_s, comm_s, comm_exposed_s, comm_hidden_s, idle_s;
    double tp_s, pp_s, dp_s, other_s; /* busy time per kind of communication */
    double assumed_share;
    ds_sim_memory_t memory;
} ds_sim_device_t;

/* Devices with their own timeline: every device in full mode, the
 * representatives in symmetric mode. */
DS_API size_t ds_sim_device_count(const ds_sim_t *sim);
DS_API ds_status_t ds_sim_device_at(const ds_sim_t *sim, size_t index, ds_sim_device_t *device_p);
/* Any target rank (symmetric mode: its representative's numbers under its
 * own rank). */
DS_API ds_status_t ds_sim_device_of_rank(const ds_sim_t *sim, int64_t rank,
                                         ds_sim_device_t *device_p);

/* Forward and backward start/end of every (stage, chunk, micro-batch) of
 * data-parallel replica 0, seconds from the start of the reported
 * iteration. */
typedef struct ds_sim_microbatch {
    int stage, chunk, microbatch;
    double fwd_start_s, fwd_end_s, bwd_start_s, bwd_end_s;
} ds_sim_microbatch_t;

DS_API size_t ds_sim_microbatch_count(const ds_sim_t *sim);
DS_API ds_status_t ds_sim_microbatch_at(const ds_sim_t *sim, size_t index,
                                        ds_sim_microbatch_t *mb_p);

/* The critical path of the reported iteration: walking back from its last
 * event through the dependency that decided each start, the time per
 * category and the number of events on it. */
typedef struct ds_sim_critical {
    double seconds[DS_SIM_CAT_COUNT_];
    int64_t events;
    int64_t devices_crossed; /* changes of device (or group) along the path */
    char ends_with[96];      /* the last event of the iteration */
} ds_sim_critical_t;

DS_API void ds_sim_get_critical_path(const ds_sim_t *sim, ds_sim_critical_t *critical);

/* ---- events of one device ------------------------------------------------------------- */

typedef enum ds_sim_stream {
    DS_SIM_STREAM_COMPUTE = 0, /* layer passes (TP collectives inside), optimizer */
    DS_SIM_STREAM_TP = 1,      /* TP collectives outside layer passes (SP norm gradients) */
    DS_SIM_STREAM_PP = 2,      /* pipeline send/receive calls */
    DS_SIM_STREAM_DP = 3,      /* data-parallel and ZeRO traffic */
    DS_SIM_STREAM_OTHER = 4,   /* embedding, gradient-norm and overflow collectives */
    DS_SIM_STREAM_COUNT_
} ds_sim_stream_t;

DS_API const char *ds_sim_stream_name(ds_sim_stream_t stream);

typedef struct ds_sim_event {
    int64_t id; /* stable within a run */
    ds_sim_stream_t stream;
    ds_sim_category_t category;
    int iteration; /* 1 or 2 */
    int stage, chunk;
    int microbatch; /* -1 when not per micro-batch */
    int layer;      /* first layer of the node, -1 embedding, -2 head, -3 none */
    int num_layers; /* layers the node covers (stage level: the chunk) */
    int bucket;     /* DP bucket or ZeRO layer part, -1 otherwise */
    int64_t start_ns, end_ns;
    int64_t compute_ns; /* compute part of a layer node (the rest is TP) */
    int assumed;        /* some cost behind it is assumed */
    const char *name;   /* static: "fwd", "bwd", "optimizer", "p2p", "dp.grad-allreduce", ... */
} ds_sim_event_t;

/* Events of `rank` (any target rank), both iterations, sorted by stream and
 * start.  Requires keep_timeline.  The array is owned by the simulator and
 * valid until the next call of this function or run. */
DS_API ds_status_t ds_sim_device_events(ds_sim_t *sim, int64_t rank,
                                        const ds_sim_event_t **events_p, size_t *count_p);

/* ---- estimates without a run ------------------------------------------------------------ */

typedef struct ds_sim_estimate {
    ds_sim_memory_t memory; /* the device with the largest total (ds_sim_run's peak_memory_GiB) */
    int memory_stage;       /* its pipeline stage */
    int oom;                /* some device exceeds its memory (ds_sim_run's oom) */
    double lower_bound_s;   /* ds_sim_run's iteration_s is at least this; 0 without costs */
} ds_sim_estimate_t;

/* What a search needs before simulating a candidate, without building the
 * iteration (microseconds instead of milliseconds):
 * - the memory of every pipeline stage from the model ds_sim_run uses
 *   (equal to the run's peak_memory_GiB and oom);
 * - when `costs` is given (or options->estimate_missing or comm_model), a
 *   lower bound of the iteration time: m x (F + B) of the busiest pipeline
 *   rank, F and B the forward and backward passes of one micro-batch through
 *   all its chunks (TP collectives included).  The bubble, transfers,
 *   data-parallel traffic and the optimizer step are left out.
 * Costs are looked up as ds_sim_run does.  Fails like ds_sim_run on
 * unresolved strategies and missing costs.  Invalidates the results of the
 * last run (the simulator's memory is reused). */
DS_API ds_status_t ds_sim_estimate(ds_sim_t *sim, const ds_model_t *model,
                                   const ds_strategy_t *strategy, const ds_cluster_t *cluster,
                                   const ds_cost_table_t *costs, const ds_sim_options_t *options,
                                   ds_sim_estimate_t *estimate_p);

/* ---- exports ---------------------------------------------------------------------------
 * Times are relative to the first event of the reported iteration. */

/* Perfetto / Chrome trace JSON of the reported iteration: one process per
 * node, one track (thread) per device and stream; events on one track never
 * overlap.  `ranks` selects devices (NULL: the ranks of data-parallel
 * replica 0); `detail_ranks` get one event per operator instead of per layer
 * pass (TP collectives on their own track). */
DS_API ds_status_t ds_sim_write_trace(ds_sim_t *sim, const char *path, const int64_t *ranks,
                                      size_t num_ranks, const int64_t *detail_ranks,
                                      size_t num_detail);

/* HDF5 timeline: group /devices with one group per simulated device
 * ("rank_%06d", attribute "represents") holding equal-length datasets
 * event_id (uint32), kind (uint8, ds_sim_category_t), stream (uint8),
 * microbatch (int32), start_ns and end_ns (int64), assumed (uint8: a cost
 * behind the event is assumed); attributes of the root give the iteration,
 * the category names, the strategy and the assumed share. */
DS_API ds_status_t ds_sim_write_timeline(ds_sim_t *sim, const char *path);

/* SVG Gantt chart of the reported iteration: one row per distinct timeline
 * of the devices of replica 0 (`ranks` overrides): devices whose events have
 * the same kind, stream, start and end share a row labelled with their ranks
 * ("ranks 0-7  pp0").  When replica 0 has more distinct timelines than
 * `max_rows` and than stages, one row per stage (tp rank 0).  Colours per
 * category, idle pale grey; the legend names only the kinds drawn; the title
 * gives the share of the event time resting on assumed costs, if any. */
DS_API ds_status_t ds_sim_write_svg(ds_sim_t *sim, const char *path, const int64_t *ranks,
                                    size_t num_ranks, int max_rows);

#ifdef __cplusplus
}
#endif

#endif /* DSMPI_SIM_H */
