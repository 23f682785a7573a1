/* Private interface of the CUDA backend, callable from C.  CUDA types never
 * appear here, so C files of other modules may include it. */
#ifndef DSI_CUDA_H
#define DSI_CUDA_H

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Number of CUDA devices visible to this process; 0 when there is no GPU or
 * no usable driver (never an error: the CPU backend takes over). */
int dsi_cuda_device_count(void);

/* Prints the CUDA runtime, driver, cuBLAS and NCCL versions and the visible
 * devices, one line each. */
void dsi_cuda_print_info(FILE *out);

#ifdef __cplusplus
}
#endif

#endif /* DSI_CUDA_H */
