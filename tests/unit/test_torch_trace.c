/* framework: torch.profiler traces read, mapped onto the model and
 * calibrated; on the committed fixtures of real PyTorch runs (legacy and
 * Kineto layouts) and on small traces written here. */
#include "check.h"

#include <math.h>
#include <stdlib.h>
#include <zlib.h>

static const char *data_dir;

static ds_model_t *model_named(const char *name)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/torch/%s", data_dir, name);
    ds_model_t *model = NULL;
    CHECK_OK(ds_model_load(path, &model));
    if (model != NULL) {
        CHECK_OK(ds_model_set_seq_len(model, 64));
        CHECK_OK(ds_model_set_dtype(model, DS_DTYPE_FP32));
    }
    return model;
}

static ds_model_t *tiny_model(void)
{
    return model_named("gpt2-tiny-1l.json");
}

static ds_strategy_t strategy_of(const ds_model_t *model, const char *text, int gpus)
{
    ds_strategy_t s;
    ds_strategy_init(&s);
    CHECK_OK(ds_strategy_parse(text, &s));
    CHECK_OK(ds_strategy_resolve(&s, model, gpus, gpus));
    return s;
}

static ds_torch_trace_t *load(const char *name)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/torch/%s", data_dir, name);
    ds_torch_trace_t *trace = NULL;
    CHECK_OK(ds_torch_trace_load(path, &trace));
    return trace;
}

/* A trace, the model it is mapped onto and an empty cost table, made and
 * released together. */
typedef struct mapping {
    ds_torch_trace_t *trace;
    ds_model_t *model;
    ds_cost_table_t *costs;
    ds_torch_trace_info_t info;
} mapping_t;

/* Takes `trace` and `model` (NULL when they could not be made: false). */
static bool mapping_open(mapping_t *m, ds_torch_trace_t *trace, ds_model_t *model)
{
    memset(m, 0, sizeof(*m));
    m->trace = trace;
    m->model = model;
    CHECK_OK(ds_cost_table_create(&m->costs));
    if (trace == NULL || model == NULL || m->costs == NULL)
        return false;
    ds_torch_trace_get_info(trace, &m->info);
    return true;
}

/* mapping_open on a trace parsed from `text`. */
static bool mapping_parse(mapping_t *m, const char *text, const char *origin, ds_model_t *model)
{
    ds_torch_trace_t *trace = NULL;
    CHECK_OK(ds_torch_trace_parse(text, strlen(text), origin, &trace));
    return mapping_open(m, trace, model);
}

static void mapping_close(mapping_t *m)
{
    ds_cost_table_destroy(m->costs);
    ds_model_destroy(m->model);
    ds_torch_trace_destroy(m->trace);
    memset(m, 0, sizeof(*m));
}

/* The sum over a pass's compute keys of count x mean is the traced time of
 * the mapped ranges less their collectives (costs run end to end). */
static void check_fixture(const char *name, ds_torch_trace_format_t format, bool shapes,
                          const char *strategy, int gpus)
{
    ds_torch_trace_t *trace = load(name);
    ds_model_t *model = tiny_model();
    if (trace == NULL || model == NULL)
        goto out;
    ds_torch_trace_info_t info;
    ds_torch_trace_get_info(trace, &info);
    CHECK_INT(info.format, format);
    CHECK_INT(info.iterations, 1);
    CHECK(info.iteration_mean_s > 0.001 && info.iteration_mean_s < 10.0);
    CHECK_NEAR(ds_torch_trace_iteration_s(trace, 0), info.iteration_mean_s, 1e-12);
    CHECK(shapes ? info.with_shapes > 1000 : info.with_shapes == 0);
    CHECK_INT(info.ranges, 7); /* embedding, layer 0 and head, fwd and bwd; the optimizer */
    ds_strategy_t s = strategy_of(model, strategy, gpus);
    ds_cost_table_t *costs = NULL;
    CHECK_OK(ds_cost_table_create(&costs));
    ds_framework_result_t r;
    CHECK_OK(ds_torch_trace_map(trace, model, &s, 0, costs, &r));
    CHECK_INT(r.ranges_mapped, 7);
    CHECK_INT(r.ranges_skipped, 0);
    CHECK_MSG(r.coverage > DS_FRAMEWORK_MIN_COVERAGE && r.coverage <= 1.0, "%s: coverage %g", name,
              r.coverage);
    CHECK(r.keys >= 20 && r.keys == ds_cost_table_size(costs));
    double total = 0.0;
    bool gemm = false, optimizer = false, loss = false;
    for (size_t i = 0; i < ds_cost_table_size(costs); i++) {
        const ds_event_key_t *key;
        const ds_cost_t *cost;
        ds_cost_table_at(costs, i, &key, &cost);
        CHECK_INT(cost->provenance, DS_PROV_FRAMEWORK);
        CHECK(cost->mean_s >= 0.0 && cost->p10_s <= cost->median_s + 1e-12 &&
              cost->median_s <= cost->p90_s + 1e-12);
        CHECK_INT(key->kind, DS_EVENT_COMPUTE);
        total += cost->mean_s * (double)cost->repetitions;
        gemm |= key->op == DS_OP_GEMM && key->dims[0] == 128 && key->dims[2] == 128;
        optimizer |= key->op == DS_OP_OPTIMIZER;
        /* cross-entropy over this rank's vocabulary share, forward and backward (Megatron's
         * vocabulary-parallel one under tp=2) */
        loss |= key->op == DS_OP_CROSS_ENTROPY && key->pass == DS_PASS_BACKWARD &&
                key->dims[1] == 4096 / s.tp;
    }
    CHECK(gemm && optimizer);
    CHECK_MSG(loss, "%s: no cross-entropy backward key", name);
    CHECK_NEAR(total, r.mapped_s - r.collective_s, 1e-6);
    CHECK(!r.device_timed && r.kernel_s == 0.0 && info.kernels == 0); /* CPU traces */
    CHECK(r.num_unmapped > 0 && r.unmapped[0].share < 0.1);
    ds_cost_table_destroy(costs);
out:
    ds_model_destroy(model);
    ds_torch_trace_destroy(trace);
}

