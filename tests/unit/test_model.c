/* Models: preset and Hugging Face parameter counts, layer shapes after the
 * TP/SP split, layer lists, and bad inputs. */
#include "check.h"

#include "model/dsi_model.h"
#include <math.h>
#include <stdlib.h>

static ds_model_t *load(const char *spec)
{
    ds_model_t *model = NULL;
    ds_status_t status = ds_model_load(spec, &model);
    CHECK_MSG(status == DS_OK, "loading %s: %s", spec, ds_last_error());
    return model;
}

static int64_t params_of(const char *spec)
{
    ds_model_t *model = load(spec);
    ds_model_info_t info;
    if (model == NULL)
        return -1;
    ds_model_get_info(model, &info);
    ds_model_destroy(model);
    return info.num_parameters;
}

/* Megatron's count for its GPT models: 12 l h^2 (1 + 13/(12h) + (V+s)/(12lh)), plus the final
 * LayerNorm. */
static double megatron_params(double l, double h, double V, double s)
{
    return 12.0 * l * h * h + 13.0 * l * h + (V + s) * h + 2.0 * h;
}

static void test_parameter_counts(void)
{
    /* Exact counts of the released checkpoints (Hugging Face, tied weights counted once). */
    CHECK_INT(params_of("gpt2-medium"), 354823168);
    CHECK_INT(params_of("llama2-7b"), 6738415616LL);
    CHECK_INT(params_of("llama3-8b"), 8030261248LL);
    CHECK_INT(params_of("bert-large"), 335174458LL); /* BertForMaskedLM */
    CHECK_INT(params_of("t5-large"), 737668096LL);
    CHECK_NEAR(params_of("llama2-70b"), 68976648192.0, 1e-9);
    CHECK_NEAR(params_of("llama3-70b"), 70553706496.0, 1e-9);
    CHECK_NEAR(params_of("llama3-405b"), 405.8e9, 0.005);
    CHECK_NEAR(params_of("gpt3-175b"), 175e9, 0.01);
    CHECK_NEAR(params_of("gpt2-xl"), 1557611200.0, 1e-9);
    CHECK_NEAR(params_of("megatron-1t"), megatron_params(128, 25600, 51200, 2048), 1e-12);
    CHECK_NEAR(params_of("megatron-530b"), megatron_params(105, 20480, 51200, 2048), 1e-12);
    CHECK_NEAR(params_of("megatron-1.7b"), megatron_params(24, 2304, 51200, 2048), 1e-12);
    CHECK_NEAR(params_of("megatron-145b"), 145.6e9, 0.01);
    CHECK_INT(params_of("bert-exlarge"), 335174458LL + 24 * 12596224LL);
    CHECK(ds_model_preset_count() >= 21);
}

static void test_hf_configs(void)
{
    static const struct {
        const char *file;
        const char *preset; /* same architecture as this preset */
        int64_t params;
        int seq_len;
    } cases[] = {
        {"gpt2-medium.json", "gpt2-medium", 354823168, 1024},
        {"bert-large-uncased.json", "bert-large", 335174458, 512},
        {"t5-large.json", "t5-large", 737668096, 512},
        {"llama-2-7b-hf.json", "llama2-7b", 6738415616LL, 4096},
        {"meta-llama-3-8b.json", "llama3-8b", 8030261248LL, 8192},
        {"mistral-7b-v0.1.json", NULL, 7241732096LL, 8192},
    };
    for (size_t i = 0; i < DSI_ARRAY_SIZE(cases); i++) {
        char path[512];
        snprintf(path, sizeof(path), "%s/hf/%s", DSMPI_TEST_DATA, cases[i].file);
        ds_model_t *model = load(path);
        if (model == NULL)
            continue;
        ds_model_info_t info;
        ds_model_get_info(model, &info);
        CHECK_MSG(info.num_parameters == cases[i].params, "%s: %lld parameters, expected %lld",
                  cases[i].file, (long long)info.num_parameters, (long long)cases[i].params);
        CHECK_MSG(info.seq_len == cases[i].seq_len, "%s: seq %d", cases[i].file, info.seq_len);
        CHECK(info.source == DS_MODEL_HF_CONFIG);
        CHECK(ds_model_seq_len_note(model) != NULL); /* the user is told where seq came from */
        if (cases[i].preset != NULL) {
            ds_model_t *preset = load(cases[i].preset);
            ds_model_info_t p;
            ds_model_get_info(preset, &p);
            CHECK(info.arch == p.arch && info.num_layers == p.num_layers &&
                  info.hidden_size == p.hidden_size && info.num_heads == p.num_heads &&
                  info.num_kv_heads == p.num_kv_heads &&
                  info.ffn_hidden_size == p.ffn_hidden_size && info.vocab_size == p.vocab_size &&
                  info.activation == p.activation && info.norm == p.norm &&
                  info.tied_embeddings == p.tied_embeddings);
            ds_model_destroy(preset);
        }
        ds_model_destroy(model);
    }
    /* GQA and SwiGLU read from num_key_value_heads / hidden_act. */
    char path[512];
    snprintf(path, sizeof(path), "%s/hf/mistral-7b-v0.1.json", DSMPI_TEST_DATA);
    ds_model_t *mistral = load(path);
    ds_model_info_t info;
    ds_model_get_info(mistral, &info);
    CHECK_INT(info.num_kv_heads, 8);
    CHECK(info.activation == DS_ACT_SWIGLU && info.norm == DS_NORM_RMSNORM);
    CHECK_INT(info.max_positions, 32768);
    CHECK(strstr(ds_model_seq_len_note(mistral), "capped") != NULL);
    CHECK_OK(ds_model_set_seq_len(mistral, 4096));
    CHECK(ds_model_seq_len_note(mistral) == NULL);
    ds_model_destroy(mistral);
}

