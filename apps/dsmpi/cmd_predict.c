/* dsmpi predict: the timeline of one strategy on the target from a cost
 * table (or roofline estimates), its metrics, memory and exports. */
#include "commands.h"
#include "predict.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

enum {
    OPT_COST_TABLE = 600,
    OPT_PROFILE_DB,
    OPT_SITE_DB,
    OPT_FINGERPRINT,
    OPT_NCCL_TESTS,
    OPT_NCCL_GPUS_PER_NODE,
    OPT_ESTIMATE,
    OPT_PEAK_TFLOPS,
    OPT_MEM_BW,
    OPT_FULL,
    OPT_STAGE_LEVEL,
    OPT_SLOW,
    OPT_TRACE,
    OPT_TRACE_RANKS,
    OPT_DETAIL_RANKS,
    OPT_TIMELINE,
    OPT_SVG,
    OPT_MICROBATCHES,
    OPT_ALLOW_OOM,
    OPT_RETIRED_MICROBATCHES,
    OPT_HELP,
};

#define MAX_MISSING_SHOWN 40

static void help(void)
{
    printf("usage: dsmpi predict --model M --strategy S --target-gpus N (--cost-table F | "
           "--estimate-missing) [options]\n"
           "       dsmpi predict --demo --estimate-missing\n\n"
           "Simulates two training iterations of the strategy on every device of the target\n"
           "(the second is reported): iteration time, throughput, TFLOP/s per GPU, MFU and HFU,\n"
           "per-GPU compute / communication (exposed, hidden) / idle time, the pipeline bubble,\n"
           "the critical path, per stage and micro-batch start/end times and memory per GPU with\n"
           "an out-of-memory verdict.  Formulas: include/dsmpi/sim.h.\n\n");
    inputs_print_help(stdout);
    predict_print_help(stdout);
}

void predict_print_help(FILE *out)
{
    fprintf(
        out,
        "Costs:\n"
        "  --profile-db FILE.h5     measured costs (dsmpi profile / dsmpi import)\n"
        "  --site-db FILE.h5        a read-only database searched after --profile-db (repeatable)\n"
        "  --fingerprint TEXT       which device's measurements (default: the one with most)\n"
        "  --nccl-tests LOG...      nccl-tests output of the target system for the communication\n"
        "                           model (several files, or the option repeated); read with\n"
        "                           --gpus-per-node G when given, else the logs' host names\n"
        "  --cost-table FILE        event costs, one '<event key> = <seconds>' a line\n"
        "  --estimate-missing       fill costs the table lacks: compute from the device model\n"
        "                           (modelled), communication from the cluster's links\n"
        "                           (assumed); every number resting on them is marked\n"
        "  --peak-tflops X          device peak for estimates and MFU/HFU (TFLOP/s)\n"
        "  --mem-bw-gbs X           device memory bandwidth for estimates (GB/s)\n"
        "Simulation:\n"
        "  --full                   every device (default: one per role class)\n"
        "  --slow-device RANK=F     rank RANK computes F times slower (repeatable; implies "
        "--full)\n"
        "  --stage-level            one event per chunk pass where exact (the search's fast path)\n"
        "Outputs:\n"
        "  --trace FILE.json        Perfetto / Chrome trace of the reported iteration\n"
        "  --trace-ranks LIST       ranks in the trace and chart, e.g. 0-7,64 (default: DP replica "
        "0; at most 4096)\n"
        "  --detail-ranks LIST      ranks traced operator by operator (at most 4096)\n"
        "  --timeline FILE.h5       HDF5 timeline: per device event id, kind, micro-batch, start, "
        "end\n"
        "  --svg FILE.svg           Gantt chart (one row per distinct device timeline)\n"
        "  --microbatch-times       print per stage and micro-batch start/end times (always\n"
        "                           when there are at most 64; --json has them all)\n"
        "  --allow-oom              exit 0 when the strategy does not fit in device memory\n"
        "Exit codes: 0 done, 1 runtime failure, 2 bad input, 3 the strategy does not fit in\n"
        "device memory (OUT OF MEMORY in the first row, \"oom\": true in --json, one line on\n"
        "stderr even with --quiet; the prediction is still printed; --allow-oom exits 0).\n");
}

/* Ranks a trace may show: a few hundred MB of trace JSON at most, what a
 * trace viewer still loads. */
#define MAX_TRACE_RANKS 4096

/* A rank list for --trace-ranks / --detail-ranks, at most MAX_TRACE_RANKS. */
static ds_status_t parse_ranks(const char *text, int64_t limit, int64_t **ranks_p, size_t *count_p)
{
    ds_status_t status = ds_parse_rank_list(text, limit, ranks_p, count_p);
    if (status != DS_OK)
        return status;
    if (*count_p > MAX_TRACE_RANKS) {
        size_t n = *count_p;
        ds_rank_list_free(*ranks_p);
        *ranks_p = NULL;
        return ds_set_error(DS_ERR_INVALID_ARG,
                            "rank list '%.40s%s' names %zu ranks (accepted: at most %d in a trace)",
                            text, strlen(text) > 40 ? "..." : "", n, MAX_TRACE_RANKS);
    }
    return DS_OK;
}

typedef predict_options_t options_t;

/* The iteration time with every cost that has a band (communication
 * extrapolated, compute from the device model) at the low and at the high
 * end of it (equal to the expected one when no cost has a band). */
typedef struct band {
    double low_s, high_s;
} band_t;

/* Where the band comes from: the costs that have one, by source. */
static void print_band_sources(const ds_sim_summary_t *sum)
{
    if (sum->banded_comm_keys > 0 || sum->banded_compute_keys > 0)
        printf("#   simulated again with every cost that has a band at its low and its high end\n");
    cost_origin_band_lines(stdout, "#   ", "", sum->banded_comm_keys, sum->banded_compute_keys);
}

