/* A model of what kernels achieve on a device that was not profiled: the
 * datasheet facts of each device and the fractions of peak that GEMMs and
 * streaming kernels reach, and GEMM times from output tiles and waves of
 * tiles over the SMs (how cuBLAS executes a shape).  Nothing here is fitted
 * to end-to-end training results. */
#include <dsmpi/cluster.h>

#include "dsi_cluster.h"
#include "dsi_core.h"

#include <math.h>
#include <string.h>

/* Sources of the rows (dense peaks, no sparsity; bandwidths one direction):
 *   A100:   NVIDIA A100 Tensor Core GPU Architecture whitepaper (2020), tables 1 and 3, and
 *           the A100 datasheet (SXM4 40 GB: 1555 GB/s; 80 GB: 2039 GB/s); NVLink 3 600 GB/s
 *           both directions, PCIe Gen4 x16 64 GB/s both directions.
 *   H100:   NVIDIA H100 Tensor Core GPU Architecture whitepaper (2022) and the H100 datasheet:
 *           SXM5 132 SMs, 1980 MHz, 3.35 TB/s, NVLink 4 900 GB/s; PCIe 114 SMs, 1755 MHz,
 *           2.0 TB/s, NVLink bridge 600 GB/s; PCIe Gen5 x16 128 GB/s both directions.
 *   H200:   NVIDIA H200 datasheet: the H100 SXM5 die (132 SMs), 141 GB HBM3e at 4.8 TB/s.
 *   GH200:  NVIDIA GH200 Grace Hopper Superchip datasheet (96 GB HBM3 at 4 TB/s variant),
 *           NVLink-C2C 900 GB/s both directions to the Grace CPU.
 *   B200:   NVIDIA HGX B200 / DGX B200 datasheets per GPU (2.25 PF bf16 dense, 8 TB/s,
 *           180 GB, NVLink 5 1.8 TB/s both directions). The SM count (148), clock and L2 are
 *           not in NVIDIA's datasheet: reported figures, guesses.
 *   cpu:    one core standing for a device (see devices.c); its peaks are what the CPU
 *           backend's core achieves, so its fractions are 1 and it has no waves.
 * Launch: the 4 us floor of a kernel launch and synchronisation dsmpi used before (guess).
 * Achieved fractions, from published GEMM timings where a source is cited (`bf16_cited`,
 * `fp8_cited`), guesses otherwise (`guessed` marks a device with any):
 *   - OpenXLA's matmul table (xla/service/gpu/model/matmul_interpolator_data.h): the
 *     FLOP/s of 375 bf16 GEMMs, batch 1-4, M, N, K 256-4096; sm_90 rows read at
 *     tensorflow/tensorflow commit 372d578b (4096^3 at 783 TFLOP/s), sm_100 rows in a later
 *     version (OpenXLA "Update GEMM cost model for B200", 2025-08-14, read as ROCm/xla
 *     commit 1088d5ab; B200 or GB200, the table does not say).  The fraction is the model's
 *     large-GEMM asymptote, fitted on the GEMMs of at least 1e10 FLOP (median measured /
 *     modelled = 1; tests/bench/device_gemm_published.sh): sm_90 0.8264-0.8357 with each
 *     batch size left out in turn, 0.83 for h100-sxm and h200 (one GH100 die, same clocks);
 *     sm_100 0.6524-0.6580, 0.65 for the b200.
 *   - Maximum achievable matmul FLOPS (MAMF: the best mean TFLOP/s of torch.mm over a sweep
 *     of shapes, per device and dtype; tests/data/gemm/mamf.csv, from Stas Bekman's "Machine
 *     Learning Engineering", commit 744d01e1), for the fractions no table covers: the
 *     fraction that reproduces MAMF at its best shape, divided by MAMF's bias over the table
 *     on a device with both (h100-sxm 1.037; the b200's own 1.294 for its fp8; the others
 *     take h100-sxm's), tests/bench/device_mamf.sh: a100 bf16 0.879 -> 0.88 (no table has
 *     sm_80 rows), gh200 bf16 0.855 -> 0.85 (a 900 W part, above the H100 SXM's 700 W), fp8
 *     of h100-sxm 0.704 -> 0.70, h200 0.750 -> 0.75, gh200 0.766 -> 0.77, b200 0.637 -> 0.64.
 *     MAMF and the table disagree on the b200: its bf16 MAMF runs 1.28x the table's fit
 *     (a newer cuBLAS); the fraction keeps the table's, the band holds both (device_band.c).
 * Waves: whole waves of output tiles, except on the devices marked stream_k (Hopper and
 *   Blackwell), whose cuBLAS runs GEMMs of more than one wave as persistent stream-K kernels
 *   that split the last partial wave's K loops over every SM.  With it both published tables
 *   fit better (median |error| sm_90 8.9% -> 8.3%, sm_100 16.4% -> 13.8%, fractions refitted)
 *   and the MAMF rows agree with each other (whole waves price the fp8 rows' best shapes at
 *   2-3 waves of 73-81% use: fractions of 0.94-1.13 would be needed).  No published A100 table
 *   shows it, so the A100 keeps whole waves.
 * Guesses: the PCIe H100's bf16 0.75 and fp8 0.65 (below the SXM part: power limits), fp32
 *   SIMT SGEMM about 90%, STREAM-like kernels (BabelStream copy/triad) about 85-90%
 * of HBM bandwidth. */
