/*
 * Collectives of a trace with their sizes.  torch.distributed wraps every
 * collective in a `record_param_comms` event whose args name it and give
 * its element counts, element type and group size; these are read as the
 * trace is (dsi_trace_add_collective) and grouped here, each occurrence
 * timed as the mapping times collectives inside passes.
 */
#include "dsi_framework.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* "Collective name" values (c10d's names, with and without the leading
 * underscore and suffixes such as _base, _into_tensor, _coalesced). */
static const struct {
    const char *name;
    ds_comm_op_t op;
} collective_names[] = {
    {"allreduce", DS_COMM_ALLREDUCE},
    {"all_reduce", DS_COMM_ALLREDUCE},
    {"allgather", DS_COMM_ALLGATHER},
    {"all_gather", DS_COMM_ALLGATHER},
    {"reduce_scatter", DS_COMM_REDUCE_SCATTER},
    {"reducescatter", DS_COMM_REDUCE_SCATTER},
    {"alltoall", DS_COMM_ALLTOALL},
    {"all_to_all", DS_COMM_ALLTOALL},
    {"broadcast", DS_COMM_BROADCAST},
    {"send", DS_COMM_SENDRECV},
    {"recv", DS_COMM_SENDRECV},
};

static bool op_of_collective_name(const char *name, ds_comm_op_t *op_p)
{
    while (*name == '_')
        name++;
    for (size_t i = 0; i < DSI_ARRAY_SIZE(collective_names); i++) {
        size_t n = strlen(collective_names[i].name);
        if (strncmp(name, collective_names[i].name, n) == 0 &&
            (name[n] == '\0' || name[n] == '_')) {
            *op_p = collective_names[i].op;
            return true;
        }
    }
    return false;
}

/* torch's scalar type names as record_param_comms writes them. */
static const struct {
    const char *name;
    uint8_t dtype;
    uint8_t size;
} element_types[] = {
    {"Float", DS_DTYPE_FP32, 4},         {"BFloat16", DS_DTYPE_BF16, 2},
    {"Half", DS_DTYPE_FP16, 2},          {"Float8_e4m3fn", DS_DTYPE_FP8, 1},
    {"Float8_e5m2", DS_DTYPE_FP8, 1},    {"Double", DSI_TRACE_DTYPE_OTHER, 8},
    {"Long", DSI_TRACE_DTYPE_OTHER, 8},  {"Int", DSI_TRACE_DTYPE_OTHER, 4},
    {"Short", DSI_TRACE_DTYPE_OTHER, 2}, {"Char", DSI_TRACE_DTYPE_OTHER, 1},
    {"Byte", DSI_TRACE_DTYPE_OTHER, 1},  {"Bool", DSI_TRACE_DTYPE_OTHER, 1},
};

static bool count_of(const json_t *args, const char *key, int64_t max, int64_t *value_p)
{
    const json_t *value = json_object_get(args, key);
    if (!json_is_integer(value) || json_integer_value(value) < 0 || json_integer_value(value) > max)
        return false;
    *value_p = (int64_t)json_integer_value(value);
    return true;
}

ds_status_t dsi_trace_add_collective(ds_torch_trace_t *t, const json_t *args, uint32_t *index_p)
{
    *index_p = 0;
    if (!json_is_object(args))
        return DS_OK;
    const char *name = json_string_value(json_object_get(args, "Collective name"));
    const char *type = json_string_value(json_object_get(args, "dtype"));
    ds_comm_op_t op;
    int64_t in = 0, out = 0, ranks = 0;
    if (name == NULL || type == NULL || !op_of_collective_name(name, &op) ||
        !count_of(args, "In msg nelems", (int64_t)1 << 50, &in) ||
        !count_of(args, "Out msg nelems", (int64_t)1 << 50, &out) ||
        !count_of(args, "Group size", (int64_t)1 << 30, &ranks) || ranks < 1)
        return DS_OK;
    size_t type_index = DSI_ARRAY_SIZE(element_types);
    for (size_t i = 0; i < DSI_ARRAY_SIZE(element_types); i++)
        if (strcmp(type, element_types[i].name) == 0)
            type_index = i;
    if (type_index == DSI_ARRAY_SIZE(element_types))
        return DS_OK; /* a type whose size is unknown: its bytes cannot be told */
    uint32_t index;
    DSI_TRY(dsi_trace_append(&t->collectives, &t->num_collectives, &t->collectives_capacity,
                             sizeof(*t->collectives), "collectives", &index));
    t->collectives[index - 1] =
        (dsi_trace_collective_t){(uint8_t)op, element_types[type_index].dtype, (int32_t)ranks,
                                 DSI_MAX(in, out) * element_types[type_index].size};
    *index_p = index;
    return DS_OK;
}

