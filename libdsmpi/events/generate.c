/*
 * Event generation: every event of one training iteration on every device of
 * the target, counted (never listed) and deduplicated by key.
 *
 * Devices of one pipeline stage run the same compute events, so compute is
 * generated once per stage and layer type and multiplied by dp x tp and the
 * number of micro-batches.  Communication keys depend on where the group's
 * members sit, so groups are enumerated (O(devices) work, O(1) memory per
 * group) and their layouts counted.
 */
#include "dsi_events.h"

#include <string.h>

typedef dsi_layout_t layout_t;

typedef struct layout_list {
    layout_t items[64];
    int count;
} layout_list_t;

typedef struct gen {
    const ds_model_t *model;
    const ds_model_info_t *info;
    const ds_strategy_t *s;
    const ds_cluster_t *cluster;
    ds_event_set_t *set;
    int64_t devices; /* dp * tp * pp */
    int64_t microbatches;
    dsi_shape_ctx_t ctx;
    dsi_op_t ops[DSI_MAX_LAYER_OPS];
    dsi_placement_t place;    /* group layouts, shared with the simulator */
    ds_strategy_t folded;     /* dp x cp replicas (context_parallel.c) */
    layout_list_t cp_layouts; /* the stage's context-parallel exchanges */
} gen_t;

static ds_status_t add(gen_t *g, const ds_event_key_t *key, double flops, double bytes,
                       const char *label, int64_t count)
{
    if (count <= 0)
        return DS_OK;
    ds_event_t e;
    memset(&e, 0, sizeof(e));
    e.key = *key;
    e.flops = flops;
    e.bytes = bytes;
    e.label = label;
    DSI_TRY(dsi_estimate_seconds(key, flops, bytes, g->cluster, &e.estimated_s));
    return ds_event_set_add(g->set, &e, count);
}

/* ---- group layouts -------------------------------------------------------------- */

static ds_status_t layout_add(layout_list_t *list, layout_t item)
{
    for (int i = 0; i < list->count; i++) {
        layout_t *l = &list->items[i];
        if (dsi_layout_equal(l, &item)) {
            l->devices += item.devices;
            return DS_OK;
        }
    }
    if (list->count == (int)DSI_ARRAY_SIZE(list->items))
        return DSI_ERROR(DS_ERR_UNSUPPORTED,
                         "more than %zu distinct group layouts: the placement is too irregular for "
                         "this node size",
                         DSI_ARRAY_SIZE(list->items));
    list->items[list->count++] = item;
    return DS_OK;
}

/* Layouts of every group of `kind` that has members in `stage`, each
 * weighted by the number of the stage's devices in such groups. */
static ds_status_t stage_layouts(gen_t *g, dsi_group_kind_t kind, int stage, layout_list_t *out)
{
    out->count = 0;
    int groups = kind == DSI_KIND_TP ? g->s->dp : g->s->tp;
    int in_stage = kind == DSI_KIND_TP ? g->s->tp : g->s->dp;
    for (int index = 0; index < groups; index++) {
        int size = dsi_group_members(&g->place, kind, stage, index);
        layout_t l = dsi_group_layout(&g->place, kind, size);
        l.devices = in_stage;
        DSI_TRY(layout_add(out, l));
    }
    return DS_OK;
}

/* Layouts of the stage's context-parallel exchanges, each weighted by the
 * cp ranks of its group. */
static ds_status_t cp_stage_layouts(gen_t *g, int stage)
{
    g->cp_layouts.count = 0;
    int replicas = g->s->dp / g->ctx.cp;
    for (int replica = 0; replica < replicas; replica++)
        for (int t = 0; t < g->s->tp; t++) {
            layout_t l = dsi_cp_layout(&g->place, g->ctx.cp_comm, stage, t, replica);
            l.devices = g->ctx.cp;
            DSI_TRY(layout_add(&g->cp_layouts, l));
        }
    return DS_OK;
}

static void set_layout(ds_event_key_t *key, const layout_t *l)
{
    dsi_key_set_layout(key, l);
}

/* Layouts of the expert groups (EP or EDP) of `stage`, each weighted by its
 * members. */
static ds_status_t expert_layouts(gen_t *g, dsi_group_kind_t kind, int stage, layout_list_t *out)
{
    out->count = 0;
    int groups = dsi_expert_groups(g->s, kind);
    for (int index = 0; index < groups; index++) {
        int size = dsi_group_members(&g->place, kind, stage, index);
        layout_t l = dsi_group_layout(&g->place, kind, size);
        l.devices = size;
        DSI_TRY(layout_add(out, l));
    }
    return DS_OK;
}

