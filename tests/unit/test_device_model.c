/* The device model: datasheet facts, tile and wave quantisation of GEMMs
 * against hand-computed times, monotonicity, and the estimates that use it. */
#include "check.h"

#include "events/dsi_events.h"

#include <dsmpi/sim.h>

#include <string.h>

static ds_gemm_estimate_t gemm_on(const char *device, ds_dtype_t dtype, int64_t m, int64_t n,
                                  int64_t k, int64_t batch)
{
    ds_device_model_t model;
    ds_gemm_estimate_t e;
    memset(&e, 0, sizeof(e));
    CHECK_OK(ds_device_model_lookup(device, &model));
    CHECK_OK(ds_device_model_gemm(&model, dtype, m, n, k, batch, &e));
    return e;
}

/* Each device's datasheet facts, and the cluster specs agree with them. */
static void test_facts(void)
{
    static const struct {
        const char *name;
        int sms;
        double bf16, fp32, fp8, bw, gib;
    } sheet[] = {
        {"a100-40g", 108, 312.0, 19.5, 0.0, 1555.0, 40.0},
        {"a100-80g", 108, 312.0, 19.5, 0.0, 2039.0, 80.0},
        {"h100-sxm", 132, 989.0, 67.0, 1979.0, 3350.0, 80.0},
        {"h100-pcie", 114, 756.0, 51.0, 1513.0, 2000.0, 80.0},
        {"h200", 132, 989.0, 67.0, 1979.0, 4800.0, 140.0},
        {"gh200", 132, 989.0, 67.0, 1979.0, 4000.0, 96.0},
        {"b200", 148, 2250.0, 80.0, 4500.0, 8000.0, 180.0},
    };
    CHECK_INT((int)ds_device_model_count(), 8);
    /* One device list: the models in the specifications' order (the lookup relies on it). */
    CHECK_INT((int)ds_device_spec_count(), (int)ds_device_model_count());
    for (size_t i = 0; i < ds_device_model_count(); i++)
        CHECK_MSG(strcmp(ds_device_model_at(i)->name, ds_device_spec_name(i)) == 0,
                  "model %zu is %s, spec %s", i, ds_device_model_at(i)->name,
                  ds_device_spec_name(i));
    for (size_t i = 0; i < sizeof(sheet) / sizeof(sheet[0]); i++) {
        ds_device_model_t m;
        CHECK_OK(ds_device_model_lookup(sheet[i].name, &m));
        CHECK_MSG(m.sm_count == sheet[i].sms && m.peak_tflops_bf16 == sheet[i].bf16 &&
                      m.peak_tflops_fp32 == sheet[i].fp32 && m.peak_tflops_fp8 == sheet[i].fp8 &&
                      m.mem_bw_GBps == sheet[i].bw && m.memory_GiB == sheet[i].gib,
                  "%s facts", sheet[i].name);
        CHECK_MSG(m.gemm_fraction_bf16 > 0.5 && m.gemm_fraction_bf16 < 1.0 &&
                      m.stream_fraction > 0.8 && m.stream_fraction < 1.0 && m.guessed,
                  "%s: below peak, marked guessed", m.name);
        ds_device_spec_t spec;
        if (ds_device_spec_lookup(m.name, &spec) == DS_OK)
            CHECK_MSG(spec.peak_tflops_bf16 == m.peak_tflops_bf16 &&
                          spec.peak_tflops_fp32 == m.peak_tflops_fp32 &&
                          spec.mem_bw_GBps == m.mem_bw_GBps && spec.memory_GiB == m.memory_GiB,
                      "%s: spec and model agree", m.name);
    }
    /* Backend names: the GH200 is not an H200, the PCIe H100 not the SXM one. */
    static const char *const backend_names[][2] = {{"NVIDIA GH200 480GB", "gh200"},
                                                   {"NVIDIA H200", "h200"},
                                                   {"NVIDIA H100 PCIe", "h100-pcie"},
                                                   {"NVIDIA H100 80GB HBM3", "h100-sxm"}};
    for (size_t i = 0; i < sizeof(backend_names) / sizeof(backend_names[0]); i++) {
        ds_device_spec_t spec;
        CHECK_OK(ds_device_spec_match("cuda", backend_names[i][0], &spec));
        CHECK_MSG(strcmp(spec.name, backend_names[i][1]) == 0, "%s is %s", backend_names[i][0],
                  spec.name);
    }
    ds_device_model_t m;
    CHECK_FAILS(ds_device_model_lookup("tpu-v5", &m), DS_ERR_INVALID_ARG,
                "device 'tpu-v5' is not known (accepted: a100-40g, a100-80g, h100-sxm, h100-pcie, "
                "h200, gh200, b200, cpu)");
    CHECK_OK(ds_device_model_lookup("a100-80g", &m));
    ds_gemm_estimate_t e;
    CHECK_FAILS(ds_device_model_gemm(&m, DS_DTYPE_FP8, 1024, 1024, 1024, 1, &e), DS_ERR_INVALID_ARG,
                "device a100-80g has no fp8 peak");
    CHECK_FAILS(ds_device_model_gemm(&m, DS_DTYPE_BF16, 0, 1024, 1024, 1, &e), DS_ERR_INVALID_ARG,
                "every dimension must be at least 1");
}