static const dsi_op_t *find_op(const dsi_op_t *ops, size_t n, const char *label, int nth)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(ops[i].label, label) == 0 && nth-- == 0)
            return &ops[i];
    return NULL;
}

static void check_gemm(const dsi_op_t *op, int64_t m, int64_t n, int64_t k, unsigned trans)
{
    CHECK_MSG(op != NULL, "missing GEMM %lldx%lldx%lld", (long long)m, (long long)n, (long long)k);
    if (op == NULL)
        return;
    CHECK_MSG(op->key.op == DS_OP_GEMM && op->key.dims[0] == m && op->key.dims[1] == n &&
                  op->key.dims[2] == k && op->key.variant == trans,
              "%s: got m=%lld n=%lld k=%lld trans=%u, expected %lld %lld %lld %u", op->label,
              (long long)op->key.dims[0], (long long)op->key.dims[1], (long long)op->key.dims[2],
              op->key.variant, (long long)m, (long long)n, (long long)k, trans);
    CHECK(op->flops == 2.0 * (double)m * (double)n * (double)k);
}

static size_t ops_of(const ds_model_t *model, int layer, dsi_shape_ctx_t ctx, ds_pass_t pass,
                     dsi_op_t *ops)
{
    size_t n = 0;
    CHECK_OK(dsi_model_layer_ops(model, layer, &ctx, pass, ops, DSI_MAX_LAYER_OPS, &n));
    return n;
}

