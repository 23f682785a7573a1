/*
 * dsmpi core: status codes, error messages, logging and tunables.
 *
 * Every library call returns a ds_status_t: DS_OK (0) on success, a negative
 * code on failure.  The call that fails also records a one-line message that
 * names the offending value and what would have been accepted; read it with
 * ds_last_error() on the same thread.
 */
#ifndef DSMPI_CORE_H
#define DSMPI_CORE_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Marks the functions libdsmpi exports; everything else stays hidden. */
#if defined(DSMPI_BUILDING_LIBRARY) && defined(__GNUC__)
#define DS_API __attribute__((visibility("default")))
#else
#define DS_API
#endif

/* The one place the version is written: CMakeLists.txt reads these three. */
#define DS_VERSION_MAJOR 0
#define DS_VERSION_MINOR 1
#define DS_VERSION_PATCH 0
#define DS_VERSION_STR_(x) #x
#define DS_VERSION_STR(x) DS_VERSION_STR_(x)
#define DS_VERSION_STRING                                                                          \
    DS_VERSION_STR(DS_VERSION_MAJOR)                                                               \
    "." DS_VERSION_STR(DS_VERSION_MINOR) "." DS_VERSION_STR(DS_VERSION_PATCH)

typedef enum ds_status {
    DS_OK = 0,
    DS_ERR_INVALID_ARG = -1,  /* a value given by the user is not accepted */
    DS_ERR_BAD_FILE = -2,     /* an input file cannot be parsed or is foreign */
    DS_ERR_NOT_FOUND = -3,    /* a named file, preset or entry does not exist */
    DS_ERR_NO_MEMORY = -4,    /* an allocation failed */
    DS_ERR_IO = -5,           /* reading or writing a file failed */
    DS_ERR_MPI = -6,          /* an MPI call failed */
    DS_ERR_HDF5 = -7,         /* an HDF5 call failed */
    DS_ERR_CUDA = -8,         /* a CUDA runtime call failed */
    DS_ERR_CUBLAS = -9,       /* a cuBLAS call failed */
    DS_ERR_NCCL = -10,        /* an NCCL call failed */
    DS_ERR_UNSUPPORTED = -11, /* valid request this build or device cannot do */
    DS_ERR_NO_DEVICE = -12,   /* no device of the requested kind is visible */
    DS_ERR_INTERRUPTED = -13, /* stopped by a signal; what was done is saved */
    DS_ERR_DEADLOCK = -14,    /* a schedule whose events can never all run */
    DS_ERR_OVERFLOW = -15,    /* a count or size does not fit its type */
    DS_ERR_INTERNAL = -16,    /* a bug: an invariant of the library broke */
} ds_status_t;

/* Short constant description of a status code ("invalid argument"). */
DS_API const char *ds_status_string(ds_status_t status);

/* Non-zero for the codes that mean "the user's input is wrong" (the command
 * line tool exits 2 for these, 1 for everything else). */
DS_API int ds_status_is_input_error(ds_status_t status);

/* The message recorded by the last failing library call on this thread, or
 * the status string if none was recorded.  Valid until the next library call
 * on this thread. */
DS_API const char *ds_last_error(void);

/* Records a message for ds_last_error() and returns `status`; for callers
 * that extend the library (apps, tests) and want the same reporting path. */
