/* A site's systems file: entries that change built-in systems or add new
 * ones, in the catalogue's own fields (README.md, "GPU systems"). */
#include <dsmpi/cluster.h>

#include "dsi_cluster.h"
#include "dsi_core.h"
#include "dsi_json.h"

#include <string.h>

static const char *const entry_keys[] = {"name",
                                         "title",
                                         "device",
                                         "gpu_memory_GiB",
                                         "gpus_per_node",
                                         "intra_node",
                                         "intra_node_GBps",
                                         "nvls",
                                         "nics_per_node",
                                         "nic_Gbps",
                                         "injection_Gbps",
                                         "topology",
                                         "group_nodes",
                                         "groups",
                                         "oversubscription",
                                         "max_nodes",
                                         "partition_gpus",
                                         "charge_unit",
                                         "charge_per_node_hour",
                                         "charge_published",
                                         "nccl_tests",
                                         "source_node",
                                         "source_network",
                                         "source_charge",
                                         "read_on",
                                         "not_published",
                                         NULL};

/* A string member into a fixed field; too long is an error, absent leaves it. */
static ds_status_t take_text(const json_t *object, const char *key, const char *where, char *field,
                             size_t size)
{
    const char *value = NULL;
    DSI_TRY(dsi_json_string(object, key, where, false, &value));
    if (value == NULL)
        return DS_OK;
    if (strlen(value) >= size)
        return DSI_ERROR(DS_ERR_BAD_FILE, "%s: \"%s\" is longer than %zu characters", where, key,
                         size - 1);
    strcpy(field, value);
    return DS_OK;
}

static ds_status_t check_entry_keys(const json_t *object, const char *where)
{
    const char *key;
    json_t *value;
    json_object_foreach((json_t *)object, key, value)
    {
        bool known = false;
        for (size_t i = 0; entry_keys[i] != NULL && !known; i++)
            known = strcmp(key, entry_keys[i]) == 0;
        if (!known)
            return DSI_ERROR(DS_ERR_BAD_FILE,
                             "%s: key \"%.60s\" is not known (accepted: the keys README.md lists "
                             "under \"GPU systems\", e.g. device, gpus_per_node, nics_per_node, "
                             "nic_Gbps, group_nodes, max_nodes, charge_unit)",
                             where, key);
    }
    return DS_OK;
}

static ds_status_t take_numbers(const json_t *o, const char *where, ds_system_t *s)
{
    DSI_TRY(dsi_json_double(o, "gpu_memory_GiB", where, 0.001, 1e6, false, &s->gpu_memory_GiB));
    DSI_TRY(dsi_json_int32(o, "gpus_per_node", where, 1, 1024, false, &s->gpus_per_node));
    DSI_TRY(dsi_json_double(o, "intra_node_GBps", where, 1e-6, 1e6, false, &s->intra_node_GBps));
    DSI_TRY(dsi_json_bool(o, "nvls", where, false, &s->nvls));
    DSI_TRY(dsi_json_int32(o, "nics_per_node", where, 1, 1024, false, &s->nics_per_node));
    DSI_TRY(dsi_json_double(o, "nic_Gbps", where, 1e-6, 1e6, false, &s->nic_Gbps));
    DSI_TRY(dsi_json_double(o, "injection_Gbps", where, 1e-6, 1e9, false, &s->injection_Gbps));
    DSI_TRY(dsi_json_int32(o, "group_nodes", where, 0, 1 << 24, false, &s->group_nodes));
    DSI_TRY(dsi_json_int32(o, "groups", where, 0, 1 << 24, false, &s->groups));
    DSI_TRY(
        dsi_json_double(o, "oversubscription", where, 1.0, 1024.0, false, &s->oversubscription));
    DSI_TRY(dsi_json_int(o, "max_nodes", where, 0, 1LL << 32, false, &s->max_nodes));
    DSI_TRY(dsi_json_int(o, "partition_gpus", where, 0, 1LL << 40, false, &s->partition_gpus));
    DSI_TRY(dsi_json_double(o, "charge_per_node_hour", where, 0.0, 1e12, false,
                            &s->charge_per_node_hour));
    return dsi_json_bool(o, "charge_published", where, false, &s->charge_published);
}

static ds_status_t take_texts(const json_t *o, const char *where, ds_system_t *s)
{
    DSI_TRY(take_text(o, "title", where, s->title, sizeof(s->title)));
    DSI_TRY(take_text(o, "device", where, s->device, sizeof(s->device)));
    DSI_TRY(take_text(o, "intra_node", where, s->intra_node, sizeof(s->intra_node)));
    DSI_TRY(take_text(o, "topology", where, s->topology, sizeof(s->topology)));
    DSI_TRY(take_text(o, "charge_unit", where, s->charge_unit, sizeof(s->charge_unit)));
    DSI_TRY(take_text(o, "nccl_tests", where, s->nccl_tests, sizeof(s->nccl_tests)));
    DSI_TRY(take_text(o, "source_node", where, s->source_node, sizeof(s->source_node)));
    DSI_TRY(take_text(o, "source_network", where, s->source_network, sizeof(s->source_network)));
    DSI_TRY(take_text(o, "source_charge", where, s->source_charge, sizeof(s->source_charge)));
    DSI_TRY(take_text(o, "read_on", where, s->read_on, sizeof(s->read_on)));
    return take_text(o, "not_published", where, s->not_published, sizeof(s->not_published));
}

