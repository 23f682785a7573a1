/* Event generation: FLOPs against Megatron's formula, counts, layouts,
 * deduplication and key round trips. */
#include "check.h"
#include "model/dsi_model.h"

typedef struct setup {
    ds_model_t *model;
    ds_strategy_t strategy;
    ds_cluster_t cluster;
    ds_event_set_t *set;
    ds_event_totals_t totals;
} setup_t;

static int make(setup_t *s, const char *model, const char *strategy, int64_t gpus, int per_node)
{
    memset(s, 0, sizeof(*s));
    ds_strategy_init(&s->strategy);
    if (ds_model_load(model, &s->model) != DS_OK ||
        ds_strategy_parse(strategy, &s->strategy) != DS_OK ||
        ds_cluster_from_gpus(&s->cluster, gpus, per_node) != DS_OK ||
        ds_strategy_resolve(&s->strategy, s->model, gpus, per_node) != DS_OK ||
        ds_events_generate(s->model, &s->strategy, &s->cluster, &s->set) != DS_OK) {
        CHECK_MSG(0, "%s %s on %lld: %s", model, strategy, (long long)gpus, ds_last_error());
        return 0;
    }
    ds_event_set_totals(s->set, &s->totals);
    return 1;
}

static void done(setup_t *s)
{
    ds_event_set_destroy(s->set);
    ds_model_destroy(s->model);
}

/* Megatron eq. 3 with the vocabulary padded as the run pads it. */
static double formula(const setup_t *s, int full_recompute)
{
    ds_model_info_t info;
    ds_model_get_info(s->model, &info);
    double multiple = 128.0 * s->strategy.tp;
    double V = ceil(info.vocab_size / multiple) * multiple;
    double B = (double)s->strategy.gbs, q = info.seq_len, l = info.num_layers, h = info.hidden_size;
    return (full_recompute ? 96.0 : 72.0) * B * q * l * h * h *
           (1.0 + q / (6.0 * h) + V / ((full_recompute ? 16.0 : 12.0) * l * h));
}

static void test_flops_formula(void)
{
    setup_t s;
    if (make(&s, "gpt3-175b", "dp=16,tp=8,pp=8,mbs=1,gbs=1536", 1024, 8)) {
        CHECK_NEAR(s.totals.model_flops, formula(&s, 0), 0.01);
        CHECK_NEAR(s.totals.model_flops, formula(&s, 0), 1e-9); /* exact for MHA, 4h MLP */
        CHECK(s.totals.flops == s.totals.model_flops);
        done(&s);
    }
    if (make(&s, "gpt3-175b", "dp=16,tp=8,pp=8,mbs=1,gbs=1536,recompute=full", 1024, 8)) {
        CHECK_NEAR(s.totals.flops, formula(&s, 1), 0.01);
        CHECK_NEAR(s.totals.model_flops, formula(&s, 0), 0.01);
        done(&s);
    }
    if (make(&s, "megatron-1t", "tp=8,pp=64,mbs=1,gbs=3072", 3072, 8)) {
        CHECK_NEAR(s.totals.model_flops, formula(&s, 0), 0.01);
        done(&s);
    }
    if (make(&s, "gpt2-medium", "dp=64,tp=4,pp=4,mbs=2,gbs=1024,sp,recompute=selective", 1024, 8)) {
        CHECK_NEAR(s.totals.model_flops, formula(&s, 0), 0.01);
        done(&s);
    }
}

static size_t pass_ops(const ds_model_t *model, int layer, int tp, ds_pass_t pass, int compute_only)
{
    dsi_op_t ops[DSI_MAX_LAYER_OPS];
    dsi_shape_ctx_t ctx = {.mbs = 1,
                           .tp = tp,
                           .sp = 0,
                           .recompute = DS_RECOMPUTE_NONE,
                           .dtype = DS_DTYPE_BF16,
                           .cp = 1,
                           .cp_comm = DS_CP_COMM_P2P};
    size_t n = 0, kept = 0;
    CHECK_OK(dsi_model_layer_ops(model, layer, &ctx, pass, ops, DSI_MAX_LAYER_OPS, &n));
    for (size_t i = 0; i < n; i++)
        kept += !compute_only || ops[i].key.kind == DS_EVENT_COMPUTE;
    return kept;
}

