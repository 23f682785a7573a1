/* The in-memory image of one profile database: string tables, event rows
 * indexed by (fingerprint, key), communication samples. */
#include "dsi_store.h"

#include <math.h>
#include <string.h>

/* ---- string tables --------------------------------------------------------------- */

void dsi_strtab_init(dsi_strtab_t *tab, size_t width)
{
    memset(tab, 0, sizeof(*tab));
    tab->width = width;
}

void dsi_strtab_free(dsi_strtab_t *tab)
{
    dsi_free(tab->data);
    dsi_free(tab->slots);
    size_t width = tab->width;
    dsi_strtab_init(tab, width);
}

void dsi_strtab_clear(dsi_strtab_t *tab)
{
    tab->count = 0;
    if (tab->slots != NULL)
        memset(tab->slots, 0, tab->num_slots * sizeof(*tab->slots));
}

const char *dsi_strtab_at(const dsi_strtab_t *tab, size_t index)
{
    return index < tab->count ? tab->data + index * tab->width : NULL;
}

static uint64_t text_hash(const char *text)
{
    return dsi_hash64(text, strlen(text), 0x737472ULL);
}

static size_t strtab_slot(const dsi_strtab_t *tab, const char *text)
{
    size_t mask = tab->num_slots - 1;
    for (size_t i = text_hash(text) & mask;; i = (i + 1) & mask) {
        uint32_t slot = tab->slots[i];
        if (slot == 0 || strcmp(tab->data + (slot - 1) * tab->width, text) == 0)
            return i;
    }
}

static ds_status_t strtab_rehash(dsi_strtab_t *tab, size_t num_slots)
{
    uint32_t *slots;
    DSI_TRY(dsi_calloc(num_slots, sizeof(*slots), &slots));
    dsi_free(tab->slots);
    tab->slots = slots;
    tab->num_slots = num_slots;
    for (size_t i = 0; i < tab->count; i++)
        tab->slots[strtab_slot(tab, tab->data + i * tab->width)] = (uint32_t)(i + 1);
    return DS_OK;
}

ds_status_t dsi_strtab_reserve(dsi_strtab_t *tab, size_t count)
{
    if (count > UINT32_MAX - 1)
        return DSI_ERROR(DS_ERR_OVERFLOW, "%zu strings in one table (accepted: fewer than 2^32)",
                         count);
    if (count <= tab->capacity)
        return DS_OK;
    size_t capacity = tab->capacity ? tab->capacity : 8;
    while (capacity < count)
        capacity *= 2;
    DSI_TRY(dsi_realloc_array(&tab->data, capacity, tab->width));
    tab->capacity = capacity;
    return DS_OK;
}

ds_status_t dsi_strtab_reindex(dsi_strtab_t *tab)
{
    size_t num_slots = 16;
    while (num_slots < 2 * tab->count + 2)
        num_slots *= 2;
    for (size_t i = 0; i < tab->count; i++)
        tab->data[(i + 1) * tab->width - 1] = '\0';
    return strtab_rehash(tab, num_slots);
}

int64_t dsi_strtab_find(const dsi_strtab_t *tab, const char *text)
{
    if (tab->num_slots == 0)
        return -1;
    uint32_t slot = tab->slots[strtab_slot(tab, text)];
    return slot ? (int64_t)slot - 1 : -1;
}

ds_status_t dsi_strtab_intern(dsi_strtab_t *tab, const char *text, uint32_t *index_p)
{
    size_t length = strlen(text);
    if (length >= tab->width)
        return DSI_ERROR(DS_ERR_INVALID_ARG,
                         "'%.40s...' has %zu characters (accepted: at most %zu)", text, length,
                         tab->width - 1);
    int64_t found = dsi_strtab_find(tab, text);
    if (found >= 0) {
        *index_p = (uint32_t)found;
        return DS_OK;
    }
    DSI_TRY(dsi_strtab_reserve(tab, tab->count + 1));
    if (tab->num_slots == 0 || 2 * (tab->count + 1) > tab->num_slots)
        DSI_TRY(strtab_rehash(tab, tab->num_slots ? 2 * tab->num_slots : 16));
    char *slot_text = tab->data + tab->count * tab->width;
    memset(slot_text, 0, tab->width);
    memcpy(slot_text, text, length);
    tab->slots[strtab_slot(tab, text)] = (uint32_t)(tab->count + 1);
    *index_p = (uint32_t)tab->count++;
    return DS_OK;
}