static void test_gpt2_medium_tp2_shapes(void)
{
    ds_model_t *model = load("gpt2-medium");
    dsi_op_t ops[DSI_MAX_LAYER_OPS];
    dsi_shape_ctx_t ctx = {.mbs = 1,
                           .tp = 2,
                           .sp = 0,
                           .recompute = DS_RECOMPUTE_NONE,
                           .dtype = DS_DTYPE_BF16,
                           .cp = 1,
                           .cp_comm = DS_CP_COMM_P2P};
    size_t n = ops_of(model, 3, ctx, DS_PASS_FORWARD, ops);
    const unsigned NT = DS_GEMM_TRANS_B, TN = DS_GEMM_TRANS_A;
    /* T = 1024 tokens; QKV column-parallel 3h/2; projection row-parallel h/2 in. */
    check_gemm(find_op(ops, n, "attn.qkv", 0), 1024, 1536, 1024, NT);
    check_gemm(find_op(ops, n, "attn.proj", 0), 1024, 1024, 512, NT);
    check_gemm(find_op(ops, n, "mlp.fc1", 0), 1024, 2048, 1024, NT);
    check_gemm(find_op(ops, n, "mlp.fc2", 0), 1024, 1024, 2048, NT);
    const dsi_op_t *scores = find_op(ops, n, "attn.scores", 0);
    CHECK(scores != NULL && scores->key.op == DS_OP_BATCHED_GEMM && scores->key.dims[0] == 1024 &&
          scores->key.dims[1] == 1024 && scores->key.dims[2] == 64 && scores->key.dims[3] == 8);
    const dsi_op_t *softmax = find_op(ops, n, "attn.softmax", 0);
    CHECK(softmax != NULL && softmax->key.variant == 1 && softmax->key.dims[0] == 8 * 1024);
    /* Two TP all-reduces of the [T, h] bf16 activation per forward. */
    int allreduces = 0;
    for (size_t i = 0; i < n; i++)
        if (ops[i].key.kind == DS_EVENT_COMM) {
            CHECK(ops[i].key.op == DS_COMM_ALLREDUCE && ops[i].key.dims[0] == 1024 * 1024 * 2 &&
                  ops[i].key.group == DS_GROUP_TP && ops[i].key.group_size == 2);
            allreduces++;
        }
    CHECK_INT(allreduces, 2);
    /* Backward: data and weight gradients; weight gradients carry their parameters. */
    n = ops_of(model, 3, ctx, DS_PASS_BACKWARD, ops);
    check_gemm(find_op(ops, n, "attn.qkv.dgrad", 0), 1024, 1024, 1536, 0);
    check_gemm(find_op(ops, n, "attn.qkv.wgrad", 0), 1536, 1024, 1024, TN);
    check_gemm(find_op(ops, n, "mlp.fc2.wgrad", 0), 1024, 2048, 1024, TN);
    int64_t grads = 0;
    for (size_t i = 0; i < n; i++)
        grads += ops[i].grad_params;
    CHECK_INT(grads, dsi_model_layer_params_tp(model, 3, 2));
    CHECK(ops[0].key.pass == DS_PASS_BACKWARD);

    /* Sequence parallelism: norms on T/tp rows, all-gather in, reduce-scatter out. */
    ctx.sp = 1;
    n = ops_of(model, 3, ctx, DS_PASS_FORWARD, ops);
    CHECK(ops[0].key.op == DS_OP_LAYERNORM && ops[0].key.dims[0] == 512);
    CHECK(ops[1].key.kind == DS_EVENT_COMM && ops[1].key.op == DS_COMM_ALLGATHER);
    const dsi_op_t *rs = find_op(ops, n, "attn.tp.reduce", 0);
    CHECK(rs != NULL && rs->key.op == DS_COMM_REDUCE_SCATTER);

    /* Full recompute repeats the forward at the start of backward. */
    ctx.sp = 0;
    size_t forward = ops_of(model, 3, ctx, DS_PASS_FORWARD, ops);
    ctx.recompute = DS_RECOMPUTE_FULL;
    n = ops_of(model, 3, ctx, DS_PASS_BACKWARD, ops);
    size_t recomputed = 0;
    while (recomputed < n && ops[recomputed].key.pass == DS_PASS_RECOMPUTE)
        recomputed++;
    CHECK_INT(recomputed, forward);
    ctx.recompute = DS_RECOMPUTE_SELECTIVE;
    n = ops_of(model, 3, ctx, DS_PASS_BACKWARD, ops);
    CHECK(ops[0].key.pass == DS_PASS_RECOMPUTE && ops[0].key.op == DS_OP_BATCHED_GEMM);
    CHECK(ops[3].key.pass == DS_PASS_RECOMPUTE && ops[4].key.pass == DS_PASS_BACKWARD);
    ds_model_destroy(model);
}

static void test_llama_gqa_shapes(void)
{
    ds_model_t *model = load("llama3-8b");
    dsi_op_t ops[DSI_MAX_LAYER_OPS];
    dsi_shape_ctx_t ctx = {.mbs = 1,
                           .tp = 2,
                           .sp = 0,
                           .recompute = DS_RECOMPUTE_NONE,
                           .dtype = DS_DTYPE_BF16,
                           .cp = 1,
                           .cp_comm = DS_CP_COMM_P2P};
    size_t n = ops_of(model, 0, ctx, DS_PASS_FORWARD, ops);
    const unsigned NT = DS_GEMM_TRANS_B;
    /* tp=2: 16 query heads and 4 kv heads of 128 per rank; gate+up fused. */
    check_gemm(find_op(ops, n, "attn.qkv", 0), 8192, (16 + 2 * 4) * 128, 4096, NT);
    check_gemm(find_op(ops, n, "attn.proj", 0), 8192, 4096, 16 * 128, NT);
    check_gemm(find_op(ops, n, "mlp.fc1", 0), 8192, 2 * 7168, 4096, NT);
    check_gemm(find_op(ops, n, "mlp.fc2", 0), 8192, 4096, 7168, NT);
    const dsi_op_t *act = find_op(ops, n, "mlp.act", 0);
    CHECK(act != NULL && act->key.op == DS_OP_SWIGLU && act->key.dims[1] == 7168);
    CHECK(find_op(ops, n, "attn.rope", 0) != NULL);
    CHECK(find_op(ops, n, "attn.dropout", 0) == NULL); /* LLaMA trains without dropout */
    CHECK(ops[0].key.op == DS_OP_RMSNORM);
    /* The head's vocabulary is padded to a multiple of 128 x tp and split. */
    n = ops_of(model, DSI_PART_HEAD, ctx, DS_PASS_FORWARD, ops);
    check_gemm(find_op(ops, n, "head.logits", 0), 8192, 128256 / 2, 4096, NT);
    ds_model_destroy(model);
}

