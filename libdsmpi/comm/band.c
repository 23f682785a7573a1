/* The band around communication times extrapolated beyond the node counts
 * that were measured: how wrong the model was, on real clusters, when it
 * extrapolated by the same factor. */
#include "dsi_comm.h"

#include <math.h>
#include <string.h>

/* Leave-scale-out errors of the model: fitted on the nccl-tests logs of at
 * most `fit_nodes` nodes of a data set, predicting `target_nodes`; `hi`
 * and `lo` are the largest and smallest log(measured / predicted) over every
 * size of the logs (hi > 0: the prediction was too fast).  Measured with
 * tests/bench/comm_scale.sh --verbose on the point model of this version
 * (NCCL's protocols LL, LL128, Simple priced per ring and tree, trees
 * derated at mid sizes, DS_COMM_CONGESTION_PRIOR's 5% per doubling); the
 * logs are in ../shared/data/nccl-tests (their README names the source).
 * Rerun and update these rows when the point model changes. */
typedef struct band_row {
    const char *data_set;
    const char *op;
    int fit_nodes, target_nodes;
    double hi, lo;
} band_row_t;

static const band_row_t band_rows[] = {
    /* ABCI "A" nodes: 8 x A100 per node, InfiniBand HDR (all_reduce_perf) */
    {"abci-a100-hdr", "allreduce", 2, 4, 0.030, -0.266},
    {"abci-a100-hdr", "allreduce", 2, 8, 0.512, -0.355},
    {"abci-a100-hdr", "allreduce", 2, 16, 0.106, -0.371},
    /* ABCI "V" nodes: 4 x V100 per node, InfiniBand EDR (all_reduce_perf) */
    {"abci-v100-edr", "allreduce", 2, 4, 0.300, -0.321},
    {"abci-v100-edr", "allreduce", 2, 8, 0.664, -0.405},
    {"abci-v100-edr", "allreduce", 2, 16, 1.098, -0.184},
    {"abci-v100-edr", "allreduce", 2, 32, 1.174, -0.011},
    /* An H100 cluster: 8 x H100 per node, InfiniBand (every collective) */
    {"h100-ib-cluster01", "allreduce", 2, 10, 0.889, -0.117},
    {"h100-ib-cluster01", "allgather", 2, 10, 0.527, 0.059},
    {"h100-ib-cluster01", "reduce_scatter", 2, 10, 0.596, 0.029},
    {"h100-ib-cluster01", "alltoall", 2, 10, -0.055, -0.102},
    {"h100-ib-cluster01", "sendrecv", 2, 10, 1.012, 0.981},
};

/* Per doubling of the extrapolation factor: the widest error any row
 * showed, each row's error divided by its doublings (log2 of target /
 * fitted nodes); the rows of `leave_out` (a data set's name, NULL: none)
 * are not used, so that a data set's band does not come from its own
 * errors.  Both sides take the widest error of either sign: a handful of
 * fabrics cannot tell which way an unseen one errs (sized by sign, the band
 * covered 54-71% of the ABCI A100 points left out, whose small messages
 * were too slow where the other fabrics' were too fast). */
void dsi_comm_band_rates(const char *leave_out, double *slow_p, double *fast_p)
{
    double slow = 0.0, fast = 0.0;
    for (size_t i = 0; i < DSI_ARRAY_SIZE(band_rows); i++) {
        const band_row_t *row = &band_rows[i];
        if (leave_out != NULL && strcmp(leave_out, row->data_set) == 0)
            continue;
        double doublings = log2((double)row->target_nodes / (double)row->fit_nodes);
        slow = fmax(slow, row->hi / doublings);
        fast = fmax(fast, -row->lo / doublings);
    }
    *slow_p = *fast_p = fmax(slow, fast);
}

const char *dsi_comm_band_data_set(const char *name)
{
    for (size_t i = 0; i < DSI_ARRAY_SIZE(band_rows); i++)
        if (strcmp(name, band_rows[i].data_set) == 0)
            return band_rows[i].data_set;
    return NULL;
}

void dsi_comm_band(double time_s, double factor, double slow, double fast, double *low_p,
                   double *high_p)
{
    double doublings = factor > 1.0 ? log2(factor) : 0.0;
    *low_p = time_s * exp(-fast * doublings);
    *high_p = time_s * exp(slow * doublings);
}

/* The most flows one of `n` paths carries when `n` flows each take one of
 * the `n` at random, as static hashing (ECMP, a routing table blind to the
 * traffic) places them: the least k with n x P(Binomial(n, 1/n) > k) <=
 * 1 - DSI_COMM_BAND_COVERAGE, a union bound over the paths, so at least
 * that quantile of the most loaded path's flows.  10 paths: 4; 64: 5. */
int dsi_comm_collision_load(int64_t n)
{
    if (n <= 1)
        return 1;
    double p = 1.0 / (double)n;
    double term = pow(1.0 - p, (double)n); /* P(X = 0) */
    double at_most = term;                 /* P(X <= k) */
    for (int64_t k = 1; k < n; k++) {
        term *= (double)(n - k + 1) / (double)k * p / (1.0 - p);
        at_most += term;
        if ((double)n * (1.0 - at_most) <= 1.0 - DSI_COMM_BAND_COVERAGE)
            return (int)k;
    }
    return (int)DSI_MIN(n, INT32_MAX);
}

void ds_comm_band_rates(const char *leave_out, double *slow_p, double *fast_p)
{
    dsi_comm_band_rates(leave_out, slow_p, fast_p);
}

void ds_comm_band_multipliers(double factor, double slow, double fast, double *low_p,
                              double *high_p)
{
    dsi_comm_band(1.0, factor, slow, fast, low_p, high_p);
}
