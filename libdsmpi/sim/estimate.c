/*
 * Cheap estimates without building the iteration, for the strategy search:
 * the memory of every pipeline stage from the same model ds_sim_run uses
 * (memory.c on the schedule's in-flight peak), and a lower bound of the
 * iteration time from the stage profiles (the busiest pipeline rank's forward
 * and backward passes of every micro-batch).
 *
 * Why the bound holds: a pipeline rank's compute stream runs, in program
 * order, its m x vpp forward and backward chunk passes of the reported
 * iteration; each pass lasts exactly the fused sum of its layer passes (TP
 * collectives included, speed factor 1 in symmetric mode), and transfers,
 * data-parallel waits and the optimizer only add to that stream's time.
 * The optimizer step and everything after the last backward are left out,
 * so that overlap of the reported iteration with the end of the previous
 * one (parameter all-gathers, stages finishing at different times) cannot
 * make the bound exceed the iteration time.  The search's tests check the
 * bound against full runs.
 */
#include "dsi_sim.h"

#include <string.h>

/* Schedule programs of the last estimate, by (schedule, pp, vpp, m). */
struct dsi_sim_estimate_cache {
    dsi_program_t *programs;
    int32_t num_programs; /* allocated */
    int valid;
    ds_schedule_t schedule;
    int pp, vpp;
    int64_t m;
};

void dsi_sim_estimate_free(ds_sim_t *sim)
{
    dsi_sim_estimate_cache_t *cache = sim->estimate_cache;
    if (cache == NULL)
        return;
    for (int32_t i = 0; i < cache->num_programs; i++)
        dsi_program_free(&cache->programs[i]);
    dsi_free(cache->programs);
    dsi_free(cache);
    sim->estimate_cache = NULL;
}

static ds_status_t cached_programs(ds_sim_t *sim, dsi_sim_estimate_cache_t **cache_p)
{
    const ds_strategy_t *s = &sim->s;
    if (sim->estimate_cache == NULL)
        DSI_TRY(dsi_calloc(1, sizeof(*sim->estimate_cache), &sim->estimate_cache));
    dsi_sim_estimate_cache_t *cache = sim->estimate_cache;
    if (cache->valid && cache->schedule == s->schedule && cache->pp == s->pp &&
        cache->vpp == s->vpp && cache->m == sim->m) {
        *cache_p = cache;
        return DS_OK;
    }
    cache->valid = 0;
    if (cache->num_programs < s->pp) {
        DSI_TRY(dsi_realloc_array(&cache->programs, (size_t)s->pp, sizeof(*cache->programs)));
        memset(cache->programs + cache->num_programs, 0,
               (size_t)(s->pp - cache->num_programs) * sizeof(*cache->programs));
        cache->num_programs = s->pp;
    }
    for (int p = 0; p < s->pp; p++)
        DSI_TRY(dsi_schedule_build(s, sim->m, p, 0, &cache->programs[p]));
    cache->schedule = s->schedule;
    cache->pp = s->pp;
    cache->vpp = s->vpp;
    cache->m = sim->m;
    cache->valid = 1;
    *cache_p = cache;
    return DS_OK;
}

/* The busiest pipeline rank's forward and backward passes, ns. */
static ds_status_t stage_work_bound(ds_sim_t *sim, int64_t *ns_p)
{
    const ds_strategy_t *s = &sim->s;
    dsi_placement_free(&sim->place);
    DSI_TRY(dsi_placement_init(&sim->place, s, &sim->cluster));
    sim->place.cp = sim->ctx.cp;
    dsi_sim_keys_reset(sim);
    dsi_sim_templates_reset(sim);
    dsi_sim_plan_forget(sim);
    int64_t best = 0;
    for (int p = 0; p < s->pp; p++) {
        int n = dsi_group_members(&sim->place, DSI_KIND_TP, p, 0);
        dsi_layout_t layout = dsi_group_layout(&sim->place, DSI_KIND_TP, n);
        int32_t id;
        DSI_TRY(dsi_sim_profile_of(sim, p, &layout, &id));
        const dsi_profile_t *pr = &sim->profiles[id];
        int64_t per_microbatch = 0;
        for (int c = 0; c < s->vpp; c++)
            per_microbatch += pr->fused_dur[c * 2] + pr->fused_dur[c * 2 + 1];
        int64_t total = per_microbatch * sim->m;
        if (total > best)
            best = total;
    }
    if (sim->num_missing > 0) {
        char key[256];
        ds_event_key_format(&sim->missing[0], key, sizeof(key));
        return DSI_ERROR(DS_ERR_NOT_FOUND,
                         "%zu events have no cost (first: %s); profile them or estimate them from "
                         "the device roofline",
                         sim->num_missing, key);
    }
    *ns_p = best;
    return DS_OK;
}

