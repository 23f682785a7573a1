/* Writing a profile database: gather every rank's additions, merge them into
 * the image every rank holds, write the image to a temporary file in the
 * same directory (collectively with parallel HDF5, or rank 0 alone), then
 * rename it over the previous database. */
#include "dsi_store.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

void (*dsi_store_write_hook)(const char *stage, int rank) = NULL;

static void hook(const ds_profile_db_t *db, const char *stage)
{
    if (dsi_store_write_hook != NULL)
        dsi_store_write_hook(stage, db->rank);
}

/* ---- gather and merge --------------------------------------------------------------- */

enum { G_FINGERPRINTS, G_HOSTS, G_ROWS, G_COMM, G_KINDS };

typedef struct gathered {
    int *counts; /* G_KINDS per rank, in elements (strings, rows, samples) */
    char *fingerprints, *hosts;
    dsi_event_row_t *rows;
    dsi_comm_row_t *comm;
    bool owned; /* false without MPI: the arrays are the pending ones */
} gathered_t;

static void gathered_free(gathered_t *g)
{
    dsi_free(g->counts);
    if (g->owned) {
        dsi_free(g->fingerprints);
        dsi_free(g->hosts);
        dsi_free(g->rows);
        dsi_free(g->comm);
    }
}

/* Every rank's additions, to every rank.  Each local step (checks,
 * allocations) is agreed on before the next collective, so that a rank that
 * fails alone never leaves the others waiting in a collective it does not
 * enter. */
static ds_status_t gather(ds_profile_db_t *db, gathered_t *g)
{
    /* Elements per item (strings travel as fixed-width character slots) and bytes per element. */
    static const int slot[G_KINDS] = {DS_FINGERPRINT_MAX, DS_NAME_MAX, 1, 1};
    static const size_t element_size[G_KINDS] = {1, 1, sizeof(dsi_event_row_t),
                                                 sizeof(dsi_comm_row_t)};
    ds_status_t status = DS_OK, local = DS_OK;
    int *counts = NULL, *displs = NULL;
    void *all[G_KINDS] = {NULL, NULL, NULL, NULL};
    MPI_Datatype event_row = MPI_DATATYPE_NULL, comm_row = MPI_DATATYPE_NULL;
    memset(g, 0, sizeof(*g));
    size_t mine[G_KINDS] = {db->pending_fingerprints.count, db->pending_hosts.count,
                            db->num_pending, db->num_pending_comm};
    int my_counts[G_KINDS];
    for (int k = 0; k < G_KINDS; k++) {
        if (mine[k] > (size_t)INT32_MAX / DS_FINGERPRINT_MAX && local == DS_OK)
            local = DSI_ERROR(DS_ERR_OVERFLOW, "%zu additions on one rank in one commit", mine[k]);
        my_counts[k] = (int)mine[k];
    }
    if (local == DS_OK)
        local = dsi_calloc((size_t)db->size * G_KINDS, sizeof(int), &g->counts);
    if (db->comm == MPI_COMM_NULL) {
        if (local == DS_OK) {
            memcpy(g->counts, my_counts, sizeof(my_counts));
            g->fingerprints = db->pending_fingerprints.data;
            g->hosts = db->pending_hosts.data;
            g->rows = db->pending;
            g->comm = db->pending_comm;
        }
        return local;
    }
    g->owned = true;
    /* counts and displs: per kind, one entry per rank, in elements. */
    if (local == DS_OK)
        local = dsi_calloc((size_t)db->size * G_KINDS, sizeof(int), &counts);
    if (local == DS_OK)
        local = dsi_calloc((size_t)db->size * G_KINDS, sizeof(int), &displs);
    if (local == DS_OK)
        local = dsi_store_mpi_types(&event_row, &comm_row);
    DSI_TRY_GOTO(dsi_store_agree(db, local), status, out);
    DSI_MPI_TRY_GOTO(
        MPI_Allgather(my_counts, G_KINDS, MPI_INT, g->counts, G_KINDS, MPI_INT, db->comm), status,
        out);
    for (int k = 0; k < G_KINDS && local == DS_OK; k++) {
        int64_t total = 0;
        for (int r = 0; r < db->size; r++) {
            counts[k * db->size + r] = g->counts[r * G_KINDS + k] * slot[k];
            displs[k * db->size + r] = (int)total;
            total += counts[k * db->size + r];
            if (total > INT32_MAX) {
                local = DSI_ERROR(DS_ERR_OVERFLOW,
                                  "%lld elements to gather in one commit (accepted: at most %d)",
                                  (long long)total, INT32_MAX);
                break;
            }
        }
        if (local == DS_OK)
            local = dsi_calloc(total ? (size_t)total : 1, element_size[k], &all[k]);
    }
    g->fingerprints = all[G_FINGERPRINTS];
    g->hosts = all[G_HOSTS];
    g->rows = all[G_ROWS];
    g->comm = all[G_COMM];
    DSI_TRY_GOTO(dsi_store_agree(db, local), status, out);
    const void *sources[G_KINDS] = {db->pending_fingerprints.data, db->pending_hosts.data,
                                    db->pending, db->pending_comm};
    MPI_Datatype types[G_KINDS] = {MPI_CHAR, MPI_CHAR, event_row, comm_row};
    for (int k = 0; k < G_KINDS; k++)
        DSI_MPI_TRY_GOTO(MPI_Allgatherv(sources[k], counts[k * db->size + db->rank], types[k],
                                        all[k], &counts[k * db->size], &displs[k * db->size],
                                        types[k], db->comm),
                         status, out);
out:
    if (comm_row != MPI_DATATYPE_NULL)
        MPI_Type_free(&comm_row);
    if (event_row != MPI_DATATYPE_NULL)
        MPI_Type_free(&event_row);
    dsi_free(displs);
    dsi_free(counts);
    return status;
}

