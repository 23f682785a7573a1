/*
 * The CPU backend: one MPI rank stands for one device.  The rank is pinned
 * to one core, OpenBLAS runs single-threaded, compute events run the C
 * kernels of cpu_kernels.c on buffers of the key's shapes, communication is
 * MPI (cpu_comm.c).
 *
 * Storage: fp32 keys are stored and computed in fp32.  bf16 keys are stored
 * in bf16 and multiplied with cblas_sbgemm when the OpenBLAS loaded at run
 * time exports it; otherwise they are stored and computed in fp32, and the
 * fingerprint says so (Debian's OpenBLAS 0.3.21 is built without bf16).
 * fp16 keys are computed in fp32 (OpenBLAS has no half-precision GEMM).
 * fp8 GEMM keys are computed as bf16 keys are (a core has no fp8
 * arithmetic): the same shapes of work at a wider precision, and the
 * fingerprint says so; the casts to fp8 (fp8_cast keys) write real E4M3
 * bytes.
 */
#define _GNU_SOURCE /* sched_setaffinity, MADV_HUGEPAGE */
#include "dsi_cpu_backend.h"

#include "dsi_kernel_plan.h"

#include <cblas.h>
#include <dlfcn.h>
#include <limits.h>
#include <math.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#if defined(__SSE2__)
#include <xmmintrin.h>
#endif

/* Subnormal floats flushed to zero (inputs and results) while the backend
 * is open, as GPU training kernels and CPU deep-learning libraries run: a
 * kernel repeated on the same buffers (the optimizer's moments decaying
 * under a fixed gradient) otherwise drifts into subnormals, which x86
 * computes in microcode, and its time comes to depend on how often it ran
 * (an Adam step measured 5x slower on one rank than on the other). */
static uint64_t fp_flush_subnormals(void)
{
#if defined(__SSE2__)
    unsigned int mode = _mm_getcsr();
    _mm_setcsr(mode | 0x8040u); /* FTZ (bit 15) and DAZ (bit 6) */
    return mode;
#elif defined(__aarch64__)
    uint64_t fpcr;
    __asm__ volatile("mrs %0, fpcr" : "=r"(fpcr));
    __asm__ volatile("msr fpcr, %0" : : "r"(fpcr | (UINT64_C(1) << 24))); /* FZ */
    return fpcr;
#else
    return 0;
#endif
}

static void fp_restore(uint64_t mode)
{
#if defined(__SSE2__)
    _mm_setcsr((unsigned int)mode);
#elif defined(__aarch64__)
    __asm__ volatile("msr fpcr, %0" : : "r"(mode));
#else
    (void)mode;
#endif
}

/* ---- device buffers -------------------------------------------------------------------------- */

/* Page-aligned, zero-filled memory; large buffers ask for transparent huge
 * pages (a GPU's memory has no TLB misses to speak of). */
static ds_status_t buffer_alloc(size_t bytes, void **ptr_p)
{
    size_t size = bytes == 0 ? 1 : bytes;
    void *ptr = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (ptr == MAP_FAILED)
        return DSI_ERROR(DS_ERR_NO_MEMORY, "out of memory allocating a %zu-byte device buffer",
                         bytes);
#ifdef MADV_HUGEPAGE
    if (size >= (2u << 20))
        (void)madvise(ptr, size, MADV_HUGEPAGE);
#endif
    *ptr_p = ptr;
    return DS_OK;
}

static void buffer_free(void *ptr, size_t bytes)
{
    if (ptr != NULL)
        munmap(ptr, bytes == 0 ? 1 : bytes);
}

/* ---- kernels --------------------------------------------------------------------------------- */

struct cpu_kernel {
    cpu_backend_t *cpu;
    ds_event_key_t key;
    dsi_stype_t type;
    dsi_kernel_plan_t plan;
    void *buf[DSI_PLAN_MAX_BUFFERS];
    size_t bytes[DSI_PLAN_MAX_BUFFERS];
    const void *in; /* buf[in_index], or the previous operator's output */
    float *scratch;
    size_t scratch_bytes;
    int64_t scratch_rows; /* bf16 GEMM: rows of C computed at once in fp32 */
    size_t total_bytes;
    int64_t runs;
};

