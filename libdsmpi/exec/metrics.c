/*
 * What a run measured: every rank's records gathered on rank 0, calls
 * matched across ranks (the same collective on every member, the two ends
 * of every transfer), and the numbers exec.h defines, broadcast to every
 * rank.
 */
#include "dsi_exec.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void dsi_exec_run_free(dsi_xrun_t *run)
{
    dsi_free(run->devices);
    dsi_free(run->mbs);
    dsi_free(run->iteration_s);
    dsi_free(run->recs);
    memset(run, 0, sizeof(*run));
}

/* ---- matching calls ------------------------------------------------------------------------- */

typedef struct match_key {
    int32_t rank, kind, iteration, match;
} match_key_t;

typedef struct match_table {
    match_key_t *keys;
    int64_t *value; /* record index + 1; 0 = empty */
    size_t slots;
} match_table_t;

static size_t slot_of(const match_table_t *t, const match_key_t *k)
{
    size_t mask = t->slots - 1;
    for (size_t i = dsi_hash64(k, sizeof(*k), 17) & mask;; i = (i + 1) & mask)
        if (t->value[i] == 0 || memcmp(&t->keys[i], k, sizeof(*k)) == 0)
            return i;
}

static ds_status_t table_init(match_table_t *t, size_t entries)
{
    size_t slots = 64;
    while (slots < 2 * entries + 1)
        slots *= 2;
    t->slots = slots;
    t->keys = NULL;
    t->value = NULL;
    DSI_TRY(dsi_calloc(slots, sizeof(*t->keys), &t->keys));
    return dsi_calloc(slots, sizeof(*t->value), &t->value);
}

static void table_free(match_table_t *t)
{
    dsi_free(t->keys);
    dsi_free(t->value);
}

static void table_put(match_table_t *t, match_key_t k, size_t index)
{
    size_t i = slot_of(t, &k);
    t->keys[i] = k;
    t->value[i] = (int64_t)index + 1;
}

static const dsi_xrec_t *table_get(const match_table_t *t, const dsi_xrec_t *recs, match_key_t k)
{
    size_t i = slot_of(t, &k);
    return t->value[i] > 0 ? &recs[t->value[i] - 1] : NULL;
}

static bool is_collective(int kind)
{
    return kind == DSI_XK_TP || kind == DSI_XK_SP || kind == DSI_XK_DP_WAIT || kind == DSI_XK_EMB ||
           kind == DSI_XK_MP || kind == DSI_XK_CP || kind == DSI_XK_EP || kind == DSI_XK_EDP;
}

/* The members of the EP or EDP group of `c` under the folded `s`, in the
 * events' numbering (layout.c). */
static int expert_members(const ds_strategy_t *s, ds_coords_t c, bool ep_group, int64_t *members)
{
    int64_t etp = s->etp > 0 ? s->etp : s->tp, ep = s->ep > 0 ? s->ep : 1;
    int64_t edp = (int64_t)s->tp * s->dp / (etp * ep);
    int64_t local = c.tp + (int64_t)s->tp * c.dp;
    int64_t t = local % etp, e = local / etp % ep, d = local / (etp * ep);
    int n = 0;
    for (int64_t k = 0; k < (ep_group ? ep : edp); k++) {
        int64_t l = ep_group ? t + etp * (k + ep * d) : t + etp * (e + ep * k);
        members[n++] =
            ds_strategy_rank_of(s, (ds_coords_t){(int)(l % s->tp), (int)(l / s->tp), c.pp});
    }
    return n;
}

/* The members of the group `kind` of `rank` runs in; returns their count.
 * `s` is folded from context-parallel degree `cp`. */
