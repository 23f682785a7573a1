/*
 * Where the members of a process group sit, and the communication keys that
 * follow from it.  Event generation and the simulator both call these, so a
 * key the simulator looks up is, field for field, a key the event set holds.
 */
#include "dsi_events.h"

#include "model/dsi_model.h"

#include <stdlib.h>
#include <string.h>

ds_status_t dsi_placement_init(dsi_placement_t *p, const ds_strategy_t *strategy,
                               const ds_cluster_t *cluster)
{
    memset(p, 0, sizeof(*p));
    p->s = strategy;
    p->gpus_per_node = cluster->gpus_per_node > 0 ? cluster->gpus_per_node : 1;
    p->nodes_per_leaf = cluster->num_levels > 2 ? DSI_MAX(cluster->levels[1].span, 0) : 0;
    p->devices = (int64_t)strategy->dp * strategy->tp * strategy->pp;
    p->num_nodes = (p->devices + p->gpus_per_node - 1) / p->gpus_per_node;
    int64_t scratch =
        DSI_MAX(DSI_MAX((int64_t)strategy->tp * strategy->pp,
                        (int64_t)strategy->dp * (strategy->etp > 0 ? strategy->tp : 1)),
                2);
    ds_status_t status = DS_OK;
    DSI_TRY_GOTO(dsi_calloc((size_t)scratch, sizeof(*p->members), &p->members), status, err);
    DSI_TRY_GOTO(dsi_calloc((size_t)scratch, sizeof(*p->sorted), &p->sorted), status, err);
    DSI_TRY_GOTO(dsi_calloc((size_t)p->gpus_per_node, sizeof(*p->ids), &p->ids), status, err);
    DSI_TRY_GOTO(dsi_calloc((size_t)p->num_nodes * 2, sizeof(*p->pairs_on_node), &p->pairs_on_node),
                 status, err);
    p->pairs_from = p->pairs_to = -1;
    p->cp = 1;
    return DS_OK;
err:
    dsi_placement_free(p);
    return status;
}

void dsi_placement_free(dsi_placement_t *p)
{
    dsi_free(p->members);
    dsi_free(p->sorted);
    dsi_free(p->ids);
    dsi_free(p->pairs_on_node);
    memset(p, 0, sizeof(*p));
}

int64_t dsi_placement_node_of(const dsi_placement_t *p, int64_t rank)
{
    return rank / p->gpus_per_node;
}

static int expert_etp(const ds_strategy_t *s)
{
    return s->etp > 0 ? s->etp : s->tp;
}

static int expert_ep(const ds_strategy_t *s)
{
    return s->ep > 0 ? s->ep : 1;
}

int dsi_expert_groups(const ds_strategy_t *s, dsi_group_kind_t kind)
{
    int64_t local = (int64_t)s->tp * s->dp;
    return (int)(kind == DSI_KIND_EP ? local / expert_ep(s)
                                     : (int64_t)expert_etp(s) * expert_ep(s));
}

/* The rank of stage-local expert index `local` (see dsi_expert_groups). */
static int64_t expert_rank(const ds_strategy_t *s, int stage, int64_t local)
{
    return ds_strategy_rank_of(s, (ds_coords_t){(int)(local % s->tp), (int)(local / s->tp), stage});
}

/* The members of EP group `index` (etp coordinate, edp coordinate) or EDP
 * group `index` (etp coordinate, ep coordinate). */
static int expert_members(dsi_placement_t *p, dsi_group_kind_t kind, int stage, int index)
{
    const ds_strategy_t *s = p->s;
    int64_t etp = expert_etp(s), ep = expert_ep(s);
    int64_t edp = (int64_t)s->tp * s->dp / (etp * ep);
    int64_t t = index % etp, other = index / etp;
    int n = 0;
    if (kind == DSI_KIND_EP)
        for (int64_t e = 0; e < ep; e++)
            p->members[n++] = expert_rank(s, stage, t + etp * (e + ep * other));
    else
        for (int64_t d = 0; d < edp; d++)
            p->members[n++] = expert_rank(s, stage, t + etp * (other + ep * d));
    return n;
}

