/* The strategy search: the enumerator gives exactly the valid set of small
 * spaces (counted by hand below); fixes narrow or set fields; the memory
 * filter agrees with the simulator's memory model; the lower bound never
 * exceeds the simulated time, so branch and bound finds the exhaustive top
 * K; the union of the candidates' events holds every event of each; the
 * communication model fills missing communication costs exactly as
 * ds_comm_model_fill does; the plan's arithmetic and chart. */
#include "comm_support.h"
#include "search_support.h"

#include <stdlib.h>
#include <string.h>

static ds_model_t *load(const char *name, int64_t seq_len)
{
    ds_model_t *model = NULL;
    if (ds_model_load(name, &model) != DS_OK) {
        fprintf(stderr, "%s: %s\n", name, ds_last_error());
        exit(1);
    }
    if (seq_len > 0 && ds_model_set_seq_len(model, seq_len) != DS_OK)
        exit(1);
    return model;
}

static ds_cluster_t cluster_of(int64_t nodes, int per_node, const char *device)
{
    ds_cluster_t c;
    if (ds_cluster_init(&c, nodes, per_node, device) != DS_OK) {
        fprintf(stderr, "cluster: %s\n", ds_last_error());
        exit(1);
    }
    return c;
}

static ds_search_t *make(const ds_model_t *model, const ds_cluster_t *cluster, int64_t gbs,
                         const ds_search_options_t *options, const char *const *fixes)
{
    return search_support_make(model, cluster, gbs, NULL, options, fixes);
}

#define CHECK_TEXT(actual, expected)                                                               \
    CHECK_MSG(strcmp((actual), (expected)) == 0, "'%s', expected '%s'", (actual), (expected))

static void text_of(const ds_strategy_t *s, char *text, size_t size)
{
    ds_strategy_format(s, text, size);
}

/* bert-large (24 layers, 16 heads, sequence 512, global batch 256) on one
 * node of 4, with mbs, recompute, zero and dp-algo fixed:
 *   tp x pp dividing 4: (1,1) (1,2) (1,4) (2,1) (2,2) (4,1)          6 pairs
 *   schedules: pp = 1 runs 1f1b only; pp > 1: gpipe, 1f1b,
 *              interleaved vpp 2 and vpp 4                          4 each
 *   sp: off only with tp = 1; off and on with tp = 2, 4
 *   combinations: 1 + 4 + 4 + 2 + 4x2 + 2                          = 21
 *   (1,4) with vpp 4: pp x vpp = 16 does not divide 24, so the ends
 *   are uneven: middle stages of 8 (ceil(24 / 4) rounded up to a
 *   multiple of 4), the 8 left split 4 + 4 (each end 4 or 8)
 *   valid: 21, all of them fit in 80 GiB. */
static void test_enumerate_by_hand(void)
{
    static const char *const expected[] = {
        "dp=4,tp=1,pp=1,mbs=1,gbs=256,schedule=1f1b",
        "dp=2,tp=1,pp=2,mbs=1,gbs=256,schedule=gpipe",
        "dp=2,tp=1,pp=2,mbs=1,gbs=256,schedule=1f1b",
        "dp=2,tp=1,pp=2,mbs=1,gbs=256,schedule=interleaved,vpp=2",
        "dp=2,tp=1,pp=2,mbs=1,gbs=256,schedule=interleaved,vpp=4",
        "dp=1,tp=1,pp=4,mbs=1,gbs=256,schedule=gpipe",
        "dp=1,tp=1,pp=4,mbs=1,gbs=256,schedule=1f1b",
        "dp=1,tp=1,pp=4,mbs=1,gbs=256,schedule=interleaved,vpp=2",
        "dp=1,tp=1,pp=4,mbs=1,gbs=256,schedule=interleaved,vpp=4,first-stage-layers=4,"
        "last-stage-layers=4",
        "dp=2,tp=2,pp=1,mbs=1,gbs=256,schedule=1f1b",
        "dp=2,tp=2,pp=1,mbs=1,gbs=256,schedule=1f1b,sp",
        "dp=1,tp=2,pp=2,mbs=1,gbs=256,schedule=gpipe",
        "dp=1,tp=2,pp=2,mbs=1,gbs=256,schedule=gpipe,sp",
        "dp=1,tp=2,pp=2,mbs=1,gbs=256,schedule=1f1b",
        "dp=1,tp=2,pp=2,mbs=1,gbs=256,schedule=1f1b,sp",
        "dp=1,tp=2,pp=2,mbs=1,gbs=256,schedule=interleaved,vpp=2",
        "dp=1,tp=2,pp=2,mbs=1,gbs=256,schedule=interleaved,vpp=2,sp",
        "dp=1,tp=2,pp=2,mbs=1,gbs=256,schedule=interleaved,vpp=4",
        "dp=1,tp=2,pp=2,mbs=1,gbs=256,schedule=interleaved,vpp=4,sp",
        "dp=1,tp=4,pp=1,mbs=1,gbs=256,schedule=1f1b",
        "dp=1,tp=4,pp=1,mbs=1,gbs=256,schedule=1f1b,sp",
    };
    ds_model_t *model = load("bert-large", 0);
    ds_cluster_t cluster = cluster_of(1, 4, "h100-sxm");
    static const char *const fixes[] = {"mbs=1", "recompute=none", "zero=0", "dp-algo=auto", NULL};
    ds_search_t *search = make(model, &cluster, 0, NULL, fixes);
    CHECK_OK(ds_search_enumerate(search));
    ds_search_stats_t st;
    ds_search_get_stats(search, &st);
    CHECK_INT(st.enumerated, 21);
    CHECK_INT(st.invalid, 0);
    CHECK_INT(st.out_of_memory, 0);
    CHECK_INT(st.candidates, 21);
    CHECK_INT(ds_search_candidate_count(search), (sizeof(expected) / sizeof(expected[0])));
    for (size_t i = 0;
         i < ds_search_candidate_count(search) && i < (sizeof(expected) / sizeof(expected[0]));
         i++) {
        char text[DS_STRATEGY_TEXT_MAX];
        text_of(ds_search_candidate_at(search, i), text, sizeof(text));
        CHECK_MSG(strcmp(text, expected[i]) == 0, "candidate %zu is %s, expected %s", i, text,
                  expected[i]);
    }
    CHECK(ds_search_candidate_at(search, 21) == NULL);
    ds_search_destroy(search);

    /* flash and fp8 follow the base strategy unless fixed to several values:
     * then every candidate comes in each, the innermost dimensions. */
    static const char *const both[] = {"mbs=1",        "recompute=none", "zero=0",
                                       "dp-algo=auto", "flash=off",      "flash=on",
                                       "fp8=off",      "fp8=hybrid",     NULL};
    search = make(model, &cluster, 0, NULL, both);
    CHECK_OK(ds_search_enumerate(search));
    ds_search_get_stats(search, &st);
    CHECK_INT(st.enumerated, 4 * 21);
    CHECK_INT(st.candidates, 4 * 21);
    static const char *const first[] = {
        "dp=4,tp=1,pp=1,mbs=1,gbs=256,schedule=1f1b",
        "dp=4,tp=1,pp=1,mbs=1,gbs=256,schedule=1f1b,fp8=hybrid",
        "dp=4,tp=1,pp=1,mbs=1,gbs=256,schedule=1f1b,flash",
        "dp=4,tp=1,pp=1,mbs=1,gbs=256,schedule=1f1b,flash,fp8=hybrid",
    };
    for (size_t i = 0; i < sizeof(first) / sizeof(first[0]); i++) {
        char text[DS_STRATEGY_TEXT_MAX];
        text_of(ds_search_candidate_at(search, i), text, sizeof(text));
        CHECK_MSG(strcmp(text, first[i]) == 0, "candidate %zu is %s, expected %s", i, text,
                  first[i]);
    }
    ds_search_destroy(search);
    ds_model_destroy(model);
}

