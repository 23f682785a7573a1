/* dsmpi device: the device model that prices compute on devices that were
 * not profiled; the devices with their facts, or one GEMM's predicted time. */
#include "commands.h"

#include <stdlib.h>
#include <string.h>

enum { OPT_DEVICE = 256, OPT_GEMM, OPT_DTYPE, OPT_JSON, OPT_HELP };

static void help(void)
{
    printf("usage: dsmpi device [--device NAME --gemm M,N,K[,BATCH] [--dtype bf16]] [--json]\n\n"
           "The device model that prices compute on a device that was not profiled\n"
           "(the estimates predict, plan and search make for costs they lack).  Alone: every\n"
           "device with the facts that decide the speed kernels achieve.  With --gemm: the\n"
           "predicted time of "
           "C[M,N] = A[M,K] B[K,N] (BATCH times) as cuBLAS runs it: output\n"
           "tiles, waves of "
           "tiles over the SMs, a K-loop efficiency, and the memory-bound regime\n"
           "of thin shapes.  The achieved fractions of peak are guesses, except the bf16\n"
           "one of every GPU but h100-pcie and the fp8 one of h100-sxm, h200, gh200 and\n"
           "b200 (set from published GEMM timings);\n"
           "every modelled time carries the band of its operator class (the model's\n"
           "measured error on kernels that did not set its parameters), printed below the\n"
           "devices.\n\n"
           "  --device NAME            a100-40g, a100-80g, h100-sxm, h100-pcie, h200, gh200,\n"
           "                           b200, cpu (default: every device)\n"
           "  --gemm M,N,K[,BATCH]     one GEMM's dimensions (K suffix = 1024)\n"
           "  --dtype T                bf16 (default), fp16, fp32, fp8\n"
           "  --json                   one JSON object\n");
}

typedef struct gemm_dims {
    int64_t m, n, k, batch;
} gemm_dims_t;

static ds_status_t parse_gemm(const char *text, gemm_dims_t *dims_p)
{
    static const char *const names[] = {"M", "N", "K", "BATCH"};
    int64_t values[4] = {0, 0, 0, 1};
    char copy[128];
    int count = 0;
    if (strlen(text) >= sizeof(copy))
        return ds_set_error(DS_ERR_INVALID_ARG, "--gemm '%s' is too long", text);
    snprintf(copy, sizeof(copy), "%s", text);
    char *save = NULL;
    for (char *item = strtok_r(copy, ",", &save); item != NULL; item = strtok_r(NULL, ",", &save)) {
        if (count == 4)
            return ds_set_error(DS_ERR_INVALID_ARG,
                                "--gemm '%s' has more than 4 values (accepted: M,N,K[,BATCH])",
                                text);
        char what[32];
        snprintf(what, sizeof(what), "--gemm %s", names[count]);
        ds_status_t status = ds_parse_size(item, what, 1, INT64_C(1) << 30, &values[count]);
        if (status != DS_OK)
            return status;
        count++;
    }
    if (count < 3)
        return ds_set_error(DS_ERR_INVALID_ARG,
                            "--gemm '%s' needs 3 or 4 values (accepted: M,N,K[,BATCH])", text);
    dims_p->m = values[0];
    dims_p->n = values[1];
    dims_p->k = values[2];
    dims_p->batch = values[3];
    return DS_OK;
}

/* The band a modelled cost carries, per operator class (the iteration
 * band of predict, search and plan simulates every cost at its ends). */
static void print_band_table(void)
{
    printf(
        "#\n# band of a modelled cost (measured / modelled time, low and high, per operator\n"
        "# class): the device model's error on kernels that did not set its parameters\n"
        "# (tests/bench/device_band.sh: the CPU backend's kernels); GPU GEMMs from published\n"
        "# H100 timings (b200: B200 timings; tests/bench/device_gemm_published.sh); fused\n"
        "# attention on GPUs from FlashAttention-2's measured 50-73%% of A100 peak (Dao, 2023)\n");
    printf("# %-13s %7s %8s %7s %8s %8s %9s\n", "class", "cpu_low", "cpu_high", "gpu_low",
           "gpu_high", "b200_low", "b200_high");
    printf("# %-13s %7s %8s %7s %8s %8s %9s\n", "", "(x)", "(x)", "(x)", "(x)", "(x)", "(x)");
    for (int c = 0; c < DS_MODEL_CLASS_COUNT_; c++) {
        double cl, ch, gl, gh, bl, bh;
        ds_model_class_band((ds_model_class_t)c, "cpu", &cl, &ch);
        ds_model_class_band((ds_model_class_t)c, "gpu", &gl, &gh);
        ds_model_class_band((ds_model_class_t)c, "b200", &bl, &bh);
        printf("  %-13s %7.3f %8.3f %7.3f %8.3f %8.3f %9.3f\n",
               ds_model_class_name((ds_model_class_t)c), cl, ch, gl, gh, bl, bh);
    }
}

