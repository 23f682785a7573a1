/* A set of unique events: an array in first-seen order plus an
 * open-addressing index of hashes. */
#include <dsmpi/events.h>

#include "dsi_core.h"
#include "dsi_events.h"

#include <string.h>

struct ds_event_set {
    ds_event_t *events;
    size_t count;
    size_t capacity;
    uint32_t *slots;  /* index + 1 into events; 0 = empty */
    size_t num_slots; /* power of two, at least twice count */
};

ds_status_t ds_event_set_create(ds_event_set_t **set_p)
{
    ds_event_set_t *set;
    DSI_TRY(dsi_calloc(1, sizeof(*set), &set));
    *set_p = set;
    return DS_OK;
}

void ds_event_set_destroy(ds_event_set_t *set)
{
    if (set == NULL)
        return;
    dsi_free(set->events);
    dsi_free(set->slots);
    dsi_free(set);
}

static size_t find_slot(const ds_event_set_t *set, const ds_event_key_t *key, uint64_t hash)
{
    size_t mask = set->num_slots - 1;
    for (size_t i = hash & mask;; i = (i + 1) & mask) {
        uint32_t slot = set->slots[i];
        if (slot == 0)
            return i;
        const ds_event_t *e = &set->events[slot - 1];
        if (e->hash == hash && ds_event_key_equal(&e->key, key))
            return i;
    }
}

static ds_status_t grow_index(ds_event_set_t *set)
{
    size_t num_slots = set->num_slots ? set->num_slots * 2 : 64;
    uint32_t *slots;
    DSI_TRY(dsi_calloc(num_slots, sizeof(*slots), &slots));
    dsi_free(set->slots);
    set->slots = slots;
    set->num_slots = num_slots;
    for (size_t i = 0; i < set->count; i++)
        set->slots[find_slot(set, &set->events[i].key, set->events[i].hash)] = (uint32_t)(i + 1);
    return DS_OK;
}

ds_status_t ds_event_set_add(ds_event_set_t *set, const ds_event_t *event, int64_t count)
{
    uint64_t hash = ds_event_key_hash(&event->key);
    if (set->num_slots == 0 || 2 * (set->count + 1) > set->num_slots)
        DSI_TRY(grow_index(set));
    size_t i = find_slot(set, &event->key, hash);
    if (set->slots[i] != 0) {
        ds_event_t *e = &set->events[set->slots[i] - 1];
        if (!dsi_add_i64(e->count, count, &e->count))
            return DSI_ERROR(DS_ERR_OVERFLOW, "event count overflows");
        return DS_OK;
    }
    if (set->count == UINT32_MAX - 1)
        return DSI_ERROR(DS_ERR_OVERFLOW, "more than %u unique events", UINT32_MAX - 1);
    if (set->count == set->capacity) {
        size_t capacity = set->capacity ? set->capacity * 2 : 64;
        DSI_TRY(dsi_realloc_array(&set->events, capacity, sizeof(*set->events)));
        set->capacity = capacity;
    }
    ds_event_t *e = &set->events[set->count];
    *e = *event;
    e->hash = hash;
    e->count = count;
    set->slots[i] = (uint32_t)(++set->count);
    return DS_OK;
}

ds_status_t ds_event_set_merge(ds_event_set_t *dst, const ds_event_set_t *src)
{
    for (size_t i = 0; i < src->count; i++)
        DSI_TRY(ds_event_set_add(dst, &src->events[i], src->events[i].count));
    return DS_OK;
}

size_t ds_event_set_size(const ds_event_set_t *set)
{
    return set->count;
}

const ds_event_t *ds_event_set_at(const ds_event_set_t *set, size_t index)
{
    return index < set->count ? &set->events[index] : NULL;
}

const ds_event_t *ds_event_set_find(const ds_event_set_t *set, const ds_event_key_t *key)
{
    if (set->num_slots == 0)
        return NULL;
    uint32_t slot = set->slots[find_slot(set, key, ds_event_key_hash(key))];
    return slot ? &set->events[slot - 1] : NULL;
}

void dsi_matmul_flops(const ds_event_key_t *key, double flops, double *hardware_p, double *model_p)
{
    *hardware_p = *model_p = 0.0;
    if (key->kind != DS_EVENT_COMPUTE)
        return;
    if (key->op == DS_OP_GEMM || key->op == DS_OP_BATCHED_GEMM) {
        *hardware_p = flops;
        *model_p = key->pass != DS_PASS_RECOMPUTE ? flops : 0.0;
    } else if (key->op == DS_OP_FLASH_ATTENTION) {
        /* Counted as Megatron's formula counts explicit attention, QK^T and
         * PV over every query-key pair (4 d forward, 8 d backward), the
         * pairs a causal mask hides too: twice the visible pairs of a
         * causal block aligned at its end, seq_q (2 seq_k - seq_q); a key
         * block shorter than the queries is a context-parallel ring block
         * of which the mask left half, counted whole.  So MFU does not
         * change with cp or its exchange.  The hardware count adds the
         * backward's recomputed scores (2 d).  The operator's own count
         * (visible pairs) prices it, not this. */
        ds_attention_shape_t a = ds_attention_shape_of(key);
        double q = (double)a.seq_q, k = (double)a.seq_k;
        double per_row = key->variant ? 2.0 * k - q : k < q ? q : k;
        double pairs = (double)a.batch * (double)a.heads * q * per_row;
        double d = (double)a.head_dim;
        bool bwd = key->pass == DS_PASS_BACKWARD;
        *hardware_p = (bwd ? 10.0 : 4.0) * d * pairs;
        *model_p = key->pass == DS_PASS_RECOMPUTE ? 0.0 : (bwd ? 8.0 : 4.0) * d * pairs;
    }
}

void ds_event_set_totals(const ds_event_set_t *set, ds_event_totals_t *totals)
{
    memset(totals, 0, sizeof(*totals));
    for (size_t i = 0; i < set->count; i++) {
        const ds_event_t *e = &set->events[i];
        ds_event_class_t c = ds_event_class_of(&e->key);
        totals->total[c] += e->count;
        totals->unique[c]++;
        if (e->key.kind == DS_EVENT_COMM) {
            totals->comm_bytes += (double)e->count * e->bytes;
        } else {
            double hardware, model;
            dsi_matmul_flops(&e->key, e->flops, &hardware, &model);
            totals->flops += (double)e->count * hardware;
            totals->model_flops += (double)e->count * model;
        }
    }
}