static int members_of(const ds_strategy_t *s, int cp, int kind, int64_t rank, int64_t *members)
{
    ds_coords_t c = ds_strategy_coords_of(s, rank);
    int n = 0;
    switch (kind) {
    case DSI_XK_CP:
        for (int k = 0; k < cp; k++)
            members[n++] = ds_strategy_rank_of(s, (ds_coords_t){c.tp, c.dp / cp * cp + k, c.pp});
        break;
    case DSI_XK_EP:
    case DSI_XK_EDP: return expert_members(s, c, kind == DSI_XK_EP, members);
    case DSI_XK_TP:
    case DSI_XK_SP:
        for (int t = 0; t < s->tp; t++)
            members[n++] = ds_strategy_rank_of(s, (ds_coords_t){t, c.dp, c.pp});
        break;
    case DSI_XK_DP_WAIT:
        for (int d = 0; d < s->dp; d++)
            members[n++] = ds_strategy_rank_of(s, (ds_coords_t){c.tp, d, c.pp});
        break;
    case DSI_XK_EMB:
        members[n++] = ds_strategy_rank_of(s, (ds_coords_t){c.tp, c.dp, 0});
        members[n++] = ds_strategy_rank_of(s, (ds_coords_t){c.tp, c.dp, s->pp - 1});
        break;
    case DSI_XK_MP:
        for (int p = 0; p < s->pp; p++)
            for (int t = 0; t < s->tp; t++)
                members[n++] = ds_strategy_rank_of(s, (ds_coords_t){t, c.dp, p});
        break;
    default: break;
    }
    return n;
}

/* The latest entry among the calls `r` had to wait for (its own included). */
static double last_arrival(const ds_strategy_t *s, int cp, const match_table_t *t,
                           const dsi_xrec_t *recs, const dsi_xrec_t *r, int64_t *members)
{
    double last = r->start_s;
    if (r->kind == DSI_XK_P2P) {
        ds_coords_t c = ds_strategy_coords_of(s, r->rank);
        for (int i = 0; i < r->nx; i++) {
            int boundary = (r->xid[i] >> 20) / 2;
            int to = dsi_schedule_next_stage(s, boundary);
            int peer_stage = c.pp == boundary ? to : boundary;
            int64_t peer = ds_strategy_rank_of(s, (ds_coords_t){c.tp, c.dp, peer_stage});
            const dsi_xrec_t *other = table_get(
                t, recs, (match_key_t){(int32_t)peer, DSI_XK_P2P, r->iteration, r->xid[i]});
            if (other != NULL && other->start_s > last)
                last = other->start_s;
        }
        return last;
    }
    int n = members_of(s, cp, r->kind, r->rank, members);
    for (int i = 0; i < n; i++) {
        if (members[i] == r->rank)
            continue;
        const dsi_xrec_t *other =
            table_get(t, recs, (match_key_t){(int32_t)members[i], r->kind, r->iteration, r->match});
        if (other != NULL && other->start_s > last)
            last = other->start_s;
    }
    return last;
}

enum { F_COMPUTE, F_EXPOSED, F_WAIT, F_TP, F_PP, F_DP, F_OTHER, F_COUNT };

typedef struct acc {
    int W, K, total, ranks;
    double *end, *begin; /* [total] */
    double *field;       /* [(k * ranks + rank) * F_COUNT + f] for measured k */
    double *mb;          /* [((k * slots) + slot) * 4]: pass start/end per mb slot */
    size_t mb_slots;
} acc_t;

static ds_status_t acc_init(acc_t *a, const ds_strategy_t *s, int64_t microbatches, int ranks,
                            int warmup, int iterations)
{
    memset(a, 0, sizeof(*a));
    a->W = warmup;
    a->K = iterations;
    a->total = a->W + a->K;
    a->ranks = ranks;
    a->mb_slots = (size_t)s->pp * s->vpp * (size_t)microbatches;
    size_t cells = (size_t)a->K * a->ranks * F_COUNT;
    DSI_TRY(dsi_calloc((size_t)a->total, sizeof(double), &a->end));
    DSI_TRY(dsi_calloc((size_t)a->total, sizeof(double), &a->begin));
    DSI_TRY(dsi_calloc(cells, sizeof(double), &a->field));
    DSI_TRY(dsi_calloc((size_t)a->K * a->mb_slots * 4, sizeof(double), &a->mb));
    for (int k = 0; k < a->total; k++) {
        a->end[k] = -INFINITY;
        a->begin[k] = INFINITY;
    }
    for (size_t i = 0; i < (size_t)a->K * a->mb_slots * 4; i++)
        a->mb[i] = (i % 2 == 0) ? INFINITY : -INFINITY;
    return DS_OK;
}

static void acc_free(acc_t *a)
{
    dsi_free(a->end);
    dsi_free(a->begin);
    dsi_free(a->field);
    dsi_free(a->mb);
}

