/* dsmpi profile: measure this allocation's share of the unique events of a
 * model and strategy on a target, into the profile database. */
#include "commands.h"
#include "profile_cmd.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>

enum {
    OPT_PROFILE_DB = 700,
    OPT_SITE_DB,
    OPT_REPROFILE,
    OPT_BACKEND,
    OPT_DRY_RUN,
    OPT_COMPUTE_ONLY,
    OPT_COMM_ONLY,
    OPT_COSTS_OUT,
    OPT_COMM_SAMPLES_OUT,
    OPT_SWEEP_MIN,
    OPT_SWEEP_MAX,
    OPT_SEARCH,
    OPT_HELP,
};

static const struct option profile_options[] = {
    {"profile-db", required_argument, NULL, OPT_PROFILE_DB},
    {"site-db", required_argument, NULL, OPT_SITE_DB},
    {"reprofile", no_argument, NULL, OPT_REPROFILE},
    {"backend", required_argument, NULL, OPT_BACKEND},
    {"dry-run", no_argument, NULL, OPT_DRY_RUN},
    {"compute-only", no_argument, NULL, OPT_COMPUTE_ONLY},
    {"comm-only", no_argument, NULL, OPT_COMM_ONLY},
    {"costs-out", required_argument, NULL, OPT_COSTS_OUT},
    {"comm-samples-out", required_argument, NULL, OPT_COMM_SAMPLES_OUT},
    {"sweep-min", required_argument, NULL, OPT_SWEEP_MIN},
    {"sweep-max", required_argument, NULL, OPT_SWEEP_MAX},
    {"search", no_argument, NULL, OPT_SEARCH},
    {NULL, 0, NULL, 0},
};

const struct option *profile_long_options(void)
{
    return profile_options;
}

void profile_cmd_init(profile_cmd_options_t *o)
{
    memset(o, 0, sizeof(*o));
    ds_profile_options_init(&o->lib);
    o->lib.fallback_dbs = o->site_dbs;
    search_inputs_init(&o->space);
}

void profile_cmd_apply_demo(profile_cmd_options_t *o)
{
    if (o->lib.db_path == NULL && o->lib.costs_out == NULL && o->lib.comm_samples_out == NULL)
        o->lib.db_path = PROFILE_DEMO_DB;
    if (!o->sweep_max_given)
        o->lib.sweep_max_bytes = 64 << 20;
}

int profile_handle(const app_t *app, profile_cmd_options_t *o, int id, const char *arg)
{
    ds_status_t status = DS_OK;
    switch (id) {
    case OPT_PROFILE_DB: o->lib.db_path = arg; return 1;
    case OPT_SITE_DB:
        if (o->lib.num_fallbacks == PROFILE_MAX_SITE_DBS)
            return app_usage_error(app, "more than %d --site-db files", PROFILE_MAX_SITE_DBS), -1;
        o->site_dbs[o->lib.num_fallbacks++] = arg;
        return 1;
    case OPT_REPROFILE: o->lib.reprofile = 1; return 1;
    case OPT_BACKEND: status = ds_backend_kind_parse(arg, &o->lib.backend); break;
    case OPT_DRY_RUN: o->dry_run = true; return 1;
    case OPT_COMPUTE_ONLY: o->lib.compute_only = 1; return 1;
    case OPT_COMM_ONLY: o->lib.comm_only = 1; return 1;
    case OPT_COSTS_OUT: o->lib.costs_out = arg; return 1;
    case OPT_COMM_SAMPLES_OUT: o->lib.comm_samples_out = arg; return 1;
    case OPT_SWEEP_MIN:
        status = ds_comm_parse_size(arg, "sweep-min", &o->lib.sweep_min_bytes);
        break;
    case OPT_SWEEP_MAX:
        status = ds_comm_parse_size(arg, "sweep-max", &o->lib.sweep_max_bytes);
        o->sweep_max_given = true;
        break;
    case OPT_SEARCH: o->search = true; return 1;
    default: return search_inputs_handle(app, &o->space, id, arg);
    }
    if (status != DS_OK) {
        app_fail(app, status);
        return -1;
    }
    return 1;
}

