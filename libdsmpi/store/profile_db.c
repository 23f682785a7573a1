/* The profile database handle: open, close, queries and additions. */
#include "dsi_store.h"

#include <errno.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <time.h>
#include <unistd.h>

double dsi_store_utc_now(void)
{
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    return (double)now.tv_sec + 1e-9 * (double)now.tv_nsec;
}

/* ---- histograms ------------------------------------------------------------------ */

void ds_cost_histogram_fill(const double *samples, size_t count, ds_cost_histogram_t *h)
{
    memset(h, 0, sizeof(*h));
    if (count == 0)
        return;
    double lo = samples[0], hi = samples[0];
    for (size_t i = 1; i < count; i++) {
        lo = samples[i] < lo ? samples[i] : lo;
        hi = samples[i] > hi ? samples[i] : hi;
    }
    h->min_s = lo;
    h->max_s = hi;
    const int bins = DS_COST_HISTOGRAM_BINS;
    bool geometric = lo > 0.0;
    double span = geometric ? log(hi / lo) : hi - lo;
    for (size_t i = 0; i < count; i++) {
        int bin = 0;
        if (span > 0.0) {
            double x = geometric ? log(samples[i] / lo) / span : (samples[i] - lo) / span;
            bin = (int)(x * bins);
            bin = bin < 0 ? 0 : bin >= bins ? bins - 1 : bin;
        }
        if (h->counts[bin] < UINT32_MAX)
            h->counts[bin]++;
    }
}

/* ---- agreement and MPI types ----------------------------------------------------------- */

ds_status_t dsi_store_agree(const ds_profile_db_t *db, ds_status_t local)
{
    return db->comm == MPI_COMM_NULL ? local : dsi_mpi_agree(db->comm, local);
}

ds_status_t dsi_store_mpi_types(MPI_Datatype *event_row_p, MPI_Datatype *comm_row_p)
{
    ds_status_t status = DS_OK;
    MPI_Datatype event_struct = MPI_DATATYPE_NULL, event_row = MPI_DATATYPE_NULL;
    MPI_Datatype comm_struct = MPI_DATATYPE_NULL, comm_row = MPI_DATATYPE_NULL;
    {
        int lengths[] = {4, 4, 1, 3, 4, 1, 2, DS_COST_HISTOGRAM_BINS, 8};
        MPI_Aint offsets[] = {
            offsetof(dsi_event_row_t, dims),        offsetof(dsi_event_row_t, mean_s),
            offsetof(dsi_event_row_t, repetitions), offsetof(dsi_event_row_t, measured_at_s),
            offsetof(dsi_event_row_t, group_size),  offsetof(dsi_event_row_t, rank),
            offsetof(dsi_event_row_t, fingerprint), offsetof(dsi_event_row_t, histogram),
            offsetof(dsi_event_row_t, kind)};
        MPI_Datatype types[] = {MPI_INT64_T, MPI_DOUBLE,   MPI_INT64_T,  MPI_DOUBLE, MPI_INT32_T,
                                MPI_INT32_T, MPI_UINT32_T, MPI_UINT32_T, MPI_UINT8_T};
        DSI_MPI_TRY_GOTO(MPI_Type_create_struct(9, lengths, offsets, types, &event_struct), status,
                         err);
        DSI_MPI_TRY_GOTO(
            MPI_Type_create_resized(event_struct, 0, sizeof(dsi_event_row_t), &event_row), status,
            err);
        DSI_MPI_TRY_GOTO(MPI_Type_commit(&event_row), status, err);
    }
    {
        int lengths[] = {1, 4, 1, 7, 4, DSI_SOURCE_MAX}; /* group_size .. span_nodes */
        MPI_Aint offsets[] = {
            offsetof(dsi_comm_row_t, bytes),       offsetof(dsi_comm_row_t, mean_s),
            offsetof(dsi_comm_row_t, repetitions), offsetof(dsi_comm_row_t, group_size),
            offsetof(dsi_comm_row_t, op),          offsetof(dsi_comm_row_t, source)};
        MPI_Datatype types[] = {MPI_INT64_T, MPI_DOUBLE,  MPI_INT64_T,
                                MPI_INT32_T, MPI_UINT8_T, MPI_CHAR};
        DSI_MPI_TRY_GOTO(MPI_Type_create_struct(6, lengths, offsets, types, &comm_struct), status,
                         err);
        DSI_MPI_TRY_GOTO(MPI_Type_create_resized(comm_struct, 0, sizeof(dsi_comm_row_t), &comm_row),
                         status, err);
        DSI_MPI_TRY_GOTO(MPI_Type_commit(&comm_row), status, err);
    }
    MPI_Type_free(&event_struct);
    MPI_Type_free(&comm_struct);
    *event_row_p = event_row;
    *comm_row_p = comm_row;
    return DS_OK;
err:
    if (comm_row != MPI_DATATYPE_NULL)
        MPI_Type_free(&comm_row);
    if (comm_struct != MPI_DATATYPE_NULL)
        MPI_Type_free(&comm_struct);
    if (event_row != MPI_DATATYPE_NULL)
        MPI_Type_free(&event_row);
    if (event_struct != MPI_DATATYPE_NULL)
        MPI_Type_free(&event_struct);
    return status;
}

