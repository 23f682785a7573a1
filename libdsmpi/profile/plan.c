/* The profiling plan: layer-pass units assigned to ranks, and the
 * communication tasks the allocation can run.  See dsi_profile.h. */
#include "dsi_profile.h"

#include "events/dsi_events.h"
#include "model/dsi_model.h"

#include <stdlib.h>
#include <string.h>

ds_status_t dsi_profile_plan_create(dsi_profile_plan_t **plan_p)
{
    dsi_profile_plan_t *plan;
    DSI_TRY(dsi_calloc(1, sizeof(*plan), &plan));
    ds_status_t status = ds_event_set_create(&plan->events);
    if (status != DS_OK) {
        dsi_free(plan);
        return status;
    }
    *plan_p = plan;
    return DS_OK;
}

void dsi_profile_plan_destroy(dsi_profile_plan_t *plan)
{
    if (plan == NULL)
        return;
    ds_event_set_destroy(plan->events);
    dsi_free(plan->keys);
    dsi_free(plan->key_bytes);
    dsi_free(plan->units);
    for (int i = 0; i < plan->num_shapes; i++)
        dsi_free(plan->shapes[i].ranks);
    dsi_free(plan->shapes);
    dsi_free(plan->tasks);
    dsi_free(plan->rank_load_s);
    dsi_free(plan);
}

/* ---- units -------------------------------------------------------------------- */

static uint64_t sequence_hash(const ds_event_key_t *keys, size_t n)
{
    uint64_t h = dsi_hash64(&n, sizeof(n), 7);
    for (size_t i = 0; i < n; i++)
        h = dsi_hash_mix64(h ^ ds_event_key_hash(&keys[i]));
    return h;
}

static bool has_unit(const dsi_profile_plan_t *plan, uint64_t hash, const ds_event_key_t *keys,
                     size_t n)
{
    for (size_t u = 0; u < plan->num_units; u++) {
        const dsi_unit_t *unit = &plan->units[u];
        if (unit->hash != hash || unit->num_keys != n)
            continue;
        bool same = true;
        for (size_t i = 0; i < n && same; i++)
            same = ds_event_key_equal(&plan->keys[unit->first_key + i], &keys[i]);
        if (same)
            return true;
    }
    return false;
}

static ds_status_t add_unit(dsi_profile_plan_t *plan, const ds_event_key_t *keys, size_t n,
                            const char *label)
{
    if (n == 0)
        return DS_OK;
    uint64_t hash = sequence_hash(keys, n);
    if (has_unit(plan, hash, keys, n))
        return DS_OK;
    if (plan->num_keys + n > plan->keys_capacity) {
        size_t capacity = DSI_MAX(2 * plan->keys_capacity, plan->num_keys + n + 256);
        DSI_TRY(dsi_realloc_array(&plan->keys, capacity, sizeof(*plan->keys)));
        plan->keys_capacity = capacity;
    }
    if (plan->num_units == plan->units_capacity) {
        size_t capacity = plan->units_capacity ? 2 * plan->units_capacity : 64;
        DSI_TRY(dsi_realloc_array(&plan->units, capacity, sizeof(*plan->units)));
        plan->units_capacity = capacity;
    }
    memcpy(&plan->keys[plan->num_keys], keys, n * sizeof(*keys));
    dsi_unit_t *unit = &plan->units[plan->num_units++];
    memset(unit, 0, sizeof(*unit));
    unit->hash = hash;
    unit->first_key = plan->num_keys;
    unit->num_keys = n;
    unit->rank = -1;
    snprintf(unit->label, sizeof(unit->label), "%s", label);
    plan->num_keys += n;
    return DS_OK;
}