static void test_layer_list(void)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/models/mlp-layers.json", DSMPI_TEST_DATA);
    ds_model_t *model = load(path);
    if (model == NULL)
        return;
    ds_model_info_t info;
    ds_model_get_info(model, &info);
    CHECK(info.arch == DS_ARCH_LAYER_LIST && info.num_layers == 6);
    int64_t expected = (3 * 49 * 64 + 64) + 2 * 64 + 4 * (1024 * 4096 + 4096 + 4096 * 1024 + 1024) +
                       (1024 * 1000 + 1000);
    CHECK_INT(info.num_parameters, expected);
    dsi_op_t ops[DSI_MAX_LAYER_OPS];
    dsi_shape_ctx_t ctx = {.mbs = 2,
                           .tp = 2,
                           .sp = 0,
                           .recompute = DS_RECOMPUTE_NONE,
                           .dtype = DS_DTYPE_FP32,
                           .cp = 1,
                           .cp_comm = DS_CP_COMM_P2P};
    size_t n = ops_of(model, 0, ctx, DS_PASS_FORWARD, ops);
    /* conv 7x7/2 on 224x224: 112x112 outputs, K = 3*49, per sample x mbs 2. */
    check_gemm(&ops[0], 2 * 112 * 112, 64, 147, DS_GEMM_TRANS_B);
    n = ops_of(model, 1, ctx, DS_PASS_FORWARD, ops);
    check_gemm(&ops[0], 2 * 196, 2048, 1024, DS_GEMM_TRANS_B); /* column-parallel */
    check_gemm(&ops[2], 2 * 196, 1024, 2048, DS_GEMM_TRANS_B); /* row-parallel */
    CHECK(n == 5 && ops[3].key.kind == DS_EVENT_COMM && ops[3].key.op == DS_COMM_ALLREDUCE);
    n = ops_of(model, DSI_PART_HEAD, ctx, DS_PASS_FORWARD, ops);
    CHECK(n == 1 && ops[0].key.op == DS_OP_CROSS_ENTROPY && ops[0].key.dims[1] == 1000);
    CHECK_FAILS(ds_model_set_seq_len(model, 128), DS_ERR_INVALID_ARG, "layer-list");
    ds_model_destroy(model);
}