/* ---- rows ------------------------------------------------------------------------ */

void dsi_row_from_record(const ds_profile_record_t *record, dsi_event_row_t *row)
{
    const ds_event_key_t *k = &record->key;
    memset(row, 0, sizeof(*row));
    row->kind = k->kind;
    row->op = k->op;
    row->pass = k->pass;
    row->dtype = k->dtype;
    row->variant = k->variant;
    row->flags = k->flags;
    row->group = k->group;
    row->group_size = k->group_size;
    row->ranks_per_node = k->ranks_per_node;
    row->nodes = k->nodes;
    row->concurrency = k->concurrency;
    memcpy(row->dims, k->dims, sizeof(row->dims));
    row->mean_s = record->cost.mean_s;
    row->median_s = record->cost.median_s;
    row->p10_s = record->cost.p10_s;
    row->p90_s = record->cost.p90_s;
    row->repetitions = record->cost.repetitions;
    row->provenance = (uint8_t)record->cost.provenance;
    row->rank = record->rank;
    row->measured_at_s = record->measured_at_s;
    row->hist_min_s = record->histogram.min_s;
    row->hist_max_s = record->histogram.max_s;
    memcpy(row->histogram, record->histogram.counts, sizeof(row->histogram));
}

void dsi_row_key(const dsi_event_row_t *row, ds_event_key_t *key)
{
    memset(key, 0, sizeof(*key));
    key->kind = row->kind;
    key->op = row->op;
    key->pass = row->pass;
    key->dtype = row->dtype;
    key->variant = row->variant;
    key->flags = row->flags;
    key->group = row->group;
    key->group_size = row->group_size;
    key->ranks_per_node = row->ranks_per_node;
    key->nodes = row->nodes;
    key->concurrency = row->concurrency;
    memcpy(key->dims, row->dims, sizeof(key->dims));
}

void dsi_comm_row_from_sample(const ds_comm_sample_t *s, dsi_comm_row_t *row)
{
    memset(row, 0, sizeof(*row));
    row->op = (uint8_t)s->op;
    row->dtype = (uint8_t)s->dtype;
    row->bytes = s->bytes;
    row->group_size = s->group_size;
    row->nodes = s->nodes;
    row->ranks_per_node = s->ranks_per_node;
    row->concurrency = s->concurrency;
    row->in_place = s->in_place;
    row->batched = s->batched;
    row->span_nodes = s->span_nodes;
    row->mean_s = s->mean_s;
    row->median_s = s->median_s;
    row->p10_s = s->p10_s;
    row->p90_s = s->p90_s;
    row->repetitions = s->repetitions;
    row->provenance = (uint8_t)s->provenance;
    /* The row was zeroed: the source stays zero-padded, as the file keeps it. */
    size_t length = strnlen(s->source, sizeof(s->source) - 1);
    memcpy(row->source, s->source, length);
}

void dsi_comm_row_to_sample(const dsi_comm_row_t *row, ds_comm_sample_t *s)
{
    memset(s, 0, sizeof(*s));
    s->op = (ds_comm_op_t)row->op;
    s->dtype = (ds_dtype_t)row->dtype;
    s->bytes = row->bytes;
    s->group_size = row->group_size;
    s->nodes = row->nodes;
    s->ranks_per_node = row->ranks_per_node;
    s->concurrency = row->concurrency;
    s->in_place = row->in_place;
    s->batched = row->batched;
    s->span_nodes = row->span_nodes;
    s->mean_s = row->mean_s;
    s->median_s = row->median_s;
    s->p10_s = row->p10_s;
    s->p90_s = row->p90_s;
    s->repetitions = row->repetitions;
    s->provenance = (ds_provenance_t)row->provenance;
    memcpy(s->source, row->source, sizeof(s->source));
    s->source[sizeof(s->source) - 1] = '\0';
}

static bool finite_nonneg(double value)
{
    return isfinite(value) && value >= 0.0;
}

/* Names a row in a message: "events row 17", or the table alone. */
static const char *row_name(char *buffer, size_t size, const char *table, size_t index)
{
    if (index == SIZE_MAX)
        snprintf(buffer, size, "%s", table);
    else
        snprintf(buffer, size, "%s row %zu", table, index);
    return buffer;
}