/* Devices of a stage that run an operator of this EP role. */
static int64_t role_devices(const gen_t *g, const dsi_op_t *op, int64_t stage_devices)
{
    int64_t ep = g->ctx.ep;
    switch ((dsi_ep_role_t)op->ep_role) {
    case DSI_EP_MEAN: return stage_devices / ep * (ep - 1);
    case DSI_EP_SLOWEST: return stage_devices / ep;
    case DSI_EP_ALL: break;
    }
    return stage_devices;
}

/* ---- compute and tensor-parallel events of the layers ------------------------------ */

/* Layer "types": layers with identical operators (dsi_layer_type). */
static int layer_type(const gen_t *g, int layer)
{
    return dsi_layer_type(g->model, layer);
}

static ds_status_t add_layer_passes(gen_t *g, int layer, int64_t per_device_count,
                                    const layout_list_t *tp_layouts,
                                    const layout_list_t *ep_layouts)
{
    int64_t stage_devices = (int64_t)g->s->dp * g->s->tp;
    for (int pass = DS_PASS_FORWARD; pass <= DS_PASS_BACKWARD; pass++) {
        size_t count = 0;
        DSI_TRY(dsi_model_layer_ops(g->model, layer, &g->ctx, (ds_pass_t)pass, g->ops,
                                    DSI_ARRAY_SIZE(g->ops), &count));
        for (size_t i = 0; i < count; i++) {
            const dsi_op_t *op = &g->ops[i];
            if (op->key.kind == DS_EVENT_COMPUTE) {
                DSI_TRY(add(g, &op->key, op->flops, op->bytes, op->label,
                            per_device_count * role_devices(g, op, stage_devices)));
                continue;
            }
            const layout_list_t *layouts = op->key.group == DS_GROUP_CP   ? &g->cp_layouts
                                           : op->key.group == DS_GROUP_EP ? ep_layouts
                                                                          : tp_layouts;
            for (int l = 0; l < layouts->count; l++) {
                ds_event_key_t key = op->key;
                set_layout(&key, &layouts->items[l]);
                DSI_TRY(add(g, &key, 0.0, op->bytes, op->label,
                            per_device_count * layouts->items[l].devices));
            }
        }
    }
    return DS_OK;
}

/* Layers held by `stage` grouped by type: counts[type] for the layer index
 * `representative[type]`. */
typedef struct type_count {
    int representative;
    int count;
} type_count_t;

static ds_status_t add_stage_compute(gen_t *g, int stage, const layout_list_t *tp_layouts,
                                     const layout_list_t *ep_layouts)
{
    type_count_t types[64];
    int num_types = 0;
    int L = g->info->num_layers;
    for (int chunk = 0; chunk < g->s->vpp; chunk++) {
        int first, n;
        ds_strategy_chunk_layers(g->s, L, stage, chunk, &first, &n);
        for (int layer = first; layer < first + n; layer++) {
            int type = layer_type(g, layer), t = 0;
            while (t < num_types && layer_type(g, types[t].representative) != type)
                t++;
            if (t == num_types) {
                if (num_types == (int)DSI_ARRAY_SIZE(types)) {
                    /* Many distinct layer-list entries: no grouping for the rest. */
                    DSI_TRY(add_layer_passes(g, layer, g->microbatches, tp_layouts, ep_layouts));
                    continue;
                }
                types[num_types++] = (type_count_t){layer, 0};
            }
            types[t].count++;
        }
    }
    for (int t = 0; t < num_types; t++)
        DSI_TRY(add_layer_passes(g, types[t].representative, g->microbatches * types[t].count,
                                 tp_layouts, ep_layouts));
    if (stage == 0)
        DSI_TRY(add_layer_passes(g, DSI_PART_EMBEDDING, g->microbatches, tp_layouts, ep_layouts));
    if (stage == g->s->pp - 1)
        DSI_TRY(add_layer_passes(g, DSI_PART_HEAD, g->microbatches, tp_layouts, ep_layouts));
    return DS_OK;
}

/* ---- pipeline point-to-point ------------------------------------------------------- */

/* Transfers of one pipeline rank, split by direction and batching. */
typedef struct p2p_counts {
    int64_t fwd_send[2], fwd_recv[2], bwd_send[2], bwd_recv[2]; /* [single, batched] */
} p2p_counts_t;

