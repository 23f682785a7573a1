/*
 * Costs of one strategy's events on the allocation that runs it, for
 * validation: compute events as layer-pass units (the profiling plan's),
 * spread over the ranks and gathered; communication events on the
 * strategy's own process groups, every group with the event's layout at
 * once.  Kept apart from the executor so that the profiler's database can
 * take its place.
 */
#include "dsi_exec.h"

#include "profile/dsi_profile.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void ds_exec_cost_options_init(ds_exec_cost_options_t *options)
{
    memset(options, 0, sizeof(*options));
    options->compute = DS_EXEC_COSTS_LAYER;
    options->comm_in_situ = 1;
    options->rounds = (int)DSI_MAX(dsi_param_int(DSI_PARAM_EXEC_COST_ROUNDS), 1);
    options->rotate = 1;
    options->issued = 1;
    options->together = 1;
    ds_measure_config_default(&options->measure);
    options->max_foreign = dsi_param_double(DSI_PARAM_EXEC_MAX_FOREIGN);
}

/* One key's measurements by round: the sums over its occurrences (a key
 * may appear several times in a unit, in several units and on several
 * ranks) and their count.  The cost is the median over rounds of the
 * rounds' averages: a burst of foreign load inside one round does not move
 * it. */
#define MAX_ROUNDS 16

typedef struct key_sum {
    ds_event_key_t key;
    double mean[MAX_ROUNDS], median[MAX_ROUNDS], p10[MAX_ROUNDS], p90[MAX_ROUNDS];
    int64_t count[MAX_ROUNDS];
    int64_t repetitions;
} key_sum_t;

typedef struct sums {
    key_sum_t *v;
    size_t n, cap;
} sums_t;

static ds_status_t sums_find(sums_t *s, const ds_event_key_t *key, key_sum_t **e_p)
{
    for (size_t i = 0; i < s->n; i++)
        if (ds_event_key_equal(&s->v[i].key, key)) {
            *e_p = &s->v[i];
            return DS_OK;
        }
    if (s->n == s->cap) {
        size_t cap = s->cap ? 2 * s->cap : 64;
        DSI_TRY(dsi_realloc_array(&s->v, cap, sizeof(*s->v)));
        s->cap = cap;
    }
    key_sum_t *e = &s->v[s->n++];
    memset(e, 0, sizeof(*e));
    e->key = *key;
    *e_p = e;
    return DS_OK;
}

static ds_status_t sums_add(sums_t *s, const ds_event_key_t *key, int round, const ds_cost_t *c)
{
    key_sum_t *e;
    DSI_TRY(sums_find(s, key, &e));
    int r = round % MAX_ROUNDS;
    e->mean[r] += c->mean_s;
    e->median[r] += c->median_s;
    e->p10[r] += c->p10_s;
    e->p90[r] += c->p90_s;
    e->count[r]++;
    e->repetitions += c->repetitions;
    return DS_OK;
}

/* Forgets what round `round` measured. */
static void sums_drop_round(sums_t *s, int round)
{
    int r = round % MAX_ROUNDS;
    for (size_t i = 0; i < s->n; i++) {
        key_sum_t *e = &s->v[i];
        e->mean[r] = e->median[r] = e->p10[r] = e->p90[r] = 0.0;
        e->count[r] = 0;
    }
}

/* Median over the rounds that measured the key of sum[r] / count[r]. */
static double round_median(const double *sum, const int64_t *count)
{
    double v[MAX_ROUNDS];
    int n = 0;
    for (int r = 0; r < MAX_ROUNDS; r++)
        if (count[r] > 0)
            v[n++] = sum[r] / (double)count[r];
    return dsi_median(v, (size_t)n);
}

/* Every rank's sums to every rank: all->v holds rank 0's entries, then
 * rank 1's, ...; first[r] is rank r's first (first[size] = all->n). */
static ds_status_t share_sums(MPI_Comm comm, int size, const sums_t *mine, sums_t *all, int *first)
{
    ds_status_t status = DS_OK;
    int *counts = NULL, *displs = NULL;
    int bytes = (int)(mine->n * sizeof(key_sum_t));
    DSI_TRY_GOTO(dsi_calloc((size_t)size, sizeof(int), &counts), status, out);
    DSI_TRY_GOTO(dsi_calloc((size_t)size, sizeof(int), &displs), status, out);
    DSI_MPI_TRY_GOTO(MPI_Allgather(&bytes, 1, MPI_INT, counts, 1, MPI_INT, comm), status, out);
    int64_t total = 0;
    for (int r = 0; r < size; r++) {
        displs[r] = (int)total;
        first[r] = (int)(total / (int64_t)sizeof(key_sum_t));
        total += counts[r];
    }
    first[size] = (int)(total / (int64_t)sizeof(key_sum_t));
    DSI_TRY_GOTO(dsi_malloc((size_t)DSI_MAX(total, 1), &all->v), status, out);
    all->n = all->cap = (size_t)first[size];
    DSI_MPI_TRY_GOTO(
        MPI_Allgatherv(mine->v, bytes, MPI_BYTE, all->v, counts, displs, MPI_BYTE, comm), status,
        out);
out:
    dsi_free(counts);
    dsi_free(displs);
    return status;
}

static const key_sum_t *rank_entry(const sums_t *all, const int *first, int r,
                                   const ds_event_key_t *key)
{
    for (int i = first[r]; i < first[r + 1]; i++)
        if (ds_event_key_equal(&all->v[i].key, key))
            return &all->v[i];
    return NULL;
}

/* Values above this are left out: DS_EXEC_OUTLIER above the lowest. */
static double outlier_limit(const double *values, int n)
{
    double lowest = INFINITY;
    for (int i = 0; i < n; i++)
        lowest = DSI_MIN(lowest, values[i]);
    return lowest * (1.0 + DSI_MAX(dsi_param_double(DSI_PARAM_EXEC_OUTLIER), 0.0));
}

double dsi_exec_combine(const double *values, int n, int *kept_p)
{
    double limit = outlier_limit(values, n), sum = 0.0;
    int kept = 0;
    for (int i = 0; i < n; i++)
        if (values[i] <= limit) {
            sum += values[i];
            kept++;
        }
    if (kept_p != NULL)
        *kept_p = kept;
    return kept > 0 ? sum / kept : 0.0;
}

/* Adds the keys `costs` lacks: per key, every rank's cost (median over its
 * rounds) over the rank's speed factor, combined across the ranks. */
