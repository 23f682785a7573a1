/* plan --report DIR: the plan as a reviewer reads it.  report.md and
 * report.html say the same: the request, the model and budget, each size's
 * best strategy with low / expected / high days, GPU-hours, node-hours and
 * site units, what the numbers rest on, the sensitivity to a slower network
 * and slower kernels, and how to reproduce them.  The HTML carries its CSS
 * and the charts inline and references nothing outside itself. */
#include "plan_report.h"

#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

/* The smallest share of the smallest size's scaling efficiency a size must
 * keep to be the one requested. */
#define REQUEST_MIN_EFFICIENCY 0.8

ds_status_t plan_report_check_dir(const char *dir, bool force)
{
    struct stat st;
    if (stat(dir, &st) != 0)
        return DS_OK; /* created when writing */
    if (!S_ISDIR(st.st_mode))
        return ds_set_error(DS_ERR_INVALID_ARG,
                            "--report %s is not a directory (accepted: a new or empty directory)",
                            dir);
    DIR *d = opendir(dir);
    if (d == NULL)
        return ds_set_error(DS_ERR_INVALID_ARG, "--report %s cannot be read: %s", dir,
                            strerror(errno));
    bool empty = true;
    for (struct dirent *e = readdir(d); e != NULL && empty; e = readdir(d))
        empty = strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0;
    closedir(d);
    if (!empty && !force)
        return ds_set_error(DS_ERR_INVALID_ARG,
                            "--report %s exists and is not empty (accepted: a new or empty "
                            "directory, or --force to write report.md, report.html, plan.svg and "
                            "sensitivity.svg into it)",
                            dir);
    return DS_OK;
}

ds_status_t plan_report_make_dir(const char *dir)
{
    char path[4096];
    if (strlen(dir) >= sizeof(path))
        return ds_set_error(DS_ERR_INVALID_ARG, "--report path is longer than %zu characters",
                            sizeof(path) - 1);
    strcpy(path, dir);
    for (char *c = path + 1; *c != '\0'; c++)
        if (*c == '/') {
            *c = '\0';
            (void)mkdir(path, 0777);
            *c = '/';
        }
    if (mkdir(path, 0777) != 0 && errno != EEXIST)
        return ds_set_error(DS_ERR_IO, "cannot create --report directory %s: %s", dir,
                            strerror(errno));
    return DS_OK;
}

/* ---- sensitivity ----------------------------------------------------------------- */

/* A table of every cost `sim`'s last run used, communication x comm_factor
 * and compute x compute_factor; a cost of `costs` keeps its spread and
 * repetitions, scaled. */
static ds_status_t scaled_costs(const ds_sim_t *sim, const ds_cost_table_t *costs,
                                double comm_factor, double compute_factor,
                                ds_cost_table_t **table_p)
{
    ds_cost_table_t *table = NULL;
    ds_status_t status = ds_cost_table_create(&table);
    for (size_t i = 0; status == DS_OK && i < ds_sim_key_count(sim); i++) {
        ds_provenance_t provenance;
        double seconds;
        const ds_event_key_t *key = ds_sim_key_at(sim, i, &provenance, &seconds);
        const ds_cost_t *known = costs != NULL ? ds_cost_table_find(costs, key) : NULL;
        ds_cost_t cost = {seconds, seconds, seconds, seconds, 0, provenance};
        if (known != NULL && known->mean_s == seconds)
            cost = *known;
        double f = key->kind == DS_EVENT_COMM ? comm_factor : compute_factor;
        cost.mean_s *= f;
        cost.median_s *= f;
        cost.p10_s *= f;
        cost.p90_s *= f;
        status = ds_cost_table_set(table, key, &cost);
    }
    if (status == DS_OK)
        *table_p = table;
    else
        ds_cost_table_destroy(table);
    return status;
}

