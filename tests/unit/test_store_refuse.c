/* Files the profile database refuses: not HDF5, empty, foreign HDF5, another
 * format version, truncated, corrupted at any of several places, a
 * directory.  Each gets DS_ERR_BAD_FILE with a one-line message naming the
 * file, is left byte for byte as it was, and HDF5 prints nothing. */
#include "check.h"

#include <fcntl.h>
#include <hdf5.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dsi_core.h"

static char directory[] = "store_refuse_XXXXXX";

static int read_all(const char *path, unsigned char **data_p, size_t *size_p)
{
    struct stat info;
    if (stat(path, &info) != 0 || !S_ISREG(info.st_mode))
        return -1;
    FILE *file = fopen(path, "rb");
    if (file == NULL)
        return -1;
    fseek(file, 0, SEEK_END);
    long size = ftell(file);
    fseek(file, 0, SEEK_SET);
    unsigned char *data = malloc(size > 0 ? (size_t)size : 1);
    size_t got = fread(data, 1, (size_t)size, file);
    fclose(file);
    *data_p = data;
    *size_p = got;
    return got == (size_t)size ? 0 : -1;
}

static void write_all(const char *path, const unsigned char *data, size_t size)
{
    FILE *file = fopen(path, "wb");
    CHECK(file != NULL && fwrite(data, 1, size, file) == size);
    if (file != NULL)
        fclose(file);
}

/* Fingerprint of a file's bytes and size; 0 when unreadable. */
static uint64_t checksum(const char *path)
{
    unsigned char *data = NULL;
    size_t size = 0;
    if (read_all(path, &data, &size) != 0) {
        free(data);
        return 0;
    }
    uint64_t hash = dsi_hash64(data, size, 7) ^ (uint64_t)size;
    free(data);
    return hash;
}

static int count_entries(void)
{
    char command[128];
    snprintf(command, sizeof(command), "ls -A %s | wc -l", directory);
    FILE *pipe = popen(command, "r");
    int count = -1;
    if (pipe != NULL) {
        if (fscanf(pipe, "%d", &count) != 1)
            count = -1;
        pclose(pipe);
    }
    return count;
}

/* Opening `path` as a writable database, a read-only one and a fallback
 * all fail with `needle` and the path in a one-line message; the file is
 * unchanged and no file appears beside it. */
static void check_refused(const char *path, const char *needle)
{
    uint64_t before = checksum(path);
    int entries = count_entries();
    ds_profile_db_t *db = NULL;
    CHECK_FAILS(ds_profile_db_open(MPI_COMM_NULL, path, 0, &db), DS_ERR_BAD_FILE, needle);
    CHECK_MSG(strstr(ds_last_error(), path) != NULL && strchr(ds_last_error(), '\n') == NULL,
              "message '%s' must name %s on one line", ds_last_error(), path);
    CHECK(db == NULL);
    CHECK_FAILS(ds_profile_db_open(MPI_COMM_NULL, path, DS_PROFILE_DB_READ_ONLY, &db),
                DS_ERR_BAD_FILE, needle);
    char own[256];
    snprintf(own, sizeof(own), "%s/own.h5", directory);
    CHECK_OK(ds_profile_db_open(MPI_COMM_NULL, own, 0, &db));
    if (db != NULL) {
        CHECK_FAILS(ds_profile_db_add_fallback(db, path), DS_ERR_BAD_FILE, needle);
        ds_profile_db_close(db);
    }
    CHECK_MSG(checksum(path) == before, "%s changed", path);
    CHECK_INT(count_entries(), entries);
}

