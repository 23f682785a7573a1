/* jansson wrappers: bounded file loading and checked member access. */
#include "dsi_json.h"

#include <math.h>
#include <string.h>

ds_status_t dsi_json_load_text(const char *text, size_t size, const char *origin, json_t **root_p)
{
    json_error_t error;
    json_t *root = json_loadb(text, size, JSON_REJECT_DUPLICATES, &error);
    if (root == NULL)
        return DSI_ERROR(DS_ERR_BAD_FILE, "%s:%d:%d: not valid JSON: %s", origin, error.line,
                         error.column, error.text);
    if (!json_is_object(root)) {
        json_decref(root);
        return DSI_ERROR(DS_ERR_BAD_FILE, "%s: the top level is not a JSON object", origin);
    }
    *root_p = root;
    return DS_OK;
}

ds_status_t dsi_json_load_file(const char *path, json_t **root_p)
{
    char *text = NULL;
    size_t size = 0;
    DSI_TRY(dsi_read_file(path, (size_t)dsi_param_int(DSI_PARAM_MAX_INPUT_BYTES), &text, &size));
    ds_status_t status = dsi_json_load_text(text, size, path, root_p);
    dsi_free(text);
    return status;
}

bool dsi_json_has(const json_t *object, const char *key)
{
    const json_t *value = json_object_get(object, key);
    return value != NULL && !json_is_null(value);
}

static ds_status_t missing(const char *origin, const char *key)
{
    return DSI_ERROR(DS_ERR_BAD_FILE, "%s: required field \"%s\" is missing", origin, key);
}

ds_status_t dsi_json_int(const json_t *object, const char *key, const char *origin, int64_t min,
                         int64_t max, bool required, int64_t *value_p)
{
    const json_t *value = json_object_get(object, key);
    if (value == NULL || json_is_null(value))
        return required ? missing(origin, key) : DS_OK;
    int64_t number;
    if (json_is_integer(value)) {
        number = json_integer_value(value);
    } else if (json_is_real(value) && json_real_value(value) == floor(json_real_value(value)) &&
               fabs(json_real_value(value)) < 9.0e18) {
        number = (int64_t)json_real_value(value); /* 4096.0 is a whole number too */
    } else {
        return DSI_ERROR(DS_ERR_BAD_FILE,
                         "%s: \"%s\" is not a whole number (accepted: %lld to %lld)", origin, key,
                         (long long)min, (long long)max);
    }
    if (number < min || number > max)
        return DSI_ERROR(DS_ERR_BAD_FILE,
                         "%s: \"%s\" = %lld is out of range (accepted: %lld to %lld)", origin, key,
                         (long long)number, (long long)min, (long long)max);
    *value_p = number;
    return DS_OK;
}

ds_status_t dsi_json_int32(const json_t *object, const char *key, const char *origin, int min,
                           int max, bool required, int *value_p)
{
    int64_t number = *value_p;
    DSI_TRY(dsi_json_int(object, key, origin, min, max, required, &number));
    *value_p = (int)number;
    return DS_OK;
}

ds_status_t dsi_json_double(const json_t *object, const char *key, const char *origin, double min,
                            double max, bool required, double *value_p)
{
    const json_t *value = json_object_get(object, key);
    if (value == NULL || json_is_null(value))
        return required ? missing(origin, key) : DS_OK;
    if (!json_is_number(value))
        return DSI_ERROR(DS_ERR_BAD_FILE, "%s: \"%s\" is not a number (accepted: %g to %g)", origin,
                         key, min, max);
    double number = json_number_value(value);
    if (!(number >= min && number <= max))
        return DSI_ERROR(DS_ERR_BAD_FILE, "%s: \"%s\" = %g is out of range (accepted: %g to %g)",
                         origin, key, number, min, max);
    *value_p = number;
    return DS_OK;
}

ds_status_t dsi_json_bool(const json_t *object, const char *key, const char *origin, bool required,
                          bool *value_p)
{
    const json_t *value = json_object_get(object, key);
    if (value == NULL || json_is_null(value))
        return required ? missing(origin, key) : DS_OK;
    if (!json_is_boolean(value))
        return DSI_ERROR(DS_ERR_BAD_FILE, "%s: \"%s\" is not true or false", origin, key);
    *value_p = json_is_true(value);
    return DS_OK;
}

ds_status_t dsi_json_string(const json_t *object, const char *key, const char *origin,
                            bool required, const char **value_p)
{
    const json_t *value = json_object_get(object, key);
    if (value == NULL || json_is_null(value))
        return required ? missing(origin, key) : DS_OK;
    if (!json_is_string(value))
        return DSI_ERROR(DS_ERR_BAD_FILE, "%s: \"%s\" is not a string", origin, key);
    *value_p = json_string_value(value);
    return DS_OK;
}
