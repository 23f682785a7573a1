/* State of the CPU backend shared by its files. */
#ifndef DSI_CPU_BACKEND_H
#define DSI_CPU_BACKEND_H

#define _GNU_SOURCE /* cpu_set_t */
#include "dsi_backend.h"
#include "dsi_cpu.h"

#include <sched.h>

typedef struct cpu_kernel cpu_kernel_t;

typedef struct cpu_backend {
    dsi_sbgemm_fn sbgemm; /* NULL when the OpenBLAS in use has no bf16 GEMM */
    int pinned, core;
    cpu_set_t saved_mask;
    int mask_saved;
    int saved_blas_threads;
    uint64_t saved_fp_mode; /* the floating-point control word before flush-to-zero */
    double *stamps;
    size_t stamp_capacity;
    size_t memory_limit, memory_used;
    MPI_Op bf16_sum, fp16_sum; /* MPI reductions of 16-bit floats */
} cpu_backend_t;

/* cpu_comm.c */
ds_status_t dsi_cpu_comm_ops_create(cpu_backend_t *cpu);
void dsi_cpu_comm_ops_free(cpu_backend_t *cpu);
ds_status_t dsi_cpu_comm_init(ds_comm_t *comm);
void dsi_cpu_comm_fini(ds_comm_t *comm);
ds_status_t dsi_cpu_comm_prepare(ds_comm_t *comm, const dsi_comm_op_t *op, int verify,
                                 void **impl_p);
ds_status_t dsi_cpu_comm_run_timed(void *impl, void *before, double *lead_s, double *seconds_p);
/* Runs a prepared cpu kernel (cpu_backend.c). */
ds_status_t dsi_cpu_kernel_run_impl(void *kernel);
ds_status_t dsi_cpu_comm_check(void *impl, int64_t *errors_p);
void dsi_cpu_comm_release(void *impl);
ds_status_t dsi_cpu_comm_start(void *impl, int role, int tag);
ds_status_t dsi_cpu_comm_test(void *impl, int *done_p);
ds_status_t dsi_cpu_comm_wait(void *impl);

/* For tests: buffer `index` of a prepared cpu kernel (0 if there is none),
 * and which buffers are its main input and output. */
int dsi_cpu_kernel_buffer(const ds_kernel_t *kernel, int index, void **ptr_p, size_t *bytes_p);
void dsi_cpu_kernel_roles(const ds_kernel_t *kernel, int *in_index_p, int *out_index_p,
                          int *stored_bf16_p);

#endif /* DSI_CPU_BACKEND_H */
