/* Strategies: grammar, Megatron aliases, validation messages, placement. */
#include "check.h"

#include <stdbool.h>
#include <stdlib.h>

static ds_model_t *model_named(const char *name)
{
    ds_model_t *model = NULL;
    CHECK_OK(ds_model_load(name, &model));
    return model;
}

static void test_parse_and_format(void)
{
    ds_strategy_t s;
    ds_strategy_init(&s);
    CHECK(s.tp == 1 && s.pp == 1 && s.dp == 0 && s.mbs == 1 && s.schedule == DS_SCHEDULE_1F1B &&
          s.overlap_grad_reduce == 1 && s.grad_reduce_dtype == DS_DTYPE_FP32);
    CHECK_OK(ds_strategy_parse("dp=16,tp=8,pp=8,mbs=1,gbs=1536,schedule=1f1b", &s));
    CHECK(s.dp == 16 && s.tp == 8 && s.pp == 8 && s.gbs == 1536);
    CHECK_OK(ds_strategy_parse(
        "vpp=2,sp,zero=1,recompute=selective,dp-algo=ring,bucket=25M,no-overlap,order=dp-tp-pp",
        &s));
    CHECK(s.schedule == DS_SCHEDULE_INTERLEAVED && s.vpp == 2 && s.sp && s.zero == 1 &&
          s.recompute == DS_RECOMPUTE_SELECTIVE && s.dp_algo == DS_DP_RING &&
          s.bucket_params == 25000000 && !s.overlap_grad_reduce && s.order[0] == DS_DIM_DP &&
          s.order[1] == DS_DIM_TP && s.order[2] == DS_DIM_PP);
    /* mbs and gbs are sizes (K = 1024), bucket a count of parameters (M = 10^6). */
    ds_strategy_t sizes;
    ds_strategy_init(&sizes);
    CHECK_OK(ds_strategy_parse("mbs=2k,gbs=1M,bucket=40M", &sizes));
    CHECK(sizes.mbs == 2048 && sizes.gbs == 1048576 && sizes.bucket_params == 40000000);
    CHECK_OK(ds_strategy_apply_megatron(&sizes, "global-batch-size", "4k"));
    CHECK(sizes.gbs == 4096);
    char text[DS_STRATEGY_TEXT_MAX];
    ds_strategy_format(&s, text, sizeof(text));
    CHECK(strcmp(text,
                 "dp=16,tp=8,pp=8,mbs=1,gbs=1536,schedule=interleaved,vpp=2,sp,zero=1,"
                 "recompute=selective,dp-algo=ring,bucket=25000000,no-overlap,order=dp-tp-pp") ==
          0);
    ds_strategy_t back;
    ds_strategy_init(&back);
    CHECK_OK(ds_strategy_parse(text, &back));
    CHECK(memcmp(&back, &s, sizeof(s)) == 0); /* the canonical text round-trips */

    ds_strategy_t m;
    ds_strategy_init(&m);
    CHECK_OK(ds_strategy_apply_megatron(&m, "tensor-model-parallel-size", "4"));
    CHECK_OK(ds_strategy_apply_megatron(&m, "pipeline-model-parallel-size", "2"));
    CHECK_OK(ds_strategy_apply_megatron(&m, "micro-batch-size", "2"));
    CHECK_OK(ds_strategy_apply_megatron(&m, "sequence-parallel", NULL));
    CHECK_OK(ds_strategy_apply_megatron(&m, "use-distributed-optimizer", NULL));
    CHECK_OK(ds_strategy_apply_megatron(&m, "recompute-granularity", "full"));
    CHECK_OK(ds_strategy_apply_megatron(&m, "num-layers-per-virtual-pipeline-stage", "3"));
    CHECK_OK(ds_strategy_apply_megatron(&m, "attention-backend", "flash"));
    CHECK_INT(m.flash_attention, 1);
    CHECK_FAILS(ds_strategy_apply_megatron(&m, "attention-backend", "math"), DS_ERR_INVALID_ARG,
                "accepted: flash, fused, auto, unfused, local");
    CHECK_OK(ds_strategy_apply_megatron(&m, "fp8-format", "e4m3"));
    CHECK_INT(m.fp8, DS_FP8_E4M3);
    /* Delayed-scaling settings: checked, no field changes, no item. */
    ds_strategy_t before_amax = m;
    CHECK_OK(ds_strategy_apply_megatron(&m, "fp8-amax-history-len", "1024"));
    CHECK_OK(ds_strategy_apply_megatron(&m, "fp8-amax-compute-algo", "most_recent"));
    CHECK(memcmp(&before_amax, &m, sizeof(m)) == 0);
    char amax_item[32] = "x";
    CHECK_OK(ds_strategy_megatron_item("fp8-amax-history-len", "16", amax_item, sizeof(amax_item)));
    CHECK(amax_item[0] == '\0');
    CHECK_FAILS(ds_strategy_apply_megatron(&m, "fp8-amax-compute-algo", "mean"), DS_ERR_INVALID_ARG,
                "accepted: max, most_recent");
    m.fp8 = DS_FP8_OFF;
    CHECK(m.tp == 4 && m.pp == 2 && m.mbs == 2 && m.sp && m.zero == 1 &&
          m.recompute == DS_RECOMPUTE_FULL && m.schedule == DS_SCHEDULE_INTERLEAVED);
    ds_model_t *gpt2 = model_named("gpt2-medium");
    CHECK_OK(ds_strategy_resolve(&m, gpt2, 64, 8));
    CHECK_INT(m.vpp, 4); /* 24 layers / pp 2 = 12 per rank, 3 per virtual stage */
    CHECK_INT(m.dp, 8);
    CHECK_INT(m.gbs, 512);
    CHECK_INT(ds_strategy_num_microbatches(&m), 32);
    ds_model_destroy(gpt2);

    /* Uneven stages with virtual stages, as Megatron-Core lays them out:
     * 24 layers, pp 4, 4 on the first and the last stage, 8 on the middle
     * ones, 2 chunks each: rounds of 2 + 4 + 4 + 2 layers. */
    ds_strategy_t u;
    ds_strategy_init(&u);
    CHECK_OK(ds_strategy_parse("pp=4,vpp=2,first-stage-layers=4,last-stage-layers=4,gbs=8", &u));
    ds_model_t *gpt2u = model_named("gpt2-medium");
    CHECK_OK(ds_strategy_resolve(&u, gpt2u, 4, 4));
    static const int layout[4][2][2] = {
        {{0, 2}, {12, 2}}, {{2, 4}, {14, 4}}, {{6, 4}, {18, 4}}, {{10, 2}, {22, 2}}};
    for (int stage = 0; stage < 4; stage++)
        for (int chunk = 0; chunk < 2; chunk++) {
            int first = -1, count = -1;
            ds_strategy_chunk_layers(&u, 24, stage, chunk, &first, &count);
            CHECK_MSG(first == layout[stage][chunk][0] && count == layout[stage][chunk][1],
                      "stage %d chunk %d: layers %d + %d", stage, chunk, first, count);
        }
    CHECK_INT(ds_strategy_stage_layers(&u, 24, 0), 4);
    CHECK_INT(ds_strategy_stage_layers(&u, 24, 1), 8);
    ds_model_destroy(gpt2u);

    /* The embedding and the loss counted as layers (Megatron-Core's
     * --account-for-*-in-pipeline-split, Llama 3 405B's layout): 126 layers
     * + 2 = 128 slots on pp 16 x vpp 8, one a virtual stage; the first
     * virtual stage holds only the embedding, the last only the loss. */
    ds_strategy_t e;
    ds_strategy_init(&e);
    CHECK_OK(ds_strategy_apply_megatron(&e, "pipeline-model-parallel-size", "16"));
    CHECK_OK(ds_strategy_apply_megatron(&e, "virtual-pipeline-model-parallel-size", "8"));
    CHECK_OK(ds_strategy_apply_megatron(&e, "account-for-embedding-in-pipeline-split", NULL));
    CHECK_OK(ds_strategy_apply_megatron(&e, "account-for-loss-in-pipeline-split", NULL));
    CHECK(e.embedding_in_split && e.loss_in_split);
    e.gbs = 2048;
    ds_model_t *llama = model_named("llama3-405b");
    CHECK_OK(ds_strategy_resolve(&e, llama, 16 * 8, 8));
    int total = 0, next = 0;
    for (int chunk = 0; chunk < 8; chunk++)
        for (int stage = 0; stage < 16; stage++) {
            int first = -1, count = -1;
            ds_strategy_chunk_layers(&e, 126, stage, chunk, &first, &count);
            int expected = (stage == 0 && chunk == 0) || (stage == 15 && chunk == 7) ? 0 : 1;
            CHECK_MSG(count == expected && (count == 0 || first == next),
                      "stage %d chunk %d: layers %d + %d", stage, chunk, first, count);
            next += count;
            total += count;
        }
    CHECK_INT(total, 126);
    CHECK_INT(ds_strategy_stage_layers(&e, 126, 0), 7);
    CHECK_INT(ds_strategy_stage_layers(&e, 126, 7), 8);
    CHECK_INT(ds_strategy_stage_layers(&e, 126, 15), 7);
    char layout_text[256];
    ds_strategy_format(&e, layout_text, sizeof(layout_text));
    CHECK_MSG(strstr(layout_text, ",embedding-in-split,loss-in-split") != NULL, "%s", layout_text);
    ds_strategy_t parsed;
    ds_strategy_init(&parsed);
    CHECK_OK(ds_strategy_parse(layout_text, &parsed));
    CHECK(parsed.embedding_in_split && parsed.loss_in_split);
    /* Only the embedding counted, vpp 1: 24 + 1 = 25 slots do not split over
     * 4 stages; on 5 stages the first holds 4 layers, the others 5. */
    ds_strategy_t f;
    ds_strategy_init(&f);
    CHECK_OK(ds_strategy_parse("pp=5,embedding-in-split,gbs=10", &f));
    ds_model_t *gpt2e = model_named("gpt2-medium");
    CHECK_OK(ds_strategy_resolve(&f, gpt2e, 5, 8));
    int first = -1, count = -1;
    ds_strategy_chunk_layers(&f, 24, 0, 0, &first, &count);
    CHECK(first == 0 && count == 4);
    ds_strategy_chunk_layers(&f, 24, 4, 0, &first, &count);
    CHECK(first == 19 && count == 5);
    ds_model_destroy(gpt2e);
    ds_model_destroy(llama);

    /* The strategy items the Megatron options stand for (what plan fixes its search with). */
    static const struct {
        const char *option, *value, *item;
    } items[] = {
        {"tensor-model-parallel-size", "8", "tp=8"},
        {"pipeline-model-parallel-size", "4", "pp=4"},
        {"micro-batch-size", "2", "mbs=2"},
        {"global-batch-size", "512", "gbs=512"},
        {"virtual-pipeline-model-parallel-size", "2", "vpp=2"},
        {"use-flash-attn", NULL, "flash"},
        {"attention-backend", "fused", "flash=on"},
        {"attention-backend", "local", "flash=off"},
        {"recompute-granularity", "full", "recompute=full"},
        {"sequence-parallel", NULL, "sp"},
        {"recompute-activations", NULL, "recompute=selective"},
        {"use-distributed-optimizer", NULL, "zero=1"},
        {"overlap-grad-reduce", NULL, "overlap"},
    };
    for (size_t i = 0; i < sizeof(items) / sizeof(items[0]); i++) {
        char item[64] = "";
        CHECK_OK(ds_strategy_megatron_item(items[i].option, items[i].value, item, sizeof(item)));
        CHECK(strcmp(item, items[i].item) == 0);
    }
    char item[64];
    CHECK(ds_strategy_megatron_item("tensor-model-parallel-size", "x", item, sizeof(item)) ==
          DS_ERR_INVALID_ARG);
    CHECK(strstr(ds_last_error(), "tp 'x' is not a whole number") != NULL);
    CHECK(ds_strategy_megatron_item("tensor-model-parallel-size", NULL, item, sizeof(item)) ==
          DS_ERR_INVALID_ARG);
    CHECK(ds_strategy_megatron_item("num-layers-per-virtual-pipeline-stage", "3", item,
                                    sizeof(item)) == DS_ERR_INVALID_ARG);
    CHECK(strstr(ds_last_error(), "accepted: vpp=N") != NULL);
    CHECK(ds_strategy_megatron_item("no-such-option", NULL, item, sizeof(item)) ==
          DS_ERR_INVALID_ARG);
    CHECK(ds_strategy_megatron_item("tensor-model-parallel-size", "8", item, 3) ==
          DS_ERR_INVALID_ARG); /* "tp=8" does not fit in 3 */
}