/* ---- file systems ------------------------------------------------------------------ */

bool dsi_store_fs_is_unsafe_for_mpiio(const char *directory, char *fs_name, size_t size)
{
    static const struct {
        unsigned long magic;
        const char *name;
    } unsafe[] = {
        {0x6969UL, "nfs"},
        {0x517BUL, "smb"},
        {0xFF534D42UL, "cifs"},
        {0xFE534D42UL, "smb2"},
    };
    struct statfs info;
    if (statfs(directory, &info) != 0)
        return false;
    for (size_t i = 0; i < DSI_ARRAY_SIZE(unsafe); i++) {
        if ((unsigned long)info.f_type == unsafe[i].magic) {
            snprintf(fs_name, size, "%s", unsafe[i].name);
            return true;
        }
    }
    return false;
}

/* ---- open and close ------------------------------------------------------------------- */

/* The directory of `path` must exist and be writable (rank 0). */
ds_status_t dsi_store_check_directory(const char *path)
{
    char directory[4096];
    const char *slash = strrchr(path, '/');
    if (slash == NULL)
        strcpy(directory, ".");
    else if (slash == path)
        strcpy(directory, "/");
    else if ((size_t)(slash - path) < sizeof(directory))
        snprintf(directory, sizeof(directory), "%.*s", (int)(slash - path), path);
    else
        return DSI_ERROR(DS_ERR_INVALID_ARG, "profile database path of %zu characters is too long",
                         strlen(path));
    if (slash != NULL && slash[1] == '\0')
        return DSI_ERROR(
            DS_ERR_INVALID_ARG,
            "profile database '%s' names a directory (expected a file such as profile.h5)", path);
    struct stat info;
    if (stat(directory, &info) != 0)
        return DSI_ERROR(errno == ENOENT ? DS_ERR_NOT_FOUND : DS_ERR_IO,
                         "cannot write profile database '%s': directory '%s': %s", path, directory,
                         strerror(errno));
    if (!S_ISDIR(info.st_mode))
        return DSI_ERROR(DS_ERR_INVALID_ARG,
                         "cannot write profile database '%s': '%s' is not a directory", path,
                         directory);
    if (access(directory, W_OK | X_OK) != 0)
        return DSI_ERROR(DS_ERR_IO,
                         "cannot write profile database '%s': directory '%s' is not writable (%s)",
                         path, directory, strerror(errno));
    return DS_OK;
}