/* A new system: the keys without a default must be there; the rest default. */
static ds_status_t start_new(const json_t *o, const char *where, const char *name, ds_system_t *s)
{
    static const char *const required[] = {"device", "gpus_per_node", "nics_per_node", "nic_Gbps"};
    for (size_t i = 0; i < DSI_ARRAY_SIZE(required); i++)
        if (!dsi_json_has(o, required[i]))
            return DSI_ERROR(DS_ERR_BAD_FILE,
                             "%s: new system '%s' has no \"%s\" (accepted: a built-in name to "
                             "change, or device, gpus_per_node, nics_per_node and nic_Gbps)",
                             where, name, required[i]);
    memset(s, 0, sizeof(*s));
    snprintf(s->name, sizeof(s->name), "%s", name);
    snprintf(s->title, sizeof(s->title), "%s", name);
    s->oversubscription = 1.0;
    snprintf(s->charge_unit, sizeof(s->charge_unit), "node-hours");
    s->charge_per_node_hour = 1.0;
    snprintf(s->nccl_tests, sizeof(s->nccl_tests), "none given");
    return DS_OK;
}

/* Fills what a new entry may leave out from what it gives; a changed entry
 * keeps its stated injection and partition, checked against the new figures. */
static ds_status_t complete(const json_t *o, bool is_new, ds_system_t *s)
{
    ds_device_spec_t spec;
    DSI_TRY(ds_device_spec_lookup(s->device, &spec));
    if (!dsi_json_has(o, "gpu_memory_GiB") && s->gpu_memory_GiB == 0.0)
        s->gpu_memory_GiB = spec.memory_GiB;
    if (!dsi_json_has(o, "intra_node_GBps") && s->intra_node_GBps == 0.0)
        s->intra_node_GBps = spec.intra_node_GBps;
    if (is_new && !dsi_json_has(o, "injection_Gbps"))
        s->injection_Gbps = s->nics_per_node * s->nic_Gbps;
    if (is_new && !dsi_json_has(o, "partition_gpus"))
        s->partition_gpus = s->max_nodes * s->gpus_per_node;
    return ds_system_check(s);
}

static ds_status_t merge_entry(const json_t *o, const char *origin, size_t index,
                               ds_system_t **table_p, size_t *count_p)
{
    char where[4200];
    snprintf(where, sizeof(where), "%s: systems[%zu]", origin, index);
    if (!json_is_object(o))
        return DSI_ERROR(DS_ERR_BAD_FILE, "%s is not an object (accepted: {\"name\": ...})", where);
    DSI_TRY(check_entry_keys(o, where));
    const char *name = NULL;
    DSI_TRY(dsi_json_string(o, "name", where, true, &name));
    if (name[0] == '\0' || strlen(name) >= DS_NAME_MAX || strpbrk(name, ",= ") != NULL)
        return DSI_ERROR(DS_ERR_BAD_FILE,
                         "%s: name '%.60s' (accepted: 1 to %d characters, no ',', '=' or space)",
                         where, name, DS_NAME_MAX - 1);
    ds_system_t entry, *table = *table_p;
    size_t slot = *count_p;
    for (size_t i = 0; i < *count_p; i++)
        if (strcmp(table[i].name, name) == 0)
            slot = i;
    if (slot < *count_p)
        entry = table[slot];
    else
        DSI_TRY(start_new(o, where, name, &entry));
    DSI_TRY(take_texts(o, where, &entry));
    DSI_TRY(take_numbers(o, where, &entry));
    DSI_TRY(complete(o, slot == *count_p, &entry));
    if (slot == *count_p) {
        DSI_TRY(dsi_realloc_array(table_p, *count_p + 1, sizeof(**table_p)));
        (*count_p)++;
    }
    (*table_p)[slot] = entry;
    return DS_OK;
}

static ds_system_t *loaded;
static size_t loaded_count;

ds_status_t ds_systems_load_json(const char *text, size_t size, const char *origin)
{
    json_t *root = NULL;
    ds_system_t *table = NULL;
    size_t count = 0;
    ds_status_t status;
    DSI_TRY(dsi_json_load_text(text, size, origin, &root));
    const json_t *list = json_is_object(root) ? json_object_get(root, "systems") : NULL;
    if (!json_is_array(list) || json_object_size(root) != 1) {
        status = DSI_ERROR(DS_ERR_BAD_FILE,
                           "%s is not {\"systems\": [...]} (accepted: one key, \"systems\", "
                           "holding an array of systems)",
                           origin);
        goto out;
    }
    /* The built-in entries first, then the file's changes in order. */
    const ds_system_t *builtin;
    dsi_systems_builtin(&builtin, &count);
    DSI_TRY_GOTO(dsi_calloc(count, sizeof(*table), &table), status, out);
    memcpy(table, builtin, count * sizeof(*table));
    for (size_t i = 0; i < json_array_size(list); i++)
        DSI_TRY_GOTO(merge_entry(json_array_get(list, i), origin, i, &table, &count), status, out);
    dsi_systems_set(table, count);
    dsi_free(loaded);
    loaded = table;
    loaded_count = count;
    table = NULL;
    status = DS_OK;
out:
    dsi_free(table);
    json_decref(root);
    return status;
}

ds_status_t ds_systems_load(const char *path)
{
    char *text = NULL;
    size_t size = 0;
    DSI_TRY(dsi_read_file(path, (size_t)dsi_param_int(DSI_PARAM_MAX_INPUT_BYTES), &text, &size));
    ds_status_t status = ds_systems_load_json(text, size, path);
    dsi_free(text);
    return status;
}