/* Iteration ends and begins; the matching table. */
static ds_status_t index_records(acc_t *a, const dsi_xrec_t *recs, size_t n, match_table_t *table)
{
    size_t entries = 0;
    for (size_t i = 0; i < n; i++)
        entries += recs[i].kind == DSI_XK_P2P ? recs[i].nx : is_collective(recs[i].kind);
    DSI_TRY(table_init(table, entries));
    for (size_t i = 0; i < n; i++) {
        const dsi_xrec_t *r = &recs[i];
        if (r->iteration < 0 || r->iteration >= a->total || r->rank < 0 || r->rank >= a->ranks ||
            r->kind >= DSI_XK_COUNT_ || r->nx > 4)
            return DSI_ERROR(DS_ERR_INTERNAL, "a record of iteration %d rank %d kind %d",
                             r->iteration, r->rank, r->kind);
        a->end[r->iteration] = DSI_MAX(a->end[r->iteration], r->end_s);
        a->begin[r->iteration] = DSI_MIN(a->begin[r->iteration], r->start_s);
        if (r->kind == DSI_XK_P2P)
            for (int j = 0; j < r->nx; j++)
                table_put(table, (match_key_t){r->rank, DSI_XK_P2P, r->iteration, r->xid[j]}, i);
        else if (is_collective(r->kind))
            table_put(table, (match_key_t){r->rank, r->kind, r->iteration, r->match}, i);
    }
    return DS_OK;
}

/* One record of a measured iteration into its rank's fields and, for
 * replica 0's TP rank 0, its pass's micro-batch slot. */
static void accumulate_record(acc_t *a, const ds_strategy_t *s, int cp, int64_t microbatches,
                              const match_table_t *table, const dsi_xrec_t *recs,
                              const dsi_xrec_t *r, int64_t *members)
{
    int k = r->iteration - a->W;
    double *f = &a->field[((size_t)k * a->ranks + (size_t)r->rank) * F_COUNT];
    double d = r->end_s - r->start_s;
    switch ((dsi_xkind_t)r->kind) {
    case DSI_XK_COMPUTE:
    case DSI_XK_OPT: f[F_COMPUTE] += d; break;
    case DSI_XK_DP_START:
    case DSI_XK_DP_TEST:
        f[F_EXPOSED] += d;
        f[F_DP] += d;
        break;
    case DSI_XK_CP_POST:
        f[F_EXPOSED] += d;
        f[F_OTHER] += d;
        break;
    case DSI_XK_TP:
    case DSI_XK_SP:
    case DSI_XK_P2P:
    case DSI_XK_DP_WAIT:
    case DSI_XK_EMB:
    case DSI_XK_MP:
    case DSI_XK_CP:
    case DSI_XK_EP:
    case DSI_XK_EDP: {
        double arrival = DSI_MIN(last_arrival(s, cp, table, recs, r, members), r->end_s);
        double exposed = r->end_s - arrival, wait = arrival - r->start_s;
        f[F_EXPOSED] += exposed;
        f[F_WAIT] += wait;
        int which = r->kind == DSI_XK_TP || r->kind == DSI_XK_SP ? F_TP
                    : r->kind == DSI_XK_P2P                      ? F_PP
                    : r->kind == DSI_XK_DP_WAIT                  ? F_DP
                                                                 : F_OTHER;
        f[which] += exposed;
        break;
    }
    case DSI_XK_DP_OVERLAP: /* on the data-parallel queue: its exposed part is the DP wait */
    case DSI_XK_COUNT_: break;
    }
    /* Records of a pass mark its start and end. */
    if (r->kind != DSI_XK_COMPUTE && r->kind != DSI_XK_TP && r->kind != DSI_XK_CP &&
        r->kind != DSI_XK_CP_POST && r->kind != DSI_XK_EP)
        return;
    ds_coords_t c = ds_strategy_coords_of(s, r->rank);
    if (c.dp != 0 || c.tp != 0 || r->mb < 0 || r->mb >= microbatches)
        return;
    size_t slot = ((size_t)c.pp * s->vpp + (size_t)r->chunk) * (size_t)microbatches + (size_t)r->mb;
    double *m4 = &a->mb[((size_t)k * a->mb_slots + slot) * 4 + (r->fwd ? 0 : 2)];
    m4[0] = DSI_MIN(m4[0], r->start_s - a->begin[r->iteration]);
    m4[1] = DSI_MAX(m4[1], r->end_s - a->begin[r->iteration]);
}