ds_status_t ds_profile_db_open(MPI_Comm comm, const char *path, unsigned flags,
                               ds_profile_db_t **db_p)
{
    if (path == NULL || path[0] == '\0')
        return DSI_ERROR(DS_ERR_INVALID_ARG,
                         "profile database path is empty (expected a file such as profile.h5)");
    if ((flags & ~DS_PROFILE_DB_READ_ONLY) != 0)
        return DSI_ERROR(DS_ERR_INVALID_ARG,
                         "profile database flags 0x%x (accepted: DS_PROFILE_DB_READ_ONLY)", flags);
    ds_status_t status = DS_OK;
    ds_profile_db_t *db = NULL;
    dsi_h5_scope_t scope;
    dsi_h5_scope_begin(&scope);
    DSI_TRY_GOTO(dsi_calloc(1, sizeof(*db), &db), status, out);
    db->comm = MPI_COMM_NULL;
    db->size = 1;
    db->read_only = (flags & DS_PROFILE_DB_READ_ONLY) != 0;
    dsi_layer_init(&db->own);
    dsi_strtab_init(&db->pending_fingerprints, DS_FINGERPRINT_MAX);
    dsi_strtab_init(&db->pending_hosts, DS_NAME_MAX);
    dsi_strtab_init(&db->run_hosts, DS_NAME_MAX);
    if (comm != MPI_COMM_NULL) {
        DSI_TRY_GOTO(dsi_mpi_dup(comm, &db->comm), status, err_db);
        DSI_MPI_TRY_GOTO(MPI_Comm_rank(db->comm, &db->rank), status, err_db);
        DSI_MPI_TRY_GOTO(MPI_Comm_size(db->comm, &db->size), status, err_db);
    }
    if (!db->read_only) {
        ds_status_t local = db->rank == 0 ? dsi_store_check_directory(path) : DS_OK;
        DSI_TRY_GOTO(dsi_store_agree(db, local), status, err_db);
    }
    DSI_TRY_GOTO(dsi_store_load(db, &db->own, path, db->read_only), status, err_db);
    db->last_write_s = dsi_now_s();
    *db_p = db;
    goto out;
err_db:
    ds_profile_db_close(db);
out:
    dsi_h5_scope_end(&scope);
    return status;
}

ds_status_t ds_profile_db_add_fallback(ds_profile_db_t *db, const char *path)
{
    if (path == NULL || path[0] == '\0')
        return DSI_ERROR(DS_ERR_INVALID_ARG, "fallback profile database path is empty");
    ds_status_t status = DS_OK;
    dsi_h5_scope_t scope;
    dsi_h5_scope_begin(&scope);
    dsi_db_layer_t layer;
    dsi_layer_init(&layer);
    ds_status_t local =
        dsi_realloc_array(&db->fallbacks, db->num_fallbacks + 1, sizeof(*db->fallbacks));
    DSI_TRY_GOTO(dsi_store_agree(db, local), status, out);
    DSI_TRY_GOTO(dsi_store_load(db, &layer, path, true), status, err_layer);
    db->fallbacks[db->num_fallbacks++] = layer;
    goto out;
err_layer:
    dsi_layer_free(&layer);
out:
    dsi_h5_scope_end(&scope);
    return status;
}

void ds_profile_db_close(ds_profile_db_t *db)
{
    if (db == NULL)
        return;
    dsi_layer_free(&db->own);
    for (size_t i = 0; i < db->num_fallbacks; i++)
        dsi_layer_free(&db->fallbacks[i]);
    dsi_free(db->fallbacks);
    dsi_free(db->pending);
    dsi_strtab_free(&db->pending_fingerprints);
    dsi_strtab_free(&db->pending_hosts);
    dsi_strtab_free(&db->run_hosts);
    dsi_free(db->pending_comm);
    if (db->comm != MPI_COMM_NULL)
        MPI_Comm_free(&db->comm);
    dsi_free(db);
}

const char *ds_profile_db_path(const ds_profile_db_t *db)
{
    return db->own.path;
}

/* ---- queries ------------------------------------------------------------------------ */

static void record_from_row(const dsi_db_layer_t *layer, const dsi_event_row_t *row,
                            ds_profile_record_t *record)
{
    memset(record, 0, sizeof(*record));
    dsi_row_key(row, &record->key);
    record->cost.mean_s = row->mean_s;
    record->cost.median_s = row->median_s;
    record->cost.p10_s = row->p10_s;
    record->cost.p90_s = row->p90_s;
    record->cost.repetitions = row->repetitions;
    record->cost.provenance = (ds_provenance_t)row->provenance;
    record->histogram.min_s = row->hist_min_s;
    record->histogram.max_s = row->hist_max_s;
    memcpy(record->histogram.counts, row->histogram, sizeof(record->histogram.counts));
    const char *fingerprint = dsi_strtab_at(&layer->fingerprints, row->fingerprint);
    const char *host = dsi_strtab_at(&layer->hosts, row->host);
    snprintf(record->fingerprint, sizeof(record->fingerprint), "%s",
             fingerprint ? fingerprint : "");
    snprintf(record->host, sizeof(record->host), "%s", host ? host : "");
    record->rank = row->rank;
    record->measured_at_s = row->measured_at_s;
}

