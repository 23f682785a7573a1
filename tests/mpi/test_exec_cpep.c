/* The executor and ds_validate on 2 ranks with context parallelism (cp=2:
 * the p2p ring, a2a and allgather, fused attention on the cpu backend's
 * kernel) and expert parallelism (ep=2 on a tiny Mixtral-like model, the
 * router skew at 1 and at its default) (correctness, not timing): every
 * operator and pass collective of the event set ran the number of times the
 * set counts it; the ring's transfers were posted before the attention step
 * they hide behind and matched on both ranks, as were the dispatch and
 * combine all-to-alls; the measured iteration is finite and positive; the
 * comparison with the prediction has its rows. */
#include "check.h"

#include "exec/dsi_exec.h"

#include <math.h>
#include <stdlib.h>

static ds_backend_t *backend;
static ds_cluster_t cluster;
static int rank;

/* Every rank decides alike: on the calls' own results, not on its failures so far. */
static bool resolve(const ds_model_t *model, ds_strategy_t *s, const char *text)
{
    ds_strategy_init(s);
    ds_status_t status = ds_strategy_parse(text, s);
    if (status == DS_OK)
        status = ds_strategy_resolve(s, model, 2, 2);
    CHECK_MSG(status == DS_OK, "%s: %s", text, ds_last_error());
    return status == DS_OK;
}

/* The layer (or part) at index `part` of a one-stage strategy. */
static int layer_of_part(const ds_model_t *model, int part)
{
    if (part == 0)
        return DSI_PART_EMBEDDING;
    return part - 1 < model->info.num_layers ? part - 1 : DSI_PART_HEAD;
}

/* A pass collective's key as the event set holds it, without its layout
 * (the operator lists leave it out). */
static ds_event_key_t without_layout(ds_event_key_t key)
{
    if (key.kind == DS_EVENT_COMM) {
        key.ranks_per_node = 0;
        key.nodes = 0;
        key.concurrency = 0;
        key.node_stride = 0;
        key.dims[2] = 0;
    }
    return key;
}

typedef struct tally {
    ds_event_key_t key;
    int64_t expected, executed;
} tally_t;

static tally_t *tally_of(tally_t *t, size_t *n, const ds_event_key_t *key)
{
    for (size_t i = 0; i < *n; i++)
        if (ds_event_key_equal(&t[i].key, key))
            return &t[i];
    memset(&t[*n], 0, sizeof(*t));
    t[*n].key = *key;
    return &t[(*n)++];
}

static bool pass_group(const ds_event_key_t *key)
{
    return key->group == DS_GROUP_TP || key->group == DS_GROUP_CP || key->group == DS_GROUP_EP;
}

/* Every compute operator (the optimizer's steps aside) and pass collective
 * of the event set against the records of iteration 1 (rank 0: every
 * rank's records). */
static void check_counts(const char *text, const ds_model_t *model, const ds_strategy_t *s,
                         const ds_exec_t *exec)
{
    ds_event_set_t *events = NULL;
    CHECK_OK(ds_events_generate(model, s, &cluster, &events));
    if (events == NULL)
        return;
    size_t cap = ds_event_set_size(events) + 256, n = 0;
    tally_t *t = calloc(cap, sizeof(*t));
    for (size_t i = 0; i < ds_event_set_size(events); i++) {
        const ds_event_t *e = ds_event_set_at(events, i);
        if (e->key.kind == DS_EVENT_COMPUTE ? e->key.op == DS_OP_OPTIMIZER : !pass_group(&e->key))
            continue;
        ds_event_key_t key = without_layout(e->key);
        tally_of(t, &n, &key)->expected += e->count;
    }
    const dsi_xrun_t *run = &exec->runs[0];
    for (size_t i = 0; i < run->num_recs; i++) {
        const dsi_xrec_t *r = &run->recs[i];
        bool in_pass = r->kind == DSI_XK_COMPUTE || r->kind == DSI_XK_TP || r->kind == DSI_XK_EP ||
                       (r->kind == DSI_XK_CP && r->part >= 0);
        if (r->iteration != 1 || !in_pass || n >= cap)
            continue;
        dsi_op_t ops[DSI_MAX_LAYER_OPS];
        size_t count = 0;
        CHECK_OK(dsi_model_layer_ops(model, layer_of_part(model, r->part), &exec->ctx,
                                     r->fwd ? DS_PASS_FORWARD : DS_PASS_BACKWARD, ops,
                                     DSI_ARRAY_SIZE(ops), &count));
        CHECK_MSG(r->op >= 0 && (size_t)r->op < count, "%s: record of operator %d of %zu", text,
                  r->op, count);
        if (r->op < 0 || (size_t)r->op >= count)
            continue;
        ds_event_key_t key = without_layout(ops[r->op].key);
        tally_of(t, &n, &key)->executed++;
    }
    size_t compared = 0;
    for (size_t i = 0; i < n; i++) {
        char name[256];
        ds_event_key_format(&t[i].key, name, sizeof(name));
        CHECK_MSG(t[i].executed == t[i].expected,
                  "%s: '%s' executed %lld times, the events say %lld", text, name,
                  (long long)t[i].executed, (long long)t[i].expected);
        compared++;
    }
    CHECK_MSG(compared > 20, "%s: %zu keys compared", text, compared);
    free(t);
    ds_event_set_destroy(events);
}

