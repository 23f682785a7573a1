/* Compute estimated by the device model (tiles and waves for GEMMs, the
 * bandwidth streaming kernels achieve for the rest), and communication
 * estimated by the communication model from the cluster's network alone. */
#include "dsi_events.h"

#include "comm/dsi_comm_assumed.h"

#include <string.h>

/* Share of the device's STREAM-like bandwidth each kind of kernel reaches
 * (guesses: reductions and gathers read less regularly than element-wise
 * kernels; no measurement cited). */
static const struct {
    ds_op_t op;
    double fraction;
} stream_shares[] = {
    {DS_OP_SOFTMAX, 0.8},       {DS_OP_LAYERNORM, 0.8},    {DS_OP_RMSNORM, 0.8},
    {DS_OP_GELU, 1.0},          {DS_OP_RELU, 1.0},         {DS_OP_SWIGLU, 1.0},
    {DS_OP_GEGLU, 1.0},         {DS_OP_DROPOUT_ADD, 1.0},  {DS_OP_ADD, 1.0},
    {DS_OP_DROPOUT, 1.0},       {DS_OP_ROPE, 0.9},         {DS_OP_EMBEDDING, 0.6},
    {DS_OP_CROSS_ENTROPY, 0.8}, {DS_OP_OPTIMIZER, 0.9},    {DS_OP_POOL, 1.0},
    {DS_OP_FP8_CAST, 0.9},      {DS_OP_MOE_AUX_LOSS, 0.8},
};

/* Fused attention reaches a smaller share of the matrix peak than a large
 * GEMM: FlashAttention-2 reaches 50-73% of an A100's peak (Dao, 2023,
 * abstract).  The share of the device model's GEMM fraction that attention
 * keeps (a guess from that range; no attention kernel measured on a GPU): */
#define ATTENTION_SHARE_OF_GEMM 0.75

/* Fractions of a device without a model (a cluster file's own name):
 * guesses, no waves; bf16 at 0.75 of peak and fp8 at 0.65, below the 0.83
 * and 0.70 the H100 SXM's published GEMM timings give (an unknown part is
 * not assumed as good). */
static const ds_device_model_t unknown_device = {"",   0,    0.0,  0.0, 0.0, 0.0, 0.0,
                                                 0.0,  0.0,  0.0,  0.0, 0.0, 4.0, 0.75,
                                                 0.90, 0.65, 0.88, 1,   0,   0,   0};

/* The model of the cluster's device with the spec's peaks and bandwidth
 * (a cluster file or a calibration may have changed them). */
static void device_model_of(const ds_device_spec_t *spec, ds_device_model_t *model)
{
    *model = unknown_device;
    for (size_t i = 0; i < ds_device_model_count(); i++)
        if (strcmp(ds_device_model_at(i)->name, spec->name) == 0)
            *model = *ds_device_model_at(i);
    double scale =
        model->peak_tflops_bf16 > 0.0 ? spec->peak_tflops_bf16 / model->peak_tflops_bf16 : 0.0;
    model->peak_tflops_tf32 *= scale;
    model->peak_tflops_fp8 *= scale;
    model->peak_tflops_bf16 = spec->peak_tflops_bf16;
    model->peak_tflops_fp32 = spec->peak_tflops_fp32;
    model->mem_bw_GBps = spec->mem_bw_GBps;
}

/* A cluster whose network the communication model cannot take (a level
 * without bandwidth, as in a device-only cluster): latency and bandwidth
 * of the first level the group crosses. */