static ds_status_t set_costs(ds_cost_table_t *costs, const sums_t *all, const int *first, int size,
                             const double *speed)
{
    ds_status_t status = DS_OK;
    double *v[4] = {NULL, NULL, NULL, NULL};
    for (int f = 0; f < 4; f++)
        DSI_TRY_GOTO(dsi_calloc((size_t)size, sizeof(double), &v[f]), status, out);
    for (size_t i = 0; i < all->n; i++) {
        const ds_event_key_t *key = &all->v[i].key;
        if (ds_cost_table_find(costs, key) != NULL)
            continue;
        ds_cost_t c;
        memset(&c, 0, sizeof(c));
        int n = 0;
        for (int r = 0; r < size; r++) {
            const key_sum_t *e = rank_entry(all, first, r, key);
            if (e == NULL)
                continue;
            double scale = speed[r] > 0.0 ? 1.0 / speed[r] : 1.0;
            v[0][n] = scale * round_median(e->median, e->count);
            v[1][n] = scale * round_median(e->mean, e->count);
            v[2][n] = scale * round_median(e->p10, e->count);
            v[3][n] = scale * round_median(e->p90, e->count);
            c.repetitions += e->repetitions;
            n++;
        }
        /* The ranks kept for the median decide for the other statistics. */
        double limit = outlier_limit(v[0], n), sums[4] = {0.0, 0.0, 0.0, 0.0};
        int kept = 0;
        for (int j = 0; j < n; j++)
            if (v[0][j] <= limit) {
                for (int f = 0; f < 4; f++)
                    sums[f] += v[f][j];
                kept++;
            }
        c.median_s = kept > 0 ? sums[0] / kept : 0.0;
        c.mean_s = kept > 0 ? sums[1] / kept : 0.0;
        c.p10_s = kept > 0 ? sums[2] / kept : 0.0;
        c.p90_s = kept > 0 ? sums[3] / kept : 0.0;
        if (kept < n) {
            char label[256];
            ds_event_key_format(key, label, sizeof(label));
            DSI_DEBUG("cost of %s: %d of %d ranks measured it more than %.0f%% above the "
                      "lowest; left out",
                      label, n - kept, n, 100.0 * dsi_param_double(DSI_PARAM_EXEC_OUTLIER));
        }
        c.provenance = DS_PROV_MEASURED;
        DSI_TRY_GOTO(ds_cost_table_set(costs, key, &c), status, out);
    }
out:
    for (int f = 0; f < 4; f++)
        dsi_free(v[f]);
    return status;
}

/* Weighted median of ratio[] (weights w[] > 0). */
static double weighted_median(double *ratio, double *w, size_t n)
{
    /* Insertion sort by ratio: units are few. */
    for (size_t i = 1; i < n; i++)
        for (size_t j = i; j > 0 && ratio[j - 1] > ratio[j]; j--) {
            double t = ratio[j];
            ratio[j] = ratio[j - 1];
            ratio[j - 1] = t;
            t = w[j];
            w[j] = w[j - 1];
            w[j - 1] = t;
        }
    double total = 0.0, acc = 0.0;
    for (size_t i = 0; i < n; i++)
        total += w[i];
    for (size_t i = 0; i < n; i++) {
        acc += w[i];
        if (acc >= 0.5 * total)
            return ratio[i];
    }
    return n > 0 ? ratio[n - 1] : 1.0;
}

void dsi_exec_speed_factors(const double *times, int ranks, size_t units, double *factors)
{
    for (int r = 0; r < ranks; r++)
        factors[r] = 1.0;
    double *ratio = NULL, *w = NULL, *fastest = NULL, *found = NULL;
    if (ranks < 2 || units == 0 || dsi_calloc(units, sizeof(double), &ratio) != DS_OK ||
        dsi_calloc(units, sizeof(double), &w) != DS_OK ||
        dsi_calloc(units, sizeof(double), &fastest) != DS_OK ||
        dsi_calloc((size_t)ranks, sizeof(double), &found) != DS_OK)
        goto out;
    /* Units every rank measured, and their fastest time. */
    for (size_t u = 0; u < units; u++) {
        double best = INFINITY;
        for (int r = 0; r < ranks; r++) {
            double t = times[(size_t)r * units + u];
            if (!(t > 0.0)) {
                best = INFINITY;
                break;
            }
            best = DSI_MIN(best, t);
        }
        fastest[u] = best;
    }
    double mean = 0.0;
    for (int r = 0; r < ranks; r++) {
        size_t n = 0;
        for (size_t u = 0; u < units; u++)
            if (isfinite(fastest[u])) {
                ratio[n] = times[(size_t)r * units + u] / fastest[u];
                w[n++] = fastest[u];
            }
        if (n == 0)
            goto out;
        found[r] = weighted_median(ratio, w, n);
        mean += found[r] / ranks;
    }
    for (int r = 0; r < ranks; r++)
        factors[r] = found[r] / mean;
out:
    dsi_free(ratio);
    dsi_free(w);
    dsi_free(fastest);
    dsi_free(found);
}

/* ---- compute --------------------------------------------------------------------------------- */

/* Bytes of device buffers the compute keys of one pass of `layer` hold. */
static ds_status_t pass_bytes(ds_backend_t *b, const ds_model_t *model, const dsi_shape_ctx_t *ctx,
                              int layer, double *bytes_p)
{
    dsi_op_t ops[DSI_MAX_LAYER_OPS];
    double total = 0.0;
    for (int pass = DS_PASS_FORWARD; pass <= DS_PASS_BACKWARD; pass++) {
        size_t count = 0;
        DSI_TRY(dsi_model_layer_ops(model, layer, ctx, (ds_pass_t)pass, ops, DSI_ARRAY_SIZE(ops),
                                    &count));
        for (size_t i = 0; i < count; i++) {
            size_t bytes = 0;
            if (ops[i].key.kind == DS_EVENT_COMPUTE &&
                ds_kernel_estimate_bytes(b, &ops[i].key, &bytes) == DS_OK)
                total += (double)bytes;
        }
    }
    *bytes_p = total;
    return DS_OK;
}

/* The bytes training touches between two runs of one layer pass: the
 * largest stage's buffers (every part, both passes), but not more than a
 * few times the last-level cache (past that, every byte has left it). */