void profile_print_help(FILE *out)
{
    fputs(
        "Profiling:\n"
        "  --profile-db FILE.h5     the profile database (created, or extended and reused)\n"
        "  --site-db FILE.h5        a read-only database searched after it (repeatable)\n"
        "  --reprofile              measure again what the databases already hold\n"
        "  --backend auto|cpu|cuda|replay  the device backend (auto: cuda when every rank sees\n"
        "                           a GPU; replay: compute costs from DS_REPLAY_COSTS)\n"
        "  --dry-run                print the plan, the coverage of the target's communication,\n"
        "                           what this allocation's shape measures and which shape to ask\n"
        "                           for (#SBATCH lines), and the expected profiling time per "
        "phase\n"
        "                           (from a calibration of about a second); measure nothing else,\n"
        "                           write nothing\n"
        "  --compute-only           skip communication measurements\n"
        "  --comm-only              skip the layer passes\n"
        "  --costs-out FILE, --comm-samples-out FILE   without --profile-db: write the\n"
        "                           measured event costs (text cost table) and communication\n"
        "                           samples (text) there, for 'dsmpi import' (builds without\n"
        "                           parallel HDF5, such as the SimGrid SMPI build)\n"
        "  --search                 profile every candidate of the search space at once (as\n"
        "                           'dsmpi search' enumerates it; narrowed by --fix, --max-tp,\n"
        "                           --max-mbs), and --strategy when given; 'run --search'\n"
        "                           then ranks it: --top K strategies (default 10)\n"
        "  --sweep-min B, --sweep-max B   communication sweep (default 1KiB..256MiB)\n",
        out);
}

static void on_signal(int signo)
{
    (void)signo;
    ds_profiler_request_stop();
}

void profile_install_signal_handlers(void)
{
    struct sigaction action;
    memset(&action, 0, sizeof(action));
    action.sa_handler = on_signal;
    sigemptyset(&action.sa_mask);
    sigaction(SIGTERM, &action, NULL);
    sigaction(SIGUSR1, &action, NULL);
}

/* The expected profiling time, per phase, and what it rests on. */
static void print_expected(const ds_profile_summary_t *s)
{
    printf("#\n# expected profiling time: %.0f s in all: %.0f s of layer passes (%zu rounds over "
           "%d rank%s),\n"
           "# %.0f s of communication (%.1f s of it setting communicators up), %.1f s writing the "
           "results\n",
           s->estimated_wall_s, s->estimated_compute_s, s->compute_rounds, s->ranks,
           s->ranks == 1 ? "" : "s", s->estimated_comm_s, s->estimated_setup_s,
           s->estimated_commit_s);
    if (s->calibrated) {
        char comm[128] = "";
        if (s->comm_tasks > s->comm_tasks_reused)
            snprintf(comm, sizeof(comm), " collectives at %.2gx the links',\n# barriers %.0f us,",
                     s->comm_factor, 1e6 * s->sync_s);
        printf("# (the measurement loop's warm-up, repetitions and budget per event on speeds "
               "calibrated here:\n"
               "# operators at %.2gx the device spec's roofline (median),%s ranks with %.0f%% of "
               "their core;\n"
               "# size #SBATCH --time with a margin: a machine busier than during the calibration "
               "runs slower)\n",
               s->compute_factor, comm, 100.0 * s->cpu_share);
    } else
        printf("# (the measurement loop's warm-up, repetitions and budget per event on the device "
               "spec's\n"
               "# roofline; size #SBATCH --time with a margin)\n");
}

/* ---- which allocation shape to ask for ---------------------------------------------------- */

/* Shapes compared: this allocation's size, then two and four times as many
 * devices, up to the target's. */
#define SHAPE_SIZES 3

typedef struct shape_report {
    ds_profile_shape_t here; /* this allocation as it is placed */
    ds_profile_shape_t *shapes[SHAPE_SIZES];
    int count[SHAPE_SIZES], best[SHAPE_SIZES];
    int num_sizes;
    double slow, fast; /* the band's rates (comm.h) */
} shape_report_t;

static void shape_report_free(shape_report_t *r)
{
    for (int i = 0; i < r->num_sizes; i++)
        ds_profile_shapes_free(r->shapes[i]);
    r->num_sizes = 0;
}

