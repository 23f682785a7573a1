/* Private to the framework module: a trace's events after reading. */
#ifndef DSI_FRAMEWORK_H
#define DSI_FRAMEWORK_H

#include <dsmpi/framework.h>

#include "dsi_core.h"
#include "dsi_json.h"

/* What an event is for the mapping. */
typedef enum dsi_trace_role {
    DSI_ROLE_OTHER = 0,  /* an operator or annotation of no known kind */
    DSI_ROLE_OP = 1,     /* an operator of a known kind (dsi_trace_event_t.op) */
    DSI_ROLE_STEP = 2,   /* ProfilerStep#N */
    DSI_ROLE_RANGE = 3,  /* a layer-pass range or the optimizer step */
    DSI_ROLE_KERNEL = 4, /* device work: "kernel", "gpu_memcpy", "gpu_memset" */
    DSI_ROLE_LAUNCH = 5, /* "cuda_runtime" / "cuda_driver" call with args "correlation" */
} dsi_trace_role_t;

/* Parts a range names. */
#define DSI_RANGE_OPTIMIZER (-3)

/* A GEMM operator's shape read from its "Input Dims": C[m,n] = A[m,k] B[k,n]
 * (batch 0 for a plain GEMM). */
typedef struct dsi_trace_gemm {
    int64_t m, n, k, batch;
} dsi_trace_gemm_t;

/* A collective's sizes from its args (torch.distributed's
 * record_param_comms: "Collective name", "In/Out msg nelems", "Group size",
 * "dtype"). */
typedef struct dsi_trace_collective {
    uint8_t op;    /* ds_comm_op_t */
    uint8_t dtype; /* ds_dtype_t, DSI_TRACE_DTYPE_OTHER for types dsmpi has no name for */
    int32_t ranks;
    int64_t bytes; /* the nccl-tests size: the larger of the input and the output buffer */
} dsi_trace_collective_t;

#define DSI_TRACE_DTYPE_OTHER 255

typedef struct dsi_trace_event {
    uint32_t name;  /* offset in the trace's name pool */
    int64_t thread; /* pid and tid folded */
    double start_us;
    double end_us;
    uint8_t role;        /* dsi_trace_role_t */
    uint8_t op;          /* ds_op_t for DSI_ROLE_OP, 255 for a collective */
    uint8_t pass;        /* ranges: ds_pass_t */
    uint8_t shapes;      /* operator with input shapes */
    int32_t layer;       /* ranges: layer index, DSI_PART_* (-1 embedding, -2 head), or optimizer */
    uint32_t gemm_shape; /* GEMM operators with "Input Dims": 1 + index in gemm_shapes, or 0 */
    uint8_t module;      /* ranges: a layer named by its nn.Module, numbered in its stage */
    uint8_t backward_node; /* an autograd function ("autograd::engine::evaluate_function: ") */
    int64_t sequence;      /* args "Sequence number" (autograd's, forward op to backward), or -1 */
    int64_t correlation;   /* launches and device work: args "correlation" (0: none) */
    double device_us;      /* launches: the duration of the device work they launched */
    double device_start_us, device_end_us; /* launches with device_us > 0: that work's span */
    uint32_t collective; /* collectives with sizes: 1 + index in collectives, or 0 */
} dsi_trace_event_t;

#define DSI_TRACE_COLLECTIVE 255

struct ds_torch_trace {
    ds_torch_trace_format_t format;
    dsi_trace_event_t *events; /* sorted by thread, start, longest first */
    size_t count;
    char *names;
    size_t names_used, names_size;
    dsi_trace_gemm_t *gemm_shapes; /* in reading order; events refer to them */
    size_t num_gemm_shapes, gemm_shapes_capacity;
    dsi_trace_collective_t *collectives; /* in reading order; events refer to them */
    size_t num_collectives, collectives_capacity;
    char *origin; /* the file (or the name given to ds_torch_trace_parse) */
    size_t with_shapes, kernels, ranges;
    size_t kernels_linked; /* device work whose launch is in the trace (correlation ids) */
    double *iterations_s;  /* trace order */
    int num_iterations;
    double unprofiled_scale; /* CPU costs' factor to the run without the profiler (0: none) */
};