DS_API ds_status_t ds_set_error(ds_status_t status, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* Clears the recorded message. */
DS_API void ds_clear_error(void);

/* ---- logging ------------------------------------------------------------
 * One logger for the library and the tools.  Lines go to stderr and start
 * with "host:pid r<rank>".  The level comes from DS_LOG_LEVEL (error, warn,
 * info, debug, trace; default warn) unless ds_log_set_level() is called. */

typedef enum ds_log_level {
    DS_LOG_ERROR = 0,
    DS_LOG_WARN = 1,
    DS_LOG_INFO = 2,
    DS_LOG_DEBUG = 3,
    DS_LOG_TRACE = 4,
} ds_log_level_t;

DS_API void ds_log_set_level(ds_log_level_t level);
DS_API ds_log_level_t ds_log_get_level(void);
/* The rank shown in log lines; -1 (the default) shows "r-". */
DS_API void ds_log_set_rank(int rank);
DS_API void ds_log(ds_log_level_t level, const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* ---- tunables -----------------------------------------------------------
 * Every tunable is declared once in the library with its environment
 * variable, default and help.  Values are read from the environment on first
 * use; a malformed value is reported once and the default is kept. */

/* Number of tunables and their descriptions, for `dsmpi --params`. */
DS_API size_t ds_param_count(void);
/* Fills the description of tunable `index`; the strings are static. */
DS_API ds_status_t ds_param_describe(size_t index, const char **env_name_p, const char **default_p,
                                     const char **help_p, const char **current_p);
/* Prints every tunable with its current value. */
DS_API void ds_params_print(FILE *out);

/* ---- parsing -------------------------------------------------------------- */

/* Parses a whole number ("42", "-3"; no suffix) between min and max; `what`
 * names the value in the error message.  Empty text, leading blanks, trailing
 * characters and values outside [min, max] (overflow included) fail with
 * DS_ERR_INVALID_ARG; *value_p is written only on success. */
DS_API ds_status_t ds_parse_int(const char *text, const char *what, int64_t min, int64_t max,
                                int64_t *value_p);
/* Parses a finite decimal number ("0.05", "1e3") between min and max, with
 * the same rules (nan, inf and out-of-range exponents fail). */
DS_API ds_status_t ds_parse_double(const char *text, const char *what, double min, double max,
                                   double *value_p);
/* Parses a whole-number count (tokens, samples, parameters, devices) with an
 * optional K/M/B/T suffix (powers of 1000: "1536", "1.5B", "1T") between min
 * and max; `what` names the value in the error message. */
DS_API ds_status_t ds_parse_count(const char *text, const char *what, int64_t min, int64_t max,
                                  int64_t *value_p);
/* Parses a whole-number size (a sequence length, hidden size or batch size)
 * with an optional K/M/G suffix as powers of 1024 ("8192", "8K" = 8192,
 * "1M" = 1048576, "1.5K" = 1536) between min and max.  Counts of tokens,
 * samples and parameters take ds_parse_count's powers of 1000 instead. */
DS_API ds_status_t ds_parse_size(const char *text, const char *what, int64_t min, int64_t max,
                                 int64_t *value_p);

/* Parses a comma-separated list of whole numbers ("2,4,8"; with
 * ds_parse_count's K/M/B/T suffixes when `count_suffix` is non-zero) into
 * values[capacity], each between min and max; *count_p is their number.  An
 * empty list, an empty item ("2,,8"), a trailing comma and more than
 * `capacity` items fail with one line naming `what`. */
DS_API ds_status_t ds_parse_int_list(const char *text, const char *what, int64_t min, int64_t max,
                                     int count_suffix, int64_t *values, size_t capacity,
                                     size_t *count_p);
/* Parses ranks and inclusive ranges below `limit` ("0-7,64"), in the order
 * given, at most `limit` ranks in all; *ranks_p is allocated and freed with
 * ds_rank_list_free. */
DS_API ds_status_t ds_parse_rank_list(const char *text, int64_t limit, int64_t **ranks_p,
                                      size_t *count_p);
DS_API void ds_rank_list_free(int64_t *ranks);

/* ---- data types --------------------------------------------------------- */

typedef enum ds_dtype {
    DS_DTYPE_FP32 = 0,
    DS_DTYPE_BF16 = 1,
    DS_DTYPE_FP16 = 2,
    DS_DTYPE_FP8 = 3, /* reserved: accepted in keys, not modelled yet */
} ds_dtype_t;

/* "fp32", "bf16", "fp16", "fp8". */
DS_API const char *ds_dtype_name(ds_dtype_t dtype);
/* Bytes per element. */
DS_API size_t ds_dtype_size(ds_dtype_t dtype);
/* Accepts the names above and "float32", "bfloat16", "float16". */
DS_API ds_status_t ds_dtype_parse(const char *text, ds_dtype_t *dtype_p);

#ifdef __cplusplus
}
#endif

#endif /* DSMPI_CORE_H */
