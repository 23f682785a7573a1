/*
 * One training iteration of one rank: the schedule program's actions, then
 * the iteration end, every event recorded with its start and end on the
 * aligned clock.  See exec.h for the semantics.
 */
#include "dsi_exec.h"

#include <string.h>

typedef struct iter {
    ds_exec_t *x;
    int it;
    int progress_ops;
    int seq[4];   /* transfers posted per direction */
    int tp_match; /* tensor-parallel calls so far */
    int since_test;
    int next_issue; /* next bucket to start */
    int in_flight;
} iter_t;

static inline double now(const ds_exec_t *x)
{
    return dsi_now_s() + x->clock_offset_s;
}

static ds_status_t record(iter_t *st, dsi_xkind_t kind, double start, double end,
                          dsi_xrec_t **rec_p)
{
    ds_exec_t *x = st->x;
    if (x->num_recs == x->cap_recs) {
        size_t cap = x->cap_recs ? 2 * x->cap_recs : 4096;
        DSI_TRY(dsi_realloc_array(&x->recs, cap, sizeof(*x->recs)));
        x->cap_recs = cap;
    }
    dsi_xrec_t *r = &x->recs[x->num_recs++];
    memset(r, 0, sizeof(*r));
    r->start_s = start;
    r->end_s = end;
    r->rank = x->rank;
    r->iteration = st->it;
    r->kind = (uint8_t)kind;
    r->mb = -1;
    r->part = -1;
    r->op = -1;
    r->chunk = -1;
    if (rec_p != NULL)
        *rec_p = r;
    return DS_OK;
}

/* ---- data-parallel buckets ------------------------------------------------------------------ */

/* Starts the ready buckets in bucket order. */
static ds_status_t issue_ready(iter_t *st)
{
    ds_exec_t *x = st->x;
    while (st->next_issue < x->num_buckets && x->bucket_state[st->next_issue] == 1) {
        int k = st->next_issue++;
        double t0 = now(x);
        DSI_TRY(dsi_comm_call_start(x->buckets[k]));
        double t1 = now(x);
        dsi_xrec_t *r;
        DSI_TRY(record(st, DSI_XK_DP_START, t0, t1, &r));
        r->mb = k;
        r->match = k;
        x->bucket_state[k] = 2;
        st->in_flight++;
    }
    return DS_OK;
}

/* A test of every bucket in flight (MPI advances them only inside calls). */
static ds_status_t progress(iter_t *st)
{
    ds_exec_t *x = st->x;
    if (st->in_flight == 0 || ++st->since_test < st->progress_ops)
        return DS_OK;
    st->since_test = 0;
    double t0 = now(x);
    for (int k = 0; k < st->next_issue; k++) {
        if (x->bucket_state[k] != 2)
            continue;
        int done = 0;
        DSI_TRY(dsi_comm_call_test(x->buckets[k], &done));
        if (done) {
            x->bucket_state[k] = 3;
            st->in_flight--;
        }
    }
    double t1 = now(x);
    dsi_xrec_t *r;
    DSI_TRY(record(st, DSI_XK_DP_TEST, t0, t1, &r));
    return DS_OK;
}

/* Gradients of `part` complete up to `pos` in reverse parameter order:
 * buckets whose end lies within are ready (the simulator's rule). */
static void buckets_ready(ds_exec_t *x, const dsi_xpart_t *part, int64_t pos)
{
    if (part->params <= 0)
        return;
    int64_t B = x->bucket, P = x->stage_params;
    for (int64_t k = part->rev / B; k < x->num_buckets && DSI_MIN((k + 1) * B, P) <= pos; k++)
        if (x->bucket_state[k] == 0)
            x->bucket_state[k] = 1;
}

/* ---- passes and transfers ---------------------------------------------------------------------
 */

static ds_status_t run_pass(iter_t *st, const dsi_action_t *a, bool sync)
{
    ds_exec_t *x = st->x;
    const dsi_xchunk_t *ch = &x->chunks[a->chunk];
    bool fwd = a->type == DSI_ACT_FWD;
    int pass = fwd ? 0 : 1;
    for (int j = 0; j < ch->num_parts; j++) {
        int index = fwd ? j : ch->num_parts - 1 - j;
        const dsi_xpart_t *part = &ch->parts[index];
        int64_t cum = 0;
        for (int i = 0; i < part->num_ops[pass]; i++) {
            const dsi_xop_t *op = &part->ops[pass][i];
            double t0 = now(x);
            if (op->kernel != NULL)
                DSI_TRY(ds_kernel_run(op->kernel));
            else
                DSI_TRY(dsi_comm_call_run(op->call));
            double t1 = now(x);
            dsi_xrec_t *r;
            DSI_TRY(record(st, op->kernel != NULL ? DSI_XK_COMPUTE : DSI_XK_TP, t0, t1, &r));
            r->fwd = (uint8_t)fwd;
            r->chunk = a->chunk;
            r->mb = a->mb;
            r->part = (int16_t)index;
            r->op = i;
            if (op->kernel == NULL)
                r->match = st->tp_match++;
            if (sync) {
                cum = DSI_MIN(cum + op->grad_params, part->params);
                if (i == part->num_ops[pass] - 1)
                    cum = part->params;
                buckets_ready(x, part, part->rev + cum);
                DSI_TRY(issue_ready(st));
            }
            if (op->kernel != NULL)
                DSI_TRY(progress(st));
        }
    }
    return DS_OK;
}