static dsi_stype_t storage_of(const cpu_backend_t *cpu, ds_dtype_t dtype)
{
    return (dtype == DS_DTYPE_BF16 || dtype == DS_DTYPE_FP8) && cpu->sbgemm != NULL ? DSI_STYPE_BF16
                                                                                    : DSI_STYPE_F32;
}

/* The plan of `key` on this backend, its scratch (floats) and bf16 GEMM rows. */
static ds_status_t plan_kernel(const cpu_backend_t *cpu, const ds_event_key_t *key,
                               dsi_kernel_plan_t *plan, int64_t *scratch_p, int64_t *rows_p)
{
    char message[256];
    bool matmul = key->op == DS_OP_GEMM || key->op == DS_OP_BATCHED_GEMM;
    if (key->dtype == DS_DTYPE_FP8 && !matmul)
        return DSI_ERROR(DS_ERR_UNSUPPORTED,
                         "fp8 %s keys are not generated (accepted: fp8 GEMMs; casts to fp8 are "
                         "fp8_cast keys of the source dtype)",
                         ds_event_key_op_name(key));
    if (key->dtype > DS_DTYPE_FP8)
        return DSI_ERROR(DS_ERR_INVALID_ARG, "compute key dtype %u is not known",
                         (unsigned)key->dtype);
    int code = dsi_kernel_plan_make(key, plan, message, sizeof(message));
    if (code != DS_OK)
        return DSI_ERROR((ds_status_t)code, "%s", message);
    int64_t cols = plan->cols, scratch = 0, rows = 0;
    switch ((ds_op_t)key->op) {
    case DS_OP_GEMM:
    case DS_OP_BATCHED_GEMM:
        if (storage_of(cpu, (ds_dtype_t)key->dtype) == DSI_STYPE_BF16) {
            rows = DSI_MIN(DSI_MAX((int64_t)(16 << 20) / key->dims[1], 256), key->dims[0]);
            scratch = rows * key->dims[1];
        }
        break;
    case DS_OP_SOFTMAX:
    case DS_OP_ROPE: scratch = 2 * cols; break;
    case DS_OP_LAYERNORM:
    case DS_OP_RMSNORM: scratch = 4 * cols; break;
    case DS_OP_GELU:
    case DS_OP_RELU:
    case DS_OP_ADD: scratch = 3 * DSI_CPU_CHUNK; break;
    case DS_OP_SWIGLU:
    case DS_OP_GEGLU: scratch = 6 * cols; break;
    case DS_OP_DROPOUT: scratch = 2 * DSI_CPU_CHUNK; break;
    case DS_OP_DROPOUT_ADD: scratch = DSI_MAX(3 * cols, 2 * DSI_CPU_CHUNK); break;
    case DS_OP_EMBEDDING:
    case DS_OP_CROSS_ENTROPY: scratch = cols; break;
    case DS_OP_POOL: scratch = 3 * cols; break;
    case DS_OP_FP8_CAST: scratch = DSI_CPU_CHUNK; break;
    case DS_OP_MOE_AUX_LOSS: scratch = cols; break;
    case DS_OP_FLASH_ATTENTION: {
        ds_attention_shape_t shape = ds_attention_shape_of(key);
        scratch = dsi_cpu_attention_scratch(&shape, plan->backward);
        break;
    }
    default: break;
    }
    *scratch_p = scratch;
    *rows_p = rows;
    return DS_OK;
}

/* ---- operations ------------------------------------------------------------------------------ */