/* On h100-sxm (132 SMs, bf16 989 TFLOP/s x 0.83 = 6.219 TFLOP/s an SM),
 * 3072 x 1408 x 8192 is 12 x 11 = 132 tiles of 256 x 128: one wave of
 * 2*256*128*8192 / (6.219e12 * 8192/8320) = 87.68 us, plus the 4 us launch.
 * One more column (n = 1409) leaves 144 such tiles: stream-K spreads the
 * 12 beyond the first wave over every SM, 144/132 waves = 95.65 us (not two
 * whole waves).  Half the rows (1536 x 1408) leave 66 tiles, half the SMs
 * idle; 128 x 128 tiles fill them (132 tiles, one wave of 87.68 / 2 / 0.85
 * us = 51.58 us). */
static void test_waves(void)
{
    ds_gemm_estimate_t full = gemm_on("h100-sxm", DS_DTYPE_BF16, 3072, 1408, 8192, 1);
    CHECK(full.tile_m == 256 && full.tile_n == 128 && full.tiles == 132 && full.waves == 1.0);
    CHECK(!full.memory_bound);
    CHECK_NEAR(full.compute_s, 87.680e-6, 1e-3);
    CHECK_NEAR(full.seconds, 91.680e-6, 1e-3);
    ds_gemm_estimate_t over = gemm_on("h100-sxm", DS_DTYPE_BF16, 3072, 1409, 8192, 1);
    CHECK(over.tile_m == 256 && over.tile_n == 128 && over.tiles == 144);
    CHECK_NEAR(over.waves, 144.0 / 132.0, 1e-12);
    CHECK_NEAR(over.compute_s, 95.651e-6, 1e-3);
    ds_gemm_estimate_t half = gemm_on("h100-sxm", DS_DTYPE_BF16, 1536, 1408, 8192, 1);
    CHECK(half.tile_m == 128 && half.tile_n == 128 && half.tiles == 132 && half.waves == 1.0);
    CHECK_NEAR(half.compute_s, 51.577e-6, 1e-3);
    /* 108 SMs on A100, whose cuBLAS has no stream-K: 108 tiles one wave,
     * 120 (one more column) two whole waves. */
    ds_gemm_estimate_t a108 = gemm_on("a100-80g", DS_DTYPE_BF16, 256 * 12, 128 * 9, 8192, 1);
    ds_gemm_estimate_t a109 = gemm_on("a100-80g", DS_DTYPE_BF16, 256 * 12, 128 * 9 + 1, 8192, 1);
    CHECK(a108.tiles == 108 && a108.waves == 1.0);
    CHECK(a109.seconds / a108.seconds > 1.6);
    /* Thin shapes stream their operands: 8 x 8192 x 8192 reads 134 MB of B
     * at 0.88 x 3350 GB/s = 45.5 us. */
    ds_gemm_estimate_t thin = gemm_on("h100-sxm", DS_DTYPE_BF16, 8, 8192, 8192, 1);
    CHECK(thin.memory_bound);
    CHECK_NEAR(thin.memory_s, (8.0 * 8192 * 2 + 8192.0 * 8192) * 2 / (3350e9 * 0.88), 1e-9);
    /* Large square GEMMs approach, never reach, the fraction of peak. */
    ds_gemm_estimate_t big = gemm_on("h100-sxm", DS_DTYPE_BF16, 16384, 16384, 16384, 1);
    CHECK(big.achieved_tflops > 0.9 * 0.83 * 989.0 && big.achieved_tflops < 0.83 * 989.0);
    /* The bf16 fraction of the H100 SXM-class parts comes from OpenXLA's
     * published sm_90 GEMM timings, which give 4096^3 783.3 TFLOP/s (see
     * device_model.c): the model within 3% of it. */
    ds_gemm_estimate_t cube = gemm_on("h100-sxm", DS_DTYPE_BF16, 4096, 4096, 4096, 1);
    CHECK_MSG(cube.achieved_tflops > 0.97 * 783.3 && cube.achieved_tflops < 1.03 * 783.3,
              "h100-sxm 4096^3: %.1f TFLOP/s", cube.achieved_tflops);
    /* Fractions from published GEMM timings (OpenXLA's table, or the maximum
     * achievable matmul FLOPS where no table covers a device or dtype); the
     * PCIe part keeps guesses. */
    static const struct {
        const char *name;
        double bf16, fp8; /* 0: not cited */
    } cited[] = {
        {"a100-40g", 0.88, 0.0}, {"a100-80g", 0.88, 0.0}, {"h100-sxm", 0.83, 0.70},
        {"h100-pcie", 0.0, 0.0}, {"h200", 0.83, 0.75},    {"gh200", 0.85, 0.77},
        {"b200", 0.65, 0.64},    {"cpu", 0.0, 0.0},
    };
    for (size_t i = 0; i < sizeof(cited) / sizeof(cited[0]); i++) {
        ds_device_model_t m;
        CHECK_OK(ds_device_model_lookup(cited[i].name, &m));
        CHECK_MSG(m.bf16_cited == (cited[i].bf16 > 0.0) &&
                      (!m.bf16_cited || m.gemm_fraction_bf16 == cited[i].bf16),
                  "%s: bf16 fraction %g, cited %d", cited[i].name, m.gemm_fraction_bf16,
                  m.bf16_cited);
        CHECK_MSG(m.fp8_cited == (cited[i].fp8 > 0.0) &&
                      (!m.fp8_cited || m.gemm_fraction_fp8 == cited[i].fp8),
                  "%s: fp8 fraction %g, cited %d", cited[i].name, m.gemm_fraction_fp8, m.fp8_cited);
    }
}

