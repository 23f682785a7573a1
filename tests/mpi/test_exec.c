/* The executor on 2 ranks (correctness, not timing): every 2-rank strategy
 * runs; the schedule's order shows in the passes' times (GPipe: every
 * forward before the backwards; 1F1B: the first backward before the third
 * forward; activations reach stage 1 after stage 0 computed them); data-
 * parallel buckets start during the backward when they are small; the
 * costs it measures cover every event of the strategy, buckets that overlap
 * the backward timed as the executor issues them; the comparison with
 * a prediction has one entry per rank and stage. */
#include "check.h"

#include "exec/dsi_exec.h"

#include <stdlib.h>

static ds_model_t *model;
static ds_backend_t *backend;
static int rank;

static void resolve(ds_strategy_t *s, const char *text)
{
    ds_strategy_init(s);
    CHECK_OK(ds_strategy_parse(text, s));
    CHECK_OK(ds_strategy_resolve(s, model, 2, 2));
}

static ds_exec_t *run(const ds_strategy_t *s)
{
    ds_exec_t *exec = NULL;
    CHECK_OK(ds_exec_create(backend, model, s, &exec));
    if (exec == NULL)
        return NULL;
    ds_exec_options_t o;
    ds_exec_options_init(&o);
    o.warmup = 1;
    o.iterations = 2;
    o.max_foreign = 1.0;
    CHECK_OK(ds_exec_run(exec, &o));
    CHECK_INT(ds_exec_run_count(exec), 1);
    ds_exec_summary_t sum;
    CHECK_OK(ds_exec_get_summary(exec, 0, &sum));
    CHECK(sum.iteration_s > 0.0);
    CHECK(sum.iteration_min_s <= sum.iteration_s && sum.iteration_s <= sum.iteration_max_s);
    CHECK_INT(sum.microbatches, ds_strategy_num_microbatches(s));
    for (int r = 0; r < 2; r++) {
        ds_exec_device_t d;
        CHECK_OK(ds_exec_device_at(exec, 0, r, &d));
        CHECK(d.compute_s > 0.0);
        CHECK(d.idle_s >= 0.0 && d.wait_s >= 0.0 && d.comm_exposed_s >= 0.0);
        CHECK(d.busy_s <= 1.05 * sum.iteration_s);
        CHECK_NEAR(d.busy_s, d.compute_s + d.comm_exposed_s, 0.05);
    }
    /* Every pass after its forward; each forward before its backward. */
    for (size_t i = 0; i < ds_exec_microbatch_count(exec); i++) {
        ds_exec_microbatch_t mb;
        CHECK_OK(ds_exec_microbatch_at(exec, 0, i, &mb));
        CHECK_MSG(mb.fwd_start_s < mb.fwd_end_s && mb.fwd_end_s <= mb.bwd_start_s &&
                      mb.bwd_start_s < mb.bwd_end_s,
                  "stage %d chunk %d mb %d: fwd %g..%g bwd %g..%g", mb.stage, mb.chunk,
                  mb.microbatch, mb.fwd_start_s, mb.fwd_end_s, mb.bwd_start_s, mb.bwd_end_s);
    }
    return exec;
}

static ds_exec_microbatch_t mb_of(const ds_exec_t *exec, int stage, int chunk, int mb)
{
    ds_exec_microbatch_t out;
    memset(&out, 0, sizeof(out));
    for (size_t i = 0; i < ds_exec_microbatch_count(exec); i++) {
        ds_exec_microbatch_t e;
        if (ds_exec_microbatch_at(exec, 0, i, &e) == DS_OK && e.stage == stage &&
            e.chunk == chunk && e.microbatch == mb)
            out = e;
    }
    return out;
}

/* Records of `kind` rank 0 gathered for iteration `it`. */
static size_t count_kind(const ds_exec_t *exec, int kind, int it)
{
    size_t n = 0;
    const dsi_xrun_t *r = &exec->runs[0];
    for (size_t i = 0; i < r->num_recs; i++)
        n += r->recs[i].kind == kind && r->recs[i].iteration == it;
    return n;
}

