/* The simulator object: options, one run (build, evaluate, measure) and the
 * accessors of its results. */
#include "dsi_sim.h"

#include <string.h>
#include <time.h>

static const char *const category_names[DS_SIM_CAT_COUNT_] = {
    "forward", "backward", "optimizer", "tp-comm", "pp-p2p", "dp-comm", "other-comm", "wait"};
static const char *const stream_names[DS_SIM_STREAM_COUNT_] = {"compute", "tp", "pp", "dp",
                                                               "other"};

const char *ds_sim_category_name(ds_sim_category_t category)
{
    return (unsigned)category < DS_SIM_CAT_COUNT_ ? category_names[category] : "?";
}

const char *ds_sim_stream_name(ds_sim_stream_t stream)
{
    return (unsigned)stream < DS_SIM_STREAM_COUNT_ ? stream_names[stream] : "?";
}

void ds_sim_options_init(ds_sim_options_t *options)
{
    memset(options, 0, sizeof(*options));
    options->mode = DS_SIM_SYMMETRIC;
    options->granularity = DS_SIM_LAYER;
    options->keep_timeline = 1;
    options->overlap_interference = 1;
    options->nic_sharing = 1;
    options->collective_skew = 1;
    options->hash_timeline = 1;
}

ds_status_t ds_sim_create(ds_sim_t **sim_p)
{
    ds_sim_t *sim;
    DSI_TRY(dsi_calloc(1, sizeof(*sim), &sim));
    *sim_p = sim;
    return DS_OK;
}

void ds_sim_destroy(ds_sim_t *sim)
{
    if (sim == NULL)
        return;
    dsi_placement_free(&sim->place);
    dsi_sim_templates_reset(sim);
    dsi_free(sim->keys);
    dsi_free(sim->key_slots);
    dsi_sim_memo_free(sim);
    dsi_free(sim->missing);
    dsi_free(sim->op_dur);
    dsi_free(sim->op_nic);
    dsi_free(sim->op_wait);
    dsi_free(sim->op_comm);
    dsi_free(sim->op_assumed);
    dsi_free(sim->op_grad);
    dsi_free(sim->op_label);
    dsi_free(sim->templates);
    dsi_free(sim->profiles);
    dsi_free(sim->part_layer);
    dsi_free(sim->part_tf);
    dsi_free(sim->part_tb);
    dsi_free(sim->part_params);
    dsi_free(sim->part_rev);
    for (int32_t i = 0; i < sim->plan.num_programs; i++)
        dsi_program_free(&sim->plan.programs[i]);
    dsi_free(sim->plan.programs);
    for (int i = 0; i < DSI_PLACE_CACHE; i++) {
        dsi_place_classes_t *k = &sim->plan.kept[i];
        dsi_free(k->column_of);
        dsi_free(k->dp_of);
        dsi_free(k->lane_dp);
        dsi_free(k->columns);
        dsi_free(k->dpgroups);
        dsi_free(k->tp_lay);
        dsi_free(k->dp_lay);
        dsi_free(k->fwd_lay);
        dsi_free(k->bwd_lay);
        dsi_free(k->emb_lay);
        dsi_free(k->mp_lay);
    }
    dsi_free(sim->plan.column_of);
    dsi_free(sim->plan.dp_of);
    dsi_free(sim->plan.columns);
    dsi_free(sim->plan.lanes);
    dsi_free(sim->plan.lane_dp);
    dsi_free(sim->plan.dpgroups);
    dsi_free(sim->plan.stage_lanes);
    dsi_free(sim->device_factor);
    dsi_free(sim->plan.tp_lay);
    dsi_free(sim->plan.dp_lay);
    dsi_free(sim->plan.fwd_lay);
    dsi_free(sim->plan.bwd_lay);
    dsi_free(sim->plan.emb_lay);
    dsi_free(sim->plan.mp_lay);
    dsi_free(sim->builder.fwd_done_store);
    dsi_free(sim->plan.stage_params);
    dsi_free(sim->plan.num_buckets);
    dsi_free(sim->builder.ready);
    dsi_free(sim->builder.nic);
    dsi_free(sim->builder.gather);
    dsi_free(sim->builder.round_end);
    dsi_free(sim->builder.optimizer);
    dsi_free(sim->builder.cursors);
    dsi_free(sim->builder.channel_costs);
    dsi_free(sim->builder.bucket_costs);
    dsi_free(sim->builder.dp_last);
    dsi_free(sim->builder.part_end);
    dsi_free(sim->builder.pass_start);
    dsi_free(sim->builder.xfer);
    dsi_free(sim->builder.xfer_sides);
    dsi_free(sim->builder.xfer_flag);
    dsi_free(sim->builder.segs);
    dsi_free(sim->builder.part_segs);
    dsi_free(sim->builder.part_num_segs);
    dsi_free(sim->builder.lane_interference);
    dsi_free(sim->reuse.node_source);
    dsi_free(sim->reuse.reps);
    dsi_free(sim->reuse.member_off);
    dsi_free(sim->reuse.members);
    dsi_free(sim->reuse.slots);
    dsi_free(sim->reuse.slot_keys);
    dsi_twice_free(&sim->twice);
    dsi_free(sim->builder.last_xf);
    dsi_graph_free(&sim->g);
    dsi_free(sim->results.devices);
    dsi_free(sim->results.mb_nodes);
    dsi_free(sim->results.lane_node_off);
    dsi_free(sim->results.lane_nodes);
    dsi_free(sim->results.dp_node_off);
    dsi_free(sim->results.dp_node_nodes);
    dsi_free(sim->results.col_node_off);
    dsi_free(sim->results.col_node_nodes);
    dsi_free(sim->results.xfer_lane_off);
    dsi_free(sim->results.xfer_lane_nodes);
    dsi_free(sim->results.events);
    dsi_free(sim->results.hash_prefix);
    dsi_sim_estimate_free(sim);
    dsi_sim_expert_layouts_free(sim);
    dsi_free(sim);
}

