/* --target system=NAME[,nodes=N]: a catalogued system as the target, and the
 * options it contradicts. */
#include "app.h"

#include <string.h>

bool inputs_target_is_system(const inputs_t *in)
{
    return in->target_text != NULL && strncmp(in->target_text, "system=", 7) == 0;
}

ds_status_t inputs_system_target(inputs_t *in, const char *text, ds_cluster_t *cluster)
{
    if (in->cluster_file != NULL)
        return ds_set_error(DS_ERR_INVALID_ARG,
                            "--target %s and --cluster %s both describe the target (accepted: "
                            "one of them)",
                            text, in->cluster_file);
    if (in->target_gpus != 0)
        return ds_set_error(DS_ERR_INVALID_ARG,
                            "--target %s with --target-gpus or --target-nodes (accepted: the "
                            "nodes in the target, system=NAME,nodes=N)",
                            text);
    ds_status_t status = ds_system_parse_target(text, cluster, &in->system);
    if (status != DS_OK)
        return status;
    if (in->target_gpus_per_node > 0 && in->target_gpus_per_node != in->system->gpus_per_node)
        return ds_set_error(DS_ERR_INVALID_ARG,
                            "--gpus-per-node %d contradicts the %d GPUs per node of system %s "
                            "(accepted: %d, or leave it out)",
                            in->target_gpus_per_node, in->system->gpus_per_node, in->system->name,
                            in->system->gpus_per_node);
    if (in->device != NULL && strcmp(in->device, in->system->device) != 0)
        return ds_set_error(DS_ERR_INVALID_ARG,
                            "--device %s contradicts system %s's %s (accepted: %s, or leave it "
                            "out)",
                            in->device, in->system->name, in->system->device, in->system->device);
    return DS_OK;
}