static ds_status_t reuse_window(ds_backend_t *b, const ds_model_t *model, const ds_strategy_t *s,
                                double *bytes_p)
{
    dsi_shape_ctx_t ctx;
    dsi_shape_ctx_init(&ctx, model, s);
    int L = model->info.num_layers;
    double largest = 0.0;
    for (int p = 0; p < s->pp; p++) {
        double stage = 0.0, bytes = 0.0;
        for (int c = 0; c < s->vpp; c++) {
            int first, n;
            ds_strategy_chunk_layers(s, L, p, c, &first, &n);
            for (int layer = first; layer < first + n; layer++) {
                DSI_TRY(pass_bytes(b, model, &ctx, layer, &bytes));
                stage += bytes;
            }
        }
        if (p == 0) {
            DSI_TRY(pass_bytes(b, model, &ctx, DSI_PART_EMBEDDING, &bytes));
            stage += bytes;
        }
        if (p == s->pp - 1) {
            DSI_TRY(pass_bytes(b, model, &ctx, DSI_PART_HEAD, &bytes));
            stage += bytes;
        }
        largest = DSI_MAX(largest, stage);
    }
    double cache = dsi_param_double(DSI_PARAM_EXEC_CACHE_MIB) * 1048576.0;
    if (!(cache > 0.0)) {
        long llc = b->kind == DS_BACKEND_CPU ? sysconf(_SC_LEVEL3_CACHE_SIZE) : 0;
        if (llc <= 0 && b->kind == DS_BACKEND_CPU)
            llc = sysconf(_SC_LEVEL2_CACHE_SIZE);
        cache = llc > 0 ? (double)llc : 64.0 * 1048576.0;
    }
    *bytes_p = DSI_MIN(largest, 4.0 * cache);
    return DS_OK;
}

/* The units to measure, their buffers and the bytes to rotate through.
 * Local: each rank's own work before the first collective. */
static ds_status_t plan_units(ds_backend_t *b, const ds_model_t *model, const ds_strategy_t *s,
                              const ds_cluster_t *cluster, const ds_exec_cost_options_t *o,
                              const ds_cost_table_t *costs, dsi_profile_plan_t **plan_p,
                              int **node_of_rank_p, double **by_round_p, double **unit_times_p,
                              double *window_p)
{
    DSI_TRY(dsi_profile_plan_create(plan_p));
    dsi_profile_plan_t *plan = *plan_p;
    DSI_TRY(dsi_profile_plan_add(plan, model, s, cluster));
    /* The plan's communication tasks are not used here: one node will do. */
    DSI_TRY(dsi_calloc((size_t)b->size, sizeof(int), node_of_rank_p));
    DSI_TRY(dsi_profile_plan_assign(plan, b->size, *node_of_rank_p, costs, &cluster->device, 1, 1));
    DSI_TRY(dsi_calloc(DSI_MAX(plan->num_units, 1) * MAX_ROUNDS, sizeof(double), by_round_p));
    DSI_TRY(dsi_calloc(DSI_MAX(plan->num_units, 1), sizeof(double), unit_times_p));
    *window_p = 0.0;
    if (o->rotate)
        DSI_TRY(reuse_window(b, model, s, window_p));
    return DS_OK;
}

/* One round of one unit on this rank: its time into by_round, its
 * operators' costs into `mine`.  Local. */
static ds_status_t measure_unit(ds_backend_t *b, const dsi_profile_plan_t *plan, size_t u,
                                int round, const ds_measure_config_t *measure, double window,
                                sums_t *mine, ds_measurement_t **per_op_p, double *by_round)
{
    const dsi_unit_t *unit = &plan->units[u];
    const ds_event_key_t *keys = &plan->keys[unit->first_key];
    DSI_TRY(dsi_realloc_array(per_op_p, unit->num_keys, sizeof(**per_op_p)));
    ds_measurement_t *per_op = *per_op_p;
    /* Copies of the unit in turn, so that its buffers are as cold as
     * training leaves them. */
    ds_measure_config_t config = *measure;
    double unit_bytes = 0.0;
    for (size_t i = 0; i < unit->num_keys; i++) {
        size_t bytes = 0;
        if (keys[i].kind == DS_EVENT_COMPUTE &&
            ds_kernel_estimate_bytes(b, &keys[i], &bytes) == DS_OK)
            unit_bytes += (double)bytes;
    }
    config.copies =
        unit_bytes > 0.0 ? (int)DSI_MIN(DSI_MAX(ceil(window / unit_bytes), 1.0), 64.0) : 1;
    ds_measurement_t total;
    DSI_TRY(ds_measure_layer(b, keys, unit->num_keys, &config, &total, per_op));
    DSI_DEBUG("unit %s round %d: %d copies, mean %.3f ms, median %.3f ms", unit->label, round,
              config.copies, 1e3 * total.cost.mean_s, 1e3 * total.cost.median_s);
    by_round[u * MAX_ROUNDS + (size_t)round] = total.cost.median_s;
    for (size_t i = 0; i < unit->num_keys; i++)
        if (keys[i].kind == DS_EVENT_COMPUTE)
            DSI_TRY(sums_add(mine, &keys[i], round, &per_op[i].cost));
    return DS_OK;
}

