/*
 * A short calibration of the allocation for the profiling time estimate
 * (estimate.c): how fast this device really runs each class of operator the
 * plan measures, fills buffers, and how long its barriers, communicator
 * set-up and collectives take.
 *
 * Compute: for every class (operator, pass, dtype) of the keys to measure,
 * its costliest key scaled down along one dimension (a GEMM's largest, a
 * batched GEMM's batch first, the rows of the others, a causal softmax in
 * whole sequences) to about CALIBRATE_RUN_S on the device spec, run once
 * untimed, then as the loop runs it (at least CALIBRATE_REPS times) within
 * CALIBRATE_PROBE_S; factor = time of a run / roofline of the scaled key.  The classes are dealt to
 * the ranks, which run them at once, as profiling does; a kernel of CALIBRATE_FILL_BYTES is
 * prepared on every rank for the fill rate.  On the cpu backend a run's time is the thread's CPU
 * time (the speed alone on a core), and each rank's share of its core while it ran them (CPU time /
 * wall time) is kept: on a core shared with other work a long pass takes its CPU time over that
 * share, which a median of short runs does not see (estimate.c divides by it). Spread: the loop's
 * own statistic, spread = rel_ci sqrt(n) / (1.96 sqrt(pi / 2)), so that dsi_measure_expected_ci
 * gives back the CI measured (over enough repetitions for central order statistics: a CI of five
 * would rest on their extremes and see one preempted run as spread).
 * Communication: CALIBRATE_BARRIERS barriers, one communicator over every
 * rank (its set-up time), an all-reduce of CALIBRATE_SMALL bytes (the spread
 * of small operations, and repeated for CALIBRATE_SYNC_S: the cost of one
 * synchronisation inside a loop, the larger of the two), and
 * every primitive the plan measures at CALIBRATE_LARGE bytes (point-to-point
 * between ranks 0 and 1): median time / the links' roofline, its spread, and
 * the time around its loop is preparing its buffers (the fill rate); and at
 * CALIBRATE_HUGE bytes when the plan has messages that large (out of the
 * caches a byte costs more).  Each in DSI_SPREAD_DRAWS short loops going
 * round the primitives: the factor is their median, and every loop's spread
 * is kept, since large messages' spread changes from loop to loop.
 */
#include "dsi_profile.h"

#include <dsmpi/comm.h>

#include "backend/dsi_backend.h"
#include "dsi_mpi.h"
#include "events/dsi_events.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CALIBRATE_RUN_S 1e-3 /* a scaled kernel's roofline time on the device spec */
#define CALIBRATE_REPS 9     /* at least, then the CI target within CALIBRATE_PROBE_S */
#define CALIBRATE_PROBE_S 0.03
#define CALIBRATE_FILL_BYTES (32 << 20)
#define CALIBRATE_BARRIERS 200
#define CALIBRATE_SMALL (4 << 10) /* bytes */
#define CALIBRATE_SMALL_S 0.03    /* budget of its measurement */
#define CALIBRATE_LARGE (4 << 20)
#define CALIBRATE_LARGE_S 0.1
#define CALIBRATE_HUGE (32 << 20) /* out of the caches */
#define CALIBRATE_HUGE_S 0.15
#define CALIBRATE_COMM_REPS 9
#define CALIBRATE_SYNC_S 0.03

static double thread_cpu_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The spread whose expected CI after `m`'s repetitions is the CI it had. */
static double spread_of(const ds_measurement_t *m)
{
    if (m->cost.repetitions <= 0 || !isfinite(m->rel_ci))
        return 0.0;
    return m->rel_ci / dsi_measure_expected_ci(1.0, (size_t)m->cost.repetitions);
}

ds_status_t dsi_profile_plan_buffers(dsi_profile_plan_t *plan, const ds_backend_t *backend)
{
    dsi_free(plan->key_bytes);
    plan->key_bytes = NULL;
    plan->num_key_bytes = 0;
    DSI_TRY(dsi_calloc(plan->num_keys ? plan->num_keys : 1, sizeof(double), &plan->key_bytes));
    plan->num_key_bytes = plan->num_keys;
    for (size_t i = 0; i < plan->num_keys; i++) {
        size_t bytes = 0;
        if (plan->keys[i].kind == DS_EVENT_COMPUTE &&
            ds_kernel_estimate_bytes(backend, &plan->keys[i], &bytes) == DS_OK)
            plan->key_bytes[i] = (double)bytes;
    }
    return DS_OK;
}

