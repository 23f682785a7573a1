/* Profile database timings: commit N new records gathered from every rank
 * (write), reopen (rank 0 reads, broadcasts), and commit one more record onto
 * N (the rewrite a checkpoint costs).  Median of REPS runs; every time is the
 * slowest rank's.  Run by store_bench.sh.
 *   bench_store DB N REPS */
#include <dsmpi/dsmpi.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int rank, size;

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *values, int count)
{
    qsort(values, (size_t)count, sizeof(*values), by_value);
    return count % 2 ? values[count / 2] : 0.5 * (values[count / 2 - 1] + values[count / 2]);
}

static double slowest(double seconds)
{
    double max = 0.0;
    MPI_Allreduce(&seconds, &max, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return max;
}

static int fail(const char *what)
{
    fprintf(stderr, "bench_store: rank %d: %s: %s\n", rank, what, ds_last_error());
    MPI_Abort(MPI_COMM_WORLD, 1);
    return 1;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc != 4) {
        if (rank == 0)
            fprintf(stderr, "usage: bench_store DB RECORDS REPS\n");
        MPI_Finalize();
        return 2;
    }
    const char *path = argv[1];
    long records = atol(argv[2]);
    int reps = atoi(argv[3]);
    double *write_s = calloc((size_t)reps, sizeof(double));
    double *read_s = calloc((size_t)reps, sizeof(double));
    double *rewrite_s = calloc((size_t)reps, sizeof(double));
    long mine_first = records * rank / size, mine_last = records * (rank + 1) / size;
    long long file_size = 0;
    for (int r = 0; r < reps; r++) {
        if (rank == 0)
            remove(path);
        MPI_Barrier(MPI_COMM_WORLD);
        ds_profile_db_t *db = NULL;
        if (ds_profile_db_open(MPI_COMM_WORLD, path, 0, &db) != DS_OK)
            return fail("open");
        for (long i = mine_first; i < mine_last; i++) {
            ds_event_key_t key;
            memset(&key, 0, sizeof(key));
            key.op = (uint8_t)(i % 3 == 0 ? DS_OP_GEMM : DS_OP_SOFTMAX);
            key.dtype = DS_DTYPE_BF16;
            key.dims[0] = 64 + i;
            key.dims[1] = 4096;
            ds_cost_t cost = {1e-4 + 1e-9 * (double)i, 1e-4, 9e-5, 1.2e-4, 50, DS_PROV_MEASURED};
            double samples[4] = {9e-5, 1e-4, 1.05e-4, 1.2e-4};
            ds_cost_histogram_t histogram;
            ds_cost_histogram_fill(samples, 4, &histogram);
            if (ds_profile_db_add(db, "cpu:bench", &key, &cost, &histogram) != DS_OK)
                return fail("add");
        }
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        if (ds_profile_db_commit(db) != DS_OK)
            return fail("commit");
        write_s[r] = slowest(MPI_Wtime() - t0);
        ds_profile_db_close(db);

        MPI_Barrier(MPI_COMM_WORLD);
        t0 = MPI_Wtime();
        if (ds_profile_db_open(MPI_COMM_WORLD, path, 0, &db) != DS_OK)
            return fail("reopen");
        read_s[r] = slowest(MPI_Wtime() - t0);
        if ((long)ds_profile_db_num_records(db) != records)
            return fail("record count");

        if (rank == 0) {
            ds_event_key_t key;
            memset(&key, 0, sizeof(key));
            key.dims[0] = -1;
            ds_cost_t cost = {1e-3, 1e-3, 1e-3, 1e-3, 1, DS_PROV_MEASURED};
            if (ds_profile_db_add(db, "cpu:bench", &key, &cost, NULL) != DS_OK)
                return fail("add one");
        }
        MPI_Barrier(MPI_COMM_WORLD);
        t0 = MPI_Wtime();
        if (ds_profile_db_commit(db) != DS_OK)
            return fail("rewrite");
        rewrite_s[r] = slowest(MPI_Wtime() - t0);
        ds_profile_db_close(db);
        struct stat info;
        if (rank == 0 && stat(path, &info) == 0)
            file_size = (long long)info.st_size;
    }
    if (rank == 0) {
        const char *mode = getenv("DS_DB_WRITE_MODE");
        printf("  %8ld %6d %-10s %10.3f %10.3f %10.3f %10.2f\n", records, size,
               mode ? mode : "auto", median(write_s, reps), median(read_s, reps),
               median(rewrite_s, reps), (double)file_size / 1048576.0);
    }
    free(write_s);
    free(read_s);
    free(rewrite_s);
    MPI_Finalize();
    return 0;
}