/* `own` and `framework` cost tables from text, calibrated: the costs added
 * (destroyed by the caller) and the calibration's figures. */
static ds_cost_table_t *calibrate_texts(const char *own_text, const char *framework_text,
                                        ds_framework_calibration_t *c)
{
    ds_cost_table_t *framework = NULL, *own = NULL, *out = NULL;
    CHECK_OK(ds_cost_table_create(&framework));
    CHECK_OK(ds_cost_table_create(&own));
    CHECK_OK(ds_cost_table_create(&out));
    CHECK_OK(ds_cost_table_parse(own, own_text, "own"));
    CHECK_OK(ds_cost_table_parse(framework, framework_text, "framework"));
    memset(c, 0, sizeof(*c));
    CHECK_OK(ds_framework_calibrate(framework, own, out, c));
    ds_cost_table_destroy(framework);
    ds_cost_table_destroy(own);
    return out;
}

/* Calibration: the median ratio of a class scales its own keys the trace lacks. */
static void check_calibration(void)
{
    ds_framework_calibration_t c;
    ds_cost_table_t *out =
        calibrate_texts("gemm fwd fp32 NT m=128 n=128 k=128 = 1e-4\n"
                        "gemm fwd fp32 NT m=128 n=512 k=128 = 2e-4\n"
                        "gemm bwd fp32 TN m=128 n=128 k=128 = 1e-4\n"
                        "gemm fwd fp32 NT m=128 n=256 k=128 = 4e-4\n"
                        "layernorm fwd fp32 rows=128 cols=128 = 1e-5\n"
                        "gelu fwd fp32 rows=128 cols=512 = 2e-5\n",
                        "gemm fwd fp32 NT m=128 n=128 k=128 = 2e-4 2e-4 2e-4 2e-4 1 "
                        "framework\n"
                        "gemm fwd fp32 NT m=128 n=512 k=128 = 6e-4 6e-4 6e-4 6e-4 1 "
                        "framework\n"
                        "gemm bwd fp32 TN m=128 n=128 k=128 = 1e-1 1e-1 1e-1 1e-1 1 "
                        "framework\n"
                        "layernorm fwd fp32 rows=128 cols=128 = 5e-5 5e-5 5e-5 5e-5 1 "
                        "framework\n",
                        &c);
    CHECK_INT(c.common[DS_FRAMEWORK_CLASS_GEMM], 3);
    CHECK_NEAR(c.ratio[DS_FRAMEWORK_CLASS_GEMM], 3.0, 1e-9); /* median of 2, 3, 1000 */
    CHECK_NEAR(c.ratio[DS_FRAMEWORK_CLASS_NORM], 5.0, 1e-9);
    CHECK_NEAR(c.overall, 4.0, 1e-9); /* median of 2, 3, 5, 1000 */
    CHECK_INT(c.calibrated, 2);
    ds_event_key_t key;
    CHECK_OK(ds_event_key_parse("gemm fwd fp32 NT m=128 n=256 k=128", &key));
    const ds_cost_t *cost = ds_cost_table_find(out, &key);
    CHECK(cost != NULL && cost->provenance == DS_PROV_CALIBRATED);
    if (cost != NULL)
        CHECK_NEAR(cost->mean_s, 1.2e-3, 1e-9);
    CHECK_OK(ds_event_key_parse("gelu fwd fp32 rows=128 cols=512", &key));
    cost = ds_cost_table_find(out, &key);
    CHECK(cost != NULL); /* no gelu in common: the overall ratio */
    if (cost != NULL)
        CHECK_NEAR(cost->mean_s, 8e-5, 1e-9);
    CHECK(strcmp(ds_provenance_name(DS_PROV_FRAMEWORK), "framework") == 0);
    CHECK(strcmp(ds_provenance_name(DS_PROV_CALIBRATED), "calibrated") == 0);
    ds_cost_table_destroy(out);
}

/* Calibration by size: a key the trace lacks takes the framework time of its
 * own operator's common keys at its own time (the line through the nearest two,
 * the largest's ratio beyond it, bounded below the smallest), not the class
 * median. */
