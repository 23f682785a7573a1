/*
 * dsmpi backends: the devices events are measured on, and the measurement
 * loop.
 *
 * One interface, two backends chosen at run time:
 *   cpu   one MPI rank = one device: the rank is pinned to one core, BLAS
 *         runs single-threaded (OpenBLAS), the other operators are C kernels,
 *         communication is MPI;
 *   cuda  one MPI rank = one GPU (local rank modulo the visible devices):
 *         cuBLAS for GEMMs (bf16/fp16 on tensor cores), CUDA kernels for the
 *         other operators, NCCL for communication, CUDA events for timing.
 *         It lives in a module loaded on first use (libdsmpi_cuda.so), so
 *         runs that never use a GPU do not load cuBLAS or NCCL;
 *   replay  compute events cost what a cost table says, communication is
 *         MPI on buffers whose contents do not matter: in a SimGrid SMPI
 *         build (DSMPI_SMPI) every rank is a device of a simulated cluster
 *         (computation simulated for the table's duration, MPI simulated
 *         on the platform); elsewhere a compute event is a busy wait of its
 *         duration.  Never picked by auto.
 *
 * Every compute operator of ds_op_t runs on buffers of the event key's
 * shapes, filled with values distributed like real activations, weights and
 * gradients (never zeros).  Measurements follow METHOD.md section 3: warm-up
 * per kernel and per communicator, repetitions until the median is stable or
 * a time budget is spent, mean / median / p10 / p90 / count and a small
 * histogram kept; layer passes measured as a unit with timestamps between
 * operators; communication timed on every member against an aligned clock,
 * cost = last exit - last arrival, the arrival skew kept separately.
 *
 * Formulas (written once here):
 *   median CI     the distribution-free 95% interval of the median between
 *                 order statistics j = floor((n - 1.96 sqrt(n)) / 2) and
 *                 k = ceil(1 + (n + 1.96 sqrt(n)) / 2) (1-based, clamped);
 *                 relative CI = (x_k - x_j) / (2 median)
 *   quantiles     linear interpolation between order statistics (type 7)
 *   comm cost     per repetition: max over members of exit - max over
 *                 members of entry, on the aligned clock
 *   arrival skew  per repetition: max entry - min entry
 */
#ifndef DSMPI_BACKEND_H
#define DSMPI_BACKEND_H

#include <dsmpi/core.h>
#include <dsmpi/events.h>

#include <mpi.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum ds_backend_kind {
    DS_BACKEND_AUTO = 0, /* cuda when every rank sees a GPU, cpu otherwise */
    DS_BACKEND_CPU = 1,
    DS_BACKEND_CUDA = 2,
    DS_BACKEND_REPLAY = 3, /* costs from a table (ds_backend_open_replay or DS_REPLAY_COSTS) */
} ds_backend_kind_t;

/* "auto", "cpu", "cuda", "replay". */
DS_API const char *ds_backend_kind_name(ds_backend_kind_t kind);
DS_API ds_status_t ds_backend_kind_parse(const char *text, ds_backend_kind_t *kind_p);
/* The kind named by the DS_BACKEND tunable (auto unless set). */
DS_API ds_backend_kind_t ds_backend_kind_default(void);

/* Non-zero when this build has the CUDA backend and this process sees at
 * least one GPU.  Loads the CUDA module on first call, and only where an
 * NVIDIA driver is present (/dev/nvidiactl); never fails. */
DS_API int ds_backend_cuda_available(void);

typedef struct ds_backend ds_backend_t;

/* Opens this rank's device.  Collective over `comm` (every rank must call
 * it): the ranks agree on the kind (auto = cuda only if every rank sees a
 * GPU; an explicit cuda fails on every rank with DS_ERR_NO_DEVICE when one
 * rank has none), and pick a device by local rank.  The cpu backend pins
 * the rank to one core when the process may run on at least as many cores
 * as there are ranks on the node (DS_CPU_PIN=0 disables it) and sets
 * OpenBLAS to one thread; both are restored by ds_backend_close.  `comm` is
 * duplicated: the caller may free it after this returns.  Caller closes
 * with ds_backend_close. */
