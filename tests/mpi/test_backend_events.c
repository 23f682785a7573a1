/* Every compute event ds_events_generate produces for several models runs
 * on the cpu backend: GPT-2 medium (tp=2 with sequence parallelism),
 * LLaMA-3 8B (tp=2, full recompute), BERT-large, T5-large, a gated-GeLU
 * model from a Hugging Face config and a layer-list CNN.  Shapes are cut
 * down (each dimension capped) so the whole set runs in seconds; the
 * outputs must be finite and not all zero.  Then a real transformer layer
 * pass runs as a unit, its operators feeding each other. */
#include "check.h"

#include "backend/cpu/dsi_cpu_backend.h"
#include "model/dsi_model.h"

#include <math.h>
#include <string.h>

static const char *const layer_list_cnn =
    "{\"format\": \"dsmpi-layers\", \"name\": \"cnn\", \"dtype\": \"fp32\", \"global_batch\": 64,"
    " \"classes\": 10, \"layers\": [{\"name\": \"block\", \"repeat\": 4, \"ops\": ["
    "  {\"op\": \"conv2d\", \"in_channels\": 16, \"out_channels\": 16, \"kernel\": 3,"
    "   \"height\": 16, \"width\": 16},"
    "  {\"op\": \"norm\", \"channels\": 16, \"elements\": 4096},"
    "  {\"op\": \"relu\", \"elements\": 4096},"
    "  {\"op\": \"pool\", \"elements\": 4096},"
    "  {\"op\": \"dropout\", \"elements\": 4096},"
    "  {\"op\": \"add\", \"elements\": 4096},"
    "  {\"op\": \"linear\", \"in_features\": 256, \"out_features\": 256, \"rows\": 16,"
    "   \"parallel\": \"column\"},"
    "  {\"op\": \"gelu\", \"elements\": 4096},"
    "  {\"op\": \"linear\", \"in_features\": 256, \"out_features\": 256, \"rows\": 16,"
    "   \"parallel\": \"row\"},"
    "  {\"op\": \"softmax\", \"rows\": 16, \"cols\": 256}]}]}";

static const char *const hf_geglu =
    "{\"model_type\": \"llama\", \"_name_or_path\": \"tiny-geglu\", \"num_hidden_layers\": 4,"
    " \"hidden_size\": 512, \"num_attention_heads\": 8, \"num_key_value_heads\": 2,"
    " \"intermediate_size\": 1024, \"vocab_size\": 1000, \"hidden_act\": \"gelu\","
    " \"max_position_embeddings\": 256}";

typedef struct model_case {
    const char *spec; /* preset name, or NULL: json */
    const char *json;
    const char *strategy;
    int64_t gpus;
    int64_t seq_len; /* 0: the model's */
} model_case_t;

static const model_case_t cases[] = {
    {"gpt2-medium", NULL, "tp=2,pp=2,sp,mbs=2", 16, 256},
    {"llama3-8b", NULL, "tp=2,pp=4,recompute=full,mbs=1", 16, 256},
    {"bert-large", NULL, "tp=1,pp=2,mbs=4", 8, 128},
    {"t5-large", NULL, "tp=2,pp=1,mbs=2", 8, 0},
    {NULL, NULL, "tp=1,pp=1,mbs=2,recompute=selective", 4, 64}, /* the GeGLU config */
    {NULL, NULL, "tp=2,pp=2,mbs=4", 8, 0},                      /* the CNN */
    {"llama3-8b", NULL, "tp=2,pp=4,mbs=1,flash,fp8=hybrid", 16, 256},
    {"mixtral-8x7b", NULL, "tp=2,sp,ep=4,mbs=1", 16, 256}, /* MoE: aux loss, grouped GEMMs */
};

/* Caps every dimension so a key runs in milliseconds; keeps what the
 * operator's definition needs (causal softmax rows a multiple of cols, rope
 * widths whole heads). */