int dsi_group_members(dsi_placement_t *p, dsi_group_kind_t kind, int stage, int index)
{
    const ds_strategy_t *s = p->s;
    int n = 0;
    switch (kind) {
    case DSI_KIND_EP:
    case DSI_KIND_EDP: return expert_members(p, kind, stage, index);
    case DSI_KIND_TP:
        for (int t = 0; t < s->tp; t++)
            p->members[n++] = ds_strategy_rank_of(s, (ds_coords_t){t, index, stage});
        break;
    case DSI_KIND_DP:
        for (int d = 0; d < s->dp; d++)
            p->members[n++] = ds_strategy_rank_of(s, (ds_coords_t){index, d, stage});
        break;
    case DSI_KIND_MP:
        for (int q = 0; q < s->pp; q++)
            for (int t = 0; t < s->tp; t++)
                p->members[n++] = ds_strategy_rank_of(s, (ds_coords_t){t, index, q});
        break;
    case DSI_KIND_EMBEDDING: {
        int t = index % s->tp, d = index / s->tp;
        p->members[n++] = ds_strategy_rank_of(s, (ds_coords_t){t, d, 0});
        p->members[n++] = ds_strategy_rank_of(s, (ds_coords_t){t, d, s->pp - 1});
        break;
    }
    case DSI_KIND_CP: {
        int t = index % s->tp, replica = index / s->tp;
        for (int c = 0; c < p->cp; c++)
            p->members[n++] = ds_strategy_rank_of(s, (ds_coords_t){t, replica * p->cp + c, stage});
        break;
    }
    }
    return n;
}

static int64_t group_id(const dsi_placement_t *p, dsi_group_kind_t kind, ds_coords_t c)
{
    const ds_strategy_t *s = p->s;
    switch (kind) {
    case DSI_KIND_TP: return c.dp + (int64_t)s->dp * c.pp;
    case DSI_KIND_DP: return c.tp + (int64_t)s->tp * c.pp;
    case DSI_KIND_MP: return c.dp;
    case DSI_KIND_EMBEDDING:
        return (c.pp == 0 || c.pp == s->pp - 1) ? c.tp + (int64_t)s->tp * c.dp : -1;
    case DSI_KIND_CP: return c.tp + (int64_t)s->tp * (c.dp / p->cp + (int64_t)s->dp * c.pp);
    case DSI_KIND_EP:
    case DSI_KIND_EDP: {
        int64_t etp = expert_etp(s), ep = expert_ep(s);
        int64_t local = c.tp + (int64_t)s->tp * c.dp;
        int64_t t = local % etp, e = local / etp % ep, d = local / (etp * ep);
        int64_t index = kind == DSI_KIND_EP ? t + etp * d : t + etp * e;
        return index + (int64_t)dsi_expert_groups(s, kind) * c.pp;
    }
    }
    return -1;
}

static int compare_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Distinct groups of `kind` with a member on `node`. */
static int32_t concurrency_on_node(dsi_placement_t *p, dsi_group_kind_t kind, int64_t node)
{
    int count = 0;
    int64_t first = node * p->gpus_per_node;
    for (int64_t r = first; r < first + p->gpus_per_node && r < p->devices; r++) {
        int64_t id = group_id(p, kind, ds_strategy_coords_of(p->s, r));
        if (id >= 0)
            p->ids[count++] = id;
    }
    qsort(p->ids, (size_t)count, sizeof(*p->ids), compare_i64);
    int distinct = 0;
    for (int i = 0; i < count; i++)
        distinct += i == 0 || p->ids[i] != p->ids[i - 1];
    return distinct;
}

/* Nodes of `node`'s leaf with a group of `kind`. */
static int32_t leaf_nodes_of_kind(const dsi_placement_t *p, dsi_group_kind_t kind, int64_t node)
{
    int64_t first = node / p->nodes_per_leaf * p->nodes_per_leaf;
    int32_t count = 0;
    for (int64_t n = first; n < first + p->nodes_per_leaf && n < p->num_nodes; n++)
        for (int64_t r = n * p->gpus_per_node; r < (n + 1) * p->gpus_per_node && r < p->devices;
             r++)
            if (group_id(p, kind, ds_strategy_coords_of(p->s, r)) >= 0) {
                count++;
                break;
            }
    return count;
}

