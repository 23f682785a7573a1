/* Megatron semantics the simulator must keep, on small exact cases:
 * gradient buckets during the last backward (hidden when they fit, exposed
 * when overlap is off or they do not fit), the distributed optimizer's
 * parameter all-gather overlapping the next forward, stragglers in full
 * mode, missing costs named or estimated (and marked assumed), FLOPs equal
 * to the event set's, memory accounting. */
#include "sim_support.h"

#define FWD_NS 4000
#define BWD_NS 6000
#define LAYERS 8
#define LAYER_PARAMS (256 * 256)

typedef struct costs {
    double grad_s;   /* gradient all-reduce / reduce-scatter per bucket */
    double gather_s; /* parameter all-gather per bucket */
} costs_t;

static double rule(const ds_event_key_t *key, const ds_event_t *event, void *arg)
{
    const costs_t *c = arg;
    (void)event;
    if (key->kind == DS_EVENT_COMPUTE && key->op == DS_OP_GEMM)
        return key->pass == DS_PASS_FORWARD ? FWD_NS * 1e-9 : BWD_NS * 0.5e-9;
    if (key->kind == DS_EVENT_COMM && key->group == DS_GROUP_DP)
        return key->op == DS_COMM_ALLGATHER ? c->gather_s : c->grad_s;
    return 0.0;
}

static ds_sim_summary_t simulate(ds_sim_t *sim, const ds_model_t *model, const char *text,
                                 int devices, costs_t c, const ds_sim_options_t *options)
{
    ds_strategy_t s;
    ds_cluster_t cluster;
    setup_strategy(model, text, 1, devices, &s, &cluster);
    ds_cost_table_t *table = synthetic_costs(model, &s, &cluster, rule, &c);
    ds_sim_options_t o;
    ds_sim_options_init(&o);
    if (options != NULL)
        o = *options;
    ds_status_t status = ds_sim_run(sim, model, &s, &cluster, table, &o);
    CHECK_MSG(status == DS_OK, "%s: %s", text, ds_last_error());
    ds_sim_summary_t sum;
    ds_sim_get_summary(sim, &sum);
    ds_cost_table_destroy(table);
    return sum;
}

static void buckets(ds_sim_t *sim)
{
    ds_model_t *model = uniform_model(LAYERS, 1);
    int m = 3;
    int64_t compute = (int64_t)m * LAYERS * (FWD_NS + BWD_NS);
    char text[160];
    /* One layer per bucket; each all-reduce shorter than a layer's backward:
     * all but the last bucket hide under the backward. */
    snprintf(text, sizeof(text), "dp=2,mbs=1,gbs=%d,bucket=%d", 2 * m, LAYER_PARAMS);
    int64_t c = 2500;
    ds_sim_summary_t sum = simulate(sim, model, text, 2, (costs_t){c * 1e-9, 0}, NULL);
    CHECK_INT(to_ns(sum.iteration_s), compute + c);
    ds_sim_device_t d;
    CHECK_OK(ds_sim_device_at(sim, 0, &d));
    CHECK_INT(to_ns(d.comm_exposed_s), c);
    CHECK_INT(to_ns(d.comm_hidden_s), (LAYERS - 1) * c);
    CHECK_INT(to_ns(d.dp_s), LAYERS * c);
    /* Overlap off: every bucket after the backward. */
    snprintf(text, sizeof(text), "dp=2,mbs=1,gbs=%d,bucket=%d,no-overlap", 2 * m, LAYER_PARAMS);
    sum = simulate(sim, model, text, 2, (costs_t){c * 1e-9, 0}, NULL);
    CHECK_INT(to_ns(sum.iteration_s), compute + LAYERS * c);
    /* Buckets longer than a layer's backward queue up on one communicator. */
    int64_t slow = 9000;
    snprintf(text, sizeof(text), "dp=2,mbs=1,gbs=%d,bucket=%d", 2 * m, LAYER_PARAMS);
    sum = simulate(sim, model, text, 2, (costs_t){slow * 1e-9, 0}, NULL);
    CHECK_INT(to_ns(sum.iteration_s), compute + LAYERS * slow - (LAYERS - 1) * BWD_NS);
    /* Default bucket (40M parameters): one bucket, ready at the very end. */
    snprintf(text, sizeof(text), "dp=2,mbs=1,gbs=%d", 2 * m);
    sum = simulate(sim, model, text, 2, (costs_t){c * 1e-9, 0}, NULL);
    CHECK_INT(to_ns(sum.iteration_s), compute + c);
    /* Pipelined: the last stage's gradient sync hides in the time the first
     * stage still computes, only the first stage's last bucket shows. */
    snprintf(text, sizeof(text), "dp=2,pp=2,mbs=1,gbs=%d,bucket=%d", 2 * m, LAYER_PARAMS);
    sum = simulate(sim, model, text, 4, (costs_t){c * 1e-9, 0}, NULL);
    int64_t stage = LAYERS / 2 * (FWD_NS + BWD_NS);
    CHECK_INT(to_ns(sum.iteration_s), (int64_t)(m + 1) * stage + c);
    ds_model_destroy(model);
}

