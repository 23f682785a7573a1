/* Context parallelism: the cp grammar and Megatron options, validation,
 * placement (cp just inside dp), and what it changes in events, simulation,
 * memory and search. */
#include "check.h"

#include <stdbool.h>
#include <stdlib.h>

static ds_model_t *model_named(const char *name, int64_t seq)
{
    ds_model_t *model = NULL;
    CHECK_OK(ds_model_load(name, &model));
    if (seq > 0)
        CHECK_OK(ds_model_set_seq_len(model, seq));
    return model;
}

static void test_grammar(void)
{
    ds_strategy_t s;
    ds_strategy_init(&s);
    CHECK_INT(s.cp, 1);
    CHECK_INT(s.cp_comm, DS_CP_COMM_P2P);
    CHECK_OK(ds_strategy_parse("dp=2,tp=2,cp=4,cp-comm=allgather,flash", &s));
    CHECK(s.cp == 4 && s.cp_comm == DS_CP_COMM_ALLGATHER);
    char text[DS_STRATEGY_TEXT_MAX];
    ds_strategy_format(&s, text, sizeof(text));
    CHECK_MSG(strcmp(text, "dp=2,tp=2,pp=1,cp=4,cp-comm=allgather,mbs=1,schedule=1f1b,flash") == 0,
              "%s", text);
    ds_strategy_t back;
    ds_strategy_init(&back);
    CHECK_OK(ds_strategy_parse(text, &back));
    CHECK(memcmp(&back, &s, sizeof(s)) == 0);
    /* cp=1 leaves the canonical text as it was. */
    ds_strategy_init(&s);
    ds_strategy_format(&s, text, sizeof(text));
    CHECK(strcmp(text, "dp=0,tp=1,pp=1,mbs=1,schedule=1f1b") == 0);

    ds_strategy_init(&s);
    CHECK_OK(ds_strategy_apply_megatron(&s, "context-parallel-size", "8"));
    CHECK_OK(ds_strategy_apply_megatron(&s, "cp-comm-type", "a2a"));
    CHECK(s.cp == 8 && s.cp_comm == DS_CP_COMM_A2A);
    CHECK_FAILS(ds_strategy_apply_megatron(&s, "cp-comm-type", "ring"), DS_ERR_INVALID_ARG, "p2p");
    CHECK_OK(ds_strategy_megatron_item("cp-comm-type", "p2p", text, sizeof(text)));
    CHECK(strcmp(text, "cp-comm=p2p") == 0);
    /* Megatron-Core's order names cp just inside dp; anywhere else is refused. */
    CHECK_OK(ds_strategy_parse("order=tp-cp-dp-pp", &s));
    CHECK(s.order[0] == DS_DIM_TP && s.order[1] == DS_DIM_DP && s.order[2] == DS_DIM_PP);
    CHECK_FAILS(ds_strategy_parse("order=cp-tp-dp-pp", &s), DS_ERR_INVALID_ARG,
                "cp may be named just before dp");
    CHECK_FAILS(ds_strategy_parse("order=tp-dp-pp-cp", &s), DS_ERR_INVALID_ARG,
                "cp may be named just before dp");
}

static void test_placement(void)
{
    ds_strategy_t s;
    ds_strategy_init(&s);
    s.dp = 2;
    s.tp = 2;
    s.pp = 3;
    s.cp = 4;                          /* 48 devices: tp fastest, then cp, dp, pp */
    ds_coords_t c = {1, 1 * 4 + 3, 2}; /* replica 1, cp rank 3 */
    CHECK_INT(ds_strategy_rank_of(&s, c), 1 + 2 * (3 + 4 * (1 + 2 * 2)));
    CHECK_INT(ds_strategy_cp_rank(&s, c), 3);
    CHECK_INT(ds_strategy_dp_replica(&s, c), 1);
    static const char *const orders[] = {"tp-dp-pp", "dp-tp-pp", "pp-dp-tp"};
    for (size_t o = 0; o < 3; o++) {
        char text[32];
        snprintf(text, sizeof(text), "order=%s", orders[o]);
        CHECK_OK(ds_strategy_parse(text, &s));
        int seen[48] = {0};
        for (int64_t r = 0; r < 48; r++) {
            ds_coords_t k = ds_strategy_coords_of(&s, r);
            CHECK(k.tp < 2 && k.dp < 8 && k.pp < 3);
            CHECK_INT(ds_strategy_rank_of(&s, k), r);
            seen[k.tp + 2 * (k.dp + 8 * k.pp)]++;
        }
        for (int i = 0; i < 48; i++)
            CHECK(seen[i] == 1);
    }
    /* cp = 1: the ranks of before (the cp coordinate is ignored). */
    ds_strategy_init(&s);
    s.dp = 4;
    s.tp = 2;
    s.pp = 3;
    ds_coords_t d = {1, 2, 1};
    CHECK_INT(ds_strategy_rank_of(&s, d), 1 + 2 * (2 + 4 * 1));
    CHECK_INT(ds_strategy_cp_rank(&s, ds_strategy_coords_of(&s, 21)), 0);
}

