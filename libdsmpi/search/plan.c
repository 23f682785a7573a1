/*
 * Planning arithmetic (formulas in search.h): steps, goodput, time to train,
 * GPU-hours, node-hours, service units, cost and scaling efficiency, and the
 * SVG chart of days to train, GPU-hours and cost against the number of GPUs.
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

/* A tick step: 1, 2, 2.5 or 5 times a power of ten, at or above `raw`. */
static double nice_step(double raw)
{
    if (!(raw > 0.0))
        return 1.0;
    double p = pow(10.0, floor(log10(raw)));
    double steps[] = {1.0, 2.0, 2.5, 5.0, 10.0};
    for (int i = 0; i < 5; i++)
        if (raw <= steps[i] * p * (1.0 + 1e-12))
            return steps[i] * p;
    return 10.0 * p;
}

/* 950, 1.2k, 300k, 1.5M: axis and table numbers a reader takes in at a glance. */
static void short_number(double value, char *text, size_t size)
{
    double a = fabs(value);
    if (a >= 1e9)
        snprintf(text, size, "%.3gG", value / 1e9);
    else if (a >= 1e6)
        snprintf(text, size, "%.3gM", value / 1e6);
    else if (a >= 1e4)
        snprintf(text, size, "%.3gk", value / 1e3);
    else
        snprintf(text, size, "%.3g", value);
}

/* The share as the tables print it: 100% only when everything is assumed. */
static void share_text(double share, char *text, size_t size)
{
    double percent = 100.0 * share;
    if (!(share > 0.0))
        snprintf(text, size, "0%%");
    else if (share >= 1.0 - 1e-9)
        snprintf(text, size, "100%%");
    else if (percent >= 99.5)
        snprintf(text, size, "%.1f%%", fmin(percent, 99.9));
    else if (percent < 0.5)
        snprintf(text, size, "<0.5%%");
    else
        snprintf(text, size, "%.0f%%", percent);
}

/* One panel of the chart: a quantity of every row against GPUs. */
typedef struct plan_series {
    const char *name; /* legend */
    const char *axis; /* the panel's axis */
    const char *colour;
    const char *unit;           /* in the tooltips */
    double values[256];         /* in increasing GPU order */
    double low[256], high[256]; /* the band, when `band` */
    bool band;
} plan_series_t;

typedef struct plan_frame {
    double left, width; /* plot area, shared by the panels */
    double inset;       /* between its sides and the first and last size */
    double lmin, lmax;  /* log2 of the GPU range */
} plan_frame_t;

static double plan_x(const plan_frame_t *f, double gpus)
{
    return f->left + f->inset +
           (log2(gpus) - f->lmin) / (f->lmax - f->lmin) * (f->width - 2.0 * f->inset);
}

/* The points "x,y " of `values` over the sizes, last to first with `reverse`
 * (a band's polygon goes out along its low edge and back along its high). */
static void svg_points(FILE *out, const plan_frame_t *f, const ds_plan_row_t *const *sorted,
                       size_t n, const double *values, double bottom, double scale, bool reverse)
{
    for (size_t k = 0; k < n; k++) {
        size_t i = reverse ? n - 1 - k : k;
        fprintf(out, "%.1f,%.1f ", plan_x(f, (double)sorted[i]->gpus), bottom - values[i] * scale);
    }
}

static void plan_panel(FILE *out, const plan_frame_t *f, const plan_series_t *series,
                       const ds_plan_row_t *const *sorted, size_t n, double top, double height)
{
    double vmax = 0.0;
    for (size_t i = 0; i < n; i++)
        vmax =
            fmax(vmax, series->band ? fmax(series->values[i], series->high[i]) : series->values[i]);
    /* About five ticks of 1, 2, 2.5 or 5 times a power of ten, the top one at or above
     * the largest value. */
    double step = nice_step(vmax / 5.0);
    int ticks = (int)ceil(vmax / step * (1.0 - 1e-12));
    if (ticks < 1)
        ticks = 1;
    vmax = step * ticks;
    double bottom = top + height;
    fprintf(out, "<g class=\"panel\">\n");
    for (int i = 0; i <= ticks; i++) {
        double y = bottom - (double)i / ticks * height;
        char label[32];
        short_number(step * i, label, sizeof(label));
        fprintf(out,
                "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\"/>\n"
                "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" fill=\"%s\">%s</text>\n",
                f->left, y, f->left + f->width, y, i == 0 ? "#888" : "#eee", f->left - 6, y + 4,
                series->colour, label);
    }
    fprintf(out,
            "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#888\"/>\n"
            "<text transform=\"translate(20,%.1f) rotate(-90)\" text-anchor=\"middle\" "
            "fill=\"%s\">",
            f->left, top, f->left, bottom, top + height / 2, series->colour);
    svg_escape(out, series->axis);
    fprintf(out, "</text>\n");
    for (size_t i = 0; i < n; i++) {
        double x = plan_x(f, (double)sorted[i]->gpus);
        fprintf(out, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#eee\"/>\n", x,
                top, x, bottom);
    }
    if (series->band) {
        fprintf(out,
                "<polygon class=\"band\" data-band=\"%s\" fill=\"%s\" fill-opacity=\"0.15\" "
                "stroke=\"none\" points=\"",
                series->name, series->colour);
        svg_points(out, f, sorted, n, series->low, bottom, height / vmax, false);
        svg_points(out, f, sorted, n, series->high, bottom, height / vmax, true);
        fprintf(out, "\"/>\n");
    }
    fprintf(out,
            "<polyline class=\"series\" data-series=\"%s\" fill=\"none\" stroke=\"%s\" "
            "stroke-width=\"2\" points=\"",
            series->name, series->colour);
    svg_points(out, f, sorted, n, series->values, bottom, height / vmax, false);
    fprintf(out, "\"/>\n");
    for (size_t i = 0; i < n; i++) {
        char value[32], low[32], high[32], band[80] = "";
        short_number(series->values[i], value, sizeof(value));
        if (series->band) {
            short_number(series->low[i], low, sizeof(low));
            short_number(series->high[i], high, sizeof(high));
            snprintf(band, sizeof(band), " (band %s - %s)", low, high);
        }
        fprintf(out,
                "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"4\" fill=\"%s\"><title>%lld GPUs: %s %s%s"
                "</title></circle>\n",
                plan_x(f, (double)sorted[i]->gpus), bottom - series->values[i] / vmax * height,
                series->colour, (long long)sorted[i]->gpus, value, series->unit, band);
    }
    fprintf(out, "</g>\n");
}

