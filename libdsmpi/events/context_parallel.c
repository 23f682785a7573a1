/*
 * Context parallelism in the event and simulation stages.
 *
 * The cp ranks of one data-parallel replica hold the same weights and run
 * the same operators on different tokens, so after the layer's attention
 * exchange they are data-parallel replicas in every way that matters to
 * placement and gradients: Megatron-Core reduces gradients (and shards the
 * distributed optimizer) over dp x cp.  Events and the simulator therefore
 * work on the strategy folded to dp x cp replicas of gbs x cp sequences of
 * seq / cp tokens (the same micro-batches per iteration); the shape context
 * keeps cp, which splits the sequence and brings the K/V exchange into each
 * layer's attention.
 */
#include "dsi_events.h"

ds_strategy_t dsi_strategy_fold_cp(const ds_strategy_t *s)
{
    ds_strategy_t folded = *s;
    if (s->cp > 1) {
        folded.dp = s->dp * s->cp;
        folded.gbs = s->gbs * s->cp;
        folded.cp = 1;
    }
    return folded;
}

/* Ring neighbours (p2p): the pair whose hop crosses the most, on the
 * folded strategy p->s: positions replica * cp + c, c fastest. */
static int64_t ring_member(const dsi_placement_t *p, int stage, int t, int replica, int c)
{
    return ds_strategy_rank_of(p->s, (ds_coords_t){t, replica * p->cp + c % p->cp, stage});
}

/* Ranks of `node` whose ring successor is on the same node (intra) or not. */
static int32_t ring_hops_on_node(const dsi_placement_t *p, int64_t node, bool intra)
{
    int32_t count = 0;
    int64_t first = node * p->gpus_per_node;
    for (int64_t r = first; r < first + p->gpus_per_node && r < p->devices; r++) {
        ds_coords_t c = ds_strategy_coords_of(p->s, r);
        int replica = c.dp / p->cp, rank = c.dp % p->cp;
        int64_t next = ring_member(p, c.pp, c.tp, replica, rank + 1);
        count += (dsi_placement_node_of(p, next) == node) == intra;
    }
    return count;
}

static dsi_layout_t ring_layout(dsi_placement_t *p, int stage, int t, int replica)
{
    /* Every step waits for its slowest hop: one that leaves the node when
     * any does. */
    int64_t crossing = -1;
    for (int c = 0; c < p->cp && crossing < 0; c++) {
        int64_t from = ring_member(p, stage, t, replica, c);
        int64_t to = ring_member(p, stage, t, replica, c + 1);
        if (dsi_placement_node_of(p, from) != dsi_placement_node_of(p, to))
            crossing = from;
    }
    bool intra = crossing < 0;
    int64_t node =
        dsi_placement_node_of(p, intra ? ring_member(p, stage, t, replica, 0) : crossing);
    dsi_layout_t l = {intra ? 2 : 1, intra ? 1 : 2, ring_hops_on_node(p, node, intra), 1, 0, 0};
    return l;
}

/* Whether exchanges of layout a are slower than of b: more nodes, then
 * fewer members on one node, a wider stride, more groups crossing at once. */
static bool slower(const dsi_layout_t *a, const dsi_layout_t *b)
{
    if (a->nodes != b->nodes)
        return a->nodes > b->nodes;
    if (a->ranks_per_node != b->ranks_per_node)
        return a->ranks_per_node < b->ranks_per_node;
    if (a->node_stride != b->node_stride)
        return a->node_stride > b->node_stride;
    return a->concurrency > b->concurrency;
}

dsi_layout_t dsi_cp_stage_layout(dsi_placement_t *p, ds_cp_comm_t comm, int stage)
{
    dsi_layout_t worst = dsi_cp_layout(p, comm, stage, 0, 0);
    int replicas = p->s->dp / p->cp;
    for (int replica = 0; replica < replicas; replica++)
        for (int t = 0; t < p->s->tp; t++) {
            dsi_layout_t l = dsi_cp_layout(p, comm, stage, t, replica);
            if (slower(&l, &worst))
                worst = l;
        }
    return worst;
}

dsi_layout_t dsi_cp_layout(dsi_placement_t *p, ds_cp_comm_t comm, int stage, int t, int replica)
{
    if (comm == DS_CP_COMM_P2P)
        return ring_layout(p, stage, t, replica);
    int n = dsi_group_members(p, DSI_KIND_CP, stage, t + p->s->tp * replica);
    dsi_layout_t l = dsi_group_layout(p, DSI_KIND_CP, n);
    l.devices = 1;
    return l;
}
