/* Numbers and time, hashing, the string buffer, number parsing and file reading. */
#include "dsi_core.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

/* ---- numbers and time ---------------------------------------------------------- */

int dsi_compare_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double dsi_median(double *v, size_t n)
{
    if (n == 0)
        return 0.0;
    qsort(v, n, sizeof(*v), dsi_compare_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double dsi_now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- hashing ---------------------------------------------------------------- */

uint64_t dsi_hash64(const void *data, size_t size, uint64_t seed)
{
    const unsigned char *bytes = data;
    uint64_t h = 0xcbf29ce484222325ULL ^ seed;
    for (size_t i = 0; i < size; i++) {
        h ^= bytes[i];
        h *= 0x100000001b3ULL;
    }
    return dsi_hash_mix64(h);
}

/* FNV-1a's step on a zero byte is one multiplication by the prime, so a
 * run of k zero bytes is one multiplication by prime^k: the high zero bytes
 * of small numbers cost a multiplication per word instead of one per byte. */
#define FNV_PRIME DSI_FNV64_PRIME
static const uint64_t fnv_prime_pow[9] = {
    1ULL,
    FNV_PRIME,
    FNV_PRIME *FNV_PRIME,
    FNV_PRIME *FNV_PRIME *FNV_PRIME,
    FNV_PRIME *FNV_PRIME *FNV_PRIME *FNV_PRIME,
    FNV_PRIME *FNV_PRIME *FNV_PRIME *FNV_PRIME *FNV_PRIME,
    FNV_PRIME *FNV_PRIME *FNV_PRIME *FNV_PRIME *FNV_PRIME *FNV_PRIME,
    FNV_PRIME *FNV_PRIME *FNV_PRIME *FNV_PRIME *FNV_PRIME *FNV_PRIME *FNV_PRIME,
    FNV_PRIME *FNV_PRIME *FNV_PRIME *FNV_PRIME *FNV_PRIME *FNV_PRIME *FNV_PRIME *FNV_PRIME,
};

uint64_t dsi_fnv64_seed(uint64_t seed)
{
    return 0xcbf29ce484222325ULL ^ seed;
}

uint64_t dsi_fnv64_words(uint64_t h, const int64_t *words, size_t count)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    for (size_t i = 0; i < count; i++) {
        uint64_t w = (uint64_t)words[i];
        int bytes = w == 0 ? 0 : (71 - __builtin_clzll(w)) / 8; /* up to the highest nonzero */
        for (int b = 0; b < bytes; b++, w >>= 8) {
            h ^= w & 0xff;
            h *= FNV_PRIME;
        }
        h *= fnv_prime_pow[8 - bytes];
    }
#else
    const unsigned char *bytes = (const unsigned char *)words;
    for (size_t i = 0; i < count * sizeof(*words); i++) {
        h ^= bytes[i];
        h *= FNV_PRIME;
    }
#endif
    return h;
}

uint64_t dsi_hash64_words(const int64_t *words, size_t count, uint64_t seed)
{
    return dsi_hash_mix64(dsi_fnv64_words(dsi_fnv64_seed(seed), words, count));
}

/* ---- string buffer ------------------------------------------------------------ */

void dsi_strbuf_init(dsi_strbuf_t *buf)
{
    buf->data = NULL;
    buf->length = 0;
    buf->capacity = 0;
    buf->status = DS_OK;
    buf->fixed = false;
}

void dsi_strbuf_init_fixed(dsi_strbuf_t *buf, char *storage, size_t size)
{
    buf->data = storage;
    buf->length = 0;
    buf->capacity = size;
    buf->status = DS_OK;
    buf->fixed = true;
    storage[0] = '\0';
}

/* Room for `extra` more characters; a fixed buffer has room for what fits. */
static bool reserve(dsi_strbuf_t *buf, size_t extra)
{
    if (buf->status != DS_OK)
        return false;
    if (buf->length + extra + 1 <= buf->capacity)
        return true;
    if (buf->fixed)
        return buf->length + 1 < buf->capacity;
    size_t capacity = buf->capacity ? buf->capacity : 256;
    while (capacity < buf->length + extra + 1)
        capacity *= 2;
    char *data = buf->data;
    ds_status_t status = dsi_realloc_array(&data, capacity, 1);
    if (status != DS_OK) {
        buf->status = status;
        return false;
    }
    buf->data = data;
    buf->capacity = capacity;
    return true;
}

void dsi_strbuf_appendf(dsi_strbuf_t *buf, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int needed = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (needed < 0 || !reserve(buf, (size_t)needed))
        return;
    size_t room = buf->capacity - buf->length - 1; /* a fixed buffer may hold less */
    size_t n = DSI_MIN((size_t)needed, room);
    va_start(ap, fmt);
    vsnprintf(buf->data + buf->length, n + 1, fmt, ap);
    va_end(ap);
    buf->length += n;
}

void dsi_strbuf_append(dsi_strbuf_t *buf, const char *text)
{
    size_t n = strlen(text);
    if (!reserve(buf, n))
        return;
    n = DSI_MIN(n, buf->capacity - buf->length - 1);
    memcpy(buf->data + buf->length, text, n);
    buf->length += n;
    buf->data[buf->length] = '\0';
}

void dsi_strbuf_clear(dsi_strbuf_t *buf)
{
    buf->length = 0;
    if (buf->data != NULL)
        buf->data[0] = '\0';
}

ds_status_t dsi_strbuf_status(const dsi_strbuf_t *buf)
{
    return buf->status;
}

const char *dsi_strbuf_text(const dsi_strbuf_t *buf)
{
    return buf->data != NULL ? buf->data : "";
}

void dsi_strbuf_free(dsi_strbuf_t *buf)
{
    if (!buf->fixed)
        dsi_free(buf->data);
    dsi_strbuf_init(buf);
}

/* ---- parsing ----------------------------------------------------------------- */

static ds_status_t not_a_number(const char *text, const char *what, const char *accepted)
{
    return DSI_ERROR(DS_ERR_INVALID_ARG, "%s '%s' is not %s", what, text, accepted);
}

/* Suffixes of whole numbers: counts (tokens, samples, parameters, devices)
 * scale by powers of 1000, sizes (sequence lengths, hidden sizes, batches) by
 * powers of 1024.  Upper or lower case. */
typedef struct number_suffix {
    char letter; /* 0 ends a table */
    double scale;
} number_suffix_t;

static const number_suffix_t count_suffixes[] = {
    {'K', 1e3}, {'M', 1e6}, {'B', 1e9}, {'T', 1e12}, {0, 0.0}};
static const number_suffix_t size_suffixes[] = {
    {'K', 1024.0}, {'M', 1048576.0}, {'G', 1073741824.0}, {0, 0.0}};
static const number_suffix_t no_suffixes[] = {{0, 0.0}};

static const number_suffix_t *find_suffix(const number_suffix_t *suffixes, char letter)
{
    for (; suffixes->letter != 0; suffixes++)
        if (suffixes->letter == toupper((unsigned char)letter))
            return suffixes;
    return NULL;
}

static ds_status_t parse_scaled(const char *text, const char *what, int64_t min, int64_t max,
                                const number_suffix_t *suffixes, const char *accepted,
                                int64_t *value_p)
{
    if (text == NULL || *text == '\0' || isspace((unsigned char)*text))
        return not_a_number(text ? text : "", what, accepted);
    char *end = NULL;
    errno = 0;
    long long value = strtoll(text, &end, 10);
    bool overflow = errno == ERANGE;
    if (suffixes->letter != 0 && end != text &&
        (*end == '.' || (*end != '\0' && find_suffix(suffixes, *end) != NULL))) {
        /* 1.5B style: a decimal mantissa times the suffix's scale. */
        errno = 0;
        double mantissa = strtod(text, &end);
        const number_suffix_t *suffix = *end != '\0' ? find_suffix(suffixes, *end) : NULL;
        double scale = 1.0;
        if (suffix != NULL) {
            scale = suffix->scale;
            end++;
        }
        double scaled = mantissa * scale;
        if (*end != '\0' || errno != 0 || scaled != floor(scaled))
            return not_a_number(text, what, accepted);
        /* 2^63 itself: (double)INT64_MAX rounds up to it. */
        if (scaled < (double)min || scaled > (double)max || !(fabs(scaled) < 0x1p63))
            return DSI_ERROR(DS_ERR_INVALID_ARG, "%s %s is out of range (accepted: %lld to %lld)",
                             what, text, (long long)min, (long long)max);
        *value_p = (int64_t)scaled;
        return DS_OK;
    }
    if (end == text || *end != '\0')
        return not_a_number(text, what, accepted);
    if (overflow || value < min || value > max)
        return DSI_ERROR(DS_ERR_INVALID_ARG, "%s %s is out of range (accepted: %lld to %lld)", what,
                         text, (long long)min, (long long)max);
    *value_p = value;
    return DS_OK;
}

ds_status_t dsi_parse_i64(const char *text, const char *what, int64_t min, int64_t max,
                          bool allow_suffix, int64_t *value_p)
{
    return parse_scaled(text, what, min, max, allow_suffix ? count_suffixes : no_suffixes,
                        allow_suffix ? "a whole number (K/M/B/T allowed)" : "a whole number",
                        value_p);
}

ds_status_t ds_parse_count(const char *text, const char *what, int64_t min, int64_t max,
                           int64_t *value_p)
{
    return dsi_parse_i64(text, what, min, max, true, value_p);
}

ds_status_t ds_parse_size(const char *text, const char *what, int64_t min, int64_t max,
                          int64_t *value_p)
{
    return parse_scaled(text, what, min, max, size_suffixes,
                        "a whole number (K/M/G allowed, powers of 1024: 8K = 8192)", value_p);
}

ds_status_t dsi_parse_size_int(const char *text, const char *what, int min, int max, int *value_p)
{
    int64_t value;
    DSI_TRY(ds_parse_size(text, what, min, max, &value));
    *value_p = (int)value;
    return DS_OK;
}

ds_status_t dsi_parse_int(const char *text, const char *what, int min, int max, int *value_p)
{
    int64_t value;
    DSI_TRY(dsi_parse_i64(text, what, min, max, false, &value));
    *value_p = (int)value;
    return DS_OK;
}

ds_status_t ds_parse_int(const char *text, const char *what, int64_t min, int64_t max,
                         int64_t *value_p)
{
    return dsi_parse_i64(text, what, min, max, false, value_p);
}

ds_status_t ds_parse_double(const char *text, const char *what, double min, double max,
                            double *value_p)
{
    if (text == NULL || *text == '\0' || isspace((unsigned char)*text))
        return not_a_number(text ? text : "", what, "a number");
    char *end = NULL;
    errno = 0;
    double value = strtod(text, &end);
    if (end == text || *end != '\0' || errno != 0 || !isfinite(value))
        return not_a_number(text, what, "a number");
    if (value < min || value > max)
        return DSI_ERROR(DS_ERR_INVALID_ARG, "%s %s is out of range (accepted: %g to %g)", what,
                         text, min, max);
    *value_p = value;
    return DS_OK;
}

ds_status_t dsi_parse_bytes(const char *text, const char *what, int64_t *bytes_p)
{
    static const struct {
        const char *suffix;
        double scale;
    } units[] = {{"KiB", 1024.0},
                 {"MiB", 1048576.0},
                 {"GiB", 1073741824.0},
                 {"TiB", 1099511627776.0},
                 {"K", 1e3},
                 {"M", 1e6},
                 {"G", 1e9},
                 {"T", 1e12},
                 {"B", 1.0},
                 {"", 1.0}};
    const char *accepted = "a size in bytes (suffix B, K/M/G/T or KiB/MiB/GiB/TiB)";
    if (text == NULL || *text == '\0' || isspace((unsigned char)*text))
        return not_a_number(text ? text : "", what, accepted);
    char *end = NULL;
    errno = 0;
    double value = strtod(text, &end);
    if (end == text || errno != 0 || !isfinite(value) || value < 0)
        return not_a_number(text, what, accepted);
    for (size_t i = 0; i < DSI_ARRAY_SIZE(units); i++) {
        if (strcmp(end, units[i].suffix) == 0) {
            double bytes = value * units[i].scale;
            if (bytes > 9.0e18 || bytes != floor(bytes))
                return not_a_number(text, what, accepted);
            *bytes_p = (int64_t)bytes;
            return DS_OK;
        }
    }
    return not_a_number(text, what, accepted);
}

ds_status_t dsi_parse_choice(const char *text, const char *what, const char *const *names,
                             size_t count, int *index_p)
{
    for (size_t i = 0; i < count; i++) {
        if (strcmp(text, names[i]) == 0) {
            *index_p = (int)i;
            return DS_OK;
        }
    }
    char accepted[512] = "";
    size_t used = 0;
    for (size_t i = 0; i < count && used < sizeof(accepted) - 1; i++)
        used += (size_t)snprintf(accepted + used, sizeof(accepted) - used, "%s%s", i ? ", " : "",
                                 names[i]);
    return DSI_ERROR(DS_ERR_INVALID_ARG, "%s '%s' is not known (accepted: %s)", what, text,
                     accepted);
}

ds_status_t dsi_read_file(const char *path, size_t max_bytes, char **text_p, size_t *size_p)
{
    ds_status_t status = DS_OK;
    char *text = NULL;
    FILE *file = fopen(path, "rb");
    if (file == NULL)
        return DSI_ERROR(errno == ENOENT ? DS_ERR_NOT_FOUND : DS_ERR_IO, "cannot open '%s': %s",
                         path, strerror(errno));
    struct stat info;
    if (fstat(fileno(file), &info) != 0 || !S_ISREG(info.st_mode)) {
        status = DSI_ERROR(DS_ERR_BAD_FILE, "'%s' is not a regular file", path);
        goto out;
    }
    if ((uint64_t)info.st_size > max_bytes) {
        status = DSI_ERROR(DS_ERR_BAD_FILE, "'%s' is %lld bytes (accepted: at most %zu)", path,
                           (long long)info.st_size, max_bytes);
        goto out;
    }
    size_t size = (size_t)info.st_size;
    DSI_TRY_GOTO(dsi_malloc(size + 1, &text), status, out);
    if (fread(text, 1, size, file) != size) {
        status = DSI_ERROR(DS_ERR_IO, "cannot read '%s'", path);
        goto out;
    }
    text[size] = '\0';
    *text_p = text;
    if (size_p != NULL)
        *size_p = size;
    text = NULL;
out:
    dsi_free(text);
    fclose(file);
    return status;
}

/* ---- data types -------------------------------------------------------------- */

const char *ds_dtype_name(ds_dtype_t dtype)
{
    switch (dtype) {
    case DS_DTYPE_FP32: return "fp32";
    case DS_DTYPE_BF16: return "bf16";
    case DS_DTYPE_FP16: return "fp16";
    case DS_DTYPE_FP8: return "fp8";
    }
    return "?";
}

size_t ds_dtype_size(ds_dtype_t dtype)
{
    switch (dtype) {
    case DS_DTYPE_FP32: return 4;
    case DS_DTYPE_BF16: return 2;
    case DS_DTYPE_FP16: return 2;
    case DS_DTYPE_FP8: return 1;
    }
    return 0;
}

ds_status_t ds_dtype_parse(const char *text, ds_dtype_t *dtype_p)
{
    static const char *const names[] = {"fp32",    "bf16",     "fp16",   "fp8",
                                        "float32", "bfloat16", "float16"};
    static const ds_dtype_t values[] = {DS_DTYPE_FP32, DS_DTYPE_BF16, DS_DTYPE_FP16, DS_DTYPE_FP8,
                                        DS_DTYPE_FP32, DS_DTYPE_BF16, DS_DTYPE_FP16};
    int index = 0;
    DSI_TRY(dsi_parse_choice(text, "dtype", names, DSI_ARRAY_SIZE(names), &index));
    *dtype_p = values[index];
    return DS_OK;
}