static void test_counts(void)
{
    setup_t s;
    /* dp=4 on 4 devices, 2 micro-batches: every device runs every layer twice. */
    if (make(&s, "gpt2-medium", "mbs=1,gbs=8", 4, 8)) {
        int64_t per_microbatch = 0;
        for (int layer = -2; layer < 24; layer++)
            per_microbatch += pass_ops(s.model, layer, 1, DS_PASS_FORWARD, 1) +
                              pass_ops(s.model, layer, 1, DS_PASS_BACKWARD, 1);
        CHECK_INT(s.totals.total[DS_CLASS_COMPUTE], 4 * (2 * per_microbatch + 1)); /* + optimizer */
        CHECK_INT(s.totals.total[DS_CLASS_TP], 0);
        CHECK_INT(s.totals.total[DS_CLASS_PP], 0);
        /* 354,871,296 parameters (vocabulary padded to 50304) in 40M buckets: 8 full + 1. */
        CHECK_INT(s.totals.total[DS_CLASS_DP], 4 * 9);
        CHECK_INT(s.totals.unique[DS_CLASS_DP], 2);
        int found = 0;
        for (size_t i = 0; i < ds_event_set_size(s.set); i++) {
            const ds_event_t *e = ds_event_set_at(s.set, i);
            if (e->key.kind == DS_EVENT_COMM && e->key.group == DS_GROUP_DP) {
                CHECK(e->key.op == DS_COMM_ALLREDUCE && e->key.dtype == DS_DTYPE_FP32 &&
                      e->key.group_size == 4 && e->key.nodes == 1 && e->key.ranks_per_node == 4);
                found += e->key.dims[0] == 160000000 ||
                         e->key.dims[0] == (354871296LL - 320000000LL) * 4;
            }
        }
        CHECK_INT(found, 2);
        done(&s);
    }
    /* Pipeline: 3 boundaries x 8 micro-batches x (send + receive) x (activation + gradient). */
    if (make(&s, "gpt2-medium", "pp=4,mbs=1,gbs=8", 4, 8)) {
        CHECK_INT(s.totals.total[DS_CLASS_PP], 3 * 8 * 2 * 2);
        int batched = 0;
        for (size_t i = 0; i < ds_event_set_size(s.set); i++) {
            const ds_event_t *e = ds_event_set_at(s.set, i);
            if (e->key.group == DS_GROUP_PP) {
                CHECK(e->key.dims[0] == 1024 * 1024 * 2 && e->key.nodes == 1);
                batched += (e->key.flags & DS_COMM_FLAG_BATCHED) != 0;
            }
        }
        CHECK(batched == 2); /* 1F1B steady state: forward and backward batched transfers */
        CHECK_INT(s.totals.unique[DS_CLASS_OTHER], 2); /* tied-embedding and grad-norm all-reduce */
        done(&s);
    }
    if (make(&s, "gpt2-medium", "pp=4,mbs=1,gbs=8,schedule=gpipe", 4, 8)) {
        for (size_t i = 0; i < ds_event_set_size(s.set); i++)
            CHECK((ds_event_set_at(s.set, i)->key.flags & DS_COMM_FLAG_BATCHED) == 0);
        done(&s);
    }
    /* Interleaved: the last rank hands chunks back to the first. */
    if (make(&s, "gpt2-medium", "pp=4,vpp=2,mbs=1,gbs=8", 4, 8)) {
        CHECK_INT(s.totals.total[DS_CLASS_PP], (4 * 8 * 2 - 8) * 2 * 2);
        done(&s);
    }
}

