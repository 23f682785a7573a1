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
#include <dsmpi/model.h>
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

#ifdef __cplusplus
}
#endif

#endif /* DSMPI_DSMPI_H */
