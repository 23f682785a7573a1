/* Leave-scale-out accuracy of the communication model on the nccl-tests
 * logs of one cluster: fit on the logs of at most K nodes, predict every
 * larger node count the logs hold with the command a user would run
 * (`dsmpi comm --nccl-tests <fit logs> --op OP --gpus N --json`), and print,
 * per collective and target size, the relative time errors and the share of
 * measured points inside the predicted band.
 *
 *   comm_scale --dsmpi PATH [--fit-nodes K] [--name NAME] [--gpus-per-node G]
 *              [--header] [--verbose] LOG...
 *
 * The logs' own rank lines give nodes and GPUs per node (G: the most ranks
 * a node holds in any test, unless given).  A data set of fewer than three
 * node counts has nothing to extrapolate to and is reported as skipped.
 */
#include "comm_bench.h"

#include <jansson.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_LOGS 64
#define MAX_TESTS 512
#define MAX_COMMAND 16384
#define MAX_OUTPUT (64 << 20)
#define LARGE_BYTES 65536         /* the signed median is over sizes from here on */
#define BANDWIDTH_BYTES (4 << 20) /* from here on a size is priced by bandwidth */

/* Where in the size range a row errs, to name the effect behind a miss:
 * latency (below 64 KiB: per-hop and per-level costs), mid sizes (64 KiB -
 * 4 MiB: protocols and trees at a few chunks per channel), bandwidth (4 MiB
 * up: links, the fabric's share of them as the job spans more nodes). */
enum { REGIME_LATENCY, REGIME_MID, REGIME_BANDWIDTH, REGIME_COUNT };
static const char *const regime_names[REGIME_COUNT] = {"latency", "mid", "bandwidth"};

/* One test of one log. */
typedef struct test {
    int log;
    ds_comm_import_test_t info;
    size_t first; /* its samples in the log's list */
} test_t;

/* What one `dsmpi comm` row says about one size. */
typedef struct predicted {
    int64_t bytes;
    double time_us, low_us, high_us, ring_us, tree_us; /* ring/tree < 0: absent */
    char provenance[16];
} predicted_t;

typedef struct options {
    const char *dsmpi;
    const char *name;
    int fit_nodes;
    int gpus_per_node;
    int verbose;
    int header; /* print the column header first */
    const char *logs[MAX_LOGS];
    int num_logs;
} options_t;

static int parse_options(int argc, char **argv, options_t *o)
{
    memset(o, 0, sizeof(*o));
    o->fit_nodes = 2;
    o->name = "logs";
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--dsmpi") == 0 && i + 1 < argc)
            o->dsmpi = argv[++i];
        else if (strcmp(argv[i], "--fit-nodes") == 0 && i + 1 < argc)
            o->fit_nodes = atoi(argv[++i]);
        else if (strcmp(argv[i], "--name") == 0 && i + 1 < argc)
            o->name = argv[++i];
        else if (strcmp(argv[i], "--gpus-per-node") == 0 && i + 1 < argc)
            o->gpus_per_node = atoi(argv[++i]);
        else if (strcmp(argv[i], "--verbose") == 0)
            o->verbose = 1;
        else if (strcmp(argv[i], "--header") == 0)
            o->header = 1;
        else if (argv[i][0] == '-') {
            fprintf(stderr, "comm_scale: option '%s' is not known or lacks its value\n", argv[i]);
            return 2;
        } else if (o->num_logs < MAX_LOGS)
            o->logs[o->num_logs++] = argv[i];
    }
    if (o->dsmpi == NULL || o->num_logs < 1 || o->fit_nodes < 1 || o->gpus_per_node < 0) {
        fprintf(stderr, "usage: comm_scale --dsmpi PATH [--fit-nodes K] [--name NAME] "
                        "[--gpus-per-node G] [--header] [--verbose] LOG...\n");
        return 2;
    }
    return 0;
}

static const char *base_name(const char *path)
{
    const char *slash = strrchr(path, '/');
    return slash ? slash + 1 : path;
}

/* Appends `word` to `command` in single quotes. */
static void append_quoted(char *command, size_t size, const char *word)
{
    size_t used = strlen(command);
    used += (size_t)snprintf(command + used, size - used, " '");
    for (const char *c = word; *c != '\0' && used + 5 < size; c++) {
        if (*c == '\'')
            used += (size_t)snprintf(command + used, size - used, "'\\''");
        else
            command[used++] = *c;
    }
    snprintf(command + used, size - used, "'");
}