static ds_event_key_t shrink(ds_event_key_t key)
{
    int64_t *d = key.dims;
    switch ((ds_op_t)key.op) {
    case DS_OP_GEMM:
    case DS_OP_BATCHED_GEMM:
        for (int i = 0; i < 3; i++)
            d[i] = d[i] > 192 ? 192 : d[i];
        if (key.op == DS_OP_BATCHED_GEMM && d[3] > 4)
            d[3] = 4;
        break;
    case DS_OP_SOFTMAX:
        if (d[1] > 256)
            d[1] = 256;
        if (d[0] > 2 * d[1])
            d[0] = 2 * d[1];
        break;
    case DS_OP_ROPE:
        if (d[0] > 64)
            d[0] = 64;
        while (d[1] > 1024 && d[1] % 256 == 0)
            d[1] /= 2;
        break;
    case DS_OP_EMBEDDING:
        d[0] = d[0] > 64 ? 64 : d[0];
        d[1] = d[1] > 512 ? 512 : d[1];
        d[2] = d[2] > 4096 ? 4096 : d[2];
        break;
    case DS_OP_OPTIMIZER: d[0] = d[0] > (1 << 18) ? (1 << 18) : d[0]; break;
    case DS_OP_FLASH_ATTENTION: { /* one sequence, two KV heads of two queries each */
        ds_attention_shape_t a = ds_attention_shape_of(&key);
        int64_t group = a.heads / a.kv_heads;
        a.batch = 1;
        a.kv_heads = a.kv_heads > 2 ? 2 : a.kv_heads;
        a.heads = a.kv_heads * (group > 2 ? 2 : group);
        a.seq_q = a.seq_q > 128 ? 128 : a.seq_q;
        a.seq_k = a.seq_k > 128 ? 128 : a.seq_k;
        ds_attention_shape_set(&key, &a);
        break;
    }
    default:
        d[0] = d[0] > 64 ? 64 : d[0];
        d[1] = d[1] > 4096 ? 4096 : d[1];
        break;
    }
    return key;
}

/* The buffer a kernel's work lands in. */
static int result_buffer(const ds_kernel_t *k, const ds_event_key_t *key)
{
    int in = -1, out = -1, bf16 = 0;
    dsi_cpu_kernel_roles(k, &in, &out, &bf16);
    if (out >= 0)
        return out;
    if (key->op == DS_OP_EMBEDDING)
        return 2; /* the table's gradient */
    if (key->op == DS_OP_CROSS_ENTROPY)
        return 3; /* the loss */
    return 0;     /* the optimizer's weights */
}

static int finite_and_nonzero(const ds_kernel_t *k, int index, int bf16)
{
    void *p = NULL;
    size_t bytes = 0;
    if (!dsi_cpu_kernel_buffer(k, index, &p, &bytes))
        return 0;
    size_t n = bytes / (bf16 ? 2 : 4), nonzero = 0;
    for (size_t i = 0; i < n; i++) {
        float v = bf16 ? dsi_bf16_to_f32(((const uint16_t *)p)[i]) : ((const float *)p)[i];
        if (!isfinite(v))
            return 0;
        nonzero += v != 0.0f;
    }
    return nonzero > 0;
}

static int ops_seen[DS_OP_COUNT_];

static void run_case(ds_backend_t *b, const model_case_t *c, int *events_p)
{
    ds_model_t *model = NULL;
    ds_strategy_t strategy;
    ds_cluster_t cluster;
    ds_event_set_t *set = NULL;
    const char *json = c == &cases[4] ? hf_geglu : c == &cases[5] ? layer_list_cnn : NULL;
    if (json != NULL)
        CHECK_OK(ds_model_load_json(json, strlen(json), "test", &model));
    else
        CHECK_OK(ds_model_load(c->spec, &model));
    if (model == NULL)
        return;
    if (c->seq_len > 0)
        CHECK_OK(ds_model_set_seq_len(model, c->seq_len));
    ds_strategy_init(&strategy);
    CHECK_OK(ds_strategy_parse(c->strategy, &strategy));
    CHECK_OK(ds_cluster_from_gpus(&cluster, c->gpus, 8));
    CHECK_OK(ds_strategy_resolve(&strategy, model, c->gpus, 8));
    CHECK_OK(ds_events_generate(model, &strategy, &cluster, &set));
    if (set == NULL) {
        ds_model_destroy(model);
        return;
    }
    int compute = 0;
    for (size_t i = 0; i < ds_event_set_size(set); i++) {
        const ds_event_t *e = ds_event_set_at(set, i);
        if (e->key.kind != DS_EVENT_COMPUTE)
            continue;
        compute++;
        ds_event_key_t key = shrink(e->key);
        char text[256];
        ds_event_key_format(&e->key, text, sizeof(text));
        ds_kernel_t *k = NULL;
        ds_status_t status = ds_kernel_prepare(b, &key, &k);
        CHECK_MSG(status == DS_OK, "%s: %s", text, ds_last_error());
        if (k == NULL)
            continue;
        CHECK_OK(ds_kernel_run(k));
        CHECK_OK(ds_kernel_run(k)); /* a second run: masks, steps, accumulators */
        CHECK_OK(ds_backend_synchronize(b));
        int in = -1, out = -1, bf16 = 0;
        dsi_cpu_kernel_roles(k, &in, &out, &bf16);
        int result = result_buffer(k, &key);
        CHECK_MSG(finite_and_nonzero(k, result, result == out && bf16),
                  "%s [%s]: result not finite or all zero", text, e->label);
        ops_seen[key.op]++;
        ds_kernel_destroy(k);
    }
    CHECK_MSG(compute > 5, "%s: %d compute events", c->strategy, compute);
    *events_p += compute;
    ds_event_set_destroy(set);
    ds_model_destroy(model);
}