static ds_status_t rerun(ds_sim_t *sim, const ds_model_t *model, const ds_strategy_t *strategy,
                         const ds_cluster_t *cluster, const ds_cost_table_t *costs,
                         double peak_tflops, double *iteration_p)
{
    ds_sim_options_t so;
    ds_sim_options_init(&so);
    so.keep_timeline = 0;
    so.peak_tflops = peak_tflops;
    ds_status_t status = ds_sim_run(sim, model, strategy, cluster, costs, &so);
    if (status == DS_OK) {
        ds_sim_summary_t summary;
        ds_sim_get_summary(sim, &summary);
        *iteration_p = summary.iteration_s;
    }
    return status;
}

ds_status_t plan_report_sensitivity(const ds_model_t *model, const ds_cluster_t *cluster,
                                    const ds_cost_table_t *costs, const ds_comm_model_t *comm,
                                    bool estimate, double peak_tflops, const ds_plan_inputs_t *plan,
                                    int64_t tokens_per_sample, plan_report_size_t *size)
{
    ds_sim_t *sim = NULL, *again = NULL;
    ds_cost_table_t *base = NULL, *network = NULL, *kernels = NULL;
    ds_status_t status = ds_sim_create(&sim);
    if (status == DS_OK)
        status = ds_sim_create(&again);
    ds_sim_options_t so;
    ds_sim_options_init(&so);
    so.estimate_missing = estimate;
    so.comm_model = comm;
    so.keep_timeline = 0;
    so.peak_tflops = peak_tflops;
    if (status == DS_OK)
        status = ds_sim_run(sim, model, &size->strategy, cluster, costs, &so);
    for (size_t i = 0; status == DS_OK && i < ds_sim_key_count(sim); i++) {
        ds_provenance_t provenance;
        double seconds;
        (void)ds_sim_key_at(sim, i, &provenance, &seconds);
        if (provenance >= 0 && provenance < DS_PROV_COUNT_)
            size->keys[provenance]++;
    }
    if (status == DS_OK)
        status = scaled_costs(sim, costs, 1.0, 1.0, &base);
    if (status == DS_OK)
        status = scaled_costs(sim, costs, PLAN_REPORT_NETWORK_SLOWER, 1.0, &network);
    if (status == DS_OK)
        status = scaled_costs(sim, costs, 1.0, PLAN_REPORT_KERNELS_SLOWER, &kernels);
    if (status == DS_OK)
        status = rerun(again, model, &size->strategy, cluster, base, peak_tflops, &size->base_s);
    if (status == DS_OK)
        status =
            rerun(again, model, &size->strategy, cluster, network, peak_tflops, &size->network_s);
    if (status == DS_OK)
        status =
            rerun(again, model, &size->strategy, cluster, kernels, peak_tflops, &size->kernels_s);
    int64_t gbs = size->strategy.gbs;
    if (status == DS_OK)
        status = ds_plan_row_compute(plan, size->gpus, size->network_s, gbs, tokens_per_sample,
                                     &size->network_row);
    if (status == DS_OK)
        status = ds_plan_row_compute(plan, size->gpus, size->kernels_s, gbs, tokens_per_sample,
                                     &size->kernels_row);
    size->sensitivity = status == DS_OK;
    ds_cost_table_destroy(kernels);
    ds_cost_table_destroy(network);
    ds_cost_table_destroy(base);
    ds_sim_destroy(again);
    ds_sim_destroy(sim);
    return status;
}

/* ---- one writer, two formats ------------------------------------------------------- */

typedef struct doc {
    FILE *f;
    bool html;
} doc_t;

static void escaped(const doc_t *d, const char *text)
{
    for (const char *c = text; *c != '\0'; c++) {
        if (d->html && *c == '<')
            fputs("&lt;", d->f);
        else if (d->html && *c == '>')
            fputs("&gt;", d->f);
        else if (d->html && *c == '&')
            fputs("&amp;", d->f);
        else if (d->html && *c == ',')
            fputs(",<wbr>", d->f); /* strategies break after their items */
        else if (!d->html && *c == '|')
            fputs("\\|", d->f);
        else
            fputc(*c, d->f);
    }
}

static void heading(const doc_t *d, int level, const char *text)
{
    if (d->html) {
        fprintf(d->f, "<h%d>", level);
        escaped(d, text);
        fprintf(d->f, "</h%d>\n", level);
    } else {
        fprintf(d->f, "\n%.*s ", level, "####");
        escaped(d, text);
        fputs("\n\n", d->f);
    }
}