static ds_status_t cpu_kernel_estimate(const ds_backend_t *backend, const ds_event_key_t *key,
                                       size_t *bytes_p)
{
    dsi_kernel_plan_t plan;
    int64_t scratch = 0, rows = 0;
    const cpu_backend_t *cpu = backend->impl;
    DSI_TRY(plan_kernel(cpu, key, &plan, &scratch, &rows));
    *bytes_p =
        dsi_kernel_plan_bytes(&plan, dsi_stype_size(storage_of(cpu, (ds_dtype_t)key->dtype))) +
        (size_t)scratch * sizeof(float);
    return DS_OK;
}

static void fill_buffer(cpu_kernel_t *k, int index)
{
    const dsi_buffer_plan_t *b = &k->plan.buffers[index];
    uint64_t seed = dsi_kernel_plan_seed(&k->key, index);
    dsi_stype_t t = b->elem == DSI_ELEM_STORED ? k->type
                    : b->elem == DSI_ELEM_BF16 ? DSI_STYPE_BF16
                                               : DSI_STYPE_F32;
    switch (b->fill) {
    case DSI_FILL_NONE:
    case DSI_FILL_SAVED: break;
    case DSI_FILL_NORMAL:
    case DSI_FILL_POSITIVE:
    case DSI_FILL_ONE_NORMAL:
        dsi_cpu_fill_normal(k->buf[index], t, b->count, b->scale,
                            b->fill == DSI_FILL_ONE_NORMAL ? 1.0f : 0.0f,
                            b->fill == DSI_FILL_POSITIVE, seed);
        break;
    case DSI_FILL_INDEX: dsi_cpu_fill_index(k->buf[index], b->count, b->limit, seed); break;
    case DSI_FILL_CONSTANT:
        for (int64_t i = 0; i < b->count; i++)
            ((float *)k->buf[index])[i] = b->scale;
        break;
    }
}

/* State a backward kernel reads that its forward made: probabilities, norm
 * statistics, dropout masks, argmax positions, the cross-entropy softmax. */
static void make_saved_state(cpu_kernel_t *k)
{
    const ds_event_key_t *key = &k->key;
    int64_t rows = k->plan.rows, cols = k->plan.cols, n = rows * cols;
    dsi_stype_t t = k->type;
    void **b = k->buf;
    float *s = k->scratch;
    if (key->op == DS_OP_ROPE) {
        dsi_cpu_rope_table(rows, k->plan.head_dim, b[2]);
        return;
    }
    if (!k->plan.backward)
        return;
    switch ((ds_op_t)key->op) {
    case DS_OP_SOFTMAX: /* y = softmax of random scores, in place */
        dsi_cpu_softmax_fwd(t, rows, cols, k->plan.causal, DSI_SOFTMAX_SCALE, b[1], b[1], s);
        break;
    case DS_OP_LAYERNORM: /* dy x gamma mean rstd dx dgamma dbeta */
        dsi_cpu_layernorm_fwd(t, rows, cols, b[1], b[2], b[2], b[5], b[3], b[4], s);
        break;
    case DS_OP_RMSNORM: /* dy x gamma rstd dx dgamma */
        dsi_cpu_rmsnorm_fwd(t, rows, cols, b[1], b[2], b[4], b[3], s);
        break;
    case DS_OP_DROPOUT: /* dy mask dx */
    case DS_OP_DROPOUT_ADD:
        dsi_cpu_dropout_fwd(t, n, DSI_DROPOUT_P, dsi_kernel_plan_seed(key, -1), b[0], b[2], b[1],
                            s);
        break;
    case DS_OP_POOL: /* dy argmax dx */ dsi_cpu_pool_fwd(t, rows, cols, b[0], b[2], b[1], s); break;
    case DS_OP_FLASH_ATTENTION: { /* do q k v o lse dq dk dv: o and lse from q k v */
        ds_attention_shape_t shape = ds_attention_shape_of(key);
        dsi_cpu_attention_fwd(t, &shape, k->plan.causal, b[1], b[2], b[3], b[4], b[5], s);
        break;
    }
    case DS_OP_CROSS_ENTROPY: /* softmax targets dloss dlogits: in place, loss into dloss */
        dsi_cpu_cross_entropy_fwd(DSI_STYPE_F32, rows, cols, b[0], b[1], b[0], b[2], s);
        fill_buffer(k, 2);
        break;
    default: break;
    }
}