static void test_layouts(void)
{
    setup_t s;
    if (!make(&s, "gpt3-175b", "dp=16,tp=8,pp=8,mbs=1,gbs=1536", 1024, 8))
        return;
    for (size_t i = 0; i < ds_event_set_size(s.set); i++) {
        const ds_event_key_t *k = &ds_event_set_at(s.set, i)->key;
        if (k->kind != DS_EVENT_COMM)
            continue;
        switch (k->group) {
        case DS_GROUP_TP: /* one node, all eight devices, one group per node */
            CHECK(k->group_size == 8 && k->nodes == 1 && k->ranks_per_node == 8 &&
                  k->concurrency == 1);
            break;
        case DS_GROUP_DP: /* stride 8: one member per node over 16 nodes, 8 groups per node */
            CHECK(k->group_size == 16 && k->nodes == 16 && k->ranks_per_node == 1 &&
                  k->concurrency == 8);
            break;
        case DS_GROUP_PP: /* a stage is 16 nodes: every transfer leaves the node, 8 at a time */
            CHECK(k->nodes == 2 && k->ranks_per_node == 1 && k->concurrency == 8);
            break;
        default: break;
        }
    }
    CHECK_INT(ds_strategy_num_microbatches(&s.strategy), 96);
    done(&s);
    /* Placement changes layouts: dp innermost puts DP groups inside a node. */
    if (make(&s, "gpt2-medium", "tp=2,pp=2,order=dp-tp-pp", 32, 8)) {
        for (size_t i = 0; i < ds_event_set_size(s.set); i++) {
            const ds_event_key_t *k = &ds_event_set_at(s.set, i)->key;
            if (k->kind == DS_EVENT_COMM && k->group == DS_GROUP_DP)
                CHECK(k->nodes == 1 && k->ranks_per_node == 8);
            if (k->kind == DS_EVENT_COMM && k->group == DS_GROUP_TP)
                CHECK(k->nodes == 2 && k->ranks_per_node == 1);
        }
        done(&s);
    }
}

static void test_zero_and_ps(void)
{
    setup_t s;
    if (make(&s, "llama3-8b", "tp=2,zero=1,mbs=1,gbs=64", 16, 8)) {
        int rs = 0, ag = 0, ar = 0;
        for (size_t i = 0; i < ds_event_set_size(s.set); i++) {
            const ds_event_key_t *k = &ds_event_set_at(s.set, i)->key;
            if (k->kind == DS_EVENT_COMM && k->group == DS_GROUP_DP) {
                rs += k->op == DS_COMM_REDUCE_SCATTER;
                ag += k->op == DS_COMM_ALLGATHER && k->dtype == DS_DTYPE_BF16;
                ar += k->op == DS_COMM_ALLREDUCE;
            }
        }
        CHECK(rs > 0 && ag > 0 && ar == 0);
        done(&s);
    }
    if (make(&s, "gpt2-medium", "zero=3,mbs=1,gbs=16", 8, 8)) {
        /* Per layer and micro-batch: gather before forward and backward, scatter gradients. */
        CHECK_INT(s.totals.total[DS_CLASS_DP], 8 * 2 * (26 * 3));
        done(&s);
    }
    if (make(&s, "gpt2-medium", "dp-algo=ps,ps-servers=2,mbs=1,gbs=8", 8, 8)) {
        int push = 0;
        for (size_t i = 0; i < ds_event_set_size(s.set); i++) {
            const ds_event_key_t *k = &ds_event_set_at(s.set, i)->key;
            if (k->op == DS_COMM_PS_PUSH && k->kind == DS_EVENT_COMM) {
                CHECK(k->dims[1] == 2);
                push++;
            }
        }
        CHECK(push > 0);
        done(&s);
    }
}

