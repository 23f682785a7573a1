/*
 * dsmpi framework: costs from the framework users train with.  Reads the
 * traces torch.profiler writes and turns them into event costs, and scales
 * dsmpi's own measurements to the framework where a trace lacks a key.
 *
 * Two trace formats are read:
 *   - the Kineto Chrome trace: a JSON object whose "traceEvents" array holds
 *     "X" events ("cpu_op" with args "Input Dims", "user_annotation",
 *     "kernel" with args "correlation"), as CUDA builds of PyTorch write it;
 *   - the legacy autograd-profiler trace: a JSON array of "X" events without
 *     shapes, as builds without Kineto write it (Debian's python3-torch).
 * Times are microseconds in both.  Iterations are the ranges whose name
 * starts with "ProfilerStep#" (the profiler's schedule writes them; with the
 * legacy profiler wrap each iteration in record_function("ProfilerStep#N")).
 * Layer passes are the record_function ranges named
 *   "layer:N:fwd", "layer:N:bwd"        transformer layer N (global index)
 *   "embedding:fwd", "embedding:bwd"    the embedding
 *   "head:fwd", "head:bwd"              final norm, logits and loss
 * and the optimizer step is the range "Optimizer.step#..." that
 * torch.optim writes itself.  With with_stack=True the Python tracer's
 * "nn.Module: CLASS_N" events of a transformer-layer class (Megatron-Core's
 * TransformerLayer, GPT2Block, ...DecoderLayer; the innermost when they nest)
 * are forward passes of layer N of the traced stage (N counts the stage's
 * layers), and the backward pass of each runs from the first to the last
 * autograd function ("autograd::engine::evaluate_function: ...") whose
 * "Sequence number" is one of its forward operators'.
 *
 * Mapping.  The operators inside a layer-pass range (the outermost ones
 * that name a known kind: aten::mm/addmm = GEMM, aten::bmm/baddbmm =
 * batched GEMM, softmax, layer_norm, gelu, dropout, add, embedding,
 * cross-entropy, and their backward operators) are aligned with the known
 * model's operator sequence of that pass (longest common subsequence by
 * kind), so traces without shapes map as well as traces with them.  An
 * operator's cost is its own duration; the rest of the range outside the
 * collectives (the framework's time between operators, and operators the
 * model has no event for: views, copies) is the pass's framework gap, a key
 * of its own (DS_OP_FRAMEWORK_GAP: the pass, the model's compute operators
 * in it, embedding / layer / head).  The gap does not shrink when tensor
 * parallelism splits the operators' shapes, so the simulator adds it to
 * every pass with that key, whatever the split; the operators and the gap
 * add up to the range, as dsmpi's own layer passes do (METHOD section 3).
 * Costs are the mean over every occurrence (layers, micro-batches,
 * iterations) of a key; provenance "framework".
 * Time of an iteration outside every mapped range is listed by operator
 * name with its share.
 *
 * Shapes.  A matched GEMM operator with "Input Dims" (record_shapes) must
 * agree with the model's key: the same k and batch, m and n in either order;
 * GEMMs of one kind matched in a row are re-paired by shape where torch
 * issues them in another order than the model lists them.  Otherwise mapping
 * fails with DS_ERR_INVALID_ARG naming the pass, the model's key and the
 * traced shape: the trace is not of `model` under `strategy`.
 *
 * GPU traces.  Kineto writes the device's work as "kernel", "gpu_memcpy" and
 * "gpu_memset" events on the device's streams, and the runtime calls that
 * launched them ("cuda_runtime" cudaLaunchKernel, cudaMemcpyAsync, ...;
 * "cuda_driver" cuLaunchKernel) on the CPU thread inside the operator that
 * made them; both carry args "correlation", the CUPTI id linking the two.
 * When a trace holds such linked work, costs are device time, not the CPU
 * operators' durations: an operator's cost is the duration of the work
 * launched inside it (its children's included), and the pass's gap is the
 * rest of its device time from its first work to its last, less the
 * collectives' device time: the device's idle time between kernels, while
 * the framework on the CPU is still launching them, and the work of
 * operators of no known kind, as the CPU time between operators is on a CPU
 * trace.  A pass's costs add up to its device time (device_gap_s counts the
 * gaps; kernel_other_s the other operators' work in them).  The optimizer
 * step's cost is its range's device time, from its first work to its last.
 */
#ifndef DSMPI_FRAMEWORK_H
#define DSMPI_FRAMEWORK_H

#include <dsmpi/core.h>
#include <dsmpi/events.h>
#include <dsmpi/model.h>
#include <dsmpi/strategy.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ds_torch_trace_format {
    DS_TORCH_TRACE_KINETO = 0, /* object with "traceEvents" */
    DS_TORCH_TRACE_LEGACY = 1, /* array of "X" events (autograd profiler without Kineto) */
} ds_torch_trace_format_t;

typedef struct ds_torch_trace ds_torch_trace_t;

