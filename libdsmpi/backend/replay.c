/*
 * The replay backend: a device whose compute events cost what a cost table
 * says and whose communication is real MPI.  Built with SimGrid's SMPI
 * (DSMPI_SMPI), a compute event is a simulated computation of its duration
 * (smpi_execute_benched) and MPI is simulated on the platform, so a rank
 * stands for one device of a virtual cluster; built normally, a compute
 * event is a busy wait of its duration (a device that replays measured
 * costs on a real allocation).
 *
 * Keys the table lacks cost their roofline estimate on the device spec the
 * backend was opened for (logged once per key).  Communication buffers hold
 * no meaningful data: reductions use an operation that moves the data and
 * computes nothing, and under SMPI the buffers are SMPI's shared memory (no
 * copies, no memory per rank; run with --cfg=smpi/shared-malloc:local, which
 * maps each region once and lazily), so 1000s of simulated ranks fit in one
 * process.
 *
 * Non-blocking all-reduce (the executor's overlapped gradient buckets) runs
 * the algorithm Open MPI's tuned rules pick for the blocking call
 * (dsi_ompi_choose: Rabenseifner, recursive doubling or ring) as a
 * schedule of rounds of point-to-point transfers; a round is posted when
 * the previous one has completed and the call is tested or waited for, as
 * an MPI library progresses a non-blocking collective inside MPI calls.
 * (SMPI's own non-blocking all-reduce sends the whole buffer to every
 * member, which no MPI library does.)  The other non-blocking calls are
 * MPI's.
 */
#include "dsi_backend.h"
#include "dsi_mpi_op.h"

#include "comm/dsi_ompi.h"
#include "dsi_kernel_plan.h"
#include "events/dsi_events.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef DSMPI_SMPI
#include <smpi/smpi.h>
#endif

/* Under SMPI every communication buffer of a rank lies in one of a few
 * shared regions (SMPI's shared memory: no copies, no memory): a region per
 * direction, replaced by one twice as large when an operation needs more;
 * the regions of earlier operations stay until the backend closes. */
#define REPLAY_MAX_REGIONS 64

typedef struct replay_region {
    void *base;
    size_t bytes;
} replay_region_t;

typedef struct replay_backend {
    replay_region_t regions[REPLAY_MAX_REGIONS];
    int num_regions;
    size_t region_bytes[2]; /* size of the current send [0] and receive [1] region */
    int current[2];         /* their index in regions, -1 = none */
    ds_cost_table_t *costs;
    ds_cluster_t device;        /* the device spec of estimates (only .device is used) */
    ds_cost_table_t *estimated; /* keys the table lacked, with their estimate */
    double *stamps;
    size_t stamp_capacity;
    MPI_Op move; /* a commutative reduction that computes nothing */
} replay_backend_t;

typedef struct replay_kernel {
    double seconds;
} replay_kernel_t;

/* Per communicator: the number of non-blocking all-reduces started, whose
 * rounds carry tags of their own. */
typedef struct replay_comm_state {
    int started;
} replay_comm_state_t;

/* ---- compute ------------------------------------------------------------------------------- */

static double key_flops(const ds_event_key_t *key)
{
    const int64_t *d = key->dims;
    if (key->op == DS_OP_GEMM)
        return 2.0 * (double)d[0] * (double)d[1] * (double)d[2];
    if (key->op == DS_OP_BATCHED_GEMM)
        return 2.0 * (double)d[0] * (double)d[1] * (double)d[2] * (double)DSI_MAX(d[3], 1);
    return 0.0;
}

