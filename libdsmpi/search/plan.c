/*
 * Planning arithmetic (formulas in search.h): steps, goodput, time to train,
 * GPU-hours, node-hours, service units, cost and scaling efficiency, and the
 * SVG chart of time to train and efficiency against the number of GPUs.
 */
#include "dsi_search.h"

#include <errno.h>
#include <math.h>
#include <string.h>

void ds_plan_inputs_init(ds_plan_inputs_t *inputs)
{
    memset(inputs, 0, sizeof(*inputs));
    inputs->gpus_per_node = (int)dsi_param_int(DSI_PARAM_DEFAULT_GPUS_PER_NODE);
    inputs->charge_factor = 1.0;
}

double ds_plan_goodput(const ds_plan_inputs_t *in, int64_t gpus)
{
    double tau = in->checkpoint_interval_s, delta = in->checkpoint_cost_s;
    double checkpointing = 1.0, period = 0.0;
    if (tau > 0.0) {
        checkpointing = tau / (tau + delta);
        period = tau + delta;
    }
    double failures = 1.0;
    if (in->mtbf_gpu_s > 0.0) {
        double rate = (double)gpus / in->mtbf_gpu_s;
        /* Without checkpoints a failure loses everything since the start:
         * the run cannot be planned (goodput 0). */
        failures = tau > 0.0 ? 1.0 - rate * (in->restart_s + period / 2.0) : 0.0;
    }
    double goodput = checkpointing * failures;
    return goodput < 0.0 ? 0.0 : goodput > 1.0 ? 1.0 : goodput;
}

ds_status_t ds_plan_row_compute(const ds_plan_inputs_t *in, int64_t gpus, double iteration_s,
                                int64_t samples_per_iteration, int64_t tokens_per_sample,
                                ds_plan_row_t *row_p)
{
    if (gpus < 1 || in->gpus_per_node < 1)
        return DSI_ERROR(DS_ERR_INVALID_ARG,
                         "%lld GPUs with %d per node (accepted: at least 1 of each)",
                         (long long)gpus, in->gpus_per_node);
    if (!(iteration_s > 0.0) || samples_per_iteration < 1 || tokens_per_sample < 1)
        return DSI_ERROR(DS_ERR_INVALID_ARG,
                         "iteration of %g s, %lld samples of %lld tokens (accepted: all positive)",
                         iteration_s, (long long)samples_per_iteration,
                         (long long)tokens_per_sample);
    if (!(in->tokens > 0.0) && !(in->samples > 0.0))
        return DSI_ERROR(DS_ERR_INVALID_ARG,
                         "no training budget (accepted: tokens or samples above 0)");
    if (in->charge_factor < 0.0 || in->price_per_gpu_hour < 0.0 ||
        in->checkpoint_interval_s < 0.0 || in->checkpoint_cost_s < 0.0 || in->restart_s < 0.0 ||
        in->mtbf_gpu_s < 0.0)
        return DSI_ERROR(
            DS_ERR_INVALID_ARG,
            "a negative price, charge factor or checkpoint/failure time (accepted: 0 or above)");
    ds_plan_row_t r;
    memset(&r, 0, sizeof(r));
    r.gpus = gpus;
    r.nodes = (gpus + in->gpus_per_node - 1) / in->gpus_per_node;
    r.iteration_s = iteration_s;
    r.samples_per_iteration = samples_per_iteration;
    r.tokens_per_sample = tokens_per_sample;
    double tokens_per_iteration = (double)samples_per_iteration * (double)tokens_per_sample;
    r.tokens_per_s = tokens_per_iteration / iteration_s;
    r.steps = in->tokens > 0.0 ? ceil(in->tokens / tokens_per_iteration)
                               : ceil(in->samples / (double)samples_per_iteration);
    r.goodput = ds_plan_goodput(in, gpus);
    if (r.goodput <= 0.0 && !(in->checkpoint_interval_s > 0.0))
        return DSI_ERROR(DS_ERR_INVALID_ARG,
                         "on %lld GPUs with failures but no checkpoints every interruption "
                         "restarts from the beginning (goodput 0; give a checkpoint interval)",
                         (long long)gpus);
    if (r.goodput <= 0.0)
        return DSI_ERROR(DS_ERR_INVALID_ARG,
                         "on %lld GPUs the run never finishes: interruptions every %.3g h with a "
                         "restart of %.3g min and checkpoints every %.3g min (goodput 0; "
                         "checkpoint more often or give a longer MTBF)",
                         (long long)gpus,
                         in->mtbf_gpu_s > 0 ? in->mtbf_gpu_s / (double)gpus / 3600.0 : 0.0,
                         in->restart_s / 60.0, in->checkpoint_interval_s / 60.0);
    r.train_s = r.steps * iteration_s / r.goodput;
    r.days = r.train_s / 86400.0;
    r.gpu_hours = (double)gpus * r.days * 24.0;
    r.node_hours = (double)r.nodes * r.days * 24.0;
    r.service_units = r.node_hours * in->charge_factor;
    r.cost = r.gpu_hours * in->price_per_gpu_hour * in->charge_factor;
    r.efficiency = 1.0;
    *row_p = r;
    return DS_OK;
}

