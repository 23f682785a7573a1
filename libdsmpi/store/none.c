/* The profile database in a build without parallel HDF5 (the SimGrid SMPI
 * build, DSMPI_SMPI): every call that needs the file fails with
 * DS_ERR_UNSUPPORTED and says what to use instead.  Measurements of such a
 * build go to text files (a cost table and communication samples, see
 * ds_profile_options_t) that `dsmpi import` loads into a database. */
#include <dsmpi/comm.h>
#include <dsmpi/store.h>

#include "dsi_core.h"

#include <string.h>

static ds_status_t unsupported(void)
{
    return DSI_ERROR(DS_ERR_UNSUPPORTED,
                     "this build has no profile database (built without parallel HDF5 for "
                     "SimGrid SMPI); write text files instead (dsmpi profile --costs-out FILE "
                     "--comm-samples-out FILE) and load them with dsmpi import");
}

void ds_cost_histogram_fill(const double *samples_s, size_t count, ds_cost_histogram_t *histogram)
{
    (void)samples_s;
    (void)count;
    memset(histogram, 0, sizeof(*histogram)); /* not kept */
}

ds_status_t ds_profile_db_open(MPI_Comm comm, const char *path, unsigned flags,
                               ds_profile_db_t **db_p)
{
    return unsupported();
}

ds_status_t ds_profile_db_add_fallback(ds_profile_db_t *db, const char *path)
{
    return unsupported();
}

void ds_profile_db_close(ds_profile_db_t *db)
{
}

const char *ds_profile_db_path(const ds_profile_db_t *db)
{
    return "";
}

int ds_profile_db_has(const ds_profile_db_t *db, const char *fingerprint, const ds_event_key_t *key)
{
    return 0;
}

ds_status_t ds_profile_db_lookup(const ds_profile_db_t *db, const char *fingerprint,
                                 const ds_event_key_t *key, ds_profile_record_t *record_p)
{
    return unsupported();
}

ds_status_t ds_profile_db_fill_costs(const ds_profile_db_t *db, const char *fingerprint,
                                     ds_cost_table_t *table, size_t *added_p)
{
    return unsupported();
}

size_t ds_profile_db_num_records(const ds_profile_db_t *db)
{
    return 0;
}

ds_status_t ds_profile_db_get_record(const ds_profile_db_t *db, size_t index,
                                     ds_profile_record_t *record_p)
{
    return unsupported();
}

size_t ds_profile_db_num_fingerprints(const ds_profile_db_t *db)
{
    return 0;
}

const char *ds_profile_db_fingerprint(const ds_profile_db_t *db, size_t index)
{
    return NULL;
}

ds_status_t ds_profile_db_get_comm_samples(const ds_profile_db_t *db, const char *source,
                                           ds_comm_sample_t **samples_p, size_t *count_p)
{
    return unsupported();
}

void ds_comm_samples_free(ds_comm_sample_t *samples)
{
    dsi_free(samples);
}

void ds_profile_db_get_info(const ds_profile_db_t *db, ds_profile_db_info_t *info)
{
    memset(info, 0, sizeof(*info));
}

ds_status_t ds_profile_db_add(ds_profile_db_t *db, const char *fingerprint,
                              const ds_event_key_t *key, const ds_cost_t *cost,
                              const ds_cost_histogram_t *histogram)
{
    return unsupported();
}

ds_status_t ds_profile_db_add_record(ds_profile_db_t *db, const ds_profile_record_t *record)
{
    return unsupported();
}

ds_status_t ds_profile_db_add_comm_samples(ds_profile_db_t *db, const ds_comm_sample_t *samples,
                                           size_t count)
{
    return unsupported();
}

size_t ds_profile_db_num_pending(const ds_profile_db_t *db)
{
    return 0;
}

ds_status_t ds_profile_db_set_run_info(ds_profile_db_t *db, const char *backend, const char *device,
                                       const char *command_line)
{
    return unsupported();
}

ds_status_t ds_profile_db_commit(ds_profile_db_t *db)
{
    return unsupported();
}

ds_status_t ds_profile_db_checkpoint(ds_profile_db_t *db, int *written_p)
{
    return unsupported();
}
