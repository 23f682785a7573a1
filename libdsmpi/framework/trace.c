/* Reading torch.profiler traces: the Kineto Chrome trace and the legacy
 * autograd-profiler array, into one sorted list of complete events with
 * their role (iteration, layer-pass range, operator of a known kind, device
 * work and the runtime call that launched it). */
#include "dsi_framework.h"

#include "dsi_json.h"
#include "model/dsi_model.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

/* Operators of a known kind, by their exact name.  The outermost of them in
 * a range is the one mapped (aten::linear is not listed: its addmm is). */
static const struct {
    const char *name;
    uint8_t op;
    uint8_t first_matrix; /* GEMMs: 1 + the index of the first matrix in "Input Dims" */
} known_ops[] = {
    {"aten::mm", DS_OP_GEMM, 1},              /* (self [m,k], mat2 [k,n]) */
    {"aten::addmm", DS_OP_GEMM, 2},           /* (bias, mat1 [m,k], mat2 [k,n], beta, alpha) */
    {"aten::bmm", DS_OP_BATCHED_GEMM, 1},     /* (self [b,m,k], mat2 [b,k,n]) */
    {"aten::baddbmm", DS_OP_BATCHED_GEMM, 2}, /* (self, batch1, batch2, beta, alpha) */
    {"aten::scaled_dot_product_attention", DS_OP_FLASH_ATTENTION, 0},
    {"aten::_scaled_dot_product_flash_attention", DS_OP_FLASH_ATTENTION, 0},
    {"aten::_scaled_dot_product_efficient_attention", DS_OP_FLASH_ATTENTION, 0},
    {"aten::_scaled_dot_product_flash_attention_backward", DS_OP_FLASH_ATTENTION, 0},
    {"aten::_scaled_dot_product_efficient_attention_backward", DS_OP_FLASH_ATTENTION, 0},
    {"aten::_flash_attention_forward", DS_OP_FLASH_ATTENTION, 0},
    {"aten::_flash_attention_backward", DS_OP_FLASH_ATTENTION, 0},
    {"aten::softmax", DS_OP_SOFTMAX, 0},
    {"aten::_softmax", DS_OP_SOFTMAX, 0},
    {"aten::_softmax_backward_data", DS_OP_SOFTMAX, 0},
    {"aten::layer_norm", DS_OP_LAYERNORM, 0},
    {"aten::native_layer_norm", DS_OP_LAYERNORM, 0},
    {"aten::native_layer_norm_backward", DS_OP_LAYERNORM, 0},
    {"aten::rms_norm", DS_OP_RMSNORM, 0},
    {"aten::gelu", DS_OP_GELU, 0},
    {"aten::gelu_backward", DS_OP_GELU, 0},
    {"aten::relu", DS_OP_RELU, 0},
    {"aten::threshold_backward", DS_OP_RELU, 0},
    {"aten::silu", DS_OP_SWIGLU, 0},
    {"aten::silu_backward", DS_OP_SWIGLU, 0},
    {"aten::dropout", DS_OP_DROPOUT, 0},
    {"aten::native_dropout", DS_OP_DROPOUT, 0},
    {"aten::native_dropout_backward", DS_OP_DROPOUT, 0},
    /* Dropout as a mask multiply (CPU builds of 1.13): its backward is a
     * MulBackward0; the alignment absorbs other multiplies' (a scale). */
    {"MulBackward0", DS_OP_DROPOUT, 0},
    {"aten::add", DS_OP_ADD, 0},
    {"aten::add_", DS_OP_ADD, 0},
    {"aten::embedding", DS_OP_EMBEDDING, 0},
    {"aten::embedding_backward", DS_OP_EMBEDDING, 0},
    {"aten::embedding_dense_backward", DS_OP_EMBEDDING, 0},
    {"aten::cross_entropy_loss", DS_OP_CROSS_ENTROPY, 0},
    {"aten::nll_loss_backward", DS_OP_CROSS_ENTROPY, 0},
    {"aten::_log_softmax_backward_data", DS_OP_CROSS_ENTROPY, 0},
    /* Megatron-LM's vocabulary-parallel cross-entropy (an autograd Function) */
    {"_VocabParallelCrossEntropy", DS_OP_CROSS_ENTROPY, 0},
    {"_VocabParallelCrossEntropyBackward", DS_OP_CROSS_ENTROPY, 0},
};