static ds_status_t shape_report_make(const ds_profiler_t *p, int ranks, const ds_cluster_t *target,
                                     shape_report_t *r)
{
    ds_status_t status = DS_OK;
    memset(r, 0, sizeof(*r));
    ds_comm_band_rates(NULL, &r->slow, &r->fast);
    status =
        ds_profile_shape_of(ranks, ds_profiler_node_of_rank(p), target, r->slow, r->fast, &r->here);
    int64_t devices = ranks;
    for (int i = 0; status == DS_OK && i < SHAPE_SIZES; i++, devices *= 2) {
        if (i > 0 && devices > ds_cluster_num_gpus(target))
            break;
        status = ds_profile_shapes_compare((int)devices, target, r->slow, r->fast, &r->shapes[i],
                                           &r->count[i], &r->best[i]);
        if (status == DS_OK)
            r->num_sizes++;
    }
    if (status != DS_OK)
        shape_report_free(r);
    return status;
}

/* "2, 4 and 8" */
static void list_sizes(const int *sizes, int count, char *text, size_t size)
{
    size_t used = 0;
    text[0] = '\0';
    for (int i = 0; i < count && used < size; i++)
        used += (size_t)snprintf(text + used, size - used, "%s%d",
                                 i == 0           ? ""
                                 : i == count - 1 ? " and "
                                                  : ", ",
                                 sizes[i]);
}

/* "2,4,8" */
static void list_commas(const int *sizes, int count, char *text, size_t size)
{
    size_t used = 0;
    text[0] = '\0';
    for (int i = 0; i < count && used < size; i++)
        used += (size_t)snprintf(text + used, size - used, "%s%d", i ? "," : "", sizes[i]);
}

/* What a shape leaves to the model, "-" when nothing the target needs. */
static void gives_up(const ds_profile_shape_t *s, char *text, size_t size)
{
    size_t used = 0;
    text[0] = '\0';
    if (s->lacks_network)
        used += (size_t)snprintf(text + used, size - used,
                                 "the network (every inter-node level assumed)");
    else if (s->tree_depth_max < s->target_tree_depth)
        used += (size_t)snprintf(
            text + used, size - used, "tree depth %d%s%.0d (extrapolated)", s->tree_depth_max + 1,
            s->tree_depth_max + 1 < s->target_tree_depth ? "-" : "",
            s->tree_depth_max + 1 < s->target_tree_depth ? s->target_tree_depth : 0);
    int intra = s->num_intra_sizes ? s->intra_sizes[s->num_intra_sizes - 1] : 1;
    if (used < size && s->lacks_intra_pair)
        used += (size_t)snprintf(text + used, size - used, "%sintra-node groups (assumed)",
                                 used ? "; " : "");
    else if (used < size && intra < s->target_gpus_per_node)
        used +=
            (size_t)snprintf(text + used, size - used, "%sgroups of %d-%d inside a node (fitted)",
                             used ? "; " : "", intra + 1, s->target_gpus_per_node);
    if (used == 0)
        snprintf(text, size, "-");
}

static void print_here(const shape_report_t *r)
{
    const ds_profile_shape_t *h = &r->here;
    char intra[128] = "none", cross[160] = "none";
    if (h->num_intra_sizes > 0) {
        char list[96];
        list_sizes(h->intra_sizes, h->num_intra_sizes, list, sizeof(list));
        snprintf(intra, sizeof(intra), "groups of %s", list);
    }
    if (h->num_cross_nodes > 0) {
        char list[96], more[48] = "";
        list_sizes(h->cross_nodes, h->num_cross_nodes, list, sizeof(list));
        if (h->cross_ranks_per_node > 1)
            snprintf(more, sizeof(more), " (and up to %d per node)", h->cross_ranks_per_node);
        snprintf(cross, sizeof(cross), "%s nodes, one rank each%s", list, more);
    }
    printf("#\n# what this allocation (%d node%s x %d rank%s) measures for the target (%lld nodes "
           "x %d GPUs;\n"
           "# a tree over its nodes is %d level%s deep):\n",
           h->nodes, h->nodes == 1 ? "" : "s", h->ranks_per_node, h->ranks_per_node == 1 ? "" : "s",
           (long long)h->target_nodes, h->target_gpus_per_node, h->target_tree_depth,
           h->target_tree_depth == 1 ? "" : "s");
    printf("#   inside a node: %s; across nodes: %s\n", intra, cross);
    if (h->num_cross_nodes == 0)
        printf("#   -> tree depth 0 of the %d the target needs: every inter-node cost is assumed "
               "(import\n"
               "#   nccl-tests logs of the target system with 'dsmpi import', or the cluster "
               "description)\n",
               h->target_tree_depth);
    char depth[32];
    snprintf(depth, sizeof(depth), "%d", h->tree_depth_max);
    if (h->tree_depth_min < h->tree_depth_max)
        snprintf(depth, sizeof(depth), "%d-%d", h->tree_depth_min, h->tree_depth_max);
    if (h->num_cross_nodes > 0 && h->factor > 1.0)
        printf("#   -> tree depth %s of the %d the target needs; beyond %d nodes times are "
               "extrapolated\n"
               "#   by f = %.3g: band %.2f to %.2f x the time\n",
               depth, h->target_tree_depth, h->cross_nodes[h->num_cross_nodes - 1], h->factor,
               h->band_low, h->band_high);
    else if (h->num_cross_nodes > 0)
        printf("#   -> tree depth %s of the %d the target needs: nothing extrapolated beyond the "
               "nodes measured\n",
               depth, h->target_tree_depth);
}

