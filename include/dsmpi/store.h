/*
 * dsmpi store: the profile database, an HDF5 file of measured costs that
 * profiling runs fill and every later run reuses.
 *
 * Contents (format "dsmpi-profile-db", version 1; `h5dump` reads it):
 *   /events             one row per (device fingerprint, event key): the key
 *                       fields as columns, the cost statistics, which rank and
 *                       host measured it, when (UTC seconds), a histogram
 *   /fingerprints       device fingerprints the events rows refer to by index
 *   /hosts              host names the events rows refer to by index
 *   /comm_samples       communication measurements (measured or imported)
 *   /allocation_hosts   the hosts of the run that wrote the file last
 *   root attributes     format name and version, library version, backend,
 *                       device, command line, ranks, nodes, hosts, date
 * Tables are chunked and extendible, each chunk with a Fletcher-32 checksum;
 * the file uses the HDF5 1.10 format (metadata checksums), so any damage is
 * detected on reading.  HDF5 1.10 or newer reads it.  A file without the format attribute, with
 * another format version, damaged or truncated, or not HDF5 at all is refused with a one-line error
 * naming it, and is never written to.
 *
 * Model of use.  A database handle is opened collectively over an MPI
 * communicator; rank 0 reads the file and broadcasts its contents, so every
 * rank holds the same committed contents and queries are local.  Ranks add
 * the records they measured locally; a commit (or a checkpoint) gathers
 * everyone's additions to every rank and rewrites the whole file: collectively
 * with parallel HDF5 (each rank writes its own block of rows of the merged
 * table), into a temporary file in the same directory ("<file>.tmp.<host>.
 * <pid>") that is then renamed over the previous one.  A crash at any
 * moment, of one rank or all, leaves the last complete database in place;
 * the next write on the same host removes the temporary file a killed run
 * left.  A write that the file system has no room for is refused before it
 * starts.  On NFS (and SMB) MPI-IO is unsafe, so rank 0 writes alone;
 * DS_DB_WRITE_MODE forces either way.
 *
 * File systems without file locking (some Lustre and NFS mounts): HDF5 may
 * fail to open files there; dsmpi asks HDF5 to ignore locking where the file
 * system does not support it, and setting HDF5_USE_FILE_LOCKING=FALSE in the
 * job environment turns HDF5's locking off entirely.  Two jobs must not write
 * one database at the same time: the last to commit wins.
 *
 * A communicator of MPI_COMM_NULL means "this process alone": no MPI call is
 * made, so programs that do not initialise MPI can read and write databases.
 */
#ifndef DSMPI_STORE_H
#define DSMPI_STORE_H

#include <dsmpi/core.h>
#include <dsmpi/events.h>

#include <mpi.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DS_PROFILE_DB_FORMAT "dsmpi-profile-db"
#define DS_PROFILE_DB_FORMAT_VERSION 1

/* Longest device fingerprint, terminating NUL included. */
#define DS_FINGERPRINT_MAX 256

/* ---- cost histograms ------------------------------------------------------
 * A small histogram of the timed repetitions behind a cost: bin i covers
 * [min_s * r^i, min_s * r^(i+1)) with r = (max_s / min_s)^(1/BINS), the last
 * bin includes max_s; all samples are in bin 0 when max_s == min_s.  With
 * min_s <= 0 the bins are linear instead.  All counts zero = not kept. */
#define DS_COST_HISTOGRAM_BINS 16

typedef struct ds_cost_histogram {
    double min_s;
    double max_s;
    uint32_t counts[DS_COST_HISTOGRAM_BINS];
} ds_cost_histogram_t;

/* Fills `histogram` from `count` samples in seconds (count 0 zeroes it). */
DS_API void ds_cost_histogram_fill(const double *samples_s, size_t count,
                                   ds_cost_histogram_t *histogram);

/* ---- records ---------------------------------------------------------------- */

/* One measured (or imported) event cost. */
typedef struct ds_profile_record {
    ds_event_key_t key;
    ds_cost_t cost;
    ds_cost_histogram_t histogram;
    char fingerprint[DS_FINGERPRINT_MAX]; /* device fingerprint the cost is valid for */
    char host[DS_NAME_MAX];               /* host that measured it */
    int32_t rank;                         /* rank that measured it (-1: imported) */
    double measured_at_s;                 /* UTC seconds since the epoch */
} ds_profile_record_t;

/* ---- the database handle ------------------------------------------------------ */

typedef struct ds_profile_db ds_profile_db_t;

/* ds_profile_db_open flags. */
#define DS_PROFILE_DB_READ_ONLY 1u /* never written; the file must exist */

/* Opens the database at `path`; collective over `comm` (duplicated; or
 * MPI_COMM_NULL for this process alone).  Rank 0 reads the file and
 * broadcasts it.  A file that does not exist gives an empty database, unless
 * DS_PROFILE_DB_READ_ONLY (then DS_ERR_NOT_FOUND).  For writing, the
 * directory must exist and be writable.  A foreign, damaged or non-HDF5 file
 * is DS_ERR_BAD_FILE.  Every rank returns the same status.  Caller closes
 * with ds_profile_db_close. */
DS_API ds_status_t ds_profile_db_open(MPI_Comm comm, const char *path, unsigned flags,
                                      ds_profile_db_t **db_p);

/* Adds the database at `path`, read-only, as a fallback: queries look in the
 * handle's own database first, then in the fallbacks in the order added (a
 * site database per device type).  The file must exist.  Collective. */
DS_API ds_status_t ds_profile_db_add_fallback(ds_profile_db_t *db, const char *path);

/* Frees the handle; additions not committed are lost.  Collective over the
 * communicator it was opened on.  NULL is a no-op. */
DS_API void ds_profile_db_close(ds_profile_db_t *db);