/* Collectives: names that start with these. */
static const char *const collective_prefixes[] = {"gloo:", "nccl:", "c10d::", "record_param_comms"};

static uint8_t op_of_name(const char *name, bool *known_p, uint8_t *first_matrix_p)
{
    *known_p = true;
    *first_matrix_p = 0;
    for (size_t i = 0; i < DSI_ARRAY_SIZE(known_ops); i++)
        if (strcmp(name, known_ops[i].name) == 0) {
            *first_matrix_p = known_ops[i].first_matrix;
            return known_ops[i].op;
        }
    for (size_t i = 0; i < DSI_ARRAY_SIZE(collective_prefixes); i++)
        if (strncmp(name, collective_prefixes[i], strlen(collective_prefixes[i])) == 0)
            return DSI_TRACE_COLLECTIVE;
    *known_p = false;
    return 0;
}

/* "layer:N:fwd|bwd", "embedding:fwd|bwd", "head:fwd|bwd", "Optimizer.step#...". */
static bool range_of_name(const char *name, int32_t *layer_p, uint8_t *pass_p)
{
    if (strncmp(name, "Optimizer.step#", 15) == 0) {
        *layer_p = DSI_RANGE_OPTIMIZER;
        *pass_p = DS_PASS_STEP;
        return true;
    }
    const char *rest = NULL;
    int32_t layer = 0;
    if (strncmp(name, "layer:", 6) == 0) {
        char *end = NULL;
        long value = strtol(name + 6, &end, 10);
        if (end == name + 6 || *end != ':' || value < 0 || value > 1000000)
            return false;
        layer = (int32_t)value;
        rest = end + 1;
    } else if (strncmp(name, "embedding:", 10) == 0) {
        layer = DSI_PART_EMBEDDING;
        rest = name + 10;
    } else if (strncmp(name, "head:", 5) == 0) {
        layer = DSI_PART_HEAD;
        rest = name + 5;
    } else {
        return false;
    }
    if (strcmp(rest, "fwd") == 0)
        *pass_p = DS_PASS_FORWARD;
    else if (strcmp(rest, "bwd") == 0)
        *pass_p = DS_PASS_BACKWARD;
    else
        return false;
    *layer_p = layer;
    return true;
}

ds_status_t dsi_trace_add_name(ds_torch_trace_t *t, const char *name, uint32_t *offset_p)
{
    size_t length = strlen(name) + 1;
    if (t->names_used + length > t->names_size) {
        size_t size = DSI_MAX(t->names_size * 2, t->names_used + length + 4096);
        if (size > UINT32_MAX)
            return DSI_ERROR(DS_ERR_BAD_FILE, "trace event names exceed 4 GiB");
        DSI_TRY(dsi_realloc_array(&t->names, size, 1));
        t->names_size = size;
    }
    memcpy(t->names + t->names_used, name, length);
    *offset_p = (uint32_t)t->names_used;
    t->names_used += length;
    return DS_OK;
}

/* A thread id: an integer or a string ("CPU functions"), folded with the pid. */
static int64_t id_of(const json_t *value)
{
    if (json_is_integer(value))
        return (int64_t)json_integer_value(value);
    if (json_is_real(value)) {
        double number = json_real_value(value);
        return number > -9.0e18 && number < 9.0e18 ? (int64_t)number : 0;
    }
    if (json_is_string(value))
        return (int64_t)(dsi_hash64(json_string_value(value), json_string_length(value), 0) >> 1);
    return 0;
}

static bool number_of(const json_t *value, double *number_p)
{
    if (!json_is_number(value))
        return false;
    double number = json_number_value(value);
    if (!isfinite(number))
        return false;
    *number_p = number;
    return true;
}

/* Kineto's categories ("cat") of device work and of the calls that launch it. */
static const char *const device_categories[] = {"kernel", "gpu_memcpy", "gpu_memset", NULL};
static const char *const launch_categories[] = {"cuda_runtime", "cuda_driver", NULL};

static bool category_in(const char *cat, const char *const *list)
{
    for (size_t i = 0; cat != NULL && list[i] != NULL; i++)
        if (strcmp(cat, list[i]) == 0)
            return true;
    return false;
}