static void distributed_optimizer(ds_sim_t *sim)
{
    ds_model_t *model = uniform_model(LAYERS, 1);
    int m = 2;
    int64_t compute = (int64_t)m * LAYERS * (FWD_NS + BWD_NS);
    int64_t c = 2000, g = 1500;
    char text[160];
    /* Reduce-scatter in the backward; the parameter all-gather after the
     * step runs under the next forward: only the first bucket it needs shows. */
    snprintf(text, sizeof(text), "dp=2,mbs=1,gbs=%d,bucket=%d,zero=1", 2 * m, LAYER_PARAMS);
    ds_sim_summary_t sum = simulate(sim, model, text, 2, (costs_t){c * 1e-9, g * 1e-9}, NULL);
    CHECK_INT(to_ns(sum.iteration_s), compute + c + g);
    snprintf(text, sizeof(text), "dp=2,mbs=1,gbs=%d,bucket=%d,zero=1,no-overlap", 2 * m,
             LAYER_PARAMS);
    sum = simulate(sim, model, text, 2, (costs_t){c * 1e-9, g * 1e-9}, NULL);
    CHECK_INT(to_ns(sum.iteration_s), compute + LAYERS * (c + g));
    /* The same at stage level. */
    ds_sim_options_t o;
    ds_sim_options_init(&o);
    o.granularity = DS_SIM_STAGE;
    snprintf(text, sizeof(text), "dp=2,mbs=1,gbs=%d,bucket=%d,zero=1", 2 * m, LAYER_PARAMS);
    sum = simulate(sim, model, text, 2, (costs_t){c * 1e-9, g * 1e-9}, &o);
    CHECK_INT(to_ns(sum.iteration_s), compute + c + g);
    ds_model_destroy(model);
}

static void stragglers(ds_sim_t *sim)
{
    ds_model_t *model = uniform_model(LAYERS, 1);
    int m = 2;
    int64_t compute = (int64_t)m * LAYERS * (FWD_NS + BWD_NS);
    char text[64];
    snprintf(text, sizeof(text), "dp=2,mbs=1,gbs=%d", 2 * m);
    ds_sim_slow_device_t slow = {0, 2.0};
    ds_sim_options_t o;
    ds_sim_options_init(&o);
    o.slow_devices = &slow;
    o.num_slow_devices = 1;
    /* Symmetric mode cannot represent one slow device. */
    ds_strategy_t s;
    ds_cluster_t cluster;
    setup_strategy(model, text, 1, 2, &s, &cluster);
    costs_t c = {0, 0};
    ds_cost_table_t *table = synthetic_costs(model, &s, &cluster, rule, &c);
    CHECK_FAILS(ds_sim_run(sim, model, &s, &cluster, table, &o), DS_ERR_INVALID_ARG, "full");
    ds_cost_table_destroy(table);
    /* Full mode: the other replica waits at the gradient sync. */
    o.mode = DS_SIM_FULL;
    ds_sim_summary_t sum = simulate(sim, model, text, 2, c, &o);
    CHECK_INT(to_ns(sum.iteration_s), 2 * compute);
    ds_sim_device_t d0, d1;
    CHECK_OK(ds_sim_device_of_rank(sim, 0, &d0));
    CHECK_OK(ds_sim_device_of_rank(sim, 1, &d1));
    CHECK_INT(to_ns(d0.compute_s), 2 * compute);
    CHECK_INT(to_ns(d1.compute_s), compute);
    CHECK_INT(to_ns(d1.idle_s), compute);
    CHECK_NEAR(d0.speed_factor, 2.0, 1e-12);
    /* In a TP group the fast member waits inside the collectives. */
    snprintf(text, sizeof(text), "dp=1,tp=2,mbs=1,gbs=%d", m);
    slow.rank = 1;
    sum = simulate(sim, model, text, 2, c, &o);
    CHECK_INT(to_ns(sum.iteration_s), 2 * compute);
    CHECK_OK(ds_sim_device_of_rank(sim, 0, &d0));
    CHECK_INT(to_ns(d0.compute_s), compute);
    CHECK_INT(to_ns(d0.tp_s), compute);
    ds_model_destroy(model);
}

