/* The catalogue of real GPU systems: each entry is what its site's or
 * vendor's public documentation says, with the URLs and the date they were
 * read; what they do not say is listed in `not_published` with the default
 * used.  A system becomes a cluster through the cluster-file text it is
 * equivalent to, so both paths give the same prediction.
 *
 * Defaults where a source is silent: latencies are the device's (devices.c:
 * 2 us inside a node, 5 us across nodes), oversubscription between groups 1,
 * no NVLink SHARP, and charging in node-hours at 1 unit per node-hour. */
#include <dsmpi/cluster.h>

#include "dsi_cluster.h"
#include "dsi_core.h"
#include "dsi_json.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define READ_ON "2026-12-02"
#define NO_NCCL_TESTS "none found in the public pages read"
#define NOT_CHARGED "not read: node-hours x 1 used"

static const ds_system_t builtin[] = {
    {
        .name = "perlmutter",
        .title = "NERSC Perlmutter, GPU nodes (A100 40 GB)",
        .device = "a100-40g",
        .gpu_memory_GiB = 40.0,
        .gpus_per_node = 4,
        .intra_node = "NVLink 3 between the four A100",
        .intra_node_GBps = 300.0,
        .nics_per_node = 4,
        .nic_Gbps = 200.0,
        .injection_Gbps = 800.0,
        .topology = "dragonfly (3-hop), one group per cabinet",
        .group_nodes = 74,
        .groups = 24,
        .oversubscription = 1.0,
        .max_nodes = 1536,
        .partition_gpus = 6144,
        .charge_unit = "node-hours",
        .charge_per_node_hour = 1.0,
        .charge_published = true,
        .nccl_tests = NO_NCCL_TESTS,
        .source_node = "https://docs.nersc.gov/systems/perlmutter/architecture/ (1536 nodes of "
                       "4x A100 40GB, 4x Slingshot 11; 256 more of A100 80GB)",
        .source_network = "https://docs.nersc.gov/systems/perlmutter/architecture/ (3-hop "
                          "dragonfly, 24 GPU groups, 4 NICs per node)",
        .source_charge = "https://docs.nersc.gov/jobs/policy/ (unit: node hour x QOS factor x "
                         "charge factor)",
        .read_on = READ_ON,
        .not_published = "NIC speed (Slingshot 11's 200 Gb/s used); nodes per group (1792 GPU "
                         "nodes over 24 groups: 74, derived); global-link taper (1 used); "
                         "Perlmutter GPU charge factor (1 used, regular QOS); latencies "
                         "(device defaults); the 256 A100 80 GB nodes are a separate system",
    },
    {
        .name = "polaris",
        .title = "ALCF Polaris (A100 40 GB)",
        .device = "a100-40g",
        .gpu_memory_GiB = 40.0,
        .gpus_per_node = 4,
        .intra_node = "NVLink 3 between the four A100 (NV4 each pair)",
        .intra_node_GBps = 300.0,
        .nics_per_node = 2,
        .nic_Gbps = 200.0,
        .injection_Gbps = 400.0,
        .topology = "Slingshot 11 (topology not in the page read)",
        .oversubscription = 1.0,
        .max_nodes = 560,
        .partition_gpus = 2240,
        .charge_unit = "node-hours",
        .charge_per_node_hour = 1.0,
        .nccl_tests = NO_NCCL_TESTS,
        .source_node = "https://docs.alcf.anl.gov/polaris/hardware-overview/machine-overview/ "
                       "(560 nodes, 4x A100, 2x Slingshot 11 adapters)",
        .source_network = "https://docs.alcf.anl.gov/polaris/hardware-overview/machine-overview/",
        .source_charge = NOT_CHARGED,
        .read_on = READ_ON,
        .not_published = "NIC speed (Slingshot 11's 200 Gb/s used); topology and group size "
                         "(one level joining all nodes used); charging (node-hours x 1 used); "
                         "latencies (device defaults)",
    },
    {
        .name = "alps-gh200",
        .title = "CSCS Alps, GH200 nodes",
        .device = "gh200",
        .gpu_memory_GiB = 96.0,
        .gpus_per_node = 4,
        .intra_node = "NVLink 4 between the four GH200 (device default 450 GB/s per GPU)",
        .intra_node_GBps = 450.0,
        .nics_per_node = 4,
        .nic_Gbps = 200.0,
        .injection_Gbps = 800.0,
        .topology = "Slingshot 11 (topology not published by CSCS)",
        .oversubscription = 1.0,
        .max_nodes = 2688,
        .partition_gpus = 10752,
        .charge_unit = "node-hours",
        .charge_per_node_hour = 1.0,
        .nccl_tests = NO_NCCL_TESTS,
        .source_node = "https://docs.cscs.ch/alps/hardware/ (2688 GH200 nodes, 10,752 GPUs)",
        .source_network = "https://docs.cscs.ch/alps/hardware/ (network section still a to-do)",
        .source_charge = NOT_CHARGED,
        .read_on = READ_ON,
        .not_published = "GPU memory (the GH200 96 GB variant used); NVLink bandwidth (device "
                         "default); NICs (4x Slingshot 11 at 200 Gb/s used, as on the same HPE "
                         "Cray EX254n blade at Bristol); topology (one level used); charging "
                         "(node-hours x 1 used); latencies (device defaults)",
    },
    {
        .name = "juwels-booster",
        .title = "JSC JUWELS Booster (A100 40 GB)",
        .device = "a100-40g",
        .gpu_memory_GiB = 40.0,
        .gpus_per_node = 4,
        .intra_node = "NVLink 3 between the four A100",
        .intra_node_GBps = 300.0,
        .nics_per_node = 4,
        .nic_Gbps = 200.0,
        .injection_Gbps = 800.0,
        .topology = "DragonFly+, cells of 48 nodes each a two-level full fat tree",
        .group_nodes = 48,
        .oversubscription = 1.0,
        .max_nodes = 936,
        .partition_gpus = 3744,
        .charge_unit = "node-hours",
        .charge_per_node_hour = 1.0,
        .nccl_tests = NO_NCCL_TESTS,
        .source_node = "https://apps.fz-juelich.de/jsc/hps/juwels/booster-overview.html (936 "
                       "nodes, 4x A100 40 GB, 4x HDR200 200 Gbit/s each)",
        .source_network = "https://apps.fz-juelich.de/jsc/hps/juwels/booster-overview.html "
                          "(DragonFly+, 48-node cells)",
        .source_charge = "https://www.fz-juelich.de/en/ias/jsc/services/user-support/using-"
                         "systems/allocation-procedures (quotas in core-h)",
        .read_on = READ_ON,
        .not_published = "cells and links between them (1 used); the core-h one Booster "
                         "node-hour costs (node-hours x 1 used); latencies (device defaults)",
    },
    {
        .name = "jupiter-booster",
        .title = "JSC JUPITER Booster (GH200)",
        .device = "gh200",
        .gpu_memory_GiB = 96.0,
        .gpus_per_node = 4,
        .intra_node = "NVLink 4, 150 GB/s per direction between each pair of the four GPUs",
        .intra_node_GBps = 450.0,
        .nics_per_node = 4,
        .nic_Gbps = 200.0,
        .injection_Gbps = 800.0,
        .topology = "Dragonfly+, 25 Booster groups of 240 nodes, adaptive routing",
        .group_nodes = 240,
        .groups = 25,
        .oversubscription = 1.0,
        .max_nodes = 6000,
        .partition_gpus = 24000,
        .charge_unit = "node-hours",
        .charge_per_node_hour = 1.0,
        .nccl_tests = NO_NCCL_TESTS,
        .source_node = "https://apps.fz-juelich.de/jsc/hps/jupiter/configuration.html (~6000 "
                       "nodes of 4x GH200 96 GB, 4x NDR200)",
        .source_network = "https://apps.fz-juelich.de/jsc/hps/jupiter/configuration.html "
                          "(Dragonfly+, 25 Booster groups, 240 nodes per group)",
        .source_charge = NOT_CHARGED,
        .read_on = READ_ON,
        .not_published = "exact node count (~6000: 25 groups x 240 used); taper of the links "
                         "between groups (1 used); charging (node-hours x 1 used); latencies "
                         "(device defaults)",
    },
    {
        .name = "leonardo-booster",
        .title = "CINECA Leonardo Booster (A100 64 GB)",
        .device = "a100-40g",
        .gpu_memory_GiB = 64.0,
        .gpus_per_node = 4,
        .intra_node = "NVLink 3 between the four A100",
        .intra_node_GBps = 300.0,
        .nics_per_node = 4,
        .nic_Gbps = 100.0,
        .injection_Gbps = 400.0,
        .topology = "Dragonfly+ (InfiniBand HDR)",
        .oversubscription = 1.0,
        .max_nodes = 3456,
        .partition_gpus = 13824,
        .charge_unit = "node-hours",
        .charge_per_node_hour = 1.0,
        .nccl_tests = NO_NCCL_TESTS,
        .source_node = "https://leonardo-supercomputer.cineca.eu/hpc-system (3456 nodes, 4x "
                       "A100 SXM4 64 GB, 2x dual-port HDR, 400 Gbps aggregated)",
        .source_network = "https://leonardo-supercomputer.cineca.eu/hpc-system (Dragonfly+)",
        .source_charge = NOT_CHARGED,
        .read_on = READ_ON,
        .not_published = "the custom A100 64 GB's bandwidth and peaks (a100-40g's used); group "
                         "size (one level used); charging (node-hours x 1 used); latencies "
                         "(device defaults)",
    },
    {
        .name = "isambard-ai",
        .title = "Bristol Isambard-AI (GH200)",
        .device = "gh200",
        .gpu_memory_GiB = 96.0,
        .gpus_per_node = 4,
        .intra_node = "NVLink 4 between the four GH200 (device default 450 GB/s per GPU)",
        .intra_node_GBps = 450.0,
        .nics_per_node = 4,
        .nic_Gbps = 200.0,
        .injection_Gbps = 800.0,
        .topology = "Slingshot 11 (200G)",
        .oversubscription = 1.0,
        .max_nodes = 1362,
        .partition_gpus = 5448,
        .charge_unit = "node-hours",
        .charge_per_node_hour = 1.0,
        .nccl_tests = NO_NCCL_TESTS,
        .source_node = "https://glennklockwood.com/garden/systems/Isambard-AI (a summary of the "
                       "CUG 2024 paper: 1,362 nodes of 4x GH200, 4x Slingshot 11; 5,448 GPUs)",
        .source_network = "https://glennklockwood.com/garden/systems/Isambard-AI (200G "
                          "Slingshot)",
        .source_charge = NOT_CHARGED,
        .read_on = READ_ON,
        .not_published = "the site's own pages were not read (a third-party summary was); GPU "
                         "memory (96 GB used); topology (one level used); charging (node-hours "
                         "x 1 used); latencies (device defaults)",
    },
    {
        .name = "dgx-h100-superpod",
        .title = "NVIDIA DGX SuperPOD with DGX H100, 4 scalable units",
        .device = "h100-sxm",
        .gpu_memory_GiB = 80.0,
        .gpus_per_node = 8,
        .intra_node = "NVLink 4 through four NVSwitches (450 GB/s per GPU per direction)",
        .intra_node_GBps = 450.0,
        .nvls = true,
        .nics_per_node = 8,
        .nic_Gbps = 400.0,
        .injection_Gbps = 3200.0,
        .topology = "rail-optimised fat tree (InfiniBand NDR), 32-node scalable units",
        .group_nodes = 32,
        .groups = 4,
        .oversubscription = 1.0,
        .max_nodes = 127,
        .partition_gpus = 1016,
        .charge_unit = "node-hours",
        .charge_per_node_hour = 1.0,
        .nccl_tests = NO_NCCL_TESTS,
        .source_node = "https://docs.nvidia.com/dgx-superpod/reference-architecture-scalable-"
                       "infrastructure-h100/latest/network-fabrics.html (4 SU: 127 nodes, 1016 "
                       "GPUs)",
        .source_network = "https://docs.nvidia.com/dgx-superpod/reference-architecture-scalable-"
                          "infrastructure-h100/latest/network-fabrics.html (rail-aligned SUs, "
                          "leaf-spine cables = node cables); NDR 400 Gbps",
        .source_charge = "an owned system: no charging (node-hours x 1 used)",
        .read_on = READ_ON,
        .not_published = "latencies (device defaults); SHARP in the InfiniBand switches "
                         "(off: NCCL's default)",
    },
    {
        .name = "dgx-b200-superpod",
        .title = "NVIDIA DGX SuperPOD with DGX B200, 4 scalable units",
        .device = "b200",
        .gpu_memory_GiB = 180.0,
        .gpus_per_node = 8,
        .intra_node = "NVLink 5 through NVSwitches (900 GB/s per GPU per direction)",
        .intra_node_GBps = 900.0,
        .nvls = true,
        .nics_per_node = 8,
        .nic_Gbps = 400.0,
        .injection_Gbps = 3200.0,
        .topology = "rail-optimised fat tree (InfiniBand NDR), 32-node scalable units",
        .group_nodes = 32,
        .groups = 4,
        .oversubscription = 1.0,
        .max_nodes = 128,
        .partition_gpus = 1024,
        .charge_unit = "node-hours",
        .charge_per_node_hour = 1.0,
        .nccl_tests = NO_NCCL_TESTS,
        .source_node = "https://docs.nvidia.com/dgx-superpod/reference-architecture-scalable-"
                       "infrastructure-b200/latest/dgx-superpod-architecture.html (4 SU: 128 "
                       "nodes, 1024 GPUs)",
        .source_network = "https://docs.nvidia.com/dgx-basepod/reference-architecture-"
                          "infrastructure-foundation-enterprise-ai/latest/core-components.html "
                          "(8x ConnectX-7 up to 400 Gb/s)",
        .source_charge = "an owned system: no charging (node-hours x 1 used)",
        .read_on = READ_ON,
        .not_published = "GPU memory per GPU (the page gives 1.4 TB per system; 180 GB used); "
                         "latencies (device defaults)",
    },
    {
        .name = "aws-p5",
        .title = "AWS EC2 p5.48xlarge (8x H100 80 GB)",
        .device = "h100-sxm",
        .gpu_memory_GiB = 80.0,
        .gpus_per_node = 8,
        .intra_node = "NVLink 4 through NVSwitches",
        .intra_node_GBps = 450.0,
        .nics_per_node = 32,
        .nic_Gbps = 100.0,
        .injection_Gbps = 3200.0,
        .topology = "EFA in EC2 UltraClusters (not published)",
        .oversubscription = 1.0,
        .charge_unit = "instance-hours",
        .charge_per_node_hour = 1.0,
        .nccl_tests = NO_NCCL_TESTS,
        .source_node = "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-acc-inst-"
                       "types.html (EFA configuration for P5 and P5e: 32 EFA devices)",
        .source_network = "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-acc-inst-"
                          "types.html",
        .source_charge = "billed per instance-hour (one instance = one node)",
        .read_on = READ_ON,
        .not_published = "speed per EFA device (3200 Gbps over 32: 100 Gb/s used); topology "
                         "and largest placement (nodes= must be given); latencies (device "
                         "defaults); prices",
    },
    {
        .name = "aws-p5e",
        .title = "AWS EC2 p5e.48xlarge (8x H200 141 GB)",
        .device = "h200",
        .gpu_memory_GiB = 141.0,
        .gpus_per_node = 8,
        .intra_node = "NVLink 4 through NVSwitches",
        .intra_node_GBps = 450.0,
        .nics_per_node = 32,
        .nic_Gbps = 100.0,
        .injection_Gbps = 3200.0,
        .topology = "EFA in EC2 UltraClusters (not published)",
        .oversubscription = 1.0,
        .charge_unit = "instance-hours",
        .charge_per_node_hour = 1.0,
        .nccl_tests = NO_NCCL_TESTS,
        .source_node = "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-acc-inst-"
                       "types.html (EFA configuration for P5 and P5e)",
        .source_network = "https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-acc-inst-"
                          "types.html",
        .source_charge = "billed per instance-hour (one instance = one node)",
        .read_on = READ_ON,
        .not_published = "speed per EFA device (100 Gb/s used, as p5); topology and largest "
                         "placement (nodes= must be given); latencies (device defaults); prices",
    },
    {
        .name = "azure-nd-h100-v5",
        .title = "Azure ND H100 v5 (8x H100 80 GB)",
        .device = "h100-sxm",
        .gpu_memory_GiB = 80.0,
        .gpus_per_node = 8,
        .intra_node = "NVLink 4.0 inside the VM",
        .intra_node_GBps = 450.0,
        .nics_per_node = 8,
        .nic_Gbps = 400.0,
        .injection_Gbps = 3200.0,
        .topology = "InfiniBand NDR, one 400 Gb/s CX7 per GPU (topology not published)",
        .oversubscription = 1.0,
        .charge_unit = "instance-hours",
        .charge_per_node_hour = 1.0,
        .nccl_tests = NO_NCCL_TESTS,
        .source_node = "https://learn.microsoft.com/azure/virtual-machines/sizes/gpu-"
                       "accelerated/ndh100v5-series (8x H100, 3.2 Tbps per VM)",
        .source_network = "https://learn.microsoft.com/azure/virtual-machines/sizes/gpu-"
                          "accelerated/ndh100v5-series (400 Gb/s Quantum-2 CX7 per GPU)",
        .source_charge = "billed per VM-hour (one VM = one node)",
        .read_on = READ_ON,
        .not_published = "topology and largest scale set (nodes= must be given); latencies "
                         "(device defaults); prices",
    },
    {
        .name = "azure-nd-h200-v5",
        .title = "Azure ND H200 v5 (8x H200 141 GB)",
        .device = "h200",
        .gpu_memory_GiB = 141.0,
        .gpus_per_node = 8,
        .intra_node = "NVLink 4 inside the VM",
        .intra_node_GBps = 450.0,
        .nics_per_node = 8,
        .nic_Gbps = 400.0,
        .injection_Gbps = 3200.0,
        .topology = "InfiniBand (not published)",
        .oversubscription = 1.0,
        .charge_unit = "instance-hours",
        .charge_per_node_hour = 1.0,
        .nccl_tests = NO_NCCL_TESTS,
        .source_node = "https://aspire.dev/reference/api/csharp/aspire.hosting.azure.kubernetes/"
                       "standardndisrh200v5.md (Standard_ND96isr_H200_v5: 8 GPUs)",
        .source_network = "not read: ND H100 v5's 8x 400 Gb/s used",
        .source_charge = "billed per VM-hour (one VM = one node)",
        .read_on = READ_ON,
        .not_published = "Microsoft's ND H200 v5 page was not read: NICs as ND H100 v5 (8x "
                         "400 Gb/s) used; topology and largest scale set (nodes= must be "
                         "given); latencies (device defaults); prices",
    },
    {
        .name = "gcp-a3-mega",
        .title = "Google Cloud A3 Mega, a3-megagpu-8g (8x H100 80 GB)",
        .device = "h100-sxm",
        .gpu_memory_GiB = 80.0,
        .gpus_per_node = 8,
        .intra_node = "NVLink 4 through NVSwitches",
        .intra_node_GBps = 450.0,
        .nics_per_node = 8,
        .nic_Gbps = 200.0,
        .injection_Gbps = 1600.0,
        .topology = "GPUDirect-TCPXO (topology not published)",
        .oversubscription = 1.0,
        .charge_unit = "instance-hours",
        .charge_per_node_hour = 1.0,
        .nccl_tests = NO_NCCL_TESTS,
        .source_node = "https://cloud.google.com/compute/docs/gpus/gpu-network-bandwidth (A3 "
                       "Mega: H100 80GB, up to 1,600 Gbps; another version of the page: 1,800)",
        .source_network = "https://cloud.google.com/compute/docs/gpus/gpu-network-bandwidth",
        .source_charge = "billed per instance-hour (one instance = one node)",
        .read_on = READ_ON,
        .not_published = "NICs for GPU traffic (8x 200 Gb/s used, 1,600 Gbps); topology and "
                         "largest placement (nodes= must be given); latencies (device "
                         "defaults); prices",
    },
    {
        .name = "gcp-a3-ultra",
        .title = "Google Cloud A3 Ultra, a3-ultragpu-8g (8x H200 141 GB)",
        .device = "h200",
        .gpu_memory_GiB = 141.0,
        .gpus_per_node = 8,
        .intra_node = "NVLink 4 (all-to-all NVLink bridge)",
        .intra_node_GBps = 450.0,
        .nics_per_node = 8,
        .nic_Gbps = 400.0,
        .injection_Gbps = 3200.0,
        .topology = "GPUDirect RDMA over ConnectX-7, one NIC per GPU (rail-aligned)",
        .oversubscription = 1.0,
        .charge_unit = "instance-hours",
        .charge_per_node_hour = 1.0,
        .nccl_tests = NO_NCCL_TESTS,
        .source_node = "https://cloud.google.com/compute/docs/gpus/gpu-network-bandwidth (A3 "
                       "Ultra: 8x H200, 8x CX7 NICs delivering 3,200 Gbps)",
        .source_network = "https://cloud.google.com/compute/docs/gpus/gpu-network-bandwidth",
        .source_charge = "billed per instance-hour (one instance = one node)",
        .read_on = READ_ON,
        .not_published = "topology above the NICs and largest placement (nodes= must be "
                         "given); latencies (device defaults); prices",
    },
};