static p2p_counts_t p2p_counts_of(const gen_t *g, int r)
{
    p2p_counts_t c;
    memset(&c, 0, sizeof(c));
    const ds_strategy_t *s = g->s;
    int64_t m = g->microbatches, pp = s->pp;
    bool has_next = r<pp - 1, has_prev = r> 0;
    if (s->schedule == DS_SCHEDULE_GPIPE) {
        c.fwd_send[0] = has_next ? m : 0;
        c.bwd_recv[0] = has_next ? m : 0;
        c.fwd_recv[0] = has_prev ? m : 0;
        c.bwd_send[0] = has_prev ? m : 0;
        return c;
    }
    if (s->schedule == DS_SCHEDULE_1F1B) {
        int64_t w = DSI_MIN(pp - r - 1, m), steady = m - w;
        if (has_next) {
            c.fwd_send[0] = w;
            c.fwd_send[1] = steady;
            c.bwd_recv[0] = w;
            c.bwd_recv[1] = steady;
        }
        if (has_prev) {
            c.fwd_recv[0] = w + (steady > 0);
            c.fwd_recv[1] = steady > 0 ? steady - 1 : 0;
            c.bwd_send[0] = w + (steady > 0);
            c.bwd_send[1] = steady > 0 ? steady - 1 : 0;
        }
        return c;
    }
    /* Interleaved: model chunks also hand over from the last rank to the
     * first; warm-up and cool-down transfers are single, steady ones batched. */
    int64_t v = s->vpp, total = m * v;
    int64_t w = DSI_MIN((pp - r - 1) * 2 + (v - 1) * pp, total);
    int64_t sends = r == pp - 1 ? m * (v - 1) : total;
    int64_t recvs = r == 0 ? m * (v - 1) : total;
    c.fwd_send[0] = DSI_MIN(w, sends);
    c.fwd_send[1] = sends - c.fwd_send[0];
    c.bwd_recv[0] = c.fwd_send[0];
    c.bwd_recv[1] = c.fwd_send[1];
    c.fwd_recv[0] = DSI_MIN(w, recvs);
    c.fwd_recv[1] = recvs - c.fwd_recv[0];
    c.bwd_send[0] = c.fwd_recv[0];
    c.bwd_send[1] = c.fwd_recv[1];
    return c;
}

/* One boundary: pipeline rank `from` hands chunk output to rank `to`.
 * `sender_count` / `receiver_count` give the transfers per device. */
static ds_status_t add_boundary(gen_t *g, int from, int to, int64_t bytes,
                                const int64_t send_counts[2], const int64_t recv_counts[2],
                                ds_pass_t pass)
{
    const ds_strategy_t *s = g->s;
    /* Concurrency: pairs of this boundary leaving the same node in the same way. */
    for (int intra = 0; intra <= 1; intra++) {
        layout_list_t layouts = {.count = 0};
        for (int d = 0; d < s->dp; d++)
            for (int t = 0; t < s->tp; t++) {
                layout_t l = dsi_p2p_layout(&g->place, from, to, t, d);
                if ((l.nodes == 1) != intra)
                    continue;
                DSI_TRY(layout_add(&layouts, l));
            }
        for (int i = 0; i < layouts.count; i++) {
            for (int batched = 0; batched <= 1; batched++) {
                ds_event_key_t key =
                    dsi_p2p_key(pass, g->ctx.dtype, bytes, &layouts.items[i], batched);
                int64_t n = layouts.items[i].devices;
                DSI_TRY(add(g, &key, 0.0, (double)bytes,
                            pass == DS_PASS_FORWARD ? "pp.activation" : "pp.gradient",
                            n * (send_counts[batched] + recv_counts[batched])));
            }
        }
    }
    return DS_OK;
}