/* args "correlation": the CUPTI id shared by a launch and the work it launched. */
static int64_t correlation_of(const json_t *args)
{
    const json_t *value = json_is_object(args) ? json_object_get(args, "correlation") : NULL;
    double number;
    if (json_is_integer(value))
        return json_integer_value(value) > 0 ? (int64_t)json_integer_value(value) : 0;
    if (number_of(value, &number) && number >= 1.0 && number < 9.0e18)
        return (int64_t)number;
    return 0;
}

/* Dimension list `index` of "Input Dims" when it has `rank` positive sizes. */
static bool matrix_of(const json_t *input_dims, size_t index, size_t rank, int64_t *dims)
{
    const json_t *list = json_array_get(input_dims, index);
    if (!json_is_array(list) || json_array_size(list) != rank)
        return false;
    for (size_t i = 0; i < rank; i++) {
        const json_t *value = json_array_get(list, i);
        if (!json_is_integer(value) || json_integer_value(value) < 1 ||
            json_integer_value(value) > ((json_int_t)1 << 40))
            return false;
        dims[i] = (int64_t)json_integer_value(value);
    }
    return true;
}

/* m, n, k (and the batch) of a GEMM operator from its "Input Dims"; false
 * when they do not read as two multipliable matrices (or batches of them). */
static bool gemm_shape_of(uint8_t op, uint8_t first_matrix, const json_t *input_dims,
                          dsi_trace_gemm_t *shape)
{
    size_t rank = op == DS_OP_BATCHED_GEMM ? 3 : 2;
    int64_t a[3], b[3];
    if (first_matrix == 0 || !json_is_array(input_dims) ||
        !matrix_of(input_dims, first_matrix - 1u, rank, a) ||
        !matrix_of(input_dims, first_matrix, rank, b) || a[rank - 1] != b[rank - 2] ||
        (rank == 3 && a[0] != b[0]))
        return false;
    *shape = (dsi_trace_gemm_t){a[rank - 2], b[rank - 1], a[rank - 1], rank == 3 ? a[0] : 0};
    return true;
}

ds_status_t dsi_trace_append(void *array_p, size_t *count, size_t *capacity, size_t size,
                             const char *what, uint32_t *index_p)
{
    if (*count >= UINT32_MAX - 1)
        return DSI_ERROR(DS_ERR_OVERFLOW, "a trace with more than 4 billion %s", what);
    if (*count == *capacity) {
        size_t grown = DSI_MAX(2 * *capacity, 256);
        DSI_TRY(dsi_realloc_array(array_p, grown, size));
        *capacity = grown;
    }
    *index_p = (uint32_t)++ * count; /* 1-based: 0 is none */
    return DS_OK;
}

static ds_status_t add_gemm_shape(ds_torch_trace_t *t, const dsi_trace_gemm_t *shape,
                                  uint32_t *index_p)
{
    DSI_TRY(dsi_trace_append(&t->gemm_shapes, &t->num_gemm_shapes, &t->gemm_shapes_capacity,
                             sizeof(*t->gemm_shapes), "GEMMs", index_p));
    t->gemm_shapes[*index_p - 1] = *shape;
    return DS_OK;
}

