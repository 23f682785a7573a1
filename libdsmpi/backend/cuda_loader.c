/*
 * Loads the CUDA backend module (libdsmpi_cuda.so) on first use and adapts
 * its function table to the backend operations.
 *
 * Where the module is looked for, first found wins: the DS_CUDA_MODULE
 * tunable; beside the libdsmpi shared object in use; the install directory;
 * the build tree.  A module that is missing or fails to load (no CUDA
 * driver libraries on a CPU node) means "no GPU", never an error.
 */
#define _GNU_SOURCE /* dladdr */
#include "dsi_backend.h"

#ifdef DSMPI_HAVE_CUDA
#include "cuda/dsi_cuda.h"

#include <dlfcn.h>
#include <pthread.h>
#include <string.h>
#include <unistd.h>

static const dsi_cuda_module_t *module;
static char load_error[512];
static pthread_once_t load_once = PTHREAD_ONCE_INIT;

static int try_load(const char *path)
{
    void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (handle == NULL) {
        snprintf(load_error, sizeof(load_error), "%s", dlerror());
        return 0;
    }
    void *symbol = dlsym(handle, DSI_CUDA_ENTRY);
    dsi_cuda_entry_fn entry = NULL;
    memcpy(&entry, &symbol, sizeof(entry));
    const dsi_cuda_module_t *table = entry != NULL ? entry() : NULL;
    if (table == NULL || table->abi_version != DSI_CUDA_ABI_VERSION) {
        snprintf(load_error, sizeof(load_error), "%s: not a dsmpi CUDA module of ABI %d", path,
                 DSI_CUDA_ABI_VERSION);
        dlclose(handle);
        return 0;
    }
    module = table; /* the handle stays open for the life of the process */
    return 1;
}

static void load_module(void)
{
    const char *name = DSMPI_CUDA_MODULE_NAME;
    const char *configured = dsi_param_string(DSI_PARAM_CUDA_MODULE);
    if (configured != NULL && configured[0] != '\0') {
        try_load(configured);
        return;
    }
    Dl_info info;
    if (dladdr((void *)&load_module, &info) != 0 && info.dli_fname != NULL) {
        char path[4096];
        const char *slash = strrchr(info.dli_fname, '/');
        if (slash != NULL) {
            snprintf(path, sizeof(path), "%.*s/%s", (int)(slash - info.dli_fname), info.dli_fname,
                     name);
            if (try_load(path))
                return;
        }
    }
    if (try_load(DSMPI_CUDA_MODULE_INSTALL_PATH))
        return;
    try_load(DSMPI_CUDA_MODULE_BUILD_PATH);
}

static const dsi_cuda_module_t *get_module(void)
{
    pthread_once(&load_once, load_module);
    return module;
}

int dsi_cuda_device_count(void)
{
    const dsi_cuda_module_t *m = get_module();
    return m != NULL ? m->device_count() : 0;
}

/* Without the NVIDIA kernel driver there is no GPU to find: do not load
 * cuBLAS and NCCL (seconds) just to learn that.  DS_CUDA_MODULE set
 * explicitly always loads the module. */
static int driver_present(void)
{
    const char *configured = dsi_param_string(DSI_PARAM_CUDA_MODULE);
    return (configured != NULL && configured[0] != '\0') || access("/dev/nvidiactl", F_OK) == 0 ||
           access("/proc/driver/nvidia/version", F_OK) == 0;
}

int dsi_cuda_visible_devices(void)
{
    return driver_present() ? dsi_cuda_device_count() : 0;
}

void dsi_cuda_print_info(FILE *out)
{
    const dsi_cuda_module_t *m = get_module();
    if (m == NULL)
        fprintf(out, "cuda         module not loaded (%s)\n", load_error);
    else
        m->print_info(out);
}

/* A module status with its message, recorded as ours. */
static ds_status_t fail(int code)
{
    return DSI_ERROR((ds_status_t)code, "%s", module->last_error());
}

#define MODULE_TRY(call)                                                                           \
    do {                                                                                           \
        int module_code_ = (call);                                                                 \
        if (module_code_ != DS_OK)                                                                 \
            return fail(module_code_);                                                             \
    } while (0)

typedef struct cuda_backend {
    void *ctx;
} cuda_backend_t;

static void *ctx_of(const ds_backend_t *b)
{
    return ((const cuda_backend_t *)b->impl)->ctx;
}

static ds_status_t cuda_kernel_estimate(const ds_backend_t *b, const ds_event_key_t *key,
                                        size_t *bytes_p)
{
    MODULE_TRY(module->kernel_estimate(key, bytes_p));
    return DS_OK;
}