ds_status_t ds_plan_write_svg(const ds_plan_row_t *rows, size_t count, const ds_plan_chart_t *chart,
                              const char *path)
{
    if (count == 0)
        return DSI_ERROR(DS_ERR_INVALID_ARG, "no rows to chart");
    static const ds_plan_chart_t plain = {NULL, NULL, NULL, NULL};
    if (chart == NULL)
        chart = &plain;
    /* Rows in increasing GPU order, with their assumed shares. */
    const ds_plan_row_t *sorted[256];
    double shares[256];
    size_t index[256]; /* of sorted[i] in rows */
    size_t n = DSI_MIN(count, DSI_ARRAY_SIZE(sorted));
    for (size_t i = 0; i < n; i++) {
        sorted[i] = &rows[i];
        index[i] = i;
        shares[i] = chart->assumed_share != NULL ? chart->assumed_share[i] : 0.0;
    }
    for (size_t i = 1; i < n; i++)
        for (size_t j = i; j > 0 && sorted[j]->gpus < sorted[j - 1]->gpus; j--) {
            const ds_plan_row_t *t = sorted[j];
            sorted[j] = sorted[j - 1];
            sorted[j - 1] = t;
            double share = shares[j];
            shares[j] = shares[j - 1];
            shares[j - 1] = share;
            size_t k = index[j];
            index[j] = index[j - 1];
            index[j - 1] = k;
        }
    double smin = 1.0, smax = 0.0, rate = 0.0;
    bool priced = false;
    for (size_t i = 0; i < n; i++) {
        smin = fmin(smin, shares[i]);
        smax = fmax(smax, shares[i]);
        priced = priced || sorted[i]->cost > 0.0;
        if (rate == 0.0 && sorted[i]->gpu_hours > 0.0)
            rate = sorted[i]->cost / sorted[i]->gpu_hours;
    }
    /* Panels: days to train, GPU-hours, cost when there is a price. */
    plan_series_t series[3];
    char cost_name[64];
    snprintf(cost_name, sizeof(cost_name), "cost at %.4g per GPU-hour", rate);
    series[0] = (plan_series_t){
        .name = "days to train", .axis = "days to train", .colour = "#1f5fbf", .unit = "days"};
    series[1] = (plan_series_t){
        .name = "GPU-hours", .axis = "GPU-hours", .colour = "#c0392b", .unit = "GPU-hours"};
    series[2] = (plan_series_t){
        .name = cost_name, .axis = "cost", .colour = "#2e8b57", .unit = "(currency)"};
    /* The band only where some size has one (a plan from measured costs has none). */
    bool band = false;
    for (size_t i = 0; chart->low != NULL && chart->high != NULL && i < n; i++)
        band = band || chart->low[index[i]].days != sorted[i]->days ||
               chart->high[index[i]].days != sorted[i]->days;
    for (size_t i = 0; i < n; i++) {
        series[0].values[i] = sorted[i]->days;
        series[1].values[i] = sorted[i]->gpu_hours;
        series[2].values[i] = sorted[i]->cost;
        if (!band)
            continue;
        const ds_plan_row_t *low = &chart->low[index[i]], *high = &chart->high[index[i]];
        series[0].low[i] = low->days;
        series[0].high[i] = high->days;
        series[1].low[i] = low->gpu_hours;
        series[1].high[i] = high->gpu_hours;
        series[2].low[i] = low->cost;
        series[2].high[i] = high->cost;
    }
    for (size_t k = 0; k < 3; k++)
        series[k].band = band;
    size_t panels = priced ? 3 : 2;
    bool assumed = smax > 0.0;
    /* Layout, top to bottom: title, assumed note, legend band, panels, the GPU axis with
     * efficiency (and assumed share) under each size. */
    const double W = 760, left = 86, right = 30, panel_h = 140, gap = 26;
    const double legend_top = assumed ? 54 : 40, panels_top = legend_top + 34;
    double axis_y = panels_top + (double)panels * panel_h + (double)(panels - 1) * gap;
    double H = axis_y + (assumed ? 92 : 74);
    plan_frame_t frame = {left, W - left - right, 40.0, log2((double)sorted[0]->gpus),
                          log2((double)sorted[n - 1]->gpus)};
    if (frame.lmax - frame.lmin < 1e-9) {
        frame.lmin -= 0.5;
        frame.lmax += 0.5;
    }
    FILE *out = fopen(path, "w");
    if (out == NULL)
        return DSI_ERROR(DS_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    fprintf(out,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
            "viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\" font-size=\"12\">\n",
            W, H, W, H);
    fprintf(out, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
    fprintf(out, "<text x=\"%.0f\" y=\"24\" font-size=\"15\" text-anchor=\"middle\">", W / 2);
    svg_escape(out, chart->title != NULL ? chart->title : "time to train and GPU-hours");
    fprintf(out, "</text>\n");
    if (assumed) {
        char lo[16], hi[16];
        share_text(smin, lo, sizeof(lo));
        share_text(smax, hi, sizeof(hi));
        fprintf(out,
                "<text class=\"assumed\" x=\"%.0f\" y=\"42\" text-anchor=\"middle\" "
                "fill=\"#b03a2e\">ASSUMED: %s%s%s of the predicted time rests on modelled "
                "or assumed estimates, not measurements</text>\n",
                W / 2, strcmp(lo, hi) == 0 ? "" : lo, strcmp(lo, hi) == 0 ? "" : " to ", hi);
    }
    /* Legend in its own band above the panels. */
    double lx = left;
    fprintf(out,
            "<g class=\"legend\"><rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"22\" "
            "fill=\"none\" stroke=\"#ddd\"/>\n",
            left, legend_top, frame.width);
    for (size_t k = 0; k < panels; k++) {
        fprintf(out,
                "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
                "stroke-width=\"2\"/><circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>"
                "<text x=\"%.1f\" y=\"%.1f\">",
                lx + 10, legend_top + 11, lx + 34, legend_top + 11, series[k].colour, lx + 22,
                legend_top + 11, series[k].colour, lx + 40, legend_top + 15);
        svg_escape(out, series[k].name);
        fprintf(out, "</text>\n");
        lx += 60 + 7.0 * (double)strlen(series[k].name);
    }
    if (band)
        fprintf(out,
                "<rect x=\"%.1f\" y=\"%.1f\" width=\"24\" height=\"10\" fill=\"#888\" "
                "fill-opacity=\"0.3\"/><text x=\"%.1f\" y=\"%.1f\">band</text>\n",
                lx + 10, legend_top + 6, lx + 40, legend_top + 15);
    fprintf(out, "</g>\n");
    for (size_t k = 0; k < panels; k++)
        plan_panel(out, &frame, &series[k], sorted, n, panels_top + (double)k * (panel_h + gap),
                   panel_h);
    /* The GPU axis: each size, its days, scaling efficiency and assumed share. */
    fprintf(out,
            "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">GPUs</text>\n"
            "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" fill=\"#555\">days</text>\n"
            "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" fill=\"#555\">efficiency</text>\n",
            left - 6, axis_y + 18, left - 6, axis_y + 36, left - 6, axis_y + 54);
    if (assumed)
        fprintf(out,
                "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" fill=\"#b03a2e\">assumed</text>\n",
                left - 6, axis_y + 72);
    for (size_t i = 0; i < n; i++) {
        double x = plan_x(&frame, (double)sorted[i]->gpus);
        char share[16];
        share_text(shares[i], share, sizeof(share));
        fprintf(out,
                "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%lld</text>\n"
                "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" fill=\"#555\">%.3g</text>\n"
                "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" fill=\"#555\">%.1f%%</text>\n",
                x, axis_y + 18, (long long)sorted[i]->gpus, x, axis_y + 36, sorted[i]->days, x,
                axis_y + 54, 100.0 * sorted[i]->efficiency);
        if (assumed)
            fprintf(
                out,
                "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\" fill=\"#b03a2e\">%s</text>\n",
                x, axis_y + 72, share);
    }
    fprintf(out, "</svg>\n");
    int failed = ferror(out);
    if (fclose(out) != 0 || failed) {
        remove(path);
        return DSI_ERROR(DS_ERR_IO, "writing %s failed", path);
    }
    return DS_OK;
}