dsi_layout_t dsi_group_layout(dsi_placement_t *p, dsi_group_kind_t kind, int size)
{
    dsi_layout_t l = {0, 0, 0, 0, 0, 0};
    if (size <= 0)
        return l;
    /* Nodes spanned and the most members on one node: sort the members'
     * nodes and count runs. */
    for (int i = 0; i < size; i++)
        p->sorted[i] = dsi_placement_node_of(p, p->members[i]);
    qsort(p->sorted, (size_t)size, sizeof(*p->sorted), compare_i64);
    int run = 0;
    for (int i = 0; i < size; i++) {
        if (i == 0 || p->sorted[i] != p->sorted[i - 1]) {
            int64_t gap = i == 0 ? 0 : p->sorted[i] - p->sorted[i - 1];
            if (gap > 0 && (l.node_stride == 0 || gap < l.node_stride))
                l.node_stride = (int32_t)DSI_MIN(gap, INT32_MAX);
            l.nodes++;
            run = 0;
        }
        run++;
        if (run > l.ranks_per_node)
            l.ranks_per_node = run;
    }
    l.concurrency = concurrency_on_node(p, kind, dsi_placement_node_of(p, p->members[0]));
    if (l.node_stride > 1 && p->nodes_per_leaf > 0)
        l.leaf_nodes = leaf_nodes_of_kind(p, kind, dsi_placement_node_of(p, p->members[0]));
    return l;
}

/* Pairs of the boundary from -> to (over every tp, dp) leaving each node,
 * split by whether the pair stays inside the node. */
static void boundary_pairs(dsi_placement_t *p, int from, int to)
{
    if (p->pairs_from == from && p->pairs_to == to)
        return;
    const ds_strategy_t *s = p->s;
    memset(p->pairs_on_node, 0, (size_t)p->num_nodes * 2 * sizeof(*p->pairs_on_node));
    for (int d = 0; d < s->dp; d++)
        for (int t = 0; t < s->tp; t++) {
            int64_t a = ds_strategy_rank_of(s, (ds_coords_t){t, d, from});
            int64_t b = ds_strategy_rank_of(s, (ds_coords_t){t, d, to});
            int64_t node = dsi_placement_node_of(p, a);
            int intra = node == dsi_placement_node_of(p, b);
            p->pairs_on_node[node * 2 + intra]++;
        }
    p->pairs_from = from;
    p->pairs_to = to;
}

dsi_layout_t dsi_p2p_layout(dsi_placement_t *p, int from, int to, int t, int d)
{
    boundary_pairs(p, from, to);
    int64_t a = ds_strategy_rank_of(p->s, (ds_coords_t){t, d, from});
    int64_t b = ds_strategy_rank_of(p->s, (ds_coords_t){t, d, to});
    int64_t node = dsi_placement_node_of(p, a);
    int64_t other = dsi_placement_node_of(p, b);
    int intra = node == other;
    dsi_layout_t l = {intra ? 2 : 1, intra ? 1 : 2, p->pairs_on_node[node * 2 + intra], 1, 0, 0};
    return l;
}

uint8_t dsi_layout_key_stride(const dsi_layout_t *l)
{
    return (uint8_t)(l->node_stride > 1 ? DSI_MIN(l->node_stride, 255) : 0);
}

void dsi_key_set_layout(ds_event_key_t *key, const dsi_layout_t *l)
{
    key->ranks_per_node = l->ranks_per_node;
    key->nodes = l->nodes;
    key->concurrency = l->concurrency;
    key->node_stride = dsi_layout_key_stride(l);
    key->dims[2] = key->node_stride > 0 ? l->leaf_nodes : 0;
}

bool dsi_key_has_layout(const ds_event_key_t *key, const dsi_layout_t *l)
{
    return key->ranks_per_node == l->ranks_per_node && key->nodes == l->nodes &&
           key->concurrency == l->concurrency && key->node_stride == dsi_layout_key_stride(l) &&
           key->dims[2] == (key->node_stride > 0 ? l->leaf_nodes : 0);
}