static const char *mode_name(ds_sim_mode_t m)
{
    return m == DS_SIM_FULL ? "full" : "symmetric";
}

/* A row of the per-GPU table: devices with the same numbers. */
typedef struct row {
    ds_sim_device_t dev;
    int64_t count;
    char ranks[48];
    size_t ranks_len;
    int64_t run_first, run_last; /* the range being written */
    bool truncated;
} row_t;

static bool same_numbers(const ds_sim_device_t *a, const ds_sim_device_t *b)
{
    return a->coords.pp == b->coords.pp && fabs(a->compute_s - b->compute_s) < 1e-9 &&
           fabs(a->comm_exposed_s - b->comm_exposed_s) < 1e-9 &&
           fabs(a->comm_s - b->comm_s) < 1e-9 && fabs(a->idle_s - b->idle_s) < 1e-9 &&
           fabs(a->memory.total_B - b->memory.total_B) < 1.0 && a->speed_factor == b->speed_factor;
}

static void row_flush_run(row_t *r)
{
    if (r->run_first < 0 || r->truncated)
        return;
    char part[48];
    if (r->run_first == r->run_last)
        snprintf(part, sizeof(part), "%s%lld", r->ranks_len ? "," : "", (long long)r->run_first);
    else
        snprintf(part, sizeof(part), "%s%lld-%lld", r->ranks_len ? "," : "",
                 (long long)r->run_first, (long long)r->run_last);
    size_t len = strlen(part);
    if (r->ranks_len + len + 4 >= sizeof(r->ranks)) {
        snprintf(r->ranks + r->ranks_len, sizeof(r->ranks) - r->ranks_len, ",..");
        r->truncated = true;
        return;
    }
    memcpy(r->ranks + r->ranks_len, part, len + 1);
    r->ranks_len += len;
}

static void row_add_rank(row_t *r, int64_t rank)
{
    r->count++;
    if (r->run_first >= 0 && rank == r->run_last + 1) {
        r->run_last = rank;
        return;
    }
    row_flush_run(r);
    r->run_first = r->run_last = rank;
}

#define MAX_ROWS 64

static size_t group_rows(ds_sim_t *sim, int64_t devices, row_t *rows, bool *more_p)
{
    size_t n = 0;
    *more_p = false;
    for (int64_t rank = 0; rank < devices; rank++) {
        ds_sim_device_t d;
        if (ds_sim_device_of_rank(sim, rank, &d) != DS_OK)
            continue;
        size_t i = 0;
        while (i < n && !same_numbers(&rows[i].dev, &d))
            i++;
        if (i == n) {
            if (n == MAX_ROWS) {
                *more_p = true;
                continue;
            }
            memset(&rows[n], 0, sizeof(rows[n]));
            rows[n].dev = d;
            rows[n].run_first = -1;
            n++;
        }
        row_add_rank(&rows[i], rank);
    }
    for (size_t i = 0; i < n; i++)
        row_flush_run(&rows[i]);
    return n;
}

/* Costs of the run from the framework's trace and calibrated to it. */
static void framework_keys(const ds_sim_t *sim, size_t *framework_p, size_t *calibrated_p)
{
    *framework_p = *calibrated_p = 0;
    for (size_t i = 0; i < ds_sim_key_count(sim); i++) {
        ds_provenance_t prov;
        double secs;
        (void)ds_sim_key_at(sim, i, &prov, &secs);
        *framework_p += prov == DS_PROV_FRAMEWORK;
        *calibrated_p += prov == DS_PROV_CALIBRATED;
    }
}

/* What a prediction without assumed costs rests on: "measured", or
 * "framework" (some costs from a framework's trace), or "calibrated" (some
 * of dsmpi's costs scaled to the framework). */
static const char *measured_basis(const ds_sim_t *sim)
{
    size_t framework, calibrated;
    framework_keys(sim, &framework, &calibrated);
    return calibrated > 0 ? "calibrated" : framework > 0 ? "framework" : "measured";
}

static const char *basis(double assumed_share, const char *measured, char *text, size_t size)
{
    if (assumed_share <= 0.0)
        snprintf(text, size, "%s", measured);
    else if (assumed_share >= 0.9995)
        snprintf(text, size, "assumed");
    else
        snprintf(text, size, "assumed:%.0f%%", 100.0 * assumed_share);
    return text;
}

#define GIB (1024.0 * 1024.0 * 1024.0)

