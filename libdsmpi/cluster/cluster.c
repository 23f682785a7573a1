/* Target clusters: from a device count, a target string or a JSON file. */
#include <dsmpi/cluster.h>

#include "dsi_core.h"
#include "dsi_json.h"

#include <string.h>

static ds_status_t check_size(int64_t nodes, int gpus_per_node)
{
    int64_t max_gpus = dsi_param_int(DSI_PARAM_MAX_TARGET_GPUS);
    if (gpus_per_node < 1 || gpus_per_node > 1024)
        return DSI_ERROR(DS_ERR_INVALID_ARG,
                         "gpus-per-node %d is out of range (accepted: 1 to 1024)", gpus_per_node);
    if (nodes < 1 || nodes > max_gpus || nodes * gpus_per_node > max_gpus)
        return DSI_ERROR(DS_ERR_INVALID_ARG,
                         "a target of %lld nodes x %d devices is out of range (accepted: 1 to %lld "
                         "devices; DS_MAX_TARGET_GPUS raises the limit)",
                         (long long)nodes, gpus_per_node, (long long)max_gpus);
    return DS_OK;
}

ds_status_t ds_cluster_init(ds_cluster_t *cluster, int64_t nodes, int gpus_per_node,
                            const char *device)
{
    DSI_TRY(check_size(nodes, gpus_per_node));
    ds_device_spec_t spec;
    DSI_TRY(
        ds_device_spec_lookup(device ? device : dsi_param_string(DSI_PARAM_DEFAULT_DEVICE), &spec));
    ds_cluster_t c;
    memset(&c, 0, sizeof(c));
    c.nodes = nodes;
    c.gpus_per_node = gpus_per_node;
    ds_cluster_on_device(&c, &spec);
    *cluster = c;
    return DS_OK;
}

void ds_cluster_on_device(ds_cluster_t *cluster, const ds_device_spec_t *device)
{
    ds_cluster_t *c = cluster;
    c->device = *device;
    snprintf(c->name, sizeof(c->name), "%lldx%d-%s", (long long)c->nodes, c->gpus_per_node,
             c->device.name);
    memset(c->levels, 0, sizeof(c->levels));
    c->num_levels = 2;
    snprintf(c->levels[0].name, sizeof(c->levels[0].name), "intra-node");
    c->levels[0].latency_us = c->device.intra_node_latency_us;
    c->levels[0].bandwidth_GBps = c->device.intra_node_GBps;
    c->levels[0].span = c->gpus_per_node;
    c->levels[0].oversubscription = 1.0;
    snprintf(c->levels[1].name, sizeof(c->levels[1].name), "inter-node");
    c->levels[1].latency_us = c->device.network_latency_us;
    c->levels[1].bandwidth_GBps = c->device.network_GBps;
    c->levels[1].span = 0;
    c->levels[1].oversubscription = 1.0;
    c->levels[1].nics_per_node = c->gpus_per_node;
}

ds_status_t ds_cluster_from_gpus(ds_cluster_t *cluster, int64_t gpus, int gpus_per_node)
{
    int64_t max_gpus = dsi_param_int(DSI_PARAM_MAX_TARGET_GPUS);
    if (gpus < 1 || gpus > max_gpus)
        return DSI_ERROR(DS_ERR_INVALID_ARG,
                         "target-gpus %lld is out of range (accepted: 1 to %lld)", (long long)gpus,
                         (long long)max_gpus);
    int per_node =
        gpus_per_node > 0 ? gpus_per_node : (int)dsi_param_int(DSI_PARAM_DEFAULT_GPUS_PER_NODE);
    if (gpus < per_node)
        per_node = (int)gpus; /* a fraction of one node */
    if (gpus % per_node != 0)
        return DSI_ERROR(DS_ERR_INVALID_ARG,
                         "target-gpus %lld is not a multiple of %d devices per node (accepted: "
                         "multiples of %d, or fewer than %d)",
                         (long long)gpus, per_node, per_node, per_node);
    return ds_cluster_init(cluster, gpus / per_node, per_node, NULL);
}

