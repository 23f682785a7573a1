/* Private parts of the store module: the in-memory image of a profile
 * database, the row layouts shared by memory, MPI and the HDF5 file, HDF5
 * error translation, and the read/write halves. */
#ifndef DSI_STORE_H
#define DSI_STORE_H

#include <dsmpi/store.h>

#include "dsi_core.h"
#include "dsi_mpi.h"

#include <hdf5.h>
#include <stdbool.h>

/* ---- HDF5 error translation ---------------------------------------------------
 * Every HDF5 call is checked with DSI_H5_TRY_GOTO.  While a store function
 * runs, an HDF5 error handler captures the innermost message of the error
 * stack (instead of printing the stack); DSI_H5_TRY_GOTO turns it into
 * DS_ERR_HDF5 "H5Fopen failed: <message>", logged once with file:line. */
typedef struct dsi_h5_scope {
    H5E_auto2_t saved_func;
    void *saved_data;
    bool saved;
} dsi_h5_scope_t;

/* Installs the capturing handler; dsi_h5_scope_end restores the previous one. */
void dsi_h5_scope_begin(dsi_h5_scope_t *scope);
void dsi_h5_scope_end(dsi_h5_scope_t *scope);
ds_status_t dsi_h5_error(const char *file, int line, const char *call);