static void paragraph(const doc_t *d, const char *text)
{
    fputs(d->html ? "<p>" : "", d->f);
    escaped(d, text);
    fputs(d->html ? "</p>\n" : "\n\n", d->f);
}

static void item(const doc_t *d, const char *label, const char *text)
{
    fputs(d->html ? "<li><b>" : "- **", d->f);
    escaped(d, label);
    fputs(d->html ? "</b> " : "** ", d->f);
    escaped(d, text);
    fputs(d->html ? "</li>\n" : "\n", d->f);
}

static void list_edge(const doc_t *d, bool open)
{
    if (d->html)
        fputs(open ? "<ul>\n" : "</ul>\n", d->f);
    else if (!open)
        fputs("\n", d->f);
}

static void row(const doc_t *d, const char *const *cells, int n, bool header)
{
    if (d->html) {
        fputs("<tr>", d->f);
        for (int i = 0; i < n; i++) {
            fputs(header ? "<th>" : "<td>", d->f);
            escaped(d, cells[i]);
            fputs(header ? "</th>" : "</td>", d->f);
        }
        fputs("</tr>\n", d->f);
        return;
    }
    fputs("|", d->f);
    for (int i = 0; i < n; i++) {
        fputc(' ', d->f);
        escaped(d, cells[i]);
        fputs(" |", d->f);
    }
    fputs("\n", d->f);
    if (header) {
        fputs("|", d->f);
        for (int i = 0; i < n; i++)
            fputs(i == 2 ? ":---|" : "---:|", d->f); /* the strategy column reads left */
        fputs("\n", d->f);
    }
}

static void table_edge(const doc_t *d, bool open)
{
    if (d->html)
        fputs(open ? "<table>\n" : "</table>\n", d->f);
    else if (!open)
        fputs("\n", d->f);
}

/* An SVG file of the report's directory: inline in the HTML (without its XML
 * namespace, which HTML does not need), an image link in the Markdown. */
static ds_status_t chart(const doc_t *d, const char *dir, const char *name, const char *caption)
{
    if (!d->html) {
        fprintf(d->f, "![%s](%s)\n\n", caption, name);
        return DS_OK;
    }
    char path[4200];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *in = fopen(path, "r");
    if (in == NULL)
        return ds_set_error(DS_ERR_IO, "cannot read %s back: %s", path, strerror(errno));
    static const char xmlns[] = " xmlns=\"http://www.w3.org/2000/svg\"";
    char line[8192];
    fprintf(d->f, "<figure>\n");
    while (fgets(line, sizeof(line), in) != NULL) {
        char *ns = strstr(line, xmlns);
        if (ns != NULL)
            memmove(ns, ns + strlen(xmlns), strlen(ns + strlen(xmlns)) + 1);
        fputs(line, d->f);
    }
    fclose(in);
    fprintf(d->f, "<figcaption>");
    escaped(d, caption);
    fprintf(d->f, "</figcaption></figure>\n");
    return DS_OK;
}

/* ---- the report's content ------------------------------------------------------------ */

/* "low / expected / high" with `decimals` digits after the point. */
static const char *band3(char *text, size_t size, double low, double expected, double high,
                         int decimals)
{
    snprintf(text, size, "%.*f / %.*f / %.*f", decimals, low, decimals, expected, decimals, high);
    return text;
}

/* The size to request: the largest keeping REQUEST_MIN_EFFICIENCY of the
 * smallest's GPU-hours efficiency; -1 when no size has a strategy. */
static int requested_size(const plan_report_t *r)
{
    int chosen = -1;
    for (int i = 0; i < r->num_sizes; i++) {
        const plan_report_size_t *s = &r->sizes[i];
        if (!s->found)
            continue;
        if (chosen < 0 ||
            (s->row.efficiency >= REQUEST_MIN_EFFICIENCY && s->gpus > r->sizes[chosen].gpus))
            chosen = i;
    }
    return chosen;
}

static const char *target_title(const plan_report_t *r)
{
    return r->system != NULL ? r->system->title : r->first->name;
}

/* What the band of a size comes from, e.g. "communication and device-model
 * bands". */