static double flat_comm_seconds(const ds_event_key_t *key, const ds_cluster_t *cluster)
{
    const ds_net_level_t *level =
        &cluster->levels[key->nodes > 1 && cluster->num_levels > 1 ? 1 : 0];
    double bw = level->bandwidth_GBps * 1e9;
    if (key->nodes > 1 && key->concurrency > 1 && level->nics_per_node > 0) {
        /* Groups sharing a node's NICs share their bandwidth. */
        double share =
            (double)level->nics_per_node / (key->concurrency * (double)key->ranks_per_node);
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

/* The device model's time of a compute key, and the class of its band. */
static double estimate_compute(const ds_event_key_t *key, double flops, double bytes,
                               const ds_cluster_t *cluster, ds_model_class_t *class_p)
{
    ds_device_model_t model;
    device_model_of(&cluster->device, &model);
    bool attention = key->op == DS_OP_FLASH_ATTENTION;
    bool matmul = key->op == DS_OP_GEMM || key->op == DS_OP_BATCHED_GEMM || attention;
    ds_dtype_t dtype = (ds_dtype_t)key->dtype;
    if (dtype == DS_DTYPE_FP8 && !(model.peak_tflops_fp8 > 0.0))
        dtype = DS_DTYPE_BF16;
    if (matmul && !attention && model.sm_count > 0) {
        int64_t batch = key->op == DS_OP_BATCHED_GEMM && key->dims[3] > 0 ? key->dims[3] : 1;
        ds_gemm_estimate_t gemm;
        if (ds_device_model_gemm(&model, dtype, key->dims[0], key->dims[1], key->dims[2], batch,
                                 &gemm) == DS_OK) {
            *class_p = gemm.memory_bound ? DS_MODEL_GEMM_MEMORY : DS_MODEL_GEMM_COMPUTE;
            return gemm.seconds;
        }
    }
    double stream = model.stream_fraction;
    for (size_t i = 0; i < DSI_ARRAY_SIZE(stream_shares); i++)
        if (model.sm_count > 0 && stream_shares[i].op == (ds_op_t)key->op)
            stream *= stream_shares[i].fraction;
    double peak = dtype == DS_DTYPE_FP32 ? model.peak_tflops_fp32 * model.gemm_fraction_fp32
                                         : model.peak_tflops_bf16 * model.gemm_fraction_bf16;
    if (attention)
        peak *= ATTENTION_SHARE_OF_GEMM;
    double compute = matmul ? flops / (peak * 1e12) : 0.0;
    double memory = bytes / (model.mem_bw_GBps * 1e9 * stream);
    *class_p = attention          ? DS_MODEL_ATTENTION
               : !matmul          ? DS_MODEL_STREAMING
               : memory > compute ? DS_MODEL_GEMM_MEMORY
                                  : DS_MODEL_GEMM_COMPUTE;
    return model.launch_us * 1e-6 + (compute > memory ? compute : memory);
}

double dsi_estimate_compute_seconds(const ds_event_key_t *key, double flops, double bytes,
                                    const ds_cluster_t *cluster)
{
    ds_model_class_t model_class;
    return estimate_compute(key, flops, bytes, cluster, &model_class);
}

ds_model_class_t ds_model_class_of(const ds_event_key_t *key, double flops, double bytes,
                                   const ds_cluster_t *cluster)
{
    ds_model_class_t model_class;
    estimate_compute(key, flops, bytes, cluster, &model_class);
    return model_class;
}

double dsi_estimate_compute_band(const ds_event_key_t *key, double flops, double bytes,
                                 const ds_cluster_t *cluster, double *low_p, double *high_p)
{
    ds_model_class_t model_class;
    double seconds = estimate_compute(key, flops, bytes, cluster, &model_class);
    ds_model_class_band(model_class, cluster->device.name, low_p, high_p);
    return seconds;
}

ds_status_t dsi_estimate_comm_seconds(const ds_event_key_t *key, const ds_cluster_t *cluster,
                                      ds_comm_library_t library, double *seconds_p)
{
    /* Every level, span, NIC count and oversubscription of the cluster, as
     * the communication model reads them when it has no samples; the flat
     * formula where that model refuses the cluster. */
    double seconds = 0.0;
    ds_status_t status = dsi_comm_assumed_seconds(cluster, library, key, &seconds);
    if (status == DS_ERR_NO_MEMORY)
        return status;
    *seconds_p = status == DS_OK ? seconds : flat_comm_seconds(key, cluster);
    return DS_OK;
}

ds_status_t dsi_estimate_seconds(const ds_event_key_t *key, double flops, double bytes,
                                 const ds_cluster_t *cluster, double *seconds_p)
{
    if (key->kind == DS_EVENT_COMPUTE) {
        *seconds_p = dsi_estimate_compute_seconds(key, flops, bytes, cluster);
        return DS_OK;
    }
    return dsi_estimate_comm_seconds(key, cluster, DS_COMM_LIBRARY_NCCL, seconds_p);
}