/* gpt2-medium on one node of 8 with tp = 2 and everything but zero and
 * dp-algo fixed:
 *   pp = 2 (dp = 2): zero 0..3 x dp-algo 5                          = 20
 *     invalid: zero 2 and 3 with pp > 1 (10), ps with zero 1 (1)    = 11 -> 9 valid
 *   pp = 1 (dp = 4): 20 combinations; ps with zero 1, 2, 3 invalid  = 3 -> 17 valid
 *   dp = 1 keeps zero 0 and dp-algo auto only: tp 2, pp 4 gives one. */
static void test_enumerate_zero_and_dp_algo(void)
{
    ds_model_t *model = load("gpt2-medium", 0);
    ds_cluster_t cluster = cluster_of(1, 8, "h100-sxm");
    static const char *const pp2[] = {"tp=2,pp=2,mbs=1,schedule=1f1b,no-sp,recompute=none", NULL};
    static const char *const pp1[] = {"tp=2", "pp=1", "mbs=1", "no-sp", "recompute=none", NULL};
    static const char *const pp4[] = {"tp=2",  "pp=4",           "mbs=1", "schedule=1f1b",
                                      "no-sp", "recompute=none", NULL};
    const char *const *cases[] = {pp2, pp1, pp4};
    const int64_t combos[] = {20, 20, 1}, invalid[] = {11, 3, 0};
    for (int c = 0; c < 3; c++) {
        ds_search_t *search = make(model, &cluster, 0, NULL, cases[c]);
        CHECK_OK(ds_search_enumerate(search));
        ds_search_stats_t st;
        ds_search_get_stats(search, &st);
        CHECK_INT(st.enumerated, combos[c]);
        CHECK_INT(st.invalid, invalid[c]);
        CHECK_INT(st.candidates, combos[c] - invalid[c] - st.out_of_memory);
        CHECK_INT(st.out_of_memory, 0);
        for (size_t i = 0; i < ds_search_candidate_count(search); i++) {
            const ds_strategy_t *s = ds_search_candidate_at(search, i);
            CHECK(s->tp == 2);
            CHECK(!(s->dp_algo == DS_DP_PS && s->zero != 0));
            CHECK(!(s->pp > 1 && s->zero >= 2));
            if (s->dp == 1)
                CHECK(s->zero == 0 && s->dp_algo == DS_DP_AUTO);
        }
        ds_search_destroy(search);
    }
    ds_model_destroy(model);
}

/* Fixing a key twice allows both values; other keys set a field of every
 * candidate; a bad item changes nothing. */
static void test_fixes(void)
{
    ds_model_t *model = load("bert-large", 0);
    ds_cluster_t cluster = cluster_of(1, 8, "h100-sxm");
    static const char *const fixes[] = {"tp=2",       "tp=4",       "mbs=2",  "schedule=1f1b",
                                        "bucket=80M", "no-overlap", "gbs=64", NULL};
    ds_search_t *search = make(model, &cluster, 0, NULL, fixes);
    CHECK_FAILS(ds_search_fix(search, "tp=x"), DS_ERR_INVALID_ARG, "tp");
    CHECK_FAILS(ds_search_fix(search, "pp=1,foo=1"), DS_ERR_INVALID_ARG,
                "strategy key 'foo' is not known");
    CHECK_FAILS(ds_search_fix(search, ""), DS_ERR_INVALID_ARG, "fix is empty");
    CHECK_FAILS(ds_search_fix(search, "=3"), DS_ERR_INVALID_ARG, "not a strategy item");
    CHECK_OK(ds_search_enumerate(search));
    int seen[5] = {0}, pps[9] = {0};
    for (size_t i = 0; i < ds_search_candidate_count(search); i++) {
        const ds_strategy_t *s = ds_search_candidate_at(search, i);
        CHECK(s->tp == 2 || s->tp == 4);
        seen[s->tp]++;
        pps[s->pp]++;
        CHECK(s->mbs == 2);
        CHECK(s->schedule == DS_SCHEDULE_1F1B);
        CHECK(s->bucket_params == 80000000);
        CHECK(s->overlap_grad_reduce == 0);
        CHECK(s->gbs == 64);
    }
    CHECK(seen[2] > 0 && seen[4] > 0);
    CHECK(pps[2] > 0); /* "pp=1,foo=1" failed as a whole: pp was not narrowed */
    ds_search_destroy(search);
    ds_model_destroy(model);
}

/* The memory filter keeps exactly the strategies the full simulation says
 * fit, with the same peak memory. */
