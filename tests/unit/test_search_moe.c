/* The search over an MoE model: etp = tp and, with tp > 1, etp = 1, and
 * for each ep (divisors of the experts with which ep x etp divides dp x tp)
 * are enumerated, every candidate's lower bound stays
 * below its simulated time (the layer templates carry the dispatch, combine
 * and the wait for the slowest expert rank), so branch and bound finds the
 * exhaustive top K. */
#include "search_support.h"

#include <stdlib.h>
#include <string.h>

static ds_search_t *make(const ds_model_t *model, const ds_cluster_t *cluster,
                         const ds_search_options_t *options)
{
    static const char *const fixes[] = {"mbs=1", "recompute=none", "zero=1", "dp-algo=auto", NULL};
    return search_support_make(model, cluster, 32, NULL, options, fixes);
}

int main(void)
{
    ds_model_t *model = NULL;
    CHECK_OK(ds_model_load("mixtral-8x7b", &model));
    CHECK_OK(ds_model_set_seq_len(model, 512));
    ds_cluster_t cluster;
    CHECK_OK(ds_cluster_init(&cluster, 2, 8, "h100-sxm"));
    ds_search_options_t o;
    search_support_exhaustive(&o);
    ds_search_t *all = make(model, &cluster, &o);
    CHECK_OK(ds_search_run(all, NULL, MPI_COMM_NULL));
    ds_search_stats_t st;
    ds_search_get_stats(all, &st);
    CHECK(st.candidates > 20);
    bool seen_ep[9] = {false}, seen_etp[3] = {false};
    for (size_t i = 0; i < ds_search_result_count(all); i++) {
        ds_search_result_t r;
        CHECK_OK(ds_search_result_at(all, i, &r));
        search_support_check_bound(&r);
        const ds_strategy_t *s = &r.strategy;
        CHECK(s->ep >= 1 && s->ep <= 8 && 8 % s->ep == 0);
        CHECK(((int64_t)s->dp * s->tp) % ((int64_t)s->ep * s->etp) == 0);
        seen_ep[s->ep] = true;
        CHECK(s->etp == s->tp || s->etp == 1);
        if (s->tp == 2)
            seen_etp[s->etp] = true;
    }
    CHECK(seen_ep[1] && seen_ep[2] && seen_ep[4] && seen_ep[8]);
    CHECK(seen_etp[1] && seen_etp[2]); /* with tp = 2: etp = tp and etp = 1 */
    o.bound = 1;
    o.top_k = 5;
    ds_search_t *bb = make(model, &cluster, &o);
    CHECK_OK(ds_search_run(bb, NULL, MPI_COMM_NULL));
    ds_search_stats_t sb;
    ds_search_get_stats(bb, &sb);
    CHECK(sb.bounded > 0);
    search_support_check_top(all, bb, 5);
    ds_search_destroy(bb);
    ds_search_destroy(all);
    ds_model_destroy(model);
    return check_summary("test_search_moe");
}
