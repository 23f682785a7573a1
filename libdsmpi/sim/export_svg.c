/*
 * SVG Gantt chart of the reported iteration: a row per device (or per stage
 * when there are many), the compute stream as a tall bar coloured by pass,
 * the communication streams as a thin band under it, idle left pale grey.
 * Neighbouring rectangles of one colour closer than a pixel are merged so
 * large timelines stay small files.
 */
#include "dsi_sim.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define WIDTH 1400.0
#define LEFT 170.0
#define RIGHT 20.0
#define TOP 60.0
#define ROW 34.0
#define BAR 22.0

static const char *colour(ds_sim_category_t c)
{
    switch (c) {
    case DS_SIM_CAT_FORWARD: return "#4e79a7";
    case DS_SIM_CAT_BACKWARD: return "#59a14f";
    case DS_SIM_CAT_OPTIMIZER: return "#b07aa1";
    case DS_SIM_CAT_TP: return "#f28e2b";
    case DS_SIM_CAT_PP: return "#e15759";
    case DS_SIM_CAT_DP: return "#76b7b2";
    case DS_SIM_CAT_OTHER: return "#edc948";
    case DS_SIM_CAT_WAIT:
    case DS_SIM_CAT_COUNT_: break;
    }
    return "#bab0ac";
}

typedef struct pending_rect {
    double x0, x1, y, h;
    int cat;
    bool open;
} pending_rect_t;

static void flush(FILE *out, pending_rect_t *r)
{
    if (!r->open)
        return;
    double w = r->x1 - r->x0;
    if (w < 0.2)
        w = 0.2;
    fprintf(out, "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"%s\"/>\n",
            r->x0, r->y, w, r->h, colour((ds_sim_category_t)r->cat));
    r->open = false;
}

static void rect(FILE *out, pending_rect_t *r, double x0, double x1, double y, double h, int cat)
{
    if (r->open && r->cat == cat && r->y == y && x0 - r->x1 < 1.0) {
        if (x1 > r->x1)
            r->x1 = x1;
        return;
    }
    flush(out, r);
    r->x0 = x0;
    r->x1 = x1;
    r->y = y;
    r->h = h;
    r->cat = cat;
    r->open = true;
}

static void xml_text(FILE *out, const char *text)
{
    for (const char *c = text; *c != '\0'; c++) {
        switch (*c) {
        case '&': fputs("&amp;", out); break;
        case '<': fputs("&lt;", out); break;
        case '>': fputs("&gt;", out); break;
        case '"': fputs("&quot;", out); break;
        default: fputc(*c, out);
        }
    }
}

