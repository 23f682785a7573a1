/*
 * Communication measurements (METHOD.md 3, "arrival skew").
 *
 * Every repetition starts with a barrier of the group; each member stamps
 * its entry on an aligned clock, issues the operation and stamps its exit
 * when the operation has completed on it.  The cost of the repetition is
 * the last exit minus the last arrival: the operation cannot progress
 * before every member is there, and it is over when every member is done.
 * The skew (last arrival minus first arrival) is kept separately: the
 * simulator models waiting itself, so counting it in the cost would count
 * it twice.
 *
 * Point-to-point uses the same rule rather than ping-pong or DistSim's
 * "both start after a barrier, keep the smaller duration": with an eager
 * protocol the sender returns as soon as its data is copied out, so the
 * smaller of the two durations is the sender's local copy, not the transfer;
 * ping-pong halves a round trip, which assumes the two directions cost the
 * same and cannot time one direction alone or both at once (the batched
 * exchange of the 1F1B steady state).  Exit of the receiver minus the later
 * of the two arrivals is the transfer as the next stage sees it.
 *
 * Clock alignment: the processes of one node share CLOCK_MONOTONIC, so
 * members on the group's first node need no correction.  The leader of
 * every other node estimates its offset to member 0 by ping-pong (Cristian's
 * method: the round trip with the smallest delay gives the offset within half
 * of that delay) before every measurement, and the members of its node take
 * the same offset.
 */
#include "dsi_backend.h"

#include <math.h>
#include <string.h>

/* ---- sizes ----------------------------------------------------------------------------------- */

ds_status_t dsi_comm_op_init(const ds_event_key_t *key, int size, int rank, dsi_comm_op_t *op)
{
    char text[256];
    memset(op, 0, sizeof(*op));
    if (key->kind != DS_EVENT_COMM || key->op >= DS_COMM_COUNT_ || key->dtype > DS_DTYPE_FP8) {
        ds_event_key_format(key, text, sizeof(text));
        return DSI_ERROR(DS_ERR_INVALID_ARG, "'%s' is not a communication event", text);
    }
    if (key->group_size != 0 && key->group_size != size) {
        ds_event_key_format(key, text, sizeof(text));
        return DSI_ERROR(DS_ERR_INVALID_ARG,
                         "'%s' is for a group of %d ranks; this communicator has %d", text,
                         (int)key->group_size, size);
    }
    if (key->dims[0] < 1) {
        ds_event_key_format(key, text, sizeof(text));
        return DSI_ERROR(DS_ERR_INVALID_ARG, "'%s': the size must be at least 1 byte", text);
    }
    op->op = (ds_comm_op_t)key->op;
    op->dtype = (ds_dtype_t)key->dtype;
    op->batched = (key->flags & DS_COMM_FLAG_BATCHED) != 0;
    int64_t e = (int64_t)ds_dtype_size(op->dtype), bytes = key->dims[0], n = size;
    int64_t chunks = 1; /* chunks of `count` in the full buffer */
    switch (op->op) {
    case DS_COMM_ALLREDUCE:
    case DS_COMM_BROADCAST: break;
    case DS_COMM_SENDRECV:
        if (size != 2)
            return DSI_ERROR(DS_ERR_INVALID_ARG,
                             "point-to-point runs between 2 ranks; this communicator has %d", size);
        break;
    case DS_COMM_ALLGATHER:
    case DS_COMM_REDUCE_SCATTER:
    case DS_COMM_ALLTOALL: chunks = n; break;
    case DS_COMM_PS_PUSH:
    case DS_COMM_PS_PULL:
        op->servers = key->dims[1] > 0 ? (int)DSI_MIN(key->dims[1], n) : 1;
        chunks = op->servers;
        break;
    case DS_COMM_COUNT_: break;
    }
    op->count = DSI_MAX(bytes / (e * chunks), 1);
    if (op->count > INT32_MAX / 2)
        return DSI_ERROR(
            DS_ERR_UNSUPPORTED,
            "%lld bytes of %s make chunks of %lld elements; at most 2^30 are supported",
            (long long)bytes, ds_dtype_name(op->dtype), (long long)op->count);
    size_t chunk = (size_t)(op->count * e), full = chunk * (size_t)chunks;
    op->bytes = (int64_t)full;
    switch (op->op) {
    case DS_COMM_ALLREDUCE: op->send_bytes = op->recv_bytes = chunk; break;
    case DS_COMM_BROADCAST:
        op->send_bytes = rank == 0 ? chunk : 0;
        op->recv_bytes = rank == 0 ? 0 : chunk;
        break;
    case DS_COMM_SENDRECV:
        op->send_bytes = op->batched || rank == 0 ? chunk : 0;
        op->recv_bytes = op->batched || rank == 1 ? chunk : 0;
        break;
    case DS_COMM_ALLGATHER:
        op->send_bytes = chunk;
        op->recv_bytes = full;
        break;
    case DS_COMM_REDUCE_SCATTER:
        op->send_bytes = full;
        op->recv_bytes = chunk;
        break;
    case DS_COMM_ALLTOALL: op->send_bytes = op->recv_bytes = full; break;
    case DS_COMM_PS_PUSH:
        op->send_bytes = full;
        op->recv_bytes = rank < op->servers ? chunk : 0;
        break;
    case DS_COMM_PS_PULL:
        op->send_bytes = rank < op->servers ? full : 0;
        op->recv_bytes = full;
        break;
    case DS_COMM_COUNT_: break;
    }
    return DS_OK;
}