/* One row per device, columns as named. */
/* clang-format off */
static const ds_device_model_t models[] = {
    /* name       SMs   MHz     bf16    fp32  tf32    fp8     GB/s    GiB    L2MiB  NVLink PCIe
       launch_us  fraction: bf16 fp32 fp8 stream  guessed bf16_cited fp8_cited stream_k */
    /* A100 whitepaper tables 1 and 3; A100 datasheet (SXM4 40 GB) */
    {"a100-40g",  108,  1410.0, 312.0,  19.5, 156.0,  0.0,    1555.0, 40.0,  40.0,  300.0, 32.0,
     4.0,         0.88, 0.90, 0.0,  0.88, 1, 1, 0, 0},
    /* A100 datasheet (SXM4 80 GB) */
    {"a100-80g",  108,  1410.0, 312.0,  19.5, 156.0,  0.0,    2039.0, 80.0,  40.0,  300.0, 32.0,
     4.0,         0.88, 0.90, 0.0,  0.88, 1, 1, 0, 0},
    /* H100 whitepaper; H100 datasheet (SXM5) */
    {"h100-sxm",  132,  1980.0, 989.0,  67.0, 494.0,  1979.0, 3350.0, 80.0,  50.0,  450.0, 64.0,
     4.0,         0.83, 0.90, 0.70, 0.88, 1, 1, 1, 1},
    /* H100 datasheet (PCIe) */
    {"h100-pcie", 114,  1755.0, 756.0,  51.0, 378.0,  1513.0, 2000.0, 80.0,  50.0,  300.0, 64.0,
     4.0,         0.75, 0.90, 0.65, 0.88, 1, 0, 0, 1},
    /* H200 datasheet (SXM); memory as devices.c has it */
    {"h200",      132,  1980.0, 989.0,  67.0, 494.0,  1979.0, 4800.0, 140.0, 50.0,  450.0, 64.0,
     4.0,         0.83, 0.90, 0.75, 0.88, 1, 1, 1, 1},
    /* GH200 datasheet (96 GB HBM3 variant) */
    {"gh200",     132,  1980.0, 989.0,  67.0, 494.0,  1979.0, 4000.0, 96.0,  50.0,  450.0, 64.0,
     4.0,         0.85, 0.90, 0.77, 0.88, 1, 1, 1, 1},
    /* HGX B200 datasheet per GPU; SMs, clock, L2 reported, not NVIDIA's (guesses) */
    {"b200",      148,  1965.0, 2250.0, 80.0, 1100.0, 4500.0, 8000.0, 180.0, 126.0, 900.0, 64.0,
     4.0,         0.65, 0.90, 0.64, 0.88, 1, 1, 1, 1},
    /* devices.c's cpu: what one core of the CPU backend achieves */
    {"cpu",       0,    3000.0, 0.1,    0.1,  0.0,    0.0,    10.0,   16.0,  0.0,   5.0,   0.0,
     4.0,         1.0,  1.0,  0.0,  1.0,  0, 0, 0, 0},
};
/* clang-format on */

/* Output tiles cuBLAS chooses among, with the share of the large-tile rate
 * each reaches (smaller tiles reuse operands less; guesses). */
static const struct {
    int m, n;
    double efficiency;
} tiles[] = {
    {256, 128, 1.0}, {128, 256, 1.0}, {128, 128, 0.85},
    {128, 64, 0.7},  {64, 128, 0.7},  {64, 64, 0.5},
};

/* Steps of K a tile's main loop spends filling and draining its pipeline
 * and writing C (guess): K-loop efficiency K / (K + this). */
#define K_LOOP_OVERHEAD 128.0

size_t ds_device_model_count(void)
{
    return DSI_ARRAY_SIZE(models);
}

const ds_device_model_t *ds_device_model_at(size_t index)
{
    return index < DSI_ARRAY_SIZE(models) ? &models[index] : NULL;
}

ds_status_t ds_device_model_lookup(const char *name, ds_device_model_t *model_p)
{
    int index = 0;
    DSI_TRY(dsi_device_index(name, &index));
    if ((size_t)index >= DSI_ARRAY_SIZE(models) ||
        strcmp(models[index].name, ds_device_spec_name((size_t)index)) != 0)
        return DSI_ERROR(DS_ERR_INTERNAL, "device '%s' has no model in the table's order", name);
    *model_p = models[index];
    return DS_OK;
}