static const char *band_name(const plan_report_size_t *s)
{
    if (s->band_comm_keys > 0 && s->band_device_model_keys > 0)
        return "communication and device-model bands";
    if (s->band_comm_keys > 0)
        return "communication band";
    if (s->band_device_model_keys > 0)
        return "device-model band";
    return "band, empty here (every cost measured inside its range)";
}

static void request_text(const plan_report_t *r, int k, char *text, size_t size)
{
    ds_model_info_t info;
    ds_model_get_info(r->model, &info);
    if (k < 0) {
        snprintf(text, size,
                 "No cluster size of this plan has a strategy that fits %s on %s: there is no "
                 "request to make from it.",
                 info.name, target_title(r));
        return;
    }
    const plan_report_size_t *s = &r->sizes[k];
    char units[96] = "", sensitivity[256] = "", strategy[DS_STRATEGY_TEXT_MAX];
    ds_strategy_format(&s->strategy, strategy, sizeof(strategy));
    if (r->charge_unit != NULL &&
        (strcmp(r->charge_unit, "node-hours") != 0 || s->row.service_units != s->row.node_hours))
        snprintf(units, sizeof(units), ", %.0f %s", s->row.service_units, r->charge_unit);
    if (s->sensitivity)
        snprintf(sensitivity, sizeof(sensitivity),
                 " With a network 20%% slower the run would take %.1f days, with kernels 10%% "
                 "slower %.1f days.",
                 s->network_row.days, s->kernels_row.days);
    snprintf(text, size,
             "We request %.0f node-hours (%.0f GPU-hours%s) on %s to train %s on %s. On %lld GPUs "
             "(%lld nodes) with the strategy %s, the training is predicted to take %.1f days "
             "(%.1f to %.1f days at the ends of the %s), at %.0f%% MFU. %lld "
             "GPUs is the largest size of the plan that keeps at least %.0f%% of the smallest "
             "size's GPU-hour efficiency (here %.0f%%).%s The prediction rests on %s.",
             s->row.node_hours, s->row.gpu_hours, units, target_title(r), info.name, r->budget,
             (long long)s->gpus, (long long)s->nodes, strategy, s->row.days, s->low.days,
             s->high.days, band_name(s), 100.0 * s->mfu, (long long)s->gpus,
             100.0 * REQUEST_MIN_EFFICIENCY, 100.0 * s->row.efficiency, sensitivity, r->basis);
}

static void write_inputs(const doc_t *d, const plan_report_t *r)
{
    ds_model_info_t info;
    ds_model_get_info(r->model, &info);
    char text[1024];
    heading(d, 2, "Model, budget and target");
    list_edge(d, true);
    snprintf(text, sizeof(text), "%s: %.3g B parameters, sequence %d, %s", info.name,
             info.num_parameters / 1e9, info.seq_len, ds_dtype_name(info.dtype));
    item(d, "Model", text);
    item(d, "Budget", r->budget);
    snprintf(text, sizeof(text), "%s: %s, %d per node", target_title(r), r->first->device.name,
             r->first->gpus_per_node);
    item(d, "Target", text);
    if (r->system != NULL) {
        snprintf(text, sizeof(text),
                 "%d x %.4g Gb/s NICs per node; %s; largest partition %lld nodes; sources read "
                 "%s (dsmpi systems %s)",
                 r->system->nics_per_node, r->system->nic_Gbps, r->system->topology,
                 (long long)r->system->max_nodes, r->system->read_on, r->system->name);
        item(d, "Network", text);
        snprintf(text, sizeof(text), "%s, %.4g per node-hour%s", r->system->charge_unit,
                 r->system->charge_per_node_hour,
                 r->system->charge_published ? "" : " (not published: dsmpi's default)");
        item(d, "Charged in", text);
    }
    list_edge(d, false);
}

/* Whether the site's units are a column of their own: not when they are the
 * node-hours themselves. */
static bool units_column(const plan_report_t *r)
{
    if (r->charge_unit == NULL)
        return false;
    for (int i = 0; i < r->num_sizes; i++)
        if (r->sizes[i].found && r->sizes[i].row.service_units != r->sizes[i].row.node_hours)
            return true;
    return strcmp(r->charge_unit, "node-hours") != 0;
}