static ds_status_t add_event(ds_torch_trace_t *t, const json_t *item, const char *origin,
                             size_t *capacity_p)
{
    if (!json_is_object(item))
        return DS_OK;
    const char *ph = json_string_value(json_object_get(item, "ph"));
    const char *name = json_string_value(json_object_get(item, "name"));
    double ts, dur;
    if (ph == NULL || strcmp(ph, "X") != 0 || name == NULL ||
        !number_of(json_object_get(item, "ts"), &ts) ||
        !number_of(json_object_get(item, "dur"), &dur))
        return DS_OK;
    if (dur < 0.0 || fabs(ts) > 1e18 || dur > 1e15)
        return DSI_ERROR(DS_ERR_BAD_FILE,
                         "%s: event '%.60s' has ts %g and dur %g us (accepted: dur >= 0, "
                         "|ts| < 1e18)",
                         origin, name, ts, dur);
    if (t->count == *capacity_p) {
        size_t capacity = DSI_MAX(*capacity_p * 2, 1024);
        DSI_TRY(dsi_realloc_array(&t->events, capacity, sizeof(*t->events)));
        *capacity_p = capacity;
    }
    dsi_trace_event_t *e = &t->events[t->count];
    memset(e, 0, sizeof(*e));
    e->start_us = ts;
    e->end_us = ts + dur;
    e->thread = (int64_t)((uint64_t)id_of(json_object_get(item, "pid")) * 1000003u +
                          (uint64_t)id_of(json_object_get(item, "tid")));
    const char *cat = json_string_value(json_object_get(item, "cat"));
    const json_t *args = json_object_get(item, "args");
    bool known;
    uint8_t first_matrix = 0;
    if (category_in(cat, device_categories)) {
        e->role = DSI_ROLE_KERNEL;
        e->correlation = correlation_of(args);
        t->kernels++;
    } else if (category_in(cat, launch_categories) && correlation_of(args) > 0) {
        e->role = DSI_ROLE_LAUNCH;
        e->correlation = correlation_of(args);
    } else if (cat != NULL && strcmp(cat, "gpu_user_annotation") == 0) {
        e->role = DSI_ROLE_OTHER; /* a range's copy on a GPU stream: not a second iteration */
    } else if (strncmp(name, "ProfilerStep#", 13) == 0) {
        e->role = DSI_ROLE_STEP;
    } else if (range_of_name(name, &e->layer, &e->pass)) {
        e->role = DSI_ROLE_RANGE;
        t->ranges++;
    } else if (dsi_module_layer_of_name(name, &e->layer)) {
        e->role = DSI_ROLE_RANGE;
        e->pass = DS_PASS_FORWARD;
        e->module = 1;
        t->ranges++;
    } else {
        e->op = op_of_name(name, &known, &first_matrix);
        e->role = known ? DSI_ROLE_OP : DSI_ROLE_OTHER;
        if (known && e->op == DSI_TRACE_COLLECTIVE)
            DSI_TRY(dsi_trace_add_collective(t, args, &e->collective));
    }
    e->backward_node = dsi_is_backward_node(name);
    e->sequence = -1;
    const json_t *sequence = json_is_object(args) ? json_object_get(args, "Sequence number") : NULL;
    if (json_is_integer(sequence) && json_integer_value(sequence) >= 0)
        e->sequence = (int64_t)json_integer_value(sequence);
    const json_t *input_dims = json_is_object(args) ? json_object_get(args, "Input Dims") : NULL;
    if (json_is_array(input_dims)) {
        e->shapes = 1;
        t->with_shapes++;
        dsi_trace_gemm_t shape;
        if (e->role == DSI_ROLE_OP && gemm_shape_of(e->op, first_matrix, input_dims, &shape))
            DSI_TRY(add_gemm_shape(t, &shape, &e->gemm_shape));
    }
    DSI_TRY(dsi_trace_add_name(t, name, &e->name));
    t->count++;
    return DS_OK;
}

/* Order among events of one span: ranges before their operators, a launch
 * after the operator it is called from. */
static int tie_rank(uint8_t role)
{
    return role == DSI_ROLE_LAUNCH ? -1 : (int)role;
}

static int compare_events(const void *a, const void *b)
{
    const dsi_trace_event_t *x = a, *y = b;
    if (x->thread != y->thread)
        return x->thread < y->thread ? -1 : 1;
    if (x->start_us != y->start_us)
        return x->start_us < y->start_us ? -1 : 1;
    if (x->end_us != y->end_us)
        return x->end_us > y->end_us ? -1 : 1; /* the enclosing event first */
    int rx = tie_rank(x->role), ry = tie_rank(y->role);
    return rx > ry ? -1 : rx < ry;
}

void dsi_trace_sort(ds_torch_trace_t *t)
{
    if (t->count > 0)
        qsort(t->events, t->count, sizeof(*t->events), compare_events);
}

typedef struct device_work {
    int64_t correlation;
    double start_us, end_us;
    bool linked;
} device_work_t;

static int compare_work(const void *a, const void *b)
{
    const device_work_t *x = a, *y = b;
    return x->correlation < y->correlation ? -1 : x->correlation > y->correlation;
}

/* Each launch gets the duration of the device work of its correlation id (a
 * kernel, a copy; several for a graph launch); work claimed once. */