/* ---- compute --------------------------------------------------------------------------------- */

typedef struct probe {
    ds_event_key_t key;  /* scaled */
    double flops, bytes; /* of the scaled key */
} probe_t;

static double roofline(const dsi_profile_speed_t *speed, const ds_event_key_t *key, double flops,
                       double bytes)
{
    ds_cluster_t device = speed->here;
    device.nodes = device.gpus_per_node = 1;
    return dsi_estimate_compute_seconds(key, flops, bytes, &device);
}

/* `key` (flops, bytes) scaled to about CALIBRATE_RUN_S on the spec. */
static void scale_probe(const dsi_profile_speed_t *speed, const ds_event_key_t *key, double flops,
                        double bytes, probe_t *p)
{
    p->key = *key;
    p->flops = flops;
    p->bytes = bytes;
    double estimate = roofline(speed, key, flops, bytes);
    if (estimate <= CALIBRATE_RUN_S)
        return;
    double want = CALIBRATE_RUN_S / estimate;
    bool matmul = key->op == DS_OP_GEMM || key->op == DS_OP_BATCHED_GEMM;
    int dim = 0;
    if (key->op == DS_OP_BATCHED_GEMM && key->dims[3] > 1)
        dim = 3;
    else if (matmul)
        for (int d = 1; d < 3; d++)
            if (key->dims[d] > key->dims[dim])
                dim = d;
    int64_t was = key->dims[dim], now = DSI_MAX((int64_t)llround((double)was * want), 1);
    if (key->op == DS_OP_SOFTMAX && key->variant != 0 && was >= key->dims[1]) /* whole sequences */
        now = DSI_MAX(now / key->dims[1], 1) * key->dims[1];
    if (matmul) /* at least a few tiles along the dimension */
        now = DSI_MIN(was, DSI_MAX(now, 64));
    p->key.dims[dim] = now;
    double ratio = (double)now / (double)was;
    p->flops = flops * ratio;
    if (matmul) { /* A, B and C: their sizes from the dims */
        double m = (double)p->key.dims[0], n = (double)p->key.dims[1], k = (double)p->key.dims[2];
        double batch = key->op == DS_OP_BATCHED_GEMM ? (double)p->key.dims[3] : 1.0;
        p->bytes = (double)ds_dtype_size((ds_dtype_t)key->dtype) * batch * (m * k + k * n + m * n);
    } else {
        p->bytes = bytes * ratio;
    }
}

/* Classes of the keys this run measures, each with its costliest key. */
static int find_classes(const dsi_profile_plan_t *plan, const dsi_profile_speed_t *speed,
                        dsi_speed_class_t *classes, probe_t *probes)
{
    int n = 0;
    double costliest[DSI_SPEED_CLASSES];
    for (size_t u = 0; u < plan->num_units; u++) {
        const dsi_unit_t *unit = &plan->units[u];
        if (unit->rank < 0)
            continue;
        for (size_t i = 0; i < unit->num_keys; i++) {
            const ds_event_key_t *key = &plan->keys[unit->first_key + i];
            if (key->kind != DS_EVENT_COMPUTE)
                continue;
            uint8_t pass = key->pass == DS_PASS_RECOMPUTE ? (uint8_t)DS_PASS_FORWARD : key->pass;
            int c = 0;
            while (c < n && !(classes[c].op == key->op && classes[c].pass == pass &&
                              classes[c].dtype == key->dtype))
                c++;
            if (c == n) {
                if (n == DSI_SPEED_CLASSES)
                    continue;
                classes[n] = (dsi_speed_class_t){key->op, pass, key->dtype, 0.0, 0.0};
                costliest[n++] = -1.0;
            }
            const ds_event_t *e = ds_event_set_find(plan->events, key);
            double flops = e ? e->flops : 0.0, bytes = e ? e->bytes : 0.0;
            double estimate = roofline(speed, key, flops, bytes);
            if (estimate > costliest[c]) {
                costliest[c] = estimate;
                scale_probe(speed, key, flops, bytes, &probes[c]);
            }
        }
    }
    return n;
}