/* The cost of `key`: the table's mean, else the roofline estimate. */
static ds_status_t key_seconds(replay_backend_t *rb, const ds_event_key_t *key, double *seconds_p)
{
    const ds_cost_t *cost = ds_cost_table_find(rb->costs, key);
    if (cost == NULL)
        cost = ds_cost_table_find(rb->estimated, key);
    if (cost != NULL) {
        *seconds_p = cost->mean_s;
        return DS_OK;
    }
    dsi_kernel_plan_t plan;
    char message[256], text[256];
    int code = dsi_kernel_plan_make(key, &plan, message, sizeof(message));
    if (code != DS_OK)
        return DSI_ERROR((ds_status_t)code, "%s", message);
    double bytes = (double)dsi_kernel_plan_bytes(&plan, ds_dtype_size((ds_dtype_t)key->dtype));
    ds_cost_t c;
    memset(&c, 0, sizeof(c));
    DSI_TRY(dsi_estimate_seconds(key, key_flops(key), bytes, &rb->device, &c.mean_s));
    c.median_s = c.p10_s = c.p90_s = c.mean_s;
    c.provenance = key->kind == DS_EVENT_COMPUTE ? DS_PROV_MODELLED : DS_PROV_ASSUMED;
    DSI_TRY(ds_cost_table_set(rb->estimated, key, &c));
    ds_event_key_format(key, text, sizeof(text));
    DSI_INFO(
        "replay: '%s' is not in the cost table; it takes its device-model estimate on %s, %.3g us",
        text, rb->device.device.name, c.mean_s * 1e6);
    *seconds_p = c.mean_s;
    return DS_OK;
}

static ds_status_t replay_kernel_estimate(const ds_backend_t *backend, const ds_event_key_t *key,
                                          size_t *bytes_p)
{
    *bytes_p = 0; /* a replayed kernel holds no device memory */
    return DS_OK;
}

static ds_status_t replay_kernel_prepare(ds_backend_t *backend, const ds_event_key_t *key,
                                         void **impl_p)
{
    replay_kernel_t *k = NULL;
    double seconds = 0.0;
    DSI_TRY(key_seconds(backend->impl, key, &seconds));
    DSI_TRY(dsi_calloc(1, sizeof(*k), &k));
    k->seconds = seconds > 0.0 ? seconds : 0.0;
    *impl_p = k;
    return DS_OK;
}

/* Takes `seconds` of the device. */
static void occupy(double seconds)
{
    if (!(seconds > 0.0))
        return;
#ifdef DSMPI_SMPI
    smpi_execute_benched(seconds);
#else
    double end = dsi_now_s() + seconds;
    while (dsi_now_s() < end)
        ;
#endif
}

static ds_status_t replay_kernel_run(void *impl)
{
    occupy(((replay_kernel_t *)impl)->seconds);
    return DS_OK;
}

static size_t replay_kernel_bytes(const void *impl)
{
    return 0;
}

static ds_status_t replay_kernel_chain(void *consumer, const void *producer, int *chained_p)
{
    *chained_p = 1; /* no buffers: every operator reads its predecessor's output */
    return DS_OK;
}

static void replay_kernel_destroy(void *impl)
{
    dsi_free(impl);
}

/* ---- timestamps ------------------------------------------------------------------------------ */

static ds_status_t replay_stamps_reserve(ds_backend_t *backend, size_t count)
{
    replay_backend_t *rb = backend->impl;
    if (count <= rb->stamp_capacity)
        return DS_OK;
    DSI_TRY(dsi_realloc_array(&rb->stamps, count, sizeof(*rb->stamps)));
    rb->stamp_capacity = count;
    return DS_OK;
}

static ds_status_t replay_stamp(ds_backend_t *backend, size_t slot)
{
    ((replay_backend_t *)backend->impl)->stamps[slot] = dsi_now_s();
    return DS_OK;
}

static ds_status_t replay_synchronize(ds_backend_t *backend)
{
    return DS_OK;
}

static ds_status_t replay_elapsed(ds_backend_t *backend, size_t from, size_t to, double *seconds_p)
{
    replay_backend_t *rb = backend->impl;
    *seconds_p = rb->stamps[to] - rb->stamps[from];
    return DS_OK;
}

/* ---- communication buffers --------------------------------------------------------------------
 */

/* A buffer of `bytes` for direction `dir` (0 send, 1 receive). */
static ds_status_t buffer_alloc(replay_backend_t *rb, int dir, size_t bytes, void **ptr_p)
{
#ifdef DSMPI_SMPI
    bytes = bytes > 0 ? bytes : 1;
    if (rb->current[dir] < 0 || bytes > rb->region_bytes[dir]) {
        if (rb->num_regions == REPLAY_MAX_REGIONS)
            return DSI_ERROR(DS_ERR_NO_MEMORY, "more than %d shared regions", REPLAY_MAX_REGIONS);
        size_t size = DSI_MAX(bytes, 2 * rb->region_bytes[dir]);
        void *base = SMPI_SHARED_MALLOC(size);
        if (base == NULL)
            return DSI_ERROR(DS_ERR_NO_MEMORY, "SMPI shared allocation of %zu bytes failed", size);
        rb->regions[rb->num_regions] = (replay_region_t){base, size};
        rb->current[dir] = rb->num_regions++;
        rb->region_bytes[dir] = size;
    }
    *ptr_p = rb->regions[rb->current[dir]].base;
    return DS_OK;
#else
    (void)rb;
    (void)dir;
    return dsi_calloc(1, bytes > 0 ? bytes : 1, ptr_p);
#endif
}