ds_status_t dsi_event_row_check(const dsi_event_row_t *r, size_t num_fingerprints, size_t num_hosts,
                                const char *table, size_t index)
{
    char what[96];
    int num_ops = r->kind == DS_EVENT_COMPUTE ? DS_OP_COUNT_ : DS_COMM_COUNT_;
    if (r->kind > DS_EVENT_COMM || r->op >= num_ops || r->pass > DS_PASS_STEP ||
        r->dtype > DS_DTYPE_FP8 || r->group >= DS_GROUP_COUNT_)
        return DSI_ERROR(
            DS_ERR_INVALID_ARG,
            "%s: event key with kind %u op %u pass %u dtype %u group %u is not a known key",
            row_name(what, sizeof(what), table, index), r->kind, r->op, r->pass, r->dtype,
            r->group);
    if (r->provenance >= DS_PROV_COUNT_)
        return DSI_ERROR(DS_ERR_INVALID_ARG, "%s: provenance %u (accepted: 0 to %d)",
                         row_name(what, sizeof(what), table, index), r->provenance,
                         DS_PROV_COUNT_ - 1);
    if (!finite_nonneg(r->mean_s) || !finite_nonneg(r->median_s) || !finite_nonneg(r->p10_s) ||
        !finite_nonneg(r->p90_s) || r->repetitions < 0)
        return DSI_ERROR(DS_ERR_INVALID_ARG,
                         "%s: cost mean %g median %g p10 %g p90 %g s over %lld repetitions "
                         "(accepted: finite seconds >= 0)",
                         row_name(what, sizeof(what), table, index), r->mean_s, r->median_s,
                         r->p10_s, r->p90_s, (long long)r->repetitions);
    if (!isfinite(r->measured_at_s) || !isfinite(r->hist_min_s) || !isfinite(r->hist_max_s))
        return DSI_ERROR(DS_ERR_INVALID_ARG, "%s: time or histogram bounds are not finite numbers",
                         row_name(what, sizeof(what), table, index));
    if (r->fingerprint >= num_fingerprints || r->host >= num_hosts)
        return DSI_ERROR(DS_ERR_INVALID_ARG, "%s: names fingerprint %u of %zu and host %u of %zu",
                         row_name(what, sizeof(what), table, index), r->fingerprint,
                         num_fingerprints, r->host, num_hosts);
    return DS_OK;
}

ds_status_t dsi_comm_row_check(const dsi_comm_row_t *r, const char *what)
{
    if (r->op >= DS_COMM_COUNT_ || r->dtype > DS_DTYPE_FP8 || r->provenance >= DS_PROV_COUNT_)
        return DSI_ERROR(DS_ERR_INVALID_ARG,
                         "%s: primitive %u dtype %u provenance %u is not a known sample", what,
                         r->op, r->dtype, r->provenance);
    if (r->bytes < 0 || r->group_size < 1 || r->nodes < 1 || r->ranks_per_node < 1 ||
        r->concurrency < 1 || r->span_nodes < 0)
        return DSI_ERROR(DS_ERR_INVALID_ARG,
                         "%s: %lld bytes on a group of %d ranks over %d nodes, %d per node, "
                         "concurrency %d, span %d nodes (accepted: bytes and span >= 0, the "
                         "others >= 1)",
                         what, (long long)r->bytes, r->group_size, r->nodes, r->ranks_per_node,
                         r->concurrency, r->span_nodes);
    if (!finite_nonneg(r->mean_s) || !finite_nonneg(r->median_s) || !finite_nonneg(r->p10_s) ||
        !finite_nonneg(r->p90_s) || r->repetitions < 0)
        return DSI_ERROR(DS_ERR_INVALID_ARG,
                         "%s: time mean %g median %g p10 %g p90 %g s over %lld repetitions "
                         "(accepted: finite seconds >= 0)",
                         what, r->mean_s, r->median_s, r->p10_s, r->p90_s,
                         (long long)r->repetitions);
    if (memchr(r->source, '\0', sizeof(r->source)) == NULL)
        return DSI_ERROR(DS_ERR_INVALID_ARG, "%s: source is not terminated", what);
    return DS_OK;
}

/* ---- layers ------------------------------------------------------------------------ */

void dsi_layer_init(dsi_db_layer_t *layer)
{
    memset(layer, 0, sizeof(*layer));
    dsi_strtab_init(&layer->fingerprints, DS_FINGERPRINT_MAX);
    dsi_strtab_init(&layer->hosts, DS_NAME_MAX);
    dsi_strtab_init(&layer->allocation_hosts, DS_NAME_MAX);
}