static void print_shapes(const shape_report_t *r)
{
    print_here(r);
    printf("#\n# allocation shapes for the target: what each measures, and the band of "
           "communication times\n"
           "# extrapolated from its most nodes to the target's %lld (f = %lld / nodes; band rates "
           "%.3f slow,\n"
           "# %.3f fast per doubling of f: README, \"How far communication extrapolates\"); * = "
           "the one to ask for\n",
           (long long)r->here.target_nodes, (long long)r->here.target_nodes, r->slow, r->fast);
    printf("# %7s %7s %8s %-12s %-14s %8s %7s %8s %9s  %s\n", "devices", "nodes", "per_node",
           "inside_node", "across_nodes", "depth", "f", "band_low", "band_high", "gives_up");
    printf("# %7s %7s %8s %-12s %-14s %8s %7s %8s %9s\n", "(count)", "(count)", "(ranks)",
           "(ranks)", "(nodes)", "(levels)", "(x)", "(x)", "(x)");
    for (int i = 0; i < r->num_sizes; i++)
        for (int k = 0; k < r->count[i]; k++) {
            const ds_profile_shape_t *s = &r->shapes[i][k];
            char intra[64] = "-", cross[64] = "-", depth[16], f[16] = "-", low[16] = "-",
                 high[16] = "-";
            char lost[160];
            if (s->num_intra_sizes > 0)
                list_commas(s->intra_sizes, s->num_intra_sizes, intra, sizeof(intra));
            if (s->num_cross_nodes > 0)
                list_commas(s->cross_nodes, s->num_cross_nodes, cross, sizeof(cross));
            snprintf(depth, sizeof(depth), "%d/%d", s->tree_depth_max, s->target_tree_depth);
            if (s->factor > 0.0) {
                snprintf(f, sizeof(f), "%.3g", s->factor);
                snprintf(low, sizeof(low), "%.2f", s->band_low);
                snprintf(high, sizeof(high), "%.2f", s->band_high);
            }
            gives_up(s, lost, sizeof(lost));
            printf("%c %7d %7d %8d %-12s %-14s %8s %7s %8s %9s  %s\n", k == r->best[i] ? '*' : ' ',
                   s->ranks, s->nodes, s->ranks_per_node, intra, cross, depth, f, low, high, lost);
        }
    for (int i = 0; i < r->num_sizes; i++) {
        const ds_profile_shape_t *b = &r->shapes[i][r->best[i]];
        printf("#\n# ask for (%d device%s%s): %d node%s x %d\n", b->ranks, b->ranks == 1 ? "" : "s",
               i == 0 ? ", as this allocation" : "", b->nodes, b->nodes == 1 ? "" : "s",
               b->ranks_per_node);
        printf("#SBATCH --nodes=%d\n#SBATCH --ntasks-per-node=%d\n#SBATCH --gpus-per-node=%d\n",
               b->nodes, b->ranks_per_node, b->ranks_per_node);
    }
}

static void print_int_array(FILE *out, const int *values, int count)
{
    fputc('[', out);
    for (int i = 0; i < count; i++)
        fprintf(out, "%s%d", i ? ", " : "", values[i]);
    fputc(']', out);
}

