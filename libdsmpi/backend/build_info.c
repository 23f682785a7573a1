/* What this build was made with, for `dsmpi version` and profile metadata. */
#include <dsmpi/dsmpi.h>

#include "dsi_core.h"

#include <cblas.h>
#ifndef DSMPI_SMPI
#include <hdf5.h>
#endif
#include <jansson.h>
#include <mpi.h>
#include <stdlib.h>
#include <string.h>

#ifdef DSMPI_HAVE_CUDA
#include "cuda/dsi_cuda.h"
#endif

/* Components before the CUDA module's: dsmpi, mpi, hdf5, blas, jansson. */
#define NUM_CORE_COMPONENTS 5
/* Lines the CUDA module may print: its libraries and one per visible device. */
#define MAX_COMPONENTS 96

static void set_component(ds_build_component_t *c, const char *name, const char *value)
{
    snprintf(c->name, sizeof(c->name), "%s", name);
    snprintf(c->value, sizeof(c->value), "%s", value);
}

static void core_components(ds_build_component_t *c)
{
    char mpi_version[MPI_MAX_LIBRARY_VERSION_STRING];
    int length = 0;
    MPI_Get_library_version(mpi_version, &length);
    for (int i = 0; i < length; i++)
        if (mpi_version[i] == '\n' || mpi_version[i] == ',') {
            mpi_version[i] = '\0';
            break;
        }
    set_component(&c[0], "dsmpi", DS_VERSION_STRING);
    set_component(&c[1], "mpi", mpi_version);
#ifdef DSMPI_SMPI
    set_component(&c[2], "hdf5", "not built (SimGrid SMPI build: text files for measurements)");
#else
    unsigned h5_major = 0, h5_minor = 0, h5_release = 0;
    H5get_libversion(&h5_major, &h5_minor, &h5_release);
    snprintf(c[2].name, sizeof(c[2].name), "hdf5");
    snprintf(c[2].value, sizeof(c[2].value), "%u.%u.%u (parallel)", h5_major, h5_minor, h5_release);
#endif
    set_component(&c[3], "blas", openblas_get_config());
    set_component(&c[4], "jansson", jansson_version_str());
}

#ifdef DSMPI_HAVE_CUDA
/* The CUDA module's lines, "name value" or "  device N: description", as components. */
static size_t cuda_components(ds_build_component_t *c, size_t room)
{
    char *text = NULL;
    size_t size = 0, n = 0;
    FILE *mem = open_memstream(&text, &size);
    if (mem == NULL) {
        set_component(&c[0], "cuda", "unknown (out of memory)");
        return 1;
    }
    dsi_cuda_print_info(mem);
    fclose(mem);
    for (char *save = NULL, *line = strtok_r(text, "\n", &save); line != NULL && n < room;
         line = strtok_r(NULL, "\n", &save)) {
        line += strspn(line, " ");
        char *colon = strchr(line, ':');
        size_t name_len = strncmp(line, "device ", 7) == 0 && colon != NULL ? (size_t)(colon - line)
                                                                            : strcspn(line, " ");
        const char *value = line + name_len + (line[name_len] == ':');
        value += strspn(value, " ");
        snprintf(c[n].name, sizeof(c[n].name), "%.*s", (int)name_len, line);
        snprintf(c[n].value, sizeof(c[n].value), "%s", value);
        n++;
    }
    free(text);
    return n;
}
#endif

ds_status_t ds_build_info_get(ds_build_component_t **components_p, size_t *count_p)
{
    ds_build_component_t *c = NULL;
    DSI_TRY(dsi_calloc(MAX_COMPONENTS, sizeof(*c), &c));
    core_components(c);
    size_t n = NUM_CORE_COMPONENTS;
#ifdef DSMPI_HAVE_CUDA
    n += cuda_components(c + n, MAX_COMPONENTS - n);
#else
    set_component(&c[n++], "cuda", "not built");
#endif
    *components_p = c;
    *count_p = n;
    return DS_OK;
}

void ds_build_info_free(ds_build_component_t *components)
{
    dsi_free(components);
}

void ds_build_info_print(FILE *out)
{
    ds_build_component_t c[NUM_CORE_COMPONENTS];
    core_components(c);
    for (size_t i = 0; i < NUM_CORE_COMPONENTS; i++)
        fprintf(out, "%-12s %s\n", c[i].name, c[i].value);
#ifdef DSMPI_HAVE_CUDA
    dsi_cuda_print_info(out);
#else
    fprintf(out, "cuda         not built\n");
#endif
}