static void test_bad_models(void)
{
    ds_model_t *model = NULL;
    CHECK_FAILS(ds_model_load("gpt5", &model), DS_ERR_INVALID_ARG,
                "model 'gpt5' is not known (accepted: bert-large, bert-exlarge, gpt2-medium");
    CHECK_FAILS(ds_model_load("/nonexistent/config.json", &model), DS_ERR_NOT_FOUND,
                "cannot open '/nonexistent/config.json'");
    static const struct {
        const char *json;
        const char *message;
    } bad[] = {
        {"{\"model_type\": \"gpt2\", \"n_layer\": 2,", "test.json:1:"},
        {"{\"model_type\": \"gpt_neox\"}",
         "model_type \"gpt_neox\" is not supported (accepted: gpt2, bert"},
        {"{\"n_layer\": 2}", "neither a Hugging Face config"},
        {"{\"model_type\": \"gpt2\", \"n_layer\": 2, \"n_embd\": 64, \"vocab_size\": 100}",
         "required field \"n_head\" is missing"},
        {"{\"model_type\": \"gpt2\", \"n_layer\": 0, \"n_embd\": 64, \"n_head\": 4, "
         "\"vocab_size\": 100}",
         "\"n_layer\" = 0 is out of range"},
        {"{\"model_type\": \"gpt2\", \"n_layer\": 2, \"n_embd\": 64, \"n_head\": 5, "
         "\"vocab_size\": 100}",
         "hidden size 64 is not a multiple of 5 heads"},
        {"{\"model_type\": \"llama\", \"num_hidden_layers\": 2, \"hidden_size\": 64, "
         "\"num_attention_heads\": 8, \"num_key_value_heads\": 3, \"intermediate_size\": 128, "
         "\"vocab_size\": 100}",
         "3 key/value heads do not divide 8 attention heads"},
        /* experts are read now: the config still needs its dense fields */
        {"{\"model_type\": \"mistral\", \"num_local_experts\": 8, \"num_hidden_layers\": 2}",
         "required field \"hidden_size\" is missing"},
        {"{\"model_type\": \"gpt2\", \"n_layer\": \"two\"}", "\"n_layer\" is not a whole number"},
        {"{\"format\": \"dsmpi-layers\", \"layers\": []}",
         "\"layers\" must be an array of 1 to 100000 layers"},
        {"{\"format\": \"dsmpi-layers\", \"layers\": [{\"ops\": [{\"op\": \"lstm\"}]}]}",
         "op \"lstm\" is not known (accepted: linear, conv2d"},
        {"{\"format\": \"dsmpi-layers\", \"layers\": [{\"ops\": [{\"op\": \"linear\", "
         "\"in_features\": 4, \"out_features\": 4, \"parallel\": \"diagonal\"}]}]}",
         "\"parallel\" = \"diagonal\" (accepted: none, column, row)"},
        {"{\"format\": \"onnx\"}", "\"format\" is \"onnx\""},
        {"[1, 2]", "the top level is not a JSON object"},
        {"{\"a\": 1, \"a\": 2}", "duplicate"},
    };
    for (size_t i = 0; i < DSI_ARRAY_SIZE(bad); i++) {
        ds_clear_error();
        ds_status_t status =
            ds_model_load_json(bad[i].json, strlen(bad[i].json), "test.json", &model);
        CHECK_MSG(status == DS_ERR_BAD_FILE && strstr(ds_last_error(), bad[i].message) != NULL,
                  "case %zu: %s: %s", i, ds_status_string(status), ds_last_error());
    }
    /* A deeply nested document is refused by the parser's depth limit, not the stack. */
    size_t depth = 100000;
    char *deep = malloc(2 * depth + 1);
    for (size_t i = 0; i < depth; i++) {
        deep[i] = '[';
        deep[depth + i] = ']';
    }
    deep[2 * depth] = '\0';
    CHECK(ds_model_load_json(deep, 2 * depth, "deep.json", &model) == DS_ERR_BAD_FILE);
    free(deep);

    model = load("gpt2-medium");
    CHECK_FAILS(ds_model_set_seq_len(model, 2048), DS_ERR_INVALID_ARG,
                "seq-len 2048 exceeds the 1024 learned positions of gpt2-medium");
    CHECK_FAILS(ds_model_set_global_batch(model, 0), DS_ERR_INVALID_ARG,
                "global-batch 0 is out of range");
    CHECK_FAILS(ds_model_set_dtype(model, DS_DTYPE_FP8), DS_ERR_INVALID_ARG,
                "fp8 is not modelled yet");
    ds_model_destroy(model);
    ds_model_destroy(NULL);
}

/* A mixture of experts is refused whatever its family calls the experts; a
 * dense config that carries the fields with 0, 1 or null is still read. */