static void cpu_kernel_destroy(void *impl)
{
    cpu_kernel_t *k = impl;
    if (k == NULL)
        return;
    for (int i = 0; i < k->plan.num_buffers; i++)
        buffer_free(k->buf[i], k->bytes[i]);
    buffer_free(k->scratch, k->scratch_bytes);
    k->cpu->memory_used -= k->total_bytes;
    dsi_free(k);
}

static ds_status_t cpu_kernel_prepare(ds_backend_t *backend, const ds_event_key_t *key,
                                      void **impl_p)
{
    ds_status_t status = DS_OK;
    cpu_backend_t *cpu = backend->impl;
    cpu_kernel_t *k = NULL;
    dsi_kernel_plan_t plan;
    int64_t scratch = 0, scratch_rows = 0;
    DSI_TRY(plan_kernel(cpu, key, &plan, &scratch, &scratch_rows));
    dsi_stype_t type = storage_of(cpu, (ds_dtype_t)key->dtype);
    size_t need =
        dsi_kernel_plan_bytes(&plan, dsi_stype_size(type)) + (size_t)scratch * sizeof(float);
    size_t left = cpu->memory_limit - DSI_MIN(cpu->memory_used, cpu->memory_limit);
    if (need > left) {
        char text[256];
        ds_event_key_format(key, text, sizeof(text));
        return DSI_ERROR(DS_ERR_NO_MEMORY,
                         "compute event '%s' needs %.3g GiB of buffers; this rank may use %.3g GiB "
                         "more (DS_DEVICE_MEMORY_GIB sets the device memory)",
                         text, (double)need / 1073741824.0, (double)left / 1073741824.0);
    }
    DSI_TRY(dsi_calloc(1, sizeof(*k), &k));
    k->cpu = cpu;
    k->key = *key;
    k->type = type;
    k->plan = plan;
    k->scratch_rows = scratch_rows;
    k->total_bytes = need;
    cpu->memory_used += need;
    for (int i = 0; i < plan.num_buffers; i++) {
        k->bytes[i] = dsi_kernel_plan_buffer_bytes(&plan.buffers[i], dsi_stype_size(type));
        DSI_TRY_GOTO(buffer_alloc(k->bytes[i], &k->buf[i]), status, err_free);
        fill_buffer(k, i);
    }
    k->scratch_bytes = (size_t)scratch * sizeof(float);
    DSI_TRY_GOTO(buffer_alloc(k->scratch_bytes, (void **)&k->scratch), status, err_free);
    make_saved_state(k);
    k->in = plan.in_index >= 0 ? k->buf[plan.in_index] : NULL;
    *impl_p = k;
    return DS_OK;
err_free:
    cpu_kernel_destroy(k);
    return status;
}