/* The built-in entries with a site file's merged in (NULL: none loaded);
 * systems_file.c owns the storage. */
static const ds_system_t *merged;
static size_t merged_count;

void dsi_systems_builtin(const ds_system_t **table_p, size_t *count_p)
{
    *table_p = builtin;
    *count_p = DSI_ARRAY_SIZE(builtin);
}

void dsi_systems_set(const ds_system_t *table, size_t count)
{
    merged = table;
    merged_count = count;
}

size_t ds_system_count(void)
{
    return merged != NULL ? merged_count : DSI_ARRAY_SIZE(builtin);
}

const ds_system_t *ds_system_at(size_t index)
{
    if (index >= ds_system_count())
        return NULL;
    return merged != NULL ? &merged[index] : &builtin[index];
}

ds_status_t ds_system_lookup(const char *name, const ds_system_t **system_p)
{
    size_t count = ds_system_count();
    for (size_t i = 0; name != NULL && i < count; i++)
        if (strcmp(ds_system_at(i)->name, name) == 0) {
            *system_p = ds_system_at(i);
            return DS_OK;
        }
    char list[1024];
    list[0] = '\0';
    for (size_t i = 0, used = 0; i < count && used < sizeof(list); i++)
        used += (size_t)snprintf(list + used, sizeof(list) - used, "%s%s", i ? ", " : "",
                                 ds_system_at(i)->name);
    return DSI_ERROR(DS_ERR_INVALID_ARG, "system '%s' is not known (accepted: %s)",
                     name != NULL ? name : "", list);
}