/* order: 0 GPipe, 1 1F1B, 2 interleaved (vpp 2) */
static void test_pipeline(const char *text, int order)
{
    ds_strategy_t s;
    resolve(&s, text);
    ds_exec_t *exec = run(&s);
    if (exec == NULL)
        return;
    int m = (int)ds_strategy_num_microbatches(&s);
    /* Host-timed records carry no device marks. */
    size_t marked = 0;
    for (size_t i = 0; rank == 0 && i < exec->runs[0].num_recs; i++)
        marked += exec->runs[0].recs[i].mark[0] != -1 || exec->runs[0].recs[i].mark[1] != -1;
    CHECK_MSG(marked == 0, "%s: %zu records with device marks on the cpu backend", text, marked);
    for (int mb = 0; mb < m; mb++) {
        ds_exec_microbatch_t a = mb_of(exec, 0, 0, mb), b = mb_of(exec, 1, 0, mb);
        CHECK_MSG(b.fwd_start_s >= a.fwd_end_s,
                  "%s mb %d: stage 1 forward %g before stage 0's end %g", text, mb, b.fwd_start_s,
                  a.fwd_end_s);
        CHECK_MSG(a.bwd_start_s >= b.bwd_end_s, "%s mb %d: stage 0 backward %g before stage 1's %g",
                  text, mb, a.bwd_start_s, b.bwd_end_s);
    }
    ds_exec_microbatch_t first_bwd = mb_of(exec, 0, 0, 0), third_fwd = mb_of(exec, 0, 0, 2);
    if (order == 0)
        CHECK_MSG(mb_of(exec, 0, 0, m - 1).fwd_end_s <= mb_of(exec, 0, 0, m - 1).bwd_start_s &&
                      third_fwd.fwd_end_s <= first_bwd.bwd_start_s,
                  "%s: a backward before the last forward", text);
    else if (order == 1)
        CHECK_MSG(first_bwd.bwd_start_s < third_fwd.fwd_start_s,
                  "%s: backward of mb 0 at %g, forward of mb 2 at %g (not 1F1B)", text,
                  first_bwd.bwd_start_s, third_fwd.fwd_start_s);
    else /* warm-up of 4 chunk passes, then chunk 1's backward of mb 0 before mb 3's forward */
        CHECK_MSG(mb_of(exec, 0, 1, 0).bwd_start_s < mb_of(exec, 0, 0, 3).fwd_start_s &&
                      mb_of(exec, 0, 0, 1).fwd_end_s <= mb_of(exec, 0, 1, 0).fwd_start_s,
                  "%s: not the interleaved order", text);
    if (rank == 0) {
        /* Stage 0 posts 1 + 2 (m - 1) + 1 calls with 1F1B, 2 m with GPipe. */
        size_t calls = count_kind(exec, DSI_XK_P2P, 1);
        CHECK_MSG(calls >= (size_t)(2 * m), "%s: %zu point-to-point calls", text, calls);
        CHECK(count_kind(exec, DSI_XK_EMB, 1) == 2); /* tied embeddings: first and last stage */
    }
    ds_exec_destroy(exec);
}

static void test_data_parallel(void)
{
    ds_strategy_t s;
    /* Buckets of 200k parameters: several per stage, filled during the backward. */
    resolve(&s, "dp=2,tp=1,pp=1,mbs=1,gbs=4,bucket=200000");
    ds_exec_t *exec = run(&s);
    if (exec == NULL)
        return;
    if (rank == 0) {
        const dsi_xrun_t *r = &exec->runs[0];
        double first_start = -1.0, last_compute = 0.0;
        for (size_t i = 0; i < r->num_recs; i++) {
            const dsi_xrec_t *e = &r->recs[i];
            if (e->iteration != 1 || e->rank != 0)
                continue;
            if (e->kind == DSI_XK_DP_START && first_start < 0.0)
                first_start = e->start_s;
            if (e->kind == DSI_XK_COMPUTE)
                last_compute = e->end_s;
        }
        CHECK_MSG(first_start > 0.0 && first_start < last_compute,
                  "first bucket started at %g, backward ended at %g", first_start, last_compute);
        CHECK(count_kind(exec, DSI_XK_DP_START, 1) == 2 * (size_t)exec->num_buckets);
        CHECK(count_kind(exec, DSI_XK_DP_WAIT, 1) == 2 * (size_t)exec->num_buckets);
        CHECK(exec->num_buckets > 3);
    }
    ds_exec_destroy(exec);

    /* Without overlap: buckets run blocking after the backward, none started early. */
    resolve(&s, "dp=2,tp=1,pp=1,mbs=1,gbs=4,bucket=200000,no-overlap");
    exec = run(&s);
    if (exec != NULL && rank == 0)
        CHECK_INT(count_kind(exec, DSI_XK_DP_START, 1), 0);
    ds_exec_destroy(exec);
}