static void test_memory_filter(void)
{
    ds_model_t *model = load("llama2-7b", 1024);
    ds_cluster_t cluster = cluster_of(1, 8, "a100-40g");
    ds_cluster_t roomy = cluster;
    roomy.device.memory_GiB = 1e9;
    static const char *const fixes[] = {"mbs=1", "dp-algo=auto", NULL};
    ds_search_t *all = make(model, &roomy, 64, NULL, fixes);
    ds_search_t *fit = make(model, &cluster, 64, NULL, fixes);
    CHECK_OK(ds_search_enumerate(all));
    CHECK_OK(ds_search_enumerate(fit));
    ds_search_stats_t sa, sf;
    ds_search_get_stats(all, &sa);
    ds_search_get_stats(fit, &sf);
    CHECK_INT(sa.out_of_memory, 0);
    CHECK(sf.out_of_memory > 0 && sf.candidates > 0); /* the case has both */
    CHECK_INT(sf.candidates + sf.out_of_memory, sa.candidates);
    ds_sim_t *sim = NULL;
    ds_cost_table_t *costs = NULL;
    CHECK_OK(ds_sim_create(&sim));
    CHECK_OK(ds_cost_table_create(&costs));
    ds_sim_options_t so;
    ds_sim_options_init(&so);
    so.estimate_missing = 1;
    so.keep_timeline = 0;
    size_t next_fit = 0;
    int64_t oom = 0;
    for (size_t i = 0; i < ds_search_candidate_count(all); i++) {
        const ds_strategy_t *s = ds_search_candidate_at(all, i);
        CHECK_OK(ds_sim_run(sim, model, s, &cluster, costs, &so));
        ds_sim_summary_t sum;
        ds_sim_get_summary(sim, &sum);
        ds_sim_estimate_t est;
        CHECK_OK(ds_sim_estimate(sim, model, s, &cluster, NULL, &so, &est));
        CHECK_NEAR(est.memory.total_B / (1024.0 * 1024.0 * 1024.0), sum.peak_memory_GiB, 1e-12);
        CHECK_INT(est.oom, sum.oom);
        if (sum.oom) {
            oom++;
            continue;
        }
        /* The fitting candidates, in the same order. */
        char a[DS_STRATEGY_TEXT_MAX], b[DS_STRATEGY_TEXT_MAX] = "";
        text_of(s, a, sizeof(a));
        if (next_fit < ds_search_candidate_count(fit))
            text_of(ds_search_candidate_at(fit, next_fit), b, sizeof(b));
        CHECK_MSG(strcmp(a, b) == 0, "fitting candidate %zu is %s, expected %s", next_fit, b, a);
        next_fit++;
    }
    CHECK_INT(oom, sf.out_of_memory);
    CHECK_INT(next_fit, ds_search_candidate_count(fit));
    ds_cost_table_destroy(costs);
    ds_sim_destroy(sim);
    ds_search_destroy(all);
    ds_search_destroy(fit);
    ds_model_destroy(model);
}

/* Every lower bound is at most the simulated time; branch and bound gives
 * the exhaustive top K; layer and stage level rank alike. */
static void test_bound_and_ranking(void)
{
    ds_model_t *model = load("llama2-7b", 1024);
    ds_cluster_t cluster = cluster_of(2, 8, "a100-80g");
    static const char *const fixes[] = {"mbs=1", "recompute=none", NULL};
    ds_search_options_t o;
    search_support_exhaustive(&o);
    ds_search_t *exhaustive = make(model, &cluster, 64, &o, fixes);
    CHECK_OK(ds_search_run(exhaustive, NULL, MPI_COMM_NULL));
    ds_search_stats_t se;
    ds_search_get_stats(exhaustive, &se);
    CHECK(se.candidates > 50);
    CHECK_INT(se.simulated, se.candidates);
    CHECK_INT(se.bounded, 0);
    CHECK_INT(se.failed, 0);
    CHECK(se.worst_exact);
    CHECK_INT(ds_search_result_count(exhaustive), se.candidates);
    ds_search_result_t prev, r, worst;
    memset(&prev, 0, sizeof(prev));
    double min_ratio = 1e300;
    for (size_t i = 0; i < ds_search_result_count(exhaustive); i++) {
        CHECK_OK(ds_search_result_at(exhaustive, i, &r));
        CHECK_MSG(r.lower_bound_s > 0 && r.lower_bound_s <= r.iteration_s,
                  "candidate %lld: bound %.9g above time %.9g", (long long)r.candidate,
                  r.lower_bound_s, r.iteration_s);
        if (r.lower_bound_s > 0 && r.iteration_s / r.lower_bound_s < min_ratio)
            min_ratio = r.iteration_s / r.lower_bound_s;
        if (i > 0)
            CHECK(prev.iteration_s < r.iteration_s ||
                  (prev.iteration_s == r.iteration_s && prev.candidate < r.candidate));
        CHECK(r.memory_GiB > 0 && r.memory_GiB <= 80.0);
        CHECK(r.mfu > 0 && r.mfu < 1);
        if (r.strategy.pp > 1) /* shown results carry the bubble the timeline gives */
            CHECK(r.bubble_fraction > 0 && r.bubble_fraction < 1);
        CHECK(r.comm_exposed_s >= 0 && r.comm_exposed_s < r.iteration_s);
        CHECK_NEAR(r.samples_per_s, 64.0 / r.iteration_s, 1e-9);
        prev = r;
    }
    CHECK_OK(ds_search_worst(exhaustive, &worst));
    CHECK(worst.iteration_s == prev.iteration_s);
    printf("bound: %lld candidates, time / bound at least %.4f\n", (long long)se.candidates,
           min_ratio);

    for (int granularity = 0; granularity < 2; granularity++) {
        o.bound = 1;
        o.top_k = 7;
        o.all_variants = 1;
        o.granularity = granularity == 0 ? DS_SIM_STAGE : DS_SIM_LAYER;
        ds_search_t *bb = make(model, &cluster, 64, &o, fixes);
        CHECK_OK(ds_search_run(bb, NULL, MPI_COMM_NULL));
        ds_search_stats_t sb;
        ds_search_get_stats(bb, &sb);
        CHECK(sb.bounded > 0); /* the bound skipped some */
        CHECK_INT(sb.simulated + sb.bounded, sb.candidates);
        search_support_check_top(exhaustive, bb, 7);
        ds_search_destroy(bb);
    }
    ds_search_destroy(exhaustive);
    ds_model_destroy(model);
}

/* The exhaustive ranking of every candidate (all_variants, no bound)
 * grouped by hand: consecutive equal (timeline hash, time, memory) runs are
 * not enough, equal groups may be apart; the first result of each group in
 * ranking order stands for it. */
typedef struct hand_group {
    ds_search_result_t first;
    int64_t members[64];
    int count;
} hand_group_t;

