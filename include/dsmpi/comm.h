/*
 * dsmpi comm: the communication cost model.  It reads measurements of
 * collectives and point-to-point transfers (nccl-tests logs, and later the
 * profile database), fits a model per network level and primitive, and
 * predicts what any communication event of the target costs.
 *
 * ---- Bandwidths (the nccl-tests definitions, doc/PERFORMANCE.md there) ------
 *
 *   S      the collective's full buffer in bytes: the nccl-tests "size"
 *          column and an event key's dims[0] (the all-reduce buffer, the
 *          all-gather output, the reduce-scatter input, the all-to-all send
 *          buffer, one point-to-point message, one worker's bucket for the
 *          parameter server);
 *   t      the time of one operation;
 *   algbw  = S / t;
 *   busbw  = algbw x F(n), the rate the busiest link of each rank sustains,
 *          comparable with the hardware peak whatever the group size n:
 *            all-reduce                           F = 2(n-1)/n
 *            all-gather, reduce-scatter, all-to-all   F = (n-1)/n
 *            broadcast, send/recv                  F = 1
 *            parameter-server push/pull            F = 1 (per worker)
 *   GB/s are 10^9 bytes per second (SI); sizes are bytes.
 *
 * ---- The model --------------------------------------------------------------
 *
 * Network levels are the target cluster's (ds_cluster_t): level 0 inside a
 * node, level 1 across nodes of a leaf, higher levels above it.  For each
 * level and primitive the fit finds, in bus-bandwidth space:
 *   - a latency per hop (level 0 also a constant per operation), from the
 *     smallest sizes (least squares over the group sizes measured inside a
 *     node; above, the hop latency that makes the library's fastest
 *     algorithm meet the measured floor);
 *   - a bus-bandwidth curve over message size: a piecewise power law whose
 *     knots are placed where the data bends (latency regime, protocol and
 *     channel changes, the bandwidth plateau) until every fitted size is
 *     reproduced within DS_COMM_FIT_TOLERANCE, one curve per measured group
 *     layout.  Level 0 curves are per rank over the collective's bytes,
 *     interpolated between the measured ranks per node (the nearest beyond
 *     them: bus bandwidth hardly depends on the group size).  Level >= 1
 *     curves are per network interface over the bytes one interface
 *     carries, so that groups with fewer ranks per node, or sharing a
 *     node's NICs, get their share at the rate their share of the message
 *     runs at.
 * The curves come from inverting the algorithms on the measured times:
 * at each size, the least bandwidth with which the library's fastest
 * algorithm explains the time (NCCL runs trees for small and ring for large
 * messages across nodes; the data does not say which, the inversion does).
 * Collectives are then composed as the communication library runs them, as
 * functions of bytes, group size and how the group spreads over nodes
 * (NCCL: ring with 2(n-1) steps of which 2(nodes-1) cross the network;
 * double binary tree with ~log2(nodes) network hops plus the intra-node
 * chain and half the bus bandwidth as algorithm bandwidth, times
 * DS_COMM_TREE_EFFICIENCY; direct transfers for send/recv and all-to-all;
 * time = latency + the slowest level's volume / bandwidth), and the fastest
 * is picked as NCCL would unless the event key forces one (key.variant, a
 * ds_dp_algo_t).  Hierarchical all-reduce (intra-node reduce-scatter,
 * inter-node all-reduce, intra-node all-gather) and the parameter server
 * (push/pull with S servers, key.dims[1]) are the MPI/Horovod-style
 * options, used when forced.
 *
 * Measured shapes are used as they are inside their size range
 * (interpolated in log-size); beyond it the model continues from the edge
 * (never faster than the largest measured size, never slower than the
 * smallest); the fitted model fills everything else.  A primitive without
 * data at a level borrows the all-reduce (or another primitive's) fit of
 * that level; a level without any data falls back to the cluster's latency
 * and its nominal bandwidth (per network interface above the node) with the
 * efficiency and size dependence the level below showed, and what rests on
 * it is marked assumed.  A model without samples is what estimates without
 * measurements use (dsmpi events, --estimate-missing).  Inside a
 * node, groups do not share links (non-blocking NVSwitch-class fabric);
 * across nodes, `concurrency` groups share the node's `nics_per_node`
 * interfaces, and groups that leave a leaf see the oversubscription the
 * cluster declares (on the leaf level or the level above, the larger).
 * NVLS, CollNet and PAT are not modelled.
 */