static ds_status_t run_comm(iter_t *st, const dsi_action_t *a)
{
    ds_exec_t *x = st->x;
    dsi_xrec_t r;
    memset(&r, 0, sizeof(r));
    double t0 = now(x);
    for (int i = 0; i < a->nx; i++) {
        int dir = a->x[i];
        if (x->p2p[dir] == NULL)
            return DSI_ERROR(DS_ERR_INTERNAL, "stage %d posts a transfer it has no peer for",
                             x->me.pp);
        DSI_TRY(dsi_comm_call_start(x->p2p[dir]));
        r.xid[i] = DSI_XID(x->p2p_boundary[dir], x->p2p_channel[dir], st->seq[dir]++);
    }
    for (int i = 0; i < a->nx; i++)
        DSI_TRY(dsi_comm_call_wait(x->p2p[a->x[i]]));
    double t1 = now(x);
    dsi_xrec_t *rec;
    DSI_TRY(record(st, DSI_XK_P2P, t0, t1, &rec));
    rec->nx = a->nx;
    memcpy(rec->xid, r.xid, sizeof(r.xid));
    return DS_OK;
}

/* A blocking collective of the iteration end. */
static ds_status_t run_blocking(iter_t *st, dsi_xkind_t kind, dsi_comm_call_t *call, int match)
{
    double t0 = now(st->x);
    DSI_TRY(dsi_comm_call_run(call));
    double t1 = now(st->x);
    dsi_xrec_t *r;
    DSI_TRY(record(st, kind, t0, t1, &r));
    r->match = match;
    return DS_OK;
}

static ds_status_t iteration_end(iter_t *st)
{
    ds_exec_t *x = st->x;
    const ds_strategy_t *s = &x->s;
    /* Data-parallel sync: every bucket, in order. */
    for (int k = 0; k < x->num_buckets; k++) {
        dsi_xrec_t *r;
        if (!s->overlap_grad_reduce) {
            DSI_TRY(run_blocking(st, DSI_XK_DP_WAIT, x->buckets[k], k));
            x->recs[x->num_recs - 1].mb = k;
            continue;
        }
        if (x->bucket_state[k] < 2) { /* cannot happen: every bucket filled in the backward */
            x->bucket_state[k] = 1;
            DSI_TRY(issue_ready(st));
        }
        double t0 = now(x);
        DSI_TRY(dsi_comm_call_wait(x->buckets[k]));
        double t1 = now(x);
        if (x->bucket_state[k] == 2)
            st->in_flight--;
        x->bucket_state[k] = 3;
        DSI_TRY(record(st, DSI_XK_DP_WAIT, t0, t1, &r));
        r->mb = k;
        r->match = k;
    }
    if (x->sp_call != NULL)
        DSI_TRY(run_blocking(st, DSI_XK_SP, x->sp_call, 0));
    if (x->emb_call != NULL)
        DSI_TRY(run_blocking(st, DSI_XK_EMB, x->emb_call, 0));
    if (x->mp_call != NULL) {
        int match = 0;
        if (x->ctx.dtype == DS_DTYPE_FP16)
            DSI_TRY(run_blocking(st, DSI_XK_MP, x->mp_call, match++));
        if (s->grad_clip)
            DSI_TRY(run_blocking(st, DSI_XK_MP, x->mp_call, match++));
    }
    double t0 = now(x);
    DSI_TRY(ds_kernel_run(x->optimizer));
    double t1 = now(x);
    return record(st, DSI_XK_OPT, t0, t1, NULL);
}

ds_status_t dsi_exec_iteration(ds_exec_t *x, int it, int progress_ops)
{
    iter_t st;
    memset(&st, 0, sizeof(st));
    st.x = x;
    st.it = it;
    st.progress_ops = DSI_MAX(progress_ops, 1);
    if (x->num_buckets > 0)
        memset(x->bucket_state, 0, (size_t)x->num_buckets);
    const dsi_program_t *prog = &x->program;
    for (int32_t i = 0; i < prog->count; i++) {
        const dsi_action_t *a = &prog->actions[i];
        if (a->type == DSI_ACT_COMM)
            DSI_TRY(run_comm(&st, a));
        else
            DSI_TRY(run_pass(&st, a, x->sync[i] != 0));
    }
    return iteration_end(&st);
}