ds_status_t ds_cluster_parse_target(const char *text, ds_cluster_t *cluster)
{
    if (text == NULL || strlen(text) >= 256)
        return DSI_ERROR(DS_ERR_INVALID_ARG,
                         "target is empty or too long (accepted: e.g. nodes=128,gpus-per-node=8)");
    char copy[256];
    strcpy(copy, text);
    int64_t nodes = 0;
    int per_node = (int)dsi_param_int(DSI_PARAM_DEFAULT_GPUS_PER_NODE);
    const char *device = NULL;
    for (char *save = NULL, *item = strtok_r(copy, ",", &save); item != NULL;
         item = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(item, '=');
        if (eq == NULL)
            return DSI_ERROR(
                DS_ERR_INVALID_ARG,
                "target item '%s' has no value (accepted: nodes=N, gpus-per-node=G, device=NAME)",
                item);
        *eq = '\0';
        const char *value = eq + 1;
        if (strcmp(item, "nodes") == 0) {
            DSI_TRY(dsi_parse_i64(value, "nodes", 1, dsi_param_int(DSI_PARAM_MAX_TARGET_GPUS), true,
                                  &nodes));
        } else if (strcmp(item, "gpus-per-node") == 0) {
            DSI_TRY(dsi_parse_int(value, "gpus-per-node", 1, 1024, &per_node));
        } else if (strcmp(item, "device") == 0) {
            device = value;
            ds_device_spec_t spec;
            DSI_TRY(ds_device_spec_lookup(device, &spec));
        } else {
            return DSI_ERROR(
                DS_ERR_INVALID_ARG,
                "target key '%s' is not known (accepted: nodes, gpus-per-node, device)", item);
        }
    }
    if (nodes == 0)
        return DSI_ERROR(DS_ERR_INVALID_ARG,
                         "target '%s' names no nodes (accepted: e.g. nodes=128,gpus-per-node=8)",
                         text);
    /* `device` points into `copy`, still alive here. */
    return ds_cluster_init(cluster, nodes, per_node, device);
}

ds_status_t ds_cluster_set_gpus(ds_cluster_t *cluster, int64_t gpus, const char *origin)
{
    int per_node = cluster->gpus_per_node;
    if (gpus > per_node && gpus % per_node != 0)
        return DSI_ERROR(DS_ERR_INVALID_ARG,
                         "%lld GPUs are not whole nodes of %d (cluster %s; accepted: multiples of "
                         "%d, or fewer than %d)",
                         (long long)gpus, per_node, origin, per_node, per_node);
    int64_t nodes = gpus > per_node ? gpus / per_node : 1;
    if (gpus < per_node)
        per_node = (int)gpus; /* a part of one node */
    DSI_TRY(check_size(nodes, per_node));
    cluster->nodes = nodes;
    cluster->gpus_per_node = per_node;
    cluster->levels[0].span = per_node;
    return DS_OK;
}

ds_status_t ds_cluster_check_gpus_per_node(const ds_cluster_t *cluster, int gpus_per_node,
                                           const char *origin)
{
    if (gpus_per_node > 0 && gpus_per_node != cluster->gpus_per_node)
        return DSI_ERROR(DS_ERR_INVALID_ARG,
                         "gpus-per-node %d contradicts the %d devices per node of cluster file %s "
                         "(accepted: %d, or leave it out)",
                         gpus_per_node, cluster->gpus_per_node, origin, cluster->gpus_per_node);
    return DS_OK;
}

/* ---- cluster files ------------------------------------------------------------ */

static const char *const file_keys[] = {
    "name",        "nodes",       "gpus_per_node", "device", "device_memory_GiB",
    "peak_tflops", "mem_bw_GBps", "levels",        "pat",    NULL};
/* Level 0 joins the devices of a node; NICs and oversubscription are the network's. */
static const char *const node_level_keys[] = {"name", "latency_us", "bandwidth_GBps",
                                              "span", "nvls",       NULL};
/* Level 1: the nodes' own interfaces. */
static const char *const first_network_keys[] = {"name",
                                                 "latency_us",
                                                 "bandwidth_GBps",
                                                 "span",
                                                 "oversubscription",
                                                 "nics_per_node",
                                                 "congestion_per_doubling",
                                                 "sharp",
                                                 NULL};
static const char *const upper_level_keys[] = {
    "name",  "latency_us", "bandwidth_GBps", "span", "oversubscription", "congestion_per_doubling",
    "sharp", NULL};

/* Refuses the first member of `object` that `accepted` (NULL-terminated)
 * does not list; `where` names the object in the message, `hint` (may be
 * "") follows the list. */
