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

int main(void)
{
    test_grammar();
    test_placement();
    test_validation();
    return check_summary("test_context_parallel");
}