/* Runs `command` and returns its standard output (caller frees), or NULL. */
static char *run_command(const char *command)
{
    FILE *pipe = popen(command, "r");
    if (pipe == NULL)
        return NULL;
    size_t size = 1 << 16, used = 0;
    char *text = malloc(size);
    while (text != NULL) {
        if (used + 1 == size) {
            char *bigger = size < MAX_OUTPUT ? realloc(text, size * 2) : NULL;
            if (bigger == NULL) {
                free(text);
                text = NULL;
                break;
            }
            text = bigger;
            size *= 2;
        }
        size_t got = fread(text + used, 1, size - used - 1, pipe);
        if (got == 0)
            break;
        used += got;
    }
    int status = pclose(pipe);
    if (text != NULL)
        text[used] = '\0';
    if (status != 0) {
        fprintf(stderr, "comm_scale: '%s' failed (status %d): %s\n", command, status,
                text ? text : "");
        free(text);
        return NULL;
    }
    return text;
}

static double number_or(json_t *value, double absent)
{
    return json_is_number(value) ? json_number_value(value) : absent;
}

/* The rows `dsmpi comm --json` printed for group `gpus`. */
static int predicted_rows(json_t *root, int64_t gpus, predicted_t *rows, int max)
{
    json_t *groups = json_object_get(root, "groups");
    size_t g;
    json_t *group;
    json_array_foreach(groups, g, group)
    {
        if ((int64_t)json_integer_value(json_object_get(group, "gpus")) != gpus)
            continue;
        int count = 0;
        size_t r;
        json_t *row;
        json_array_foreach(json_object_get(group, "rows"), r, row)
        {
            if (count == max)
                break;
            predicted_t *p = &rows[count++];
            p->bytes = (int64_t)json_integer_value(json_object_get(row, "size_B"));
            p->time_us = number_or(json_object_get(row, "time_us"), -1);
            p->low_us = number_or(json_object_get(row, "low_us"), p->time_us);
            p->high_us = number_or(json_object_get(row, "high_us"), p->time_us);
            p->ring_us = number_or(json_object_get(row, "ring_us"), -1);
            p->tree_us = number_or(json_object_get(row, "tree_us"), -1);
            const char *provenance = json_string_value(json_object_get(row, "provenance"));
            snprintf(p->provenance, sizeof(p->provenance), "%s", provenance ? provenance : "?");
        }
        return count;
    }
    return 0;
}

/* Errors of one target test against its prediction. */
typedef struct score {
    int points, large_points;
    double median, max, large_median, large_max, signed_large_median;
    int regime_points[REGIME_COUNT];
    double regime_signed_median[REGIME_COUNT]; /* signed median error per regime */
    int band_points, in_band; /* points with a band around the value, and inside it */
    int ring_tree_points, in_ring_tree;
    char provenance[16];
} score_t;