static ds_status_t check_keys(const json_t *object, const char *where, const char *const *accepted,
                              const char *hint)
{
    const char *key;
    json_t *value;
    json_object_foreach((json_t *)object, key, value)
    {
        bool known = false;
        for (size_t i = 0; accepted[i] != NULL && !known; i++)
            known = strcmp(key, accepted[i]) == 0;
        if (known)
            continue;
        char shown[64], list[256];
        size_t n = 0;
        for (const char *c = key; *c != '\0' && n + 1 < sizeof(shown); c++)
            shown[n++] = (unsigned char)*c < 0x20 || *c == 0x7f ? '?' : *c; /* one line */
        shown[n] = '\0';
        list[0] = '\0';
        for (size_t i = 0, used = 0; accepted[i] != NULL && used < sizeof(list); i++)
            used += (size_t)snprintf(list + used, sizeof(list) - used, "%s%s", i ? ", " : "",
                                     accepted[i]);
        return DSI_ERROR(DS_ERR_BAD_FILE, "%s: key \"%s\"%s is not known (accepted: %s%s)", where,
                         shown, strlen(key) >= sizeof(shown) ? "..." : "", list, hint);
    }
    return DS_OK;
}

static ds_status_t parse_level(const json_t *object, const char *origin, int index, int count,
                               ds_net_level_t *level)
{
    char where[4200];
    snprintf(where, sizeof(where), "%s: levels[%d]", origin, index);
    if (!json_is_object(object))
        return DSI_ERROR(
            DS_ERR_BAD_FILE,
            "%s is not an object (accepted: {\"latency_us\": ..., \"bandwidth_GBps\": ...})",
            where);
    if (index == 0)
        DSI_TRY(check_keys(object, where, node_level_keys,
                           "; level 0 joins the devices of a node: NICs and oversubscription "
                           "belong to levels[1] and above"));
    else if (index == 1)
        DSI_TRY(check_keys(object, where, first_network_keys, ""));
    else
        DSI_TRY(
            check_keys(object, where, upper_level_keys, "; a node's NICs are given on levels[1]"));
    const char *name = NULL;
    DSI_TRY(dsi_json_string(object, "name", where, false, &name));
    if (name != NULL)
        snprintf(level->name, sizeof(level->name), "%s", name);
    DSI_TRY(dsi_json_double(object, "latency_us", where, 0.0, 1e6, true, &level->latency_us));
    DSI_TRY(
        dsi_json_double(object, "bandwidth_GBps", where, 1e-6, 1e6, true, &level->bandwidth_GBps));
    DSI_TRY(dsi_json_int32(object, "span", where, 0, 1 << 24, false, &level->span));
    DSI_TRY(dsi_json_double(object, "oversubscription", where, 1.0, 1024.0, false,
                            &level->oversubscription));
    DSI_TRY(dsi_json_int32(object, "nics_per_node", where, 1, 1024, false, &level->nics_per_node));
    DSI_TRY(dsi_json_double(object, "congestion_per_doubling", where, 0.0, 0.9, false,
                            &level->congestion_per_doubling));
    const json_t *congestion = json_object_get(object, "congestion_per_doubling");
    level->congestion_given = congestion != NULL && !json_is_null(congestion);
    DSI_TRY(dsi_json_bool(object, "nvls", where, false, &level->nvls));
    DSI_TRY(dsi_json_bool(object, "sharp", where, false, &level->sharp));
    if (index == 1 && count == 2 && level->oversubscription != 1.0)
        return DSI_ERROR(
            DS_ERR_BAD_FILE,
            "%s: \"oversubscription\" = %g has no level above levels[1] to apply to (accepted: 1 "
            "on a last levels[1]; or add the level its domains' uplinks reach)",
            where, level->oversubscription);
    return DS_OK;
}

/* The spans must make every level reachable: a level that joins all nodes
 * (no span) is the last, each span is larger than the one below, and the
 * last level joins every node of the file. */
static ds_status_t check_spans(const ds_cluster_t *c, const char *origin)
{
    for (int l = 1; l < c->num_levels; l++) {
        int span = c->levels[l].span;
        bool last = l == c->num_levels - 1;
        if (!last && span == 0)
            return DSI_ERROR(
                DS_ERR_BAD_FILE,
                "%s: levels[%d] has no \"span\" (it joins all nodes) but levels[%d] is above it "
                "(accepted: a span, in nodes, on every level but the last)",
                origin, l, l + 1);
        if (l >= 2 && span > 0 && span <= c->levels[l - 1].span)
            return DSI_ERROR(DS_ERR_BAD_FILE,
                             "%s: levels[%d].span %d is not larger than levels[%d].span %d "
                             "(accepted: spans in nodes, growing with the level)",
                             origin, l, span, l - 1, c->levels[l - 1].span);
        if (last && span > 0 && span < c->nodes)
            return DSI_ERROR(
                DS_ERR_BAD_FILE,
                "%s: levels[%d].span %d splits the %lld nodes into domains no level joins "
                "(accepted: no span, or at least %lld, on the last level; or a level above it)",
                origin, l, span, (long long)c->nodes, (long long)c->nodes);
    }
    return DS_OK;
}