/* Per class: factor, prepare s, prepared bytes, spread, CPU s, wall s of its runs. */
#define PROBE_FIELDS 6

/* Measures probe `p` into out[PROBE_FIELDS]; factor 0 when it cannot run here.
 * Only running out of memory fails: the run that follows would too. */
static ds_status_t run_probe(ds_backend_t *backend, const dsi_profile_speed_t *speed,
                             const probe_t *p, bool cpu_time, double *out)
{
    ds_measure_config_t config;
    ds_measure_config_default(&config); /* the CI target; a short budget */
    config.warmup = 1;
    config.warmup_s = 0.0;
    config.min_reps = CALIBRATE_REPS;
    config.budget_s = CALIBRATE_PROBE_S;
    ds_kernel_t *kernel = NULL;
    ds_measurement_t m;
    double start = dsi_now_s(), cpu = thread_cpu_s();
    ds_status_t status = ds_kernel_prepare(backend, &p->key, &kernel);
    if (status != DS_OK) {
        DSI_DEBUG("calibration: cannot prepare a probe here: %s", ds_last_error());
        return status == DS_ERR_NO_MEMORY ? status : DS_OK;
    }
    double prepared = dsi_now_s(), prepared_cpu = thread_cpu_s();
    status = ds_kernel_measure(kernel, &config, &m);
    if (status == DS_OK && m.cost.median_s > 0.0) {
        double wall = dsi_now_s() - prepared, used = thread_cpu_s() - prepared_cpu;
        double runs = (double)(m.cost.repetitions + 1); /* the warm-up run too */
        double run_s = cpu_time ? used / runs : m.cost.mean_s;
        out[0] = run_s / roofline(speed, &p->key, p->flops, p->bytes);
        out[1] = cpu_time ? prepared_cpu - cpu : prepared - start;
        out[2] = (double)ds_kernel_bytes(kernel);
        out[3] = spread_of(&m);
        out[4] = used + (prepared_cpu - cpu);
        out[5] = wall + (prepared - start);
    }
    ds_kernel_destroy(kernel);
    return status == DS_ERR_NO_MEMORY ? status : DS_OK;
}

/* Preparing a large kernel: *seconds_p (CPU seconds with cpu_time) per byte,
 * 0 when it cannot run here; only running out of memory fails. */
static ds_status_t fill_probe(ds_backend_t *backend, bool cpu_time, double *cpu_p, double *wall_p,
                              double *seconds_p)
{
    ds_event_key_t key;
    memset(&key, 0, sizeof(key));
    key.kind = DS_EVENT_COMPUTE;
    key.op = DS_OP_ADD;
    key.pass = DS_PASS_FORWARD;
    key.dtype = DS_DTYPE_FP32;
    key.dims[0] = CALIBRATE_FILL_BYTES / (3 * 4 * 1024); /* out = x + residual, fp32 */
    key.dims[1] = 1024;
    ds_kernel_t *kernel = NULL;
    double start = dsi_now_s(), cpu = thread_cpu_s();
    *seconds_p = 0.0;
    ds_status_t status = ds_kernel_prepare(backend, &key, &kernel);
    if (status != DS_OK)
        return status == DS_ERR_NO_MEMORY ? status : DS_OK;
    double wall = dsi_now_s() - start, used = thread_cpu_s() - cpu;
    double bytes = (double)ds_kernel_bytes(kernel);
    ds_kernel_destroy(kernel);
    *cpu_p += used;
    *wall_p += wall;
    *seconds_p = bytes > 0.0 ? (cpu_time ? used : wall) / bytes : 0.0; /* CPU time: as alone */
    return DS_OK;
}

