/* Reading a profile database: rank 0 opens the file (refusing anything that
 * is not a complete database of a known format) and broadcasts its image. */
#include "dsi_store.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

/* ---- attributes ------------------------------------------------------------------ */

static ds_status_t read_attr_string(hid_t object, const char *name, char *text, size_t size)
{
    ds_status_t status = DS_OK;
    hid_t attr = H5I_INVALID_HID, type = H5I_INVALID_HID, mem = H5I_INVALID_HID;
    char *buffer = NULL;
    DSI_H5_TRY_GOTO(attr = H5Aopen(object, name, H5P_DEFAULT), status, out);
    DSI_H5_TRY_GOTO(type = H5Aget_type(attr), status, out);
    if (H5Tget_class(type) != H5T_STRING || H5Tis_variable_str(type) != 0) {
        status = DSI_ERROR(DS_ERR_BAD_FILE, "attribute '%s' is not a fixed-length string", name);
        goto out;
    }
    size_t width = H5Tget_size(type);
    if (width == 0 || width > (1u << 20)) {
        status = DSI_ERROR(DS_ERR_BAD_FILE, "attribute '%s' has %zu characters", name, width);
        goto out;
    }
    DSI_TRY_GOTO(dsi_calloc(width + 1, 1, &buffer), status, out);
    DSI_H5_TRY_GOTO(mem = dsi_h5_string_type(width), status, out);
    DSI_H5_TRY_GOTO(H5Aread(attr, mem, buffer), status, out);
    snprintf(text, size, "%s", buffer);
out:
    dsi_free(buffer);
    dsi_h5_close(&mem);
    dsi_h5_close(&type);
    dsi_h5_close(&attr);
    return status;
}

static ds_status_t read_attr_number(hid_t object, const char *name, hid_t mem_type, void *value)
{
    ds_status_t status = DS_OK;
    hid_t attr = H5I_INVALID_HID, space = H5I_INVALID_HID;
    DSI_H5_TRY_GOTO(attr = H5Aopen(object, name, H5P_DEFAULT), status, out);
    DSI_H5_TRY_GOTO(space = H5Aget_space(attr), status, out);
    if (H5Sget_simple_extent_npoints(space) != 1) {
        status = DSI_ERROR(DS_ERR_BAD_FILE, "attribute '%s' is not a single number", name);
        goto out;
    }
    DSI_H5_TRY_GOTO(H5Aread(attr, mem_type, value), status, out);
out:
    dsi_h5_close(&space);
    dsi_h5_close(&attr);
    return status;
}

static ds_status_t read_info(hid_t file, ds_profile_db_info_t *info)
{
    long long version = 0;
    DSI_TRY(read_attr_number(file, "dsmpi_format_version", H5T_NATIVE_LLONG, &version));
    if (version != DS_PROFILE_DB_FORMAT_VERSION)
        return DSI_ERROR(
            DS_ERR_BAD_FILE,
            "it is a dsmpi profile database of format version %lld (this dsmpi reads version %d)",
            version, DS_PROFILE_DB_FORMAT_VERSION);
    info->format_version = (int)version;
    DSI_TRY(read_attr_string(file, "library_version", info->library_version,
                             sizeof(info->library_version)));
    DSI_TRY(read_attr_string(file, "backend", info->backend, sizeof(info->backend)));
    DSI_TRY(read_attr_string(file, "device", info->device, sizeof(info->device)));
    DSI_TRY(read_attr_string(file, "command_line", info->command_line, sizeof(info->command_line)));
    DSI_TRY(read_attr_string(file, "written_at", info->written_at, sizeof(info->written_at)));
    DSI_TRY(read_attr_number(file, "written_at_s", H5T_NATIVE_DOUBLE, &info->written_at_s));
    DSI_TRY(read_attr_number(file, "ranks", H5T_NATIVE_INT, &info->ranks));
    DSI_TRY(read_attr_number(file, "nodes", H5T_NATIVE_INT, &info->nodes));
    DSI_TRY(
        read_attr_number(file, "max_ranks_per_node", H5T_NATIVE_INT, &info->max_ranks_per_node));
    DSI_TRY(read_attr_string(file, "hosts", info->hosts, sizeof(info->hosts)));
    return DS_OK;
}

/* ---- tables ------------------------------------------------------------------------- */

/* Reads the 1-D dataset `name` as `type` into a new array of *count_p
 * elements of `size` bytes (at least one element is allocated). */
