/* What this build was made with, for `dsmpi version` and profile metadata. */
#include <dsmpi/dsmpi.h>

#include <cblas.h>
#ifndef DSMPI_SMPI
#include <hdf5.h>
#endif
#include <jansson.h>
#include <mpi.h>

#ifdef DSMPI_HAVE_CUDA
#include "backend/cuda/dsi_cuda.h"
#endif

void ds_build_info_print(FILE *out)
{
    char mpi_version[MPI_MAX_LIBRARY_VERSION_STRING];
    int length = 0;
    MPI_Get_library_version(mpi_version, &length);
    for (int i = 0; i < length; i++)
        if (mpi_version[i] == '\n' || mpi_version[i] == ',') {
            mpi_version[i] = '\0';
            break;
        }
    fprintf(out, "dsmpi        %s\n", DS_VERSION_STRING);
    fprintf(out, "mpi          %s\n", mpi_version);
#ifdef DSMPI_SMPI
    fprintf(out, "hdf5         not built (SimGrid SMPI build: text files for measurements)\n");
#else
    unsigned h5_major = 0, h5_minor = 0, h5_release = 0;
    H5get_libversion(&h5_major, &h5_minor, &h5_release);
    fprintf(out, "hdf5         %u.%u.%u (parallel)\n", h5_major, h5_minor, h5_release);
#endif
    fprintf(out, "blas         %s\n", openblas_get_config());
    fprintf(out, "jansson      %s\n", jansson_version_str());
#ifdef DSMPI_HAVE_CUDA
    dsi_cuda_print_info(out);
#else
    fprintf(out, "cuda         not built\n");
#endif
}
