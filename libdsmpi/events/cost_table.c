/* Cost tables: event key -> cost, with provenance; text form for synthetic
 * tables and for files written outside parallel HDF5. */
#include <dsmpi/events.h>

#include "dsi_core.h"
#include "dsi_events.h"

#include <stdatomic.h>
#include <string.h>

static const char *const provenance_names[DS_PROV_COUNT_] = {
    "measured", "interpolated", "extrapolated", "imported",
    "assumed",  "modelled",     "framework",    "calibrated"};

const char *ds_provenance_name(ds_provenance_t provenance)
{
    return (unsigned)provenance < DS_PROV_COUNT_ ? provenance_names[provenance] : "?";
}

typedef struct entry {
    ds_event_key_t key;
    uint64_t hash;
    ds_cost_t cost;
    double band_low, band_high; /* multiples of cost.mean_s */
} entry_t;

struct ds_cost_table {
    entry_t *entries;
    size_t count, capacity;
    uint32_t *slots; /* index + 1; 0 = empty */
    size_t num_slots;
    uint64_t version;  /* dsi_cost_table_version */
    size_t overlapped; /* entries of DS_COMM_FLAG_OVERLAPPED keys */
};

/* Versions are unique over every table of the process, so that a table
 * created where a freed one was never looks unchanged. */
static _Atomic uint64_t last_version;

static void touch(ds_cost_table_t *t)
{
    t->version = atomic_fetch_add(&last_version, 1) + 1;
}

uint64_t dsi_cost_table_version(const ds_cost_table_t *t)
{
    return t != NULL ? t->version : 0;
}

bool dsi_cost_table_has_overlapped(const ds_cost_table_t *t)
{
    return t != NULL && t->overlapped > 0;
}

ds_status_t ds_cost_table_create(ds_cost_table_t **table_p)
{
    ds_cost_table_t *table;
    DSI_TRY(dsi_calloc(1, sizeof(*table), &table));
    touch(table);
    *table_p = table;
    return DS_OK;
}

void ds_cost_table_destroy(ds_cost_table_t *table)
{
    if (table == NULL)
        return;
    dsi_free(table->entries);
    dsi_free(table->slots);
    dsi_free(table);
}

static size_t find_slot(const ds_cost_table_t *t, const ds_event_key_t *key, uint64_t hash)
{
    size_t mask = t->num_slots - 1;
    for (size_t i = hash & mask;; i = (i + 1) & mask) {
        uint32_t slot = t->slots[i];
        if (slot == 0 || (t->entries[slot - 1].hash == hash &&
                          ds_event_key_equal(&t->entries[slot - 1].key, key)))
            return i;
    }
}

static ds_status_t grow(ds_cost_table_t *t)
{
    size_t num_slots = t->num_slots ? 2 * t->num_slots : 64;
    uint32_t *slots;
    DSI_TRY(dsi_calloc(num_slots, sizeof(*slots), &slots));
    dsi_free(t->slots);
    t->slots = slots;
    t->num_slots = num_slots;
    for (size_t i = 0; i < t->count; i++)
        t->slots[find_slot(t, &t->entries[i].key, t->entries[i].hash)] = (uint32_t)(i + 1);
    return DS_OK;
}

ds_status_t ds_cost_table_set(ds_cost_table_t *t, const ds_event_key_t *key, const ds_cost_t *cost)
{
    if (!(cost->mean_s >= 0.0) || (unsigned)cost->provenance >= DS_PROV_COUNT_)
        return DSI_ERROR(DS_ERR_INVALID_ARG,
                         "cost %g s with provenance %d (accepted: >= 0 s and a known provenance)",
                         cost->mean_s, (int)cost->provenance);
    if (t->num_slots == 0 || 2 * (t->count + 1) > t->num_slots)
        DSI_TRY(grow(t));
    touch(t);
    uint64_t hash = ds_event_key_hash(key);
    size_t i = find_slot(t, key, hash);
    if (t->slots[i] != 0) {
        entry_t *e = &t->entries[t->slots[i] - 1];
        e->cost = *cost;
        e->band_low = e->band_high = 1.0;
        return DS_OK;
    }
    if (t->count == t->capacity) {
        size_t capacity = t->capacity ? 2 * t->capacity : 64;
        DSI_TRY(dsi_realloc_array(&t->entries, capacity, sizeof(*t->entries)));
        t->capacity = capacity;
    }
    t->entries[t->count] = (entry_t){*key, hash, *cost, 1.0, 1.0};
    if (key->kind == DS_EVENT_COMM && (key->flags & DS_COMM_FLAG_OVERLAPPED))
        t->overlapped++;
    t->slots[i] = (uint32_t)(++t->count);
    return DS_OK;
}

const ds_cost_t *ds_cost_table_find(const ds_cost_table_t *t, const ds_event_key_t *key)
{
    if (t->num_slots == 0)
        return NULL;
    uint32_t slot = t->slots[find_slot(t, key, ds_event_key_hash(key))];
    return slot ? &t->entries[slot - 1].cost : NULL;
}

static entry_t *find_entry(const ds_cost_table_t *t, const ds_event_key_t *key)
{
    if (t->num_slots == 0)
        return NULL;
    uint32_t slot = t->slots[find_slot(t, key, ds_event_key_hash(key))];
    return slot ? &t->entries[slot - 1] : NULL;
}