static ds_status_t link_device_work(ds_torch_trace_t *t)
{
    size_t count = 0;
    for (size_t i = 0; i < t->count; i++)
        count += t->events[i].role == DSI_ROLE_KERNEL && t->events[i].correlation > 0;
    if (count == 0)
        return DS_OK;
    device_work_t *work = NULL;
    DSI_TRY(dsi_calloc(count, sizeof(*work), &work));
    size_t n = 0;
    for (size_t i = 0; i < t->count; i++) {
        const dsi_trace_event_t *e = &t->events[i];
        if (e->role == DSI_ROLE_KERNEL && e->correlation > 0)
            work[n++] = (device_work_t){e->correlation, e->start_us, e->end_us, false};
    }
    qsort(work, n, sizeof(*work), compare_work);
    for (size_t i = 0; i < t->count; i++) {
        dsi_trace_event_t *e = &t->events[i];
        if (e->role != DSI_ROLE_LAUNCH)
            continue;
        size_t lo = 0, hi = n;
        while (lo < hi) {
            size_t mid = (lo + hi) / 2;
            if (work[mid].correlation < e->correlation)
                lo = mid + 1;
            else
                hi = mid;
        }
        for (size_t j = lo; j < n && work[j].correlation == e->correlation; j++)
            if (!work[j].linked) {
                bool first = !(e->device_us > 0.0);
                work[j].linked = true;
                e->device_us += work[j].end_us - work[j].start_us;
                e->device_start_us =
                    first ? work[j].start_us : DSI_MIN(e->device_start_us, work[j].start_us);
                e->device_end_us =
                    first ? work[j].end_us : DSI_MAX(e->device_end_us, work[j].end_us);
                t->kernels_linked++;
            }
    }
    dsi_free(work);
    return DS_OK;
}

/* The events nested in event `index` on its thread: [index + 1, the returned end). */
static size_t nested_end(const ds_torch_trace_t *t, size_t index)
{
    const dsi_trace_event_t *outer = &t->events[index];
    size_t j = index + 1;
    while (j < t->count && t->events[j].thread == outer->thread &&
           (t->events[j].start_us < outer->end_us || t->events[j].start_us == outer->start_us))
        j++;
    return j;
}

static bool launch_in(const ds_torch_trace_t *t, size_t outer, size_t j)
{
    const dsi_trace_event_t *e = &t->events[j];
    return e->role == DSI_ROLE_LAUNCH && e->end_us <= t->events[outer].end_us && e->device_us > 0.0;
}

double dsi_trace_device_us(const ds_torch_trace_t *t, size_t index)
{
    double sum = 0.0;
    for (size_t j = index + 1, end = nested_end(t, index); j < end; j++)
        if (launch_in(t, index, j))
            sum += t->events[j].device_us;
    return sum;
}

bool dsi_trace_device_span(const ds_torch_trace_t *t, size_t index, double *start_p, double *end_p)
{
    double start = INFINITY, end = -INFINITY;
    for (size_t j = index + 1, last = nested_end(t, index); j < last; j++)
        if (launch_in(t, index, j)) {
            start = DSI_MIN(start, t->events[j].device_start_us);
            end = DSI_MAX(end, t->events[j].device_end_us);
        }
    if (start_p != NULL)
        *start_p = start;
    if (end_p != NULL)
        *end_p = end;
    return end > start;
}

double dsi_trace_collective_device_us(const ds_torch_trace_t *t, size_t index, double from,
                                      double to)
{
    double sum = 0.0;
    for (size_t j = index + 1, end = nested_end(t, index); j < end; j++) {
        const dsi_trace_event_t *e = &t->events[j];
        double s, f;
        if (e->role == DSI_ROLE_OP && e->op == DSI_TRACE_COLLECTIVE &&
            dsi_trace_device_span(t, j, &s, &f))
            sum += DSI_MAX(0.0, DSI_MIN(f, to) - DSI_MAX(s, from));
    }
    return sum;
}

double dsi_trace_device_elapsed_us(const ds_torch_trace_t *t, size_t index)
{
    double busy = dsi_trace_device_us(t, index), start, end;
    if (!dsi_trace_device_span(t, index, &start, &end))
        return busy;
    double elapsed = end - start - dsi_trace_collective_device_us(t, index, start, end);
    return DSI_MAX(busy - dsi_trace_collective_device_us(t, index, -INFINITY, INFINITY), elapsed);
}