/* The compute operators of one pass of `layer`, as a unit. */
static ds_status_t add_layer_units(dsi_profile_plan_t *plan, const ds_model_t *model, int layer,
                                   const dsi_shape_ctx_t *ctx)
{
    dsi_op_t ops[DSI_MAX_LAYER_OPS];
    ds_event_key_t keys[DSI_MAX_LAYER_OPS];
    for (int pass = DS_PASS_FORWARD; pass <= DS_PASS_BACKWARD; pass++) {
        size_t count = 0, n = 0;
        DSI_TRY(dsi_model_layer_ops(model, layer, ctx, (ds_pass_t)pass, ops, DSI_MAX_LAYER_OPS,
                                    &count));
        for (size_t i = 0; i < count; i++)
            if (ops[i].key.kind == DS_EVENT_COMPUTE)
                keys[n++] = ops[i].key;
        char label[64];
        ds_model_info_t info;
        ds_model_get_info(model, &info);
        const char *dir = pass == DS_PASS_FORWARD ? "fwd" : "bwd";
        if (layer >= 0)
            snprintf(label, sizeof(label), "%.32s layer %d %s", info.name, layer, dir);
        else
            snprintf(label, sizeof(label), "%.32s %s %s", info.name,
                     layer == DSI_PART_EMBEDDING ? "embedding" : "head", dir);
        DSI_TRY(add_unit(plan, keys, n, label));
    }
    return DS_OK;
}

ds_status_t dsi_profile_plan_add(dsi_profile_plan_t *plan, const ds_model_t *model,
                                 const ds_strategy_t *s, const ds_cluster_t *target)
{
    ds_status_t status;
    ds_event_set_t *events = NULL;
    DSI_TRY(ds_events_generate(model, s, target, &events));
    DSI_TRY_GOTO(ds_event_set_merge(plan->events, events), status, out);
    ds_model_info_t info;
    ds_model_get_info(model, &info);
    dsi_shape_ctx_t ctx;
    dsi_shape_ctx_init(&ctx, model, s);
    for (int stage = 0; stage < s->pp; stage++) {
        for (int chunk = 0; chunk < s->vpp; chunk++) {
            int first, count;
            ds_strategy_chunk_layers(s, info.num_layers, stage, chunk, &first, &count);
            for (int layer = first; layer < first + count; layer++)
                DSI_TRY_GOTO(add_layer_units(plan, model, layer, &ctx), status, out);
        }
    }
    DSI_TRY_GOTO(add_layer_units(plan, model, DSI_PART_EMBEDDING, &ctx), status, out);
    DSI_TRY_GOTO(add_layer_units(plan, model, DSI_PART_HEAD, &ctx), status, out);
    /* Compute events outside layer passes (the optimizer step) are units of one. */
    for (size_t i = 0; i < ds_event_set_size(events); i++) {
        const ds_event_t *e = ds_event_set_at(events, i);
        if (e->key.kind == DS_EVENT_COMPUTE && e->key.pass == DS_PASS_STEP)
            DSI_TRY_GOTO(add_unit(plan, &e->key, 1, e->label), status, out);
    }
    status = DS_OK;
out:
    ds_event_set_destroy(events);
    return status;
}

/* ---- assignment ----------------------------------------------------------------- */

static int by_estimate_desc(const void *a, const void *b)
{
    const dsi_unit_t *x = *(const dsi_unit_t *const *)a, *y = *(const dsi_unit_t *const *)b;
    if (x->estimate_s != y->estimate_s)
        return x->estimate_s < y->estimate_s ? 1 : -1;
    return x < y ? -1 : x > y; /* stable: plan order */
}

static ds_status_t assign_units(dsi_profile_plan_t *plan, const ds_cost_table_t *measured,
                                const ds_device_spec_t *device)
{
    ds_cluster_t on_device;
    memset(&on_device, 0, sizeof(on_device));
    on_device.device = *device;
    on_device.gpus_per_node = 1;
    on_device.nodes = 1;
    on_device.num_levels = 1;
    dsi_unit_t **order = NULL;
    DSI_TRY(dsi_calloc(plan->num_units ? plan->num_units : 1, sizeof(*order), &order));
    size_t n = 0;
    plan->units_to_measure = plan->units_reused = 0;
    for (size_t u = 0; u < plan->num_units; u++) {
        dsi_unit_t *unit = &plan->units[u];
        bool all_measured = measured != NULL;
        unit->estimate_s = 0.0;
        unit->rank = -1;
        for (size_t i = 0; i < unit->num_keys; i++) {
            const ds_event_key_t *key = &plan->keys[unit->first_key + i];
            const ds_event_t *e = ds_event_set_find(plan->events, key);
            double seconds = 0.0;
            ds_status_t status = dsi_estimate_seconds(key, e ? e->flops : 0.0, e ? e->bytes : 0.0,
                                                      &on_device, &seconds);
            if (status != DS_OK) {
                dsi_free(order);
                return status;
            }
            unit->estimate_s += seconds;
            if (all_measured && ds_cost_table_find(measured, key) == NULL)
                all_measured = false;
        }
        if (all_measured) {
            plan->units_reused++;
            continue;
        }
        order[n++] = unit;
    }
    qsort(order, n, sizeof(*order), by_estimate_desc);
    for (size_t i = 0; i < n; i++) {
        int best = 0;
        for (int r = 1; r < plan->num_ranks; r++)
            if (plan->rank_load_s[r] < plan->rank_load_s[best])
                best = r;
        order[i]->rank = best;
        plan->rank_load_s[best] += order[i]->estimate_s;
    }
    plan->units_to_measure = n;
    dsi_free(order);
    return DS_OK;
}

