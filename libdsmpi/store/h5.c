/* HDF5 error translation and the HDF5 types of the profile database. */
#include "dsi_store.h"

#include <stddef.h>
#include <string.h>

/* The message of the last HDF5 failure seen by the capturing handler. */
static _Thread_local char h5_message[768];

static herr_t capture_innermost(unsigned n, const H5E_error2_t *error, void *data)
{
    (void)data;
    if (dsi_log_enabled(DS_LOG_TRACE)) {
        char major[96] = "", minor[160] = "";
        H5Eget_msg(error->maj_num, NULL, major, sizeof(major));
        H5Eget_msg(error->min_num, NULL, minor, sizeof(minor));
        ds_log(DS_LOG_TRACE, "HDF5 error stack #%u: %s (%s:%u): %s [%s: %s]", n, error->func_name,
               error->file_name, error->line, error->desc ? error->desc : "", major, minor);
    }
    if (n != 0)
        return 0;
    /* Walking upward, entry 0 is where HDF5 detected the problem: its
     * description names the cause ("truncated file: eof = ...", "unable to
     * open file: ... errno = 13, error message = 'Permission denied'"). */
    if (error->desc != NULL && error->desc[0] != '\0') {
        snprintf(h5_message, sizeof(h5_message), "%s", error->desc);
    } else {
        char minor[160] = "";
        if (H5Eget_msg(error->min_num, NULL, minor, sizeof(minor)) < 0)
            strcpy(minor, "unknown HDF5 error");
        snprintf(h5_message, sizeof(h5_message), "%s", minor);
    }
    return 0;
}

static herr_t capture_handler(hid_t stack, void *data)
{
    (void)data;
    h5_message[0] = '\0';
    H5Ewalk2(stack, H5E_WALK_UPWARD, capture_innermost, NULL);
    return 0;
}

void dsi_h5_scope_begin(dsi_h5_scope_t *scope)
{
    scope->saved = H5Eget_auto2(H5E_DEFAULT, &scope->saved_func, &scope->saved_data) >= 0;
    H5Eset_auto2(H5E_DEFAULT, capture_handler, NULL);
    h5_message[0] = '\0';
}

void dsi_h5_scope_end(dsi_h5_scope_t *scope)
{
    if (scope->saved)
        H5Eset_auto2(H5E_DEFAULT, scope->saved_func, scope->saved_data);
}

ds_status_t dsi_h5_error(const char *file, int line, const char *call)
{
    /* "file = H5Fopen(path, ...)" -> "H5Fopen" */
    const char *paren = strchr(call, '(');
    const char *end = paren != NULL ? paren : call + strlen(call);
    const char *start = call;
    for (const char *c = call; c < end; c++)
        if (*c == '=' || *c == ' ')
            start = c + 1;
    ds_status_t status =
        dsi_error_at(file, line, DS_ERR_HDF5, "%.*s failed: %s", (int)(end - start), start,
                     h5_message[0] ? h5_message : "no message from HDF5");
    h5_message[0] = '\0';
    return status;
}

void dsi_h5_close(hid_t *id)
{
    if (*id < 0)
        return;
    switch (H5Iget_type(*id)) {
    case H5I_FILE: H5Fclose(*id); break;
    case H5I_GROUP: H5Gclose(*id); break;
    case H5I_DATASET: H5Dclose(*id); break;
    case H5I_DATASPACE: H5Sclose(*id); break;
    case H5I_DATATYPE: H5Tclose(*id); break;
    case H5I_ATTR: H5Aclose(*id); break;
    case H5I_GENPROP_LST: H5Pclose(*id); break;
    default: break;
    }
    *id = H5I_INVALID_HID;
}

/* ---- types -------------------------------------------------------------------- */

static hid_t enum_type(const char *const *names, size_t count)
{
    hid_t type = H5Tenum_create(H5T_NATIVE_UINT8);
    if (type < 0)
        return type;
    for (size_t i = 0; i < count; i++) {
        uint8_t value = (uint8_t)i;
        if (H5Tenum_insert(type, names[i], &value) < 0) {
            H5Tclose(type);
            return H5I_INVALID_HID;
        }
    }
    return type;
}

static hid_t array_type(hid_t base, hsize_t length)
{
    return H5Tarray_create2(base, 1, &length);
}

typedef struct member {
    const char *name;
    size_t offset;
    hid_t type;
    bool owned; /* close after inserting */
} member_t;

static hid_t compound_type(size_t size, member_t *members, size_t count)
{
    hid_t type = H5I_INVALID_HID;
    bool ok = true;
    for (size_t i = 0; i < count; i++)
        ok = ok && members[i].type >= 0;
    if (ok && (type = H5Tcreate(H5T_COMPOUND, size)) >= 0) {
        for (size_t i = 0; i < count && ok; i++)
            ok = H5Tinsert(type, members[i].name, members[i].offset, members[i].type) >= 0;
        if (!ok)
            dsi_h5_close(&type);
    }
    for (size_t i = 0; i < count; i++)
        if (members[i].owned && members[i].type >= 0)
            H5Tclose(members[i].type);
    return ok ? type : H5I_INVALID_HID;
}