static ds_status_t cuda_kernel_prepare(ds_backend_t *b, const ds_event_key_t *key, void **impl_p)
{
    MODULE_TRY(module->kernel_prepare(ctx_of(b), key, impl_p));
    return DS_OK;
}

static ds_status_t cuda_kernel_run(void *impl)
{
    MODULE_TRY(module->kernel_run(impl));
    return DS_OK;
}

static size_t cuda_kernel_bytes(const void *impl)
{
    return module->kernel_bytes(impl);
}

static ds_status_t cuda_kernel_chain(void *consumer, const void *producer, int *chained_p)
{
    MODULE_TRY(module->kernel_chain(consumer, producer, chained_p));
    return DS_OK;
}

static void cuda_kernel_destroy(void *impl)
{
    module->kernel_destroy(impl);
}

static ds_status_t cuda_stamps_reserve(ds_backend_t *b, size_t count)
{
    MODULE_TRY(module->stamps_reserve(ctx_of(b), count));
    return DS_OK;
}

static ds_status_t cuda_stamp(ds_backend_t *b, size_t slot)
{
    MODULE_TRY(module->stamp(ctx_of(b), slot));
    return DS_OK;
}

static ds_status_t cuda_synchronize(ds_backend_t *b)
{
    MODULE_TRY(module->synchronize(ctx_of(b)));
    return DS_OK;
}

static ds_status_t cuda_elapsed(ds_backend_t *b, size_t from, size_t to, double *seconds_p)
{
    MODULE_TRY(module->elapsed(ctx_of(b), from, to, seconds_p));
    return DS_OK;
}

/* The NCCL communicator of a group: member 0 makes the id and broadcasts it
 * together with whether that worked, so a failure stops every member. */
static ds_status_t cuda_comm_init(ds_comm_t *c)
{
    ds_status_t status = DS_OK;
    unsigned char message[DSI_NCCL_ID_BYTES + sizeof(int)];
    int code = DS_OK;
    memset(message, 0, sizeof(message));
    if (c->rank == 0)
        code = module->nccl_unique_id(message);
    memcpy(message + DSI_NCCL_ID_BYTES, &code, sizeof(code));
    DSI_MPI_TRY_GOTO(MPI_Bcast(message, (int)sizeof(message), MPI_BYTE, 0, c->comm), status, out);
    memcpy(&code, message + DSI_NCCL_ID_BYTES, sizeof(code));
    if (code != DS_OK) {
        status = c->rank == 0 ? fail(code)
                              : DSI_ERROR(DS_ERR_NCCL, "member 0 could not create an NCCL id");
        goto out;
    }
    code = module->nccl_comm_create(ctx_of(c->backend), c->size, c->rank, message, &c->impl);
    if (code != DS_OK)
        status = fail(code);
out:
    return status;
}

static void cuda_comm_fini(ds_comm_t *c)
{
    if (c->impl != NULL)
        module->nccl_comm_destroy(c->impl);
    c->impl = NULL;
}

static ds_status_t cuda_comm_prepare(ds_comm_t *c, const dsi_comm_op_t *op, int verify,
                                     void **impl_p)
{
    MODULE_TRY(
        module->comm_prepare(ctx_of(c->backend), c->impl, c->size, c->rank, op, verify, impl_p));
    return DS_OK;
}

static ds_status_t cuda_comm_run_timed(void *impl, void *before, double *lead_s, double *seconds_p)
{
    MODULE_TRY(module->comm_run_timed(impl, before, lead_s, seconds_p));
    return DS_OK;
}

static ds_status_t cuda_comm_check(void *impl, int64_t *errors_p)
{
    MODULE_TRY(module->comm_check(impl, errors_p));
    return DS_OK;
}

static void cuda_comm_release(void *impl)
{
    if (impl != NULL)
        module->comm_release(impl);
}

static ds_status_t cuda_queue_mark(ds_backend_t *b, int queue, size_t slot)
{
    MODULE_TRY(module->queue_mark(ctx_of(b), queue, slot));
    return DS_OK;
}

static ds_status_t cuda_marks_reserve(ds_backend_t *b, size_t count)
{
    MODULE_TRY(module->marks_reserve(ctx_of(b), count));
    return DS_OK;
}

static ds_status_t cuda_queue_join(ds_backend_t *b, int from, int to)
{
    MODULE_TRY(module->queue_join(ctx_of(b), from, to));
    return DS_OK;
}

static ds_status_t cuda_queue_wait_mark(ds_backend_t *b, int queue, size_t slot)
{
    MODULE_TRY(module->queue_wait_mark(ctx_of(b), queue, slot));
    return DS_OK;
}

static ds_status_t cuda_mark_done(ds_backend_t *b, size_t slot, int *done_p)
{
    MODULE_TRY(module->mark_done(ctx_of(b), slot, done_p));
    return DS_OK;
}