/* ---- the communicator ------------------------------------------------------------------------ */

/* Node of every member: members sharing memory with each other. */
static ds_status_t find_nodes(ds_comm_t *c)
{
    ds_status_t status = DS_OK;
    MPI_Comm node = MPI_COMM_NULL;
    int *leaders = NULL;
    int leader = 0;
    /* Allocations first, agreed on, so that no member fails alone between
     * the collectives below. */
    status = dsi_calloc((size_t)c->size, sizeof(int), &leaders);
    if (status == DS_OK)
        status = dsi_calloc((size_t)c->size, sizeof(int), &c->node_of);
    DSI_TRY_GOTO(dsi_mpi_agree(c->comm, status), status, out);
    DSI_TRY_GOTO(dsi_mpi_split_node(c->comm, c->rank, &node), status, out);
    DSI_MPI_TRY_GOTO(MPI_Allreduce(&c->rank, &leader, 1, MPI_INT, MPI_MIN, node), status, out);
    DSI_MPI_TRY_GOTO(MPI_Allgather(&leader, 1, MPI_INT, leaders, 1, MPI_INT, c->comm), status, out);
    c->nodes = 0;
    c->ranks_per_node = 0;
    int64_t fake = dsi_param_int(DSI_PARAM_COMM_FAKE_NODES);
    for (int r = 0; r < c->size && fake > 0; r++) /* every `fake` members a node */
        leaders[r] = (int)(r / fake * fake);
    for (int r = 0; r < c->size; r++) {
        /* Nodes are numbered by their lowest member; a leader is its own first member. */
        c->node_of[r] = leaders[r] == r ? c->nodes++ : c->node_of[leaders[r]];
    }
    for (int k = 0; k < c->nodes; k++) {
        int members = 0;
        for (int r = 0; r < c->size; r++)
            members += c->node_of[r] == k;
        c->ranks_per_node = DSI_MAX(c->ranks_per_node, members);
    }
out:
    dsi_free(leaders);
    if (node != MPI_COMM_NULL)
        MPI_Comm_free(&node);
    return status;
}

/* Offsets of every node's clock to member 0's, by ping-pong between member
 * 0 and each other node's leader, one node at a time. */