/* Per device: medians over the measured iterations. */
static void summarise_devices(const acc_t *a, const ds_strategy_t *s, double *scratch,
                              dsi_xrun_t *run)
{
    ds_exec_summary_t *sum = &run->summary;
    for (int rank = 0; rank < a->ranks; rank++) {
        ds_exec_device_t *dev = &run->devices[rank];
        dev->rank = rank;
        dev->coords = ds_strategy_coords_of(s, rank);
        double med[F_COUNT + 2];
        for (int f = 0; f < F_COUNT + 2; f++) {
            for (int k = 0; k < a->K; k++) {
                const double *v = &a->field[((size_t)k * a->ranks + (size_t)rank) * F_COUNT];
                double T = run->iteration_s[k];
                scratch[k] = f < F_COUNT    ? v[f]
                             : f == F_COUNT ? T - v[F_COMPUTE] - v[F_EXPOSED] /* idle */
                                            : v[F_COMPUTE] + v[F_EXPOSED];    /* busy */
            }
            med[f] = dsi_median(scratch, (size_t)a->K);
        }
        dev->compute_s = med[F_COMPUTE];
        dev->comm_exposed_s = med[F_EXPOSED];
        dev->wait_s = med[F_WAIT];
        dev->tp_s = med[F_TP];
        dev->pp_s = med[F_PP];
        dev->dp_s = med[F_DP];
        dev->other_s = med[F_OTHER];
        dev->idle_s = DSI_MAX(med[F_COUNT], 0.0);
        dev->busy_s = med[F_COUNT + 1];
        sum->compute_s += dev->compute_s / a->ranks;
        sum->comm_exposed_s += dev->comm_exposed_s / a->ranks;
        sum->wait_s += dev->wait_s / a->ranks;
        sum->idle_s += dev->idle_s / a->ranks;
        sum->busy_s += dev->busy_s / a->ranks;
    }
    sum->bubble_fraction = sum->iteration_s > 0 ? sum->idle_s / sum->iteration_s : 0.0;
}

/* Per micro-batch slot: medians over the measured iterations. */
static void summarise_microbatches(const acc_t *a, const ds_strategy_t *s, int64_t microbatches,
                                   double *scratch, dsi_xrun_t *run)
{
    for (size_t slot = 0; slot < a->mb_slots; slot++) {
        ds_exec_microbatch_t *mb = &run->mbs[slot];
        mb->microbatch = (int)(slot % (size_t)microbatches);
        mb->chunk = (int)(slot / (size_t)microbatches % (size_t)s->vpp);
        mb->stage = (int)(slot / (size_t)microbatches / (size_t)s->vpp);
        double *out4[4] = {&mb->fwd_start_s, &mb->fwd_end_s, &mb->bwd_start_s, &mb->bwd_end_s};
        for (int j = 0; j < 4; j++) {
            for (int k = 0; k < a->K; k++) {
                double v = a->mb[((size_t)k * a->mb_slots + slot) * 4 + (size_t)j];
                scratch[k] = isfinite(v) ? v : 0.0;
            }
            *out4[j] = dsi_median(scratch, (size_t)a->K);
        }
    }
}

