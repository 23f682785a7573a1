/*
 * The executor's clock on a backend with device queues (cuda): events are
 * timed by marks the device records as it reaches them, read back after the
 * run as offsets from mark 0, and mapped onto the aligned host clock by two
 * anchors, one mark before the first iteration and one after the last, each
 * recorded on an idle device and waited for by the host: the host sees an
 * anchor at the midpoint of the recording and the wait's return, within
 * half their distance.
 *
 *   host(mark i) = host_a + offset_i * scale
 *   scale        = (host_b - host_a) / offset_b   (the device clock's rate on
 *                  the host's; 1 when offset_b <= 0 or the ratio is further
 *                  than DSI_MARKS_MAX_DRIFT from 1, which no oscillator does:
 *                  one anchor was then seen late, and rate 1 is closer)
 */
#include "dsi_exec.h"

#include <math.h>

void dsi_exec_marks_to_host(double host_a_s, double host_b_s, double offset_b_s,
                            const double *offsets_s, size_t count, double *host_s)
{
    double scale = 1.0;
    if (offset_b_s > 0.0) {
        double ratio = (host_b_s - host_a_s) / offset_b_s;
        if (fabs(ratio - 1.0) <= DSI_MARKS_MAX_DRIFT)
            scale = ratio;
    }
    for (size_t i = 0; i < count; i++)
        host_s[i] = host_a_s + offsets_s[i] * scale;
}

static double aligned_now(const ds_exec_t *x)
{
    return dsi_now_s() + x->clock_offset_s;
}

/* Records mark `slot` on the compute queue once every queue has drained and
 * returns when the host sees it: *host_p is the midpoint, *error_p half the
 * window. */
static ds_status_t anchor(ds_exec_t *x, size_t slot, double *host_p, double *error_p)
{
    ds_backend_t *b = x->backend;
    DSI_TRY(dsi_queue_join(b, DSI_QUEUE_COMM, DSI_QUEUE_COMPUTE));
    DSI_TRY(dsi_queue_join(b, DSI_QUEUE_DP, DSI_QUEUE_COMPUTE));
    DSI_TRY(ds_backend_synchronize(b));
    double before = aligned_now(x);
    DSI_TRY(dsi_queue_mark(b, DSI_QUEUE_COMPUTE, slot));
    DSI_TRY(ds_backend_synchronize(b));
    double after = aligned_now(x);
    *host_p = 0.5 * (before + after);
    *error_p = 0.5 * (after - before);
    return DS_OK;
}

ds_status_t dsi_exec_marks_begin(ds_exec_t *x)
{
    x->num_marks = 0;
    if (!x->queued)
        return DS_OK;
    double error = 0.0;
    DSI_TRY(anchor(x, 0, &x->anchor_host_s, &error));
    x->anchor_error_s = error;
    x->num_marks = 1;
    return DS_OK;
}

ds_status_t dsi_exec_marks_finish(ds_exec_t *x)
{
    if (!x->queued)
        return DS_OK;
    ds_status_t status = DS_OK;
    double *offsets = NULL, *host = NULL, end_host = 0.0, end_error = 0.0;
    size_t end = x->num_marks++;
    DSI_TRY(dsi_queue_reserve_marks(x->backend, x->num_marks));
    DSI_TRY(anchor(x, end, &end_host, &end_error));
    DSI_TRY(dsi_calloc(x->num_marks, sizeof(double), &offsets));
    DSI_TRY_GOTO(dsi_calloc(x->num_marks, sizeof(double), &host), status, out);
    DSI_TRY_GOTO(dsi_queue_read_marks(x->backend, x->num_marks, offsets), status, out);
    dsi_exec_marks_to_host(x->anchor_host_s, end_host, offsets[end], offsets, x->num_marks, host);
    for (size_t i = 0; i < x->num_recs; i++) {
        dsi_xrec_t *r = &x->recs[i];
        if (r->mark[0] < 0 || r->mark[1] < 0 || (size_t)r->mark[0] >= end ||
            (size_t)r->mark[1] >= end) {
            status = DSI_ERROR(DS_ERR_INTERNAL, "record %zu has marks %d and %d of %zu", i,
                               (int)r->mark[0], (int)r->mark[1], end);
            goto out;
        }
        r->start_s = host[r->mark[0]];
        r->end_s = host[r->mark[1]];
    }
    /* The anchors' windows bound how well the device clock lines up with the host's. */
    x->anchor_error_s = DSI_MAX(x->anchor_error_s, end_error);
out:
    dsi_free(host);
    dsi_free(offsets);
    return status;
}