#ifndef DSMPI_COMM_H
#define DSMPI_COMM_H

#include <dsmpi/cluster.h>
#include <dsmpi/core.h>
#include <dsmpi/events.h>
#include <dsmpi/strategy.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- primitives ------------------------------------------------------------ */

/* busbw / algbw for `op` on `group_size` ranks (the F above; 0 for a group
 * of one rank, where nothing moves). */
DS_API double ds_comm_busbw_factor(ds_comm_op_t op, int group_size);

/* "allreduce", "allgather", "reduce_scatter", "alltoall", "sendrecv",
 * "broadcast", "ps_push", "ps_pull". */
DS_API const char *ds_comm_op_name(ds_comm_op_t op);

/* Accepts the names above and the nccl-tests ones ("all_reduce",
 * "all_gather", "alltoall", "sendrecv", with or without "_perf"). */
DS_API ds_status_t ds_comm_op_parse(const char *text, ds_comm_op_t *op_p);

/* A message size: bytes, or KiB/MiB/GiB/TiB (powers of 1024), K/M/G/T
 * (powers of 1000), as elsewhere in dsmpi. */
DS_API ds_status_t ds_comm_parse_size(const char *text, const char *what, int64_t *bytes_p);

/* Fills a communication key for `op` on `group_size` ranks placed
 * contiguously on nodes of `gpus_per_node` devices (nodes, ranks per node),
 * alone on its links (concurrency 1), auto algorithm, fp32, step pass.
 * Callers adjust concurrency, variant, dims[1] (servers) or flags after. */
DS_API ds_status_t ds_comm_key_init(ds_event_key_t *key, ds_comm_op_t op, int64_t bytes,
                                    int group_size, int gpus_per_node);

/* ---- sample lists -------------------------------------------------------------
 * A growable array of ds_comm_sample_t (declared in events.h), what imports
 * produce and the model is fitted on. */

typedef struct ds_comm_samples ds_comm_samples_t;

/* Caller frees with ds_comm_samples_destroy. */
DS_API ds_status_t ds_comm_samples_create(ds_comm_samples_t **samples_p);
DS_API void ds_comm_samples_destroy(ds_comm_samples_t *samples);
/* Appends copies of `count` samples. */
DS_API ds_status_t ds_comm_samples_add(ds_comm_samples_t *samples, const ds_comm_sample_t *items,
                                       size_t count);
DS_API size_t ds_comm_samples_size(const ds_comm_samples_t *samples);
/* The samples, contiguous; valid until the list changes. */
DS_API const ds_comm_sample_t *ds_comm_samples_data(const ds_comm_samples_t *samples);

/* Samples as text, one a line (what a build without a profile database
 * writes, and `dsmpi import --comm-samples` reads):
 *   <primitive> <dtype> bytes=B group=N nodes=K per-node=R [conc=C] [span=S]
 *       [in-place] [batched] = <mean s> [<median s> <p10 s> <p90 s> <repetitions> <provenance>
 *       [source=TEXT]]
 * e.g. "allreduce fp32 bytes=1048576 group=4 nodes=2 per-node=2 conc=1 = 1.2e-04".
 * The source runs to the end of the line; lines starting with '#' are
 * comments.  Parsing appends every sample or, on an error ("FILE:LINE:
 * ..."), none. */
DS_API ds_status_t ds_comm_samples_parse_text(ds_comm_samples_t *samples, const char *text,
                                              const char *origin);
DS_API ds_status_t ds_comm_samples_load_text(ds_comm_samples_t *samples, const char *path);
DS_API ds_status_t ds_comm_samples_write_text(const ds_comm_sample_t *items, size_t count,
                                              FILE *out);

