/* Mapping a trace onto the known model: each layer-pass range's operators
 * aligned with the model's operators of that pass, each operator its own
 * time, the framework's time between them (and in operators the model has
 * no event for) a cost of the pass of its own (DS_OP_FRAMEWORK_GAP), and
 * what the iterations spend outside every mapped range. */
#include "dsi_framework.h"

#include "events/dsi_events.h"
#include "model/dsi_model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The seconds one key collected over its occurrences. */
typedef struct key_samples {
    ds_event_key_t key;
    double *seconds;
    size_t count, capacity;
} key_samples_t;

/* Largest alignment table (4 bytes a cell): 256 MiB. */
#define MAX_ALIGNMENT_CELLS ((size_t)64 << 20)

/* The name of the iterations' time without any operator. */
#define IDLE_NAME UINT32_MAX

typedef struct named_time {
    uint32_t name;
    double seconds;
} named_time_t;

typedef struct mapper {
    const ds_torch_trace_t *trace;
    const ds_model_t *model;
    const ds_strategy_t *strategy;
    int stage;
    int num_layers;
    dsi_shape_ctx_t ctx;
    key_samples_t *keys;
    size_t num_keys, keys_capacity;
    named_time_t *names;
    size_t num_names, names_capacity;
    dsi_spans_t steps;       /* the iterations */
    bool *mapped;            /* per event: a range that was mapped */
    dsi_spans_t collectives; /* of every thread */
    dsi_op_t ops[DSI_MAX_LAYER_OPS];
    bool device; /* a GPU trace: costs are the device time of each operator's work */
    ds_framework_result_t *result;
} mapper_t;

static ds_status_t add_sample(mapper_t *m, const ds_event_key_t *key, double seconds)
{
    key_samples_t *k = NULL;
    for (size_t i = 0; i < m->num_keys && k == NULL; i++)
        if (ds_event_key_equal(&m->keys[i].key, key))
            k = &m->keys[i];
    if (k == NULL) {
        if (m->num_keys == m->keys_capacity) {
            size_t capacity = DSI_MAX(2 * m->keys_capacity, 32);
            DSI_TRY(dsi_realloc_array(&m->keys, capacity, sizeof(*m->keys)));
            m->keys_capacity = capacity;
        }
        k = &m->keys[m->num_keys++];
        memset(k, 0, sizeof(*k));
        k->key = *key;
    }
    if (k->count == k->capacity) {
        size_t capacity = DSI_MAX(2 * k->capacity, 16);
        DSI_TRY(dsi_realloc_array(&k->seconds, capacity, sizeof(double)));
        k->capacity = capacity;
    }
    k->seconds[k->count++] = seconds;
    m->result->occurrences++;
    return DS_OK;
}

static ds_status_t add_unmapped(mapper_t *m, uint32_t name, double seconds)
{
    for (size_t i = 0; i < m->num_names; i++)
        if (m->names[i].name == name ||
            (name != IDLE_NAME && m->names[i].name != IDLE_NAME &&
             strcmp(m->trace->names + m->names[i].name, m->trace->names + name) == 0)) {
            m->names[i].seconds += seconds;
            return DS_OK;
        }
    if (m->num_names == m->names_capacity) {
        size_t capacity = DSI_MAX(2 * m->names_capacity, 64);
        DSI_TRY(dsi_realloc_array(&m->names, capacity, sizeof(*m->names)));
        m->names_capacity = capacity;
    }
    m->names[m->num_names++] = (named_time_t){name, seconds};
    return DS_OK;
}

/* The iteration whose window holds `t` (microseconds), or -1. */
static long step_of(const mapper_t *m, double t)
{
    return dsi_spans_find(&m->steps, t);
}

/* Where a collective issued at [start, end) really ends. */
static double collective_end(const mapper_t *m, double start, double end)
{
    return dsi_spans_latest_end(&m->collectives, start, end);
}

static bool compatible(uint8_t model, uint8_t traced)
{
    if (model == traced)
        return true;
    if (model == DS_OP_DROPOUT_ADD) /* bias + dropout + add: either of the two */
        return traced == DS_OP_ADD || traced == DS_OP_DROPOUT;
    if (model == DS_OP_GEGLU)
        return traced == DS_OP_GELU;
    return false;
}