static void score_target(const options_t *o, const comm_bench_target_t *t, const predicted_t *rows,
                         int num_rows, const char *label, score_t *s)
{
    double all[COMM_BENCH_MAX_POINTS], large[COMM_BENCH_MAX_POINTS],
        signed_large[COMM_BENCH_MAX_POINTS], regime[REGIME_COUNT][COMM_BENCH_MAX_POINTS];
    memset(s, 0, sizeof(*s));
    snprintf(s->provenance, sizeof(s->provenance), "-");
    for (int j = 0; j < t->count; j++) {
        const predicted_t *p = NULL;
        for (int r = 0; r < num_rows && p == NULL; r++)
            if (rows[r].bytes == t->bytes[j])
                p = &rows[r];
        if (p == NULL || p->time_us < 0 || t->time_s[j] <= 0)
            continue;
        double measured_us = t->time_s[j] * 1e6;
        double error = (p->time_us - measured_us) / measured_us;
        all[s->points++] = fabs(error);
        s->max = fmax(s->max, fabs(error));
        if (t->bytes[j] >= LARGE_BYTES) {
            large[s->large_points] = fabs(error);
            signed_large[s->large_points++] = error;
            s->large_max = fmax(s->large_max, fabs(error));
        }
        int r = t->bytes[j] < LARGE_BYTES       ? REGIME_LATENCY
                : t->bytes[j] < BANDWIDTH_BYTES ? REGIME_MID
                                                : REGIME_BANDWIDTH;
        regime[r][s->regime_points[r]++] = error;
        /* A band: a low and a high on either side of the value (beyond the
         * measured nodes the extrapolation band; inside them low/high are
         * ring-only and tree-only, and the value the faster: no band). */
        double tolerance = 1e-9 * p->time_us;
        if (p->low_us < p->time_us - tolerance && p->high_us > p->time_us + tolerance) {
            s->band_points++;
            s->in_band += measured_us >= p->low_us && measured_us <= p->high_us;
        }
        if (p->ring_us >= 0 && p->tree_us >= 0) {
            s->ring_tree_points++;
            s->in_ring_tree += measured_us >= fmin(p->ring_us, p->tree_us) &&
                               measured_us <= fmax(p->ring_us, p->tree_us);
        }
        snprintf(s->provenance, sizeof(s->provenance), "%s", p->provenance);
        if (o->verbose)
            printf("#   %-18s %-14s %12lld  measured %12.2f us  predicted %12.2f us  %+7.1f%%  "
                   "low %12.2f  high %12.2f  ring %12.2f  tree %12.2f  %s\n",
                   o->name, label, (long long)t->bytes[j], measured_us, p->time_us, 100.0 * error,
                   p->low_us, p->high_us, p->ring_us, p->tree_us, p->provenance);
    }
    s->median = comm_bench_median(all, s->points);
    s->large_median = comm_bench_median(large, s->large_points);
    s->signed_large_median = comm_bench_median(signed_large, s->large_points);
    for (int r = 0; r < REGIME_COUNT; r++)
        s->regime_signed_median[r] = comm_bench_median(regime[r], s->regime_points[r]);
}

static void print_percent(int have, double value)
{
    if (have)
        printf(" %7.1f", 100.0 * value);
    else
        printf(" %7s", "-");
}

static void print_share(int points, int inside)
{
    if (points > 0)
        printf(" %6.0f", 100.0 * inside / points);
    else
        printf(" %6s", "-");
}

/* The targets of the acceptance a row misses. */
static void print_missed(const score_t *s)
{
    char missed[64] = "";
    if (s->points > 0 && s->median > 0.10)
        strcat(missed, " med");
    if (s->points > 0 && s->max > 0.25)
        strcat(missed, " max");
    if (s->large_points > 0 && fabs(s->signed_large_median) > 0.05)
        strcat(missed, " bias");
    if (s->band_points == 0 || (double)s->in_band < 0.9 * s->band_points)
        strcat(missed, " band");
    printf("  %-18s", missed[0] ? missed + 1 : "-");
    /* The signed median of each regime, and where a target is missed the
     * regime that errs most, with its sign: the effect to look at. */
    int worst = -1;
    for (int r = 0; r < REGIME_COUNT; r++) {
        if (s->regime_points[r] > 0)
            printf(" %+7.1f", 100.0 * s->regime_signed_median[r]);
        else
            printf(" %7s", "-");
        if (s->regime_points[r] > 0 &&
            (worst < 0 || fabs(s->regime_signed_median[r]) > fabs(s->regime_signed_median[worst])))
            worst = r;
    }
    if (missed[0] && worst >= 0)
        printf("  %s %s", regime_names[worst],
               s->regime_signed_median[worst] < 0 ? "too fast" : "too slow");
    printf("\n");
}

static int compare_int(const void *a, const void *b)
{
    return *(const int *)a - *(const int *)b;
}

/* By collective, then group size, then where the test is. */
static int compare_tests(const void *a, const void *b)
{
    const test_t *x = a, *y = b;
    /* all-reduce first, send/recv last */
    int ox = ((int)x->info.op + DS_COMM_COUNT_ - 1) % DS_COMM_COUNT_;
    int oy = ((int)y->info.op + DS_COMM_COUNT_ - 1) % DS_COMM_COUNT_;
    if (ox != oy)
        return ox - oy;
    if (x->info.group_size != y->info.group_size)
        return x->info.group_size - y->info.group_size;
    if (x->log != y->log)
        return x->log - y->log;
    return x->info.line - y->info.line;
}