/* ---- nccl-tests import ----------------------------------------------------------
 * Reads the output of nccl-tests' all_reduce_perf, all_gather_perf,
 * reduce_scatter_perf, alltoall_perf, sendrecv_perf and broadcast_perf, in
 * the single-process dialect and with launcher prefixes ("[1,0]<stdout>:"
 * from mpirun --tag-output, "0: " from srun --label, "[0] " from MPICH's and
 * Intel MPI's -prepend-rank); the columns are read from the header row, so
 * older and newer layouts (with or without redop/root, "error" or "#wrong")
 * are accepted.  Every row gives one sample per out-of-place and in-place
 * time, with provenance DS_PROV_IMPORTED and mean = median = p10 = p90 = the
 * reported average time.  Rows of element types dsmpi has no key for
 * (double, the integer types) are kept as fp32 rows of the same bytes:
 * communication is priced by bytes.
 *
 * A file may hold several tests one after another, as a job script running
 * every collective prints them: each test's banner ("# nccl-tests version",
 * "# Collective test starting: X_perf", "# nThread ...") starts the next
 * one, and each test has its own primitive, rank lines and table.
 *
 * The primitive of a test comes from options.op, else from its "#
 * Collective test starting: X_perf" line, else from the file name
 * (all_reduce_16.log); a banner naming a collective dsmpi does not model
 * (reduce_perf, hypercube_perf, ...) fails the file.  The group size is the
 * number of the test's "# Using devices" rank lines (or options.group_size);
 * nodes and ranks per node come from their distinct host names, or from
 * options.gpus_per_node when given.  A send/recv log of n ranks (each sends
 * to the next and receives from the previous, both at once) is stored as
 * pairs: group 2, batched, concurrency n on one node or one pair per node
 * leaving it across nodes, like pipeline transfers.
 *
 * A line inside a results table that is not a row (wrong column count, a
 * value that is not a number) fails the whole file with "FILE:LINE: ..."
 * and nothing of it is appended.  The lines real jobs print besides the
 * results are ignored anywhere, tables included: NCCL's debug lines ("NCCL
 * INFO", "NCCL WARN"), UCX's log lines ("UCX  WARN ..."), Slurm's and
 * Open MPI's messages ("srun: ...", "[host:pid] ...", "----" banners) and
 * lines the launcher tagged as stderr; any other text outside a table is
 * ignored too. */

typedef struct ds_comm_import_options {
    int op;             /* a ds_comm_op_t, or -1 (default): from the file */
    int gpus_per_node;  /* 0 (default): from the host names of the rank lines */
    int group_size;     /* 0 (default): from the rank lines */
    const char *source; /* cluster tag stored in every sample; NULL: "nccl-tests" */
} ds_comm_import_options_t;

DS_API void ds_comm_import_options_init(ds_comm_import_options_t *options);

/* One test of a file (one collective's banner, rank lines and table). */
typedef struct ds_comm_import_test {
    ds_comm_op_t op;
    int32_t group_size; /* ranks of the test */
    int32_t nodes;
    int32_t ranks_per_node;
    int hosts_known; /* 1: nodes and ranks per node are the rank lines' host names */
    int line;        /* the file's line where the test starts */
    size_t rows;     /* result rows read */
    size_t samples;  /* samples appended */
    int64_t min_bytes, max_bytes;
} ds_comm_import_test_t;

#define DS_COMM_IMPORT_MAX_TESTS 64 /* tests in one file; more fail the file */

/* What one import found.  op, group_size, nodes and ranks_per_node are the
 * first test's; rows, samples and the sizes count every test; tests[] has
 * each test with rows (a test cut off before its table is left out). */
typedef struct ds_comm_import_info {
    ds_comm_op_t op;
    int32_t group_size; /* ranks of the test */
    int32_t nodes;
    int32_t ranks_per_node;
    int prefixed;   /* 1: lines carried launcher prefixes (mpirun/srun dialect) */
    size_t rows;    /* result rows read */
    size_t samples; /* samples appended */
    int64_t min_bytes, max_bytes;
    int num_tests;
    ds_comm_import_test_t tests[DS_COMM_IMPORT_MAX_TESTS];
    char device[64];      /* as the rank lines name it ("A100-SXM4-40GB"), or "" */
    char device_spec[32]; /* the dsmpi device it matches ("a100-40g"), or "" */
} ds_comm_import_info_t;

/* Parses `text` (NUL-terminated); `origin` names it in errors and its base
 * name may give the primitive.  Appends to `samples` only on success;
 * `info_p` (may be NULL) is written on success. */