static void print_devices_table(const app_t *app, const char *only)
{
    output_preamble(app, stdout);
    printf("# dense peaks; fractions: of peak for large GEMMs and of bandwidth for streaming\n"
           "# kernels; 'cited': the fractions set from published GEMM timings (see\n"
           "# device_model.c), the others are guesses ('-': all are; 'all': measured by the\n"
           "# backend); bandwidths one direction\n"
           "#\n");
    printf("# %-9s %7s %6s %7s %6s %6s %7s %6s %5s %5s %6s %5s %6s %5s %5s %5s %6s %8s\n", "device",
           "SMs", "clock", "bf16", "fp32", "tf32", "fp8", "HBM", "HBM", "L2", "NVLink", "PCIe",
           "launch", "gemm", "gemm", "gemm", "stream", "cited");
    printf("# %-9s %7s %6s %7s %6s %6s %7s %6s %5s %5s %6s %5s %6s %5s %5s %5s %6s %8s\n", "",
           "(count)", "(MHz)", "(TF/s)", "(TF/s)", "(TF/s)", "(TF/s)", "(GB/s)", "(GiB)", "(MiB)",
           "(GB/s)", "(GB/s)", "(us)", "bf16", "fp32", "fp8", "", "");
    for (size_t i = 0; i < ds_device_model_count(); i++) {
        const ds_device_model_t *d = ds_device_model_at(i);
        if (only != NULL && strcmp(d->name, only) != 0)
            continue;
        const char *cited = !d->guessed                     ? "all"
                            : d->bf16_cited && d->fp8_cited ? "bf16,fp8"
                            : d->bf16_cited                 ? "bf16"
                            : d->fp8_cited                  ? "fp8"
                                                            : "-";
        printf("  %-9s %7d %6.0f %7.1f %6.1f %6.0f %7.0f %6.0f %5.0f %5.0f %6.0f %5.0f %6.1f %5.2f "
               "%5.2f %5.2f %6.2f %8s\n",
               d->name, d->sm_count, d->boost_clock_MHz, d->peak_tflops_bf16, d->peak_tflops_fp32,
               d->peak_tflops_tf32, d->peak_tflops_fp8, d->mem_bw_GBps, d->memory_GiB, d->l2_MiB,
               d->nvlink_GBps, d->pcie_GBps, d->launch_us, d->gemm_fraction_bf16,
               d->gemm_fraction_fp32, d->gemm_fraction_fp8, d->stream_fraction, cited);
    }
    print_band_table();
}

static void print_device_json(const ds_device_model_t *d)
{
    printf("{\"device\": ");
    output_json_string(stdout, d->name);
    printf(", \"sm_count\": %d, \"boost_clock_MHz\": %g, \"peak_tflops_bf16\": %g, "
           "\"peak_tflops_fp32\": %g, \"peak_tflops_tf32\": %g, \"peak_tflops_fp8\": %g, "
           "\"mem_bw_GBps\": %g, \"memory_GiB\": %g, \"l2_MiB\": %g, \"nvlink_GBps\": %g, "
           "\"pcie_GBps\": %g, \"launch_us\": %g, \"gemm_fraction_bf16\": %g, "
           "\"gemm_fraction_fp32\": %g, \"gemm_fraction_fp8\": %g, \"stream_fraction\": %g, "
           "\"guessed\": %s, \"bf16_cited\": %s, \"fp8_cited\": %s, \"stream_k\": %s}",
           d->sm_count, d->boost_clock_MHz, d->peak_tflops_bf16, d->peak_tflops_fp32,
           d->peak_tflops_tf32, d->peak_tflops_fp8, d->mem_bw_GBps, d->memory_GiB, d->l2_MiB,
           d->nvlink_GBps, d->pcie_GBps, d->launch_us, d->gemm_fraction_bf16, d->gemm_fraction_fp32,
           d->gemm_fraction_fp8, d->stream_fraction, d->guessed ? "true" : "false",
           d->bf16_cited ? "true" : "false", d->fp8_cited ? "true" : "false",
           d->stream_k ? "true" : "false");
}