ds_status_t dsi_cpu_kernel_run_impl(void *impl)
{
    cpu_kernel_t *k = impl;
    const ds_event_key_t *key = &k->key;
    const int64_t *d = key->dims;
    int64_t rows = k->plan.rows, cols = k->plan.cols, n = rows * cols;
    dsi_stype_t t = k->type;
    void **b = k->buf;
    const void *in = k->in;
    float *s = k->scratch;
    int bwd = k->plan.backward;
    /* A new dropout mask every forward. */
    uint64_t seed = dsi_kernel_plan_seed(key, -1) + (uint64_t)++k->runs;

    switch ((ds_op_t)key->op) {
    case DS_OP_GEMM:
        dsi_cpu_gemm(t, key->variant, d[0], d[1], d[2], in, b[1], b[2], k->cpu->sbgemm, s,
                     k->scratch_rows);
        break;
    case DS_OP_BATCHED_GEMM: {
        size_t es = dsi_stype_size(t);
        size_t sa = (size_t)(d[0] * d[2]) * es, sb = (size_t)(d[2] * d[1]) * es,
               sc = (size_t)(d[0] * d[1]) * es;
        for (int64_t i = 0; i < d[3]; i++)
            dsi_cpu_gemm(t, key->variant, d[0], d[1], d[2], (const char *)in + (size_t)i * sa,
                         (const char *)b[1] + (size_t)i * sb, (char *)b[2] + (size_t)i * sc,
                         k->cpu->sbgemm, s, k->scratch_rows);
        break;
    }
    case DS_OP_SOFTMAX:
        if (!bwd)
            dsi_cpu_softmax_fwd(t, rows, cols, k->plan.causal, DSI_SOFTMAX_SCALE, in, b[1], s);
        else
            dsi_cpu_softmax_bwd(t, rows, cols, k->plan.causal, DSI_SOFTMAX_SCALE, b[1], in, b[2],
                                s);
        break;
    case DS_OP_LAYERNORM:
        if (!bwd)
            dsi_cpu_layernorm_fwd(t, rows, cols, in, b[1], b[2], b[3], b[4], b[5], s);
        else
            dsi_cpu_layernorm_bwd(t, rows, cols, in, b[1], b[2], b[3], b[4], b[5], b[6], b[7], s);
        break;
    case DS_OP_RMSNORM:
        if (!bwd)
            dsi_cpu_rmsnorm_fwd(t, rows, cols, in, b[1], b[2], b[3], s);
        else
            dsi_cpu_rmsnorm_bwd(t, rows, cols, in, b[1], b[2], b[3], b[4], b[5], s);
        break;
    case DS_OP_GELU:
        if (!bwd)
            dsi_cpu_gelu_fwd(t, n, in, b[1], s);
        else
            dsi_cpu_gelu_bwd(t, n, in, b[1], b[2], s);
        break;
    case DS_OP_RELU:
        if (!bwd)
            dsi_cpu_relu_fwd(t, n, in, b[1], s);
        else
            dsi_cpu_relu_bwd(t, n, in, b[1], b[2], s);
        break;
    case DS_OP_SWIGLU:
    case DS_OP_GEGLU: {
        int gelu = key->op == DS_OP_GEGLU;
        if (!bwd)
            dsi_cpu_glu_fwd(t, gelu, rows, cols, in, b[1], s);
        else
            dsi_cpu_glu_bwd(t, gelu, rows, cols, in, b[1], b[2], s);
        break;
    }
    case DS_OP_DROPOUT:
        if (!bwd)
            dsi_cpu_dropout_fwd(t, n, DSI_DROPOUT_P, seed, in, b[1], b[2], s);
        else
            dsi_cpu_dropout_bwd(t, n, DSI_DROPOUT_P, in, b[1], b[2], s);
        break;
    case DS_OP_DROPOUT_ADD:
        if (!bwd)
            dsi_cpu_dropout_add_fwd(t, rows, cols, DSI_DROPOUT_P, seed, in, b[1], b[2], b[3], b[4],
                                    s);
        else
            dsi_cpu_dropout_add_bwd(t, rows, cols, DSI_DROPOUT_P, in, b[1], b[2], b[3], s);
        break;
    case DS_OP_ADD: dsi_cpu_add(t, n, in, b[1], b[2], s); break;
    case DS_OP_ROPE: dsi_cpu_rope(t, bwd, rows, cols, k->plan.head_dim, b[2], in, b[1], s); break;
    case DS_OP_EMBEDDING:
        if (!bwd)
            dsi_cpu_embedding_fwd(t, rows, cols, b[0], b[1], b[2]);
        else
            dsi_cpu_embedding_bwd(t, rows, cols, b[1], in, b[2], s);
        break;
    case DS_OP_CROSS_ENTROPY:
        if (!bwd)
            dsi_cpu_cross_entropy_fwd(t, rows, cols, in, b[1], b[2], b[3], s);
        else
            dsi_cpu_cross_entropy_bwd(t, rows, cols, b[0], b[1], b[2], b[3], s);
        break;
    case DS_OP_OPTIMIZER: {
        static const dsi_adam_t adam = {1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f};
        dsi_cpu_adam(d[0], k->runs, &adam, b[0], b[1], b[2], b[3], b[4], DSI_STYPE_BF16);
        break;
    }
    case DS_OP_POOL:
        if (!bwd)
            dsi_cpu_pool_fwd(t, rows, cols, in, b[1], b[2], s);
        else
            dsi_cpu_pool_bwd(t, rows, cols, in, b[1], b[2], s);
        break;
    case DS_OP_FLASH_ATTENTION: {
        ds_attention_shape_t shape = ds_attention_shape_of(key);
        if (!bwd)
            dsi_cpu_attention_fwd(t, &shape, k->plan.causal, in, b[1], b[2], b[3], b[4], s);
        else
            dsi_cpu_attention_bwd(t, &shape, k->plan.causal, in, b[1], b[2], b[3], b[4], b[5], b[6],
                                  b[7], b[8], s);
        break;
    }
    case DS_OP_FP8_CAST: dsi_cpu_fp8_cast(t, n, in, b[1], b[2], s); break;
    case DS_OP_MOE_AUX_LOSS:
        if (!bwd)
            dsi_cpu_moe_aux_loss_fwd(t, rows, cols, in, b[1], b[2], b[3], b[4], s);
        else
            dsi_cpu_moe_aux_loss_bwd(t, rows, cols, b[0], b[1], s);
        break;
    case DS_OP_FRAMEWORK_GAP:
    case DS_OP_COUNT_:
        return DSI_ERROR(DS_ERR_INTERNAL, "a kernel of operator %u was prepared",
                         (unsigned)key->op);
    }
    return DS_OK;
}

