/* Validation: every case's costs measured here (or read from a profile
 * database), real runs with the executor until enough quiet ones, and the
 * simulator's prediction from each variant compared with them.  Every rank
 * runs the same steps; a step that may fail on one rank alone (memory, a
 * file, a prediction) is followed by a failure agreement before the next
 * collective. */
#include "dsi_exec.h"

#include <dsmpi/profile.h>
#include <dsmpi/store.h>

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const char *const variant_names[DS_VALIDATE_VARIANT_COUNT] = {
    "in-situ",     "operators-alone", "collectives-alone", "warm-caches",
    "rank-shares", "one-round",       "profile-db",        "overlap-free",
    "no-skew",     "equal-devices",   "blocking-buckets"};

const char *ds_validate_variant_name(ds_validate_variant_t variant)
{
    return (unsigned)variant < DS_VALIDATE_VARIANT_COUNT ? variant_names[variant] : "unknown";
}

void ds_validate_options_init(ds_validate_options_t *options)
{
    memset(options, 0, sizeof(*options));
    ds_exec_options_init(&options->exec);
    ds_exec_cost_options_init(&options->costs);
    options->repeats = 3;
    options->retries = 3;
    options->profile_backend = ds_backend_kind_default();
}

/* Variants predicted from the headline's costs with the simulator changed. */
static bool model_variant(ds_validate_variant_t v)
{
    return v == DS_VALIDATE_OVERLAP_FREE || v == DS_VALIDATE_NO_SKEW ||
           v == DS_VALIDATE_EQUAL_DEVICES;
}

typedef struct validation {
    MPI_Comm comm; /* duplicated, errors returned */
    int rank;
    int64_t ranks;
    ds_backend_t *backend;
    const ds_model_t *model;
    const ds_cluster_t *cluster;
    const ds_validate_options_t *options;
    ds_exec_options_t exec; /* the options' runs with the session's best probe */
    ds_cost_table_t *costs[DS_VALIDATE_VARIANT_COUNT];
    double *factors[DS_VALIDATE_VARIANT_COUNT]; /* each rank's speed factor, per variant */
    double *measured_factors;                   /* one measurement's, `ranks` entries */
    ds_sim_slow_device_t *devices;              /* `ranks` entries for the simulator */
    ds_sim_t *sim;
    ds_validate_result_t *result;
} validation_t;