void dsi_sim_set_unbatched_p2p(ds_sim_t *sim, int on)
{
    sim->unbatched_p2p = on;
}

static ds_status_t set_factors(ds_sim_t *sim)
{
    const ds_sim_options_t *o = &sim->opt;
    if (o->num_slow_devices == 0)
        return DS_OK;
    if (o->mode != DS_SIM_FULL)
        return DSI_ERROR(DS_ERR_INVALID_ARG,
                         "per-device speed factors (%zu given) need the full simulation mode "
                         "(accepted: mode full, --full)",
                         o->num_slow_devices);
    DSI_TRY(dsi_realloc_array(&sim->device_factor, (size_t)sim->num_devices,
                              sizeof(*sim->device_factor)));
    for (int64_t i = 0; i < sim->num_devices; i++)
        sim->device_factor[i] = 1.0;
    for (size_t i = 0; i < o->num_slow_devices; i++) {
        const ds_sim_slow_device_t *sd = &o->slow_devices[i];
        if (sd->rank < 0 || sd->rank >= sim->num_devices)
            return DSI_ERROR(DS_ERR_INVALID_ARG, "slow device rank %lld (accepted: 0 to %lld)",
                             (long long)sd->rank, (long long)sim->num_devices - 1);
        if (!(sd->factor > 0.0 && sd->factor <= 1000.0))
            return DSI_ERROR(
                DS_ERR_INVALID_ARG,
                "slow device factor %g for rank %lld (accepted: above 0, at most 1000)", sd->factor,
                (long long)sd->rank);
        sim->device_factor[sd->rank] = sd->factor;
    }
    return DS_OK;
}

static ds_status_t deadlock_error(ds_sim_t *sim, const int32_t *cycle, int32_t len)
{
    dsi_strbuf_t buf;
    dsi_strbuf_init(&buf);
    dsi_strbuf_appendf(&buf,
                       "the schedule deadlocks: %d events wait on each other in a cycle: ", len);
    int32_t shown = DSI_MIN(len, 6);
    for (int32_t i = 0; i < shown; i++) {
        char text[512];
        dsi_sim_describe_node(sim, cycle[i], text, sizeof(text));
        dsi_strbuf_appendf(&buf, "%s%s", i ? " waits for " : "", text);
    }
    if (shown < len)
        dsi_strbuf_appendf(&buf, " ... (%d more)", len - shown);
    dsi_strbuf_append(&buf, ", which waits for the first");
    ds_status_t status = DSI_ERROR(DS_ERR_DEADLOCK, "%s",
                                   dsi_strbuf_status(&buf) == DS_OK ? dsi_strbuf_text(&buf)
                                                                    : "the schedule deadlocks");
    dsi_strbuf_free(&buf);
    return status;
}