static const dsi_event_row_t *layer_lookup(const dsi_db_layer_t *layer, const char *fingerprint,
                                           const ds_event_key_t *key)
{
    int64_t id = dsi_strtab_find(&layer->fingerprints, fingerprint);
    if (id < 0)
        return NULL;
    int64_t row = dsi_layer_find(layer, (uint32_t)id, key);
    return row >= 0 ? &layer->rows[row] : NULL;
}

static const dsi_event_row_t *db_lookup(const ds_profile_db_t *db, const char *fingerprint,
                                        const ds_event_key_t *key, const dsi_db_layer_t **layer_p)
{
    const dsi_event_row_t *row = layer_lookup(&db->own, fingerprint, key);
    *layer_p = &db->own;
    for (size_t i = 0; row == NULL && i < db->num_fallbacks; i++) {
        row = layer_lookup(&db->fallbacks[i], fingerprint, key);
        *layer_p = &db->fallbacks[i];
    }
    return row;
}

int ds_profile_db_has(const ds_profile_db_t *db, const char *fingerprint, const ds_event_key_t *key)
{
    const dsi_db_layer_t *layer;
    return db_lookup(db, fingerprint, key, &layer) != NULL;
}

ds_status_t ds_profile_db_lookup(const ds_profile_db_t *db, const char *fingerprint,
                                 const ds_event_key_t *key, ds_profile_record_t *record_p)
{
    const dsi_db_layer_t *layer;
    const dsi_event_row_t *row = db_lookup(db, fingerprint, key, &layer);
    if (row == NULL) {
        char text[256];
        ds_event_key_format(key, text, sizeof(text));
        return DSI_ERROR(DS_ERR_NOT_FOUND,
                         "no cost of '%s' for device '%s' in profile database '%s'", text,
                         fingerprint, db->own.path);
    }
    record_from_row(layer, row, record_p);
    return DS_OK;
}

static ds_status_t fill_from_layer(const dsi_db_layer_t *layer, const char *fingerprint,
                                   ds_cost_table_t *table, bool replace, size_t *added)
{
    int64_t id = dsi_strtab_find(&layer->fingerprints, fingerprint);
    if (id < 0)
        return DS_OK;
    for (size_t i = 0; i < layer->num_rows; i++) {
        const dsi_event_row_t *row = &layer->rows[i];
        if (row->fingerprint != (uint32_t)id)
            continue;
        ds_event_key_t key;
        dsi_row_key(row, &key);
        if (!replace && ds_cost_table_find(table, &key) != NULL)
            continue;
        ds_cost_t cost = {row->mean_s, row->median_s,    row->p10_s,
                          row->p90_s,  row->repetitions, (ds_provenance_t)row->provenance};
        DSI_TRY(ds_cost_table_set(table, &key, &cost));
        (*added)++;
    }
    return DS_OK;
}

ds_status_t ds_profile_db_fill_costs(const ds_profile_db_t *db, const char *fingerprint,
                                     ds_cost_table_t *table, size_t *added_p)
{
    size_t added = 0;
    DSI_TRY(fill_from_layer(&db->own, fingerprint, table, true, &added));
    for (size_t i = 0; i < db->num_fallbacks; i++)
        DSI_TRY(fill_from_layer(&db->fallbacks[i], fingerprint, table, false, &added));
    if (added_p != NULL)
        *added_p = added;
    return DS_OK;
}

size_t ds_profile_db_num_records(const ds_profile_db_t *db)
{
    return db->own.num_rows;
}

ds_status_t ds_profile_db_get_record(const ds_profile_db_t *db, size_t index,
                                     ds_profile_record_t *record_p)
{
    if (index >= db->own.num_rows)
        return DSI_ERROR(DS_ERR_INVALID_ARG, "record %zu of a profile database holding %zu", index,
                         db->own.num_rows);
    record_from_row(&db->own, &db->own.rows[index], record_p);
    return DS_OK;
}