bool dsi_layout_equal(const dsi_layout_t *a, const dsi_layout_t *b)
{
    return a->ranks_per_node == b->ranks_per_node && a->nodes == b->nodes &&
           a->concurrency == b->concurrency &&
           dsi_layout_key_stride(a) == dsi_layout_key_stride(b) && a->leaf_nodes == b->leaf_nodes;
}

/* ---- keys and sizes both event generation and the simulator use ---------------------- */

ds_event_key_t dsi_comm_step_key(const ds_strategy_t *s, ds_comm_op_t op, ds_group_t group,
                                 int size, ds_dtype_t dtype, int64_t bytes)
{
    ds_event_key_t key;
    memset(&key, 0, sizeof(key));
    key.kind = DS_EVENT_COMM;
    key.op = (uint8_t)op;
    key.pass = DS_PASS_STEP;
    key.dtype = (uint8_t)dtype;
    key.group = (uint8_t)group;
    key.group_size = size;
    key.dims[0] = bytes;
    if (group == DS_GROUP_DP && s->dp_algo != DS_DP_AUTO && s->dp_algo != DS_DP_PS)
        key.variant = (uint8_t)s->dp_algo;
    if (group == DS_GROUP_DP && (op == DS_COMM_PS_PUSH || op == DS_COMM_PS_PULL))
        key.dims[1] = s->ps_servers;
    return key;
}

ds_event_key_t dsi_p2p_key(ds_pass_t pass, ds_dtype_t dtype, int64_t bytes, const dsi_layout_t *l,
                           int batched)
{
    ds_event_key_t key;
    memset(&key, 0, sizeof(key));
    key.kind = DS_EVENT_COMM;
    key.op = DS_COMM_SENDRECV;
    key.pass = (uint8_t)pass;
    key.dtype = (uint8_t)dtype;
    key.group = DS_GROUP_PP;
    key.group_size = 2;
    key.dims[0] = bytes;
    key.flags = batched ? DS_COMM_FLAG_BATCHED : 0;
    dsi_key_set_layout(&key, l);
    return key;
}

ds_event_key_t dsi_optimizer_key(int64_t shard)
{
    ds_event_key_t opt;
    memset(&opt, 0, sizeof(opt));
    opt.kind = DS_EVENT_COMPUTE;
    opt.op = DS_OP_OPTIMIZER;
    opt.pass = DS_PASS_STEP;
    opt.dtype = DS_DTYPE_FP32;
    opt.dims[0] = shard;
    return opt;
}

int64_t dsi_optimizer_shard(const ds_strategy_t *s, int64_t stage_params)
{
    if (s->zero >= 1)
        return (stage_params + s->dp - 1) / s->dp;
    if (s->dp_algo == DS_DP_PS)
        return (stage_params + s->ps_servers - 1) / s->ps_servers;
    return stage_params;
}

int64_t dsi_dp_bucket_params(const ds_strategy_t *s)
{
    return s->bucket_params > 0 ? s->bucket_params : DSI_MAX(40000000LL, 1000000LL * s->dp);
}

int64_t dsi_vocab_share(const ds_model_info_t *info, int tp)
{
    int64_t multiple = 128LL * tp;
    return (info->vocab_size + multiple - 1) / multiple * multiple / tp;
}

int dsi_has_tied_copy(const ds_model_info_t *info, const ds_strategy_t *s)
{
    return info->tied_embeddings && s->pp > 1 && info->arch != DS_ARCH_LAYER_LIST;
}

int64_t dsi_chunk_params(const ds_model_t *model, const ds_strategy_t *s, int stage, int chunk)
{
    const ds_model_info_t *info = &model->info;
    int first, n;
    ds_strategy_chunk_layers(s, info->num_layers, stage, chunk, &first, &n);
    int64_t total = 0;
    for (int layer = first; layer < first + n; layer++)
        total += dsi_model_layer_params_tp(model, layer, s->tp);
    if (stage == 0 && chunk == 0)
        total += dsi_model_layer_params_tp(model, DSI_PART_EMBEDDING, s->tp);
    if (stage == s->pp - 1 && chunk == s->vpp - 1) {
        total += dsi_model_layer_params_tp(model, DSI_PART_HEAD, s->tp);
        if (dsi_has_tied_copy(info, s))
            total += dsi_vocab_share(info, s->tp) * info->hidden_size; /* the last stage's copy */
    }
    return total;
}