static int group_by_hand(const ds_search_t *all, hand_group_t *groups, int max)
{
    int n = 0;
    for (size_t i = 0; i < ds_search_result_count(all); i++) {
        ds_search_result_t r;
        CHECK_OK(ds_search_result_at(all, i, &r));
        CHECK_INT(r.num_variants, 0);
        int g = 0;
        while (g < n && !(groups[g].first.timeline_hash == r.timeline_hash &&
                          groups[g].first.iteration_s == r.iteration_s &&
                          groups[g].first.memory_GiB == r.memory_GiB))
            g++;
        if (g == n) {
            if (n == max)
                break;
            groups[n].first = r;
            groups[n].count = 0;
            n++;
        } else if (groups[g].count < 64) {
            groups[g].members[groups[g].count++] = r.candidate;
        }
    }
    return n;
}

/* Equivalent variants: strategies whose timelines and memory are equal
 * share one result, the top K holds K distinct timelines, the variants are
 * the ones the exhaustive ranking holds (branch and bound included), and
 * all_variants ranks them one by one as before. */
static void test_equivalent_variants(void)
{
    ds_model_t *model = load("bert-large", 128);
    ds_cluster_t cluster = cluster_of(1, 8, "h100-sxm");
    /* fused attention and fp8 off: the candidate numbers below are those of
     * the space without them */
    static const char *const fixes[] = {"mbs=1", "flash=off", "fp8=off", NULL};
    ds_search_options_t o;
    ds_search_options_init(&o);
    o.estimate_missing = 1;
    o.top_k = 10;
    o.all_variants = 1;
    /* As before: the best four are one timeline, dp-algo auto, ring, tree,
     * hierarchical (candidates 5 to 8), ranked one by one. */
    ds_search_t *one_by_one = make(model, &cluster, 0, &o, fixes);
    CHECK_OK(ds_search_run(one_by_one, NULL, MPI_COMM_NULL));
    CHECK_INT(ds_search_result_count(one_by_one), 10);
    ds_search_result_t a, b;
    CHECK_OK(ds_search_result_at(one_by_one, 0, &a));
    CHECK_INT(a.candidate, 5);
    for (size_t i = 1; i < 4; i++) {
        CHECK_OK(ds_search_result_at(one_by_one, i, &b));
        CHECK_INT(b.candidate, 5 + (int64_t)i);
        CHECK(b.iteration_s == a.iteration_s && b.timeline_hash == a.timeline_hash &&
              b.memory_GiB == a.memory_GiB);
        CHECK_INT(b.num_variants, 0);
    }
    char text[512];
    ds_search_variants_text(one_by_one, &a, text, sizeof(text));
    CHECK_TEXT(text, "");

    /* Grouped (the default): one result for those four. */
    o.all_variants = 0;
    ds_search_t *grouped = make(model, &cluster, 0, &o, fixes);
    CHECK_OK(ds_search_run(grouped, NULL, MPI_COMM_NULL));
    CHECK_INT(ds_search_result_count(grouped), 10);
    CHECK_OK(ds_search_result_at(grouped, 0, &b));
    CHECK_INT(b.candidate, 5);
    CHECK_INT(b.num_variants, 3);
    CHECK(b.variants[0] == 6 && b.variants[1] == 7 && b.variants[2] == 8);
    ds_search_variants_text(grouped, &b, text, sizeof(text));
    CHECK_TEXT(text, "dp-algo=ring,tree,hierarchical");
    /* Every kept result's hash (the search asks for it only then) is its
     * strategy's, simulated alone with the hash on: the ranked ones and the worst. */
    ds_sim_options_t so;
    ds_sim_t *sim = search_support_alone(&so);
    for (size_t i = 0; i <= ds_search_result_count(grouped); i++) {
        ds_search_result_t r;
        if (i < ds_search_result_count(grouped))
            CHECK_OK(ds_search_result_at(grouped, i, &r));
        else
            CHECK_OK(ds_search_worst(grouped, &r));
        CHECK_OK(ds_sim_run(sim, model, &r.strategy, &cluster, NULL, &so));
        ds_sim_summary_t sum;
        ds_sim_get_summary(sim, &sum);
        CHECK_MSG(sum.timeline_hash == r.timeline_hash && r.timeline_hash != 0,
                  "result %zu: hash %llx, alone %llx", i, (unsigned long long)r.timeline_hash,
                  (unsigned long long)sum.timeline_hash);
    }
    ds_sim_destroy(sim);
    /* zero=2 ties in time but needs less memory: a row of its own. */
    CHECK_OK(ds_search_result_at(grouped, 1, &b));
    CHECK(b.iteration_s == a.iteration_s && b.memory_GiB < a.memory_GiB);
    CHECK_INT(b.strategy.zero, 2);

    /* The exhaustive ranking grouped by hand gives the same rows and variants. */
    o.all_variants = 1;
    o.bound = 0;
    o.top_k = 100000;
    ds_search_t *all = make(model, &cluster, 0, &o, fixes);
    CHECK_OK(ds_search_run(all, NULL, MPI_COMM_NULL));
    static hand_group_t groups[10];
    CHECK_INT(group_by_hand(all, groups, 10), 10);
    int64_t merged = 0;
    for (size_t i = 0; i < 10; i++) {
        CHECK_OK(ds_search_result_at(grouped, i, &b));
        CHECK_INT(b.candidate, groups[i].first.candidate);
        CHECK(b.iteration_s == groups[i].first.iteration_s);
        CHECK_INT(b.num_variants, groups[i].count);
        for (int v = 0; v < groups[i].count && v < DS_SEARCH_MAX_VARIANTS; v++)
            CHECK_INT(b.variants[v], groups[i].members[v]); /* in index order, as ranked */
        for (size_t j = 0; j < i; j++) {                    /* K distinct timelines */
            ds_search_result_t c;
            CHECK_OK(ds_search_result_at(grouped, j, &c));
            CHECK(!(c.timeline_hash == b.timeline_hash && c.iteration_s == b.iteration_s &&
                    c.memory_GiB == b.memory_GiB));
        }
        merged += b.num_variants;
    }
    CHECK(merged >= 10);

    /* A variant that changes several fields, and more than are stored. */
    ds_search_result_t made = b;
    made.strategy = *ds_search_candidate_at(grouped, 5); /* zero=1 */
    made.num_variants = 2;
    made.variants[0] = 10; /* zero=2,dp-algo=ring */
    made.variants[1] = 6;  /* zero=1,dp-algo=ring */
    ds_search_variants_text(grouped, &made, text, sizeof(text));
    CHECK_TEXT(text, "zero=2+dp-algo=ring; dp-algo=ring");
    made.num_variants = 40; /* 16 stored: 10, then 6 fifteen times */
    for (int v = 2; v < DS_SEARCH_MAX_VARIANTS; v++)
        made.variants[v] = 6;
    ds_search_variants_text(grouped, &made, text, sizeof(text));
    CHECK_MSG(strncmp(text, "zero=2+dp-algo=ring; dp-algo=ring,ring,", 39) == 0 &&
                  strlen(text) > 13 && strcmp(text + strlen(text) - 13, ", and 24 more") == 0,
              "'%s'", text);
    ds_search_destroy(all);
    ds_search_destroy(grouped);
    ds_search_destroy(one_by_one);
    ds_model_destroy(model);
}