static void print_shape_json(FILE *out, const ds_profile_shape_t *s)
{
    fprintf(out,
            "{\"devices\": %d, \"nodes\": %d, \"ranks_per_node\": %d, \"inside_node\": ", s->ranks,
            s->nodes, s->ranks_per_node);
    print_int_array(out, s->intra_sizes, s->num_intra_sizes);
    fprintf(out, ", \"across_nodes\": ");
    print_int_array(out, s->cross_nodes, s->num_cross_nodes);
    fprintf(out,
            ", \"across_ranks_per_node\": %d, \"tree_depth_min\": %d, \"tree_depth_max\": %d, "
            "\"target_tree_depth\": %d, ",
            s->cross_ranks_per_node, s->tree_depth_min, s->tree_depth_max, s->target_tree_depth);
    if (s->factor > 0.0)
        fprintf(out, "\"factor\": %.6g, \"band_low\": %.6g, \"band_high\": %.6g", s->factor,
                s->band_low, s->band_high);
    else
        fprintf(out, "\"factor\": null, \"band_low\": null, \"band_high\": null");
    char lost[160];
    gives_up(s, lost, sizeof(lost));
    fprintf(out, ", \"lacks_intra_pair\": %s, \"lacks_network\": %s, \"gives_up\": ",
            s->lacks_intra_pair ? "true" : "false", s->lacks_network ? "true" : "false");
    output_json_string(out, lost);
    fputc('}', out);
}

/* The members of print_json's object about shapes, each after ", ". */
static void print_shapes_json(FILE *out, const shape_report_t *r)
{
    fprintf(out,
            ", \"target_nodes\": %lld, \"target_gpus_per_node\": %d, \"band_rates\": "
            "{\"slow\": %.6g, \"fast\": %.6g}, \"allocation_measures\": ",
            (long long)r->here.target_nodes, r->here.target_gpus_per_node, r->slow, r->fast);
    print_shape_json(out, &r->here);
    fprintf(out, ", \"allocation_shapes\": [");
    for (int i = 0; i < r->num_sizes; i++) {
        const ds_profile_shape_t *b = &r->shapes[i][r->best[i]];
        fprintf(out, "%s{\"devices\": %d, \"shapes\": [", i ? ", " : "", b->ranks);
        for (int k = 0; k < r->count[i]; k++) {
            fprintf(out, "%s", k ? ", " : "");
            print_shape_json(out, &r->shapes[i][k]);
        }
        fprintf(out,
                "], \"best\": %d, \"sbatch\": [\"#SBATCH --nodes=%d\", "
                "\"#SBATCH --ntasks-per-node=%d\", \"#SBATCH --gpus-per-node=%d\"]}",
                r->best[i], b->nodes, b->ranks_per_node, b->ranks_per_node);
    }
    fputc(']', out);
}

static void print_plan(const app_t *app, const ds_profiler_t *p, const ds_profile_summary_t *s,
                       bool dry_run, const shape_report_t *shapes)
{
    output_preamble(app, stdout);
    printf("# device: %s; %d ranks on %d node%s\n", ds_profiler_device_name(p), s->ranks, s->nodes,
           s->nodes == 1 ? "" : "s");
    printf("# fingerprint: %s\n", ds_profiler_fingerprint(p));
    printf("# target iteration(s): %lld events over every target device, %zu unique compute and "
           "%zu unique communication events\n",
           (long long)s->target_events, s->compute_keys, s->comm_keys);
    printf("#\n# %-22s %8s %9s %8s\n", "work", "total", "to_measure", "reused");
    printf("# %-22s %8s %9s %8s\n", "", "(count)", "(count)", "(count)");
    printf("  %-22s %8zu %9zu %8zu\n", "layer passes", s->units, s->units_measured,
           s->units_reused);
    printf("  %-22s %8zu %9zu %8zu\n", "communication tasks", s->comm_tasks,
           s->comm_tasks - s->comm_tasks_reused, s->comm_tasks_reused);
    printf("#\n# communication events of the target, how they will be costed:\n");
    printf(
        "#   %zu measured here as they are, %zu fitted from measurements at their network level,\n"
        "#   %zu assumed (no measurement possible at their level here: import nccl-tests logs of "
        "the\n"
        "#   target system with 'dsmpi import', or the cluster description is used)\n",
        s->comm_keys_measured, s->comm_keys_fitted, s->comm_keys_assumed);
    if (dry_run) {
        printf("# %-9s %12s  %s\n", "coverage", "count", "event");
        for (size_t i = 0; i < ds_profiler_comm_key_count(p); i++) {
            const ds_event_key_t *key;
            ds_coverage_t coverage;
            int64_t count;
            if (ds_profiler_comm_key_at(p, i, &key, &coverage, &count) != DS_OK)
                break;
            char text[256];
            ds_event_key_format(key, text, sizeof(text));
            printf("  %-9s %12lld  %s\n", ds_coverage_name(coverage), (long long)count, text);
        }
        if (shapes != NULL)
            print_shapes(shapes);
        print_expected(s);
    }
}

