/*
 * The profiling run: plan on every rank, measure each rank's share of the
 * layer passes, then the communication tasks one at a time, checkpointing
 * the profile database at points every rank reaches together.
 *
 * Compute runs in rounds: in round i every rank measures its i-th pass
 * (passes are assigned longest first, so a round's passes are of similar
 * size), then the ranks agree on progress, stop requests and failures and
 * checkpoint.  A pass that cannot run here (too large for the device, an
 * operator the backend lacks) is reported and skipped; prediction then names
 * its events as missing.
 */
#include <dsmpi/profile.h>

#include <dsmpi/comm.h>

#include "dsi_mpi.h"
#include "dsi_profile.h"
#include "dsi_profile_run.h"
#include "events/dsi_events.h"
#include "model/dsi_model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

struct ds_profiler {
    MPI_Comm comm;
    int rank, size;
    ds_profile_options_t options;
    char *db_path;
    ds_backend_t *backend;
    ds_profile_db_t *db;        /* NULL: no database, the text outputs instead */
    ds_cost_table_t *measured;  /* without a database: this rank's event costs */
    ds_comm_samples_t *samples; /* ... and communication samples */
    ds_allocation_t allocation;
    int *node_of_rank;
    dsi_profile_plan_t *plan;
    unsigned char *task_reused;
    ds_device_spec_t device_spec;
    char source_tag[64];
    double *rank_predicted_s;
    double *rank_busy_s;
    bool planned;
    long long failed_units, failed_tasks; /* this rank's measurements that failed */
    char first_failure[256];
    ds_measure_config_t config;
    dsi_profile_speed_t speed; /* calibrated once, at the first plan */
    bool calibrated;
    dsi_profile_estimate_t estimate; /* of the last plan */
};

void ds_profile_options_init(ds_profile_options_t *options)
{
    memset(options, 0, sizeof(*options));
    options->backend = ds_backend_kind_default();
    options->sweep_min_bytes = dsi_param_int(DSI_PARAM_PROFILE_SWEEP_MIN);
    options->sweep_max_bytes = dsi_param_int(DSI_PARAM_PROFILE_SWEEP_MAX);
    options->progress = 1;
}

void ds_fingerprint_source_tag(const char *fingerprint, char *tag, size_t size)
{
    /* Samples carry 64 characters of source: a readable head and a hash of the rest. */
    char head[24];
    snprintf(head, sizeof(head), "%s", fingerprint);
    for (char *c = head; *c; c++)
        if (*c == ' ' || *c == ',' || *c == '|')
            *c = '_';
    snprintf(tag, size, "%s#%016llx", head,
             (unsigned long long)dsi_hash64(fingerprint, strlen(fingerprint), 11));
}

void ds_profiler_destroy(ds_profiler_t *p)
{
    if (p == NULL)
        return;
    ds_profile_db_close(p->db);
    ds_cost_table_destroy(p->measured);
    ds_comm_samples_destroy(p->samples);
    ds_backend_close(p->backend);
    dsi_profile_plan_destroy(p->plan);
    dsi_profile_estimate_free(&p->estimate);
    dsi_free(p->node_of_rank);
    dsi_free(p->task_reused);
    dsi_free(p->rank_predicted_s);
    dsi_free(p->rank_busy_s);
    dsi_free(p->db_path);
    if (p->comm != MPI_COMM_NULL)
        MPI_Comm_free(&p->comm);
    dsi_free(p);
}

/* DS_COMM_FAKE_NODES=N (tests): every N consecutive ranks on a node of
 * their own, as the backend places the members of a communicator (the same
 * nodes for N = 1), so that one machine plans as several nodes. */
static void fake_nodes(ds_profiler_t *p)
{
    int64_t fake = dsi_param_int(DSI_PARAM_COMM_FAKE_NODES);
    if (fake <= 0)
        return;
    int per_node = (int)DSI_MIN(fake, (int64_t)p->size);
    for (int r = 0; r < p->size; r++)
        p->node_of_rank[r] = r / per_node;
    p->allocation.num_nodes = (p->size + per_node - 1) / per_node;
    p->allocation.max_local_size = per_node;
    p->allocation.min_local_size = p->size % per_node ? p->size % per_node : per_node;
}