static const char *const kind_names[] = {"compute", "comm"};
static const char *const pass_names[] = {"fwd", "bwd", "recompute", "step"};
static const char *const provenance_names[] = {"measured",  "interpolated", "extrapolated",
                                               "imported",  "assumed",      "modelled",
                                               "framework", "calibrated"};
_Static_assert(DSI_ARRAY_SIZE(provenance_names) == DS_PROV_COUNT_, "provenance names");

#define ROW(field) offsetof(dsi_event_row_t, field)

hid_t dsi_h5_event_row_type(void)
{
    /* Columns in the order a reader expects: the key, the device, the cost,
     * who measured it and when, the histogram. */
    member_t members[] = {
        {"kind", ROW(kind), enum_type(kind_names, DSI_ARRAY_SIZE(kind_names)), true},
        {"op", ROW(op), H5T_NATIVE_UINT8, false},
        {"pass", ROW(pass), enum_type(pass_names, DSI_ARRAY_SIZE(pass_names)), true},
        {"dtype", ROW(dtype), H5T_NATIVE_UINT8, false},
        {"variant", ROW(variant), H5T_NATIVE_UINT8, false},
        {"flags", ROW(flags), H5T_NATIVE_UINT8, false},
        {"group", ROW(group), H5T_NATIVE_UINT8, false},
        {"group_size", ROW(group_size), H5T_NATIVE_INT32, false},
        {"ranks_per_node", ROW(ranks_per_node), H5T_NATIVE_INT32, false},
        {"nodes", ROW(nodes), H5T_NATIVE_INT32, false},
        {"concurrency", ROW(concurrency), H5T_NATIVE_INT32, false},
        {"dims", ROW(dims), array_type(H5T_NATIVE_INT64, 4), true},
        {"fingerprint", ROW(fingerprint), H5T_NATIVE_UINT32, false},
        {"mean_s", ROW(mean_s), H5T_NATIVE_DOUBLE, false},
        {"median_s", ROW(median_s), H5T_NATIVE_DOUBLE, false},
        {"p10_s", ROW(p10_s), H5T_NATIVE_DOUBLE, false},
        {"p90_s", ROW(p90_s), H5T_NATIVE_DOUBLE, false},
        {"repetitions", ROW(repetitions), H5T_NATIVE_INT64, false},
        {"provenance", ROW(provenance),
         enum_type(provenance_names, DSI_ARRAY_SIZE(provenance_names)), true},
        {"rank", ROW(rank), H5T_NATIVE_INT32, false},
        {"host", ROW(host), H5T_NATIVE_UINT32, false},
        {"measured_at_s", ROW(measured_at_s), H5T_NATIVE_DOUBLE, false},
        {"hist_min_s", ROW(hist_min_s), H5T_NATIVE_DOUBLE, false},
        {"hist_max_s", ROW(hist_max_s), H5T_NATIVE_DOUBLE, false},
        {"histogram", ROW(histogram), array_type(H5T_NATIVE_UINT32, DS_COST_HISTOGRAM_BINS), true},
    };
    return compound_type(sizeof(dsi_event_row_t), members, DSI_ARRAY_SIZE(members));
}

#define COMM(field) offsetof(dsi_comm_row_t, field)

hid_t dsi_h5_comm_row_type(void)
{
    member_t members[] = {
        {"op", COMM(op), H5T_NATIVE_UINT8, false},
        {"dtype", COMM(dtype), H5T_NATIVE_UINT8, false},
        {"bytes", COMM(bytes), H5T_NATIVE_INT64, false},
        {"group_size", COMM(group_size), H5T_NATIVE_INT32, false},
        {"nodes", COMM(nodes), H5T_NATIVE_INT32, false},
        {"ranks_per_node", COMM(ranks_per_node), H5T_NATIVE_INT32, false},
        {"concurrency", COMM(concurrency), H5T_NATIVE_INT32, false},
        {"in_place", COMM(in_place), H5T_NATIVE_INT32, false},
        {"batched", COMM(batched), H5T_NATIVE_INT32, false},
        {"span_nodes", COMM(span_nodes), H5T_NATIVE_INT32, false},
        {"mean_s", COMM(mean_s), H5T_NATIVE_DOUBLE, false},
        {"median_s", COMM(median_s), H5T_NATIVE_DOUBLE, false},
        {"p10_s", COMM(p10_s), H5T_NATIVE_DOUBLE, false},
        {"p90_s", COMM(p90_s), H5T_NATIVE_DOUBLE, false},
        {"repetitions", COMM(repetitions), H5T_NATIVE_INT64, false},
        {"provenance", COMM(provenance),
         enum_type(provenance_names, DSI_ARRAY_SIZE(provenance_names)), true},
        {"source", COMM(source), dsi_h5_string_type(DSI_SOURCE_MAX), true},
    };
    return compound_type(sizeof(dsi_comm_row_t), members, DSI_ARRAY_SIZE(members));
}

hid_t dsi_h5_string_type(size_t width)
{
    hid_t type = H5Tcopy(H5T_C_S1);
    if (type < 0)
        return type;
    if (H5Tset_size(type, width) < 0 || H5Tset_strpad(type, H5T_STR_NULLTERM) < 0)
        dsi_h5_close(&type);
    return type;
}