static ds_status_t calibrate_compute(ds_backend_t *backend, MPI_Comm comm, int rank, int size,
                                     const dsi_profile_plan_t *plan, dsi_profile_speed_t *speed)
{
    ds_status_t status = DS_OK;
    probe_t *probes = NULL;
    dsi_speed_class_t classes[DSI_SPEED_CLASSES];
    double *results = NULL, *shares = NULL, use[2] = {0.0, 0.0}; /* this rank's CPU s, wall s */
    bool cpu_time = ds_backend_kind(backend) == DS_BACKEND_CPU;
    /* This rank's probes, then every rank learns whether all could run. */
    int n = 0;
    double fill = 0.0;
    ds_status_t local = dsi_calloc(DSI_SPEED_CLASSES, sizeof(*probes), &probes);
    if (local == DS_OK) {
        n = find_classes(plan, speed, classes, probes);
        local = dsi_calloc((size_t)DSI_MAX(n, 1) * PROBE_FIELDS, sizeof(double), &results);
    }
    if (local == DS_OK)
        local = dsi_calloc((size_t)size, sizeof(double), &shares);
    if (local == DS_OK)
        local = fill_probe(backend, cpu_time, &use[0], &use[1], &fill);
    for (int c = rank; c < n && local == DS_OK; c += size) {
        local = run_probe(backend, speed, &probes[c], cpu_time, &results[PROBE_FIELDS * c]);
        use[0] += results[PROBE_FIELDS * c + 4];
        use[1] += results[PROBE_FIELDS * c + 5];
    }
    DSI_TRY_GOTO(dsi_mpi_agree(comm, local), status, out);
    /* The share of its core this rank had: 1 but on a shared cpu. */
    double share = cpu_time && use[0] > 0.0 && use[1] > 0.0 ? DSI_MIN(use[0] / use[1], 1.0) : 1.0;
    DSI_MPI_TRY_GOTO(MPI_Allgather(&share, 1, MPI_DOUBLE, shares, 1, MPI_DOUBLE, comm), status,
                     out);
    DSI_MPI_TRY_GOTO(
        MPI_Allreduce(MPI_IN_PLACE, results, PROBE_FIELDS * n, MPI_DOUBLE, MPI_SUM, comm), status,
        out);
    DSI_MPI_TRY_GOTO(MPI_Allreduce(MPI_IN_PLACE, &fill, 1, MPI_DOUBLE, MPI_SUM, comm), status, out);
    double factors[DSI_SPEED_CLASSES], spreads[DSI_SPEED_CLASSES], mean_share = 0.0;
    for (int r = 0; r < size; r++) {
        mean_share += shares[r] / size;
        if (r < DSI_SPEED_RANKS)
            speed->rank_share[r] = shares[r];
    }
    speed->num_rank_shares = DSI_MIN(size, DSI_SPEED_RANKS);
    speed->cpu_share = mean_share;
    int known = 0;
    speed->num_classes = 0;
    for (int c = 0; c < n; c++) {
        const double *r = &results[PROBE_FIELDS * c];
        if (!(r[0] > 0.0))
            continue;
        /* In CPU time on the cpu backend: the speed alone on a core (the
         * estimate divides by the share each rank had). */
        double had = shares[c % size];
        classes[c].factor = r[0];
        classes[c].fill_s_per_byte = r[2] > 0.0 ? r[1] / r[2] : 0.0;
        speed->classes[speed->num_classes++] = classes[c];
        factors[known] = classes[c].factor;
        spreads[known++] = r[3];
        char text[256];
        ds_event_key_format(&probes[c].key, text, sizeof(text));
        DSI_DEBUG("calibration: %s: %.3g x the roofline, spread %.1f%%, filling %.0f MB/s (rank "
                  "%d with %.0f%% of its core)",
                  text, classes[c].factor, 100.0 * r[3],
                  classes[c].fill_s_per_byte > 0 ? 1e-6 / classes[c].fill_s_per_byte : 0.0,
                  c % size, 100.0 * had);
    }
    if (known > 0) {
        speed->default_factor = dsi_median(factors, (size_t)known);
        speed->compute_spread = dsi_median(spreads, (size_t)known);
    }
    speed->fill_s_per_byte = fill / (double)size;
out:
    dsi_free(shares);
    dsi_free(results);
    dsi_free(probes);
    return status;
}

/* ---- communication --------------------------------------------------------------------------- */

/* Measures `key` on `c` as the loop does (its warm-up and CI target, at
 * least CALIBRATE_COMM_REPS repetitions) within `budget_s`; *call_s_p: the whole call (preparing
 * included).  Enough repetitions for a CI of central order statistics, the loop's own statistic,
 * where a few repetitions' would rest on their extremes.  Collective. */