/* The path the handle was opened on; owned by the handle. */
DS_API const char *ds_profile_db_path(const ds_profile_db_t *db);

/* ---- queries -----------------------------------------------------------------
 * Local (no communication).  They see the committed contents, which are the
 * same on every rank, and never this rank's uncommitted additions. */

/* Non-zero when a cost of `key` for `fingerprint` is in the database or a
 * fallback: the profiler measures only keys for which this is zero (unless
 * asked to measure again). */
DS_API int ds_profile_db_has(const ds_profile_db_t *db, const char *fingerprint,
                             const ds_event_key_t *key);

/* The record of `key` for `fingerprint`, first match wins (own database,
 * then fallbacks); DS_ERR_NOT_FOUND when none. */
DS_API ds_status_t ds_profile_db_lookup(const ds_profile_db_t *db, const char *fingerprint,
                                        const ds_event_key_t *key, ds_profile_record_t *record_p);

/* Puts every cost known for `fingerprint` into `table`: the own database's
 * costs replace entries the table holds; a fallback's costs only fill keys
 * the table does not hold yet.  `added_p` (may be NULL) receives the number
 * of keys set. */
DS_API ds_status_t ds_profile_db_fill_costs(const ds_profile_db_t *db, const char *fingerprint,
                                            ds_cost_table_t *table, size_t *added_p);

/* Records of the own database (not the fallbacks), in file order. */
DS_API size_t ds_profile_db_num_records(const ds_profile_db_t *db);
DS_API ds_status_t ds_profile_db_get_record(const ds_profile_db_t *db, size_t index,
                                            ds_profile_record_t *record_p);

/* Distinct device fingerprints of the own database and the fallbacks (own
 * first); the string is owned by the handle and valid until the next commit. */
DS_API size_t ds_profile_db_num_fingerprints(const ds_profile_db_t *db);
DS_API const char *ds_profile_db_fingerprint(const ds_profile_db_t *db, size_t index);

/* Communication samples of the own database then the fallbacks (a sample of
 * a fallback is left out when the own database has one with the same
 * description), those whose `source` equals `source` or all when NULL.
 * Caller frees *samples_p with ds_comm_samples_free. */
DS_API ds_status_t ds_profile_db_get_comm_samples(const ds_profile_db_t *db, const char *source,
                                                  ds_comm_sample_t **samples_p, size_t *count_p);
DS_API void ds_comm_samples_free(ds_comm_sample_t *samples);

/* What the file says about itself and the run that wrote it last. */
typedef struct ds_profile_db_info {
    int format_version;       /* 0: the file does not exist yet */
    char library_version[32]; /* dsmpi version that wrote it */
    char backend[32];
    char device[DS_NAME_MAX];
    char command_line[512]; /* truncated to fit */
    char written_at[32];    /* ISO 8601 UTC, "2025-01-31T12:00:00Z" */
    double written_at_s;    /* UTC seconds since the epoch */
    int ranks;              /* allocation shape of the writing run */
    int nodes;
    int max_ranks_per_node;
    char hosts[256]; /* "node01,node02,... (+N more)"; all in /allocation_hosts */
    size_t num_records;
    size_t num_fingerprints;
    size_t num_comm_samples;
} ds_profile_db_info_t;

/* Describes the own database as last read or committed. */
DS_API void ds_profile_db_get_info(const ds_profile_db_t *db, ds_profile_db_info_t *info);

/* ---- writing -----------------------------------------------------------------
 * Additions are local to the rank and become visible (on every rank, and in
 * the file) at the next commit or checkpoint.  A later addition of the same
 * (fingerprint, key) replaces the earlier one; among additions of one
 * commit, ranks are taken in order, so the highest rank's wins. */

/* Adds the cost this rank measured for `key` on the device `fingerprint`;
 * rank, host and time are this rank's and now.  `histogram` may be NULL. */
DS_API ds_status_t ds_profile_db_add(ds_profile_db_t *db, const char *fingerprint,
                                     const ds_event_key_t *key, const ds_cost_t *cost,
                                     const ds_cost_histogram_t *histogram);

/* Adds a complete record as given (imports; copies between databases). */
DS_API ds_status_t ds_profile_db_add_record(ds_profile_db_t *db, const ds_profile_record_t *record);

/* Adds communication samples; a sample with the same description (primitive,
 * dtype, bytes, group shape, concurrency, in-place, batched, source) as one
 * in the database replaces it. */
DS_API ds_status_t ds_profile_db_add_comm_samples(ds_profile_db_t *db,
                                                  const ds_comm_sample_t *samples, size_t count);

/* This rank's additions not yet committed (records and samples). */
DS_API size_t ds_profile_db_num_pending(const ds_profile_db_t *db);

/* What the next write records about the run (any may be NULL: keep the
 * previous).  Rank 0's values are written. */
DS_API ds_status_t ds_profile_db_set_run_info(ds_profile_db_t *db, const char *backend,
                                              const char *device, const char *command_line);

/* Gathers every rank's additions and writes the database (temporary file,
 * then rename).  Collective.  On failure the previous file is intact, the
 * additions stay in memory and the next commit writes them again. */
DS_API ds_status_t ds_profile_db_commit(ds_profile_db_t *db);

/* Commits when the additions since the last write reach DS_DB_CHECKPOINT_EVENTS
 * records over all ranks, or DS_DB_CHECKPOINT_SECONDS have passed since the
 * last write with something to write.  Collective: every rank calls it at the
 * same points.  `written_p` (may be NULL) says whether it wrote. */
DS_API ds_status_t ds_profile_db_checkpoint(ds_profile_db_t *db, int *written_p);

#ifdef __cplusplus
}
#endif

#endif /* DSMPI_STORE_H */