static void print_table(const app_t *app, const inputs_t *in, const options_t *o, ds_sim_t *sim,
                        const band_t *band)
{
    ds_model_info_t info;
    ds_model_get_info(in->model, &info);
    char strategy[DS_STRATEGY_TEXT_MAX];
    ds_strategy_format(&in->strategy, strategy, sizeof(strategy));
    ds_sim_summary_t sum;
    ds_sim_get_summary(sim, &sum);
    output_preamble(app, stdout);
    printf("# model: %s (%.3g B parameters, seq %d, %s)\n", info.name, info.num_parameters / 1e9,
           info.seq_len, ds_dtype_name(info.dtype));
    printf("# strategy: %s (%lld micro-batches)\n", strategy, (long long)sum.microbatches);
    printf("# target: %s, %lld nodes x %d devices = %lld, %.0f GiB each\n", in->cluster.name,
           (long long)in->cluster.nodes, in->cluster.gpus_per_node, (long long)sum.num_devices,
           in->cluster.device.memory_GiB);
    const char *note = ds_model_seq_len_note(in->model);
    if (note != NULL)
        printf("# note: %s\n", note);
    size_t keys = ds_sim_key_count(sim);
    printf("# costs: %s\n", o->cost_note);
    printf("# %lld of %zu event costs not measured: %lld compute modelled (device model of %s: "
           "%.3g TFLOP/s, %.0f GB/s peak; see dsmpi device), %lld assumed\n",
           (long long)sum.assumed_keys, keys, (long long)sum.modelled_keys, in->cluster.device.name,
           in->cluster.device.peak_tflops_bf16, in->cluster.device.mem_bw_GBps,
           (long long)(sum.assumed_keys - sum.modelled_keys));
    size_t framework, calibrated;
    framework_keys(sim, &framework, &calibrated);
    if (framework + calibrated > 0)
        printf("# %zu event costs from a framework's trace (framework), %zu of dsmpi's scaled to "
               "it (calibrated)\n",
               framework, calibrated);
    if (sum.assumed_keys > 0)
        printf(
            "# ASSUMED: %.1f%% of the simulated event time and %.1f%% of the critical path rest "
            "on\n"
            "#   modelled or assumed costs; columns 'basis' and 'assumed' mark every number that\n"
            "#   does.\n",
            100.0 * sum.assumed_share, 100.0 * sum.critical_assumed_share);
    printf("# simulation: %s mode, %s level, %lld of %lld devices with their own timeline, %lld "
           "events,\n"
           "#   %lld dependencies, built in %.2f ms, evaluated in %.2f ms\n",
           mode_name(sum.mode), sum.granularity == DS_SIM_STAGE ? "stage" : "layer",
           (long long)sum.simulated_devices, (long long)sum.num_devices, (long long)sum.graph_nodes,
           (long long)sum.graph_edges, sum.build_s * 1e3, sum.evaluate_s * 1e3);
    char b[32];
    printf("#\n# %-10s %12s %14s %10s %7s %7s %7s %9s %-11s %s\n", "iter_time", "samples/s",
           "tokens/s", "model_TF", "MFU", "HFU", "bubble", "mem_peak", "basis", "memory");
    printf("# %-10s %12s %14s %10s %7s %7s %7s %9s %-11s\n", "(s)", "(sample/s)", "(token/s)",
           "(TFLOP/s)", "(%)", "(%)", "(%)", "(GiB)", "");
    printf("  %-10.6f %12.2f %14.4g %10.2f %7.2f %7.2f %7.2f %9.2f %-11s %s\n", sum.iteration_s,
           sum.samples_per_s, sum.tokens_per_s, sum.model_tflops_per_gpu, 100.0 * sum.mfu,
           100.0 * sum.hfu, 100.0 * sum.bubble_fraction, sum.peak_memory_GiB,
           basis(sum.assumed_share, measured_basis(sim), b, sizeof(b)),
           sum.oom ? "OUT OF MEMORY" : "fits");
    printf("# MFU = model TFLOP/s per GPU / %.3g TFLOP/s peak (recompute excluded); HFU includes "
           "recompute\n",
           sum.peak_tflops);
    printf("# iteration time  %.6f s (band %.6f - %.6f s)\n", sum.iteration_s, band->low_s,
           band->high_s);
    print_band_sources(&sum);

    /* Per GPU, devices with equal numbers on one row. */
    row_t *rows = calloc(MAX_ROWS, sizeof(*rows));
    if (rows != NULL) {
        bool more = false;
        size_t n = group_rows(sim, sum.num_devices, rows, &more);
        printf("#\n# per GPU (seconds per iteration; exposed = communication not under compute)\n");
        printf("# %-22s %6s %5s %9s %9s %9s %9s %9s %8s %8s %8s %8s %8s %7s\n", "ranks", "gpus",
               "stage", "compute", "comm", "exposed", "hidden", "idle", "tp", "pp", "dp", "other",
               "mem", "assumed");
        printf("# %-22s %6s %5s %9s %9s %9s %9s %9s %8s %8s %8s %8s %8s %7s\n", "", "(count)", "",
               "(s)", "(s)", "(s)", "(s)", "(s)", "(s)", "(s)", "(s)", "(s)", "(GiB)", "(%)");
        for (size_t i = 0; i < n; i++) {
            const ds_sim_device_t *d = &rows[i].dev;
            printf("  %-22s %6lld %5d %9.5f %9.5f %9.5f %9.5f %9.5f %8.5f %8.5f %8.5f %8.5f %8.2f "
                   "%7.1f\n",
                   rows[i].ranks, (long long)rows[i].count, d->coords.pp, d->compute_s, d->comm_s,
                   d->comm_exposed_s, d->comm_hidden_s, d->idle_s, d->tp_s, d->pp_s, d->dp_s,
                   d->other_s, d->memory.total_B / GIB, 100.0 * d->assumed_share);
        }
        if (more)
            printf("# (more distinct devices than %d rows: see --json or --csv)\n", MAX_ROWS);
        free(rows);
    }

    /* Critical path. */
    ds_sim_critical_t cr;
    ds_sim_get_critical_path(sim, &cr);
    printf(
        "#\n# critical path of the iteration: %lld events, %lld changes of stage, ends with %s\n",
        (long long)cr.events, (long long)cr.devices_crossed, cr.ends_with);
    if (sum.assumed_keys > 0)
        printf("# ASSUMED: %.1f%% of this path rests on modelled or assumed costs\n",
               100.0 * sum.critical_assumed_share);
    printf("# %-12s %12s %7s\n", "waited_on", "time", "share");
    printf("# %-12s %12s %7s\n", "", "(s)", "(%)");
    for (int c = 0; c < DS_SIM_CAT_COUNT_; c++)
        printf("  %-12s %12.6f %7.2f\n", ds_sim_category_name((ds_sim_category_t)c), cr.seconds[c],
               sum.iteration_s > 0 ? 100.0 * cr.seconds[c] / sum.iteration_s : 0.0);

    /* Memory per stage. */
    printf("#\n# memory per GPU by stage (verdict against %.0f GiB)\n",
           in->cluster.device.memory_GiB);
    printf("# %5s %8s %8s %8s %8s %8s %8s %8s %8s %8s  %s\n", "stage", "weights", "grads", "optim",
           "activ", "inflight", "buffers", "context", "margin", "total", "verdict");
    printf("# %5s %8s %8s %8s %8s %8s %8s %8s %8s %8s\n", "", "(GiB)", "(GiB)", "(GiB)", "(GiB)",
           "(count)", "(GiB)", "(GiB)", "(GiB)", "(GiB)");
    for (int p = 0; p < in->strategy.pp; p++) {
        ds_sim_device_t d;
        if (ds_sim_device_of_rank(sim, ds_strategy_rank_of(&in->strategy, (ds_coords_t){0, 0, p}),
                                  &d) != DS_OK)
            continue;
        const ds_sim_memory_t *m = &d.memory;
        printf("  %5d %8.2f %8.2f %8.2f %8.2f %8d %8.2f %8.2f %8.2f %8.2f  %s\n", p,
               m->weights_B / GIB, m->grads_B / GIB, m->optimizer_B / GIB, m->activations_B / GIB,
               m->inflight, m->comm_buffers_B / GIB, m->context_B / GIB, m->fragmentation_B / GIB,
               m->total_B / GIB, m->oom ? "OUT OF MEMORY" : "fits");
    }
    printf("# not modelled: temporary buffers inside kernels beyond stored activations, allocator\n"
           "#   caching beyond the margin, the data loader, checkpointing and evaluation passes\n");

    size_t nmb = ds_sim_microbatch_count(sim);
    if (o->microbatches || nmb <= 64) {
        printf("#\n# forward and backward of each micro-batch, data-parallel replica 0 (from the "
               "iteration start)\n");
        if (sum.assumed_keys > 0)
            printf("# ASSUMED: these times rest partly on assumed costs\n");
        printf("# %5s %5s %6s %12s %12s %12s %12s\n", "stage", "chunk", "mb", "fwd_start",
               "fwd_end", "bwd_start", "bwd_end");
        printf("# %5s %5s %6s %12s %12s %12s %12s\n", "", "", "", "(ms)", "(ms)", "(ms)", "(ms)");
        for (size_t i = 0; i < nmb; i++) {
            ds_sim_microbatch_t mb;
            if (ds_sim_microbatch_at(sim, i, &mb) != DS_OK)
                continue;
            printf("  %5d %5d %6d %12.4f %12.4f %12.4f %12.4f\n", mb.stage, mb.chunk, mb.microbatch,
                   mb.fwd_start_s * 1e3, mb.fwd_end_s * 1e3, mb.bwd_start_s * 1e3,
                   mb.bwd_end_s * 1e3);
        }
    } else {
        printf("#\n# %zu (stage, chunk, micro-batch) timings: --microbatch-times or --json prints "
               "them\n",
               nmb);
    }
    if (sum.oom)
        printf("# VERDICT: OUT OF MEMORY on some devices (peak %.2f GiB of %.0f GiB)\n",
               sum.peak_memory_GiB, in->cluster.device.memory_GiB);
}