static void missing_costs(ds_sim_t *sim)
{
    ds_model_t *model = uniform_model(LAYERS, 1);
    ds_strategy_t s;
    ds_cluster_t cluster;
    setup_strategy(model, "dp=2,pp=2,mbs=1,gbs=8", 1, 4, &s, &cluster);
    costs_t c = {1e-6, 1e-6};
    ds_cost_table_t *full = synthetic_costs(model, &s, &cluster, rule, &c);
    ds_cost_table_t *partial = NULL;
    CHECK_OK(ds_cost_table_create(&partial));
    size_t dropped = 0;
    for (size_t i = 0; i < ds_cost_table_size(full); i++) {
        const ds_event_key_t *key;
        const ds_cost_t *cost;
        ds_cost_table_at(full, i, &key, &cost);
        if (key->kind == DS_EVENT_COMPUTE && key->op == DS_OP_OPTIMIZER) {
            dropped++;
            continue;
        }
        CHECK_OK(ds_cost_table_set(partial, key, cost));
    }
    CHECK(dropped > 0);
    ds_sim_options_t o;
    ds_sim_options_init(&o);
    CHECK_FAILS(ds_sim_run(sim, model, &s, &cluster, partial, &o), DS_ERR_NOT_FOUND, "no cost");
    CHECK_INT(ds_sim_missing_count(sim), dropped);
    for (size_t i = 0; i < ds_sim_missing_count(sim); i++)
        CHECK(ds_sim_missing_at(sim, i)->op == DS_OP_OPTIMIZER);
    /* Estimated: it runs and says which numbers are assumed. */
    o.estimate_missing = 1;
    CHECK_OK(ds_sim_run(sim, model, &s, &cluster, partial, &o));
    ds_sim_summary_t sum;
    ds_sim_get_summary(sim, &sum);
    CHECK_INT(sum.assumed_keys, dropped);
    CHECK_INT(sum.modelled_keys, dropped); /* compute: the device model's */
    CHECK(sum.assumed_share > 0.0 && sum.assumed_share < 0.5);
    size_t assumed = 0;
    for (size_t i = 0; i < ds_sim_key_count(sim); i++) {
        ds_provenance_t prov;
        double seconds;
        const ds_event_key_t *key = ds_sim_key_at(sim, i, &prov, &seconds);
        CHECK(prov != DS_PROV_ASSUMED);
        if (prov == DS_PROV_MODELLED) {
            assumed++;
            CHECK(key->op == DS_OP_OPTIMIZER && seconds > 0.0);
        }
    }
    CHECK_INT(assumed, dropped);
    ds_sim_device_t d;
    CHECK_OK(ds_sim_device_at(sim, 0, &d));
    CHECK(d.assumed_share > 0.0);
    /* With the whole table nothing is assumed. */
    CHECK_OK(ds_sim_run(sim, model, &s, &cluster, full, &o));
    ds_sim_get_summary(sim, &sum);
    CHECK_INT(sum.assumed_keys, 0);
    CHECK(sum.assumed_share == 0.0);
    ds_cost_table_destroy(full);
    ds_cost_table_destroy(partial);
    ds_model_destroy(model);
}

static double unit_rule(const ds_event_key_t *key, const ds_event_t *event, void *arg)
{
    (void)key;
    (void)event;
    (void)arg;
    return 1e-6;
}

