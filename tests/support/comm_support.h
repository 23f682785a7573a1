/* Synthetic communication samples for the unit tests: one helper fills a
 * sample the way a profile or an import would record it. */
#ifndef DSMPI_TEST_COMM_SUPPORT_H
#define DSMPI_TEST_COMM_SUPPORT_H

#include <dsmpi/dsmpi.h>

#include <stdio.h>
#include <string.h>

/* `op` of `bytes` (fp32) on `group` ranks, `nodes` x `per_node`, one group at
 * a time, taking `seconds` (mean, median, p10 and p90 alike). */
static inline void fill_comm_sample(ds_comm_sample_t *x, ds_comm_op_t op, int64_t bytes, int group,
                                    int nodes, int per_node, double seconds,
                                    ds_provenance_t provenance, int repetitions, const char *source)
{
    memset(x, 0, sizeof(*x));
    x->op = op;
    x->dtype = DS_DTYPE_FP32;
    x->bytes = bytes;
    x->group_size = group;
    x->nodes = nodes;
    x->ranks_per_node = per_node;
    x->concurrency = 1;
    x->mean_s = x->median_s = x->p10_s = x->p90_s = seconds;
    x->repetitions = repetitions;
    x->provenance = provenance;
    snprintf(x->source, sizeof(x->source), "%s", source);
}

#endif
