/* Roofline estimates of compute, and communication estimated by the
 * communication model from the cluster's network alone. */
#include "dsi_events.h"

#include "comm/dsi_comm_assumed.h"

/* Kernel launch and synchronisation floor of any device operation. */
#define LAUNCH_OVERHEAD_S 4e-6

/* A cluster whose network the communication model cannot take (a level
 * without bandwidth, as in a device-only cluster): latency and bandwidth
 * of the first level the group crosses. */
static double flat_comm_seconds(const ds_event_key_t *key, const ds_cluster_t *cluster)
{
    const ds_net_level_t *level = &cluster->levels[key->nodes > 1 && cluster->num_levels > 1 ? 1 : 0];
    double bw = level->bandwidth_GBps * 1e9;
    if (key->nodes > 1 && key->concurrency > 1 && level->nics_per_node > 0) {
        /* Groups sharing a node's NICs share their bandwidth. */
        double share = (double)level->nics_per_node / (key->concurrency * (double)key->ranks_per_node);
        if (share < 1.0)
            bw *= share;
    }
    double lat = level->latency_us * 1e-6;
    double n = key->group_size > 1 ? key->group_size : 2;
    double size = (double)key->dims[0];
    switch ((ds_comm_op_t)key->op) {
    case DS_COMM_SENDRECV: return lat + size / bw;
    case DS_COMM_ALLREDUCE: return 2.0 * (n - 1) * lat + 2.0 * (n - 1) / n * size / bw;
    case DS_COMM_ALLGATHER:
    case DS_COMM_REDUCE_SCATTER:
    case DS_COMM_ALLTOALL: return (n - 1) * lat + (n - 1) / n * size / bw;
    case DS_COMM_BROADCAST: return (n - 1) * lat + size / bw;
    case DS_COMM_PS_PUSH:
    case DS_COMM_PS_PULL: {
        /* Each server's link carries every worker's share of its slice. */
        double servers = key->dims[1] > 0 ? (double)key->dims[1] : n;
        return lat + size * (n / servers) / bw;
    }
    case DS_COMM_COUNT_: break;
    }
    return lat + size / bw;
}

double dsi_estimate_compute_seconds(const ds_event_key_t *key, double flops, double bytes,
                                    const ds_cluster_t *cluster)
{
    const ds_device_spec_t *dev = &cluster->device;
    bool matmul = key->op == DS_OP_GEMM || key->op == DS_OP_BATCHED_GEMM;
    double peak = (key->dtype == DS_DTYPE_FP32 ? dev->peak_tflops_fp32 : dev->peak_tflops_bf16) * 1e12;
    double compute = matmul ? flops / peak : 0.0;
    double memory = bytes / (dev->mem_bw_GBps * 1e9);
    return LAUNCH_OVERHEAD_S + (compute > memory ? compute : memory);
}

ds_status_t dsi_estimate_seconds(const ds_event_key_t *key, double flops, double bytes,
                                 const ds_cluster_t *cluster, double *seconds_p)
{
    if (key->kind == DS_EVENT_COMPUTE) {
        *seconds_p = dsi_estimate_compute_seconds(key, flops, bytes, cluster);
        return DS_OK;
    }
    /* Every level, span, NIC count and oversubscription of the cluster, as
     * the communication model reads them when it has no samples; the flat
     * formula where that model refuses the cluster. */
    double seconds = 0.0;
    ds_status_t status = dsi_comm_assumed_seconds(cluster, key, &seconds);
    if (status == DS_ERR_NO_MEMORY)
        return status;
    *seconds_p = status == DS_OK ? seconds : flat_comm_seconds(key, cluster);
    return DS_OK;
}
