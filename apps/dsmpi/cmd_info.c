/* dsmpi version: what this build is made of. */
#include "commands.h"

#include <string.h>

static void help(void)
{
    printf("usage: dsmpi version [--json | --csv]\n\nPrints the versions of dsmpi, MPI, HDF5, "
           "BLAS, jansson and,\n"
           "when built with CUDA, of the CUDA runtime, driver, cuBLAS and NCCL and the\n"
           "visible GPUs.\n\n"
           "Output:\n"
           "  --json                   one JSON object, component name to version\n"
           "  --csv                    one row per component: component,version\n");
}

int cmd_version(app_t *app)
{
    enum { OPT_JSON = 256, OPT_CSV, OPT_HELP };
    static const struct option options[] = {
        {"json", no_argument, NULL, OPT_JSON},
        {"csv", no_argument, NULL, OPT_CSV},
        {"help", no_argument, NULL, OPT_HELP},
        {NULL, 0, NULL, 0},
    };
    output_format_t format = OUTPUT_TABLE;
    int id;
    opterr = 0;
    optind = 1;
    while ((id = getopt_long(app->argc, app->argv, "", options, NULL)) != -1) {
        if (id == OPT_HELP) {
            help();
            return APP_EXIT_OK;
        }
        if (id == OPT_JSON)
            format = OUTPUT_JSON;
        else if (id == OPT_CSV)
            format = OUTPUT_CSV;
        else
            return app_option_error(app, "accepted: --json, --csv, --help");
    }
    if (optind < app->argc)
        return app_usage_error(app, "unexpected argument '%s' (accepted: --json, --csv, --help)",
                               app->argv[optind]);
    int code = app_mpi_start(app, false);
    if (code != APP_EXIT_OK || app->rank != 0)
        return code;
    if (format == OUTPUT_TABLE) {
        ds_build_info_print(stdout);
        return APP_EXIT_OK;
    }
    ds_build_component_t *components = NULL;
    size_t count = 0;
    ds_status_t status = ds_build_info_get(&components, &count);
    if (status != DS_OK)
        return app_fail(app, status);
    if (format == OUTPUT_JSON) {
        printf("{");
        for (size_t i = 0; i < count; i++) {
            printf("%s", i ? ", " : "");
            output_json_string(stdout, components[i].name);
            printf(": ");
            output_json_string(stdout, components[i].value);
        }
        printf("}\n");
    } else {
        printf("component,version\n");
        for (size_t i = 0; i < count; i++) {
            output_csv_field(stdout, components[i].name);
            putchar(',');
            output_csv_field(stdout, components[i].value);
            putchar('\n');
        }
    }
    ds_build_info_free(components);
    return APP_EXIT_OK;
}