static ds_status_t align_clocks(ds_comm_t *c)
{
    ds_status_t status = DS_OK;
    double *offsets = NULL, *errors = NULL;
    c->clock_offset_s = 0.0;
    c->clock_error_s = 0.0;
    if (c->nodes <= 1)
        return DS_OK;
    int rounds = (int)DSI_MAX(dsi_param_int(DSI_PARAM_CLOCK_SYNC_ROUNDS), 1);
    status = dsi_calloc((size_t)c->nodes, sizeof(double), &offsets);
    if (status == DS_OK)
        status = dsi_calloc((size_t)c->nodes, sizeof(double), &errors);
    DSI_TRY_GOTO(dsi_mpi_agree(c->comm, status), status, out);
    for (int k = 1; k < c->nodes; k++) {
        int leader = 0;
        while (c->node_of[leader] != k)
            leader++;
        if (c->node_of[0] == k)
            continue; /* cannot happen: member 0 is on node 0 */
        if (c->rank == 0) {
            for (int i = 0; i < rounds; i++) {
                double ping = 0.0, pong = 0.0;
                DSI_MPI_TRY_GOTO(
                    MPI_Recv(&ping, 1, MPI_DOUBLE, leader, 11, c->comm, MPI_STATUS_IGNORE), status,
                    out);
                pong = dsi_now_s();
                DSI_MPI_TRY_GOTO(MPI_Send(&pong, 1, MPI_DOUBLE, leader, 12, c->comm), status, out);
            }
        } else if (c->rank == leader) {
            double best = INFINITY;
            for (int i = 0; i < rounds; i++) {
                double sent = dsi_now_s(), remote = 0.0;
                DSI_MPI_TRY_GOTO(MPI_Send(&sent, 1, MPI_DOUBLE, 0, 11, c->comm), status, out);
                DSI_MPI_TRY_GOTO(
                    MPI_Recv(&remote, 1, MPI_DOUBLE, 0, 12, c->comm, MPI_STATUS_IGNORE), status,
                    out);
                double received = dsi_now_s(), delay = received - sent;
                if (delay < best) {
                    best = delay;
                    offsets[k] = remote - 0.5 * (sent + received);
                    errors[k] = 0.5 * delay;
                }
            }
        }
    }
    /* Every leader knows its node's offset; share them all. */
    DSI_MPI_TRY_GOTO(MPI_Allreduce(MPI_IN_PLACE, offsets, c->nodes, MPI_DOUBLE, MPI_SUM, c->comm),
                     status, out);
    DSI_MPI_TRY_GOTO(MPI_Allreduce(MPI_IN_PLACE, errors, c->nodes, MPI_DOUBLE, MPI_SUM, c->comm),
                     status, out);
    c->clock_offset_s = offsets[c->node_of[c->rank]];
    for (int k = 0; k < c->nodes; k++)
        c->clock_error_s = DSI_MAX(c->clock_error_s, errors[k]);
out:
    dsi_free(offsets);
    dsi_free(errors);
    return status;
}

/* A few operations that set connections up (MPI and NCCL do on first use):
 * an all-reduce of 256 KiB and, on groups of up to WARM_PAIRS_MAX members (a
 * node's worth), an all-to-all of 256 KiB per pair, which touches every
 * pair.  A larger group skips the all-to-all: it moves n^2 messages (4032
 * per 64-member group, a million at 1024 members), and the pairs its
 * collectives use are few and set up by their own first runs (the
 * executor's warm-up iterations, the profiler's warm-up per event). */
enum { WARM_PAIRS_MAX = 8, WARM_ELEMENTS = 65536 };

static ds_status_t warm_up(ds_comm_t *c)
{
    static const ds_comm_op_t warm[] = {DS_COMM_ALLREDUCE, DS_COMM_ALLTOALL};
    for (size_t i = 0; i < DSI_ARRAY_SIZE(warm); i++) {
        bool all_pairs = warm[i] == DS_COMM_ALLTOALL;
        if (all_pairs && c->size > WARM_PAIRS_MAX)
            continue;
        ds_event_key_t key;
        memset(&key, 0, sizeof(key));
        key.kind = DS_EVENT_COMM;
        key.op = (uint8_t)warm[i];
        key.dtype = DS_DTYPE_FP32;
        key.dims[0] = (all_pairs ? (int64_t)c->size : 1) * WARM_ELEMENTS;
        dsi_comm_op_t op;
        void *impl = NULL;
        ds_status_t status = dsi_comm_op_init(&key, c->size, c->rank, &op);
        if (status == DS_OK)
            status = c->backend->ops->comm_prepare(c, &op, 0, &impl);
        status = dsi_mpi_agree(c->comm, status); /* before the operation's collective */
        if (status != DS_OK) {
            c->backend->ops->comm_release(impl);
            return status;
        }
        for (int r = 0; r < 3 && status == DS_OK; r++) {
            double lead = 0.0, seconds = 0.0;
            status = c->backend->ops->comm_run_timed(impl, NULL, &lead, &seconds);
        }
        c->backend->ops->comm_release(impl);
        DSI_TRY(status);
    }
    return DS_OK;
}

