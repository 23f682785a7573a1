/* The executor's metrics from synthetic records: iteration time (end minus
 * end), compute, exposed communication and waiting split at the last
 * member's arrival (collectives matched by number, transfers by their two
 * ends), idle and busy time, micro-batch pass times. */
#include "check.h"

#include "exec/dsi_exec.h"

#include <stdlib.h>

typedef struct recs {
    dsi_xrec_t v[256];
    size_t n;
} recs_t;

static dsi_xrec_t *add(recs_t *r, int rank, int it, dsi_xkind_t kind, double a, double b)
{
    dsi_xrec_t *e = &r->v[r->n++];
    memset(e, 0, sizeof(*e));
    e->rank = rank;
    e->iteration = it;
    e->kind = (uint8_t)kind;
    e->start_s = 10.0 * it + a;
    e->end_s = 10.0 * it + b;
    e->mb = -1;
    e->chunk = 0;
    return e;
}

static dsi_xrec_t *pass(recs_t *r, int rank, int it, bool fwd, dsi_xkind_t kind, double a, double b)
{
    dsi_xrec_t *e = add(r, rank, it, kind, a, b);
    e->fwd = fwd;
    e->mb = 0;
    return e;
}

static void strategy(ds_strategy_t *s, const char *text, int64_t gbs)
{
    ds_strategy_init(s);
    CHECK_OK(ds_strategy_parse(text, s));
    s->gbs = gbs;
}

/* tp=2: one collective per iteration; rank 1 arrives 0.5 s late. */
static void test_tensor_parallel(void)
{
    ds_strategy_t s;
    strategy(&s, "dp=1,tp=2,pp=1,mbs=1", 1);
    recs_t r;
    r.n = 0;
    for (int it = 0; it < 3; it++) {
        pass(&r, 0, it, true, DSI_XK_COMPUTE, 0.0, 2.0);
        pass(&r, 0, it, true, DSI_XK_TP, 2.0, 3.0);
        pass(&r, 0, it, false, DSI_XK_COMPUTE, 3.0, 5.0);
        add(&r, 0, it, DSI_XK_OPT, 5.0, 6.0);
        pass(&r, 1, it, true, DSI_XK_COMPUTE, 0.0, 2.5);
        pass(&r, 1, it, true, DSI_XK_TP, 2.5, 3.0);
        pass(&r, 1, it, false, DSI_XK_COMPUTE, 3.0, 5.2);
        add(&r, 1, it, DSI_XK_OPT, 5.2, 6.1);
    }
    dsi_xrun_t run;
    memset(&run, 0, sizeof(run));
    CHECK_OK(dsi_exec_compute_run(&s, 1, 1, 2, 1, 2, r.v, r.n, &run));
    CHECK_NEAR(run.summary.iteration_s, 10.0, 1e-9);
    CHECK_NEAR(run.iteration_s[0], 10.0, 1e-9);
    const ds_exec_device_t *d0 = &run.devices[0], *d1 = &run.devices[1];
    CHECK_NEAR(d0->compute_s, 5.0, 1e-9);
    CHECK_NEAR(d0->comm_exposed_s, 0.5, 1e-9);
    CHECK_NEAR(d0->tp_s, 0.5, 1e-9);
    CHECK_NEAR(d0->wait_s, 0.5, 1e-9);
    CHECK_NEAR(d0->idle_s, 4.5, 1e-9);
    CHECK_NEAR(d0->busy_s, 5.5, 1e-9);
    CHECK_NEAR(d1->compute_s, 5.6, 1e-9);
    CHECK_NEAR(d1->comm_exposed_s, 0.5, 1e-9);
    CHECK_NEAR(d1->wait_s + 1.0, 1.0, 1e-9);
    CHECK_NEAR(d1->idle_s, 3.9, 1e-9);
    CHECK_NEAR(run.summary.bubble_fraction, (4.5 + 3.9) / 2.0 / 10.0, 1e-9);
    /* Replica 0, TP rank 0: the forward pass holds the collective. */
    CHECK_NEAR(run.mbs[0].fwd_start_s, 0.0, 1e-9);
    CHECK_NEAR(run.mbs[0].fwd_end_s, 3.0, 1e-9);
    CHECK_NEAR(run.mbs[0].bwd_start_s, 3.0, 1e-9);
    CHECK_NEAR(run.mbs[0].bwd_end_s, 5.0, 1e-9);
    dsi_exec_run_free(&run);
}

/* pp=2, one micro-batch: transfers matched by their two ends, the gradient
 * norm all-reduce over both stages. */