/* Calls of `kind` in iteration 1: every one of rank 0 has rank 1's of the
 * same number (the same exchange on both ranks); returns rank 0's count. */
static size_t matched_calls(const char *text, const ds_exec_t *exec, int kind)
{
    const dsi_xrun_t *run = &exec->runs[0];
    size_t mine = 0, theirs = 0;
    int32_t most[2] = {-1, -1};
    for (size_t i = 0; i < run->num_recs; i++) {
        const dsi_xrec_t *r = &run->recs[i];
        if (r->iteration != 1 || r->kind != kind || r->rank < 0 || r->rank > 1)
            continue;
        if (r->rank == 0)
            mine++;
        else
            theirs++;
        most[r->rank] = DSI_MAX(most[r->rank], r->match);
        CHECK_MSG(r->end_s >= r->start_s, "%s: a call of kind %d ends before it starts", text,
                  kind);
    }
    CHECK_MSG(mine == theirs && most[0] == most[1] &&
                  (kind == DSI_XK_CP_POST || most[0] + 1 == (int32_t)mine),
              "%s: kind %d: rank 0 %zu calls (last %d), rank 1 %zu (last %d)", text, kind, mine,
              most[0], theirs, most[1]);
    return mine;
}

static ds_exec_t *run(const char *text, const ds_model_t *model, const ds_strategy_t *s)
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
    ds_exec_summary_t sum;
    CHECK_OK(ds_exec_get_summary(exec, 0, &sum));
    CHECK_MSG(isfinite(sum.iteration_s) && sum.iteration_s > 0.0, "%s: iteration %g s", text,
              sum.iteration_s);
    for (int r = 0; r < 2; r++) {
        ds_exec_device_t d;
        CHECK_OK(ds_exec_device_at(exec, 0, r, &d));
        CHECK_MSG(d.compute_s > 0.0 && d.comm_exposed_s >= 0.0 && d.idle_s >= 0.0,
                  "%s: rank %d compute %g exposed %g idle %g", text, r, d.compute_s,
                  d.comm_exposed_s, d.idle_s);
    }
    if (rank == 0)
        check_counts(text, model, s, exec);
    return exec;
}

