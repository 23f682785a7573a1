/* dsmpi: git-style dispatch to the subcommands. */
#include "commands.h"

#include <string.h>

typedef struct command {
    const char *name;
    int (*run)(app_t *app);
    const char *summary;
} command_t;

static const command_t commands[] = {
    {"allocation", cmd_allocation,
     "show the allocation dsmpi runs on: MPI ranks, nodes, Slurm job"},
    {"comm", cmd_comm, "communication model: import nccl-tests logs, predict collectives at scale"},
    {"device", cmd_device, "the device model: devices' facts, one GEMM's predicted time and waves"},
    {"events", cmd_events, "show the event set of an iteration: totals vs unique, per kind"},
    {"execute", cmd_execute,
     "run real iterations of a strategy on this allocation and report them"},
    {"import", cmd_import,
     "import measurements (text cost tables, samples) into a profile database"},
    {"plan", cmd_plan,
     "best strategy, time to train, GPU-hours and cost for a list of cluster sizes"},
    {"predict", cmd_predict, "timeline and metrics of one strategy on the target from event costs"},
    {"profile", cmd_profile,
     "profile this allocation's share of the unique events into the database"},
    {"run", cmd_run, "the main job: profile on this allocation, then predict the target (--demo)"},
    {"search", cmd_search, "rank every valid strategy of a model on a target (parallel under MPI)"},
    {"systems", cmd_systems,
     "the catalogue of real GPU systems --target system= takes, with their sources"},
    {"validate", cmd_validate,
     "run real iterations on this allocation and compare with the prediction"},
    {"version", cmd_version, "versions of dsmpi and of what it was built with"},
};

static void print_usage(FILE *out)
{
    fprintf(out, "usage: dsmpi <command> [options]\n"
                 "       dsmpi --help | --version | --params\n\n"
                 "Predicts how a hybrid-parallel DNN training job runs on thousands of GPUs\n"
                 "from measurements on a small MPI allocation.\n\ncommands:\n");
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        fprintf(out, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(out, "\n'dsmpi <command> --help' describes a command's options.\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        print_usage(stderr);
        return APP_EXIT_USAGE;
    }
    const char *name = argv[1];
    if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0 || strcmp(name, "help") == 0) {
        print_usage(stdout);
        return APP_EXIT_OK;
    }
    if (strcmp(name, "--version") == 0) {
        printf("dsmpi %s\n", DS_VERSION_STRING);
        return APP_EXIT_OK;
    }
    if (strcmp(name, "--params") == 0) {
        ds_params_print(stdout);
        return APP_EXIT_OK;
    }
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
        if (strcmp(name, commands[i].name) == 0) {
            app_t app = {argc - 1, argv + 1, commands[i].name, false, 0, 1, MPI_COMM_NULL};
            int code = commands[i].run(&app);
            app_mpi_stop(&app, code);
            return code;
        }
    }
    fprintf(stderr, "dsmpi: '%s' is not a command (accepted:", name);
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        fprintf(stderr, " %s", commands[i].name);
    fprintf(stderr, "); see 'dsmpi --help'\n");
    return APP_EXIT_USAGE;
}