static void test_moe_configs(void)
{
#define DENSE_QWEN2                                                                                \
    "\"num_hidden_layers\": 2, \"hidden_size\": 64, \"num_attention_heads\": 4, "                  \
    "\"num_key_value_heads\": 2, \"intermediate_size\": 128, \"vocab_size\": 100"
    static const struct {
        const char *json;
        const char *message; /* NULL: loads, with `experts` routed experts (0: dense) */
        int experts;
    } cases[] = {
        /* Qwen2-MoE written with the dense model_type: read as MoE */
        {"{\"model_type\": \"qwen2\", " DENSE_QWEN2
         ", \"num_experts\": 60, \"num_experts_per_tok\": 4, \"moe_intermediate_size\": 1408}",
         NULL, 60},
        {"{\"model_type\": \"qwen2\", " DENSE_QWEN2 ", \"moe_intermediate_size\": 1408}", NULL, 0},
        {"{\"model_type\": \"llama\", " DENSE_QWEN2
         ", \"n_routed_experts\": 256, \"n_shared_experts\": 1, \"num_experts_per_tok\": 8}",
         NULL, 256},
        {"{\"model_type\": \"mixtral\", " DENSE_QWEN2 ", \"num_local_experts\": 8}", NULL, 8},
        /* more experts per token than experts */
        {"{\"model_type\": \"mixtral\", " DENSE_QWEN2
         ", \"num_local_experts\": 4, \"num_experts_per_tok\": 8}",
         "test.json: 8 experts per token of 4 (accepted: 1 to 4)", 0},
        {"{\"model_type\": \"qwen3_moe\", " DENSE_QWEN2
         ", \"num_experts\": 8, \"mlp_only_layers\": [0]}",
         "\"mlp_only_layers\" with 1 layers is not modelled", 0},
        /* an MoE config missing what a layer needs */
        {"{\"model_type\": \"deepseek_v3\", \"n_routed_experts\": 256}", "num_hidden_layers", 0},
        {"{\"model_type\": \"dbrx\", \"ffn_config\": {\"moe_num_experts\": 16}}",
         "test.json: a dbrx config needs the objects \"attn_config\" and \"ffn_config\"", 0},
        /* families without an expert reader: refused, naming the field or type */
        {"{\"model_type\": \"some_new_moe\"}", "mixture-of-experts (model_type \"some_new_moe\")",
         0},
        {"{\"model_type\": \"jamba\", \"num_experts\": 16}",
         "test.json: mixture-of-experts (num_experts = 16) in model_type \"jamba\" is not "
         "modelled (accepted: experts in model_type mixtral",
         0},
        {"{\"model_type\": \"gpt2\", \"n_layer\": 2, \"n_embd\": 64, \"n_head\": 4, "
         "\"vocab_size\": 100, \"num_experts_per_tok\": 2}",
         "mixture-of-experts (num_experts_per_tok = 2) in model_type \"gpt2\"", 0},
        /* dense: no experts, or fields that declare none */
        {"{\"model_type\": \"qwen2\", " DENSE_QWEN2 "}", NULL, 0},
        {"{\"model_type\": \"qwen2\", " DENSE_QWEN2
         ", \"num_experts_per_tok\": 0, \"num_experts\": null}",
         NULL, 0},
        {"{\"model_type\": \"llama\", " DENSE_QWEN2
         ", \"num_local_experts\": 1, \"num_experts_per_tok\": 1, \"moe_intermediate_size\": 0}",
         NULL, 0},
    };
#undef DENSE_QWEN2
    for (size_t i = 0; i < DSI_ARRAY_SIZE(cases); i++) {
        ds_model_t *model = NULL;
        ds_clear_error();
        ds_status_t status =
            ds_model_load_json(cases[i].json, strlen(cases[i].json), "test.json", &model);
        if (cases[i].message == NULL) {
            CHECK_MSG(status == DS_OK, "case %zu: %s", i, ds_last_error());
            ds_model_info_t info;
            if (model != NULL) {
                ds_model_get_info(model, &info);
                CHECK_INT(info.num_layers, 2);
                CHECK_INT(info.ffn_hidden_size, 128);
                CHECK_MSG(info.num_experts == cases[i].experts, "case %zu: %d experts", i,
                          info.num_experts);
                CHECK(info.num_experts > 0 || info.num_active_parameters == info.num_parameters);
            }
        } else {
            CHECK_MSG(status == DS_ERR_BAD_FILE &&
                          strstr(ds_last_error(), cases[i].message) != NULL,
                      "case %zu: %s: %s", i, ds_status_string(status), ds_last_error());
            CHECK(model == NULL);
        }
        ds_model_destroy(model);
    }
}

/* Total and active parameters of the MoE presets and configs against the
 * published figures: Mixtral-8x7B 46.7 B / 12.9 B (Mistral AI, "Mixtral of
 * experts", 2024), Qwen3-30B-A3B 30.5 B / 3.3 B (Qwen3 model card),
 * DeepSeek-V3 671 B / 37 B (its technical report; without the 14 B MTP
 * module), Qwen1.5-MoE-A2.7B 14.3 B / 2.7 B, DBRX 132 B / 36 B, Llama-4 Scout
 * 109 B / 17 B (with a vision encoder this text model leaves out: 107.8 B
 * here), DeepSeek-V2-Lite 15.7 B / 2.4 B (its model card). */