/* The union of the candidates' events holds each candidate's events, with
 * the counts added. */
static void test_events_union(void)
{
    ds_model_t *model = load("bert-large", 128);
    ds_cluster_t cluster = cluster_of(1, 4, "h100-sxm");
    static const char *const fixes[] = {"mbs=1", "recompute=none", "zero=0", "dp-algo=auto", NULL};
    ds_search_t *search = make(model, &cluster, 0, NULL, fixes);
    ds_event_set_t *all = NULL;
    CHECK_FAILS(ds_search_events(search, &all), DS_ERR_INVALID_ARG, "not enumerated");
    CHECK_OK(ds_search_enumerate(search));
    CHECK_OK(ds_search_events(search, &all));
    size_t largest = 0;
    int64_t total = 0, union_total = 0;
    for (size_t i = 0; i < ds_search_candidate_count(search); i++) {
        ds_event_set_t *one = NULL;
        CHECK_OK(ds_events_generate(model, ds_search_candidate_at(search, i), &cluster, &one));
        largest = ds_event_set_size(one) > largest ? ds_event_set_size(one) : largest;
        for (size_t j = 0; j < ds_event_set_size(one); j++) {
            const ds_event_t *e = ds_event_set_at(one, j);
            CHECK(ds_event_set_find(all, &e->key) != NULL);
            total += e->count;
        }
        ds_event_set_destroy(one);
    }
    for (size_t j = 0; j < ds_event_set_size(all); j++)
        union_total += ds_event_set_at(all, j)->count;
    CHECK(ds_event_set_size(all) > largest); /* strategies differ in their events */
    CHECK_INT(union_total, total);
    ds_event_set_destroy(all);
    ds_search_destroy(search);
    ds_model_destroy(model);
}

/* With a communication model, the simulator predicts the communication
 * costs the table lacks: the same times as filling the table with
 * ds_comm_model_fill first, and, for a model without samples, as
 * estimating them. */
static void test_comm_model_costs(void)
{
    ds_model_t *model = load("gpt2-medium", 256);
    ds_cluster_t cluster = cluster_of(4, 4, "h100-sxm");
    ds_comm_model_t *comm = NULL;
    CHECK_OK(ds_comm_model_create(&cluster, NULL, 0, NULL, &comm));
    static const char *const fixes[] = {"mbs=1", "recompute=none", "zero=0,zero=1", NULL};
    ds_search_options_t o;
    ds_search_options_init(&o);
    o.estimate_missing = 1;
    o.comm_model = comm;
    o.top_k = 3;
    ds_search_t *search = make(model, &cluster, 64, &o, fixes);
    CHECK_OK(ds_search_run(search, NULL, MPI_COMM_NULL));
    CHECK_INT(ds_search_result_count(search), 3);
    ds_sim_t *sim = NULL;
    CHECK_OK(ds_sim_create(&sim));
    for (size_t i = 0; i < 3; i++) {
        ds_search_result_t r;
        CHECK_OK(ds_search_result_at(search, i, &r));
        ds_event_set_t *set = NULL;
        ds_cost_table_t *filled = NULL;
        size_t count = 0;
        CHECK_OK(ds_events_generate(model, &r.strategy, &cluster, &set));
        CHECK_OK(ds_cost_table_create(&filled));
        CHECK_OK(ds_comm_model_fill(comm, set, filled, &count));
        CHECK(count > 0);
        ds_sim_options_t so;
        ds_sim_options_init(&so);
        so.estimate_missing = 1;
        CHECK_OK(ds_sim_run(sim, model, &r.strategy, &cluster, filled, &so));
        ds_sim_summary_t sum;
        ds_sim_get_summary(sim, &sum);
        CHECK(sum.iteration_s == r.iteration_s);
        /* Without the model the estimate of the links is the same model's
         * without samples: the same times. */
        ds_cost_table_t *empty = NULL;
        CHECK_OK(ds_cost_table_create(&empty));
        CHECK_OK(ds_sim_run(sim, model, &r.strategy, &cluster, empty, &so));
        ds_sim_get_summary(sim, &sum);
        CHECK(sum.iteration_s == r.iteration_s);
        ds_cost_table_destroy(empty);
        ds_cost_table_destroy(filled);
        ds_event_set_destroy(set);
    }
    ds_sim_destroy(sim);
    ds_search_destroy(search);
    ds_comm_model_destroy(comm);
    ds_model_destroy(model);
}

/* All-reduce samples of 8 GPUs per node on 1 and 2 nodes: NVLink inside a
 * node, a slower network across. */
static ds_comm_model_t *two_node_model(const ds_cluster_t *cluster)
{
    ds_comm_sample_t samples[2 * 21];
    size_t n = 0;
    for (int nodes = 1; nodes <= 2; nodes++)
        for (int64_t bytes = 1024; bytes <= (1LL << 30); bytes *= 2) {
            int group = 8 * nodes;
            double busbw = nodes == 1 ? 200e9 : 40e9;
            double t = 10e-6 * nodes + (double)bytes * 2.0 * (group - 1) / group / busbw;
            fill_comm_sample(&samples[n++], DS_COMM_ALLREDUCE, bytes, group, nodes, 8, t,
                             DS_PROV_IMPORTED, 20, "synthetic");
        }
    ds_comm_model_t *comm = NULL;
    CHECK_OK(ds_comm_model_create(cluster, samples, n, NULL, &comm));
    return comm;
}

/* The iteration time of `strategy` at one end of the band, the
 * communication costs from `costs` or else from `comm`. */
static double band_run(ds_sim_t *sim, const ds_model_t *model, const ds_strategy_t *strategy,
                       const ds_cluster_t *cluster, const ds_cost_table_t *costs,
                       const ds_comm_model_t *comm, ds_sim_band_t band)
{
    ds_sim_options_t so;
    ds_sim_options_init(&so);
    so.estimate_missing = 1;
    so.comm_model = comm;
    so.band = band;
    CHECK_OK(ds_sim_run(sim, model, strategy, cluster, costs, &so));
    ds_sim_summary_t sum;
    ds_sim_get_summary(sim, &sum);
    return sum.iteration_s;
}