ds_status_t ds_comm_create(ds_backend_t *backend, MPI_Comm group, ds_comm_t **comm_p)
{
    ds_status_t status = DS_OK;
    ds_comm_t *c = NULL;
    status = dsi_mpi_agree(group, dsi_calloc(1, sizeof(*c), &c)); /* before the collective dup */
    if (status != DS_OK) {
        dsi_free(c);
        return status;
    }
    c->backend = backend;
    c->comm = MPI_COMM_NULL;
    DSI_TRY_GOTO(dsi_mpi_dup(group, &c->comm), status, err_free);
    DSI_MPI_TRY_GOTO(MPI_Comm_rank(c->comm, &c->rank), status, err_comm);
    DSI_MPI_TRY_GOTO(MPI_Comm_size(c->comm, &c->size), status, err_comm);
    DSI_TRY_GOTO(find_nodes(c), status, err_comm);
    ds_status_t init = backend->ops->comm_init(c);
    status = dsi_mpi_agree(c->comm, init);
    if (status != DS_OK && init == DS_OK)
        goto err_fini;
    if (status != DS_OK)
        goto err_comm;
    DSI_TRY_GOTO(warm_up(c), status, err_fini);
    DSI_TRY_GOTO(align_clocks(c), status, err_fini);
    *comm_p = c;
    return DS_OK;
err_fini:
    backend->ops->comm_fini(c);
err_comm:
    MPI_Comm_free(&c->comm);
err_free:
    dsi_free(c->node_of);
    dsi_free(c);
    return status;
}

void ds_comm_destroy(ds_comm_t *comm)
{
    if (comm == NULL)
        return;
    comm->backend->ops->comm_fini(comm);
    MPI_Comm_free(&comm->comm);
    dsi_free(comm->node_of);
    dsi_free(comm);
}

int ds_comm_size(const ds_comm_t *comm)
{
    return comm->size;
}

int ds_comm_rank(const ds_comm_t *comm)
{
    return comm->rank;
}

int ds_comm_nodes(const ds_comm_t *comm)
{
    return comm->nodes;
}

int ds_comm_ranks_per_node(const ds_comm_t *comm)
{
    return comm->ranks_per_node;
}

/* ---- measuring ------------------------------------------------------------------------------- */

/* Runs `reps` timed repetitions; times[2 i] and times[2 i + 1] get this
 * member's entry and exit of repetition i on the aligned clock.  With a
 * producer kernel, entry is when the producer has finished here. */
static ds_status_t run_reps(ds_comm_t *c, void *impl, void *producer, size_t reps, double *times)
{
    ds_status_t status = DS_OK;
    for (size_t i = 0; i < reps; i++) {
        double lead = 0.0, seconds = 0.0;
        DSI_MPI_TRY_GOTO(MPI_Barrier(c->comm), status, out);
        double start = dsi_now_s() + c->clock_offset_s;
        DSI_TRY_GOTO(c->backend->ops->comm_run_timed(impl, producer, &lead, &seconds), status, out);
        if (times != NULL) {
            times[2 * i] = start + lead;
            times[2 * i + 1] = start + lead + seconds;
        }
    }
out:
    return status;
}

/* The same decision on every member: member 0's, broadcast. */
static ds_status_t agree(ds_comm_t *c, int *flag)
{
    ds_status_t status = DS_OK;
    DSI_MPI_TRY_GOTO(MPI_Bcast(flag, 1, MPI_INT, 0, c->comm), status, out);
out:
    return status;
}

/* Prepares the operation's buffers on every member, or on none: a member
 * that cannot (memory) must not leave the others waiting in a barrier. */