void ds_plan_set_efficiency(ds_plan_row_t *rows, size_t count)
{
    size_t smallest = 0;
    for (size_t i = 1; i < count; i++)
        if (rows[i].gpus < rows[smallest].gpus)
            smallest = i;
    for (size_t i = 0; i < count; i++)
        rows[i].efficiency =
            rows[i].gpu_hours > 0.0 ? rows[smallest].gpu_hours / rows[i].gpu_hours : 0.0;
}

int ds_plan_scaling_stops(const ds_plan_row_t *rows, size_t count, size_t index, size_t *faster_p)
{
    if (index >= count)
        return 0;
    size_t fastest = count;
    for (size_t i = 0; i < count; i++)
        if (rows[i].gpus < rows[index].gpus && rows[i].train_s < rows[index].train_s &&
            (fastest == count || rows[i].train_s < rows[fastest].train_s))
            fastest = i;
    if (fastest == count)
        return 0;
    *faster_p = fastest;
    return 1;
}

/* ---- SVG ----------------------------------------------------------------------------------- */

static void svg_escape(FILE *out, const char *text)
{
    for (const char *c = text; *c != '\0'; c++) {
        if (*c == '<')
            fputs("&lt;", out);
        else if (*c == '>')
            fputs("&gt;", out);
        else if (*c == '&')
            fputs("&amp;", out);
        else
            fputc(*c, out);
    }
}

/* A "nice" upper end for an axis: 1, 2 or 5 times a power of ten. */
static double nice_ceiling(double value)
{
    if (!(value > 0.0))
        return 1.0;
    double p = pow(10.0, floor(log10(value)));
    double steps[] = {1.0, 2.0, 5.0, 10.0};
    for (int i = 0; i < 4; i++)
        if (value <= steps[i] * p * (1.0 + 1e-12))
            return steps[i] * p;
    return 10.0 * p;
}