ds_status_t ds_profiler_create(MPI_Comm comm, const ds_profile_options_t *options,
                               ds_profiler_t **profiler_p)
{
    ds_status_t status;
    ds_profiler_t *p = NULL;
    bool text_only = options->db_path == NULL || options->db_path[0] == '\0';
    if (text_only && options->costs_out == NULL && options->comm_samples_out == NULL)
        return DSI_ERROR(DS_ERR_INVALID_ARG,
                         "no profile database given (accepted: --profile-db FILE.h5, "
                         "or text files: --costs-out FILE, --comm-samples-out FILE)");
    if (text_only && options->num_fallbacks > 0)
        return DSI_ERROR(DS_ERR_INVALID_ARG, "site databases are read with a profile database "
                                             "(accepted: --site-db with --profile-db FILE.h5)");
    if (options->compute_only && options->comm_only)
        return DSI_ERROR(DS_ERR_INVALID_ARG,
                         "compute only and communication only at once (accepted: one of them)");
    if (options->sweep_min_bytes < 1 || options->sweep_max_bytes < options->sweep_min_bytes ||
        options->sweep_max_bytes > DS_PROFILE_SWEEP_LIMIT)
        return DSI_ERROR(DS_ERR_INVALID_ARG,
                         "communication sweep %lld..%lld bytes (accepted: 1 <= min <= max <= 1TiB)",
                         (long long)options->sweep_min_bytes, (long long)options->sweep_max_bytes);
    DSI_TRY(dsi_calloc(1, sizeof(*p), &p));
    p->comm = MPI_COMM_NULL;
    p->options = *options;
    DSI_TRY_GOTO(dsi_strdup(text_only ? "" : options->db_path, &p->db_path), status, err);
    p->options.db_path = text_only ? NULL : p->db_path;
    DSI_TRY_GOTO(dsi_mpi_dup(comm, &p->comm), status, err);
    DSI_MPI_TRY_GOTO(MPI_Comm_rank(p->comm, &p->rank), status, err);
    DSI_MPI_TRY_GOTO(MPI_Comm_size(p->comm, &p->size), status, err);
    DSI_TRY_GOTO(ds_allocation_detect(p->comm, &p->allocation), status, err);
    DSI_TRY_GOTO(dsi_calloc((size_t)p->size, sizeof(int), &p->node_of_rank), status, err);
    DSI_MPI_TRY_GOTO(
        MPI_Allgather(&p->allocation.node_index, 1, MPI_INT, p->node_of_rank, 1, MPI_INT, p->comm),
        status, err);
    fake_nodes(p);
    DSI_TRY_GOTO(dsi_calloc((size_t)p->size, sizeof(double), &p->rank_predicted_s), status, err);
    DSI_TRY_GOTO(dsi_calloc((size_t)p->size, sizeof(double), &p->rank_busy_s), status, err);
    DSI_TRY_GOTO(ds_backend_open(options->backend, p->comm, &p->backend), status, err);
    if (ds_device_spec_match(ds_backend_kind_name(ds_backend_kind(p->backend)),
                             ds_backend_device_name(p->backend), &p->device_spec) != DS_OK) {
        DSI_WARN("no specification for device '%s': estimates use h100-sxm's",
                 ds_backend_device_name(p->backend));
        ds_device_spec_lookup("h100-sxm", &p->device_spec);
    }
    ds_fingerprint_source_tag(ds_backend_fingerprint(p->backend), p->source_tag,
                              sizeof(p->source_tag));
    if (text_only) {
        DSI_TRY_GOTO(ds_cost_table_create(&p->measured), status, err);
        DSI_TRY_GOTO(ds_comm_samples_create(&p->samples), status, err);
    } else {
        DSI_TRY_GOTO(ds_profile_db_open(p->comm, p->db_path, 0, &p->db), status, err);
        for (size_t i = 0; i < options->num_fallbacks; i++)
            DSI_TRY_GOTO(ds_profile_db_add_fallback(p->db, options->fallback_dbs[i]), status, err);
        DSI_TRY_GOTO(
            ds_profile_db_set_run_info(p->db, ds_backend_kind_name(ds_backend_kind(p->backend)),
                                       ds_backend_device_name(p->backend), options->command_line),
            status, err);
    }
    DSI_TRY_GOTO(dsi_profile_plan_create(&p->plan), status, err);
    ds_measure_config_default(&p->config);
    p->options.fallback_dbs = NULL; /* not kept: the database holds them */
    *profiler_p = p;
    return DS_OK;
err:
    ds_profiler_destroy(p);
    return status;
}

ds_status_t ds_profiler_add(ds_profiler_t *p, const ds_model_t *model,
                            const ds_strategy_t *strategy, const ds_cluster_t *target)
{
    p->planned = false;
    return dsi_profile_plan_add(p->plan, model, strategy, target);
}

const char *ds_profiler_fingerprint(const ds_profiler_t *p)
{
    return ds_backend_fingerprint(p->backend);
}

const char *ds_profiler_source_tag(const ds_profiler_t *p)
{
    return p->source_tag;
}

const char *ds_profiler_device_name(const ds_profiler_t *p)
{
    return ds_backend_device_name(p->backend);
}

ds_backend_t *ds_profiler_backend(ds_profiler_t *p)
{
    return p->backend;
}

ds_profile_db_t *ds_profiler_db(ds_profiler_t *p)
{
    return p->db;
}

const int *ds_profiler_node_of_rank(const ds_profiler_t *p)
{
    return p->node_of_rank;
}

const double *ds_profiler_rank_predicted_s(const ds_profiler_t *p)
{
    return p->rank_predicted_s;
}

const double *ds_profiler_rank_busy_s(const ds_profiler_t *p)
{
    return p->rank_busy_s;
}

/* ---- plan ----------------------------------------------------------------------------------- */