/* A table with every compute cost of the strategy set as measured (its
 * device-model estimate, without a band). */
static ds_cost_table_t *compute_measured(const ds_model_t *model, const ds_strategy_t *s,
                                         const ds_cluster_t *cluster)
{
    ds_event_set_t *set = NULL;
    ds_cost_table_t *table = NULL;
    CHECK_OK(ds_events_generate(model, s, cluster, &set));
    CHECK_OK(ds_cost_table_create(&table));
    for (size_t i = 0; i < ds_event_set_size(set); i++) {
        const ds_event_t *e = ds_event_set_at(set, i);
        if (e->key.kind != DS_EVENT_COMPUTE)
            continue;
        ds_cost_t c = {e->estimated_s,  e->estimated_s, e->estimated_s, e->estimated_s, 1,
                       DS_PROV_MEASURED};
        CHECK_OK(ds_cost_table_set(table, &e->key, &c));
    }
    ds_event_set_destroy(set);
    return table;
}

/* The band of the iteration time: three runs, every cost with a band at the
 * low end, as given, at the high end.  With compute measured, data
 * parallelism over 8 nodes from logs of 1 and 2 widens it, whether the
 * costs come from the model during the run or from a table it filled; on
 * the 2 nodes measured it collapses.  With compute from the device model,
 * the band is never empty. */
static void test_band_runs(void)
{
    ds_model_t *model = load("gpt2-medium", 256);
    ds_sim_t *sim = NULL;
    CHECK_OK(ds_sim_create(&sim));
    for (int nodes = 8; nodes >= 2; nodes -= 6) {
        ds_cluster_t cluster = cluster_of(nodes, 8, "a100-80g");
        ds_comm_model_t *comm = two_node_model(&cluster);
        ds_strategy_t s;
        ds_strategy_init(&s);
        CHECK_OK(ds_strategy_parse("tp=1,pp=1,mbs=1", &s));
        CHECK_OK(ds_strategy_resolve(&s, model, ds_cluster_num_gpus(&cluster), 8));
        ds_cost_table_t *compute = compute_measured(model, &s, &cluster);
        double low = band_run(sim, model, &s, &cluster, compute, comm, DS_SIM_BAND_LOW);
        double mid = band_run(sim, model, &s, &cluster, compute, comm, DS_SIM_BAND_EXPECTED);
        double high = band_run(sim, model, &s, &cluster, compute, comm, DS_SIM_BAND_HIGH);
        if (nodes > 2)
            CHECK_MSG(low < mid && mid < high, "%d nodes: %g < %g < %g", nodes, low, mid, high);
        else
            CHECK_MSG(low == mid && mid == high, "%d nodes: %g, %g, %g", nodes, low, mid, high);
        /* Compute from the device model: the same expected time (the
         * estimates are those of the table), a band around it. */
        double mlow = band_run(sim, model, &s, &cluster, NULL, comm, DS_SIM_BAND_LOW);
        double mhigh = band_run(sim, model, &s, &cluster, NULL, comm, DS_SIM_BAND_HIGH);
        CHECK(band_run(sim, model, &s, &cluster, NULL, comm, DS_SIM_BAND_EXPECTED) == mid);
        CHECK_MSG(mlow < low && high < mhigh, "%d nodes: %g < %g, %g < %g", nodes, mlow, low, high,
                  mhigh);
        ds_event_set_t *set = NULL;
        ds_cost_table_t *filled = compute;
        CHECK_OK(ds_events_generate(model, &s, &cluster, &set));
        CHECK_OK(ds_comm_model_fill(comm, set, filled, NULL));
        CHECK(band_run(sim, model, &s, &cluster, filled, NULL, DS_SIM_BAND_LOW) == low);
        CHECK(band_run(sim, model, &s, &cluster, filled, NULL, DS_SIM_BAND_EXPECTED) == mid);
        CHECK(band_run(sim, model, &s, &cluster, filled, NULL, DS_SIM_BAND_HIGH) == high);
        /* The same costs set as measured (no band): the band collapses. */
        ds_cost_table_t *measured = NULL;
        CHECK_OK(ds_cost_table_create(&measured));
        for (size_t i = 0; i < ds_cost_table_size(filled); i++) {
            const ds_event_key_t *key;
            const ds_cost_t *cost;
            ds_cost_table_at(filled, i, &key, &cost);
            ds_cost_t c = *cost;
            c.provenance = DS_PROV_MEASURED;
            CHECK_OK(ds_cost_table_set(measured, key, &c));
        }
        CHECK(band_run(sim, model, &s, &cluster, measured, NULL, DS_SIM_BAND_LOW) == mid);
        CHECK(band_run(sim, model, &s, &cluster, measured, NULL, DS_SIM_BAND_HIGH) == mid);
        ds_cost_table_destroy(measured);
        ds_sim_options_t bad;
        ds_sim_options_init(&bad);
        bad.band = (ds_sim_band_t)7;
        CHECK_FAILS(ds_sim_run(sim, model, &s, &cluster, filled, &bad), DS_ERR_INVALID_ARG,
                    "band end 7");
        ds_cost_table_destroy(filled);
        ds_event_set_destroy(set);
        /* The search's results shown carry the same band. */
        static const char *const fixes[] = {"mbs=1", "recompute=none", NULL};
        ds_search_options_t o;
        ds_search_options_init(&o);
        o.estimate_missing = 1;
        o.comm_model = comm;
        o.top_k = 2;
        ds_search_t *search = make(model, &cluster, 64, &o, fixes);
        CHECK_OK(ds_search_run(search, NULL, MPI_COMM_NULL));
        CHECK_INT(ds_search_result_count(search), 2);
        for (size_t i = 0; i < ds_search_result_count(search); i++) {
            ds_search_result_t r;
            CHECK_OK(ds_search_result_at(search, i, &r));
            CHECK(r.iteration_low_s ==
                  band_run(sim, model, &r.strategy, &cluster, NULL, comm, DS_SIM_BAND_LOW));
            CHECK(r.iteration_high_s ==
                  band_run(sim, model, &r.strategy, &cluster, NULL, comm, DS_SIM_BAND_HIGH));
            /* Compute from the device model: a band even where
             * communication has none. */
            CHECK(r.iteration_low_s < r.iteration_s && r.iteration_s < r.iteration_high_s);
        }
        ds_search_destroy(search);
        ds_comm_model_destroy(comm);
    }
    ds_sim_destroy(sim);
    ds_model_destroy(model);
}

