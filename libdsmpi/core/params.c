/* The tunables table: each read once from its environment variable. */
#include "dsi_core.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { PARAM_INT, PARAM_DOUBLE, PARAM_STRING } param_type_t;

typedef struct param {
    const char *env;
    const char *default_text;
    const char *help;
    param_type_t type;
    bool loaded;
    const char *text; /* the value in force: environment or default */
    int64_t int_value;
    double double_value;
} param_t;

static param_t params[] = {
#define DSI_PARAM(id, type, env, def, help) {env, def, help, PARAM_##type, false, NULL, 0, 0.0},
#include "params.def"
#undef DSI_PARAM
};

static bool convert(param_t *p, const char *text)
{
    char *end = NULL;
    errno = 0;
    switch (p->type) {
    case PARAM_INT:
        p->int_value = strtoll(text, &end, 0);
        return errno == 0 && end != text && *end == '\0';
    case PARAM_DOUBLE:
        p->double_value = strtod(text, &end);
        return errno == 0 && end != text && *end == '\0';
    case PARAM_STRING: return true;
    }
    return false;
}

static param_t *load(dsi_param_id_t id)
{
    param_t *p = &params[id];
    if (p->loaded)
        return p;
    const char *env = getenv(p->env);
    p->text = p->default_text;
    if (env != NULL && *env != '\0') {
        if (convert(p, env)) {
            p->text = env;
        } else {
            fprintf(stderr, "dsmpi: %s=%s is not a valid %s; using the default %s\n", p->env, env,
                    p->type == PARAM_INT ? "integer" : "number", p->default_text);
        }
    }
    if (p->text == p->default_text)
        convert(p, p->default_text);
    p->loaded = true;
    return p;
}

int64_t dsi_param_int(dsi_param_id_t id)
{
    return load(id)->int_value;
}

double dsi_param_double(dsi_param_id_t id)
{
    return load(id)->double_value;
}

const char *dsi_param_string(dsi_param_id_t id)
{
    return load(id)->text;
}

size_t ds_param_count(void)
{
    return DSI_PARAM_COUNT_;
}

ds_status_t ds_param_describe(size_t index, const char **env_name_p, const char **default_p,
                              const char **help_p, const char **current_p)
{
    if (index >= DSI_PARAM_COUNT_)
        return DSI_ERROR(DS_ERR_INVALID_ARG, "tunable index %zu out of range (accepted: 0 to %d)",
                         index, DSI_PARAM_COUNT_ - 1);
    param_t *p = load((dsi_param_id_t)index);
    *env_name_p = p->env;
    *default_p = p->default_text;
    *help_p = p->help;
    *current_p = p->text;
    return DS_OK;
}

void ds_params_print(FILE *out)
{
    fprintf(out, "# %-22s %-10s %-10s %s\n", "variable", "default", "current", "meaning");
    for (size_t i = 0; i < DSI_PARAM_COUNT_; i++) {
        param_t *p = load((dsi_param_id_t)i);
        fprintf(out, "  %-22s %-10s %-10s %s\n", p->env, p->default_text, p->text, p->help);
    }
}