/* ds_validate of one case: the comparison's rows. */
static void check_validate(const char *text, const ds_model_t *model, const ds_strategy_t *s)
{
    ds_validate_options_t o;
    ds_validate_options_init(&o);
    o.exec.warmup = 1;
    o.exec.iterations = 1;
    o.exec.max_foreign = 1.0;
    o.repeats = 1;
    o.retries = 0;
    o.costs.measure.budget_s = 0.01;
    o.costs.measure.min_reps = 1;
    o.costs.measure.warmup = 1;
    o.costs.measure.warmup_s = 0.0;
    ds_validate_result_t *res = NULL;
    CHECK_OK(ds_validate(MPI_COMM_WORLD, backend, model, &cluster, s, 1, &o, &res));
    if (res == NULL)
        return;
    const ds_exec_comparison_t *cmp = res->num_cases == 1 ? res->cases[0].comparisons[0] : NULL;
    CHECK_MSG(cmp != NULL, "%s: %zu cases", text, res->num_cases);
    if (cmp != NULL) {
        CHECK_MSG(cmp->iteration.predicted > 0.0 && isfinite(cmp->iteration.measured) &&
                      cmp->iteration.measured > 0.0,
                  "%s: predicted %g measured %g", text, cmp->iteration.predicted,
                  cmp->iteration.measured);
        CHECK_NEAR(cmp->iteration.error,
                   (cmp->iteration.predicted - cmp->iteration.measured) / cmp->iteration.measured,
                   1e-9);
        CHECK_INT(cmp->num_devices, 2);
        CHECK_INT(cmp->num_stages, 1);
        for (size_t i = 0; i < cmp->num_devices; i++)
            CHECK_MSG(cmp->devices[i].busy.predicted > 0.0 && cmp->devices[i].busy.measured > 0.0,
                      "%s: rank %zu busy %g / %g", text, i, cmp->devices[i].busy.predicted,
                      cmp->devices[i].busy.measured);
    }
    ds_validate_result_free(res);
}

/* A case resolved on the 2 ranks and run; NULL when either fails (checked). */
static ds_exec_t *resolve_and_run(const ds_model_t *model, ds_strategy_t *s, const char *text)
{
    return resolve(model, s, text) ? run(text, model, s) : NULL;
}

static void test_context_parallel(const ds_model_t *model)
{
    static const char *const cases[] = {
        "cp=2,flash,mbs=1,gbs=4",
        "cp=2,cp-comm=a2a,flash,mbs=1,gbs=2",
        "cp=2,cp-comm=allgather,flash,mbs=1,gbs=2",
    };
    for (size_t k = 0; k < DSI_ARRAY_SIZE(cases); k++) {
        ds_strategy_t s;
        ds_exec_t *exec = resolve_and_run(model, &s, cases[k]);
        if (exec == NULL)
            return;
        if (rank == 0) {
            size_t exchanges = matched_calls(cases[k], exec, DSI_XK_CP);
            size_t posts = matched_calls(cases[k], exec, DSI_XK_CP_POST);
            int64_t passes = (int64_t)model->info.num_layers * ds_strategy_num_microbatches(&s);
            if (s.cp_comm == DS_CP_COMM_P2P) {
                /* Per layer and micro-batch: forward K/V; backward K/V, then
                 * K/V with their gradients, overlapped; the last hop home
                 * blocking. */
                CHECK_MSG((int64_t)posts == 3 * passes && (int64_t)exchanges == 4 * passes,
                          "%s: %zu ring transfers posted, %zu exchanges, for %lld layer passes",
                          cases[k], posts, exchanges, (long long)passes);
            } else {
                /* Blocking collectives: a2a twice a pass, allgather once
                 * forward and twice backward. */
                int64_t per = s.cp_comm == DS_CP_COMM_A2A ? 4 : 3;
                CHECK_MSG(posts == 0 && (int64_t)exchanges == per * passes,
                          "%s: %zu posted, %zu exchanges for %lld layer passes", cases[k], posts,
                          exchanges, (long long)passes);
            }
        }
        ds_exec_destroy(exec);
    }
    ds_strategy_t s;
    if (resolve(model, &s, cases[0]))
        check_validate(cases[0], model, &s);
}