static void print_summary(const ds_profiler_t *p, const ds_profile_summary_t *s)
{
    const double *predicted = ds_profiler_rank_predicted_s(p), *busy = ds_profiler_rank_busy_s(p);
    printf("#\n# layer passes per rank: load the plan predicted vs measured\n");
    printf("# %4s %12s %12s\n", "rank", "predicted", "busy");
    printf("# %4s %12s %12s\n", "", "(s)", "(s)");
    for (int r = 0; r < s->ranks; r++)
        printf("  %4d %12.3f %12.3f\n", r, predicted[r], busy[r]);
    printf("# predicted: the plan's expected time of the rank's passes (preparing them, then the\n"
           "# measurement loop's warm-up, repetitions and budget); busy: the time the rank spent "
           "measuring them\n");
    printf("#\n# profiled %zu of %zu layer passes (%zu reused from the database), %zu "
           "communication tasks (%zu reused)\n",
           s->units_measured, s->units, s->units_reused, s->comm_tasks - s->comm_tasks_reused,
           s->comm_tasks_reused);
    printf("# wall time %.1f s: layer passes %.1f s, communication %.1f s, writing the results "
           "%.2f s%s\n",
           s->wall_s, s->compute_wall_s, s->comm_wall_s, s->commit_wall_s,
           s->interrupted ? " (interrupted: rerun to measure the rest)" : "");
    printf("# expected      %.1f s: layer passes %.1f s, communication %.1f s, writing the results "
           "%.2f s\n",
           s->estimated_wall_s, s->estimated_compute_s, s->estimated_comm_s, s->estimated_commit_s);
}

static void print_json(FILE *out, const ds_profiler_t *p, const ds_profile_summary_t *s, bool ran,
                       const shape_report_t *shapes)
{
    fprintf(out, "{\"device\": ");
    output_json_string(out, ds_profiler_device_name(p));
    fprintf(out, ", \"fingerprint\": ");
    output_json_string(out, ds_profiler_fingerprint(p));
    fprintf(
        out,
        ", \"ranks\": %d, \"nodes\": %d, \"target_events\": %lld, \"compute_keys\": %zu, "
        "\"comm_keys\": %zu, \"units\": %zu, \"units_measured\": %zu, \"units_reused\": %zu, "
        "\"comm_tasks\": %zu, \"comm_tasks_reused\": %zu, \"comm_keys_measured\": %zu, "
        "\"comm_keys_fitted\": %zu, \"comm_keys_assumed\": %zu, \"estimated_compute_s\": %.3f, "
        "\"estimated_comm_s\": %.3f, \"estimated_setup_s\": %.3f, \"estimated_commit_s\": %.3f, "
        "\"estimated_wall_s\": %.3f, \"compute_rounds\": %zu, \"calibrated\": %s, "
        "\"compute_factor\": %.4g, \"comm_factor\": %.4g, \"sync_s\": %.4g, \"cpu_share\": %.3f",
        s->ranks, s->nodes, (long long)s->target_events, s->compute_keys, s->comm_keys, s->units,
        s->units_measured, s->units_reused, s->comm_tasks, s->comm_tasks_reused,
        s->comm_keys_measured, s->comm_keys_fitted, s->comm_keys_assumed, s->estimated_compute_s,
        s->estimated_comm_s, s->estimated_setup_s, s->estimated_commit_s, s->estimated_wall_s,
        s->compute_rounds, s->calibrated ? "true" : "false", s->compute_factor, s->comm_factor,
        s->sync_s, s->cpu_share);
    if (ran) {
        const double *predicted = ds_profiler_rank_predicted_s(p),
                     *busy = ds_profiler_rank_busy_s(p);
        fprintf(out,
                ", \"wall_s\": %.3f, \"compute_wall_s\": %.3f, \"comm_wall_s\": %.3f, "
                "\"commit_wall_s\": %.3f, \"interrupted\": %s, \"per_rank\": [",
                s->wall_s, s->compute_wall_s, s->comm_wall_s, s->commit_wall_s,
                s->interrupted ? "true" : "false");
        for (int r = 0; r < s->ranks; r++)
            fprintf(out, "%s{\"rank\": %d, \"predicted_s\": %.3f, \"busy_s\": %.3f}", r ? ", " : "",
                    r, predicted[r], busy[r]);
        fprintf(out, "]");
    }
    if (shapes != NULL)
        print_shapes_json(out, shapes);
    fprintf(out, "}\n");
}

