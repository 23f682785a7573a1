/* Bandwidth curves: piecewise power laws over message size, with knots
 * where the data bends. */
#include "dsi_comm.h"

#include <math.h>

double dsi_comm_curve_eval(const dsi_comm_curve_t *curve, double bytes)
{
    if (curve->count == 0)
        return 0.0;
    double x = log(bytes > 1.0 ? bytes : 1.0);
    const double *kx = curve->log_bytes, *ky = curve->log_bw;
    int last = curve->count - 1;
    if (x <= kx[0])
        return exp(ky[0]);
    if (x >= kx[last])
        return exp(ky[last]);
    int i = 0;
    while (i + 1 < last && x > kx[i + 1])
        i++;
    double t = (x - kx[i]) / (kx[i + 1] - kx[i]);
    return exp(ky[i] + t * (ky[i + 1] - ky[i]));
}

void dsi_comm_curve_scale(dsi_comm_curve_t *curve, double factor)
{
    double shift = log(factor);
    for (int i = 0; i < curve->count; i++)
        curve->log_bw[i] += shift;
}

double dsi_comm_curve_peak(const dsi_comm_curve_t *curve)
{
    double peak = 0.0;
    for (int i = 0; i < curve->count; i++)
        peak = fmax(peak, exp(curve->log_bw[i]));
    return peak;
}

/* Pool-adjacent-violators: the closest nondecreasing sequence to `q` (in
 * least squares), in place. */
static void make_nondecreasing(double *q, int count)
{
    double level[DSI_COMM_CURVE_MAX];
    int width[DSI_COMM_CURVE_MAX];
    int blocks = 0;
    for (int i = 0; i < count; i++) {
        level[blocks] = q[i];
        width[blocks] = 1;
        blocks++;
        while (blocks > 1 && level[blocks - 2] > level[blocks - 1]) {
            int w = width[blocks - 2] + width[blocks - 1];
            level[blocks - 2] =
                (level[blocks - 2] * width[blocks - 2] + level[blocks - 1] * width[blocks - 1]) / w;
            width[blocks - 2] = w;
            blocks--;
        }
    }
    for (int b = 0, i = 0; b < blocks; b++)
        for (int k = 0; k < width[b]; k++)
            q[i++] = level[b];
}

static void set_knots(dsi_comm_curve_t *curve, const double *x, const double *y, const bool *knot,
                      int count)
{
    curve->count = 0;
    for (int i = 0; i < count; i++) {
        if (!knot[i])
            continue;
        /* Equal sizes (never in one series) would divide by zero: keep one. */
        if (curve->count > 0 && x[i] <= curve->log_bytes[curve->count - 1])
            continue;
        curve->log_bytes[curve->count] = x[i];
        curve->log_bw[curve->count] = y[i];
        curve->count++;
    }
}

void dsi_comm_curve_fit(dsi_comm_curve_point_t *points, int count, dsi_comm_curve_t *curve)
{
    if (count > DSI_COMM_CURVE_MAX)
        count = DSI_COMM_CURVE_MAX;
    curve->count = 0;
    if (count <= 0)
        return;
    double x[DSI_COMM_CURVE_MAX], y[DSI_COMM_CURVE_MAX], q[DSI_COMM_CURVE_MAX];
    double measured[DSI_COMM_CURVE_MAX], allowed[DSI_COMM_CURVE_MAX];
    bool knot[DSI_COMM_CURVE_MAX] = {false};
    for (int i = 0; i < count; i++) {
        x[i] = log(points[i].bytes > 1.0 ? points[i].bytes : 1.0);
        measured[i] = log(points[i].bw);
        q[i] = x[i] - measured[i]; /* log of the time per byte of volume */
        allowed[i] = log1p(fmax(points[i].allowed, 1e-4));
    }
    /* The time of a volume must not fall as the message grows. */
    make_nondecreasing(q, count);
    for (int i = 0; i < count; i++) {
        y[i] = x[i] - q[i];
        points[i].bw = exp(y[i]);
    }
    knot[0] = knot[count - 1] = true;
    for (int round = 0; round < count; round++) {
        set_knots(curve, x, y, knot, count);
        int worst = -1;
        double worst_ratio = 1.0;
        for (int i = 0; i < count; i++) {
            if (knot[i])
                continue;
            double ratio =
                fabs(log(dsi_comm_curve_eval(curve, exp(x[i]))) - measured[i]) / allowed[i];
            if (ratio > worst_ratio) {
                worst_ratio = ratio;
                worst = i;
            }
        }
        if (worst < 0)
            break;
        knot[worst] = true;
    }
    set_knots(curve, x, y, knot, count);
}