static void test_bad_strategies(void)
{
    ds_strategy_t s;
    static const struct {
        const char *text;
        const char *message;
    } bad_text[] = {
        {"tp=0", "tp 0 is out of range (accepted: 1 to"},
        {"foo=1", "strategy key 'foo' is not known (accepted: dp, tp, pp"},
        {"schedule=zigzag", "schedule 'zigzag' is not known (accepted: gpipe, 1f1b, interleaved)"},
        {"recompute=some", "recompute 'some' is not known (accepted: none, selective, full)"},
        {"zero=4", "zero 4 is out of range (accepted: 0 to 3)"},
        {"order=tp-tp-pp",
         "order 'tp-tp-pp' is not accepted (accepted: a permutation of tp, dp, pp"},
        {"mbs=abc", "mbs 'abc' is not a whole number"},
        {"dp-algo=butterfly",
         "dp-algo 'butterfly' is not known (accepted: auto, ring, tree, hierarchical, ps)"},
        {"overlap=maybe", "overlap 'maybe' is not known"},
        {"tp", "strategy item 'tp' has no value"},
        {"", "strategy is empty"},
    };
    for (size_t i = 0; i < sizeof(bad_text) / sizeof(bad_text[0]); i++) {
        ds_strategy_init(&s);
        ds_strategy_t before = s;
        ds_clear_error();
        ds_status_t status = ds_strategy_parse(bad_text[i].text, &s);
        CHECK_MSG(status == DS_ERR_INVALID_ARG && strstr(ds_last_error(), bad_text[i].message),
                  "'%s': %s", bad_text[i].text, ds_last_error());
        CHECK(memcmp(&before, &s, sizeof(s)) == 0); /* untouched on failure */
    }

    static const struct {
        const char *model;
        const char *text;
        int64_t gpus;
        const char *message;
    } bad_resolve[] = {
        /* gbs=512 is no multiple of any dp these targets leave (a factor 3 or 5): no
         * value passes, and the message says which ones would with the rest changed. */
        {"gpt2-medium", "tp=3", 24,
         "tp=3 does not divide the 16 attention heads of gpt2-medium (accepted: none with the rest "
         "of this strategy; tp values its model and target allow: 1, 2, 4, 8)"},
        {"gpt2-medium", "pp=5", 40,
         "pp=5 does not divide the 24 layers of gpt2-medium (accepted: none with the rest of this "
         "strategy; pp values its model and target allow: 1, 2, 4, 8; or give "
         "first-stage-layers/last-stage-layers)"},
        {"gpt2-medium", "dp=2,tp=2,pp=2", 16,
         "dp*tp*pp = 2*2*2 = 8 does not equal the 16 target devices (accepted: dp=4"},
        {"gpt2-medium", "tp=4,pp=2", 12, "tp*pp = 8 does not divide the 12 target devices"},
        {"gpt2-medium", "tp=2,gbs=100", 16,
         "gbs=100 is not a multiple of dp*mbs = 8*1 = 8 (accepted: multiples of 8)"},
        {"gpt2-medium", "schedule=interleaved,vpp=2", 8, "schedule=interleaved needs pp >= 2"},
        {"gpt2-medium", "pp=2,vpp=2,schedule=1f1b", 8, "vpp=2 needs schedule=interleaved"},
        {"gpt2-medium", "pp=2,zero=2", 8, "zero=2 cannot be combined with pp=2"},
        {"gpt2-medium", "cp=2", 8, "cp=2 needs fused attention"},
        {"gpt2-medium", "ep=2", 8,
         "ep=2 needs a mixture-of-experts model (gpt2-medium has no experts; accepted: ep=1)"},
        {"mixtral-8x7b", "ep=3", 24, "ep=3 does not divide the 8 experts of mixtral-8x7b"},
        {"mixtral-8x7b", "tp=2,sp,ep=8", 8,
         "ep*etp = 8*2 does not divide dp*tp = 4*2 (Megatron-Core carves the expert-parallel group "
         "out of the data-parallel ranks; accepted: ep=1, 2, 4)"},
        {"mixtral-8x7b", "tp=2,ep=2", 8, "tp=2 with experts needs sp"},
        {"mixtral-8x7b", "tp=4,sp,etp=2", 8, "etp=2 is not modelled with tp=4"},
        {"qwen3-30b-a3b", "moe-topk=200", 8, "moe-topk=200 exceeds the 128 experts"},
        {"mixtral-8x7b", "tp=2,sp,cp=2,flash,ep=8", 8,
         "ep*etp = 8*2 does not divide dp*cp*tp = 2*2*2 (Megatron-Core carves the "
         "expert-parallel group out of the data- and context-parallel ranks; accepted: ep=1, 2, "
         "4)"},
        {"llama3-8b", "tp=16", 16, "tp=16 does not divide the 8 key/value heads of llama3-8b"},
        {"gpt2-medium", "pp=4,vpp=2,gbs=12,mbs=1", 8,
         "needs the 6 micro-batches to be a multiple of pp=4"},
        {"gpt2-medium", "pp=4,vpp=2,gbs=9,mbs=1", 8,
         "gbs=9 is not a multiple of dp*mbs = 2*1 = 2 (accepted: multiples of 8)"},
        {"gpt2-medium", "pp=4,vpp=5", 8,
         "pp*vpp = 4*5 does not divide the 24 layers of gpt2-medium (accepted: pp*vpp dividing 24; "
         "pp with vpp=5: none)"},
        {"gpt2-medium", "pp=2,vpp=4,first-stage-layers=10", 8,
         "vpp=4 does not divide every stage's layers (first 10, middle 14, last 14"},
        {"gpt2-medium", "pp=4,first-stage-layers=11,last-stage-layers=10", 4,
         "leave 3 layers for 2 other stages"},
        {"gpt2-medium", "pp=4,embedding-in-split", 4,
         "embedding-in-split counts 25 layers, which pp*vpp = 4*1 does not divide"},
        {"gpt2-medium", "pp=4,vpp=2,gbs=8,embedding-in-split,loss-in-split", 4,
         "embedding-in-split and loss-in-split counts 26 layers, which pp*vpp = 4*2 does not "
         "divide"},
        {"gpt2-medium", "pp=5,loss-in-split,first-stage-layers=4", 5,
         "loss-in-split cannot be combined with first-stage-layers/last-stage-layers"},
        {"gpt2-medium", "embedding-in-split", 8, "embedding-in-split needs pipeline parallelism"},
        {"gpt2-medium", "dp-algo=ps,ps-servers=9", 8,
         "ps-servers=9 exceeds dp=8 (accepted: 1 to 8)"},
        {"gpt2-medium", "pp=32", 32,
         "pp=32 exceeds the 24 layers of gpt2-medium (accepted: 1, 2, 4, 8)"},
        {"t5-large", "tp=3", 3, "tp=3 does not divide the 16 attention heads of t5-large"},
    };
    for (size_t i = 0; i < sizeof(bad_resolve) / sizeof(bad_resolve[0]); i++) {
        ds_model_t *model = model_named(bad_resolve[i].model);
        ds_strategy_init(&s);
        CHECK_OK(ds_strategy_parse(bad_resolve[i].text, &s));
        ds_strategy_t before = s;
        ds_clear_error();
        ds_status_t status = ds_strategy_resolve(&s, model, bad_resolve[i].gpus, 8);
        CHECK_MSG(status == DS_ERR_INVALID_ARG && strstr(ds_last_error(), bad_resolve[i].message),
                  "%s '%s' on %lld: %s", bad_resolve[i].model, bad_resolve[i].text,
                  (long long)bad_resolve[i].gpus, ds_last_error());
        CHECK(memcmp(&before, &s, sizeof(s)) == 0);
        ds_model_destroy(model);
    }
}