static bool same_sample(const ds_comm_sample_t *a, const ds_comm_sample_t *b)
{
    return a->op == b->op && a->dtype == b->dtype && a->bytes == b->bytes &&
           a->group_size == b->group_size && a->nodes == b->nodes &&
           a->ranks_per_node == b->ranks_per_node && a->concurrency == b->concurrency &&
           a->batched == b->batched && a->span_nodes == b->span_nodes;
}

static const char *const coverage_names[] = {"measured", "fitted", "assumed"};

const char *ds_coverage_name(ds_coverage_t coverage)
{
    return (unsigned)coverage < 3 ? coverage_names[coverage] : "?";
}

static ds_coverage_t coverage_of(const ds_profiler_t *p, const ds_event_key_t *key)
{
    const dsi_profile_plan_t *plan = p->plan;
    if (key->op == DS_COMM_PS_PUSH || key->op == DS_COMM_PS_PULL)
        return DS_COVERAGE_FITTED; /* from point-to-point measurements */
    ds_coverage_t best = DS_COVERAGE_ASSUMED;
    for (size_t t = 0; t < plan->num_tasks && !p->options.compute_only; t++) {
        const ds_comm_sample_t *s = &plan->tasks[t].sample;
        if (s->op != (ds_comm_op_t)key->op || s->dtype != (ds_dtype_t)key->dtype)
            continue;
        if ((s->nodes > 1) != (key->nodes > 1))
            continue; /* another network level */
        if (s->bytes == key->dims[0] && s->group_size == key->group_size &&
            s->nodes == key->nodes && s->ranks_per_node == key->ranks_per_node)
            return DS_COVERAGE_MEASURED;
        best = DS_COVERAGE_FITTED;
    }
    return best;
}

size_t ds_profiler_comm_key_count(const ds_profiler_t *p)
{
    size_t n = 0;
    for (size_t i = 0; i < ds_event_set_size(p->plan->events); i++)
        n += ds_event_set_at(p->plan->events, i)->key.kind == DS_EVENT_COMM;
    return n;
}

ds_status_t ds_profiler_comm_key_at(const ds_profiler_t *p, size_t index,
                                    const ds_event_key_t **key_p, ds_coverage_t *coverage_p,
                                    int64_t *count_p)
{
    for (size_t i = 0; i < ds_event_set_size(p->plan->events); i++) {
        const ds_event_t *e = ds_event_set_at(p->plan->events, i);
        if (e->key.kind != DS_EVENT_COMM || index-- > 0)
            continue;
        *key_p = &e->key;
        *coverage_p = coverage_of(p, &e->key);
        *count_p = e->count;
        return DS_OK;
    }
    return DSI_ERROR(DS_ERR_INVALID_ARG, "communication key index out of range");
}

/* Expected duration of the measurements (estimate.c): the loop's rules on
 * the calibrated speeds, rounds, tasks and the database's writes.  The
 * calibration is collective; what follows it is local, and every rank
 * learns whether it failed anywhere. */
static ds_status_t estimate_wall(ds_profiler_t *p)
{
    ds_cluster_t here;
    DSI_TRY(ds_cluster_init(&here, DSI_MAX(p->allocation.num_nodes, 1),
                            DSI_MAX(p->allocation.max_local_size, 1), p->device_spec.name));
    here.device = p->device_spec;
    if (!p->calibrated) {
        /* Calibrate only what is left to measure: a rerun that reuses the
         * whole database costs no second of probes. */
        size_t tasks_left = p->plan->num_tasks;
        for (size_t t = 0; p->task_reused != NULL && t < p->plan->num_tasks; t++)
            tasks_left -= p->task_reused[t] ? 1 : 0;
        dsi_profile_speed_init(&p->speed, &here);
        p->speed.comm_library = ds_backend_kind(p->backend) == DS_BACKEND_CUDA
                                    ? DS_COMM_LIBRARY_NCCL
                                    : DS_COMM_LIBRARY_OMPI;
        DSI_TRY(dsi_profile_calibrate(p->backend, p->comm, p->plan,
                                      !p->options.comm_only && p->plan->units_to_measure > 0,
                                      !p->options.compute_only && tasks_left > 0, &p->speed));
        p->calibrated = true;
    }
    p->speed.here = here;
    ds_status_t local = dsi_profile_plan_buffers(p->plan, p->backend);
    int64_t records = p->db != NULL ? (int64_t)ds_profile_db_num_records(p->db) : -1;
    dsi_profile_estimate_free(&p->estimate);
    if (local == DS_OK)
        local = dsi_profile_estimate(p->plan, &p->config, &p->speed, p->task_reused,
                                     !p->options.comm_only, !p->options.compute_only, records,
                                     &p->estimate);
    DSI_TRY(dsi_mpi_agree(p->comm, local));
    for (int r = 0; r < p->size; r++)
        p->rank_predicted_s[r] = p->estimate.rank_s[r];
    return DS_OK;
}