DS_API ds_status_t ds_comm_parse_nccl_tests(const char *text, const char *origin,
                                            const ds_comm_import_options_t *options,
                                            ds_comm_samples_t *samples,
                                            ds_comm_import_info_t *info_p);
/* The same for a file (at most DS_MAX_INPUT_BYTES bytes). */
DS_API ds_status_t ds_comm_import_nccl_tests(const char *path,
                                             const ds_comm_import_options_t *options,
                                             ds_comm_samples_t *samples,
                                             ds_comm_import_info_t *info_p);

/* ---- the model ------------------------------------------------------------------ */

/* Whose algorithms and decision logic are modelled: NCCL's (the CUDA
 * backend: the fastest of ring and tree, by its own tuning model), or Open
 * MPI's (the CPU and replay backends: the tuned component's fixed decision
 * rules by message and communicator size, as SimGrid's SMPI reproduces them
 * with --cfg=smpi/coll-selector:ompi).  Open MPI's collectives are composed
 * step by step from the point-to-point (send/recv) fit of each level:
 *   all-reduce      recursive doubling (log2 n exchanges of S), Rabenseifner
 *                   (reduce-scatter by recursive halving then all-gather by
 *                   doubling: 2 log2 n exchanges of S/2, S/4, ... at
 *                   distances 1, 2, 4, ...), ring (2(n-1) steps of S/n), or
 *                   a binomial reduce then broadcast (small messages on large
 *                   groups); non-powers of two add a first and a last
 *                   transfer of S between pairs of neighbours;
 *   reduce-scatter  recursive halving (S/2 at distance n/2, then S/4 ...),
 *                   ring (n-1 steps of S/n), or a reduce then scatter;
 *   all-gather      recursive doubling (blocks doubling with the distance),
 *                   neighbour exchange (n/2 steps of 2 blocks), ring, Bruck;
 *   all-to-all      every message at once, pairwise exchange, or Bruck;
 *   broadcast       binomial tree, or scatter then ring all-gather.
 * A step where members talk to partners d apart (groups fill nodes in
 * order, r per node) stays inside a node when d < r; otherwise each node
 * sends r x concurrency flows over its NICs (bandwidth shared when they
 * outnumber the NICs) and, across leaves, a leaf's flows share its uplinks
 * (bandwidth divided when they exceed span x devices per node /
 * oversubscription of them); a ring step sends one flow per node boundary.
 * Reductions cost no time of their own (see the README's validation). */
typedef enum ds_comm_library {
    DS_COMM_LIBRARY_NCCL = 0,
    DS_COMM_LIBRARY_OMPI = 1,
    DS_COMM_LIBRARY_COUNT_
} ds_comm_library_t;

/* "nccl", "ompi". */
DS_API const char *ds_comm_library_name(ds_comm_library_t library);
DS_API ds_status_t ds_comm_library_parse(const char *text, ds_comm_library_t *library_p);

/* The library whose algorithms `samples` ran: DS_COMM_LIBRARY when set to
 * nccl or ompi, else (auto) Open MPI's when most samples were measured with
 * MPI (sources "cpu:" and "replay:"), NCCL's otherwise.  A bad
 * DS_COMM_LIBRARY is DS_ERR_INVALID_ARG. */
DS_API ds_status_t ds_comm_library_of(const ds_comm_sample_t *samples, size_t count,
                                      ds_comm_library_t *library_p);

typedef struct ds_comm_model_options {
    ds_comm_library_t library;
    int use_measurements; /* 1 (default): a measured shape inside its size range is
                             interpolated from its samples; 0: the fitted model only */
    /* The band beyond the measured node counts is sized by the model's
     * leave-scale-out errors on real data sets; the one named here (NULL:
     * none, or a data set without rows there) is left out, so that a data
     * set's band does not come from its own errors (what the comm_scale
     * bench checks).  Need not outlive the call. */
    const char *band_leave_out;
} ds_comm_model_options_t;

DS_API void ds_comm_model_options_init(ds_comm_model_options_t *options);

typedef struct ds_comm_model ds_comm_model_t;

