/*
 * One training iteration of one rank: the schedule program's actions, then
 * the iteration end, every event recorded with its start and end on the
 * aligned clock.  See exec.h for the semantics.
 *
 * On a backend with device queues (cuda) nothing here waits for the device:
 * compute is issued on the compute queue between two marks; a blocking
 * collective or a pipeline transfer goes on the communication queue once
 * compute has reached it and compute waits for it on the device (the
 * transfers of one program action as one NCCL group, as Megatron-LM batches
 * them); a data-parallel bucket goes on a queue of its own once its
 * gradients are complete, and compute waits for it at the iteration end.
 * The marks become times after the run (marks.c).
 */
#include "dsi_exec.h"

#include <string.h>

typedef struct iter {
    ds_exec_t *x;
    int it;
    int progress_ops;
    int seq[4];   /* transfers posted per direction */
    int tp_match; /* tensor-parallel calls so far */
    int cp_match; /* context-parallel exchanges so far */
    int ep_match; /* expert-parallel calls so far */
    int since_test;
    int next_issue; /* next bucket to start */
    int in_flight;
} iter_t;

static inline double now(const ds_exec_t *x)
{
    return dsi_now_s() + x->clock_offset_s;
}

/* The start or end of an event: the aligned host clock now, or on a queued
 * backend a mark recorded on `queue` (its time is known after the run). */
typedef struct point {
    double host_s;
    int32_t mark;
} point_t;

static ds_status_t point_on(iter_t *st, dsi_queue_t queue, point_t *p)
{
    ds_exec_t *x = st->x;
    p->host_s = 0.0;
    p->mark = -1;
    if (!x->queued) {
        p->host_s = now(x);
        return DS_OK;
    }
    if (x->num_marks >= (size_t)INT32_MAX)
        return DSI_ERROR(DS_ERR_UNSUPPORTED, "a run of more than %d device marks", INT32_MAX);
    DSI_TRY(dsi_queue_mark(x->backend, queue, x->num_marks));
    p->mark = (int32_t)x->num_marks++;
    return DS_OK;
}

static ds_status_t record_points(iter_t *st, dsi_xkind_t kind, const point_t *start,
                                 const point_t *end, dsi_xrec_t **rec_p);

/* A blocking call: run from the host, or on a queued backend issued on the
 * communication queue after the compute issued so far, compute waiting for
 * it on the device. */
static ds_status_t blocking_call(iter_t *st, dsi_comm_call_t *call, point_t *start, point_t *end)
{
    ds_exec_t *x = st->x;
    if (!x->queued) {
        DSI_TRY(point_on(st, DSI_QUEUE_COMPUTE, start));
        DSI_TRY(dsi_comm_call_run(call));
        return point_on(st, DSI_QUEUE_COMPUTE, end);
    }
    DSI_TRY(dsi_queue_join(x->backend, DSI_QUEUE_COMPUTE, DSI_QUEUE_COMM));
    DSI_TRY(point_on(st, DSI_QUEUE_COMM, start));
    DSI_TRY(dsi_comm_call_issue(call, DSI_QUEUE_COMM));
    DSI_TRY(point_on(st, DSI_QUEUE_COMM, end));
    return dsi_queue_join(x->backend, DSI_QUEUE_COMM, DSI_QUEUE_COMPUTE);
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
    r->mark[0] = r->mark[1] = -1;
    if (rec_p != NULL)
        *rec_p = r;
    return DS_OK;
}

static ds_status_t record_points(iter_t *st, dsi_xkind_t kind, const point_t *start,
                                 const point_t *end, dsi_xrec_t **rec_p)
{
    dsi_xrec_t *r;
    DSI_TRY(record(st, kind, start->host_s, end->host_s, &r));
    r->mark[0] = start->mark;
    r->mark[1] = end->mark;
    if (rec_p != NULL)
        *rec_p = r;
    return DS_OK;
}

/* ---- data-parallel buckets ------------------------------------------------------------------ */

/* Queued backends: bucket k on the data-parallel queue once the compute
 * issued so far (its gradients) is done; it ends at its last mark. */
static ds_status_t issue_on_dp_queue(iter_t *st, int k)
{
    ds_exec_t *x = st->x;
    point_t p0, p1;
    DSI_TRY(dsi_queue_join(x->backend, DSI_QUEUE_COMPUTE, DSI_QUEUE_DP));
    DSI_TRY(point_on(st, DSI_QUEUE_DP, &p0));
    DSI_TRY(dsi_comm_call_issue(x->buckets[k], DSI_QUEUE_DP));
    DSI_TRY(point_on(st, DSI_QUEUE_DP, &p1));
    dsi_xrec_t *r;
    DSI_TRY(record_points(st, DSI_XK_DP_OVERLAP, &p0, &p1, &r));
    r->mb = k;
    r->match = k;
    x->bucket_mark[k] = p1.mark;
    x->bucket_state[k] = 2;
    st->in_flight++;
    return DS_OK;
}