static void summarize_plan(ds_profiler_t *p, ds_profile_summary_t *s)
{
    const dsi_profile_plan_t *plan = p->plan;
    memset(s, 0, sizeof(*s));
    s->ranks = p->size;
    s->nodes = p->allocation.num_nodes;
    s->units = plan->num_units;
    s->units_measured = plan->units_to_measure;
    s->units_reused = plan->units_reused;
    for (size_t i = 0; i < ds_event_set_size(plan->events); i++) {
        const ds_event_t *e = ds_event_set_at(plan->events, i);
        if (e->key.kind == DS_EVENT_COMPUTE)
            s->compute_keys++;
        else
            s->comm_keys++;
        s->target_events += e->count;
    }
    s->comm_tasks = p->options.compute_only ? 0 : plan->num_tasks;
    for (size_t t = 0; t < s->comm_tasks; t++)
        s->comm_tasks_reused += p->task_reused[t];
    for (int r = 0; r < p->size; r++)
        s->predicted_max_rank_s = DSI_MAX(s->predicted_max_rank_s, plan->rank_load_s[r]);
    for (size_t i = 0; i < ds_event_set_size(plan->events); i++) {
        const ds_event_key_t *key = &ds_event_set_at(plan->events, i)->key;
        if (key->kind != DS_EVENT_COMM)
            continue;
        switch (coverage_of(p, key)) {
        case DS_COVERAGE_MEASURED: s->comm_keys_measured++; break;
        case DS_COVERAGE_FITTED: s->comm_keys_fitted++; break;
        case DS_COVERAGE_ASSUMED: s->comm_keys_assumed++; break;
        }
    }
    s->estimated_compute_s = p->estimate.compute_s;
    s->estimated_comm_s = p->estimate.comm_s;
    s->estimated_setup_s = p->estimate.setup_s;
    s->estimated_commit_s = p->estimate.commit_s;
    s->estimated_wall_s = s->estimated_compute_s + s->estimated_comm_s + s->estimated_commit_s;
    s->compute_rounds = p->estimate.num_rounds;
    s->calibrated = p->speed.calibrated;
    s->compute_factor = p->speed.default_factor;
    s->comm_factor = p->speed.comm_factor;
    s->sync_s = p->speed.sync_s;
    s->cpu_share = p->speed.cpu_share;
}

/* What the database already holds, and the plan's assignment: local work
 * that may fail on one rank alone. */
static ds_status_t plan_locally(ds_profiler_t *p)
{
    ds_status_t status;
    ds_cost_table_t *measured = NULL;
    ds_comm_sample_t *samples = NULL;
    size_t num_samples = 0;
    DSI_TRY(ds_cost_table_create(&measured));
    if (!p->options.reprofile && p->db != NULL)
        DSI_TRY_GOTO(
            ds_profile_db_fill_costs(p->db, ds_backend_fingerprint(p->backend), measured, NULL),
            status, out);
    DSI_TRY_GOTO(dsi_profile_plan_assign(p->plan, p->size, p->node_of_rank,
                                         p->options.reprofile ? NULL : measured, &p->device_spec,
                                         p->options.sweep_min_bytes, p->options.sweep_max_bytes),
                 status, out);
    dsi_free(p->task_reused);
    p->task_reused = NULL;
    DSI_TRY_GOTO(dsi_calloc(p->plan->num_tasks ? p->plan->num_tasks : 1, 1, &p->task_reused),
                 status, out);
    if (!p->options.reprofile && p->db != NULL) {
        DSI_TRY_GOTO(ds_profile_db_get_comm_samples(p->db, p->source_tag, &samples, &num_samples),
                     status, out);
        for (size_t t = 0; t < p->plan->num_tasks; t++)
            for (size_t i = 0; i < num_samples && !p->task_reused[t]; i++)
                p->task_reused[t] = same_sample(&p->plan->tasks[t].sample, &samples[i]);
    }
out:
    ds_comm_samples_free(samples);
    ds_cost_table_destroy(measured);
    return status;
}

ds_status_t ds_profiler_plan(ds_profiler_t *p, ds_profile_summary_t *summary)
{
    /* The calibration that follows is collective. */
    DSI_TRY(dsi_mpi_agree(p->comm, plan_locally(p)));
    DSI_TRY(estimate_wall(p));
    p->planned = true;
    ds_profile_summary_t local;
    summarize_plan(p, summary != NULL ? summary : &local);
    return DS_OK;
}

/* ---- measuring ------------------------------------------------------------------------------ */

/* The backend's linear histogram, moved into the store's log-spaced bins by
 * bin centre (the samples themselves are not kept). */