/* Missing costs stop the search with the first missing key. */
static void test_missing_costs(void)
{
    ds_model_t *model = load("bert-large", 128);
    ds_cluster_t cluster = cluster_of(1, 4, "h100-sxm");
    ds_cost_table_t *costs = NULL;
    CHECK_OK(ds_cost_table_create(&costs));
    ds_search_t *search = make(model, &cluster, 0, NULL, NULL);
    CHECK_FAILS(ds_search_run(search, costs, MPI_COMM_NULL), DS_ERR_NOT_FOUND,
                "have no cost (first: ");
    CHECK_INT(ds_search_result_count(search), 0);
    ds_search_result_t r;
    CHECK_FAILS(ds_search_result_at(search, 0, &r), DS_ERR_INVALID_ARG, "result 0");
    ds_search_destroy(search);
    ds_search_options_t o;
    ds_search_options_init(&o);
    o.top_k = 0;
    ds_search_t *bad = NULL;
    CHECK_FAILS(ds_search_create(model, &cluster, NULL, &o, &bad), DS_ERR_INVALID_ARG, "top 0");
    CHECK(bad == NULL);
    ds_search_destroy(NULL);
    ds_cost_table_destroy(costs);
    ds_model_destroy(model);
}

/* Planning arithmetic with numbers worked out by hand. */
static void test_plan_arithmetic(void)
{
    ds_plan_inputs_t in;
    ds_plan_inputs_init(&in);
    CHECK_INT(in.gpus_per_node, 8);
    CHECK(in.charge_factor == 1.0);
    in.tokens = 1e12;
    in.price_per_gpu_hour = 2.0;
    in.charge_factor = 1.5;
    ds_plan_row_t r;
    /* 1024 GPUs, 2 s per iteration of 1024 x 2048 = 2,097,152 tokens:
     * steps = ceil(1e12 / 2097152) = ceil(476837.158...) = 476838;
     * time = 953,676 s = 11.0379166... days; GPU-hours = 1024 x 953676 / 3600
     * = 271,267.84; node-hours = 128 x 953676 / 3600 = 33,908.48;
     * SU = node-hours x 1.5 = 50,862.72; cost = GPU-hours x 2 x 1.5 = 813,803.52. */
    CHECK_OK(ds_plan_row_compute(&in, 1024, 2.0, 1024, 2048, &r));
    CHECK_INT(r.nodes, 128);
    CHECK(r.steps == 476838.0);
    CHECK_NEAR(r.tokens_per_s, 1048576.0, 1e-12);
    CHECK(r.goodput == 1.0);
    CHECK_NEAR(r.train_s, 953676.0, 1e-12);
    CHECK_NEAR(r.days, 953676.0 / 86400.0, 1e-12);
    CHECK_NEAR(r.gpu_hours, 1024.0 * r.days * 24.0, 1e-12);
    CHECK_NEAR(r.gpu_hours, 271267.84, 1e-12);
    CHECK_NEAR(r.node_hours, 33908.48, 1e-12);
    CHECK_NEAR(r.service_units, 50862.72, 1e-12);
    CHECK_NEAR(r.cost, 813803.52, 1e-12);
    /* 2048 GPUs at 1.1 s: efficiency = GPU-hours(1024) / GPU-hours(2048)
     * = (1024 x 2) / (2048 x 1.1) = 0.90909... */
    ds_plan_row_t rows[2];
    CHECK_OK(ds_plan_row_compute(&in, 2048, 1.1, 1024, 2048, &rows[0]));
    rows[1] = r;
    ds_plan_set_efficiency(rows, 2);
    CHECK_NEAR(rows[0].efficiency, 2048.0 / (2048.0 * 1.1), 1e-12);
    CHECK(rows[1].efficiency == 1.0);
    /* Scaling: 2048 GPUs at 1.1 s train faster than 1024 at 2 s; 4096 GPUs at
     * 2.5 s train slower than both, the fastest smaller one being 2048 (row 0). */
    size_t faster = 99;
    CHECK_INT(ds_plan_scaling_stops(rows, 2, 0, &faster), 0);
    CHECK_INT(ds_plan_scaling_stops(rows, 2, 1, &faster), 0);
    CHECK(faster == 99);
    ds_plan_row_t three[3] = {rows[0], rows[1], r};
    CHECK_OK(ds_plan_row_compute(&in, 4096, 2.5, 1024, 2048, &three[2]));
    CHECK_INT(ds_plan_scaling_stops(three, 3, 2, &faster), 1);
    CHECK(faster == 0);
    CHECK_INT(ds_plan_scaling_stops(three, 3, 3, &faster), 0); /* out of range */
    /* Samples instead of tokens: ceil(1e6 / 1024) = 977 steps. */
    in.tokens = 0;
    in.samples = 1e6;
    CHECK_OK(ds_plan_row_compute(&in, 1024, 2.0, 1024, 2048, &r));
    CHECK(r.steps == 977.0);
    /* Partial node: 12 GPUs are 2 nodes of 8. */
    CHECK_OK(ds_plan_row_compute(&in, 12, 2.0, 1024, 2048, &r));
    CHECK_INT(r.nodes, 2);

    /* Goodput: checkpoints every 30 min costing 60 s, restart 15 min, one
     * GPU's MTBF 49,152 h, on 16,384 GPUs (an interruption every 3 h):
     * 1800 / 1860 x (1 - (900 + 930) / 10800) = 0.80378... */
    in.checkpoint_interval_s = 1800;
    in.checkpoint_cost_s = 60;
    in.restart_s = 900;
    in.mtbf_gpu_s = 49152.0 * 3600.0;
    double expected = 1800.0 / 1860.0 * (1.0 - 1830.0 / 10800.0);
    CHECK_NEAR(ds_plan_goodput(&in, 16384), expected, 1e-12);
    CHECK_OK(ds_plan_row_compute(&in, 16384, 2.0, 1024, 2048, &r));
    CHECK_NEAR(r.train_s, 977.0 * 2.0 / expected, 1e-12);
    /* Checkpoints alone cost delta / (tau + delta). */
    in.mtbf_gpu_s = 0;
    CHECK_NEAR(ds_plan_goodput(&in, 16384), 1800.0 / 1860.0, 1e-12);
    /* Interruptions faster than the run can checkpoint: never finishes. */
    in.mtbf_gpu_s = 16384.0 * 600.0; /* one every 10 minutes */
    CHECK(ds_plan_goodput(&in, 16384) == 0.0);
    CHECK_FAILS(ds_plan_row_compute(&in, 16384, 2.0, 1024, 2048, &r), DS_ERR_INVALID_ARG,
                "never finishes");
    in.checkpoint_interval_s = 0;
    CHECK_FAILS(ds_plan_row_compute(&in, 16384, 2.0, 1024, 2048, &r), DS_ERR_INVALID_ARG,
                "no checkpoints");
    /* Bad inputs. */
    ds_plan_inputs_init(&in);
    CHECK_FAILS(ds_plan_row_compute(&in, 8, 2.0, 8, 8, &r), DS_ERR_INVALID_ARG,
                "no training budget");
    in.tokens = 1e9;
    CHECK_FAILS(ds_plan_row_compute(&in, 0, 2.0, 8, 8, &r), DS_ERR_INVALID_ARG, "0 GPUs");
    CHECK_FAILS(ds_plan_row_compute(&in, 8, 0.0, 8, 8, &r), DS_ERR_INVALID_ARG, "iteration of 0 s");
    in.price_per_gpu_hour = -1;
    CHECK_FAILS(ds_plan_row_compute(&in, 8, 1.0, 8, 8, &r), DS_ERR_INVALID_ARG, "negative");
}