static ds_status_t prepare_everywhere(ds_comm_t *c, const dsi_comm_op_t *op, int verify,
                                      ds_status_t local, void **impl_p)
{
    void *impl = NULL;
    ds_status_t status =
        local != DS_OK ? local : c->backend->ops->comm_prepare(c, op, verify, &impl);
    int failed = status != DS_OK, any = 0;
    int code = MPI_Allreduce(&failed, &any, 1, MPI_INT, MPI_MAX, c->comm);
    if (status != DS_OK)
        return status;
    if (code != MPI_SUCCESS || any) {
        c->backend->ops->comm_release(impl);
        return code != MPI_SUCCESS ? dsi_mpi_error(__FILE__, __LINE__, "MPI_Allreduce", code)
                                   : DSI_ERROR(DS_ERR_NO_MEMORY,
                                               "another member could not prepare the %lld-byte "
                                               "operation",
                                               (long long)op->bytes);
    }
    *impl_p = impl;
    return DS_OK;
}

static void source_tag(const ds_backend_t *b, char *tag, size_t size)
{
    snprintf(tag, size, "%s:%.40s#%08llx", ds_backend_kind_name(b->kind), b->device_name,
             (unsigned long long)(dsi_hash64(b->fingerprint, strlen(b->fingerprint), 0) &
                                  0xffffffffULL));
}

static ds_status_t measure(ds_comm_t *comm, const ds_event_key_t *key, ds_kernel_t *producer,
                           const ds_measure_config_t *config, ds_comm_measurement_t *measurement_p)
{
    ds_status_t status = DS_OK;
    ds_comm_t *c = comm;
    void *impl = NULL;
    double *mine = NULL, *all = NULL, *cost = NULL, *skew = NULL;
    dsi_comm_op_t op;
    void *producer_impl = producer != NULL ? producer->impl : NULL;
    DSI_TRY(dsi_measure_check_config(config));
    DSI_TRY(dsi_comm_op_init(key, c->size, c->rank, &op));
    if (producer != NULL && producer->backend != c->backend)
        return DSI_ERROR(DS_ERR_INVALID_ARG,
                         "the producer kernel was prepared on another backend than the "
                         "communicator's");
    /* Local allocations first; then every member agrees that all went well. */
    ds_status_t local = dsi_calloc(2 * DSI_COMM_MAX_BATCH, sizeof(double), &mine);
    if (local == DS_OK)
        local = dsi_calloc((size_t)c->size * 2 * DSI_COMM_MAX_BATCH, sizeof(double), &all);
    if (local == DS_OK)
        local = dsi_calloc((size_t)config->max_reps, sizeof(double), &cost);
    if (local == DS_OK)
        local = dsi_calloc((size_t)config->max_reps, sizeof(double), &skew);
    DSI_TRY_GOTO(prepare_everywhere(c, &op, 0, local, &impl), status, out);
    DSI_TRY_GOTO(align_clocks(c), status, out);

    /* Warm-up of this size (dsi_warmup_more); member 0 decides. */
    double start = dsi_now_s();
    for (int done = 0;; done++) {
        int more = dsi_warmup_more(config, done, dsi_now_s() - start);
        DSI_TRY_GOTO(agree(c, &more), status, out);
        if (!more)
            break;
        DSI_TRY_GOTO(run_reps(c, impl, producer_impl, 1, NULL), status, out);
    }

    ds_measurement_t stats;
    memset(&stats, 0, sizeof(stats));
    int stop = DS_STOP_MAX_REPS;
    size_t reps = 0;
    double timed_start = dsi_now_s(); /* per-repetition wall time counts barriers too */
    for (;;) {
        if (reps >= (size_t)config->min_reps)
            DSI_TRY_GOTO(ds_measurement_from_samples(cost, reps, &stats), status, out);
        ds_stop_reason_t reason = (ds_stop_reason_t)stop;
        double now = dsi_now_s();
        int batch = (int)dsi_measure_next_batch(
            config, reps, reps > 0 ? stats.rel_ci : INFINITY, now - start,
            reps > 0 ? (now - timed_start) / (double)reps : 0.0, DSI_COMM_MAX_BATCH, &reason);
        stop = (int)reason;
        DSI_TRY_GOTO(agree(c, &batch), status, out);
        DSI_TRY_GOTO(agree(c, &stop), status, out);
        if (batch == 0)
            break;
        DSI_TRY_GOTO(run_reps(c, impl, producer_impl, (size_t)batch, mine), status, out);
        DSI_MPI_TRY_GOTO(
            MPI_Allgather(mine, 2 * batch, MPI_DOUBLE, all, 2 * batch, MPI_DOUBLE, c->comm), status,
            out);
        for (int i = 0; i < batch; i++) {
            double first = INFINITY, last = -INFINITY, done = -INFINITY;
            for (int r = 0; r < c->size; r++) {
                const double *t = all + (size_t)r * 2 * (size_t)batch + 2 * (size_t)i;
                first = DSI_MIN(first, t[0]);
                last = DSI_MAX(last, t[0]);
                done = DSI_MAX(done, t[1]);
            }
            cost[reps] = DSI_MAX(done - last, 0.0);
            skew[reps] = last - first;
            reps++;
        }
    }
    double wall = dsi_now_s() - start;
    DSI_MPI_TRY_GOTO(MPI_Bcast(&wall, 1, MPI_DOUBLE, 0, c->comm), status, out);

    ds_comm_measurement_t m;
    memset(&m, 0, sizeof(m));
    DSI_TRY_GOTO(ds_measurement_from_samples(cost, reps, &m.cost), status, out);
    DSI_TRY_GOTO(ds_measurement_from_samples(skew, reps, &m.skew), status, out);
    m.cost.stop = m.skew.stop = (ds_stop_reason_t)stop;
    m.cost.wall_s = m.skew.wall_s = wall;
    m.clock_error_s = c->clock_error_s;
    m.after_compute = producer != NULL;
    ds_comm_sample_t *s = &m.sample;
    s->op = op.op;
    s->dtype = op.dtype;
    s->bytes = op.bytes;
    s->group_size = c->size;
    s->nodes = c->nodes;
    s->ranks_per_node = c->ranks_per_node;
    s->concurrency = 1;
    s->in_place = 0;
    s->batched = op.batched;
    s->mean_s = m.cost.cost.mean_s;
    s->median_s = m.cost.cost.median_s;
    s->p10_s = m.cost.cost.p10_s;
    s->p90_s = m.cost.cost.p90_s;
    s->repetitions = m.cost.cost.repetitions;
    s->provenance = DS_PROV_MEASURED;
    source_tag(c->backend, s->source, sizeof(s->source));
    *measurement_p = m;
out:
    if (impl != NULL)
        c->backend->ops->comm_release(impl);
    dsi_free(mine);
    dsi_free(all);
    dsi_free(cost);
    dsi_free(skew);
    return status;
}