/* Reads a trace of at most DS_MAX_TRACE_BYTES, plain JSON or gzip-compressed
 * (the .json.gz torch.profiler writes when asked; recognised by its magic
 * bytes, inflated to at most DS_MAX_TRACE_BYTES).  A file that is not JSON,
 * truncated, a corrupt or truncated gzip file, not a trace in either format,
 * or without an iteration is DS_ERR_BAD_FILE with a one-line message naming
 * the file.  Caller frees with ds_torch_trace_destroy. */
DS_API ds_status_t ds_torch_trace_load(const char *path, ds_torch_trace_t **trace_p);
/* The same from text (or gzip data) in memory; `origin` names it in messages. */
DS_API ds_status_t ds_torch_trace_parse(const char *text, size_t size, const char *origin,
                                        ds_torch_trace_t **trace_p);
/* NULL is a no-op. */
DS_API void ds_torch_trace_destroy(ds_torch_trace_t *trace);

typedef struct ds_torch_trace_info {
    ds_torch_trace_format_t format;
    size_t events;         /* complete ("X") events read */
    size_t with_shapes;    /* of them, operators with input shapes */
    size_t kernels;        /* device work: "kernel", "gpu_memcpy", "gpu_memset" events */
    size_t kernels_linked; /* of them, linked to the runtime call that launched them */
    size_t ranges;         /* layer-pass and optimizer ranges */
    int iterations;
    double iteration_mean_s;
    double iteration_median_s;
    double iteration_min_s;
    double iteration_max_s;
} ds_torch_trace_info_t;

DS_API void ds_torch_trace_get_info(const ds_torch_trace_t *trace, ds_torch_trace_info_t *info);
/* Duration of iteration `index` (0 .. iterations-1) in seconds, in trace order. */
DS_API double ds_torch_trace_iteration_s(const ds_torch_trace_t *trace, int index);

/* The profiler's own time.  A profiler on the CPU spends time inside the
 * operators it times (on every event it records, and more when processes
 * share the cores), so a CPU trace's iterations run longer than the same
 * job's without it, the operators' costs with them.  Given that job's
 * iteration time without the profiler (the median, `unprofiled_s`),
 * ds_torch_trace_map scales each cost of a CPU trace by unprofiled_s / the
 * traced median, so that they add up as the job runs; device-timed costs (GPU
 * traces) are left as they are.  DS_ERR_INVALID_ARG for a value that is not
 * a positive finite number; *scale_p (may be NULL) gets the factor. */
DS_API ds_status_t ds_torch_trace_set_unprofiled_s(ds_torch_trace_t *trace, double unprofiled_s,
                                                   double *scale_p);

/* The collectives a trace records with their sizes: torch.distributed's
 * `record_param_comms` events (args "Collective name", "In msg nelems",
 * "Out msg nelems", "Group size", "dtype"), which PyTorch 2 writes for every
 * backend; grouped by primitive, element type, size and group size.
 * Collectives without those args (gloo:/nccl: names alone, the legacy
 * profiler) are not listed. */
typedef struct ds_torch_collective {
    ds_comm_op_t op;
    int dtype;     /* ds_dtype_t, or -1 for another element type */
    int64_t bytes; /* the nccl-tests size: the larger of the input and output buffers
                      (all-gather's output, reduce-scatter's input) */
    int32_t ranks; /* the group's size */
    size_t count;  /* occurrences inside the traced iterations */
    /* One occurrence: on a GPU trace the device time of the work it
     * launched; otherwise from its start until the last collective event
     * starting inside it ends (gloo runs it on a thread of its own). */
    double median_s, min_s, max_s;
} ds_torch_collective_t;

/* The trace's collectives, sorted by primitive, group size and size;
 * *list_p NULL when none.  Free with ds_torch_collectives_free. */
DS_API ds_status_t ds_torch_trace_collectives(const ds_torch_trace_t *trace,
                                              ds_torch_collective_t **list_p, size_t *count_p);
DS_API void ds_torch_collectives_free(ds_torch_collective_t *list);

/* Time of the traced iterations that no layer pass or optimizer range maps,
 * by operator name (the outermost operators outside the ranges; the name
 * "(idle)" holds time without any operator). */
typedef struct ds_framework_unmapped {
    char name[96];
    double seconds; /* summed over the iterations */
    double share;   /* of the traced iterations' time */
} ds_framework_unmapped_t;

#define DS_FRAMEWORK_MAX_UNMAPPED 16

typedef struct ds_framework_result {
    size_t keys;                /* event costs set */
    size_t occurrences;         /* matched operator occurrences behind them */
    size_t ranges_mapped;       /* ranges aligned with the model */
    size_t ranges_skipped;      /* ranges naming a layer the model lacks, or with no operator */
    size_t model_ops_unmatched; /* model operators of a mapped pass no trace operator matched */
    size_t shapes_checked;      /* matched GEMMs whose traced "Input Dims" were compared */
    double traced_s;            /* the iterations' time */
    double mapped_s;            /* of it, inside mapped ranges */
    double between_s;           /* of the mapped time, between the matched operators */
    double collective_s;        /* of the mapped time, in collectives (left out of compute) */
    double coverage;            /* mapped_s / traced_s */
    bool device_timed;          /* costs are device time (kernels_linked > 0), not CPU time */
    double kernel_s;            /* device time: of the matched operators and optimizer steps */
    double kernel_other_s;      /* device time launched in mapped passes by other operators */
    double device_gap_s;        /* device time charged beyond the operators' own work: idle
                                   time between kernels (and other operators' work) */
    double unprofiled_scale;    /* CPU costs' factor (ds_torch_trace_set_unprofiled_s; 0: none) */
    double profiler_removed_s;  /* taken off the costs' occurrences by it, in all */
    size_t num_unmapped;        /* largest first, at most DS_FRAMEWORK_MAX_UNMAPPED */
    ds_framework_unmapped_t unmapped[DS_FRAMEWORK_MAX_UNMAPPED];
} ds_framework_result_t;