/* Resolves `text` with `field` (tp or pp) set to `value` and dp derived. */
static ds_status_t resolve_with(const ds_model_t *model, const char *text, const char *field,
                                int value, int64_t gpus)
{
    ds_strategy_t s;
    ds_strategy_init(&s);
    CHECK_OK(ds_strategy_parse(text, &s));
    if (strcmp(field, "tp") == 0)
        s.tp = value;
    else
        s.pp = value;
    s.dp = 0;
    return ds_strategy_resolve(&s, model, gpus, 8);
}

/* A refused tp or pp suggests exactly the values with which the strategy
 * passes every check: each listed value resolves, every other one is refused. */
static void test_suggestions(void)
{
    char qwen[512]; /* Qwen2.5-7B: 28 heads, 4 key/value heads, 18944 MLP columns, 28 layers */
    snprintf(qwen, sizeof(qwen), "%s/hf/qwen2.5-7b.json", DSMPI_TEST_DATA);
    static const struct {
        int qwen; /* 1: the Qwen2.5-7B config, 0: gpt2-medium */
        const char *text;
        int64_t gpus;
        const char *field;
        const char *message;
        const char *list_after; /* the suggestions follow this */
    } cases[] = {
        /* 7, 14 and 28 divide the heads but not the 4 key/value heads */
        {1, "tp=8", 64, "tp",
         "tp=8 does not divide the 28 attention heads of qwen2.5-7b (accepted: 1, 2, 4)",
         "(accepted: "},
        {1, "tp=7,gbs=448", 56, "tp",
         "tp=7 does not divide the 4 key/value heads of qwen2.5-7b (accepted: 1, 2, 4)",
         "(accepted: "},
        {1, "tp=28,gbs=448", 56, "tp",
         "tp=28 does not divide the 4 key/value heads of qwen2.5-7b (accepted: 1, 2, 4)",
         "(accepted: "},
        /* 8 and 16 divide the heads but not the target's 48 / pp */
        {0, "tp=3,pp=2,gbs=768", 48, "tp",
         "tp=3 does not divide the 16 attention heads of gpt2-medium (accepted: 1, 2, 4, 8)",
         "(accepted: "},
        /* 3, 6, 12 and 24 divide the layers but not the target */
        {0, "pp=5,gbs=480", 40, "pp",
         "pp=5 does not divide the 24 layers of gpt2-medium (accepted: 1, 2, 4, 8; or give",
         "(accepted: "},
        {0, "pp=32", 32, "pp", "pp=32 exceeds the 24 layers of gpt2-medium (accepted: 1, 2, 4, 8)",
         "(accepted: "},
        /* interleaving needs pp >= 2 and pp*vpp dividing the layers */
        {0, "pp=5,vpp=2,gbs=480", 40, "pp",
         "pp*vpp = 5*2 does not divide the 24 layers of gpt2-medium (accepted: pp*vpp dividing 24; "
         "pp with vpp=2: 2, 4)",
         "pp with vpp=2: "},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        ds_model_t *model = model_named(cases[i].qwen ? qwen : "gpt2-medium");
        if (model == NULL)
            continue;
        ds_strategy_t s;
        ds_strategy_init(&s);
        CHECK_OK(ds_strategy_parse(cases[i].text, &s));
        ds_clear_error();
        ds_status_t status = ds_strategy_resolve(&s, model, cases[i].gpus, 8);
        char message[1024];
        snprintf(message, sizeof(message), "%s", ds_last_error());
        CHECK_MSG(status == DS_ERR_INVALID_ARG && strstr(message, cases[i].message) != NULL,
                  "case %zu: %s", i, message);
        const char *list = strstr(message, cases[i].list_after);
        if (list == NULL)
            continue;
        list += strlen(cases[i].list_after);
        bool listed[129] = {false};
        for (char *end = NULL;; list = end + (*end == ',' ? 2 : 0)) {
            long value = strtol(list, &end, 10);
            if (end == list || value < 1 || value > 128)
                break;
            listed[value] = true;
            if (*end != ',')
                break;
        }
        for (int value = 1; value <= 128; value++) {
            ds_status_t got =
                resolve_with(model, cases[i].text, cases[i].field, value, cases[i].gpus);
            CHECK_MSG((got == DS_OK) == listed[value], "case %zu: %s=%d %s but is %s", i,
                      cases[i].field, value, listed[value] ? "is suggested" : "is not suggested",
                      got == DS_OK ? "accepted" : ds_last_error());
        }
        ds_model_destroy(model);
    }
}