static void json_device(const ds_sim_device_t *d)
{
    printf("{\"rank\": %lld, \"node\": %lld, \"tp\": %d, \"dp\": %d, \"pp\": %d, \"represents\": "
           "%lld, "
           "\"speed_factor\": %g, \"compute_s\": %.9g, \"comm_s\": %.9g, \"comm_exposed_s\": %.9g, "
           "\"comm_hidden_s\": %.9g, \"idle_s\": %.9g, \"tp_s\": %.9g, \"pp_s\": %.9g, \"dp_s\": "
           "%.9g, "
           "\"other_s\": %.9g, \"assumed_share\": %.6f, \"memory\": {\"weights_GiB\": %.6f, "
           "\"grads_GiB\": %.6f, \"optimizer_GiB\": %.6f, \"activations_GiB\": %.6f, \"inflight\": "
           "%d, "
           "\"comm_buffers_GiB\": %.6f, \"context_GiB\": %.6f, \"fragmentation_GiB\": %.6f, "
           "\"total_GiB\": %.6f, \"device_GiB\": %.3f, \"oom\": %s}}",
           (long long)d->rank, (long long)d->node, d->coords.tp, d->coords.dp, d->coords.pp,
           (long long)d->represents, d->speed_factor, d->compute_s, d->comm_s, d->comm_exposed_s,
           d->comm_hidden_s, d->idle_s, d->tp_s, d->pp_s, d->dp_s, d->other_s, d->assumed_share,
           d->memory.weights_B / GIB, d->memory.grads_B / GIB, d->memory.optimizer_B / GIB,
           d->memory.activations_B / GIB, d->memory.inflight, d->memory.comm_buffers_B / GIB,
           d->memory.context_B / GIB, d->memory.fragmentation_B / GIB, d->memory.total_B / GIB,
           d->memory.device_B / GIB, d->memory.oom ? "true" : "false");
}