static size_t cpu_kernel_bytes(const void *impl)
{
    return ((const cpu_kernel_t *)impl)->total_bytes;
}

static ds_status_t cpu_kernel_chain(void *consumer, const void *producer, int *chained_p)
{
    cpu_kernel_t *c = consumer;
    const cpu_kernel_t *p = producer;
    *chained_p = 0;
    if (c->plan.in_index < 0 || p->plan.out_index < 0 || c->type != p->type)
        return DS_OK;
    if (p->bytes[p->plan.out_index] < c->bytes[c->plan.in_index])
        return DS_OK;
    c->in = p->buf[p->plan.out_index];
    *chained_p = 1;
    return DS_OK;
}

/* ---- timestamps ------------------------------------------------------------------------------ */

static ds_status_t cpu_stamps_reserve(ds_backend_t *backend, size_t count)
{
    cpu_backend_t *cpu = backend->impl;
    if (count <= cpu->stamp_capacity)
        return DS_OK;
    DSI_TRY(dsi_realloc_array(&cpu->stamps, count, sizeof(*cpu->stamps)));
    cpu->stamp_capacity = count;
    return DS_OK;
}

static ds_status_t cpu_stamp(ds_backend_t *backend, size_t slot)
{
    cpu_backend_t *cpu = backend->impl;
    cpu->stamps[slot] = dsi_now_s();
    return DS_OK;
}

static ds_status_t cpu_synchronize(ds_backend_t *backend)
{
    return DS_OK; /* kernels run synchronously on the calling thread */
}

static ds_status_t cpu_elapsed(ds_backend_t *backend, size_t from, size_t to, double *seconds_p)
{
    cpu_backend_t *cpu = backend->impl;
    *seconds_p = cpu->stamps[to] - cpu->stamps[from];
    return DS_OK;
}

/* ---- opening and the fingerprint ------------------------------------------------------------- */