static void test_stages_and_placement(void)
{
    ds_model_t *model = model_named("gpt3-175b");
    ds_strategy_t s;
    ds_strategy_init(&s);
    CHECK_OK(ds_strategy_parse("tp=8,pp=8,vpp=3,gbs=1536", &s));
    CHECK_OK(ds_strategy_resolve(&s, model, 1024, 8));
    /* Megatron: chunk c of pipeline rank r holds model chunk c*pp + r (4 layers each). */
    int first, count;
    ds_strategy_chunk_layers(&s, 96, 1, 2, &first, &count);
    CHECK(first == (2 * 8 + 1) * 4 && count == 4);
    CHECK_INT(ds_strategy_stage_layers(&s, 96, 5), 12);
    ds_model_destroy(model);

    ds_strategy_init(&s);
    CHECK_OK(ds_strategy_parse("pp=4,first-stage-layers=3,last-stage-layers=5", &s));
    model = model_named("gpt2-medium");
    CHECK_OK(ds_strategy_resolve(&s, model, 4, 8));
    int firsts[4], counts[4];
    for (int p = 0; p < 4; p++)
        ds_strategy_chunk_layers(&s, 24, p, 0, &firsts[p], &counts[p]);
    CHECK(counts[0] == 3 && counts[1] == 8 && counts[2] == 8 && counts[3] == 5);
    CHECK(firsts[0] == 0 && firsts[1] == 3 && firsts[2] == 11 && firsts[3] == 19);
    ds_model_destroy(model);

    /* Placement: tp fastest by default; every order is a bijection. */
    ds_strategy_init(&s);
    s.dp = 4;
    s.tp = 2;
    s.pp = 3;
    ds_coords_t c = {1, 2, 1};
    CHECK_INT(ds_strategy_rank_of(&s, c), 1 + 2 * (2 + 4 * 1));
    static const char *const orders[] = {"tp-dp-pp", "tp-pp-dp", "dp-tp-pp",
                                         "dp-pp-tp", "pp-tp-dp", "pp-dp-tp"};
    for (size_t o = 0; o < 6; o++) {
        char text[32];
        snprintf(text, sizeof(text), "order=%s", orders[o]);
        CHECK_OK(ds_strategy_parse(text, &s));
        int seen[24] = {0};
        for (int64_t r = 0; r < 24; r++) {
            ds_coords_t k = ds_strategy_coords_of(&s, r);
            CHECK(k.tp < 2 && k.dp < 4 && k.pp < 3);
            CHECK_INT(ds_strategy_rank_of(&s, k), r);
            seen[k.tp + 2 * (k.dp + 4 * k.pp)]++;
        }
        for (int i = 0; i < 24; i++)
            CHECK(seen[i] == 1);
    }
}

