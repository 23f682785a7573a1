/* Reading JSON inputs (jansson) with errors that name the file, the field and
 * what is accepted.  A field holding null counts as absent. */
#ifndef DSI_JSON_H
#define DSI_JSON_H

#include "dsi_core.h"

#include <jansson.h>

/* Parses a file of at most DS_MAX_INPUT_BYTES; caller frees with json_decref. */
ds_status_t dsi_json_load_file(const char *path, json_t **root_p);
/* Parses text; `origin` names it in messages. */
ds_status_t dsi_json_load_text(const char *text, size_t size, const char *origin, json_t **root_p);

/* Member getters.  When the member is absent and !required, *value_p is left
 * as it was and DS_OK is returned. */
ds_status_t dsi_json_int(const json_t *object, const char *key, const char *origin, int64_t min,
                         int64_t max, bool required, int64_t *value_p);
ds_status_t dsi_json_int32(const json_t *object, const char *key, const char *origin, int min,
                           int max, bool required, int *value_p);
ds_status_t dsi_json_double(const json_t *object, const char *key, const char *origin, double min,
                            double max, bool required, double *value_p);
ds_status_t dsi_json_bool(const json_t *object, const char *key, const char *origin, bool required,
                          bool *value_p);
/* The string stays owned by the JSON tree. */
ds_status_t dsi_json_string(const json_t *object, const char *key, const char *origin,
                            bool required, const char **value_p);
/* Present and not null. */
bool dsi_json_has(const json_t *object, const char *key);

#endif /* DSI_JSON_H */
