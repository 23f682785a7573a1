/* Status codes and the per-thread "last error" message. */
#include "dsi_core.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static _Thread_local char last_error[1024];

const char *ds_status_string(ds_status_t status)
{
    switch (status) {
    case DS_OK: return "success";
    case DS_ERR_INVALID_ARG: return "invalid argument";
    case DS_ERR_BAD_FILE: return "unreadable or foreign file";
    case DS_ERR_NOT_FOUND: return "not found";
    case DS_ERR_NO_MEMORY: return "out of memory";
    case DS_ERR_IO: return "input/output error";
    case DS_ERR_MPI: return "MPI error";
    case DS_ERR_HDF5: return "HDF5 error";
    case DS_ERR_CUDA: return "CUDA error";
    case DS_ERR_CUBLAS: return "cuBLAS error";
    case DS_ERR_NCCL: return "NCCL error";
    case DS_ERR_UNSUPPORTED: return "not supported";
    case DS_ERR_NO_DEVICE: return "no device";
    case DS_ERR_INTERRUPTED: return "interrupted";
    case DS_ERR_DEADLOCK: return "deadlock in schedule";
    case DS_ERR_OVERFLOW: return "value too large";
    case DS_ERR_INTERNAL: return "internal error";
    }
    return "unknown status";
}

int ds_status_is_input_error(ds_status_t status)
{
    return status == DS_ERR_INVALID_ARG || status == DS_ERR_BAD_FILE ||
           status == DS_ERR_NOT_FOUND || status == DS_ERR_OVERFLOW;
}

static void set_message(const char *fmt, va_list ap)
{
    /* Formatted aside first: the arguments may be ds_last_error() itself
     * ("FILE:LINE: <the message below>"). */
    char text[sizeof(last_error)];
    vsnprintf(text, sizeof(text), fmt, ap);
    memcpy(last_error, text, sizeof(text));
    /* Messages are one line: fold any newline a foreign library gave us. */
    for (char *c = last_error; *c != '\0'; c++)
        if (*c == '\n' || *c == '\r')
            *c = ' ';
}

ds_status_t ds_set_error(ds_status_t status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    set_message(fmt, ap);
    va_end(ap);
    return status;
}

ds_status_t dsi_error_at(const char *file, int line, ds_status_t status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    set_message(fmt, ap);
    va_end(ap);
    DSI_DEBUG("%s:%d: %s: %s", file, line, ds_status_string(status), last_error);
    return status;
}

void dsi_trace_fail(const char *file, int line, ds_status_t status)
{
    if (dsi_log_enabled(DS_LOG_TRACE))
        ds_log(DS_LOG_TRACE, "%s:%d: propagating %s", file, line, ds_status_string(status));
}

void ds_clear_error(void)
{
    last_error[0] = '\0';
}

const char *ds_last_error(void)
{
    return last_error[0] != '\0' ? last_error : "no error recorded";
}