/* `dsmpi comm` (`command`: the fit) on group `gpus` at the sizes of
 * `measured`: one call when they double from one to the next (the table's
 * own grid), else one call per size (nccl-tests rounds the sizes of
 * all-gather, reduce-scatter and all-to-all to the group).  Fills `rows`;
 * returns their count, or -1 after an error. */
static int predict(const char *command, ds_comm_op_t op, int gpus,
                   const comm_bench_target_t *measured, predicted_t *rows)
{
    bool grid = true;
    for (int j = 1; j < measured->count; j++)
        grid = grid && measured->bytes[j] == 2 * measured->bytes[j - 1];
    int num_rows = 0;
    for (int j = 0; j < measured->count; j++) {
        if (grid && j > 0)
            break;
        int64_t last = grid ? measured->bytes[measured->count - 1] : measured->bytes[j];
        char full[MAX_COMMAND + 256];
        snprintf(full, sizeof(full), "%s --op %s --gpus %d --min-bytes %lld --max-bytes %lld",
                 command, ds_comm_op_name(op), gpus, (long long)measured->bytes[j],
                 (long long)last);
        char *output = run_command(full);
        json_error_t error;
        json_t *root = output ? json_loads(output, 0, &error) : NULL;
        if (root == NULL) {
            fprintf(stderr, "comm_scale: no JSON from '%s'%s%s\n", full, output ? ": " : "",
                    output ? error.text : "");
            free(output);
            return -1;
        }
        num_rows += predicted_rows(root, gpus, rows + num_rows, COMM_BENCH_MAX_POINTS - num_rows);
        json_decref(root);
        free(output);
    }
    return num_rows;
}

static void print_header(void)
{
    printf("# %-18s %3s  %-14s %-14s %5s %5s %5s %7s %7s %7s %7s %8s %6s %6s  %-12s  %-18s %7s "
           "%7s %7s  %s\n",
           "data set", "gpn", "fit (GPUs)", "collective", "GPUs", "nodes", "sizes", "median", "max",
           "median", "max", "signed", "band", "r..t", "provenance", "targets missed", "signed",
           "signed", "signed", "erring most");
    printf("# %-18s %3s  %-14s %-14s %5s %5s %5s %7s %7s %7s %7s %8s %6s %6s  %-12s  %-18s %7s %7s "
           "%7s\n",
           "", "", "", "", "", "", "", "|e| (%)", "|e| (%)", ">=64KiB", ">=64KiB", ">=64KiB", "(%)",
           "(%)", "", "", "<64KiB", "<4MiB", ">=4MiB");
}