/* Longest common subsequence of model and trace operators by kind;
 * match[i] = index in `traced` of model operator i, or -1. */
static ds_status_t align(const uint8_t *model, size_t nm, const uint8_t *traced, size_t nt,
                         long *match)
{
    uint32_t *table = NULL;
    size_t width = nt + 1;
    DSI_TRY(dsi_calloc((nm + 1) * width, sizeof(uint32_t), &table));
    for (size_t i = nm; i-- > 0;)
        for (size_t j = nt; j-- > 0;) {
            uint32_t best = DSI_MAX(table[(i + 1) * width + j], table[i * width + j + 1]);
            if (compatible(model[i], traced[j]))
                best = DSI_MAX(best, table[(i + 1) * width + j + 1] + 1);
            table[i * width + j] = best;
        }
    size_t i = 0, j = 0;
    while (i < nm && j < nt) {
        if (compatible(model[i], traced[j]) &&
            table[i * width + j] == table[(i + 1) * width + j + 1] + 1) {
            match[i++] = (long)j++;
        } else if (table[(i + 1) * width + j] >= table[i * width + j + 1]) {
            match[i++] = -1;
        } else {
            j++;
        }
    }
    while (i < nm)
        match[i++] = -1;
    dsi_free(table);
    return DS_OK;
}

#define DSI_NO_LAYER (-100)

/* The model's layer of a module range: its number counts the layers of this
 * stage (its chunks in order); DSI_NO_LAYER beyond them. */
static int stage_layer(const mapper_t *m, int local)
{
    for (int chunk = 0; chunk < m->strategy->vpp; chunk++) {
        int first = 0, count = 0;
        ds_strategy_chunk_layers(m->strategy, m->num_layers, m->stage, chunk, &first, &count);
        if (local < count)
            return first + local;
        local -= count;
    }
    return DSI_NO_LAYER;
}

/* A traced GEMM's shape agrees with the model's key: the same k (the reduced
 * dimension), m and n in either order (torch computes some products
 * transposed, C^T = B^T A^T), the same batch. */
static bool shape_agrees(const ds_event_key_t *key, const dsi_trace_gemm_t *shape)
{
    if (shape->k != key->dims[2] || !((shape->m == key->dims[0] && shape->n == key->dims[1]) ||
                                      (shape->m == key->dims[1] && shape->n == key->dims[0])))
        return false;
    return key->op != DS_OP_BATCHED_GEMM || shape->batch == key->dims[3];
}

static bool traced_agrees(const mapper_t *m, const ds_event_key_t *key, long event)
{
    uint32_t shape = m->trace->events[event].gemm_shape;
    return shape == 0 || shape_agrees(key, &m->trace->gemm_shapes[shape - 1]);
}

/* The one-line refusal: a model operator and a traced GEMM (with shapes) of
 * its place that disagrees with it. */
static ds_status_t shape_mismatch(const mapper_t *m, const dsi_trace_event_t *range,
                                  const dsi_op_t *op, const dsi_trace_event_t *e)
{
    const ds_torch_trace_t *t = m->trace;
    const dsi_trace_gemm_t *shape = &t->gemm_shapes[e->gemm_shape - 1];
    char expected[160], batch[32] = "";
    ds_event_key_format(&op->key, expected, sizeof(expected));
    if (shape->batch > 0)
        snprintf(batch, sizeof(batch), " batch=%lld", (long long)shape->batch);
    return DSI_ERROR(DS_ERR_INVALID_ARG,
                     "%s: %s at %.3f us: the model expects '%s' (%s) where the trace has %s "
                     "with Input Dims m=%lld n=%lld k=%lld%s: the trace is not of --model with "
                     "--strategy, --seq-len and --dtype as given (accepted: the traced run's)",
                     t->origin, dsi_trace_name(t, range), range->start_us, expected,
                     op->label != NULL ? op->label : "?", dsi_trace_name(t, e), (long long)shape->m,
                     (long long)shape->n, (long long)shape->k, batch);
}

/* Longest run of one GEMM kind re-paired by shape. */
#define MAX_REPAIRED_GEMMS 16

