/* The executor's device-queue path (the one the cuda backend takes) on 2
 * ranks without a GPU: the cpu backend is given device queues for this test.
 * The cpu runs work when it is issued, so a queue reaches a mark when the
 * mark is recorded, joins and waits have nothing to wait for, and a call
 * issued outside a group runs to completion; inside a group the calls are
 * started, and completed at the group's end (a program action's transfers,
 * which one blocking send before its receive would deadlock).  Every record
 * must carry two marks that became ordered times, overlapped buckets must
 * be dp.overlap records with no host-side start or test, and the schedule's
 * order must show as in test_exec. */
#include "check.h"

#include "exec/dsi_exec.h"

#include <stdlib.h>

static ds_model_t *model;
static ds_backend_t *backend;
static const dsi_backend_ops_t *cpu_ops;
static int rank;

static double *marks;
static size_t num_marks;
static void *group[8];
static int group_size = -1; /* -1: no group open */

static ds_status_t fake_reserve(ds_backend_t *b, size_t count)
{
    if (count <= num_marks)
        return DS_OK;
    DSI_TRY(dsi_realloc_array(&marks, count, sizeof(*marks)));
    num_marks = count;
    return DS_OK;
}

static ds_status_t fake_mark(ds_backend_t *b, int queue, size_t slot)
{
    DSI_TRY(fake_reserve(b, slot + 1));
    marks[slot] = dsi_now_s();
    return DS_OK;
}

static ds_status_t fake_join(ds_backend_t *b, int from, int to)
{
    return from >= 0 && from < DSI_QUEUE_COUNT_ && to >= 0 && to < DSI_QUEUE_COUNT_
               ? DS_OK
               : DSI_ERROR(DS_ERR_INVALID_ARG, "queue %d or %d", from, to);
}

static ds_status_t fake_wait_mark(ds_backend_t *b, int queue, size_t slot)
{
    return slot < num_marks ? DS_OK : DSI_ERROR(DS_ERR_INVALID_ARG, "mark %zu not made", slot);
}

static ds_status_t fake_mark_done(ds_backend_t *b, size_t slot, int *done_p)
{
    *done_p = 1;
    return DS_OK;
}

static ds_status_t fake_read(ds_backend_t *b, size_t count, double *offsets_s)
{
    if (count > num_marks)
        return DSI_ERROR(DS_ERR_INVALID_ARG, "%zu marks read, %zu made", count, num_marks);
    for (size_t i = 0; i < count; i++)
        offsets_s[i] = marks[i] - marks[0];
    return DS_OK;
}

static ds_status_t fake_issue(void *impl, int queue, int role, int tag)
{
    DSI_TRY(cpu_ops->comm_start(impl, role, tag));
    if (group_size < 0)
        return cpu_ops->comm_wait(impl);
    if (group_size == (int)DSI_ARRAY_SIZE(group))
        return DSI_ERROR(DS_ERR_INTERNAL, "a group of more than %d calls", group_size);
    group[group_size++] = impl;
    return DS_OK;
}

static ds_status_t fake_group_start(ds_backend_t *b)
{
    if (group_size >= 0)
        return DSI_ERROR(DS_ERR_INTERNAL, "a group inside a group");
    group_size = 0;
    return DS_OK;
}

static ds_status_t fake_group_end(ds_backend_t *b)
{
    ds_status_t status = DS_OK;
    for (int i = 0; i < group_size && status == DS_OK; i++)
        status = cpu_ops->comm_wait(group[i]);
    group_size = -1;
    return status;
}

static void resolve(ds_strategy_t *s, const char *text)
{
    ds_strategy_init(s);
    CHECK_OK(ds_strategy_parse(text, s));
    CHECK_OK(ds_strategy_resolve(s, model, 2, 2));
}

static size_t count_kind(const dsi_xrun_t *r, int kind)
{
    size_t n = 0;
    for (size_t i = 0; i < r->num_recs; i++)
        n += r->recs[i].kind == kind;
    return n;
}

