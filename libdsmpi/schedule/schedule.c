/*
 * Pipeline schedules: the order in which one pipeline rank runs its forward
 * and backward passes and posts its send/receive calls, as Megatron-Core
 * issues them (schedules.py, without overlapped P2P).
 *
 * GPipe: every forward (receive, compute, send), then every backward in
 * reverse micro-batch order.
 * 1F1B (PipeDream-flush): w = min(pp - r - 1, m) warm-up forwards with
 * single calls; one more receive; the steady state alternates a forward, a
 * batched send-forward + receive-backward, a backward and a batched
 * send-backward + receive-forward (single send on the last one); cool-down
 * runs the remaining backwards with single calls.
 * Interleaved 1F1B: virtual micro-batch k runs chunk (k mod pp*v) / pp of
 * micro-batch (k / (pp*v)) * pp + k mod pp (backward chunks reversed); warm-up
 * w = min(2 (pp - r - 1) + (v - 1) pp, m v), all of them when m == pp; the
 * last warm-up and every steady step post one batched call with up to four
 * transfers.
 */
#include "dsi_schedule.h"

#include <string.h>

static ds_status_t push(dsi_program_t *p, dsi_action_t a)
{
    if (p->count == p->cap) {
        int32_t cap = p->cap ? 2 * p->cap : 64;
        DSI_TRY(dsi_realloc_array(&p->actions, (size_t)cap, sizeof(*p->actions)));
        p->cap = cap;
    }
    p->actions[p->count++] = a;
    return DS_OK;
}

static ds_status_t compute(dsi_program_t *p, dsi_action_type_t type, int chunk, int64_t mb)
{
    dsi_action_t a;
    memset(&a, 0, sizeof(a));
    a.type = (uint8_t)type;
    a.chunk = (int16_t)chunk;
    a.mb = (int32_t)mb;
    return push(p, a);
}

/* One send/receive call with the transfers whose flags are set, in the
 * order SEND_NEXT, SEND_PREV, RECV_PREV, RECV_NEXT (sends first).  An
 * unbatched program posts each transfer as its own blocking call. */
static ds_status_t comm(dsi_program_t *p, int unbatched, int batched, bool send_next,
                        bool recv_prev, bool send_prev, bool recv_next)
{
    dsi_action_t a;
    memset(&a, 0, sizeof(a));
    a.type = DSI_ACT_COMM;
    a.batched = (uint8_t)(batched != 0 && !unbatched);
    bool want[4];
    want[DSI_SEND_NEXT] = send_next;
    want[DSI_RECV_PREV] = recv_prev;
    want[DSI_SEND_PREV] = send_prev;
    want[DSI_RECV_NEXT] = recv_next;
    static const dsi_dir_t order[4] = {DSI_SEND_NEXT, DSI_SEND_PREV, DSI_RECV_PREV, DSI_RECV_NEXT};
    for (int i = 0; i < 4; i++) {
        if (!want[order[i]])
            continue;
        if (unbatched && a.nx > 0) {
            DSI_TRY(push(p, a));
            a.nx = 0;
        }
        a.x[a.nx++] = (uint8_t)order[i];
    }
    if (a.nx == 0)
        return DS_OK;
    return push(p, a);
}

static int64_t py_mod(int64_t a, int64_t n)
{
    int64_t r = a % n;
    return r < 0 ? r + n : r;
}

static ds_status_t gpipe(dsi_program_t *p, int64_t m, int r, int pp)
{
    bool first = r == 0, last = r == pp - 1;
    for (int64_t i = 0; i < m; i++) {
        DSI_TRY(comm(p, 0, 0, false, !first, false, false));
        DSI_TRY(compute(p, DSI_ACT_FWD, 0, i));
        DSI_TRY(comm(p, 0, 0, !last, false, false, false));
    }
    for (int64_t i = m - 1; i >= 0; i--) {
        DSI_TRY(comm(p, 0, 0, false, false, false, !last));
        DSI_TRY(compute(p, DSI_ACT_BWD, 0, i));
        DSI_TRY(comm(p, 0, 0, false, false, !first, false));
    }
    return DS_OK;
}

static ds_status_t one_f_one_b(dsi_program_t *p, int64_t m, int r, int pp, int unbatched)
{
    bool first = r == 0, last = r == pp - 1;
    int64_t w = DSI_MIN((int64_t)(pp - r - 1), m), rem = m - w;
    for (int64_t i = 0; i < w; i++) {
        DSI_TRY(comm(p, 0, 0, false, !first, false, false));
        DSI_TRY(compute(p, DSI_ACT_FWD, 0, i));
        DSI_TRY(comm(p, 0, 0, !last, false, false, false));
    }
    if (rem > 0)
        DSI_TRY(comm(p, 0, 0, false, !first, false, false));
    for (int64_t i = 0; i < rem; i++) {
        DSI_TRY(compute(p, DSI_ACT_FWD, 0, w + i));
        DSI_TRY(comm(p, unbatched, 1, !last, false, false, !last)); /* send_forward_recv_backward */
        DSI_TRY(compute(p, DSI_ACT_BWD, 0, i));
        if (i == rem - 1)
            DSI_TRY(comm(p, 0, 0, false, false, !first, false)); /* send_backward */
        else
            DSI_TRY(comm(p, unbatched, 1, false, !first, !first,
                         false)); /* send_backward_recv_forward */
    }
    for (int64_t i = 0; i < w; i++) {
        DSI_TRY(comm(p, 0, 0, false, false, false, !last));
        DSI_TRY(compute(p, DSI_ACT_BWD, 0, rem + i));
        DSI_TRY(comm(p, 0, 0, false, false, !first, false));
    }
    return DS_OK;
}

