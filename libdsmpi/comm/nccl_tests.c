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

/* How far one test has got.  nccl-tests prints, per test, a version line,
 * "# Collective test starting: X_perf", "# nThread ...", the rank lines and
 * one results table; a banner line of a stage the test has already reached
 * starts the next test of the file. */
typedef enum stage {
    STAGE_NONE,
    STAGE_VERSION,    /* "# nccl-tests version 2.17.8 ..." */
    STAGE_STARTING,   /* "# Collective test starting: all_gather_perf" */
    STAGE_PARAMETERS, /* "# nThread 1 nGpus 1 minBytes ..." */
    STAGE_TABLE,      /* the column header and the rows */
} stage_t;

/* The test being read. */
typedef struct test {
    int first_line;
    stage_t stage;
    bool have_columns;
    bool table_done;
    columns_t columns;
    int64_t iterations;
    int op; /* from a "Collective test starting" line, or -1 */
    int32_t ranks;
    host_t *hosts; /* MAX_HOSTS, owned by the parser */
    int num_hosts;
    size_t first_sample; /* its samples: the parser's rows from here on */
    size_t num_rows;
} test_t;

typedef struct parser {
    const char *origin;
    const ds_comm_import_options_t *options;
    int line;
    test_t test;
    uint8_t *rank_seen; /* MAX_RANKS flags, of the current test */
    int prefixed;
    char device[64];
    ds_comm_samples_t *rows; /* the samples of every test read so far */
    ds_comm_import_info_t info;
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

/* Strips a launcher prefix: "[1,0]<stdout>:" (Open MPI --tag-output),
 * "0: " (srun --label) or "[0] " (MPICH/Intel MPI -prepend-rank).  Returns
 * NULL for lines the launcher tagged as stderr. */
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
        const char *d = line + 1;
        while (isdigit((unsigned char)*d))
            d++;
        if (close != NULL && d == close && d > line + 1 && (d[1] == ' ' || d[1] == '\0')) {
            p->prefixed = 1;
            return close + 1;
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

static bool starts_with(const char *text, const char *prefix)
{
    return strncmp(text, prefix, strlen(prefix)) == 0;
}

/* Lines real jobs print besides nccl-tests' own, anywhere in the output, the
 * results table included: NCCL's debug lines, UCX's log lines, the
 * launchers' messages.  Anything else inside a table is an error. */
static bool is_noise(const char *text)
{
    static const char *const nccl[] = {"NCCL INFO", "NCCL WARN", "NCCL TRACE"};
    for (size_t i = 0; i < DSI_ARRAY_SIZE(nccl); i++)
        if (strstr(text, nccl[i]) != NULL)
            return true;
    /* "[1622510437.752046] [g0314:110100:0]  ucp_context.c:1437 UCX  WARN  ..." */
    for (const char *u = strstr(text, "UCX "); u != NULL; u = strstr(u + 4, "UCX ")) {
        const char *level = u + 4;
        while (*level == ' ')
            level++;
        static const char *const levels[] = {"ERROR", "WARN", "DIAG", "INFO", "DEBUG", "TRACE"};
        for (size_t i = 0; i < DSI_ARRAY_SIZE(levels); i++)
            if (starts_with(level, levels[i]))
                return true;
    }
    static const char *const launchers[] = {
        "srun:",   "slurmstepd:", "salloc:",  "sbatch:",  "mpirun",   "mpiexec",
        "prterun", "orterun",     "Warning:", "WARNING:", "--------",
    };
    for (size_t i = 0; i < DSI_ARRAY_SIZE(launchers); i++)
        if (starts_with(text, launchers[i]))
            return true;
    /* Open MPI and PMIx: "[host:pid] message". */
    if (text[0] == '[') {
        const char *close = strchr(text, ']');
        const char *colon = strchr(text, ':');
        if (close != NULL && colon != NULL && colon < close && close[1] == ' ')
            return true;
    }
    return false;
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
        {"float", DS_DTYPE_FP32},
        {"float32", DS_DTYPE_FP32},
        {"half", DS_DTYPE_FP16},
        {"float16", DS_DTYPE_FP16},
        {"bfloat16", DS_DTYPE_BF16},
        {"bf16", DS_DTYPE_BF16},
        {"f8e4m3", DS_DTYPE_FP8},
        {"f8e5m2", DS_DTYPE_FP8},
        /* Element types dsmpi has no key for: communication is priced by
         * bytes, so their rows are kept as fp32 rows of the same size. */
        {"double", DS_DTYPE_FP32},
        {"float64", DS_DTYPE_FP32},
        {"int8", DS_DTYPE_FP32},
        {"uint8", DS_DTYPE_FP32},
        {"int32", DS_DTYPE_FP32},
        {"uint32", DS_DTYPE_FP32},
        {"int64", DS_DTYPE_FP32},
        {"uint64", DS_DTYPE_FP32},
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
                p->test.iterations = value;
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
        test_t *t = &p->test;
        p->rank_seen[rank] = 1;
        t->ranks++;
        int h = 0;
        while (h < t->num_hosts && strcmp(t->hosts[h].name, host) != 0)
            h++;
        if (h == t->num_hosts) {
            if (t->num_hosts == MAX_HOSTS)
                return bad_line(p, "%s", "more than 4096 hosts in the rank lines");
            snprintf(t->hosts[h].name, sizeof(t->hosts[h].name), "%s", host);
            t->hosts[h].ranks = 0;
            t->num_hosts++;
        }
        t->hosts[h].ranks++;
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
    p->test.columns = c;
    p->test.have_columns = true;
    return true;
}

static ds_status_t parse_row(parser_t *p, char *text)
{
    char *tokens[MAX_COLUMNS + 1];
    int count = tokenize(text, tokens, MAX_COLUMNS);
    const columns_t *c = &p->test.columns;
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
                        "type '%s' is not supported (accepted: float, half, bfloat16, double, "
                        "f8e4m3, f8e5m2, int8, uint8, int32, uint32, int64, uint64)",
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
    p->test.num_rows++;
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
                     "%s: cannot tell the primitive: no '# Collective test starting: <name>_perf' "
                     "line and the file name does not start with one (accepted: all_reduce, "
                     "all_gather, reduce_scatter, alltoall, sendrecv, broadcast)",
                     origin);
}

/* Gives the rows of the test just read their primitive and shape and
 * describes the test in the parser's info.  A test without rows (cut off
 * before its table) adds nothing. */
static ds_status_t finish_test(parser_t *p)
{
    const ds_comm_import_options_t *o = p->options;
    test_t *t = &p->test;
    if (t->num_rows == 0)
        return DS_OK;
    ds_comm_op_t op = DS_COMM_ALLREDUCE;
    if (o->op >= 0) {
        if (o->op >= DS_COMM_COUNT_)
            return DSI_ERROR(DS_ERR_INVALID_ARG, "primitive %d is not known", o->op);
        op = (ds_comm_op_t)o->op;
    } else if (t->op >= 0) {
        op = (ds_comm_op_t)t->op;
    } else {
        DSI_TRY(op_from_name(p->origin, &op));
    }
    if (op == DS_COMM_PS_PUSH || op == DS_COMM_PS_PULL)
        return DSI_ERROR(DS_ERR_INVALID_ARG, "%s: nccl-tests has no %s test", p->origin,
                         ds_comm_op_name(op));
    int32_t n = o->group_size > 0 ? o->group_size : t->ranks;
    if (n < 1)
        return DSI_ERROR(DS_ERR_BAD_FILE,
                         "%s:%d: no '# Using devices' rank lines, so the group size is unknown "
                         "(give it explicitly)",
                         p->origin, t->first_line);
    int32_t nodes, per_node;
    bool hosts_known = false;
    if (o->gpus_per_node > 0) {
        per_node = n < o->gpus_per_node ? n : o->gpus_per_node;
        nodes = (n + o->gpus_per_node - 1) / o->gpus_per_node;
    } else if (t->num_hosts > 0 && o->group_size <= 0) {
        nodes = t->num_hosts;
        hosts_known = true;
        per_node = 0;
        for (int h = 0; h < t->num_hosts; h++)
            per_node = t->hosts[h].ranks > per_node ? t->hosts[h].ranks : per_node;
    } else {
        nodes = 1;
        per_node = n;
    }
    ds_comm_import_info_t *info = &p->info;
    if (info->num_tests == DS_COMM_IMPORT_MAX_TESTS)
        return DSI_ERROR(DS_ERR_BAD_FILE,
                         "%s:%d: more than %d tests in one file (accepted: up "
                         "to %d; split the file)",
                         p->origin, t->first_line, DS_COMM_IMPORT_MAX_TESTS,
                         DS_COMM_IMPORT_MAX_TESTS);
    const char *source = o->source != NULL ? o->source : "nccl-tests";
    ds_comm_sample_t *rows = (ds_comm_sample_t *)ds_comm_samples_data(p->rows);
    size_t end = ds_comm_samples_size(p->rows);
    ds_comm_import_test_t d;
    memset(&d, 0, sizeof(d));
    d.op = op;
    d.group_size = n;
    d.nodes = nodes;
    d.ranks_per_node = per_node;
    d.hosts_known = hosts_known;
    d.line = t->first_line;
    d.rows = t->num_rows;
    d.samples = end - t->first_sample;
    d.min_bytes = d.samples > 0 ? INT64_MAX : 0;
    for (size_t i = t->first_sample; i < end; i++) {
        ds_comm_sample_t *s = &rows[i];
        s->op = op;
        s->repetitions = t->iterations;
        snprintf(s->source, sizeof(s->source), "%s", source);
        if (op == DS_COMM_SENDRECV) {
            /* Each rank sends to the next and receives from the previous at
             * once: pairs, batched; across nodes one pair per node leaves it,
             * all the job's nodes' pairs crossing the fabric together. */
            s->group_size = 2;
            s->batched = 1;
            s->nodes = nodes > 1 ? 2 : 1;
            s->ranks_per_node = nodes > 1 ? 1 : 2;
            s->concurrency = nodes > 1 ? 1 : n;
            s->span_nodes = nodes > 1 ? nodes : 0;
        } else {
            s->group_size = n;
            s->nodes = nodes;
            s->ranks_per_node = per_node;
            s->concurrency = 1;
        }
        d.min_bytes = s->bytes < d.min_bytes ? s->bytes : d.min_bytes;
        d.max_bytes = s->bytes > d.max_bytes ? s->bytes : d.max_bytes;
    }
    if (info->num_tests == 0) {
        info->op = op;
        info->group_size = n;
        info->nodes = nodes;
        info->ranks_per_node = per_node;
        info->min_bytes = d.min_bytes;
        info->max_bytes = d.max_bytes;
    } else if (d.samples > 0) {
        info->min_bytes = d.min_bytes < info->min_bytes ? d.min_bytes : info->min_bytes;
        info->max_bytes = d.max_bytes > info->max_bytes ? d.max_bytes : info->max_bytes;
    }
    info->rows += d.rows;
    info->samples += d.samples;
    info->tests[info->num_tests++] = d;
    return DS_OK;
}

/* A banner line of `stage`: the next test when the current one has got
 * that far already. */
static ds_status_t enter_stage(parser_t *p, stage_t stage)
{
    test_t *t = &p->test;
    if (stage <= t->stage) {
        DSI_TRY(finish_test(p));
        if (t->ranks > 0)
            memset(p->rank_seen, 0, MAX_RANKS);
        host_t *hosts = t->hosts;
        memset(t, 0, sizeof(*t));
        t->hosts = hosts;
        t->op = -1;
        t->first_sample = ds_comm_samples_size(p->rows);
    }
    if (t->stage == STAGE_NONE)
        t->first_line = p->line;
    t->stage = stage;
    return DS_OK;
}

/* "# Collective test starting: all_gather_perf" */
static ds_status_t parse_starting(parser_t *p, const char *name)
{
    ds_comm_op_t op = DS_COMM_ALLREDUCE;
    if (ds_comm_op_parse(name, &op) == DS_OK && op != DS_COMM_PS_PUSH && op != DS_COMM_PS_PULL) {
        p->test.op = (int)op;
        return DS_OK;
    }
    if (p->options->op >= 0)
        return DS_OK; /* the caller says what it is */
    return bad_line(p,
                    "collective '%s' is not one dsmpi models (accepted: all_reduce_perf, "
                    "all_gather_perf, reduce_scatter_perf, alltoall_perf, sendrecv_perf, "
                    "broadcast_perf)",
                    name);
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
    if (*text == '\0' || is_noise(text))
        return DS_OK;
    test_t *t = &p->test;
    if (*text != '#') {
        if (t->have_columns && !t->table_done)
            return parse_row(p, text);
        int64_t number;
        char first[32] = "";
        sscanf(text, "%31s", first);
        if (!t->have_columns && parse_i64(first, &number))
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
    if (strcmp(tokens[0], "nccl-tests") == 0 && count >= 2 && strcmp(tokens[1], "version") == 0) {
        DSI_TRY(enter_stage(p, STAGE_VERSION));
    } else if (strcmp(tokens[0], "Collective") == 0 && count >= 4 &&
               strcmp(tokens[1], "test") == 0 && strcmp(tokens[2], "starting:") == 0) {
        DSI_TRY(enter_stage(p, STAGE_STARTING));
        DSI_TRY(parse_starting(p, tokens[3]));
    } else if (strcmp(tokens[0], "Collective") == 0 && count >= 3 &&
               strcmp(tokens[1], "test") == 0 && strcmp(tokens[2], "concluded:") == 0) {
        t->table_done = t->have_columns;
    } else if (strcmp(tokens[0], "nThread") == 0) {
        DSI_TRY(enter_stage(p, STAGE_PARAMETERS));
        parse_parameters(p, tokens, count);
    } else if (strcmp(tokens[0], "Rank") == 0) {
        DSI_TRY(parse_rank_line(p, text));
    } else if (strcmp(tokens[0], "size") == 0) {
        if (t->have_columns)
            return bad_line(p, "%s",
                            "a second results table without a test banner before it ('# "
                            "Collective test starting: ...' or '# nThread ...')");
        DSI_TRY(enter_stage(p, STAGE_TABLE));
        if (!parse_header(p, text))
            return bad_line(p, "%s", "a column header without size and time columns");
    } else if (strcmp(tokens[0], "Out") == 0 || strcmp(tokens[0], "Avg") == 0) {
        if (t->have_columns)
            t->table_done = true;
    }
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
    parser_t *p = NULL;
    char *copy = NULL;
    DSI_TRY_GOTO(dsi_calloc(1, sizeof(*p), &p), status, out);
    p->origin = origin ? origin : "<text>";
    p->options = options ? options : &defaults;
    p->test.op = -1;
    DSI_TRY_GOTO(dsi_calloc(MAX_RANKS, 1, &p->rank_seen), status, out);
    DSI_TRY_GOTO(dsi_calloc(MAX_HOSTS, sizeof(*p->test.hosts), &p->test.hosts), status, out);
    DSI_TRY_GOTO(ds_comm_samples_create(&p->rows), status, out);
    DSI_TRY_GOTO(dsi_strdup(text, &copy), status, out);
    /* Lines are split by hand: strtok would merge empty lines and shift the
     * line numbers of the messages. */
    for (char *line = copy; line != NULL;) {
        char *next = strchr(line, '\n');
        if (next != NULL)
            *next++ = '\0';
        p->line++;
        DSI_TRY_GOTO(parse_line(p, line), status, out);
        line = next;
    }
    DSI_TRY_GOTO(finish_test(p), status, out);
    if (p->info.num_tests == 0) {
        status = DSI_ERROR(DS_ERR_BAD_FILE, "%s: no nccl-tests results table found", p->origin);
        goto out;
    }
    p->info.prefixed = p->prefixed;
    snprintf(p->info.device, sizeof(p->info.device), "%s", p->device);
    device_spec_of(p->device, p->info.device_spec, sizeof(p->info.device_spec));
    DSI_TRY_GOTO(
        ds_comm_samples_add(samples, ds_comm_samples_data(p->rows), ds_comm_samples_size(p->rows)),
        status, out);
    if (info_p != NULL)
        *info_p = p->info;
out:
    dsi_free(copy);
    if (p != NULL) {
        ds_comm_samples_destroy(p->rows);
        dsi_free(p->test.hosts);
        dsi_free(p->rank_seen);
    }
    dsi_free(p);
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