ds_status_t ds_comm_measure(ds_comm_t *comm, const ds_event_key_t *key,
                            const ds_measure_config_t *config, ds_comm_measurement_t *measurement_p)
{
    return measure(comm, key, NULL, config, measurement_p);
}

ds_status_t ds_comm_measure_after(ds_comm_t *comm, const ds_event_key_t *key, ds_kernel_t *producer,
                                  const ds_measure_config_t *config,
                                  ds_comm_measurement_t *measurement_p)
{
    if (producer == NULL)
        return DSI_ERROR(DS_ERR_INVALID_ARG, "no producer kernel given (use ds_comm_measure)");
    return measure(comm, key, producer, config, measurement_p);
}

ds_status_t ds_comm_verify(ds_comm_t *comm, const ds_event_key_t *key, int64_t *errors_p)
{
    ds_status_t status = DS_OK;
    void *impl = NULL;
    dsi_comm_op_t op;
    double lead = 0.0, seconds = 0.0;
    int64_t errors = 0;
    DSI_TRY(dsi_comm_op_init(key, comm->size, comm->rank, &op));
    DSI_TRY(prepare_everywhere(comm, &op, 1, DS_OK, &impl));
    DSI_MPI_TRY_GOTO(MPI_Barrier(comm->comm), status, out);
    DSI_TRY_GOTO(comm->backend->ops->comm_run_timed(impl, NULL, &lead, &seconds), status, out);
    DSI_TRY_GOTO(comm->backend->ops->comm_check(impl, &errors), status, out);
    *errors_p = errors;
out:
    comm->backend->ops->comm_release(impl);
    return status;
}

/* ---- the executor's calls -------------------------------------------------------------------- */

struct dsi_comm_call {
    ds_comm_t *comm;
    void *impl;
    dsi_call_role_t role;
    int tag;
};

