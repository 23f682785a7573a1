/* dsmpi execute: runs real training iterations of a strategy on this
 * allocation with the executor and reports what they measured, without a
 * prediction: the ground truth a prediction made elsewhere is compared
 * with (under SimGrid SMPI with the replay backend, a virtual cluster). */
#include "commands.h"

#include <stdlib.h>
#include <string.h>

enum {
    OPT_RUNS = 512,
    OPT_REPLAY_COSTS,
    OPT_HELP,
};

static void help(void)
{
    printf("usage: mpirun -n N dsmpi execute --model M --strategy S [options]\n\n"
           "Runs real training iterations of the strategy on this allocation (dp x tp x pp = N\n"
           "ranks) with the executor and prints what it measured: iteration time, per-rank\n"
           "compute, exposed communication and idle time, forward/backward start and end of\n"
           "every micro-batch and stage (formulas: include/dsmpi/exec.h).  No prediction is\n"
           "made: compare with 'dsmpi predict --json' for the same model, strategy and cluster.\n"
           "--cluster, --target or --target-gpus describe the allocation when the strategy\n"
           "is to be resolved as for a cluster file (they must have N devices).\n\n");
    inputs_print_help(stdout);
    printf("Execution:\n"
           "  --iterations K           measured iterations per run (default 3)\n"
           "  --warmup W               iterations run before them (default 1)\n"
           "  --runs R                 runs (default 1)\n"
           "  --backend auto|cpu|cuda|replay  device backend (default: DS_BACKEND)\n"
           "  --replay-costs FILE      the replay backend's cost table (default DS_REPLAY_COSTS)\n"
           "  --trace FILE.json        Perfetto trace of the last run's measured iterations\n");
}

typedef struct options {
    ds_exec_options_t exec;
    int64_t runs;
    ds_backend_kind_t backend;
    const char *replay_costs;
    const char *trace;
} options_t;

static int execute_option(const app_t *app, void *ctx, int id, const char *arg)
{
    options_t *o = ctx;
    ds_status_t status = DS_OK;
    switch (id) {
    case OPT_RUNS: status = ds_parse_count(arg, "runs", 1, 1000, &o->runs); break;
    case OPT_REPLAY_COSTS: o->replay_costs = arg; return 1;
    default: return 0;
    }
    return status == DS_OK ? 1 : (app_fail(app, status), -1);
}

static void json_run(const ds_exec_t *exec, size_t run, int ranks)
{
    ds_exec_summary_t s;
    if (ds_exec_get_summary(exec, run, &s) != DS_OK)
        return;
    printf("{\"summary\": {\"iter_time_s\": %.9g, \"iteration_min_s\": %.9g, "
           "\"iteration_max_s\": %.9g, \"compute_s\": %.9g, \"comm_exposed_s\": %.9g, "
           "\"wait_s\": %.9g, \"idle_s\": %.9g, \"busy_s\": %.9g, \"bubble_fraction\": %.6f, "
           "\"clock_error_s\": %.3g, \"wall_s\": %.6f, \"noisy\": %s},\n  \"devices\": [",
           s.iteration_s, s.iteration_min_s, s.iteration_max_s, s.compute_s, s.comm_exposed_s,
           s.wait_s, s.idle_s, s.busy_s, s.bubble_fraction, s.clock_error_s, s.wall_s,
           s.load.noisy ? "true" : "false");
    for (int r = 0; r < ranks; r++) {
        ds_exec_device_t d;
        if (ds_exec_device_at(exec, run, r, &d) != DS_OK)
            continue;
        printf("%s\n   {\"rank\": %lld, \"tp\": %d, \"dp\": %d, \"pp\": %d, \"compute_s\": %.9g, "
               "\"comm_exposed_s\": %.9g, \"wait_s\": %.9g, \"idle_s\": %.9g, \"busy_s\": %.9g, "
               "\"tp_s\": %.9g, \"pp_s\": %.9g, \"dp_s\": %.9g, \"other_s\": %.9g}",
               r ? "," : "", (long long)d.rank, d.coords.tp, d.coords.dp, d.coords.pp, d.compute_s,
               d.comm_exposed_s, d.wait_s, d.idle_s, d.busy_s, d.tp_s, d.pp_s, d.dp_s, d.other_s);
    }
    printf("],\n  \"microbatches\": [");
    for (size_t i = 0; i < ds_exec_microbatch_count(exec); i++) {
        ds_exec_microbatch_t mb;
        if (ds_exec_microbatch_at(exec, run, i, &mb) != DS_OK)
            continue;
        printf("%s\n   {\"stage\": %d, \"chunk\": %d, \"microbatch\": %d, \"fwd_start_s\": %.9g, "
               "\"fwd_end_s\": %.9g, \"bwd_start_s\": %.9g, \"bwd_end_s\": %.9g}",
               i ? "," : "", mb.stage, mb.chunk, mb.microbatch, mb.fwd_start_s, mb.fwd_end_s,
               mb.bwd_start_s, mb.bwd_end_s);
    }
    printf("]}");
}

