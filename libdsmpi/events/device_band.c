/* The band of compute costs priced by the device model: per operator class,
 * how far the model's time was from measured kernels of that class that did
 * not set the model's parameters. */
#include <dsmpi/events.h>

#include "dsi_core.h"

#include <string.h>

/* Multiples of the modelled time (measured / modelled), low <= 1 <= high.
 *
 * cpu: the 10th and 90th percentile of measured / modelled over the kernels
 *   left out by tests/bench/device_band.sh (the CPU backend's layer passes of
 *   six cases, 1 rank, OpenBLAS 0.3.21 single-threaded on a 2-core Intel
 *   Xeon under Debian 12; each case predicted with the `cpu` description's
 *   GEMM rate and bandwidth set from the other cases' kernels): the median of
 *   three runs at a load of about 1.9 on the 2 cores.  Percentiles of a run:
 *     gemm-compute (113 kernels): 0.886 1.227 | 0.884 1.309 | 0.884 1.241
 *     streaming     (92 kernels): 0.278 2.051 | 0.248 2.096 | 0.270 2.177
 *     attention      (4 kernels): 1.432 2.831 | 1.415 2.809 | 1.424 2.771
 *   (min and max: gemm 0.52-1.79, streaming 0.12-3.51, attention 1.42-3.26;
 *   the extremes are kernels of a few microseconds, where the 4 us launch
 *   floor dominates, and embedding lookups, whose bytes count the table).
 *   The CPU backend's attention is its own kernel, slower than the model's
 *   0.75 of the GEMM rate: its band lies above 1.
 * gpu (every other device): GEMMs from published H100 GEMM timings, OpenXLA's
 *   sm_90 matmul table (see device_model.c), by tests/bench/device_gemm_published.sh:
 *   the 10th and 90th percentile of measured / modelled over the GEMMs of each
 *   batch size (1, 2, 4; every size, 256-4096) with the bf16 fraction fitted
 *   on the other two, split by the bound the model gives them:
 *     gemm-compute (330 GEMMs): 0.935 1.201 (min 0.420, max 1.279)
 *     gemm-memory   (45 GEMMs): 0.941 1.218 (min 0.918, max 1.258)
 *   (the minimum: 256x256x4096, two tiles with a long K, which cuBLAS splits
 *   over the SMs and the model does not; the maxima: K = 256 and GEMMs of a
 *   few microseconds, whose time the table measures per call).  The published
 *   maximum achievable matmul FLOPS of the other Hopper parts and the A100
 *   (tests/bench/device_mamf.sh) fall inside: 0.96-0.97.  These stand for
 *   every GPU but the b200.
 * b200: GEMMs from the same table's sm_100 rows (a later version, with
 *   Blackwell: OpenXLA "Update GEMM cost model for B200", 2025-08-14, read
 *   as ROCm/xla commit 1088d5ab), the same protocol; its two memory-bound
 *   GEMMs are too few for a band of their own, so both gemm classes take the
 *   percentiles over all its GEMMs:
 *     gemm-any    (375 GEMMs): 0.969 1.340 (min 0.840, max 1.827)
 *   (the model is too fast for its GEMMs under 1e10 FLOP: 1.19-1.31 in the
 *   median).  The low side is widened to 0.78: the published maximum
 *   achievable matmul FLOPS of the B200 (bf16 and fp8, a newer cuBLAS than
 *   the table's) run 1.28x the model's rate at their shapes, 0.780 and 0.783
 *   of its time; the two sources disagree, and the band holds both.  Other
 *   classes as every GPU.  Streaming kernels take
 *   the CPU's measurements (no GPU bandwidth measurement is cited); fused
 *   attention from the one GPU kernel measurement the model cites:
 *   FlashAttention-2 reaches 50-73%
 *   of an A100's peak (Dao, 2023) where the model prices it at 0.75 x 0.88 =
 *   66% (estimate.c), so measured / modelled is 0.66 / 0.73 = 0.904 to
 *   0.66 / 0.50 = 1.320.
 * gemm-memory on the cpu: no GEMM of those kernels is memory-bound on the
 *   cpu description; the model prices a memory-bound GEMM by the bandwidth
 *   term streaming kernels use, so it takes their band.
 * Rerun device_band.sh (cpu) and device_gemm_published.sh (gpu GEMMs) and update
 * these rows when the device model changes. */
static const struct {
    const char *name;
    double cpu_low, cpu_high;
    double gpu_low, gpu_high;
    double b200_low, b200_high;
} bands[DS_MODEL_CLASS_COUNT_] = {
    [DS_MODEL_GEMM_COMPUTE] = {"gemm-compute", 0.884, 1.241, 0.935, 1.201, 0.780, 1.340},
    [DS_MODEL_GEMM_MEMORY] = {"gemm-memory", 0.270, 2.096, 0.941, 1.218, 0.780, 1.340},
    [DS_MODEL_ATTENTION] = {"attention", 1.0, 2.809, 0.904, 1.320, 0.904, 1.320},
    [DS_MODEL_STREAMING] = {"streaming", 0.270, 2.096, 0.270, 2.096, 0.270, 2.096},
};

const char *ds_model_class_name(ds_model_class_t model_class)
{
    return (unsigned)model_class < DS_MODEL_CLASS_COUNT_ ? bands[model_class].name : "?";
}

void ds_model_class_band(ds_model_class_t model_class, const char *device, double *low_p,
                         double *high_p)
{
    if ((unsigned)model_class >= DS_MODEL_CLASS_COUNT_) {
        *low_p = *high_p = 1.0;
        return;
    }
    bool cpu = device != NULL && strcmp(device, "cpu") == 0;
    bool b200 = device != NULL && strcmp(device, "b200") == 0;
    *low_p = cpu    ? bands[model_class].cpu_low
             : b200 ? bands[model_class].b200_low
                    : bands[model_class].gpu_low;
    *high_p = cpu    ? bands[model_class].cpu_high
              : b200 ? bands[model_class].b200_high
                     : bands[model_class].gpu_high;
}

const char *ds_model_band_source(void)
{
    return "the device model's measured error per operator class (dsmpi device)";
}