ds_status_t ds_cluster_load_json(const char *text, size_t size, const char *origin,
                                 ds_cluster_t *cluster)
{
    ds_status_t status;
    json_t *root = NULL;
    DSI_TRY(dsi_json_load_text(text, size, origin, &root));
    int64_t nodes = 0;
    int per_node = 0;
    const char *device = NULL, *name = NULL;
    ds_cluster_t c;
    if (!json_is_object(root)) {
        status = DSI_ERROR(
            DS_ERR_BAD_FILE,
            "%s is not a JSON object (accepted: {\"nodes\": N, \"gpus_per_node\": G, ...})",
            origin);
        goto out;
    }
    DSI_TRY_GOTO(check_keys(root, origin, file_keys, ""), status, out);
    DSI_TRY_GOTO(dsi_json_int(root, "nodes", origin, 1, dsi_param_int(DSI_PARAM_MAX_TARGET_GPUS),
                              true, &nodes),
                 status, out);
    DSI_TRY_GOTO(dsi_json_int32(root, "gpus_per_node", origin, 1, 1024, true, &per_node), status,
                 out);
    DSI_TRY_GOTO(dsi_json_string(root, "device", origin, false, &device), status, out);
    DSI_TRY_GOTO(ds_cluster_init(&c, nodes, per_node, device), status, out);
    DSI_TRY_GOTO(dsi_json_string(root, "name", origin, false, &name), status, out);
    if (name != NULL)
        snprintf(c.name, sizeof(c.name), "%s", name);
    DSI_TRY_GOTO(
        dsi_json_double(root, "device_memory_GiB", origin, 0.001, 1e6, false, &c.device.memory_GiB),
        status, out);
    DSI_TRY_GOTO(
        dsi_json_double(root, "peak_tflops", origin, 1e-6, 1e6, false, &c.device.peak_tflops_bf16),
        status, out);
    DSI_TRY_GOTO(
        dsi_json_double(root, "mem_bw_GBps", origin, 1e-6, 1e7, false, &c.device.mem_bw_GBps),
        status, out);
    DSI_TRY_GOTO(dsi_json_bool(root, "pat", origin, false, &c.pat), status, out);
    const json_t *levels = json_object_get(root, "levels");
    if (levels != NULL && !json_is_null(levels)) {
        size_t count = json_array_size(levels);
        if (!json_is_array(levels) || count < 1 || count > DS_MAX_NET_LEVELS) {
            status = DSI_ERROR(DS_ERR_BAD_FILE,
                               "%s: \"levels\" must be an array of 1 to %d network levels", origin,
                               DS_MAX_NET_LEVELS);
            goto out;
        }
        for (size_t i = 0; i < count; i++) {
            ds_net_level_t *level = &c.levels[i];
            if (i >=
                (size_t)c.num_levels) { /* a level beyond the defaults starts from the one below */
                *level = c.levels[i - 1];
                level->span = 0;
                level->sharp = false; /* declared per level */
            }
            if (i == 0)
                level->span = 0; /* given or not: checked below */
            DSI_TRY_GOTO(parse_level(json_array_get(levels, i), origin, (int)i, (int)count, level),
                         status, out);
        }
        if (c.levels[0].span != 0 && c.levels[0].span != per_node) {
            status = DSI_ERROR(DS_ERR_BAD_FILE,
                               "%s: levels[0].span %d disagrees with \"gpus_per_node\" %d "
                               "(accepted: %d, or no span: level 0 joins the devices of a node)",
                               origin, c.levels[0].span, per_node, per_node);
            goto out;
        }
        c.num_levels = (int)count;
        c.levels[0].span = per_node;
        DSI_TRY_GOTO(check_spans(&c, origin), status, out);
    }
    *cluster = c;
    status = DS_OK;
out:
    json_decref(root);
    return status;
}

ds_status_t ds_cluster_load(const char *path, ds_cluster_t *cluster)
{
    char *text = NULL;
    size_t size = 0;
    DSI_TRY(dsi_read_file(path, (size_t)dsi_param_int(DSI_PARAM_MAX_INPUT_BYTES), &text, &size));
    ds_status_t status = ds_cluster_load_json(text, size, path, cluster);
    dsi_free(text);
    return status;
}

int64_t ds_cluster_num_gpus(const ds_cluster_t *cluster)
{
    return cluster->nodes * cluster->gpus_per_node;
}