static void notice(const validation_t *v, ds_validate_notice_t kind, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void notice(const validation_t *v, ds_validate_notice_t kind, const char *fmt, ...)
{
    if (v->rank != 0 || v->options->notice == NULL)
        return;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    v->options->notice(kind, line, v->options->notice_context);
}

static void saw_probe(validation_t *v, const ds_exec_load_t *load)
{
    double *best = &v->result->best_probe_s;
    if (load->probe_s > 0.0 && (*best == 0.0 || load->probe_s < *best))
        *best = load->probe_s;
}

/* Waits (up to wait_quiet_s) for a second without foreign load and a speed
 * probe within DS_EXEC_MAX_SLOWDOWN of the best.  Collective. */
static ds_status_t wait_quiet(validation_t *v)
{
    ds_status_t status = DS_OK;
    double start = MPI_Wtime();
    while (v->options->wait_quiet_s > 0.0) {
        ds_exec_options_t rules = v->options->exec;
        rules.reference_probe_s = v->result->best_probe_s;
        ds_exec_load_t load;
        DSI_TRY_GOTO(ds_exec_probe(v->backend, 1.0, &rules, &load), status, out);
        saw_probe(v, &load);
        /* Every rank decides as rank 0 does (its clock differs a little). */
        int go = !load.noisy || MPI_Wtime() - start >= v->options->wait_quiet_s;
        DSI_MPI_TRY_GOTO(MPI_Bcast(&go, 1, MPI_INT, 0, v->comm), status, out);
        if (go)
            break;
    }
out:
    return status;
}

/* Adds to `to` what it lacks of `from`.  Local. */
static ds_status_t copy_costs(const ds_cost_table_t *from, ds_cost_table_t *to)
{
    for (size_t i = 0; i < ds_cost_table_size(from); i++) {
        const ds_event_key_t *key;
        const ds_cost_t *cost;
        ds_cost_table_at(from, i, &key, &cost);
        if (ds_cost_table_find(to, key) == NULL)
            DSI_TRY(ds_cost_table_set(to, key, cost));
    }
    return DS_OK;
}

static void cost_options_of(const validation_t *v, ds_validate_variant_t variant,
                            ds_exec_cost_options_t *co)
{
    *co = v->options->costs;
    switch (variant) {
    case DS_VALIDATE_OPERATORS: co->compute = DS_EXEC_COSTS_OPERATOR; break;
    case DS_VALIDATE_ISOLATED: co->comm_in_situ = 0; break;
    case DS_VALIDATE_WARM_CACHES: co->rotate = 0; break;
    case DS_VALIDATE_RANK_SHARES: co->together = 0; break;
    case DS_VALIDATE_ONE_ROUND: co->rounds = 1; break;
    case DS_VALIDATE_BLOCKING_BUCKETS: co->issued = 0; break;
    case DS_VALIDATE_IN_SITU:
    case DS_VALIDATE_PROFILE_DB:
    case DS_VALIDATE_OVERLAP_FREE:
    case DS_VALIDATE_NO_SKEW:
    case DS_VALIDATE_EQUAL_DEVICES:
    case DS_VALIDATE_VARIANT_COUNT: break;
    }
    co->max_foreign = v->options->exec.max_foreign;
}

/* Keeps a measurement: its costs, and its speed factors when it had units
 * to compare the devices on (some factor other than 1).  Local. */
static ds_status_t keep_measurement(validation_t *v, ds_validate_variant_t variant,
                                    const ds_cost_table_t *fresh)
{
    bool compared = false;
    for (int64_t r = 0; r < v->ranks; r++)
        compared |= v->measured_factors[r] != 1.0;
    for (int64_t r = 0; r < v->ranks && compared; r++)
        v->factors[variant][r] = v->measured_factors[r];
    return copy_costs(fresh, v->costs[variant]);
}

/* Measures what the variant's table lacks for `s`, again while the machine
 * was noisy and retries are left.  Collective. */
static ds_status_t measure_variant(validation_t *v, const ds_strategy_t *s,
                                   ds_validate_variant_t variant, ds_exec_load_t *load_p)
{
    ds_status_t status = DS_OK;
    ds_exec_cost_options_t co;
    cost_options_of(v, variant, &co);
    for (int attempt = 0;; attempt++) {
        ds_cost_table_t *fresh = NULL;
        DSI_TRY(wait_quiet(v));
        co.reference_probe_s = v->result->best_probe_s;
        ds_status_t local = ds_cost_table_create(&fresh);
        if (local == DS_OK)
            local = copy_costs(v->costs[variant], fresh);
        status = dsi_mpi_agree(v->comm, local);
        if (status == DS_OK)
            status = ds_exec_measure_costs(v->backend, v->model, s, v->cluster, &co, fresh, load_p,
                                           v->measured_factors);
        if (status == DS_OK)
            saw_probe(v, load_p);
        bool again = status == DS_OK && load_p->noisy && attempt < v->options->retries;
        if (status == DS_OK && !again)
            status = dsi_mpi_agree(v->comm, keep_measurement(v, variant, fresh));
        ds_cost_table_destroy(fresh);
        if (!again)
            return status;
        notice(v, DS_VALIDATE_NOTICE_NOISY,
               "costs measured while other processes took %.1f%% of a core (steal %.1f%%, probe "
               "%.1f%% slower than the best): measuring again",
               100.0 * load_p->foreign_cpu, 100.0 * load_p->steal,
               100.0 * (load_p->probe_s / v->result->best_probe_s - 1.0));
    }
}

/* ---- costs from the profile database ------------------------------------------------------ */

/* One entry of a table as rank 0 sends it: every rank then holds the very
 * table rank 0 assembled (bands included). */
typedef struct packed_cost {
    ds_event_key_t key;
    ds_cost_t cost;
    double band_low, band_high;
} packed_cost_t;

/* Rank 0 reads the costs of `s`'s events on the allocation from the
 * database.  Local (rank 0). */
static ds_status_t assemble_database_costs(const validation_t *v, const ds_strategy_t *s,
                                           ds_cost_table_t *table)
{
    ds_status_t status = DS_OK;
    ds_profile_db_t *db = NULL;
    ds_event_set_t *events = NULL;
    DSI_TRY_GOTO(
        ds_profile_db_open(MPI_COMM_NULL, v->options->profile_db, DS_PROFILE_DB_READ_ONLY, &db),
        status, out);
    DSI_TRY_GOTO(ds_events_generate(v->model, s, v->cluster, &events), status, out);
    ds_cost_sources_t sources = {db, NULL, NULL, 0};
    ds_cost_report_t report;
    DSI_TRY_GOTO(ds_costs_assemble(&sources, events, v->cluster, table, &report), status, out);
out:
    ds_event_set_destroy(events);
    ds_profile_db_close(db);
    return status;
}

static ds_status_t pack_costs(const ds_cost_table_t *table, packed_cost_t **packed_p,
                              int64_t *count_p)
{
    size_t count = ds_cost_table_size(table);
    packed_cost_t *packed = NULL;
    DSI_TRY(dsi_calloc(count, sizeof(*packed), &packed));
    for (size_t i = 0; i < count; i++) {
        const ds_event_key_t *key;
        const ds_cost_t *cost;
        ds_cost_table_at(table, i, &key, &cost);
        packed[i].key = *key;
        packed[i].cost = *cost;
        ds_cost_table_band(table, key, &packed[i].band_low, &packed[i].band_high);
    }
    *packed_p = packed;
    *count_p = (int64_t)count;
    return DS_OK;
}

static ds_status_t unpack_costs(const packed_cost_t *packed, int64_t count, ds_cost_table_t *table)
{
    for (int64_t i = 0; i < count; i++) {
        DSI_TRY(ds_cost_table_set(table, &packed[i].key, &packed[i].cost));
        if (packed[i].band_low != 1.0 || packed[i].band_high != 1.0)
            DSI_TRY(ds_cost_table_set_band(table, &packed[i].key, packed[i].band_low,
                                           packed[i].band_high));
    }
    return DS_OK;
}

/* Rank 0 assembles the table, every rank gets it.  Collective. */
static ds_status_t database_costs(const validation_t *v, const ds_strategy_t *s,
                                  ds_cost_table_t *table)
{
    ds_status_t status = DS_OK, local = DS_OK;
    packed_cost_t *packed = NULL;
    int64_t count = 0;
    if (v->rank == 0) {
        local = assemble_database_costs(v, s, table);
        if (local == DS_OK)
            local = pack_costs(table, &packed, &count);
    }
    DSI_TRY_GOTO(dsi_mpi_agree(v->comm, local), status, out);
    DSI_MPI_TRY_GOTO(MPI_Bcast(&count, 1, MPI_INT64_T, 0, v->comm), status, out);
    if ((uint64_t)count > (uint64_t)INT32_MAX / sizeof(*packed))
        DSI_TRY_GOTO(
            DSI_ERROR(DS_ERR_OVERFLOW, "%lld costs are too many to send", (long long)count), status,
            out);
    if (v->rank != 0)
        local = dsi_calloc((size_t)count, sizeof(*packed), &packed);
    DSI_TRY_GOTO(dsi_mpi_agree(v->comm, local), status, out);
    DSI_MPI_TRY_GOTO(
        MPI_Bcast(packed, (int)((size_t)count * sizeof(*packed)), MPI_BYTE, 0, v->comm), status,
        out);
    if (v->rank != 0)
        local = unpack_costs(packed, count, table);
    DSI_TRY_GOTO(dsi_mpi_agree(v->comm, local), status, out);
out:
    dsi_free(packed);
    return status;
}

/* ---- one case ----------------------------------------------------------------------------- */

/* The simulator's prediction of `s` from the variant.  Local. */
static ds_status_t predict(validation_t *v, const ds_strategy_t *s, ds_validate_variant_t variant)
{
    ds_sim_options_t so;
    ds_sim_options_init(&so);
    so.mode = DS_SIM_FULL;
    bool factors = variant != DS_VALIDATE_EQUAL_DEVICES;
    if (variant == DS_VALIDATE_OVERLAP_FREE)
        so.overlap_interference = 0;
    if (variant == DS_VALIDATE_NO_SKEW)
        so.collective_skew = 0;
    if (model_variant(variant))
        variant = v->result->variants[0];
    /* Devices at their measured speed (this allocation is the target). */
    for (int64_t r = 0; r < v->ranks && factors; r++)
        v->devices[r] = (ds_sim_slow_device_t){r, v->factors[variant][r]};
    so.slow_devices = factors ? v->devices : NULL;
    so.num_slow_devices = factors ? (size_t)v->ranks : 0;
    return ds_sim_run(v->sim, v->model, s, v->cluster, v->costs[variant], &so);
}

/* Every variant's costs of the case that are not there yet.  Collective. */
static ds_status_t case_costs(validation_t *v, const ds_strategy_t *s, ds_validate_case_t *c)
{
    double t0 = MPI_Wtime();
    for (size_t i = 0; i < v->result->num_variants; i++) {
        ds_validate_variant_t variant = v->result->variants[i];
        if (model_variant(variant))
            continue; /* the headline's costs */
        ds_exec_load_t load;
        memset(&load, 0, sizeof(load));
        ds_status_t status = variant == DS_VALIDATE_PROFILE_DB
                                 ? database_costs(v, s, v->costs[variant])
                                 : measure_variant(v, s, variant, &load);
        if (i == 0)
            c->costs_load = load;
        if (status != DS_OK)
            return status;
    }
    c->costs_s = MPI_Wtime() - t0;
    return DS_OK;
}

/* Runs until `repeats` quiet ones, or the retries are spent.  Collective. */
static ds_status_t case_runs(validation_t *v, ds_exec_t *exec, ds_validate_case_t *c)
{
    const ds_validate_options_t *o = v->options;
    int quiet = 0;
    for (int attempt = 0; attempt < o->repeats + o->retries && quiet < o->repeats; attempt++) {
        DSI_TRY(wait_quiet(v));
        v->exec.reference_probe_s = v->result->best_probe_s;
        DSI_TRY(ds_exec_run(exec, &v->exec));
        ds_exec_summary_t sum;
        (void)ds_exec_get_summary(exec, ds_exec_run_count(exec) - 1, &sum);
        saw_probe(v, &sum.load);
        if (attempt == 0)
            c->first_run = sum;
        if (!sum.load.noisy)
            quiet++;
        else
            notice(v, DS_VALIDATE_NOTICE_NOISY,
                   "%s: run %d noisy (other processes took %.1f%% of a core, steal %.1f%%, probe "
                   "%.1f%% slower than the best)",
                   c->strategy_text, attempt + 1, 100.0 * sum.load.foreign_cpu,
                   100.0 * sum.load.steal,
                   100.0 * (sum.load.probe_s / v->result->best_probe_s - 1.0));
    }
    return DS_OK;
}

/* The last quiet run's trace, or the last run's.  Collective (rank 0 writes). */
static ds_status_t case_trace(const validation_t *v, const ds_exec_t *exec)
{
    size_t pick = ds_exec_run_count(exec) - 1;
    for (size_t r = 0; r < ds_exec_run_count(exec); r++) {
        ds_exec_summary_t sum;
        if (ds_exec_get_summary(exec, r, &sum) == DS_OK && !sum.load.noisy)
            pick = r;
    }
    return dsi_mpi_agree(v->comm, ds_exec_write_trace(exec, pick, v->options->trace));
}

static ds_status_t run_case(validation_t *v, const ds_strategy_t *s, ds_validate_case_t *c)
{
    ds_status_t status = DS_OK;
    ds_exec_t *exec = NULL;
    c->strategy = *s;
    ds_strategy_format(s, c->strategy_text, sizeof(c->strategy_text));
    c->microbatches = ds_strategy_num_microbatches(s);
    DSI_TRY(case_costs(v, s, c));
    DSI_TRY(ds_exec_create(v->backend, v->model, s, &exec));
    DSI_TRY_GOTO(case_runs(v, exec, c), status, out);
    /* Predictions and comparisons are each rank's own work. */
    ds_status_t local = DS_OK;
    for (size_t i = 0; i < v->result->num_variants && local == DS_OK; i++) {
        local = predict(v, s, v->result->variants[i]);
        if (local == DS_OK)
            local = ds_exec_compare(exec, v->sim, &c->comparisons[i]);
    }
    DSI_TRY_GOTO(dsi_mpi_agree(v->comm, local), status, out);
    if (v->options->trace != NULL)
        DSI_TRY_GOTO(case_trace(v, exec), status, out);
out:
    ds_exec_destroy(exec);
    return status;
}

/* ---- the session -------------------------------------------------------------------------- */

/* The profiler measures what the database lacks for every case (the union
 * of their events, once).  Collective. */
static ds_status_t profile_cases(const validation_t *v, MPI_Comm comm, const ds_strategy_t *cases,
                                 size_t num_cases)
{
    ds_status_t status = DS_OK;
    ds_profile_options_t po;
    ds_profile_options_init(&po);
    po.db_path = v->options->profile_db;
    po.backend = v->options->profile_backend;
    po.progress = v->options->profile_progress;
    po.command_line = v->options->command_line;
    ds_profiler_t *p = NULL;
    ds_profile_summary_t summary;
    DSI_TRY_GOTO(ds_profiler_create(comm, &po, &p), status, out);
    ds_status_t local = DS_OK;
    for (size_t i = 0; i < num_cases && local == DS_OK; i++)
        local = ds_profiler_add(p, v->model, &cases[i], v->cluster);
    DSI_TRY_GOTO(dsi_mpi_agree(v->comm, local), status, out);
    DSI_TRY_GOTO(ds_profiler_run(p, &summary), status, out);
out:
    ds_profiler_destroy(p);
    return status;
}

/* The variants in order, the headline first, and what each rank keeps of
 * them.  Local. */
static ds_status_t prepare(validation_t *v, size_t num_cases)
{
    const ds_validate_options_t *o = v->options;
    ds_validate_result_t *res = NULL;
    DSI_TRY(dsi_calloc(1, sizeof(*res), &res));
    v->result = res;
    res->ranks = v->ranks;
    res->variants[res->num_variants++] =
        o->profile_db != NULL ? DS_VALIDATE_PROFILE_DB : DS_VALIDATE_IN_SITU;
    for (int k = 0; k < DS_VALIDATE_VARIANT_COUNT && o->ablation; k++)
        if (k != (int)res->variants[0] && (k != DS_VALIDATE_PROFILE_DB || o->profile_db != NULL))
            res->variants[res->num_variants++] = (ds_validate_variant_t)k;
    DSI_TRY(dsi_calloc(num_cases, sizeof(*res->cases), &res->cases));
    res->num_cases = num_cases;
    for (int k = 0; k < DS_VALIDATE_VARIANT_COUNT; k++) {
        DSI_TRY(ds_cost_table_create(&v->costs[k]));
        DSI_TRY(dsi_calloc((size_t)v->ranks, sizeof(double), &v->factors[k]));
        for (int64_t r = 0; r < v->ranks; r++)
            v->factors[k][r] = 1.0;
    }
    DSI_TRY(dsi_calloc((size_t)v->ranks, sizeof(double), &v->measured_factors));
    DSI_TRY(dsi_calloc((size_t)v->ranks, sizeof(*v->devices), &v->devices));
    DSI_TRY(dsi_calloc((size_t)v->ranks, sizeof(double), &res->speed_factors));
    return ds_sim_create(&v->sim);
}

/* Hands the headline's factors and costs to the result, and the
 * iteration-time errors over the cases. */
static void conclude(validation_t *v)
{
    ds_validate_result_t *res = v->result;
    ds_validate_variant_t headline = res->variants[0];
    memcpy(res->speed_factors, v->factors[headline], (size_t)v->ranks * sizeof(double));
    res->costs = v->costs[headline];
    v->costs[headline] = NULL;
    for (size_t i = 0; i < res->num_cases; i++) {
        double e = fabs(res->cases[i].comparisons[0]->iteration.error);
        res->mean_abs_error += e / (double)res->num_cases;
        res->max_abs_error = e > res->max_abs_error ? e : res->max_abs_error;
    }
}

static ds_status_t validate_cases(validation_t *v, MPI_Comm comm, const ds_strategy_t *cases,
                                  size_t num_cases)
{
    const ds_validate_options_t *o = v->options;
    if (o->profile_db != NULL)
        DSI_TRY(profile_cases(v, comm, cases, num_cases));
    /* The speed the probe reaches here when nothing disturbs it: the best of a few. */
    for (int i = 0; i < 3 && o->wait_quiet_s > 0.0; i++) {
        ds_exec_load_t load;
        DSI_TRY(ds_exec_probe(v->backend, 0.2, NULL, &load));
        saw_probe(v, &load);
    }
    for (size_t i = 0; i < num_cases; i++) {
        ds_validate_case_t *c = &v->result->cases[i];
        DSI_TRY(run_case(v, &cases[i], c));
        notice(v, DS_VALIDATE_NOTICE_CASE, "case %zu of %zu: %s: error %.2f%%", i + 1, num_cases,
               c->strategy_text, 100.0 * c->comparisons[0]->iteration.error);
    }
    conclude(v);
    return DS_OK;
}

ds_status_t ds_validate(MPI_Comm comm, ds_backend_t *backend, const ds_model_t *model,
                        const ds_cluster_t *cluster, const ds_strategy_t *cases, size_t num_cases,
                        const ds_validate_options_t *options, ds_validate_result_t **result_p)
{
    if (backend == NULL || model == NULL || cluster == NULL || options == NULL ||
        result_p == NULL || (cases == NULL && num_cases > 0))
        return DSI_ERROR(DS_ERR_INVALID_ARG, "ds_validate: a required argument is NULL");
    ds_status_t status = DS_OK;
    validation_t v;
    memset(&v, 0, sizeof(v));
    v.backend = backend;
    v.model = model;
    v.cluster = cluster;
    v.options = options;
    v.exec = options->exec;
    int size = 0;
    DSI_TRY(dsi_mpi_dup(comm, &v.comm));
    DSI_MPI_TRY_GOTO(MPI_Comm_rank(v.comm, &v.rank), status, out);
    DSI_MPI_TRY_GOTO(MPI_Comm_size(v.comm, &size), status, out);
    v.ranks = size;
    DSI_TRY_GOTO(dsi_mpi_agree(v.comm, prepare(&v, num_cases)), status, out);
    DSI_TRY_GOTO(validate_cases(&v, comm, cases, num_cases), status, out);
    *result_p = v.result;
    v.result = NULL;
out:
    ds_validate_result_free(v.result);
    for (int k = 0; k < DS_VALIDATE_VARIANT_COUNT; k++) {
        ds_cost_table_destroy(v.costs[k]);
        dsi_free(v.factors[k]);
    }
    dsi_free(v.measured_factors);
    dsi_free(v.devices);
    ds_sim_destroy(v.sim);
    MPI_Comm_free(&v.comm);
    return status;
}

void ds_validate_result_free(ds_validate_result_t *result)
{
    if (result == NULL)
        return;
    for (size_t i = 0; i < result->num_cases && result->cases != NULL; i++)
        for (int k = 0; k < DS_VALIDATE_VARIANT_COUNT; k++)
            ds_exec_comparison_free(result->cases[i].comparisons[k]);
    dsi_free(result->cases);
    dsi_free(result->speed_factors);
    ds_cost_table_destroy(result->costs);
    dsi_free(result);
}

/* ---- the cases of --all ------------------------------------------------------------------- */

static ds_status_t add_case(ds_strategy_t **cases, size_t *count, size_t *capacity,
                            const ds_strategy_t *s)
{
    if (*count == *capacity) {
        size_t grown = *capacity > 0 ? 2 * *capacity : 16;
        DSI_TRY(dsi_realloc_array(cases, grown, sizeof(**cases)));
        *capacity = grown;
    }
    (*cases)[(*count)++] = *s;
    return DS_OK;
}

ds_status_t ds_validate_enumerate(const ds_model_t *model, const ds_strategy_t *base, int64_t ranks,
                                  int gpus_per_node, const int64_t *microbatch_counts,
                                  size_t num_counts, ds_strategy_t **cases_p, size_t *num_cases_p)
{
    static const ds_schedule_t schedules[] = {DS_SCHEDULE_GPIPE, DS_SCHEDULE_1F1B,
                                              DS_SCHEDULE_INTERLEAVED};
    ds_status_t status = DS_OK;
    ds_model_info_t info;
    ds_model_get_info(model, &info);
    ds_strategy_t *cases = NULL;
    size_t n = 0, capacity = 0;
    for (int64_t tp = 1; tp <= ranks; tp++) {
        for (int64_t pp = 1; ranks % tp == 0 && pp <= ranks / tp; pp++) {
            if ((ranks / tp) % pp)
                continue;
            int64_t dp = ranks / tp / pp;
            for (size_t k = 0; k < DSI_ARRAY_SIZE(schedules); k++) {
                if (pp == 1 && schedules[k] != DS_SCHEDULE_1F1B)
                    continue;
                bool interleaved = schedules[k] == DS_SCHEDULE_INTERLEAVED;
                if (interleaved && info.num_layers % (pp * 2) != 0)
                    continue;
                for (size_t j = 0; j < num_counts; j++) {
                    ds_strategy_t s = *base;
                    s.dp = (int)dp;
                    s.tp = (int)tp;
                    s.pp = (int)pp;
                    s.schedule = schedules[k];
                    s.vpp = interleaved ? 2 : 1;
                    s.layers_per_virtual_stage = 0;
                    s.gbs = dp * s.mbs * microbatch_counts[j];
                    ds_clear_error();
                    if (ds_strategy_resolve(&s, model, ranks, gpus_per_node) != DS_OK)
                        continue;
                    DSI_TRY_GOTO(add_case(&cases, &n, &capacity, &s), status, out);
                }
            }
        }
    }
    ds_clear_error();
    *cases_p = cases;
    *num_cases_p = n;
    cases = NULL;
out:
    dsi_free(cases);
    return status;
}

void ds_validate_cases_free(ds_strategy_t *cases)
{
    dsi_free(cases);
}