ds_status_t ds_sim_estimate(ds_sim_t *sim, const ds_model_t *model, const ds_strategy_t *strategy,
                            const ds_cluster_t *cluster, const ds_cost_table_t *costs,
                            const ds_sim_options_t *options, ds_sim_estimate_t *estimate_p)
{
    sim->results.evaluated = 0;
    ds_sim_options_t defaults;
    if (options == NULL) {
        ds_sim_options_init(&defaults);
        options = &defaults;
    }
    int64_t devices =
        (int64_t)strategy->dp * strategy->tp * strategy->pp * (strategy->cp > 1 ? strategy->cp : 1);
    int64_t m = ds_strategy_num_microbatches(strategy);
    if (strategy->dp < 1 || m < 1 || devices != ds_cluster_num_gpus(cluster))
        return DSI_ERROR(DS_ERR_INVALID_ARG,
                         "strategy dp=%d tp=%d pp=%d gbs=%lld is not resolved for %lld devices "
                         "(call ds_strategy_resolve first)",
                         strategy->dp, strategy->tp, strategy->pp, (long long)strategy->gbs,
                         (long long)ds_cluster_num_gpus(cluster));
    if (m * strategy->vpp > INT32_MAX / 8)
        return DSI_ERROR(DS_ERR_INVALID_ARG,
                         "%lld micro-batches are too many to simulate (accepted: at most %d)",
                         (long long)m, INT32_MAX / 8 / strategy->vpp);
    sim->model = model;
    ds_model_get_info(model, &sim->info);
    sim->given = *strategy;
    sim->s = dsi_strategy_fold_cp(strategy);
    sim->cluster = *cluster;
    sim->costs = costs;
    sim->opt = *options;
    sim->opt.slow_devices = NULL;
    sim->opt.num_slow_devices = 0;
    sim->m = m;
    sim->num_devices = devices;
    dsi_shape_ctx_init(&sim->ctx, model, strategy);
    dsi_sim_memo_check(sim);

    const ds_strategy_t *s = &sim->s;
    DSI_TRY(
        dsi_realloc_array(&sim->plan.stage_params, (size_t)s->pp, sizeof(*sim->plan.stage_params)));
    for (int p = 0; p < s->pp; p++)
        sim->plan.stage_params[p] = dsi_stage_params(model, s, p);
    dsi_sim_estimate_cache_t *cache;
    DSI_TRY(cached_programs(sim, &cache));

    /* memory.c reads sim->plan.programs: lend it the cached ones. */
    dsi_program_t *own = sim->plan.programs;
    int32_t own_count = sim->plan.num_programs;
    sim->plan.programs = cache->programs;
    sim->plan.num_programs = cache->num_programs;
    ds_sim_estimate_t est;
    memset(&est, 0, sizeof(est));
    for (int p = 0; p < s->pp; p++) {
        ds_sim_memory_t mem;
        dsi_sim_memory(sim, p, &mem);
        if (p == 0 || mem.total_B > est.memory.total_B) {
            est.memory = mem;
            est.memory_stage = p;
        }
        est.oom |= mem.oom;
    }
    sim->plan.programs = own;
    sim->plan.num_programs = own_count;

    if (costs != NULL || options->estimate_missing || options->comm_model != NULL) {
        int64_t ns = 0;
        DSI_TRY(stage_work_bound(sim, &ns));
        est.lower_bound_s = (double)ns * 1e-9;
    }
    *estimate_p = est;
    return DS_OK;
}