ds_status_t ds_system_check(const ds_system_t *s)
{
    ds_device_spec_t spec;
    if (ds_device_spec_lookup(s->device, &spec) != DS_OK)
        return DSI_ERROR(DS_ERR_BAD_FILE, "system %s: device '%s' is not known", s->name,
                         s->device);
    double nics = s->nics_per_node * s->nic_Gbps;
    if (!(fabs(nics - s->injection_Gbps) <= 1e-9 * s->injection_Gbps))
        return DSI_ERROR(DS_ERR_BAD_FILE,
                         "system %s: %d NICs x %g Gb/s = %g Gb/s, not the stated injection of "
                         "%g Gb/s per node",
                         s->name, s->nics_per_node, s->nic_Gbps, nics, s->injection_Gbps);
    if (s->max_nodes > 0 && (int64_t)s->gpus_per_node * s->max_nodes != s->partition_gpus)
        return DSI_ERROR(DS_ERR_BAD_FILE,
                         "system %s: %d GPUs per node x %lld nodes = %lld, not the stated "
                         "partition of %lld GPUs",
                         s->name, s->gpus_per_node, (long long)s->max_nodes,
                         (long long)s->gpus_per_node * s->max_nodes, (long long)s->partition_gpus);
    if (s->max_nodes > 0 && s->group_nodes > s->max_nodes)
        return DSI_ERROR(DS_ERR_BAD_FILE, "system %s: groups of %d nodes exceed the %lld nodes",
                         s->name, s->group_nodes, (long long)s->max_nodes);
    if (s->max_nodes > 0 && s->groups > 0 && (int64_t)s->groups * s->group_nodes < s->max_nodes)
        return DSI_ERROR(DS_ERR_BAD_FILE,
                         "system %s: %d groups of %d nodes hold fewer than its %lld nodes", s->name,
                         s->groups, s->group_nodes, (long long)s->max_nodes);
    if (!(s->oversubscription >= 1.0) || !(s->charge_per_node_hour >= 0.0))
        return DSI_ERROR(DS_ERR_BAD_FILE,
                         "system %s: oversubscription %g or charge per node-hour %g out of range "
                         "(accepted: >= 1 and >= 0)",
                         s->name, s->oversubscription, s->charge_per_node_hour);
    return DS_OK;
}