static void test_moe_parameters(void)
{
    static const struct {
        const char *spec; /* preset, or file under tests/data/hf */
        double total, active, tolerance;
        int experts, top_k, moe_layers;
    } cases[] = {
        {"mixtral-8x7b", 46.7e9, 12.9e9, 0.005, 8, 2, 32},
        {"qwen3-30b-a3b", 30.5e9, 3.3e9, 0.02, 128, 8, 48},
        {"deepseek-v3", 671e9, 37e9, 0.015, 256, 8, 58},
        {"mixtral-8x7b-v0.1.json", 46.7e9, 12.9e9, 0.005, 8, 2, 32},
        {"qwen3-30b-a3b.json", 30.5e9, 3.3e9, 0.02, 128, 8, 48},
        {"deepseek-v3.json", 671e9, 37e9, 0.015, 256, 8, 58},
        {"qwen1.5-moe-a2.7b.json", 14.3e9, 2.7e9, 0.01, 60, 4, 24},
        {"dbrx-base.json", 132e9, 36e9, 0.015, 16, 4, 40},
        {"llama-4-scout-17b-16e.json", 107.8e9, 17e9, 0.015, 16, 1, 48},
        /* no q_lora_rank; its card counts 2.4 B active without the input
         * embedding (102400 x 2048 = 0.21 B): 2.45 B here that way */
        {"deepseek-v2-lite.json", 15.7e9, 2.4e9 + 102400.0 * 2048, 0.01, 64, 6, 26},
    };
    for (size_t i = 0; i < DSI_ARRAY_SIZE(cases); i++) {
        char path[512];
        const char *spec = cases[i].spec;
        if (strstr(spec, ".json") != NULL) {
            snprintf(path, sizeof(path), "%s/hf/%s", DSMPI_TEST_DATA, spec);
            spec = path;
        }
        ds_model_t *model = load(spec);
        if (model == NULL)
            continue;
        ds_model_info_t info;
        ds_model_get_info(model, &info);
        CHECK_MSG(fabs(info.num_parameters / cases[i].total - 1.0) < cases[i].tolerance,
                  "%s: %.4g parameters, published %.4g", cases[i].spec, (double)info.num_parameters,
                  cases[i].total);
        CHECK_MSG(fabs(info.num_active_parameters / cases[i].active - 1.0) < 0.03,
                  "%s: %.4g active parameters, published %.4g", cases[i].spec,
                  (double)info.num_active_parameters, cases[i].active);
        CHECK_INT(info.num_experts, cases[i].experts);
        CHECK_INT(info.experts_per_token, cases[i].top_k);
        CHECK_INT(dsi_model_moe_layers(model, 0, info.num_layers), cases[i].moe_layers);
        ds_model_destroy(model);
    }
    /* The exact count of Mixtral: 32 layers of attention (4096 x 6144 +
     * 4096^2), 8 SwiGLU experts of 14336, router 4096 x 8, two norms; the
     * final norm; untied 32000-word embedding and head. */
    int64_t layer = 4096LL * 6144 + 4096LL * 4096 + 8 * 3 * 4096LL * 14336 + 4096 * 8 + 2 * 4096;
    CHECK_INT(params_of("mixtral-8x7b"), 32 * layer + 4096 + 2 * 32000LL * 4096);
    /* Per rank: ep=8 leaves one expert, etp=2 half of it; tp=2 halves the
     * attention, not the router. */
    ds_model_t *mixtral = load("mixtral-8x7b");
    if (mixtral != NULL) {
        CHECK_INT(dsi_model_layer_expert_params(mixtral, 5, 2, 8), 3 * 4096LL * 14336 / 2);
        CHECK_INT(dsi_model_layer_params_tp(mixtral, 5, 2),
                  (4096LL * 6144 + 4096LL * 4096) / 2 + 4096 * 8 + 2 * 4096);
        ds_model_destroy(mixtral);
    }
}

/* A pass of an MoE or latent-attention layer: the backward's weight
 * gradients carry the layer's dense parameters on the TP rank (the routed
 * experts' go over EDP and are not among them); with ep > 1 every expert
 * operator has a slowest-rank copy right after it, with skew x the tokens. */
static void test_moe_and_mla_ops(void)
{
    static const struct {
        const char *model;
        int layer, tp, ep;
    } cases[] = {
        {"mixtral-8x7b", 3, 2, 8},  {"mixtral-8x7b", 3, 1, 1},   {"deepseek-v3", 1, 2, 8},
        {"deepseek-v3", 10, 2, 32}, {"qwen3-30b-a3b", 0, 4, 16},
    };
    for (size_t c = 0; c < DSI_ARRAY_SIZE(cases); c++) {
        ds_model_t *model = load(cases[c].model);
        if (model == NULL)
            continue;
        dsi_op_t ops[DSI_MAX_LAYER_OPS];
        dsi_shape_ctx_t ctx = {.mbs = 1,
                               .tp = cases[c].tp,
                               .sp = cases[c].tp > 1,
                               .dtype = DS_DTYPE_BF16,
                               .ep = cases[c].ep,
                               .etp = cases[c].tp,
                               .router_skew = 1.5};
        size_t n = ops_of(model, cases[c].layer, ctx, DS_PASS_BACKWARD, ops);
        int64_t grads = 0;
        int slowest = 0;
        for (size_t i = 0; i < n; i++) {
            grads += ops[i].grad_params;
            if (ops[i].ep_role == DSI_EP_SLOWEST) {
                slowest++;
                CHECK(i > 0 && ops[i - 1].ep_role == DSI_EP_MEAN);
                int64_t mean = ops[i - 1].key.dims[0], slow = ops[i].key.dims[0];
                if (ops[i].key.op == DS_OP_BATCHED_GEMM && (ops[i].key.variant & DS_GEMM_TRANS_A))
                    mean = ops[i - 1].key.dims[2], slow = ops[i].key.dims[2];
                else if (ops[i].key.op != DS_OP_BATCHED_GEMM) /* activation: rows x experts */
                    mean = ops[i - 1].key.dims[0], slow = ops[i].key.dims[0];
                CHECK_MSG(llabs(slow * 2 - mean * 3) <= 3, "%s: slowest %lld, mean %lld",
                          cases[c].model, (long long)slow, (long long)mean);
            }
        }
        CHECK_MSG(grads == dsi_model_layer_params_tp(model, cases[c].layer, cases[c].tp),
                  "%s layer %d tp %d: gradients of %lld parameters, the layer holds %lld",
                  cases[c].model, cases[c].layer, cases[c].tp, (long long)grads,
                  (long long)dsi_model_layer_params_tp(model, cases[c].layer, cases[c].tp));
        bool moe = dsi_model_layer_is_moe(model, cases[c].layer);
        CHECK_INT(slowest, moe && cases[c].ep > 1 ? 5 : 0); /* fc2 x2, act, fc1 x2 */
        ds_model_destroy(model);
    }
}