/* The summary as one CSV row under a header: the scalars of print_json. */
static void print_csv(const ds_profiler_t *p, const ds_profile_summary_t *s, bool ran)
{
    printf("device,fingerprint,ranks,nodes,target_events,compute_keys,comm_keys,units,"
           "units_measured,units_reused,comm_tasks,comm_tasks_reused,comm_keys_measured,"
           "comm_keys_fitted,comm_keys_assumed,estimated_compute_s,estimated_comm_s%s\n",
           ran ? ",wall_s,compute_wall_s,comm_wall_s,commit_wall_s,interrupted" : "");
    output_csv_field(stdout, ds_profiler_device_name(p));
    putchar(',');
    output_csv_field(stdout, ds_profiler_fingerprint(p));
    printf(",%d,%d,%lld,%zu,%zu,%zu,%zu,%zu,%zu,%zu,%zu,%zu,%zu,%.3f,%.3f", s->ranks, s->nodes,
           (long long)s->target_events, s->compute_keys, s->comm_keys, s->units, s->units_measured,
           s->units_reused, s->comm_tasks, s->comm_tasks_reused, s->comm_keys_measured,
           s->comm_keys_fitted, s->comm_keys_assumed, s->estimated_compute_s, s->estimated_comm_s);
    if (ran)
        printf(",%.3f,%.3f,%.3f,%.3f,%d", s->wall_s, s->compute_wall_s, s->comm_wall_s,
               s->commit_wall_s, s->interrupted ? 1 : 0);
    putchar('\n');
}

int profile_execute(const app_t *app, const inputs_t *in, profile_cmd_options_t *o,
                    ds_profiler_t **profiler_p)
{
    ds_profiler_t *p = NULL;
    ds_profile_summary_t summary;
    ds_status_t status = ds_profiler_create(MPI_COMM_WORLD, &o->lib, &p);
    if (status == DS_OK && !o->search)
        status = ds_profiler_add(p, in->model, &in->strategy, &in->cluster);
    if (status == DS_OK && o->search) {
        /* The union of the space: every candidate's passes, measured once. */
        ds_search_t *search = NULL;
        status = search_inputs_create(&o->space, in->model, &in->cluster, in->global_batch, NULL, 0,
                                      &search);
        if (status == DS_OK)
            status = ds_search_enumerate(search);
        for (size_t i = 0; status == DS_OK && i < ds_search_candidate_count(search); i++)
            status = ds_profiler_add(p, in->model, ds_search_candidate_at(search, i), &in->cluster);
        /* The strategy named with --strategy too, when it is outside the space. */
        if (status == DS_OK && in->strategy_given) {
            ds_strategy_t s = in->strategy;
            status = ds_strategy_resolve(&s, in->model, ds_cluster_num_gpus(&in->cluster),
                                         in->cluster.gpus_per_node);
            if (status == DS_OK)
                status = ds_profiler_add(p, in->model, &s, &in->cluster);
        }
        if (status == DS_OK && ds_search_candidate_count(search) == 0)
            status = ds_set_error(DS_ERR_INVALID_ARG,
                                  "the search space has no valid candidate to profile");
        ds_search_destroy(search);
    }
    if (status == DS_OK)
        status = ds_profiler_plan(p, &summary);
    if (status != DS_OK)
        goto fail;
    /* dsmpi profile prints its own JSON or CSV.  Under dsmpi run, --json and --csv are the
     * prediction's and stdout holds that alone: the tables are left out, and one line on
     * stderr says what was profiled (progress goes to stderr too). */
    bool json = in->format == OUTPUT_JSON && o->json_ok;
    bool csv = in->format == OUTPUT_CSV && o->json_ok;
    bool tables = in->format == OUTPUT_TABLE && !in->quiet;
    /* What this allocation's shape measures for the target, and which to ask for. */
    shape_report_t shapes;
    bool shapes_made = false;
    if (o->dry_run && app->rank == 0 && (json || tables)) {
        status = shape_report_make(p, summary.ranks, &in->cluster, &shapes);
        if (status != DS_OK)
            goto fail;
        shapes_made = true;
    }
    if (app->rank == 0 && tables)
        print_plan(app, p, &summary, o->dry_run, shapes_made ? &shapes : NULL);
    if (o->dry_run) {
        if (app->rank == 0 && json)
            print_json(stdout, p, &summary, false, shapes_made ? &shapes : NULL);
        else if (app->rank == 0 && csv)
            print_csv(p, &summary, false);
        if (shapes_made)
            shape_report_free(&shapes);
        *profiler_p = p;
        return APP_EXIT_OK;
    }
    fflush(stdout);
    status = ds_profiler_run(p, &summary);
    if (app->rank == 0 &&
        (status == DS_OK || status == DS_ERR_INTERRUPTED || status == DS_ERR_UNSUPPORTED)) {
        if (json)
            print_json(stdout, p, &summary, true, NULL);
        else if (csv)
            print_csv(p, &summary, true);
        else if (tables)
            print_summary(p, &summary);
        else if (!in->quiet && !o->json_ok)
            fprintf(stderr,
                    "dsmpi %s: profiled %zu of %zu layer passes (%zu reused), %zu of %zu "
                    "communication tasks (%zu reused) in %.1f s into %s\n",
                    app->command, summary.units_measured, summary.units, summary.units_reused,
                    summary.comm_tasks - summary.comm_tasks_reused, summary.comm_tasks,
                    summary.comm_tasks_reused, summary.wall_s,
                    o->lib.db_path != NULL ? o->lib.db_path : "text files");
        char path[4096];
        if (inputs_out_path(in, "profile.json", path, sizeof(path)) != NULL) {
            FILE *file = fopen(path, "w");
            if (file != NULL) {
                print_json(file, p, &summary, true, NULL);
                fclose(file);
            }
        }
    }
    if (status != DS_OK)
        goto fail;
    *profiler_p = p;
    return APP_EXIT_OK;
fail:;
    int code = app_fail(app, status);
    ds_profiler_destroy(p);
    return code == APP_EXIT_USAGE ? code : APP_EXIT_FAILURE;
}