ds_status_t ds_plan_write_svg(const ds_plan_row_t *rows, size_t count, const char *title,
                              const char *path)
{
    if (count == 0)
        return DSI_ERROR(DS_ERR_INVALID_ARG, "no rows to chart");
    FILE *out = fopen(path, "w");
    if (out == NULL)
        return DSI_ERROR(DS_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    const double W = 760, H = 420, left = 70, right = 70, top = 50, bottom = 60;
    const double pw = W - left - right, ph = H - top - bottom;
    double gmin = (double)rows[0].gpus, gmax = gmin, dmax = 0.0;
    for (size_t i = 0; i < count; i++) {
        gmin = fmin(gmin, (double)rows[i].gpus);
        gmax = fmax(gmax, (double)rows[i].gpus);
        dmax = fmax(dmax, rows[i].days);
    }
    dmax = nice_ceiling(dmax);
    double lmin = log2(gmin), lmax = log2(gmax);
    if (lmax - lmin < 1e-9) {
        lmin -= 0.5;
        lmax += 0.5;
    }
#define X(g) (left + (log2(g) - lmin) / (lmax - lmin) * pw)
#define YD(d) (top + ph - (d) / dmax * ph)
#define YE(e) (top + ph - (e)*ph) /* efficiency 0..1 (1.0 at the top) */
    fprintf(out,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
            "font-family=\"sans-serif\" font-size=\"12\">\n",
            W, H);
    fprintf(out, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
    fprintf(out, "<text x=\"%.0f\" y=\"24\" font-size=\"15\" text-anchor=\"middle\">", W / 2);
    svg_escape(out, title != NULL ? title : "time to train and scaling efficiency");
    fprintf(out, "</text>\n");
    /* Axes and grid. */
    fprintf(out,
            "<g stroke=\"#888\" fill=\"none\">\n"
            "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n"
            "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n"
            "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n</g>\n",
            left, top + ph, left + pw, top + ph, left, top, left, top + ph, left + pw, top,
            left + pw, top + ph);
    for (int i = 0; i <= 5; i++) {
        double f = i / 5.0;
        double y = top + ph - f * ph;
        fprintf(out, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#eee\"/>\n",
                left, y, left + pw, y);
        fprintf(out,
                "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" fill=\"#1f5fbf\">%.3g</text>\n",
                left - 6, y + 4, f * dmax);
        fprintf(out, "<text x=\"%.1f\" y=\"%.1f\" fill=\"#c0392b\">%.0f%%</text>\n", left + pw + 6,
                y + 4, f * 100.0);
    }
    for (size_t i = 0; i < count; i++) {
        double x = X((double)rows[i].gpus);
        fprintf(out, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%lld</text>\n", x,
                top + ph + 18, (long long)rows[i].gpus);
    }
    fprintf(out, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">GPUs</text>\n", left + pw / 2,
            H - 16);
    fprintf(out,
            "<text transform=\"translate(18,%.1f) rotate(-90)\" text-anchor=\"middle\" "
            "fill=\"#1f5fbf\">days to train</text>\n",
            top + ph / 2);
    fprintf(out,
            "<text transform=\"translate(%.1f,%.1f) rotate(90)\" text-anchor=\"middle\" "
            "fill=\"#c0392b\">scaling efficiency</text>\n",
            W - 16, top + ph / 2);
    /* Series, in increasing GPU order. */
    size_t order[256];
    size_t n = DSI_MIN(count, DSI_ARRAY_SIZE(order));
    for (size_t i = 0; i < n; i++)
        order[i] = i;
    for (size_t i = 1; i < n; i++)
        for (size_t j = i; j > 0 && rows[order[j]].gpus < rows[order[j - 1]].gpus; j--) {
            size_t t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    fprintf(out, "<polyline fill=\"none\" stroke=\"#1f5fbf\" stroke-width=\"2\" points=\"");
    for (size_t i = 0; i < n; i++)
        fprintf(out, "%.1f,%.1f ", X((double)rows[order[i]].gpus), YD(rows[order[i]].days));
    fprintf(out, "\"/>\n<polyline fill=\"none\" stroke=\"#c0392b\" stroke-width=\"2\" "
                 "stroke-dasharray=\"6,4\" points=\"");
    for (size_t i = 0; i < n; i++)
        fprintf(out, "%.1f,%.1f ", X((double)rows[order[i]].gpus),
                YE(fmin(rows[order[i]].efficiency, 1.0)));
    fprintf(out, "\"/>\n");
    for (size_t i = 0; i < n; i++) {
        const ds_plan_row_t *r = &rows[order[i]];
        fprintf(out,
                "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4\" fill=\"#1f5fbf\"><title>%lld GPUs: %.2f "
                "days</title></circle>\n",
                X((double)r->gpus), YD(r->days), (long long)r->gpus, r->days);
        fprintf(out,
                "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4\" fill=\"#c0392b\"><title>%lld GPUs: %.1f%% "
                "efficiency</title></circle>\n",
                X((double)r->gpus), YE(fmin(r->efficiency, 1.0)), (long long)r->gpus,
                100.0 * r->efficiency);
    }
    fprintf(out,
            "<g font-size=\"12\"><rect x=\"%.1f\" y=\"%.1f\" width=\"12\" height=\"3\" "
            "fill=\"#1f5fbf\"/>"
            "<text x=\"%.1f\" y=\"%.1f\">days to train</text>"
            "<rect x=\"%.1f\" y=\"%.1f\" width=\"12\" height=\"3\" fill=\"#c0392b\"/>"
            "<text x=\"%.1f\" y=\"%.1f\">scaling efficiency</text></g>\n",
            left + 10, top + 8, left + 26, top + 12, left + 130, top + 8, left + 146, top + 12);
    fprintf(out, "</svg>\n");
#undef X
#undef YD
#undef YE
    int failed = ferror(out);
    if (fclose(out) != 0 || failed)
        return DSI_ERROR(DS_ERR_IO, "writing %s failed", path);
    return DS_OK;
}
