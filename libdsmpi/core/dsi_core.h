/*
 * Private helpers shared by every module of libdsmpi: error recording with
 * file:line, checked allocation, hashing, a growable string buffer, number
 * parsing and the tunables table.  Never installed.
 */
#ifndef DSI_CORE_H
#define DSI_CORE_H

#include <dsmpi/core.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DSI_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define DSI_MIN(a, b) ((a) < (b) ? (a) : (b))
#define DSI_MAX(a, b) ((a) > (b) ? (a) : (b))

/* Records the message for ds_last_error(), logs it at debug level with the
 * place it was first seen, and returns `status`. */
ds_status_t dsi_error_at(const char *file, int line, ds_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
#define DSI_ERROR(status, ...) dsi_error_at(__FILE__, __LINE__, (status), __VA_ARGS__)

/* Propagates a failing status to the caller, logging the place once at trace
 * level so a failure can be followed up the stack with DS_LOG_LEVEL=trace. */
void dsi_trace_fail(const char *file, int line, ds_status_t status);
#define DSI_TRY(call)                                                                              \
    do {                                                                                           \
        ds_status_t dsi_try_status_ = (call);                                                      \
        if (dsi_try_status_ != DS_OK) {                                                            \
            dsi_trace_fail(__FILE__, __LINE__, dsi_try_status_);                                   \
            return dsi_try_status_;                                                                \
        }                                                                                          \
    } while (0)
#define DSI_TRY_GOTO(call, status, label)                                                          \
    do {                                                                                           \
        (status) = (call);                                                                         \
        if ((status) != DS_OK) {                                                                   \
            dsi_trace_fail(__FILE__, __LINE__, (status));                                          \
            goto label;                                                                            \
        }                                                                                          \
    } while (0)

/* ---- allocation ----------------------------------------------------------
 * Checked allocation: sizes are overflow-checked and failures recorded as
 * DS_ERR_NO_MEMORY.  Builds with DSMPI_FAULT_INJECTION make the N-th
 * allocation fail when DS_FAULT_ALLOC_AT=N is set. */
ds_status_t dsi_malloc(size_t size, void *ptr_p);
ds_status_t dsi_calloc(size_t count, size_t size, void *ptr_p);
/* Grows *ptr_p to hold `count` elements of `size`; on failure *ptr_p is kept. */
ds_status_t dsi_realloc_array(void *ptr_p, size_t count, size_t size);
ds_status_t dsi_strdup(const char *text, char **copy_p);
void dsi_free(void *ptr);
/* Tests: the n-th allocation of this process from now fails (n <= 0: none).
 * False, and nothing armed, in builds without DSMPI_FAULT_INJECTION. */
bool dsi_fault_alloc_after(long n);

/* a*b and a+b on int64 with overflow detection (false on overflow). */
bool dsi_mul_i64(int64_t a, int64_t b, int64_t *out);
bool dsi_add_i64(int64_t a, int64_t b, int64_t *out);

/* ---- numbers and time ------------------------------------------------------ */
/* qsort comparator of doubles, ascending. */
int dsi_compare_double(const void *a, const void *b);
/* Median of v[0..n-1], which is sorted in place; 0 when n is 0. */
double dsi_median(double *v, size_t n);
/* Seconds on the monotonic clock. */
double dsi_now_s(void);

/* ---- hashing -------------------------------------------------------------- */
uint64_t dsi_hash64(const void *data, size_t size, uint64_t seed);
/* dsi_hash64 of the words' bytes in memory, faster where most are small. */
uint64_t dsi_hash64_words(const int64_t *words, size_t count, uint64_t seed);
/* Its parts, to hash a common prefix once: dsi_hash64_words is
 * dsi_hash_mix64(dsi_fnv64_words(dsi_fnv64_seed(seed), words, count)), and
 * dsi_fnv64_words continues the state of earlier words. */
uint64_t dsi_fnv64_seed(uint64_t seed);
uint64_t dsi_fnv64_words(uint64_t state, const int64_t *words, size_t count);
static inline uint64_t dsi_hash_mix64(uint64_t x)
{
    /* splitmix64 finaliser: spreads FNV's weak low bits over the word. */
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x;
}
#define DSI_FNV64_PRIME 0x100000001b3ULL

/* ---- string buffer -------------------------------------------------------
 * A growable NUL-terminated buffer.  An allocation failure is sticky: later
 * appends do nothing and dsi_strbuf_status() reports it.  A fixed buffer
 * writes into the caller's storage instead, never allocates and truncates
 * what does not fit (for formatting into a caller's char array). */
typedef struct dsi_strbuf {
    char *data;
    size_t length;
    size_t capacity;
    ds_status_t status;
    bool fixed;
} dsi_strbuf_t;

void dsi_strbuf_init(dsi_strbuf_t *buf);
/* `size` > 0 bytes of `storage`; it holds "" at once. */
void dsi_strbuf_init_fixed(dsi_strbuf_t *buf, char *storage, size_t size);
void dsi_strbuf_appendf(dsi_strbuf_t *buf, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void dsi_strbuf_append(dsi_strbuf_t *buf, const char *text);
void dsi_strbuf_clear(dsi_strbuf_t *buf);
ds_status_t dsi_strbuf_status(const dsi_strbuf_t *buf);
/* The text so far ("" when empty); owned by the buffer. */
const char *dsi_strbuf_text(const dsi_strbuf_t *buf);
void dsi_strbuf_free(dsi_strbuf_t *buf);

/* ---- parsing ---------------------------------------------------------------
 * Whole-string integer parsing with an optional count suffix K/M/B/T (powers
 * of 1000) when `allow_suffix`, range-checked (ds_parse_count; sizes take
 * ds_parse_size's powers of 1024).  `what` names the value in the
 * error ("seq-len"). */
ds_status_t dsi_parse_i64(const char *text, const char *what, int64_t min, int64_t max,
                          bool allow_suffix, int64_t *value_p);
ds_status_t dsi_parse_int(const char *text, const char *what, int min, int max, int *value_p);
/* ds_parse_size (K/M/G = powers of 1024) into an int. */
ds_status_t dsi_parse_size_int(const char *text, const char *what, int min, int max, int *value_p);
/* Byte sizes: plain bytes or KiB/MiB/GiB/TiB (powers of 1024), K/M/G/T (1000). */
ds_status_t dsi_parse_bytes(const char *text, const char *what, int64_t *bytes_p);
/* Case-sensitive match of `text` against `count` names; on a miss the error
 * lists the accepted names.  Returns the index in *index_p. */
ds_status_t dsi_parse_choice(const char *text, const char *what, const char *const *names,
                             size_t count, int *index_p);
/* Reads a whole regular file of at most `max_bytes` into a NUL-terminated
 * buffer the caller frees with dsi_free. */
ds_status_t dsi_read_file(const char *path, size_t max_bytes, char **text_p, size_t *size_p);

/* ---- tunables ------------------------------------------------------------
 * Declared once in params.def; read with the typed getters. */
typedef enum dsi_param_id {
#define DSI_PARAM(id, type, env, def, help) DSI_PARAM_##id,
#include "params.def"
#undef DSI_PARAM
    DSI_PARAM_COUNT_
} dsi_param_id_t;

int64_t dsi_param_int(dsi_param_id_t id);
double dsi_param_double(dsi_param_id_t id);
const char *dsi_param_string(dsi_param_id_t id);

/* ---- logging -------------------------------------------------------------- */
bool dsi_log_enabled(ds_log_level_t level);
int dsi_log_rank(void);
/* Host name of this process (short form); static storage. */
const char *dsi_hostname(void);

#define DSI_WARN(...) ds_log(DS_LOG_WARN, __VA_ARGS__)
#define DSI_INFO(...) ds_log(DS_LOG_INFO, __VA_ARGS__)
#define DSI_DEBUG(...)                                                                             \
    do {                                                                                           \
        if (dsi_log_enabled(DS_LOG_DEBUG))                                                         \
            ds_log(DS_LOG_DEBUG, __VA_ARGS__);                                                     \
    } while (0)

#endif /* DSI_CORE_H */
