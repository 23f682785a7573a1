/* Primitive names, bus-bandwidth factors, communication keys and sample
 * lists. */
#include "dsi_comm.h"

#include <string.h>

static const char *const op_names[DS_COMM_COUNT_] = {
    "sendrecv", "allreduce", "allgather", "reduce_scatter",
    "alltoall", "broadcast", "ps_push",   "ps_pull",
};

const char *ds_comm_op_name(ds_comm_op_t op)
{
    return (unsigned)op < DS_COMM_COUNT_ ? op_names[op] : "?";
}

ds_status_t ds_comm_op_parse(const char *text, ds_comm_op_t *op_p)
{
    static const struct {
        const char *name;
        ds_comm_op_t op;
    } aliases[] = {
        {"all_reduce", DS_COMM_ALLREDUCE},         {"all_gather", DS_COMM_ALLGATHER},
        {"all-reduce", DS_COMM_ALLREDUCE},         {"all-gather", DS_COMM_ALLGATHER},
        {"reducescatter", DS_COMM_REDUCE_SCATTER}, {"reduce-scatter", DS_COMM_REDUCE_SCATTER},
        {"all_to_all", DS_COMM_ALLTOALL},          {"all-to-all", DS_COMM_ALLTOALL},
        {"send_recv", DS_COMM_SENDRECV},           {"p2p", DS_COMM_SENDRECV},
    };
    char word[64];
    size_t length = text ? strlen(text) : 0;
    if (length == 0 || length >= sizeof(word))
        goto bad;
    memcpy(word, text, length + 1);
    if (length > 5 && strcmp(word + length - 5, "_perf") == 0)
        word[length - 5] = '\0';
    for (int i = 0; i < DS_COMM_COUNT_; i++) {
        if (strcmp(word, op_names[i]) == 0) {
            *op_p = (ds_comm_op_t)i;
            return DS_OK;
        }
    }
    for (size_t i = 0; i < DSI_ARRAY_SIZE(aliases); i++) {
        if (strcmp(word, aliases[i].name) == 0) {
            *op_p = aliases[i].op;
            return DS_OK;
        }
    }
bad:
    return DSI_ERROR(DS_ERR_INVALID_ARG,
                     "primitive '%s' is not known (accepted: allreduce, allgather, reduce_scatter, "
                     "alltoall, sendrecv, broadcast, ps_push, ps_pull, or the nccl-tests names "
                     "all_reduce, all_gather, ...)",
                     text ? text : "");
}

double ds_comm_busbw_factor(ds_comm_op_t op, int group_size)
{
    double n = group_size;
    if (group_size < 2)
        return op == DS_COMM_SENDRECV ? 1.0 : 0.0;
    switch (op) {
    case DS_COMM_ALLREDUCE: return 2.0 * (n - 1.0) / n;
    case DS_COMM_ALLGATHER:
    case DS_COMM_REDUCE_SCATTER:
    case DS_COMM_ALLTOALL: return (n - 1.0) / n;
    case DS_COMM_SENDRECV:
    case DS_COMM_BROADCAST:
    case DS_COMM_PS_PUSH:
    case DS_COMM_PS_PULL: return 1.0;
    case DS_COMM_COUNT_: break;
    }
    return 0.0;
}

ds_status_t ds_comm_parse_size(const char *text, const char *what, int64_t *bytes_p)
{
    return dsi_parse_bytes(text, what, bytes_p);
}

ds_status_t ds_comm_key_init(ds_event_key_t *key, ds_comm_op_t op, int64_t bytes, int group_size,
                             int gpus_per_node)
{
    if ((unsigned)op >= DS_COMM_COUNT_)
        return DSI_ERROR(DS_ERR_INVALID_ARG, "primitive %d is not known (accepted: 0 to %d)",
                         (int)op, DS_COMM_COUNT_ - 1);
    if (bytes < 0)
        return DSI_ERROR(DS_ERR_INVALID_ARG, "message of %lld bytes (accepted: >= 0)",
                         (long long)bytes);
    if (group_size < 1 || gpus_per_node < 1)
        return DSI_ERROR(DS_ERR_INVALID_ARG,
                         "group of %d ranks on nodes of %d devices (accepted: both >= 1)",
                         group_size, gpus_per_node);
    ds_event_key_t k;
    memset(&k, 0, sizeof(k));
    k.kind = DS_EVENT_COMM;
    k.op = (uint8_t)op;
    k.pass = DS_PASS_STEP;
    k.dtype = DS_DTYPE_FP32;
    k.group = DS_GROUP_NONE;
    k.group_size = group_size;
    k.ranks_per_node = group_size < gpus_per_node ? group_size : gpus_per_node;
    k.nodes = (group_size + gpus_per_node - 1) / gpus_per_node;
    k.concurrency = 1;
    k.dims[0] = bytes;
    *key = k;
    return DS_OK;
}

/* ---- sample lists ---------------------------------------------------------------------- */

struct ds_comm_samples {
    ds_comm_sample_t *items;
    size_t count, capacity;
};

ds_status_t ds_comm_samples_create(ds_comm_samples_t **samples_p)
{
    ds_comm_samples_t *samples;
    DSI_TRY(dsi_calloc(1, sizeof(*samples), &samples));
    *samples_p = samples;
    return DS_OK;
}

void ds_comm_samples_destroy(ds_comm_samples_t *samples)
{
    if (samples == NULL)
        return;
    dsi_free(samples->items);
    dsi_free(samples);
}

ds_status_t ds_comm_samples_add(ds_comm_samples_t *samples, const ds_comm_sample_t *items,
                                size_t count)
{
    if (count == 0)
        return DS_OK;
    if (samples->count + count > samples->capacity) {
        size_t capacity = samples->capacity ? samples->capacity : 64;
        while (capacity < samples->count + count)
            capacity *= 2;
        DSI_TRY(dsi_realloc_array(&samples->items, capacity, sizeof(*samples->items)));
        samples->capacity = capacity;
    }
    memcpy(samples->items + samples->count, items, count * sizeof(*items));
    samples->count += count;
    return DS_OK;
}

size_t ds_comm_samples_size(const ds_comm_samples_t *samples)
{
    return samples->count;
}

const ds_comm_sample_t *ds_comm_samples_data(const ds_comm_samples_t *samples)
{
    return samples->items;
}