static void flops_and_memory(ds_sim_t *sim)
{
    static const char *const strategies[] = {
        "dp=2,tp=2,pp=2,mbs=2,gbs=16,recompute=full",
        "dp=2,tp=2,pp=2,mbs=1,gbs=8,vpp=3,sp,recompute=selective,zero=1",
        "dp=8,tp=1,pp=1,mbs=1,gbs=16,zero=3",
        "dp=2,tp=2,pp=2,mbs=2,gbs=16,recompute=full,flash",
    };
    double model_flops[DSI_N(strategies)];
    ds_model_t *model = NULL;
    CHECK_OK(ds_model_load("gpt2-medium", &model));
    CHECK_OK(ds_model_set_seq_len(model, 256));
    for (size_t i = 0; i < DSI_N(strategies); i++) {
        ds_strategy_t s;
        ds_cluster_t cluster;
        setup_strategy(model, strategies[i], 1, 8, &s, &cluster);
        ds_cost_table_t *table = synthetic_costs(model, &s, &cluster, unit_rule, NULL);
        ds_event_set_t *set = NULL;
        CHECK_OK(ds_events_generate(model, &s, &cluster, &set));
        ds_event_totals_t totals;
        ds_event_set_totals(set, &totals);
        CHECK_OK(ds_sim_run(sim, model, &s, &cluster, table, NULL));
        ds_sim_summary_t sum;
        ds_sim_get_summary(sim, &sum);
        CHECK_NEAR(sum.model_flops, totals.model_flops, 1e-9);
        CHECK_NEAR(sum.hardware_flops, totals.flops, 1e-9);
        model_flops[i] = sum.model_flops;
        CHECK_NEAR(sum.mfu,
                   sum.model_flops / sum.iteration_s / 8 / 1e12 / cluster.device.peak_tflops_bf16,
                   1e-9);
        CHECK(sum.hfu >= sum.mfu);
        /* Memory of the first stage's devices. */
        ds_sim_device_t d;
        CHECK_OK(ds_sim_device_of_rank(sim, 0, &d));
        double P = d.memory.weights_B / 2.0 * (s.zero == 3 ? s.dp : 1); /* bf16 weights */
        CHECK(P > 1e6);
        CHECK_NEAR(d.memory.grads_B, 4.0 * P / (s.zero >= 2 ? s.dp : 1), 1e-12);
        CHECK_NEAR(d.memory.optimizer_B, 12.0 * P / (s.zero >= 1 ? s.dp : 1), 1e-12);
        CHECK(d.memory.activations_B > 0.0 && d.memory.inflight >= 1);
        CHECK_NEAR(d.memory.total_B,
                   d.memory.weights_B + d.memory.grads_B + d.memory.optimizer_B +
                       d.memory.activations_B + d.memory.comm_buffers_B + d.memory.context_B +
                       d.memory.fragmentation_B,
                   1e-12);
        CHECK(!d.memory.oom && !sum.oom);
        ds_event_set_destroy(set);
        ds_cost_table_destroy(table);
    }
    /* 1F1B keeps pp - r micro-batches in flight on rank r, GPipe all of them. */
    ds_strategy_t s;
    ds_cluster_t cluster;
    setup_strategy(model, "dp=1,pp=4,mbs=1,gbs=8", 1, 4, &s, &cluster);
    ds_cost_table_t *table = synthetic_costs(model, &s, &cluster, unit_rule, NULL);
    CHECK_OK(ds_sim_run(sim, model, &s, &cluster, table, NULL));
    for (int p = 0; p < 4; p++) {
        ds_sim_device_t d;
        CHECK_OK(ds_sim_device_of_rank(sim, p, &d));
        CHECK_INT(d.memory.inflight, 4 - p);
    }
    ds_cost_table_destroy(table);
    setup_strategy(model, "dp=1,pp=4,mbs=1,gbs=8,schedule=gpipe", 1, 4, &s, &cluster);
    table = synthetic_costs(model, &s, &cluster, unit_rule, NULL);
    CHECK_OK(ds_sim_run(sim, model, &s, &cluster, table, NULL));
    ds_sim_device_t d;
    CHECK_OK(ds_sim_device_of_rank(sim, 3, &d));
    CHECK_INT(d.memory.inflight, 8);
    ds_cost_table_destroy(table);
    /* GPT-3 on 8 devices does not fit. */
    /* Model FLOPs belong to the model: fused attention counts as explicit
     * attention does (every query-key pair); the last strategy is the first
     * with flash. */
    CHECK_NEAR(model_flops[DSI_N(strategies) - 1], model_flops[0], 1e-12);
    ds_model_destroy(model);
    CHECK_OK(ds_model_load("gpt3-175b", &model));
    setup_strategy(model, "dp=1,tp=8,pp=1,mbs=1,gbs=8", 1, 8, &s, &cluster);
    ds_sim_options_t o;
    ds_sim_options_init(&o);
    o.estimate_missing = 1;
    ds_cost_table_t *empty = NULL;
    CHECK_OK(ds_cost_table_create(&empty));
    CHECK_OK(ds_sim_run(sim, model, &s, &cluster, empty, &o));
    ds_sim_summary_t sum;
    ds_sim_get_summary(sim, &sum);
    CHECK(sum.oom && sum.peak_memory_GiB > 80.0);
    CHECK_NEAR(sum.assumed_share, 1.0, 1e-12);
    ds_cost_table_destroy(empty);
    ds_model_destroy(model);
}