ds_status_t dsi_trace_spans(const ds_torch_trace_t *t, uint8_t role, uint8_t op, dsi_spans_t *spans)
{
    memset(spans, 0, sizeof(*spans));
    size_t n = 0;
    for (size_t i = 0; i < t->count; i++)
        n += t->events[i].role == role && (role != DSI_ROLE_OP || t->events[i].op == op);
    double *pairs = NULL;
    DSI_TRY(dsi_calloc(2 * n + 2, sizeof(double), &pairs));
    ds_status_t status = dsi_calloc(2 * n + 2, sizeof(double), &spans->start);
    if (status != DS_OK) {
        dsi_free(pairs);
        return status;
    }
    spans->end = spans->start + n + 1;
    size_t c = 0;
    for (size_t i = 0; i < t->count; i++)
        if (t->events[i].role == role && (role != DSI_ROLE_OP || t->events[i].op == op)) {
            pairs[2 * c] = t->events[i].start_us;
            pairs[2 * c + 1] = t->events[i].end_us;
            c++;
        }
    qsort(pairs, c, 2 * sizeof(double), dsi_compare_double); /* by start */
    for (size_t i = 0; i < c; i++) {
        spans->start[i] = pairs[2 * i];
        spans->end[i] = pairs[2 * i + 1];
    }
    spans->count = c;
    dsi_free(pairs);
    return DS_OK;
}

void dsi_spans_free(dsi_spans_t *spans)
{
    dsi_free(spans->start);
    memset(spans, 0, sizeof(*spans));
}

/* The first span starting after `t` (or at it, when `inclusive`). */
static size_t first_after(const dsi_spans_t *spans, double t, bool inclusive)
{
    size_t lo = 0, hi = spans->count;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (spans->start[mid] < t || (!inclusive && spans->start[mid] == t))
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

long dsi_spans_find(const dsi_spans_t *spans, double t)
{
    size_t lo = first_after(spans, t, false);
    if (lo == 0 || t >= spans->end[lo - 1])
        return -1;
    return (long)lo - 1;
}

double dsi_spans_latest_end(const dsi_spans_t *spans, double start, double end)
{
    double last = end;
    for (size_t i = first_after(spans, start, true); i < spans->count && spans->start[i] <= end;
         i++)
        last = DSI_MAX(last, spans->end[i]);
    return last;
}

static bool is_gzip(const char *data, size_t size)
{
    return size >= 2 && (unsigned char)data[0] == 0x1f && (unsigned char)data[1] == 0x8b;
}

/* A gzip file (one member or several, as gzip(1) concatenates them) inflated
 * into text of at most `limit` bytes, chunk by chunk; a corrupt, truncated or
 * oversized stream is DS_ERR_BAD_FILE with one line. */
static ds_status_t inflate_gzip(const char *data, size_t size, const char *origin, size_t limit,
                                char **text_p, size_t *size_p)
{
    z_stream z;
    memset(&z, 0, sizeof(z));
    if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK) /* 16: the gzip wrapper */
        return DSI_ERROR(DS_ERR_NO_MEMORY, "%s: zlib cannot start inflating", origin);
    ds_status_t status = DS_OK;
    char *text = NULL;
    size_t used = 0, capacity = 0, consumed = 0;
    for (;;) {
        if (used == capacity) {
            if (capacity > limit) {
                status = DSI_ERROR(DS_ERR_BAD_FILE,
                                   "%s: decompresses to more than %zu bytes (accepted: at most "
                                   "DS_MAX_TRACE_BYTES)",
                                   origin, limit);
                goto out;
            }
            size_t grown = DSI_MIN(DSI_MAX(2 * capacity, (size_t)1 << 20), limit + 1);
            DSI_TRY_GOTO(dsi_realloc_array(&text, grown + 1, 1), status, out);
            capacity = grown;
        }
        size_t in_before = DSI_MIN(size - consumed, (size_t)UINT_MAX);
        size_t out_before = DSI_MIN(capacity - used, (size_t)UINT_MAX);
        z.next_in = (Bytef *)(uintptr_t)(data + consumed);
        z.avail_in = (uInt)in_before;
        z.next_out = (Bytef *)(text + used);
        z.avail_out = (uInt)out_before;
        int rc = inflate(&z, Z_NO_FLUSH);
        consumed += in_before - z.avail_in;
        used += out_before - z.avail_out;
        if (rc == Z_STREAM_END) {
            while (consumed < size && data[consumed] == 0)
                consumed++; /* padding after the last member, which gzip(1) ignores too */
            if (consumed == size)
                break;
            if (!is_gzip(data + consumed, size - consumed)) {
                status = DSI_ERROR(DS_ERR_BAD_FILE,
                                   "%s: corrupt gzip file: %zu bytes after the end of its "
                                   "compressed data",
                                   origin, size - consumed);
                goto out;
            }
            inflateReset(&z); /* the next member */
        } else if (rc == Z_DATA_ERROR || rc == Z_NEED_DICT || rc == Z_STREAM_ERROR) {
            status = DSI_ERROR(DS_ERR_BAD_FILE, "%s: corrupt gzip file (zlib: %s)", origin,
                               z.msg != NULL ? z.msg : "invalid data");
            goto out;
        } else if (rc == Z_MEM_ERROR) {
            status = DSI_ERROR(DS_ERR_NO_MEMORY, "%s: out of memory inflating", origin);
            goto out;
        } else if (consumed == size && used < capacity) {
            status = DSI_ERROR(DS_ERR_BAD_FILE,
                               "%s: truncated gzip file: its %zu bytes end before its compressed "
                               "data does (a partial copy or download reads so)",
                               origin, size);
            goto out;
        }
    }
    text[used] = '\0';
    *text_p = text;
    *size_p = used;
    text = NULL;
out:
    inflateEnd(&z);
    dsi_free(text);
    return status;
}