static void make_hdf5(const char *path, const char *format, int version)
{
    hid_t file = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    CHECK(file >= 0);
    hsize_t dims = 4;
    hid_t space = H5Screate_simple(1, &dims, NULL);
    hid_t dset =
        H5Dcreate2(file, "events", H5T_NATIVE_INT, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    int values[4] = {1, 2, 3, 4};
    CHECK(H5Dwrite(dset, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, values) >= 0);
    if (format != NULL) {
        hid_t scalar = H5Screate(H5S_SCALAR);
        hid_t type = H5Tcopy(H5T_C_S1);
        H5Tset_size(type, strlen(format) + 1);
        hid_t attr = H5Acreate2(file, "dsmpi_format", type, scalar, H5P_DEFAULT, H5P_DEFAULT);
        CHECK(H5Awrite(attr, type, format) >= 0);
        H5Aclose(attr);
        attr = H5Acreate2(file, "dsmpi_format_version", H5T_STD_I32LE, scalar, H5P_DEFAULT,
                          H5P_DEFAULT);
        CHECK(H5Awrite(attr, H5T_NATIVE_INT, &version) >= 0);
        H5Aclose(attr);
        H5Tclose(type);
        H5Sclose(scalar);
    }
    H5Dclose(dset);
    H5Sclose(space);
    H5Fclose(file);
}

int main(void)
{
    if (mkdtemp(directory) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    char good[256], path[256];
    snprintf(good, sizeof(good), "%s/good.h5", directory);

    /* A real database of a few thousand records. */
    ds_profile_db_t *db = NULL;
    CHECK_OK(ds_profile_db_open(MPI_COMM_NULL, good, 0, &db));
    if (db == NULL)
        return check_summary("test_store_refuse");
    for (int i = 0; i < 3000; i++) {
        ds_event_key_t key;
        memset(&key, 0, sizeof(key));
        key.op = DS_OP_GEMM;
        key.dims[0] = 64 + i;
        key.dims[1] = key.dims[2] = 128;
        ds_cost_t cost = {1e-6 * (i + 1),  1e-6 * (i + 1), 1e-6 * i, 2e-6 * (i + 1), 5,
                          DS_PROV_MEASURED};
        CHECK_OK(ds_profile_db_add(db, "cpu:test", &key, &cost, NULL));
    }
    ds_comm_sample_t sample;
    memset(&sample, 0, sizeof(sample));
    sample.op = DS_COMM_ALLREDUCE;
    sample.bytes = 1 << 20;
    sample.group_size = sample.nodes = sample.ranks_per_node = sample.concurrency = 1;
    sample.mean_s = 1e-4;
    strcpy(sample.source, "cpu:test");
    CHECK_OK(ds_profile_db_add_comm_samples(db, &sample, 1));
    CHECK_OK(ds_profile_db_commit(db));
    ds_profile_db_close(db);
    unsigned char *bytes = NULL;
    size_t size = 0;
    CHECK(read_all(good, &bytes, &size) == 0 && size > 100000);

    /* HDF5 must not print its error stack: watch stderr from here on. */
    char errors[256];
    snprintf(errors, sizeof(errors), "%s.stderr", directory);
    fflush(stderr);
    int saved_stderr = dup(2);
    int errors_fd = open(errors, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(errors_fd, 2);

    snprintf(path, sizeof(path), "%s/text.h5", directory);
    write_all(path, (const unsigned char *)"event = 1.0\n", 12);
    check_refused(path, "not an HDF5 file");

    snprintf(path, sizeof(path), "%s/empty.h5", directory);
    write_all(path, bytes, 0);
    check_refused(path, "not an HDF5 file");

    snprintf(path, sizeof(path), "%s/foreign.h5", directory);
    make_hdf5(path, NULL, 0);
    check_refused(path, "not a dsmpi profile database");

    snprintf(path, sizeof(path), "%s/other-format.h5", directory);
    make_hdf5(path, "someone-elses-db", 1);
    check_refused(path, "not a dsmpi profile database");

    snprintf(path, sizeof(path), "%s/future.h5", directory);
    make_hdf5(path, DS_PROFILE_DB_FORMAT, 99);
    check_refused(path, "format version 99");

    snprintf(path, sizeof(path), "%s/truncated.h5", directory);
    write_all(path, bytes, size / 2);
    check_refused(path, "damaged or truncated");
    write_all(path, bytes, size - 1);
    check_refused(path, "damaged or truncated");
    write_all(path, bytes, 2048);
    check_refused(path, "damaged or truncated");

    /* One flipped byte anywhere: metadata checksums and the per-chunk
     * Fletcher-32 catch it. */
    snprintf(path, sizeof(path), "%s/corrupt.h5", directory);
    const double places[] = {0.001, 0.05, 0.2, 0.35, 0.5, 0.65, 0.8, 0.95, 0.999};
    for (size_t i = 0; i < DSI_ARRAY_SIZE(places); i++) {
        size_t at = (size_t)(places[i] * (double)size);
        bytes[at] ^= 0x5a;
        write_all(path, bytes, size);
        bytes[at] ^= 0x5a;
        CHECK_MSG(checksum(path) != checksum(good), "flip at %zu", at);
        check_refused(path, "damaged or truncated");
    }

    snprintf(path, sizeof(path), "%s/a-directory.h5", directory);
    mkdir(path, 0755);
    check_refused(path, "not a regular file");
    rmdir(path);

    fflush(stderr);
    dup2(saved_stderr, 2);
    close(saved_stderr);
    close(errors_fd);
    struct stat info;
    CHECK(stat(errors, &info) == 0);
    CHECK_MSG(info.st_size == 0, "the refusals printed %lld bytes on stderr (see %s)",
              (long long)info.st_size, errors);
    if (info.st_size == 0)
        remove(errors);

    /* The good file was never touched and still opens. */
    CHECK_OK(ds_profile_db_open(MPI_COMM_NULL, good, DS_PROFILE_DB_READ_ONLY, &db));
    if (db != NULL) {
        CHECK_INT(ds_profile_db_num_records(db), 3000);
        ds_profile_db_close(db);
    }
    free(bytes);
    char command[300];
    snprintf(command, sizeof(command), "rm -rf %s", directory);
    if (check_failures == 0 && system(command) != 0)
        fprintf(stderr, "could not remove %s\n", directory);
    return check_summary("test_store_refuse");
}