static ds_status_t read_table(hid_t file, const char *name, hid_t type, size_t size, void *data_p,
                              size_t *count_p)
{
    ds_status_t status = DS_OK;
    hid_t dset = H5I_INVALID_HID, space = H5I_INVALID_HID;
    void *data = NULL;
    hsize_t dims[1] = {0};
    DSI_H5_TRY_GOTO(dset = H5Dopen2(file, name, H5P_DEFAULT), status, out);
    DSI_H5_TRY_GOTO(space = H5Dget_space(dset), status, out);
    if (H5Sget_simple_extent_ndims(space) != 1) {
        status = DSI_ERROR(DS_ERR_BAD_FILE, "dataset '%s' is not a table (one dimension)", name);
        goto out;
    }
    DSI_H5_TRY_GOTO(H5Sget_simple_extent_dims(space, dims, NULL), status, out);
    if (dims[0] > (hsize_t)(UINT32_MAX / 4)) {
        status = DSI_ERROR(DS_ERR_BAD_FILE, "dataset '%s' has %llu rows", name,
                           (unsigned long long)dims[0]);
        goto out;
    }
    DSI_TRY_GOTO(dsi_calloc(dims[0] ? (size_t)dims[0] : 1, size, &data), status, out);
    if (dims[0] > 0)
        DSI_H5_TRY_GOTO(H5Dread(dset, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data), status, out);
    *(void **)data_p = data;
    *count_p = (size_t)dims[0];
    data = NULL;
out:
    dsi_free(data);
    dsi_h5_close(&space);
    dsi_h5_close(&dset);
    return status;
}

static ds_status_t read_strings(hid_t file, const char *name, dsi_strtab_t *tab)
{
    ds_status_t status = DS_OK;
    hid_t type = H5I_INVALID_HID;
    char *data = NULL;
    size_t count = 0;
    DSI_H5_TRY_GOTO(type = dsi_h5_string_type(tab->width), status, out);
    DSI_TRY_GOTO(read_table(file, name, type, tab->width, &data, &count), status, out);
    dsi_strtab_free(tab);
    tab->data = data;
    tab->capacity = count ? count : 1;
    tab->count = count;
    DSI_TRY_GOTO(dsi_strtab_reindex(tab), status, out);
out:
    dsi_h5_close(&type);
    return status;
}

static ds_status_t read_tables(hid_t file, dsi_db_layer_t *layer)
{
    ds_status_t status = DS_OK;
    hid_t event_type = H5I_INVALID_HID, comm_type = H5I_INVALID_HID;
    DSI_TRY_GOTO(read_strings(file, "fingerprints", &layer->fingerprints), status, out);
    DSI_TRY_GOTO(read_strings(file, "hosts", &layer->hosts), status, out);
    DSI_TRY_GOTO(read_strings(file, "allocation_hosts", &layer->allocation_hosts), status, out);
    DSI_H5_TRY_GOTO(event_type = dsi_h5_event_row_type(), status, out);
    DSI_H5_TRY_GOTO(comm_type = dsi_h5_comm_row_type(), status, out);
    DSI_TRY_GOTO(read_table(file, "events", event_type, sizeof(dsi_event_row_t), &layer->rows,
                            &layer->num_rows),
                 status, out);
    layer->cap_rows = layer->num_rows ? layer->num_rows : 1;
    DSI_TRY_GOTO(read_table(file, "comm_samples", comm_type, sizeof(dsi_comm_row_t), &layer->comm,
                            &layer->num_comm),
                 status, out);
    layer->cap_comm = layer->num_comm ? layer->num_comm : 1;
    for (size_t i = 0; i < layer->num_rows; i++)
        DSI_TRY_GOTO(dsi_event_row_check(&layer->rows[i], layer->fingerprints.count,
                                         layer->hosts.count, "events", i),
                     status, out);
    char what[64];
    for (size_t i = 0; i < layer->num_comm; i++) {
        snprintf(what, sizeof(what), "comm_samples row %zu", i);
        DSI_TRY_GOTO(dsi_comm_row_check(&layer->comm[i], what), status, out);
    }
    DSI_TRY_GOTO(dsi_layer_reindex(layer), status, out);
out:
    dsi_h5_close(&comm_type);
    dsi_h5_close(&event_type);
    return status;
}

/* ---- the file ------------------------------------------------------------------------ */