static ds_status_t parse_text(const char *text, size_t size, const char *origin,
                              ds_torch_trace_t **trace_p);

ds_status_t ds_torch_trace_parse(const char *text, size_t size, const char *origin,
                                 ds_torch_trace_t **trace_p)
{
    if (!is_gzip(text, size))
        return parse_text(text, size, origin, trace_p);
    char *inflated = NULL;
    size_t inflated_size = 0;
    DSI_TRY(inflate_gzip(text, size, origin, (size_t)dsi_param_int(DSI_PARAM_MAX_TRACE_BYTES),
                         &inflated, &inflated_size));
    ds_status_t status = parse_text(inflated, inflated_size, origin, trace_p);
    dsi_free(inflated);
    return status;
}

static ds_status_t parse_text(const char *text, size_t size, const char *origin,
                              ds_torch_trace_t **trace_p)
{
    ds_status_t status = DS_OK;
    ds_torch_trace_t *t = NULL;
    json_t *root = NULL;
    json_error_t error;
    root = json_loadb(text, size, 0, &error);
    if (root == NULL)
        return DSI_ERROR(DS_ERR_BAD_FILE,
                         "%s:%d:%d: not a torch.profiler trace: not valid JSON (%s; a truncated "
                         "file reads so)",
                         origin, error.line, error.column, error.text);
    const json_t *list = NULL;
    ds_torch_trace_format_t format = DS_TORCH_TRACE_KINETO;
    if (json_is_object(root) && json_is_array(json_object_get(root, "traceEvents"))) {
        list = json_object_get(root, "traceEvents");
    } else if (json_is_array(root)) {
        list = root;
        format = DS_TORCH_TRACE_LEGACY;
    } else {
        status = DSI_ERROR(DS_ERR_BAD_FILE,
                           "%s: not a torch.profiler trace (accepted: a Chrome-trace object with "
                           "a \"traceEvents\" array, or the autograd profiler's array of \"X\" "
                           "events)",
                           origin);
        goto out;
    }
    DSI_TRY_GOTO(dsi_calloc(1, sizeof(*t), &t), status, out);
    t->format = format;
    DSI_TRY_GOTO(dsi_strdup(origin, &t->origin), status, out);
    size_t capacity = 0;
    for (size_t i = 0; i < json_array_size(list); i++)
        DSI_TRY_GOTO(add_event(t, json_array_get(list, i), origin, &capacity), status, out);
    dsi_trace_sort(t);
    DSI_TRY_GOTO(link_device_work(t), status, out);
    DSI_TRY_GOTO(dsi_trace_module_passes(t), status, out);
    size_t steps = 0;
    for (size_t i = 0; i < t->count; i++)
        steps += t->events[i].role == DSI_ROLE_STEP;
    if (steps == 0 || steps > INT32_MAX) {
        status = DSI_ERROR(DS_ERR_BAD_FILE,
                           "%s: no iteration in the trace (%zu complete events; accepted: "
                           "iterations as \"ProfilerStep#N\" ranges, which the profiler's "
                           "schedule or record_function(\"ProfilerStep#N\") writes)",
                           origin, t->count);
        goto out;
    }
    DSI_TRY_GOTO(dsi_calloc(steps, sizeof(double), &t->iterations_s), status, out);
    /* Trace order = start order over every thread. */
    double *starts = NULL;
    DSI_TRY_GOTO(dsi_calloc(steps, 2 * sizeof(double), &starts), status, out);
    size_t n = 0;
    for (size_t i = 0; i < t->count; i++)
        if (t->events[i].role == DSI_ROLE_STEP) {
            starts[2 * n] = t->events[i].start_us;
            starts[2 * n + 1] = (t->events[i].end_us - t->events[i].start_us) * 1e-6;
            n++;
        }
    qsort(starts, steps, 2 * sizeof(double), dsi_compare_double);
    for (size_t i = 0; i < steps; i++)
        t->iterations_s[i] = starts[2 * i + 1];
    dsi_free(starts);
    t->num_iterations = (int)steps;
    *trace_p = t;
    t = NULL;
out:
    json_decref(root);
    ds_torch_trace_destroy(t);
    return status;
}