/* Merges what every rank added, rank by rank in order, into the own image:
 * every rank does the same steps on the same data, so every rank ends with
 * the same image. */
static ds_status_t merge(ds_profile_db_t *db, const gathered_t *g)
{
    ds_status_t status = DS_OK;
    uint32_t *fingerprint_map = NULL, *host_map = NULL;
    size_t totals[G_KINDS] = {0, 0, 0, 0};
    for (int r = 0; r < db->size; r++)
        for (int k = 0; k < G_KINDS; k++)
            totals[k] += (size_t)g->counts[r * G_KINDS + k];
    DSI_TRY_GOTO(dsi_layer_reserve(&db->own, db->own.num_rows + totals[G_ROWS]), status, out);
    DSI_TRY_GOTO(dsi_calloc(totals[G_FINGERPRINTS] + 1, sizeof(uint32_t), &fingerprint_map), status,
                 out);
    DSI_TRY_GOTO(dsi_calloc(totals[G_HOSTS] + 1, sizeof(uint32_t), &host_map), status, out);
    for (size_t i = 0; i < totals[G_FINGERPRINTS]; i++)
        DSI_TRY_GOTO(dsi_strtab_intern(&db->own.fingerprints,
                                       g->fingerprints + i * DS_FINGERPRINT_MAX,
                                       &fingerprint_map[i]),
                     status, out);
    for (size_t i = 0; i < totals[G_HOSTS]; i++)
        DSI_TRY_GOTO(dsi_strtab_intern(&db->own.hosts, g->hosts + i * DS_NAME_MAX, &host_map[i]),
                     status, out);
    size_t f0 = 0, h0 = 0, row = 0, sample = 0;
    for (int r = 0; r < db->size; r++) {
        const int *c = &g->counts[r * G_KINDS];
        for (int i = 0; i < c[G_ROWS]; i++, row++) {
            dsi_event_row_t merged = g->rows[row];
            if (merged.fingerprint >= (uint32_t)c[G_FINGERPRINTS] ||
                merged.host >= (uint32_t)c[G_HOSTS]) {
                status =
                    DSI_ERROR(DS_ERR_INTERNAL, "rank %d sent a record naming string %u/%u of %d/%d",
                              r, merged.fingerprint, merged.host, c[G_FINGERPRINTS], c[G_HOSTS]);
                goto out;
            }
            merged.fingerprint = fingerprint_map[f0 + merged.fingerprint];
            merged.host = host_map[h0 + merged.host];
            DSI_TRY_GOTO(dsi_layer_put(&db->own, &merged, NULL), status, out);
        }
        for (int i = 0; i < c[G_COMM]; i++, sample++)
            DSI_TRY_GOTO(dsi_layer_put_comm(&db->own, &g->comm[sample]), status, out);
        f0 += (size_t)c[G_FINGERPRINTS];
        h0 += (size_t)c[G_HOSTS];
    }
out:
    dsi_free(host_map);
    dsi_free(fingerprint_map);
    return status;
}

static ds_status_t gather_and_merge(ds_profile_db_t *db)
{
    gathered_t g;
    ds_status_t status = gather(db, &g);
    status = dsi_store_agree(db, status);
    if (status == DS_OK)
        status = dsi_store_agree(db, merge(db, &g));
    gathered_free(&g);
    if (status == DS_OK) {
        db->num_pending = 0;
        db->num_pending_comm = 0;
        dsi_strtab_clear(&db->pending_fingerprints);
        dsi_strtab_clear(&db->pending_hosts);
    }
    return status;
}