static void cpu_close(ds_backend_t *backend)
{
    cpu_backend_t *cpu = backend->impl;
    if (cpu == NULL)
        return;
    if (cpu->mask_saved)
        (void)sched_setaffinity(0, sizeof(cpu->saved_mask), &cpu->saved_mask);
    if (cpu->saved_blas_threads > 0)
        openblas_set_num_threads(cpu->saved_blas_threads);
    fp_restore(cpu->saved_fp_mode);
    dsi_cpu_comm_ops_free(cpu);
    dsi_free(cpu->stamps);
    dsi_free(cpu);
    backend->impl = NULL;
}

static const dsi_backend_ops_t cpu_ops = {
    .kernel_estimate = cpu_kernel_estimate,
    .kernel_prepare = cpu_kernel_prepare,
    .kernel_run = dsi_cpu_kernel_run_impl,
    .kernel_bytes = cpu_kernel_bytes,
    .kernel_chain = cpu_kernel_chain,
    .kernel_destroy = cpu_kernel_destroy,
    .stamps_reserve = cpu_stamps_reserve,
    .stamp = cpu_stamp,
    .synchronize = cpu_synchronize,
    .elapsed = cpu_elapsed,
    .comm_init = dsi_cpu_comm_init,
    .comm_fini = dsi_cpu_comm_fini,
    .comm_prepare = dsi_cpu_comm_prepare,
    .comm_run_timed = dsi_cpu_comm_run_timed,
    .comm_check = dsi_cpu_comm_check,
    .comm_release = dsi_cpu_comm_release,
    .comm_start = dsi_cpu_comm_start,
    .comm_test = dsi_cpu_comm_test,
    .comm_wait = dsi_cpu_comm_wait,
    .close = cpu_close,
};

/* The first line of /proc/cpuinfo starting with `field`, value only. */
static void cpuinfo_field(const char *field, char *value, size_t size)
{
    snprintf(value, size, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (f == NULL)
        return;
    char line[512];
    size_t length = strlen(field);
    while (fgets(line, sizeof(line), f) != NULL) {
        if (strncmp(line, field, length) != 0)
            continue;
        const char *colon = strchr(line, ':');
        if (colon == NULL)
            continue;
        colon++;
        while (*colon == ' ' || *colon == '\t')
            colon++;
        snprintf(value, size, "%s", colon);
        value[strcspn(value, "\n")] = '\0';
        break;
    }
    fclose(f);
}

static void read_first_line(const char *path, char *value, size_t size)
{
    snprintf(value, size, "unknown");
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return;
    if (fgets(value, (int)size, f) == NULL)
        snprintf(value, size, "unknown");
    value[strcspn(value, "\n")] = '\0';
    fclose(f);
}

/* Pins the calling process to one core when it may use at least as many
 * cores as the node has ranks (or already runs on exactly one). */
static void pin_core(ds_backend_t *b, cpu_backend_t *cpu)
{
    cpu_set_t mask;
    CPU_ZERO(&mask);
    cpu->core = -1;
    if (sched_getaffinity(0, sizeof(mask), &mask) != 0)
        return;
    int allowed = CPU_COUNT(&mask);
    int cores[CPU_SETSIZE];
    int num = 0;
    for (int c = 0; c < CPU_SETSIZE && num < allowed; c++)
        if (CPU_ISSET(c, &mask))
            cores[num++] = c;
    if (num == 1) { /* the launcher bound us already */
        cpu->core = cores[0];
        cpu->pinned = 1;
        return;
    }
    if (dsi_param_int(DSI_PARAM_CPU_PIN) == 0 || num < b->local_size || num == 0)
        return;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cores[b->local_rank % num], &one);
    if (sched_setaffinity(0, sizeof(one), &one) != 0)
        return;
    cpu->saved_mask = mask;
    cpu->mask_saved = 1;
    cpu->core = cores[b->local_rank % num];
    cpu->pinned = 1;
}