static ds_status_t measure_briefly(ds_comm_t *c, const ds_event_key_t *key, double budget_s,
                                   ds_comm_measurement_t *m, double *call_s_p)
{
    ds_measure_config_t config;
    ds_measure_config_default(&config); /* the loop's warm-up: a colder start is noisier */
    config.budget_s = budget_s;
    config.min_reps = CALIBRATE_COMM_REPS;
    double start = dsi_now_s();
    DSI_TRY(ds_comm_measure(c, key, &config, m));
    *call_s_p = dsi_now_s() - start;
    return DS_OK;
}

/* The largest message of `op` the plan measures. */
static int64_t largest_task(const dsi_profile_plan_t *plan, ds_comm_op_t op)
{
    int64_t bytes = 0;
    for (size_t t = 0; t < plan->num_tasks; t++)
        if (plan->tasks[t].sample.op == op)
            bytes = DSI_MAX(bytes, plan->tasks[t].sample.bytes);
    return bytes;
}

/* The primitives the plan's tasks measure (point-to-point once). */
static int plan_ops(const dsi_profile_plan_t *plan, ds_comm_op_t *ops)
{
    int n = 0;
    for (size_t t = 0; t < plan->num_tasks; t++) {
        ds_comm_op_t op = plan->tasks[t].sample.op;
        int seen = 0;
        for (int i = 0; i < n; i++)
            seen |= ops[i] == op;
        if (!seen && n < DS_COMM_COUNT_)
            ops[n++] = op;
    }
    return n;
}

/* The median of the draws measured (> 0); 0 when none was. */
static double positive_median(const double *draws)
{
    double v[DSI_SPREAD_DRAWS];
    size_t n = 0;
    for (int d = 0; d < DSI_SPREAD_DRAWS; d++)
        if (draws[d] > 0.0)
            v[n++] = draws[d];
    return n > 0 ? dsi_median(v, n) : 0.0;
}

/* One draw of primitive `op` on `c`: got[] = its factor and spread at
 * CALIBRATE_LARGE bytes, and at CALIBRATE_HUGE when the plan's largest
 * message of it (`largest`) is that large; adds the time spent preparing
 * buffers and their bytes to *fill_s_p and *filled_p.  An estimate's
 * failure goes to *local_p (agreed later).  Collective over `c`. */
static ds_status_t probe_primitive(ds_comm_t *c, ds_comm_op_t op, const dsi_profile_speed_t *speed,
                                   int64_t largest, ds_status_t *local_p, double got[4],
                                   double *fill_s_p, double *filled_p)
{
    ds_event_key_t key;
    memset(&key, 0, sizeof(key));
    key.kind = DS_EVENT_COMM;
    key.op = (uint8_t)op;
    key.dtype = DS_DTYPE_FP32;
    key.group_size = ds_comm_size(c);
    for (int size = 0; size < 2; size++) {
        int64_t bytes = size == 0 ? CALIBRATE_LARGE : CALIBRATE_HUGE;
        if (size == 1 && largest < CALIBRATE_HUGE)
            break;
        double budget = (size == 0 ? CALIBRATE_LARGE_S : CALIBRATE_HUGE_S) / DSI_SPREAD_DRAWS;
        ds_comm_measurement_t m;
        double call_s = 0.0, estimate = 0.0;
        key.dims[0] = bytes;
        DSI_TRY(measure_briefly(c, &key, budget, &m, &call_s));
        key.nodes = m.sample.nodes;
        key.ranks_per_node = m.sample.ranks_per_node;
        if (*local_p == DS_OK)
            *local_p =
                dsi_estimate_comm_seconds(&key, &speed->here, speed->comm_library, &estimate);
        if (m.cost.cost.median_s > 0.0 && estimate > 0.0) {
            got[2 * size] = m.cost.cost.median_s / estimate;
            got[2 * size + 1] = spread_of(&m.cost);
        }
        dsi_comm_op_t plan_op;
        if (size == 0 &&
            dsi_comm_op_init(&key, key.group_size, ds_comm_rank(c), &plan_op) == DS_OK) {
            *fill_s_p += DSI_MAX(call_s - m.cost.wall_s, 0.0);
            *filled_p += (double)(plan_op.send_bytes + plan_op.recv_bytes);
        }
    }
    return DS_OK;
}

