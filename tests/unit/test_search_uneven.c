/* The search over a model whose layers no pipeline degree but 1 and the
 * layer count divides (7 layers): pp = 2 and 4 are searched with uneven end
 * stages (Megatron-Core's first/last-stage layer counts), every middle stage
 * holding ceil(L / pp) layers and each end between 1 and that; every such
 * candidate's lower bound stays below its simulated time, so branch and
 * bound finds the exhaustive top K; a layout fixed in the base strategy is
 * the only one searched; bounds shared by candidates that differ only in the
 * data-parallel algorithm equal each one's own. */
#include "search_support.h"

#include <stdlib.h>
#include <string.h>

static const char config[] = "{\"model_type\": \"llama\", \"hidden_size\": 512, "
                             "\"intermediate_size\": 1536, \"num_attention_heads\": 8, "
                             "\"num_key_value_heads\": 8, \"num_hidden_layers\": 7, "
                             "\"vocab_size\": 32000, \"max_position_embeddings\": 1024}";

static ds_search_t *make(const ds_model_t *model, const ds_cluster_t *cluster,
                         const ds_search_options_t *options, const char *layout, bool every_algo)
{
    static const char *const fixes[] = {"tp=1",   "mbs=1",        "recompute=none",
                                        "zero=1", "dp-algo=auto", NULL};
    static const char *const fixes_every_algo[] = {"tp=1", "mbs=1", "recompute=none", "zero=1",
                                                   NULL};
    return search_support_make(model, cluster, 32, layout, options,
                               every_algo ? fixes_every_algo : fixes);
}

int main(void)
{
    ds_model_t *model = NULL;
    CHECK_OK(ds_model_load_json(config, strlen(config), "test", &model));
    CHECK_OK(ds_model_set_seq_len(model, 512));
    ds_cluster_t cluster;
    CHECK_OK(ds_cluster_init(&cluster, 1, 8, "h100-sxm"));
    ds_search_options_t o;
    search_support_exhaustive(&o);
    ds_search_t *all = make(model, &cluster, &o, NULL, false);
    CHECK_OK(ds_search_run(all, NULL, MPI_COMM_NULL));
    /* layouts[pp][first]: the (first, last) pairs seen, as stage 0's layers */
    bool seen[5][8] = {{false}};
    for (size_t i = 0; i < ds_search_result_count(all); i++) {
        ds_search_result_t r;
        CHECK_OK(ds_search_result_at(all, i, &r));
        search_support_check_bound(&r);
        const ds_strategy_t *s = &r.strategy;
        CHECK(s->pp == 1 || s->pp == 2 || s->pp == 4);
        int total = 0, most = 0;
        for (int p = 0; p < s->pp; p++) {
            int n = ds_strategy_stage_layers(s, 7, p);
            CHECK(n >= 1);
            total += n;
            most = n > most ? n : most;
        }
        CHECK_INT(total, 7);
        CHECK_INT(most, (7 + s->pp - 1) / s->pp);
        if (s->pp > 1)
            seen[s->pp][ds_strategy_stage_layers(s, 7, 0)] = true;
    }
    /* pp = 2: 3 + 4 and 4 + 3; pp = 4: 1 + 2 + 2 + 2 and 2 + 2 + 2 + 1 */
    CHECK(seen[2][3] && seen[2][4] && seen[4][1] && seen[4][2]);

    o.bound = 1;
    o.top_k = 5;
    ds_search_t *bb = make(model, &cluster, &o, NULL, false);
    CHECK_OK(ds_search_run(bb, NULL, MPI_COMM_NULL));
    search_support_check_top(all, bb, 5);

    /* A layout in the base strategy: pp = 2 is searched with it alone. */
    o.bound = 0;
    o.top_k = 100000;
    ds_search_t *fixed = make(model, &cluster, &o, "first-stage-layers=2", false);
    CHECK_OK(ds_search_fix(fixed, "pp=2"));
    CHECK_OK(ds_search_run(fixed, NULL, MPI_COMM_NULL));
    CHECK(ds_search_result_count(fixed) > 0);
    for (size_t i = 0; i < ds_search_result_count(fixed); i++) {
        ds_search_result_t r;
        CHECK_OK(ds_search_result_at(fixed, i, &r));
        CHECK_INT(r.strategy.first_stage_layers, 2);
        CHECK_INT(ds_strategy_stage_layers(&r.strategy, 7, 1), 5);
    }
    ds_search_destroy(fixed);

    /* The search computes a bound once for candidates that differ only in
     * the DP algorithm: each equals a fresh simulator's bound. */
    ds_search_t *algos = make(model, &cluster, &o, NULL, true);
    CHECK_OK(ds_search_run(algos, NULL, MPI_COMM_NULL));
    ds_sim_options_t so;
    ds_sim_t *sim = search_support_alone(&so);
    bool seen_algo[8] = {false};
    for (size_t i = 0; i < ds_search_result_count(algos); i++) {
        ds_search_result_t r;
        CHECK_OK(ds_search_result_at(algos, i, &r));
        ds_sim_estimate_t est;
        CHECK_OK(ds_sim_estimate(sim, model, &r.strategy, &cluster, NULL, &so, &est));
        CHECK_MSG(est.lower_bound_s == r.lower_bound_s, "candidate %lld: bound %.9g, alone %.9g",
                  (long long)r.candidate, r.lower_bound_s, est.lower_bound_s);
        if ((unsigned)r.strategy.dp_algo < 8)
            seen_algo[r.strategy.dp_algo] = true;
    }
    CHECK(seen_algo[DS_DP_AUTO] && seen_algo[DS_DP_RING] && seen_algo[DS_DP_TREE] &&
          seen_algo[DS_DP_HIERARCHICAL]);
    ds_sim_destroy(sim);
    ds_search_destroy(algos);
    ds_search_destroy(bb);
    ds_search_destroy(all);
    ds_model_destroy(model);
    return check_summary("test_search_uneven");
}