int64_t dsi_stage_params(const ds_model_t *model, const ds_strategy_t *s, int stage)
{
    int64_t total = 0;
    for (int chunk = 0; chunk < s->vpp; chunk++)
        total += dsi_chunk_params(model, s, stage, chunk);
    return total;
}

int64_t dsi_boundary_bytes(const ds_model_t *model, const ds_strategy_t *s, ds_dtype_t dtype,
                           int layer)
{
    const ds_model_info_t *info = &model->info;
    int64_t dsz = (int64_t)ds_dtype_size(dtype);
    int64_t t = (s->sp && s->tp > 1) ? s->tp : 1;
    if (info->arch == DS_ARCH_LAYER_LIST) {
        /* The output of the previous layer's last operator, per sample. */
        const dsi_generic_layer_t *prev = &model->generic[model->layer_of[layer - 1]];
        const dsi_generic_op_t *op = &prev->ops[prev->num_ops - 1];
        return (int64_t)s->mbs * op->rows * op->cols * dsz;
    }
    int64_t tokens = info->seq_len;
    if (info->arch == DS_ARCH_ENCODER_DECODER && layer >= info->num_encoder_layers)
        tokens = info->decoder_seq_len + info->seq_len; /* the encoder output travels along */
    return (int64_t)s->mbs * tokens / t * info->hidden_size * dsz;
}

int64_t dsi_p2p_boundary_bytes(const ds_model_t *model, const ds_strategy_t *s, ds_dtype_t dtype,
                               int to)
{
    /* The chunk that starts on `to`: chunk 0, or chunk 1 of rank 0 for the
     * interleaved wrap from the last rank. */
    int first, n;
    ds_strategy_chunk_layers(s, model->info.num_layers, to, to == 0 ? 1 : 0, &first, &n);
    return dsi_boundary_bytes(model, s, dtype, first);
}

int dsi_layer_type(const ds_model_t *model, int layer)
{
    if (layer < 0)
        return layer; /* embedding, head */
    if (model->info.arch == DS_ARCH_LAYER_LIST)
        return model->layer_of[layer];
    return model->info.arch == DS_ARCH_ENCODER_DECODER && layer >= model->info.num_encoder_layers;
}

int64_t dsi_sp_norm_params(const ds_model_t *model, const ds_strategy_t *s, int stage)
{
    const ds_model_info_t *info = &model->info;
    int64_t norm = info->norm == DS_NORM_LAYERNORM ? 2LL * info->hidden_size : info->hidden_size;
    int64_t layers = ds_strategy_stage_layers(s, info->num_layers, stage);
    return layers * 2 * norm + (stage == s->pp - 1 ? norm : 0);
}

int64_t dsi_embedding_grad_bytes(const ds_model_t *model, const ds_strategy_t *s)
{
    return dsi_vocab_share(&model->info, s->tp) * model->info.hidden_size * 4;
}

void dsi_shape_ctx_init(dsi_shape_ctx_t *ctx, const ds_model_t *model, const ds_strategy_t *s)
{
    memset(ctx, 0, sizeof(*ctx));
    ctx->mbs = s->mbs;
    ctx->tp = s->tp;
    ctx->sp = s->sp && s->tp > 1;
    ctx->recompute = s->recompute;
    ctx->dtype = model->info.dtype;
    ctx->flash = s->flash_attention;
    ctx->fp8 = s->fp8;
    ctx->cp = s->cp > 1 ? s->cp : 1;
    ctx->cp_comm = s->cp_comm;
    ctx->ep = s->ep > 0 ? s->ep : 1;
    ctx->etp = s->etp > 0 ? s->etp : s->tp;
    ctx->moe_dispatcher = s->moe_dispatcher;
    ctx->moe_topk = s->moe_topk;
    ctx->router_skew = s->router_skew;
    ctx->moe_capacity = s->moe_capacity;
}
