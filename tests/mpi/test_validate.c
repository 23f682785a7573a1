/* ds_validate on 2 ranks with a tiny model (correctness, not accuracy): the
 * result's invariants (times > 0, error = (predicted - measured) / measured,
 * per-rank arrays of the communicator's size, the error summary), the
 * cases of --all.  With --faults (a DSMPI_FAULT_INJECTION build) one rank's
 * allocation fails at points spread over the validation: every rank must
 * return an error (a rank left waiting in a collective hangs the test until
 * its timeout). */
#include "check.h"

#include "dsi_core.h"

#include <math.h>
#include <stdlib.h>

static ds_model_t *model;
static ds_backend_t *backend;
static ds_cluster_t cluster;
static int rank;

static void resolve(ds_strategy_t *s, const char *text)
{
    ds_strategy_init(s);
    CHECK_OK(ds_strategy_parse(text, s));
    CHECK_OK(ds_strategy_resolve(s, model, 2, 2));
}

/* As short as a validation gets: one run of one iteration, costs measured
 * once each, no verdict on the load (the test machine is shared). */
static void quick_options(ds_validate_options_t *o)
{
    ds_validate_options_init(o);
    o->exec.warmup = 1;
    o->exec.iterations = 1;
    o->exec.max_foreign = 1.0;
    o->repeats = 1;
    o->retries = 0;
    o->costs.measure.budget_s = 0.01;
    o->costs.measure.min_reps = 1;
    o->costs.measure.warmup = 1;
    o->costs.measure.warmup_s = 0.0;
}

static void count_notice(ds_validate_notice_t kind, const char *line, void *context)
{
    int *cases = context;
    if (kind == DS_VALIDATE_NOTICE_CASE && line[0] != '\0')
        (*cases)++;
}

static void check_figure(const char *what, const ds_exec_figure_t *f)
{
    CHECK_MSG(f->predicted > 0.0 && f->measured > 0.0, "%s: predicted %g, measured %g", what,
              f->predicted, f->measured);
    CHECK_NEAR(f->error, (f->predicted - f->measured) / f->measured, 1e-9);
}

static void test_result(void)
{
    ds_strategy_t s;
    resolve(&s, "dp=1,tp=1,pp=2,mbs=1,gbs=2,schedule=1f1b");
    ds_validate_options_t o;
    quick_options(&o);
    int notices = 0;
    o.notice = count_notice;
    o.notice_context = &notices;
    ds_validate_result_t *res = NULL;
    CHECK_OK(ds_validate(MPI_COMM_WORLD, backend, model, &cluster, &s, 1, &o, &res));
    if (res == NULL)
        return;
    CHECK_INT(res->ranks, 2);
    CHECK_INT(res->num_cases, 1);
    CHECK_INT(res->num_variants, 1);
    CHECK_INT(res->variants[0], DS_VALIDATE_IN_SITU);
    CHECK_INT(notices, rank == 0 ? 1 : 0); /* rank 0 alone tells */
    CHECK(res->costs != NULL && ds_cost_table_size(res->costs) > 0);
    for (int64_t r = 0; r < res->ranks; r++)
        CHECK_MSG(res->speed_factors[r] > 0.0, "rank %lld factor %g", (long long)r,
                  res->speed_factors[r]);
    const ds_validate_case_t *c = &res->cases[0];
    CHECK_INT(c->microbatches, 2);
    CHECK(strcmp(c->strategy_text, "dp=1,tp=1,pp=2,mbs=1,gbs=2,schedule=1f1b") == 0);
    CHECK(c->first_run.iteration_s > 0.0 && c->costs_s > 0.0);
    const ds_exec_comparison_t *cmp = c->comparisons[0];
    CHECK(cmp != NULL && c->comparisons[1] == NULL);
    if (cmp == NULL)
        goto out;
    check_figure("iteration", &cmp->iteration);
    CHECK_INT(cmp->runs, 1);
    CHECK_INT(cmp->num_devices, (size_t)res->ranks);
    for (size_t i = 0; i < cmp->num_devices; i++) {
        CHECK_INT(cmp->devices[i].rank, (int64_t)i);
        check_figure("busy", &cmp->devices[i].busy);
    }
    CHECK_INT(cmp->num_stages, 2);
    CHECK_NEAR(res->mean_abs_error, fabs(cmp->iteration.error), 1e-12);
    CHECK_NEAR(res->max_abs_error, fabs(cmp->iteration.error), 1e-12);
out:
    ds_validate_result_free(res);
    ds_validate_result_free(NULL);
}