DS_API ds_status_t ds_backend_open(ds_backend_kind_t kind, MPI_Comm comm, ds_backend_t **backend_p);
/* Opens the replay backend on `comm` (collective, as ds_backend_open): a
 * compute key costs costs[key].mean_s; a key the table lacks costs its
 * roofline estimate on the device spec `device` ("h100-sxm"; NULL: the
 * DS_REPLAY_DEVICE tunable), logged once.  The table's compute entries are
 * copied.  ds_backend_open(DS_BACKEND_REPLAY, ...) reads the table from the
 * file DS_REPLAY_COSTS names (none: every key takes its estimate).  The fingerprint names the
 * device spec and a hash of the table; the device name is the spec's name.  Non-blocking all-reduce
 * runs the algorithm Open MPI's rules pick for the blocking call, in rounds posted as the call is
 * tested or waited for.  Caller closes with ds_backend_close. */
DS_API ds_status_t ds_backend_open_replay(MPI_Comm comm, const ds_cost_table_t *costs,
                                          const char *device, ds_backend_t **backend_p);
/* Releases the device; NULL is a no-op.  Not collective. */
DS_API void ds_backend_close(ds_backend_t *backend);

DS_API ds_backend_kind_t ds_backend_kind(const ds_backend_t *backend);
/* Device name ("AMD EPYC 9554", "NVIDIA H200"). */
DS_API const char *ds_backend_device_name(const ds_backend_t *backend);
/* The device fingerprint: device name, driver / CUDA / cuBLAS / NCCL
 * versions, or CPU model, BLAS and MPI versions, the numeric modes used for
 * each dtype, and the clock policy when known.  Equal on devices whose
 * measurements are interchangeable; static storage owned by the backend. */
DS_API const char *ds_backend_fingerprint(const ds_backend_t *backend);
/* This rank's placement in words ("cpu core 3 (pinned)", "cuda device 1 of
 * 4"); not part of the fingerprint. */
DS_API const char *ds_backend_placement(const ds_backend_t *backend);
/* Waits until everything issued on the device has finished. */
DS_API ds_status_t ds_backend_synchronize(ds_backend_t *backend);

/* ---- compute kernels ----------------------------------------------------------------------------
 * A prepared compute event: its buffers allocated on the device and filled
 * with realistic values.  Keys are those ds_events_generate produces (see
 * ds_op_t for each operator's dims); the pass picks forward or backward work
 * (recompute = forward). */

typedef struct ds_kernel ds_kernel_t;

/* Prepares `key` on `backend`.  Fails with DS_ERR_INVALID_ARG for a
 * communication key or bad dims, DS_ERR_UNSUPPORTED for an operator this
 * backend has no kernel for, DS_ERR_NO_MEMORY when the buffers exceed the
 * device memory this rank may use.  Caller frees with ds_kernel_destroy. */
DS_API ds_status_t ds_kernel_prepare(ds_backend_t *backend, const ds_event_key_t *key,
                                     ds_kernel_t **kernel_p);
/* Runs the kernel once (asynchronously on cuda: synchronize to wait). */
DS_API ds_status_t ds_kernel_run(ds_kernel_t *kernel);
/* Device memory the kernel holds, bytes. */
DS_API size_t ds_kernel_bytes(const ds_kernel_t *kernel);
DS_API void ds_kernel_destroy(ds_kernel_t *kernel);

/* Device memory `key` would need, bytes, without allocating anything. */
DS_API ds_status_t ds_kernel_estimate_bytes(const ds_backend_t *backend, const ds_event_key_t *key,
                                            size_t *bytes_p);

/* ---- measurement ----------------------------------------------------------------------------- */

