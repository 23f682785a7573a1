/* nccl-tests output as communication samples. */
#include "dsi_comm.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define MAX_COLUMNS 32
#define MAX_RANKS 65536
#define MAX_HOSTS 4096

void ds_comm_import_options_init(ds_comm_import_options_t *options)
{
    memset(options, 0, sizeof(*options));
    options->op = -1;
}

/* Column positions read from the header row. */
typedef struct columns {
    int count;
    int size, elements, type;
    int time[2], algbw[2], busbw[2]; /* [out-of-place, in-place]; -1 when absent */
} columns_t;

typedef struct host {
    char name[DS_NAME_MAX];
    int ranks;
} host_t;

typedef struct parser {
    const char *origin;
    int line;
    bool have_columns;
    bool table_done;
    columns_t columns;
    int64_t iterations;
    int op; /* from a "Collective test starting" line, or -1 */
    int32_t ranks;
    int32_t max_rank_seen;
    uint8_t *rank_seen; /* MAX_RANKS flags */
    host_t *hosts;
    int num_hosts;
    int prefixed;
    char device[64];
    ds_comm_samples_t *rows; /* parsed rows, before the shape is known */
    size_t num_rows;
} parser_t;

static ds_status_t bad_line(const parser_t *p, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

static ds_status_t bad_line(const parser_t *p, const char *fmt, ...)
{
    char message[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(message, sizeof(message), fmt, ap);
    va_end(ap);
    return DSI_ERROR(DS_ERR_BAD_FILE, "%s:%d: %s", p->origin, p->line, message);
}

/* Splits `line` in place into whitespace-separated tokens. */
static int tokenize(char *line, char **tokens, int max)
{
    int count = 0;
    char *save = NULL;
    for (char *t = strtok_r(line, " \t\r", &save); t != NULL; t = strtok_r(NULL, " \t\r", &save)) {
        if (count == max)
            return max + 1;
        tokens[count++] = t;
    }
    return count;
}

/* Strips a launcher prefix: "[1,0]<stdout>:" (mpirun --tag-output) or
 * "0: " (srun --label).  Returns NULL for lines the launcher tagged as
 * stderr. */
static char *strip_prefix(parser_t *p, char *line)
{
    if (line[0] == '[') {
        char *close = strchr(line, ']');
        if (close != NULL && close[1] == '<') {
            char *end = strstr(close, ">:");
            if (end != NULL) {
                bool is_stderr = strncmp(close + 2, "stderr", 6) == 0;
                p->prefixed = 1;
                return is_stderr ? NULL : end + 2;
            }
        }
        return line;
    }
    const char *c = line;
    while (*c == ' ')
        c++;
    if (isdigit((unsigned char)*c)) {
        const char *d = c;
        while (isdigit((unsigned char)*d))
            d++;
        if (d[0] == ':' && (d[1] == ' ' || d[1] == '\0' || d[1] == '#')) {
            p->prefixed = 1;
            return (char *)d + 1;
        }
    }
    return line;
}

static bool parse_i64(const char *text, int64_t *value)
{
    char *end = NULL;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (end == text || *end != '\0' || errno != 0)
        return false;
    *value = v;
    return true;
}

static bool parse_f64(const char *text, double *value)
{
    char *end = NULL;
    errno = 0;
    double v = strtod(text, &end);
    if (end == text || *end != '\0' || errno != 0 || !isfinite(v))
        return false;
    *value = v;
    return true;
}

static bool type_of(const char *name, ds_dtype_t *dtype)
{
    static const struct {
        const char *name;
        ds_dtype_t dtype;
    } types[] = {
        {"float", DS_DTYPE_FP32},   {"float32", DS_DTYPE_FP32},  {"half", DS_DTYPE_FP16},
        {"float16", DS_DTYPE_FP16}, {"bfloat16", DS_DTYPE_BF16}, {"bf16", DS_DTYPE_BF16},
        {"f8e4m3", DS_DTYPE_FP8},   {"f8e5m2", DS_DTYPE_FP8},
    };
    for (size_t i = 0; i < DSI_ARRAY_SIZE(types); i++) {
        if (strcmp(name, types[i].name) == 0) {
            *dtype = types[i].dtype;
            return true;
        }
    }
    return false;
}

/* "# nThread 1 nGpus 8 minBytes 8 ... warmup iters: 5 iters: 20 ..." */
static void parse_parameters(parser_t *p, char **tokens, int count)
{
    for (int i = 1; i + 1 < count; i++) {
        if (strcmp(tokens[i], "iters:") == 0 && strcmp(tokens[i - 1], "warmup") != 0 &&
            strcmp(tokens[i - 1], "agg") != 0) {
            int64_t value;
            if (parse_i64(tokens[i + 1], &value) && value > 0)
                p->iterations = value;
        }
    }
}

/* "#  Rank  0 [Group  0] Pid  63453 on node-000000 device  0 [0x00] A100-SXM4-40GB" */
static ds_status_t parse_rank_line(parser_t *p, char *text)
{
    char copy[512];
    snprintf(copy, sizeof(copy), "%s", text);
    char *tokens[MAX_COLUMNS];
    int count = tokenize(copy, tokens, MAX_COLUMNS);
    if (count > MAX_COLUMNS)
        count = MAX_COLUMNS;
    int64_t rank = -1;
    const char *host = NULL;
    for (int i = 0; i + 1 < count; i++) {
        if (strcmp(tokens[i], "Rank") == 0 && rank < 0 && !parse_i64(tokens[i + 1], &rank))
            rank = -2;
        if (strcmp(tokens[i], "on") == 0 && host == NULL)
            host = tokens[i + 1];
    }
    if (rank < 0 || rank >= MAX_RANKS || host == NULL)
        return bad_line(p, "%s",
                        "a '# Using devices' line without 'Rank <number>' and 'on <host>'");
    if (!p->rank_seen[rank]) {
        p->rank_seen[rank] = 1;
        p->ranks++;
        int h = 0;
        while (h < p->num_hosts && strcmp(p->hosts[h].name, host) != 0)
            h++;
        if (h == p->num_hosts) {
            if (p->num_hosts == MAX_HOSTS)
                return bad_line(p, "%s", "more than 4096 hosts in the rank lines");
            snprintf(p->hosts[h].name, sizeof(p->hosts[h].name), "%s", host);
            p->num_hosts++;
        }
        p->hosts[h].ranks++;
    }
    /* The device name follows the PCI id in brackets. */
    const char *bracket = strrchr(text, ']');
    if (p->device[0] == '\0' && bracket != NULL) {
        const char *name = bracket + 1;
        while (*name == ' ')
            name++;
        snprintf(p->device, sizeof(p->device), "%s", name);
        size_t n = strlen(p->device);
        while (n > 0 && isspace((unsigned char)p->device[n - 1]))
            p->device[--n] = '\0';
    }
    return DS_OK;
}

/* "#       size   count   type   redop  [root]   time   algbw   busbw  error|#wrong ..." */
static bool parse_header(parser_t *p, char *text)
{
    char copy[512];
    snprintf(copy, sizeof(copy), "%s", text);
    char *tokens[MAX_COLUMNS + 1];
    int count = tokenize(copy, tokens, MAX_COLUMNS);
    if (count > MAX_COLUMNS || count < 4 || strcmp(tokens[0], "size") != 0)
        return false;
    columns_t c;
    memset(&c, 0, sizeof(c));
    c.count = count;
    c.elements = c.type = -1;
    for (int g = 0; g < 2; g++)
        c.time[g] = c.algbw[g] = c.busbw[g] = -1;
    int group = -1;
    for (int i = 0; i < count; i++) {
        if (strcmp(tokens[i], "count") == 0)
            c.elements = i;
        else if (strcmp(tokens[i], "type") == 0)
            c.type = i;
        else if (strcmp(tokens[i], "time") == 0 && group < 1)
            c.time[++group] = i;
        else if (strcmp(tokens[i], "algbw") == 0 && group >= 0)
            c.algbw[group] = i;
        else if (strcmp(tokens[i], "busbw") == 0 && group >= 0)
            c.busbw[group] = i;
    }
    if (group < 0)
        return false;
    c.size = 0;
    p->columns = c;
    p->have_columns = true;
    return true;
}

static ds_status_t parse_row(parser_t *p, char *text)
{
    char *tokens[MAX_COLUMNS + 1];
    int count = tokenize(text, tokens, MAX_COLUMNS);
    const columns_t *c = &p->columns;
    if (count != c->count) {
        return bad_line(p,
                        "%d values where the header names %d columns (expected a result row "
                        "of nccl-tests)",
                        count, c->count);
    }
    int64_t size = 0, elements = 0;
    if (!parse_i64(tokens[c->size], &size) || size < 0)
        return bad_line(p, "size '%s' is not a whole number of bytes", tokens[c->size]);
    if (c->elements >= 0 && (!parse_i64(tokens[c->elements], &elements) || elements < 0))
        return bad_line(p, "count '%s' is not a whole number of elements", tokens[c->elements]);
    ds_dtype_t dtype = DS_DTYPE_FP32;
    if (c->type >= 0 && !type_of(tokens[c->type], &dtype))
        return bad_line(p,
                        "type '%s' is not supported (accepted: float, half, bfloat16, f8e4m3, "
                        "f8e5m2)",
                        tokens[c->type]);
    for (int g = 0; g < 2; g++) {
        if (c->time[g] < 0)
            continue;
        double time_us = 0, algbw = 0, busbw = 0;
        if (!parse_f64(tokens[c->time[g]], &time_us) || time_us < 0)
            return bad_line(p, "time '%s' is not a number of microseconds >= 0",
                            tokens[c->time[g]]);
        if (c->algbw[g] >= 0 && (!parse_f64(tokens[c->algbw[g]], &algbw) || algbw < 0))
            return bad_line(p, "algbw '%s' is not a number of GB/s >= 0", tokens[c->algbw[g]]);
        if (c->busbw[g] >= 0 && (!parse_f64(tokens[c->busbw[g]], &busbw) || busbw < 0))
            return bad_line(p, "busbw '%s' is not a number of GB/s >= 0", tokens[c->busbw[g]]);
        if (time_us <= 0.0 || size == 0)
            continue; /* nothing timed: no sample */
        ds_comm_sample_t s;
        memset(&s, 0, sizeof(s));
        s.dtype = dtype;
        s.bytes = size;
        s.in_place = g;
        s.mean_s = s.median_s = s.p10_s = s.p90_s = time_us * 1e-6;
        s.provenance = DS_PROV_IMPORTED;
        DSI_TRY(ds_comm_samples_add(p->rows, &s, 1));
    }
    p->num_rows++;
    return DS_OK;
}

static ds_status_t parse_line(parser_t *p, char *line)
{
    size_t length = strlen(line);
    while (length > 0 && (line[length - 1] == '\r' || line[length - 1] == '\n'))
        line[--length] = '\0';
    char *text = strip_prefix(p, line);
    if (text == NULL)
        return DS_OK; /* the launcher's stderr */
    while (*text == ' ' || *text == '\t')
        text++;
    if (*text == '\0' || strstr(text, "NCCL INFO") != NULL || strstr(text, "NCCL WARN") != NULL)
        return DS_OK;
    if (*text != '#') {
        if (p->have_columns && !p->table_done)
            return parse_row(p, text);
        int64_t number;
        char first[32] = "";
        sscanf(text, "%31s", first);
        if (!p->have_columns && parse_i64(first, &number))
            return bad_line(p, "%s", "a result row before the nccl-tests column header");
        return DS_OK; /* launcher output outside the results */
    }
    text++;
    char copy[512];
    snprintf(copy, sizeof(copy), "%s", text);
    char *tokens[MAX_COLUMNS];
    int count = tokenize(copy, tokens, MAX_COLUMNS);
    if (count == 0)
        return DS_OK;
    if (count > MAX_COLUMNS)
        count = MAX_COLUMNS;
    if (strcmp(tokens[0], "nThread") == 0) {
        parse_parameters(p, tokens, count);
    } else if (strcmp(tokens[0], "Rank") == 0) {
        DSI_TRY(parse_rank_line(p, text));
    } else if (strcmp(tokens[0], "Collective") == 0 && count >= 4 &&
               strcmp(tokens[2], "starting:") == 0) {
        ds_comm_op_t op = DS_COMM_ALLREDUCE;
        if (ds_comm_op_parse(tokens[3], &op) == DS_OK)
            p->op = (int)op;
    } else if (strcmp(tokens[0], "size") == 0) {
        if (p->have_columns)
            return bad_line(p, "%s", "a second results table (import one test per file)");
        if (!parse_header(p, text))
            return bad_line(p, "%s", "a column header without size and time columns");
    } else if (strcmp(tokens[0], "Out") == 0 || strcmp(tokens[0], "Avg") == 0) {
        if (p->have_columns)
            p->table_done = true;
    }
    return DS_OK;
}

/* The dsmpi device a name from the rank lines matches. */
static void device_spec_of(const char *device, char *spec, size_t size)
{
    static const struct {
        const char *pattern, *pattern2, *spec;
    } known[] = {
        {"A100", "80GB", "a100-80g"}, {"A100", NULL, "a100-40g"}, {"H100", NULL, "h100-sxm"},
        {"H200", NULL, "h200"},       {"B200", NULL, "b200"},
    };
    spec[0] = '\0';
    for (size_t i = 0; i < DSI_ARRAY_SIZE(known); i++) {
        if (strstr(device, known[i].pattern) != NULL &&
            (known[i].pattern2 == NULL || strstr(device, known[i].pattern2) != NULL)) {
            snprintf(spec, size, "%s", known[i].spec);
            return;
        }
    }
}

static ds_status_t op_from_name(const char *origin, ds_comm_op_t *op_p)
{
    static const struct {
        const char *prefix;
        ds_comm_op_t op;
    } names[] = {
        {"all_reduce", DS_COMM_ALLREDUCE},
        {"allreduce", DS_COMM_ALLREDUCE},
        {"all_gather", DS_COMM_ALLGATHER},
        {"allgather", DS_COMM_ALLGATHER},
        {"reduce_scatter", DS_COMM_REDUCE_SCATTER},
        {"reducescatter", DS_COMM_REDUCE_SCATTER},
        {"alltoall", DS_COMM_ALLTOALL},
        {"all_to_all", DS_COMM_ALLTOALL},
        {"sendrecv", DS_COMM_SENDRECV},
        {"broadcast", DS_COMM_BROADCAST},
    };
    const char *base = strrchr(origin, '/');
    base = base ? base + 1 : origin;
    for (size_t i = 0; i < DSI_ARRAY_SIZE(names); i++) {
        if (strncmp(base, names[i].prefix, strlen(names[i].prefix)) == 0) {
            *op_p = names[i].op;
            return DS_OK;
        }
    }
    return DSI_ERROR(DS_ERR_BAD_FILE,
                     "%s: cannot tell the primitive (name the file all_reduce_*.log, "
                     "all_gather_*, reduce_scatter_*, alltoall_*, sendrecv_* or broadcast_*, "
                     "or give it explicitly)",
                     origin);
}

/* Fills the shape fields of every parsed row. */
static ds_status_t finish(parser_t *p, const ds_comm_import_options_t *o,
                          ds_comm_import_info_t *info)
{
    memset(info, 0, sizeof(*info));
    if (!p->have_columns || p->num_rows == 0)
        return DSI_ERROR(DS_ERR_BAD_FILE, "%s: no nccl-tests results table found", p->origin);
    ds_comm_op_t op = DS_COMM_ALLREDUCE;
    if (o->op >= 0) {
        if (o->op >= DS_COMM_COUNT_)
            return DSI_ERROR(DS_ERR_INVALID_ARG, "primitive %d is not known", o->op);
        op = (ds_comm_op_t)o->op;
    } else if (p->op >= 0) {
        op = (ds_comm_op_t)p->op;
    } else {
        DSI_TRY(op_from_name(p->origin, &op));
    }
    if (op == DS_COMM_PS_PUSH || op == DS_COMM_PS_PULL)
        return DSI_ERROR(DS_ERR_INVALID_ARG, "%s: nccl-tests has no %s test", p->origin,
                         ds_comm_op_name(op));
    int32_t n = o->group_size > 0 ? o->group_size : p->ranks;
    if (n < 1)
        return DSI_ERROR(DS_ERR_BAD_FILE,
                         "%s: no '# Using devices' rank lines, so the group size is unknown "
                         "(give it explicitly)",
                         p->origin);
    int32_t nodes, per_node;
    if (o->gpus_per_node > 0) {
        per_node = n < o->gpus_per_node ? n : o->gpus_per_node;
        nodes = (n + o->gpus_per_node - 1) / o->gpus_per_node;
    } else if (p->num_hosts > 0 && o->group_size <= 0) {
        nodes = p->num_hosts;
        per_node = 0;
        for (int h = 0; h < p->num_hosts; h++)
            per_node = p->hosts[h].ranks > per_node ? p->hosts[h].ranks : per_node;
    } else {
        nodes = 1;
        per_node = n;
    }
    const char *source = o->source != NULL ? o->source : "nccl-tests";
    ds_comm_sample_t *rows = (ds_comm_sample_t *)ds_comm_samples_data(p->rows);
    size_t count = ds_comm_samples_size(p->rows);
    info->min_bytes = INT64_MAX;
    for (size_t i = 0; i < count; i++) {
        ds_comm_sample_t *s = &rows[i];
        s->op = op;
        s->repetitions = p->iterations;
        snprintf(s->source, sizeof(s->source), "%s", source);
        if (op == DS_COMM_SENDRECV) {
            /* Each rank sends to the next and receives from the previous at
             * once: pairs, batched; across nodes one pair per node leaves it. */
            s->group_size = 2;
            s->batched = 1;
            s->nodes = nodes > 1 ? 2 : 1;
            s->ranks_per_node = nodes > 1 ? 1 : 2;
            s->concurrency = nodes > 1 ? 1 : n;
        } else {
            s->group_size = n;
            s->nodes = nodes;
            s->ranks_per_node = per_node;
            s->concurrency = 1;
        }
        info->min_bytes = s->bytes < info->min_bytes ? s->bytes : info->min_bytes;
        info->max_bytes = s->bytes > info->max_bytes ? s->bytes : info->max_bytes;
    }
    if (count == 0)
        info->min_bytes = 0;
    info->op = op;
    info->group_size = n;
    info->nodes = nodes;
    info->ranks_per_node = per_node;
    info->prefixed = p->prefixed;
    info->rows = p->num_rows;
    info->samples = count;
    snprintf(info->device, sizeof(info->device), "%s", p->device);
    device_spec_of(p->device, info->device_spec, sizeof(info->device_spec));
    return DS_OK;
}

ds_status_t ds_comm_parse_nccl_tests(const char *text, const char *origin,
                                     const ds_comm_import_options_t *options,
                                     ds_comm_samples_t *samples, ds_comm_import_info_t *info_p)
{
    if (text == NULL || samples == NULL)
        return DSI_ERROR(DS_ERR_INVALID_ARG, "nccl-tests import of %s without %s",
                         origin ? origin : "<text>", text == NULL ? "text" : "a sample list");
    ds_status_t status = DS_OK;
    ds_comm_import_options_t defaults;
    ds_comm_import_options_init(&defaults);
    const ds_comm_import_options_t *o = options ? options : &defaults;
    parser_t p;
    memset(&p, 0, sizeof(p));
    p.origin = origin ? origin : "<text>";
    p.op = -1;
    char *copy = NULL;
    DSI_TRY_GOTO(dsi_calloc(MAX_RANKS, 1, &p.rank_seen), status, out);
    DSI_TRY_GOTO(dsi_calloc(MAX_HOSTS, sizeof(*p.hosts), &p.hosts), status, out);
    DSI_TRY_GOTO(ds_comm_samples_create(&p.rows), status, out);
    DSI_TRY_GOTO(dsi_strdup(text, &copy), status, out);
    /* Lines are split by hand: strtok would merge empty lines and shift the
     * line numbers of the messages. */
    for (char *line = copy; line != NULL;) {
        char *next = strchr(line, '\n');
        if (next != NULL)
            *next++ = '\0';
        p.line++;
        DSI_TRY_GOTO(parse_line(&p, line), status, out);
        line = next;
    }
    ds_comm_import_info_t info;
    DSI_TRY_GOTO(finish(&p, o, &info), status, out);
    DSI_TRY_GOTO(
        ds_comm_samples_add(samples, ds_comm_samples_data(p.rows), ds_comm_samples_size(p.rows)),
        status, out);
    if (info_p != NULL)
        *info_p = info;
out:
    dsi_free(copy);
    ds_comm_samples_destroy(p.rows);
    dsi_free(p.hosts);
    dsi_free(p.rank_seen);
    return status;
}

ds_status_t ds_comm_import_nccl_tests(const char *path, const ds_comm_import_options_t *options,
                                      ds_comm_samples_t *samples, ds_comm_import_info_t *info_p)
{
    char *text = NULL;
    DSI_TRY(dsi_read_file(path, (size_t)dsi_param_int(DSI_PARAM_MAX_INPUT_BYTES), &text, NULL));
    ds_status_t status = ds_comm_parse_nccl_tests(text, path, options, samples, info_p);
    dsi_free(text);
    return status;
}