static ds_status_t measure_units(ds_backend_t *b, const ds_model_t *model, const ds_strategy_t *s,
                                 const ds_cluster_t *cluster, const ds_exec_cost_options_t *o,
                                 const ds_cost_table_t *costs, sums_t *mine, double **unit_times_p,
                                 size_t *num_units_p)
{
    ds_status_t status = DS_OK;
    dsi_profile_plan_t *plan = NULL;
    int *node_of_rank = NULL;
    ds_measurement_t *per_op = NULL;
    double *by_round = NULL; /* [unit][round]: a unit's time in each round */
    double window = 0.0;
    DSI_TRY_GOTO(
        dsi_mpi_agree(b->comm, plan_units(b, model, s, cluster, o, costs, &plan, &node_of_rank,
                                          &by_round, unit_times_p, &window)),
        status, out);
    *num_units_p = plan->num_units;
    int rounds = DSI_MIN(DSI_MAX(o->rounds, 1), MAX_ROUNDS);
    /* The speed probe before and after every round: a round during which
     * the machine ran slow (a hypervisor taking the core for seconds, which
     * the rounds' median cannot outvote when it lasts several rounds) is
     * left out when quieter rounds exist. */
    double probe_before = 0.0, slowest[MAX_ROUNDS];
    DSI_TRY_GOTO(dsi_speed_probe(b, &probe_before), status, out);
    /* A unit that fails on one rank is agreed on before the next collective:
     * the next unit's barrier (together), else the round's speed probe. */
    ds_status_t local = DS_OK;
    for (int round = 0; round < rounds; round++) {
        for (size_t u = 0; u < plan->num_units; u++) {
            const dsi_unit_t *unit = &plan->units[u];
            if (unit->rank < 0 || (!o->together && unit->rank != b->rank))
                continue;
            /* Together: every rank measures the unit at the same time, so the
             * node's memory system is as busy as in training. */
            if (o->together) {
                DSI_TRY_GOTO(dsi_mpi_agree(b->comm, local), status, out);
                DSI_MPI_TRY_GOTO(MPI_Barrier(b->comm), status, out);
            }
            if (local == DS_OK)
                local =
                    measure_unit(b, plan, u, round, &o->measure, window, mine, &per_op, by_round);
        }
        DSI_TRY_GOTO(dsi_mpi_agree(b->comm, local), status, out);
        double probe_after = 0.0;
        DSI_TRY_GOTO(dsi_speed_probe(b, &probe_after), status, out);
        slowest[round] = DSI_MAX(probe_before, probe_after);
        probe_before = probe_after;
    }
    double best = o->reference_probe_s > 0.0 ? o->reference_probe_s : INFINITY;
    for (int round = 0; round < rounds; round++)
        best = DSI_MIN(best, slowest[round]);
    double limit = best * (1.0 + dsi_param_double(DSI_PARAM_EXEC_MAX_SLOWDOWN));
    int quiet = 0;
    for (int round = 0; round < rounds; round++)
        quiet += slowest[round] <= limit;
    for (int round = 0; round < rounds && quiet > 0; round++)
        if (slowest[round] > limit) {
            DSI_DEBUG("round %d left out: speed probe %.1f us, best %.1f us", round,
                      1e6 * slowest[round], 1e6 * best);
            sums_drop_round(mine, round);
            for (size_t u = 0; u < plan->num_units; u++)
                by_round[u * MAX_ROUNDS + (size_t)round] = 0.0;
        }
    /* A unit's time: the median of its rounds (0 where this rank did not measure it). */
    for (size_t u = 0; u < plan->num_units; u++) {
        int64_t measured[MAX_ROUNDS];
        for (int r = 0; r < MAX_ROUNDS; r++)
            measured[r] = r < rounds && by_round[u * MAX_ROUNDS + (size_t)r] > 0.0;
        (*unit_times_p)[u] = round_median(&by_round[u * MAX_ROUNDS], measured);
    }
out:
    dsi_free(by_round);
    dsi_profile_plan_destroy(plan);
    dsi_free(node_of_rank);
    dsi_free(per_op);
    return status;
}

static ds_status_t measure_operators(ds_backend_t *b, const ds_event_set_t *events,
                                     const ds_exec_cost_options_t *o, const ds_cost_table_t *costs,
                                     sums_t *mine)
{
    for (int round = 0; round < DSI_MIN(DSI_MAX(o->rounds, 1), MAX_ROUNDS); round++) {
        size_t index = 0;
        for (size_t i = 0; i < ds_event_set_size(events); i++) {
            const ds_event_key_t *key = &ds_event_set_at(events, i)->key;
            if (key->kind != DS_EVENT_COMPUTE || ds_cost_table_find(costs, key) != NULL)
                continue;
            if (index++ % (size_t)b->size != (size_t)b->rank)
                continue;
            ds_measurement_t m;
            DSI_TRY(ds_measure_compute(b, key, &o->measure, &m));
            DSI_TRY(sums_add(mine, key, round, &m.cost));
        }
    }
    return DS_OK;
}

/* ---- communication --------------------------------------------------------------------------- */

/* The compute operator issued right before the collective `key` in a pass
 * of this rank's stage (its producer), if any. */
static bool producer_of(const ds_model_t *model, const ds_strategy_t *s, const dsi_shape_ctx_t *ctx,
                        int stage, const ds_event_key_t *key, ds_event_key_t *producer)
{
    dsi_op_t ops[DSI_MAX_LAYER_OPS];
    int L = model->info.num_layers;
    for (int c = 0; c < s->vpp; c++) {
        int first, n;
        ds_strategy_chunk_layers(s, L, stage, c, &first, &n);
        for (int layer = first - 1; layer <= first + n; layer++) {
            int part = layer;
            if (layer == first - 1)
                part = stage == 0 && c == 0 ? DSI_PART_EMBEDDING : -99;
            if (layer == first + n)
                part = stage == s->pp - 1 && c == s->vpp - 1 ? DSI_PART_HEAD : -99;
            if (part == -99)
                continue;
            for (int pass = DS_PASS_FORWARD; pass <= DS_PASS_BACKWARD; pass++) {
                size_t count = 0;
                if (dsi_model_layer_ops(model, part, ctx, (ds_pass_t)pass, ops, DSI_ARRAY_SIZE(ops),
                                        &count) != DS_OK)
                    continue;
                const ds_event_key_t *last = NULL;
                for (size_t i = 0; i < count; i++) {
                    ds_event_key_t k = ops[i].key;
                    if (k.kind == DS_EVENT_COMPUTE) {
                        last = &ops[i].key;
                        continue;
                    }
                    k.ranks_per_node = key->ranks_per_node;
                    k.nodes = key->nodes;
                    k.concurrency = key->concurrency;
                    k.node_stride = key->node_stride;
                    if (last != NULL && ds_event_key_equal(&k, key)) {
                        *producer = *last;
                        return true;
                    }
                }
            }
        }
    }
    return false;
}

/* The index of the EP or EDP group of `me` under the folded `s`
 * (dsi_group_members' numbering). */
static int expert_group_index(const ds_strategy_t *s, ds_coords_t me, bool ep_group)
{
    int64_t etp = s->etp > 0 ? s->etp : s->tp, ep = s->ep > 0 ? s->ep : 1;
    int64_t local = me.tp + (int64_t)s->tp * me.dp;
    int64_t t = local % etp, e = local / etp % ep, d = local / (etp * ep);
    return (int)(ep_group ? t + etp * d : t + etp * e);
}

/* The group this rank measures `key` on (NULL: none), and the producer for
 * an in-situ measurement.  `s` is folded (dsi_strategy_fold_cp), `ctx`
 * keeps cp. */
