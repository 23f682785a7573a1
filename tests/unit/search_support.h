/* Helpers of the search tests. */
#ifndef DSMPI_TEST_SEARCH_SUPPORT_H
#define DSMPI_TEST_SEARCH_SUPPORT_H

#include "check.h"

#include <stdlib.h>

/* A search of `model` on `cluster` from a base strategy with `gbs` and the
 * strategy items `base_items` (NULL: none), narrowed by each of `fixes`
 * (NULL-terminated). */
static inline ds_search_t *search_support_make(const ds_model_t *model, const ds_cluster_t *cluster,
                                               int64_t gbs, const char *base_items,
                                               const ds_search_options_t *options,
                                               const char *const *fixes)
{
    ds_strategy_t base;
    ds_strategy_init(&base);
    base.gbs = gbs;
    if (base_items != NULL)
        CHECK_OK(ds_strategy_parse(base_items, &base));
    ds_search_t *search = NULL;
    if (ds_search_create(model, cluster, &base, options, &search) != DS_OK) {
        fprintf(stderr, "search: %s\n", ds_last_error());
        exit(1);
    }
    for (int i = 0; fixes != NULL && fixes[i] != NULL; i++)
        CHECK_OK(ds_search_fix(search, fixes[i]));
    return search;
}

/* Options of an exhaustive search from device-model estimates: no bound,
 * every candidate ranked in a row of its own. */
static inline void search_support_exhaustive(ds_search_options_t *o)
{
    ds_search_options_init(o);
    o->estimate_missing = 1;
    o->bound = 0;
    o->top_k = 100000;
    o->all_variants = 1;
}

/* A result's lower bound is positive and at most its simulated time. */
static inline void search_support_check_bound(const ds_search_result_t *r)
{
    CHECK_MSG(r->lower_bound_s > 0 && r->lower_bound_s <= r->iteration_s,
              "candidate %lld: bound %.9g above time %.9g", (long long)r->candidate,
              r->lower_bound_s, r->iteration_s);
}

/* A simulator and its options for a result simulated alone, as the search
 * simulates it (symmetric mode, stage level, device-model estimates). */
static inline ds_sim_t *search_support_alone(ds_sim_options_t *so)
{
    ds_sim_t *sim = NULL;
    CHECK_OK(ds_sim_create(&sim));
    ds_sim_options_init(so);
    so->mode = DS_SIM_SYMMETRIC;
    so->granularity = DS_SIM_STAGE;
    so->estimate_missing = 1;
    return sim;
}

/* Branch and bound found the exhaustive search's first k results. */
static inline void search_support_check_top(ds_search_t *exhaustive, ds_search_t *bounded, size_t k)
{
    CHECK_INT(ds_search_result_count(bounded), k);
    for (size_t i = 0; i < k; i++) {
        ds_search_result_t a, b;
        CHECK_OK(ds_search_result_at(exhaustive, i, &a));
        CHECK_OK(ds_search_result_at(bounded, i, &b));
        CHECK_INT(b.candidate, a.candidate);
        CHECK(b.iteration_s == a.iteration_s);
    }
}

#endif