static void buffer_free(void *ptr)
{
#ifndef DSMPI_SMPI
    dsi_free(ptr); /* SMPI: the regions are the backend's */
#else
    (void)ptr;
#endif
}

static void move_only(void *in, void *inout, int *length, MPI_Datatype *type)
{
    (void)in;
    (void)inout;
    (void)length;
    (void)type;
}

/* ---- communication ------------------------------------------------------------------------- */

/* One round of a schedule: at most one send and one receive (elements). */
typedef struct step {
    int send_to, recv_from; /* members, -1 = none */
    int64_t send_count, recv_count;
} step_t;

typedef struct replay_op {
    dsi_mpi_op_t mpi; /* its sum only moves the bytes */
    /* Non-blocking all-reduce: its rounds, the one in flight, the tag. */
    step_t *steps;
    int num_steps, step, tag;
    int scheduled; /* the pending requests are round `step`'s */
} replay_op_t;

static ds_status_t replay_comm_init(ds_comm_t *comm)
{
    replay_comm_state_t *state = NULL;
    DSI_TRY(dsi_calloc(1, sizeof(*state), &state));
    comm->impl = state;
    return DS_OK;
}

static void replay_comm_fini(ds_comm_t *comm)
{
    dsi_free(comm->impl);
    comm->impl = NULL;
}

static void replay_comm_release(void *impl)
{
    replay_op_t *c = impl;
    if (c == NULL)
        return;
    dsi_mpi_op_drain(&c->mpi); /* a call left running: complete it first */
    buffer_free(c->mpi.send);
    buffer_free(c->mpi.recv);
    dsi_free(c->mpi.requests);
    dsi_free(c->steps);
    dsi_free(c);
}

static ds_status_t add_step(replay_op_t *c, int send_to, int64_t send_count, int recv_from,
                            int64_t recv_count)
{
    DSI_TRY(dsi_realloc_array(&c->steps, (size_t)c->num_steps + 1, sizeof(*c->steps)));
    c->steps[c->num_steps++] = (step_t){send_to, recv_from, send_count, recv_count};
    return DS_OK;
}

/* The rounds of an all-reduce of `count` elements on this member, as the
 * algorithm Open MPI's rules pick for the blocking call runs them. */