static ds_status_t group_for(const ds_model_t *model, const ds_strategy_t *s,
                             const dsi_shape_ctx_t *ctx, const dsi_groups_t *g, dsi_placement_t *pl,
                             ds_coords_t me, const ds_event_key_t *key, int *boundary_p,
                             ds_comm_t **comm_p)
{
    *comm_p = NULL;
    dsi_layout_t l;
    int n;
    switch ((ds_group_t)key->group) {
    case DS_GROUP_TP:
        n = dsi_group_members(pl, DSI_KIND_TP, me.pp, me.dp);
        l = dsi_group_layout(pl, DSI_KIND_TP, n);
        if (dsi_key_has_layout(key, &l) && key->group_size == s->tp)
            *comm_p = g->tp;
        return DS_OK;
    case DS_GROUP_DP:
        n = dsi_group_members(pl, DSI_KIND_DP, me.pp, me.tp);
        l = dsi_group_layout(pl, DSI_KIND_DP, n);
        if (dsi_key_has_layout(key, &l) && key->group_size == s->dp)
            *comm_p = g->dp;
        return DS_OK;
    case DS_GROUP_MP:
        n = dsi_group_members(pl, DSI_KIND_MP, 0, me.dp);
        l = dsi_group_layout(pl, DSI_KIND_MP, n);
        if (dsi_key_has_layout(key, &l))
            *comm_p = g->mp;
        return DS_OK;
    case DS_GROUP_CP:
        if (ctx->cp <= 1 || g->cp == NULL)
            return DS_OK;
        l = dsi_cp_layout(pl, ctx->cp_comm, me.pp, me.tp, me.dp / ctx->cp);
        if (dsi_key_has_layout(key, &l) &&
            key->group_size == (key->op == DS_COMM_SENDRECV ? 2 : ctx->cp))
            *comm_p = g->cp;
        return DS_OK;
    case DS_GROUP_EMBEDDING:
        if (g->emb == NULL)
            return DS_OK;
        n = dsi_group_members(pl, DSI_KIND_EMBEDDING, 0, me.tp + s->tp * me.dp);
        l = dsi_group_layout(pl, DSI_KIND_EMBEDDING, n);
        if (dsi_key_has_layout(key, &l))
            *comm_p = g->emb;
        return DS_OK;
    case DS_GROUP_PP: {
        /* The boundary `*boundary_p` whose transfer has these bytes and layout. */
        int b = *boundary_p, to = dsi_schedule_next_stage(s, b);
        if (to < 0)
            return DS_OK;
        int from = key->pass == DS_PASS_FORWARD ? b : to,
            into = key->pass == DS_PASS_FORWARD ? to : b;
        if (dsi_p2p_boundary_bytes(model, s, (ds_dtype_t)key->dtype, to) / ctx->cp != key->dims[0])
            return DS_OK;
        l = dsi_p2p_layout(pl, from, into, me.tp, me.dp);
        if (key->ranks_per_node != l.ranks_per_node || key->nodes != l.nodes)
            return DS_OK;
        if (me.pp == b)
            *comm_p = g->pair_next;
        else if (me.pp == to)
            *comm_p = g->pair_prev;
        return DS_OK;
    }
    case DS_GROUP_EP:
    case DS_GROUP_EDP: {
        bool ep_group = key->group == DS_GROUP_EP;
        ds_comm_t *comm = ep_group ? g->ep : g->edp;
        if (comm == NULL)
            return DS_OK;
        dsi_group_kind_t kind = ep_group ? DSI_KIND_EP : DSI_KIND_EDP;
        n = dsi_group_members(pl, kind, me.pp, expert_group_index(s, me, ep_group));
        l = dsi_group_layout(pl, kind, n);
        if (dsi_key_has_layout(key, &l) && key->group_size == comm->size)
            *comm_p = comm;
        return DS_OK;
    }
    case DS_GROUP_NONE:
    case DS_GROUP_COUNT_: break;
    }
    return DS_OK;
}

/* Overlap interference (DS_COMM_FLAG_OVERLAPPED): on every member of
 * `comm` at once, a backward layer pass of this stage (repeated to last
 * about twice the collective) runs alone, then with the collective `key`
 * started before it and tested after every DS_EXEC_PROGRESS_OPS-th
 * operator, as the executor issues buckets, and waited for after it, in
 * turn.  What the collective costs the compute is the median of the
 * differences of neighbouring pairs (a burst of load falls on both of a
 * pair, or on one pair only); *seconds_p gets it on this member, not
 * clipped at 0: the few microseconds of one bucket are below the noise, and
 * a clipped estimate, added up over the iteration's buckets, would count the
 * noise as cost. */
#define OVERLAP_REPS 5

/* One timed run of `repeat` passes of kernels[0..n-1], with `call` (or NULL)
 * overlapping them: on the host clock, the call started first and tested
 * every `progress_ops`-th operator then waited for (MPI progresses only
 * inside calls); on a backend with device queues, between two marks of the
 * compute queue, the call on the data-parallel queue from the start (the
 * executor's overlapped bucket), that queue drained before the next run. */
static ds_status_t overlap_run(ds_backend_t *b, ds_kernel_t **kernels, size_t n, int repeat,
                               dsi_comm_call_t *call, int progress_ops, double *seconds_p)
{
    if (dsi_backend_queued(b)) {
        double offsets[2];
        DSI_TRY(dsi_queue_mark(b, DSI_QUEUE_COMPUTE, 0));
        if (call != NULL) {
            DSI_TRY(dsi_queue_join(b, DSI_QUEUE_COMPUTE, DSI_QUEUE_DP));
            DSI_TRY(dsi_comm_call_issue(call, DSI_QUEUE_DP));
        }
        for (int k = 0; k < repeat; k++)
            for (size_t i = 0; i < n; i++)
                DSI_TRY(ds_kernel_run(kernels[i]));
        DSI_TRY(dsi_queue_mark(b, DSI_QUEUE_COMPUTE, 1));
        DSI_TRY(dsi_queue_join(b, DSI_QUEUE_DP, DSI_QUEUE_COMPUTE));
        DSI_TRY(dsi_queue_read_marks(b, 2, offsets));
        *seconds_p = offsets[1];
        return DS_OK;
    }
    double t0 = dsi_now_s();
    if (call != NULL)
        DSI_TRY(dsi_comm_call_start(call));
    int since = 0, done = call == NULL;
    for (int k = 0; k < repeat; k++)
        for (size_t i = 0; i < n; i++) {
            DSI_TRY(ds_kernel_run(kernels[i]));
            if (!done && ++since >= progress_ops) {
                since = 0;
                DSI_TRY(dsi_comm_call_test(call, &done));
            }
        }
    if (call != NULL)
        DSI_TRY(dsi_comm_call_wait(call));
    *seconds_p = dsi_now_s() - t0;
    return DS_OK;
}