static void write_sizes(const doc_t *d, const plan_report_t *r)
{
    heading(d, 2, "Best strategy per cluster size (low / expected / high)");
    bool units = units_column(r);
    char charged[64];
    snprintf(charged, sizeof(charged), "%s", units ? r->charge_unit : "");
    const char *header[] = {"GPUs",       "nodes", "best strategy", "days",    "GPU-hours",
                            "node-hours", "MFU",   "efficiency",    "assumed", charged};
    int columns = units ? 10 : 9;
    table_edge(d, true);
    row(d, header, columns, true);
    for (int i = 0; i < r->num_sizes; i++) {
        const plan_report_size_t *s = &r->sizes[i];
        char c[10][DS_STRATEGY_TEXT_MAX];
        for (int j = 0; j < 10; j++)
            c[j][0] = '\0';
        snprintf(c[0], sizeof(c[0]), "%lld", (long long)s->gpus);
        snprintf(c[1], sizeof(c[1]), "%lld", (long long)s->nodes);
        if (!s->found) {
            snprintf(c[2], sizeof(c[2]), "%s", s->note != NULL ? s->note : "no strategy");
        } else {
            ds_strategy_format(&s->strategy, c[2], sizeof(c[2]));
            band3(c[3], sizeof(c[3]), s->low.days, s->row.days, s->high.days,
                  s->high.days < 10.0 ? 2 : 1);
            band3(c[4], sizeof(c[4]), s->low.gpu_hours, s->row.gpu_hours, s->high.gpu_hours, 0);
            band3(c[5], sizeof(c[5]), s->low.node_hours, s->row.node_hours, s->high.node_hours, 0);
            snprintf(c[6], sizeof(c[6]), "%.1f%%", 100.0 * s->mfu);
            snprintf(c[7], sizeof(c[7]), "%.1f%%", 100.0 * s->row.efficiency);
            snprintf(c[8], sizeof(c[8]), "%.3g%%", 100.0 * s->assumed_share);
            band3(c[9], sizeof(c[9]), s->low.service_units, s->row.service_units,
                  s->high.service_units, 0);
        }
        const char *cells[10];
        for (int j = 0; j < 10; j++)
            cells[j] = c[j];
        row(d, cells, columns, false);
    }
    table_edge(d, false);
    paragraph(d, "Low and high: every cost with a band at its low and its high end: "
                 "communication extrapolated beyond the node counts measured (the communication "
                 "model's leave-scale-out error on real clusters), and compute priced by the "
                 "device model (its measured error per operator class, from kernels that did "
                 "not set its parameters; 'dsmpi device' lists the classes). Measured costs "
                 "carry no band; the sensitivity below shows a uniform change. Days = steps x "
                 "iteration time / goodput; GPU-hours = GPUs x days x 24; node-hours = nodes x "
                 "days x 24; the site's units = node-hours x its charge per node-hour (a "
                 "column of their own unless they are the node-hours); efficiency = GPU-hours "
                 "of the smallest size / GPU-hours; assumed = share of the simulated event "
                 "time on modelled or assumed costs.");
}

static void write_basis(const doc_t *d, const plan_report_t *r)
{
    heading(d, 2, "What the numbers rest on");
    list_edge(d, true);
    item(d, "Costs:", r->costs);
    item(d, "Basis:", r->basis);
    for (int i = 0; i < r->num_sizes; i++) {
        const plan_report_size_t *s = &r->sizes[i];
        if (!s->found || !s->sensitivity)
            continue;
        char label[48], text[512];
        snprintf(label, sizeof(label), "%lld GPUs:", (long long)s->gpus);
        snprintf(text, sizeof(text),
                 "%.3g%% of the simulated event time on modelled or assumed costs; unique costs: "
                 "%lld measured, %lld interpolated, %lld extrapolated, %lld imported, %lld "
                 "framework, %lld calibrated, %lld modelled (device model), %lld assumed "
                 "(cluster links)",
                 100.0 * s->assumed_share, (long long)s->keys[DS_PROV_MEASURED],
                 (long long)s->keys[DS_PROV_INTERPOLATED], (long long)s->keys[DS_PROV_EXTRAPOLATED],
                 (long long)s->keys[DS_PROV_IMPORTED], (long long)s->keys[DS_PROV_FRAMEWORK],
                 (long long)s->keys[DS_PROV_CALIBRATED], (long long)s->keys[DS_PROV_MODELLED],
                 (long long)s->keys[DS_PROV_ASSUMED]);
        item(d, label, text);
    }
    list_edge(d, false);
}