/* One occurrence with the group it falls in. */
typedef struct occurrence {
    dsi_trace_collective_t c;
    double seconds;
} occurrence_t;

static int compare_occurrences(const void *a, const void *b)
{
    const occurrence_t *x = a, *y = b;
    if (x->c.op != y->c.op)
        return x->c.op < y->c.op ? -1 : 1;
    if (x->c.ranks != y->c.ranks)
        return x->c.ranks < y->c.ranks ? -1 : 1;
    if (x->c.bytes != y->c.bytes)
        return x->c.bytes < y->c.bytes ? -1 : 1;
    if (x->c.dtype != y->c.dtype)
        return x->c.dtype < y->c.dtype ? -1 : 1;
    return (x->seconds > y->seconds) - (x->seconds < y->seconds);
}

static bool same_group(const dsi_trace_collective_t *a, const dsi_trace_collective_t *b)
{
    return a->op == b->op && a->ranks == b->ranks && a->bytes == b->bytes && a->dtype == b->dtype;
}

/* Occurrences inside the iterations, timed. */
static ds_status_t collect(const ds_torch_trace_t *t, occurrence_t *occ, size_t *count_p)
{
    dsi_spans_t steps = {0}, coll = {0};
    ds_status_t status = dsi_trace_spans(t, DSI_ROLE_STEP, 0, &steps);
    if (status == DS_OK)
        status = dsi_trace_spans(t, DSI_ROLE_OP, DSI_TRACE_COLLECTIVE, &coll);
    bool device = dsi_trace_device_timed(t);
    size_t n = 0;
    for (size_t i = 0; status == DS_OK && i < t->count; i++) {
        const dsi_trace_event_t *e = &t->events[i];
        if (e->collective == 0 || dsi_spans_find(&steps, e->start_us) < 0)
            continue;
        double us = device ? dsi_trace_device_us(t, i) : 0.0;
        if (us <= 0.0)
            us = dsi_spans_latest_end(&coll, e->start_us, e->end_us) - e->start_us;
        occ[n++] = (occurrence_t){t->collectives[e->collective - 1], us * 1e-6};
    }
    dsi_spans_free(&steps);
    dsi_spans_free(&coll);
    *count_p = n;
    return status;
}

ds_status_t ds_torch_trace_collectives(const ds_torch_trace_t *trace,
                                       ds_torch_collective_t **list_p, size_t *count_p)
{
    *list_p = NULL;
    *count_p = 0;
    if (trace->num_collectives == 0)
        return DS_OK;
    occurrence_t *occ = NULL;
    ds_torch_collective_t *list = NULL;
    size_t n = 0, groups = 0;
    ds_status_t status = dsi_malloc(trace->num_collectives * sizeof(*occ), &occ);
    if (status == DS_OK)
        status = collect(trace, occ, &n);
    if (status == DS_OK && n > 0) {
        qsort(occ, n, sizeof(*occ), compare_occurrences);
        status = dsi_calloc(n, sizeof(*list), &list);
    }
    for (size_t i = 0; status == DS_OK && i < n;) {
        size_t j = i;
        while (j < n && same_group(&occ[i].c, &occ[j].c))
            j++;
        size_t k = j - i;
        ds_torch_collective_t *g = &list[groups++];
        g->op = (ds_comm_op_t)occ[i].c.op;
        g->dtype = occ[i].c.dtype == DSI_TRACE_DTYPE_OTHER ? -1 : occ[i].c.dtype;
        g->bytes = occ[i].c.bytes;
        g->ranks = occ[i].c.ranks;
        g->count = k;
        g->min_s = occ[i].seconds; /* sorted by time inside the group */
        g->max_s = occ[j - 1].seconds;
        g->median_s = k % 2 ? occ[i + k / 2].seconds
                            : 0.5 * (occ[i + k / 2 - 1].seconds + occ[i + k / 2].seconds);
        i = j;
    }
    dsi_free(occ);
    if (status != DS_OK) {
        dsi_free(list);
        return status;
    }
    *list_p = list;
    *count_p = groups;
    return DS_OK;
}

void ds_torch_collectives_free(ds_torch_collective_t *list)
{
    dsi_free(list);
}
