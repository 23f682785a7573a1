/* Fuzz target: cluster JSON files. */
#include <dsmpi/dsmpi.h>

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ds_cluster_t cluster;
    (void)ds_cluster_load_json((const char *)data, size, "fuzz.json", &cluster);
    return 0;
}
