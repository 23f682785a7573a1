/* Where a command's event costs come from (see cost_origin.h). */
#include "cost_origin.h"

#include <stdarg.h>
#include <string.h>

/* Appends to text[size] from *used on; stops quietly when full. */
static void append(char *text, size_t size, size_t *used, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void append(char *text, size_t size, size_t *used, const char *fmt, ...)
{
    if (*used >= size)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(text + *used, size - *used, fmt, ap);
    va_end(ap);
    if (n > 0)
        *used += (size_t)n;
}

static const char *plural(size_t n)
{
    return n == 1 ? "" : "s";
}

static void append_databases(const cost_origin_t *c, char *text, size_t size, size_t *used)
{
    append(text, size, used, "profile database %s", c->profile_db);
    for (size_t i = 0; i < c->num_site_dbs; i++)
        append(text, size, used, "%s%s", i ? ", " : " (then ", c->site_dbs[i]);
    if (c->num_site_dbs > 0)
        append(text, size, used, ")");
}

void cost_origin_given(const cost_origin_t *c, char *text, size_t size)
{
    size_t used = 0;
    text[0] = '\0';
    if (c->cost_table != NULL)
        append(text, size, &used, "cost table %s", c->cost_table);
    if (c->profile_db != NULL) {
        append(text, size, &used, "%s", used ? ", " : "");
        append_databases(c, text, size, &used);
    }
    if (c->num_logs > 0)
        append(text, size, &used, "%s%zu nccl-tests log%s", used ? ", " : "", c->num_logs,
               plural(c->num_logs));
}

void cost_origin_describe(const cost_origin_t *c, char *text, size_t size)
{
    size_t used = 0;
    const ds_cost_report_t *r = c->report;
    text[0] = '\0';
    if (c->cost_table != NULL)
        append(text, size, &used, "cost table %s", c->cost_table);
    if (c->profile_db != NULL) {
        append(text, size, &used, "%s", used ? "; " : "");
        append_databases(c, text, size, &used);
        if (r != NULL) {
            const char *device = r->measured_device[0] ? r->measured_device : "an unknown device";
            if (c->counts)
                append(text, size, &used, ": %zu compute events measured on %s",
                       r->compute_measured, device);
            else
                append(text, size, &used, ": compute events measured on %s", device);
            if (r->compute_scaled > 0 && c->counts)
                append(text, size, &used, " (%zu scaled to the target device: MODELLED)",
                       r->compute_scaled);
            else if (r->compute_scaled > 0)
                append(text, size, &used, " (scaled to the target device: MODELLED)");
        }
    }
    if (r != NULL && r->comm_samples > 0) {
        append(text, size, &used, "%s", used ? "; " : "");
        if (c->counts)
            append(text, size, &used, "%zu communication events", r->comm_filled);
        else
            append(text, size, &used, "communication");
        append(text, size, &used, " from the model fitted on %zu samples", r->comm_samples);
        if (c->profile_db != NULL && c->num_logs > 0)
            append(text, size, &used, " of the database and %zu nccl-tests log%s", c->num_logs,
                   plural(c->num_logs));
        else if (c->num_logs > 0)
            append(text, size, &used, " of %zu nccl-tests log%s", c->num_logs, plural(c->num_logs));
        else
            append(text, size, &used, " of the database");
        if (r->comm_library[0])
            append(text, size, &used, " (%s's algorithms)", r->comm_library);
    } else if (c->num_logs > 0) {
        append(text, size, &used, "%scommunication from the model fitted on %zu nccl-tests log%s",
               used ? "; " : "", c->num_logs, plural(c->num_logs));
    }
    if (c->estimate)
        append(text, size, &used, "%s",
               used ? "; the rest estimated from the device model (MODELLED) and "
                      "the cluster's links (ASSUMED)"
                    : "no measurements: every cost estimated from the "
                      "device model (MODELLED) and the cluster's links (ASSUMED)");
    else if (used == 0)
        append(text, size, &used, "none given");
}

void cost_origin_missing_where(const cost_origin_t *c, char *text, size_t size)
{
    char given[1024];
    cost_origin_given(c, given, sizeof(given));
    if (given[0] != '\0')
        snprintf(text, size, " in %s", given);
    else
        snprintf(text, size, " (no --profile-db, --cost-table or --nccl-tests given)");
}

/* A share in percent with the digits that keep a small one from reading 0%. */
static void percent(double share, char *text, size_t size)
{
    double p = 100.0 * share;
    snprintf(text, size, p >= 10.0 || p == 0.0 ? "%.0f%%" : p >= 1.0 ? "%.1f%%" : "%.2g%%", p);
}

void cost_origin_share_text(double min_share, double max_share, char *text, size_t size)
{
    char lo[16], hi[16];
    percent(min_share, lo, sizeof(lo));
    percent(max_share, hi, sizeof(hi));
    if (strcmp(lo, hi) == 0)
        snprintf(text, size, "%s", hi);
    else
        snprintf(text, size, "%s to %s", lo, hi);
}

void cost_origin_basis(const cost_origin_t *c, double min_assumed, double max_assumed, char *text,
                       size_t size)
{
    char given[1024];
    cost_origin_given(c, given, sizeof(given));
    if (max_assumed <= 0.0) {
        snprintf(text, size, "measured costs (%s)", given[0] ? given : "none given");
    } else if (min_assumed >= 0.9995) {
        snprintf(text, size, "%s (assumed, not measured)",
                 c->estimate ? "device-model estimates"
                             : "costs scaled from another device by the device model");
    } else {
        char share[64];
        cost_origin_share_text(min_assumed, max_assumed, share, sizeof(share));
        snprintf(text, size, "%s%s (%s of the event time assumed)",
                 given[0] ? given : "measured costs",
                 c->estimate ? " and device-model estimates" : "", share);
    }
}

void cost_origin_band_lines(FILE *out, const char *prefix, const char *quantity, int64_t comm_keys,
                            int64_t device_model_keys)
{
    if (comm_keys == 0 && device_model_keys == 0) {
        fprintf(out,
                "%sband: none (no communication cost extrapolated beyond the node counts\n"
                "%s  measured, no compute cost from the device model)\n",
                prefix, prefix);
        return;
    }
    if (comm_keys > 0)
        fprintf(out,
                "%sband: communication, %s%lld costs extrapolated beyond the node counts\n"
                "%s  measured (the model's leave-scale-out error on real clusters; dsmpi comm)\n",
                prefix, quantity, (long long)comm_keys, prefix);
    if (device_model_keys > 0)
        fprintf(out,
                "%sband: device model, %s%lld compute costs modelled, each at its operator\n"
                "%s  class's measured error (dsmpi device)\n",
                prefix, quantity, (long long)device_model_keys, prefix);
}