static void check_calibration_by_size(void)
{
    ds_framework_calibration_t c;
    ds_cost_table_t *out =
        calibrate_texts("gemm fwd fp32 NT m=128 n=128 k=128 = 1e-4\n"
                        "gemm fwd fp32 NT m=128 n=384 k=128 = 3e-4\n"
                        "gemm fwd fp32 NT m=128 n=64 k=128 = 5e-5\n"
                        "gemm fwd fp32 NT m=128 n=256 k=128 = 2e-4\n"
                        "gemm fwd fp32 NT m=128 n=1024 k=128 = 8e-4\n"
                        "gemm bwd fp32 TN m=128 n=128 k=128 = 1e-4\n"
                        "gemm fwd fp32 NT m=128 n=32 k=128 = 1e-5\n"
                        "softmax fwd fp32 rows=128 cols=64 causal = 1e-5\n"
                        "softmax fwd fp32 rows=256 cols=64 causal = 2e-5\n"
                        "softmax fwd fp32 rows=64 cols=64 causal = 5e-6\n",
                        "gemm fwd fp32 NT m=128 n=128 k=128 = 4e-4 4e-4 4e-4 4e-4 1 "
                        "framework\n"
                        "gemm fwd fp32 NT m=128 n=384 k=128 = 6e-4 6e-4 6e-4 6e-4 1 "
                        "framework\n"
                        "softmax fwd fp32 rows=128 cols=64 causal = 5e-5 5e-5 5e-5 5e-5 1 "
                        "framework\n"
                        "softmax fwd fp32 rows=256 cols=64 causal = 4e-5 4e-5 4e-5 4e-5 1 "
                        "framework\n",
                        &c);
    CHECK_NEAR(c.ratio[DS_FRAMEWORK_CLASS_GEMM], 3.0, 1e-9); /* the class median, reported */
    CHECK_INT(c.calibrated, 6);
    CHECK_INT(c.by_operator, 6);
    static const struct {
        const char *key;
        double framework_s;
    } expect[] = {
        {"gemm fwd fp32 NT m=128 n=256 k=128", 5e-4},    /* on the line between the two */
        {"gemm fwd fp32 NT m=128 n=1024 k=128", 1.6e-3}, /* the largest's ratio, 2 */
        {"gemm fwd fp32 NT m=128 n=64 k=128", 3.5e-4},   /* the line below the smallest */
        {"gemm fwd fp32 NT m=128 n=32 k=128", 3.1e-4},   /* the line, 3.1e-4: inside the bounds */
        {"gemm bwd fp32 TN m=128 n=128 k=128", 4e-4},    /* no backward in common: the forward's */
        /* the line (5.5e-5) above the smallest's time: less work never costs more */
        {"softmax fwd fp32 rows=64 cols=64 causal", 5e-5},
    };
    for (size_t i = 0; i < sizeof(expect) / sizeof(expect[0]); i++) {
        ds_event_key_t key;
        CHECK_OK(ds_event_key_parse(expect[i].key, &key));
        const ds_cost_t *cost = ds_cost_table_find(out, &key);
        CHECK_MSG(cost != NULL && fabs(cost->mean_s - expect[i].framework_s) < 1e-12,
                  "%s: %g, expected %g", expect[i].key, cost != NULL ? cost->mean_s : -1.0,
                  expect[i].framework_s);
    }
    ds_cost_table_destroy(out);
}

/* A small legacy trace: one iteration, a layer pass whose GEMM is preceded by
 * framework time and followed by a collective the model does not place there. */
static const char synthetic_trace[] =
    "[{\"ph\": \"X\", \"name\": \"ProfilerStep#0\", \"ts\": 0, \"dur\": 1000, \"tid\": 1},"
    " {\"ph\": \"X\", \"name\": \"Optimizer.step#Adam.step\", \"ts\": 800, \"dur\": 100,"
    "  \"tid\": 1},"
    " {\"ph\": \"X\", \"name\": \"layer:0:fwd\", \"ts\": 100, \"dur\": 600, \"tid\": 1},"
    " {\"ph\": \"X\", \"name\": \"aten::layer_norm\", \"ts\": 110, \"dur\": 40, \"tid\": 1},"
    " {\"ph\": \"X\", \"name\": \"aten::linear\", \"ts\": 200, \"dur\": 100, \"tid\": 1},"
    " {\"ph\": \"X\", \"name\": \"aten::addmm\", \"ts\": 210, \"dur\": 80, \"tid\": 1},"
    " {\"ph\": \"X\", \"name\": \"c10d::allreduce_\", \"ts\": 320, \"dur\": 10, \"tid\": 1},"
    " {\"ph\": \"X\", \"name\": \"gloo:all_reduce\", \"ts\": 321, \"dur\": 79, \"tid\": 9},"
    " {\"ph\": \"X\", \"name\": \"aten::bmm\", \"ts\": 450, \"dur\": 50, \"tid\": 1},"
    " {\"ph\": \"X\", \"name\": \"aten::zeros\", \"ts\": 900, \"dur\": 50, \"tid\": 1},"
    " {\"ph\": \"X\", \"name\": \"layer:0:fwd\", \"ts\": 2000, \"dur\": 50, \"tid\": 1},"
    " {\"ph\": \"i\", \"name\": \"marker\", \"ts\": 5}]";

/* A one-line refusal naming the origin, DS_ERR_BAD_FILE. */
static void check_refused_bytes(const unsigned char *data, size_t size, const char *origin,
                                const char *says)
{
    ds_torch_trace_t *trace = NULL;
    ds_status_t status = ds_torch_trace_parse((const char *)data, size, origin, &trace);
    CHECK_MSG(status == DS_ERR_BAD_FILE, "%s: status %d", origin, (int)status);
    CHECK(trace == NULL);
    const char *message = ds_last_error();
    CHECK_MSG(message != NULL && strstr(message, origin) != NULL && strstr(message, says) != NULL &&
                  strchr(message, '\n') == NULL,
              "%s: '%s'", origin, message ? message : "(null)");
}

static void check_refused(const char *text, const char *origin, const char *says)
{
    check_refused_bytes((const unsigned char *)text, strlen(text), origin, says);
}