/* One transformer layer pass of the GeGLU model, forward and backward with
 * selective recompute, measured as a unit. */
static void test_layer_pass(ds_backend_t *b)
{
    ds_model_t *model = NULL;
    CHECK_OK(ds_model_load_json(hf_geglu, strlen(hf_geglu), "test", &model));
    if (model == NULL)
        return;
    CHECK_OK(ds_model_set_seq_len(model, 64));
    dsi_shape_ctx_t ctx = {.mbs = 2,
                           .tp = 1,
                           .sp = 0,
                           .recompute = DS_RECOMPUTE_SELECTIVE,
                           .dtype = DS_DTYPE_FP32,
                           .cp = 1,
                           .cp_comm = DS_CP_COMM_P2P};
    static dsi_op_t ops[DSI_MAX_LAYER_OPS];
    ds_event_key_t keys[DSI_MAX_LAYER_OPS];
    for (int pass = DS_PASS_FORWARD; pass <= DS_PASS_BACKWARD; pass++) {
        size_t count = 0;
        CHECK_OK(
            dsi_model_layer_ops(model, 1, &ctx, (ds_pass_t)pass, ops, DSI_MAX_LAYER_OPS, &count));
        for (size_t i = 0; i < count; i++)
            keys[i] = ops[i].key;
        /* Operators feed each other: most consecutive pairs chain. */
        ds_kernel_t *kernels[DSI_MAX_LAYER_OPS] = {NULL};
        int chained = 0, pairs = 0;
        for (size_t i = 0; i < count; i++) {
            CHECK_OK(ds_kernel_prepare(b, &keys[i], &kernels[i]));
            if (i > 0 && kernels[i] != NULL && kernels[i - 1] != NULL) {
                int yes = 0;
                CHECK_OK(b->ops->kernel_chain(kernels[i]->impl, kernels[i - 1]->impl, &yes));
                chained += yes;
                pairs++;
            }
        }
        CHECK_MSG(2 * chained >= pairs, "pass %d: %d of %d operator pairs chained", pass, chained,
                  pairs);
        for (size_t i = 0; i < count; i++)
            ds_kernel_destroy(kernels[i]);

        ds_measure_config_t cfg;
        ds_measure_config_default(&cfg);
        cfg.budget_s = 0.2;
        ds_measurement_t total, per_op[DSI_MAX_LAYER_OPS];
        CHECK_OK(ds_measure_layer(b, keys, count, &cfg, &total, per_op));
        double sum = 0;
        for (size_t i = 0; i < count; i++) {
            CHECK(per_op[i].cost.repetitions == total.cost.repetitions);
            CHECK(per_op[i].cost.median_s > 0.0);
            sum += per_op[i].cost.mean_s;
        }
        CHECK_NEAR(sum, total.cost.mean_s, 1e-6);
        printf("layer pass %s: %zu operators, %.3f ms median (%lld repetitions, %s)\n",
               pass == DS_PASS_FORWARD ? "forward " : "backward", count, total.cost.median_s * 1e3,
               (long long)total.cost.repetitions, ds_stop_reason_name(total.stop));
    }
    ds_model_destroy(model);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    ds_backend_t *b = NULL;
    CHECK_OK(ds_backend_open(DS_BACKEND_CPU, MPI_COMM_WORLD, &b));
    if (b != NULL) {
        int events = 0;
        for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
            run_case(b, &cases[i], &events);
        printf("%d compute events prepared and run\n", events);
        /* Every operator the event model generates was covered (a framework's gap
         * between operators is imported from its trace, never generated). */
        for (int op = 0; op < DS_OP_COUNT_; op++)
            CHECK_MSG(ops_seen[op] > 0 || op == DS_OP_FRAMEWORK_GAP, "operator %d never generated",
                      op);
        test_layer_pass(b);
        ds_backend_close(b);
    }
    int code = check_summary("test_backend_events");
    MPI_Finalize();
    return code;
}
