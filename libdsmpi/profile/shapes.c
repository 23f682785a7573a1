/* Which allocation shape to ask for: what the profiler's groups on an
 * allocation measure of a target's communication, and the band of what they
 * leave to extrapolation.  See include/dsmpi/profile.h. */
#include "dsi_profile.h"

#include <dsmpi/comm.h>
#include <dsmpi/profile.h>

#include <string.h>

/* ceil(log2 n): the levels of a tree over n nodes. */
static int tree_depth(int64_t n)
{
    int depth = 0;
    while (depth < 62 && (INT64_C(1) << depth) < n)
        depth++;
    return depth;
}

static void add_size(int *sizes, int *count, int size)
{
    int at = 0;
    while (at < *count && sizes[at] < size)
        at++;
    if ((at < *count && sizes[at] == size) || *count == DS_PROFILE_GROUP_SIZES)
        return;
    memmove(&sizes[at + 1], &sizes[at], (size_t)(*count - at) * sizeof(*sizes));
    sizes[at] = size;
    (*count)++;
}

static ds_status_t check_target(const ds_cluster_t *target)
{
    if (target == NULL || target->nodes < 1 || target->gpus_per_node < 1)
        return DSI_ERROR(DS_ERR_INVALID_ARG,
                         "allocation shapes for a target of %lld nodes x %d GPUs "
                         "(accepted: >= 1 node of >= 1 GPU)",
                         target ? (long long)target->nodes : 0LL,
                         target ? target->gpus_per_node : 0);
    return DS_OK;
}

ds_status_t ds_profile_shape_of(int num_ranks, const int *node_of_rank, const ds_cluster_t *target,
                                double slow, double fast, ds_profile_shape_t *shape_p)
{
    ds_status_t status = DS_OK;
    dsi_profile_plan_t plan;
    int *counts = NULL;
    memset(&plan, 0, sizeof(plan));
    if (num_ranks < 1 || node_of_rank == NULL)
        return DSI_ERROR(DS_ERR_INVALID_ARG, "allocation of %d ranks (accepted: >= 1)", num_ranks);
    DSI_TRY(check_target(target));
    for (int r = 0; r < num_ranks; r++)
        if (node_of_rank[r] < 0 || node_of_rank[r] >= num_ranks)
            return DSI_ERROR(DS_ERR_INVALID_ARG, "rank %d on node %d (accepted: 0..%d)", r,
                             node_of_rank[r], num_ranks - 1);
    ds_profile_shape_t shape;
    memset(&shape, 0, sizeof(shape));
    shape.ranks = num_ranks;
    DSI_TRY_GOTO(dsi_calloc((size_t)num_ranks, sizeof(*counts), &counts), status, out);
    for (int r = 0; r < num_ranks; r++)
        if (counts[node_of_rank[r]]++ == 0)
            shape.nodes++;
    for (int n = 0; n < num_ranks; n++)
        shape.ranks_per_node = DSI_MAX(shape.ranks_per_node, counts[n]);
    DSI_TRY_GOTO(dsi_profile_plan_shapes(&plan, num_ranks, node_of_rank), status, out);
    for (int i = 0; i < plan.num_shapes; i++) {
        const dsi_group_shape_t *s = &plan.shapes[i];
        if (s->num_groups != 1)
            continue; /* the same layouts, two at once */
        if (s->nodes == 1)
            add_size(shape.intra_sizes, &shape.num_intra_sizes, s->size);
        else if (s->ranks_per_node == 1)
            add_size(shape.cross_nodes, &shape.num_cross_nodes, s->nodes);
        if (s->nodes > 1)
            shape.cross_ranks_per_node = DSI_MAX(shape.cross_ranks_per_node, s->ranks_per_node);
    }
    shape.target_nodes = target->nodes;
    shape.target_gpus_per_node = target->gpus_per_node;
    shape.target_tree_depth = tree_depth(target->nodes);
    shape.lacks_intra_pair = target->gpus_per_node > 1 && shape.num_intra_sizes == 0;
    shape.lacks_network = target->nodes > 1 && shape.num_cross_nodes == 0;
    if (shape.num_cross_nodes > 0) {
        int most = shape.cross_nodes[shape.num_cross_nodes - 1];
        shape.tree_depth_min = tree_depth(shape.cross_nodes[0]);
        shape.tree_depth_max = tree_depth(most);
        shape.factor = (double)target->nodes / most;
        ds_comm_band_multipliers(shape.factor, slow, fast, &shape.band_low, &shape.band_high);
    }
    *shape_p = shape;
out:
    for (int i = 0; i < plan.num_shapes; i++)
        dsi_free(plan.shapes[i].ranks);
    dsi_free(plan.shapes);
    dsi_free(counts);
    return status;
}