ds_status_t ds_sim_write_svg(ds_sim_t *sim, const char *path, const int64_t *ranks,
                             size_t num_ranks, int max_rows)
{
    if (!sim->evaluated)
        return DSI_ERROR(DS_ERR_INVALID_ARG, "no simulation has run on this simulator");
    const ds_strategy_t *s = &sim->s;
    ds_status_t status = DS_OK;
    int64_t *rows = NULL;
    size_t n = 0;
    bool per_stage = false;
    if (max_rows < 1)
        max_rows = 64;
    if (ranks != NULL && num_ranks > 0) {
        n = DSI_MIN(num_ranks, (size_t)4096);
        DSI_TRY(dsi_malloc(n * sizeof(*rows), &rows));
        memcpy(rows, ranks, n * sizeof(*rows));
    } else {
        size_t devices = (size_t)s->tp * s->pp;
        per_stage = devices > (size_t)max_rows;
        n = per_stage ? (size_t)s->pp : devices;
        DSI_TRY(dsi_malloc(n * sizeof(*rows), &rows));
        size_t k = 0;
        for (int p = 0; p < s->pp; p++)
            for (int t = 0; t < (per_stage ? 1 : s->tp); t++)
                rows[k++] = ds_strategy_rank_of(s, (ds_coords_t){t, 0, p});
    }
    FILE *out = fopen(path, "w");
    if (out == NULL) {
        dsi_free(rows);
        return DSI_ERROR(DS_ERR_IO, "cannot write the chart '%s'", path);
    }
    int64_t origin = sim->it2_begin, span = sim->it_end[2] - origin;
    if (span <= 0)
        span = 1;
    double plot = WIDTH - LEFT - RIGHT;
    double height = TOP + ROW * (double)n + 70.0;
    char strategy[DS_STRATEGY_TEXT_MAX];
    ds_strategy_format(s, strategy, sizeof(strategy));
    fprintf(out,
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
            "viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\" font-size=\"12\">\n",
            WIDTH, height, WIDTH, height);
    fprintf(out, "<rect x=\"0\" y=\"0\" width=\"%.0f\" height=\"%.0f\" fill=\"white\"/>\n", WIDTH,
            height);
    fprintf(out, "<text x=\"%.0f\" y=\"22\" font-size=\"15\" font-weight=\"bold\">", LEFT);
    xml_text(out, sim->info.name);
    fprintf(out, " on %lld GPUs: ", (long long)sim->num_devices);
    xml_text(out, strategy);
    fprintf(out,
            "</text>\n<text x=\"%.0f\" y=\"40\">iteration %.3f ms, bubble %.1f%%, MFU "
            "%.1f%%%s%s</text>\n",
            LEFT, sim->summary.iteration_s * 1e3, 100.0 * sim->summary.bubble_fraction,
            100.0 * sim->summary.mfu, per_stage ? ", one row per stage (replica 0, tp rank 0)" : "",
            sim->summary.assumed_keys > 0 ? "; costs partly ASSUMED (roofline)" : "");
    /* Time axis. */
    double span_ms = (double)span / 1e6;
    double raw = span_ms / 10.0, magnitude = pow(10.0, floor(log10(raw)));
    double step_ms = raw <= magnitude       ? magnitude
                     : raw <= 2 * magnitude ? 2 * magnitude
                     : raw <= 5 * magnitude ? 5 * magnitude
                                            : 10 * magnitude;
    for (double t = 0; t <= span_ms + 1e-12; t += step_ms) {
        double x = LEFT + plot * t / span_ms;
        fprintf(out, "<line x1=\"%.1f\" y1=\"%.0f\" x2=\"%.1f\" y2=\"%.0f\" stroke=\"#dddddd\"/>\n",
                x, TOP - 6, x, TOP + ROW * (double)n);
        fprintf(
            out,
            "<text x=\"%.1f\" y=\"%.0f\" text-anchor=\"middle\" fill=\"#555555\">%.4g ms</text>\n",
            x, TOP + ROW * (double)n + 16, t);
    }
    pending_rect_t pending = {0, 0, 0, 0, 0, false};
    for (size_t r = 0; r < n && status == DS_OK; r++) {
        int64_t rank = rows[r];
        ds_coords_t c = ds_strategy_coords_of(s, rank);
        double y = TOP + ROW * (double)r;
        fprintf(out, "<text x=\"%.0f\" y=\"%.1f\" text-anchor=\"end\">", LEFT - 8, y + BAR * 0.7);
        if (per_stage)
            fprintf(out, "stage %d (rank %lld)", c.pp, (long long)rank);
        else
            fprintf(out, "rank %lld  tp%d pp%d", (long long)rank, c.tp, c.pp);
        fprintf(out,
                "</text>\n<rect x=\"%.0f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" "
                "fill=\"#eeeeee\"/>\n",
                LEFT, y, plot, BAR + 6);
        const ds_sim_event_t *events;
        size_t count;
        status = ds_sim_device_events(sim, rank, &events, &count);
        if (status != DS_OK)
            break;
        for (size_t i = 0; i < count; i++) {
            const ds_sim_event_t *e = &events[i];
            if (e->iteration != 2)
                continue;
            double x0 = LEFT + plot * (double)(e->start_ns - origin) / (double)span;
            double x1 = LEFT + plot * (double)(e->end_ns - origin) / (double)span;
            if (e->stream == DS_SIM_STREAM_COMPUTE)
                rect(out, &pending, x0, x1, y, BAR, e->category);
            else
                rect(out, &pending, x0, x1, y + BAR + 1, 5, e->category);
        }
        flush(out, &pending);
    }
    /* Legend. */
    double ly = TOP + ROW * (double)n + 36;
    double lx = LEFT;
    for (int cat = 0; cat < DS_SIM_CAT_WAIT; cat++) {
        fprintf(out,
                "<rect x=\"%.0f\" y=\"%.0f\" width=\"14\" height=\"14\" fill=\"%s\"/>"
                "<text x=\"%.0f\" y=\"%.0f\">%s</text>\n",
                lx, ly, colour((ds_sim_category_t)cat), lx + 18, ly + 11,
                ds_sim_category_name((ds_sim_category_t)cat));
        lx += 125;
    }
    fprintf(out,
            "<rect x=\"%.0f\" y=\"%.0f\" width=\"14\" height=\"14\" fill=\"#eeeeee\"/>"
            "<text x=\"%.0f\" y=\"%.0f\">idle</text>\n</svg>\n",
            lx, ly, lx + 18, ly + 11);
    if (fclose(out) != 0 && status == DS_OK)
        status = DSI_ERROR(DS_ERR_IO, "writing the chart '%s' failed", path);
    dsi_free(rows);
    return status;
}
