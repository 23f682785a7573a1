/* Preloaded (LD_PRELOAD) into the ranks of a dsmpi run by fault_kill.sh: the
 * process kills itself with SIGKILL at a chosen point, to test what the
 * other ranks and the profile database make of it.
 *   DSMPI_TEST_DIE=gather:RANK   RANK dies entering its first MPI_Allgatherv
 *                                (the profile database's gather, at a commit)
 *   DSMPI_TEST_DIE=rename:RANK   RANK dies as it renames a complete temporary
 *                                file over the database (rank 0 renames)
 * The rank is the launcher's (OMPI_COMM_WORLD_RANK, PMIX_RANK).  It says so on
 * stderr first, with the time of death in ms since 1970. */
#define _GNU_SOURCE /* RTLD_NEXT */
#include <dlfcn.h>
#include <mpi.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int my_rank(void)
{
    const char *names[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK"};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        const char *value = getenv(names[i]);
        if (value != NULL)
            return atoi(value);
    }
    return -1;
}

static void maybe_die(const char *point)
{
    const char *spec = getenv("DSMPI_TEST_DIE");
    size_t n = strlen(point);
    if (spec == NULL || strncmp(spec, point, n) != 0 || spec[n] != ':')
        return;
    if (atoi(spec + n + 1) != my_rank())
        return;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    fprintf(stderr, "fault_shim: rank %d dies at %s (at %lld ms)\n", my_rank(), point,
            (long long)now.tv_sec * 1000 + now.tv_nsec / 1000000);
    raise(SIGKILL);
}

int MPI_Allgatherv(const void *sendbuf, int sendcount, MPI_Datatype sendtype, void *recvbuf,
                   const int recvcounts[], const int displs[], MPI_Datatype recvtype, MPI_Comm comm)
{
    maybe_die("gather");
    return PMPI_Allgatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype,
                           comm);
}

int rename(const char *from, const char *to)
{
    static int (*real_rename)(const char *, const char *);
    if (real_rename == NULL)
        real_rename = (int (*)(const char *, const char *))dlsym(RTLD_NEXT, "rename");
    if (strstr(from, ".tmp.") != NULL)
        maybe_die("rename");
    return real_rename(from, to);
}
