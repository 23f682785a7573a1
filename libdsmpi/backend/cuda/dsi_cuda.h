/*
 * The CUDA backend lives in a module of its own, libdsmpi_cuda.so, which
 * links cudart, cuBLAS and NCCL; libdsmpi loads it with dlopen on first use
 * (backend/cuda_loader.c), so a run that never uses a GPU does not pay for
 * loading those libraries (about 0.8 GB of shared objects).
 *
 * This header is the module's whole interface: one entry point returning a
 * table of functions.  No CUDA, cuBLAS, NCCL or MPI types appear, so C files
 * may include it.  Functions returning int return a ds_status_t; on failure
 * last_error() gives a one-line message.
 */
#ifndef DSI_CUDA_H
#define DSI_CUDA_H

#include "dsi_comm_op.h"

#include <dsmpi/core.h>
#include <dsmpi/events.h>

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DSI_CUDA_ABI_VERSION 2
#define DSI_CUDA_ENTRY "dsi_cuda_module_get"
#define DSI_NCCL_ID_BYTES 128

typedef struct dsi_cuda_module {
    int abi_version; /* DSI_CUDA_ABI_VERSION */
    const char *(*last_error)(void);

    /* Visible GPUs; 0 when there is no GPU or no usable driver. */
    int (*device_count)(void);
    /* CUDA runtime, driver, cuBLAS and NCCL versions and the devices. */
    void (*print_info)(FILE *out);

    /* A context on `device`: stream, cuBLAS handle, timing events. */
    int (*open)(int device, void **ctx_p);
    void (*close)(void *ctx);
    /* Device name and fingerprint of an open context. */
    void (*describe)(void *ctx, char *name, size_t name_size, char *fingerprint,
                     size_t fingerprint_size);

    int (*kernel_estimate)(const ds_event_key_t *key, size_t *bytes_p);
    int (*kernel_prepare)(void *ctx, const ds_event_key_t *key, void **kernel_p);
    int (*kernel_run)(void *kernel);
    size_t (*kernel_bytes)(const void *kernel);
    int (*kernel_chain)(void *consumer, const void *producer, int *chained_p);
    /* Copies `bytes` of buffer `index` (the plan's order) to the host. */
    int (*kernel_read)(const void *kernel, int index, void *host, size_t bytes);
    void (*kernel_destroy)(void *kernel);

    int (*stamps_reserve)(void *ctx, size_t count);
    int (*stamp)(void *ctx, size_t slot);
    int (*synchronize)(void *ctx);
    int (*elapsed)(void *ctx, size_t from, size_t to, double *seconds_p);

    /* NCCL: member 0 makes the id, the caller broadcasts it (MPI), every
     * member creates its communicator. */
    int (*nccl_unique_id)(unsigned char id[DSI_NCCL_ID_BYTES]);
    int (*nccl_comm_create)(void *ctx, int size, int rank,
                            const unsigned char id[DSI_NCCL_ID_BYTES], void **nccl_p);
    void (*nccl_comm_destroy)(void *nccl);
    int (*comm_prepare)(void *ctx, void *nccl, int size, int rank, const dsi_comm_op_t *op,
                        int verify, void **op_p);
    /* Runs kernel `before` (or nothing) then the operation on the same
     * stream, waits, and gives both times. */
    int (*comm_run_timed)(void *op, void *before, double *lead_s, double *seconds_p);
    int (*comm_check)(void *op, int64_t *errors_p);
    void (*comm_release)(void *op);

    /* The executor's queues (dsi_queue_t): marks are timing events of their
     * own, slot 0 .. made on demand; a mark records when `queue` reaches it. */
    int (*queue_mark)(void *ctx, int queue, size_t slot);
    /* Makes marks 0 .. count-1 now, so that recording them later creates none. */
    int (*marks_reserve)(void *ctx, size_t count);
    /* `to` waits (on the device) for what was issued on `from` so far. */
    int (*queue_join)(void *ctx, int from, int to);
    /* `queue` waits (on the device) until mark `slot` has been reached. */
    int (*queue_wait_mark)(void *ctx, int queue, size_t slot);
    /* Whether mark `slot` has been reached (never blocks). */
    int (*mark_done)(void *ctx, size_t slot, int *done_p);
    /* Waits for every queue, then offsets_s[i] = seconds from mark 0 to
     * mark i, for i < count. */
    int (*marks_read)(void *ctx, size_t count, double *offsets_s);
    /* Issues a prepared operation on `queue` without waiting; role as
     * dsi_call_role_t (point-to-point: this member's side). */
    int (*comm_issue)(void *op, int queue, int role);
    /* Operations issued between these go to NCCL as one group. */
    int (*group_start)(void);
    int (*group_end)(void);
} dsi_cuda_module_t;

typedef const dsi_cuda_module_t *(*dsi_cuda_entry_fn)(void);

/* ---- implemented in libdsmpi (cuda_loader.c) ------------------------------------------------- */

/* Number of CUDA devices visible to this process; 0 when there is no GPU,
 * no usable driver, or the module cannot be loaded (never an error: the CPU
 * backend takes over). */
int dsi_cuda_device_count(void);

/* Prints the CUDA runtime, driver, cuBLAS and NCCL versions and the visible
 * devices, one line each (or why the module is not loaded). */
void dsi_cuda_print_info(FILE *out);

#ifdef __cplusplus
}
#endif

#endif /* DSI_CUDA_H */