/* The hosts of this run and how many ranks the fullest one has (once). */
static ds_status_t gather_run_hosts(ds_profile_db_t *db)
{
    if (db->run_hosts_known)
        return DS_OK;
    ds_status_t status = DS_OK;
    char *all = NULL;
    uint32_t *per_host = NULL;
    char mine[DS_NAME_MAX];
    memset(mine, 0, sizeof(mine));
    snprintf(mine, sizeof(mine), "%s", dsi_hostname());
    /* Every rank has its buffer, or none goes on to the all-gather. */
    status = dsi_store_agree(db, dsi_calloc((size_t)db->size, DS_NAME_MAX, &all));
    if (status != DS_OK)
        goto out;
    if (db->comm == MPI_COMM_NULL)
        memcpy(all, mine, sizeof(mine));
    else
        DSI_MPI_TRY_GOTO(
            MPI_Allgather(mine, DS_NAME_MAX, MPI_CHAR, all, DS_NAME_MAX, MPI_CHAR, db->comm),
            status, agree);
    DSI_TRY_GOTO(dsi_calloc((size_t)db->size, sizeof(*per_host), &per_host), status, agree);
    dsi_strtab_clear(&db->run_hosts);
    int most = 0;
    for (int r = 0; r < db->size; r++) {
        uint32_t id;
        all[(size_t)(r + 1) * DS_NAME_MAX - 1] = '\0';
        DSI_TRY_GOTO(dsi_strtab_intern(&db->run_hosts, all + (size_t)r * DS_NAME_MAX, &id), status,
                     agree);
        per_host[id]++;
        most = (int)per_host[id] > most ? (int)per_host[id] : most;
    }
    db->run_max_ranks_per_node = most;
agree:
    status = dsi_store_agree(db, status);
out:
    db->run_hosts_known = status == DS_OK;
    dsi_free(per_host);
    dsi_free(all);
    return status;
}

/* ---- the HDF5 file -------------------------------------------------------------------- */

static void split_path(const char *path, char *directory, size_t size, const char **base_p);

/* Fails with the cause prefixed by the database it concerns.  HDF5 reports
 * a short write without errno: say so when the file system is full. */
static ds_status_t write_failed(const ds_profile_db_t *db, ds_status_t status)
{
    if (status == DS_OK)
        return status;
    char cause[768], directory[4096], full[128] = "";
    const char *base;
    snprintf(cause, sizeof(cause), "%s", ds_last_error());
    split_path(db->own.path, directory, sizeof(directory), &base);
    struct statvfs fs;
    if (status == DS_ERR_HDF5 && strstr(cause, "write failed") != NULL &&
        strstr(cause, "errno") == NULL && statvfs(directory, &fs) == 0 &&
        (double)fs.f_bavail * (double)fs.f_frsize < 65536.0)
        snprintf(full, sizeof(full),
                 " (its file system has %.0f KiB free: No space left on device)",
                 (double)fs.f_bavail * (double)fs.f_frsize / 1024.0);
    return DSI_ERROR(status, "cannot write profile database '%s': %s%s", db->own.path, cause, full);
}

static ds_status_t write_attr(hid_t object, const char *name, hid_t file_type, hid_t mem_type,
                              const void *value)
{
    ds_status_t status = DS_OK;
    hid_t space = H5I_INVALID_HID, attr = H5I_INVALID_HID;
    DSI_H5_TRY_GOTO(space = H5Screate(H5S_SCALAR), status, out);
    DSI_H5_TRY_GOTO(attr = H5Acreate2(object, name, file_type, space, H5P_DEFAULT, H5P_DEFAULT),
                    status, out);
    DSI_H5_TRY_GOTO(H5Awrite(attr, mem_type, value), status, out);
out:
    dsi_h5_close(&attr);
    dsi_h5_close(&space);
    return status;
}

static ds_status_t write_attr_string(hid_t object, const char *name, const char *value)
{
    ds_status_t status = DS_OK;
    hid_t type = H5I_INVALID_HID;
    DSI_H5_TRY_GOTO(type = dsi_h5_string_type(strlen(value) + 1), status, out);
    DSI_TRY_GOTO(write_attr(object, name, type, type, value), status, out);
out:
    dsi_h5_close(&type);
    return status;
}

static ds_status_t write_attr_int(hid_t object, const char *name, int value)
{
    return write_attr(object, name, H5T_STD_I32LE, H5T_NATIVE_INT, &value);
}

static ds_status_t write_attributes(hid_t file, const ds_profile_db_info_t *info)
{
    DSI_TRY(write_attr_string(file, "dsmpi_format", DS_PROFILE_DB_FORMAT));
    DSI_TRY(write_attr_int(file, "dsmpi_format_version", info->format_version));
    DSI_TRY(write_attr_string(file, "library_version", info->library_version));
    DSI_TRY(write_attr_string(file, "backend", info->backend));
    DSI_TRY(write_attr_string(file, "device", info->device));
    DSI_TRY(write_attr_string(file, "command_line", info->command_line));
    DSI_TRY(write_attr_string(file, "written_at", info->written_at));
    DSI_TRY(
        write_attr(file, "written_at_s", H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &info->written_at_s));
    DSI_TRY(write_attr_int(file, "ranks", info->ranks));
    DSI_TRY(write_attr_int(file, "nodes", info->nodes));
    DSI_TRY(write_attr_int(file, "max_ranks_per_node", info->max_ranks_per_node));
    DSI_TRY(write_attr_string(file, "hosts", info->hosts));
    return DS_OK;
}