/* Model GEMMs first .. end-1 (consecutive, one kind, all matched): each
 * traced GEMM with shapes must agree with the model operator it is matched
 * with.  Torch issues some pairs in the other order than the model lists them
 * (a linear layer's weight gradient before its input gradient), so the run's
 * traced operators are re-paired by shape; a model operator no traced one of
 * the run agrees with is a mismatch: the trace is of another run. */
static ds_status_t check_shapes(const mapper_t *m, const dsi_trace_event_t *range,
                                const long *model_index, const long *where, size_t first,
                                size_t end, long *match)
{
    const dsi_trace_event_t *events = m->trace->events;
    bool agree = true;
    size_t bad = first;
    for (size_t i = first; i < end && agree; i++) {
        agree = traced_agrees(m, &m->ops[model_index[i]].key, where[match[i]]);
        bad = i;
    }
    if (agree)
        return DS_OK;
    size_t count = end - first;
    if (count > MAX_REPAIRED_GEMMS)
        return shape_mismatch(m, range, &m->ops[model_index[bad]], &events[where[match[bad]]]);
    long traced[MAX_REPAIRED_GEMMS], paired[MAX_REPAIRED_GEMMS];
    bool used[MAX_REPAIRED_GEMMS] = {false};
    for (size_t j = 0; j < count; j++)
        traced[j] = match[first + j];
    for (size_t i = 0; i < count; i++) {
        const ds_event_key_t *key = &m->ops[model_index[first + i]].key;
        size_t pick = count, unused = count;
        /* a traced GEMM with shapes that agree first, one without shapes after */
        for (int pass = 0; pass < 2 && pick == count; pass++)
            for (size_t j = 0; j < count && pick == count; j++) {
                bool shaped = events[where[traced[j]]].gemm_shape != 0;
                if (!used[j] && shaped == (pass == 0) && traced_agrees(m, key, where[traced[j]]))
                    pick = j;
                if (!used[j] && unused == count)
                    unused = j;
            }
        if (pick == count) /* every traced GEMM left has shapes, none agreeing */
            return shape_mismatch(m, range, &m->ops[model_index[first + i]],
                                  &events[where[traced[unused]]]);
        used[pick] = true;
        paired[i] = traced[pick];
    }
    for (size_t i = 0; i < count; i++)
        match[first + i] = paired[i];
    return DS_OK;
}

/* Every run of matched model GEMMs of one kind checked against the traced shapes. */
static ds_status_t check_pass_shapes(mapper_t *m, const dsi_trace_event_t *range,
                                     const long *model_index, const long *where, size_t model_count,
                                     long *match)
{
    for (size_t i = 0; i < model_count;) {
        uint8_t op = m->ops[model_index[i]].key.op;
        if (match[i] < 0 || (op != DS_OP_GEMM && op != DS_OP_BATCHED_GEMM)) {
            i++;
            continue;
        }
        size_t end = i + 1;
        while (end < model_count && match[end] >= 0 && m->ops[model_index[end]].key.op == op)
            end++;
        DSI_TRY(check_shapes(m, range, model_index, where, i, end, match));
        for (; i < end; i++)
            m->result->shapes_checked += m->trace->events[where[match[i]]].gemm_shape != 0;
    }
    return DS_OK;
}

/* The optimizer step of this stage: one cost for the whole range (on a GPU
 * trace the device time of the work launched inside it). */
/* `seconds` of a CPU trace as the job runs without the profiler
 * (ds_torch_trace_set_unprofiled_s). */
static double unprofiled(mapper_t *m, double seconds)
{
    if (m->device || m->trace->unprofiled_scale <= 0.0)
        return seconds;
    double scaled = seconds * m->trace->unprofiled_scale;
    m->result->profiler_removed_s += seconds - scaled;
    return scaled;
}

static ds_status_t map_optimizer(mapper_t *m, size_t index)
{
    const dsi_trace_event_t *range = &m->trace->events[index];
    int64_t params = dsi_stage_params(m->model, m->strategy, m->stage);
    ds_event_key_t key = dsi_optimizer_key(dsi_optimizer_shard(m->strategy, params));
    double us = range->end_us - range->start_us;
    if (m->device) {
        double own = dsi_trace_device_us(m->trace, index);
        us = dsi_trace_device_elapsed_us(m->trace, index);
        m->result->kernel_s += own * 1e-6;
        m->result->device_gap_s += DSI_MAX(0.0, us - own) * 1e-6;
    }
    return add_sample(m, &key, unprofiled(m, us * 1e-6));
}