ds_status_t dsi_exec_compute_run(const ds_strategy_t *s, int cp, int64_t microbatches, int ranks,
                                 int warmup, int iterations, const dsi_xrec_t *recs, size_t n,
                                 dsi_xrun_t *run)
{
    ds_status_t status = DS_OK;
    acc_t a;
    memset(&a, 0, sizeof(a));
    match_table_t table = {NULL, NULL, 0};
    int64_t *members = NULL;
    double *scratch = NULL;
    if (warmup < 1 || iterations < 1 || ranks < 1 || microbatches < 1)
        return DSI_ERROR(DS_ERR_INVALID_ARG, "run of %d + %d iterations on %d ranks", warmup,
                         iterations, ranks);
    DSI_TRY_GOTO(acc_init(&a, s, microbatches, ranks, warmup, iterations), status, out);
    DSI_TRY_GOTO(dsi_calloc((size_t)DSI_MAX(ranks, 2), sizeof(*members), &members), status, out);
    DSI_TRY_GOTO(dsi_calloc((size_t)DSI_MAX(a.K, ranks) + 1, sizeof(double), &scratch), status,
                 out);
    DSI_TRY_GOTO(index_records(&a, recs, n, &table), status, out);
    for (size_t i = 0; i < n; i++)
        if (recs[i].iteration >= a.W)
            accumulate_record(&a, s, cp, microbatches, &table, recs, &recs[i], members);

    /* Iteration times. */
    DSI_TRY_GOTO(dsi_calloc((size_t)a.K, sizeof(double), &run->iteration_s), status, out);
    for (int k = 0; k < a.K; k++) {
        run->iteration_s[k] = a.end[a.W + k] - a.end[a.W + k - 1];
        scratch[k] = run->iteration_s[k];
    }
    ds_exec_summary_t *sum = &run->summary;
    sum->iteration_s = dsi_median(scratch, (size_t)a.K); /* sorts scratch */
    sum->iteration_min_s = scratch[0];
    sum->iteration_max_s = scratch[a.K - 1];
    sum->microbatches = microbatches;
    sum->warmup = a.W;
    sum->iterations = a.K;

    DSI_TRY_GOTO(dsi_calloc((size_t)a.ranks, sizeof(*run->devices), &run->devices), status, out);
    summarise_devices(&a, s, scratch, run);
    DSI_TRY_GOTO(dsi_calloc(a.mb_slots ? a.mb_slots : 1, sizeof(*run->mbs), &run->mbs), status,
                 out);
    summarise_microbatches(&a, s, microbatches, scratch, run);
out:
    acc_free(&a);
    dsi_free(members);
    dsi_free(scratch);
    table_free(&table);
    return status;
}

/* ---- gather and broadcast ------------------------------------------------------------------- */