/* Orders shapes by what they measure for the target (larger: better). */
static int compare_measured(const ds_profile_shape_t *a, const ds_profile_shape_t *b)
{
    int complete_a = !a->lacks_intra_pair && !a->lacks_network;
    int complete_b = !b->lacks_intra_pair && !b->lacks_network;
    if (complete_a != complete_b)
        return complete_a - complete_b;
    int64_t nodes_a = 0, nodes_b = 0;
    if (a->target_nodes > 1 && a->num_cross_nodes > 0)
        nodes_a = DSI_MIN(a->cross_nodes[a->num_cross_nodes - 1], a->target_nodes);
    if (b->target_nodes > 1 && b->num_cross_nodes > 0)
        nodes_b = DSI_MIN(b->cross_nodes[b->num_cross_nodes - 1], b->target_nodes);
    if (nodes_a != nodes_b)
        return nodes_a < nodes_b ? -1 : 1;
    int intra_a = a->num_intra_sizes ? a->intra_sizes[a->num_intra_sizes - 1] : 1;
    int intra_b = b->num_intra_sizes ? b->intra_sizes[b->num_intra_sizes - 1] : 1;
    intra_a = DSI_MIN(intra_a, a->target_gpus_per_node);
    intra_b = DSI_MIN(intra_b, b->target_gpus_per_node);
    return (intra_a > intra_b) - (intra_a < intra_b);
}

ds_status_t ds_profile_shapes_compare(int num_ranks, const ds_cluster_t *target, double slow,
                                      double fast, ds_profile_shape_t **shapes_p, int *count_p,
                                      int *best_p)
{
    ds_status_t status = DS_OK;
    ds_profile_shape_t *shapes = NULL;
    int *node_of_rank = NULL, count = 0, best = 0;
    if (num_ranks < 1)
        return DSI_ERROR(DS_ERR_INVALID_ARG, "allocation of %d ranks (accepted: >= 1)", num_ranks);
    DSI_TRY(check_target(target));
    int divisors = 0;
    for (int per_node = 1; per_node <= num_ranks; per_node++)
        divisors += num_ranks % per_node == 0;
    DSI_TRY_GOTO(dsi_calloc((size_t)divisors, sizeof(*shapes), &shapes), status, err);
    DSI_TRY_GOTO(dsi_calloc((size_t)num_ranks, sizeof(*node_of_rank), &node_of_rank), status, err);
    /* Ranks per node ascending: the most nodes first. */
    for (int per_node = 1; per_node <= DSI_MIN(num_ranks, target->gpus_per_node); per_node++) {
        if (num_ranks % per_node != 0)
            continue;
        for (int r = 0; r < num_ranks; r++)
            node_of_rank[r] = r / per_node;
        DSI_TRY_GOTO(
            ds_profile_shape_of(num_ranks, node_of_rank, target, slow, fast, &shapes[count]),
            status, err);
        if (count > 0 && compare_measured(&shapes[count], &shapes[best]) > 0)
            best = count;
        count++;
    }
    dsi_free(node_of_rank);
    *shapes_p = shapes;
    *count_p = count;
    *best_p = best;
    return DS_OK;
err:
    dsi_free(node_of_rank);
    dsi_free(shapes);
    return status;
}

void ds_profile_shapes_free(ds_profile_shape_t *shapes)
{
    dsi_free(shapes);
}