ds_status_t ds_system_cluster_json(const ds_system_t *s, int64_t nodes, char *text, size_t size)
{
    if (nodes == 0 && s->max_nodes == 0)
        return DSI_ERROR(DS_ERR_INVALID_ARG,
                         "system %s publishes no partition size: give its nodes (accepted: "
                         "system=%s,nodes=N)",
                         s->name, s->name);
    if (nodes == 0)
        nodes = s->max_nodes;
    if (nodes < 1 || (s->max_nodes > 0 && nodes > s->max_nodes))
        return DSI_ERROR(DS_ERR_INVALID_ARG,
                         "%lld nodes are beyond system %s's largest partition (accepted: 1 to "
                         "%lld nodes of %d GPUs)",
                         (long long)nodes, s->name, (long long)s->max_nodes, s->gpus_per_node);
    ds_device_spec_t spec;
    DSI_TRY(ds_device_spec_lookup(s->device, &spec));
    /* %.17g: the file's numbers read back to the same doubles. */
    int n = snprintf(text, size,
                     "{\"name\": \"%s\", \"nodes\": %lld, \"gpus_per_node\": %d, \"device\": "
                     "\"%s\", \"device_memory_GiB\": %.17g,\n \"levels\": [\n"
                     "  {\"name\": \"nvlink\", \"latency_us\": %.17g, \"bandwidth_GBps\": %.17g, "
                     "\"nvls\": %s},\n"
                     "  {\"name\": \"nic\", \"latency_us\": %.17g, \"bandwidth_GBps\": %.17g, "
                     "\"nics_per_node\": %d",
                     s->name, (long long)nodes, s->gpus_per_node, s->device, s->gpu_memory_GiB,
                     spec.intra_node_latency_us, s->intra_node_GBps, s->nvls ? "true" : "false",
                     spec.network_latency_us, s->nic_Gbps / 8.0, s->nics_per_node);
    if (n > 0 && (size_t)n < size && s->group_nodes > 0)
        n += snprintf(text + n, size - (size_t)n,
                      ", \"span\": %d},\n  {\"name\": \"global\", \"latency_us\": %.17g, "
                      "\"bandwidth_GBps\": %.17g, \"oversubscription\": %.17g}]}\n",
                      s->group_nodes, spec.network_latency_us, s->nic_Gbps / 8.0,
                      s->oversubscription);
    else if (n > 0 && (size_t)n < size)
        n += snprintf(text + n, size - (size_t)n, "}]}\n");
    if (n < 0 || (size_t)n >= size)
        return DSI_ERROR(DS_ERR_INVALID_ARG, "system %s: cluster text longer than %zu bytes",
                         s->name, size);
    return DS_OK;
}