ds_status_t ds_device_check_fp8(const ds_device_spec_t *spec, const char *what)
{
    if (spec == NULL || strcmp(spec->name, "cpu") == 0)
        return DS_OK;
    for (size_t i = 0; i < DSI_ARRAY_SIZE(models); i++)
        if (strcmp(models[i].name, spec->name) == 0 && models[i].peak_tflops_fp8 > 0.0)
            return DS_OK;
    char with[256] = "";
    size_t used = 0;
    for (size_t i = 0; i < DSI_ARRAY_SIZE(models) && used < sizeof(with); i++)
        if (models[i].peak_tflops_fp8 > 0.0)
            used += (size_t)snprintf(with + used, sizeof(with) - used, "%s%s", used ? ", " : "",
                                     models[i].name);
    return DSI_ERROR(DS_ERR_INVALID_ARG,
                     "%s needs fp8 tensor cores, which %s does not have (accepted: fp8=off on %s; "
                     "fp8 on %s, or cpu, whose backend computes fp8 GEMMs as bf16)",
                     what, spec->name, spec->name, with);
}

static void model_peak(const ds_device_model_t *model, ds_dtype_t dtype, double *peak_p,
                       double *fraction_p)
{
    switch (dtype) {
    case DS_DTYPE_FP32:
        *peak_p = model->peak_tflops_fp32;
        *fraction_p = model->gemm_fraction_fp32;
        return;
    case DS_DTYPE_FP8:
        *peak_p = model->peak_tflops_fp8;
        *fraction_p = model->gemm_fraction_fp8;
        return;
    case DS_DTYPE_BF16:
    case DS_DTYPE_FP16: break;
    }
    *peak_p = model->peak_tflops_bf16;
    *fraction_p = model->gemm_fraction_bf16;
}

ds_status_t ds_device_model_gemm(const ds_device_model_t *model, ds_dtype_t dtype, int64_t m,
                                 int64_t n, int64_t k, int64_t batch,
                                 ds_gemm_estimate_t *estimate_p)
{
    if (m < 1 || n < 1 || k < 1 || batch < 1)
        return DSI_ERROR(DS_ERR_INVALID_ARG,
                         "GEMM %lldx%lldx%lld batch %lld: every dimension must be at least 1",
                         (long long)m, (long long)n, (long long)k, (long long)batch);
    double peak = 0.0, fraction = 0.0;
    model_peak(model, dtype, &peak, &fraction);
    if (!(peak > 0.0) || !(fraction > 0.0))
        return DSI_ERROR(DS_ERR_INVALID_ARG, "device %s has no %s peak", model->name,
                         ds_dtype_name(dtype));
    ds_gemm_estimate_t e;
    memset(&e, 0, sizeof(e));
    double flops = 2.0 * (double)m * (double)n * (double)k * (double)batch;
    double rate = peak * 1e12 * fraction; /* FLOP/s of the whole device, large tiles */
    e.k_efficiency = (double)k / ((double)k + K_LOOP_OVERHEAD);
    if (model->sm_count <= 0) {
        e.tile_m = e.tile_n = 0;
        e.tiles = e.waves = 1;
        e.compute_s = flops / (rate * e.k_efficiency);
    } else {
        /* The fastest tile: waves of tiles, each tile on one SM at its share of the rate. */
        double per_sm = rate / model->sm_count;
        e.compute_s = INFINITY;
        for (size_t i = 0; i < DSI_ARRAY_SIZE(tiles); i++) {
            int64_t count =
                ((m + tiles[i].m - 1) / tiles[i].m) * ((n + tiles[i].n - 1) / tiles[i].n) * batch;
            /* One wave or less leaves SMs idle.  Beyond one, whole waves;
             * on devices whose cuBLAS runs persistent stream-K kernels
             * (Hopper and later) the K loops of the last partial wave are
             * split over every SM, so the waves are fractional. */
            double waves = count <= model->sm_count ? 1.0
                           : model->stream_k
                               ? (double)count / (double)model->sm_count
                               : (double)((count + model->sm_count - 1) / model->sm_count);
            double tile_s = 2.0 * tiles[i].m * tiles[i].n * (double)k /
                            (per_sm * tiles[i].efficiency * e.k_efficiency);
            double seconds = waves * tile_s;
            if (seconds < e.compute_s) {
                e.compute_s = seconds;
                e.tile_m = tiles[i].m;
                e.tile_n = tiles[i].n;
                e.tiles = count;
                e.waves = waves;
            }
        }
    }
    double bytes = ((double)m * (double)k + (double)k * (double)n + (double)m * (double)n) *
                   (double)batch * (double)ds_dtype_size(dtype);
    e.memory_s = bytes / (model->mem_bw_GBps * 1e9 * model->stream_fraction);
    e.memory_bound = e.memory_s > e.compute_s;
    e.seconds = model->launch_us * 1e-6 + (e.memory_bound ? e.memory_s : e.compute_s);
    e.peak_tflops = peak;
    e.achieved_tflops = flops / e.seconds * 1e-12;
    *estimate_p = e;
    return DS_OK;
}