static void test_keys_and_sets(void)
{
    setup_t a, b;
    if (!make(&a, "t5-large", "tp=2,pp=2,sp,recompute=selective,mbs=2,gbs=64", 32, 8))
        return;
    if (!make(&b, "t5-large", "tp=2,pp=2,sp,recompute=selective,mbs=2,gbs=64", 32, 8)) {
        done(&a);
        return;
    }
    /* Deterministic, and every key's text parses back to the same key. */
    CHECK_INT(ds_event_set_size(a.set), ds_event_set_size(b.set));
    for (size_t i = 0; i < ds_event_set_size(a.set); i++) {
        const ds_event_t *e = ds_event_set_at(a.set, i), *f = ds_event_set_at(b.set, i);
        CHECK(ds_event_key_equal(&e->key, &f->key) && e->count == f->count);
        char text[512];
        ds_event_key_format(&e->key, text, sizeof(text));
        ds_event_key_t parsed;
        CHECK_OK(ds_event_key_parse(text, &parsed));
        parsed.group = e->key.group;
        CHECK_MSG(memcmp(&parsed, &e->key, sizeof(parsed)) == 0, "round trip of '%s'", text);
        CHECK(ds_event_set_find(a.set, &e->key) == e);
        ds_event_key_t other_group = e->key; /* the display-only group is left out */
        other_group.group = (uint8_t)(e->key.group + 1);
        CHECK(ds_event_key_hash(&e->key) == ds_event_key_hash(&other_group));
        for (size_t j = 0; j < i; j++) {
            CHECK(!ds_event_key_equal(&e->key, &ds_event_set_at(a.set, j)->key));
            CHECK(ds_event_key_hash(&e->key) != ds_event_key_hash(&ds_event_set_at(a.set, j)->key));
        }
    }
    /* Union: counts add, keys do not repeat. */
    CHECK_OK(ds_event_set_merge(a.set, b.set));
    CHECK_INT(ds_event_set_size(a.set), ds_event_set_size(b.set));
    CHECK_INT(ds_event_set_at(a.set, 0)->count, 2 * ds_event_set_at(b.set, 0)->count);
    ds_event_key_t key;
    CHECK_FAILS(ds_event_key_parse("gemm sideways bf16", &key), DS_ERR_INVALID_ARG,
                "'sideways' is not a pass");
    CHECK_FAILS(ds_event_key_parse("conv fwd bf16", &key), DS_ERR_INVALID_ARG,
                "'conv' is not an operator");
    CHECK_FAILS(ds_event_key_parse("gemm fwd bf16 q=4", &key), DS_ERR_INVALID_ARG,
                "'q' is not a key field");
    done(&a);
    done(&b);

    /* Cost tables read their text form back. */
    ds_cost_table_t *table = NULL;
    CHECK_OK(ds_cost_table_create(&table));
    CHECK_OK(ds_cost_table_parse(
        table,
        "# synthetic\n"
        "gemm fwd bf16 NT m=1024 n=1536 k=1024 = 1e-4\n"
        "allreduce fwd bf16 bytes=2097152 group=tp:2 nodes=1 per-node=2 conc=4 = "
        "2e-5 1.9e-5 1.8e-5 2.2e-5 50 measured\n",
        "costs.txt"));
    CHECK_INT(ds_cost_table_size(table), 2);
    CHECK_OK(ds_event_key_parse("gemm fwd bf16 NT m=1024 n=1536 k=1024", &key));
    const ds_cost_t *cost = ds_cost_table_find(table, &key);
    CHECK(cost != NULL && cost->mean_s == 1e-4 && cost->median_s == 1e-4 &&
          cost->provenance == DS_PROV_MEASURED);
    CHECK_FAILS(ds_cost_table_parse(table, "gemm fwd bf16 NT m=1 n=1 k=1 = fast\n", "c.txt"),
                DS_ERR_BAD_FILE, "c.txt:1: the cost after '=' is not a number");
    /* A band: 1, 1 until set, kept until the cost is set again; only on a
     * key the table holds, around the cost. */
    double low = 0.0, high = 0.0;
    ds_cost_table_band(table, &key, &low, &high);
    CHECK(low == 1.0 && high == 1.0);
    CHECK_OK(ds_cost_table_set_band(table, &key, 0.75, 2.5));
    ds_cost_table_band(table, &key, &low, &high);
    CHECK(low == 0.75 && high == 2.5);
    CHECK_FAILS(ds_cost_table_set_band(table, &key, 1.5, 2.0), DS_ERR_INVALID_ARG,
                "band 1.5 .. 2 (accepted: 0 < low <= 1 <= high");
    CHECK_FAILS(ds_cost_table_set_band(table, &key, 0.5, 0.9), DS_ERR_INVALID_ARG,
                "band 0.5 .. 0.9");
    ds_cost_t again = *cost;
    CHECK_OK(ds_cost_table_set(table, &key, &again));
    ds_cost_table_band(table, &key, &low, &high);
    CHECK(low == 1.0 && high == 1.0);
    ds_event_key_t absent;
    CHECK_OK(ds_event_key_parse("gemm fwd bf16 NT m=8 n=8 k=8", &absent));
    CHECK_FAILS(ds_cost_table_set_band(table, &absent, 0.5, 2.0), DS_ERR_NOT_FOUND,
                "which has no cost in the table");
    ds_cost_table_band(table, &absent, &low, &high);
    CHECK(low == 1.0 && high == 1.0);
    ds_cost_table_destroy(table);
}