/* The cost of `text` (an event key) in `costs`, or -1. */
static double cost_of(const ds_cost_table_t *costs, const char *text, int64_t *repetitions_p)
{
    ds_event_key_t key;
    CHECK_OK(ds_event_key_parse(text, &key));
    const ds_cost_t *cost = ds_cost_table_find(costs, &key);
    CHECK_MSG(cost != NULL, "no cost for '%s'", text);
    if (repetitions_p != NULL)
        *repetitions_p = cost != NULL ? cost->repetitions : 0;
    return cost != NULL ? cost->mean_s : -1.0;
}

/* The synthetic trace mapped: each operator its own time, the rest of the pass its
 * framework gap, collectives left out. */
static void check_synthetic(void)
{
    check_refused("[{\"ph\": \"X\", \"name\": \"aten::mm\", \"ts\": 1", "truncated.json",
                  "not valid JSON");
    check_refused("{\"traceEvents\": 3}", "object.json", "not a torch.profiler trace");
    check_refused("42", "number.json", "not");
    check_refused("[{\"ph\": \"X\", \"name\": \"aten::mm\", \"ts\": 1, \"dur\": 2}]",
                  "no-step.json", "no iteration");
    check_refused("[{\"ph\": \"X\", \"name\": \"ProfilerStep#1\", \"ts\": 1, \"dur\": -2}]",
                  "negative.json", "dur");
    check_refused("\x1f\x8b\x08\x00", "header-only.json.gz", "truncated gzip");

    const char *text = synthetic_trace;
    ds_torch_trace_t *trace = NULL;
    CHECK_OK(ds_torch_trace_parse(text, strlen(text), "synthetic", &trace));
    ds_model_t *model = tiny_model();
    if (trace == NULL || model == NULL)
        goto out;
    ds_torch_trace_info_t info;
    ds_torch_trace_get_info(trace, &info);
    CHECK_INT(info.format, DS_TORCH_TRACE_LEGACY);
    CHECK_INT(info.events, 11);
    CHECK_INT(info.iterations, 1);
    CHECK_NEAR(info.iteration_median_s, 1e-3, 1e-12);
    ds_strategy_t s = strategy_of(model, "dp=1,tp=1,pp=1,mbs=2,gbs=2", 1);
    ds_cost_table_t *costs = NULL;
    CHECK_OK(ds_cost_table_create(&costs));
    ds_framework_result_t r;
    CHECK_OK(ds_torch_trace_map(trace, model, &s, 0, costs, &r));
    CHECK_INT(r.ranges_mapped,
              2); /* the layer pass (the one outside the step is not) and the step */
    CHECK_NEAR(r.traced_s, 1e-3, 1e-9);
    CHECK_NEAR(r.mapped_s, 7e-4, 1e-9);
    CHECK_NEAR(r.coverage, 0.7, 1e-9);
    CHECK_NEAR(r.collective_s, 80e-6, 1e-9); /* 320 to the end of gloo's work, 400 */
    /* Each operator its own time: layernorm 110..150, the qkv GEMM (aten::addmm inside
     * aten::linear) 210..290, the scores' bmm 450..500; end to end they run 100..150,
     * 150..290 and 290..700 less the collective's 80 (its tail to the range's end
     * included), and the rest, 520 - 170, is the pass's framework gap (the model's 13
     * compute operators of a layer's forward, part 0: a layer) */
    ds_event_key_t key;
    CHECK_OK(ds_event_key_parse("layernorm fwd fp32 rows=128 cols=128", &key));
    const ds_cost_t *cost = ds_cost_table_find(costs, &key);
    CHECK(cost != NULL && fabs(cost->mean_s - 40e-6) < 1e-9);
    CHECK_OK(ds_event_key_parse("gemm fwd fp32 NT m=128 n=384 k=128", &key));
    cost = ds_cost_table_find(costs, &key);
    CHECK(cost != NULL && fabs(cost->mean_s - 80e-6) < 1e-9);
    CHECK_OK(ds_event_key_parse("bgemm fwd fp32 NT m=64 n=64 k=32 batch=8", &key));
    cost = ds_cost_table_find(costs, &key);
    CHECK(cost != NULL && fabs(cost->mean_s - 50e-6) < 1e-9);
    CHECK_NEAR(cost_of(costs, "framework_gap fwd fp32 ops=13 part=0", NULL), 350e-6, 1e-9);
    CHECK(r.model_ops_unmatched > 0);
    /* unmapped: the step's time outside the ranges: zeros (50), idle (250) */
    bool zeros = false, idle = false;
    for (size_t i = 0; i < r.num_unmapped; i++) {
        zeros |= strcmp(r.unmapped[i].name, "aten::zeros") == 0 &&
                 fabs(r.unmapped[i].seconds - 50e-6) < 1e-9;
        idle |= strcmp(r.unmapped[i].name, "(idle)") == 0 &&
                fabs(r.unmapped[i].seconds - 250e-6) < 1e-9;
    }
    CHECK(zeros && idle);
    ds_cost_table_destroy(costs);
out:
    ds_model_destroy(model);
    ds_torch_trace_destroy(trace);
}

/* A CUDA trace written by hand to Kineto's format (make_kineto_fixtures.py):
 * costs are device time, found through the correlation ids, not the CPU
 * operators' time.  The fixture's GPU waits on the CPU's launches, as small
 * models' do: each operator is charged from where the device finished the
 * matched operator before it to where its own work ends (device times below,
 * us, from the fixture's kernels), so idle time between kernels is not lost. */