static void print_gemm(const app_t *app, const ds_device_model_t *d, ds_dtype_t dtype,
                       const gemm_dims_t *g, const ds_gemm_estimate_t *e, output_format_t format)
{
    const char *bound = e->memory_bound ? "memory" : "compute";
    bool cited = (d->bf16_cited && (dtype == DS_DTYPE_BF16 || dtype == DS_DTYPE_FP16)) ||
                 (d->fp8_cited && dtype == DS_DTYPE_FP8);
    ds_model_class_t model_class = e->memory_bound ? DS_MODEL_GEMM_MEMORY : DS_MODEL_GEMM_COMPUTE;
    double low, high;
    ds_model_class_band(model_class, d->name, &low, &high);
    if (format == OUTPUT_JSON) {
        printf("{\"device\": ");
        output_json_string(stdout, d->name);
        printf(", \"dtype\": \"%s\", \"m\": %lld, \"n\": %lld, \"k\": %lld, \"batch\": %lld, "
               "\"seconds\": %.9g, \"compute_s\": %.9g, \"memory_s\": %.9g, "
               "\"achieved_tflops\": %.6g, \"peak_tflops\": %g, \"tile_m\": %d, \"tile_n\": %d, "
               "\"tiles\": %lld, \"waves\": %.4f, \"k_efficiency\": %.6f, \"band_class\": \"%s\", "
               "\"band_low_s\": %.9g, \"band_high_s\": %.9g, \"bound\": \"%s\", "
               "\"guessed\": %s, \"fraction_cited\": %s}\n",
               ds_dtype_name(dtype), (long long)g->m, (long long)g->n, (long long)g->k,
               (long long)g->batch, e->seconds, e->compute_s, e->memory_s, e->achieved_tflops,
               e->peak_tflops, e->tile_m, e->tile_n, (long long)e->tiles, e->waves, e->k_efficiency,
               ds_model_class_name(model_class), e->seconds * low, e->seconds * high, bound,
               d->guessed ? "true" : "false", cited ? "true" : "false");
        return;
    }
    output_preamble(app, stdout);
    printf("# device: %s, %d SMs, %s peak %.4g TFLOP/s, %.0f GB/s\n", d->name, d->sm_count,
           ds_dtype_name(dtype), e->peak_tflops, d->mem_bw_GBps);
    printf("# gemm: C[%lld,%lld] = A[%lld,%lld] B[%lld,%lld], batch %lld\n", (long long)g->m,
           (long long)g->n, (long long)g->m, (long long)g->k, (long long)g->k, (long long)g->n,
           (long long)g->batch);
    if (d->guessed && cited)
        printf("# GUESSED: the tile efficiencies are guesses; the fraction of peak is set from\n"
               "#   published GEMM timings (OpenXLA's matmul table or the maximum achievable\n"
               "#   matmul FLOPS; see device_model.c)\n");
    else if (d->guessed)
        printf("# GUESSED: the achieved fractions of peak and the tile efficiencies are guesses\n");
    printf("#\n# %12s %10s %7s %9s %8s %7s %7s %11s %11s %s\n", "time", "achieved", "of_peak",
           "tile", "tiles", "waves", "k_eff", "compute", "memory", "bound");
    printf("# %12s %10s %7s %9s %8s %7s %7s %11s %11s\n", "(us)", "(TFLOP/s)", "(%)", "", "(count)",
           "(count)", "", "(us)", "(us)");
    char tile[24];
    snprintf(tile, sizeof(tile), "%dx%d", e->tile_m, e->tile_n);
    printf("  %12.3f %10.2f %7.1f %9s %8lld %7.2f %7.3f %11.3f %11.3f %s\n", e->seconds * 1e6,
           e->achieved_tflops, 100.0 * e->achieved_tflops / e->peak_tflops,
           e->tile_m > 0 ? tile : "-", (long long)e->tiles, e->waves, e->k_efficiency,
           e->compute_s * 1e6, e->memory_s * 1e6, bound);
    printf("# time = launch (%.1f us) + max(compute, memory); compute = waves x one tile's time,\n"
           "# waves = ceil(tiles / SMs)%s;\n"
           "# memory = bytes of A, B and C / (%.2f x %.0f GB/s)\n",
           d->launch_us,
           d->stream_k ? ", or tiles / SMs past one (stream-K splits a partial wave)" : "",
           d->stream_fraction, d->mem_bw_GBps);
    printf("# band: device model, class %s: %.3f - %.3f us (%.3f - %.3f x the time; the\n"
           "#   model's measured error on kernels of the class, see 'dsmpi device')\n",
           ds_model_class_name(model_class), e->seconds * low * 1e6, e->seconds * high * 1e6, low,
           high);
}