/* The device time up to operator `op` of pass `pass` on a GPU trace: from
 * where the device finished the matched operator before it (*previous_p;
 * the operator's own first work for the first one) to where its own work
 * ends (for the last one, `last`: where the pass's work ends), less the
 * collectives' device time there, and never less than its own work
 * (`own_us`).  Beyond its own work it is idle device time between kernels,
 * while the framework was still launching them (or work of operators the
 * model has no event for): the pass's gap, as the CPU time between
 * operators is on a CPU trace, so that a pass's costs add up to its device
 * time. */
static double device_end_to_end(const mapper_t *m, size_t pass, size_t op, double own_us,
                                double last, double *previous_p)
{
    double start, end;
    if (!dsi_trace_device_span(m->trace, op, &start, &end))
        end = start = isnan(*previous_p) ? -INFINITY : *previous_p;
    end = DSI_MAX(end, last);
    double from = isnan(*previous_p) ? start : *previous_p;
    if (!isfinite(from) || !isfinite(end))
        return own_us; /* nothing launched yet in this pass */
    double to = DSI_MAX(end, from);
    *previous_p = to;
    double elapsed = to - from - dsi_trace_collective_device_us(m->trace, pass, from, to);
    return DSI_MAX(own_us, elapsed);
}

/* Microseconds of the collectives [cs[i], ce[i]) inside [from, to). */
static double collective_overlap(const double *cs, const double *ce, size_t n, double from,
                                 double to)
{
    double sum = 0.0;
    for (size_t i = 0; i < n; i++)
        sum += DSI_MAX(0.0, DSI_MIN(ce[i], to) - DSI_MAX(cs[i], from));
    return sum;
}

/* Range `index`: its compute operators aligned with the model's; the
 * collectives inside it (tensor-parallel ones, data-parallel buckets) are
 * communication, priced by the communication model: their time, up to the
 * end of the library's own work, is left out of the compute operators.  On
 * a GPU trace an operator's cost is the device time of the work it launched
 * (its kernels, copies, memsets, through the correlation ids). */
