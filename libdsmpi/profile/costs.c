/* From measurements to the costs of a target (see ds_costs_assemble). */
#include <dsmpi/comm.h>
#include <dsmpi/profile.h>

#include "dsi_core.h"
#include "events/dsi_events.h"

#include <stdlib.h>
#include <string.h>

/* The device spec a fingerprint was measured on ("cpu: ..." / "cuda: NVIDIA H200, ..."). */
static ds_status_t spec_of_fingerprint(const char *fingerprint, ds_device_spec_t *spec)
{
    char kind[16] = "", name[160] = "";
    const char *colon = strchr(fingerprint, ':');
    if (colon == NULL || colon - fingerprint >= (ptrdiff_t)sizeof(kind))
        return DS_ERR_NOT_FOUND;
    memcpy(kind, fingerprint, (size_t)(colon - fingerprint));
    snprintf(name, sizeof(name), "%s", colon + 1);
    name[strcspn(name, ",|")] = '\0';
    return ds_device_spec_match(kind, name, spec);
}

static const char *pick_fingerprint(const ds_profile_db_t *db)
{
    /* The fingerprint most records were measured on. */
    const char *best = NULL;
    size_t best_count = 0;
    for (size_t f = 0; f < ds_profile_db_num_fingerprints(db); f++) {
        const char *fp = ds_profile_db_fingerprint(db, f);
        size_t count = 0;
        for (size_t r = 0; r < ds_profile_db_num_records(db); r++) {
            ds_profile_record_t record;
            if (ds_profile_db_get_record(db, r, &record) == DS_OK &&
                strcmp(record.fingerprint, fp) == 0)
                count++;
        }
        if (best == NULL || count > best_count) {
            best = fp;
            best_count = count;
        }
    }
    return best;
}

/* The optimizer step streams its parameters through memory: a step over a
 * parameter count nobody measured is the nearest measured step scaled
 * linearly (interpolated between two measured counts, extrapolated beyond). */
static ds_status_t scale_optimizer_steps(const ds_cost_table_t *measured,
                                         const ds_event_set_t *events, ds_cost_table_t *table,
                                         ds_cost_report_t *report)
{
    for (size_t i = 0; i < ds_event_set_size(events); i++) {
        const ds_event_key_t *key = &ds_event_set_at(events, i)->key;
        if (key->kind != DS_EVENT_COMPUTE || key->op != DS_OP_OPTIMIZER ||
            ds_cost_table_find(table, key) != NULL || key->dims[0] <= 0)
            continue;
        const ds_cost_t *best = NULL;
        int64_t best_params = 0, below = 0, above = 0;
        for (size_t m = 0; m < ds_cost_table_size(measured); m++) {
            const ds_event_key_t *k;
            const ds_cost_t *c;
            ds_cost_table_at(measured, m, &k, &c);
            if (k->kind != DS_EVENT_COMPUTE || k->op != DS_OP_OPTIMIZER || k->dtype != key->dtype ||
                k->dims[0] <= 0)
                continue;
            below |= k->dims[0] < key->dims[0];
            above |= k->dims[0] > key->dims[0];
            if (best == NULL ||
                llabs(k->dims[0] - key->dims[0]) < llabs(best_params - key->dims[0])) {
                best = c;
                best_params = k->dims[0];
            }
        }
        if (best == NULL)
            continue;
        double ratio = (double)key->dims[0] / (double)best_params;
        ds_cost_t c = *best;
        c.mean_s *= ratio;
        c.median_s *= ratio;
        c.p10_s *= ratio;
        c.p90_s *= ratio;
        if (c.provenance == DS_PROV_MEASURED)
            c.provenance = below && above ? DS_PROV_INTERPOLATED : DS_PROV_EXTRAPOLATED;
        DSI_TRY(ds_cost_table_set(table, key, &c));
        report->compute_measured++;
    }
    return DS_OK;
}

/* A framework's time between the operators of its passes (imported from its
 * trace) is no event: the simulator adds it to the passes it belongs to, so
 * every such key comes along, as measured, whatever the target's device (it
 * is the framework's time on the host). */
static ds_status_t copy_framework_gaps(const ds_cost_table_t *measured, ds_cost_table_t *table)
{
    for (size_t m = 0; m < ds_cost_table_size(measured); m++) {
        const ds_event_key_t *k;
        const ds_cost_t *c;
        ds_cost_table_at(measured, m, &k, &c);
        if (k->kind == DS_EVENT_COMPUTE && k->op == DS_OP_FRAMEWORK_GAP &&
            ds_cost_table_find(table, k) == NULL)
            DSI_TRY(ds_cost_table_set(table, k, c));
    }
    return DS_OK;
}

