/* The profiling half shared by `dsmpi profile` and `dsmpi run`. */
#ifndef DSMPI_PROFILE_CMD_H
#define DSMPI_PROFILE_CMD_H

#include "app.h"
#include "search_inputs.h"

#define PROFILE_MAX_SITE_DBS 16

typedef struct profile_cmd_options {
    ds_profile_options_t lib;
    const char *site_dbs[PROFILE_MAX_SITE_DBS];
    bool dry_run;
    bool sweep_max_given;
    bool json_ok; /* --json, --csv describe the profiling (dsmpi profile), not the prediction (run)
                   */
    bool search;  /* profile the union of every candidate of the search space */
    search_inputs_t space; /* --fix, --max-tp, --max-mbs of that space */
} profile_cmd_options_t;

void profile_cmd_init(profile_cmd_options_t *o);
/* The database --demo uses when none is given (in the current directory). */
#define PROFILE_DEMO_DB "dsmpi-demo.h5"
/* --demo's defaults for what the user left out, the same in `dsmpi profile` and `dsmpi run`:
 * the database PROFILE_DEMO_DB (unless --costs-out or --comm-samples-out write text files
 * instead) and a communication sweep up to 64 MiB, which keeps the demo to a few minutes on
 * CPU ranks. */
void profile_cmd_apply_demo(profile_cmd_options_t *o);
const struct option *profile_long_options(void);
/* 1 handled, 0 not a profile option, -1 bad value (printed). */
int profile_handle(const app_t *app, profile_cmd_options_t *o, int id, const char *arg);
void profile_print_help(FILE *out);

/* Installs SIGTERM and SIGUSR1 handlers that ask the profiler to stop and
 * save (what Slurm sends before a job's time limit). */
void profile_install_signal_handlers(void);

/* Creates the profiler, adds the inputs' strategy, plans and (unless dry-run)
 * measures; prints the plan or the summary on rank 0.  Collective.  On
 * success *profiler_p is open (caller destroys it, collectively). */
int profile_execute(const app_t *app, const inputs_t *in, profile_cmd_options_t *o,
                    ds_profiler_t **profiler_p);

#endif /* DSMPI_PROFILE_CMD_H */