/* HDF5 files start with this signature at offset 0, 512, 1024, 2048, ... */
static bool has_hdf5_signature(FILE *file, long long size)
{
    static const unsigned char signature[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};
    for (long long offset = 0; offset + 8 <= size; offset = offset ? 2 * offset : 512) {
        unsigned char bytes[8];
        if (fseeko(file, (off_t)offset, SEEK_SET) != 0 || fread(bytes, 1, 8, file) != 8)
            return false;
        if (memcmp(bytes, signature, 8) == 0)
            return true;
    }
    return false;
}

static const char refusal[] = "refusing to use or overwrite it";

ds_status_t dsi_store_read_file(const char *path, dsi_db_layer_t *layer)
{
    ds_status_t status = DS_OK;
    hid_t fapl = H5I_INVALID_HID, file = H5I_INVALID_HID;
    struct stat info;
    if (stat(path, &info) != 0) {
        if (errno == ENOENT)
            return DSI_ERROR(DS_ERR_NOT_FOUND, "profile database '%s' does not exist", path);
        return DSI_ERROR(DS_ERR_IO, "cannot read profile database '%s': %s", path, strerror(errno));
    }
    if (!S_ISREG(info.st_mode))
        return DSI_ERROR(DS_ERR_BAD_FILE, "profile database '%s' is not a regular file; %s", path,
                         refusal);
    FILE *stream = fopen(path, "rb");
    if (stream == NULL)
        return DSI_ERROR(DS_ERR_IO, "cannot read profile database '%s': %s", path, strerror(errno));
    bool hdf5 = has_hdf5_signature(stream, (long long)info.st_size);
    fclose(stream);
    if (!hdf5)
        return DSI_ERROR(DS_ERR_BAD_FILE,
                         "'%s' is not an HDF5 file, so not a dsmpi profile database; %s", path,
                         refusal);

    DSI_H5_TRY_GOTO(fapl = H5Pcreate(H5P_FILE_ACCESS), status, err);
#if DSI_H5_HAS_FILE_LOCKING
    /* Lock where the file system can; go on where it cannot. */
    DSI_H5_TRY_GOTO(H5Pset_file_locking(fapl, 1, 1), status, err);
#endif
    DSI_H5_TRY_GOTO(file = H5Fopen(path, H5F_ACC_RDONLY, fapl), status, err);
    htri_t tagged;
    DSI_H5_TRY_GOTO(tagged = H5Aexists(file, "dsmpi_format"), status, err);
    char format[64] = "";
    if (tagged > 0)
        DSI_TRY_GOTO(read_attr_string(file, "dsmpi_format", format, sizeof(format)), status, err);
    if (strcmp(format, DS_PROFILE_DB_FORMAT) != 0) {
        status = DSI_ERROR(
            DS_ERR_BAD_FILE,
            "'%s' is an HDF5 file but not a dsmpi profile database (no '%s' format attribute); %s",
            path, DS_PROFILE_DB_FORMAT, refusal);
        goto out;
    }
    DSI_TRY_GOTO(read_info(file, &layer->info), status, err);
    DSI_TRY_GOTO(read_tables(file, layer), status, err);
    goto out;
err : {
    /* Anything that goes wrong past the signature: the file is damaged
     * (truncated, corrupted, or written by something else). */
    char cause[768];
    snprintf(cause, sizeof(cause), "%s", ds_last_error());
    if (status == DS_ERR_BAD_FILE && strstr(cause, "format version") != NULL)
        status = DSI_ERROR(DS_ERR_BAD_FILE, "'%s': %s; %s", path, cause, refusal);
    else if (status != DS_ERR_NO_MEMORY)
        status =
            DSI_ERROR(DS_ERR_BAD_FILE, "profile database '%s' is damaged or truncated (%s); %s",
                      path, cause, refusal);
}
out:
    dsi_h5_close(&file);
    dsi_h5_close(&fapl);
    return status;
}

/* ---- broadcast ---------------------------------------------------------------------- */

/* Broadcasts `count` elements in pieces small enough for an int count. */
static ds_status_t bcast_array(void *data, size_t count, MPI_Datatype type, size_t size,
                               MPI_Comm comm)
{
    ds_status_t status = DS_OK;
    size_t piece = ((size_t)1 << 30) / (size ? size : 1);
    for (size_t done = 0; done < count; done += piece) {
        size_t n = count - done < piece ? count - done : piece;
        DSI_MPI_TRY_GOTO(MPI_Bcast((char *)data + done * size, (int)n, type, 0, comm), status, out);
    }
out:
    return status;
}

typedef struct image_header {
    uint64_t fingerprints, hosts, allocation_hosts, rows, comm;
    ds_profile_db_info_t info;
} image_header_t;