void dsi_layer_free(dsi_db_layer_t *layer)
{
    dsi_free(layer->path);
    dsi_strtab_free(&layer->fingerprints);
    dsi_strtab_free(&layer->hosts);
    dsi_strtab_free(&layer->allocation_hosts);
    dsi_free(layer->rows);
    dsi_free(layer->index);
    dsi_free(layer->index_tags);
    dsi_free(layer->comm);
    dsi_layer_init(layer);
}

static uint64_t row_hash(uint32_t fingerprint, const ds_event_key_t *key)
{
    return ds_event_key_hash(key) ^ dsi_hash_mix64((uint64_t)fingerprint + 1);
}

/* The slot of (fingerprint, key) with hash `hash`: where it is, or the
 * empty slot where it goes.  Each slot keeps the high bits of its row's
 * hash, so a probe reads a row only when those match. */
static size_t index_slot(const dsi_db_layer_t *layer, uint32_t fingerprint,
                         const ds_event_key_t *key, uint64_t hash)
{
    size_t mask = layer->index_slots - 1;
    uint32_t tag = (uint32_t)(hash >> 32);
    for (size_t i = hash & mask;; i = (i + 1) & mask) {
        uint32_t slot = layer->index[i];
        if (slot == 0)
            return i;
        if (layer->index_tags[i] != tag)
            continue;
        const dsi_event_row_t *row = &layer->rows[slot - 1];
        if (row->fingerprint == fingerprint) {
            ds_event_key_t other;
            dsi_row_key(row, &other);
            if (ds_event_key_equal(&other, key))
                return i;
        }
    }
}

/* Indexes every row in a table of `num_slots`; a row whose (fingerprint,
 * key) an earlier row has replaces that row's contents (*duplicates_p). */
static ds_status_t index_rebuild(dsi_db_layer_t *layer, size_t num_slots, bool *duplicates_p)
{
    uint32_t *index = NULL, *tags = NULL;
    DSI_TRY(dsi_calloc(num_slots, sizeof(*index), &index));
    if (dsi_calloc(num_slots, sizeof(*tags), &tags) != DS_OK) {
        dsi_free(index);
        return DS_ERR_NO_MEMORY;
    }
    dsi_free(layer->index);
    dsi_free(layer->index_tags);
    layer->index = index;
    layer->index_tags = tags;
    layer->index_slots = num_slots;
    bool duplicates = false;
    for (size_t i = 0; i < layer->num_rows; i++) {
        ds_event_key_t key;
        dsi_row_key(&layer->rows[i], &key);
        uint64_t hash = row_hash(layer->rows[i].fingerprint, &key);
        size_t slot = index_slot(layer, layer->rows[i].fingerprint, &key, hash);
        if (layer->index[slot] != 0) {
            layer->rows[layer->index[slot] - 1] = layer->rows[i];
            duplicates = true;
        } else {
            layer->index[slot] = (uint32_t)(i + 1);
            layer->index_tags[slot] = (uint32_t)(hash >> 32);
        }
    }
    if (duplicates_p != NULL)
        *duplicates_p = duplicates;
    return DS_OK;
}

ds_status_t dsi_layer_reindex(dsi_db_layer_t *layer)
{
    if (layer->num_rows > UINT32_MAX / 4)
        return DSI_ERROR(DS_ERR_OVERFLOW, "%zu events in one database (accepted: at most %u)",
                         layer->num_rows, UINT32_MAX / 4);
    size_t num_slots = 64;
    while (num_slots < 2 * layer->num_rows + 2)
        num_slots *= 2;
    bool duplicates = false;
    DSI_TRY(index_rebuild(layer, num_slots, &duplicates));
    if (!duplicates)
        return DS_OK;
    /* Files never hold duplicates, but a damaged or hand-made one might:
     * keep the indexed rows, in order, and index again. */
    size_t kept = 0;
    for (size_t i = 0; i < layer->num_rows; i++) {
        ds_event_key_t key;
        dsi_row_key(&layer->rows[i], &key);
        uint64_t hash = row_hash(layer->rows[i].fingerprint, &key);
        if (layer->index[index_slot(layer, layer->rows[i].fingerprint, &key, hash)] == i + 1)
            layer->rows[kept++] = layer->rows[i];
    }
    layer->num_rows = kept;
    return index_rebuild(layer, num_slots, NULL);
}