/* Groups whose nodes are not neighbours: the embedding group of the first
 * and last stage on 32 nodes of 8, 8 nodes per leaf switch. */
static void test_spread_groups(void)
{
    static const struct {
        const char *strategy;
        int stride, leaf_nodes;
    } cases[] = {
        {"dp=64,tp=2,pp=2,mbs=1,gbs=256", 16, 8}, /* stage 0: nodes 0-15, both leaves full */
        {"dp=16,tp=2,pp=8,mbs=1,gbs=256", 28, 4}, /* stage 0: nodes 0-3, half of leaf 0 */
    };
    for (size_t c = 0; c < DSI_ARRAY_SIZE(cases); c++) {
        setup_t s;
        memset(&s, 0, sizeof(s));
        ds_strategy_init(&s.strategy);
        CHECK_OK(ds_model_load("gpt2-medium", &s.model));
        CHECK_OK(ds_strategy_parse(cases[c].strategy, &s.strategy));
        CHECK_OK(ds_cluster_init(&s.cluster, 32, 8, "a100-80g"));
        s.cluster.num_levels = 3;
        s.cluster.levels[1].span = 8;
        s.cluster.levels[2] = s.cluster.levels[1];
        s.cluster.levels[2].span = 0;
        s.cluster.levels[2].oversubscription = 2.0;
        CHECK_OK(ds_strategy_resolve(&s.strategy, s.model, 256, 8));
        CHECK_OK(ds_events_generate(s.model, &s.strategy, &s.cluster, &s.set));
        int found = 0;
        for (size_t i = 0; s.set != NULL && i < ds_event_set_size(s.set); i++) {
            const ds_event_key_t *k = &ds_event_set_at(s.set, i)->key;
            if (k->kind != DS_EVENT_COMM)
                continue;
            if (k->group == DS_GROUP_EMBEDDING) {
                found++;
                CHECK_INT(k->node_stride, cases[c].stride);
                CHECK_INT(k->dims[2], cases[c].leaf_nodes);
                char text[512];
                ds_event_key_format(k, text, sizeof(text));
                ds_event_key_t parsed;
                CHECK_OK(ds_event_key_parse(text, &parsed));
                parsed.group = k->group;
                CHECK_MSG(memcmp(&parsed, k, sizeof(parsed)) == 0, "round trip of '%s'", text);
            } else if (k->group == DS_GROUP_TP || k->group == DS_GROUP_DP) {
                /* Groups on neighbouring nodes keep the plain layout. */
                CHECK(k->node_stride == 0 && k->dims[2] == 0);
            }
        }
        CHECK_INT(found, 1);
        done(&s);
    }
    ds_event_key_t key;
    CHECK_FAILS(ds_event_key_parse("allreduce step fp32 bytes=4 group=dp:2 nodes=2 per-node=1 "
                                   "conc=1 stride=1",
                                   &key),
                DS_ERR_INVALID_ARG, "'1' is not a node stride");
}

