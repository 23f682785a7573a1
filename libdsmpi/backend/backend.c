/*
 * Backend selection, opening and the compute-kernel handles.  The work is
 * done by the backend's operations (cpu/cpu_backend.c, cuda_loader.c).
 */
#include "dsi_backend.h"

#include <string.h>
#include <time.h>

static const char *const kind_names[] = {"auto", "cpu", "cuda", "replay"};

const char *ds_backend_kind_name(ds_backend_kind_t kind)
{
    return (unsigned)kind < DSI_ARRAY_SIZE(kind_names) ? kind_names[kind] : "unknown";
}

ds_status_t ds_backend_kind_parse(const char *text, ds_backend_kind_t *kind_p)
{
    int index = 0;
    if (text == NULL)
        return DSI_ERROR(DS_ERR_INVALID_ARG,
                         "no backend given (accepted: auto, cpu, cuda, replay)");
    DSI_TRY(dsi_parse_choice(text, "backend", kind_names, DSI_ARRAY_SIZE(kind_names), &index));
    *kind_p = (ds_backend_kind_t)index;
    return DS_OK;
}

ds_backend_kind_t ds_backend_kind_default(void)
{
    ds_backend_kind_t kind = DS_BACKEND_AUTO;
    if (ds_backend_kind_parse(dsi_param_string(DSI_PARAM_BACKEND), &kind) != DS_OK) {
        DSI_WARN("DS_BACKEND=%s is not a backend (accepted: auto, cpu, cuda, replay); using auto",
                 dsi_param_string(DSI_PARAM_BACKEND));
        ds_clear_error();
        kind = DS_BACKEND_AUTO;
    }
    return kind;
}

int ds_backend_cuda_available(void)
{
    return dsi_cuda_visible_devices() > 0;
}

/* Local rank and size: the ranks of `comm` that share this node's memory. */
static ds_status_t local_ranks(ds_backend_t *b)
{
    ds_status_t status = DS_OK;
    MPI_Comm node = MPI_COMM_NULL;
    DSI_TRY_GOTO(dsi_mpi_split_node(b->comm, b->rank, &node), status, out);
    DSI_MPI_TRY_GOTO(MPI_Comm_rank(node, &b->local_rank), status, out);
    DSI_MPI_TRY_GOTO(MPI_Comm_size(node, &b->local_size), status, out);
out:
    if (node != MPI_COMM_NULL)
        MPI_Comm_free(&node);
    return status;
}

/* Opens `kind` on `comm`; `costs` and `device` are the replay backend's. */
static ds_status_t open_backend(ds_backend_kind_t kind, MPI_Comm comm, const ds_cost_table_t *costs,
                                const char *device, ds_backend_t **backend_p)
{
    ds_status_t status = DS_OK;
    ds_backend_t *b = NULL;
    if ((unsigned)kind >= DSI_ARRAY_SIZE(kind_names))
        return DSI_ERROR(DS_ERR_INVALID_ARG,
                         "backend kind %d is not one of auto, cpu, cuda, replay", (int)kind);
    DSI_TRY(dsi_calloc(1, sizeof(*b), &b));
    b->comm = MPI_COMM_NULL;
    DSI_TRY_GOTO(dsi_mpi_dup(comm, &b->comm), status, err_free);
    DSI_MPI_TRY_GOTO(MPI_Comm_rank(b->comm, &b->rank), status, err_comm);
    DSI_MPI_TRY_GOTO(MPI_Comm_size(b->comm, &b->size), status, err_comm);
    DSI_TRY_GOTO(local_ranks(b), status, err_comm);

    /* Agree on the kind: cuda only where every rank sees a GPU. */
    int gpus = kind == DS_BACKEND_CPU || kind == DS_BACKEND_REPLAY ? 0 : dsi_cuda_visible_devices();
    int least = 0;
    DSI_MPI_TRY_GOTO(MPI_Allreduce(&gpus, &least, 1, MPI_INT, MPI_MIN, b->comm), status, err_comm);
    if (kind == DS_BACKEND_CUDA && least == 0) {
        status = DSI_ERROR(DS_ERR_NO_DEVICE, "backend cuda: %s (use --backend cpu or auto)",
                           gpus == 0 ? "this rank sees no GPU" : "another rank sees no GPU");
        goto err_comm;
    }
    b->kind = kind == DS_BACKEND_REPLAY ? DS_BACKEND_REPLAY
              : (kind == DS_BACKEND_CUDA || (kind == DS_BACKEND_AUTO && least > 0))
                  ? DS_BACKEND_CUDA
                  : DS_BACKEND_CPU;
    if (kind == DS_BACKEND_AUTO && gpus > 0 && least == 0 && b->rank == 0)
        DSI_WARN("backend auto: some ranks see no GPU, so every rank uses the cpu backend");

    status = b->kind == DS_BACKEND_CUDA     ? dsi_cuda_open(b)
             : b->kind == DS_BACKEND_REPLAY ? dsi_replay_open(b, costs, device)
                                            : dsi_cpu_open(b);
    /* Opening may fail on one rank only (a device busy, memory): agree. */
    int failed = status != DS_OK, any_failed = 0;
    if (MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, b->comm) != MPI_SUCCESS)
        any_failed = 1;
    if (status != DS_OK)
        goto err_comm;
    if (any_failed) {
        status =
            DSI_ERROR(DS_ERR_NO_DEVICE, "backend %s: opening the device failed on another rank",
                      ds_backend_kind_name(b->kind));
        goto err_close;
    }
    DSI_INFO("backend %s on %s: %s", ds_backend_kind_name(b->kind), b->placement, b->fingerprint);
    *backend_p = b;
    return DS_OK;

