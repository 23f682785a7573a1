/* What the communication benches share: the measured time per size of one
 * nccl-tests test, and medians. */
#ifndef DSMPI_COMM_BENCH_H
#define DSMPI_COMM_BENCH_H

#include <dsmpi/dsmpi.h>

#define COMM_BENCH_MAX_POINTS 128

/* Mean time per size of one test (in-place and out-of-place averaged). */
typedef struct comm_bench_target {
    int64_t bytes[COMM_BENCH_MAX_POINTS];
    double time_s[COMM_BENCH_MAX_POINTS];
    int count;
} comm_bench_target_t;

void comm_bench_target_of(const ds_comm_sample_t *samples, size_t count, comm_bench_target_t *t);

/* The median of `values` (sorted in place); 0 for none. */
double comm_bench_median(double *values, int count);

#endif /* DSMPI_COMM_BENCH_H */
