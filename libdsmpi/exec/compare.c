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

ds_status_t ds_exec_compare(const ds_exec_t *x, const ds_sim_t *sim,
                            ds_exec_comparison_t **comparison_p)
{
    ds_status_t status = DS_OK;
    ds_exec_comparison_t *c = NULL;
    size_t *use = NULL;
    double *v = NULL;
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
    DSI_TRY_GOTO(dsi_calloc(x->num_runs, sizeof(*use), &use), status, err);
    DSI_TRY_GOTO(dsi_calloc(x->num_runs, sizeof(*v), &v), status, err);
    /* Runs compared: the quiet ones, or all when none is. */
    size_t n = 0;
    for (size_t r = 0; r < x->num_runs; r++) {
        if (x->runs[r].summary.load.noisy)
            c->noisy_runs++;
        else
            use[n++] = r;
    }
    if (n == 0)
        for (size_t r = 0; r < x->num_runs; r++)
            use[n++] = r;
    c->runs = n;
    for (size_t i = 0; i < n; i++) {
        const ds_exec_load_t *l = &x->runs[use[i]].summary.load;
        c->load.foreign_cpu = DSI_MAX(c->load.foreign_cpu, l->foreign_cpu);
        c->load.steal = DSI_MAX(c->load.steal, l->steal);
        c->load.loadavg_1m = DSI_MAX(c->load.loadavg_1m, l->loadavg_1m);
        c->load.noisy |= l->noisy;
        c->load.probe_s = DSI_MAX(c->load.probe_s, l->probe_s);
        c->load.pinned = i == 0 ? l->pinned : c->load.pinned && l->pinned;
    }
#define GATHER(expr)                                                                               \
    for (size_t i = 0; i < n; i++) {                                                               \
        const dsi_xrun_t *run = &x->runs[use[i]];                                                  \
        (void)run;                                                                                 \
        v[i] = (expr);                                                                             \
    }
    GATHER(run->summary.iteration_s);
    c->iteration = figure(ps.iteration_s, v, n);
    GATHER(run->summary.bubble_fraction);
    c->bubble = figure(ps.bubble_fraction, v, n);

    /* Devices. */
    c->num_devices = (size_t)x->size;
    DSI_TRY_GOTO(dsi_calloc(c->num_devices, sizeof(*c->devices), &c->devices), status, err);
    for (int rank = 0; rank < x->size; rank++) {
        ds_sim_device_t d;
        DSI_TRY_GOTO(ds_sim_device_of_rank(sim, rank, &d), status, err);
        ds_exec_device_figures_t *f = &c->devices[rank];
        f->rank = rank;
        f->coords = ds_strategy_coords_of(&x->s, rank);
        GATHER(run->devices[rank].busy_s);
        f->busy = figure(d.compute_s + d.comm_exposed_s, v, n);
        GATHER(run->devices[rank].compute_s);
        f->compute = figure(d.compute_s, v, n);
        GATHER(run->devices[rank].idle_s);
        f->idle = figure(d.idle_s, v, n);
        GATHER(run->devices[rank].comm_exposed_s);
        f->exposed = figure(d.comm_exposed_s, v, n);
        double be = fabs(f->busy.error), ce = fabs(f->compute.error);
        c->busy_mean_abs_error += be / x->size;
        c->compute_mean_abs_error += ce / x->size;
        c->busy_max_abs_error = DSI_MAX(c->busy_max_abs_error, be);
        c->compute_max_abs_error = DSI_MAX(c->compute_max_abs_error, ce);
    }

    /* Micro-batches: the prediction in the executor's order. */
    size_t slots = ds_exec_microbatch_count(x);
    DSI_TRY_GOTO(dsi_calloc(slots ? slots : 1, sizeof(*pred_mb), &pred_mb), status, err);
    for (size_t i = 0; i < ds_sim_microbatch_count(sim); i++) {
        ds_sim_microbatch_t mb;
        DSI_TRY_GOTO(ds_sim_microbatch_at(sim, i, &mb), status, err);
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
    c->num_stages = (size_t)x->s.pp;
    DSI_TRY_GOTO(dsi_calloc(c->num_stages, sizeof(*c->stages), &c->stages), status, err);
    for (int p = 0; p < x->s.pp; p++) {
        ds_exec_stage_figures_t *f = &c->stages[p];
        f->stage = p;
        for (int pass = 0; pass < 2; pass++) {
            double predicted = 0.0;
            for (int chunk = 0; chunk < x->s.vpp; chunk++)
                for (int64_t mb = 0; mb < x->m; mb++) {
                    const ds_exec_microbatch_t *q = &pred_mb[mb_index(x, p, chunk, (int)mb)];
                    predicted += pass == 0 ? q->fwd_end_s - q->fwd_start_s
                                           : q->bwd_end_s - q->bwd_start_s;
                }
            for (size_t i = 0; i < n; i++) {
                const dsi_xrun_t *run = &x->runs[use[i]];
                double measured = 0.0;
                for (int chunk = 0; chunk < x->s.vpp; chunk++)
                    for (int64_t mb = 0; mb < x->m; mb++) {
                        const ds_exec_microbatch_t *q = &run->mbs[mb_index(x, p, chunk, (int)mb)];
                        measured += pass == 0 ? q->fwd_end_s - q->fwd_start_s
                                              : q->bwd_end_s - q->bwd_start_s;
                    }
                v[i] = measured / (double)x->m;
            }
            ds_exec_figure_t fig = figure(predicted / (double)x->m, v, n);
            if (pass == 0)
                f->forward = fig;
            else
                f->backward = fig;
        }
    }
    /* Start and end times against the median run's. */
    double total = 0.0;
    for (size_t slot = 0; slot < slots; slot++) {
        const ds_exec_microbatch_t *q = &pred_mb[slot];
        double predicted[4] = {q->fwd_start_s, q->fwd_end_s, q->bwd_start_s, q->bwd_end_s};
        for (int j = 0; j < 4; j++) {
            for (size_t i = 0; i < n; i++) {
                const ds_exec_microbatch_t *m = &x->runs[use[i]].mbs[slot];
                double measured[4] = {m->fwd_start_s, m->fwd_end_s, m->bwd_start_s, m->bwd_end_s};
                v[i] = measured[j];
            }
            ds_exec_figure_t fig = figure(predicted[j], v, n);
            total += fabs(fig.predicted - fig.measured);
        }
    }
    c->microbatch_time_error =
        slots > 0 && c->iteration.measured > 0 ? total / (4.0 * slots) / c->iteration.measured : 0.0;
#undef GATHER
    dsi_free(use);
    dsi_free(v);
    dsi_free(pred_mb);
    *comparison_p = c;
    return DS_OK;
err:
    dsi_free(use);
    dsi_free(v);
    dsi_free(pred_mb);
    ds_exec_comparison_free(c);
    return status;
}