static void test_tensor_parallel_and_costs(void)
{
    ds_strategy_t s;
    resolve(&s, "dp=1,tp=2,pp=1,mbs=1,gbs=2");
    ds_cluster_t cluster;
    CHECK_OK(ds_cluster_init(&cluster, 1, 2, "cpu"));
    ds_cost_table_t *costs = NULL;
    CHECK_OK(ds_cost_table_create(&costs));
    ds_exec_cost_options_t co;
    ds_exec_cost_options_init(&co);
    co.rounds = 2;
    co.measure.budget_s = 0.02;
    co.measure.min_reps = 3;
    ds_exec_load_t load;
    double factors[2] = {0.0, 0.0};
    CHECK_OK(ds_exec_measure_costs(backend, model, &s, &cluster, &co, costs, &load, factors));
    /* Devices compared on the same units: factors around 1, averaging 1. */
    CHECK_NEAR(factors[0] + factors[1], 2.0, 1e-9);
    CHECK(factors[0] > 0.5 && factors[0] < 1.5);
    /* Every event of the strategy has a cost: the prediction needs no estimate. */
    ds_sim_t *sim = NULL;
    CHECK_OK(ds_sim_create(&sim));
    ds_sim_options_t so;
    ds_sim_options_init(&so);
    so.mode = DS_SIM_FULL;
    CHECK_OK(ds_sim_run(sim, model, &s, &cluster, costs, &so));
    size_t before = ds_cost_table_size(costs);
    CHECK(before > 10);
    /* A second call measures nothing more. */
    CHECK_OK(ds_exec_measure_costs(backend, model, &s, &cluster, &co, costs, NULL, NULL));
    CHECK_INT(ds_cost_table_size(costs), before);

    ds_exec_t *exec = run(&s);
    if (exec != NULL) {
        if (rank == 0)
            CHECK(count_kind(exec, DSI_XK_TP, 1) > 0);
        ds_exec_comparison_t *cmp = NULL;
        CHECK_OK(ds_exec_compare(exec, sim, &cmp));
        if (cmp != NULL) {
            CHECK_INT(cmp->num_devices, 2);
            CHECK_INT(cmp->num_stages, 1);
            CHECK_INT(cmp->runs, 1);
            CHECK(cmp->iteration.predicted > 0.0 && cmp->iteration.measured > 0.0);
            CHECK_NEAR(cmp->iteration.error,
                       cmp->iteration.predicted / cmp->iteration.measured - 1.0, 1e-9);
            CHECK(cmp->iteration.spread == 0.0); /* one run */
        }
        ds_exec_comparison_free(cmp);
        ds_exec_destroy(exec);
    }
    ds_sim_destroy(sim);
    ds_cost_table_destroy(costs);
}

/* The data-parallel bucket's cost in `costs` (the unflagged all-reduce over
 * dp): its repetitions, -1 when absent; *overlapped_p whether the
 * interference key is there too. */
static int64_t bucket_reps(const ds_cost_table_t *costs, bool *overlapped_p)
{
    int64_t reps = -1;
    *overlapped_p = false;
    for (size_t i = 0; i < ds_cost_table_size(costs); i++) {
        const ds_event_key_t *key;
        const ds_cost_t *cost;
        ds_cost_table_at(costs, i, &key, &cost);
        if (key->kind != DS_EVENT_COMM || key->group != DS_GROUP_DP || key->op != DS_COMM_ALLREDUCE)
            continue;
        if (key->flags & DS_COMM_FLAG_OVERLAPPED) {
            *overlapped_p = true;
            continue;
        }
        CHECK(cost->p10_s > 0.0 && cost->p10_s <= cost->median_s && cost->median_s <= cost->p90_s);
        reps = cost->repetitions;
    }
    return reps;
}

/* Buckets that overlap the backward are timed as the executor issues them
 * (started and waited for: seven repetitions, whatever the measurement
 * loop's limits); without overlap, or with issued = 0, as blocking calls
 * under the loop's limits (at most five here). */