/* ---- communication -------------------------------------------------------------- */

static ds_status_t add_shape(dsi_profile_plan_t *plan, int size, int nodes, int per_node,
                             int num_groups, const int **node_ranks)
{
    DSI_TRY(dsi_realloc_array(&plan->shapes, (size_t)plan->num_shapes + 1, sizeof(*plan->shapes)));
    dsi_group_shape_t *shape = &plan->shapes[plan->num_shapes];
    memset(shape, 0, sizeof(*shape));
    DSI_TRY(dsi_calloc((size_t)size * (size_t)num_groups, sizeof(int), &shape->ranks));
    shape->size = size;
    shape->nodes = nodes;
    shape->ranks_per_node = per_node;
    shape->num_groups = num_groups;
    /* Group g takes local ranks [g*per_node, (g+1)*per_node) of each of its nodes. */
    for (int g = 0; g < num_groups; g++)
        for (int node = 0; node < nodes; node++)
            for (int i = 0; i < per_node; i++)
                shape->ranks[g * size + node * per_node + i] = node_ranks[node][g * per_node + i];
    plan->num_shapes++;
    return DS_OK;
}

/* Group sizes: powers of two, then the largest size if it is not one. */
static int next_size(int size, int largest)
{
    if (size >= largest)
        return largest + 1;
    return size * 2 <= largest ? size * 2 : largest;
}

/* Nodes by how many ranks they hold, the fullest first (ties: lower index first). */
static void order_nodes(const int *counts, int num_nodes, int *order)
{
    for (int n = 0; n < num_nodes; n++) {
        int at = n;
        while (at > 0 && counts[order[at - 1]] < counts[n]) {
            order[at] = order[at - 1];
            at--;
        }
        order[at] = n;
    }
}

/* The `m` fullest nodes' ranks, in node order (groups list their members node by node). */
static void fullest_nodes(int *const *node_ranks, const int *order, int num_nodes, int m,
                          const int **chosen)
{
    int k = 0;
    for (int n = 0; n < num_nodes && k < m; n++)
        for (int i = 0; i < m; i++)
            if (order[i] == n)
                chosen[k++] = node_ranks[n];
}

/* Every node count the allocation forms (powers of two, then all its nodes:
 * each depth of a tree over the nodes), on the fullest nodes, with one rank
 * per node and with as many per node as the m-th fullest holds; inside the
 * fullest node every group size; two groups at once inside a node and
 * across two nodes. */