ds_status_t ds_sim_run(ds_sim_t *sim, const ds_model_t *model, const ds_strategy_t *strategy,
                       const ds_cluster_t *cluster, const ds_cost_table_t *costs,
                       const ds_sim_options_t *options)
{
    double t0 = dsi_now_s();
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
    DSI_TRY(ds_strategy_check_device(strategy, &cluster->device));
    if (options->mode != DS_SIM_SYMMETRIC && options->mode != DS_SIM_FULL)
        return DSI_ERROR(DS_ERR_INVALID_ARG, "simulation mode %d (accepted: symmetric, full)",
                         (int)options->mode);
    if (options->band != DS_SIM_BAND_EXPECTED && options->band != DS_SIM_BAND_LOW &&
        options->band != DS_SIM_BAND_HIGH)
        return DSI_ERROR(DS_ERR_INVALID_ARG, "band end %d (accepted: expected, low, high)",
                         (int)options->band);
    if (options->granularity != DS_SIM_LAYER && options->granularity != DS_SIM_STAGE)
        return DSI_ERROR(DS_ERR_INVALID_ARG, "granularity %d (accepted: layer, stage)",
                         (int)options->granularity);
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
    sim->opt.nic_sharing = options->nic_sharing && dsi_param_int(DSI_PARAM_SIM_NIC_SHARING) != 0;
    sim->opt.slow_devices = NULL; /* not kept past the run */
    sim->m = m;
    sim->num_devices = devices;
    dsi_shape_ctx_init(&sim->ctx, model, strategy);
    dsi_free(sim->device_factor);
    sim->device_factor = NULL;
    sim->opt.slow_devices = options->slow_devices;
    ds_status_t status = set_factors(sim);
    sim->opt.slow_devices = NULL;
    if (status != DS_OK)
        return status;
    dsi_placement_free(&sim->place);
    DSI_TRY(dsi_placement_init(&sim->place, &sim->s, cluster));
    sim->place.cp = sim->ctx.cp;
    /* A run that differs from the last in the DP algorithm at most keeps its
     * plan (placement, lanes, profiles), with the caches as they stood after it. */
    dsi_sim_memo_check(sim);
    bool keep_plan = dsi_sim_plan_kept(sim);
    if (keep_plan) {
        DSI_TRY(dsi_sim_caches_cut(sim, &sim->plan_mark));
    } else {
        dsi_sim_keys_reset(sim);
        dsi_sim_templates_reset(sim);
    }

    DSI_TRY(dsi_sim_build(sim, keep_plan));
    if (sim->num_missing > 0) {
        char key[256];
        ds_event_key_format(&sim->missing[0], key, sizeof(key));
        return DSI_ERROR(DS_ERR_NOT_FOUND,
                         "%zu events have no cost (first: %s); profile them or estimate them from "
                         "the device roofline",
                         sim->num_missing, key);
    }
    /* Only symmetric graphs: full-mode ones are large and rarely rebuilt alike.
     * A reused graph is the structure noted last. */
    if (!sim->results.reused)
        DSI_TRY(dsi_graph_note_structure(&sim->g, sim->opt.mode == DS_SIM_SYMMETRIC &&
                                                      dsi_param_int(DSI_PARAM_SIM_REUSE) != 0));
    double t1 = dsi_now_s();
    int32_t *cycle = NULL, cycle_len = 0;
    /* Durations all the last run's: its start times stand. */
    sim->g.binds = sim->opt.keep_timeline; /* only the critical path asks */
    status = sim->results.same_timeline ? DS_OK : dsi_graph_evaluate(&sim->g, &cycle, &cycle_len);
    if (status == DS_OK && !sim->results.same_timeline && sim->twice.active)
        status = dsi_twice_second(sim);
    if (status == DS_ERR_DEADLOCK) {
        status = deadlock_error(sim, cycle, cycle_len);
        dsi_free(cycle);
        return status;
    }
    DSI_TRY(status);
    double t2 = dsi_now_s();
    dsi_sim_reuse_note(sim);
    sim->results.build_s = t1 - t0;
    sim->results.eval_s = t2 - t1;
    DSI_TRY(dsi_sim_metrics(sim));
    dsi_sim_reuse_settle(sim);
    dsi_sim_plan_finish(sim);
    sim->results.evaluated = 1;
    return DS_OK;
}

size_t ds_sim_missing_count(const ds_sim_t *sim)
{
    return sim->num_missing;
}

const ds_event_key_t *ds_sim_missing_at(const ds_sim_t *sim, size_t index)
{
    return index < sim->num_missing ? &sim->missing[index] : NULL;
}

size_t ds_sim_key_count(const ds_sim_t *sim)
{
    return sim->num_keys;
}