static void test_pipeline(void)
{
    ds_strategy_t s;
    strategy(&s, "dp=1,tp=1,pp=2,mbs=1,schedule=1f1b", 1);
    recs_t r;
    r.n = 0;
    int32_t act = DSI_XID(0, 0, 0), grad = DSI_XID(0, 1, 0);
    for (int it = 0; it < 3; it++) {
        pass(&r, 0, it, true, DSI_XK_COMPUTE, 0.0, 1.0);
        dsi_xrec_t *e = add(&r, 0, it, DSI_XK_P2P, 1.0, 1.5);
        e->nx = 1;
        e->xid[0] = act;
        e = add(&r, 0, it, DSI_XK_P2P, 1.5, 4.0);
        e->nx = 1;
        e->xid[0] = grad;
        pass(&r, 0, it, false, DSI_XK_COMPUTE, 4.0, 5.0);
        add(&r, 0, it, DSI_XK_MP, 5.0, 5.2);
        add(&r, 0, it, DSI_XK_OPT, 5.2, 5.5);

        e = add(&r, 1, it, DSI_XK_P2P, 0.2, 1.5);
        e->nx = 1;
        e->xid[0] = act;
        pass(&r, 1, it, true, DSI_XK_COMPUTE, 1.5, 2.5);
        pass(&r, 1, it, false, DSI_XK_COMPUTE, 2.5, 3.5);
        e = add(&r, 1, it, DSI_XK_P2P, 3.5, 4.0);
        e->nx = 1;
        e->xid[0] = grad;
        add(&r, 1, it, DSI_XK_MP, 4.0, 5.2);
        add(&r, 1, it, DSI_XK_OPT, 5.2, 5.6);
    }
    dsi_xrun_t run;
    memset(&run, 0, sizeof(run));
    CHECK_OK(dsi_exec_compute_run(&s, 1, 1, 2, 1, 2, r.v, r.n, &run));
    CHECK_NEAR(run.summary.iteration_s, 10.0, 1e-9);
    const ds_exec_device_t *d0 = &run.devices[0], *d1 = &run.devices[1];
    /* Rank 0: send 0.5 exposed (the receiver was there), gradient 0.5
     * exposed after 2.0 of waiting for its sender, all-reduce 0.2. */
    CHECK_NEAR(d0->pp_s, 1.0, 1e-9);
    CHECK_NEAR(d0->other_s, 0.2, 1e-9);
    CHECK_NEAR(d0->wait_s, 2.0, 1e-9);
    CHECK_NEAR(d0->compute_s, 2.3, 1e-9);
    CHECK_NEAR(d0->idle_s, 10.0 - 2.3 - 1.2, 1e-9);
    /* Rank 1: 0.8 waiting for the activation, 1.0 for the all-reduce. */
    CHECK_NEAR(d1->pp_s, 1.0, 1e-9);
    CHECK_NEAR(d1->wait_s, 1.8, 1e-9);
    CHECK_NEAR(d1->other_s, 0.2, 1e-9);
    CHECK_NEAR(d1->compute_s, 2.4, 1e-9);
    /* Stage 1's pass times, from the iteration's first event (0.0). */
    CHECK_NEAR(run.mbs[1].fwd_start_s, 1.5, 1e-9);
    CHECK_NEAR(run.mbs[1].bwd_end_s, 3.5, 1e-9);
    CHECK_NEAR(run.mbs[0].bwd_start_s, 4.0, 1e-9);
    dsi_exec_run_free(&run);
}

/* Bad input is refused, not read out of bounds. */
static void test_bad_records(void)
{
    ds_strategy_t s;
    strategy(&s, "dp=2,tp=1,pp=1,mbs=1", 2);
    recs_t r;
    r.n = 0;
    add(&r, 5, 0, DSI_XK_COMPUTE, 0.0, 1.0); /* rank 5 of 2 */
    dsi_xrun_t run;
    memset(&run, 0, sizeof(run));
    CHECK_FAILS(dsi_exec_compute_run(&s, 1, 1, 2, 1, 1, r.v, r.n, &run), DS_ERR_INTERNAL, "rank 5");
    dsi_exec_run_free(&run);
    CHECK_FAILS(dsi_exec_compute_run(&s, 1, 1, 2, 0, 1, r.v, 0, &run), DS_ERR_INVALID_ARG, "0 + 1");
}

/* Device marks onto the host clock: the anchors' rate corrects the device
 * clock's drift; a rate no oscillator has (an anchor seen late) is not used. */
static void test_device_marks(void)
{
    const double offsets[4] = {0.0, 0.25, 1.0, 2.0};
    double host[4];
    /* The device clock runs 1e-4 slow: 2 s of it are 2.0002 s of the host's. */
    dsi_exec_marks_to_host(100.0, 102.0002, 2.0, offsets, 4, host);
    CHECK_NEAR(host[0], 100.0, 0.0);
    CHECK_NEAR(host[1], 100.0 + 0.25 * 1.0001, 1e-12);
    CHECK_NEAR(host[2], 101.0001, 1e-12);
    CHECK_NEAR(host[3], 102.0002, 1e-12);
    /* The second anchor seen 5 ms late: rate 1, times from the first anchor. */
    dsi_exec_marks_to_host(100.0, 102.005, 2.0, offsets, 4, host);
    CHECK_NEAR(host[2], 101.0, 1e-12);
    CHECK_NEAR(host[3], 102.0, 1e-12);
    /* No distance between the anchors: rate 1. */
    dsi_exec_marks_to_host(7.0, 7.0, 0.0, offsets, 2, host);
    CHECK_NEAR(host[1], 7.25, 1e-12);
}