static size_t memory_limit(const ds_backend_t *b)
{
    double gib = dsi_param_double(DSI_PARAM_DEVICE_MEMORY_GIB);
    if (gib > 0.0)
        return (size_t)(gib * 1073741824.0);
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
    double total = pages > 0 && page > 0 ? (double)pages * (double)page : 4.0 * 1073741824.0;
    /* Three quarters of the node's memory, shared by its ranks. */
    return (size_t)(0.75 * total / (double)DSI_MAX(b->local_size, 1));
}

ds_status_t dsi_cpu_open(ds_backend_t *b)
{
    cpu_backend_t *cpu = NULL;
    DSI_TRY(dsi_calloc(1, sizeof(*cpu), &cpu));
    b->impl = cpu;
    b->ops = &cpu_ops;
    /* cblas_sbgemm exists only in OpenBLAS builds with bf16 support. */
    void *symbol = dlsym(RTLD_DEFAULT, "cblas_sbgemm");
    memcpy(&cpu->sbgemm, &symbol, sizeof(cpu->sbgemm));
    cpu->saved_blas_threads = openblas_get_num_threads();
    openblas_set_num_threads(1);
    cpu->saved_fp_mode = fp_flush_subnormals();
    pin_core(b, cpu);
    cpu->memory_limit = memory_limit(b);
    ds_status_t status = dsi_cpu_comm_ops_create(cpu);
    if (status != DS_OK) {
        cpu_close(b);
        b->ops = NULL;
        return status;
    }

    char model[160], governor[64], mpi[MPI_MAX_LIBRARY_VERSION_STRING];
    cpuinfo_field("model name", model, sizeof(model));
    read_first_line("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor", governor,
                    sizeof(governor));
    int length = 0;
    if (MPI_Get_library_version(mpi, &length) != MPI_SUCCESS)
        snprintf(mpi, sizeof(mpi), "unknown MPI");
    mpi[strcspn(mpi, "\n,")] = '\0';
    snprintf(b->device_name, sizeof(b->device_name), "%.100s", model);
    /* Short enough for the profile database (255 characters): the BLAS
     * version and kernel set, not its whole build configuration. */
    char blas[64];
    snprintf(blas, sizeof(blas), "%s", openblas_get_config());
    char *space = strchr(blas, ' ');
    if (space != NULL && (space = strchr(space + 1, ' ')) != NULL)
        *space = '\0';
    snprintf(b->fingerprint, sizeof(b->fingerprint),
             "cpu: %.80s, 1 core | %s (%s), 1 thread | bf16: %s | fp8 gemm: as bf16 | mpi: %.40s | "
             "governor %.16s",
             model, blas, openblas_get_corename(), cpu->sbgemm != NULL ? "sbgemm" : "fp32 sgemm",
             mpi, governor);
    if (cpu->pinned)
        snprintf(b->placement, sizeof(b->placement), "cpu core %d (pinned), local rank %d of %d",
                 cpu->core, b->local_rank, b->local_size);
    else
        snprintf(b->placement, sizeof(b->placement),
                 "cpu, not pinned (%d local ranks share this process's cores)", b->local_size);
    return DS_OK;
}

/* ---- for tests ------------------------------------------------------------------------------- */

int dsi_cpu_kernel_buffer(const ds_kernel_t *kernel, int index, void **ptr_p, size_t *bytes_p)
{
    const cpu_kernel_t *k = kernel->impl;
    if (kernel->backend->kind != DS_BACKEND_CPU || index < 0 || index >= k->plan.num_buffers)
        return 0;
    *ptr_p = k->buf[index];
    *bytes_p = k->bytes[index];
    return 1;
}

void dsi_cpu_kernel_roles(const ds_kernel_t *kernel, int *in_index_p, int *out_index_p,
                          int *stored_bf16_p)
{
    const cpu_kernel_t *k = kernel->impl;
    *in_index_p = k->plan.in_index;
    *out_index_p = k->plan.out_index;
    *stored_bf16_p = k->type == DSI_STYPE_BF16;
}