static void convert_histogram(const ds_measurement_t *m, ds_cost_histogram_t *h)
{
    memset(h, 0, sizeof(*h));
    if (m->cost.repetitions <= 0 || !(m->max_s > 0))
        return;
    h->min_s = m->min_s;
    h->max_s = m->max_s;
    double width = (m->hist_hi_s - m->hist_lo_s) / DS_HIST_BINS;
    double ratio = m->min_s > 0 && m->max_s > m->min_s ? log(m->max_s / m->min_s) : 0.0;
    for (int i = 0; i < DS_HIST_BINS; i++) {
        if (m->hist[i] <= 0)
            continue;
        double centre = m->hist_lo_s + (i + 0.5) * width;
        int bin = 0;
        if (ratio > 0 && centre > m->min_s)
            bin = (int)(DS_COST_HISTOGRAM_BINS * log(centre / m->min_s) / ratio);
        bin = DSI_MAX(0, DSI_MIN(bin, DS_COST_HISTOGRAM_BINS - 1));
        h->counts[bin] += (uint32_t)m->hist[i];
    }
}

/* A unit that could not be measured or recorded: its events stay
 * unmeasured, and the profile reports it at the end (returns 0). */
static int unit_failed(ds_profiler_t *p, const dsi_unit_t *unit, const char *what)
{
    ds_log(DS_LOG_WARN, "cannot %s %s here: %s; its events stay unmeasured", what, unit->label,
           ds_last_error());
    if (p->failed_units++ == 0 && p->failed_tasks == 0)
        snprintf(p->first_failure, sizeof(p->first_failure), "%s: %s", unit->label,
                 ds_last_error());
    return 0;
}

/* Measures one unit; failures are reported, not fatal (returns 0/1 measured). */
static int measure_unit(ds_profiler_t *p, const dsi_unit_t *unit, double *busy_s)
{
    const ds_event_key_t *keys = &p->plan->keys[unit->first_key];
    ds_measurement_t total, per_op[DSI_MAX_LAYER_OPS];
    double start = dsi_now_s();
    ds_status_t status =
        ds_measure_layer(p->backend, keys, unit->num_keys, &p->config, &total, per_op);
    double took = dsi_now_s() - start;
    *busy_s += took;
    if (status == DS_OK)
        DSI_DEBUG("%s: %.3f s, expected %.3f s (prepared in %.3f s; %lld runs of mean %.4f s, %s)",
                  unit->label, took, p->estimate.unit_s[unit - p->plan->units], took - total.wall_s,
                  (long long)total.cost.repetitions, total.cost.mean_s,
                  ds_stop_reason_name(total.stop));
    if (status != DS_OK)
        return unit_failed(p, unit, "measure");
    const char *fingerprint = ds_backend_fingerprint(p->backend);
    for (size_t i = 0; i < unit->num_keys; i++) {
        if (per_op[i].cost.repetitions <= 0)
            continue;
        ds_cost_histogram_t histogram;
        convert_histogram(&per_op[i], &histogram);
        status = p->db != NULL
                     ? ds_profile_db_add(p->db, fingerprint, &keys[i], &per_op[i].cost, &histogram)
                     : ds_cost_table_set(p->measured, &keys[i], &per_op[i].cost);
        if (status != DS_OK)
            return unit_failed(p, unit, "record");
    }
    return 1;
}

/* Every rank learns whether any rank was asked to stop or failed, and how
 * many units are done; then the database is checkpointed. */
static ds_status_t agree(ds_profiler_t *p, int *stop_p, long long *done_p)
{
    ds_status_t status = DS_OK;
    long long local[2] = {dsi_stop_requested() ? 1 : 0, *done_p}, global[2] = {0, 0};
    DSI_MPI_TRY_GOTO(MPI_Allreduce(local, global, 2, MPI_LONG_LONG, MPI_SUM, p->comm), status, out);
    *stop_p = global[0] > 0;
    *done_p = global[1];
    if (p->db != NULL)
        DSI_TRY(ds_profile_db_checkpoint(p->db, NULL));
out:
    return status;
}