static void print_json(const inputs_t *in, const options_t *o, ds_sim_t *sim, const band_t *band)
{
    ds_sim_summary_t s;
    ds_sim_get_summary(sim, &s);
    output_json_open(in, true);
    printf(", \"target\": ");
    output_json_string(stdout, in->cluster.name);
    printf(", \"oom\": %s, \"target_gpus\": %lld, \"device\": ", s.oom ? "true" : "false",
           (long long)s.num_devices);
    output_json_string(stdout, in->cluster.device.name);
    printf(", \"costs\": ");
    output_json_string(stdout, o->cost_note);
    printf(", \"cost_table\": ");
    output_json_string_or_null(stdout, o->cost_table);
    printf(", \"profile_db\": ");
    output_json_string_or_null(stdout, o->db_path);
    printf(", \"nccl_tests_logs\": %d", o->num_nccl_tests);
    printf(", \"estimate_missing\": %s, \"mode\": \"%s\", \"granularity\": \"%s\", "
           "\"num_microbatches\": %lld, \"simulated_devices\": %lld, \"events\": %lld, "
           "\"dependencies\": %lld, "
           "\"build_s\": %.6f, \"evaluate_s\": %.6f,\n",
           o->estimate ? "true" : "false", mode_name(s.mode),
           s.granularity == DS_SIM_STAGE ? "stage" : "layer", (long long)s.microbatches,
           (long long)s.simulated_devices, (long long)s.graph_nodes, (long long)s.graph_edges,
           s.build_s, s.evaluate_s);
    printf(
        " \"summary\": {\"iter_time_s\": %.9g, \"iter_time_low_s\": %.9g, \"iter_time_high_s\": "
        "%.9g, \"samples_per_s\": %.6g, \"tokens_per_s\": %.6g, \"model_flops\": %.6e, "
        "\"hardware_flops\": %.6e, \"model_tflops_per_gpu\": %.6g, "
        "\"hardware_tflops_per_gpu\": %.6g, \"peak_tflops\": %.6g, \"mfu\": %.6f, \"hfu\": %.6f, "
        "\"bubble_fraction\": %.6f, \"compute_s\": %.9g, \"comm_s\": %.9g, \"comm_exposed_s\": "
        "%.9g, "
        "\"comm_hidden_s\": %.9g, \"idle_s\": %.9g, \"peak_memory_GiB\": %.6f, \"oom\": %s, "
        "\"assumed_share\": %.6f, \"critical_assumed_share\": %.6f, \"assumed_keys\": %lld, "
        "\"modelled_keys\": %lld, \"band_comm_keys\": %lld, \"band_device_model_keys\": %lld, "
        "\"keys\": %zu, \"basis\": \"%s\"},\n",
        s.iteration_s, band->low_s, band->high_s, s.samples_per_s, s.tokens_per_s, s.model_flops,
        s.hardware_flops, s.model_tflops_per_gpu, s.hardware_tflops_per_gpu, s.peak_tflops, s.mfu,
        s.hfu, s.bubble_fraction, s.compute_s, s.comm_s, s.comm_exposed_s, s.comm_hidden_s,
        s.idle_s, s.peak_memory_GiB, s.oom ? "true" : "false", s.assumed_share,
        s.critical_assumed_share, (long long)s.assumed_keys, (long long)s.modelled_keys,
        (long long)s.banded_comm_keys, (long long)s.banded_compute_keys, ds_sim_key_count(sim),
        s.assumed_keys > 0 ? "assumed" : measured_basis(sim));
    ds_sim_critical_t cr;
    ds_sim_get_critical_path(sim, &cr);
    printf(" \"critical_path\": {\"events\": %lld, \"stage_changes\": %lld, \"ends_with\": ",
           (long long)cr.events, (long long)cr.devices_crossed);
    output_json_string(stdout, cr.ends_with);
    for (int c = 0; c < DS_SIM_CAT_COUNT_; c++)
        printf(", \"%s_s\": %.9g", ds_sim_category_name((ds_sim_category_t)c), cr.seconds[c]);
    printf("},\n \"devices\": [");
    for (size_t i = 0; i < ds_sim_device_count(sim); i++) {
        ds_sim_device_t d;
        if (ds_sim_device_at(sim, i, &d) != DS_OK)
            continue;
        printf("%s\n  ", i ? "," : "");
        json_device(&d);
    }
    printf("],\n \"microbatches\": [");
    for (size_t i = 0; i < ds_sim_microbatch_count(sim); i++) {
        ds_sim_microbatch_t mb;
        if (ds_sim_microbatch_at(sim, i, &mb) != DS_OK)
            continue;
        printf("%s\n  {\"stage\": %d, \"chunk\": %d, \"microbatch\": %d, \"fwd_start_s\": %.9g, "
               "\"fwd_end_s\": %.9g, \"bwd_start_s\": %.9g, \"bwd_end_s\": %.9g}",
               i ? "," : "", mb.stage, mb.chunk, mb.microbatch, mb.fwd_start_s, mb.fwd_end_s,
               mb.bwd_start_s, mb.bwd_end_s);
    }
    printf("],\n \"assumed_keys\": [");
    size_t shown = 0;
    for (size_t i = 0; i < ds_sim_key_count(sim); i++) {
        ds_provenance_t prov;
        double secs;
        const ds_event_key_t *key = ds_sim_key_at(sim, i, &prov, &secs);
        if (prov != DS_PROV_ASSUMED && prov != DS_PROV_MODELLED)
            continue;
        char text[256];
        ds_event_key_format(key, text, sizeof(text));
        printf("%s\n  {\"event\": ", shown++ ? "," : "");
        output_json_string(stdout, text);
        printf(", \"seconds\": %.17g, \"provenance\": \"%s\"}", secs, ds_provenance_name(prov));
    }
    printf("]}\n");
}

/* A row per simulated device; the iteration time and its band (the same on
 * every row) last. */
static void print_csv(ds_sim_t *sim, const band_t *band)
{
    ds_sim_summary_t sum;
    ds_sim_get_summary(sim, &sum);
    printf(
        "rank,node,tp,dp,pp,represents,speed_factor,compute_s,comm_s,comm_exposed_s,comm_hidden_s,"
        "idle_s,tp_s,pp_s,dp_s,other_s,mem_GiB,oom,assumed_share,iter_time_s,iter_time_low_s,"
        "iter_time_high_s\n");
    for (size_t i = 0; i < ds_sim_device_count(sim); i++) {
        ds_sim_device_t d;
        if (ds_sim_device_at(sim, i, &d) != DS_OK)
            continue;
        printf("%lld,%lld,%d,%d,%d,%lld,%g,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%.6f,%d,%."
               "6f,%.9g,%.9g,%.9g\n",
               (long long)d.rank, (long long)d.node, d.coords.tp, d.coords.dp, d.coords.pp,
               (long long)d.represents, d.speed_factor, d.compute_s, d.comm_s, d.comm_exposed_s,
               d.comm_hidden_s, d.idle_s, d.tp_s, d.pp_s, d.dp_s, d.other_s, d.memory.total_B / GIB,
               d.memory.oom, d.assumed_share, sum.iteration_s, band->low_s, band->high_s);
    }
}