static ds_status_t build_allreduce(replay_op_t *c)
{
    int n = c->mpi.comm->size, me = c->mpi.comm->rank;
    int64_t count = c->mpi.op.count;
    dsi_ompi_algo_t algo = dsi_ompi_choose(DS_COMM_ALLREDUCE, n, count * (int64_t)c->mpi.element);
    c->num_steps = 0;
    if (n < 2)
        return DS_OK;
    if ((algo == DSI_OMPI_RING || algo == DSI_OMPI_SEGMENTED_RING) && count >= n) {
        /* Reduce-scatter then all-gather around the ring, blocks of count / n. */
        int64_t block = count / n;
        for (int pass = 0; pass < 2; pass++)
            for (int i = 0; i < n - 1; i++)
                DSI_TRY(add_step(c, (me + 1) % n, block, (me + n - 1) % n, block));
        return DS_OK;
    }
    /* Recursive doubling and Rabenseifner work on the largest power of two
     * p <= n: the first 2(n - p) members pair up, the even one hands its
     * vector to the odd one before and gets the result back after. */
    int p = 1;
    while (2 * p <= n)
        p *= 2;
    int extra = n - p, virt = -1;
    if (me < 2 * extra) {
        if (me % 2 == 0)
            DSI_TRY(add_step(c, me + 1, count, -1, 0));
        else {
            DSI_TRY(add_step(c, -1, 0, me - 1, count));
            virt = me / 2;
        }
    } else {
        virt = me - extra;
    }
    if (virt >= 0) {
        bool halving = algo == DSI_OMPI_RABENSEIFNER;
        /* Blocks of the vector: p - 1 of count / p, the last takes the rest. */
        int64_t base = count / p, last = count - base * (p - 1);
        int lo = 0, hi = p; /* blocks this member still reduces */
        int first = c->num_steps;
        for (int mask = 1; mask < p; mask *= 2) {
            int partner = virt ^ mask;
            int peer = partner < extra ? 2 * partner + 1 : partner + extra;
            if (!halving) {
                DSI_TRY(add_step(c, peer, count, peer, count));
                continue;
            }
            int mid = lo + (hi - lo) / 2;
            int keep_lo = virt < partner ? lo : mid, keep_hi = virt < partner ? mid : hi;
            int give_lo = virt < partner ? mid : lo, give_hi = virt < partner ? hi : mid;
            int64_t give = (int64_t)(give_hi - give_lo) * base + (give_hi == p ? last - base : 0);
            int64_t keep = (int64_t)(keep_hi - keep_lo) * base + (keep_hi == p ? last - base : 0);
            DSI_TRY(add_step(c, peer, give, peer, keep));
            lo = keep_lo;
            hi = keep_hi;
        }
        if (halving) /* the all-gather mirrors the reduce-scatter */
            for (int s = c->num_steps - 1; s >= first; s--) {
                step_t r = c->steps[s];
                DSI_TRY(add_step(c, r.send_to, r.recv_count, r.recv_from, r.send_count));
            }
    }
    if (me < 2 * extra) {
        if (me % 2 == 1)
            DSI_TRY(add_step(c, me - 1, count, -1, 0));
        else
            DSI_TRY(add_step(c, -1, 0, me + 1, count));
    }
    return DS_OK;
}

static ds_status_t replay_comm_prepare(ds_comm_t *comm, const dsi_comm_op_t *op, int verify,
                                       void **impl_p)
{
    ds_status_t status = DS_OK;
    replay_backend_t *rb = comm->backend->impl;
    replay_op_t *c = NULL;
    if (verify)
        return DSI_ERROR(DS_ERR_UNSUPPORTED,
                         "the replay backend moves data without computing it: nothing to verify");
    DSI_TRY(dsi_calloc(1, sizeof(*c), &c));
    c->mpi.comm = comm;
    c->mpi.op = *op;
    c->mpi.element = ds_dtype_size(op->dtype);
    c->mpi.type = c->mpi.element == 4   ? MPI_FLOAT
                  : c->mpi.element == 2 ? MPI_UINT16_T
                                        : MPI_UINT8_T;
    DSI_TRY_GOTO(buffer_alloc(rb, 0, op->send_bytes, &c->mpi.send), status, err);
    DSI_TRY_GOTO(buffer_alloc(rb, 1, op->recv_bytes, &c->mpi.recv), status, err);
    c->mpi.sum = rb->move;
    DSI_TRY_GOTO(dsi_mpi_op_alloc_requests(&c->mpi), status, err);
    if (op->op == DS_COMM_ALLREDUCE)
        DSI_TRY_GOTO(build_allreduce(c), status, err);
    *impl_p = c;
    return DS_OK;
err:
    replay_comm_release(c);
    return status;
}

static ds_status_t replay_comm_run_timed(void *impl, void *before, double *lead_s,
                                         double *seconds_p)
{
    double start = dsi_now_s();
    if (before != NULL)
        DSI_TRY(replay_kernel_run(before));
    double issued = dsi_now_s();
    DSI_TRY(dsi_mpi_op_run(&((replay_op_t *)impl)->mpi));
    *lead_s = issued - start;
    *seconds_p = dsi_now_s() - issued;
    return DS_OK;
}

static ds_status_t replay_comm_check(void *impl, int64_t *errors_p)
{
    return DSI_ERROR(DS_ERR_UNSUPPORTED, "the replay backend has no data to check");
}