static ds_status_t run_compute(ds_profiler_t *p, int *stop_p, double *busy_s)
{
    const dsi_profile_plan_t *plan = p->plan;
    /* This rank's units in assignment order (largest first). */
    size_t mine = 0, *order = NULL;
    DSI_TRY(dsi_calloc(plan->num_units ? plan->num_units : 1, sizeof(size_t), &order));
    for (size_t u = 0; u < plan->num_units; u++)
        if (plan->units[u].rank == p->rank)
            order[mine++] = u;
    /* Sort by estimate, descending, as the assignment did. */
    for (size_t i = 1; i < mine; i++)
        for (size_t j = i;
             j > 0 && plan->units[order[j]].estimate_s > plan->units[order[j - 1]].estimate_s;
             j--) {
            size_t t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    ds_status_t status = DS_OK;
    long long rounds = (long long)mine, all_rounds = 0, measured_here = 0;
    DSI_MPI_TRY_GOTO(MPI_Allreduce(&rounds, &all_rounds, 1, MPI_LONG_LONG, MPI_MAX, p->comm),
                     status, out);
    dsi_progress_t progress;
    dsi_progress_start(&progress, "profiling layer passes", plan->units_to_measure,
                       p->estimate.compute_s, p->options.progress && p->rank == 0);
    double expected = 0.0;
    for (long long round = 0; round < all_rounds && !*stop_p; round++) {
        if ((size_t)round < mine)
            measured_here += measure_unit(p, &plan->units[order[round]], busy_s);
        long long done = (long long)DSI_MIN((size_t)round + 1, mine);
        DSI_TRY_GOTO(agree(p, stop_p, &done), status, out);
        if ((size_t)round < p->estimate.num_rounds)
            expected += p->estimate.round_s[round];
        dsi_progress_step(&progress, (size_t)done, expected);
    }
    dsi_progress_finish(&progress);
out:
    dsi_free(order);
    return status;
}

/* Communicators of one group shape: this rank's group (if any). */
typedef struct shape_comm {
    int shape;
    MPI_Comm mpi;
    ds_comm_t *comm;
    int group;    /* this rank's group in the shape, -1 = not a member */
    int position; /* this rank's place in it */
} shape_comm_t;

static void shape_comm_free(shape_comm_t *sc)
{
    ds_comm_destroy(sc->comm);
    sc->comm = NULL;
    if (sc->mpi != MPI_COMM_NULL)
        MPI_Comm_free(&sc->mpi);
    sc->mpi = MPI_COMM_NULL;
    sc->shape = -1;
}

static ds_status_t shape_comm_make(ds_profiler_t *p, int shape, shape_comm_t *sc)
{
    ds_status_t status = DS_OK;
    const dsi_group_shape_t *s = &p->plan->shapes[shape];
    sc->shape = shape;
    sc->group = -1;
    sc->position = 0;
    for (int g = 0; g < s->num_groups; g++)
        for (int i = 0; i < s->size; i++)
            if (s->ranks[g * s->size + i] == p->rank) {
                sc->group = g;
                sc->position = i;
            }
    DSI_MPI_TRY_GOTO(
        MPI_Comm_split(p->comm, sc->group >= 0 ? sc->group : MPI_UNDEFINED, sc->position, &sc->mpi),
        status, out);
    if (sc->group >= 0)
        DSI_TRY(ds_comm_create(p->backend, sc->mpi, &sc->comm));
out:
    return status;
}

static ds_status_t run_comm(ds_profiler_t *p, int *stop_p, double *busy_s)
{
    ds_status_t status = DS_OK;
    const dsi_profile_plan_t *plan = p->plan;
    shape_comm_t sc = {-1, MPI_COMM_NULL, NULL, -1, 0};
    size_t todo = 0;
    for (size_t t = 0; t < plan->num_tasks; t++)
        todo += !p->task_reused[t];
    dsi_progress_t progress;
    dsi_progress_start(&progress, "profiling communication", todo, p->estimate.comm_s,
                       p->options.progress && p->rank == 0);
    size_t done = 0;
    double expected = 0.0;
    for (size_t t = 0; t < plan->num_tasks && !*stop_p; t++) {
        if (p->task_reused[t])
            continue;
        const dsi_comm_task_t *task = &plan->tasks[t];
        if (sc.shape != task->shape) {
            shape_comm_free(&sc);
            double start = dsi_now_s();
            DSI_TRY_GOTO(shape_comm_make(p, task->shape, &sc), status, out);
            DSI_DEBUG("communicators of shape %d (%d x %d ranks): %.3f s", task->shape,
                      plan->shapes[task->shape].num_groups, plan->shapes[task->shape].size,
                      dsi_now_s() - start);
        }
        if (sc.comm != NULL) {
            ds_event_key_t key;
            memset(&key, 0, sizeof(key));
            key.kind = DS_EVENT_COMM;
            key.op = (uint8_t)task->sample.op;
            key.dtype = (uint8_t)task->sample.dtype;
            key.group_size = task->sample.group_size;
            key.flags = task->sample.batched ? DS_COMM_FLAG_BATCHED : 0;
            key.dims[0] = task->sample.bytes;
            ds_comm_measurement_t m;
            double start = dsi_now_s();
            status = ds_comm_measure(sc.comm, &key, &p->config, &m);
            double took = dsi_now_s() - start;
            *busy_s += took;
            if (status == DS_OK)
                DSI_DEBUG("%s of %lld bytes on %d ranks: %.3f s, expected %.3f s (loop %.3f s; "
                          "%lld runs of median %.3g s, %s)",
                          ds_comm_op_name(task->sample.op), (long long)task->sample.bytes,
                          task->sample.group_size, took, p->estimate.task_s[t], m.cost.wall_s,
                          (long long)m.cost.cost.repetitions, m.cost.cost.median_s,
                          ds_stop_reason_name(m.cost.stop));
            if (status != DS_OK) {
                ds_log(DS_LOG_WARN, "cannot measure %s of %lld bytes on %d ranks: %s",
                       ds_comm_op_name(task->sample.op), (long long)task->sample.bytes,
                       task->sample.group_size, ds_last_error());
                if (p->failed_tasks++ == 0 && p->failed_units == 0)
                    snprintf(p->first_failure, sizeof(p->first_failure), "%s of %lld bytes: %s",
                             ds_comm_op_name(task->sample.op), (long long)task->sample.bytes,
                             ds_last_error());
            } else if (sc.group == 0 && sc.position == 0) {
                ds_comm_sample_t sample = m.sample;
                sample.concurrency = task->num_groups;
                sample.provenance = DS_PROV_MEASURED;
                snprintf(sample.source, sizeof(sample.source), "%s", p->source_tag);
                if (p->db != NULL)
                    DSI_TRY_GOTO(ds_profile_db_add_comm_samples(p->db, &sample, 1), status, out);
                else
                    DSI_TRY_GOTO(ds_comm_samples_add(p->samples, &sample, 1), status, out);
            }
            status = DS_OK;
        }
        long long ignored = (long long)++done; /* every rank counts the same tasks */
        DSI_TRY_GOTO(agree(p, stop_p, &ignored), status, out);
        expected += p->estimate.task_s[t];
        dsi_progress_step(&progress, done, expected);
    }
    dsi_progress_finish(&progress);
out:
    shape_comm_free(&sc);
    return status;
}

/* Writes `text` to `path` through a temporary file renamed over it. */
static ds_status_t write_file(const char *path, const char *text, size_t size)
{
    char tmp[4096];
    if ((size_t)snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= sizeof(tmp))
        return DSI_ERROR(DS_ERR_INVALID_ARG, "output path '%s' is too long", path);
    FILE *out = fopen(tmp, "w");
    if (out == NULL)
        return DSI_ERROR(DS_ERR_IO, "cannot write %s", tmp);
    bool ok = fwrite(text, 1, size, out) == size;
    ok = fclose(out) == 0 && ok;
    if (!ok || rename(tmp, path) != 0) {
        remove(tmp);
        return DSI_ERROR(DS_ERR_IO, "cannot write %s", path);
    }
    return DS_OK;
}

/* Text of `write` applied to an in-memory stream, with a comment line first. */
typedef ds_status_t (*text_writer_t)(const void *what, size_t count, FILE *out);

static ds_status_t write_costs(const void *what, size_t count, FILE *out)
{
    (void)count;
    return ds_cost_table_write_text(what, out);
}

static ds_status_t write_samples(const void *what, size_t count, FILE *out)
{
    return ds_comm_samples_write_text(what, count, out);
}

static ds_status_t write_text(const ds_profiler_t *p, const char *path, text_writer_t writer,
                              const void *what, size_t count)
{
    char *text = NULL;
    size_t size = 0;
    FILE *out = open_memstream(&text, &size);
    if (out == NULL)
        return DSI_ERROR(DS_ERR_NO_MEMORY, "cannot buffer %s", path);
    fprintf(out, "# measured by dsmpi profile on %d ranks of %s\n", p->size,
            ds_backend_fingerprint(p->backend));
    ds_status_t status = writer(what, count, out);
    if (fclose(out) != 0 && status == DS_OK)
        status = DSI_ERROR(DS_ERR_NO_MEMORY, "cannot buffer %s", path);
    if (status == DS_OK)
        status = write_file(path, text, size);
    free(text);
    return status;
}

/* Gathers `bytes` bytes of every rank on rank 0 (*all_p, NUL-terminated,
 * *total_p bytes; NULL elsewhere).  Collective. */
static ds_status_t gather_bytes(const ds_profiler_t *p, const void *data, size_t bytes,
                                char **all_p, size_t *total_p)
{
    ds_status_t status = DS_OK;
    int *lengths = NULL, *offsets = NULL, failed = 0;
    char *all = NULL;
    long long total = 0;
    int length = bytes < (size_t)INT32_MAX ? (int)bytes : -1;
    if (p->rank == 0) {
        DSI_TRY_GOTO(dsi_calloc((size_t)p->size, sizeof(int), &lengths), status, agree);
        DSI_TRY_GOTO(dsi_calloc((size_t)p->size, sizeof(int), &offsets), status, agree);
    }
agree:
    failed = status != DS_OK;
    DSI_MPI_TRY_GOTO(MPI_Bcast(&failed, 1, MPI_INT, 0, p->comm), status, out);
    if (failed) {
        status = status != DS_OK ? status : DSI_ERROR(DS_ERR_NO_MEMORY, "rank 0 is out of memory");
        goto out;
    }
    DSI_MPI_TRY_GOTO(MPI_Gather(&length, 1, MPI_INT, lengths, 1, MPI_INT, 0, p->comm), status, out);
    if (p->rank == 0) {
        for (int r = 0; r < p->size && !failed; r++) {
            failed = lengths[r] < 0;
            offsets[r] = (int)total;
            total += lengths[r];
        }
        failed = failed || total >= INT32_MAX || dsi_malloc((size_t)total + 1, &all) != DS_OK;
    }
    DSI_MPI_TRY_GOTO(MPI_Bcast(&failed, 1, MPI_INT, 0, p->comm), status, out);
    if (failed) {
        status = DSI_ERROR(DS_ERR_OVERFLOW, "the measurements do not fit in one message to rank 0");
        goto out;
    }
    DSI_MPI_TRY_GOTO(
        MPI_Gatherv(data, length, MPI_BYTE, all, lengths, offsets, MPI_BYTE, 0, p->comm), status,
        out);
    if (p->rank == 0) {
        all[total] = '\0';
        *all_p = all;
        *total_p = (size_t)total;
        all = NULL;
    }
out:
    dsi_free(all);
    dsi_free(lengths);
    dsi_free(offsets);
    return status;
}

/* Without a database: every rank's costs and samples to rank 0, which
 * writes the text outputs.  Collective; every rank returns rank 0's status. */
static ds_status_t write_text_outputs(ds_profiler_t *p)
{
    ds_status_t status = DS_OK;
    char *text = NULL, *costs = NULL, *samples = NULL;
    size_t size = 0, costs_size = 0, samples_size = 0;
    ds_cost_table_t *merged = NULL;
    /* Costs travel in the cost table's own text form. */
    FILE *mem = open_memstream(&text, &size);
    if (mem == NULL)
        return DSI_ERROR(DS_ERR_NO_MEMORY, "cannot buffer the measured costs");
    status = ds_cost_table_write_text(p->measured, mem);
    fclose(mem);
    DSI_TRY_GOTO(status, status, out);
    DSI_TRY_GOTO(gather_bytes(p, text, size, &costs, &costs_size), status, out);
    DSI_TRY_GOTO(gather_bytes(p, ds_comm_samples_data(p->samples),
                              ds_comm_samples_size(p->samples) * sizeof(ds_comm_sample_t), &samples,
                              &samples_size),
                 status, out);
    if (p->rank == 0) {
        DSI_TRY_GOTO(ds_cost_table_create(&merged), status, out);
        DSI_TRY_GOTO(ds_cost_table_parse(merged, costs, "measured costs"), status, out);
        if (p->options.costs_out != NULL)
            DSI_TRY_GOTO(write_text(p, p->options.costs_out, write_costs, merged, 0), status, out);
        if (p->options.comm_samples_out != NULL)
            DSI_TRY_GOTO(write_text(p, p->options.comm_samples_out, write_samples, samples,
                                    samples_size / sizeof(ds_comm_sample_t)),
                         status, out);
    }
out:;
    int verdict = status;
    if (MPI_Bcast(&verdict, 1, MPI_INT, 0, p->comm) == MPI_SUCCESS && p->rank != 0 &&
        verdict != DS_OK)
        status = DSI_ERROR((ds_status_t)verdict, "rank 0 could not write the measurements");
    ds_cost_table_destroy(merged);
    free(text);
    dsi_free(costs);
    dsi_free(samples);
    return status;
}

ds_status_t ds_profiler_run(ds_profiler_t *p, ds_profile_summary_t *summary)
{
    ds_status_t status;
    double start = dsi_now_s(), busy_s = 0.0;
    int stop = 0;
    if (!p->planned)
        DSI_TRY(ds_profiler_plan(p, NULL));
    if (!p->options.comm_only)
        DSI_TRY(run_compute(p, &stop, &busy_s));
    double compute_end = dsi_now_s(), comm_busy_s = 0.0;
    if (!p->options.compute_only)
        DSI_TRY(run_comm(p, &stop, &comm_busy_s));
    double comm_end = dsi_now_s();
    status = p->db != NULL ? ds_profile_db_commit(p->db) : write_text_outputs(p);
    double commit_end = dsi_now_s();
    int gather = MPI_Gather(&busy_s, 1, MPI_DOUBLE, p->rank_busy_s, 1, MPI_DOUBLE, 0, p->comm);
    if (status == DS_OK && gather != MPI_SUCCESS)
        status = dsi_mpi_error(__FILE__, __LINE__, "MPI_Gather", gather);
    long long failed[2] = {p->failed_units, p->failed_tasks}, all_failed[2] = {0, 0};
    int reduce = MPI_Allreduce(failed, all_failed, 2, MPI_LONG_LONG, MPI_SUM, p->comm);
    if (status == DS_OK && reduce != MPI_SUCCESS)
        status = dsi_mpi_error(__FILE__, __LINE__, "MPI_Allreduce", reduce);
    if (summary != NULL) {
        summarize_plan(p, summary);
        summary->wall_s = commit_end - start;
        summary->compute_wall_s = compute_end - start;
        summary->comm_wall_s = comm_end - compute_end;
        summary->commit_wall_s = commit_end - comm_end;
        summary->interrupted = stop;
    }
    if (status != DS_OK)
        return status;
    if (all_failed[0] + all_failed[1] > 0) {
        char first[300] = "";
        if (p->first_failure[0])
            snprintf(first, sizeof(first), " (first: %s)", p->first_failure);
        return DSI_ERROR(DS_ERR_UNSUPPORTED,
                         "%lld layer passes and %lld communication tasks could not be measured "
                         "here%s; %s holds everything else",
                         all_failed[0], all_failed[1], first, p->db_path);
    }
    if (stop)
        return DSI_ERROR(DS_ERR_INTERRUPTED,
                         "profiling stopped on request; what was measured is saved in %s and a "
                         "rerun measures the rest",
                         p->db_path);
    return DS_OK;
}