/* "0=gemm 1=bgemm ..." for the codes of the events columns.  Made before
 * the file is written: the attributes are written inside a sequence of
 * collective HDF5 calls, where a rank must not fail alone. */
typedef struct code_names {
    dsi_strbuf_t compute, comm, dtypes, groups;
} code_names_t;

static void code_names_free(code_names_t *n)
{
    dsi_strbuf_free(&n->compute);
    dsi_strbuf_free(&n->comm);
    dsi_strbuf_free(&n->dtypes);
    dsi_strbuf_free(&n->groups);
}

static ds_status_t code_names_make(code_names_t *n)
{
    dsi_strbuf_init(&n->compute);
    dsi_strbuf_init(&n->comm);
    dsi_strbuf_init(&n->dtypes);
    dsi_strbuf_init(&n->groups);
    ds_event_key_t key;
    memset(&key, 0, sizeof(key));
    for (int i = 0; i < DS_OP_COUNT_; i++) {
        key.op = (uint8_t)i;
        dsi_strbuf_appendf(&n->compute, "%s%d=%s", i ? " " : "", i, ds_event_key_op_name(&key));
    }
    key.kind = DS_EVENT_COMM;
    for (int i = 0; i < DS_COMM_COUNT_; i++) {
        key.op = (uint8_t)i;
        dsi_strbuf_appendf(&n->comm, "%s%d=%s", i ? " " : "", i, ds_event_key_op_name(&key));
    }
    for (int i = 0; i <= DS_DTYPE_FP8; i++)
        dsi_strbuf_appendf(&n->dtypes, "%s%d=%s", i ? " " : "", i, ds_dtype_name((ds_dtype_t)i));
    for (int i = 0; i < DS_GROUP_COUNT_; i++)
        dsi_strbuf_appendf(&n->groups, "%s%d=%s", i ? " " : "", i, ds_group_name((ds_group_t)i));
    ds_status_t status = dsi_strbuf_status(&n->compute);
    if (status == DS_OK)
        status = dsi_strbuf_status(&n->comm);
    if (status == DS_OK)
        status = dsi_strbuf_status(&n->dtypes);
    if (status == DS_OK)
        status = dsi_strbuf_status(&n->groups);
    if (status != DS_OK)
        code_names_free(n);
    return status;
}

static ds_status_t write_code_names(hid_t dset, const code_names_t *n)
{
    DSI_TRY(write_attr_string(dset, "op_names_compute", dsi_strbuf_text(&n->compute)));
    DSI_TRY(write_attr_string(dset, "op_names_comm", dsi_strbuf_text(&n->comm)));
    DSI_TRY(write_attr_string(dset, "dtype_names", dsi_strbuf_text(&n->dtypes)));
    DSI_TRY(write_attr_string(dset, "group_names", dsi_strbuf_text(&n->groups)));
    return DS_OK;
}

/* Creates the 1-D table `name` of `count` rows (chunked, extendible, with a
 * Fletcher-32 checksum per chunk) and writes this rank's block of rows;
 * `codes` (or NULL) names the codes of its columns. */