static void check_gpu(void)
{
    mapping_t m;
    if (!mapping_open(&m, load("gpu-kineto.json"), tiny_model()))
        goto out;
    CHECK_INT(m.info.format, DS_TORCH_TRACE_KINETO);
    CHECK_INT(m.info.iterations, 1); /* the step's gpu_user_annotation copy is not another */
    CHECK_INT(m.info.ranges, 2);     /* layer 0 forward and the optimizer, not their GPU copies */
    CHECK_INT(m.info.kernels, 20);
    CHECK_INT(m.info.kernels_linked, 19); /* one kernel's launch is not in the trace */
    ds_strategy_t s = strategy_of(m.model, "dp=1,tp=1,pp=1,mbs=2,gbs=2", 1);
    ds_framework_result_t r;
    CHECK_OK(ds_torch_trace_map(m.trace, m.model, &s, 0, m.costs, &r));
    CHECK(r.device_timed);
    CHECK_INT(r.ranges_mapped, 2);
    CHECK_INT(r.keys, 13); /* 11 operators, the pass's framework gap, the optimizer */
    CHECK_INT(r.model_ops_unmatched, 0);
    CHECK_INT(r.shapes_checked, 6); /* 4 GEMMs, 2 batched */
    int64_t n = 0;
    /* Each operator its own device work: layer norm, its kernel 1021.5 to 1026.0 (both
     * times); qkv, launched with cuLaunchKernel from aten::addmm inside aten::linear (45 us
     * of CPU), its 21 us kernel */
    CHECK_NEAR(cost_of(m.costs, "layernorm fwd fp32 rows=128 cols=128", &n), 4.5e-6, 1e-9);
    CHECK_INT(n, 2);
    CHECK_NEAR(cost_of(m.costs, "gemm fwd fp32 NT m=128 n=384 k=128", NULL), 21.0e-6, 1e-9);
    CHECK_NEAR(cost_of(m.costs, "bgemm fwd fp32 NT m=64 n=64 k=32 batch=8", NULL), 7.25e-6, 1e-9);
    CHECK_NEAR(cost_of(m.costs, "softmax fwd fp32 rows=512 cols=64 causal", NULL), 3.0e-6, 1e-9);
    CHECK_NEAR(cost_of(m.costs, "dropout fwd fp32 rows=512 cols=64", NULL), 2.5e-6, 1e-9);
    CHECK_NEAR(cost_of(m.costs, "bgemm fwd fp32 NN m=64 n=32 k=64 batch=8", NULL), 6.75e-6, 1e-9);
    CHECK_NEAR(cost_of(m.costs, "gemm fwd fp32 NT m=128 n=128 k=128", NULL), 9.5e-6, 1e-9);
    CHECK_NEAR(cost_of(m.costs, "dropout_add fwd fp32 rows=128 cols=128", &n), 2.0e-6, 1e-9);
    CHECK_INT(n, 2);
    /* fc1: its kernel and a memset (gpu_memset) */
    CHECK_NEAR(cost_of(m.costs, "gemm fwd fp32 NT m=128 n=512 k=128", NULL), 25.0e-6, 1e-9);
    CHECK_NEAR(cost_of(m.costs, "gelu fwd fp32 rows=128 cols=512", NULL), 4.0e-6, 1e-9);
    CHECK_NEAR(cost_of(m.costs, "gemm fwd fp32 NT m=128 n=128 k=512", NULL), 23.0e-6, 1e-9);
    /* The rest of the pass's device time, 1021.5 to 1458.0 (436.5 us) less the matched
     * operators' 115: idle time while the CPU launched the kernels, and the work of
     * operators the model has no event for (the adds, a contiguous copy). */
    CHECK_NEAR(cost_of(m.costs, "framework_gap fwd fp32 ops=13 part=0", &n), 321.5e-6, 1e-9);
    CHECK_INT(n, 1);
    bool optimizer = false;
    for (size_t i = 0; i < ds_cost_table_size(m.costs); i++) {
        const ds_event_key_t *key;
        const ds_cost_t *cost;
        ds_cost_table_at(m.costs, i, &key, &cost);
        CHECK_INT(cost->provenance, DS_PROV_FRAMEWORK);
        if (key->op == DS_OP_OPTIMIZER) /* two multi-tensor-apply kernels, 30 + 20 us, 1471.0 to
                                           1521.5 */
            optimizer = fabs(cost->mean_s - 50.5e-6) < 1e-9;
    }
    CHECK(optimizer);
    CHECK_NEAR(r.kernel_s, 165.0e-6, 1e-9);
    CHECK_NEAR(r.kernel_other_s, 6.0e-6, 1e-9); /* the adds (1.5 + 1.5) and a copy (3) */
    /* beyond the matched work (115 us in the pass, 50 in the optimizer): the pass's
     * 1021.5 to 1458.0 and the optimizer's 50.5 */
    CHECK_NEAR(r.device_gap_s, (436.5 - 115.0 + 0.5) * 1e-6, 1e-9);
    /* validate's pass times are device time too: from the pass's first work to its last */
    size_t count = 0;
    double mean = 0.0;
    ds_torch_trace_part_time(m.trace, DS_FRAMEWORK_LAYER_FORWARD, &count, &mean);
    CHECK_INT(count, 1);
    CHECK_NEAR(mean, 436.5e-6, 1e-9);
    ds_torch_trace_part_time(m.trace, DS_FRAMEWORK_OPTIMIZER, &count, &mean);
    CHECK_NEAR(mean, 50.5e-6, 1e-9);
out:
    mapping_close(&m);
}

/* Kineto traces with record_shapes: a GEMM's Input Dims must agree with the
 * model's key where it is matched (re-paired where torch issues a pair in the
 * other order), and a trace of another run is refused with one line. */
