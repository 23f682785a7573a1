/* Primitive names, bus-bandwidth factors, communication keys and sample
 * lists. */
#include "dsi_comm.h"

#include <stdio.h>
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

/* ---- text form ------------------------------------------------------------------------------
 * One sample a line:
 *   <primitive> <dtype> bytes=B group=N nodes=K per-node=R [conc=C] [span=S] [in-place]
 *       [batched] = <mean> [<median> <p10> <p90> <repetitions> <provenance> [source=TEXT]]
 * seconds; the source runs to the end of the line; lines starting with '#'
 * are comments. */

static ds_status_t parse_layout_word(const char *word, ds_comm_sample_t *x, const char *origin,
                                     int number)
{
    static const char *const names[] = {
        "bytes=", "group=", "nodes=", "per-node=", "conc=", "span="};
    if (strcmp(word, "in-place") == 0) {
        x->in_place = 1;
        return DS_OK;
    }
    if (strcmp(word, "batched") == 0) {
        x->batched = 1;
        return DS_OK;
    }
    for (size_t i = 0; i < DSI_ARRAY_SIZE(names); i++) {
        size_t length = strlen(names[i]);
        if (strncmp(word, names[i], length) != 0)
            continue;
        int64_t value = 0;
        ds_status_t status = dsi_parse_i64(word + length, names[i], i == 0 ? 1 : 1,
                                           i == 0 ? INT64_MAX : INT32_MAX, false, &value);
        if (status != DS_OK)
            return DSI_ERROR(status, "%s:%d: %s", origin, number, ds_last_error());
        switch (i) {
        case 0: x->bytes = value; break;
        case 1: x->group_size = (int32_t)value; break;
        case 2: x->nodes = (int32_t)value; break;
        case 3: x->ranks_per_node = (int32_t)value; break;
        case 4: x->concurrency = (int32_t)value; break;
        default: x->span_nodes = (int32_t)value; break;
        }
        return DS_OK;
    }
    return DSI_ERROR(DS_ERR_BAD_FILE,
                     "%s:%d: '%s' is not part of a sample's layout (accepted: bytes=B group=N "
                     "nodes=K per-node=R conc=C span=S in-place batched)",
                     origin, number, word);
}

static ds_status_t parse_sample_line(char *line, const char *origin, int number,
                                     ds_comm_sample_t *x)
{
    static const char *const provenances[DS_PROV_COUNT_] = {
        "measured", "interpolated", "extrapolated", "imported",
        "assumed",  "modelled",     "framework",    "calibrated"};
    memset(x, 0, sizeof(*x));
    x->concurrency = 1;
    x->provenance = DS_PROV_MEASURED;
    char *sep = strstr(line, " = ");
    if (sep == NULL)
        return DSI_ERROR(DS_ERR_BAD_FILE,
                         "%s:%d: expected '<primitive> <dtype> bytes=B group=N nodes=K per-node=R "
                         "= <seconds> ...'",
                         origin, number);
    *sep = '\0';
    char *rest = sep + 3, *save = NULL;
    int words = 0;
    for (char *w = strtok_r(line, " \t", &save); w != NULL; w = strtok_r(NULL, " \t", &save)) {
        ds_status_t status = DS_OK;
        if (words == 0)
            status = ds_comm_op_parse(w, &x->op);
        else if (words == 1)
            status = ds_dtype_parse(w, &x->dtype);
        else
            DSI_TRY(parse_layout_word(w, x, origin, number));
        if (status != DS_OK)
            return DSI_ERROR(status, "%s:%d: %s", origin, number, ds_last_error());
        words++;
    }
    if (words < 2 || x->bytes < 1 || x->group_size < 1 || x->nodes < 1 || x->ranks_per_node < 1)
        return DSI_ERROR(DS_ERR_BAD_FILE,
                         "%s:%d: a sample needs a primitive, a dtype and bytes=, group=, nodes=, "
                         "per-node= of at least 1",
                         origin, number);
    char *source = strstr(rest, "source=");
    if (source != NULL) {
        *source = '\0';
        source += strlen("source=");
        size_t length = strcspn(source, "\r\n");
        while (length > 0 && (source[length - 1] == ' ' || source[length - 1] == '\t'))
            length--;
        if (length >= sizeof(x->source))
            return DSI_ERROR(DS_ERR_BAD_FILE, "%s:%d: source longer than %zu characters", origin,
                             number, sizeof(x->source) - 1);
        memcpy(x->source, source, length);
        x->source[length] = '\0';
    }
    char provenance[32] = "measured";
    long long reps = 0;
    int fields = sscanf(rest, "%lf %lf %lf %lf %lld %31s", &x->mean_s, &x->median_s, &x->p10_s,
                        &x->p90_s, &reps, provenance);
    if (fields < 1 || !(x->mean_s > 0.0) || (fields >= 4 && !(x->median_s > 0.0)))
        return DSI_ERROR(DS_ERR_BAD_FILE,
                         "%s:%d: the time after '=' is not a number of seconds > 0", origin,
                         number);
    if (fields < 2)
        x->median_s = x->p10_s = x->p90_s = x->mean_s;
    x->repetitions = reps;
    int p = -1;
    for (int i = 0; i < DS_PROV_COUNT_; i++)
        if (strcmp(provenance, provenances[i]) == 0)
            p = i;
    if (p < 0)
        return DSI_ERROR(DS_ERR_BAD_FILE,
                         "%s:%d: provenance '%s' (accepted: measured, interpolated, extrapolated, "
                         "imported, assumed, modelled, framework, calibrated)",
                         origin, number, provenance);
    x->provenance = (ds_provenance_t)p;
    return DS_OK;
}