/* Posts round c->step of the schedule. */
static ds_status_t post_step(replay_op_t *c)
{
    ds_status_t status = DS_OK;
    const step_t *s = &c->steps[c->step];
    MPI_Comm mc = c->mpi.comm->comm;
    c->mpi.num_pending = 0;
    if (s->recv_from >= 0) {
        DSI_MPI_TRY_GOTO(MPI_Irecv(c->mpi.recv, (int)s->recv_count, c->mpi.type, s->recv_from,
                                   c->tag, mc, &c->mpi.pending[c->mpi.num_pending]),
                         status, out);
        c->mpi.num_pending++;
    }
    if (s->send_to >= 0) {
        DSI_MPI_TRY_GOTO(MPI_Isend(c->mpi.send, (int)s->send_count, c->mpi.type, s->send_to, c->tag,
                                   mc, &c->mpi.pending[c->mpi.num_pending]),
                         status, out);
        c->mpi.num_pending++;
    }
out:
    return status;
}

/* Advances the schedule: completes rounds whose transfers are done (waiting
 * for them when `block`) and posts the next ones.  *done_p when all are. */
static ds_status_t advance(replay_op_t *c, bool block, int *done_p)
{
    ds_status_t status = DS_OK;
    while (c->step < c->num_steps) {
        if (c->mpi.num_pending > 0) {
            int flag = 1;
            if (block)
                DSI_MPI_TRY_GOTO(
                    MPI_Waitall(c->mpi.num_pending, c->mpi.pending, MPI_STATUSES_IGNORE), status,
                    out);
            else
                DSI_MPI_TRY_GOTO(
                    MPI_Testall(c->mpi.num_pending, c->mpi.pending, &flag, MPI_STATUSES_IGNORE),
                    status, out);
            if (!flag) {
                *done_p = 0;
                return DS_OK;
            }
            c->mpi.num_pending = 0;
        }
        if (++c->step < c->num_steps)
            DSI_TRY_GOTO(post_step(c), status, out);
    }
    c->scheduled = 0;
    *done_p = 1;
out:
    return status;
}

static ds_status_t replay_comm_start(void *impl, int role, int tag)
{
    replay_op_t *c = impl;
    if (c->mpi.num_pending != 0 || c->scheduled)
        return DSI_ERROR(DS_ERR_INTERNAL, "a communication call was started twice");
    if (c->mpi.op.op != DS_COMM_ALLREDUCE)
        return dsi_mpi_op_start(&c->mpi, role, tag);
    replay_comm_state_t *state = c->mpi.comm->impl;
    c->tag = 1000 + state->started++ % 30000;
    c->step = 0;
    c->scheduled = 1;
    if (c->num_steps > 0)
        DSI_TRY(post_step(c));
    return DS_OK;
}

static ds_status_t replay_comm_test(void *impl, int *done_p)
{
    replay_op_t *c = impl;
    if (c->scheduled)
        return advance(c, false, done_p);
    return dsi_mpi_op_test(&c->mpi, done_p);
}

static ds_status_t replay_comm_wait(void *impl)
{
    replay_op_t *c = impl;
    if (c->scheduled) {
        int done = 0;
        return advance(c, true, &done);
    }
    return dsi_mpi_op_wait(&c->mpi);
}

/* ---- opening ----------------------------------------------------------------------------------
 */

static void replay_close(ds_backend_t *backend)
{
    replay_backend_t *rb = backend->impl;
    if (rb == NULL)
        return;
    if (rb->move != MPI_OP_NULL)
        MPI_Op_free(&rb->move);
#ifdef DSMPI_SMPI
    for (int i = 0; i < rb->num_regions; i++)
        SMPI_SHARED_FREE(rb->regions[i].base);
#endif
    ds_cost_table_destroy(rb->costs);
    ds_cost_table_destroy(rb->estimated);
    dsi_free(rb->stamps);
    dsi_free(rb);
    backend->impl = NULL;
}

static const dsi_backend_ops_t replay_ops = {
    .kernel_estimate = replay_kernel_estimate,
    .kernel_prepare = replay_kernel_prepare,
    .kernel_run = replay_kernel_run,
    .kernel_bytes = replay_kernel_bytes,
    .kernel_chain = replay_kernel_chain,
    .kernel_destroy = replay_kernel_destroy,
    .stamps_reserve = replay_stamps_reserve,
    .stamp = replay_stamp,
    .synchronize = replay_synchronize,
    .elapsed = replay_elapsed,
    .comm_init = replay_comm_init,
    .comm_fini = replay_comm_fini,
    .comm_prepare = replay_comm_prepare,
    .comm_run_timed = replay_comm_run_timed,
    .comm_check = replay_comm_check,
    .comm_release = replay_comm_release,
    .comm_start = replay_comm_start,
    .comm_test = replay_comm_test,
    .comm_wait = replay_comm_wait,
    .close = replay_close,
};