static void check_shapes(void)
{
    static const char text[] =
        "{\"traceEvents\": ["
        " {\"ph\": \"X\", \"cat\": \"user_annotation\", \"name\": \"ProfilerStep#0\", \"ts\": 0,"
        "  \"dur\": 1000, \"pid\": 1, \"tid\": 1},"
        " {\"ph\": \"X\", \"cat\": \"user_annotation\", \"name\": \"head:bwd\", \"ts\": 100,"
        "  \"dur\": 800, \"pid\": 1, \"tid\": 1},"
        " {\"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"aten::nll_loss_backward\", \"ts\": 110,"
        "  \"dur\": 40, \"pid\": 1, \"tid\": 1, \"args\": {\"Input Dims\": [[], [128, 4096]]}},"
        /* the weight gradient first, as torch issues it: m=4096 n=128 k=128 */
        " {\"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"aten::mm\", \"ts\": 200, \"dur\": 100,"
        "  \"pid\": 1, \"tid\": 1, \"args\": {\"Input Dims\": [[4096, 128], [128, 128]]}},"
        /* then the input gradient: m=128 n=128 k=4096 */
        " {\"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"aten::mm\", \"ts\": 400, \"dur\": 200,"
        "  \"pid\": 1, \"tid\": 1, \"args\": {\"Input Dims\": [[128, 4096], [4096, 128]]}},"
        " {\"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"aten::native_layer_norm_backward\","
        "  \"ts\": 700, \"dur\": 100, \"pid\": 1, \"tid\": 1,"
        "  \"args\": {\"Input Dims\": [[2, 64, 128], [2, 64, 128]]}}]}";
    mapping_t m;
    if (!mapping_parse(&m, text, "shapes.json", tiny_model()))
        goto out;
    ds_strategy_t s = strategy_of(m.model, "dp=1,tp=1,pp=1,mbs=2,gbs=2", 1);
    ds_framework_result_t r;
    CHECK_OK(ds_torch_trace_map(m.trace, m.model, &s, 0, m.costs, &r));
    CHECK_INT(r.shapes_checked, 2);
    CHECK_INT(r.model_ops_unmatched, 0);
    /* each its own time, paired by shape: the weight gradient 200..300, the input
     * gradient 400..600 (in the model's order they would have been swapped) */
    CHECK_NEAR(cost_of(m.costs, "gemm bwd fp32 TN m=4096 n=128 k=128", NULL), 100e-6, 1e-9);
    CHECK_NEAR(cost_of(m.costs, "gemm bwd fp32 NN m=128 n=128 k=4096", NULL), 200e-6, 1e-9);
    CHECK_NEAR(cost_of(m.costs, "layernorm bwd fp32 rows=128 cols=128", NULL), 100e-6, 1e-9);
    /* A model run with one sequence per micro-batch: m is 64, the trace's 128. */
    ds_strategy_t other = strategy_of(m.model, "dp=1,tp=1,pp=1,mbs=1,gbs=1", 1);
    ds_cost_table_t *none = NULL;
    CHECK_OK(ds_cost_table_create(&none));
    CHECK_FAILS(ds_torch_trace_map(m.trace, m.model, &other, 0, none, &r), DS_ERR_INVALID_ARG,
                "Input Dims");
    const char *message = ds_last_error();
    CHECK_MSG(strstr(message, "shapes.json: head:bwd") != NULL &&
                  strstr(message, "expects 'gemm bwd fp32 NN m=64 n=128 k=4096' "
                                  "(head.logits.dgrad)") != NULL &&
                  strstr(message, "aten::mm with Input Dims m=4096 n=128 k=128") != NULL &&
                  strchr(message, '\n') == NULL,
              "'%s'", message);
    CHECK_INT(ds_cost_table_size(none), 0);
    ds_cost_table_destroy(none);
    /* The real Kineto fixture agrees with the model it ran, re-paired where needed. */
    ds_torch_trace_t *real = load("single-kineto.json");
    ds_cost_table_t *real_costs = NULL;
    CHECK_OK(ds_cost_table_create(&real_costs));
    if (real != NULL && real_costs != NULL) {
        CHECK_OK(ds_torch_trace_map(real, m.model, &s, 0, real_costs, &r));
        CHECK_INT(r.shapes_checked, 21); /* 6 forward, 12 backward GEMMs of the layer, 3 head */
        CHECK_FAILS(ds_torch_trace_map(real, m.model, &other, 0, real_costs, &r),
                    DS_ERR_INVALID_ARG, "attn.qkv");
    }
    ds_cost_table_destroy(real_costs);
    ds_torch_trace_destroy(real);
out:
    mapping_close(&m);
}

/* Layer ranges from with_stack's module events (make_kineto_fixtures.py:
 * Megatron-Core's GPTModel > TransformerBlock > TransformerLayer, two
 * micro-batches); the backward passes through the sequence numbers. */
