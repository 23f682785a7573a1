/* dsmpi version: what this build is made of. */
#include "commands.h"

#include <string.h>

int cmd_version(app_t *app)
{
    if (app->argc > 1) {
        if (strcmp(app->argv[1], "--help") == 0) {
            printf("usage: dsmpi version\n\nPrints the versions of dsmpi, MPI, HDF5, BLAS, jansson and,\n"
                   "when built with CUDA, of the CUDA runtime, driver, cuBLAS and NCCL and the\n"
                   "visible GPUs.\n");
            return APP_EXIT_OK;
        }
        return app_usage_error(app, "unexpected argument '%s' (accepted: --help)", app->argv[1]);
    }
    ds_build_info_print(stdout);
    return APP_EXIT_OK;
}