int main(int argc, char **argv)
{
    options_t o;
    int code = parse_options(argc, argv, &o);
    if (code != 0)
        return code;
    if (o.header)
        print_header();
    ds_comm_samples_t *samples[MAX_LOGS] = {NULL};
    static ds_comm_import_info_t info[MAX_LOGS];
    static test_t tests[MAX_TESTS];
    int num_tests = 0, log_nodes[MAX_LOGS];
    int gpus_per_node = o.gpus_per_node;
    int node_counts[MAX_TESTS], num_node_counts = 0;
    for (int i = 0; i < o.num_logs; i++) {
        ds_comm_import_options_t options;
        ds_comm_import_options_init(&options);
        options.gpus_per_node = o.gpus_per_node;
        if (ds_comm_samples_create(&samples[i]) != DS_OK ||
            ds_comm_import_nccl_tests(o.logs[i], &options, samples[i], &info[i]) != DS_OK) {
            fprintf(stderr, "comm_scale: %s\n", ds_last_error());
            return 1;
        }
        log_nodes[i] = 0;
        size_t first = 0;
        for (int k = 0; k < info[i].num_tests && num_tests < MAX_TESTS; k++) {
            test_t *t = &tests[num_tests++];
            t->log = i;
            t->info = info[i].tests[k];
            t->first = first;
            first += t->info.samples;
            if (o.gpus_per_node == 0 && t->info.ranks_per_node > gpus_per_node)
                gpus_per_node = t->info.ranks_per_node;
            log_nodes[i] = t->info.nodes > log_nodes[i] ? t->info.nodes : log_nodes[i];
            int c = 0;
            while (c < num_node_counts && node_counts[c] != t->info.nodes)
                c++;
            if (c == num_node_counts)
                node_counts[num_node_counts++] = t->info.nodes;
        }
    }
    if (num_node_counts < 3) {
        printf("  %-18s %3d  skipped: %d node count%s in the logs (three or more are needed to "
               "fit on the small ones and predict a larger one)\n",
               o.name, gpus_per_node, num_node_counts, num_node_counts == 1 ? "" : "s");
        goto out;
    }
    /* The fit: every log of at most K nodes; the targets: every test on more
     * nodes than the fit's largest. */
    int fit_max_nodes = 0;
    char fit_gpus[256] = "";
    char command[MAX_COMMAND];
    /* The band without this data set's own errors (leave-one-data-set-out). */
    snprintf(command, sizeof(command), "'%s' comm --gpus-per-node %d --json --band-leave-out",
             o.dsmpi, gpus_per_node);
    append_quoted(command, sizeof(command), o.name != NULL ? o.name : "-");
    snprintf(command + strlen(command), sizeof(command) - strlen(command), " --nccl-tests");
    for (int i = 0; i < o.num_logs; i++) {
        if (log_nodes[i] > o.fit_nodes)
            continue;
        fit_max_nodes = log_nodes[i] > fit_max_nodes ? log_nodes[i] : fit_max_nodes;
        append_quoted(command, sizeof(command), o.logs[i]);
    }
    /* The group sizes fitted on, each once, for the table. */
    int fitted[MAX_TESTS], num_fitted = 0;
    for (int i = 0; i < num_tests; i++) {
        if (log_nodes[tests[i].log] > o.fit_nodes)
            continue;
        int f = 0;
        while (f < num_fitted && fitted[f] != tests[i].info.group_size)
            f++;
        if (f == num_fitted)
            fitted[num_fitted++] = tests[i].info.group_size;
    }
    qsort(fitted, (size_t)num_fitted, sizeof(fitted[0]), compare_int);
    for (int f = 0; f < num_fitted && strlen(fit_gpus) + 12 < sizeof(fit_gpus); f++)
        snprintf(fit_gpus + strlen(fit_gpus), sizeof(fit_gpus) - strlen(fit_gpus), "%s%d",
                 f ? "," : "", fitted[f]);
    if (fit_max_nodes == 0) {
        printf("  %-18s %3d  skipped: no log of at most %d nodes to fit on\n", o.name,
               gpus_per_node, o.fit_nodes);
        goto out;
    }
    /* Every test on more nodes than the fit's largest, by collective and size. */
    qsort(tests, (size_t)num_tests, sizeof(tests[0]), compare_tests);
    for (int i = 0; i < num_tests; i++) {
        const test_t *t = &tests[i];
        if (t->info.nodes <= fit_max_nodes || t->info.rows == 0)
            continue;
        comm_bench_target_t measured;
        comm_bench_target_of(ds_comm_samples_data(samples[t->log]) + t->first, t->info.samples,
                             &measured);
        static predicted_t rows[COMM_BENCH_MAX_POINTS];
        int num_rows = predict(command, t->info.op, t->info.group_size, &measured, rows);
        if (num_rows < 0) {
            code = 1;
            continue;
        }
        char label[64];
        snprintf(label, sizeof(label), "%s/%d", ds_comm_op_name(t->info.op), t->info.group_size);
        score_t sc;
        score_target(&o, &measured, rows, num_rows, label, &sc);
        printf("  %-18s %3d  %-14s %-14s %5d %5d %5d", o.name, gpus_per_node, fit_gpus,
               ds_comm_op_name(t->info.op), t->info.group_size, t->info.nodes, sc.points);
        print_percent(sc.points, sc.median);
        print_percent(sc.points, sc.max);
        print_percent(sc.large_points, sc.large_median);
        print_percent(sc.large_points, sc.large_max);
        if (sc.large_points > 0)
            printf(" %+8.1f", 100.0 * sc.signed_large_median);
        else
            printf(" %8s", "-");
        print_share(sc.band_points, sc.in_band);
        print_share(sc.ring_tree_points, sc.in_ring_tree);
        printf("  %-12s", sc.provenance);
        print_missed(&sc);
        if (sc.points < measured.count)
            printf("#   %s: %d of %d sizes of %s had no prediction\n", o.name,
                   measured.count - sc.points, measured.count, base_name(o.logs[t->log]));
    }
out:
    for (int i = 0; i < o.num_logs; i++)
        ds_comm_samples_destroy(samples[i]);
    return code;
}