int cmd_device(app_t *app)
{
    static const struct option options[] = {
        {"device", required_argument, NULL, OPT_DEVICE},
        {"gemm", required_argument, NULL, OPT_GEMM},
        {"dtype", required_argument, NULL, OPT_DTYPE},
        {"json", no_argument, NULL, OPT_JSON},
        {"help", no_argument, NULL, OPT_HELP},
        {NULL, 0, NULL, 0},
    };
    static const char *const accepted = "accepted: --device, --gemm, --dtype, --json, --help";
    output_format_t format = OUTPUT_TABLE;
    const char *device = NULL, *gemm_text = NULL, *dtype_text = "bf16";
    int id;
    opterr = 0;
    optind = 1;
    while ((id = getopt_long(app->argc, app->argv, "", options, NULL)) != -1) {
        switch (id) {
        case OPT_HELP: help(); return APP_EXIT_OK;
        case OPT_DEVICE: device = optarg; break;
        case OPT_GEMM: gemm_text = optarg; break;
        case OPT_DTYPE: dtype_text = optarg; break;
        case OPT_JSON: format = OUTPUT_JSON; break;
        default: return app_option_error(app, accepted);
        }
    }
    if (optind < app->argc)
        return app_usage_error(app, "unexpected argument '%s' (%s)", app->argv[optind], accepted);
    ds_device_model_t model;
    ds_dtype_t dtype = DS_DTYPE_BF16;
    gemm_dims_t dims = {0, 0, 0, 1};
    ds_status_t status = DS_OK;
    if (device != NULL && (status = ds_device_model_lookup(device, &model)) != DS_OK)
        goto out;
    if ((status = ds_dtype_parse(dtype_text, &dtype)) != DS_OK)
        goto out;
    if (gemm_text != NULL && (status = parse_gemm(gemm_text, &dims)) != DS_OK)
        goto out;
    if (gemm_text != NULL && device == NULL)
        return app_usage_error(app, "--gemm needs --device (accepted: a100-40g, a100-80g, "
                                    "h100-sxm, h100-pcie, h200, gh200, b200, cpu)");
    int code = app_mpi_start(app, false);
    if (code != APP_EXIT_OK || app->rank != 0)
        return code;
    if (gemm_text != NULL) {
        ds_gemm_estimate_t estimate;
        if ((status = ds_device_model_gemm(&model, dtype, dims.m, dims.n, dims.k, dims.batch,
                                           &estimate)) != DS_OK)
            goto out;
        print_gemm(app, &model, dtype, &dims, &estimate, format);
    } else if (format == OUTPUT_JSON) {
        printf("{\"devices\": [");
        for (size_t i = 0, shown = 0; i < ds_device_model_count(); i++) {
            const ds_device_model_t *d = ds_device_model_at(i);
            if (device != NULL && strcmp(d->name, device) != 0)
                continue;
            printf("%s\n  ", shown++ ? "," : "");
            print_device_json(d);
        }
        printf("]}\n");
    } else {
        print_devices_table(app, device);
    }
out:
    return status == DS_OK ? APP_EXIT_OK : app_fail(app, status);
}