static ds_status_t cuda_marks_read(ds_backend_t *b, size_t count, double *offsets_s)
{
    MODULE_TRY(module->marks_read(ctx_of(b), count, offsets_s));
    return DS_OK;
}

/* NCCL matches transfers by order, not by tag. */
static ds_status_t cuda_comm_issue(void *impl, int queue, int role, int tag)
{
    MODULE_TRY(module->comm_issue(impl, queue, role));
    return DS_OK;
}

static ds_status_t cuda_group_start(ds_backend_t *b)
{
    MODULE_TRY(module->group_start());
    return DS_OK;
}

static ds_status_t cuda_group_end(ds_backend_t *b)
{
    MODULE_TRY(module->group_end());
    return DS_OK;
}

static void cuda_close(ds_backend_t *b)
{
    cuda_backend_t *cuda = b->impl;
    if (cuda == NULL)
        return;
    if (cuda->ctx != NULL)
        module->close(cuda->ctx);
    dsi_free(cuda);
    b->impl = NULL;
}

static const dsi_backend_ops_t cuda_ops = {
    .kernel_estimate = cuda_kernel_estimate,
    .kernel_prepare = cuda_kernel_prepare,
    .kernel_run = cuda_kernel_run,
    .kernel_bytes = cuda_kernel_bytes,
    .kernel_chain = cuda_kernel_chain,
    .kernel_destroy = cuda_kernel_destroy,
    .stamps_reserve = cuda_stamps_reserve,
    .stamp = cuda_stamp,
    .synchronize = cuda_synchronize,
    .elapsed = cuda_elapsed,
    .comm_init = cuda_comm_init,
    .comm_fini = cuda_comm_fini,
    .comm_prepare = cuda_comm_prepare,
    .comm_run_timed = cuda_comm_run_timed,
    .comm_check = cuda_comm_check,
    .comm_release = cuda_comm_release,
    .queue_mark = cuda_queue_mark,
    .marks_reserve = cuda_marks_reserve,
    .queue_join = cuda_queue_join,
    .queue_wait_mark = cuda_queue_wait_mark,
    .mark_done = cuda_mark_done,
    .marks_read = cuda_marks_read,
    .comm_issue = cuda_comm_issue,
    .group_start = cuda_group_start,
    .group_end = cuda_group_end,
    .close = cuda_close,
};

ds_status_t dsi_cuda_open(ds_backend_t *b)
{
    const dsi_cuda_module_t *m = driver_present() ? get_module() : NULL;
    int devices = m != NULL ? m->device_count() : 0;
    if (devices <= 0)
        return DSI_ERROR(DS_ERR_NO_DEVICE, "backend cuda: no GPU visible%s%s",
                         m == NULL && load_error[0] != '\0' ? "; module not loaded: " : "",
                         m == NULL ? load_error : "");
    cuda_backend_t *cuda = NULL;
    DSI_TRY(dsi_calloc(1, sizeof(*cuda), &cuda));
    int device = b->local_rank % devices;
    int code = m->open(device, &cuda->ctx);
    if (code != DS_OK) {
        ds_status_t status = fail(code);
        dsi_free(cuda);
        return status;
    }
    b->impl = cuda;
    b->ops = &cuda_ops;
    m->describe(cuda->ctx, b->device_name, sizeof(b->device_name), b->fingerprint,
                sizeof(b->fingerprint));
    snprintf(b->placement, sizeof(b->placement), "cuda device %d of %d, local rank %d of %d",
             device, devices, b->local_rank, b->local_size);
    if (b->local_size > devices && b->rank == 0)
        DSI_WARN("%d ranks on a node with %d GPUs: ranks share devices", b->local_size, devices);
    return DS_OK;
}

ds_status_t dsi_cuda_kernel_read(const ds_kernel_t *kernel, int index, void *host, size_t bytes)
{
    if (kernel->backend->kind != DS_BACKEND_CUDA)
        return DSI_ERROR(DS_ERR_INVALID_ARG, "not a kernel of the cuda backend");
    MODULE_TRY(module->kernel_read(kernel->impl, index, host, bytes));
    return DS_OK;
}

#else /* no CUDA in this build */

ds_status_t dsi_cuda_kernel_read(const ds_kernel_t *kernel, int index, void *host, size_t bytes)
{
    return DSI_ERROR(DS_ERR_UNSUPPORTED, "this build of dsmpi has no CUDA backend");
}

int dsi_cuda_visible_devices(void)
{
    return 0;
}

ds_status_t dsi_cuda_open(ds_backend_t *b)
{
    return DSI_ERROR(DS_ERR_UNSUPPORTED, "this build of dsmpi has no CUDA backend");
}

#endif
