/* Where a command's event costs come from, said the same way by predict,
 * search and plan: the sources given (cost table, profile database and the
 * site databases behind it, nccl-tests logs, roofline estimates), what the
 * database and logs gave (ds_cost_report_t), and the place a missing cost
 * was looked for.  Public API only. */
#ifndef DSMPI_COST_ORIGIN_H
#define DSMPI_COST_ORIGIN_H

#include "app.h"

typedef struct cost_origin {
    const char *cost_table;      /* --cost-table FILE, or NULL */
    const char *profile_db;      /* the profile database, or NULL */
    const char *const *site_dbs; /* read-only databases searched after it */
    size_t num_site_dbs;
    size_t num_logs;                /* nccl-tests logs */
    bool estimate;                  /* --estimate-missing */
    const ds_cost_report_t *report; /* what the database and logs gave; NULL: not known */
    bool counts;                    /* the report's counts hold for the whole output */
} cost_origin_t;

/* What was given, e.g. "cost table c.txt, profile database db.h5 (then
 * site.h5), 2 nccl-tests logs"; "" when nothing was. */
void cost_origin_given(const cost_origin_t *c, char *text, size_t size);

/* One line on where the costs come from: the sources, what the database and
 * logs gave (with counts when c->counts), and "the rest estimated from the
 * device roofline (ASSUMED)" with --estimate-missing. */
void cost_origin_describe(const cost_origin_t *c, char *text, size_t size);

/* The end of "N events have no cost": " in <what was given>", or " (no
 * --profile-db, --cost-table or --nccl-tests given)". */
void cost_origin_missing_where(const cost_origin_t *c, char *text, size_t size);

/* "3.1% to 38%" (or "38%" when both read the same), with the digits that
 * keep a small share from reading 0%. */
void cost_origin_share_text(double min_share, double max_share, char *text, size_t size);

/* Where a plan's or search's numbers rest, from the assumed shares of its
 * results (fractions of the simulated event time on assumed costs, lowest
 * and highest): "measured costs (profile database db.h5)", "roofline
 * estimates of the device (assumed, not measured)" or both with the
 * assumed share. */
void cost_origin_basis(const cost_origin_t *c, double min_assumed, double max_assumed, char *text,
                       size_t size);

/* Where an iteration time's band comes from, a line per source, each
 * starting with `prefix`: the unique costs with a band from the
 * communication model (extrapolated beyond the node counts measured) and
 * from the device model (compute, each at its operator class's measured
 * error), `quantity` before each count ("" or "up to "); or that there is
 * none. */
void cost_origin_band_lines(FILE *out, const char *prefix, const char *quantity, int64_t comm_keys,
                            int64_t device_model_keys);

#endif /* DSMPI_COST_ORIGIN_H */