static void test_strategy(const char *text)
{
    ds_strategy_t s;
    resolve(&s, text);
    ds_exec_t *exec = NULL;
    CHECK_OK(ds_exec_create(backend, model, &s, &exec));
    if (exec == NULL)
        return;
    CHECK_MSG(exec->queued, "%s: the executor did not take the device-queue path", text);
    ds_exec_options_t o;
    ds_exec_options_init(&o);
    o.warmup = 1;
    o.iterations = 2;
    o.max_foreign = 1.0;
    CHECK_OK(ds_exec_run(exec, &o));
    if (ds_exec_run_count(exec) != 1) {
        ds_exec_destroy(exec);
        return;
    }
    ds_exec_summary_t sum;
    CHECK_OK(ds_exec_get_summary(exec, 0, &sum));
    CHECK_MSG(sum.iteration_s > 0.0, "%s: iteration %g s", text, sum.iteration_s);
    for (int r = 0; r < 2; r++) {
        ds_exec_device_t d;
        CHECK_OK(ds_exec_device_at(exec, 0, r, &d));
        CHECK(d.compute_s > 0.0 && d.comm_exposed_s >= 0.0 && d.idle_s >= 0.0);
        CHECK_MSG(d.busy_s <= 1.05 * sum.iteration_s, "%s rank %d: busy %g of %g", text, r,
                  d.busy_s, sum.iteration_s);
    }
    if (rank == 0) {
        const dsi_xrun_t *run = &exec->runs[0];
        size_t unmarked = 0, backwards = 0;
        for (size_t i = 0; i < run->num_recs; i++) {
            unmarked += run->recs[i].mark[0] < 1 || run->recs[i].mark[1] <= run->recs[i].mark[0];
            backwards += run->recs[i].end_s < run->recs[i].start_s;
        }
        CHECK_MSG(unmarked == 0, "%s: %zu of %zu records without two marks after the anchor", text,
                  unmarked, run->num_recs);
        CHECK_MSG(backwards == 0, "%s: %zu records end before they start", text, backwards);
        CHECK_INT(count_kind(run, DSI_XK_DP_START) + count_kind(run, DSI_XK_DP_TEST), 0);
        /* Every rank's buckets, every iteration. */
        if (s.dp > 1 && s.overlap_grad_reduce)
            CHECK_INT(count_kind(run, DSI_XK_DP_OVERLAP),
                      (int64_t)exec->num_buckets * exec->size * (o.warmup + o.iterations));
    }
    for (size_t i = 0; s.pp > 1 && i < ds_exec_microbatch_count(exec); i++) {
        ds_exec_microbatch_t mb;
        CHECK_OK(ds_exec_microbatch_at(exec, 0, i, &mb));
        CHECK_MSG(mb.fwd_start_s < mb.fwd_end_s && mb.fwd_end_s <= mb.bwd_start_s &&
                      mb.bwd_start_s < mb.bwd_end_s,
                  "%s stage %d mb %d: fwd %g..%g bwd %g..%g", text, mb.stage, mb.microbatch,
                  mb.fwd_start_s, mb.fwd_end_s, mb.bwd_start_s, mb.bwd_end_s);
    }
    ds_exec_destroy(exec);
}

int main(int argc, char **argv)
{
    if ((rank = check_mpi_start(&argc, &argv, 2, 2, "mpiexec -n 2 test_exec_queued MODEL.json")) <
        0)
        return 1;
    CHECK_OK(ds_model_load(argv[1], &model));
    if (model != NULL)
        CHECK_OK(ds_model_set_seq_len(model, 32));
    CHECK_OK(ds_backend_open(DS_BACKEND_CPU, MPI_COMM_WORLD, &backend));
    if (model != NULL && backend != NULL) {
        cpu_ops = backend->ops;
        dsi_backend_ops_t queued = *cpu_ops;
        queued.queue_mark = fake_mark;
        queued.marks_reserve = fake_reserve;
        queued.queue_join = fake_join;
        queued.queue_wait_mark = fake_wait_mark;
        queued.mark_done = fake_mark_done;
        queued.marks_read = fake_read;
        queued.comm_issue = fake_issue;
        queued.group_start = fake_group_start;
        queued.group_end = fake_group_end;
        backend->ops = &queued;
        CHECK(dsi_backend_queued(backend));
        test_strategy("dp=2,tp=1,pp=1,mbs=1,gbs=4,bucket=64K");
        test_strategy("dp=2,tp=1,pp=1,mbs=1,gbs=4,no-overlap");
        test_strategy("dp=1,tp=2,pp=1,mbs=1,gbs=2,sp");
        test_strategy("dp=1,tp=1,pp=2,mbs=1,gbs=4,schedule=1f1b");
        test_strategy("dp=1,tp=1,pp=2,mbs=1,gbs=4,schedule=interleaved,vpp=2");
        backend->ops = cpu_ops;
    }
    ds_backend_close(backend);
    ds_model_destroy(model);
    free(marks);
    return check_mpi_finish("test_exec_queued", rank);
}