static void check_modules(void)
{
    mapping_t m;
    ds_framework_result_t r;
    if (!mapping_open(&m, load("modules-kineto.json"), tiny_model()))
        goto out;
    /* TransformerLayer_0 twice forward, twice backward; not the TransformerBlock around it */
    CHECK_INT(m.info.ranges, 4);
    ds_strategy_t s = strategy_of(m.model, "dp=1,tp=1,pp=1,mbs=2,gbs=4", 1);
    CHECK_OK(ds_torch_trace_map(m.trace, m.model, &s, 0, m.costs, &r));
    CHECK_INT(r.ranges_mapped, 4);
    CHECK_INT(r.ranges_skipped, 0);
    CHECK_INT(r.keys, 28);               /* 11 forward, 15 backward, the two passes' gaps */
    CHECK_INT(r.shapes_checked, 36);     /* 6 forward and 12 backward GEMMs, twice */
    CHECK_INT(r.model_ops_unmatched, 4); /* the residuals' backward: no operator in torch */
    CHECK(r.coverage > DS_FRAMEWORK_MIN_COVERAGE);
    double total = 0.0;
    for (size_t i = 0; i < ds_cost_table_size(m.costs); i++) {
        const ds_event_key_t *key;
        const ds_cost_t *cost;
        ds_cost_table_at(m.costs, i, &key, &cost);
        total += cost->mean_s * (double)cost->repetitions;
    }
    CHECK_NEAR(total, r.mapped_s, 1e-6); /* CPU costs and the gaps fill the passes */
    int64_t n = 0;
    cost_of(m.costs, "gemm bwd fp32 TN m=512 n=128 k=128", &n); /* fc1's weight gradient */
    CHECK_INT(n, 2);
    size_t count = 0;
    double fwd = 0.0, bwd = 0.0;
    ds_torch_trace_part_time(m.trace, DS_FRAMEWORK_LAYER_FORWARD, &count, &fwd);
    CHECK_INT(count, 2);
    ds_torch_trace_part_time(m.trace, DS_FRAMEWORK_LAYER_BACKWARD, &count, &bwd);
    CHECK_INT(count, 2);
    CHECK(fwd > 0.0 && bwd > fwd); /* the backward pass: from its first autograd function */
out:
    mapping_close(&m);

    /* Module numbers count the layers of the traced stage: on stage 1 of a 4-layer model
     * under pp=2, GPT2Block_1 is layer 3, and GPT2Block_2 is beyond the stage. */
    static const char text[] =
        "[{\"ph\": \"X\", \"name\": \"ProfilerStep#0\", \"ts\": 0, \"dur\": 1000, \"tid\": 1},"
        " {\"ph\": \"X\", \"cat\": \"python_function\", \"name\": \"nn.Module: GPT2Block_1\","
        "  \"ts\": 100, \"dur\": 300, \"tid\": 1},"
        " {\"ph\": \"X\", \"name\": \"aten::layer_norm\", \"ts\": 110, \"dur\": 40, \"tid\": 1},"
        " {\"ph\": \"X\", \"cat\": \"python_function\", \"name\": \"nn.Module: GPT2Block_2\","
        "  \"ts\": 500, \"dur\": 300, \"tid\": 1},"
        " {\"ph\": \"X\", \"name\": \"aten::layer_norm\", \"ts\": 510, \"dur\": 40, \"tid\": 1},"
        " {\"ph\": \"X\", \"name\": \"nn.Module: GPT2Model_0\", \"ts\": 50, \"dur\": 900,"
        "  \"tid\": 1},"
        " {\"ph\": \"X\", \"name\": \"nn.Module: Block_x\", \"ts\": 60, \"dur\": 10, \"tid\": 1}]";
    if (mapping_parse(&m, text, "stage.json", model_named("gpt2-tiny.json"))) {
        CHECK_INT(m.info.ranges, 2);
        ds_strategy_t pp = strategy_of(m.model, "dp=1,tp=1,pp=2,mbs=2,gbs=4", 2);
        CHECK_OK(ds_torch_trace_map(m.trace, m.model, &pp, 1, m.costs, &r));
        CHECK_INT(r.ranges_mapped, 1);
        CHECK_INT(r.ranges_skipped, 1);
    }
    mapping_close(&m);
}

/* `text` as a gzip file of `members` members (the text split evenly), as
 * gzip(1) or Python's gzip module writes it.  Caller frees. */
static unsigned char *gzip_text(const char *text, int members, size_t *size_p)
{
    size_t length = strlen(text), capacity = length + 64 * (size_t)members + 1024, used = 0;
    unsigned char *out = malloc(capacity);
    for (int i = 0; out != NULL && i < members; i++) {
        size_t from = length * (size_t)i / (size_t)members;
        size_t to = length * (size_t)(i + 1) / (size_t)members;
        z_stream z;
        memset(&z, 0, sizeof(z));
        CHECK(deflateInit2(&z, 9, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) == Z_OK);
        z.next_in = (Bytef *)(uintptr_t)(text + from);
        z.avail_in = (uInt)(to - from);
        z.next_out = out + used;
        z.avail_out = (uInt)(capacity - used);
        CHECK(deflate(&z, Z_FINISH) == Z_STREAM_END);
        used = capacity - z.avail_out;
        deflateEnd(&z);
    }
    *size_p = used;
    return out;
}

/* gzip-compressed traces read as the JSON they hold; truncated, corrupt and
 * trailing bytes refused with one line. */
