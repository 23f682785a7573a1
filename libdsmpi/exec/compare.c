/*
 * Predicted against measured: the formulas of exec.h ("Comparison with a
 * prediction").
 */
#include "dsi_exec.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Measured value, spread and error of `predicted` against values v[0..n-1]. */
static ds_exec_figure_t figure(double predicted, double *v, size_t n)
{
    ds_exec_figure_t f;
    memset(&f, 0, sizeof(f));
    f.predicted = predicted;
    if (n == 0)
        return f;
    f.measured = dsi_median(v, n); /* sorts v */
    f.spread = f.measured != 0.0 ? (v[n - 1] - v[0]) / fabs(f.measured) : 0.0;
    f.error = f.measured != 0.0 ? (predicted - f.measured) / f.measured : 0.0;
    f.within_noise = fabs(f.error) <= f.spread;
    return f;
}

void ds_exec_comparison_free(ds_exec_comparison_t *c)
{
    if (c == NULL)
        return;
    dsi_free(c->devices);
    dsi_free(c->stages);
    dsi_free(c);
}

/* Index of (stage, chunk, mb) in the executor's micro-batch entries. */
static size_t mb_index(const ds_exec_t *x, int stage, int chunk, int mb)
{
    return ((size_t)stage * x->s.vpp + (size_t)chunk) * (size_t)x->m + (size_t)mb;
}

/* The runs compared (the quiet ones, or all when none is) and a buffer of
 * one value per run. */
typedef struct runs_used {
    const ds_exec_t *x;
    size_t *use;
    size_t n;
    double *v;
} runs_used_t;

/* v[i] = expr for every run used (`run` names the run in expr). */
#define GATHER(r, expr)                                                                            \
    for (size_t i = 0; i < (r)->n; i++) {                                                          \
        const dsi_xrun_t *run = &(r)->x->runs[(r)->use[i]];                                        \
        (void)run;                                                                                 \
        (r)->v[i] = (expr);                                                                        \
    }

static void choose_runs(runs_used_t *r, ds_exec_comparison_t *c)
{
    const ds_exec_t *x = r->x;
    r->n = 0;
    for (size_t k = 0; k < x->num_runs; k++) {
        if (x->runs[k].summary.load.noisy)
            c->noisy_runs++;
        else
            r->use[r->n++] = k;
    }
    if (r->n == 0)
        for (size_t k = 0; k < x->num_runs; k++)
            r->use[r->n++] = k;
    c->runs = r->n;
    for (size_t i = 0; i < r->n; i++) {
        const ds_exec_load_t *l = &x->runs[r->use[i]].summary.load;
        c->load.foreign_cpu = DSI_MAX(c->load.foreign_cpu, l->foreign_cpu);
        c->load.steal = DSI_MAX(c->load.steal, l->steal);
        c->load.loadavg_1m = DSI_MAX(c->load.loadavg_1m, l->loadavg_1m);
        c->load.noisy |= l->noisy;
        c->load.probe_s = DSI_MAX(c->load.probe_s, l->probe_s);
        c->load.pinned = i == 0 ? l->pinned : c->load.pinned && l->pinned;
    }
}

static ds_status_t compare_devices(runs_used_t *r, const ds_sim_t *sim, ds_exec_comparison_t *c)
{
    const ds_exec_t *x = r->x;
    c->num_devices = (size_t)x->size;
    DSI_TRY(dsi_calloc(c->num_devices, sizeof(*c->devices), &c->devices));
    for (int rank = 0; rank < x->size; rank++) {
        ds_sim_device_t d;
        DSI_TRY(ds_sim_device_of_rank(sim, rank, &d));
        ds_exec_device_figures_t *f = &c->devices[rank];
        f->rank = rank;
        f->coords = ds_strategy_coords_of(&x->s, rank);
        GATHER(r, run->devices[rank].busy_s);
        f->busy = figure(d.compute_s + d.comm_exposed_s, r->v, r->n);
        GATHER(r, run->devices[rank].compute_s);
        f->compute = figure(d.compute_s, r->v, r->n);
        GATHER(r, run->devices[rank].idle_s);
        f->idle = figure(d.idle_s, r->v, r->n);
        GATHER(r, run->devices[rank].comm_exposed_s);
        f->exposed = figure(d.comm_exposed_s, r->v, r->n);
        double be = fabs(f->busy.error), ce = fabs(f->compute.error);
        c->busy_mean_abs_error += be / x->size;
        c->compute_mean_abs_error += ce / x->size;
        c->busy_max_abs_error = DSI_MAX(c->busy_max_abs_error, be);
        c->compute_max_abs_error = DSI_MAX(c->compute_max_abs_error, ce);
    }
    return DS_OK;
}

/* The prediction's micro-batch passes in the executor's order. */
static ds_status_t predicted_microbatches(const ds_exec_t *x, const ds_sim_t *sim,
                                          ds_exec_microbatch_t *pred_mb)
{
    for (size_t i = 0; i < ds_sim_microbatch_count(sim); i++) {
        ds_sim_microbatch_t mb;
        DSI_TRY(ds_sim_microbatch_at(sim, i, &mb));
        if (mb.stage < 0 || mb.stage >= x->s.pp || mb.chunk < 0 || mb.chunk >= x->s.vpp ||
            mb.microbatch < 0 || mb.microbatch >= x->m)
            continue;
        ds_exec_microbatch_t *p = &pred_mb[mb_index(x, mb.stage, mb.chunk, mb.microbatch)];
        p->stage = mb.stage;
        p->chunk = mb.chunk;
        p->microbatch = mb.microbatch;
        p->fwd_start_s = mb.fwd_start_s;
        p->fwd_end_s = mb.fwd_end_s;
        p->bwd_start_s = mb.bwd_start_s;
        p->bwd_end_s = mb.bwd_end_s;
    }
    return DS_OK;
}