const ds_event_key_t *ds_sim_key_at(const ds_sim_t *sim, size_t index,
                                    ds_provenance_t *provenance_p, double *seconds_p)
{
    if (index >= sim->num_keys)
        return NULL;
    if (provenance_p != NULL)
        *provenance_p = sim->keys[index].provenance;
    if (seconds_p != NULL)
        *seconds_p = sim->keys[index].seconds;
    return &sim->keys[index].key;
}

void ds_sim_get_summary(const ds_sim_t *sim, ds_sim_summary_t *summary)
{
    if (!sim->results.evaluated) {
        memset(summary, 0, sizeof(*summary));
        return;
    }
    *summary = sim->results.summary;
}

uint64_t ds_sim_timeline_hash(ds_sim_t *sim)
{
    if (!sim->results.evaluated)
        return 0;
    if (!sim->results.hashed && dsi_sim_timeline_hash(sim) != DS_OK)
        return 0;
    return sim->results.summary.timeline_hash;
}

size_t ds_sim_device_count(const ds_sim_t *sim)
{
    return sim->results.evaluated ? sim->results.num_devices_out : 0;
}

ds_status_t ds_sim_device_at(const ds_sim_t *sim, size_t index, ds_sim_device_t *device_p)
{
    if (!sim->results.evaluated || index >= sim->results.num_devices_out)
        return DSI_ERROR(DS_ERR_INVALID_ARG, "device index %zu (accepted: below %zu)", index,
                         sim->results.evaluated ? sim->results.num_devices_out : 0);
    *device_p = sim->results.devices[index];
    return DS_OK;
}

ds_status_t ds_sim_device_of_rank(const ds_sim_t *sim, int64_t rank, ds_sim_device_t *device_p)
{
    if (!sim->results.evaluated || !sim->opt.keep_timeline || rank < 0 || rank >= sim->num_devices)
        return DSI_ERROR(DS_ERR_INVALID_ARG, "rank %lld (accepted: 0 to %lld)", (long long)rank,
                         (long long)sim->num_devices - 1);
    ds_coords_t c = ds_strategy_coords_of(&sim->s, rank);
    int32_t lane = sim->plan.columns[sim->plan.column_of[c.dp]].lane_first + c.pp;
    size_t index = (size_t)lane * sim->s.tp + c.tp;
    ds_sim_device_t d = sim->results.devices[index];
    d.rank = rank;
    d.coords = c;
    d.node = rank / sim->cluster.gpus_per_node;
    if (sim->device_factor != NULL)
        d.speed_factor = sim->device_factor[rank];
    *device_p = d;
    return DS_OK;
}

size_t ds_sim_microbatch_count(const ds_sim_t *sim)
{
    return sim->results.evaluated && sim->opt.keep_timeline
               ? (size_t)sim->s.pp * sim->s.vpp * (size_t)sim->m
               : 0;
}

ds_status_t ds_sim_microbatch_at(const ds_sim_t *sim, size_t index, ds_sim_microbatch_t *mb_p)
{
    if (index >= ds_sim_microbatch_count(sim))
        return DSI_ERROR(DS_ERR_INVALID_ARG, "micro-batch entry %zu (accepted: below %zu)", index,
                         ds_sim_microbatch_count(sim));
    const int32_t *n = sim->results.mb_nodes + index * 4;
    const dsi_graph_t *g = &sim->g;
    ds_sim_microbatch_t mb;
    mb.microbatch = (int)(index % (size_t)sim->m);
    mb.chunk = (int)(index / (size_t)sim->m % (size_t)sim->s.vpp);
    mb.stage = (int)(index / (size_t)sim->m / (size_t)sim->s.vpp);
    double origin = (double)sim->results.it2_begin;
    mb.fwd_start_s = n[0] >= 0 ? ((double)g->start[n[0]] - origin) * 1e-9 : 0.0;
    mb.fwd_end_s = n[1] >= 0 ? ((double)(g->start[n[1]] + g->dur[n[1]]) - origin) * 1e-9 : 0.0;
    mb.bwd_start_s = n[2] >= 0 ? ((double)g->start[n[2]] - origin) * 1e-9 : 0.0;
    mb.bwd_end_s = n[3] >= 0 ? ((double)(g->start[n[3]] + g->dur[n[3]]) - origin) * 1e-9 : 0.0;
    *mb_p = mb;
    return DS_OK;
}

void ds_sim_get_critical_path(const ds_sim_t *sim, ds_sim_critical_t *critical)
{
    if (!sim->results.evaluated || !sim->opt.keep_timeline) {
        memset(critical, 0, sizeof(*critical));
        return;
    }
    *critical = sim->results.critical;
}
