/* Options `dsmpi search` and `dsmpi plan` share: the space (--fix, --max-tp,
 * --max-mbs), the costs (--cost-table, --estimate-missing, --nccl-tests) and
 * the evaluation (--layer-level, --no-bound).  Public API only. */
#ifndef DSMPI_SEARCH_INPUTS_H
#define DSMPI_SEARCH_INPUTS_H

#include "app.h"
#include "cost_origin.h"

#define SEARCH_MAX_LOGS 256
#define SEARCH_MAX_FIXES 128

typedef struct search_inputs {
    const char *cost_table;
    bool estimate;
    double peak_tflops, mem_bw;
    const char *logs[SEARCH_MAX_LOGS];
    int num_logs;
    int logs_gpus_per_node; /* the layout the logs are read with (0: their host names) */
    const char *fixes[SEARCH_MAX_FIXES];
    int num_fixes;
    int64_t max_tp, max_mbs, top;
    bool layer_level, no_bound;
    bool all_variants; /* search --all-variants: equivalent variants ranked one by one */
    const char *profile_db;
    const char *fingerprint;
    /* Built by search_inputs_load. */
    ds_cost_table_t *costs;
    ds_comm_samples_t *samples;
    ds_profile_db_t *db;
    ds_cost_report_t db_report;
} search_inputs_t;

/* Option ids from 768 on. */
extern const struct option search_long_options[];
/* --fix, --max-tp, --max-mbs only (same ids). */
extern const struct option search_space_long_options[];

void search_inputs_init(search_inputs_t *si);
/* 1 handled, 0 not a search option, -1 bad input (message printed). */
int search_inputs_handle(const app_t *app, search_inputs_t *si, int id, const char *arg);
/* Words left after the options are refused (the files of --nccl-tests follow it). */
int search_inputs_positional(const app_t *app, const search_inputs_t *si, int first);
/* The --strategy texts and Megatron options of `in` as fixes of the space
 * (as many --fix); exit code 2 for an option that has no strategy item. */
int search_inputs_fix_strategy(const app_t *app, search_inputs_t *si, const inputs_t *in);
/* Checks the combination (exit code, or APP_EXIT_OK). */
int search_inputs_check(const app_t *app, const search_inputs_t *si);
/* Reads the cost table, the logs and the profile database (opened over
 * `comm`, collectively: rank 0 reads it and broadcasts). */
ds_status_t search_inputs_load(search_inputs_t *si, MPI_Comm comm);
/* Costs of every candidate of `search` from the profile database (measured,
 * or scaled from another device and marked assumed), when one was given. */
ds_status_t search_inputs_costs_from_db(search_inputs_t *si, ds_search_t *search,
                                        const ds_cluster_t *cluster);
/* The device's peak and bandwidth overrides. */
void search_inputs_apply_device(const search_inputs_t *si, ds_cluster_t *cluster);
/* A communication model for `cluster` when logs were given (else *model_p =
 * NULL). */
ds_status_t search_inputs_comm_model(const search_inputs_t *si, const ds_cluster_t *cluster,
                                     ds_comm_model_t **model_p);
/* A search with the options and fixes; `global_batch` 0: the model's. */
ds_status_t search_inputs_create(const search_inputs_t *si, const ds_model_t *model,
                                 const ds_cluster_t *cluster, int64_t global_batch,
                                 const ds_comm_model_t *comm, int top_k, ds_search_t **search_p);
void search_inputs_free(search_inputs_t *si);
/* A space without a candidate: one line saying why, exit 2. */
int search_inputs_no_candidate(const app_t *app, const ds_search_stats_t *st,
                               const ds_cluster_t *cluster);
/* --max-mbs, else the DS_SEARCH_MAX_MBS tunable. */
int64_t search_inputs_max_mbs(const search_inputs_t *si);
void search_inputs_print_help(FILE *out);
/* Where the costs come from; `counts`: the database report's counts hold
 * for the whole output (one target). */
cost_origin_t search_inputs_cost_origin(const search_inputs_t *si, bool counts);
/* The JSON members "costs", "cost_table" and "profile_db" (each after a
 * comma) of a command's object on stdout; `counts` as for the origin. */
void search_inputs_print_json_costs(const search_inputs_t *si, bool counts);
/* "# costs: ..." and "# device ..." lines of a preamble. */
void search_inputs_print_costs(const search_inputs_t *si, const ds_cluster_t *cluster, FILE *out);
/* After DS_ERR_NOT_FOUND: the keys of the space the costs lack, and how to
 * get them (rank 0 prints). */
void search_inputs_report_missing(const app_t *app, const search_inputs_t *si, ds_search_t *search);

/* The search half of `dsmpi search` over `space` with the costs of the
 * profile database `profile_db`: `dsmpi run --search`.  Collective. */
int search_execute(app_t *app, inputs_t *in, const search_inputs_t *space, const char *profile_db);

#endif /* DSMPI_SEARCH_INPUTS_H */
