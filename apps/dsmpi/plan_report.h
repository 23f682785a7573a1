/* plan --report DIR: a proposal's report (Markdown, HTML with inline CSS and
 * the charts inlined, and the SVG charts) of a plan, with the sensitivity of
 * each size's best strategy to a slower network and slower kernels.  Public
 * API only. */
#ifndef DSMPI_PLAN_REPORT_H
#define DSMPI_PLAN_REPORT_H

#include "app.h"

/* The sensitivity runs: the network (every communication cost) and the
 * kernels (every compute cost) this much slower. */
#define PLAN_REPORT_NETWORK_SLOWER 1.2
#define PLAN_REPORT_KERNELS_SLOWER 1.1

typedef struct plan_report_size {
    int64_t gpus, nodes;
    bool found;
    const char *note; /* why no strategy, when !found */
    ds_strategy_t strategy;
    double mfu, assumed_share;
    ds_plan_row_t row, low, high; /* expected, and the ends of the band */
    /* Unique costs behind the band: communication extrapolated beyond the
     * node counts measured, compute from the device model. */
    int64_t band_comm_keys, band_device_model_keys;
    /* The best strategy simulated again from the costs its run used: as they
     * were, communication x PLAN_REPORT_NETWORK_SLOWER, compute x
     * PLAN_REPORT_KERNELS_SLOWER. */
    bool sensitivity;
    double base_s, network_s, kernels_s;
    ds_plan_row_t network_row, kernels_row;
    int64_t keys[DS_PROV_COUNT_]; /* unique costs of the run by provenance */
} plan_report_size_t;

typedef struct plan_report {
    const char *dir;
    const char *command_line;
    const ds_model_t *model;
    const char *budget; /* "1T tokens" */
    const ds_cluster_t *first;
    const ds_system_t *system; /* NULL: no --target system= */
    const char *charge_unit;   /* the site's unit, or NULL when none given */
    const char *costs;         /* cost_origin_describe */
    const char *basis;         /* cost_origin_basis */
    const ds_profile_db_t *db; /* NULL: no profile database */
    const plan_report_size_t *sizes;
    int num_sizes;
    const char *chart_svg; /* the plan chart written into dir, file name */
} plan_report_t;

/* Fails (DS_ERR_INVALID_ARG) when `dir` exists and holds files and !force:
 * the report never overwrites silently.  Changes nothing on disk. */
ds_status_t plan_report_check_dir(const char *dir, bool force);
/* Creates `dir` (and its parents). */
ds_status_t plan_report_make_dir(const char *dir);

/* The sensitivity of `size`'s strategy on `cluster`, with the plan's costs
 * and arithmetic; fills the sensitivity members. */
ds_status_t plan_report_sensitivity(const ds_model_t *model, const ds_cluster_t *cluster,
                                    const ds_cost_table_t *costs, const ds_comm_model_t *comm,
                                    bool estimate, double peak_tflops, const ds_plan_inputs_t *plan,
                                    int64_t tokens_per_sample, plan_report_size_t *size);

/* Writes dir/report.md, dir/report.html and dir/sensitivity.svg. */
ds_status_t plan_report_write(const plan_report_t *report);

#endif /* DSMPI_PLAN_REPORT_H */