static ds_status_t map_range(mapper_t *m, size_t index, bool *mapped_p)
{
    const ds_torch_trace_t *t = m->trace;
    const dsi_trace_event_t *range = &t->events[index];
    *mapped_p = false;
    if (range->layer == DSI_RANGE_OPTIMIZER) {
        *mapped_p = true;
        return map_optimizer(m, index);
    }
    int layer = range->module ? stage_layer(m, range->layer) : range->layer;
    if (layer >= m->num_layers || layer == DSI_NO_LAYER)
        return DS_OK;
    size_t num_ops = 0;
    DSI_TRY(dsi_model_layer_ops(m->model, layer, &m->ctx, (ds_pass_t)range->pass, m->ops,
                                DSI_MAX_LAYER_OPS, &num_ops));
    size_t first = index + 1, last = first;
    while (last < t->count && t->events[last].thread == range->thread &&
           t->events[last].start_us < range->end_us)
        last++;
    size_t span = last - first;
    long *where = NULL, *match = NULL, *model_index = NULL, *order = NULL;
    uint8_t *traced = NULL, *model = NULL;
    double *cs = NULL, *ce = NULL;
    ds_status_t status = DS_OK;
    DSI_TRY_GOTO(dsi_calloc(span + 1, sizeof(long), &where), status, out);
    DSI_TRY_GOTO(dsi_calloc(span + 1, 1, &traced), status, out);
    DSI_TRY_GOTO(dsi_calloc(2 * (span + 1), sizeof(double), &cs), status, out);
    ce = cs + span + 1;
    DSI_TRY_GOTO(dsi_calloc(num_ops + 1, sizeof(long), &match), status, out);
    DSI_TRY_GOTO(dsi_calloc(num_ops + 1, sizeof(long), &model_index), status, out);
    DSI_TRY_GOTO(dsi_calloc(num_ops + 1, sizeof(long), &order), status, out);
    DSI_TRY_GOTO(dsi_calloc(num_ops + 1, 1, &model), status, out);
    /* The outermost operators of a known kind, and the collectives. */
    size_t traced_count = 0, num_coll = 0;
    double covered = -INFINITY, collective_s = 0.0, collective_device_us = 0.0;
    for (size_t j = first; j < last; j++) {
        const dsi_trace_event_t *e = &t->events[j];
        if (e->role != DSI_ROLE_OP || e->start_us < covered || e->end_us > range->end_us)
            continue;
        covered = e->end_us;
        if (e->op == DSI_TRACE_COLLECTIVE) {
            cs[num_coll] = e->start_us;
            ce[num_coll] = DSI_MIN(collective_end(m, e->start_us, e->end_us), range->end_us);
            covered = ce[num_coll];
            collective_s += ce[num_coll] - cs[num_coll];
            num_coll++;
            if (m->device)
                collective_device_us += dsi_trace_device_us(t, j);
            continue;
        }
        where[traced_count] = (long)j;
        traced[traced_count++] = e->op;
    }
    size_t model_count = 0;
    for (size_t i = 0; i < num_ops; i++)
        if (m->ops[i].key.kind == DS_EVENT_COMPUTE) {
            model_index[model_count] = (long)i;
            model[model_count++] = m->ops[i].key.op;
        }
    /* An alignment table too large for a pass (a range holding a whole
     * iteration's operators): the range is not mapped. */
    if (traced_count == 0 || model_count == 0 ||
        (model_count + 1) * (traced_count + 1) > MAX_ALIGNMENT_CELLS)
        goto out;
    DSI_TRY_GOTO(align(model, model_count, traced, traced_count, match), status, out);
    DSI_TRY_GOTO(check_pass_shapes(m, range, model_index, where, model_count, match), status, out);
    /* The matched model operators in trace order (re-paired GEMMs are not in model order). */
    size_t num_matched = 0;
    for (size_t i = 0; i < model_count; i++) {
        if (match[i] < 0) {
            m->result->model_ops_unmatched++;
            continue;
        }
        size_t at = num_matched++;
        for (; at > 0 && match[order[at - 1]] > match[i]; at--)
            order[at] = order[at - 1];
        order[at] = (long)i;
    }
    if (num_matched == 0)
        goto out;
    /* On the device: the end of the pass's last work other than collectives. */
    double device_last = -INFINITY, device_previous = NAN, device_charged_us = 0.0;
    for (size_t k = 0; m->device && k < traced_count; k++) {
        double s, f;
        if (dsi_trace_device_span(t, (size_t)where[k], &s, &f))
            device_last = DSI_MAX(device_last, f);
    }
    double previous_end = range->start_us, busy = 0.0, matched_device_us = 0.0, gap = 0.0;
    for (size_t p = 0; status == DS_OK && p < num_matched; p++) {
        size_t i = (size_t)order[p];
        const dsi_trace_event_t *e = &t->events[where[match[i]]];
        double end = p + 1 == num_matched ? range->end_us : DSI_MAX(e->end_us, previous_end);
        double excluded = collective_overlap(cs, ce, num_coll, previous_end, end);
        double seconds = DSI_MAX(0.0, end - previous_end - excluded) * 1e-6;
        double own = DSI_MIN(e->end_us - e->start_us, seconds * 1e6) * 1e-6;
        if (m->device) {
            double us = dsi_trace_device_us(t, (size_t)where[match[i]]);
            matched_device_us += us;
            seconds = device_end_to_end(m, index, (size_t)where[match[i]], us,
                                        p + 1 == num_matched ? device_last : -INFINITY,
                                        &device_previous) *
                      1e-6;
            device_charged_us += seconds * 1e6;
            own = us * 1e-6;
        }
        /* The operator its own time; the rest up to its end is the pass's gap. */
        gap += unprofiled(m, seconds - own);
        busy += e->end_us - e->start_us;
        previous_end = end;
        status = add_sample(m, &m->ops[model_index[i]].key, unprofiled(m, own));
    }
    ds_event_key_t gap_key;
    if (status == DS_OK &&
        dsi_pass_gap_key(m->ops, num_ops, layer, (ds_pass_t)range->pass, &gap_key))
        status = add_sample(m, &gap_key, gap);
    if (status == DS_OK && m->device) {
        double other = dsi_trace_device_us(t, index) - matched_device_us - collective_device_us;
        m->result->kernel_s += matched_device_us * 1e-6;
        m->result->kernel_other_s += DSI_MAX(0.0, other) * 1e-6;
        m->result->device_gap_s += DSI_MAX(0.0, device_charged_us - matched_device_us) * 1e-6;
    }
    if (status == DS_OK) {
        double between = range->end_us - range->start_us - busy - collective_s;
        m->result->between_s += DSI_MAX(0.0, between) * 1e-6;
        m->result->collective_s += collective_s * 1e-6;
        *mapped_p = true;
    }
out:
    dsi_free(where);
    dsi_free(traced);
    dsi_free(cs);
    dsi_free(match);
    dsi_free(model_index);
    dsi_free(order);
    dsi_free(model);
    return status;
}

