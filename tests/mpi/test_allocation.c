/* Allocation detection under real MPI ranks, and event generation giving
 * every rank the same unique-event list (the profiler's plan relies on it). */
#include "check.h"

#include <mpi.h>
#include <stdlib.h>

static void test_detect(int fake_slurm)
{
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (fake_slurm) {
        /* Set here, not in the launcher's environment: mpiexec would take a
         * SLURM_JOB_ID as a request to launch through Slurm. */
        setenv("SLURM_JOB_ID", "4242", 1);
        setenv("SLURM_NTASKS", "3", 1);
        setenv("SLURM_NNODES", "2", 1);
        setenv("SLURM_TASKS_PER_NODE", "2(x2)", 1);
    }
    ds_allocation_t a;
    CHECK_OK(ds_allocation_detect(MPI_COMM_WORLD, &a));
    CHECK(a.world_size == size && a.rank == rank);
    /* One machine: one shared-memory node holding every rank. */
    CHECK_INT(a.num_nodes, 1);
    CHECK_INT(a.node_index, 0);
    CHECK_INT(a.local_size, size);
    CHECK_INT(a.local_rank, rank);
    CHECK(a.min_local_size == size && a.max_local_size == size);
    CHECK(a.hostname[0] != '\0');
    if (fake_slurm) {
        /* SLURM_NTASKS and SLURM_NNODES disagree with MPI: two warnings. */
        CHECK_INT(a.slurm_job_id, 4242);
        CHECK_INT(a.slurm_ntasks, 3);
        CHECK_INT(a.warnings, 2);
    } else {
        CHECK_INT(a.slurm_job_id, 0);
        CHECK_INT(a.warnings, 0);
    }
}

static void test_same_events_everywhere(void)
{
    ds_model_t *model = NULL;
    ds_strategy_t s;
    ds_cluster_t cluster;
    ds_event_set_t *set = NULL;
    ds_strategy_init(&s);
    CHECK_OK(ds_model_load("llama3-8b", &model));
    CHECK_OK(ds_strategy_parse("tp=4,pp=2,sp,mbs=1,gbs=256", &s));
    CHECK_OK(ds_cluster_from_gpus(&cluster, 256, 8));
    CHECK_OK(ds_strategy_resolve(&s, model, 256, 8));
    CHECK_OK(ds_events_generate(model, &s, &cluster, &set));
    /* Hash the ordered unique list; every rank must hold the same. */
    unsigned long long digest = 1469598103934665603ULL;
    for (size_t i = 0; set != NULL && i < ds_event_set_size(set); i++) {
        const ds_event_t *e = ds_event_set_at(set, i);
        digest = (digest ^ ds_event_key_hash(&e->key)) * 1099511628211ULL;
        digest = (digest ^ (unsigned long long)e->count) * 1099511628211ULL;
    }
    unsigned long long lo = 0, hi = 0;
    MPI_Allreduce(&digest, &lo, 1, MPI_UNSIGNED_LONG_LONG, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(&digest, &hi, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
    CHECK(lo == hi && set != NULL && ds_event_set_size(set) > 40);
    ds_event_set_destroy(set);
    ds_model_destroy(model);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    ds_log_set_rank(rank);
    test_detect(argc > 1 && strcmp(argv[1], "--fake-slurm") == 0);
    test_same_events_everywhere();
    int failures = check_failures, total = 0;
    MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Finalize();
    if (rank == 0)
        printf("test_allocation: %d failures over all ranks\n", total);
    return total != 0;
}
