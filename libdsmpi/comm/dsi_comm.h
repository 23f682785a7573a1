/* Private parts of the communication model: group shapes, cost terms, the
 * algorithm tables of the communication libraries, bandwidth curves and
 * the fitted levels. */
#ifndef DSI_COMM_H
#define DSI_COMM_H

#include <dsmpi/comm.h>

#include "dsi_core.h"

/* ---- group shapes ------------------------------------------------------------------ */

/* How a group spreads over the cluster.  units[0] = ranks, units[1] = nodes,
 * units[L] (L >= 2) = level-(L-1) domains spanned; units[top + 1] = 1.
 * Nodes are assumed contiguous (the placement fills a node, then a leaf). */
typedef struct dsi_comm_shape {
    int64_t n; /* ranks */
    int64_t r; /* most ranks on one node */
    int top;   /* highest level crossed; 0 inside a node */
    int64_t units[DS_MAX_NET_LEVELS + 1];
    int32_t concurrency; /* groups sharing one node's network interfaces */
    int64_t servers;     /* parameter servers (0: one per rank) */
    int32_t node_stride; /* nodes between the group's nodes (1: neighbours) */
    int64_t leaf_nodes;  /* spread groups: nodes of a leaf sending like it (0: the leaf's) */
} dsi_comm_shape_t;

/* Cost of one algorithm on one shape, before the level parameters:
 * time = base + sum_L hops[L] x hop_L + max_L volume[L] / bandwidth_L(S).
 * Volumes are in the level's bus-bandwidth units: per rank at level 0, per
 * node (the group's share of the node's interfaces) at level >= 1. */
/* A protocol of an algorithm (NCCL's LL, LL128, Simple): the share of the
 * Simple protocol's bandwidth it reaches and its prior per-hop latency
 * inside a node and across the network.  The fitted per-hop latency of a
 * level is the protocol of the smallest sizes' (the first row); the others
 * add their prior latency over the first row's. */
/* A protocol's bandwidth lost at mid sizes: the share it keeps at message
 * sizes 2^log2_bytes, interpolated in log2(size) between knots, 1 outside. */
typedef struct dsi_comm_mid_size {
    double log2_bytes, share;
} dsi_comm_mid_size_t;

typedef struct dsi_comm_proto {
    const char *name;
    double bw_efficiency;
    double hop_us[2];                    /* [0] inside a node, [1] across the network */
    const dsi_comm_mid_size_t *mid_size; /* NULL: no loss at any size */
    int num_mid_size;
} dsi_comm_proto_t;

#define DSI_COMM_MAX_PROTOS 3

typedef struct dsi_comm_terms {
    double hops[DS_MAX_NET_LEVELS];
    double volume[DS_MAX_NET_LEVELS];
    /* The algorithm's protocols (NULL: one, at the fitted latency and bandwidth). */
    const dsi_comm_proto_t *protos;
    int num_protos;
    /* The row whose per-hop latency the fitted one is (NULL: protos[0]):
     * algorithms without LL price their hops over the ring's LL. */
    const dsi_comm_proto_t *reference;
} dsi_comm_terms_t;

/* Per-hop latency (s) protocol `proto` of `terms` adds at `level` to the
 * fitted one, its bandwidth efficiency (1 without protocols) and the share
 * of that it keeps at a message of `bytes` (1 but where the algorithm runs
 * slower at mid sizes). */
double dsi_comm_proto_hop_extra_s(const dsi_comm_terms_t *terms, int proto, int level);
double dsi_comm_proto_efficiency(const dsi_comm_terms_t *terms, int proto);
double dsi_comm_proto_mid_size(const dsi_comm_terms_t *terms, int proto, double bytes);
/* The cluster's nominal bandwidth at `level` for a group of `shape`, in
 * the units of dsi_comm_level_bandwidth. */
double dsi_comm_level_nominal(const ds_comm_model_t *model, int level,
                              const dsi_comm_shape_t *shape);