ds_status_t dsi_exec_finish_run(ds_exec_t *x, const ds_exec_options_t *o,
                                const ds_exec_load_t *load, double wall_s, dsi_xrun_t *run)
{
    ds_status_t status = DS_OK;
    int *counts = NULL, *displs = NULL;
    dsi_xrec_t *all = NULL;
    size_t total = 0;
    /* The clocks again: the larger error bound of the two estimates is kept. */
    DSI_TRY(dsi_comm_align_clocks(x->groups.world));
    double error = 0.0;
    (void)dsi_comm_clock_offset(x->groups.world, &error);
    int bytes = (int)DSI_MIN(x->num_recs * sizeof(dsi_xrec_t), (size_t)INT32_MAX);
    if (x->num_recs * sizeof(dsi_xrec_t) > (size_t)INT32_MAX)
        return DSI_ERROR(DS_ERR_UNSUPPORTED,
                         "%zu events on one rank are more than the executor gathers; run fewer "
                         "iterations",
                         x->num_recs);
    if (x->rank == 0) {
        DSI_TRY_GOTO(dsi_calloc((size_t)x->size, sizeof(int), &counts), status, out);
        DSI_TRY_GOTO(dsi_calloc((size_t)x->size, sizeof(int), &displs), status, out);
    }
    DSI_MPI_TRY_GOTO(MPI_Gather(&bytes, 1, MPI_INT, counts, 1, MPI_INT, 0, x->comm), status, out);
    ds_status_t local = DS_OK;
    if (x->rank == 0) {
        int64_t sum = 0;
        for (int r = 0; r < x->size; r++) {
            displs[r] = (int)sum;
            sum += counts[r];
        }
        if (sum > INT32_MAX)
            local = DSI_ERROR(DS_ERR_UNSUPPORTED,
                              "%lld bytes of events are more than the executor gathers; run fewer "
                              "iterations",
                              (long long)sum);
        else
            local = dsi_malloc((size_t)DSI_MAX(sum, 1), &all);
        total = (size_t)sum / sizeof(dsi_xrec_t);
    }
    int failed = local != DS_OK;
    DSI_MPI_TRY_GOTO(MPI_Bcast(&failed, 1, MPI_INT, 0, x->comm), status, out);
    if (failed) {
        status = x->rank == 0 ? local : DSI_ERROR(DS_ERR_NO_MEMORY, "rank 0 could not gather");
        goto out;
    }
    DSI_MPI_TRY_GOTO(
        MPI_Gatherv(x->recs, bytes, MPI_BYTE, all, counts, displs, MPI_BYTE, 0, x->comm), status,
        out);
    if (x->rank == 0)
        local = dsi_exec_compute_run(&x->s, x->cp, x->m, x->size, o->warmup, o->iterations, all,
                                     total, run);
    failed = local != DS_OK;
    DSI_MPI_TRY_GOTO(MPI_Bcast(&failed, 1, MPI_INT, 0, x->comm), status, out);
    if (failed) {
        status = x->rank == 0 ? local : DSI_ERROR(DS_ERR_INTERNAL, "rank 0 failed on the records");
        goto out;
    }
    /* Results to every rank. */
    size_t mb_slots = (size_t)x->s.pp * x->s.vpp * (size_t)x->m;
    if (x->rank != 0) {
        DSI_TRY_GOTO(dsi_calloc((size_t)o->iterations, sizeof(double), &run->iteration_s), status,
                     out);
        DSI_TRY_GOTO(dsi_calloc((size_t)x->size, sizeof(*run->devices), &run->devices), status,
                     out);
        DSI_TRY_GOTO(dsi_calloc(mb_slots ? mb_slots : 1, sizeof(*run->mbs), &run->mbs), status,
                     out);
    }
    DSI_MPI_TRY_GOTO(MPI_Bcast(&run->summary, (int)sizeof(run->summary), MPI_BYTE, 0, x->comm),
                     status, out);
    DSI_MPI_TRY_GOTO(MPI_Bcast(run->iteration_s, o->iterations, MPI_DOUBLE, 0, x->comm), status,
                     out);
    DSI_MPI_TRY_GOTO(MPI_Bcast(run->devices, (int)(sizeof(*run->devices) * (size_t)x->size),
                               MPI_BYTE, 0, x->comm),
                     status, out);
    DSI_MPI_TRY_GOTO(MPI_Bcast(run->mbs, (int)(sizeof(*run->mbs) * mb_slots), MPI_BYTE, 0, x->comm),
                     status, out);
    ds_exec_summary_t *sum = &run->summary;
    sum->load = *load;
    sum->clock_error_s = DSI_MAX(DSI_MAX(x->clock_error_s, error), x->anchor_error_s);
    sum->wall_s = wall_s;
    if (x->rank == 0) {
        run->recs = all;
        run->num_recs = total;
        all = NULL;
    }
out:
    dsi_free(counts);
    dsi_free(displs);
    dsi_free(all);
    return status;
}

/* ---- accessors ---------------------------------------------------------------------------------
 */

ds_status_t ds_exec_get_summary(const ds_exec_t *exec, size_t run, ds_exec_summary_t *summary_p)
{
    if (run >= exec->num_runs)
        return DSI_ERROR(DS_ERR_INVALID_ARG, "run %zu (accepted: below %zu)", run, exec->num_runs);
    *summary_p = exec->runs[run].summary;
    return DS_OK;
}

ds_status_t ds_exec_device_at(const ds_exec_t *exec, size_t run, int64_t rank,
                              ds_exec_device_t *device_p)
{
    if (run >= exec->num_runs || rank < 0 || rank >= exec->size)
        return DSI_ERROR(DS_ERR_INVALID_ARG, "run %zu rank %lld (accepted: below %zu and %d)", run,
                         (long long)rank, exec->num_runs, exec->size);
    *device_p = exec->runs[run].devices[rank];
    return DS_OK;
}

size_t ds_exec_microbatch_count(const ds_exec_t *exec)
{
    return (size_t)exec->s.pp * exec->s.vpp * (size_t)exec->m;
}

ds_status_t ds_exec_microbatch_at(const ds_exec_t *exec, size_t run, size_t index,
                                  ds_exec_microbatch_t *mb_p)
{
    if (run >= exec->num_runs || index >= ds_exec_microbatch_count(exec))
        return DSI_ERROR(DS_ERR_INVALID_ARG,
                         "run %zu micro-batch entry %zu (accepted: below %zu "
                         "and %zu)",
                         run, index, exec->num_runs, ds_exec_microbatch_count(exec));
    *mb_p = exec->runs[run].mbs[index];
    return DS_OK;
}