static ds_status_t write_table(const ds_profile_db_t *db, hid_t file, const char *name, hid_t type,
                               const void *data, size_t size, size_t count, bool collective,
                               const char *description, const code_names_t *codes)
{
    ds_status_t status = DS_OK;
    hid_t space = H5I_INVALID_HID, dcpl = H5I_INVALID_HID, dset = H5I_INVALID_HID;
    hid_t file_space = H5I_INVALID_HID, mem_space = H5I_INVALID_HID, dxpl = H5I_INVALID_HID;
    hsize_t dims = count, max_dims = H5S_UNLIMITED;
    hsize_t chunk = ((hsize_t)1 << 20) / size;
    chunk = chunk < 1 ? 1 : chunk;
    chunk = count < chunk ? (count ? count : 1) : chunk;
    DSI_H5_TRY_GOTO(space = H5Screate_simple(1, &dims, &max_dims), status, out);
    DSI_H5_TRY_GOTO(dcpl = H5Pcreate(H5P_DATASET_CREATE), status, out);
    DSI_H5_TRY_GOTO(H5Pset_chunk(dcpl, 1, &chunk), status, out);
    DSI_H5_TRY_GOTO(H5Pset_fletcher32(dcpl), status, out);
    /* Every row is written: no fill values first. */
    DSI_H5_TRY_GOTO(H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER), status, out);
    DSI_H5_TRY_GOTO(dset = H5Dcreate2(file, name, type, space, H5P_DEFAULT, dcpl, H5P_DEFAULT),
                    status, out);
    DSI_TRY_GOTO(write_attr_string(dset, "description", description), status, out);
    if (codes != NULL)
        DSI_TRY_GOTO(write_code_names(dset, codes), status, out);
    if (count == 0)
        goto out;
    /* Each rank its own block of rows: [count*r/size, count*(r+1)/size). */
    hsize_t first = 0, mine = count;
    if (collective) {
        first = (hsize_t)count * (hsize_t)db->rank / (hsize_t)db->size;
        mine = (hsize_t)count * (hsize_t)(db->rank + 1) / (hsize_t)db->size - first;
    }
    hsize_t mem_dims = mine ? mine : 1;
    DSI_H5_TRY_GOTO(file_space = H5Dget_space(dset), status, out);
    DSI_H5_TRY_GOTO(mem_space = H5Screate_simple(1, &mem_dims, NULL), status, out);
    if (mine > 0) {
        DSI_H5_TRY_GOTO(H5Sselect_hyperslab(file_space, H5S_SELECT_SET, &first, NULL, &mine, NULL),
                        status, out);
    } else {
        DSI_H5_TRY_GOTO(H5Sselect_none(file_space), status, out);
        DSI_H5_TRY_GOTO(H5Sselect_none(mem_space), status, out);
    }
    DSI_H5_TRY_GOTO(dxpl = H5Pcreate(H5P_DATASET_XFER), status, out);
    if (collective)
        DSI_H5_TRY_GOTO(H5Pset_dxpl_mpio(dxpl, H5FD_MPIO_COLLECTIVE), status, out);
    DSI_H5_TRY_GOTO(
        H5Dwrite(dset, type, mem_space, file_space, dxpl, (const char *)data + first * size),
        status, out);
out:
    dsi_h5_close(&dxpl);
    dsi_h5_close(&mem_space);
    dsi_h5_close(&file_space);
    dsi_h5_close(&dset);
    dsi_h5_close(&dcpl);
    dsi_h5_close(&space);
    return status;
}

static ds_status_t create_file(const ds_profile_db_t *db, const char *path, bool collective,
                               hid_t *fapl_p, hid_t *file_p)
{
    ds_status_t status = DS_OK;
    hid_t fapl = H5I_INVALID_HID;
    DSI_H5_TRY_GOTO(fapl = H5Pcreate(H5P_FILE_ACCESS), status, out);
    if (collective) {
        DSI_H5_TRY_GOTO(H5Pset_fapl_mpio(fapl, db->comm, MPI_INFO_NULL), status, out);
        DSI_H5_TRY_GOTO(H5Pset_all_coll_metadata_ops(fapl, 1), status, out);
        DSI_H5_TRY_GOTO(H5Pset_coll_metadata_write(fapl, 1), status, out);
    }
    /* The 1.10 format checksums every metadata object: with the per-chunk
     * Fletcher-32 of the tables, damage anywhere in the file is detected. */
    DSI_H5_TRY_GOTO(H5Pset_libver_bounds(fapl, H5F_LIBVER_V110, H5F_LIBVER_V110), status, out);
#if DSI_H5_HAS_FILE_LOCKING
    DSI_H5_TRY_GOTO(H5Pset_file_locking(fapl, 1, 1), status, out);
#endif
    DSI_H5_TRY_GOTO(*file_p = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl), status, out);
    *fapl_p = fapl;
    fapl = H5I_INVALID_HID;
out:
    dsi_h5_close(&fapl);
    return status;
}

/* Each step's status is agreed on by every rank when the write is
 * collective, so that all ranks leave the sequence of collective HDF5 calls
 * at the same point. */
#define STEP(call)                                                                                 \
    do {                                                                                           \
        status = write_failed(db, (call));                                                         \
        if (collective)                                                                            \
            status = dsi_store_agree(db, status);                                                  \
        if (status != DS_OK)                                                                       \
            goto out;                                                                              \
    } while (0)

