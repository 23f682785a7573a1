/* dsmpi: predicts how a hybrid-parallel DNN training job runs on thousands
 * of GPUs from measurements on a small MPI allocation.  Include this header
 * for the whole public API. */
#ifndef DSMPI_DSMPI_H
#define DSMPI_DSMPI_H

#include <dsmpi/backend.h>
#include <dsmpi/cluster.h>
#include <dsmpi/comm.h>
#include <dsmpi/core.h>
#include <dsmpi/events.h>
#include <dsmpi/exec.h>
#include <dsmpi/framework.h>
#include <dsmpi/model.h>
#include <dsmpi/predict.h>
#include <dsmpi/profile.h>
#include <dsmpi/search.h>
#include <dsmpi/sim.h>
#include <dsmpi/store.h>
#include <dsmpi/strategy.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Prints one line per component this build was made with (MPI, HDF5, BLAS,
 * JSON parser, CUDA runtime, cuBLAS, NCCL) and the CUDA devices visible now. */
DS_API void ds_build_info_print(FILE *out);

/* One component of the build: its name ("dsmpi", "mpi", "hdf5", "blas", "jansson", "cuda";
 * with the CUDA module loaded "cuda-runtime", "cuda-driver", "cublas", "nccl",
 * "cuda-devices" and "device 0", "device 1", ...) and its version or description, as
 * ds_build_info_print prints them.  Names are unique. */
#define DS_BUILD_NAME_MAX 32
#define DS_BUILD_VALUE_MAX 256
typedef struct ds_build_component {
    char name[DS_BUILD_NAME_MAX];
    char value[DS_BUILD_VALUE_MAX];
} ds_build_component_t;

/* The components, in ds_build_info_print's order.  On success the caller frees
 * *components_p with ds_build_info_free. */
DS_API ds_status_t ds_build_info_get(ds_build_component_t **components_p, size_t *count_p);
DS_API void ds_build_info_free(ds_build_component_t *components);

#ifdef __cplusplus
}
#endif

#endif /* DSMPI_DSMPI_H */
