/*
 * SVG Gantt chart of the reported iteration: a row per distinct timeline of
 * the devices shown (devices whose iteration-2 events have the same kind,
 * stream, start and end are one row, labelled with their ranks), or per
 * stage when there are many; the compute stream as a tall bar coloured by
 * pass, the communication streams as a thin band under it, idle left pale
 * grey.  The legend names only the kinds drawn.  Neighbouring rectangles of
 * one colour closer than a pixel are merged so large timelines stay small
 * files.
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
    bool drawn[DS_SIM_CAT_COUNT_]; /* kinds that got a rectangle (the legend) */
} pending_rect_t;

static void flush(FILE *out, pending_rect_t *r)
{
    if (!r->open)
        return;
    double w = r->x1 - r->x0;
    if (w < 1.0)
        w = 1.0; /* every kind in the legend can be seen */
    fprintf(out, "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"%s\"/>\n",
            r->x0, r->y, w, r->h, colour((ds_sim_category_t)r->cat));
    if (r->cat >= 0 && r->cat < DS_SIM_CAT_COUNT_)
        r->drawn[r->cat] = true;
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

/* One event of the reported iteration as the chart draws it. */
typedef struct span {
    int64_t start_ns, end_ns;
    int32_t category, stream;
} span_t;

/* Devices whose reported iteration is the same sequence of spans: one row. */
typedef struct timeline_row {
    int64_t first_rank; /* the row draws this device's events */
    uint64_t hash;
    size_t num_spans;
    size_t members;
} timeline_row_t;

/* The spans of `rank`'s reported iteration into *spans_p (grown as needed). */
static ds_status_t rank_spans(ds_sim_t *sim, int64_t rank, span_t **spans_p, size_t *capacity_p,
                              size_t *count_p)
{
    const ds_sim_event_t *events;
    size_t count;
    DSI_TRY(ds_sim_device_events(sim, rank, &events, &count));
    if (count > *capacity_p) {
        DSI_TRY(dsi_realloc_array(spans_p, count, sizeof(**spans_p)));
        *capacity_p = count;
    }
    size_t n = 0;
    for (size_t i = 0; i < count; i++) {
        if (events[i].iteration != 2)
            continue;
        span_t *s = &(*spans_p)[n++];
        memset(s, 0, sizeof(*s));
        s->start_ns = events[i].start_ns;
        s->end_ns = events[i].end_ns;
        s->category = (int32_t)events[i].category;
        s->stream = (int32_t)events[i].stream;
    }
    *count_p = n;
    return DS_OK;
}

/* Puts each of `ranks` in the row of the first earlier rank with the same
 * spans (row_of[i]), a new row otherwise.  Stops once there are more than
 * `limit` rows (*num_rows_p then says limit + 1).  `rows` holds n. */
static ds_status_t group_rows(ds_sim_t *sim, const int64_t *ranks, size_t n, size_t limit,
                              timeline_row_t *rows, size_t *row_of, size_t *num_rows_p)
{
    ds_status_t status = DS_OK;
    span_t *mine = NULL, *theirs = NULL;
    size_t mine_cap = 0, theirs_cap = 0, num_rows = 0;
    for (size_t i = 0; i < n && num_rows <= limit; i++) {
        size_t count, other;
        DSI_TRY_GOTO(rank_spans(sim, ranks[i], &mine, &mine_cap, &count), status, out);
        uint64_t hash = dsi_hash64(mine, count * sizeof(*mine), (uint64_t)count);
        size_t row = num_rows;
        for (size_t r = 0; r < num_rows && row == num_rows; r++) {
            if (rows[r].hash != hash || rows[r].num_spans != count)
                continue;
            DSI_TRY_GOTO(rank_spans(sim, rows[r].first_rank, &theirs, &theirs_cap, &other), status,
                         out);
            if (other == count && (count == 0 || memcmp(mine, theirs, count * sizeof(*mine)) == 0))
                row = r;
        }
        if (row == num_rows)
            rows[num_rows++] = (timeline_row_t){ranks[i], hash, count, 0};
        rows[row].members++;
        row_of[i] = row;
    }
    *num_rows_p = num_rows;
out:
    dsi_free(theirs);
    dsi_free(mine);
    return status;
}

static int by_value(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Sorted numbers as ranges, "0-7,32-39"; past about 18 characters the rest
 * is cut to ",... (N in all)". */
static void format_ranges(const int64_t *values, size_t n, char *text, size_t size)
{
    dsi_strbuf_t buf;
    dsi_strbuf_init_fixed(&buf, text, size);
    for (size_t i = 0; i < n;) {
        size_t j = i;
        while (j + 1 < n && values[j + 1] == values[j] + 1)
            j++;
        if (buf.length > 18) {
            dsi_strbuf_appendf(&buf, ",... (%zu in all)", n);
            break;
        }
        dsi_strbuf_appendf(&buf, "%s%lld", i > 0 ? "," : "", (long long)values[i]);
        if (j > i)
            dsi_strbuf_appendf(&buf, "-%lld", (long long)values[j]);
        i = j + 1;
    }
}

/* The label of a row: the ranks (or stages) it stands for. */
static ds_status_t row_label(const ds_strategy_t *s, const int64_t *ranks, size_t n,
                             const size_t *row_of, size_t row, bool per_stage, char *text,
                             size_t size)
{
    int64_t *members = NULL;
    size_t count = 0;
    DSI_TRY(dsi_malloc(n * sizeof(*members), &members));
    int64_t first = -1;
    for (size_t i = 0; i < n; i++)
        if (row_of[i] == row) {
            if (count == 0)
                first = ranks[i];
            members[count++] = ranks[i];
        }
    ds_coords_t c = ds_strategy_coords_of(s, first);
    bool one_stage = true;
    for (size_t i = 0; i < count; i++) {
        ds_coords_t other = ds_strategy_coords_of(s, members[i]);
        one_stage = one_stage && other.pp == c.pp;
        if (per_stage)
            members[i] = other.pp;
    }
    qsort(members, count, sizeof(*members), by_value);
    char list[64];
    format_ranges(members, count, list, sizeof(list));
    if (per_stage && count == 1)
        snprintf(text, size, "stage %d (rank %lld)", c.pp, (long long)first);
    else if (per_stage)
        snprintf(text, size, "stages %s (tp rank 0)", list);
    else if (count == 1)
        snprintf(text, size, "rank %lld  tp%d pp%d", (long long)first, c.tp, c.pp);
    else if (one_stage)
        snprintf(text, size, "ranks %s  pp%d", list, c.pp);
    else
        snprintf(text, size, "ranks %s", list);
    dsi_free(members);
    return DS_OK;
}

/* "; ASSUMED: 100% of the event time rests on modelled or assumed costs", or nothing
 * when no event time rests on assumed costs. */
static void assumed_note(double share, char *text, size_t size)
{
    double percent = 100.0 * share;
    char amount[16];
    if (!(share > 0.0)) {
        text[0] = '\0';
        return;
    }
    if (share >= 1.0 - 1e-9)
        snprintf(amount, sizeof(amount), "100%%");
    else if (percent >= 99.5)
        snprintf(amount, sizeof(amount), "%.1f%%", DSI_MIN(percent, 99.9));
    else if (percent < 0.5)
        snprintf(amount, sizeof(amount), "under 0.5%%");
    else
        snprintf(amount, sizeof(amount), "%.0f%%", percent);
    snprintf(text, size, "; ASSUMED: %s of the event time rests on modelled or assumed costs",
             amount);
}

/* The document, its background and the title lines. */
static void svg_title(ds_sim_t *sim, FILE *chart, double height, bool per_stage, bool shared_rows)
{
    char strategy[DS_STRATEGY_TEXT_MAX], assumed[96];
    ds_strategy_format(&sim->given, strategy, sizeof(strategy));
    assumed_note(sim->results.summary.assumed_share, assumed, sizeof(assumed));
    fprintf(chart,
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
            "viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\" font-size=\"12\">\n",
            WIDTH, height, WIDTH, height);
    fprintf(chart, "<rect x=\"0\" y=\"0\" width=\"%.0f\" height=\"%.0f\" fill=\"white\"/>\n", WIDTH,
            height);
    fprintf(chart, "<text x=\"%.0f\" y=\"22\" font-size=\"15\" font-weight=\"bold\">", LEFT);
    xml_text(chart, sim->info.name);
    fprintf(chart, " on %lld GPUs: ", (long long)sim->num_devices);
    xml_text(chart, strategy);
    fprintf(chart,
            "</text>\n<text x=\"%.0f\" y=\"40\">iteration %.3f ms, bubble %.1f%%, MFU "
            "%.1f%%%s%s</text>\n",
            LEFT, sim->results.summary.iteration_s * 1e3,
            100.0 * sim->results.summary.bubble_fraction, 100.0 * sim->results.summary.mfu,
            per_stage     ? "; one row per stage (replica 0, tp rank 0)"
            : shared_rows ? "; devices with identical timelines share a row"
                          : "",
            assumed);
}

/* Grid lines and labels of the time axis over `span` ns; returns the
 * bottom of the rows. */
static double svg_time_axis(FILE *chart, int64_t span, size_t num_rows)
{
    double plot = WIDTH - LEFT - RIGHT;
    double span_ms = (double)span / 1e6;
    double raw = span_ms / 10.0, magnitude = pow(10.0, floor(log10(raw)));
    double step_ms = raw <= magnitude       ? magnitude
                     : raw <= 2 * magnitude ? 2 * magnitude
                     : raw <= 5 * magnitude ? 5 * magnitude
                                            : 10 * magnitude;
    double bottom = TOP + ROW * (double)num_rows;
    for (double t = 0; t <= span_ms + 1e-12; t += step_ms) {
        double x = LEFT + plot * t / span_ms;
        fprintf(chart,
                "<line x1=\"%.1f\" y1=\"%.0f\" x2=\"%.1f\" y2=\"%.0f\" stroke=\"#dddddd\"/>\n", x,
                TOP - 6, x, bottom);
        fprintf(
            chart,
            "<text x=\"%.1f\" y=\"%.0f\" text-anchor=\"middle\" fill=\"#555555\">%.4g ms</text>\n",
            x, bottom + 16, t);
    }
    return bottom;
}

/* The legend below the rows at `bottom`. */
static void svg_legend(FILE *chart, const ds_strategy_t *s, const pending_rect_t *pending,
                       double bottom)
{
    /* Legend: the kinds drawn, then idle (the rows' background). */
    double ly = bottom + 36;
    double lx = LEFT;
    for (int cat = 0; cat < DS_SIM_CAT_COUNT_; cat++) {
        if (!pending->drawn[cat])
            continue;
        fprintf(chart,
                "<rect x=\"%.0f\" y=\"%.0f\" width=\"14\" height=\"14\" fill=\"%s\"/>"
                "<text x=\"%.0f\" y=\"%.0f\">%s</text>\n",
                lx, ly, colour((ds_sim_category_t)cat), lx + 18, ly + 11,
                ds_sim_category_name((ds_sim_category_t)cat));
        lx += 125;
    }
    fprintf(chart,
            "<rect x=\"%.0f\" y=\"%.0f\" width=\"14\" height=\"14\" fill=\"#eeeeee\"/>"
            "<text x=\"%.0f\" y=\"%.0f\">idle</text>\n",
            lx, ly, lx + 18, ly + 11);
    if (s->tp > 1 && !pending->drawn[DS_SIM_CAT_TP])
        fprintf(chart,
                "<text x=\"%.0f\" y=\"%.0f\" fill=\"#555555\">(tensor-parallel collectives "
                "are inside the forward and backward bars)</text>\n",
                LEFT, ly + 31);
}

ds_status_t ds_sim_write_svg(ds_sim_t *sim, const char *path, const int64_t *ranks,
                             size_t num_ranks, int max_rows)
{
    if (!sim->results.evaluated)
        return DSI_ERROR(DS_ERR_INVALID_ARG, "no simulation has run on this simulator");
    const ds_strategy_t *s = &sim->s;
    ds_status_t status = DS_OK;
    int64_t *shown = NULL;
    size_t *row_of = NULL;
    timeline_row_t *rows = NULL;
    FILE *chart = NULL;
    size_t n = 0, num_rows = 0;
    bool per_stage = false;
    if (max_rows < 1)
        max_rows = 64;
    if (ranks != NULL && num_ranks > 0) {
        n = DSI_MIN(num_ranks, (size_t)4096);
        DSI_TRY_GOTO(dsi_malloc(n * sizeof(*shown), &shown), status, out);
        memcpy(shown, ranks, n * sizeof(*shown));
    } else {
        /* Every device of replica 0 (at most 4096), one row per distinct timeline. */
        size_t devices = DSI_MIN((size_t)s->tp * (size_t)s->pp, (size_t)4096);
        DSI_TRY_GOTO(dsi_malloc(devices * sizeof(*shown), &shown), status, out);
        for (int p = 0; p < s->pp && n < devices; p++)
            for (int t = 0; t < s->tp && n < devices; t++)
                shown[n++] = ds_strategy_rank_of(s, (ds_coords_t){t, 0, p});
    }
    DSI_TRY_GOTO(dsi_malloc(n * sizeof(*row_of), &row_of), status, out);
    DSI_TRY_GOTO(dsi_malloc(n * sizeof(*rows), &rows), status, out);
    /* Chosen ranks are all drawn; replica 0 per stage when its distinct timelines are more
     * than max_rows and than its stages. */
    size_t limit = ranks != NULL && num_ranks > 0 ? n : DSI_MAX((size_t)max_rows, (size_t)s->pp);
    DSI_TRY_GOTO(group_rows(sim, shown, n, limit, rows, row_of, &num_rows), status, out);
    if (num_rows > limit) {
        per_stage = true;
        n = 0;
        for (int p = 0; p < s->pp; p++)
            shown[n++] = ds_strategy_rank_of(s, (ds_coords_t){0, 0, p});
        DSI_TRY_GOTO(group_rows(sim, shown, n, n, rows, row_of, &num_rows), status, out);
    }
    chart = fopen(path, "w");
    if (chart == NULL) {
        status = DSI_ERROR(DS_ERR_IO, "cannot write the chart '%s'", path);
        goto out;
    }
    int64_t origin = sim->results.it2_begin, span = sim->results.it_end[2] - origin;
    if (span <= 0)
        span = 1;
    double plot = WIDTH - LEFT - RIGHT;
    double height = TOP + ROW * (double)num_rows + 84.0; /* axis, legend, a note */
    svg_title(sim, chart, height, per_stage, num_rows < n);
    double bottom = svg_time_axis(chart, span, num_rows);
    pending_rect_t pending;
    memset(&pending, 0, sizeof(pending));
    for (size_t r = 0; r < num_rows; r++) {
        char label[128];
        DSI_TRY_GOTO(row_label(s, shown, n, row_of, r, per_stage, label, sizeof(label)), status,
                     out);
        double y = TOP + ROW * (double)r;
        fprintf(chart, "<text x=\"%.0f\" y=\"%.1f\" text-anchor=\"end\">", LEFT - 8, y + BAR * 0.7);
        xml_text(chart, label);
        fprintf(chart,
                "</text>\n<rect x=\"%.0f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" "
                "fill=\"#eeeeee\"/>\n",
                LEFT, y, plot, BAR + 6);
        const ds_sim_event_t *events;
        size_t count;
        DSI_TRY_GOTO(ds_sim_device_events(sim, rows[r].first_rank, &events, &count), status, out);
        for (size_t i = 0; i < count; i++) {
            const ds_sim_event_t *e = &events[i];
            if (e->iteration != 2)
                continue;
            double x0 = LEFT + plot * (double)(e->start_ns - origin) / (double)span;
            double x1 = LEFT + plot * (double)(e->end_ns - origin) / (double)span;
            if (e->stream == DS_SIM_STREAM_COMPUTE)
                rect(chart, &pending, x0, x1, y, BAR, e->category);
            else
                rect(chart, &pending, x0, x1, y + BAR + 1, 5, e->category);
        }
        flush(chart, &pending);
    }
    svg_legend(chart, s, &pending, bottom);
    fprintf(chart, "</svg>\n");
out:
    if (chart != NULL && fclose(chart) != 0 && status == DS_OK)
        status = DSI_ERROR(DS_ERR_IO, "writing the chart '%s' failed", path);
    if (chart != NULL && status != DS_OK)
        remove(path); /* no half-written chart */
    dsi_free(rows);
    dsi_free(row_of);
    dsi_free(shown);
    return status;
}