/* The index-th distinct fingerprint over the layers, or NULL; counts them
 * all in *count_p. */
static const char *nth_fingerprint(const ds_profile_db_t *db, size_t index, size_t *count_p)
{
    size_t count = 0;
    const char *found = NULL;
    for (size_t l = 0; l <= db->num_fallbacks; l++) {
        const dsi_db_layer_t *layer = l == 0 ? &db->own : &db->fallbacks[l - 1];
        for (size_t i = 0; i < layer->fingerprints.count; i++) {
            const char *text = dsi_strtab_at(&layer->fingerprints, i);
            bool seen = false;
            for (size_t k = 0; k < l && !seen; k++) {
                const dsi_db_layer_t *earlier = k == 0 ? &db->own : &db->fallbacks[k - 1];
                seen = dsi_strtab_find(&earlier->fingerprints, text) >= 0;
            }
            if (seen)
                continue;
            if (count == index)
                found = text;
            count++;
        }
    }
    if (count_p != NULL)
        *count_p = count;
    return found;
}

size_t ds_profile_db_num_fingerprints(const ds_profile_db_t *db)
{
    size_t count;
    nth_fingerprint(db, SIZE_MAX, &count);
    return count;
}

const char *ds_profile_db_fingerprint(const ds_profile_db_t *db, size_t index)
{
    return nth_fingerprint(db, index, NULL);
}

ds_status_t ds_profile_db_get_comm_samples(const ds_profile_db_t *db, const char *source,
                                           ds_comm_sample_t **samples_p, size_t *count_p)
{
    size_t total = 0;
    for (size_t l = 0; l <= db->num_fallbacks; l++)
        total += l == 0 ? db->own.num_comm : db->fallbacks[l - 1].num_comm;
    ds_comm_sample_t *samples = NULL;
    DSI_TRY(dsi_calloc(total ? total : 1, sizeof(*samples), &samples));
    size_t count = 0;
    for (size_t l = 0; l <= db->num_fallbacks; l++) {
        const dsi_db_layer_t *layer = l == 0 ? &db->own : &db->fallbacks[l - 1];
        for (size_t i = 0; i < layer->num_comm; i++) {
            const dsi_comm_row_t *row = &layer->comm[i];
            if (source != NULL && strncmp(row->source, source, sizeof(row->source)) != 0)
                continue;
            bool shadowed = false;
            for (size_t k = 0; k < l && !shadowed; k++) {
                const dsi_db_layer_t *earlier = k == 0 ? &db->own : &db->fallbacks[k - 1];
                for (size_t j = 0; j < earlier->num_comm && !shadowed; j++)
                    shadowed = dsi_comm_row_same(&earlier->comm[j], row);
            }
            if (!shadowed)
                dsi_comm_row_to_sample(row, &samples[count++]);
        }
    }
    *samples_p = samples;
    *count_p = count;
    return DS_OK;
}

void ds_comm_samples_free(ds_comm_sample_t *samples)
{
    dsi_free(samples);
}

void ds_profile_db_get_info(const ds_profile_db_t *db, ds_profile_db_info_t *info)
{
    *info = db->own.info;
    info->num_records = db->own.num_rows;
    info->num_fingerprints = db->own.fingerprints.count;
    info->num_comm_samples = db->own.num_comm;
}

/* ---- additions ------------------------------------------------------------------------ */

ds_status_t dsi_store_check_writable(const ds_profile_db_t *db)
{
    if (db->read_only)
        return DSI_ERROR(DS_ERR_INVALID_ARG, "profile database '%s' was opened read-only",
                         db->own.path);
    if (db->broken)
        return DSI_ERROR(DS_ERR_INTERNAL, "profile database '%s' is unusable after a failed commit",
                         db->own.path);
    return DS_OK;
}

