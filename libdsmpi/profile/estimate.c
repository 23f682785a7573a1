/*
 * How long measuring a profiling plan takes: the measurement loop's own
 * rules (dsi_measure_expect) run on a time model of each layer pass and
 * communication task, plus what the profiler does around the loop.
 *
 *   layer pass   prepare: its kernels' buffers, their bytes x the fill rate of
 *                their operator class (x copies); one run: the sum of its compute
 *                keys' roofline times on the device spec, each x the factor
 *                of its operator class; both over the share of its core the
 *                rank measuring it has (cpu backend); then the loop on that run
 *   compute      in rounds: round i is every rank's i-th pass (largest
 *                first, as assigned), so it lasts as long as the slowest;
 *                then the ranks agree (an all-reduce and the checkpoint's
 *                three), and a checkpoint writes when due
 *   comm task    a communicator per group shape (comm_create_s, when the
 *                shape changes); prepare: comm_fill_s_per_byte x this
 *                member's send and receive bytes, and an all-reduce;
 *                the clock alignment across nodes; one run: the roofline of
 *                the allocation's links x the primitive's factor; the loop with a
 *                barrier per repetition, a broadcast per warm-up run, an
 *                all-gather and two broadcasts per batch; then the agreement
 *   commit       commit_s + commit_s_per_record x the records then held
 *
 * Every synchronisation counts sync_s (one barrier of the allocation).
 */
#include "dsi_profile.h"

#include "backend/dsi_backend.h"
#include "events/dsi_events.h"

#include <math.h>
#include <string.h>

/* The store's costs on this project's machine: 100,000 records written by 2
 * ranks in 0.23 s (tests/bench/store_bench.sh); the demo's few hundred in
 * 0.01-0.08 s on a quiet machine, 0.4 s on a busy one
 * (tests/bench/profile_estimate.sh): creating, renaming, syncing. */
#define COMMIT_S 0.05
#define COMMIT_S_PER_RECORD 2.3e-6

void dsi_profile_speed_init(dsi_profile_speed_t *speed, const ds_cluster_t *here)
{
    memset(speed, 0, sizeof(*speed));
    speed->here = *here;
    speed->default_factor = 1.0;
    speed->comm_factor = 1.0;
    speed->cpu_share = 1.0;
    speed->commit_s = COMMIT_S;
    speed->commit_s_per_record = COMMIT_S_PER_RECORD;
}

static uint8_t pass_class(uint8_t pass)
{
    return pass == DS_PASS_RECOMPUTE ? (uint8_t)DS_PASS_FORWARD : pass;
}

double dsi_profile_speed_share(const dsi_profile_speed_t *speed, int rank)
{
    double share =
        rank >= 0 && rank < speed->num_rank_shares ? speed->rank_share[rank] : speed->cpu_share;
    return share > 0.0 ? DSI_MIN(share, 1.0) : 1.0;
}

const dsi_speed_class_t *dsi_profile_speed_class(const dsi_profile_speed_t *speed,
                                                 const ds_event_key_t *key)
{
    for (int i = 0; i < speed->num_classes; i++) {
        const dsi_speed_class_t *c = &speed->classes[i];
        if (c->op == key->op && c->pass == pass_class(key->pass) && c->dtype == key->dtype)
            return c;
    }
    return NULL;
}

/* ---- layer passes ---------------------------------------------------------------------------- */

/* One run of the unit and preparing its kernels once. */
static void unit_model(const dsi_profile_plan_t *plan, const dsi_unit_t *unit,
                       const dsi_profile_speed_t *speed, double *run_s, double *prepare_s)
{
    ds_cluster_t device = speed->here;
    device.nodes = device.gpus_per_node = 1;
    *run_s = *prepare_s = 0.0;
    for (size_t i = 0; i < unit->num_keys; i++) {
        size_t k = unit->first_key + i;
        const ds_event_key_t *key = &plan->keys[k];
        if (key->kind != DS_EVENT_COMPUTE)
            continue;
        const ds_event_t *e = ds_event_set_find(plan->events, key);
        const dsi_speed_class_t *c = dsi_profile_speed_class(speed, key);
        double flops = e != NULL ? e->flops : 0.0, moved = e != NULL ? e->bytes : 0.0;
        double bytes =
            k < plan->num_key_bytes && plan->key_bytes[k] > 0.0 ? plan->key_bytes[k] : moved;
        *run_s += (c != NULL ? c->factor : speed->default_factor) *
                  dsi_estimate_compute_seconds(key, flops, moved, &device);
        *prepare_s += bytes * (c != NULL && c->fill_s_per_byte > 0.0 ? c->fill_s_per_byte
                                                                     : speed->fill_s_per_byte);
    }
}