/* A larger GEMM in any dimension is never faster. */
static void test_monotone(void)
{
    static const int64_t sizes[] = {1,   7,    64,   100,  128,  129,  255,  256,
                                    257, 1000, 1408, 1409, 4096, 4097, 12288};
    static const char *const devices[] = {"a100-80g", "h100-sxm", "b200", "cpu"};
    size_t count = sizeof(sizes) / sizeof(sizes[0]);
    int failures = 0;
    for (size_t d = 0; d < sizeof(devices) / sizeof(devices[0]); d++)
        for (size_t i = 0; i < count; i++)
            for (size_t j = 0; j < count; j++)
                for (size_t l = 0; l + 1 < count; l++) {
                    int64_t a = sizes[i], b = sizes[j], k = sizes[l], up = sizes[l + 1];
                    double base = gemm_on(devices[d], DS_DTYPE_BF16, a, b, k, 1).seconds;
                    failures += gemm_on(devices[d], DS_DTYPE_BF16, up, a, b, 1).seconds <
                                gemm_on(devices[d], DS_DTYPE_BF16, k, a, b, 1).seconds;
                    failures += gemm_on(devices[d], DS_DTYPE_BF16, a, up, b, 1).seconds <
                                gemm_on(devices[d], DS_DTYPE_BF16, a, k, b, 1).seconds;
                    failures += gemm_on(devices[d], DS_DTYPE_BF16, a, b, up, 1).seconds < base;
                    failures += gemm_on(devices[d], DS_DTYPE_BF16, a, b, k, 2).seconds < base;
                }
    CHECK_INT(failures, 0);
}