static void check_gzip(void)
{
    for (int members = 1; members <= 2; members++) {
        size_t size = 0;
        unsigned char *gz = gzip_text(synthetic_trace, members, &size);
        if (gz == NULL)
            return;
        ds_torch_trace_t *trace = NULL;
        CHECK_OK(ds_torch_trace_parse((const char *)gz, size, "synthetic.json.gz", &trace));
        if (trace != NULL) {
            ds_torch_trace_info_t info;
            ds_torch_trace_get_info(trace, &info);
            CHECK_INT(info.events, 11);
            CHECK_INT(info.iterations, 1);
            CHECK_NEAR(info.iteration_median_s, 1e-3, 1e-12);
        }
        ds_torch_trace_destroy(trace);
        if (members == 1) {
            check_refused_bytes(gz, size - 9, "cut.json.gz", "truncated gzip");
            check_refused_bytes(gz, size / 2, "half.json.gz", "truncated gzip");
            unsigned char *bad = malloc(size + 4);
            if (bad != NULL) {
                memcpy(bad, gz, size);
                bad[size - 6] ^= 0x5a; /* the CRC-32 of the content */
                check_refused_bytes(bad, size, "crc.json.gz", "corrupt gzip");
                memcpy(bad, gz, size);
                memcpy(bad + size, "junk", 4);
                check_refused_bytes(bad, size + 4, "trailing.json.gz", "after the end");
                free(bad);
            }
        }
        free(gz);
    }
    /* The content is parsed as any trace: gzip of a non-trace is refused as one. */
    size_t size = 0;
    unsigned char *gz = gzip_text("{\"traceEvents\": 3}", 1, &size);
    if (gz != NULL)
        check_refused_bytes(gz, size, "object.json.gz", "not a torch.profiler trace");
    free(gz);
}

/* The job's iteration without the profiler: a CPU trace's costs scaled by
 * it over the traced median, a GPU trace's kept; a bad time refused. */
static void check_unprofiled(void)
{
    mapping_t plain, scaled, gpu;
    memset(&plain, 0, sizeof(plain));
    memset(&scaled, 0, sizeof(scaled));
    memset(&gpu, 0, sizeof(gpu));
    if (!mapping_open(&plain, load("single-legacy.json"), tiny_model()) ||
        !mapping_open(&scaled, load("single-legacy.json"), tiny_model()) ||
        !mapping_open(&gpu, load("gpu-kineto.json"), tiny_model()))
        goto out;
    ds_strategy_t s = strategy_of(plain.model, "dp=1,tp=1,pp=1,mbs=2,gbs=2", 1);
    double bad[] = {0.0, -1.0, NAN, INFINITY};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        CHECK_FAILS(ds_torch_trace_set_unprofiled_s(scaled.trace, bad[i], NULL), DS_ERR_INVALID_ARG,
                    "unprofiled iteration time");
    double factor = 0.0;
    CHECK_OK(ds_torch_trace_set_unprofiled_s(scaled.trace, 0.6 * scaled.info.iteration_median_s,
                                             &factor));
    CHECK_NEAR(factor, 0.6, 1e-12);
    ds_framework_result_t rp, rs;
    CHECK_OK(ds_torch_trace_map(plain.trace, plain.model, &s, 0, plain.costs, &rp));
    CHECK_OK(ds_torch_trace_map(scaled.trace, scaled.model, &s, 0, scaled.costs, &rs));
    CHECK(rp.unprofiled_scale == 0.0 && rp.profiler_removed_s == 0.0);
    CHECK_NEAR(rs.unprofiled_scale, 0.6, 1e-12);
    CHECK_INT(ds_cost_table_size(scaled.costs), ds_cost_table_size(plain.costs));
    double total = 0.0;
    for (size_t i = 0; i < ds_cost_table_size(plain.costs); i++) {
        const ds_event_key_t *key;
        const ds_cost_t *cost;
        ds_cost_table_at(plain.costs, i, &key, &cost);
        const ds_cost_t *other = ds_cost_table_find(scaled.costs, key);
        CHECK(other != NULL);
        if (other == NULL)
            continue;
        CHECK_NEAR(other->mean_s, 0.6 * cost->mean_s, 1e-12);
        CHECK_NEAR(other->median_s, 0.6 * cost->median_s, 1e-12);
        total += cost->mean_s * (double)cost->repetitions;
    }
    /* what came off: 40% of the costs, which add up to the mapped time */
    CHECK_NEAR(rs.profiler_removed_s, 0.4 * total, 1e-9);
    CHECK_NEAR(total, rp.mapped_s - rp.collective_s, 1e-6);
    /* device time is not the profiler's: a GPU trace keeps its costs */
    CHECK_OK(ds_torch_trace_set_unprofiled_s(gpu.trace, 0.5 * gpu.info.iteration_median_s, NULL));
    ds_framework_result_t rg;
    CHECK_OK(ds_torch_trace_map(gpu.trace, gpu.model, &s, 0, gpu.costs, &rg));
    CHECK(rg.device_timed && rg.unprofiled_scale == 0.0 && rg.profiler_removed_s == 0.0);
    CHECK_NEAR(cost_of(gpu.costs, "gemm fwd fp32 NT m=128 n=384 k=128", NULL), 21.0e-6, 1e-9);
out:
    mapping_close(&plain);
    mapping_close(&scaled);
    mapping_close(&gpu);
}

int main(int argc, char **argv)
{
    data_dir = argc > 1 ? argv[1] : DSMPI_TEST_DATA;
    check_fixture("single-legacy.json", DS_TORCH_TRACE_LEGACY, false, "dp=1,tp=1,pp=1,mbs=2,gbs=2",
                  1);
    check_fixture("single-kineto.json", DS_TORCH_TRACE_KINETO, true, "dp=1,tp=1,pp=1,mbs=2,gbs=2",
                  1);
    check_fixture("tp2-rank0-legacy.json", DS_TORCH_TRACE_LEGACY, false,
                  "dp=1,tp=2,pp=1,mbs=2,gbs=2", 2);
    check_calibration();
    check_calibration_by_size();
    check_synthetic();
    check_gzip();
    check_gpu();
    check_unprofiled();
    check_shapes();
    check_modules();
    return check_summary("test_torch_trace");
}