/* The size whose days change most under either slowdown, and by how much. */
static void largest_change(const plan_report_t *r, char *text, size_t size)
{
    int at = -1;
    double worst = 0.0;
    bool network = true;
    for (int i = 0; i < r->num_sizes; i++) {
        const plan_report_size_t *s = &r->sizes[i];
        if (!s->found || !s->sensitivity || !(s->base_s > 0))
            continue;
        double n = s->network_s / s->base_s - 1.0, k = s->kernels_s / s->base_s - 1.0;
        if (n > worst || k > worst) {
            worst = n > k ? n : k;
            network = n > k;
            at = i;
        }
    }
    if (at < 0) {
        snprintf(text, size, "No size was simulated again.");
        return;
    }
    snprintf(text, size,
             "The largest uncertainty here is %s: at %lld GPUs it lengthens the iteration, and "
             "the days and hours with it, by %.1f%%.",
             network ? "the network (every communication cost 20% slower)"
                     : "the kernels (every compute cost 10% slower)",
             (long long)r->sizes[at].gpus, 100.0 * worst);
}

static void write_sensitivity(const doc_t *d, const plan_report_t *r)
{
    heading(d, 2, "Sensitivity: a network 20% slower, kernels 10% slower");
    paragraph(d, "Each size's best strategy simulated again from the costs its run used: as "
                 "they were, then every communication cost x 1.2, then every compute cost x "
                 "1.1 (overlap and the critical path simulated, not scaled).");
    const char *header[] = {"GPUs", "iteration (s)", "network +20%: iteration",
                            "days", "GPU-hours",     "kernels +10%: iteration",
                            "days", "GPU-hours"};
    table_edge(d, true);
    row(d, header, 8, true);
    for (int i = 0; i < r->num_sizes; i++) {
        const plan_report_size_t *s = &r->sizes[i];
        if (!s->found || !s->sensitivity)
            continue;
        char c[8][64];
        snprintf(c[0], sizeof(c[0]), "%lld", (long long)s->gpus);
        snprintf(c[1], sizeof(c[1]), "%.4g", s->base_s);
        snprintf(c[2], sizeof(c[2]), "%.4g (%+.1f%%)", s->network_s,
                 100.0 * (s->network_s / s->base_s - 1.0));
        snprintf(c[3], sizeof(c[3]), "%.*f", s->network_row.days < 10.0 ? 2 : 1,
                 s->network_row.days);
        snprintf(c[4], sizeof(c[4]), "%.0f", s->network_row.gpu_hours);
        snprintf(c[5], sizeof(c[5]), "%.4g (%+.1f%%)", s->kernels_s,
                 100.0 * (s->kernels_s / s->base_s - 1.0));
        snprintf(c[6], sizeof(c[6]), "%.*f", s->kernels_row.days < 10.0 ? 2 : 1,
                 s->kernels_row.days);
        snprintf(c[7], sizeof(c[7]), "%.0f", s->kernels_row.gpu_hours);
        const char *cells[8];
        for (int j = 0; j < 8; j++)
            cells[j] = c[j];
        row(d, cells, 8, false);
    }
    table_edge(d, false);
    char text[512];
    largest_change(r, text, sizeof(text));
    paragraph(d, text);
}