/* `call` may be an assignment ("file = H5Fopen(...)"); negative = failure. */
#define DSI_H5_TRY_GOTO(call, status, label)                                                       \
    do {                                                                                           \
        if ((call) < 0) {                                                                          \
            (status) = dsi_h5_error(__FILE__, __LINE__, #call);                                    \
            goto label;                                                                            \
        }                                                                                          \
    } while (0)

/* H5Pset_file_locking exists from 1.10.7 in the 1.10 series and from 1.12.1. */
#if (H5_VERSION_GE(1, 10, 7) && !H5_VERSION_GE(1, 11, 0)) || H5_VERSION_GE(1, 12, 1)
#define DSI_H5_HAS_FILE_LOCKING 1
#else
#define DSI_H5_HAS_FILE_LOCKING 0
#endif

/* Closes an HDF5 identifier of any kind if valid, ignoring errors (cleanup paths). */
void dsi_h5_close(hid_t *id);

/* ---- rows -------------------------------------------------------------------
 * One layout in memory, in MPI messages and in the file (a collective write
 * must not convert types).  No pointers; zeroed before filling. */
typedef struct dsi_event_row {
    int64_t dims[4];
    double mean_s, median_s, p10_s, p90_s;
    int64_t repetitions;
    double measured_at_s;
    double hist_min_s, hist_max_s;
    int32_t group_size, ranks_per_node, nodes, concurrency;
    int32_t rank;
    uint32_t fingerprint; /* index into the fingerprints table */
    uint32_t host;        /* index into the hosts table */
    uint32_t histogram[DS_COST_HISTOGRAM_BINS];
    uint8_t kind, op, pass, dtype, variant, flags, group, provenance;
} dsi_event_row_t;

#define DSI_SOURCE_MAX 64
_Static_assert(sizeof(((ds_comm_sample_t *)0)->source) == DSI_SOURCE_MAX,
               "comm sample source size");

typedef struct dsi_comm_row {
    int64_t bytes;
    double mean_s, median_s, p10_s, p90_s;
    int64_t repetitions;
    int32_t group_size, nodes, ranks_per_node, concurrency, in_place, batched, span_nodes;
    uint8_t op, dtype, provenance, reserved;
    char source[DSI_SOURCE_MAX];
} dsi_comm_row_t;

void dsi_row_from_record(const ds_profile_record_t *record, dsi_event_row_t *row);
void dsi_row_key(const dsi_event_row_t *row, ds_event_key_t *key);
void dsi_comm_row_from_sample(const ds_comm_sample_t *sample, dsi_comm_row_t *row);
void dsi_comm_row_to_sample(const dsi_comm_row_t *row, ds_comm_sample_t *sample);
/* Checks the values a row may hold; the message names row `index` of
 * `table` (SIZE_MAX: the table name alone). */
ds_status_t dsi_event_row_check(const dsi_event_row_t *row, size_t num_fingerprints,
                                size_t num_hosts, const char *table, size_t index);
ds_status_t dsi_comm_row_check(const dsi_comm_row_t *row, const char *what);

/* ---- string tables -------------------------------------------------------------
 * Interned strings in fixed-width slots (the slots are written to the file
 * as they are). */
typedef struct dsi_strtab {
    char *data; /* count * width bytes */
    size_t width;
    size_t count, capacity;
    uint32_t *slots; /* index + 1; 0 = empty */
    size_t num_slots;
} dsi_strtab_t;

void dsi_strtab_init(dsi_strtab_t *tab, size_t width);
void dsi_strtab_free(dsi_strtab_t *tab);
void dsi_strtab_clear(dsi_strtab_t *tab);
/* Index of `text` (at most width - 1 characters), added when new. */
ds_status_t dsi_strtab_intern(dsi_strtab_t *tab, const char *text, uint32_t *index_p);
/* Index of `text`, or -1. */
int64_t dsi_strtab_find(const dsi_strtab_t *tab, const char *text);
const char *dsi_strtab_at(const dsi_strtab_t *tab, size_t index);
/* Rebuilds the lookup from `data` after it was filled in bulk (file, broadcast). */
ds_status_t dsi_strtab_reindex(dsi_strtab_t *tab);
ds_status_t dsi_strtab_reserve(dsi_strtab_t *tab, size_t count);

/* ---- one database image ---------------------------------------------------------- */
typedef struct dsi_db_layer {
    char *path;
    dsi_strtab_t fingerprints; /* width DS_FINGERPRINT_MAX */
    dsi_strtab_t hosts;        /* width DS_NAME_MAX */
    dsi_event_row_t *rows;
    size_t num_rows, cap_rows;
    uint32_t *index;      /* (fingerprint, key) -> row + 1 */
    uint32_t *index_tags; /* high 32 bits of the hash of each slot's row */
    size_t index_slots;
    dsi_comm_row_t *comm;
    size_t num_comm, cap_comm;
    dsi_strtab_t allocation_hosts; /* hosts of the run that wrote the file */
    ds_profile_db_info_t info;
} dsi_db_layer_t;

void dsi_layer_init(dsi_db_layer_t *layer);
void dsi_layer_free(dsi_db_layer_t *layer);
/* Row index of (fingerprint index, key), or -1. */
int64_t dsi_layer_find(const dsi_db_layer_t *layer, uint32_t fingerprint,
                       const ds_event_key_t *key);
/* Inserts or replaces; `row` names its strings by this layer's indices. */
ds_status_t dsi_layer_put(dsi_db_layer_t *layer, const dsi_event_row_t *row, bool *replaced_p);
ds_status_t dsi_layer_put_comm(dsi_db_layer_t *layer, const dsi_comm_row_t *row);
/* Whether two samples describe the same measurement (statistics aside). */
bool dsi_comm_row_same(const dsi_comm_row_t *a, const dsi_comm_row_t *b);
/* Makes room for `count` rows in all, without regrowing while they are put. */
ds_status_t dsi_layer_reserve(dsi_db_layer_t *layer, size_t count);
/* Rebuilds the row index after rows were filled in bulk. */
ds_status_t dsi_layer_reindex(dsi_db_layer_t *layer);

/* ---- the handle ---------------------------------------------------------------- */
struct ds_profile_db {
    MPI_Comm comm; /* private duplicate, or MPI_COMM_NULL: this process alone */
    int rank, size;
    bool read_only;
    bool dirty;  /* committed in memory but not yet in the file */
    bool broken; /* a commit failed half-way in memory: refuse further writes */
    dsi_db_layer_t own;
    dsi_db_layer_t *fallbacks;
    size_t num_fallbacks;
    /* This rank's additions since the last commit; their string indices
     * point into the pending tables. */
    dsi_event_row_t *pending;
    size_t num_pending, cap_pending;
    dsi_strtab_t pending_fingerprints, pending_hosts;
    dsi_comm_row_t *pending_comm;
    size_t num_pending_comm, cap_pending_comm;
    /* Run description for the next write. */
    char backend[32];
    char device[DS_NAME_MAX];
    char command_line[512];
    double last_write_s; /* monotonic clock */
    /* The hosts of this run, gathered at the first write. */
    dsi_strtab_t run_hosts;
    int run_max_ranks_per_node;
    bool run_hosts_known;
};

/* Every rank learns whether any rank failed; on failure all return the
 * status and message of the lowest failing rank.  No-op without MPI. */
ds_status_t dsi_store_agree(const ds_profile_db_t *db, ds_status_t local);

/* The directory of `path` exists and this process may create files in it. */
ds_status_t dsi_store_check_directory(const char *path);

/* DS_OK when the handle may be written to (not read-only, not broken). */
ds_status_t dsi_store_check_writable(const ds_profile_db_t *db);

/* MPI datatypes of the rows; free with MPI_Type_free. */
ds_status_t dsi_store_mpi_types(MPI_Datatype *event_row_p, MPI_Datatype *comm_row_p);

/* HDF5 types of the rows and strings; close with dsi_h5_close. */
hid_t dsi_h5_event_row_type(void);
hid_t dsi_h5_comm_row_type(void);
hid_t dsi_h5_string_type(size_t width);

/* Reads the file at `path` into `layer` (rank 0 only).  DS_ERR_NOT_FOUND
 * when it does not exist; DS_ERR_BAD_FILE when it is not a usable database. */
ds_status_t dsi_store_read_file(const char *path, dsi_db_layer_t *layer);
/* Rank 0 reads `path` into `layer` and broadcasts it; collective.
 * `must_exist`: a missing file is an error rather than an empty layer. */
ds_status_t dsi_store_load(ds_profile_db_t *db, dsi_db_layer_t *layer, const char *path,
                           bool must_exist);

/* Writes the own layer to `path` (a temporary name) with `info` as its
 * attributes and `allocation_hosts` as the writing run's hosts: collectively
 * when `collective`, otherwise rank 0 alone.  Status agreed on every rank. */
ds_status_t dsi_store_write_file(ds_profile_db_t *db, const char *path, bool collective,
                                 const ds_profile_db_info_t *info,
                                 const dsi_strtab_t *allocation_hosts);

/* Whether the file system holding `directory` needs rank 0 to write alone
 * (NFS, SMB); names it in `fs_name`. */
bool dsi_store_fs_is_unsafe_for_mpiio(const char *directory, char *fs_name, size_t size);

/* Test hook: called on every rank taking part in a write at each stage
 * ("created", "written", "closed", "renamed"); NULL outside tests. */
extern void (*dsi_store_write_hook)(const char *stage, int rank);
/* Whether a write first checks the file system has room (tests turn it off
 * to exercise running out of space half-way). */
extern bool dsi_store_space_check;

/* UTC seconds now (the monotonic clock is core's dsi_now_s). */
double dsi_store_utc_now(void);

#endif /* DSI_STORE_H */