/* Bandwidth of protocol `proto` at `level` for a message of `bytes` where
 * the fitted curve gives `bw`: a protocol below full efficiency reaches its
 * share of `bw` capped at the nominal bandwidth (NCCL caps LL and LL128 the
 * same way), times its mid-size share. */
double dsi_comm_proto_bandwidth(const ds_comm_model_t *model, const dsi_comm_terms_t *terms,
                                int proto, int level, const dsi_comm_shape_t *shape, double bw,
                                double bytes);
/* Latency of protocol `proto` over levels 0 .. `below` - 1 (base included). */
double dsi_comm_proto_latency(const ds_comm_model_t *model, ds_comm_op_t op,
                              const dsi_comm_terms_t *terms, int proto, int below);

/* ---- bandwidth curves --------------------------------------------------------------- */

#define DSI_COMM_CURVE_MAX 64

/* A piecewise power law: log(bandwidth) linear in log(bytes) between knots,
 * constant beyond them.  Slopes never exceed 1, so bytes / bandwidth (the
 * time of a given volume) never decreases with size. */
typedef struct dsi_comm_curve {
    int count;
    double log_bytes[DSI_COMM_CURVE_MAX];
    double log_bw[DSI_COMM_CURVE_MAX]; /* log of bytes per second */
} dsi_comm_curve_t;

/* A point to fit: size, the bandwidth that explains it, and how far the
 * curve may deviate from it (relative, from the time tolerance). */
typedef struct dsi_comm_curve_point {
    double bytes;
    double bw;
    double allowed;
} dsi_comm_curve_point_t;

double dsi_comm_curve_eval(const dsi_comm_curve_t *curve, double bytes);
/* Fits `count` points (sorted by bytes, count >= 1): monotone time
 * (pool-adjacent-violators on bytes/bw), then knots added where the curve
 * misses a point by more than it allows.  `points` is modified. */
void dsi_comm_curve_fit(dsi_comm_curve_point_t *points, int count, dsi_comm_curve_t *curve);
/* The curve scaled by `factor`. */
void dsi_comm_curve_scale(dsi_comm_curve_t *curve, double factor);
double dsi_comm_curve_peak(const dsi_comm_curve_t *curve);

/* ---- fitted levels ------------------------------------------------------------------- */

#define DSI_COMM_MAX_CURVES 16

/* One curve and the group layout it was measured on.  Level 0 curves are
 * per rank over the collective's bytes; level >= 1 curves per network
 * interface over the bytes one interface carries (bytes / interfaces used). */
typedef struct dsi_comm_layout_curve {
    int64_t r;     /* ranks per node */
    int64_t units; /* level 0: ranks; level >= 1: level-(L-1) domains spanned */
    dsi_comm_curve_t curve;
} dsi_comm_layout_curve_t;

typedef struct dsi_comm_level {
    bool resolved;
    ds_comm_fit_source_t source;
    ds_comm_op_t from_op;
    double base_s; /* level 0: constant per operation */
    double hop_s;
    /* Share of the bandwidth lost per doubling of the domains spanned
     * beyond a curve's layout (level >= 1), fitted where curves of two
     * spans exist, else the cluster file's prior. */
    double congestion;
    bool congestion_fitted;
    /* Per doubling beyond the widest span of the curves: the prior, or the
     * fit where larger; a fit on a few nodes says nothing of the switches
     * above them. */
    double congestion_beyond;
    int64_t widest_units;
    int num_curves;
    dsi_comm_layout_curve_t curves[DSI_COMM_MAX_CURVES];
    size_t points;
} dsi_comm_level_t;

/* Samples of one shape merged per size (in-place and out-of-place averaged). */
typedef struct dsi_comm_series {
    ds_comm_op_t op;
    int32_t n, nodes, r, concurrency, batched;
    /* Nodes whose traffic crossed the network at once: the group's own, or
     * for pairs the job's (sendrecv_perf on that many nodes). */
    int32_t span;
    ds_provenance_t provenance; /* measured if any sample was, else imported */
    size_t count;
    double *bytes;   /* increasing */
    ds_cost_t *cost; /* per size */
} dsi_comm_series_t;

