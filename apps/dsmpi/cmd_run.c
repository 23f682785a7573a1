/* dsmpi run: the main job.  Profile the unique events on this allocation,
 * then predict the target from the database (rank 0). */
#include "commands.h"
#include "predict.h"
#include "profile_cmd.h"

#include <stdlib.h>
#include <string.h>

enum { OPT_HELP = 800 };

static void usage(FILE *out)
{
    fprintf(out, "usage: mpiexec -n R dsmpi run --model M --strategy S --target-gpus N "
                 "--profile-db FILE.h5 [options]\n"
                 "       mpiexec -n 2 dsmpi run --demo\n");
}

static void help(void)
{
    usage(stdout);
    printf("\nThe main job: profiles on this allocation what the database does not hold yet\n"
           "(as 'dsmpi profile'), then rank 0 predicts the target from it (as 'dsmpi predict'),\n"
           "or, with --search, every rank ranks the whole search space (as 'dsmpi search').\n"
           "Without --device (or a device in --target / --cluster) the target's devices are the\n"
           "ones profiled here; naming another device scales compute costs by the two devices'\n"
           "rooflines and marks them assumed.\n"
           "--demo profiles gpt2-medium (dp=64,tp=4,pp=4,mbs=2,gbs=1024) into dsmpi-demo.h5 and\n"
           "predicts it on 128 nodes x 8 devices; a bare 'dsmpi run' only prints this usage.\n\n");
    inputs_print_help(stdout);
    profile_print_help(stdout);
    predict_print_help(stdout);
}

static int run_profile_option(const app_t *app, void *ctx, int id, const char *arg)
{
    return profile_handle(app, ctx, id, arg);
}

static int run_predict_option(const app_t *app, void *ctx, int id, const char *arg)
{
    return predict_handle(app, ctx, id, arg);
}

int cmd_run(app_t *app)
{
    static const struct option extra[] = {
        {"help", no_argument, NULL, OPT_HELP},
        {NULL, 0, NULL, 0},
    };
    int code = app_mpi_command_start(app, help);
    if (code >= 0)
        return code;
    if (app->argc < 2) {
        if (app->rank == 0)
            usage(stderr);
        return APP_EXIT_USAGE;
    }
    profile_install_signal_handlers();
    inputs_t in;
    inputs_init(&in);
    profile_cmd_options_t po;
    profile_cmd_init(&po);
    predict_options_t *o = calloc(1, sizeof(*o));
    if (o == NULL)
        return app_usage_error(app, "out of memory");
    app_option_handler_t handlers[] = {{run_profile_option, &po}, {run_predict_option, o}};
    code = app_parse_options(app, &in,
                             (const struct option *[]){extra, profile_long_options(),
                                                       search_space_long_options,
                                                       predict_long_options(), NULL},
                             handlers, 2, OPT_HELP, help);
    if (code < 0 && in.demo)
        profile_cmd_apply_demo(&po);
    if (code < 0 && po.search) {
        /* The cost options were taken as predict's: with --search they are the search's. */
        po.space.cost_table = o->cost_table;
        po.space.fingerprint = o->fingerprint;
        po.space.estimate = o->estimate;
        po.space.peak_tflops = o->peak_tflops;
        po.space.mem_bw = o->mem_bw;
        for (int i = 0; i < o->num_nccl_tests && i < SEARCH_MAX_LOGS; i++)
            po.space.logs[po.space.num_logs++] = o->nccl_tests[i];
    }
    if (code < 0 && po.lib.db_path == NULL)
        code = app_usage_error(app, "no profile database given (accepted: --profile-db FILE.h5)");
    if (code < 0)
        code = app_mpi_require(app);
    if (code >= 0)
        goto out;
    ds_status_t status = po.search ? inputs_build_target(&in) : inputs_build(&in);
    if (status != DS_OK) {
        code = app_fail(app, status);
        goto out;
    }
    char command[512];
    app_command_line(app, command, sizeof(command));
    po.lib.command_line = command;
    ds_profiler_t *p = NULL;
    po.json_ok = po.dry_run; /* --json and --csv: the plan of a dry run, else the prediction */
    code = profile_execute(app, &in, &po, &p);
    if (code == APP_EXIT_OK && !po.dry_run && po.search) {
        /* Rank the whole space from what was just profiled, on every rank. */
        code = search_execute(app, &in, &po.space, po.lib.db_path);
    } else if (code == APP_EXIT_OK && !po.dry_run && app->rank == 0) {
        ds_device_spec_t spec;
        ds_backend_t *backend = ds_profiler_backend(p);
        if (ds_device_spec_match(ds_backend_kind_name(ds_backend_kind(backend)),
                                 ds_backend_device_name(backend), &spec) == DS_OK)
            inputs_default_device(&in, &spec);
        if (in.format == OUTPUT_TABLE && !in.quiet)
            printf("#\n");
        fflush(stdout);
        code = predict_execute(app, &in, o, ds_profiler_db(p));
    }
    ds_profiler_destroy(p);
out:
    search_inputs_free(&po.space);
    inputs_free(&in);
    free(o);
    return code;
}