/* Warm-up runs untimed until both `warmup` runs and `warmup_s` seconds are
 * done (at least one run when either is non-zero), but stops once it has
 * taken a quarter of the budget: a kernel that long is warm after one run. */
typedef struct ds_measure_config {
    int warmup;           /* untimed runs before timing, per kernel or size */
    double warmup_s;      /* ... and at least this long */
    int min_reps;         /* timed repetitions always done */
    int max_reps;         /* never more */
    double target_rel_ci; /* stop once the median's relative 95% CI is below this */
    double budget_s;      /* stop once this much wall time is spent (warm-up included) */
    /* Layer passes: this many copies of the pass, each with buffers of its
     * own, run in turn (repetition r runs copy r mod copies), so that a
     * copy's weights and activations have left the caches when it runs
     * again, as in training where the other layers run in between (1: one
     * copy, caches as warm as a tight loop leaves them). */
    int copies;
} ds_measure_config_t;

/* The defaults from the tunables DS_MEASURE_WARMUP, DS_MEASURE_WARMUP_S,
 * DS_MEASURE_MIN_REPS, DS_MEASURE_MAX_REPS, DS_MEASURE_TARGET_CI and
 * DS_MEASURE_BUDGET_S. */
DS_API void ds_measure_config_default(ds_measure_config_t *config);

typedef enum ds_stop_reason {
    DS_STOP_CONVERGED = 0, /* the median's CI reached the target */
    DS_STOP_BUDGET = 1,    /* the time budget was spent */
    DS_STOP_MAX_REPS = 2,  /* max_reps repetitions were done */
} ds_stop_reason_t;

DS_API const char *ds_stop_reason_name(ds_stop_reason_t reason);

#define DS_HIST_BINS 16

/* Statistics of one measured quantity. */
typedef struct ds_measurement {
    ds_cost_t cost; /* mean, median, p10, p90, repetitions; provenance measured */
    double min_s;
    double max_s;
    double rel_ci; /* achieved relative 95% CI of the median */
    double wall_s; /* time the measurement took, warm-up included */
    ds_stop_reason_t stop;
    /* Histogram: hist[i] counts samples in [hist_lo_s + i w, hist_lo_s + (i+1) w)
     * with w = (hist_hi_s - hist_lo_s) / DS_HIST_BINS (the last bin closed). */
    double hist_lo_s;
    double hist_hi_s;
    int32_t hist[DS_HIST_BINS];
} ds_measurement_t;

/* Statistics of `count` samples (seconds), as the measurement loop computes
 * them; stop and wall_s are left 0. */
DS_API ds_status_t ds_measurement_from_samples(const double *samples, size_t count,
                                               ds_measurement_t *measurement_p);

/* Prepares `key`, measures it in isolation, and releases it.  Not
 * collective. */
DS_API ds_status_t ds_measure_compute(ds_backend_t *backend, const ds_event_key_t *key,
                                      const ds_measure_config_t *config,
                                      ds_measurement_t *measurement_p);
/* Measures an already prepared kernel. */
DS_API ds_status_t ds_kernel_measure(ds_kernel_t *kernel, const ds_measure_config_t *config,
                                     ds_measurement_t *measurement_p);

/* Measures a layer pass as a unit: the compute keys of keys[0..count-1] are
 * prepared (config->copies times), then run back to back in that order as
 * training issues them,
 * each operator reading the previous operator's output where its input fits
 * in it (so caches hold what training would find there).  Every repetition
 * stamps the time between operators: *total_p gets the statistics of the
 * whole pass (the stop rule applies to it), per_op_p[i] those of operator i.
 * Communication keys in the list are not run here: their per_op_p entry has
 * repetitions 0.  per_op_p may be NULL.  Not collective. */
DS_API ds_status_t ds_measure_layer(ds_backend_t *backend, const ds_event_key_t *keys, size_t count,
                                    const ds_measure_config_t *config, ds_measurement_t *total_p,
                                    ds_measurement_t *per_op_p);