/* A strategy out of memory: one line on stderr whatever the output format
 * (--quiet too), and APP_EXIT_OOM unless --allow-oom. */
static int oom_verdict(const app_t *app, const inputs_t *in, const options_t *o, ds_sim_t *sim)
{
    ds_sim_summary_t sum;
    ds_sim_get_summary(sim, &sum);
    if (!sum.oom)
        return APP_EXIT_OK;
    char strategy[DS_STRATEGY_TEXT_MAX];
    ds_strategy_format(&in->strategy, strategy, sizeof(strategy));
    fprintf(
        stderr,
        "dsmpi %s: OUT OF MEMORY: %s needs %.2f GiB on its busiest GPU, the %s has %.0f GiB%s\n",
        app->command, strategy, sum.peak_memory_GiB, in->cluster.device.name,
        in->cluster.device.memory_GiB,
        o->allow_oom ? " (--allow-oom: exit 0)"
                     : " (exit 3; accepted: --allow-oom, or more GPUs, tp, pp, zero or "
                       "recompute)");
    return o->allow_oom ? APP_EXIT_OK : APP_EXIT_OOM;
}

/* Where the costs of `o` came from (after assemble_costs). */
static cost_origin_t cost_origin_of(const predict_options_t *o)
{
    cost_origin_t c = {.cost_table = o->cost_table,
                       .profile_db = o->db_path,
                       .site_dbs = o->site_dbs,
                       .num_site_dbs = o->db_path != NULL ? o->num_site_dbs : 0,
                       .num_logs = o->num_nccl_tests,
                       .estimate = o->estimate,
                       .report = o->have_cost_report ? &o->cost_report : NULL,
                       .counts = true};
    return c;
}

/* The command that measures what is missing. */
static void report_missing(const app_t *app, const inputs_t *in, const options_t *o, ds_sim_t *sim)
{
    if (app->rank != 0)
        return;
    size_t n = ds_sim_missing_count(sim);
    char strategy[DS_STRATEGY_TEXT_MAX];
    ds_strategy_format(&in->strategy, strategy, sizeof(strategy));
    cost_origin_t origin = cost_origin_of(o);
    char where[1200];
    cost_origin_missing_where(&origin, where, sizeof(where));
    fprintf(stderr, "dsmpi %s: %zu events have no cost%s:\n", app->command, n, where);
    for (size_t i = 0; i < n && i < MAX_MISSING_SHOWN; i++) {
        char key[256];
        ds_event_key_format(ds_sim_missing_at(sim, i), key, sizeof(key));
        fprintf(stderr, "  %s\n", key);
    }
    if (n > MAX_MISSING_SHOWN)
        fprintf(stderr, "  ... and %zu more\n", n - MAX_MISSING_SHOWN);
    fprintf(stderr,
            "profile them on a small allocation of %s devices with\n  mpirun -n 4 dsmpi profile "
            "--model %s --strategy %s"
            " --target nodes=%lld,gpus-per-node=%d,device=%s",
            in->cluster.device.name, in->model_spec, strategy, (long long)in->cluster.nodes,
            in->cluster.gpus_per_node, in->cluster.device.name);
    if (in->seq_len > 0)
        fprintf(stderr, " --seq-len %lld", (long long)in->seq_len);
    if (in->dtype != NULL)
        fprintf(stderr, " --dtype %s", in->dtype);
    fprintf(stderr, " --profile-db profile.h5\nor rerun with --estimate-missing (device-model "
                    "estimates, marked modelled)\n");
}

static int parse_slow(const app_t *app, options_t *o, const char *arg)
{
    if (o->num_slow == PREDICT_MAX_SLOW)
        return app_usage_error(app, "more than %d --slow-device options", PREDICT_MAX_SLOW);
    const char *eq = strchr(arg, '=');
    char rank_text[32];
    int64_t rank;
    double factor;
    /* The ranges are the sim's to check (it knows the device count): here
     * only the form. */
    if (eq == NULL || (size_t)(eq - arg) >= sizeof(rank_text))
        return app_usage_error(app, "--slow-device '%s' (accepted: RANK=FACTOR, e.g. 17=1.2)", arg);
    snprintf(rank_text, sizeof(rank_text), "%.*s", (int)(eq - arg), arg);
    if (ds_parse_int(rank_text, "slow device rank", 0, INT64_MAX, &rank) != DS_OK ||
        ds_parse_double(eq + 1, "slow device factor", 0.0, DBL_MAX, &factor) != DS_OK ||
        !(factor > 0.0))
        return app_usage_error(app, "--slow-device '%s' (accepted: RANK=FACTOR, e.g. 17=1.2)", arg);
    o->slow[o->num_slow].rank = rank;
    o->slow[o->num_slow].factor = factor;
    o->num_slow++;
    return APP_EXIT_OK;
}

static int parse_double_opt(const app_t *app, const char *name, const char *arg, double *out)
{
    double v;
    if (ds_parse_double(arg, name, 0.0, 1e9, &v) != DS_OK || !(v > 0.0))
        return app_usage_error(app, "--%s '%s' (accepted: a positive number)", name, arg);
    *out = v;
    return APP_EXIT_OK;
}