/* Starts the ready buckets in bucket order. */
static ds_status_t issue_ready(iter_t *st)
{
    ds_exec_t *x = st->x;
    while (st->next_issue < x->num_buckets && x->bucket_state[st->next_issue] == 1) {
        int k = st->next_issue++;
        if (x->queued) {
            DSI_TRY(issue_on_dp_queue(st, k));
            continue;
        }
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
    /* NCCL progresses on the device by itself. */
    if (x->queued || st->in_flight == 0 || ++st->since_test < st->progress_ops)
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

/* A context-parallel ring transfer (batched send and receive with the
 * neighbour) that Megatron-Core/TE post before the attention step after it
 * and wait for once that step is done.  The backward's last hop of the K/V
 * gradients home runs blocking: the operator after the attention needs
 * them. */
static bool ring_transfer(const dsi_xpart_t *part, int pass, int i)
{
    const dsi_xop_t *op = &part->ops[pass][i];
    return op->kernel == NULL && op->key.group == DS_GROUP_CP && op->key.op == DS_COMM_SENDRECV &&
           i + 1 < part->num_ops[pass] && part->ops[pass][i + 1].kernel != NULL &&
           part->ops[pass][i + 1].key.op == DS_OP_FLASH_ATTENTION;
}

static dsi_xkind_t pass_comm_kind(const dsi_xop_t *op)
{
    return op->key.group == DS_GROUP_CP   ? DSI_XK_CP
           : op->key.group == DS_GROUP_EP ? DSI_XK_EP
                                          : DSI_XK_TP;
}

/* The ring transfer `op` posted, the attention step `next` computed while
 * it travels, then the wait for it: three records (post, compute, wait). */
static ds_status_t run_ring_step(iter_t *st, const dsi_xop_t *op, const dsi_xop_t *next)
{
    ds_exec_t *x = st->x;
    point_t p[4];
    if (x->queued) {
        /* The transfer on the communication queue once compute reached it,
         * the step's kernel on the compute queue beside it, compute joined
         * to the transfer after: the post is an instant, the wait what the
         * transfer took beyond the step. */
        DSI_TRY(dsi_queue_join(x->backend, DSI_QUEUE_COMPUTE, DSI_QUEUE_COMM));
        DSI_TRY(dsi_comm_call_issue(op->call, DSI_QUEUE_COMM));
        DSI_TRY(point_on(st, DSI_QUEUE_COMPUTE, &p[0]));
        DSI_TRY(ds_kernel_run(next->kernel));
        DSI_TRY(point_on(st, DSI_QUEUE_COMPUTE, &p[1]));
        DSI_TRY(dsi_queue_join(x->backend, DSI_QUEUE_COMM, DSI_QUEUE_COMPUTE));
        DSI_TRY(point_on(st, DSI_QUEUE_COMPUTE, &p[2]));
        DSI_TRY(record_points(st, DSI_XK_CP_POST, &p[0], &p[0], NULL));
        DSI_TRY(record_points(st, DSI_XK_COMPUTE, &p[0], &p[1], NULL));
        return record_points(st, DSI_XK_CP, &p[1], &p[2], NULL);
    }
    DSI_TRY(point_on(st, DSI_QUEUE_COMPUTE, &p[0]));
    DSI_TRY(dsi_comm_call_start(op->call));
    DSI_TRY(point_on(st, DSI_QUEUE_COMPUTE, &p[1]));
    DSI_TRY(ds_kernel_run(next->kernel));
    DSI_TRY(point_on(st, DSI_QUEUE_COMPUTE, &p[2]));
    DSI_TRY(dsi_comm_call_wait(op->call));
    DSI_TRY(point_on(st, DSI_QUEUE_COMPUTE, &p[3]));
    DSI_TRY(record_points(st, DSI_XK_CP_POST, &p[0], &p[1], NULL));
    DSI_TRY(record_points(st, DSI_XK_COMPUTE, &p[1], &p[2], NULL));
    return record_points(st, DSI_XK_CP, &p[2], &p[3], NULL);
}

static void mark_pass_record(dsi_xrec_t *r, const dsi_action_t *a, bool fwd, int part, int op)
{
    r->fwd = (uint8_t)fwd;
    r->chunk = a->chunk;
    r->mb = a->mb;
    r->part = (int16_t)part;
    r->op = op;
}

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
            point_t p0, p1;
            int ran = 1; /* operators this step ran: the ring transfer runs the next too */
            if (ring_transfer(part, pass, i)) {
                /* Records may move while they are added: indices, not pointers. */
                size_t first = x->num_recs;
                DSI_TRY(run_ring_step(st, op, &part->ops[pass][i + 1]));
                for (int k = 0; k < 3; k++)
                    mark_pass_record(&x->recs[first + (size_t)k], a, fwd, index,
                                     part->ops[pass][k == 1 ? i + 1 : i].source);
                x->recs[first].match = x->recs[first + 2].match = st->cp_match++;
                ran = 2;
            } else {
                if (op->kernel != NULL) {
                    DSI_TRY(point_on(st, DSI_QUEUE_COMPUTE, &p0));
                    DSI_TRY(ds_kernel_run(op->kernel));
                    DSI_TRY(point_on(st, DSI_QUEUE_COMPUTE, &p1));
                } else {
                    DSI_TRY(blocking_call(st, op->call, &p0, &p1));
                }
                dsi_xkind_t kind = op->kernel != NULL ? DSI_XK_COMPUTE : pass_comm_kind(op);
                dsi_xrec_t *r;
                DSI_TRY(record_points(st, kind, &p0, &p1, &r));
                mark_pass_record(r, a, fwd, index, op->source);
                if (kind == DSI_XK_TP)
                    r->match = st->tp_match++;
                else if (kind == DSI_XK_CP)
                    r->match = st->cp_match++;
                else if (kind == DSI_XK_EP)
                    r->match = st->ep_match++;
            }
            int last = i + ran - 1;
            for (; i <= last; i++) {
                op = &part->ops[pass][i];
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
            i = last;
        }
    }
    return DS_OK;
}

