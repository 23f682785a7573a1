/* Private parts of the strategy search: the space, its fixes and the
 * candidates. */
#ifndef DSI_SEARCH_H
#define DSI_SEARCH_H

#include <dsmpi/search.h>

#include "dsi_core.h"

/* Values a dimension is fixed to (count 0: not fixed). */
#define DSI_SEARCH_MAX_FIXED 32
typedef struct dsi_fixed {
    int count;
    int values[DSI_SEARCH_MAX_FIXED];
} dsi_fixed_t;

typedef enum dsi_dim_id {
    DSI_FIX_TP = 0,
    DSI_FIX_PP,
    DSI_FIX_DP,
    DSI_FIX_MBS,
    DSI_FIX_SCHEDULE,
    DSI_FIX_VPP,
    DSI_FIX_SP,
    DSI_FIX_RECOMPUTE,
    DSI_FIX_ZERO,
    DSI_FIX_DP_ALGO,
    DSI_FIX_FLASH,
    DSI_FIX_FP8,
    DSI_FIX_CP,
    DSI_FIX_EP,
    DSI_FIX_ETP,
    DSI_FIX_COUNT_
} dsi_dim_id_t;

typedef struct dsi_candidate {
    ds_strategy_t strategy;
    double memory_GiB;
    double lower_bound_s;
} dsi_candidate_t;

struct ds_search {
    const ds_model_t *model;
    ds_cluster_t cluster;
    ds_strategy_t base;
    ds_search_options_t opt;
    dsi_fixed_t fixed[DSI_FIX_COUNT_];
    int enumerated;
    dsi_candidate_t *cand;
    size_t num_cand, cap_cand;
    ds_sim_t *sim; /* reused by every estimate and run */
    ds_search_result_t *results;
    size_t num_results;
    ds_search_result_t worst;
    int have_worst;
    ds_search_stats_t stats;
};

/* enumerate.c */
ds_status_t dsi_search_fix_item(ds_search_t *search, const char *item);
/* Calls `visit` on every combination of the space (unresolved), in
 * candidate order; stops at the first non-OK status it returns. */
typedef ds_status_t (*dsi_search_visit_t)(ds_search_t *search, const ds_strategy_t *combo,
                                          void *arg);
ds_status_t dsi_search_each_combination(ds_search_t *search, dsi_search_visit_t visit, void *arg);

#endif /* DSI_SEARCH_H */