static inline const char *dsi_trace_name(const ds_torch_trace_t *t, const dsi_trace_event_t *e)
{
    return t->names + e->name;
}

/* Time spans of one kind of event sorted by start (trace.c). */
typedef struct dsi_spans {
    double *start, *end;
    size_t count;
} dsi_spans_t;

/* The spans of the events of `role` (for DSI_ROLE_OP, those of `op`). */
ds_status_t dsi_trace_spans(const ds_torch_trace_t *t, uint8_t role, uint8_t op,
                            dsi_spans_t *spans);
void dsi_spans_free(dsi_spans_t *spans);
/* The span holding time `t`, or -1 (for spans that do not overlap, as iterations). */
long dsi_spans_find(const dsi_spans_t *spans, double t);
/* The latest end of the spans starting in [start, end], at least `end`:
 * where a collective issued over [start, end) really ends when its library
 * runs it on a thread of its own (gloo), the caller waiting outside the
 * issuing operator. */
double dsi_spans_latest_end(const dsi_spans_t *spans, double start, double end);

/* The sizes of a collective from its args (collectives.c): *index_p 1 +
 * its index in t->collectives, 0 when args give no known collective. */
ds_status_t dsi_trace_add_collective(ds_torch_trace_t *t, const json_t *args, uint32_t *index_p);

/* One more item at the end of a side array of the trace (GEMM shapes,
 * collectives), which events refer to by 1-based 32-bit index: grows
 * *array_p of `size`-byte items, counts it in *count and sets *index_p to
 * its index; `what` names the items in the error of a trace with too many. */
ds_status_t dsi_trace_append(void *array_p, size_t *count, size_t *capacity, size_t size,
                             const char *what, uint32_t *index_p);

/* Names of the trace (trace.c): `name` appended to the pool. */
ds_status_t dsi_trace_add_name(ds_torch_trace_t *t, const char *name, uint32_t *offset_p);
/* The events sorted by thread, start, the enclosing first (trace.c). */
void dsi_trace_sort(ds_torch_trace_t *t);

/* Module ranges (modules.c).  "nn.Module: CLASS_N" of a transformer-layer
 * class: N (the instance's number in call order). */
bool dsi_module_layer_of_name(const char *name, int32_t *layer_p);
bool dsi_is_backward_node(const char *name);
/* On the sorted events: layer modules holding other layer modules demoted,
 * and a backward range added for every forward one whose operators' sequence
 * numbers the autograd functions of the trace carry. */
ds_status_t dsi_trace_module_passes(ds_torch_trace_t *t);

/* Microseconds of device work launched inside event `index` (its launches on
 * its thread, nested in it). */
double dsi_trace_device_us(const ds_torch_trace_t *t, size_t index);

/* The device's time over event `index`'s work: from the start of the first
 * work it launched to the end of the last, less the device time of the
 * collectives launched inside it that overlaps that span (the communication
 * model prices them), and never less than the work's own time
 * (dsi_trace_device_us).  Idle device time between its kernels, where the
 * framework on the CPU did not launch them fast enough, is part of it.
 * `start_p`/`end_p` (may be NULL) get the span; false when it launched none. */
bool dsi_trace_device_span(const ds_torch_trace_t *t, size_t index, double *start_p, double *end_p);
double dsi_trace_device_elapsed_us(const ds_torch_trace_t *t, size_t index);
/* Microseconds of the collectives' device work inside event `index` that
 * lies in [from, to). */
double dsi_trace_collective_device_us(const ds_torch_trace_t *t, size_t index, double from,
                                      double to);

/* Costs are device time: the trace has device work linked to its launches. */
static inline bool dsi_trace_device_timed(const ds_torch_trace_t *t)
{
    return t->kernels_linked > 0;
}

#endif /* DSI_FRAMEWORK_H */
