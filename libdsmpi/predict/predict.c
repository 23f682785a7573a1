/* The costs of a prediction from the sources a user names, and the
 * prediction with its band. */
#include <dsmpi/comm.h>
#include <dsmpi/predict.h>

#include "dsi_core.h"

#include <string.h>

void ds_predict_sources_init(ds_predict_sources_t *sources)
{
    memset(sources, 0, sizeof(*sources));
}

ds_status_t ds_predict_costs_open(const ds_predict_sources_t *sources, const ds_profile_db_t *db,
                                  ds_cost_table_t *costs, ds_profile_db_t **opened_p)
{
    ds_status_t status = DS_OK;
    ds_profile_db_t *opened = NULL;
    if (sources->cost_table != NULL)
        DSI_TRY(ds_cost_table_load_text(costs, sources->cost_table));
    if (db == NULL && sources->profile_db != NULL) {
        DSI_TRY_GOTO(ds_profile_db_open(MPI_COMM_NULL, sources->profile_db, DS_PROFILE_DB_READ_ONLY,
                                        &opened),
                     status, out);
        for (size_t i = 0; i < sources->num_site_dbs; i++)
            DSI_TRY_GOTO(ds_profile_db_add_fallback(opened, sources->site_dbs[i]), status, out);
    }
    *opened_p = opened;
    opened = NULL;
out:
    ds_profile_db_close(opened);
    return status;
}

ds_status_t ds_predict_load_logs(const ds_predict_sources_t *sources, ds_comm_samples_t **samples_p)
{
    ds_comm_samples_t *samples = NULL;
    ds_status_t status = DS_OK;
    *samples_p = NULL;
    if (sources->num_nccl_tests == 0)
        return DS_OK;
    DSI_TRY(ds_comm_samples_create(&samples));
    for (size_t i = 0; i < sources->num_nccl_tests && status == DS_OK; i++) {
        ds_comm_import_options_t io;
        ds_comm_import_options_init(&io);
        io.gpus_per_node = sources->gpus_per_node;
        status = ds_comm_import_nccl_tests(sources->nccl_tests[i], &io, samples, NULL);
    }
    if (status != DS_OK) {
        ds_comm_samples_destroy(samples);
        return status;
    }
    *samples_p = samples;
    return DS_OK;
}

/* ds_costs_assemble over `events` with the database and the samples. */
static ds_status_t assemble(const ds_predict_sources_t *sources, ds_profile_db_t *db,
                            const ds_comm_samples_t *samples, const ds_event_set_t *events,
                            const ds_cluster_t *cluster, ds_cost_table_t *costs,
                            ds_cost_report_t *report_p)
{
    ds_cost_sources_t from = {db, sources->fingerprint,
                              samples != NULL ? ds_comm_samples_data(samples) : NULL,
                              samples != NULL ? ds_comm_samples_size(samples) : 0};
    return ds_costs_assemble(&from, events, cluster, costs, report_p);
}

ds_status_t ds_predict_costs_assemble(const ds_predict_sources_t *sources, ds_profile_db_t *db,
                                      const ds_model_t *model, const ds_strategy_t *strategy,
                                      const ds_cluster_t *cluster, ds_cost_table_t *costs,
                                      ds_cost_report_t *report_p, int *assembled_p)
{
    ds_status_t status = DS_OK;
    ds_event_set_t *events = NULL;
    ds_comm_samples_t *logs = NULL;
    if (db == NULL && sources->num_nccl_tests == 0) {
        *assembled_p = 0;
        return DS_OK;
    }
    DSI_TRY_GOTO(ds_events_generate(model, strategy, cluster, &events), status, out);
    DSI_TRY_GOTO(ds_predict_load_logs(sources, &logs), status, out);
    DSI_TRY_GOTO(assemble(sources, db, logs, events, cluster, costs, report_p), status, out);
    *assembled_p = 1;
out:
    ds_comm_samples_destroy(logs);
    ds_event_set_destroy(events);
    return status;
}

ds_status_t ds_predict_search_costs(const ds_predict_sources_t *sources, ds_profile_db_t *db,
                                    const ds_comm_samples_t *samples, ds_search_t *search,
                                    const ds_cluster_t *cluster, ds_cost_table_t *costs,
                                    ds_cost_report_t *report_p)
{
    if (db == NULL)
        return DS_OK;
    ds_event_set_t *events = NULL;
    ds_status_t status = ds_search_enumerate(search);
    if (status == DS_OK)
        status = ds_search_events(search, &events);
    if (status == DS_OK)
        status = assemble(sources, db, samples, events, cluster, costs, report_p);
    ds_event_set_destroy(events);
    return status;
}

ds_status_t ds_predict_run_band(ds_sim_t *sim, const ds_model_t *model,
                                const ds_strategy_t *strategy, const ds_cluster_t *cluster,
                                const ds_cost_table_t *costs, const ds_sim_options_t *options,
                                double *low_s_p, double *high_s_p)
{
    ds_sim_options_t so = *options;
    ds_sim_summary_t sum;
    so.band = DS_SIM_BAND_LOW;
    DSI_TRY(ds_sim_run(sim, model, strategy, cluster, costs, &so));
    ds_sim_get_summary(sim, &sum);
    double low_s = sum.iteration_s;
    so.band = DS_SIM_BAND_HIGH;
    DSI_TRY(ds_sim_run(sim, model, strategy, cluster, costs, &so));
    ds_sim_get_summary(sim, &sum);
    double high_s = sum.iteration_s;
    so.band = DS_SIM_BAND_EXPECTED;
    DSI_TRY(ds_sim_run(sim, model, strategy, cluster, costs, &so));
    *low_s_p = low_s;
    *high_s_p = high_s;
    return DS_OK;
}