static ds_status_t measure_overlap(ds_backend_t *b, const ds_model_t *model, const ds_strategy_t *s,
                                   const dsi_shape_ctx_t *ctx, int stage, ds_comm_t *comm,
                                   const ds_event_key_t *key, double comm_s, double *seconds_p)
{
    ds_status_t status = DS_OK;
    dsi_op_t ops[DSI_MAX_LAYER_OPS];
    ds_kernel_t *kernels[DSI_MAX_LAYER_OPS];
    size_t count = 0, n = 0;
    dsi_comm_call_t *call = NULL;
    int first, layers;
    ds_strategy_chunk_layers(s, model->info.num_layers, stage, 0, &first, &layers);
    int layer = layers > 0 ? first : stage == s->pp - 1 ? DSI_PART_HEAD : DSI_PART_EMBEDDING;
    DSI_TRY(
        dsi_model_layer_ops(model, layer, ctx, DS_PASS_BACKWARD, ops, DSI_ARRAY_SIZE(ops), &count));
    for (size_t i = 0; i < count; i++) {
        if (ops[i].key.kind != DS_EVENT_COMPUTE)
            continue;
        DSI_TRY_GOTO(ds_kernel_prepare(b, &ops[i].key, &kernels[n]), status, out);
        if (n > 0) {
            int chained = 0;
            DSI_TRY_GOTO(dsi_kernel_chain(kernels[n], kernels[n - 1], &chained), status, out);
        }
        n++;
    }
    DSI_TRY_GOTO(dsi_comm_call_prepare(comm, key, DSI_CALL_ALL, 0, &call), status, out);
    int progress_ops = (int)DSI_MAX(dsi_param_int(DSI_PARAM_EXEC_PROGRESS_OPS), 1);
    /* One pass alone, to size the sequence. */
    double pass_s = 0.0;
    for (int w = 0; w < 2; w++)
        DSI_TRY_GOTO(overlap_run(b, kernels, n, 1, NULL, progress_ops, &pass_s), status, out);
    int repeat = (int)DSI_MIN(DSI_MAX(ceil(2.0 * comm_s / DSI_MAX(pass_s, 1e-6)), 1.0), 1000.0);
    double alone[OVERLAP_REPS], with[OVERLAP_REPS];
    for (int r = 0; r < 2 * OVERLAP_REPS; r++) {
        bool overlap = r % 2 == 1;
        DSI_MPI_TRY_GOTO(MPI_Barrier(comm->comm), status, out);
        DSI_TRY_GOTO(overlap_run(b, kernels, n, repeat, overlap ? call : NULL, progress_ops,
                                 &(overlap ? with : alone)[r / 2]),
                     status, out);
    }
    double diff[OVERLAP_REPS];
    for (int r = 0; r < OVERLAP_REPS; r++)
        diff[r] = with[r] - alone[r];
    qsort(diff, OVERLAP_REPS, sizeof(double), dsi_compare_double);
    *seconds_p = diff[OVERLAP_REPS / 2];
    DSI_DEBUG("overlap of %zu-byte buckets: %d passes of %.3f ms, alone %.3f ms, with %.3f ms, "
              "cost %.3f ms",
              (size_t)key->dims[0], repeat, 1e3 * pass_s, 1e3 * alone[0], 1e3 * with[0],
              1e3 * *seconds_p);
out:
    dsi_comm_call_release(call);
    for (size_t i = 0; i < n; i++)
        ds_kernel_destroy(kernels[i]);
    return status;
}

/* A data-parallel bucket as the executor runs it when buckets overlap the
 * backward: started without blocking and waited for.  MPI's non-blocking
 * collectives run algorithms of their own (Open MPI's libnbc), slower than
 * the blocking ones the generic measurement times: a 28 MB all-reduce on
 * 2 ranks of a 2-core VM took 10-11 ms started and waited for, 8-9 ms
 * blocking.  Training leaves the bucket's buffers as cold as the bytes it
 * touches between two runs of it (`window`) make them: copies of the call
 * run in turn, enough to cover that window (at most ISSUED_MAX_COPIES).
 * Each rep: a barrier, the call started and waited for; the members'
 * longest, median over the reps into *cost_p on every member. */
#define ISSUED_REPS 7
#define ISSUED_MAX_COPIES 8

static ds_status_t measure_issued(ds_comm_t *comm, const ds_event_key_t *key, double window,
                                  ds_cost_t *cost_p)
{
    ds_status_t status = DS_OK;
    dsi_comm_call_t *calls[ISSUED_MAX_COPIES] = {NULL};
    double buffers = 2.0 * (double)key->dims[0]; /* what one call sends and receives into */
    int copies = buffers > 0.0
                     ? (int)DSI_MIN(DSI_MAX(ceil(window / buffers), 1.0), (double)ISSUED_MAX_COPIES)
                     : 1;
    double mine[ISSUED_REPS], worst[ISSUED_REPS];
    ds_status_t local = DS_OK;
    for (int i = 0; i < copies && local == DS_OK; i++)
        local = dsi_comm_call_prepare(comm, key, DSI_CALL_ALL, 0, &calls[i]);
    DSI_TRY_GOTO(dsi_mpi_agree(comm->comm, local), status, out);
    /* Every copy once before the timing: its pages are touched. */
    for (int i = 0; i < copies; i++) {
        DSI_TRY_GOTO(dsi_comm_call_start(calls[i]), status, out);
        DSI_TRY_GOTO(dsi_comm_call_wait(calls[i]), status, out);
    }
    for (int r = 0; r < ISSUED_REPS; r++) {
        dsi_comm_call_t *call = calls[(r + 1) % copies]; /* not the copy run last */
        DSI_MPI_TRY_GOTO(MPI_Barrier(comm->comm), status, out);
        double t0 = dsi_now_s();
        DSI_TRY_GOTO(dsi_comm_call_start(call), status, out);
        DSI_TRY_GOTO(dsi_comm_call_wait(call), status, out);
        mine[r] = dsi_now_s() - t0;
    }
    DSI_MPI_TRY_GOTO(MPI_Allreduce(mine, worst, ISSUED_REPS, MPI_DOUBLE, MPI_MAX, comm->comm),
                     status, out);
    qsort(worst, ISSUED_REPS, sizeof(double), dsi_compare_double);
    double sum = 0.0;
    for (int r = 0; r < ISSUED_REPS; r++)
        sum += worst[r];
    memset(cost_p, 0, sizeof(*cost_p));
    cost_p->mean_s = sum / ISSUED_REPS;
    cost_p->median_s = worst[ISSUED_REPS / 2];
    cost_p->p10_s = worst[0];
    cost_p->p90_s = worst[ISSUED_REPS - 1];
    cost_p->repetitions = ISSUED_REPS;
    cost_p->provenance = DS_PROV_MEASURED;
    DSI_DEBUG("%zu-byte bucket started and waited for: %d copies, median %.3f ms",
              (size_t)key->dims[0], copies, 1e3 * cost_p->median_s);
out:
    for (int i = 0; i < copies; i++)
        dsi_comm_call_release(calls[i]);
    return status;
}