/* Fits a model for `cluster` (its network levels, NICs per node,
 * oversubscription, and the fallback latency/bandwidth of levels without
 * data) on `count` samples (may be 0: everything is then assumed).  The
 * samples are copied.  `options` may be NULL (defaults).  Not collective;
 * the model is read-only afterwards and may be shared between threads.
 * Caller frees with ds_comm_model_destroy. */
DS_API ds_status_t ds_comm_model_create(const ds_cluster_t *cluster,
                                        const ds_comm_sample_t *samples, size_t count,
                                        const ds_comm_model_options_t *options,
                                        ds_comm_model_t **model_p);
DS_API void ds_comm_model_destroy(ds_comm_model_t *model);

/* Algorithms a prediction can rest on; values up to DS_COMM_ALGO_PS match
 * ds_dp_algo_t (what a key may force). */
typedef enum ds_comm_algo {
    DS_COMM_ALGO_DIRECT = 0, /* point-to-point transfers: send/recv, all-to-all */
    DS_COMM_ALGO_RING = 1,
    DS_COMM_ALGO_TREE = 2, /* NCCL's double binary tree; MPI's binomial trees */
    DS_COMM_ALGO_HIERARCHICAL = 3,
    DS_COMM_ALGO_PS = 4,
    DS_COMM_ALGO_RECURSIVE_DOUBLING = 5, /* MPI */
    DS_COMM_ALGO_RABENSEIFNER = 6,       /* MPI all-reduce */
    DS_COMM_ALGO_RECURSIVE_HALVING = 7,  /* MPI reduce-scatter */
    DS_COMM_ALGO_BRUCK = 8,              /* MPI all-gather, all-to-all */
    DS_COMM_ALGO_NEIGHBOR = 9,           /* MPI all-gather */
    DS_COMM_ALGO_PAIRWISE = 10,          /* MPI all-to-all */
    DS_COMM_ALGO_NVLS = 11,    /* NCCL all-reduce reduced in the NVSwitches (cluster "nvls") */
    DS_COMM_ALGO_COLLNET = 12, /* NCCL all-reduce reduced in the network switches ("sharp") */
    DS_COMM_ALGO_PAT = 13,     /* NCCL all-gather, reduce-scatter at one device per node ("pat") */
} ds_comm_algo_t;

DS_API const char *ds_comm_algo_name(ds_comm_algo_t algo);

typedef struct ds_comm_prediction {
    ds_cost_t cost;      /* the prediction, with its provenance */
    ds_comm_algo_t algo; /* what the library picks (or the key forces) for this key */
    double ring_s;       /* ring only, or -1 where the primitive has no ring */
    double tree_s;       /* tree only, or -1 where the primitive has no tree */
    /* The band.  Beyond the largest node count measured for the primitive
     * (extrapolation factor > 1): cost.mean_s x exp(-fast x log2 factor) and
     * x exp(slow x log2 factor), the rates the widest leave-scale-out error
     * per doubling of the real data sets (README, "How far communication
     * extrapolates").  Otherwise the faster of ring-only and tree-only and
     * the slower; both = the model's time when only one applies. */
    double low_s;
    double high_s;
    double extrapolation; /* target nodes / most nodes measured (<= 1: none; 0: nothing measured) */
    double algbw_GBps;    /* of cost.mean_s */
    double busbw_GBps;
    int level; /* highest network level the group crosses (0: inside a node) */
} ds_comm_prediction_t;

/* Predicts the communication event `key` (kind DS_EVENT_COMM): primitive,
 * dims[0] bytes, group size, nodes, ranks per node, concurrency, variant
 * (forced algorithm), dims[1] (parameter servers), batched flag. */
DS_API ds_status_t ds_comm_model_predict(const ds_comm_model_t *model, const ds_event_key_t *key,
                                         ds_comm_prediction_t *prediction_p);

/* Predicts `key` as one event of a job spanning `job_nodes` nodes.  Only
 * point-to-point keys (send/recv, parameter-server push/pull) whose pair
 * crosses nodes depend on it: a pair's key is the same at any job size,
 * but a job sends its pairs across the fabric at once (nccl-tests'
 * sendrecv_perf on 10 H100 nodes: 3x slower than on 2).  Such a pair takes
 * the samples measured at that span (sendrecv_perf's ring on that many
 * nodes), else those of the widest narrower span, slowed by the model's
 * congestion per doubling of the span; the band widens by the job's nodes
 * over the widest span measured.  `job_nodes` <= the pair's own nodes: as
 * ds_comm_model_predict. */