/* An h100-sxm and the cpu, and a bf16 GEMM of 8192^3 with its FLOPs and bytes. */
static void gemm_8192(ds_cluster_t *h100, ds_cluster_t *cpu, ds_event_key_t *key, double *flops,
                      double *bytes)
{
    CHECK_OK(ds_cluster_init(h100, 1, 8, "h100-sxm"));
    CHECK_OK(ds_cluster_init(cpu, 1, 1, "cpu"));
    memset(key, 0, sizeof(*key));
    key->kind = DS_EVENT_COMPUTE;
    key->op = DS_OP_GEMM;
    key->dtype = DS_DTYPE_BF16;
    key->dims[0] = key->dims[1] = key->dims[2] = 8192;
    *flops = 2.0 * 8192 * 8192 * 8192;
    *bytes = 3.0 * 8192 * 8192 * 2;
}

/* The estimates of --estimate-missing: GPUs below peak, the cpu as before. */
static void test_estimates(void)
{
    ds_cluster_t h100, cpu;
    ds_event_key_t key;
    double flops, bytes;
    gemm_8192(&h100, &cpu, &key, &flops, &bytes);
    double h = dsi_estimate_compute_seconds(&key, flops, bytes, &h100);
    CHECK_NEAR(h, gemm_on("h100-sxm", DS_DTYPE_BF16, 8192, 8192, 8192, 1).seconds, 1e-12);
    CHECK(h > 4e-6 + flops / (989e12 * 0.83)); /* below the 0.83 fraction's rate */
    double c = dsi_estimate_compute_seconds(&key, flops, bytes, &cpu);
    CHECK_NEAR(c, 4e-6 + flops / 0.1e12, 1e-12);
    /* Streaming kernels at the bandwidth they achieve, not the datasheet's. */
    key.op = DS_OP_ADD;
    key.dims[2] = 0;
    double add = dsi_estimate_compute_seconds(&key, 8192.0 * 8192, bytes, &h100);
    CHECK_NEAR(add, 4e-6 + bytes / (3350e9 * 0.88), 1e-9);
    CHECK_NEAR(dsi_estimate_compute_seconds(&key, 0.0, bytes, &cpu), 4e-6 + bytes / 10e9, 1e-12);
}

/* The provenance of device-model costs reads back from a text cost table. */
static void test_provenance(void)
{
    CHECK(strcmp(ds_provenance_name(DS_PROV_MODELLED), "modelled") == 0);
    ds_cost_table_t *table = NULL;
    CHECK_OK(ds_cost_table_create(&table));
    CHECK_OK(ds_cost_table_parse(
        table, "gemm fwd bf16 NN m=8 n=8 k=8 = 1e-5 1e-5 1e-5 1e-5 0 modelled\n", "inline"));
    ds_event_key_t key;
    CHECK_OK(ds_event_key_parse("gemm fwd bf16 NN m=8 n=8 k=8", &key));
    const ds_cost_t *cost = ds_cost_table_find(table, &key);
    CHECK(cost != NULL && cost->provenance == DS_PROV_MODELLED);
    ds_cost_table_destroy(table);
}

/* The documented band of each operator class (libdsmpi/events/device_band.c
 * and the README): the GPU rows and the cpu's own attention row. */