typedef struct dsi_comm_library dsi_comm_library_t;

struct ds_comm_model {
    ds_cluster_t cluster; /* with at least two levels */
    /* Point-to-point measured at level 0 (a pair inside a node) and 1 (a
     * pair across nodes), both directions at once where measured: the steps
     * of MPI's collectives (NULL: the fitted curves only). */
    const dsi_comm_series_t *p2p[2];
    ds_comm_model_options_t options;
    const dsi_comm_library_t *library;
    double tree_efficiency;
    double tolerance;
    dsi_comm_level_t levels[DS_COMM_COUNT_][DS_MAX_NET_LEVELS];
    dsi_comm_series_t *series;
    size_t num_series;
};

/* The shape of a group of `n` ranks on `nodes` nodes with at most `r` per
 * node, on the model's cluster. */
/* A group whose nodes are `stride` apart (a key's node_stride): the levels
 * it crosses and the domains it spans at each follow from its extent. */
void dsi_comm_shape_spread(const ds_comm_model_t *model, dsi_comm_shape_t *shape, int stride,
                           int64_t leaf_nodes);
void dsi_comm_shape_init(const ds_comm_model_t *model, int64_t n, int64_t nodes, int64_t r,
                         int32_t concurrency, int64_t servers, dsi_comm_shape_t *shape);
/* Pairs of a job spanning `span_nodes` nodes cross the network together:
 * the domains the pair's levels span are the job's (what congestion and
 * the nearest measured span go by); the pair's volume and hops stay. */
void dsi_comm_shape_span(const ds_comm_model_t *model, dsi_comm_shape_t *shape, int64_t span_nodes);
/* Whether `op` on `nodes` nodes is a pair crossing the network, whose cost
 * depends on the span of the job sending it. */
bool dsi_comm_spans_job(ds_comm_op_t op, int64_t nodes);

/* Congestion per doubling at network `level` where the logs cannot fit it:
 * the cluster file's congestion_per_doubling, else DS_COMM_CONGESTION_PRIOR. */
double dsi_comm_congestion_prior(const ds_comm_model_t *model, int level);

/* Bandwidth (bytes/s) a group of `shape` gets at `level` for primitive
 * `op` at `bytes` (the level's curve, the group's share of the node's
 * interfaces, oversubscription). */
double dsi_comm_level_bandwidth(const ds_comm_model_t *model, ds_comm_op_t op, int level,
                                double bytes, const dsi_comm_shape_t *shape);
/* Network interfaces the group's ranks on one node use, concurrency included. */
double dsi_comm_nic_share(const ds_comm_model_t *model, const dsi_comm_shape_t *shape);
/* Bandwidth divisor for groups whose top level is `level`. */
double dsi_comm_oversubscription(const ds_comm_model_t *model, int level);

/* Time of cost terms on the model's level parameters: the fastest of the
 * terms' protocols, whose index goes to `*proto_p` (may be NULL). */
double dsi_comm_terms_time_proto(const ds_comm_model_t *model, ds_comm_op_t op,
                                 const dsi_comm_shape_t *shape, const dsi_comm_terms_t *terms,
                                 double bytes, int *proto_p);
double dsi_comm_terms_time(const ds_comm_model_t *model, ds_comm_op_t op,
                           const dsi_comm_shape_t *shape, const dsi_comm_terms_t *terms,
                           double bytes);

/* Which primitive's level parameters `op` uses (parameter-server traffic is
 * point-to-point). */
ds_comm_op_t dsi_comm_fit_op(ds_comm_op_t op);

/* ---- algorithm tables ------------------------------------------------------------------
 * An algorithm either yields cost terms (ring, tree, direct: these are also
 * what the fit inverts) or composes other predictions (hierarchical). */