static void help(void)
{
    printf("usage: mpiexec -n R dsmpi profile --model M --strategy S --target-gpus N --profile-db "
           "FILE.h5\n\n"
           "Measures the unique events of the model and strategy on the target that the\n"
           "database does not hold yet for this device: each rank its share of the layer\n"
           "passes (as training runs them), then communication on the groups this\n"
           "allocation can form.  The database is checkpointed as it goes; SIGTERM or\n"
           "SIGUSR1 (Slurm's warning before the time limit) saves what is done and exits 1,\n"
           "and a rerun measures only the rest.\n\n");
    inputs_print_help(stdout);
    profile_print_help(stdout);
}

static int profile_option(const app_t *app, void *ctx, int id, const char *arg)
{
    return profile_handle(app, ctx, id, arg);
}

int cmd_profile(app_t *app)
{
    static const struct option extra[] = {
        {"help", no_argument, NULL, OPT_HELP},
        {NULL, 0, NULL, 0},
    };
    int code = app_mpi_command_start(app, help);
    if (code >= 0)
        return code;
    profile_install_signal_handlers();
    inputs_t in;
    inputs_init(&in);
    profile_cmd_options_t o;
    profile_cmd_init(&o);
    app_option_handler_t handlers[] = {{profile_option, &o}};
    code = app_parse_options(
        app, &in,
        (const struct option *[]){extra, profile_long_options(), search_space_long_options, NULL},
        handlers, 1, OPT_HELP, help);
    if (code < 0 && in.demo)
        profile_cmd_apply_demo(&o);
    if (code < 0 && o.lib.db_path == NULL && o.lib.costs_out == NULL &&
        o.lib.comm_samples_out == NULL)
        code = app_usage_error(app, "no profile database given (accepted: --profile-db FILE.h5, "
                                    "or --costs-out FILE and --comm-samples-out FILE)");
    if (code < 0)
        code = app_mpi_require(app);
    if (code < 0) {
        ds_status_t status = o.search ? inputs_build_target(&in) : inputs_build(&in);
        if (status != DS_OK) {
            code = app_fail(app, status);
        } else {
            char command[512];
            app_command_line(app, command, sizeof(command));
            o.lib.command_line = command;
            ds_profiler_t *p = NULL;
            o.json_ok = true;
            code = profile_execute(app, &in, &o, &p);
            ds_profiler_destroy(p);
        }
    }
    search_inputs_free(&o.space);
    inputs_free(&in);
    return code;
}