static void test_band_numbers(void)
{
    static const struct {
        ds_model_class_t model_class;
        const char *name, *device;
        double low, high;
    } rows[] = {
        {DS_MODEL_GEMM_COMPUTE, "gemm-compute", "h100-sxm", 0.935, 1.201},
        {DS_MODEL_GEMM_COMPUTE, "gemm-compute", "cpu", 0.884, 1.241},
        {DS_MODEL_GEMM_MEMORY, "gemm-memory", "a100-80g", 0.941, 1.218},
        {DS_MODEL_GEMM_MEMORY, "gemm-memory", "cpu", 0.270, 2.096},
        {DS_MODEL_ATTENTION, "attention", "a100-80g", 0.904, 1.320},
        {DS_MODEL_ATTENTION, "attention", "cpu", 1.0, 2.809},
        {DS_MODEL_STREAMING, "streaming", "b200", 0.270, 2.096},
        {DS_MODEL_GEMM_COMPUTE, "gemm-compute", "b200", 0.780, 1.340},
        {DS_MODEL_GEMM_MEMORY, "gemm-memory", "b200", 0.780, 1.340},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        double low = 0.0, high = 0.0;
        ds_model_class_band(rows[i].model_class, rows[i].device, &low, &high);
        CHECK_MSG(low == rows[i].low && high == rows[i].high, "%s on %s: %g - %g", rows[i].name,
                  rows[i].device, low, high);
        CHECK(strcmp(ds_model_class_name(rows[i].model_class), rows[i].name) == 0);
        CHECK(low <= 1.0 && high >= 1.0);
    }
    double low = 0.0, high = 0.0;
    ds_model_class_band(DS_MODEL_CLASS_COUNT_, "cpu", &low, &high);
    CHECK(low == 1.0 && high == 1.0);
    CHECK(strcmp(ds_model_class_name(DS_MODEL_CLASS_COUNT_), "?") == 0);
}

/* Each key goes to the class of the regime the model prices it in. */
static void test_band_classes(void)
{
    ds_cluster_t h100, cpu;
    ds_event_key_t key;
    double flops, bytes;
    gemm_8192(&h100, &cpu, &key, &flops, &bytes);
    CHECK_INT(ds_model_class_of(&key, flops, bytes, &h100), DS_MODEL_GEMM_COMPUTE);
    CHECK_INT(ds_model_class_of(&key, flops, bytes, &cpu), DS_MODEL_GEMM_COMPUTE);
    /* A matrix-vector product: 2 FLOPs per 2-byte element read. */
    key.dims[1] = 1;
    flops = 2.0 * 8192 * 8192;
    bytes = (8192.0 * 8192 + 2 * 8192) * 2;
    CHECK(gemm_on("h100-sxm", DS_DTYPE_BF16, 8192, 1, 8192, 1).memory_bound);
    CHECK_INT(ds_model_class_of(&key, flops, bytes, &h100), DS_MODEL_GEMM_MEMORY);
    CHECK_INT(ds_model_class_of(&key, flops, bytes, &cpu), DS_MODEL_GEMM_MEMORY);
    key.op = DS_OP_FLASH_ATTENTION;
    CHECK_INT(ds_model_class_of(&key, 1e12, 1e6, &h100), DS_MODEL_ATTENTION);
    key.op = DS_OP_LAYERNORM;
    CHECK_INT(ds_model_class_of(&key, 1e6, 1e6, &cpu), DS_MODEL_STREAMING);
    double low = 0.0, high = 0.0;
    double seconds = dsi_estimate_compute_band(&key, 1e6, 1e6, &cpu, &low, &high);
    CHECK(seconds == dsi_estimate_compute_seconds(&key, 1e6, 1e6, &cpu));
    CHECK(low == 0.270 && high == 2.096);
}

/* In a simulation, a compute cost from the device model is taken at its
 * class's band ends, a measured one (and communication inside the nodes
 * measured) keeps 1, 1: the low end's key times over the expected one's. */