static ds_status_t compute_costs(const ds_cost_sources_t *src, const char *fingerprint,
                                 const ds_event_set_t *events, const ds_cluster_t *target,
                                 ds_cost_table_t *table, ds_cost_report_t *report,
                                 bool *same_device_p)
{
    ds_status_t status;
    ds_cost_table_t *measured = NULL;
    DSI_TRY(ds_cost_table_create(&measured));
    DSI_TRY_GOTO(ds_profile_db_fill_costs(src->db, fingerprint, measured, NULL), status, out);
    ds_cluster_t on_measured = *target;
    bool known = spec_of_fingerprint(fingerprint, &on_measured.device) == DS_OK;
    if (known)
        snprintf(report->measured_device, sizeof(report->measured_device), "%s",
                 on_measured.device.name);
    bool same = known && strcmp(on_measured.device.name, target->device.name) == 0;
    *same_device_p = same;
    for (size_t i = 0; i < ds_event_set_size(events); i++) {
        const ds_event_t *e = ds_event_set_at(events, i);
        const ds_cost_t *cost = ds_cost_table_find(measured, &e->key);
        if (cost == NULL || ds_cost_table_find(table, &e->key) != NULL)
            continue;
        ds_cost_t c = *cost;
        if (e->key.kind == DS_EVENT_COMPUTE && !same) {
            /* Another device: its time scaled by the ratio of the device
             * model's estimates on the two devices; modelled, said so. */
            double low = 1.0, high = 1.0;
            double on_target =
                dsi_estimate_compute_band(&e->key, e->flops, e->bytes, target, &low, &high);
            double on_source =
                known ? dsi_estimate_compute_seconds(&e->key, e->flops, e->bytes, &on_measured)
                      : 0.0;
            if (!(on_source > 0.0))
                continue;
            double ratio = on_target / on_source;
            c.mean_s *= ratio;
            c.median_s *= ratio;
            c.p10_s *= ratio;
            c.p90_s *= ratio;
            c.provenance = DS_PROV_MODELLED;
            report->compute_scaled++;
            DSI_TRY_GOTO(ds_cost_table_set(table, &e->key, &c), status, out);
            /* The ratio is the device model's: the band of the key's class. */
            if (low != 1.0 || high != 1.0)
                DSI_TRY_GOTO(ds_cost_table_set_band(table, &e->key, low, high), status, out);
            report->compute_measured++;
            continue;
        }
        DSI_TRY_GOTO(ds_cost_table_set(table, &e->key, &c), status, out);
        if (e->key.kind == DS_EVENT_COMPUTE)
            report->compute_measured++;
    }
    DSI_TRY_GOTO(scale_optimizer_steps(measured, events, table, report), status, out);
    DSI_TRY_GOTO(copy_framework_gaps(measured, table), status, out);
    status = DS_OK;
out:
    ds_cost_table_destroy(measured);
    return status;
}

ds_status_t ds_costs_measured_device(const ds_cost_sources_t *src, ds_device_spec_t *spec)
{
    const char *fingerprint = src->fingerprint;
    if (src->db != NULL && fingerprint == NULL)
        fingerprint = pick_fingerprint(src->db);
    if (fingerprint == NULL)
        return DSI_ERROR(DS_ERR_NOT_FOUND, "no measurements");
    if (spec_of_fingerprint(fingerprint, spec) != DS_OK)
        return DSI_ERROR(DS_ERR_NOT_FOUND, "no device specification for '%s'", fingerprint);
    return DS_OK;
}

ds_status_t ds_costs_assemble(const ds_cost_sources_t *src, const ds_event_set_t *events,
                              const ds_cluster_t *target, ds_cost_table_t *table,
                              ds_cost_report_t *report)
{
    ds_status_t status = DS_OK;
    ds_cost_report_t r;
    memset(&r, 0, sizeof(r));
    ds_comm_sample_t *db_samples = NULL, *samples = NULL;
    size_t num_db = 0, num = 0;
    ds_comm_model_t *model = NULL;
    bool same_device = false;
    const char *fingerprint = src->fingerprint;
    if (src->db != NULL && fingerprint == NULL)
        fingerprint = pick_fingerprint(src->db);
    if (src->db != NULL && fingerprint != NULL) {
        snprintf(r.fingerprint, sizeof(r.fingerprint), "%s", fingerprint);
        DSI_TRY_GOTO(compute_costs(src, fingerprint, events, target, table, &r, &same_device),
                     status, out);
        DSI_TRY_GOTO(ds_profile_db_get_comm_samples(src->db, NULL, &db_samples, &num_db), status,
                     out);
    }
    /* Samples measured on the target's kind of device, and imported ones. */
    char tag[64] = "";
    if (fingerprint != NULL)
        ds_fingerprint_source_tag(fingerprint, tag, sizeof(tag));
    DSI_TRY_GOTO(dsi_calloc(num_db + src->num_samples + 1, sizeof(*samples), &samples), status,
                 out);
    for (size_t i = 0; i < num_db; i++)
        if (db_samples[i].provenance == DS_PROV_IMPORTED ||
            (same_device && strcmp(db_samples[i].source, tag) == 0))
            samples[num++] = db_samples[i];
    for (size_t i = 0; i < src->num_samples; i++)
        samples[num++] = src->samples[i];
    r.comm_samples = num;
    if (num > 0) {
        ds_comm_model_options_t options;
        ds_comm_model_options_init(&options);
        DSI_TRY_GOTO(ds_comm_library_of(samples, num, &options.library), status, out);
        snprintf(r.comm_library, sizeof(r.comm_library), "%s",
                 ds_comm_library_name(options.library));
        DSI_TRY_GOTO(ds_comm_model_create(target, samples, num, &options, &model), status, out);
        DSI_TRY_GOTO(ds_comm_model_fill(model, events, table, &r.comm_filled), status, out);
    }
    if (report != NULL)
        *report = r;
out:
    ds_comm_model_destroy(model);
    dsi_free(samples);
    ds_comm_samples_free(db_samples);
    return status;
}