static void print_json(const inputs_t *in, const options_t *o, const ds_backend_t *backend,
                       const ds_exec_t *exec, int ranks, int nodes)
{
    output_json_open(in, true);
    printf(", \"ranks\": %d, \"nodes\": %d, \"backend\": \"%s\", \"fingerprint\": ", ranks, nodes,
           ds_backend_kind_name(ds_backend_kind(backend)));
    output_json_string(stdout, ds_backend_fingerprint(backend));
    printf(", \"warmup\": %d, \"iterations\": %d, \"num_microbatches\": %lld,\n \"runs\": [",
           o->exec.warmup, o->exec.iterations,
           (long long)ds_strategy_num_microbatches(&in->strategy));
    for (size_t r = 0; r < ds_exec_run_count(exec); r++) {
        printf("%s\n ", r ? "," : "");
        json_run(exec, r, ranks);
    }
    printf("]}\n");
}

/* One row per run and rank: the rank's times with its run's iteration time. */
static void print_csv(const ds_exec_t *exec, int ranks)
{
    printf("run,rank,tp,dp,pp,iter_time_s,compute_s,comm_exposed_s,wait_s,idle_s,busy_s,tp_s,pp_s,"
           "dp_s,other_s,noisy\n");
    for (size_t run = 0; run < ds_exec_run_count(exec); run++) {
        ds_exec_summary_t s;
        if (ds_exec_get_summary(exec, run, &s) != DS_OK)
            continue;
        for (int r = 0; r < ranks; r++) {
            ds_exec_device_t d;
            if (ds_exec_device_at(exec, run, r, &d) != DS_OK)
                continue;
            printf("%zu,%lld,%d,%d,%d,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%.9g,%d\n", run,
                   (long long)d.rank, d.coords.tp, d.coords.dp, d.coords.pp, s.iteration_s,
                   d.compute_s, d.comm_exposed_s, d.wait_s, d.idle_s, d.busy_s, d.tp_s, d.pp_s,
                   d.dp_s, d.other_s, s.load.noisy ? 1 : 0);
        }
    }
}

static void print_table(const app_t *app, const inputs_t *in, const ds_backend_t *backend,
                        const ds_exec_t *exec, int ranks, int nodes)
{
    char strategy[DS_STRATEGY_TEXT_MAX];
    ds_strategy_format(&in->strategy, strategy, sizeof(strategy));
    output_preamble(app, stdout);
    printf("# allocation: %d ranks on %d node(s), %s backend: %s\n", ranks, nodes,
           ds_backend_kind_name(ds_backend_kind(backend)), ds_backend_fingerprint(backend));
    printf("# strategy: %s (%lld micro-batches)\n#\n", strategy,
           (long long)ds_strategy_num_microbatches(&in->strategy));
    printf("# %3s %12s %12s %12s %12s %12s %12s %8s %6s\n", "run", "iteration", "iter_min",
           "iter_max", "compute", "exposed", "idle", "bubble", "noisy");
    printf("# %3s %12s %12s %12s %12s %12s %12s %8s %6s\n", "", "(ms)", "(ms)", "(ms)", "(ms)",
           "(ms)", "(ms)", "(%)", "");
    for (size_t r = 0; r < ds_exec_run_count(exec); r++) {
        ds_exec_summary_t s;
        if (ds_exec_get_summary(exec, r, &s) != DS_OK)
            continue;
        printf("  %3zu %12.4f %12.4f %12.4f %12.4f %12.4f %12.4f %8.2f %6s\n", r,
               1e3 * s.iteration_s, 1e3 * s.iteration_min_s, 1e3 * s.iteration_max_s,
               1e3 * s.compute_s, 1e3 * s.comm_exposed_s, 1e3 * s.idle_s, 100.0 * s.bubble_fraction,
               s.load.noisy ? "yes" : "no");
    }
    printf("# compute, exposed, idle: means over the ranks; --json adds every rank and "
           "micro-batch\n");
}

