#include "check.h"

#include <mpi.h>

int check_failures;
int check_count;

int check_summary(const char *name)
{
    if (check_failures != 0) {
        fprintf(stderr, "%s: %d of %d checks failed\n", name, check_failures, check_count);
        return 1;
    }
    printf("%s: %d checks passed\n", name, check_count);
    return 0;
}

int check_mpi_start(int *argc, char ***argv, int ranks, int min_args, const char *usage)
{
    int rank = 0, size = 0;
    MPI_Init(argc, argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size == ranks && *argc >= min_args)
        return rank;
    if (rank == 0)
        fprintf(stderr, "usage: %s\n", usage);
    MPI_Finalize();
    return -1;
}

int check_mpi_finish(const char *name, int rank)
{
    int failures = check_failures, all = 0;
    MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    check_failures = all;
    int code = rank == 0 ? check_summary(name) : (all ? 1 : 0);
    MPI_Finalize();
    return code;
}