/* The whole of a small file, NUL-terminated, in a static buffer. */
static const char *slurp(const char *path)
{
    static char text[1 << 16];
    FILE *f = fopen(path, "r");
    size_t n = f != NULL ? fread(text, 1, sizeof(text) - 1, f) : 0;
    if (f != NULL)
        fclose(f);
    text[n] = '\0';
    return text;
}

/* The plan chart: days and GPU-hours always, cost only with a price, the
 * assumed share only when some is assumed (100% only when all is). */
static void test_plan_chart(void)
{
    const char *path = "test_search_chart.svg";
    ds_plan_inputs_t in;
    ds_plan_inputs_init(&in);
    in.tokens = 1e12;
    ds_plan_row_t rows[2];
    CHECK_OK(ds_plan_row_compute(&in, 512, 2.0, 512, 8192, &rows[0]));
    CHECK_OK(ds_plan_row_compute(&in, 256, 3.9, 512, 8192, &rows[1]));
    ds_plan_set_efficiency(rows, 2);
    CHECK_OK(ds_plan_write_svg(rows, 2, NULL, path));
    const char *svg = slurp(path);
    CHECK(strstr(svg, "data-series=\"days to train\"") != NULL);
    CHECK(strstr(svg, "data-series=\"GPU-hours\"") != NULL);
    CHECK(strstr(svg, "cost") == NULL);
    CHECK(strstr(svg, "ASSUMED") == NULL);
    double none[2] = {0.0, 0.0}, all[2] = {1.0, 1.0}, some[2] = {0.5, 0.25},
           almost[2] = {0.9996, 0.9996};
    ds_plan_chart_t chart = {.title = "a title", .assumed_share = none};
    CHECK_OK(ds_plan_write_svg(rows, 2, &chart, path));
    svg = slurp(path);
    CHECK(strstr(svg, ">a title</text>") != NULL);
    CHECK(strstr(svg, "class=\"band\"") == NULL);
    /* A band: shaded around each series, named in the legend and the tooltips. */
    ds_plan_row_t lows[2] = {rows[0], rows[1]}, highs[2] = {rows[0], rows[1]};
    for (int i = 0; i < 2; i++) {
        lows[i].days *= 0.5;
        lows[i].gpu_hours *= 0.5;
        highs[i].days *= 2.0;
        highs[i].gpu_hours *= 2.0;
    }
    chart.low = lows;
    chart.high = highs;
    CHECK_OK(ds_plan_write_svg(rows, 2, &chart, path));
    svg = slurp(path);
    CHECK(strstr(svg, "<polygon class=\"band\" data-band=\"days to train\"") != NULL);
    CHECK(strstr(svg, "<polygon class=\"band\" data-band=\"GPU-hours\"") != NULL);
    CHECK(strstr(svg, ">band</text>") != NULL && strstr(svg, " (band ") != NULL);
    /* Every size without a band: nothing shaded. */
    chart.low = chart.high = rows;
    CHECK_OK(ds_plan_write_svg(rows, 2, &chart, path));
    CHECK(strstr(slurp(path), "class=\"band\"") == NULL);
    chart.low = chart.high = NULL;
    CHECK(strstr(svg, "ASSUMED") == NULL && strstr(svg, ">assumed<") == NULL);
    chart.assumed_share = all;
    CHECK_OK(ds_plan_write_svg(rows, 2, &chart, path));
    CHECK(strstr(slurp(path), "ASSUMED: 100% of the predicted time") != NULL);
    chart.assumed_share = some;
    CHECK_OK(ds_plan_write_svg(rows, 2, &chart, path));
    CHECK(strstr(slurp(path), "ASSUMED: 25% to 50% of the predicted time") != NULL);
    chart.assumed_share = almost;
    CHECK_OK(ds_plan_write_svg(rows, 2, &chart, path));
    CHECK(strstr(slurp(path), "ASSUMED: 99.9% of the predicted time") != NULL);
    /* A price: the cost panel, at the price times the charge factor. */
    in.price_per_gpu_hour = 2.0;
    in.charge_factor = 1.5;
    CHECK_OK(ds_plan_row_compute(&in, 512, 2.0, 512, 8192, &rows[0]));
    CHECK_OK(ds_plan_row_compute(&in, 256, 3.9, 512, 8192, &rows[1]));
    CHECK_OK(ds_plan_write_svg(rows, 2, NULL, path));
    CHECK(strstr(slurp(path), "data-series=\"cost at 3 per GPU-hour\"") != NULL);
    CHECK_FAILS(ds_plan_write_svg(rows, 0, NULL, path), DS_ERR_INVALID_ARG, "no rows");
    CHECK_FAILS(ds_plan_write_svg(rows, 2, NULL, "no/such/dir/chart.svg"), DS_ERR_IO,
                "no/such/dir/chart.svg");
    remove(path);
}

int main(void)
{
    test_enumerate_by_hand();
    test_enumerate_zero_and_dp_algo();
    test_fixes();
    test_memory_filter();
    test_bound_and_ranking();
    test_equivalent_variants();
    test_events_union();
    test_comm_model_costs();
    test_band_runs();
    test_missing_costs();
    test_plan_arithmetic();
    test_plan_chart();
    return check_summary("test_search");
}
