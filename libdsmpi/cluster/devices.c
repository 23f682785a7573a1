/* Device specifications from vendor datasheets (dense peaks, no sparsity).
 * They seed roofline estimates and default network levels, which reports mark
 * as assumed until measured or imported. */
#include <dsmpi/cluster.h>

#include "dsi_cluster.h"
#include "dsi_core.h"

#include <string.h>

static const ds_device_spec_t devices[] = {
    /* name      mem GiB  bf16   fp32  mem GB/s NVLink  lat  net GB/s lat */
    {"a100-40g", 40.0, 312.0, 19.5, 1555.0, 300.0, 2.0, 25.0, 5.0},
    {"a100-80g", 80.0, 312.0, 19.5, 2039.0, 300.0, 2.0, 25.0, 5.0},
    {"h100-sxm", 80.0, 989.0, 67.0, 3350.0, 450.0, 2.0, 50.0, 5.0},
    {"h100-pcie", 80.0, 756.0, 51.0, 2000.0, 300.0, 2.0, 50.0, 5.0},
    {"h200", 140.0, 989.0, 67.0, 4800.0, 450.0, 2.0, 50.0, 5.0},
    {"gh200", 96.0, 989.0, 67.0, 4000.0, 450.0, 2.0, 50.0, 5.0},
    {"b200", 180.0, 2250.0, 80.0, 8000.0, 900.0, 2.0, 50.0, 5.0},
    /* One CPU core standing for a device (the CPU backend): AVX2 FMA peak of
     * a ~3 GHz core, its share of memory bandwidth, shared memory and 10 GbE. */
    {"cpu", 16.0, 0.1, 0.1, 10.0, 5.0, 1.0, 1.25, 20.0},
};

size_t ds_device_spec_count(void)
{
    return DSI_ARRAY_SIZE(devices);
}

const char *ds_device_spec_name(size_t index)
{
    return index < DSI_ARRAY_SIZE(devices) ? devices[index].name : NULL;
}

ds_status_t dsi_device_index(const char *name, int *index_p)
{
    const char *names[DSI_ARRAY_SIZE(devices)];
    for (size_t i = 0; i < DSI_ARRAY_SIZE(devices); i++)
        names[i] = devices[i].name;
    return dsi_parse_choice(name, "device", names, DSI_ARRAY_SIZE(devices), index_p);
}

ds_status_t ds_device_spec_lookup(const char *name, ds_device_spec_t *spec)
{
    int index = 0;
    DSI_TRY(dsi_device_index(name, &index));
    *spec = devices[index];
    return DS_OK;
}

ds_status_t ds_device_spec_match(const char *backend_kind, const char *device_name,
                                 ds_device_spec_t *spec)
{
    static const struct {
        const char *needle;
        const char *spec;
    } names[] = {
        {"GH200", "gh200"},
        {"H200", "h200"},
        {"H100 PCIe", "h100-pcie"},
        {"H100", "h100-sxm"},
        {"B200", "b200"},
        {"A100-SXM4-40GB", "a100-40g"},
        {"A100-PCIE-40GB", "a100-40g"},
        {"A100", "a100-80g"},
    };
    if (backend_kind != NULL && strcmp(backend_kind, "cpu") == 0)
        return ds_device_spec_lookup("cpu", spec);
    /* A spec's own name (the replay backend's devices), spaces around it ignored. */
    const char *start = device_name;
    while (start != NULL && *start == ' ')
        start++;
    size_t length = start != NULL ? strlen(start) : 0;
    while (length > 0 && start[length - 1] == ' ')
        length--;
    for (size_t i = 0; start != NULL && i < DSI_ARRAY_SIZE(devices); i++)
        if (strlen(devices[i].name) == length && strncmp(start, devices[i].name, length) == 0) {
            *spec = devices[i];
            return DS_OK;
        }
    for (size_t i = 0; device_name != NULL && i < DSI_ARRAY_SIZE(names); i++)
        if (strstr(device_name, names[i].needle) != NULL)
            return ds_device_spec_lookup(names[i].spec, spec);
    return DSI_ERROR(DS_ERR_NOT_FOUND, "no device specification matches '%s'",
                     device_name != NULL ? device_name : "");
}