static ds_status_t add_pipeline_p2p(gen_t *g)
{
    const ds_strategy_t *s = g->s;
    if (s->pp == 1)
        return DS_OK;
    for (int r = 0; r < s->pp; r++) {
        /* Rank r sends forward to r+1 (and, interleaved, the last rank to the first). */
        int to = (r + 1) % s->pp;
        if (r == s->pp - 1 && s->schedule != DS_SCHEDULE_INTERLEAVED)
            continue;
        p2p_counts_t mine = p2p_counts_of(g, r), theirs = p2p_counts_of(g, to);
        int64_t bytes = dsi_p2p_boundary_bytes(g->model, s, g->ctx.dtype, to) / g->ctx.cp;
        /* Forward: r sends, `to` receives; backward: the reverse. */
        int64_t send_fwd[2] = {mine.fwd_send[0], mine.fwd_send[1]};
        int64_t recv_fwd[2] = {theirs.fwd_recv[0], theirs.fwd_recv[1]};
        int64_t send_bwd[2] = {theirs.bwd_send[0], theirs.bwd_send[1]};
        int64_t recv_bwd[2] = {mine.bwd_recv[0], mine.bwd_recv[1]};
        DSI_TRY(add_boundary(g, r, to, bytes, send_fwd, recv_fwd, DS_PASS_FORWARD));
        DSI_TRY(add_boundary(g, to, r, bytes, send_bwd, recv_bwd, DS_PASS_BACKWARD));
    }
    return DS_OK;
}

/* ---- once per iteration: gradient sync, optimizer, small collectives ---------------- */

static int64_t stage_params(const gen_t *g, int stage)
{
    return dsi_stage_params(g->model, g->s, stage);
}

static ds_event_key_t comm_key(const gen_t *g, ds_comm_op_t op, ds_group_t group, int size,
                               ds_dtype_t dtype, int64_t bytes)
{
    return dsi_comm_step_key(g->s, op, group, size, dtype, bytes);
}

/* Buckets of `params` parameters: `full` buckets of `bucket` and one of `rest`. */
static ds_status_t add_bucketed(gen_t *g, const layout_list_t *dp_layouts, ds_comm_op_t op,
                                ds_dtype_t dtype, int64_t params, int64_t bucket, int64_t repeats,
                                const char *label)
{
    int64_t full = params / bucket, rest = params % bucket;
    int64_t dsz = (int64_t)ds_dtype_size(dtype);
    for (int part = 0; part < 2; part++) {
        int64_t n = part == 0 ? full : (rest > 0);
        int64_t size = part == 0 ? bucket : rest;
        if (n == 0)
            continue;
        for (int l = 0; l < dp_layouts->count; l++) {
            ds_event_key_t key = comm_key(g, op, DS_GROUP_DP, g->s->dp, dtype, size * dsz);
            set_layout(&key, &dp_layouts->items[l]);
            DSI_TRY(add(g, &key, 0.0, (double)(size * dsz), label,
                        n * repeats * dp_layouts->items[l].devices));
        }
    }
    return DS_OK;
}

static ds_status_t add_zero3_layers(gen_t *g, int stage, const layout_list_t *dp_layouts)
{
    /* Stage 3: every layer's parameters are all-gathered before its forward
     * and again before its backward, and its gradients reduce-scattered,
     * for every micro-batch. */
    const ds_strategy_t *s = g->s;
    ds_dtype_t dtype = g->ctx.dtype;
    int L = g->info->num_layers;
    for (int layer = DSI_PART_HEAD; layer < L; layer++) {
        if (layer >= 0) {
            int first, n;
            ds_strategy_chunk_layers(s, L, stage, 0, &first, &n);
            if (layer < first || layer >= first + n)
                continue;
        } else if ((layer == DSI_PART_EMBEDDING && stage != 0) ||
                   (layer == DSI_PART_HEAD && stage != s->pp - 1)) {
            continue; /* the embedding lives on the first stage, the head on the last */
        }
        int64_t params = dsi_model_layer_params_tp(g->model, layer, s->tp);
        if (params == 0)
            continue;
        DSI_TRY(add_bucketed(g, dp_layouts, DS_COMM_ALLGATHER, dtype, params, params,
                             2 * g->microbatches, "dp.zero3.param-gather"));
        DSI_TRY(add_bucketed(g, dp_layouts, DS_COMM_REDUCE_SCATTER, s->grad_reduce_dtype, params,
                             params, g->microbatches, "dp.zero3.grad-scatter"));
    }
    return DS_OK;
}