static void test_band_in_sim(void)
{
    ds_model_t *model = NULL;
    CHECK_OK(ds_model_load("gpt2-medium", &model));
    ds_cluster_t cluster;
    CHECK_OK(ds_cluster_init(&cluster, 1, 8, "a100-80g"));
    ds_strategy_t s;
    ds_strategy_init(&s);
    CHECK_OK(ds_strategy_parse("tp=2,pp=2,mbs=1", &s));
    CHECK_OK(ds_strategy_resolve(&s, model, 8, 8));
    ds_event_set_t *set = NULL;
    ds_cost_table_t *costs = NULL;
    CHECK_OK(ds_events_generate(model, &s, &cluster, &set));
    CHECK_OK(ds_cost_table_create(&costs));
    /* Every other compute key and every communication key measured. */
    size_t compute = 0;
    for (size_t i = 0; i < ds_event_set_size(set); i++) {
        const ds_event_t *e = ds_event_set_at(set, i);
        bool is_compute = e->key.kind == DS_EVENT_COMPUTE;
        if (is_compute && compute++ % 2 == 1)
            continue;
        ds_cost_t c = {e->estimated_s,  e->estimated_s, e->estimated_s, e->estimated_s, 5,
                       DS_PROV_MEASURED};
        CHECK_OK(ds_cost_table_set(costs, &e->key, &c));
    }
    ds_sim_t *expected = NULL, *low = NULL;
    CHECK_OK(ds_sim_create(&expected));
    CHECK_OK(ds_sim_create(&low));
    ds_sim_options_t so;
    ds_sim_options_init(&so);
    so.estimate_missing = 1;
    CHECK_OK(ds_sim_run(expected, model, &s, &cluster, costs, &so));
    so.band = DS_SIM_BAND_LOW;
    CHECK_OK(ds_sim_run(low, model, &s, &cluster, costs, &so));
    int modelled = 0, measured = 0;
    for (size_t i = 0; i < ds_sim_key_count(low); i++) {
        ds_provenance_t provenance;
        double low_s = 0.0, expected_s = -1.0;
        const ds_event_key_t *key = ds_sim_key_at(low, i, &provenance, &low_s);
        for (size_t j = 0; j < ds_sim_key_count(expected); j++)
            if (ds_event_key_equal(ds_sim_key_at(expected, j, NULL, NULL), key))
                ds_sim_key_at(expected, j, NULL, &expected_s);
        const ds_event_t *e = ds_event_set_find(set, key);
        CHECK(e != NULL && expected_s > 0.0);
        if (e == NULL || !(expected_s > 0.0))
            continue;
        double band_low = 1.0, band_high = 1.0;
        if (provenance == DS_PROV_MODELLED) {
            ds_model_class_band(ds_model_class_of(key, e->flops, e->bytes, &cluster), "a100-80g",
                                &band_low, &band_high);
            CHECK(band_low < 1.0);
            modelled++;
        } else {
            CHECK_INT(provenance, DS_PROV_MEASURED);
            measured++;
        }
        CHECK_NEAR(low_s / expected_s, band_low, 1e-12);
    }
    CHECK(modelled > 5 && measured > 5);
    ds_sim_summary_t sum;
    ds_sim_get_summary(low, &sum);
    CHECK_INT(sum.banded_compute_keys, modelled);
    CHECK_INT(sum.modelled_keys, modelled);
    CHECK_INT(sum.banded_comm_keys, 0);
    ds_sim_summary_t mid;
    ds_sim_get_summary(expected, &mid);
    CHECK(sum.iteration_s < mid.iteration_s);
    ds_sim_destroy(low);
    ds_sim_destroy(expected);
    ds_cost_table_destroy(costs);
    ds_event_set_destroy(set);
    ds_model_destroy(model);
}

int main(void)
{
    test_facts();
    test_waves();
    test_monotone();
    test_estimates();
    test_provenance();
    test_band_numbers();
    test_band_classes();
    test_band_in_sim();
    return check_summary("test_device_model");
}