/* Mixture of experts: the grammar round-trips, Megatron's options map onto
 * it, and resolve derives etp and accepts ep out of dp. */
static void test_moe_items(void)
{
    ds_strategy_t s, back;
    ds_strategy_init(&s);
    CHECK_OK(ds_strategy_parse("dp=4,tp=2,sp,ep=4,etp=1,moe-dispatcher=allgather,moe-topk=1,router-"
                               "skew=1.25,moe-capacity=2",
                               &s));
    CHECK_INT(s.ep, 4);
    CHECK_INT(s.etp, 1);
    CHECK(s.moe_dispatcher == DS_MOE_DISPATCH_ALLGATHER && s.router_skew == 1.25 &&
          s.moe_capacity == 2.0 && s.moe_topk == 1);
    char text[DS_STRATEGY_TEXT_MAX];
    ds_strategy_format(&s, text, sizeof(text));
    CHECK(strstr(text, ",ep=4,etp=1,moe-dispatcher=allgather,moe-topk=1,router-skew=1.25,"
                       "moe-capacity=2") != NULL);
    ds_strategy_init(&back);
    CHECK_OK(ds_strategy_parse(text, &back));
    CHECK(memcmp(&back, &s, sizeof(s)) == 0);
    CHECK_FAILS(ds_strategy_parse("router-skew=0.5", &s), DS_ERR_INVALID_ARG,
                "router-skew '0.5' is not accepted (accepted: 1 to 64)");
    CHECK_FAILS(ds_strategy_parse("moe-dispatcher=flex", &s), DS_ERR_INVALID_ARG,
                "accepted: alltoall, allgather");

    ds_strategy_t m;
    ds_strategy_init(&m);
    CHECK_OK(ds_strategy_apply_megatron(&m, "expert-model-parallel-size", "8"));
    CHECK_OK(ds_strategy_apply_megatron(&m, "expert-tensor-parallel-size", "1"));
    CHECK_OK(ds_strategy_apply_megatron(&m, "moe-token-dispatcher-type", "allgather"));
    CHECK_OK(ds_strategy_apply_megatron(&m, "moe-router-topk", "2"));
    CHECK_OK(ds_strategy_apply_megatron(&m, "moe-grouped-gemm", NULL));
    CHECK_OK(ds_strategy_apply_megatron(&m, "moe-router-load-balancing-type", "aux_loss"));
    CHECK(m.ep == 8 && m.etp == 1 && m.moe_dispatcher == DS_MOE_DISPATCH_ALLGATHER &&
          m.moe_topk == 2);
    char item[64];
    CHECK_OK(ds_strategy_megatron_item("expert-tensor-parallel-size", "2", item, sizeof(item)));
    CHECK(strcmp(item, "etp=2") == 0);
    CHECK_FAILS(ds_strategy_apply_megatron(&m, "moe-token-dispatcher-type", "flex"),
                DS_ERR_INVALID_ARG, "accepted: alltoall, allgather");

    /* Mixtral on 64 devices: tp=2 leaves dp=32, ep=8 takes 8 of them; etp
     * follows tp unless given. */
    ds_model_t *model = model_named("mixtral-8x7b");
    ds_strategy_init(&s);
    CHECK_OK(ds_strategy_parse("tp=2,sp,ep=8", &s));
    CHECK_OK(ds_strategy_resolve(&s, model, 64, 8));
    CHECK(s.dp == 32 && s.ep == 8 && s.etp == 2);
    /* With cp the EP group may span the context-parallel ranks: on 8
     * devices cp=2 leaves dp=4, and ep=8 takes both cp ranks of each. */
    ds_strategy_init(&s);
    CHECK_OK(ds_strategy_parse("cp=2,flash,ep=8", &s));
    CHECK_OK(ds_strategy_resolve(&s, model, 8, 8));
    CHECK(s.dp == 4 && s.cp == 2 && s.ep == 8 && s.etp == 1);
    ds_model_destroy(model);
}