int cmd_execute(app_t *app)
{
    static const struct option extra[] = {
        {"runs", required_argument, NULL, OPT_RUNS},
        {"replay-costs", required_argument, NULL, OPT_REPLAY_COSTS},
        {"help", no_argument, NULL, OPT_HELP},
        {NULL, 0, NULL, 0},
    };
    int code = app_mpi_command_start(app, help);
    if (code >= 0)
        return code;
    inputs_t in;
    inputs_init(&in);
    options_t o;
    memset(&o, 0, sizeof(o));
    ds_exec_options_init(&o.exec);
    o.exec.warmup = 1;
    o.exec.iterations = 3;
    o.runs = 1;
    o.backend = ds_backend_kind_default();
    app_run_options_t run = {&o.exec, &o.backend, &o.trace};
    app_option_handler_t handlers[] = {{execute_option, &o}, {app_run_option, &run}};
    code = app_parse_options(app, &in, (const struct option *[]){app_run_long_options, extra, NULL},
                             handlers, 2, OPT_HELP, help);
    if (code < 0)
        code = app_mpi_require(app);
    if (code >= 0)
        goto out_inputs;
    if (!in.strategy_given) {
        code = app_usage_error(app, "no strategy given (accepted: --strategy S)");
        goto out_inputs;
    }

    ds_backend_t *backend = NULL;
    ds_exec_t *exec = NULL;
    ds_cost_table_t *replay = NULL;
    ds_allocation_t alloc;
    ds_status_t status = ds_allocation_detect(MPI_COMM_WORLD, &alloc);
    /* Without a cluster description, the target is the allocation. */
    bool described = in.target_text != NULL || in.cluster_file != NULL || in.target_gpus != 0;
    if (!described) {
        in.target_gpus = alloc.world_size;
        in.target_gpus_per_node = alloc.max_local_size;
        if (in.device == NULL && o.backend == DS_BACKEND_CPU)
            in.device = "cpu";
    }
    if (status == DS_OK)
        status = inputs_build(&in);
    if (status == DS_OK && ds_cluster_num_gpus(&in.cluster) != alloc.world_size)
        status = ds_set_error(DS_ERR_INVALID_ARG,
                              "the cluster described has %lld devices; this allocation has %d "
                              "ranks (accepted: as many devices as ranks)",
                              (long long)ds_cluster_num_gpus(&in.cluster), alloc.world_size);
    /* The replay backend stands for the target's device. */
    if (status == DS_OK && o.backend == DS_BACKEND_REPLAY) {
        status = ds_cost_table_create(&replay);
        if (status == DS_OK && o.replay_costs != NULL)
            status = ds_cost_table_load_text(replay, o.replay_costs);
        else if (status == DS_OK && getenv("DS_REPLAY_COSTS") != NULL &&
                 getenv("DS_REPLAY_COSTS")[0] != '\0')
            status = ds_cost_table_load_text(replay, getenv("DS_REPLAY_COSTS"));
        if (status == DS_OK)
            status =
                ds_backend_open_replay(MPI_COMM_WORLD, replay, in.cluster.device.name, &backend);
    } else if (status == DS_OK) {
        status = ds_backend_open(o.backend, MPI_COMM_WORLD, &backend);
    }
    if (status == DS_OK)
        status = ds_exec_create(backend, in.model, &in.strategy, &exec);
    for (int64_t r = 0; r < o.runs && status == DS_OK; r++)
        status = ds_exec_run(exec, &o.exec);
    if (status == DS_OK && o.trace != NULL)
        status = ds_exec_write_trace(exec, ds_exec_run_count(exec) - 1, o.trace);
    if (status != DS_OK) {
        code = app_fail(app, status);
        goto out;
    }
    if (app->rank == 0) {
        if (in.format == OUTPUT_JSON)
            print_json(&in, &o, backend, exec, alloc.world_size, alloc.num_nodes);
        else if (in.format == OUTPUT_CSV)
            print_csv(exec, alloc.world_size);
        else if (!in.quiet)
            print_table(app, &in, backend, exec, alloc.world_size, alloc.num_nodes);
    }
    code = APP_EXIT_OK;
out:
    ds_exec_destroy(exec);
    ds_backend_close(backend);
    ds_cost_table_destroy(replay);
out_inputs:
    inputs_free(&in);
    return code;
}