static ds_status_t interleaved(dsi_program_t *p, int64_t m, int r, int pp, int v, int unbatched)
{
    bool first = r == 0, last = r == pp - 1;
    int64_t total = m * v, group = (int64_t)pp * v;
    bool all_warmup = m == pp;
    int64_t w = all_warmup ? total : DSI_MIN(2LL * (pp - r - 1) + (int64_t)(v - 1) * pp, total);
    int64_t rem = total - w;
#define CHUNK_F(k) ((int)(py_mod((k), group) / pp))
#define CHUNK_B(k) (v - 1 - CHUNK_F(k))
#define MB_OF(k) (((k) / group) * pp + (k) % pp)
    /* Receive chunk 0's input (nothing on the first virtual stage). */
    DSI_TRY(comm(p, 0, 0, false, !first, false, false));
    for (int64_t k = 0; k < w; k++) {
        int c = CHUNK_F(k);
        DSI_TRY(compute(p, DSI_ACT_FWD, c, MB_OF(k)));
        bool recv_prev = !(first && CHUNK_F(k + 1) == 0) && k != total - 1;
        bool send = !(last && c == v - 1);
        if (k == w - 1 && !all_warmup)
            DSI_TRY(comm(p, unbatched, 1, send, recv_prev, false, !last));
        else
            DSI_TRY(comm(p, unbatched, 0, send, recv_prev, false, false));
    }
    for (int64_t k = 0; k < rem; k++) {
        int64_t fk = k + w, bk = k;
        int cf = CHUNK_F(fk), cb = CHUNK_B(bk);
        DSI_TRY(compute(p, DSI_ACT_FWD, cf, MB_OF(fk)));
        DSI_TRY(compute(p, DSI_ACT_BWD, cb, MB_OF(bk)));
        bool send_next = !(last && cf == v - 1);
        bool send_prev = !(first && cb == 0);
        bool recv_prev = first ? CHUNK_F(fk - (pp - 1)) != v - 1 : true;
        bool recv_next = last ? CHUNK_B(bk - (pp - 1)) != 0 : true;
        if (k == rem - 1)
            recv_prev = false;
        DSI_TRY(comm(p, unbatched, 1, send_next, recv_prev, send_prev, recv_next));
    }
    if (all_warmup)
        DSI_TRY(comm(p, 0, 0, false, false, false, !last));
    for (int64_t k = rem; k < total; k++) {
        int cb = CHUNK_B(k);
        DSI_TRY(compute(p, DSI_ACT_BWD, cb, MB_OF(k)));
        bool recv_next = !(last && CHUNK_B(k + 1) == v - 1) && k != total - 1;
        DSI_TRY(comm(p, unbatched, 0, false, false, !(first && cb == 0), recv_next));
    }
#undef CHUNK_F
#undef CHUNK_B
#undef MB_OF
    return DS_OK;
}

ds_status_t dsi_schedule_build(const ds_strategy_t *s, int64_t m, int stage, int unbatched,
                               dsi_program_t *p)
{
    p->count = 0;
    if (m < 1 || stage < 0 || stage >= s->pp)
        return DSI_ERROR(DS_ERR_INTERNAL, "schedule of stage %d with %lld micro-batches", stage,
                         (long long)m);
    switch (s->schedule) {
    case DS_SCHEDULE_GPIPE: DSI_TRY(gpipe(p, m, stage, s->pp)); break;
    case DS_SCHEDULE_1F1B: DSI_TRY(one_f_one_b(p, m, stage, s->pp, unbatched)); break;
    case DS_SCHEDULE_INTERLEAVED:
        DSI_TRY(interleaved(p, m, stage, s->pp, s->vpp, unbatched));
        break;
    }
    /* Counts and the peak of forwards waiting for their backward. */
    int32_t live = 0;
    p->forwards = p->backwards = p->peak_inflight = 0;
    for (int32_t i = 0; i < p->count; i++) {
        if (p->actions[i].type == DSI_ACT_FWD) {
            p->forwards++;
            live++;
            if (live > p->peak_inflight)
                p->peak_inflight = live;
        } else if (p->actions[i].type == DSI_ACT_BWD) {
            p->backwards++;
            live--;
        }
    }
    int64_t expected = m * s->vpp;
    if (p->forwards != expected || p->backwards != expected)
        return DSI_ERROR(DS_ERR_INTERNAL,
                         "schedule of stage %d runs %d forwards and %d backwards (expected %lld)",
                         stage, p->forwards, p->backwards, (long long)expected);
    return DS_OK;
}

void dsi_program_free(dsi_program_t *p)
{
    dsi_free(p->actions);
    memset(p, 0, sizeof(*p));
}

int dsi_schedule_next_stage(const ds_strategy_t *s, int p)
{
    if (p < s->pp - 1)
        return p + 1;
    return s->schedule == DS_SCHEDULE_INTERLEAVED && s->pp > 1 ? 0 : -1;
}

int dsi_schedule_prev_stage(const ds_strategy_t *s, int p)
{
    if (p > 0)
        return p - 1;
    return s->schedule == DS_SCHEDULE_INTERLEAVED && s->pp > 1 ? s->pp - 1 : -1;
}