static ds_status_t write_steps(ds_profile_db_t *db, const char *path, bool collective,
                               const ds_profile_db_info_t *info,
                               const dsi_strtab_t *allocation_hosts)
{
    ds_status_t status = DS_OK;
    hid_t fapl = H5I_INVALID_HID, file = H5I_INVALID_HID;
    hid_t event_type = H5I_INVALID_HID, comm_type = H5I_INVALID_HID;
    hid_t fingerprint_type = H5I_INVALID_HID, host_type = H5I_INVALID_HID;
    const dsi_db_layer_t *own = &db->own;
    code_names_t codes;
    bool have_codes = false;
    ds_status_t made = code_names_make(&codes);
    have_codes = made == DS_OK;
    STEP(made);
    STEP(create_file(db, path, collective, &fapl, &file));
    hook(db, "created");
    STEP(write_attributes(file, info));
    ds_status_t local = DS_OK;
    if ((event_type = dsi_h5_event_row_type()) < 0 || (comm_type = dsi_h5_comm_row_type()) < 0 ||
        (fingerprint_type = dsi_h5_string_type(DS_FINGERPRINT_MAX)) < 0 ||
        (host_type = dsi_h5_string_type(DS_NAME_MAX)) < 0)
        local = dsi_h5_error(__FILE__, __LINE__, "H5Tcreate()");
    STEP(local);
    STEP(write_table(db, file, "fingerprints", fingerprint_type, own->fingerprints.data,
                     DS_FINGERPRINT_MAX, own->fingerprints.count, collective,
                     "device fingerprints; events.fingerprint is an index into this table", NULL));
    STEP(write_table(db, file, "hosts", host_type, own->hosts.data, DS_NAME_MAX, own->hosts.count,
                     collective, "host names; events.host is an index into this table", NULL));
    STEP(write_table(db, file, "allocation_hosts", host_type, allocation_hosts->data, DS_NAME_MAX,
                     allocation_hosts->count, collective, "hosts of the run that wrote this file",
                     NULL));
    STEP(write_table(db, file, "events", event_type, own->rows, sizeof(dsi_event_row_t),
                     own->num_rows, collective,
                     "measured event costs, one row per (device fingerprint, event key); "
                     "times in seconds, measured_at_s in UTC seconds since 1970",
                     &codes));
    STEP(write_table(db, file, "comm_samples", comm_type, own->comm, sizeof(dsi_comm_row_t),
                     own->num_comm, collective,
                     "communication measurements (measured or imported); bytes as nccl-tests' size",
                     NULL));
    hook(db, "written");
    local = DS_OK;
    if (H5Fclose(file) < 0)
        local = dsi_h5_error(__FILE__, __LINE__, "H5Fclose()");
    file = H5I_INVALID_HID;
    STEP(local);
    hook(db, "closed");
out:
    if (status != DS_OK && file >= 0) {
        /* The file is garbage now, but closing it flushes HDF5's metadata,
         * collectively: if the disk is full, that flush can fail on some
         * ranks and not others, and they would wait for each other forever.
         * Truncating the file first frees its space for the flush. */
        if (db->rank == 0 && truncate(path, 0) != 0)
            DSI_DEBUG("truncating '%s' after a failed write: %s", path, strerror(errno));
        if (collective)
            MPI_Barrier(db->comm);
    }
    if (have_codes)
        code_names_free(&codes);
    dsi_h5_close(&host_type);
    dsi_h5_close(&fingerprint_type);
    dsi_h5_close(&comm_type);
    dsi_h5_close(&event_type);
    dsi_h5_close(&file);
    dsi_h5_close(&fapl);
    return status;
}

ds_status_t dsi_store_write_file(ds_profile_db_t *db, const char *path, bool collective,
                                 const ds_profile_db_info_t *info,
                                 const dsi_strtab_t *allocation_hosts)
{
    ds_status_t status = DS_OK;
    if (collective || db->rank == 0)
        status = write_steps(db, path, collective, info, allocation_hosts);
    if (!collective)
        status = dsi_store_agree(db, status);
    return status;
}

/* ---- temporary file, rename ------------------------------------------------------------- */

static void split_path(const char *path, char *directory, size_t size, const char **base_p)
{
    const char *slash = strrchr(path, '/');
    if (slash == NULL)
        snprintf(directory, size, ".");
    else if (slash == path)
        snprintf(directory, size, "/");
    else
        snprintf(directory, size, "%.*s", (int)(slash - path), path);
    *base_p = slash != NULL ? slash + 1 : path;
}

/* Removes "<base>.tmp.<this host>.<pid>" files whose process is gone: what a
 * killed writer on this host left behind. */
static void remove_stale_temporaries(const char *directory, const char *base)
{
    char prefix[512];
    snprintf(prefix, sizeof(prefix), "%s.tmp.%s.", base, dsi_hostname());
    size_t length = strlen(prefix);
    DIR *dir = opendir(directory);
    if (dir == NULL)
        return;
    struct dirent *entry;
    while ((entry = readdir(dir)) != NULL) {
        if (strncmp(entry->d_name, prefix, length) != 0)
            continue;
        char *end = NULL;
        long pid = strtol(entry->d_name + length, &end, 10);
        if (end == entry->d_name + length || *end != '\0' || pid <= 0 || pid == (long)getpid())
            continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH)
            continue;
        char stale[4096];
        if (snprintf(stale, sizeof(stale), "%s/%s", directory, entry->d_name) <
                (int)sizeof(stale) &&
            unlink(stale) == 0)
            DSI_INFO("removed '%s', left by a writer that was killed", stale);
    }
    closedir(dir);
}

bool dsi_store_space_check = true;