static void test_experts(const ds_model_t *model)
{
    static const char *const cases[] = {
        "dp=2,ep=2,router-skew=1,mbs=1,gbs=4",
        "dp=2,ep=2,mbs=1,gbs=4",
    };
    for (size_t k = 0; k < DSI_ARRAY_SIZE(cases); k++) {
        ds_strategy_t s;
        ds_exec_t *exec = resolve_and_run(model, &s, cases[k]);
        if (exec == NULL)
            return;
        /* The EP group's slowest rank (expert coordinate 0) runs the skewed work. */
        int slowest = exec->expert_slowest;
        int all = 0;
        MPI_Allreduce(&slowest, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        CHECK_MSG(all == 1 && exec->expert_slowest == (rank == 0), "%s: %d slowest ranks", cases[k],
                  all);
        if (rank == 0) {
            /* Dispatch and combine, forward and backward, every layer and micro-batch. */
            size_t calls = matched_calls(cases[k], exec, DSI_XK_EP);
            int64_t passes = (int64_t)model->info.num_layers * ds_strategy_num_microbatches(&s);
            CHECK_MSG((int64_t)calls == 4 * passes, "%s: %zu EP calls for %lld layer passes",
                      cases[k], calls, (long long)passes);
        }
        ds_exec_destroy(exec);
    }
    ds_strategy_t s;
    if (resolve(model, &s, cases[0]))
        check_validate(cases[0], model, &s);
}

/* cp=2 and ep=2 on the same 2 ranks: the EP group is carved out of the
 * context-parallel ranks (Megatron-Core's expert groups over tp x cp x dp),
 * so each layer runs the ring and the dispatch between the same pair. */
static void test_cp_with_ep(const ds_model_t *moe)
{
    static const char text[] = "cp=2,flash,ep=2,router-skew=1,mbs=1,gbs=2";
    ds_strategy_t s;
    ds_exec_t *exec = resolve_and_run(moe, &s, text);
    if (exec == NULL)
        return;
    CHECK_INT(s.dp, 1);
    int slowest = exec->expert_slowest, all = 0;
    MPI_Allreduce(&slowest, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    CHECK_MSG(all == 1, "%s: %d slowest ranks", text, all);
    if (rank == 0) {
        int64_t passes = (int64_t)moe->info.num_layers * ds_strategy_num_microbatches(&s);
        size_t ep_calls = matched_calls(text, exec, DSI_XK_EP);
        size_t exchanges = matched_calls(text, exec, DSI_XK_CP);
        size_t posts = matched_calls(text, exec, DSI_XK_CP_POST);
        CHECK_MSG((int64_t)ep_calls == 4 * passes, "%s: %zu EP calls for %lld layer passes", text,
                  ep_calls, (long long)passes);
        CHECK_MSG((int64_t)posts == 3 * passes && (int64_t)exchanges == 4 * passes,
                  "%s: %zu ring transfers posted, %zu exchanges, for %lld layer passes", text,
                  posts, exchanges, (long long)passes);
    }
    ds_exec_destroy(exec);
    check_validate(text, moe, &s);
}

static void test_refused(const ds_model_t *dense, const ds_model_t *moe)
{
    ds_strategy_t s;
    ds_exec_t *exec = NULL;
    ds_strategy_init(&s);
    CHECK_OK(ds_strategy_parse("cp=4,flash,mbs=1,gbs=4", &s));
    CHECK_OK(ds_strategy_resolve(&s, dense, 4, 4));
    CHECK_FAILS(ds_exec_create(backend, dense, &s, &exec), DS_ERR_UNSUPPORTED, "ring on 2 ranks");
    ds_strategy_init(&s);
    CHECK_OK(ds_strategy_parse("tp=2,ep=1,etp=1,mbs=1,gbs=2", &s));
    if (ds_strategy_resolve(&s, moe, 2, 2) == DS_OK)
        CHECK_FAILS(ds_exec_create(backend, moe, &s, &exec), DS_ERR_UNSUPPORTED, "etp=1 with tp=2");
    ds_clear_error();
}

int main(int argc, char **argv)
{
    if ((rank = check_mpi_start(&argc, &argv, 2, 3,
                                "mpiexec -n 2 test_exec_cpep DENSE.json MOE.json")) < 0)
        return 1;
    ds_model_t *dense = NULL, *moe = NULL;
    CHECK_OK(ds_model_load(argv[1], &dense));
    CHECK_OK(ds_model_load(argv[2], &moe));
    if (dense != NULL)
        CHECK_OK(ds_model_set_seq_len(dense, 64));
    if (moe != NULL)
        CHECK_OK(ds_model_set_seq_len(moe, 32));
    CHECK_OK(ds_cluster_init(&cluster, 1, 2, "cpu"));
    CHECK_OK(ds_backend_open(DS_BACKEND_CPU, MPI_COMM_WORLD, &backend));
    if (dense != NULL && moe != NULL && backend != NULL) {
        test_context_parallel(dense);
        test_experts(moe);
        test_cp_with_ep(moe);
        test_refused(dense, moe);
    }
    ds_backend_close(backend);
    ds_model_destroy(dense);
    ds_model_destroy(moe);
    return check_mpi_finish("test_exec_cpep", rank);
}