ds_status_t ds_cost_table_set_band(ds_cost_table_t *t, const ds_event_key_t *key, double low,
                                   double high)
{
    entry_t *e = find_entry(t, key);
    if (e == NULL) {
        char text[256];
        ds_event_key_format(key, text, sizeof(text));
        return DSI_ERROR(DS_ERR_NOT_FOUND, "a band for '%s', which has no cost in the table", text);
    }
    if (!(low > 0.0 && low <= 1.0) || !(high >= 1.0 && high < 1e12))
        return DSI_ERROR(DS_ERR_INVALID_ARG,
                         "band %g .. %g (accepted: 0 < low <= 1 <= high, multiples of the cost)",
                         low, high);
    touch(t);
    e->band_low = low;
    e->band_high = high;
    return DS_OK;
}

void ds_cost_table_band(const ds_cost_table_t *t, const ds_event_key_t *key, double *low_p,
                        double *high_p)
{
    const entry_t *e = find_entry(t, key);
    *low_p = e != NULL ? e->band_low : 1.0;
    *high_p = e != NULL ? e->band_high : 1.0;
}

size_t ds_cost_table_size(const ds_cost_table_t *t)
{
    return t->count;
}

void ds_cost_table_at(const ds_cost_table_t *t, size_t index, const ds_event_key_t **key_p,
                      const ds_cost_t **cost_p)
{
    *key_p = index < t->count ? &t->entries[index].key : NULL;
    *cost_p = index < t->count ? &t->entries[index].cost : NULL;
}

static ds_status_t parse_line(ds_cost_table_t *t, char *line, const char *origin, int number)
{
    char *hash = strchr(line, '#');
    if (hash != NULL)
        *hash = '\0';
    /* The key itself holds '=' (m=...): the cost follows " = ". */
    char *sep = strstr(line, " = ");
    if (sep == NULL) {
        for (char *c = line; *c; c++)
            if (*c != ' ' && *c != '\t' && *c != '\r')
                return DSI_ERROR(DS_ERR_BAD_FILE, "%s:%d: expected '<event key> = <seconds>'",
                                 origin, number);
        return DS_OK; /* blank */
    }
    *sep = '\0';
    ds_event_key_t key;
    ds_status_t status = ds_event_key_parse(line, &key);
    if (status != DS_OK)
        return DSI_ERROR(status, "%s:%d: %s", origin, number, ds_last_error());
    ds_cost_t cost = {0, 0, 0, 0, 0, DS_PROV_MEASURED};
    char provenance[32] = "measured";
    long long reps = 0;
    int fields = sscanf(sep + 3, "%lf %lf %lf %lf %lld %31s", &cost.mean_s, &cost.median_s,
                        &cost.p10_s, &cost.p90_s, &reps, provenance);
    if (fields < 1 || !(cost.mean_s >= 0.0))
        return DSI_ERROR(DS_ERR_BAD_FILE,
                         "%s:%d: the cost after '=' is not a number of seconds >= 0", origin,
                         number);
    if (fields < 2)
        cost.median_s = cost.p10_s = cost.p90_s = cost.mean_s;
    cost.repetitions = reps;
    int p = -1;
    for (int i = 0; i < DS_PROV_COUNT_; i++)
        if (strcmp(provenance, provenance_names[i]) == 0)
            p = i;
    if (p < 0)
        return DSI_ERROR(DS_ERR_BAD_FILE,
                         "%s:%d: provenance '%s' (accepted: measured, interpolated, extrapolated, "
                         "imported, assumed, modelled, framework, calibrated)",
                         origin, number, provenance);
    cost.provenance = (ds_provenance_t)p;
    return ds_cost_table_set(t, &key, &cost);
}

ds_status_t ds_cost_table_parse(ds_cost_table_t *t, const char *text, const char *origin)
{
    char *copy = NULL;
    DSI_TRY(dsi_strdup(text, &copy));
    ds_status_t status = DS_OK;
    int number = 0;
    for (char *save = NULL, *line = strtok_r(copy, "\n", &save); line != NULL;
         line = strtok_r(NULL, "\n", &save)) {
        number++;
        if ((status = parse_line(t, line, origin, number)) != DS_OK)
            break;
    }
    dsi_free(copy);
    return status;
}

ds_status_t ds_cost_table_load_text(ds_cost_table_t *t, const char *path)
{
    char *text = NULL;
    DSI_TRY(dsi_read_file(path, 1u << 30, &text, NULL));
    ds_status_t status = ds_cost_table_parse(t, text, path);
    dsi_free(text);
    return status;
}

ds_status_t ds_cost_table_write_text(const ds_cost_table_t *t, FILE *out)
{
    fprintf(out, "# event key = mean median p10 p90 (seconds) repetitions provenance\n");
    for (size_t i = 0; i < t->count; i++) {
        char key[512];
        const entry_t *e = &t->entries[i];
        ds_event_key_format(&e->key, key, sizeof(key));
        fprintf(out, "%s = %.9e %.9e %.9e %.9e %lld %s\n", key, e->cost.mean_s, e->cost.median_s,
                e->cost.p10_s, e->cost.p90_s, (long long)e->cost.repetitions,
                provenance_names[e->cost.provenance]);
    }
    return ferror(out) ? DSI_ERROR(DS_ERR_IO, "writing the cost table failed") : DS_OK;
}
