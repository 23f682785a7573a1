/*
 * dsmpi predict: the costs of a prediction gathered from the sources a user
 * names (a text cost table, a profile database and the site databases
 * behind it, nccl-tests logs), and the prediction with its band.  What
 * `dsmpi predict` and `dsmpi run` compute between reading their options and
 * printing.
 */
#ifndef DSMPI_PREDICT_H
#define DSMPI_PREDICT_H

#include <dsmpi/cluster.h>
#include <dsmpi/core.h>
#include <dsmpi/events.h>
#include <dsmpi/model.h>
#include <dsmpi/profile.h>
#include <dsmpi/search.h>
#include <dsmpi/sim.h>
#include <dsmpi/store.h>
#include <dsmpi/strategy.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct ds_predict_sources {
    const char *cost_table;      /* text cost table, loaded first (NULL: none) */
    const char *profile_db;      /* opened read-only unless a database is passed (NULL: none) */
    const char *const *site_dbs; /* read-only databases searched after it */
    size_t num_site_dbs;
    const char *fingerprint;       /* the measuring device's in the database (NULL: any) */
    const char *const *nccl_tests; /* nccl-tests logs */
    size_t num_nccl_tests;
    int gpus_per_node; /* reading the logs (0: from their host names) */
} ds_predict_sources_t;

/* No source. */
DS_API void ds_predict_sources_init(ds_predict_sources_t *sources);

/* Loads sources->cost_table into `costs`, and, when `db` is NULL, opens
 * sources->profile_db with its site databases: *opened_p gets it (NULL when
 * none was opened; the caller closes it with ds_profile_db_close).  Not
 * collective. */
DS_API ds_status_t ds_predict_costs_open(const ds_predict_sources_t *sources,
                                         const ds_profile_db_t *db, ds_cost_table_t *costs,
                                         ds_profile_db_t **opened_p);

/* Adds the costs of every event of `model` under `strategy` on `cluster`
 * that `db` (may be NULL) and the nccl-tests logs of `sources` give
 * (ds_costs_assemble); *report_p says what they gave.  With neither it does
 * nothing and *assembled_p is 0, else 1.  Not collective. */
DS_API ds_status_t ds_predict_costs_assemble(const ds_predict_sources_t *sources,
                                             ds_profile_db_t *db, const ds_model_t *model,
                                             const ds_strategy_t *strategy,
                                             const ds_cluster_t *cluster, ds_cost_table_t *costs,
                                             ds_cost_report_t *report_p, int *assembled_p);

/* The communication samples of sources->nccl_tests (read with
 * sources->gpus_per_node) in a new set the caller destroys; *samples_p is
 * NULL when no log is named.  Not collective. */
DS_API ds_status_t ds_predict_load_logs(const ds_predict_sources_t *sources,
                                        ds_comm_samples_t **samples_p);

/* Adds the costs of every event of every candidate of `search` (enumerated
 * here) that `db` (measured, or scaled from another device and marked
 * assumed) and `samples` (may be NULL) give, the database's measurements
 * under sources->fingerprint; *report_p says what they gave.  Does nothing
 * when `db` is NULL.  Not collective. */
DS_API ds_status_t ds_predict_search_costs(const ds_predict_sources_t *sources, ds_profile_db_t *db,
                                           const ds_comm_samples_t *samples, ds_search_t *search,
                                           const ds_cluster_t *cluster, ds_cost_table_t *costs,
                                           ds_cost_report_t *report_p);

/* Runs `sim` for the band's low end, its high end, then the expected
 * iteration last (the run the simulator's reports and exports read), with
 * `options` otherwise.  Stops at the first failure, leaving that run's
 * results in `sim` (ds_sim_missing_count after DS_ERR_NOT_FOUND).  Not
 * collective. */
DS_API ds_status_t ds_predict_run_band(ds_sim_t *sim, const ds_model_t *model,
                                       const ds_strategy_t *strategy, const ds_cluster_t *cluster,
                                       const ds_cost_table_t *costs,
                                       const ds_sim_options_t *options, double *low_s_p,
                                       double *high_s_p);

#ifdef __cplusplus
}
#endif

#endif /* DSMPI_PREDICT_H */