static ds_status_t make_shapes(dsi_profile_plan_t *plan, int num_ranks, const int *node_of_rank)
{
    ds_status_t status = DS_OK;
    int num_nodes = 0;
    for (int r = 0; r < num_ranks; r++)
        num_nodes = DSI_MAX(num_nodes, node_of_rank[r] + 1);
    int *counts = NULL, **node_ranks = NULL, *order = NULL;
    const int **chosen = NULL;
    DSI_TRY_GOTO(dsi_calloc((size_t)num_nodes, sizeof(*counts), &counts), status, out);
    DSI_TRY_GOTO(dsi_calloc((size_t)num_nodes, sizeof(*node_ranks), &node_ranks), status, out);
    DSI_TRY_GOTO(dsi_calloc((size_t)num_nodes, sizeof(*order), &order), status, out);
    DSI_TRY_GOTO(dsi_calloc((size_t)num_nodes, sizeof(*chosen), &chosen), status, out);
    for (int r = 0; r < num_ranks; r++)
        counts[node_of_rank[r]]++;
    for (int n = 0; n < num_nodes; n++) {
        DSI_TRY_GOTO(dsi_calloc((size_t)DSI_MAX(counts[n], 1), sizeof(int), &node_ranks[n]), status,
                     out);
        counts[n] = 0;
    }
    for (int r = 0; r < num_ranks; r++)
        node_ranks[node_of_rank[r]][counts[node_of_rank[r]]++] = r;
    order_nodes(counts, num_nodes, order);
    /* The fullest node hosts the intra-node groups. */
    int max_local = counts[order[0]];
    const int *intra[1] = {node_ranks[order[0]]};
    for (int k = 2; k <= max_local; k = next_size(k, max_local))
        DSI_TRY_GOTO(add_shape(plan, k, 1, k, 1, intra), status, out);
    if (max_local >= 4) /* two pairs at once inside a node */
        DSI_TRY_GOTO(add_shape(plan, 2, 1, 2, 2, intra), status, out);
    /* Across nodes: m nodes with p ranks each; two one-per-node groups at once. */
    for (int m = 2; m <= num_nodes; m = next_size(m, num_nodes)) {
        int local = counts[order[m - 1]];
        fullest_nodes(node_ranks, order, num_nodes, m, chosen);
        for (int p = 1; p <= local; p = next_size(p, local))
            DSI_TRY_GOTO(add_shape(plan, m * p, m, p, 1, chosen), status, out);
    }
    if (num_nodes >= 2 && counts[order[1]] >= 2) {
        fullest_nodes(node_ranks, order, num_nodes, 2, chosen);
        DSI_TRY_GOTO(add_shape(plan, 2, 2, 1, 2, chosen), status, out);
    }
out:
    for (int n = 0; node_ranks != NULL && n < num_nodes; n++)
        dsi_free(node_ranks[n]);
    dsi_free(chosen);
    dsi_free(order);
    dsi_free(node_ranks);
    dsi_free(counts);
    return status;
}

ds_status_t dsi_profile_plan_shapes(dsi_profile_plan_t *plan, int num_ranks,
                                    const int *node_of_rank)
{
    for (int i = 0; i < plan->num_shapes; i++)
        dsi_free(plan->shapes[i].ranks);
    plan->num_shapes = 0;
    return make_shapes(plan, num_ranks, node_of_rank);
}

static ds_status_t add_task(dsi_profile_plan_t *plan, int shape, ds_comm_op_t op, ds_dtype_t dtype,
                            int64_t bytes, int batched, int exact)
{
    const dsi_group_shape_t *s = &plan->shapes[shape];
    if (op == DS_COMM_SENDRECV && s->size != 2)
        return DS_OK;
    /* Collectives move whole elements split evenly over the group. */
    int64_t unit = (int64_t)ds_dtype_size(dtype) * (op == DS_COMM_SENDRECV ? 1 : s->size);
    bytes = (bytes + unit - 1) / unit * unit;
    for (size_t i = 0; i < plan->num_tasks; i++) {
        const ds_comm_sample_t *t = &plan->tasks[i].sample;
        if (plan->tasks[i].shape == shape && t->op == op && t->dtype == dtype &&
            t->bytes == bytes && t->batched == batched) {
            plan->tasks[i].exact |= exact;
            return DS_OK;
        }
    }
    if (plan->num_tasks == plan->tasks_capacity) {
        size_t capacity = plan->tasks_capacity ? 2 * plan->tasks_capacity : 64;
        DSI_TRY(dsi_realloc_array(&plan->tasks, capacity, sizeof(*plan->tasks)));
        plan->tasks_capacity = capacity;
    }
    dsi_comm_task_t *task = &plan->tasks[plan->num_tasks++];
    memset(task, 0, sizeof(*task));
    task->sample.op = op;
    task->sample.dtype = dtype;
    task->sample.bytes = bytes;
    task->sample.group_size = s->size;
    task->sample.nodes = s->nodes;
    task->sample.ranks_per_node = s->ranks_per_node;
    task->sample.concurrency = s->num_groups;
    task->sample.batched = batched;
    task->sample.provenance = DS_PROV_MEASURED;
    task->num_groups = s->num_groups;
    task->shape = shape;
    task->exact = exact;
    return DS_OK;
}