static int exports(const app_t *app, const inputs_t *in, const options_t *o, ds_sim_t *sim)
{
    int64_t devices = ds_cluster_num_gpus(&in->cluster);
    int64_t *ranks = NULL, *detail = NULL;
    size_t num_ranks = 0, num_detail = 0;
    ds_status_t status = DS_OK;
    if (o->trace_ranks != NULL)
        status = parse_ranks(o->trace_ranks, devices, &ranks, &num_ranks);
    if (status == DS_OK && o->detail_ranks != NULL)
        status = parse_ranks(o->detail_ranks, devices, &detail, &num_detail);
    if (status == DS_OK && o->trace != NULL)
        status = ds_sim_write_trace(sim, o->trace, ranks, num_ranks, detail, num_detail);
    if (status == DS_OK && o->timeline != NULL)
        status = ds_sim_write_timeline(sim, o->timeline);
    if (status == DS_OK && o->svg != NULL)
        status = ds_sim_write_svg(sim, o->svg, ranks, num_ranks, 64);
    ds_rank_list_free(ranks);
    ds_rank_list_free(detail);
    return status == DS_OK ? APP_EXIT_OK : app_fail(app, status);
}

static const struct option predict_options[] = {
    {"cost-table", required_argument, NULL, OPT_COST_TABLE},
    {"profile-db", required_argument, NULL, OPT_PROFILE_DB},
    {"site-db", required_argument, NULL, OPT_SITE_DB},
    {"fingerprint", required_argument, NULL, OPT_FINGERPRINT},
    {"nccl-tests", required_argument, NULL, OPT_NCCL_TESTS},
    /* Retired: refused with the new name (--gpus-per-node sets the target's layout too). */
    {"nccl-gpus-per-node", optional_argument, NULL, OPT_NCCL_GPUS_PER_NODE},
    {"estimate-missing", no_argument, NULL, OPT_ESTIMATE},
    {"peak-tflops", required_argument, NULL, OPT_PEAK_TFLOPS},
    {"mem-bw-gbs", required_argument, NULL, OPT_MEM_BW},
    {"full", no_argument, NULL, OPT_FULL},
    {"stage-level", no_argument, NULL, OPT_STAGE_LEVEL},
    {"slow-device", required_argument, NULL, OPT_SLOW},
    {"trace", required_argument, NULL, OPT_TRACE},
    {"trace-ranks", required_argument, NULL, OPT_TRACE_RANKS},
    {"detail-ranks", required_argument, NULL, OPT_DETAIL_RANKS},
    {"timeline", required_argument, NULL, OPT_TIMELINE},
    {"svg", required_argument, NULL, OPT_SVG},
    {"microbatch-times", no_argument, NULL, OPT_MICROBATCHES},
    /* Retired: validate's --microbatches is a count; this flag was renamed. */
    {"microbatches", optional_argument, NULL, OPT_RETIRED_MICROBATCHES},
    {"allow-oom", no_argument, NULL, OPT_ALLOW_OOM},
    {NULL, 0, NULL, 0},
};

const struct option *predict_long_options(void)
{
    return predict_options;
}

static int add_file(const app_t *app, const char *what, const char **files, size_t *count,
                    const char *path)
{
    if (*count == PREDICT_MAX_FILES)
        return app_usage_error(app, "more than %d %s files (accepted: at most %d)",
                               PREDICT_MAX_FILES, what, PREDICT_MAX_FILES),
               -1;
    files[(*count)++] = path;
    return 1;
}

int predict_handle(const app_t *app, predict_options_t *o, int id, const char *arg)
{
    switch (id) {
    case OPT_COST_TABLE: o->cost_table = arg; return 1;
    case OPT_PROFILE_DB: o->profile_db = arg; return 1;
    case OPT_SITE_DB: return add_file(app, "--site-db", o->site_dbs, &o->num_site_dbs, arg);
    case OPT_FINGERPRINT: o->fingerprint = arg; return 1;
    case OPT_NCCL_TESTS:
        return app_take_files(app, "nccl-tests", arg, o->nccl_tests, PREDICT_MAX_FILES,
                              &o->num_nccl_tests);
    case OPT_NCCL_GPUS_PER_NODE:
        return app_usage_error(app, "option '--nccl-gpus-per-node' was renamed (accepted: "
                                    "--gpus-per-node G, the target's devices per node, which "
                                    "its nccl-tests logs are read with too)"),
               -1;
    case OPT_ESTIMATE: o->estimate = true; return 1;
    case OPT_PEAK_TFLOPS:
        return parse_double_opt(app, "peak-tflops", arg, &o->peak_tflops) == APP_EXIT_OK ? 1 : -1;
    case OPT_MEM_BW:
        return parse_double_opt(app, "mem-bw-gbs", arg, &o->mem_bw) == APP_EXIT_OK ? 1 : -1;
    case OPT_FULL: o->full = true; return 1;
    case OPT_STAGE_LEVEL: o->stage_level = true; return 1;
    case OPT_SLOW: return parse_slow(app, o, arg) == APP_EXIT_OK ? 1 : -1;
    case OPT_TRACE: o->trace = arg; return 1;
    case OPT_TRACE_RANKS: o->trace_ranks = arg; return 1;
    case OPT_DETAIL_RANKS: o->detail_ranks = arg; return 1;
    case OPT_TIMELINE: o->timeline = arg; return 1;
    case OPT_SVG: o->svg = arg; return 1;
    case OPT_MICROBATCHES: o->microbatches = true; return 1;
    case OPT_ALLOW_OOM: o->allow_oom = true; return 1;
    case OPT_RETIRED_MICROBATCHES:
        return app_usage_error(app, "option '--microbatches' was renamed (accepted: "
                                    "--microbatch-times, which prints every micro-batch's "
                                    "start and end; the count is --global-batch over mbs)"),
               -1;
    default: return 0;
    }
}

int predict_check(const app_t *app, const predict_options_t *o, bool have_db)
{
    if (o->cost_table == NULL && o->profile_db == NULL && !have_db && o->num_nccl_tests == 0 &&
        !o->estimate)
        return app_usage_error(app,
                               "no costs given (accepted: --profile-db FILE, --cost-table FILE, "
                               "--nccl-tests LOG, --estimate-missing)");
    if (o->num_site_dbs > 0 && o->profile_db == NULL && !have_db)
        return app_usage_error(app, "--site-db needs --profile-db (the database searched first)");
    return -1;
}

