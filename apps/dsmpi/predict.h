/* The prediction half shared by `dsmpi predict` and `dsmpi run`: options,
 * cost assembly, simulation and reports.  Public API only. */
#ifndef DSMPI_APP_PREDICT_H
#define DSMPI_APP_PREDICT_H

#include "app.h"
#include "cost_origin.h"

#define PREDICT_MAX_SLOW 4096
#define PREDICT_MAX_FILES 256

typedef struct predict_options {
    const char *cost_table;
    const char *profile_db;
    const char *site_dbs[PREDICT_MAX_FILES];
    size_t num_site_dbs;
    const char *fingerprint;
    const char *nccl_tests[PREDICT_MAX_FILES];
    int num_nccl_tests;
    bool estimate;
    double peak_tflops, mem_bw;
    bool full, stage_level, microbatches;
    ds_sim_slow_device_t slow[PREDICT_MAX_SLOW];
    size_t num_slow;
    const char *trace, *trace_ranks, *detail_ranks, *timeline, *svg;
    bool allow_oom; /* exit 0 when the strategy does not fit (else APP_EXIT_OOM) */
    /* Set by predict_execute: where the costs came from, for the reports. */
    const char *db_path; /* the profile database read, or NULL */
    ds_cost_report_t cost_report;
    bool have_cost_report; /* the database or logs were assembled */
    char cost_note[1024];
} predict_options_t;

/* The options predict adds to the common ones (NULL-terminated table) and
 * their handler: 1 handled, 0 not a predict option, -1 bad value (printed). */
const struct option *predict_long_options(void);
int predict_handle(const app_t *app, predict_options_t *o, int id, const char *arg);
void predict_print_help(FILE *out);
/* Bad combinations of options, before any work: exit code or -1 when fine. */
int predict_check(const app_t *app, const predict_options_t *o, bool have_db);

/* Assembles the costs (cost table, profile database `db` or o->profile_db,
 * nccl-tests logs, estimates), simulates, prints and exports.  Rank 0 only;
 * returns the exit code: APP_EXIT_OOM (after the outputs, with one line on
 * stderr) when the strategy does not fit in device memory, unless
 * o->allow_oom. */
int predict_execute(const app_t *app, inputs_t *in, predict_options_t *o, ds_profile_db_t *db);

#endif /* DSMPI_APP_PREDICT_H */