static ds_status_t run_comm(iter_t *st, const dsi_action_t *a)
{
    ds_exec_t *x = st->x;
    dsi_xrec_t r;
    memset(&r, 0, sizeof(r));
    for (int i = 0; i < a->nx; i++)
        if (x->p2p[a->x[i]] == NULL)
            return DSI_ERROR(DS_ERR_INTERNAL, "stage %d posts a transfer it has no peer for",
                             x->me.pp);
    point_t p0, p1;
    if (x->queued) {
        DSI_TRY(dsi_queue_join(x->backend, DSI_QUEUE_COMPUTE, DSI_QUEUE_COMM));
        DSI_TRY(point_on(st, DSI_QUEUE_COMM, &p0));
        DSI_TRY(dsi_comm_group_start(x->backend));
        for (int i = 0; i < a->nx; i++)
            DSI_TRY(dsi_comm_call_issue(x->p2p[a->x[i]], DSI_QUEUE_COMM));
        DSI_TRY(dsi_comm_group_end(x->backend));
        DSI_TRY(point_on(st, DSI_QUEUE_COMM, &p1));
        DSI_TRY(dsi_queue_join(x->backend, DSI_QUEUE_COMM, DSI_QUEUE_COMPUTE));
    } else {
        DSI_TRY(point_on(st, DSI_QUEUE_COMPUTE, &p0));
        for (int i = 0; i < a->nx; i++)
            DSI_TRY(dsi_comm_call_start(x->p2p[a->x[i]]));
        for (int i = 0; i < a->nx; i++)
            DSI_TRY(dsi_comm_call_wait(x->p2p[a->x[i]]));
        DSI_TRY(point_on(st, DSI_QUEUE_COMPUTE, &p1));
    }
    for (int i = 0; i < a->nx; i++) {
        int dir = a->x[i];
        r.xid[i] = DSI_XID(x->p2p_boundary[dir], x->p2p_channel[dir], st->seq[dir]++);
    }
    dsi_xrec_t *rec;
    DSI_TRY(record_points(st, DSI_XK_P2P, &p0, &p1, &rec));
    rec->nx = a->nx;
    memcpy(rec->xid, r.xid, sizeof(r.xid));
    return DS_OK;
}

/* A blocking collective of the iteration end. */
static ds_status_t run_blocking(iter_t *st, dsi_xkind_t kind, dsi_comm_call_t *call, int match)
{
    point_t p0, p1;
    DSI_TRY(blocking_call(st, call, &p0, &p1));
    dsi_xrec_t *r;
    DSI_TRY(record_points(st, kind, &p0, &p1, &r));
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
        point_t p0, p1;
        DSI_TRY(point_on(st, DSI_QUEUE_COMPUTE, &p0));
        if (x->queued)
            DSI_TRY(dsi_queue_wait_mark(x->backend, DSI_QUEUE_COMPUTE, (size_t)x->bucket_mark[k]));
        else
            DSI_TRY(dsi_comm_call_wait(x->buckets[k]));
        DSI_TRY(point_on(st, DSI_QUEUE_COMPUTE, &p1));
        if (x->bucket_state[k] == 2)
            st->in_flight--;
        x->bucket_state[k] = 3;
        DSI_TRY(record_points(st, DSI_XK_DP_WAIT, &p0, &p1, &r));
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
    /* MoE: expert gradients over the EDP group (the simulator's order). */
    if (x->edp_call != NULL)
        DSI_TRY(run_blocking(st, DSI_XK_EDP, x->edp_call, 0));
    point_t p0, p1;
    DSI_TRY(point_on(st, DSI_QUEUE_COMPUTE, &p0));
    DSI_TRY(ds_kernel_run(x->optimizer));
    DSI_TRY(point_on(st, DSI_QUEUE_COMPUTE, &p1));
    DSI_TRY(record_points(st, DSI_XK_OPT, &p0, &p1, NULL));
    if (x->expert_optimizer == NULL)
        return DS_OK;
    DSI_TRY(point_on(st, DSI_QUEUE_COMPUTE, &p0));
    DSI_TRY(ds_kernel_run(x->expert_optimizer));
    DSI_TRY(point_on(st, DSI_QUEUE_COMPUTE, &p1));
    return record_points(st, DSI_XK_OPT, &p0, &p1, NULL);
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