static ds_status_t calibrate_comm(ds_backend_t *backend, MPI_Comm comm, int rank, int size,
                                  const dsi_profile_plan_t *plan, dsi_profile_speed_t *speed)
{
    ds_status_t status = DS_OK;
    ds_comm_t *all = NULL, *pair = NULL;
    MPI_Comm pair_mpi = MPI_COMM_NULL;
    DSI_MPI_TRY_GOTO(MPI_Barrier(comm), status, out);
    double start = dsi_now_s();
    for (int i = 0; i < CALIBRATE_BARRIERS; i++)
        DSI_MPI_TRY_GOTO(MPI_Barrier(comm), status, out);
    speed->sync_s = (dsi_now_s() - start) / CALIBRATE_BARRIERS;
    if (size < 2)
        goto out;
    start = dsi_now_s();
    DSI_TRY_GOTO(ds_comm_create(backend, comm, &all), status, out);
    speed->comm_create_s = dsi_now_s() - start;
    /* Point-to-point runs between two ranks: 0 and 1. */
    DSI_MPI_TRY_GOTO(MPI_Comm_split(comm, rank < 2 ? 0 : MPI_UNDEFINED, rank, &pair_mpi), status,
                     out);
    if (pair_mpi != MPI_COMM_NULL)
        DSI_TRY_GOTO(ds_comm_create(backend, pair_mpi, &pair), status, out);

    ds_event_key_t key;
    memset(&key, 0, sizeof(key));
    key.kind = DS_EVENT_COMM;
    key.op = DS_COMM_ALLREDUCE;
    key.dtype = DS_DTYPE_FP32;
    key.group_size = size;
    key.dims[0] = CALIBRATE_SMALL;
    ds_comm_measurement_t m;
    double call_s = 0.0;
    DSI_TRY_GOTO(measure_briefly(all, &key, CALIBRATE_SMALL_S, &m, &call_s), status, out);
    speed->comm_spread = spread_of(&m.cost);
    /* What a synchronisation costs inside a measurement loop: repetitions
     * of the small operation for CALIBRATE_SYNC_S, their wall time less the
     * operation.  A burst of barriers fits between two preemptions; the
     * loop's repetitions over a second do not, on a busy machine. */
    ds_measure_config_t config;
    ds_measure_config_default(&config);
    config.warmup = 0;
    config.warmup_s = 0.0;
    config.target_rel_ci = 0.0;
    config.max_reps = 100000;
    config.budget_s = CALIBRATE_SYNC_S;
    DSI_TRY_GOTO(ds_comm_measure(all, &key, &config, &m), status, out);
    if (m.cost.cost.repetitions > 0)
        speed->sync_s = DSI_MAX(speed->sync_s, m.cost.wall_s / (double)m.cost.cost.repetitions -
                                                   m.cost.cost.mean_s);
    speed->comm_spread_small_bytes = CALIBRATE_SMALL;
    speed->comm_spread_large_bytes = CALIBRATE_LARGE;

    /* Each primitive at CALIBRATE_LARGE bytes (and CALIBRATE_HUGE): its
     * factor, the median over DSI_SPREAD_DRAWS short loops (a few runs' mean
     * is one preemption away from anything), and each loop's spread; the
     * draws go round the primitives, so that they span the calibration as
     * a profile's loops span the profile.  The rest of a call is preparing
     * both buffers. */
    ds_comm_op_t ops[DS_COMM_COUNT_];
    int n = plan_ops(plan, ops);
    double draws[DS_COMM_COUNT_][2][DSI_SPREAD_DRAWS]; /* factors at large, huge */
    double fill_s = 0.0, filled = 0.0;
    ds_status_t local = DS_OK; /* the estimates' (memory): agreed after the loop's collectives */
    memset(draws, 0, sizeof(draws));
    for (int draw = 0; draw < DSI_SPREAD_DRAWS; draw++)
        for (int i = 0; i < n; i++) {
            ds_comm_t *c = ops[i] == DS_COMM_SENDRECV ? pair : all;
            double got[4] = {0.0, 0.0, 0.0, 0.0}; /* factor, spread at large; at huge */
            if (c != NULL) {
                DSI_TRY_GOTO(probe_primitive(c, ops[i], speed, largest_task(plan, ops[i]), &local,
                                             got, &fill_s, &filled),
                             status, out);
            }
            /* Rank 0 measured every primitive: its numbers for all. */
            DSI_MPI_TRY_GOTO(MPI_Bcast(got, 4, MPI_DOUBLE, 0, comm), status, out);
            DSI_DEBUG("calibration, draw %d: %s of %d bytes: %.3g x the links' roofline, spread "
                      "%.1f%%; of %d bytes: %.3g x, spread %.1f%%",
                      draw, ds_comm_op_name(ops[i]), CALIBRATE_LARGE, got[0], 100.0 * got[1],
                      CALIBRATE_HUGE, got[2], 100.0 * got[3]);
            draws[i][0][draw] = got[0];
            draws[i][1][draw] = got[2];
            speed->comm_op_spread[ops[i]][draw] = got[1];
            speed->comm_op_huge_spread[ops[i]][draw] = got[3];
        }
    DSI_TRY_GOTO(dsi_mpi_agree(comm, local), status, out);
    double factors[DS_COMM_COUNT_];
    int known = 0;
    for (int i = 0; i < n; i++) {
        double large = positive_median(draws[i][0]), huge = positive_median(draws[i][1]);
        if (large > 0.0) {
            speed->comm_op_factor[ops[i]] = large;
            speed->comm_op_huge_factor[ops[i]] = huge;
            factors[known++] = large;
        }
    }
    speed->comm_factor_bytes = CALIBRATE_LARGE;
    speed->comm_huge_bytes = CALIBRATE_HUGE;
    if (known > 0)
        speed->comm_factor = dsi_median(factors, (size_t)known);
    if (filled > 0.0)
        speed->comm_fill_s_per_byte = fill_s / filled;
out:
    ds_comm_destroy(pair);
    if (pair_mpi != MPI_COMM_NULL)
        MPI_Comm_free(&pair_mpi);
    ds_comm_destroy(all);
    return status;
}