ds_status_t ds_comm_samples_parse_text(ds_comm_samples_t *samples, const char *text,
                                       const char *origin)
{
    char *copy = NULL;
    ds_comm_samples_t *parsed = NULL;
    DSI_TRY(dsi_strdup(text, &copy));
    ds_status_t status = ds_comm_samples_create(&parsed);
    int number = 0;
    char *line = copy;
    while (status == DS_OK && line != NULL && *line != '\0') {
        char *next = strchr(line, '\n');
        if (next != NULL)
            *next++ = '\0';
        number++;
        const char *c = line;
        while (*c == ' ' || *c == '\t' || *c == '\r')
            c++;
        if (*c != '\0' && *c != '#') {
            ds_comm_sample_t x;
            status = parse_sample_line(line, origin, number, &x);
            if (status == DS_OK)
                status = ds_comm_samples_add(parsed, &x, 1);
        }
        line = next;
    }
    /* All or nothing. */
    if (status == DS_OK)
        status = ds_comm_samples_add(samples, parsed->items, parsed->count);
    ds_comm_samples_destroy(parsed);
    dsi_free(copy);
    return status;
}

ds_status_t ds_comm_samples_load_text(ds_comm_samples_t *samples, const char *path)
{
    char *text = NULL;
    DSI_TRY(dsi_read_file(path, 1u << 30, &text, NULL));
    ds_status_t status = ds_comm_samples_parse_text(samples, text, path);
    dsi_free(text);
    return status;
}

ds_status_t ds_comm_samples_write_text(const ds_comm_sample_t *items, size_t count, FILE *out)
{
    static const char *const provenances[DS_PROV_COUNT_] = {
        "measured", "interpolated", "extrapolated", "imported",
        "assumed",  "modelled",     "framework",    "calibrated"};
    fprintf(out, "# primitive dtype layout = mean median p10 p90 (seconds) repetitions "
                 "provenance source\n");
    for (size_t i = 0; i < count; i++) {
        const ds_comm_sample_t *x = &items[i];
        fprintf(out, "%s %s bytes=%lld group=%d nodes=%d per-node=%d conc=%d",
                ds_comm_op_name(x->op), ds_dtype_name(x->dtype), (long long)x->bytes, x->group_size,
                x->nodes, x->ranks_per_node, x->concurrency > 0 ? x->concurrency : 1);
        if (x->span_nodes > 0)
            fprintf(out, " span=%d", x->span_nodes);
        fprintf(out, "%s%s = %.9e %.9e %.9e %.9e %lld %s", x->in_place ? " in-place" : "",
                x->batched ? " batched" : "", x->mean_s, x->median_s, x->p10_s, x->p90_s,
                (long long)x->repetitions,
                (unsigned)x->provenance < DS_PROV_COUNT_ ? provenances[x->provenance] : "measured");
        if (x->source[0] != '\0')
            fprintf(out, " source=%.*s", (int)strnlen(x->source, sizeof(x->source)), x->source);
        fputc('\n', out);
    }
    return ferror(out) ? DSI_ERROR(DS_ERR_IO, "writing communication samples failed") : DS_OK;
}
