/*
 * HDF5 timeline: written by one process with the default file driver.
 *
 *   /                 attributes: iteration_s, origin_ns (start of the reported
 *                     iteration), strategy, model, mode, categories, streams
 *   /devices/rank_NNNNNN  one group per device with its own timeline;
 *                     attributes rank, represents, tp, dp, pp; equal-length
 *                     datasets event_id (uint32), kind (uint8: category),
 *                     stream (uint8), iteration (uint8), microbatch (int32),
 *                     start_ns, end_ns (int64, simulated clock), assumed (uint8:
 *                     1 when a cost behind the event is a roofline estimate)
 */
#include "dsi_sim.h"

#include <hdf5.h>

#include <string.h>

#define TL_CHECK(call, what)                                                                       \
    do {                                                                                           \
        if ((call) < 0) {                                                                          \
            status = DSI_ERROR(DS_ERR_HDF5, "writing the timeline '%s': %s failed", path, what);   \
            goto out;                                                                              \
        }                                                                                          \
    } while (0)

static herr_t attr_scalar(hid_t loc, const char *name, hid_t type, const void *value)
{
    hid_t space = H5Screate(H5S_SCALAR);
    if (space < 0)
        return -1;
    hid_t attr = H5Acreate2(loc, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
    herr_t rc = attr < 0 ? -1 : H5Awrite(attr, type, value);
    if (attr >= 0)
        H5Aclose(attr);
    H5Sclose(space);
    return rc;
}

static herr_t attr_string(hid_t loc, const char *name, const char *value)
{
    hid_t type = H5Tcopy(H5T_C_S1);
    if (type < 0)
        return -1;
    herr_t rc = H5Tset_size(type, strlen(value) + 1);
    if (rc >= 0)
        rc = attr_scalar(loc, name, type, value);
    H5Tclose(type);
    return rc;
}

static herr_t dataset(hid_t group, const char *name, hid_t type, size_t n, const void *data)
{
    hsize_t dims[1] = {(hsize_t)n};
    hid_t space = H5Screate_simple(1, dims, NULL);
    if (space < 0)
        return -1;
    hid_t set = H5Dcreate2(group, name, type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    herr_t rc =
        set < 0 ? -1 : (n > 0 ? H5Dwrite(set, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) : 0);
    if (set >= 0)
        H5Dclose(set);
    H5Sclose(space);
    return rc;
}

ds_status_t ds_sim_write_timeline(ds_sim_t *sim, const char *path)
{
    if (!sim->results.evaluated)
        return DSI_ERROR(DS_ERR_INVALID_ARG, "no simulation has run on this simulator");
    ds_status_t status = DS_OK;
    hid_t file = -1, devices = -1, group = -1;
    uint32_t *ids = NULL;
    uint8_t *kind = NULL, *stream = NULL, *iter = NULL, *assumed = NULL;
    int32_t *mb = NULL;
    int64_t *start = NULL, *end = NULL;
    size_t cap = 0;
    H5E_auto2_t old_func = NULL;
    void *old_data = NULL;
    H5Eget_auto2(H5E_DEFAULT, &old_func, &old_data);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);

    file = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    TL_CHECK(file, "creating the file");
    TL_CHECK(attr_scalar(file, "iteration_s", H5T_NATIVE_DOUBLE, &sim->results.summary.iteration_s),
             "an attribute");
    TL_CHECK(attr_scalar(file, "origin_ns", H5T_NATIVE_INT64, &sim->results.it2_begin),
             "an attribute");
    TL_CHECK(
        attr_scalar(file, "assumed_share", H5T_NATIVE_DOUBLE, &sim->results.summary.assumed_share),
        "an attribute");
    char text[DS_STRATEGY_TEXT_MAX];
    ds_strategy_format(&sim->given, text, sizeof(text));
    TL_CHECK(attr_string(file, "strategy", text), "an attribute");
    TL_CHECK(attr_string(file, "model", sim->info.name), "an attribute");
    TL_CHECK(attr_string(file, "mode", sim->opt.mode == DS_SIM_FULL ? "full" : "symmetric"),
             "an attribute");
    {
        char storage[1024]; /* a few short names: no allocation to fail */
        dsi_strbuf_t names;
        dsi_strbuf_init_fixed(&names, storage, sizeof(storage));
        for (int c = 0; c < DS_SIM_CAT_COUNT_; c++)
            dsi_strbuf_appendf(&names, "%s%d=%s", c ? "," : "", c,
                               ds_sim_category_name((ds_sim_category_t)c));
        herr_t rc = attr_string(file, "kinds", dsi_strbuf_text(&names));
        dsi_strbuf_clear(&names);
        for (int c = 0; c < DS_SIM_STREAM_COUNT_; c++)
            dsi_strbuf_appendf(&names, "%s%d=%s", c ? "," : "", c,
                               ds_sim_stream_name((ds_sim_stream_t)c));
        if (rc >= 0)
            rc = attr_string(file, "streams", dsi_strbuf_text(&names));
        dsi_strbuf_free(&names);
        TL_CHECK(rc, "an attribute");
    }
    devices = H5Gcreate2(file, "devices", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    TL_CHECK(devices, "creating /devices");
    for (size_t d = 0; d < sim->results.num_devices_out; d++) {
        const ds_sim_device_t *dev = &sim->results.devices[d];
        const ds_sim_event_t *events;
        size_t count;
        DSI_TRY_GOTO(ds_sim_device_events(sim, dev->rank, &events, &count), status, out);
        if (count > cap) {
            cap = count;
            DSI_TRY_GOTO(dsi_realloc_array(&ids, cap, sizeof(*ids)), status, out);
            DSI_TRY_GOTO(dsi_realloc_array(&kind, cap, sizeof(*kind)), status, out);
            DSI_TRY_GOTO(dsi_realloc_array(&stream, cap, sizeof(*stream)), status, out);
            DSI_TRY_GOTO(dsi_realloc_array(&iter, cap, sizeof(*iter)), status, out);
            DSI_TRY_GOTO(dsi_realloc_array(&assumed, cap, sizeof(*assumed)), status, out);
            DSI_TRY_GOTO(dsi_realloc_array(&mb, cap, sizeof(*mb)), status, out);
            DSI_TRY_GOTO(dsi_realloc_array(&start, cap, sizeof(*start)), status, out);
            DSI_TRY_GOTO(dsi_realloc_array(&end, cap, sizeof(*end)), status, out);
        }
        for (size_t i = 0; i < count; i++) {
            ids[i] = (uint32_t)events[i].id;
            kind[i] = (uint8_t)events[i].category;
            stream[i] = (uint8_t)events[i].stream;
            iter[i] = (uint8_t)events[i].iteration;
            assumed[i] = (uint8_t)(events[i].assumed != 0);
            mb[i] = events[i].microbatch;
            start[i] = events[i].start_ns;
            end[i] = events[i].end_ns;
        }
        char name[32];
        snprintf(name, sizeof(name), "rank_%06lld", (long long)dev->rank);
        group = H5Gcreate2(devices, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
        TL_CHECK(group, "creating a device group");
        int64_t rank = dev->rank, represents = dev->represents;
        int32_t coords[3] = {dev->coords.tp, dev->coords.dp, dev->coords.pp};
        TL_CHECK(attr_scalar(group, "rank", H5T_NATIVE_INT64, &rank), "an attribute");
        TL_CHECK(attr_scalar(group, "represents", H5T_NATIVE_INT64, &represents), "an attribute");
        TL_CHECK(attr_scalar(group, "tp", H5T_NATIVE_INT32, &coords[0]), "an attribute");
        TL_CHECK(attr_scalar(group, "dp", H5T_NATIVE_INT32, &coords[1]), "an attribute");
        TL_CHECK(attr_scalar(group, "pp", H5T_NATIVE_INT32, &coords[2]), "an attribute");
        TL_CHECK(dataset(group, "event_id", H5T_NATIVE_UINT32, count, ids), "a dataset");
        TL_CHECK(dataset(group, "kind", H5T_NATIVE_UINT8, count, kind), "a dataset");
        TL_CHECK(dataset(group, "stream", H5T_NATIVE_UINT8, count, stream), "a dataset");
        TL_CHECK(dataset(group, "iteration", H5T_NATIVE_UINT8, count, iter), "a dataset");
        TL_CHECK(dataset(group, "microbatch", H5T_NATIVE_INT32, count, mb), "a dataset");
        TL_CHECK(dataset(group, "start_ns", H5T_NATIVE_INT64, count, start), "a dataset");
        TL_CHECK(dataset(group, "end_ns", H5T_NATIVE_INT64, count, end), "a dataset");
        TL_CHECK(dataset(group, "assumed", H5T_NATIVE_UINT8, count, assumed), "a dataset");
        H5Gclose(group);
        group = -1;
    }
out:
    if (group >= 0)
        H5Gclose(group);
    if (devices >= 0)
        H5Gclose(devices);
    if (file >= 0 && H5Fclose(file) < 0 && status == DS_OK)
        status = DSI_ERROR(DS_ERR_HDF5, "closing the timeline '%s' failed", path);
    H5Eset_auto2(H5E_DEFAULT, old_func, old_data);
    dsi_free(ids);
    dsi_free(kind);
    dsi_free(stream);
    dsi_free(iter);
    dsi_free(assumed);
    dsi_free(mb);
    dsi_free(start);
    dsi_free(end);
    return status;
}