/* Refuses to start a write the file system has no room for: a write that
 * runs out of space half-way fails less cleanly (MPI-IO prints its own
 * errors) and takes longer to fail. */
static ds_status_t check_space(const ds_profile_db_t *db, const char *directory)
{
    const dsi_db_layer_t *own = &db->own;
    double bytes = (double)own->num_rows * sizeof(dsi_event_row_t) +
                   (double)own->num_comm * sizeof(dsi_comm_row_t) +
                   (double)own->fingerprints.count * DS_FINGERPRINT_MAX +
                   (double)(own->hosts.count + db->run_hosts.count) * DS_NAME_MAX;
    /* Metadata, chunk indexes and checksums: a few percent and a few KiB. */
    double needed = bytes * 1.05 + 64.0 * 1024.0;
    struct statvfs fs;
    if (statvfs(directory, &fs) != 0)
        return DS_OK; /* cannot tell: let the write find out */
    double available = (double)fs.f_bavail * (double)fs.f_frsize;
    if (available < needed)
        return DSI_ERROR(DS_ERR_IO,
                         "cannot write profile database '%s': it needs about %.1f MiB and '%s' has "
                         "%.1f MiB free (No space left on device)",
                         db->own.path, needed / 1048576.0, directory, available / 1048576.0);
    return DS_OK;
}

typedef struct plan {
    int collective;
    char temporary[4096];
    ds_profile_db_info_t info;
} plan_t;

static ds_status_t plan_write(ds_profile_db_t *db, plan_t *plan)
{
    static const char *const modes[] = {"auto", "collective", "serial"};
    int mode = 0;
    DSI_TRY(dsi_parse_choice(dsi_param_string(DSI_PARAM_DB_WRITE_MODE), "DS_DB_WRITE_MODE", modes,
                             DSI_ARRAY_SIZE(modes), &mode));
    char directory[4096], fs_name[16] = "";
    const char *base;
    split_path(db->own.path, directory, sizeof(directory), &base);
    bool unsafe = dsi_store_fs_is_unsafe_for_mpiio(directory, fs_name, sizeof(fs_name));
    plan->collective =
        db->comm != MPI_COMM_NULL && db->size > 1 && (mode == 1 || (mode == 0 && !unsafe));
    DSI_DEBUG("writing profile database '%s' %s", db->own.path,
              plan->collective ? "collectively with parallel HDF5" : "from rank 0 alone");
    if (unsafe && mode == 0 && db->size > 1)
        DSI_INFO(
            "profile database directory '%s' is on %s, where MPI-IO is unsafe: rank 0 writes alone",
            directory, fs_name);
    if (snprintf(plan->temporary, sizeof(plan->temporary), "%s.tmp.%s.%ld", db->own.path,
                 dsi_hostname(), (long)getpid()) >= (int)sizeof(plan->temporary))
        return DSI_ERROR(DS_ERR_INVALID_ARG, "profile database path of %zu characters is too long",
                         strlen(db->own.path));
    DSI_TRY(dsi_store_check_directory(db->own.path));
    remove_stale_temporaries(directory, base);
    if (dsi_store_space_check)
        DSI_TRY(check_space(db, directory));

    ds_profile_db_info_t *info = &plan->info;
    info->format_version = DS_PROFILE_DB_FORMAT_VERSION;
    snprintf(info->library_version, sizeof(info->library_version), "%s", DS_VERSION_STRING);
    snprintf(info->backend, sizeof(info->backend), "%s", db->backend);
    snprintf(info->device, sizeof(info->device), "%s", db->device);
    snprintf(info->command_line, sizeof(info->command_line), "%s", db->command_line);
    info->written_at_s = dsi_store_utc_now();
    time_t seconds = (time_t)info->written_at_s;
    struct tm utc;
    if (gmtime_r(&seconds, &utc) == NULL ||
        strftime(info->written_at, sizeof(info->written_at), "%Y-%m-%dT%H:%M:%SZ", &utc) == 0)
        strcpy(info->written_at, "unknown");
    info->ranks = db->size;
    info->nodes = (int)db->run_hosts.count;
    info->max_ranks_per_node = db->run_max_ranks_per_node;
    /* The first hosts, as many as fit with room for the count of the rest. */
    size_t used = 0, shown = 0;
    for (; shown < db->run_hosts.count; shown++) {
        const char *host = dsi_strtab_at(&db->run_hosts, shown);
        if (used + strlen(host) + 1 + 24 >= sizeof(info->hosts))
            break;
        used += (size_t)snprintf(info->hosts + used, sizeof(info->hosts) - used, "%s%s",
                                 shown ? "," : "", host);
    }
    if (shown < db->run_hosts.count)
        snprintf(info->hosts + used, sizeof(info->hosts) - used, ",... (+%zu more)",
                 db->run_hosts.count - shown);
    return DS_OK;
}

/* Makes the complete temporary file the database: flush it to stable
 * storage, rename it over the old one, flush the directory entry. */
