/* The strategy search on several ranks ranks exactly as one rank does:
 * same candidates, same times, same order, on every rank; with branch and
 * bound and without; the counts add up; missing costs fail on every rank. */
#include "check.h"

#include <mpi.h>
#include <stdlib.h>
#include <string.h>

static ds_search_t *make(const ds_model_t *model, const ds_cluster_t *cluster, int bound, int top_k,
                         int all_variants)
{
    ds_search_options_t o;
    ds_search_options_init(&o);
    o.estimate_missing = 1;
    o.bound = bound;
    o.top_k = top_k;
    o.all_variants = all_variants;
    ds_strategy_t base;
    ds_strategy_init(&base);
    base.gbs = 128;
    ds_search_t *search = NULL;
    CHECK_OK(ds_search_create(model, cluster, &base, &o, &search));
    CHECK_OK(ds_search_fix(search, "mbs=1"));
    return search;
}

static void same_ranking(ds_search_t *a, ds_search_t *b, const char *what)
{
    CHECK_MSG(ds_search_result_count(a) == ds_search_result_count(b), "%s: %zu and %zu results",
              what, ds_search_result_count(a), ds_search_result_count(b));
    for (size_t i = 0; i < ds_search_result_count(a) && i < ds_search_result_count(b); i++) {
        ds_search_result_t x, y;
        CHECK_OK(ds_search_result_at(a, i, &x));
        CHECK_OK(ds_search_result_at(b, i, &y));
        CHECK_MSG(x.candidate == y.candidate && x.iteration_s == y.iteration_s &&
                      x.memory_GiB == y.memory_GiB && x.mfu == y.mfu &&
                      x.lower_bound_s == y.lower_bound_s && x.num_variants == y.num_variants &&
                      memcmp(x.variants, y.variants, sizeof(x.variants)) == 0,
                  "%s: rank %zu is candidate %lld (%.9g s) and %lld (%.9g s)", what, i + 1,
                  (long long)x.candidate, x.iteration_s, (long long)y.candidate, y.iteration_s);
    }
}

/* Candidate and time of the best result, the same on every rank. */
static void same_everywhere(ds_search_t *search)
{
    ds_search_result_t best;
    CHECK_OK(ds_search_result_at(search, 0, &best));
    double mine[2] = {(double)best.candidate, best.iteration_s}, lo[2], hi[2];
    MPI_Allreduce(mine, lo, 2, MPI_DOUBLE, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(mine, hi, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    CHECK(lo[0] == hi[0] && lo[1] == hi[1]);
}

static void test_parallel_equals_serial(void)
{
    int size;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    ds_model_t *model = NULL;
    CHECK_OK(ds_model_load("gpt2-medium", &model));
    CHECK_OK(ds_model_set_seq_len(model, 256));
    ds_cluster_t cluster;
    CHECK_OK(ds_cluster_init(&cluster, 4, 8, "h100-sxm"));

    for (int run = 0; run < 4; run++) {
        /* Branch and bound and exhaustive, equivalent variants grouped and not. */
        int bound = run < 2, all_variants = run % 2;
        int top_k = bound ? 10 : 100000;
        ds_search_t *parallel = make(model, &cluster, bound, top_k, all_variants);
        ds_search_t *serial = make(model, &cluster, bound, top_k, all_variants);
        CHECK_OK(ds_search_run(parallel, NULL, MPI_COMM_WORLD));
        CHECK_OK(ds_search_run(serial, NULL, MPI_COMM_NULL));
        ds_search_stats_t sp, ss;
        ds_search_get_stats(parallel, &sp);
        ds_search_get_stats(serial, &ss);
        CHECK_INT(sp.ranks, size);
        CHECK_INT(ss.ranks, 1);
        CHECK_INT(sp.candidates, ss.candidates);
        CHECK(sp.candidates > 100);
        CHECK_INT(sp.simulated + sp.bounded, sp.candidates);
        CHECK_INT(ss.simulated + ss.bounded, ss.candidates);
        CHECK_INT(sp.failed, 0);
        if (bound) {
            CHECK(ss.bounded > 0);
        } else {
            CHECK_INT(sp.simulated, sp.candidates);
            int64_t rows = 0; /* every candidate is a result or one's variant */
            for (size_t i = 0; i < ds_search_result_count(parallel); i++) {
                ds_search_result_t r;
                CHECK_OK(ds_search_result_at(parallel, i, &r));
                rows += 1 + r.num_variants;
            }
            CHECK_INT(rows, sp.candidates);
            if (all_variants)
                CHECK_INT(ds_search_result_count(parallel), sp.candidates);
            else
                CHECK(ds_search_result_count(parallel) < (size_t)sp.candidates);
            /* Exhaustive: the worst is the worst of all, on both. */
            ds_search_result_t wp, ws;
            CHECK_OK(ds_search_worst(parallel, &wp));
            CHECK_OK(ds_search_worst(serial, &ws));
            CHECK(sp.worst_exact && ss.worst_exact);
            CHECK(wp.candidate == ws.candidate && wp.iteration_s == ws.iteration_s);
        }
        same_ranking(parallel, serial, bound ? "branch and bound" : "exhaustive");
        if (bound && !all_variants) {
            ds_search_result_t best;
            CHECK_OK(ds_search_result_at(parallel, 0, &best));
            CHECK(best.num_variants > 0); /* the space has equivalent variants */
        }
        same_everywhere(parallel);
        ds_search_destroy(parallel);
        ds_search_destroy(serial);
    }
    ds_model_destroy(model);
}

static void test_missing_costs_everywhere(void)
{
    ds_model_t *model = NULL;
    CHECK_OK(ds_model_load("bert-large", &model));
    ds_cluster_t cluster;
    CHECK_OK(ds_cluster_init(&cluster, 1, 8, "h100-sxm"));
    ds_cost_table_t *costs = NULL;
    CHECK_OK(ds_cost_table_create(&costs));
    ds_search_t *search = NULL;
    CHECK_OK(ds_search_create(model, &cluster, NULL, NULL, &search));
    CHECK_FAILS(ds_search_run(search, costs, MPI_COMM_WORLD), DS_ERR_NOT_FOUND, "have no cost");
    ds_search_destroy(search);
    ds_cost_table_destroy(costs);
    ds_model_destroy(model);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    ds_log_set_rank(rank);
    test_parallel_equals_serial();
    test_missing_costs_everywhere();
    int failures = check_failures, total = 0;
    MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Finalize();
    if (rank == 0)
        printf("test_search_mpi: %d failures over all ranks\n", total);
    return total != 0;
}