/* Queued backends: a bucket's all-reduce on its own queue overlaps the
 * backward and is not exposed; the compute queue's wait for it is. */
static void test_overlapped_bucket(void)
{
    ds_strategy_t s;
    strategy(&s, "dp=2,tp=1,pp=1,mbs=1", 2);
    recs_t r;
    r.n = 0;
    for (int it = 0; it < 3; it++)
        for (int rank = 0; rank < 2; rank++) {
            pass(&r, rank, it, false, DSI_XK_COMPUTE, 0.0, 4.0);
            dsi_xrec_t *b = add(&r, rank, it, DSI_XK_DP_OVERLAP, 2.0, 4.5);
            b->mb = 0;
            /* Rank 1 reaches the wait 0.2 s after rank 0; the bucket ends at 4.5. */
            dsi_xrec_t *w = add(&r, rank, it, DSI_XK_DP_WAIT, 4.0 + 0.2 * rank, 4.5);
            w->mb = 0;
            add(&r, rank, it, DSI_XK_OPT, 4.5, 5.0);
        }
    dsi_xrun_t run;
    memset(&run, 0, sizeof(run));
    CHECK_OK(dsi_exec_compute_run(&s, 1, 1, 2, 1, 2, r.v, r.n, &run));
    CHECK_NEAR(run.summary.iteration_s, 10.0, 1e-9);
    /* Exposed: from the last member's arrival at the wait (4.2) to its end. */
    CHECK_NEAR(run.devices[0].comm_exposed_s, 0.3, 1e-9);
    CHECK_NEAR(run.devices[0].dp_s, 0.3, 1e-9);
    CHECK_NEAR(run.devices[0].wait_s, 0.2, 1e-9);
    CHECK_NEAR(run.devices[1].comm_exposed_s, 0.3, 1e-9);
    CHECK_NEAR(run.devices[0].compute_s, 4.5, 1e-9);
    dsi_exec_run_free(&run);
}

/* Costs measured by two ranks: one unit (or key) measured 5x slower on one
 * rank does not make that rank, or the key, slower. */
static void test_robust_costs(void)
{
    /* 5 units; rank 1 is 10% slower on all but unit 2 (5x, a third of the time). */
    const double base[5] = {2.0, 1.0, 3.0, 2.0, 1.0};
    double times[10], factors[2];
    for (int u = 0; u < 5; u++) {
        times[u] = base[u];
        times[5 + u] = (u == 2 ? 5.0 : 1.1) * base[u];
    }
    dsi_exec_speed_factors(times, 2, 5, factors);
    CHECK_NEAR(factors[0], 1.0 / 1.05, 1e-12);
    CHECK_NEAR(factors[1], 1.1 / 1.05, 1e-12);
    /* A unit one rank did not measure is not compared. */
    times[5 + 2] = 0.0;
    times[1] = 0.0;
    dsi_exec_speed_factors(times, 2, 5, factors);
    CHECK_NEAR(factors[1] / factors[0], 1.1, 1e-12);
    /* One rank, or no common unit: 1. */
    dsi_exec_speed_factors(times, 1, 5, factors);
    CHECK_NEAR(factors[0], 1.0, 0.0);
    double none[4] = {1.0, 0.0, 0.0, 1.0};
    dsi_exec_speed_factors(none, 2, 2, factors);
    CHECK_NEAR(factors[0] + factors[1], 2.0, 0.0);

    int kept = 0;
    CHECK_NEAR(dsi_exec_combine((const double[]){1.0, 1.2}, 2, &kept), 1.1, 1e-12);
    CHECK_INT(kept, 2);
    CHECK_NEAR(dsi_exec_combine((const double[]){5.0, 1.0}, 2, &kept), 1.0, 1e-12);
    CHECK_INT(kept, 1);
    CHECK_NEAR(dsi_exec_combine((const double[]){1.0, 1.4, 1.6, 9.0}, 4, &kept), 1.2, 1e-12);
    CHECK_INT(kept, 2);
    CHECK_NEAR(dsi_exec_combine((const double[]){0.25}, 1, &kept), 0.25, 0.0);
    CHECK_INT(kept, 1);
}

int main(void)
{
    test_robust_costs();
    test_tensor_parallel();
    test_pipeline();
    test_bad_records();
    test_device_marks();
    test_overlapped_bucket();
    return check_summary("test_exec_metrics");
}