/* A cost as the five numbers it travels as between ranks (reduced with
 * MPI_MAX): mean (< 0: none), median, p10, p90, repetitions. */
static void cost_values(const ds_cost_t *c, double v[5])
{
    v[0] = c->mean_s;
    v[1] = c->median_s;
    v[2] = c->p10_s;
    v[3] = c->p90_s;
    v[4] = (double)c->repetitions;
}

static void cost_of_values(const double v[5], ds_cost_t *c)
{
    memset(c, 0, sizeof(*c));
    c->mean_s = v[0];
    c->median_s = v[1];
    c->p10_s = v[2];
    c->p90_s = v[3];
    c->repetitions = (int64_t)v[4];
    c->provenance = DS_PROV_MEASURED;
}

/* *c becomes the bucket `key` timed as issued (measure_issued) on the
 * groups with its layout; every rank gets the longest. */
static ds_status_t issued_bucket_cost(ds_backend_t *b, const ds_model_t *model,
                                      const ds_strategy_t *s, const dsi_shape_ctx_t *ctx,
                                      const dsi_groups_t *groups, dsi_placement_t *pl,
                                      ds_coords_t me, const ds_event_key_t *key, double window,
                                      ds_cost_t *c)
{
    ds_status_t status = DS_OK;
    double mine[5] = {-1.0, 0, 0, 0, 0}, all[5];
    ds_comm_t *comm = NULL;
    int boundary = 0;
    DSI_TRY(
        dsi_mpi_agree(b->comm, group_for(model, s, ctx, groups, pl, me, key, &boundary, &comm)));
    if (comm != NULL) {
        ds_cost_t issued;
        DSI_TRY(measure_issued(comm, key, window, &issued));
        cost_values(&issued, mine);
    }
    DSI_MPI_TRY_GOTO(MPI_Allreduce(mine, all, 5, MPI_DOUBLE, MPI_MAX, b->comm), status, out);
    if (all[0] >= 0.0)
        cost_of_values(all, c);
out:
    return status;
}

static ds_status_t measure_comm(ds_backend_t *b, const ds_model_t *model, const ds_strategy_t *s,
                                const ds_cluster_t *cluster, const ds_exec_cost_options_t *o,
                                const ds_event_set_t *events, ds_cost_table_t *costs)
{
    ds_status_t status = DS_OK;
    dsi_groups_t groups;
    dsi_placement_t pl;
    memset(&groups, 0, sizeof(groups));
    memset(&pl, 0, sizeof(pl));
    dsi_shape_ctx_t ctx;
    dsi_shape_ctx_init(&ctx, model, s);
    DSI_TRY_GOTO(dsi_groups_create(b, model, s, &groups), status, out);
    double window = 0.0; /* the bytes training touches between two runs of a bucket */
    DSI_TRY_GOTO(dsi_mpi_agree(b->comm, o->rotate ? reuse_window(b, model, s, &window) : DS_OK),
                 status, out);
    /* From here on, context parallelism folded into dp as the events have it. */
    ds_strategy_t folded = dsi_strategy_fold_cp(s);
    s = &folded;
    ds_coords_t me = ds_strategy_coords_of(s, b->rank);
    DSI_TRY_GOTO(dsi_placement_init(&pl, s, cluster), status, out);
    pl.cp = ctx.cp;
    for (size_t i = 0; i < ds_event_set_size(events); i++) {
        const ds_event_key_t *key = &ds_event_set_at(events, i)->key;
        if (key->kind != DS_EVENT_COMM || ds_cost_table_find(costs, key) != NULL)
            continue;
        /* Point-to-point: one boundary at a time (a rank is in two); the
         * first that has the key decides. */
        int boundaries = key->group == DS_GROUP_PP ? s->pp : 1;
        double result[5] = {-1.0, 0, 0, 0, 0}; /* mean median p10 p90 reps, max over ranks */
        for (int bnd = 0; bnd < boundaries && result[0] < 0.0; bnd++) {
            ds_comm_t *comm = NULL;
            int boundary = bnd;
            double mine[5] = {-1.0, 0, 0, 0, 0};
            /* A member that fails tells every rank before the all-reduce. */
            ds_status_t local = group_for(model, s, &ctx, &groups, &pl, me, key, &boundary, &comm);
            if (local == DS_OK && comm != NULL) {
                ds_comm_measurement_t m;
                ds_event_key_t producer;
                ds_kernel_t *kernel = NULL;
                if (o->comm_in_situ && key->group == DS_GROUP_TP &&
                    producer_of(model, s, &ctx, me.pp, key, &producer))
                    local = ds_kernel_prepare(b, &producer, &kernel);
                if (local == DS_OK && kernel != NULL)
                    local = ds_comm_measure_after(comm, key, kernel, &o->measure, &m);
                else if (local == DS_OK)
                    local = ds_comm_measure(comm, key, &o->measure, &m);
                ds_kernel_destroy(kernel);
                if (local == DS_OK)
                    cost_values(&m.cost.cost, mine);
            }
            DSI_TRY_GOTO(dsi_mpi_agree(b->comm, local), status, out);
            DSI_MPI_TRY_GOTO(MPI_Allreduce(mine, result, 5, MPI_DOUBLE, MPI_MAX, b->comm), status,
                             out);
        }
        if (result[0] < 0.0) {
            char text[256];
            ds_event_key_format(key, text, sizeof(text));
            DSI_WARN("no process group of this allocation has the layout of '%s'", text);
            continue;
        }
        ds_cost_t c;
        cost_of_values(result, &c);
        /* Buckets issued to overlap the backward: on a backend without
         * device queues their time as the executor issues them, and what
         * they cost the compute. */
        bool bucket = key->group == DS_GROUP_DP && s->overlap_grad_reduce && s->zero != 3 &&
                      (key->op == DS_COMM_ALLREDUCE || key->op == DS_COMM_REDUCE_SCATTER);
        if (bucket && !dsi_backend_queued(b) && o->issued)
            DSI_TRY_GOTO(issued_bucket_cost(b, model, s, &ctx, &groups, &pl, me, key, window, &c),
                         status, out);
        DSI_TRY_GOTO(ds_cost_table_set(costs, key, &c), status, out);
        ds_event_key_t overlapped = *key;
        overlapped.flags |= DS_COMM_FLAG_OVERLAPPED;
        if (bucket && ds_cost_table_find(costs, &overlapped) == NULL) {
            ds_event_key_t unflagged = *key;
            unflagged.flags &= (uint8_t)~DS_COMM_FLAG_OVERLAPPED;
            double mine[2] = {0.0, 0.0}, sum[2] = {0.0, 0.0}; /* seconds, members */
            ds_comm_t *comm = NULL;
            int boundary = 0;
            ds_status_t local = group_for(model, s, &ctx, &groups, &pl, me, key, &boundary, &comm);
            if (local == DS_OK && comm != NULL) {
                local =
                    measure_overlap(b, model, s, &ctx, me.pp, comm, &unflagged, c.mean_s, &mine[0]);
                mine[1] = 1.0;
            }
            DSI_TRY_GOTO(dsi_mpi_agree(b->comm, local), status, out);
            /* The members' mean (every device pays it), at least 0. */
            DSI_MPI_TRY_GOTO(MPI_Allreduce(mine, sum, 2, MPI_DOUBLE, MPI_SUM, b->comm), status,
                             out);
            if (sum[1] > 0.0) {
                ds_cost_t oc;
                memset(&oc, 0, sizeof(oc));
                oc.mean_s = oc.median_s = oc.p10_s = oc.p90_s = DSI_MAX(sum[0] / sum[1], 0.0);
                oc.repetitions = OVERLAP_REPS;
                oc.provenance = DS_PROV_MEASURED;
                DSI_TRY_GOTO(ds_cost_table_set(costs, &overlapped, &oc), status, out);
            }
        }
    }
out:
    dsi_placement_free(&pl);
    dsi_groups_destroy(&groups);
    return status;
}