ds_status_t dsi_profile_calibrate(ds_backend_t *backend, MPI_Comm comm,
                                  const dsi_profile_plan_t *plan, bool compute, bool comm_tasks,
                                  dsi_profile_speed_t *speed)
{
    ds_status_t status = DS_OK;
    int rank = 0, size = 1;
    DSI_MPI_TRY_GOTO(MPI_Comm_rank(comm, &rank), status, out);
    DSI_MPI_TRY_GOTO(MPI_Comm_size(comm, &size), status, out);
    double start = dsi_now_s();
    dsi_profile_speed_t measured = *speed;
    if (compute)
        DSI_TRY_GOTO(calibrate_compute(backend, comm, rank, size, plan, &measured), status, out);
    if (comm_tasks && plan->num_tasks > 0)
        DSI_TRY_GOTO(calibrate_comm(backend, comm, rank, size, plan, &measured), status, out);
    measured.calibrated = 1;
    /* Every rank takes rank 0's. */
    DSI_MPI_TRY_GOTO(MPI_Bcast(&measured, (int)sizeof(measured), MPI_BYTE, 0, comm), status, out);
    *speed = measured;
    double lo = INFINITY, hi = 0.0;
    for (int c = 0; c < speed->num_classes; c++) {
        lo = DSI_MIN(lo, speed->classes[c].factor);
        hi = DSI_MAX(hi, speed->classes[c].factor);
    }
    DSI_INFO("calibration in %.2f s: %d operator classes at %.3g-%.3g x the %s roofline (median "
             "%.3g; ranks had %.0f%% of their core on average), filling %.0f MB/s, spread %.1f%%; "
             "barrier %.3g us, "
             "communicator %.3f s, operations %.3g x the links' roofline (median), filling %.0f "
             "MB/s, spread %.1f%%",
             dsi_now_s() - start, speed->num_classes, speed->num_classes ? lo : 0.0, hi,
             speed->here.device.name, speed->default_factor, 100.0 * speed->cpu_share,
             speed->fill_s_per_byte > 0 ? 1e-6 / speed->fill_s_per_byte : 0.0,
             100.0 * speed->compute_spread, 1e6 * speed->sync_s, speed->comm_create_s,
             speed->comm_factor,
             speed->comm_fill_s_per_byte > 0 ? 1e-6 / speed->comm_fill_s_per_byte : 0.0,
             100.0 * speed->comm_spread);
out:
    return status;
}