ds_status_t ds_system_cluster(const ds_system_t *s, int64_t nodes, ds_cluster_t *cluster)
{
    char text[2048], origin[DS_NAME_MAX + 16];
    DSI_TRY(ds_system_cluster_json(s, nodes, text, sizeof(text)));
    snprintf(origin, sizeof(origin), "system %s", s->name);
    return ds_cluster_load_json(text, strlen(text), origin, cluster);
}

ds_status_t ds_system_parse_target(const char *text, ds_cluster_t *cluster,
                                   const ds_system_t **system_p)
{
    if (text == NULL || strlen(text) >= 256 || strncmp(text, "system=", 7) != 0)
        return DSI_ERROR(DS_ERR_INVALID_ARG,
                         "target '%s' is not a system (accepted: system=NAME[,nodes=N])",
                         text != NULL ? text : "");
    char copy[256];
    strcpy(copy, text + 7);
    char *comma = strchr(copy, ',');
    int64_t nodes = 0;
    if (comma != NULL) {
        *comma = '\0';
        const char *rest = comma + 1;
        if (strncmp(rest, "nodes=", 6) != 0)
            return DSI_ERROR(DS_ERR_INVALID_ARG,
                             "target item '%s' is not known after system= (accepted: nodes=N)",
                             rest);
        DSI_TRY(dsi_parse_i64(rest + 6, "nodes", 1, dsi_param_int(DSI_PARAM_MAX_TARGET_GPUS), true,
                              &nodes));
    }
    const ds_system_t *system;
    DSI_TRY(ds_system_lookup(copy, &system));
    DSI_TRY(ds_system_cluster(system, nodes, cluster));
    *system_p = system;
    return DS_OK;
}