/* Coverage under which an import warns. */
#define DS_FRAMEWORK_MIN_COVERAGE 0.90

/* Maps the trace onto `model` run with `strategy` (resolved: the traced
 * run's own, whose shapes the trace holds) on pipeline stage `stage`, and
 * sets the costs it finds in `costs` with provenance DS_PROV_FRAMEWORK.
 * DS_ERR_INVALID_ARG when the trace's GEMM shapes disagree with the model's
 * (`costs` is then left without this trace's costs). */
DS_API ds_status_t ds_torch_trace_map(const ds_torch_trace_t *trace, const ds_model_t *model,
                                      const ds_strategy_t *strategy, int stage,
                                      ds_cost_table_t *costs, ds_framework_result_t *result);

/* Parts of an iteration a trace times as ranges. */
typedef enum ds_framework_part {
    DS_FRAMEWORK_LAYER_FORWARD = 0,
    DS_FRAMEWORK_LAYER_BACKWARD = 1,
    DS_FRAMEWORK_EMBEDDING_FORWARD = 2,
    DS_FRAMEWORK_EMBEDDING_BACKWARD = 3,
    DS_FRAMEWORK_HEAD_FORWARD = 4,
    DS_FRAMEWORK_HEAD_BACKWARD = 5,
    DS_FRAMEWORK_OPTIMIZER = 6,
    DS_FRAMEWORK_PART_COUNT_
} ds_framework_part_t;

DS_API const char *ds_framework_part_name(ds_framework_part_t part);

/* The ranges of `part` inside the trace's iterations: their number and mean
 * duration in seconds (0 and 0 when none); on a GPU trace (device work linked
 * to its launches) the mean device time of the work launched inside them. */
DS_API void ds_torch_trace_part_time(const ds_torch_trace_t *trace, ds_framework_part_t part,
                                     size_t *count_p, double *mean_s_p);

/* What `costs` make of one pass of `part` of `model` under `strategy` (the
 * mean over its layers for a transformer layer; the optimizer of `stage`):
 * the sum of its compute operators' mean costs.  *missing_p (may be NULL)
 * gets the number of its compute keys `costs` lacks. */
DS_API ds_status_t ds_framework_part_seconds(const ds_model_t *model, const ds_strategy_t *strategy,
                                             int stage, const ds_cost_table_t *costs,
                                             ds_framework_part_t part, double *seconds_p,
                                             size_t *missing_p);

/* Operator classes the calibration ratio is kept for. */
typedef enum ds_framework_class {
    DS_FRAMEWORK_CLASS_GEMM = 0, /* gemm, batched gemm, fused attention */
    DS_FRAMEWORK_CLASS_NORM = 1,
    DS_FRAMEWORK_CLASS_ELEMENTWISE = 2, /* activations, dropout, add, rope, softmax */
    DS_FRAMEWORK_CLASS_EMBEDDING = 3,   /* embedding and cross-entropy */
    DS_FRAMEWORK_CLASS_OPTIMIZER = 4,
    DS_FRAMEWORK_CLASS_COUNT_
} ds_framework_class_t;

DS_API ds_framework_class_t ds_framework_class_of(const ds_event_key_t *key);
DS_API const char *ds_framework_class_name(ds_framework_class_t cls);

typedef struct ds_framework_calibration {
    double ratio[DS_FRAMEWORK_CLASS_COUNT_]; /* median framework / own over common keys (0: none) */
    size_t common[DS_FRAMEWORK_CLASS_COUNT_];
    double overall;     /* over every common key (0: none) */
    size_t calibrated;  /* costs added */
    size_t by_operator; /* of them, scaled from keys of their own operator (else the class) */
} ds_framework_calibration_t;

/* For every compute key of `own` (dsmpi's measurements) that `framework`
 * lacks, sets in `out` the own cost times the framework-to-own ratio of its
 * class: the median over the keys of that class both hold of framework mean /
 * own mean (a median, so that one pathological key of either side does not
 * set the scale of its whole class); the median over every class where its
 * class has no common key.  Provenance DS_PROV_CALIBRATED.  Without a common
 * key nothing is added. */
DS_API ds_status_t ds_framework_calibrate(const ds_cost_table_t *framework,
                                          const ds_cost_table_t *own, ds_cost_table_t *out,
                                          ds_framework_calibration_t *calibration);

#ifdef __cplusplus
}
#endif

#endif /* DSMPI_FRAMEWORK_H */