/* The outermost events of the iterations outside every mapped range (an
 * event that starts before a mapped range counts up to the range's start). */
static ds_status_t collect_unmapped(mapper_t *m, double *operators_s_p)
{
    const ds_torch_trace_t *t = m->trace;
    double covered = -INFINITY, total = 0.0;
    size_t next_range = 0; /* the first mapped range of this thread not ended yet */
    bool training = false; /* this thread runs iterations or mapped passes */
    for (size_t i = 0; i < t->count; i++) {
        const dsi_trace_event_t *e = &t->events[i];
        if (i == 0 || e->thread != t->events[i - 1].thread) {
            covered = -INFINITY;
            next_range = i;
            training = false;
            for (size_t j = i; j < t->count && t->events[j].thread == e->thread && !training; j++)
                training = m->mapped[j] || t->events[j].role == DSI_ROLE_STEP;
        }
        if (!training)
            continue; /* a library's worker thread: its time overlaps the training thread's */
        while (next_range < t->count && t->events[next_range].thread == e->thread &&
               (!m->mapped[next_range] || t->events[next_range].end_us <= e->start_us))
            next_range++;
        bool in_thread = next_range < t->count && t->events[next_range].thread == e->thread;
        if (m->mapped[i] || (in_thread && t->events[next_range].start_us <= e->start_us))
            continue; /* a mapped range, or inside one */
        if (e->role == DSI_ROLE_STEP || e->role == DSI_ROLE_KERNEL || e->start_us < covered)
            continue;
        long step = step_of(m, e->start_us);
        if (step < 0)
            continue;
        covered = e->end_us;
        double end = DSI_MIN(e->end_us, m->steps.end[step]);
        if (in_thread)
            end = DSI_MIN(end, t->events[next_range].start_us);
        double seconds = DSI_MAX(0.0, end - e->start_us) * 1e-6;
        total += seconds;
        DSI_TRY(add_unmapped(m, e->name, seconds));
    }
    *operators_s_p = total;
    return DS_OK;
}

static int compare_named(const void *a, const void *b)
{
    double x = ((const named_time_t *)a)->seconds, y = ((const named_time_t *)b)->seconds;
    return x > y ? -1 : x < y;
}

static double quantile(const double *sorted, size_t n, double q)
{
    double pos = q * (double)(n - 1);
    size_t lo = (size_t)pos;
    size_t hi = lo + 1 < n ? lo + 1 : lo;
    return sorted[lo] + (pos - (double)lo) * (sorted[hi] - sorted[lo]);
}

static ds_status_t write_costs(mapper_t *m, ds_cost_table_t *costs)
{
    for (size_t i = 0; i < m->num_keys; i++) {
        key_samples_t *k = &m->keys[i];
        qsort(k->seconds, k->count, sizeof(double), dsi_compare_double);
        double sum = 0.0;
        for (size_t j = 0; j < k->count; j++)
            sum += k->seconds[j];
        ds_cost_t cost = {sum / (double)k->count,
                          quantile(k->seconds, k->count, 0.5),
                          quantile(k->seconds, k->count, 0.1),
                          quantile(k->seconds, k->count, 0.9),
                          (int64_t)k->count,
                          DS_PROV_FRAMEWORK};
        DSI_TRY(ds_cost_table_set(costs, &k->key, &cost));
    }
    m->result->keys = m->num_keys;
    return DS_OK;
}