err_close:
    b->ops->close(b);
err_comm:
    MPI_Comm_free(&b->comm);
err_free:
    dsi_free(b);
    return status;
}

ds_status_t ds_backend_open(ds_backend_kind_t kind, MPI_Comm comm, ds_backend_t **backend_p)
{
    return open_backend(kind, comm, NULL, NULL, backend_p);
}

ds_status_t ds_backend_open_replay(MPI_Comm comm, const ds_cost_table_t *costs, const char *device,
                                   ds_backend_t **backend_p)
{
    if (costs == NULL)
        return DSI_ERROR(DS_ERR_INVALID_ARG, "the replay backend needs a cost table");
    return open_backend(DS_BACKEND_REPLAY, comm, costs, device, backend_p);
}

void ds_backend_close(ds_backend_t *backend)
{
    if (backend == NULL)
        return;
    if (backend->ops != NULL)
        backend->ops->close(backend);
    if (backend->comm != MPI_COMM_NULL)
        MPI_Comm_free(&backend->comm);
    dsi_free(backend);
}

ds_backend_kind_t ds_backend_kind(const ds_backend_t *backend)
{
    return backend->kind;
}

const char *ds_backend_device_name(const ds_backend_t *backend)
{
    return backend->device_name;
}

const char *ds_backend_fingerprint(const ds_backend_t *backend)
{
    return backend->fingerprint;
}

const char *ds_backend_placement(const ds_backend_t *backend)
{
    return backend->placement;
}

ds_status_t ds_backend_synchronize(ds_backend_t *backend)
{
    return backend->ops->synchronize(backend);
}

/* ---- kernels --------------------------------------------------------------------------------- */

static ds_status_t check_compute_key(const ds_event_key_t *key)
{
    if (key == NULL)
        return DSI_ERROR(DS_ERR_INVALID_ARG, "no event key given");
    if (key->kind != DS_EVENT_COMPUTE) {
        char text[256];
        ds_event_key_format(key, text, sizeof(text));
        return DSI_ERROR(DS_ERR_INVALID_ARG,
                         "'%s' is a communication event; compute kernels need a compute key "
                         "(measure it with ds_comm_measure)",
                         text);
    }
    if (key->op >= DS_OP_COUNT_)
        return DSI_ERROR(DS_ERR_INVALID_ARG, "compute operator %u is not known (0..%d)",
                         (unsigned)key->op, DS_OP_COUNT_ - 1);
    if (key->op == DS_OP_FRAMEWORK_GAP)
        return DSI_ERROR(DS_ERR_INVALID_ARG,
                         "operator framework_gap is a framework's time between operators, "
                         "imported from its trace; no kernel measures it");
    return DS_OK;
}

ds_status_t ds_kernel_estimate_bytes(const ds_backend_t *backend, const ds_event_key_t *key,
                                     size_t *bytes_p)
{
    DSI_TRY(check_compute_key(key));
    return backend->ops->kernel_estimate(backend, key, bytes_p);
}

ds_status_t ds_kernel_prepare(ds_backend_t *backend, const ds_event_key_t *key,
                              ds_kernel_t **kernel_p)
{
    ds_status_t status = DS_OK;
    ds_kernel_t *kernel = NULL;
    DSI_TRY(check_compute_key(key));
    DSI_TRY(dsi_calloc(1, sizeof(*kernel), &kernel));
    kernel->backend = backend;
    kernel->key = *key;
    DSI_TRY_GOTO(backend->ops->kernel_prepare(backend, key, &kernel->impl), status, err_free);
    *kernel_p = kernel;
    return DS_OK;
err_free:
    dsi_free(kernel);
    return status;
}

ds_status_t ds_kernel_run(ds_kernel_t *kernel)
{
    return kernel->backend->ops->kernel_run(kernel->impl);
}

size_t ds_kernel_bytes(const ds_kernel_t *kernel)
{
    return kernel->backend->ops->kernel_bytes(kernel->impl);
}

void ds_kernel_destroy(ds_kernel_t *kernel)
{
    if (kernel == NULL)
        return;
    kernel->backend->ops->kernel_destroy(kernel->impl);
    dsi_free(kernel);
}

ds_status_t dsi_kernel_chain(ds_kernel_t *consumer, const ds_kernel_t *producer, int *chained_p)
{
    *chained_p = 0;
    if (consumer->backend != producer->backend)
        return DS_OK;
    return consumer->backend->ops->kernel_chain(consumer->impl, producer->impl, chained_p);
}