DS_API ds_status_t ds_comm_model_predict_in_job(const ds_comm_model_t *model,
                                                const ds_event_key_t *key, int64_t job_nodes,
                                                ds_comm_prediction_t *prediction_p);

/* The band beyond the measured node counts as multiples of cost.mean_s:
 * low_s / mean and high_s / mean when the prediction extrapolates (factor >
 * 1), else 1, 1 (measured, or inside the node counts measured: the
 * ring-only / tree-only spread is not a band of the prediction). */
DS_API void ds_comm_prediction_band(const ds_comm_prediction_t *prediction, double *low_p,
                                    double *high_p);

/* Sets in `table` the predicted cost of every communication key of `set`
 * that `table` does not hold yet (measured costs already there are kept),
 * with its band (ds_comm_prediction_band, ds_cost_table_set_band).
 * `filled_p` (may be NULL) receives the number of keys added. */
DS_API ds_status_t ds_comm_model_fill(const ds_comm_model_t *model, const ds_event_set_t *set,
                                      ds_cost_table_t *table, size_t *filled_p);

/* What the fit found for one primitive at one level. */
typedef enum ds_comm_fit_source {
    DS_COMM_FIT_DATA = 0,     /* fitted on samples of this primitive at this level */
    DS_COMM_FIT_BORROWED = 1, /* fitted on another primitive of this level (from_op) */
    DS_COMM_FIT_ASSUMED = 2,  /* from the cluster's latency and bandwidth */
} ds_comm_fit_source_t;

typedef struct ds_comm_level_fit {
    int level;
    char level_name[16];
    ds_comm_op_t op;
    ds_comm_fit_source_t source;
    ds_comm_op_t from_op;     /* whose fit this is (op itself when fitted on its own data) */
    double base_us;           /* constant per operation (level 0 only) */
    double hop_us;            /* latency per hop at this level */
    double peak_busbw_GBps;   /* highest bus bandwidth of the curves (level >= 1: per NIC) */
    int curves;               /* group layouts with a curve */
    int knots;                /* knots over all curves */
    size_t points;            /* samples (sizes) the curves were fitted on */
    double congestion;        /* level >= 1: bandwidth lost per doubling of the span beyond a
                                 measured one, up to the widest measured (0 to 0.9) */
    int congestion_fitted;    /* 1: fitted on two spans; 0: the cluster file's prior */
    double congestion_beyond; /* per doubling beyond the widest span measured: the prior, or
                                 the fit where that is larger (spans of a few nodes sit under
                                 one leaf switch and cannot show what is lost above it) */
} ds_comm_level_fit_t;

DS_API int ds_comm_model_num_levels(const ds_comm_model_t *model);
DS_API ds_status_t ds_comm_model_level_fit(const ds_comm_model_t *model, int level, ds_comm_op_t op,
                                           ds_comm_level_fit_t *fit_p);
/* One line per level for `op`, each starting with `prefix` ("# "). */
DS_API void ds_comm_model_print(const ds_comm_model_t *model, ds_comm_op_t op, FILE *out,
                                const char *prefix);

/* The band beyond the measured node counts (README, "How far communication
 * extrapolates"): `slow` and `fast`, the widest leave-scale-out errors per
 * doubling of the extrapolation factor that the model made on real data sets
 * (log(measured / predicted): slow where it was too fast, fast where too
 * slow), without the rows of data set `leave_out` (NULL: every row). */
DS_API void ds_comm_band_rates(const char *leave_out, double *slow_p, double *fast_p);
/* The band's multipliers of a time extrapolated by `factor` (target nodes /
 * most nodes measured): low = exp(-fast x log2 factor), high = exp(slow x
 * log2 factor); both 1 when factor <= 1. */
DS_API void ds_comm_band_multipliers(double factor, double slow, double fast, double *low_p,
                                     double *high_p);

#ifdef __cplusplus
}
#endif

#endif /* DSMPI_COMM_H */