ds_status_t ds_torch_trace_load(const char *path, ds_torch_trace_t **trace_p)
{
    char *text = NULL;
    size_t size = 0;
    DSI_TRY(dsi_read_file(path, (size_t)dsi_param_int(DSI_PARAM_MAX_TRACE_BYTES), &text, &size));
    ds_status_t status = ds_torch_trace_parse(text, size, path, trace_p);
    dsi_free(text);
    return status;
}

void ds_torch_trace_destroy(ds_torch_trace_t *trace)
{
    if (trace == NULL)
        return;
    dsi_free(trace->events);
    dsi_free(trace->names);
    dsi_free(trace->gemm_shapes);
    dsi_free(trace->collectives);
    dsi_free(trace->origin);
    dsi_free(trace->iterations_s);
    dsi_free(trace);
}

void ds_torch_trace_get_info(const ds_torch_trace_t *trace, ds_torch_trace_info_t *info)
{
    memset(info, 0, sizeof(*info));
    info->format = trace->format;
    info->events = trace->count;
    info->with_shapes = trace->with_shapes;
    info->kernels = trace->kernels;
    info->kernels_linked = trace->kernels_linked;
    info->ranges = trace->ranges;
    info->iterations = trace->num_iterations;
    int n = trace->num_iterations;
    double *sorted = NULL, sum = 0.0;
    if (n == 0 || dsi_malloc((size_t)n * sizeof(double), &sorted) != DS_OK)
        return;
    for (int i = 0; i < n; i++) {
        sorted[i] = trace->iterations_s[i];
        sum += sorted[i];
    }
    qsort(sorted, (size_t)n, sizeof(double), dsi_compare_double);
    info->iteration_mean_s = sum / n;
    info->iteration_median_s = n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
    info->iteration_min_s = sorted[0];
    info->iteration_max_s = sorted[n - 1];
    dsi_free(sorted);
}

double ds_torch_trace_iteration_s(const ds_torch_trace_t *trace, int index)
{
    return index >= 0 && index < trace->num_iterations ? trace->iterations_s[index] : 0.0;
}

ds_status_t ds_torch_trace_set_unprofiled_s(ds_torch_trace_t *trace, double unprofiled_s,
                                            double *scale_p)
{
    if (!(unprofiled_s > 0.0) || !isfinite(unprofiled_s))
        return DSI_ERROR(DS_ERR_INVALID_ARG,
                         "unprofiled iteration time %g s (accepted: a positive number of seconds)",
                         unprofiled_s);
    ds_torch_trace_info_t info;
    ds_torch_trace_get_info(trace, &info);
    trace->unprofiled_scale =
        info.iteration_median_s > 0.0 ? unprofiled_s / info.iteration_median_s : 0.0;
    if (scale_p != NULL)
        *scale_p = trace->unprofiled_scale;
    return DS_OK;
}
