/* predict: the cost sources of a prediction (none, a cost table that is not
 * there) and the banded prediction: the band holds the expected iteration,
 * which is the simulator's last run. */
#include "sim_support.h"

#include <dsmpi/predict.h>

static void test_sources(void)
{
    ds_predict_sources_t sources;
    ds_predict_sources_init(&sources);
    ds_cost_table_t *costs = NULL;
    CHECK_OK(ds_cost_table_create(&costs));
    ds_profile_db_t *opened = (ds_profile_db_t *)&sources; /* must be overwritten */
    CHECK_OK(ds_predict_costs_open(&sources, NULL, costs, &opened));
    CHECK(opened == NULL);
    CHECK_INT(ds_cost_table_size(costs), 0);

    ds_model_t *model = uniform_model(4, 8);
    ds_strategy_t s;
    ds_cluster_t cluster;
    setup_strategy(model, "dp=8", 1, 8, &s, &cluster);
    ds_cost_report_t report;
    int assembled = -1;
    CHECK_OK(
        ds_predict_costs_assemble(&sources, NULL, model, &s, &cluster, costs, &report, &assembled));
    CHECK_INT(assembled, 0); /* neither a database nor logs: nothing to assemble */

    sources.cost_table = "/nonexistent/costs.txt";
    opened = NULL;
    CHECK(ds_predict_costs_open(&sources, NULL, costs, &opened) != DS_OK);
    CHECK(opened == NULL);
    ds_model_destroy(model);
    ds_cost_table_destroy(costs);
}

static void test_band(void)
{
    ds_model_t *model = uniform_model(4, 8);
    ds_strategy_t s;
    ds_cluster_t cluster;
    setup_strategy(model, "dp=8", 1, 8, &s, &cluster);
    ds_cost_table_t *costs = NULL;
    ds_sim_t *sim = NULL;
    CHECK_OK(ds_cost_table_create(&costs));
    CHECK_OK(ds_sim_create(&sim));
    ds_sim_options_t so;
    ds_sim_options_init(&so);
    so.estimate_missing = 1;
    double low = 0.0, high = 0.0;
    CHECK_OK(ds_predict_run_band(sim, model, &s, &cluster, costs, &so, &low, &high));
    ds_sim_summary_t sum;
    ds_sim_get_summary(sim, &sum);
    CHECK(low > 0.0);
    CHECK_MSG(low <= sum.iteration_s && sum.iteration_s <= high, "band %g .. %g, expected %g", low,
              high, sum.iteration_s);
    /* Without estimates the costs are missing: the first run's failure comes back. */
    so.estimate_missing = 0;
    low = high = -1.0;
    CHECK_FAILS(ds_predict_run_band(sim, model, &s, &cluster, costs, &so, &low, &high),
                DS_ERR_NOT_FOUND, "");
    CHECK(ds_sim_missing_count(sim) > 0);
    CHECK(low == -1.0 && high == -1.0);
    ds_sim_destroy(sim);
    ds_cost_table_destroy(costs);
    ds_model_destroy(model);
}

int main(void)
{
    test_sources();
    test_band();
    return check_summary("test_predict");
}
