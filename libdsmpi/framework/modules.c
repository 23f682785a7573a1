/* Layer passes from module ranges: the "nn.Module: CLASS_N" events the
 * Python tracer of torch.profiler writes (with_stack=True; cat
 * "python_function"), for the classes that are transformer layers, and
 * their backward passes, which no module event covers: the autograd
 * functions ("autograd::engine::evaluate_function: ...") whose "Sequence
 * number" lies among those of the layer's forward operators. */
#include "dsi_framework.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Module classes whose instances are transformer layers: exact names, then
 * the suffixes of Hugging Face's and torch.nn's layer classes. */
static const char *const layer_classes[] = {
    "TransformerLayer",         /* Megatron-Core (Megatron-LM, NeMo) */
    "ParallelTransformerLayer", /* Megatron-LM's legacy model */
    "TransformerBlock",         /* TorchTitan; Megatron-Core's TransformerBlock is the stack of
                                   TransformerLayers: the innermost layer range wins */
    "GPT2Block",                /* Hugging Face GPT-2 */
    "Block",                    /* nanoGPT */
    "BertLayer",                /* Hugging Face BERT */
};
static const char *const layer_class_suffixes[] = {
    "DecoderLayer", /* LlamaDecoderLayer, MistralDecoderLayer, nn.TransformerDecoderLayer, ... */
    "EncoderLayer", /* nn.TransformerEncoderLayer, ... */
};

#define MODULE_PREFIX "nn.Module: "
#define BACKWARD_PREFIX "autograd::engine::evaluate_function: "

static bool is_layer_class(const char *name, size_t length)
{
    for (size_t i = 0; i < DSI_ARRAY_SIZE(layer_classes); i++)
        if (strlen(layer_classes[i]) == length && strncmp(name, layer_classes[i], length) == 0)
            return true;
    for (size_t i = 0; i < DSI_ARRAY_SIZE(layer_class_suffixes); i++) {
        size_t suffix = strlen(layer_class_suffixes[i]);
        if (length >= suffix &&
            strncmp(name + length - suffix, layer_class_suffixes[i], suffix) == 0)
            return true;
    }
    return false;
}

bool dsi_module_layer_of_name(const char *name, int32_t *layer_p)
{
    if (strncmp(name, MODULE_PREFIX, strlen(MODULE_PREFIX)) != 0)
        return false;
    const char *cls = name + strlen(MODULE_PREFIX);
    const char *underscore = strrchr(cls, '_');
    if (underscore == NULL || underscore == cls || underscore[1] == '\0' ||
        strspn(underscore + 1, "0123456789") != strlen(underscore + 1) ||
        strlen(underscore + 1) > 6 || !is_layer_class(cls, (size_t)(underscore - cls)))
        return false;
    *layer_p = (int32_t)strtol(underscore + 1, NULL, 10);
    return true;
}

bool dsi_is_backward_node(const char *name)
{
    return strncmp(name, BACKWARD_PREFIX, strlen(BACKWARD_PREFIX)) == 0;
}

static bool is_module_forward(const dsi_trace_event_t *e)
{
    return e->role == DSI_ROLE_RANGE && e->module && e->pass == DS_PASS_FORWARD;
}

/* A layer module that holds another layer module of its thread (Megatron-
 * Core's TransformerBlock around its TransformerLayers) is not one layer. */
static void demote_outer(ds_torch_trace_t *t)
{
    for (size_t i = 0; i < t->count; i++) {
        dsi_trace_event_t *e = &t->events[i];
        if (!is_module_forward(e))
            continue;
        for (size_t j = i + 1;
             j < t->count && t->events[j].thread == e->thread && t->events[j].start_us < e->end_us;
             j++)
            if (is_module_forward(&t->events[j])) {
                e->role = DSI_ROLE_OTHER;
                e->module = 0;
                t->ranges--;
                break;
            }
    }
}

typedef struct node {
    int64_t sequence;
    size_t index;
} node_t;