/* First-stage memory of gpt2-medium (seq 256, mbs 2, one micro-batch in
 * flight) under `text`, on one node of `gpus` devices. */
static ds_sim_memory_t stage0_memory(ds_sim_t *sim, const ds_model_t *model, const char *text,
                                     int gpus)
{
    ds_strategy_t s;
    ds_cluster_t cluster;
    setup_strategy(model, text, 1, gpus, &s, &cluster);
    ds_cost_table_t *table = synthetic_costs(model, &s, &cluster, unit_rule, NULL);
    CHECK_OK(ds_sim_run(sim, model, &s, &cluster, table, NULL));
    ds_sim_device_t d;
    memset(&d, 0, sizeof(d));
    CHECK_OK(ds_sim_device_of_rank(sim, 0, &d));
    ds_cost_table_destroy(table);
    return d.memory;
}

/* Fused attention keeps no scores, only a log-sum-exp per query and head;
 * fp8 keeps the four linears' inputs in one byte and adds the weights' fp8
 * copy and transpose. */
static void flash_and_fp8_memory(ds_sim_t *sim)
{
    ds_model_t *model = NULL;
    CHECK_OK(ds_model_load("gpt2-medium", &model));
    CHECK_OK(ds_model_set_seq_len(model, 256));
    ds_model_info_t info;
    ds_model_get_info(model, &info);
    double scale = (double)ds_dtype_size(info.dtype) / 2.0;
    double L = info.num_layers, a = info.num_heads, s = 256, b = 2, t = 2, h = info.hidden_size;
    double f = info.ffn_hidden_size, q = (double)info.num_heads * info.head_dim;
    ds_sim_memory_t plain = stage0_memory(sim, model, "dp=1,tp=2,mbs=2,gbs=2", 2);
    ds_sim_memory_t flash = stage0_memory(sim, model, "dp=1,tp=2,mbs=2,gbs=2,flash", 2);
    ds_sim_memory_t fp8 = stage0_memory(sim, model, "dp=1,tp=2,mbs=2,gbs=2,flash,fp8=hybrid", 2);
    CHECK_INT(plain.inflight, 1);
    CHECK_NEAR(plain.activations_B - flash.activations_B,
               L * (5.0 * a * s * s * b / t * scale - 4.0 * a * s * b / t), 1e-9);
    CHECK_NEAR(flash.activations_B - fp8.activations_B,
               L * (2.0 * s * b * h + s * b * (q + f) / t) * scale, 1e-9);
    double linear = L * (h * 3.0 * q + q * h + 2.0 * h * f) / t; /* no GQA, not gated */
    CHECK_NEAR(fp8.weights_B - flash.weights_B, 2.0 * linear, 1e-9);
    CHECK(flash.total_B < plain.total_B);
    /* ZeRO-3 gathers a layer at a time: two layers' bf16 weights and one
     * layer's fp32 gradient are whole (buffers), and fp8 copies exist only
     * for those two layers, not for the stage's every layer. */
    ds_sim_memory_t z1 = stage0_memory(sim, model, "dp=2,tp=2,mbs=2,gbs=4,flash,zero=1", 4);
    ds_sim_memory_t z3 = stage0_memory(sim, model, "dp=2,tp=2,mbs=2,gbs=4,flash,zero=3", 4);
    ds_sim_memory_t z3_fp8 =
        stage0_memory(sim, model, "dp=2,tp=2,mbs=2,gbs=4,flash,zero=3,fp8=hybrid", 4);
    double layer = linear / L;
    CHECK_NEAR(z3.comm_buffers_B - z1.comm_buffers_B, layer * (2.0 * 2.0 + 4.0), 1e-9);
    CHECK_NEAR(z3_fp8.weights_B, z3.weights_B, 1e-9);
    CHECK_NEAR(z3_fp8.comm_buffers_B - z3.comm_buffers_B, 2.0 * 2.0 * layer, 1e-9);
    ds_model_destroy(model);
}

int main(void)
{
    ds_sim_t *sim = NULL;
    CHECK_OK(ds_sim_create(&sim));
    buckets(sim);
    distributed_optimizer(sim);
    stragglers(sim);
    missing_costs(sim);
    flops_and_memory(sim);
    flash_and_fp8_memory(sim);
    ds_sim_destroy(sim);
    return check_summary("test_sim_semantics");
}