static int by_task_order(const void *a, const void *b)
{
    const dsi_comm_task_t *x = a, *y = b;
    if (x->shape != y->shape)
        return x->shape - y->shape;
    if (x->sample.op != y->sample.op)
        return (int)x->sample.op - (int)y->sample.op;
    if (x->sample.dtype != y->sample.dtype)
        return (int)x->sample.dtype - (int)y->sample.dtype;
    if (x->sample.batched != y->sample.batched)
        return x->sample.batched - y->sample.batched;
    return (x->sample.bytes > y->sample.bytes) - (x->sample.bytes < y->sample.bytes);
}

/* Point-to-point is swept from messages this small: the small steps of
 * MPI's collectives (a gradient norm's 4 bytes) run at its latency. */
#define P2P_SWEEP_MIN 4

static ds_status_t make_tasks(dsi_profile_plan_t *plan, int64_t sweep_min, int64_t sweep_max)
{
    for (size_t i = 0; i < ds_event_set_size(plan->events); i++) {
        const ds_event_key_t *k = &ds_event_set_at(plan->events, i)->key;
        if (k->kind != DS_EVENT_COMM || k->op == DS_COMM_PS_PUSH || k->op == DS_COMM_PS_PULL)
            continue; /* the parameter server is modelled from point-to-point costs */
        int batched = (k->flags & DS_COMM_FLAG_BATCHED) != 0;
        for (int shape = 0; shape < plan->num_shapes; shape++) {
            if (k->dims[0] <= sweep_max)
                DSI_TRY(add_task(plan, shape, (ds_comm_op_t)k->op, (ds_dtype_t)k->dtype, k->dims[0],
                                 batched, 1));
            for (int64_t bytes = sweep_min; bytes <= sweep_max;) {
                DSI_TRY(add_task(plan, shape, (ds_comm_op_t)k->op, (ds_dtype_t)k->dtype, bytes,
                                 batched, 0));
                if (bytes > sweep_max / 2)
                    break;
                bytes *= 2;
            }
        }
    }
    /* Point-to-point on every pair the allocation forms, one direction and
     * both at once, whatever the targets' keys: MPI's collectives and the
     * parameter server are composed of it (comm.h). */
    for (int shape = 0; shape < plan->num_shapes; shape++)
        for (int batched = 0; batched < 2; batched++)
            for (int64_t bytes = DSI_MIN(sweep_min, P2P_SWEEP_MIN); bytes <= sweep_max;) {
                DSI_TRY(add_task(plan, shape, DS_COMM_SENDRECV, DS_DTYPE_FP32, bytes, batched, 0));
                if (bytes > sweep_max / 2)
                    break;
                bytes *= 2;
            }
    if (plan->num_tasks > 1)
        qsort(plan->tasks, plan->num_tasks, sizeof(*plan->tasks), by_task_order);
    return DS_OK;
}

ds_status_t dsi_profile_plan_assign(dsi_profile_plan_t *plan, int num_ranks,
                                    const int *node_of_rank, const ds_cost_table_t *measured,
                                    const ds_device_spec_t *device, int64_t sweep_min,
                                    int64_t sweep_max)
{
    if (num_ranks < 1 || sweep_min < 1 || sweep_max < sweep_min)
        return DSI_ERROR(DS_ERR_INVALID_ARG,
                         "profiling plan for %d ranks, sweep %lld..%lld bytes (accepted: >= 1 "
                         "rank, 1 <= min <= max)",
                         num_ranks, (long long)sweep_min, (long long)sweep_max);
    dsi_free(plan->rank_load_s);
    plan->rank_load_s = NULL;
    plan->num_tasks = 0;
    plan->num_ranks = num_ranks;
    DSI_TRY(dsi_calloc((size_t)num_ranks, sizeof(double), &plan->rank_load_s));
    DSI_TRY(assign_units(plan, measured, device));
    DSI_TRY(dsi_profile_plan_shapes(plan, num_ranks, node_of_rank));
    return make_tasks(plan, sweep_min, sweep_max);
}