static int compare_nodes(const void *a, const void *b)
{
    const node_t *x = a, *y = b;
    if (x->sequence != y->sequence)
        return x->sequence < y->sequence ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

/* The sequence numbers of the forward operators inside module range `index`. */
static bool sequence_span(const ds_torch_trace_t *t, size_t index, int64_t *lo_p, int64_t *hi_p)
{
    const dsi_trace_event_t *range = &t->events[index];
    int64_t lo = INT64_MAX, hi = -1;
    for (size_t j = index + 1; j < t->count && t->events[j].thread == range->thread &&
                               t->events[j].start_us < range->end_us;
         j++) {
        const dsi_trace_event_t *e = &t->events[j];
        if (e->sequence >= 0 && !e->backward_node && e->end_us <= range->end_us) {
            lo = DSI_MIN(lo, e->sequence);
            hi = DSI_MAX(hi, e->sequence);
        }
    }
    *lo_p = lo;
    *hi_p = hi;
    return hi >= 0;
}

/* One backward range per forward module range: from the first to the last
 * autograd function (on the thread of the first) of its sequence numbers. */
static ds_status_t add_backward_ranges(ds_torch_trace_t *t)
{
    size_t num_nodes = 0, num_forward = 0;
    for (size_t i = 0; i < t->count; i++) {
        num_nodes += t->events[i].backward_node && t->events[i].sequence >= 0;
        num_forward += is_module_forward(&t->events[i]);
    }
    if (num_nodes == 0 || num_forward == 0)
        return DS_OK;
    ds_status_t status = DS_OK;
    node_t *nodes = NULL;
    dsi_trace_event_t *added = NULL;
    size_t num_added = 0;
    DSI_TRY_GOTO(dsi_calloc(num_nodes, sizeof(*nodes), &nodes), status, out);
    DSI_TRY_GOTO(dsi_calloc(num_forward, sizeof(*added), &added), status, out);
    size_t n = 0;
    for (size_t i = 0; i < t->count; i++)
        if (t->events[i].backward_node && t->events[i].sequence >= 0)
            nodes[n++] = (node_t){t->events[i].sequence, i};
    qsort(nodes, n, sizeof(*nodes), compare_nodes);
    for (size_t i = 0; i < t->count; i++) {
        const dsi_trace_event_t *range = &t->events[i];
        int64_t lo, hi;
        if (!is_module_forward(range) || !sequence_span(t, i, &lo, &hi))
            continue;
        size_t a = 0, b = n;
        while (a < b) {
            size_t mid = (a + b) / 2;
            if (nodes[mid].sequence < lo)
                a = mid + 1;
            else
                b = mid;
        }
        if (a == n || nodes[a].sequence > hi)
            continue;
        const dsi_trace_event_t *first = &t->events[nodes[a].index];
        dsi_trace_event_t backward = *range;
        backward.thread = first->thread;
        backward.start_us = first->start_us;
        backward.end_us = first->end_us;
        for (size_t k = a; k < n && nodes[k].sequence <= hi; k++) {
            const dsi_trace_event_t *node = &t->events[nodes[k].index];
            if (node->thread != first->thread)
                continue;
            backward.start_us = DSI_MIN(backward.start_us, node->start_us);
            backward.end_us = DSI_MAX(backward.end_us, node->end_us);
        }
        backward.pass = DS_PASS_BACKWARD;
        backward.sequence = -1;
        char name[256];
        snprintf(name, sizeof(name), "%s (backward)", dsi_trace_name(t, range));
        DSI_TRY_GOTO(dsi_trace_add_name(t, name, &backward.name), status, out);
        added[num_added++] = backward;
    }
    if (num_added == 0)
        goto out;
    DSI_TRY_GOTO(dsi_realloc_array(&t->events, t->count + num_added, sizeof(*t->events)), status,
                 out);
    memcpy(t->events + t->count, added, num_added * sizeof(*added));
    t->count += num_added;
    t->ranges += num_added;
    dsi_trace_sort(t);
out:
    dsi_free(nodes);
    dsi_free(added);
    return status;
}

ds_status_t dsi_trace_module_passes(ds_torch_trace_t *t)
{
    demote_outer(t);
    return add_backward_ranges(t);
}