/* Mixtral on 64 devices, tp=2 with sp, ep=8 (etp = tp): each layer's
 * dispatch and combine are all-to-alls of the 2048 tokens of a rank's
 * sequence share x top-2 x 4096 x 2 bytes over EP groups of 8 ranks on 2
 * nodes (the EP ranks are every tp-th of a stage's tp-major numbering);
 * each rank's one expert sees 8 x 2048 x 2 x 2 / 8 = 8192 tokens on
 * average and 1.5 x that on the slowest rank, which 1 of 8 ranks runs; the
 * expert gradients go over EDP groups of 64 / (2 x 8) = 4. */
static void test_moe_events(void)
{
    setup_t s;
    if (!make(&s, "mixtral-8x7b", "tp=2,sp,ep=8", 64, 8))
        return;
    int found = 0;
    int64_t layers = 32, microbatches = 32;
    for (size_t i = 0; i < ds_event_set_size(s.set); i++) {
        const ds_event_t *e = ds_event_set_at(s.set, i);
        const ds_event_key_t *k = &e->key;
        if (strcmp(e->label, "moe.dispatch") == 0) {
            CHECK(k->op == DS_COMM_ALLTOALL && k->group == DS_GROUP_EP);
            CHECK_INT(k->dims[0], 2048LL * 2 * 4096 * 2);
            CHECK(k->group_size == 8 && k->nodes == 2 && k->ranks_per_node == 4);
            /* the combine is the same key: two per layer pass */
            CHECK_INT(e->count, 2 * 64 * layers * microbatches);
            found |= 1;
        } else if (strcmp(e->label, "moe.expert.fc1") == 0 && k->dims[0] == 8192) {
            CHECK(k->op == DS_OP_BATCHED_GEMM && k->dims[1] == 14336 && k->dims[2] == 4096 &&
                  k->dims[3] == 1);
            CHECK_INT(e->count, 56 * layers * microbatches);
            found |= 2;
        } else if (strcmp(e->label, "moe.expert.fc1") == 0 && k->dims[0] == 12288) {
            CHECK_INT(e->count, 8 * layers * microbatches);
            found |= 4;
        } else if (strcmp(e->label, "edp.expert-grad-allreduce") == 0) {
            CHECK(k->group == DS_GROUP_EDP && k->group_size == 4);
            CHECK_INT(k->dims[0], layers * 3 * 4096LL * 14336 / 2 * 4); /* fp32 */
            found |= 8;
        } else if (strcmp(e->label, "moe.router") == 0) {
            CHECK(k->op == DS_OP_GEMM && k->dims[0] == 2048 && k->dims[1] == 8);
            found |= 16;
        }
    }
    CHECK_MSG(found == 31, "MoE events found: mask %d of 31", found);
    done(&s);
    /* The allgather dispatcher gathers every rank's tokens over the group. */
    if (make(&s, "mixtral-8x7b", "tp=2,sp,ep=8,moe-dispatcher=allgather,router-skew=1", 64, 8)) {
        bool gather = false, skewed = false;
        for (size_t i = 0; i < ds_event_set_size(s.set); i++) {
            const ds_event_t *e = ds_event_set_at(s.set, i);
            if (strcmp(e->label, "moe.dispatch") == 0 && e->key.op == DS_COMM_ALLGATHER &&
                e->key.dims[0] == 8 * 2048LL * 4096 * 2)
                gather = true;
            if (strcmp(e->label, "moe.expert.fc1") == 0 && e->key.dims[0] != 8192)
                skewed = true;
        }
        CHECK(gather && !skewed);
        done(&s);
    }
}

int main(void)
{
    test_moe_events();
    test_spread_groups();
    test_flops_formula();
    test_counts();
    test_layouts();
    test_zero_and_ps();
    test_keys_and_sets();
    return check_summary("test_events");
}