static void test_enumerate(void)
{
    ds_strategy_t base, *cases = NULL;
    resolve(&base, "dp=2,mbs=1,gbs=2");
    const int64_t counts[] = {2, 4};
    size_t n = 0;
    CHECK_OK(ds_validate_enumerate(model, &base, 2, 2, counts, 2, &cases, &n));
    /* dp=2; tp=2; pp=2 as GPipe, 1F1B and interleaved (4 layers): each for 2 counts. */
    CHECK_INT(n, 10);
    for (size_t i = 0; i < n; i++) {
        CHECK_INT((int64_t)cases[i].dp * cases[i].tp * cases[i].pp, 2);
        int64_t mb = ds_strategy_num_microbatches(&cases[i]);
        CHECK_MSG(mb == 2 || mb == 4, "case %zu: %lld micro-batches", i, (long long)mb);
    }
    ds_validate_cases_free(cases);
}

/* Rank 1's n-th allocation from the call on fails, for n spread over the
 * validation's own steps, the costs' measurement (on this model the layer
 * passes take allocations ~70 to ~2000) and the executor's creation (its
 * process groups and their communicators) and runs; rank 0 must come back
 * with an error too. */
static void test_one_rank_fails(void)
{
    ds_strategy_t s;
    resolve(&s, "dp=1,tp=1,pp=2,mbs=1,gbs=2,schedule=1f1b");
    ds_validate_options_t o;
    quick_options(&o);
    static const long points[] = {1,    2,    5,    10,   20,   25,   30,   40,   60,
                                  100,  200,  400,  1000, 2000, 2100, 2200, 2300, 2350,
                                  2400, 2425, 2450, 2475, 2500, 2525, 2550, 2600, 3000};
    int failed = 0;
    for (size_t i = 0; i < sizeof(points) / sizeof(points[0]); i++) {
        if (rank == 1)
            dsi_fault_alloc_after(points[i]);
        ds_validate_result_t *res = NULL;
        ds_status_t status = ds_validate(MPI_COMM_WORLD, backend, model, &cluster, &s, 1, &o, &res);
        dsi_fault_alloc_after(0);
        int mine = status, both[2] = {0, 0};
        MPI_Allgather(&mine, 1, MPI_INT, both, 1, MPI_INT, MPI_COMM_WORLD);
        CHECK_MSG((both[0] == DS_OK) == (both[1] == DS_OK),
                  "allocation %ld on rank 1: rank 0 returned %d, rank 1 %d", points[i], both[0],
                  both[1]);
        CHECK(status != DS_OK || res != NULL);
        failed += both[1] != DS_OK;
        if (rank == 0)
            printf("allocation %ld on rank 1: %s\n", points[i],
                   both[1] == DS_OK ? "no failure" : ds_status_string(both[1]));
        if (rank == 1 && status != DS_OK)
            CHECK_MSG(status == DS_ERR_NO_MEMORY, "allocation %ld: rank 1 returned %s", points[i],
                      ds_status_string(status));
        ds_validate_result_free(res);
    }
    CHECK(failed > 0);
}

int main(int argc, char **argv)
{
    if ((rank = check_mpi_start(&argc, &argv, 2, 2,
                                "mpiexec -n 2 test_validate MODEL.json [--faults]")) < 0)
        return 1;
    bool faults = argc > 2 && strcmp(argv[2], "--faults") == 0;
    if (faults && !dsi_fault_alloc_after(0)) {
        MPI_Finalize();
        return 77; /* not a fault-injection build */
    }
    CHECK_OK(ds_model_load(argv[1], &model));
    CHECK_OK(ds_model_set_seq_len(model, 32));
    CHECK_OK(ds_cluster_init(&cluster, 1, 2, "cpu"));
    CHECK_OK(ds_backend_open(DS_BACKEND_CPU, MPI_COMM_WORLD, &backend));
    if (model != NULL && backend != NULL) {
        if (faults) {
            test_one_rank_fails();
        } else {
            test_enumerate();
            test_result();
        }
    }
    ds_backend_close(backend);
    ds_model_destroy(model);
    return check_mpi_finish("test_validate", rank);
}