static void test_validation(void)
{
    ds_model_t *llama = model_named("llama3-8b", 131072);
    ds_strategy_t s;
    ds_strategy_init(&s);
    CHECK_OK(ds_strategy_parse("tp=2,cp=8,flash,gbs=64", &s));
    CHECK_OK(ds_strategy_resolve(&s, llama, 64, 8));
    CHECK_INT(s.dp, 4); /* world = tp * cp * dp * pp */
    /* Without cp there is no exchange to name: resolved text round-trips. */
    ds_strategy_init(&s);
    CHECK_OK(ds_strategy_parse("cp-comm=a2a", &s));
    CHECK_OK(ds_strategy_resolve(&s, llama, 64, 8));
    CHECK_INT(s.cp_comm, DS_CP_COMM_P2P);

    static const struct {
        const char *model;
        int64_t seq;
        const char *text;
        int64_t gpus;
        const char *message;
    } bad[] = {
        {"llama3-8b", 131072, "cp=8", 64, "cp=8 needs fused attention"},
        {"llama3-8b", 8190, "cp=2,flash", 64,
         "cp=2 splits the 8190 tokens of a sequence into 4 equal chunks (2 cp) (accepted: a "
         "sequence length divisible by 4)"},
        {"llama3-8b", 8200, "cp=4,tp=4,sp,flash", 64, "into 32 equal chunks (2 cp, times tp"},
        {"llama3-8b", 6144, "cp=3,flash", 64, "tp*cp*pp = 3 does not divide the 64 target"},
        {"llama3-8b", 8192, "cp=2,dp=4,tp=2,flash", 64,
         "dp*tp*cp*pp = 4*2*2*1 = 16 does not equal the 64 target devices (accepted: dp=16"},
        {"llama3-8b", 8192, "tp=4,cp=4,cp-comm=a2a,flash", 64,
         "cp-comm=a2a with cp=4 splits the 8 query and 2 key/value heads"},
        {"t5-large", 0, "cp=2,flash", 8, "context parallelism of t5-large is not modelled"},
        {"llama3-8b", 131072, "cp=128,flash", 128,
         "cp=128 is more ring steps than modelled (accepted: at most 64)"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ds_model_t *model = model_named(bad[i].model, bad[i].seq);
        ds_strategy_init(&s);
        CHECK_OK(ds_strategy_parse(bad[i].text, &s));
        ds_strategy_t before = s;
        ds_clear_error();
        ds_status_t status = ds_strategy_resolve(&s, model, bad[i].gpus, 8);
        CHECK_MSG(status == DS_ERR_INVALID_ARG && strstr(ds_last_error(), bad[i].message),
                  "%s '%s': %s", bad[i].model, bad[i].text, ds_last_error());
        CHECK(memcmp(&before, &s, sizeof(s)) == 0);
        ds_model_destroy(model);
    }
    ds_model_destroy(llama);
}

typedef struct generated {
    ds_model_t *model;
    ds_strategy_t strategy;
    ds_cluster_t cluster;
    ds_event_set_t *set;
} generated_t;

static void generate(generated_t *g, const char *model, int64_t seq, const char *text, int gpus,
                     int per_node)
{
    g->model = model_named(model, seq);
    ds_strategy_init(&g->strategy);
    CHECK_OK(ds_strategy_parse(text, &g->strategy));
    CHECK_OK(ds_strategy_resolve(&g->strategy, g->model, gpus, per_node));
    CHECK_OK(ds_cluster_init(&g->cluster, gpus / per_node, per_node, "h100-sxm"));
    CHECK_OK(ds_events_generate(g->model, &g->strategy, &g->cluster, &g->set));
}

static void generated_free(generated_t *g)
{
    ds_event_set_destroy(g->set);
    ds_model_destroy(g->model);
}

/* Occurrences of flash-attention keys of this shape and pass. */
static int64_t flash_count(const generated_t *g, ds_pass_t pass, int64_t seq_q, int64_t seq_k,
                           int causal)
{
    int64_t n = 0;
    for (size_t i = 0; i < ds_event_set_size(g->set); i++) {
        const ds_event_t *e = ds_event_set_at(g->set, i);
        if (e->key.kind != DS_EVENT_COMPUTE || e->key.op != DS_OP_FLASH_ATTENTION ||
            e->key.pass != pass)
            continue;
        ds_attention_shape_t a = ds_attention_shape_of(&e->key);
        if (a.seq_q == seq_q && a.seq_k == seq_k && e->key.variant == causal)
            n += e->count;
    }
    return n;
}

/* Occurrences of communication keys of this primitive, pass and bytes. */
static int64_t comm_count(const generated_t *g, ds_comm_op_t op, ds_pass_t pass, int64_t bytes,
                          int nodes)
{
    int64_t n = 0;
    for (size_t i = 0; i < ds_event_set_size(g->set); i++) {
        const ds_event_t *e = ds_event_set_at(g->set, i);
        if (e->key.kind == DS_EVENT_COMM && e->key.op == op && e->key.pass == pass &&
            e->key.dims[0] == bytes && (nodes == 0 || e->key.nodes == nodes))
            n += e->count;
    }
    return n;
}

static void test_events(void)
{
    /* llama3-8b at 32768 tokens, tp=2 cp=4 dp=2 on 16 devices, 8 micro-batches:
     * every rank holds 8192 tokens (chunks of c = 4096). */
    generated_t g;
    generate(&g, "llama3-8b", 32768, "tp=2,cp=4,flash,gbs=16", 16, 8);
    const int64_t per_pass = 32LL * 8 * 16; /* layers x micro-batches x devices */
    CHECK_INT(flash_count(&g, DS_PASS_FORWARD, 8192, 8192, 1), per_pass); /* the diagonal step */
    CHECK_INT(flash_count(&g, DS_PASS_FORWARD, 8192, 4096, 0), 3 * per_pass);
    CHECK_INT(flash_count(&g, DS_PASS_BACKWARD, 8192, 8192, 1), per_pass);
    CHECK_INT(flash_count(&g, DS_PASS_BACKWARD, 8192, 4096, 0), 3 * per_pass);
    CHECK_INT(flash_count(&g, DS_PASS_FORWARD, 32768, 32768, 1), 0);
    /* K and V of 8192 tokens, 4 kv heads of 128 in bf16; the tp x cp = 8 ranks
     * of a replica fill one node. */
    const int64_t block = 2LL * 8192 * 4 * 128 * 2;
    CHECK_INT(comm_count(&g, DS_COMM_SENDRECV, DS_PASS_FORWARD, block, 1), 3 * per_pass);
    /* Backward: K/V on steps 0-2, K/V with their gradients on 1-2, the
     * gradients alone on step 3 and home. */
    CHECK_INT(comm_count(&g, DS_COMM_SENDRECV, DS_PASS_BACKWARD, block, 1), 3 * per_pass);
    CHECK_INT(comm_count(&g, DS_COMM_SENDRECV, DS_PASS_BACKWARD, 2 * block, 1), 2 * per_pass);
    /* The non-attention work runs on 8192 tokens; gradients reduce over dp x cp = 8. */
    bool qkv = false, dp8 = false;
    for (size_t i = 0; i < ds_event_set_size(g.set); i++) {
        const ds_event_t *e = ds_event_set_at(g.set, i);
        if (e->key.kind == DS_EVENT_COMPUTE && e->key.op == DS_OP_GEMM &&
            e->key.pass == DS_PASS_FORWARD && e->key.dims[1] == (32 + 2 * 8) / 2 * 128)
            qkv = e->key.dims[0] == 8192;
        if (e->key.kind == DS_EVENT_COMM && e->key.op == DS_COMM_ALLREDUCE &&
            e->key.group == DS_GROUP_DP)
            dp8 = e->key.group_size == 8;
    }
    CHECK(qkv && dp8);
    generated_free(&g);

    /* tp=8: each cp rank on its own node, the ring crosses the network. */
    generate(&g, "llama3-8b", 32768, "tp=8,cp=2,flash,gbs=16", 16, 8);
    const int64_t cross = 2LL * 16384 * 1 * 128 * 2;
    CHECK_INT(comm_count(&g, DS_COMM_SENDRECV, DS_PASS_FORWARD, cross, 2), 32LL * 16 * 16);
    generated_free(&g);

    /* a2a: heads scattered over cp, the whole sequence on each rank. */
    generate(&g, "llama3-8b", 32768, "tp=2,cp=4,cp-comm=a2a,flash,gbs=16", 16, 8);
    CHECK_INT(flash_count(&g, DS_PASS_FORWARD, 32768, 32768, 1), per_pass);
    const int64_t token = 8192LL * 128 * 2;
    CHECK_INT(comm_count(&g, DS_COMM_ALLTOALL, DS_PASS_FORWARD, token * (16 + 2 * 4), 1), per_pass);
    CHECK_INT(comm_count(&g, DS_COMM_ALLTOALL, DS_PASS_FORWARD, token * 16, 1), per_pass);
    generated_free(&g);

    /* allgather: K/V of the whole sequence, each chunk against the keys up to its end. */
    generate(&g, "llama3-8b", 32768, "tp=2,cp=4,cp-comm=allgather,flash,gbs=16", 16, 8);
    CHECK_INT(flash_count(&g, DS_PASS_FORWARD, 4096, 4 * 4096, 1), per_pass);
    CHECK_INT(flash_count(&g, DS_PASS_FORWARD, 4096, 5 * 4096, 1), per_pass);
    CHECK_INT(comm_count(&g, DS_COMM_ALLGATHER, DS_PASS_FORWARD, 2LL * 32768 * 4 * 128 * 2, 1),
              per_pass);
    CHECK_INT(
        comm_count(&g, DS_COMM_REDUCE_SCATTER, DS_PASS_BACKWARD, 2LL * 32768 * 4 * 128 * 2, 1),
        per_pass);
    generated_free(&g);
}

/* Model FLOPs belong to the model: the same for cp=1 and every cp exchange
 * (fused attention counted over every query-key pair whatever the ring or
 * the chunks split), hardware FLOPs at least as many. */
static void test_model_flops(void)
{
    const char *strategies[] = {
        "tp=2,flash,gbs=16", "tp=2,cp=4,flash,gbs=16", "tp=2,cp=4,cp-comm=a2a,flash,gbs=16",
        "tp=2,cp=4,cp-comm=allgather,flash,gbs=16", "tp=1,cp=8,flash,gbs=16"};
    double reference = 0.0;
    for (size_t i = 0; i < sizeof strategies / sizeof strategies[0]; i++) {
        generated_t g;
        generate(&g, "llama3-8b", 32768, strategies[i], 16, 8);
        ds_event_totals_t totals;
        ds_event_set_totals(g.set, &totals);
        if (i == 0)
            reference = totals.model_flops;
        CHECK(reference > 0.0);
        CHECK_NEAR(totals.model_flops, reference, 1e-9);
        CHECK(totals.flops >= totals.model_flops);
        generated_free(&g);
    }
}

static void simulate(const char *text, int64_t seq, int gpus, const ds_cost_table_t *costs,
                     ds_sim_t *sim, ds_sim_summary_t *summary, ds_sim_memory_t *memory)
{
    ds_model_t *model = model_named("llama3-8b", seq);
    ds_strategy_t s;
    ds_strategy_init(&s);
    CHECK_OK(ds_strategy_parse(text, &s));
    CHECK_OK(ds_strategy_resolve(&s, model, gpus, 8));
    ds_cluster_t cluster;
    CHECK_OK(ds_cluster_init(&cluster, gpus / 8, 8, "h100-sxm"));
    ds_sim_options_t options;
    ds_sim_options_init(&options);
    options.estimate_missing = 1;
    CHECK_OK(ds_sim_run(sim, model, &s, &cluster, costs, &options));
    ds_sim_get_summary(sim, summary);
    ds_sim_device_t device;
    CHECK_OK(ds_sim_device_at(sim, 0, &device));
    *memory = device.memory;
    ds_model_destroy(model);
}

/* The cost the last run used for the first key matching (0 when none). */
static double used_cost(const ds_sim_t *sim, ds_event_key_t *key_p,
                        bool (*match)(const ds_event_key_t *))
{
    for (size_t i = 0; i < ds_sim_key_count(sim); i++) {
        double seconds;
        const ds_event_key_t *key = ds_sim_key_at(sim, i, NULL, &seconds);
        if (match(key)) {
            if (key_p != NULL)
                *key_p = *key;
            return seconds;
        }
    }
    return 0.0;
}

static bool is_ring_forward(const ds_event_key_t *k)
{
    return k->kind == DS_EVENT_COMM && k->op == DS_COMM_SENDRECV && k->pass == DS_PASS_FORWARD &&
           k->group == DS_GROUP_CP;
}

static bool is_diagonal_forward(const ds_event_key_t *k)
{
    return k->kind == DS_EVENT_COMPUTE && k->op == DS_OP_FLASH_ATTENTION &&
           k->pass == DS_PASS_FORWARD && k->variant == 1;
}

static void test_simulation(void)
{
    ds_sim_t *sim;
    CHECK_OK(ds_sim_create(&sim));
    ds_sim_summary_t one, four;
    ds_sim_memory_t mem_one, mem_four;
    /* The same 16 devices, tp=2: cp=1 dp=8 against cp=4 dp=2, zero=1. */
    simulate("tp=2,flash,zero=1,gbs=16", 32768, 16, NULL, sim, &one, &mem_one);
    simulate("tp=2,cp=4,flash,zero=1,gbs=16", 32768, 16, NULL, sim, &four, &mem_four);
    /* The global batch is 16 sequences either way. */
    CHECK_NEAR(one.samples_per_s * one.iteration_s, 16.0, 1e-9);
    CHECK_NEAR(four.samples_per_s * four.iteration_s, 16.0, 1e-9);
    CHECK_NEAR(four.tokens_per_s * four.iteration_s, 16.0 * 32768, 1e-6);
    /* Activations hold a quarter of the tokens; the distributed optimizer
     * shards over dp x cp = 8 in both. */
    CHECK_NEAR(mem_four.activations_B, mem_one.activations_B / 4.0, 1e-6 * mem_one.activations_B);
    CHECK_NEAR(mem_four.optimizer_B, mem_one.optimizer_B, 1e-9 * mem_one.optimizer_B);
    CHECK(mem_four.comm_buffers_B > mem_one.comm_buffers_B); /* K/V blocks in flight */
    /* The exchange's buffers: p2p two K/V blocks of 8192 tokens x 4 kv heads
     * x 128 (16 MiB each) and two of their gradients; allgather the whole
     * sequence's K/V and their gradients; a2a Q/K/V and O re-laid out. */
    ds_sim_summary_t other;
    ds_sim_memory_t mem_gather, mem_a2a;
    simulate("tp=2,cp=4,cp-comm=allgather,flash,zero=1,gbs=16", 32768, 16, NULL, sim, &other,
             &mem_gather);
    simulate("tp=2,cp=4,cp-comm=a2a,flash,zero=1,gbs=16", 32768, 16, NULL, sim, &other, &mem_a2a);
    const double MiB = 1024.0 * 1024.0;
    CHECK_NEAR(mem_gather.comm_buffers_B - mem_four.comm_buffers_B, (128.0 - 64.0) * MiB, 1e-12);
    CHECK_NEAR(mem_a2a.comm_buffers_B - mem_four.comm_buffers_B, (160.0 - 64.0) * MiB, 1e-12);

    /* The ring transfer hides behind the attention step after it: made to
     * cost 10 s, each exposes 10 s less that step.  tp=4 cp=2 on one node:
     * one transfer per layer and micro-batch (4 of them), before the
     * diagonal step. */
    ds_sim_summary_t base, slow;
    ds_sim_memory_t mem;
    simulate("tp=4,cp=2,flash,gbs=4", 32768, 8, NULL, sim, &base, &mem);
    ds_event_key_t ring;
    double ring_s = used_cost(sim, &ring, is_ring_forward);
    double diagonal_s = used_cost(sim, NULL, is_diagonal_forward);
    CHECK(ring_s > 0 && diagonal_s > 0);
    CHECK_INT(ring.nodes, 1);
    ds_cost_table_t *table;
    CHECK_OK(ds_cost_table_create(&table));
    ds_cost_t cost = {10.0, 10.0, 10.0, 10.0, 1, DS_PROV_MEASURED};
    CHECK_OK(ds_cost_table_set(table, &ring, &cost));
    simulate("tp=4,cp=2,flash,gbs=4", 32768, 8, table, sim, &slow, &mem);
    double exposed_before = ring_s > diagonal_s ? ring_s - diagonal_s : 0.0;
    double expected = 32.0 * 4 * ((10.0 - diagonal_s) - exposed_before);
    CHECK_NEAR(slow.iteration_s - base.iteration_s, expected, 1e-6 * expected);
    ds_cost_table_destroy(table);

    /* 12 devices, 6 a node, tp=1 cp=4: replica 1's ring (ranks 4-7) crosses
     * nodes while the others stay inside one; every replica waits for it at
     * the gradient reduction, and the simulator prices every ring so. */
    ds_model_t *model = model_named("llama3-8b", 32768);
    ds_strategy_t s;
    ds_strategy_init(&s);
    CHECK_OK(ds_strategy_parse("cp=4,flash,gbs=6", &s));
    CHECK_OK(ds_strategy_resolve(&s, model, 12, 6));
    ds_cluster_t cluster;
    CHECK_OK(ds_cluster_init(&cluster, 2, 6, "h100-sxm"));
    ds_sim_options_t options;
    ds_sim_options_init(&options);
    options.estimate_missing = 1;
    CHECK_OK(ds_sim_run(sim, model, &s, &cluster, NULL, &options));
    CHECK_INT(used_cost(sim, &ring, is_ring_forward) > 0, 1);
    CHECK_INT(ring.nodes, 2);
    ds_event_set_t *set;
    CHECK_OK(ds_events_generate(model, &s, &cluster, &set));
    CHECK(ds_event_set_find(set, &ring) != NULL); /* profiled with the rest */
    ds_event_set_destroy(set);
    ds_model_destroy(model);
    ds_sim_destroy(sim);
}

static ds_search_t *search_of(int bound, const char *fix_cp)
{
    ds_model_t *model = model_named("llama3-8b", 32768);
    ds_cluster_t cluster;
    CHECK_OK(ds_cluster_init(&cluster, 2, 8, "h100-sxm"));
    ds_strategy_t base;
    ds_strategy_init(&base);
    base.gbs = 16;
    ds_search_options_t options;
    ds_search_options_init(&options);
    options.estimate_missing = 1;
    options.bound = bound;
    ds_search_t *search = NULL;
    CHECK_OK(ds_search_create(model, &cluster, &base, &options, &search));
    CHECK_OK(ds_search_fix(search, "flash"));
    CHECK_OK(ds_search_fix(search, "mbs=1"));
    CHECK_OK(ds_search_fix(search, "schedule=1f1b"));
    CHECK_OK(ds_search_fix(search, "dp-algo=auto"));
    if (fix_cp != NULL)
        CHECK_OK(ds_search_fix(search, fix_cp));
    CHECK_OK(ds_search_run(search, NULL, MPI_COMM_NULL));
    ds_model_destroy(model);
    return search;
}

static void test_search(void)
{
    /* 32k tokens on 16 devices: cp 1, 2, 4, 8, 16 are enumerated. */
    ds_search_t *exhaustive = search_of(0, NULL), *bounded = search_of(1, NULL);
    bool cps[17] = {false};
    for (size_t i = 0; i < ds_search_candidate_count(exhaustive); i++) {
        const ds_strategy_t *s = ds_search_candidate_at(exhaustive, i);
        CHECK(s->cp >= 1 && s->cp <= 16 && (s->cp & (s->cp - 1)) == 0);
        CHECK(s->cp == 1 || s->flash_attention);
        CHECK_INT((int64_t)s->dp * s->tp * s->pp * s->cp, 16);
        cps[s->cp] = true;
    }
    CHECK(cps[1] && cps[2] && cps[4] && cps[8] && cps[16]);
    /* The bound skips only what cannot enter the top: the same ranking. */
    CHECK_INT(ds_search_result_count(bounded), ds_search_result_count(exhaustive));
    for (size_t r = 0; r < ds_search_result_count(exhaustive); r++) {
        ds_search_result_t a, b;
        CHECK_OK(ds_search_result_at(exhaustive, r, &a));
        CHECK_OK(ds_search_result_at(bounded, r, &b));
        CHECK(a.iteration_s == b.iteration_s && a.timeline_hash == b.timeline_hash);
        CHECK(a.lower_bound_s <= a.iteration_s);
    }
    ds_search_destroy(exhaustive);
    ds_search_destroy(bounded);
    /* Fixed: only that cp. */
    ds_search_t *fixed = search_of(1, "cp=4");
    for (size_t i = 0; i < ds_search_candidate_count(fixed); i++)
        CHECK_INT(ds_search_candidate_at(fixed, i)->cp, 4);
    CHECK(ds_search_candidate_count(fixed) > 0);
    ds_search_destroy(fixed);
}

int main(void)
{
    test_grammar();
    test_placement();
    test_validation();
    test_events();
    test_model_flops();
    test_simulation();
    test_search();
    return check_summary("test_context_parallel");
}