static double unit_seconds(const dsi_profile_plan_t *plan, const dsi_unit_t *unit,
                           const ds_measure_config_t *config, const dsi_profile_speed_t *speed)
{
    double run_s, prepare_s, share = dsi_profile_speed_share(speed, unit->rank);
    unit_model(plan, unit, speed, &run_s, &prepare_s);
    run_s /= share; /* on a shared core a pass takes its CPU time over the share it gets */
    prepare_s /= share;
    double copies = config->copies > 1 ? (double)config->copies : 1.0;
    dsi_loop_model_t m;
    memset(&m, 0, sizeof(m));
    m.run_s = run_s;
    m.warmup_s = copies * run_s; /* every copy once, then a synchronisation */
    m.rep_wall_s = run_s;
    m.spread = speed->compute_spread;
    m.max_batch = dsi_measure_max_batch(unit->num_keys);
    dsi_loop_expectation_t e;
    dsi_measure_expect(config, &m, &e);
    return copies * prepare_s + e.seconds;
}

/* Records a unit adds to the database: one per compute key measured. */
static int64_t unit_records(const dsi_profile_plan_t *plan, const dsi_unit_t *unit)
{
    int64_t n = 0;
    for (size_t i = 0; i < unit->num_keys; i++)
        n += plan->keys[unit->first_key + i].kind == DS_EVENT_COMPUTE;
    return n;
}

/* The database between checkpoints: records pending and time since the
 * last write, as ds_profile_db_checkpoint decides. */
typedef struct db_model {
    bool present;
    int64_t held, pending;
    double since_write_s;
    int64_t by_count;
    double by_time;
} db_model_t;

static double commit_seconds(const dsi_profile_speed_t *speed, int64_t records)
{
    return speed->commit_s + speed->commit_s_per_record * (double)records;
}

/* After `elapsed` seconds that added `records`: the checkpoint's agreement
 * and, when due, its write. */
static double checkpoint(db_model_t *db, const dsi_profile_speed_t *speed, double elapsed,
                         int64_t records)
{
    if (!db->present)
        return 0.0;
    db->pending += records;
    db->since_write_s += elapsed;
    double seconds = 3.0 * speed->sync_s; /* agreement and two all-reduces */
    bool due = (db->by_count > 0 && db->pending >= db->by_count) ||
               (db->by_time > 0.0 && db->since_write_s >= db->by_time && db->pending > 0);
    if (due) {
        db->held += db->pending;
        db->pending = 0;
        db->since_write_s = 0.0;
        seconds += commit_seconds(speed, db->held);
    }
    return seconds;
}

static int by_estimate_desc(const void *a, const void *b, const dsi_profile_plan_t *plan)
{
    const dsi_unit_t *x = &plan->units[*(const size_t *)a], *y = &plan->units[*(const size_t *)b];
    if (x->estimate_s != y->estimate_s)
        return x->estimate_s < y->estimate_s ? 1 : -1;
    return 0;
}

/* Units of `rank` in the order it measures them (the profiler's: largest
 * estimate first, plan order among equals). */