ds_status_t dsi_layer_reserve(dsi_db_layer_t *layer, size_t count)
{
    if (count > UINT32_MAX / 4)
        return DSI_ERROR(DS_ERR_OVERFLOW, "%zu events in one database (accepted: at most %u)",
                         count, UINT32_MAX / 4);
    if (count > layer->cap_rows) {
        DSI_TRY(dsi_realloc_array(&layer->rows, count, sizeof(*layer->rows)));
        layer->cap_rows = count;
    }
    size_t num_slots = layer->index_slots ? layer->index_slots : 64;
    while (num_slots < 2 * count + 2)
        num_slots *= 2;
    if (num_slots != layer->index_slots)
        DSI_TRY(index_rebuild(layer, num_slots, NULL));
    return DS_OK;
}

int64_t dsi_layer_find(const dsi_db_layer_t *layer, uint32_t fingerprint, const ds_event_key_t *key)
{
    if (layer->index_slots == 0)
        return -1;
    /* Rows are measured on neighbouring nodes: a group spread wider is not in them. */
    if (key->node_stride > 0)
        return -1;
    ds_event_key_t normal = *key;
    uint64_t hash = row_hash(fingerprint, &normal);
    uint32_t slot = layer->index[index_slot(layer, fingerprint, &normal, hash)];
    return slot ? (int64_t)slot - 1 : -1;
}

ds_status_t dsi_layer_put(dsi_db_layer_t *layer, const dsi_event_row_t *row, bool *replaced_p)
{
    ds_event_key_t key;
    dsi_row_key(row, &key);
    if (layer->index_slots == 0 || 2 * (layer->num_rows + 1) > layer->index_slots) {
        if (layer->num_rows + 1 > UINT32_MAX / 4)
            return DSI_ERROR(DS_ERR_OVERFLOW, "more than %u events in one database",
                             UINT32_MAX / 4);
        DSI_TRY(index_rebuild(layer, layer->index_slots ? 2 * layer->index_slots : 64, NULL));
    }
    uint64_t hash = row_hash(row->fingerprint, &key);
    size_t slot = index_slot(layer, row->fingerprint, &key, hash);
    if (layer->index[slot] != 0) {
        layer->rows[layer->index[slot] - 1] = *row;
        if (replaced_p != NULL)
            *replaced_p = true;
        return DS_OK;
    }
    if (layer->num_rows == layer->cap_rows) {
        size_t capacity = layer->cap_rows ? 2 * layer->cap_rows : 256;
        DSI_TRY(dsi_realloc_array(&layer->rows, capacity, sizeof(*layer->rows)));
        layer->cap_rows = capacity;
    }
    layer->rows[layer->num_rows] = *row;
    layer->index[slot] = (uint32_t)++layer->num_rows;
    layer->index_tags[slot] = (uint32_t)(hash >> 32);
    if (replaced_p != NULL)
        *replaced_p = false;
    return DS_OK;
}

/* Two samples describe the same measurement when everything but the
 * statistics and provenance is equal. */
static bool same_comm(const dsi_comm_row_t *a, const dsi_comm_row_t *b)
{
    return a->op == b->op && a->dtype == b->dtype && a->bytes == b->bytes &&
           a->group_size == b->group_size && a->nodes == b->nodes &&
           a->ranks_per_node == b->ranks_per_node && a->concurrency == b->concurrency &&
           a->in_place == b->in_place && a->batched == b->batched &&
           a->span_nodes == b->span_nodes && strncmp(a->source, b->source, sizeof(a->source)) == 0;
}

ds_status_t dsi_layer_put_comm(dsi_db_layer_t *layer, const dsi_comm_row_t *row)
{
    /* Communication samples number in the hundreds to thousands: a linear
     * scan keeps this simple. */
    for (size_t i = 0; i < layer->num_comm; i++) {
        if (same_comm(&layer->comm[i], row)) {
            layer->comm[i] = *row;
            return DS_OK;
        }
    }
    if (layer->num_comm == layer->cap_comm) {
        size_t capacity = layer->cap_comm ? 2 * layer->cap_comm : 64;
        DSI_TRY(dsi_realloc_array(&layer->comm, capacity, sizeof(*layer->comm)));
        layer->cap_comm = capacity;
    }
    layer->comm[layer->num_comm++] = *row;
    return DS_OK;
}

bool dsi_comm_row_same(const dsi_comm_row_t *a, const dsi_comm_row_t *b)
{
    return same_comm(a, b);
}