/* Mean forward (pass 0) or backward pass time of a stage over its passes. */
static double stage_pass_mean(const ds_exec_t *x, const ds_exec_microbatch_t *mbs, int stage,
                              int pass)
{
    double total = 0.0;
    for (int chunk = 0; chunk < x->s.vpp; chunk++)
        for (int64_t mb = 0; mb < x->m; mb++) {
            const ds_exec_microbatch_t *q = &mbs[mb_index(x, stage, chunk, (int)mb)];
            total += pass == 0 ? q->fwd_end_s - q->fwd_start_s : q->bwd_end_s - q->bwd_start_s;
        }
    return total / (double)x->m;
}

static ds_status_t compare_stages(runs_used_t *r, const ds_exec_microbatch_t *pred_mb,
                                  ds_exec_comparison_t *c)
{
    const ds_exec_t *x = r->x;
    c->num_stages = (size_t)x->s.pp;
    DSI_TRY(dsi_calloc(c->num_stages, sizeof(*c->stages), &c->stages));
    for (int p = 0; p < x->s.pp; p++) {
        ds_exec_stage_figures_t *f = &c->stages[p];
        f->stage = p;
        for (int pass = 0; pass < 2; pass++) {
            GATHER(r, stage_pass_mean(x, run->mbs, p, pass));
            ds_exec_figure_t fig = figure(stage_pass_mean(x, pred_mb, p, pass), r->v, r->n);
            if (pass == 0)
                f->forward = fig;
            else
                f->backward = fig;
        }
    }
    return DS_OK;
}

/* Forward start, forward end, backward start, backward end (j = 0..3). */
static double pass_time(const ds_exec_microbatch_t *m, int j)
{
    const double t[4] = {m->fwd_start_s, m->fwd_end_s, m->bwd_start_s, m->bwd_end_s};
    return t[j];
}

/* Mean |predicted - measured| of the passes' start and end times against
 * the median run's, as a fraction of the measured iteration. */
static double microbatch_time_error(runs_used_t *r, const ds_exec_microbatch_t *pred_mb,
                                    size_t slots, double iteration_s)
{
    double total = 0.0;
    for (size_t slot = 0; slot < slots; slot++) {
        for (int j = 0; j < 4; j++) {
            GATHER(r, pass_time(&run->mbs[slot], j));
            ds_exec_figure_t fig = figure(pass_time(&pred_mb[slot], j), r->v, r->n);
            total += fabs(fig.predicted - fig.measured);
        }
    }
    return slots > 0 && iteration_s > 0 ? total / (4.0 * slots) / iteration_s : 0.0;
}

ds_status_t ds_exec_compare(const ds_exec_t *x, const ds_sim_t *sim,
                            ds_exec_comparison_t **comparison_p)
{
    ds_status_t status = DS_OK;
    ds_exec_comparison_t *c = NULL;
    runs_used_t r = {x, NULL, 0, NULL};
    ds_exec_microbatch_t *pred_mb = NULL;
    if (x->num_runs == 0)
        return DSI_ERROR(DS_ERR_INVALID_ARG, "no run of the executor to compare with");
    ds_sim_summary_t ps;
    ds_sim_get_summary(sim, &ps);
    if (ps.num_devices != x->size || ps.microbatches != x->m)
        return DSI_ERROR(DS_ERR_INVALID_ARG,
                         "the prediction is for %lld devices and %lld micro-batches; the executor "
                         "ran %d and %lld",
                         (long long)ps.num_devices, (long long)ps.microbatches, x->size,
                         (long long)x->m);
    DSI_TRY(dsi_calloc(1, sizeof(*c), &c));
    DSI_TRY_GOTO(dsi_calloc(x->num_runs, sizeof(*r.use), &r.use), status, err);
    DSI_TRY_GOTO(dsi_calloc(x->num_runs, sizeof(*r.v), &r.v), status, err);
    choose_runs(&r, c);
    GATHER(&r, run->summary.iteration_s);
    c->iteration = figure(ps.iteration_s, r.v, r.n);
    GATHER(&r, run->summary.bubble_fraction);
    c->bubble = figure(ps.bubble_fraction, r.v, r.n);
    DSI_TRY_GOTO(compare_devices(&r, sim, c), status, err);

    size_t slots = ds_exec_microbatch_count(x);
    DSI_TRY_GOTO(dsi_calloc(slots ? slots : 1, sizeof(*pred_mb), &pred_mb), status, err);
    DSI_TRY_GOTO(predicted_microbatches(x, sim, pred_mb), status, err);
    DSI_TRY_GOTO(compare_stages(&r, pred_mb, c), status, err);
    c->microbatch_time_error = microbatch_time_error(&r, pred_mb, slots, c->iteration.measured);
    dsi_free(r.use);
    dsi_free(r.v);
    dsi_free(pred_mb);
    *comparison_p = c;
    return DS_OK;
err:
    dsi_free(r.use);
    dsi_free(r.v);
    dsi_free(pred_mb);
    ds_exec_comparison_free(c);
    return status;
}