/* Under fp8= the experts' grouped GEMMs run in FP8 on tokens padded to
 * multiples of 16, each after a cast of its input (its output gradient in
 * the backward); the router stays in bf16. */
static void test_moe_fp8_ops(void)
{
    ds_model_t *model = load("mixtral-8x7b");
    if (model == NULL)
        return;
    static dsi_op_t plain[DSI_MAX_LAYER_OPS], fp8[DSI_MAX_LAYER_OPS];
    for (int pass = DS_PASS_FORWARD; pass <= DS_PASS_BACKWARD; pass++) {
        dsi_shape_ctx_t ctx = {.mbs = 1,
                               .tp = 2,
                               .sp = 1,
                               .dtype = DS_DTYPE_BF16,
                               .cp = 1,
                               .ep = 8,
                               .etp = 2,
                               .router_skew = 1.5};
        size_t n_plain = ops_of(model, 3, ctx, (ds_pass_t)pass, plain);
        ctx.fp8 = DS_FP8_HYBRID;
        size_t n = ops_of(model, 3, ctx, (ds_pass_t)pass, fp8);
        int grouped = 0, casts = 0;
        for (size_t i = 0; i < n; i++) {
            const dsi_op_t *op = &fp8[i];
            if (strncmp(op->label, "moe.router", 10) == 0 && op->key.op == DS_OP_GEMM)
                CHECK_INT(op->key.dtype, DS_DTYPE_BF16);
            if (op->key.op == DS_OP_FP8_CAST && strncmp(op->label, "moe.expert.", 11) == 0) {
                casts++;
                CHECK_INT(op->key.dims[0] % (16 * 4), 0); /* 4 local experts, padded tokens */
            }
            if (op->key.op != DS_OP_BATCHED_GEMM) /* attention's stay in bf16 */
                continue;
            if (strncmp(op->label, "moe.expert.", 11) != 0) {
                CHECK_INT(op->key.dtype, DS_DTYPE_BF16);
                continue;
            }
            grouped++;
            CHECK_INT(op->key.dtype, DS_DTYPE_FP8);
            int tokens = op->key.variant & DS_GEMM_TRANS_A ? 2 : 0; /* wgrad: tokens are k */
            /* the same GEMM without fp8: tokens padded up to the next multiple of 16 */
            const dsi_op_t *same = NULL;
            for (size_t j = 0; j < n_plain && same == NULL; j++)
                if (strcmp(plain[j].label, op->label) == 0 && plain[j].ep_role == op->ep_role)
                    same = &plain[j];
            CHECK(same != NULL && same->key.dtype == DS_DTYPE_BF16);
            if (same == NULL)
                continue;
            CHECK_INT(op->key.dims[tokens] % 16, 0);
            CHECK(op->key.dims[tokens] >= same->key.dims[tokens] &&
                  op->key.dims[tokens] < same->key.dims[tokens] + 16);
            CHECK_NEAR(op->bytes,
                       (double)op->key.dims[3] * ((double)op->key.dims[0] * op->key.dims[2] +
                                                  (double)op->key.dims[2] * op->key.dims[1] +
                                                  2.0 * op->key.dims[0] * op->key.dims[1]),
                       1e-12);
        }
        /* two GEMMs forward, four backward, mean and slowest rank; a cast before fc1 and fc2 */
        CHECK_INT(grouped, pass == DS_PASS_FORWARD ? 4 : 8);
        CHECK_INT(casts, 4);
    }
    ds_model_destroy(model);
}

int main(void)
{
    test_parameter_counts();
    test_hf_configs();
    test_gpt2_medium_tp2_shapes();
    test_llama_gqa_shapes();
    test_layer_list();
    test_bad_models();
    test_moe_configs();
    test_moe_parameters();
    test_moe_and_mla_ops();
    test_moe_fp8_ops();
    return check_summary("test_model");
}