ds_status_t ds_exec_measure_costs(ds_backend_t *backend, const ds_model_t *model,
                                  const ds_strategy_t *strategy, const ds_cluster_t *cluster,
                                  const ds_exec_cost_options_t *options, ds_cost_table_t *costs,
                                  ds_exec_load_t *load_p, double *speed_factors)
{
    ds_status_t status = DS_OK;
    ds_event_set_t *events = NULL;
    sums_t mine = {NULL, 0, 0}, all = {NULL, 0, 0};
    int *first = NULL;
    double *speed = NULL, *unit_times = NULL, *all_unit_times = NULL;
    size_t num_units = 0;
    ds_exec_cost_options_t defaults;
    if (options == NULL) {
        ds_exec_cost_options_init(&defaults);
        options = &defaults;
    }
    if (backend == NULL || model == NULL || strategy == NULL || cluster == NULL || costs == NULL)
        return DSI_ERROR(DS_ERR_INVALID_ARG, "ds_exec_measure_costs needs every argument");
    int cp = strategy->cp > 1 ? strategy->cp : 1;
    if ((int64_t)strategy->dp * cp * strategy->tp * strategy->pp != backend->size)
        return DSI_ERROR(DS_ERR_INVALID_ARG,
                         "strategy dp=%d cp=%d tp=%d pp=%d is not for the %d ranks measuring it",
                         strategy->dp, cp, strategy->tp, strategy->pp, backend->size);
    /* Every step a rank may fail alone is agreed on before the next collective. */
    DSI_TRY_GOTO(
        dsi_mpi_agree(backend->comm, ds_events_generate(model, strategy, cluster, &events)), status,
        out);
    dsi_load_probe_t before, after;
    double speed_before = 0.0, speed_after = 0.0;
    DSI_TRY_GOTO(dsi_mpi_agree(backend->comm, dsi_speed_probe(backend, &speed_before)), status,
                 out);
    dsi_load_probe(&before);
    /* Compute: a failure on one rank must not leave the others waiting. */
    ds_status_t local = options->compute == DS_EXEC_COSTS_OPERATOR
                            ? measure_operators(backend, events, options, costs, &mine)
                            : measure_units(backend, model, strategy, cluster, options, costs,
                                            &mine, &unit_times, &num_units);
    if (local == DS_OK)
        local = dsi_calloc((size_t)backend->size + 1, sizeof(int), &first);
    if (local == DS_OK)
        local = dsi_calloc((size_t)backend->size, sizeof(double), &speed);
    DSI_TRY_GOTO(dsi_mpi_agree(backend->comm, local), status, out);
    DSI_TRY_GOTO(share_sums(backend->comm, backend->size, &mine, &all, first), status, out);
    /* Together, every rank ran the same units: their times compare the devices. */
    bool same_work = options->compute == DS_EXEC_COSTS_LAYER && options->together;
    if (same_work) {
        local = dsi_calloc((size_t)backend->size * DSI_MAX(num_units, 1), sizeof(double),
                           &all_unit_times);
        DSI_TRY_GOTO(dsi_mpi_agree(backend->comm, local), status, out);
        DSI_MPI_TRY_GOTO(MPI_Allgather(unit_times, (int)num_units, MPI_DOUBLE, all_unit_times,
                                       (int)num_units, MPI_DOUBLE, backend->comm),
                         status, out);
        dsi_exec_speed_factors(all_unit_times, backend->size, num_units, speed);
        for (int r = 0; r < backend->size && backend->rank == 0; r++)
            DSI_DEBUG("rank %d: speed factor %.4f over %zu units", r, speed[r], num_units);
    } else {
        for (int r = 0; r < backend->size; r++)
            speed[r] = 1.0;
    }
    if (speed_factors != NULL)
        memcpy(speed_factors, speed, (size_t)backend->size * sizeof(double));
    DSI_TRY_GOTO(dsi_mpi_agree(backend->comm, set_costs(costs, &all, first, backend->size, speed)),
                 status, out);
    DSI_TRY_GOTO(dsi_mpi_agree(backend->comm, measure_comm(backend, model, strategy, cluster,
                                                           options, events, costs)),
                 status, out);
    dsi_load_probe(&after);
    DSI_TRY_GOTO(dsi_mpi_agree(backend->comm, dsi_speed_probe(backend, &speed_after)), status, out);
    if (load_p != NULL)
        DSI_TRY_GOTO(dsi_load_report(
                         backend->comm, &before, &after, DSI_MAX(speed_before, speed_after),
                         options->max_foreign > 0.0 ? options->max_foreign
                                                    : dsi_param_double(DSI_PARAM_EXEC_MAX_FOREIGN),
                         options->reference_probe_s, load_p),
                     status, out);
out:
    dsi_free(mine.v);
    dsi_free(all.v);
    dsi_free(first);
    dsi_free(speed);
    dsi_free(unit_times);
    dsi_free(all_unit_times);
    ds_event_set_destroy(events);
    return status;
}