/* FP8 needs fp8 tensor cores: refused on A100s and V100-era presets, run
 * on Hopper and Blackwell and on the cpu (computed as bf16); fp8=off runs
 * anywhere. */
static void test_fp8_device(void)
{
    ds_strategy_t s;
    ds_strategy_init(&s);
    ds_device_spec_t a100, h100, cpu;
    CHECK_OK(ds_device_spec_lookup("a100-80g", &a100));
    CHECK_OK(ds_device_spec_lookup("h100-sxm", &h100));
    CHECK_OK(ds_device_spec_lookup("cpu", &cpu));
    CHECK_OK(ds_strategy_check_device(&s, &a100));
    CHECK_OK(ds_strategy_parse("fp8=hybrid", &s));
    CHECK_FAILS(ds_strategy_check_device(&s, &a100), DS_ERR_INVALID_ARG,
                "fp8=hybrid needs fp8 tensor cores, which a100-80g does not have");
    CHECK_OK(ds_strategy_check_device(&s, &h100));
    CHECK_OK(ds_strategy_check_device(&s, &cpu));
    CHECK_OK(ds_strategy_parse("fp8=e4m3", &s));
    CHECK_FAILS(ds_strategy_check_device(&s, &a100), DS_ERR_INVALID_ARG, "fp8 on h100-sxm");
}

int main(void)
{
    test_moe_items();
    test_parse_and_format();
    test_bad_strategies();
    test_suggestions();
    test_stages_and_placement();
    test_fp8_device();
    return check_summary("test_strategy");
}