/* Times a fixed calibration kernel (a 1024^3 fp32 GEMM on cpu, an 8192^3
 * bf16 GEMM on cuda) on this device: the ratio between devices of one kind
 * is the device-to-device factor METHOD.md 3 asks to record. */
DS_API ds_status_t ds_backend_calibrate(ds_backend_t *backend, const ds_measure_config_t *config,
                                        ds_measurement_t *measurement_p);

/* ---- communication ------------------------------------------------------------------------------
 * A communicator of the backend over a group of ranks the caller chose (MPI
 * on cpu, NCCL on cuda). */

typedef struct ds_comm ds_comm_t;

/* Creates the backend communicator of `group` (a sub-communicator of the
 * ranks that opened `backend`; every member calls this: collective over
 * `group`).  Warms the communicator up (connections are set up lazily by
 * MPI and NCCL) and learns which members share a node.  `group` is
 * duplicated.  Caller frees with ds_comm_destroy. */
DS_API ds_status_t ds_comm_create(ds_backend_t *backend, MPI_Comm group, ds_comm_t **comm_p);
/* Collective over the group; NULL is a no-op. */
DS_API void ds_comm_destroy(ds_comm_t *comm);

DS_API int ds_comm_size(const ds_comm_t *comm);
DS_API int ds_comm_rank(const ds_comm_t *comm);
/* Nodes the group spans and the most members on one node. */
DS_API int ds_comm_nodes(const ds_comm_t *comm);
DS_API int ds_comm_ranks_per_node(const ds_comm_t *comm);

/* The result of measuring one communication operation. */
typedef struct ds_comm_measurement {
    ds_measurement_t cost;   /* last exit - last arrival (see the formulas above) */
    ds_measurement_t skew;   /* last arrival - first arrival */
    double clock_error_s;    /* bound on the clock alignment error (0 inside one node) */
    int after_compute;       /* measured in situ, right after a producer kernel */
    ds_comm_sample_t sample; /* the same, as the communication model fits it */
} ds_comm_measurement_t;

/* Measures the communication event `key` (kind DS_EVENT_COMM: op, dtype,
 * dims[0] = bytes of the full buffer as nccl-tests counts them, the
 * DS_COMM_FLAG_BATCHED flag for point-to-point, dims[1] = servers for
 * parameter-server push/pull) on `comm`.  key->group_size must be 0 or the
 * group's size; point-to-point needs a group of 2 (member 0 sends, member 1
 * receives; batched: both at once).  Every repetition starts after a
 * barrier; entry and exit are stamped on every member on a clock aligned
 * across the group (exact inside a node, which shares one monotonic clock;
 * across nodes offsets are estimated by ping-pong before each measurement).
 * Collective over the group: every member passes the same key and config;
 * all receive the same result. */
DS_API ds_status_t ds_comm_measure(ds_comm_t *comm, const ds_event_key_t *key,
                                   const ds_measure_config_t *config,
                                   ds_comm_measurement_t *measurement_p);

/* Measures `key` in situ (METHOD.md 3): every repetition runs `producer`
 * first (a kernel prepared on the communicator's backend, e.g. the GEMM
 * whose output the collective reduces) and issues the operation right
 * after it on the same queue, as training does; arrival is when the
 * producer has finished on each member.  Otherwise as ds_comm_measure.
 * Collective over the group. */
DS_API ds_status_t ds_comm_measure_after(ds_comm_t *comm, const ds_event_key_t *key,
                                         ds_kernel_t *producer, const ds_measure_config_t *config,
                                         ds_comm_measurement_t *measurement_p);

/* Runs `key` once on `comm`, untimed, and checks the result against the
 * values every member put in (small integers, exact in every dtype).
 * *errors_p gets the number of wrong elements on this member.  Collective
 * over the group. */
DS_API ds_status_t ds_comm_verify(ds_comm_t *comm, const ds_event_key_t *key, int64_t *errors_p);

#ifdef __cplusplus
}
#endif

#endif /* DSMPI_BACKEND_H */