static ds_status_t strtab_alloc(dsi_strtab_t *tab, size_t count)
{
    DSI_TRY(dsi_strtab_reserve(tab, count ? count : 1));
    tab->count = count;
    return DS_OK;
}

static ds_status_t bcast_layer(ds_profile_db_t *db, dsi_db_layer_t *layer)
{
    ds_status_t status = DS_OK, local = DS_OK;
    MPI_Datatype event_row = MPI_DATATYPE_NULL, comm_row = MPI_DATATYPE_NULL;
    image_header_t header;
    memset(&header, 0, sizeof(header));
    if (db->rank == 0) {
        header.fingerprints = layer->fingerprints.count;
        header.hosts = layer->hosts.count;
        header.allocation_hosts = layer->allocation_hosts.count;
        header.rows = layer->num_rows;
        header.comm = layer->num_comm;
        header.info = layer->info;
    }
    DSI_MPI_TRY_GOTO(MPI_Bcast(&header, (int)sizeof(header), MPI_BYTE, 0, db->comm), status, out);
    if (db->rank != 0) {
        layer->info = header.info;
        local = strtab_alloc(&layer->fingerprints, header.fingerprints);
        if (local == DS_OK)
            local = strtab_alloc(&layer->hosts, header.hosts);
        if (local == DS_OK)
            local = strtab_alloc(&layer->allocation_hosts, header.allocation_hosts);
        if (local == DS_OK && header.rows > 0)
            local = dsi_realloc_array(&layer->rows, header.rows, sizeof(*layer->rows));
        if (local == DS_OK && header.comm > 0)
            local = dsi_realloc_array(&layer->comm, header.comm, sizeof(*layer->comm));
        layer->num_rows = layer->cap_rows = header.rows;
        layer->num_comm = layer->cap_comm = header.comm;
    }
    DSI_TRY_GOTO(dsi_store_agree(db, local), status, out);
    DSI_TRY_GOTO(dsi_store_mpi_types(&event_row, &comm_row), status, out);
    DSI_TRY_GOTO(bcast_array(layer->fingerprints.data,
                             layer->fingerprints.count * DS_FINGERPRINT_MAX, MPI_CHAR, 1, db->comm),
                 status, out);
    DSI_TRY_GOTO(
        bcast_array(layer->hosts.data, layer->hosts.count * DS_NAME_MAX, MPI_CHAR, 1, db->comm),
        status, out);
    DSI_TRY_GOTO(bcast_array(layer->allocation_hosts.data,
                             layer->allocation_hosts.count * DS_NAME_MAX, MPI_CHAR, 1, db->comm),
                 status, out);
    DSI_TRY_GOTO(
        bcast_array(layer->rows, layer->num_rows, event_row, sizeof(dsi_event_row_t), db->comm),
        status, out);
    DSI_TRY_GOTO(
        bcast_array(layer->comm, layer->num_comm, comm_row, sizeof(dsi_comm_row_t), db->comm),
        status, out);
    if (db->rank != 0) {
        local = dsi_strtab_reindex(&layer->fingerprints);
        if (local == DS_OK)
            local = dsi_strtab_reindex(&layer->hosts);
        if (local == DS_OK)
            local = dsi_strtab_reindex(&layer->allocation_hosts);
        if (local == DS_OK)
            local = dsi_layer_reindex(layer);
    }
    status = dsi_store_agree(db, local);
out:
    if (comm_row != MPI_DATATYPE_NULL)
        MPI_Type_free(&comm_row);
    if (event_row != MPI_DATATYPE_NULL)
        MPI_Type_free(&event_row);
    return status;
}

ds_status_t dsi_store_load(ds_profile_db_t *db, dsi_db_layer_t *layer, const char *path,
                           bool must_exist)
{
    ds_status_t status = DS_OK, local = DS_OK;
    local = dsi_strdup(path, &layer->path);
    if (local == DS_OK && db->rank == 0) {
        local = dsi_store_read_file(path, layer);
        if (local == DS_ERR_NOT_FOUND && !must_exist) {
            /* A new database: it starts empty. */
            char *kept = layer->path;
            layer->path = NULL;
            dsi_layer_free(layer);
            layer->path = kept;
            ds_clear_error();
            local = DS_OK;
        }
    }
    DSI_TRY_GOTO(dsi_store_agree(db, local), status, out);
    if (db->comm != MPI_COMM_NULL && db->size > 1)
        DSI_TRY_GOTO(bcast_layer(db, layer), status, out);
out:
    return status;
}
