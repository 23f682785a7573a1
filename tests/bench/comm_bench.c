/* What the communication benches share (comm_bench.h). */
#include "comm_bench.h"

#include <stdlib.h>

static int compare_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double comm_bench_median(double *values, int count)
{
    if (count <= 0)
        return 0.0;
    qsort(values, (size_t)count, sizeof(double), compare_double);
    return count % 2 ? values[count / 2] : 0.5 * (values[count / 2 - 1] + values[count / 2]);
}

void comm_bench_target_of(const ds_comm_sample_t *s, size_t n, comm_bench_target_t *t)
{
    int counts[COMM_BENCH_MAX_POINTS] = {0};
    t->count = 0;
    for (size_t i = 0; i < n; i++) {
        int j = 0;
        while (j < t->count && t->bytes[j] != s[i].bytes)
            j++;
        if (j == t->count) {
            if (t->count == COMM_BENCH_MAX_POINTS)
                continue;
            t->bytes[t->count] = s[i].bytes;
            t->time_s[t->count++] = 0;
        }
        t->time_s[j] += s[i].mean_s;
        counts[j]++;
    }
    for (int j = 0; j < t->count; j++)
        t->time_s[j] /= counts[j];
}