static ds_status_t add_data_parallel(gen_t *g, int stage, const layout_list_t *dp_layouts)
{
    const ds_strategy_t *s = g->s;
    int64_t params = stage_params(g, stage);
    int64_t bucket = dsi_dp_bucket_params(s);
    int64_t stage_devices = (int64_t)s->dp * s->tp;
    if (s->dp > 1) {
        if (s->dp_algo == DS_DP_PS) {
            DSI_TRY(add_bucketed(g, dp_layouts, DS_COMM_PS_PUSH, s->grad_reduce_dtype, params,
                                 bucket, 1, "dp.ps.push"));
            DSI_TRY(add_bucketed(g, dp_layouts, DS_COMM_PS_PULL, g->ctx.dtype, params, bucket, 1,
                                 "dp.ps.pull"));
        } else if (s->zero == 0) {
            DSI_TRY(add_bucketed(g, dp_layouts, DS_COMM_ALLREDUCE, s->grad_reduce_dtype, params,
                                 bucket, 1, "dp.grad-allreduce"));
        } else if (s->zero <= 2) {
            DSI_TRY(add_bucketed(g, dp_layouts, DS_COMM_REDUCE_SCATTER, s->grad_reduce_dtype,
                                 params, bucket, s->zero == 2 ? g->microbatches : 1,
                                 "dp.grad-reduce-scatter"));
            DSI_TRY(add_bucketed(g, dp_layouts, DS_COMM_ALLGATHER, g->ctx.dtype, params, bucket, 1,
                                 "dp.param-allgather"));
        } else {
            DSI_TRY(add_zero3_layers(g, stage, dp_layouts));
        }
    }
    /* The optimizer step on this device's share of the stage's parameters. */
    int64_t shard = dsi_optimizer_shard(s, params);
    ds_event_key_t opt = dsi_optimizer_key(shard);
    /* Adam: read/write fp32 master weights, two moments, the gradient, and
     * write the low-precision copy: ~36 bytes and ~12 FLOPs per parameter. */
    DSI_TRY(
        add(g, &opt, 12.0 * (double)shard, 36.0 * (double)shard, "optimizer.adam", stage_devices));
    return DS_OK;
}

static ds_status_t add_group_collective(gen_t *g, dsi_group_kind_t kind, int groups,
                                        ds_group_t group, int size, int64_t bytes,
                                        const char *label, int64_t per_device)
{
    layout_list_t layouts = {.count = 0};
    for (int index = 0; index < groups; index++) {
        int n = dsi_group_members(&g->place, kind, 0, index);
        layout_t l = dsi_group_layout(&g->place, kind, n);
        l.devices = n;
        DSI_TRY(layout_add(&layouts, l));
    }
    for (int i = 0; i < layouts.count; i++) {
        ds_event_key_t key = comm_key(g, DS_COMM_ALLREDUCE, group, size, DS_DTYPE_FP32, bytes);
        set_layout(&key, &layouts.items[i]);
        DSI_TRY(add(g, &key, 0.0, (double)bytes, label, per_device * layouts.items[i].devices));
    }
    return DS_OK;
}

static ds_status_t add_iteration_end(gen_t *g)
{
    const ds_strategy_t *s = g->s;
    const ds_model_info_t *info = g->info;
    int mp = s->tp * s->pp;
    if (dsi_has_tied_copy(info, s)) {
        DSI_TRY(add_group_collective(g, DSI_KIND_EMBEDDING, s->tp * s->dp, DS_GROUP_EMBEDDING, 2,
                                     dsi_embedding_grad_bytes(g->model, s),
                                     "embedding.grad-allreduce", 1));
    }
    if (mp > 1 && s->grad_clip)
        DSI_TRY(add_group_collective(g, DSI_KIND_MP, s->dp, DS_GROUP_MP, mp, 4,
                                     "grad-norm.allreduce", 1));
    if (mp > 1 && g->ctx.dtype == DS_DTYPE_FP16)
        DSI_TRY(add_group_collective(g, DSI_KIND_MP, s->dp, DS_GROUP_MP, mp, 4,
                                     "overflow-check.allreduce", 1));
    return DS_OK;
}

static ds_status_t add_sp_norm_sync(gen_t *g, int stage, const layout_list_t *tp_layouts)
{
    /* With SP each TP rank sees part of the sequence: norm weight gradients
     * are all-reduced over TP once per iteration. */
    if (!g->ctx.sp)
        return DS_OK;
    int64_t params = dsi_sp_norm_params(g->model, g->s, stage);
    for (int l = 0; l < tp_layouts->count; l++) {
        ds_event_key_t key =
            comm_key(g, DS_COMM_ALLREDUCE, DS_GROUP_TP, g->s->tp, DS_DTYPE_FP32, params * 4);
        set_layout(&key, &tp_layouts->items[l]);
        DSI_TRY(add(g, &key, 0.0, (double)(params * 4), "tp.sp-norm-grad-allreduce",
                    tp_layouts->items[l].devices));
    }
    return DS_OK;
}

