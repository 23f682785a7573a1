/* Checked allocation with optional fault injection. */
#include "dsi_core.h"

#include <stdlib.h>
#include <string.h>

#ifdef DSMPI_FAULT_INJECTION
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
static atomic_long allocation_count;
static atomic_long armed_at; /* dsi_fault_alloc_after's target count (0: none) */

static void report_count(void)
{
    fprintf(stderr, "dsmpi: %ld allocations\n", (long)atomic_load(&allocation_count));
}

static bool inject_failure(void)
{
    int64_t fail_at = dsi_param_int(DSI_PARAM_FAULT_ALLOC_AT);
    long count = atomic_fetch_add(&allocation_count, 1) + 1;
    /* Any setting reports the count, so that a run the fault never
       reached (counts vary a little with timing) shows it. */
    if (fail_at != 0 && count == 1)
        atexit(report_count);
    return (fail_at > 0 && count == fail_at) || count == atomic_load(&armed_at);
}

bool dsi_fault_alloc_after(long n)
{
    atomic_store(&armed_at, n > 0 ? atomic_load(&allocation_count) + n : 0);
    return true;
}
#else
static bool inject_failure(void)
{
    return false;
}

bool dsi_fault_alloc_after(long n)
{
    (void)n;
    return false;
}
#endif

static ds_status_t out_of_memory(size_t size)
{
    return DSI_ERROR(DS_ERR_NO_MEMORY, "out of memory allocating %zu bytes", size);
}

ds_status_t dsi_malloc(size_t size, void *ptr_p)
{
    void *ptr = inject_failure() ? NULL : malloc(size == 0 ? 1 : size);
    if (ptr == NULL)
        return out_of_memory(size);
    *(void **)ptr_p = ptr;
    return DS_OK;
}

ds_status_t dsi_calloc(size_t count, size_t size, void *ptr_p)
{
    if (size != 0 && count > SIZE_MAX / size)
        return DSI_ERROR(DS_ERR_OVERFLOW, "allocation of %zu x %zu bytes overflows", count, size);
    void *ptr = inject_failure() ? NULL : calloc(count == 0 ? 1 : count, size == 0 ? 1 : size);
    if (ptr == NULL)
        return out_of_memory(count * size);
    *(void **)ptr_p = ptr;
    return DS_OK;
}

ds_status_t dsi_realloc_array(void *ptr_p, size_t count, size_t size)
{
    if (size != 0 && count > SIZE_MAX / size)
        return DSI_ERROR(DS_ERR_OVERFLOW, "allocation of %zu x %zu bytes overflows", count, size);
    size_t bytes = count * size;
    void *ptr = inject_failure() ? NULL : realloc(*(void **)ptr_p, bytes == 0 ? 1 : bytes);
    if (ptr == NULL)
        return out_of_memory(bytes);
    *(void **)ptr_p = ptr;
    return DS_OK;
}

ds_status_t dsi_strdup(const char *text, char **copy_p)
{
    size_t length = strlen(text);
    char *copy = NULL;
    DSI_TRY(dsi_malloc(length + 1, &copy));
    memcpy(copy, text, length + 1);
    *copy_p = copy;
    return DS_OK;
}

void dsi_free(void *ptr)
{
    free(ptr);
}

bool dsi_mul_i64(int64_t a, int64_t b, int64_t *out)
{
    return !__builtin_mul_overflow(a, b, out);
}

bool dsi_add_i64(int64_t a, int64_t b, int64_t *out)
{
    return !__builtin_add_overflow(a, b, out);
}