static void write_provenance(const doc_t *d, const plan_report_t *r)
{
    heading(d, 2, "Where it comes from (to reproduce it)");
    list_edge(d, true);
    char text[2048];
    if (r->db != NULL) {
        ds_profile_db_info_t info;
        ds_profile_db_get_info(r->db, &info);
        snprintf(text, sizeof(text),
                 "profile database written %s by dsmpi %s on %s (%s backend): %d ranks on %d "
                 "nodes (at most %d per node), hosts %s; command: %s",
                 info.written_at, info.library_version, info.device, info.backend, info.ranks,
                 info.nodes, info.max_ranks_per_node, info.hosts, info.command_line);
        item(d, "Profile:", text);
    } else {
        item(d, "Profile:",
             "none: no profile database was given, so no cost was measured on "
             "an allocation");
    }
    char when[32];
    time_t now = time(NULL);
    struct tm utc;
    gmtime_r(&now, &utc);
    strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &utc);
    snprintf(text, sizeof(text), "dsmpi %s, %s", DS_VERSION_STRING, when);
    item(d, "Predicted by:", text);
    item(d, "Command:", r->command_line);
    list_edge(d, false);
}

static const char css[] =
    "body{font-family:sans-serif;max-width:80em;margin:2em auto;padding:0 1em;color:#222;"
    "line-height:1.4}h1{font-size:1.5em}h2{font-size:1.2em;margin-top:1.6em;border-bottom:1px "
    "solid #ccc}table{border-collapse:collapse;margin:0.5em 0;font-size:0.9em}th,td{border:1px "
    "solid #ccc;padding:0.25em "
    "0.5em;text-align:right;white-space:nowrap}th:nth-child(3),td:nth-child(3){text-"
    "align:left;white-space:normal;min-width:16em}tr:nth-child(even){background:#f5f5f5}."
    "request{background:#eef4fb;border-left:4px "
    "solid #1f5fbf;padding:0.5em 1em}figure{margin:1em 0}svg{max-width:100%;height:auto}";

static ds_status_t write_doc(const doc_t *d, const plan_report_t *r)
{
    ds_model_info_t info;
    ds_model_get_info(r->model, &info);
    char title[512], request[2048];
    snprintf(title, sizeof(title), "Compute-time request: %s, %s on %s", info.name, r->budget,
             target_title(r));
    int k = requested_size(r);
    request_text(r, k, request, sizeof(request));
    if (d->html) {
        fputs("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>", d->f);
        escaped(d, title);
        fprintf(d->f, "</title>\n<style>%s</style></head><body>\n<h1>", css);
        escaped(d, title);
        fputs("</h1>\n<div class=\"request\">", d->f);
    } else {
        fputs("# ", d->f);
        escaped(d, title);
        fputs("\n\n", d->f);
    }
    heading(d, 2, "Request");
    paragraph(d, request);
    if (d->html)
        fputs("</div>\n", d->f);
    write_inputs(d, r);
    write_sizes(d, r);
    heading(d, 2, "Charts");
    ds_status_t status = DS_OK;
    if (r->chart_svg != NULL)
        status = chart(d, r->dir, r->chart_svg,
                       "Days to train, GPU-hours and cost against GPUs, with the band");
    if (status == DS_OK)
        status = chart(d, r->dir, "sensitivity.svg",
                       "Days to train: expected, network 20% slower, kernels 10% slower");
    write_basis(d, r);
    write_sensitivity(d, r);
    write_provenance(d, r);
    if (d->html)
        fputs("</body></html>\n", d->f);
    return status;
}