typedef struct dsi_comm_algo {
    ds_comm_algo_t id;
    const char *name;
    bool (*applies)(ds_comm_op_t op, const dsi_comm_shape_t *shape);
    /* NULL for composite algorithms. */
    void (*terms)(const ds_comm_model_t *model, ds_comm_op_t op, double bytes,
                  const dsi_comm_shape_t *shape, dsi_comm_terms_t *terms);
    /* Composite algorithms: the time from sub-predictions. */
    double (*compose)(const ds_comm_model_t *model, ds_comm_op_t op, double bytes,
                      const dsi_comm_shape_t *shape);
    /* Whether the cluster has what the algorithm needs (NULL: every cluster). */
    bool (*declared)(const ds_comm_model_t *model, const dsi_comm_shape_t *shape);
} dsi_comm_algo_t;

#define DSI_COMM_MAX_ALGOS 16

/* A communication library: its algorithms and its decision logic.  NCCL
 * tunes by predicted time, so its `choose` is NULL (the fastest automatic
 * algorithm); a library that decides by rules (Open MPI's tuned component:
 * size and group thresholds) supplies `choose`, which gets the time of
 * every algorithm (-1 where it does not apply) and returns an index. */
struct dsi_comm_library {
    const char *name;
    /* Every algorithm the library has; `automatic` marks the ones its own
     * selection considers (the others only when a key forces them). */
    const dsi_comm_algo_t *const *algos;
    const bool *automatic;
    size_t count;
    int (*choose)(ds_comm_op_t op, double bytes, const dsi_comm_shape_t *shape,
                  const double *times);
    /* Whether bandwidth is lost to congestion beyond the measured spans
     * (dsi_comm_level_t.congestion); Open MPI's rules path keeps its own. */
    bool congestion;
};

const dsi_comm_library_t *dsi_comm_library_get(ds_comm_library_t library);
const dsi_comm_algo_t *dsi_comm_library_find(const dsi_comm_library_t *library, ds_comm_algo_t id);

/* Time of `op` on `shape` with the model only: the library's fastest
 * automatic algorithm, or `forced` when it applies.  Writes the algorithm
 * used and the ring-only / tree-only times (-1 when not applicable). */
double dsi_comm_model_time(const ds_comm_model_t *model, ds_comm_op_t op, double bytes,
                           const dsi_comm_shape_t *shape, ds_comm_algo_t forced, bool force,
                           ds_comm_algo_t *algo_p, double *ring_p, double *tree_p);

/* Time of series `s` at `bytes`, interpolated in log-log between its sizes;
 * -1 outside them. */
double dsi_comm_series_time(const dsi_comm_series_t *s, double bytes);

/* ---- the band beyond the measured node counts (band.c) ------------------------------ */

/* Error rates per doubling of the extrapolation factor, log(measured /
 * predicted): `slow` where the model was too fast, `fast` where too slow;
 * the rows of data set `leave_out` (NULL: none) not used. */
void dsi_comm_band_rates(const char *leave_out, double *slow_p, double *fast_p);
/* The band table's own copy of data set `name` (static), NULL when it has no rows of it. */
const char *dsi_comm_band_data_set(const char *name);
/* Low and high around `time_s` extrapolated by `factor`. */
void dsi_comm_band(double time_s, double factor, double slow, double fast, double *low_p,
                   double *high_p);

/* Share of real values a band is meant to hold. */
#define DSI_COMM_BAND_COVERAGE 0.9
/* Flows on the most loaded of n paths that n flows hashed onto them take, at
 * the DSI_COMM_BAND_COVERAGE quantile (>= 1). */
int dsi_comm_collision_load(int64_t n);

/* ---- fitting ------------------------------------------------------------------------------ */

ds_status_t dsi_comm_fit(ds_comm_model_t *model, const ds_comm_sample_t *samples, size_t count);
void dsi_comm_series_free(ds_comm_model_t *model);

#endif /* DSI_COMM_H */