ds_status_t ds_profile_db_add_record(ds_profile_db_t *db, const ds_profile_record_t *record)
{
    DSI_TRY(dsi_store_check_writable(db));
    if (memchr(record->fingerprint, '\0', sizeof(record->fingerprint)) == NULL ||
        record->fingerprint[0] == '\0')
        return DSI_ERROR(DS_ERR_INVALID_ARG,
                         "device fingerprint is empty or longer than %d characters",
                         DS_FINGERPRINT_MAX - 1);
    if (memchr(record->host, '\0', sizeof(record->host)) == NULL)
        return DSI_ERROR(DS_ERR_INVALID_ARG, "host name is longer than %d characters",
                         DS_NAME_MAX - 1);
    dsi_event_row_t row;
    dsi_row_from_record(record, &row);
    /* Intern after checking the row, so a refused record leaves no strings. */
    DSI_TRY(dsi_event_row_check(&row, 1, 1, "profile record", SIZE_MAX));
    DSI_TRY(dsi_strtab_intern(&db->pending_fingerprints, record->fingerprint, &row.fingerprint));
    DSI_TRY(dsi_strtab_intern(&db->pending_hosts, record->host, &row.host));
    if (db->num_pending == db->cap_pending) {
        size_t capacity = db->cap_pending ? 2 * db->cap_pending : 256;
        DSI_TRY(dsi_realloc_array(&db->pending, capacity, sizeof(*db->pending)));
        db->cap_pending = capacity;
    }
    db->pending[db->num_pending++] = row;
    return DS_OK;
}

ds_status_t ds_profile_db_add(ds_profile_db_t *db, const char *fingerprint,
                              const ds_event_key_t *key, const ds_cost_t *cost,
                              const ds_cost_histogram_t *histogram)
{
    if (fingerprint == NULL || strlen(fingerprint) >= DS_FINGERPRINT_MAX || fingerprint[0] == '\0')
        return DSI_ERROR(DS_ERR_INVALID_ARG,
                         "device fingerprint is empty or longer than %d characters",
                         DS_FINGERPRINT_MAX - 1);
    ds_profile_record_t record;
    memset(&record, 0, sizeof(record));
    record.key = *key;
    record.cost = *cost;
    if (histogram != NULL)
        record.histogram = *histogram;
    strcpy(record.fingerprint, fingerprint);
    snprintf(record.host, sizeof(record.host), "%s", dsi_hostname());
    record.rank = db->rank;
    record.measured_at_s = dsi_store_utc_now();
    return ds_profile_db_add_record(db, &record);
}

ds_status_t ds_profile_db_add_comm_samples(ds_profile_db_t *db, const ds_comm_sample_t *samples,
                                           size_t count)
{
    DSI_TRY(dsi_store_check_writable(db));
    for (size_t i = 0; i < count; i++) {
        if (memchr(samples[i].source, '\0', sizeof(samples[i].source)) == NULL)
            return DSI_ERROR(DS_ERR_INVALID_ARG,
                             "communication sample %zu: source is longer than %d characters", i,
                             DSI_SOURCE_MAX - 1);
        dsi_comm_row_t row;
        dsi_comm_row_from_sample(&samples[i], &row);
        DSI_TRY(dsi_comm_row_check(&row, "communication sample"));
    }
    if (db->num_pending_comm + count > db->cap_pending_comm) {
        size_t capacity = db->cap_pending_comm ? db->cap_pending_comm : 64;
        while (capacity < db->num_pending_comm + count)
            capacity *= 2;
        DSI_TRY(dsi_realloc_array(&db->pending_comm, capacity, sizeof(*db->pending_comm)));
        db->cap_pending_comm = capacity;
    }
    for (size_t i = 0; i < count; i++)
        dsi_comm_row_from_sample(&samples[i], &db->pending_comm[db->num_pending_comm++]);
    return DS_OK;
}

size_t ds_profile_db_num_pending(const ds_profile_db_t *db)
{
    return db->num_pending + db->num_pending_comm;
}

ds_status_t ds_profile_db_set_run_info(ds_profile_db_t *db, const char *backend, const char *device,
                                       const char *command_line)
{
    DSI_TRY(dsi_store_check_writable(db));
    if (backend != NULL)
        snprintf(db->backend, sizeof(db->backend), "%s", backend);
    if (device != NULL)
        snprintf(db->device, sizeof(db->device), "%s", device);
    if (command_line != NULL)
        snprintf(db->command_line, sizeof(db->command_line), "%s", command_line);
    return DS_OK;
}