static ds_status_t publish(const ds_profile_db_t *db, const char *temporary)
{
    int fd = open(temporary, O_RDONLY);
    if (fd < 0 || fsync(fd) != 0) {
        int error = errno;
        if (fd >= 0)
            close(fd);
        return DSI_ERROR(DS_ERR_IO, "cannot write profile database '%s': syncing '%s': %s",
                         db->own.path, temporary, strerror(error));
    }
    close(fd);
    if (rename(temporary, db->own.path) != 0)
        return DSI_ERROR(DS_ERR_IO, "cannot write profile database '%s': renaming '%s' over it: %s",
                         db->own.path, temporary, strerror(errno));
    char directory[4096];
    const char *base;
    split_path(db->own.path, directory, sizeof(directory), &base);
    fd = open(directory, O_RDONLY | O_DIRECTORY);
    if (fd >= 0) {
        fsync(fd); /* best effort: not every file system syncs directories */
        close(fd);
    }
    return DS_OK;
}

static ds_status_t copy_strtab(dsi_strtab_t *to, const dsi_strtab_t *from)
{
    dsi_strtab_clear(to);
    for (size_t i = 0; i < from->count; i++) {
        uint32_t id;
        DSI_TRY(dsi_strtab_intern(to, dsi_strtab_at(from, i), &id));
    }
    return DS_OK;
}

static ds_status_t write_database(ds_profile_db_t *db)
{
    ds_status_t status = DS_OK, local = DS_OK;
    plan_t plan;
    memset(&plan, 0, sizeof(plan));
    DSI_TRY(gather_run_hosts(db));
    if (db->rank == 0)
        local = plan_write(db, &plan);
    DSI_TRY(dsi_store_agree(db, local));
    if (db->comm != MPI_COMM_NULL)
        DSI_MPI_TRY_GOTO(MPI_Bcast(&plan, (int)sizeof(plan), MPI_BYTE, 0, db->comm), status, out);
    status =
        dsi_store_write_file(db, plan.temporary, plan.collective != 0, &plan.info, &db->run_hosts);
    local = DS_OK;
    if (db->rank == 0) {
        if (status == DS_OK)
            local = publish(db, plan.temporary);
        if (status != DS_OK || local != DS_OK)
            unlink(plan.temporary);
    }
    if (status != DS_OK) /* already agreed */
        goto out;
    DSI_TRY_GOTO(dsi_store_agree(db, local), status, out);
    hook(db, "renamed");
    db->own.info = plan.info;
    status = dsi_store_agree(db, copy_strtab(&db->own.allocation_hosts, &db->run_hosts));
out:
    return status;
}

/* ---- commit and checkpoint ------------------------------------------------------------- */

ds_status_t ds_profile_db_commit(ds_profile_db_t *db)
{
    ds_status_t status = DS_OK;
    dsi_h5_scope_t scope;
    dsi_h5_scope_begin(&scope);
    DSI_TRY_GOTO(dsi_store_agree(db, dsi_store_check_writable(db)), status, out);
    status = gather_and_merge(db);
    if (status != DS_OK) {
        /* Some ranks may have merged part of it: the images may differ. */
        db->broken = true;
        goto out;
    }
    db->dirty = true;
    DSI_TRY_GOTO(write_database(db), status, out);
    db->dirty = false;
    db->last_write_s = dsi_now_s();
out:
    dsi_h5_scope_end(&scope);
    return status;
}

ds_status_t ds_profile_db_checkpoint(ds_profile_db_t *db, int *written_p)
{
    ds_status_t status = DS_OK;
    DSI_TRY(dsi_store_agree(db, dsi_store_check_writable(db)));
    int64_t pending = (int64_t)ds_profile_db_num_pending(db);
    double elapsed = dsi_now_s() - db->last_write_s;
    if (db->comm != MPI_COMM_NULL) {
        int64_t total = 0;
        double longest = 0.0;
        DSI_MPI_TRY_GOTO(MPI_Allreduce(&pending, &total, 1, MPI_INT64_T, MPI_SUM, db->comm), status,
                         out);
        DSI_MPI_TRY_GOTO(MPI_Allreduce(&elapsed, &longest, 1, MPI_DOUBLE, MPI_MAX, db->comm),
                         status, out);
        pending = total;
        elapsed = longest;
    }
    int64_t by_count = dsi_param_int(DSI_PARAM_DB_CHECKPOINT_EVENTS);
    double by_time = dsi_param_double(DSI_PARAM_DB_CHECKPOINT_SECONDS);
    bool due = (by_count > 0 && pending >= by_count) ||
               (by_time > 0.0 && elapsed >= by_time && (pending > 0 || db->dirty));
    if (due)
        DSI_TRY_GOTO(ds_profile_db_commit(db), status, out);
    if (written_p != NULL)
        *written_p = due;
out:
    return status;
}