ds_status_t dsi_comm_call_prepare(ds_comm_t *comm, const ds_event_key_t *key, dsi_call_role_t role,
                                  int tag, dsi_comm_call_t **call_p)
{
    ds_status_t status = DS_OK;
    const dsi_backend_ops_t *ops = comm->backend->ops;
    dsi_comm_op_t op;
    dsi_comm_call_t *call = NULL;
    int host_calls = ops->comm_start != NULL && ops->comm_test != NULL && ops->comm_wait != NULL;
    if (!host_calls && ops->comm_issue == NULL)
        return DSI_ERROR(DS_ERR_UNSUPPORTED, "the %s backend cannot run the executor yet",
                         ds_backend_kind_name(comm->backend->kind));
    ds_event_key_t both = *key;
    if (both.kind == DS_EVENT_COMM && both.op == DS_COMM_SENDRECV)
        both.flags |= DS_COMM_FLAG_BATCHED; /* buffers for both directions: the role picks one */
    DSI_TRY(dsi_comm_op_init(&both, comm->size, comm->rank, &op));
    if (op.op != DS_COMM_SENDRECV && role != DSI_CALL_ALL)
        return DSI_ERROR(DS_ERR_INTERNAL, "a collective call with a point-to-point role");
    DSI_TRY(dsi_calloc(1, sizeof(*call), &call));
    call->comm = comm;
    call->role = role;
    call->tag = tag;
    DSI_TRY_GOTO(ops->comm_prepare(comm, &op, 0, &call->impl), status, err_free);
    *call_p = call;
    return DS_OK;
err_free:
    dsi_free(call);
    return status;
}

void dsi_comm_call_release(dsi_comm_call_t *call)
{
    if (call == NULL)
        return;
    call->comm->backend->ops->comm_release(call->impl);
    dsi_free(call);
}

ds_status_t dsi_comm_call_run(dsi_comm_call_t *call)
{
    if (call->role != DSI_CALL_ALL) {
        DSI_TRY(dsi_comm_call_start(call));
        return dsi_comm_call_wait(call);
    }
    double lead = 0.0, seconds = 0.0;
    return call->comm->backend->ops->comm_run_timed(call->impl, NULL, &lead, &seconds);
}

/* Host-side calls of a backend without them (cuda issues on its queues). */
static ds_status_t no_host_calls(const dsi_comm_call_t *call)
{
    return DSI_ERROR(DS_ERR_UNSUPPORTED,
                     "the %s backend issues the executor's calls on device queues, not from the "
                     "host",
                     ds_backend_kind_name(call->comm->backend->kind));
}

ds_status_t dsi_comm_call_start(dsi_comm_call_t *call)
{
    if (call->comm->backend->ops->comm_start == NULL)
        return no_host_calls(call);
    return call->comm->backend->ops->comm_start(call->impl, (int)call->role, call->tag);
}

ds_status_t dsi_comm_call_test(dsi_comm_call_t *call, int *done_p)
{
    if (call->comm->backend->ops->comm_test == NULL)
        return no_host_calls(call);
    return call->comm->backend->ops->comm_test(call->impl, done_p);
}

ds_status_t dsi_comm_call_wait(dsi_comm_call_t *call)
{
    if (call->comm->backend->ops->comm_wait == NULL)
        return no_host_calls(call);
    return call->comm->backend->ops->comm_wait(call->impl);
}

ds_status_t dsi_comm_call_issue(dsi_comm_call_t *call, dsi_queue_t queue)
{
    const dsi_backend_ops_t *ops = call->comm->backend->ops;
    if (ops->comm_issue == NULL)
        return DSI_ERROR(DS_ERR_UNSUPPORTED, "the %s backend has no device queues",
                         ds_backend_kind_name(call->comm->backend->kind));
    return ops->comm_issue(call->impl, (int)queue, (int)call->role, call->tag);
}

ds_status_t dsi_comm_align_clocks(ds_comm_t *comm)
{
    return align_clocks(comm);
}

double dsi_comm_clock_offset(const ds_comm_t *comm, double *error_p)
{
    if (error_p != NULL)
        *error_p = comm->clock_error_s;
    return comm->clock_offset_s;
}