/* Expert weights' gradients: reduced over the expert-data-parallel group
 * once per iteration (all-reduce, or reduce-scatter and the parameters'
 * all-gather under the distributed optimizer), and stepped by the optimizer
 * on each rank's share. */
static ds_status_t add_expert_gradients(gen_t *g, int stage)
{
    const ds_strategy_t *s = g->s;
    int64_t params = dsi_stage_expert_params(g->model, s, stage);
    if (params == 0)
        return DS_OK;
    int edp = dsi_expert_data_parallel(s);
    if (edp > 1) {
        layout_list_t layouts = {.count = 0};
        DSI_TRY(expert_layouts(g, DSI_KIND_EDP, stage, &layouts));
        dsi_expert_grad_op_t ops[2];
        int n = dsi_expert_grad_ops(s, g->ctx.dtype, params, ops);
        for (int i = 0; i < n; i++)
            for (int l = 0; l < layouts.count; l++) {
                ds_event_key_t key = ops[i].key;
                set_layout(&key, &layouts.items[l]);
                DSI_TRY(
                    add(g, &key, 0.0, (double)key.dims[0], ops[i].label, layouts.items[l].devices));
            }
    }
    int64_t shard = dsi_expert_optimizer_shard(s, params);
    ds_event_key_t opt = dsi_optimizer_key(shard);
    return add(g, &opt, 12.0 * (double)shard, 36.0 * (double)shard, "optimizer.adam.experts",
               (int64_t)s->dp * s->tp);
}

ds_status_t ds_events_generate(const ds_model_t *model, const ds_strategy_t *strategy,
                               const ds_cluster_t *cluster, ds_event_set_t **set_p)
{
    ds_status_t status = DS_OK;
    gen_t g;
    memset(&g, 0, sizeof(g));
    g.model = model;
    g.info = &model->info;
    g.folded = dsi_strategy_fold_cp(strategy);
    g.s = &g.folded;
    g.cluster = cluster;
    g.devices = (int64_t)g.s->dp * g.s->tp * g.s->pp;
    g.microbatches = ds_strategy_num_microbatches(strategy);
    if (strategy->dp < 1 || g.microbatches < 1 || g.devices != ds_cluster_num_gpus(cluster))
        return DSI_ERROR(DS_ERR_INVALID_ARG,
                         "strategy dp=%d tp=%d pp=%d gbs=%lld is not resolved for %lld devices "
                         "(call ds_strategy_resolve first)",
                         strategy->dp, strategy->tp, strategy->pp, (long long)strategy->gbs,
                         (long long)ds_cluster_num_gpus(cluster));
    dsi_shape_ctx_init(&g.ctx, model, strategy);

    DSI_TRY_GOTO(dsi_placement_init(&g.place, g.s, cluster), status, out);
    g.place.cp = g.ctx.cp;
    DSI_TRY_GOTO(ds_event_set_create(&g.set), status, out);

    for (int stage = 0; stage < strategy->pp; stage++) {
        layout_list_t tp_layouts = {.count = 0}, dp_layouts = {.count = 0};
        layout_list_t ep_layouts = {.count = 0};
        if (strategy->tp > 1)
            DSI_TRY_GOTO(stage_layouts(&g, DSI_KIND_TP, stage, &tp_layouts), status, out);
        if (g.ctx.cp > 1)
            DSI_TRY_GOTO(cp_stage_layouts(&g, stage), status, out);
        if (g.s->dp > 1)
            DSI_TRY_GOTO(stage_layouts(&g, DSI_KIND_DP, stage, &dp_layouts), status, out);
        if (g.ctx.ep > 1)
            DSI_TRY_GOTO(expert_layouts(&g, DSI_KIND_EP, stage, &ep_layouts), status, out);
        DSI_TRY_GOTO(add_stage_compute(&g, stage, &tp_layouts, &ep_layouts), status, out);
        DSI_TRY_GOTO(add_data_parallel(&g, stage, &dp_layouts), status, out);
        DSI_TRY_GOTO(add_expert_gradients(&g, stage), status, out);
        DSI_TRY_GOTO(add_sp_norm_sync(&g, stage, &tp_layouts), status, out);
    }
    DSI_TRY_GOTO(add_pipeline_p2p(&g), status, out);
    DSI_TRY_GOTO(add_iteration_end(&g), status, out);
    *set_p = g.set;
    g.set = NULL;
out:
    ds_event_set_destroy(g.set);
    dsi_placement_free(&g.place);
    return status;
}