/* The costs of every event of the strategy on the target, and a note on
 * where they came from. */
static ds_status_t assemble_costs(inputs_t *in, predict_options_t *o, ds_profile_db_t *db,
                                  ds_cost_table_t *costs)
{
    ds_predict_sources_t sources;
    ds_predict_sources_init(&sources);
    sources.cost_table = o->cost_table;
    sources.profile_db = o->profile_db;
    sources.site_dbs = o->site_dbs;
    sources.num_site_dbs = o->num_site_dbs;
    sources.fingerprint = o->fingerprint;
    sources.nccl_tests = o->nccl_tests;
    sources.num_nccl_tests = (size_t)o->num_nccl_tests;
    sources.gpus_per_node = in->target_gpus_per_node;
    ds_profile_db_t *opened = NULL;
    o->db_path = NULL;
    o->have_cost_report = false;
    ds_status_t status = ds_predict_costs_open(&sources, db, costs, &opened);
    if (status != DS_OK)
        return status;
    /* The path as given (an opened database is closed below). */
    o->db_path = opened != NULL ? o->profile_db : db != NULL ? ds_profile_db_path(db) : NULL;
    db = db != NULL ? db : opened;
    /* A target that names no device is the device the costs were measured on. */
    ds_cost_sources_t measured = {db, o->fingerprint, NULL, 0};
    ds_device_spec_t spec;
    if (db != NULL && ds_costs_measured_device(&measured, &spec) == DS_OK)
        inputs_default_device(in, &spec);
    int assembled = 0;
    status = ds_predict_costs_assemble(&sources, db, in->model, &in->strategy, &in->cluster, costs,
                                       &o->cost_report, &assembled);
    o->have_cost_report = assembled != 0;
    if (status == DS_OK) {
        cost_origin_t origin = cost_origin_of(o);
        cost_origin_describe(&origin, o->cost_note, sizeof(o->cost_note));
    }
    ds_profile_db_close(opened);
    return status;
}

int predict_execute(const app_t *app, inputs_t *in, predict_options_t *o, ds_profile_db_t *db)
{
    int code;
    static char trace[4096], timeline[4096], svg[4096];
    if (o->trace == NULL)
        o->trace = inputs_out_path(in, "trace.json", trace, sizeof(trace));
    if (o->timeline == NULL)
        o->timeline = inputs_out_path(in, "timeline.h5", timeline, sizeof(timeline));
    if (o->svg == NULL)
        o->svg = inputs_out_path(in, "timeline.svg", svg, sizeof(svg));
    ds_cost_table_t *costs = NULL;
    ds_sim_t *sim = NULL;
    ds_status_t status = ds_cost_table_create(&costs);
    if (status == DS_OK)
        status = assemble_costs(in, o, db, costs);
    if (o->peak_tflops > 0) {
        in->cluster.device.peak_tflops_bf16 = o->peak_tflops;
        in->cluster.device.peak_tflops_fp32 = o->peak_tflops;
    }
    if (o->mem_bw > 0)
        in->cluster.device.mem_bw_GBps = o->mem_bw;
    if (status == DS_OK)
        status = ds_sim_create(&sim);
    if (status != DS_OK) {
        code = app_fail(app, status);
        goto done;
    }
    ds_sim_options_t so;
    ds_sim_options_init(&so);
    so.mode = o->full || o->num_slow > 0 ? DS_SIM_FULL : DS_SIM_SYMMETRIC;
    so.granularity = o->stage_level ? DS_SIM_STAGE : DS_SIM_LAYER;
    so.estimate_missing = o->estimate;
    so.slow_devices = o->slow;
    so.num_slow_devices = o->num_slow;
    so.peak_tflops = o->peak_tflops;
    band_t band = {0.0, 0.0};
    status = ds_predict_run_band(sim, in->model, &in->strategy, &in->cluster, costs, &so,
                                 &band.low_s, &band.high_s);
    if (status == DS_ERR_NOT_FOUND && ds_sim_missing_count(sim) > 0) {
        report_missing(app, in, o, sim);
        code = APP_EXIT_USAGE;
        goto done;
    }
    if (status != DS_OK) {
        code = app_fail(app, status);
        goto done;
    }
    if (in->format == OUTPUT_JSON)
        print_json(in, o, sim, &band);
    else if (in->format == OUTPUT_CSV)
        print_csv(sim, &band);
    else if (!in->quiet)
        print_table(app, in, o, sim, &band);
    code = exports(app, in, o, sim);
    if (code == APP_EXIT_OK)
        code = oom_verdict(app, in, o, sim);
done:
    ds_sim_destroy(sim);
    ds_cost_table_destroy(costs);
    return code;
}

static int predict_option(const app_t *app, void *ctx, int id, const char *arg)
{
    return predict_handle(app, ctx, id, arg);
}

int cmd_predict(app_t *app)
{
    static const struct option extra[] = {
        {"help", no_argument, NULL, OPT_HELP},
        {NULL, 0, NULL, 0},
    };
    int code = app_mpi_start(app, false);
    if (code != APP_EXIT_OK)
        return code;
    inputs_t in;
    inputs_init(&in);
    options_t *o = calloc(1, sizeof(*o));
    if (o == NULL)
        return app_usage_error(app, "out of memory");
    app_option_handler_t handlers[] = {{predict_option, o}};
    code =
        app_parse_options(app, &in, (const struct option *[]){extra, predict_long_options(), NULL},
                          handlers, 1, OPT_HELP, help);
    if (code >= 0)
        goto out;
    if ((code = predict_check(app, o, false)) >= 0)
        goto out;
    ds_status_t status = inputs_build(&in);
    if (status != DS_OK) {
        code = app_fail(app, status);
        goto out;
    }
    code = app->rank == 0 ? predict_execute(app, &in, o, NULL) : APP_EXIT_OK;
out:
    inputs_free(&in);
    free(o);
    return code;
}