static size_t rank_order(const dsi_profile_plan_t *plan, int rank, size_t *order)
{
    size_t mine = 0;
    for (size_t u = 0; u < plan->num_units; u++)
        if (plan->units[u].rank == rank)
            order[mine++] = u;
    for (size_t i = 1; i < mine; i++) /* stable insertion, as the profiler sorts */
        for (size_t j = i; j > 0 && by_estimate_desc(&order[j], &order[j - 1], plan) < 0; j--) {
            size_t t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    return mine;
}

static ds_status_t estimate_compute(const dsi_profile_plan_t *plan,
                                    const ds_measure_config_t *config,
                                    const dsi_profile_speed_t *speed, db_model_t *db,
                                    dsi_profile_estimate_t *e)
{
    ds_status_t status = DS_OK;
    size_t *count = NULL, **orders = NULL;
    int ranks = plan->num_ranks;
    for (size_t u = 0; u < plan->num_units; u++)
        if (plan->units[u].rank >= 0) {
            e->unit_s[u] = unit_seconds(plan, &plan->units[u], config, speed);
            e->rank_s[plan->units[u].rank] += e->unit_s[u];
        }
    DSI_TRY_GOTO(dsi_calloc((size_t)ranks, sizeof(*count), &count), status, out);
    DSI_TRY_GOTO(dsi_calloc((size_t)ranks, sizeof(*orders), &orders), status, out);
    for (int r = 0; r < ranks; r++) {
        DSI_TRY_GOTO(dsi_calloc(plan->num_units ? plan->num_units : 1, sizeof(size_t), &orders[r]),
                     status, out);
        count[r] = rank_order(plan, r, orders[r]);
        e->num_rounds = DSI_MAX(e->num_rounds, count[r]);
    }
    DSI_TRY_GOTO(dsi_calloc(e->num_rounds ? e->num_rounds : 1, sizeof(double), &e->round_s), status,
                 out);
    for (size_t i = 0; i < e->num_rounds; i++) {
        double slowest = 0.0;
        int64_t records = 0;
        for (int r = 0; r < ranks; r++)
            if (i < count[r]) {
                slowest = DSI_MAX(slowest, e->unit_s[orders[r][i]]);
                records += unit_records(plan, &plan->units[orders[r][i]]);
            }
        e->round_s[i] = slowest + speed->sync_s + checkpoint(db, speed, slowest, records);
        e->compute_s += e->round_s[i];
    }
out:
    for (int r = 0; orders != NULL && r < ranks; r++)
        dsi_free(orders[r]);
    dsi_free(orders);
    dsi_free(count);
    return status;
}

/* ---- communication --------------------------------------------------------------------------- */

/* log-linear between (lo, a) and (hi, b), the nearer value outside. */
static double between(double x, double lo, double a, double hi, double b)
{
    if (!(lo > 0.0) || !(hi > lo) || x <= lo)
        return a;
    if (x >= hi)
        return b;
    return a + (b - a) * log(x / lo) / log(hi / lo);
}

/* The factor of an operation of `bytes`: see dsi_profile_speed_t. */
static double comm_factor(const dsi_profile_speed_t *speed, ds_comm_op_t op, double bytes)
{
    double factor =
        speed->comm_op_factor[op] > 0.0 ? speed->comm_op_factor[op] : speed->comm_factor;
    double huge = speed->comm_op_huge_factor[op];
    if (!(huge > 0.0))
        return factor;
    return between(bytes, speed->comm_factor_bytes, factor, speed->comm_huge_bytes, huge);
}

/* Draw `draw` of the spread of an operation of `bytes`: see dsi_profile_speed_t. */
static double comm_spread(const dsi_profile_speed_t *speed, ds_comm_op_t op, double bytes, int draw)
{
    double small = speed->comm_spread, large = speed->comm_op_spread[op][draw];
    double huge = speed->comm_op_huge_spread[op][draw];
    if (!(large > 0.0))
        return small;
    if (huge > 0.0 && bytes > speed->comm_spread_large_bytes)
        return between(bytes, speed->comm_spread_large_bytes, large, speed->comm_huge_bytes, huge);
    return between(bytes, speed->comm_spread_small_bytes, small, speed->comm_spread_large_bytes,
                   large);
}

static ds_status_t task_seconds(const dsi_comm_task_t *task, const ds_measure_config_t *config,
                                const dsi_profile_speed_t *speed, double *seconds_p)
{
    const ds_comm_sample_t *c = &task->sample;
    ds_event_key_t key;
    memset(&key, 0, sizeof(key));
    key.kind = DS_EVENT_COMM;
    key.op = (uint8_t)c->op;
    key.dtype = (uint8_t)c->dtype;
    key.group_size = c->group_size;
    key.nodes = c->nodes;
    key.ranks_per_node = c->ranks_per_node;
    key.concurrency = c->concurrency;
    key.flags = c->batched ? DS_COMM_FLAG_BATCHED : 0;
    key.dims[0] = c->bytes;
    double factor = comm_factor(speed, c->op, (double)c->bytes);
    double run_s = 0.0;
    DSI_TRY(dsi_estimate_comm_seconds(&key, &speed->here, speed->comm_library, &run_s));
    run_s *= factor;
    /* Preparing: the busiest member's buffers, then every member agrees. */
    double filled = 0.0;
    for (int member = 0; member < c->group_size; member++) {
        dsi_comm_op_t op;
        if (dsi_comm_op_init(&key, c->group_size, member, &op) == DS_OK)
            filled = DSI_MAX(filled, (double)(op.send_bytes + op.recv_bytes));
    }
    double seconds = filled * speed->comm_fill_s_per_byte + speed->sync_s;
    if (c->nodes > 1) /* ping-pong with every other node's leader, two all-reduces */
        seconds +=
            (2.0 * (double)dsi_param_int(DSI_PARAM_CLOCK_SYNC_ROUNDS) * (c->nodes - 1) + 2.0) *
            speed->sync_s;
    dsi_loop_model_t m;
    memset(&m, 0, sizeof(m));
    m.run_s = run_s;
    m.warmup_s = run_s + 2.0 * speed->sync_s; /* the decision's broadcast, a barrier */
    m.rep_wall_s = run_s + speed->sync_s;     /* a barrier before each */
    m.batch_wall_s = 3.0 * speed->sync_s;     /* two broadcasts, the all-gather */
    m.max_batch = DSI_COMM_MAX_BATCH;
    m.rate_from_wall = 1;
    double loop_s = 0.0; /* the mean over the spread's draws */
    for (int draw = 0; draw < DSI_SPREAD_DRAWS; draw++) {
        dsi_loop_expectation_t e;
        m.spread = comm_spread(speed, c->op, (double)c->bytes, draw);
        dsi_measure_expect(config, &m, &e);
        loop_s += e.seconds / DSI_SPREAD_DRAWS;
    }
    /* The last warm-up decision, the last batch decision (two broadcasts),
     * the wall time's broadcast. */
    *seconds_p = seconds + loop_s + 4.0 * speed->sync_s;
    return DS_OK;
}

static ds_status_t estimate_comm(const dsi_profile_plan_t *plan, const ds_measure_config_t *config,
                                 const dsi_profile_speed_t *speed, const unsigned char *task_reused,
                                 db_model_t *db, dsi_profile_estimate_t *e)
{
    int shape = -1;
    for (size_t t = 0; t < plan->num_tasks; t++) {
        if (task_reused != NULL && task_reused[t])
            continue;
        const dsi_comm_task_t *task = &plan->tasks[t];
        double seconds = 0.0;
        if (task->shape != shape) { /* the profiler makes the shape's communicators */
            seconds += speed->comm_create_s;
            e->setup_s += speed->comm_create_s;
            shape = task->shape;
        }
        double run_s = 0.0;
        DSI_TRY(task_seconds(task, config, speed, &run_s));
        seconds += run_s;
        seconds += speed->sync_s + checkpoint(db, speed, seconds, 1);
        e->task_s[t] = seconds;
        e->comm_s += seconds;
    }
    return DS_OK;
}

ds_status_t dsi_profile_estimate(const dsi_profile_plan_t *plan, const ds_measure_config_t *config,
                                 const dsi_profile_speed_t *speed, const unsigned char *task_reused,
                                 bool compute, bool comm, int64_t db_records,
                                 dsi_profile_estimate_t *estimate_p)
{
    ds_status_t status = DS_OK;
    dsi_profile_estimate_t e;
    memset(&e, 0, sizeof(e));
    DSI_TRY(dsi_measure_check_config(config));
    if (plan->num_ranks < 1)
        return DSI_ERROR(DS_ERR_INVALID_ARG, "the profiling plan is not assigned to ranks yet");
    DSI_TRY_GOTO(dsi_calloc(plan->num_units ? plan->num_units : 1, sizeof(double), &e.unit_s),
                 status, err);
    DSI_TRY_GOTO(dsi_calloc((size_t)plan->num_ranks, sizeof(double), &e.rank_s), status, err);
    DSI_TRY_GOTO(dsi_calloc(plan->num_tasks ? plan->num_tasks : 1, sizeof(double), &e.task_s),
                 status, err);
    db_model_t db = {db_records >= 0,
                     DSI_MAX(db_records, 0),
                     0,
                     0.0,
                     dsi_param_int(DSI_PARAM_DB_CHECKPOINT_EVENTS),
                     dsi_param_double(DSI_PARAM_DB_CHECKPOINT_SECONDS)};
    if (compute)
        DSI_TRY_GOTO(estimate_compute(plan, config, speed, &db, &e), status, err);
    if (e.round_s == NULL)
        DSI_TRY_GOTO(dsi_calloc(1, sizeof(double), &e.round_s), status, err);
    if (comm)
        DSI_TRY_GOTO(estimate_comm(plan, config, speed, task_reused, &db, &e), status, err);
    /* The final write: the database with everything, or rank 0's text files. */
    e.commit_s = db.present ? commit_seconds(speed, db.held + db.pending) : speed->commit_s;
    *estimate_p = e;
    return DS_OK;
err:
    dsi_profile_estimate_free(&e);
    return status;
}

void dsi_profile_estimate_free(dsi_profile_estimate_t *e)
{
    if (e == NULL)
        return;
    dsi_free(e->unit_s);
    dsi_free(e->rank_s);
    dsi_free(e->round_s);
    dsi_free(e->task_s);
    memset(e, 0, sizeof(*e));
}