static void test_bucket_costs(void)
{
    ds_cluster_t cluster;
    CHECK_OK(ds_cluster_init(&cluster, 1, 2, "cpu"));
    const char *strategies[] = {"dp=2,tp=1,pp=1,mbs=1,gbs=2",
                                "dp=2,tp=1,pp=1,mbs=1,gbs=2,no-overlap"};
    for (int issued = 0; issued < 2; issued++)
        for (int k = 0; k < 2; k++) {
            ds_strategy_t s;
            resolve(&s, strategies[k]);
            ds_cost_table_t *costs = NULL;
            CHECK_OK(ds_cost_table_create(&costs));
            ds_exec_cost_options_t co;
            ds_exec_cost_options_init(&co);
            CHECK_INT(co.issued, 1);
            co.issued = issued;
            co.rounds = 1;
            co.measure.budget_s = 0.02;
            co.measure.min_reps = 3;
            co.measure.max_reps = 5;
            CHECK_OK(ds_exec_measure_costs(backend, model, &s, &cluster, &co, costs, NULL, NULL));
            bool overlapped = false;
            int64_t reps = bucket_reps(costs, &overlapped);
            CHECK_MSG(reps > 0, "%s: no bucket cost", strategies[k]);
            if (issued && k == 0)
                CHECK_INT(reps, 7);
            else
                CHECK_MSG(reps <= 5, "%s, issued %d: %lld repetitions", strategies[k], issued,
                          (long long)reps);
            CHECK(overlapped == (k == 0));
            ds_cost_table_destroy(costs);
        }
}

static void test_refused(void)
{
    ds_strategy_t s;
    ds_exec_t *exec = NULL;
    ds_strategy_init(&s);
    CHECK_OK(ds_strategy_parse("dp=2,tp=1,pp=1,mbs=1,gbs=2,zero=1", &s));
    CHECK_OK(ds_strategy_resolve(&s, model, 2, 2));
    CHECK_FAILS(ds_exec_create(backend, model, &s, &exec), DS_ERR_UNSUPPORTED, "zero=1");
    ds_strategy_init(&s);
    CHECK_OK(ds_strategy_parse("dp=4,tp=1,pp=1,mbs=1,gbs=4", &s));
    CHECK_OK(ds_strategy_resolve(&s, model, 4, 4));
    CHECK_FAILS(ds_exec_create(backend, model, &s, &exec), DS_ERR_INVALID_ARG, "needs 4 ranks");
    /* The cpu backend's calls return when their work is done: no device
     * queues, and the executor times it on the host. */
    CHECK(!dsi_backend_queued(backend));
    CHECK_FAILS(dsi_queue_mark(backend, DSI_QUEUE_COMPUTE, 0), DS_ERR_UNSUPPORTED,
                "no device queues");
    CHECK_FAILS(dsi_queue_join(backend, DSI_QUEUE_COMPUTE, DSI_QUEUE_DP), DS_ERR_UNSUPPORTED,
                "no device queues");
    CHECK_FAILS(dsi_comm_group_start(backend), DS_ERR_UNSUPPORTED, "no device queues");
}

int main(int argc, char **argv)
{
    if ((rank = check_mpi_start(&argc, &argv, 2, 2, "mpiexec -n 2 test_exec MODEL.json")) < 0)
        return 1;
    CHECK_OK(ds_model_load(argv[1], &model));
    CHECK_OK(ds_model_set_seq_len(model, 32));
    CHECK_OK(ds_backend_open(DS_BACKEND_CPU, MPI_COMM_WORLD, &backend));
    if (model != NULL && backend != NULL) {
        test_data_parallel();
        test_tensor_parallel_and_costs();
        test_bucket_costs();
        test_pipeline("dp=1,tp=1,pp=2,mbs=1,gbs=4,schedule=gpipe", 0);
        test_pipeline("dp=1,tp=1,pp=2,mbs=1,gbs=4,schedule=1f1b", 1);
        test_pipeline("dp=1,tp=1,pp=2,mbs=1,gbs=4,schedule=interleaved,vpp=2", 2);
        test_refused();
    }
    ds_backend_close(backend);
    ds_model_destroy(model);
    return check_mpi_finish("test_exec", rank);
}