/* A hash of the table's contents, independent of its order. */
static uint64_t table_hash(const ds_cost_table_t *table)
{
    uint64_t sum = 0;
    for (size_t i = 0; i < ds_cost_table_size(table); i++) {
        const ds_event_key_t *key;
        const ds_cost_t *cost;
        ds_cost_table_at(table, i, &key, &cost);
        uint64_t h = ds_event_key_hash(key);
        sum += dsi_hash_mix64(h ^ dsi_hash64(&cost->mean_s, sizeof(cost->mean_s), 3));
    }
    return sum;
}

ds_status_t dsi_replay_open(ds_backend_t *b, const ds_cost_table_t *costs, const char *device)
{
    ds_status_t status = DS_OK;
    replay_backend_t *rb = NULL;
    const char *spec =
        device != NULL && device[0] != '\0' ? device : dsi_param_string(DSI_PARAM_REPLAY_DEVICE);
    DSI_TRY(dsi_calloc(1, sizeof(*rb), &rb));
    rb->move = MPI_OP_NULL;
    rb->current[0] = rb->current[1] = -1;
    b->impl = rb;
    b->ops = &replay_ops;
    DSI_TRY_GOTO(ds_device_spec_lookup(spec, &rb->device.device), status, err);
    DSI_TRY_GOTO(ds_cost_table_create(&rb->costs), status, err);
    DSI_TRY_GOTO(ds_cost_table_create(&rb->estimated), status, err);
    if (costs != NULL) {
        for (size_t i = 0; i < ds_cost_table_size(costs); i++) {
            const ds_event_key_t *key;
            const ds_cost_t *cost;
            ds_cost_table_at(costs, i, &key, &cost);
            if (key->kind == DS_EVENT_COMPUTE)
                DSI_TRY_GOTO(ds_cost_table_set(rb->costs, key, cost), status, err);
        }
    } else {
        const char *path = dsi_param_string(DSI_PARAM_REPLAY_COSTS);
        ds_cost_table_t *loaded = NULL;
        DSI_TRY_GOTO(ds_cost_table_create(&loaded), status, err);
        /* Without a table every compute event takes its roofline estimate. */
        if (path != NULL && path[0] != '\0')
            status = ds_cost_table_load_text(loaded, path);
        for (size_t i = 0; status == DS_OK && i < ds_cost_table_size(loaded); i++) {
            const ds_event_key_t *key;
            const ds_cost_t *cost;
            ds_cost_table_at(loaded, i, &key, &cost);
            if (key->kind == DS_EVENT_COMPUTE)
                status = ds_cost_table_set(rb->costs, key, cost);
        }
        ds_cost_table_destroy(loaded);
        if (status != DS_OK)
            goto err;
    }
    DSI_MPI_TRY_GOTO(MPI_Op_create(move_only, 1, &rb->move), status, err);
    char mpi[MPI_MAX_LIBRARY_VERSION_STRING];
    int length = 0;
    if (MPI_Get_library_version(mpi, &length) != MPI_SUCCESS)
        snprintf(mpi, sizeof(mpi), "unknown MPI");
    mpi[strcspn(mpi, "\n,")] = '\0';
    snprintf(b->device_name, sizeof(b->device_name), "%s", rb->device.device.name);
    snprintf(b->fingerprint, sizeof(b->fingerprint),
             "replay: %s, %zu compute costs #%016llx | %s | mpi: %.60s", rb->device.device.name,
             ds_cost_table_size(rb->costs), (unsigned long long)table_hash(rb->costs),
#ifdef DSMPI_SMPI
             "simulated (SimGrid SMPI)",
#else
             "busy wait",
#endif
             mpi);
    snprintf(b->placement, sizeof(b->placement), "replayed %s, local rank %d of %d",
             rb->device.device.name, b->local_rank, b->local_size);
    return DS_OK;
err:
    replay_close(b);
    b->ops = NULL;
    return status;
}