ds_status_t ds_torch_trace_map(const ds_torch_trace_t *trace, const ds_model_t *model,
                               const ds_strategy_t *strategy, int stage, ds_cost_table_t *costs,
                               ds_framework_result_t *result)
{
    if (trace == NULL || model == NULL || strategy == NULL || costs == NULL || result == NULL)
        return DSI_ERROR(DS_ERR_INVALID_ARG, "ds_torch_trace_map: a NULL argument");
    if (stage < 0 || stage >= strategy->pp)
        return DSI_ERROR(DS_ERR_INVALID_ARG, "pipeline stage %d (accepted: 0 to %d)", stage,
                         strategy->pp - 1);
    ds_status_t status = DS_OK;
    ds_framework_result_t r;
    memset(&r, 0, sizeof(r));
    mapper_t *m = NULL;
    DSI_TRY(dsi_calloc(1, sizeof(*m), &m));
    m->trace = trace;
    m->model = model;
    m->strategy = strategy;
    m->stage = stage;
    m->result = &r;
    ds_model_info_t info;
    ds_model_get_info(model, &info);
    m->num_layers = info.num_layers;
    m->device = dsi_trace_device_timed(trace);
    r.device_timed = m->device;
    r.unprofiled_scale = m->device ? 0.0 : trace->unprofiled_scale;
    dsi_shape_ctx_init(&m->ctx, model, strategy);
    DSI_TRY_GOTO(dsi_calloc(trace->count + 1, sizeof(bool), &m->mapped), status, out);
    for (size_t i = 0; i < trace->count; i++)
        if (trace->events[i].role == DSI_ROLE_STEP)
            r.traced_s += (trace->events[i].end_us - trace->events[i].start_us) * 1e-6;
    DSI_TRY_GOTO(dsi_trace_spans(trace, DSI_ROLE_STEP, 0, &m->steps), status, out);
    DSI_TRY_GOTO(dsi_trace_spans(trace, DSI_ROLE_OP, DSI_TRACE_COLLECTIVE, &m->collectives), status,
                 out);
    double range_covered = -INFINITY;
    for (size_t i = 0; i < trace->count; i++) {
        const dsi_trace_event_t *e = &trace->events[i];
        if (i > 0 && e->thread != trace->events[i - 1].thread)
            range_covered = -INFINITY;
        if (e->role != DSI_ROLE_RANGE || step_of(m, e->start_us) < 0)
            continue;
        bool mapped = false;
        /* A range inside another mapped range of its thread is not one pass. */
        if (e->start_us >= range_covered)
            DSI_TRY_GOTO(map_range(m, i, &mapped), status, out);
        if (mapped)
            range_covered = e->end_us;
        m->mapped[i] = mapped;
        if (mapped) {
            r.ranges_mapped++;
            r.mapped_s += (e->end_us - e->start_us) * 1e-6;
        } else {
            r.ranges_skipped++;
        }
    }
    double operators_s = 0.0;
    DSI_TRY_GOTO(collect_unmapped(m, &operators_s), status, out);
    double idle = r.traced_s - r.mapped_s - operators_s;
    if (idle > 1e-9 * r.traced_s)
        DSI_TRY_GOTO(add_unmapped(m, IDLE_NAME, idle), status, out);
    if (m->num_names > 0)
        qsort(m->names, m->num_names, sizeof(*m->names), compare_named);
    for (size_t i = 0; i < m->num_names && r.num_unmapped < DS_FRAMEWORK_MAX_UNMAPPED; i++) {
        ds_framework_unmapped_t *u = &r.unmapped[r.num_unmapped++];
        snprintf(u->name, sizeof(u->name), "%s",
                 m->names[i].name == IDLE_NAME ? "(idle)" : trace->names + m->names[i].name);
        u->seconds = m->names[i].seconds;
        u->share = r.traced_s > 0.0 ? u->seconds / r.traced_s : 0.0;
    }
    r.coverage = r.traced_s > 0.0 ? r.mapped_s / r.traced_s : 0.0;
    DSI_TRY_GOTO(write_costs(m, costs), status, out);
    *result = r;
out:
    if (m != NULL) {
        for (size_t i = 0; i < m->num_keys; i++)
            dsi_free(m->keys[i].seconds);
        dsi_free(m->keys);
        dsi_free(m->names);
        dsi_spans_free(&m->steps);
        dsi_free(m->mapped);
        dsi_spans_free(&m->collectives);
    }
    dsi_free(m);
    return status;
}