/* Days to train per size, three bars each: expected, network +20%, kernels +10%. */
static ds_status_t write_sensitivity_svg(const plan_report_t *r, const char *path)
{
    FILE *f = fopen(path, "w");
    if (f == NULL)
        return ds_set_error(DS_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    static const char *const colour[3] = {"#1f5fbf", "#b03a2e", "#2e8b57"};
    static const char *const label[3] = {"expected", "network +20%", "kernels +10%"};
    const double width = 760, height = 360, left = 70, right = 20, top = 60, bottom = 50;
    double most = 0.0;
    int shown = 0;
    for (int i = 0; i < r->num_sizes; i++) {
        const plan_report_size_t *s = &r->sizes[i];
        if (!s->found || !s->sensitivity)
            continue;
        shown++;
        double days[3] = {s->row.days, s->network_row.days, s->kernels_row.days};
        for (int j = 0; j < 3; j++)
            most = days[j] > most ? days[j] : most;
    }
    /* The axis ends at a round number: 1, 2 or 5 times a power of ten per tick. */
    if (most > 0) {
        static const double multiples[] = {1.0, 2.0, 5.0, 10.0};
        double power = 1.0; /* the power of ten at or below a quarter of the axis */
        while (power * 10.0 <= most / 4.0)
            power *= 10.0;
        while (power > most / 4.0)
            power /= 10.0;
        double tick = 10.0 * power;
        for (int m = 3; m >= 0; m--)
            if (multiples[m] * power * 4.0 >= most * 1.05)
                tick = multiples[m] * power;
        most = tick * 4.0;
    } else {
        most = 1.0;
    }
    fprintf(f,
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
            "viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\" font-size=\"12\">\n"
            "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n"
            "<text x=\"%.0f\" y=\"22\" font-size=\"15\" text-anchor=\"middle\">Days to train: "
            "expected, network 20%% slower, kernels 10%% slower</text>\n",
            width, height, width, height, width / 2);
    for (int j = 0; j < 3; j++)
        fprintf(f,
                "<rect x=\"%.0f\" y=\"34\" width=\"12\" height=\"12\" fill=\"%s\"/><text "
                "x=\"%.0f\" y=\"44\">%s</text>\n",
                left + 160.0 * j, colour[j], left + 160.0 * j + 18, label[j]);
    double plot_w = width - left - right, plot_h = height - top - bottom;
    fprintf(f,
            "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#333\"/>\n"
            "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#333\"/>\n",
            left, top, left, top + plot_h, left, top + plot_h, left + plot_w, top + plot_h);
    for (int t = 0; t <= 4; t++) {
        double v = most * t / 4.0, y = top + plot_h - plot_h * t / 4.0;
        fprintf(f,
                "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/><text "
                "x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\">%.3g</text>\n",
                left, y, left + plot_w, y, left - 6, y + 4, v);
    }
    fprintf(f,
            "<text x=\"16\" y=\"%.1f\" transform=\"rotate(-90 16 %.1f)\" "
            "text-anchor=\"middle\">days</text>\n",
            top + plot_h / 2, top + plot_h / 2);
    double slot = shown > 0 ? plot_w / shown : plot_w, bar = slot / 4.5;
    int n = 0;
    for (int i = 0; i < r->num_sizes; i++) {
        const plan_report_size_t *s = &r->sizes[i];
        if (!s->found || !s->sensitivity)
            continue;
        double days[3] = {s->row.days, s->network_row.days, s->kernels_row.days};
        double x0 = left + slot * n + (slot - 3 * bar) / 2;
        for (int j = 0; j < 3; j++) {
            double h = plot_h * days[j] / most;
            fprintf(f,
                    "<rect class=\"bar\" x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" "
                    "fill=\"%s\"><title>%lld GPUs, %s: %.1f days</title></rect>\n",
                    x0 + bar * j, top + plot_h - h, bar * 0.9, h, colour[j], (long long)s->gpus,
                    label[j], days[j]);
        }
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%lld GPUs</text>\n",
                left + slot * n + slot / 2, top + plot_h + 18, (long long)s->gpus);
        n++;
    }
    fprintf(f, "</svg>\n");
    if (fclose(f) != 0)
        return ds_set_error(DS_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    return DS_OK;
}

static ds_status_t write_file(const plan_report_t *r, const char *name, bool html)
{
    char path[4200];
    snprintf(path, sizeof(path), "%s/%s", r->dir, name);
    FILE *f = fopen(path, "w");
    if (f == NULL)
        return ds_set_error(DS_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    doc_t d = {f, html};
    ds_status_t status = write_doc(&d, r);
    if (fclose(f) != 0 && status == DS_OK)
        status = ds_set_error(DS_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    return status;
}

ds_status_t plan_report_write(const plan_report_t *r)
{
    char path[4200];
    snprintf(path, sizeof(path), "%s/sensitivity.svg", r->dir);
    ds_status_t status = write_sensitivity_svg(r, path);
    if (status == DS_OK)
        status = write_file(r, "report.md", false);
    if (status == DS_OK)
        status = write_file(r, "report.html", true);
    return status;
}
