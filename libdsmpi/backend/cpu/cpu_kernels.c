/*
 * The CPU backend's kernels.  Each computes in fp32 on a row or a chunk
 * loaded from the stored type, and writes back in the stored type, which is
 * what a GPU kernel does in registers.  Pure functions of their arguments:
 * no allocation, no global state.
 */
#include "dsi_cpu.h"

#include "dsi_rng.h"

#include <dsmpi/events.h>

#include <cblas.h>
#include <math.h>
#include <string.h>

/* Every kernel is compiled for three instruction sets and the best one the
 * processor has is picked when the library loads (x86-64 with GCC >= 11:
 * AVX-512, AVX2 + FMA, baseline SSE2), so one binary runs anywhere and uses
 * what the core offers.  The arithmetic is the same in every version: ISO C
 * mode contracts no multiply-add; only the order of vectorised sums varies. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11
#define KERNEL __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define KERNEL
#endif

size_t dsi_stype_size(dsi_stype_t type)
{
    return type == DSI_STYPE_BF16 ? 2 : 4;
}

/* ---- number formats -------------------------------------------------------------------------- */

static inline uint32_t bits_of(float value)
{
    uint32_t bits;
    memcpy(&bits, &value, sizeof(bits));
    return bits;
}

static inline float float_of(uint32_t bits)
{
    float value;
    memcpy(&value, &bits, sizeof(value));
    return value;
}

static inline uint16_t bf16_round(uint32_t bits)
{
    if ((bits & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((bits >> 16) | 0x40u); /* quiet NaN */
    bits += 0x7fffu + ((bits >> 16) & 1u);
    return (uint16_t)(bits >> 16);
}

uint16_t dsi_bf16_from_f32(float value)
{
    return bf16_round(bits_of(value));
}

float dsi_bf16_to_f32(uint16_t value)
{
    return float_of((uint32_t)value << 16);
}

uint16_t dsi_fp16_from_f32(float value)
{
    uint32_t bits = bits_of(value);
    uint16_t sign = (uint16_t)((bits >> 16) & 0x8000u);
    uint32_t magnitude = bits & 0x7fffffffu;
    if (magnitude >= 0x7f800000u) /* infinity or NaN */
        return (uint16_t)(sign | (magnitude > 0x7f800000u ? 0x7e00u : 0x7c00u));
    if (magnitude >= 0x477ff000u) /* rounds to 65536 or more */
        return (uint16_t)(sign | 0x7c00u);
    if (magnitude < 0x38800000u) {                        /* below 2^-14: subnormal or zero */
        float scaled = float_of(magnitude) * 16777216.0f; /* exact: a power of two */
        return (uint16_t)(sign | (uint16_t)lrintf(scaled));
    }
    uint32_t mantissa = magnitude & 0x7fffffu;
    uint32_t half = ((magnitude >> 23) - 112u) << 10 | (mantissa >> 13);
    uint32_t rest = mantissa & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (half & 1u)))
        half++;
    return (uint16_t)(sign | half);
}

float dsi_fp16_to_f32(uint16_t value)
{
    uint32_t sign = (uint32_t)(value & 0x8000u) << 16;
    uint32_t exponent = (value >> 10) & 0x1fu, mantissa = value & 0x3ffu;
    if (exponent == 0) {
        float magnitude = (float)mantissa * (1.0f / 16777216.0f);
        return sign ? -magnitude : magnitude;
    }
    if (exponent == 31)
        return float_of(sign | 0x7f800000u | (mantissa << 13));
    return float_of(sign | (exponent + 112u) << 23 | (mantissa << 13));
}

KERNEL void dsi_cpu_load(const void *base, dsi_stype_t type, int64_t offset, int64_t n, float *out)
{
    if (type == DSI_STYPE_F32) {
        memcpy(out, (const float *)base + offset, (size_t)n * sizeof(float));
        return;
    }
    const uint16_t *in = (const uint16_t *)base + offset;
    for (int64_t i = 0; i < n; i++)
        out[i] = float_of((uint32_t)in[i] << 16);
}

KERNEL void dsi_cpu_store(void *base, dsi_stype_t type, int64_t offset, int64_t n, const float *in)
{
    if (type == DSI_STYPE_F32) {
        memcpy((float *)base + offset, in, (size_t)n * sizeof(float));
        return;
    }
    uint16_t *out = (uint16_t *)base + offset;
    for (int64_t i = 0; i < n; i++)
        out[i] = bf16_round(bits_of(in[i]));
}

/* A row to read: the stored row itself for fp32, else converted into scratch. */
static inline const float *row_in(const void *base, dsi_stype_t type, int64_t offset, int64_t n,
                                  float *scratch)
{
    if (type == DSI_STYPE_F32)
        return (const float *)base + offset;
    dsi_cpu_load(base, type, offset, n, scratch);
    return scratch;
}

/* A row to write: the stored row for fp32, else scratch committed by row_commit. */
static inline float *row_out(void *base, dsi_stype_t type, int64_t offset, float *scratch)
{
    return type == DSI_STYPE_F32 ? (float *)base + offset : scratch;
}

static inline void row_commit(void *base, dsi_stype_t type, int64_t offset, int64_t n,
                              const float *row)
{
    if (type != DSI_STYPE_F32)
        dsi_cpu_store(base, type, offset, n, row);
}

/* ---- fast, vectorisable exponential -------------------------------------------------------------
 * libm's expf and tanhf are calls the compiler cannot vectorise (tens of ns
 * per element for GeLU); this is Cephes' expf: Cody-Waite reduction by ln 2
 * and a degree-6 polynomial, within 2 ulp on [-87, 88], in plain arithmetic
 * the compiler vectorises.  Arguments are clamped to that range (exp(-87)
 * stands for anything smaller, exp(88) for anything larger). */
static inline float fast_exp(float x)
{
    x = x < -87.0f ? -87.0f : x > 88.0f ? 88.0f : x;
    /* k = round(x / ln 2) by the 1.5 * 2^23 trick (no libm call). */
    float k = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    float r = x - k * 0.693359375f;
    r = r - k * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    int32_t e = (int32_t)k + 127;
    return p * float_of((uint32_t)e << 23);
}

/* tanh(x) = sign(x) (1 - 2 / (exp(2|x|) + 1)): absolute error ~1e-7. */
static inline float fast_tanh(float x)
{
    float a = x < 0.0f ? -x : x;
    float t = 1.0f - 2.0f / (fast_exp(2.0f * a) + 1.0f);
    return x < 0.0f ? -t : t;
}

/* ---- values like training's ------------------------------------------------------------------ */

uint64_t dsi_rng_u64(uint64_t seed, uint64_t index)
{
    return dsi_rng_bits(seed, index);
}

float dsi_rng_normal(uint64_t seed, uint64_t index)
{
    return dsi_rng_normal_of(dsi_rng_bits(seed, index));
}

KERNEL void dsi_cpu_fill_normal(void *base, dsi_stype_t type, int64_t n, float stddev, float offset,
                                int positive, uint64_t seed)
{
    float chunk[DSI_CPU_CHUNK];
    for (int64_t start = 0; start < n; start += DSI_CPU_CHUNK) {
        int64_t len = n - start < DSI_CPU_CHUNK ? n - start : DSI_CPU_CHUNK;
        float *out = type == DSI_STYPE_F32 ? (float *)base + start : chunk;
        for (int64_t i = 0; i < len; i++) {
            float v = stddev * dsi_rng_normal_of(dsi_rng_bits(seed, (uint64_t)(start + i)));
            out[i] = offset + (positive ? fabsf(v) : v);
        }
        if (type != DSI_STYPE_F32)
            dsi_cpu_store(base, type, start, len, chunk);
    }
}

void dsi_cpu_fill_index(int32_t *base, int64_t n, int64_t limit, uint64_t seed)
{
    for (int64_t i = 0; i < n; i++)
        base[i] = (int32_t)(dsi_rng_u64(seed, (uint64_t)i) % (uint64_t)limit);
}

/* ---- GEMM ------------------------------------------------------------------------------------ */

void dsi_cpu_gemm(dsi_stype_t type, unsigned trans, int64_t m, int64_t n, int64_t k, const void *a,
                  const void *b, void *c, dsi_sbgemm_fn sbgemm, float *scratch,
                  int64_t scratch_rows)
{
    int trans_a = (trans & DS_GEMM_TRANS_A) != 0, trans_b = (trans & DS_GEMM_TRANS_B) != 0;
    int lda = (int)(trans_a ? m : k), ldb = (int)(trans_b ? k : n);
    if (type == DSI_STYPE_F32) {
        cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
                    trans_b ? CblasTrans : CblasNoTrans, (int)m, (int)n, (int)k, 1.0f,
                    (const float *)a, lda, (const float *)b, ldb, 0.0f, (float *)c, (int)n);
        return;
    }
    /* bf16: the product of a block of rows in fp32, then rounded. */
    const uint16_t *a16 = (const uint16_t *)a;
    for (int64_t row = 0; row < m; row += scratch_rows) {
        int64_t rows = m - row < scratch_rows ? m - row : scratch_rows;
        const uint16_t *block = trans_a ? a16 + row : a16 + row * k;
        sbgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
               trans_b ? CblasTrans : CblasNoTrans, (int)rows, (int)n, (int)k, 1.0f, block, lda,
               (const uint16_t *)b, ldb, 0.0f, scratch, (int)n);
        dsi_cpu_store(c, type, row * n, rows * n, scratch);
    }
}

/* ---- softmax --------------------------------------------------------------------------------- */

KERNEL void dsi_cpu_softmax_fwd(dsi_stype_t type, int64_t rows, int64_t cols, int causal,
                                float scale, const void *x, void *y, float *scratch)
{
    for (int64_t r = 0; r < rows; r++) {
        int64_t valid = causal ? r % cols + 1 : cols;
        const float *in = row_in(x, type, r * cols, cols, scratch);
        float *out = row_out(y, type, r * cols, scratch + cols);
        float max = -INFINITY;
#pragma omp simd reduction(max : max)
        for (int64_t j = 0; j < valid; j++)
            max = max > scale * in[j] ? max : scale * in[j];
        float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (int64_t j = 0; j < valid; j++) {
            out[j] = fast_exp(scale * in[j] - max);
            sum += out[j];
        }
        float inv = 1.0f / sum;
        for (int64_t j = 0; j < valid; j++)
            out[j] *= inv;
        for (int64_t j = valid; j < cols; j++)
            out[j] = 0.0f;
        row_commit(y, type, r * cols, cols, out);
    }
}

KERNEL void dsi_cpu_softmax_bwd(dsi_stype_t type, int64_t rows, int64_t cols, int causal,
                                float scale, const void *y, const void *dy, void *dx,
                                float *scratch)
{
    float *y_row = scratch, *dy_row = scratch + cols;
    for (int64_t r = 0; r < rows; r++) {
        int64_t valid = causal ? r % cols + 1 : cols;
        const float *yr = row_in(y, type, r * cols, cols, y_row);
        const float *dyr = row_in(dy, type, r * cols, cols, dy_row);
        float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
        for (int64_t j = 0; j < valid; j++)
            dot += yr[j] * dyr[j];
        /* dx may be written over dy's converted row: read dyr[j] before out[j]. */
        float *out = row_out(dx, type, r * cols, dy_row);
        for (int64_t j = 0; j < valid; j++)
            out[j] = scale * yr[j] * (dyr[j] - dot);
        for (int64_t j = valid; j < cols; j++)
            out[j] = 0.0f;
        row_commit(dx, type, r * cols, cols, out);
    }
}

/* ---- normalisation --------------------------------------------------------------------------- */

KERNEL void dsi_cpu_layernorm_fwd(dsi_stype_t type, int64_t rows, int64_t cols, const void *x,
                                  const void *gamma, const void *beta, void *y, float *mean,
                                  float *rstd, float *scratch)
{
    float *x_row = scratch, *g = scratch + cols, *b = scratch + 2 * cols,
          *y_row = scratch + 3 * cols;
    dsi_cpu_load(gamma, type, 0, cols, g);
    dsi_cpu_load(beta, type, 0, cols, b);
    for (int64_t r = 0; r < rows; r++) {
        const float *in = row_in(x, type, r * cols, cols, x_row);
        float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (int64_t j = 0; j < cols; j++)
            sum += in[j];
        float mu = sum / (float)cols, var = 0.0f;
#pragma omp simd reduction(+ : var)
        for (int64_t j = 0; j < cols; j++)
            var += (in[j] - mu) * (in[j] - mu);
        float rs = 1.0f / sqrtf(var / (float)cols + DSI_NORM_EPS);
        float *out = row_out(y, type, r * cols, y_row);
        for (int64_t j = 0; j < cols; j++)
            out[j] = (in[j] - mu) * rs * g[j] + b[j];
        row_commit(y, type, r * cols, cols, out);
        mean[r] = mu;
        rstd[r] = rs;
    }
}

KERNEL void dsi_cpu_layernorm_bwd(dsi_stype_t type, int64_t rows, int64_t cols, const void *dy,
                                  const void *x, const void *gamma, const float *mean,
                                  const float *rstd, void *dx, float *dgamma, float *dbeta,
                                  float *scratch)
{
    float *x_row = scratch, *dy_row = scratch + cols, *g = scratch + 2 * cols,
          *dx_row = scratch + 3 * cols;
    dsi_cpu_load(gamma, type, 0, cols, g);
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = row_in(x, type, r * cols, cols, x_row);
        const float *dyr = row_in(dy, type, r * cols, cols, dy_row);
        float mu = mean[r], rs = rstd[r], a = 0.0f, b = 0.0f;
#pragma omp simd reduction(+ : a, b)
        for (int64_t j = 0; j < cols; j++) {
            float xhat = (xr[j] - mu) * rs, gdy = g[j] * dyr[j];
            a += gdy;
            b += gdy * xhat;
            dgamma[j] += dyr[j] * xhat;
            dbeta[j] += dyr[j];
        }
        a /= (float)cols;
        b /= (float)cols;
        float *out = row_out(dx, type, r * cols, dx_row);
        for (int64_t j = 0; j < cols; j++) {
            float xhat = (xr[j] - mu) * rs;
            out[j] = rs * (g[j] * dyr[j] - a - xhat * b);
        }
        row_commit(dx, type, r * cols, cols, out);
    }
}

KERNEL void dsi_cpu_rmsnorm_fwd(dsi_stype_t type, int64_t rows, int64_t cols, const void *x,
                                const void *gamma, void *y, float *rstd, float *scratch)
{
    float *x_row = scratch, *g = scratch + cols, *y_row = scratch + 2 * cols;
    dsi_cpu_load(gamma, type, 0, cols, g);
    for (int64_t r = 0; r < rows; r++) {
        const float *in = row_in(x, type, r * cols, cols, x_row);
        float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (int64_t j = 0; j < cols; j++)
            sum += in[j] * in[j];
        float rs = 1.0f / sqrtf(sum / (float)cols + DSI_NORM_EPS);
        float *out = row_out(y, type, r * cols, y_row);
        for (int64_t j = 0; j < cols; j++)
            out[j] = in[j] * rs * g[j];
        row_commit(y, type, r * cols, cols, out);
        rstd[r] = rs;
    }
}

KERNEL void dsi_cpu_rmsnorm_bwd(dsi_stype_t type, int64_t rows, int64_t cols, const void *dy,
                                const void *x, const void *gamma, const float *rstd, void *dx,
                                float *dgamma, float *scratch)
{
    float *x_row = scratch, *dy_row = scratch + cols, *g = scratch + 2 * cols,
          *dx_row = scratch + 3 * cols;
    dsi_cpu_load(gamma, type, 0, cols, g);
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = row_in(x, type, r * cols, cols, x_row);
        const float *dyr = row_in(dy, type, r * cols, cols, dy_row);
        float rs = rstd[r], b = 0.0f;
#pragma omp simd reduction(+ : b)
        for (int64_t j = 0; j < cols; j++) {
            float xhat = xr[j] * rs;
            b += g[j] * dyr[j] * xhat;
            dgamma[j] += dyr[j] * xhat;
        }
        b /= (float)cols;
        float *out = row_out(dx, type, r * cols, dx_row);
        for (int64_t j = 0; j < cols; j++)
            out[j] = rs * (g[j] * dyr[j] - xr[j] * rs * b);
        row_commit(dx, type, r * cols, cols, out);
    }
}

/* ---- activations ----------------------------------------------------------------------------- */

#define GELU_K0 0.7978845608f /* sqrt(2 / pi) */
#define GELU_K1 0.044715f

static inline float gelu_of(float x)
{
    return 0.5f * x * (1.0f + fast_tanh(GELU_K0 * (x + GELU_K1 * x * x * x)));
}

static inline float gelu_grad_of(float x)
{
    float t = fast_tanh(GELU_K0 * (x + GELU_K1 * x * x * x));
    return 0.5f * (1.0f + t) +
           0.5f * x * (1.0f - t * t) * GELU_K0 * (1.0f + 3.0f * GELU_K1 * x * x);
}

static inline float silu_of(float x)
{
    return x / (1.0f + fast_exp(-x));
}

static inline float silu_grad_of(float x)
{
    float s = 1.0f / (1.0f + fast_exp(-x));
    return s * (1.0f + x * (1.0f - s));
}

float dsi_gelu(float x)
{
    return gelu_of(x);
}

float dsi_gelu_grad(float x)
{
    return gelu_grad_of(x);
}

float dsi_silu(float x)
{
    return silu_of(x);
}

float dsi_silu_grad(float x)
{
    return silu_grad_of(x);
}

/* Flat unary and binary maps in chunks; `op` picks the function. */
typedef enum map_op { MAP_GELU, MAP_GELU_GRAD, MAP_RELU, MAP_RELU_GRAD, MAP_ADD } map_op_t;

KERNEL static void map_chunks(dsi_stype_t type, int64_t n, map_op_t op, const void *x,
                              const void *z, void *y, float *scratch)
{
    float *xs = scratch, *zs = scratch + DSI_CPU_CHUNK, *ys = scratch + 2 * DSI_CPU_CHUNK;
    for (int64_t start = 0; start < n; start += DSI_CPU_CHUNK) {
        int64_t len = n - start < DSI_CPU_CHUNK ? n - start : DSI_CPU_CHUNK;
        const float *a = row_in(x, type, start, len, xs);
        const float *b = z != NULL ? row_in(z, type, start, len, zs) : NULL;
        float *out = row_out(y, type, start, ys);
        switch (op) {
        case MAP_GELU:
            for (int64_t i = 0; i < len; i++)
                out[i] = gelu_of(a[i]);
            break;
        case MAP_GELU_GRAD: /* a = dy, b = x */
            for (int64_t i = 0; i < len; i++)
                out[i] = a[i] * gelu_grad_of(b[i]);
            break;
        case MAP_RELU:
            for (int64_t i = 0; i < len; i++)
                out[i] = a[i] > 0.0f ? a[i] : 0.0f;
            break;
        case MAP_RELU_GRAD:
            for (int64_t i = 0; i < len; i++)
                out[i] = b[i] > 0.0f ? a[i] : 0.0f;
            break;
        case MAP_ADD:
            for (int64_t i = 0; i < len; i++)
                out[i] = a[i] + b[i];
            break;
        }
        row_commit(y, type, start, len, out);
    }
}

void dsi_cpu_gelu_fwd(dsi_stype_t type, int64_t n, const void *x, void *y, float *scratch)
{
    map_chunks(type, n, MAP_GELU, x, NULL, y, scratch);
}

void dsi_cpu_gelu_bwd(dsi_stype_t type, int64_t n, const void *dy, const void *x, void *dx,
                      float *scratch)
{
    map_chunks(type, n, MAP_GELU_GRAD, dy, x, dx, scratch);
}

void dsi_cpu_relu_fwd(dsi_stype_t type, int64_t n, const void *x, void *y, float *scratch)
{
    map_chunks(type, n, MAP_RELU, x, NULL, y, scratch);
}

void dsi_cpu_relu_bwd(dsi_stype_t type, int64_t n, const void *dy, const void *x, void *dx,
                      float *scratch)
{
    map_chunks(type, n, MAP_RELU_GRAD, dy, x, dx, scratch);
}

void dsi_cpu_add(dsi_stype_t type, int64_t n, const void *a, const void *b, void *out,
                 float *scratch)
{
    map_chunks(type, n, MAP_ADD, a, b, out, scratch);
}

KERNEL void dsi_cpu_glu_fwd(dsi_stype_t type, int gelu, int64_t rows, int64_t cols, const void *x,
                            void *y, float *scratch)
{
    float *x_row = scratch, *y_row = scratch + 2 * cols;
    for (int64_t r = 0; r < rows; r++) {
        const float *in = row_in(x, type, r * 2 * cols, 2 * cols, x_row);
        float *out = row_out(y, type, r * cols, y_row);
        if (gelu) {
            for (int64_t j = 0; j < cols; j++)
                out[j] = gelu_of(in[j]) * in[cols + j];
        } else {
            for (int64_t j = 0; j < cols; j++)
                out[j] = silu_of(in[j]) * in[cols + j];
        }
        row_commit(y, type, r * cols, cols, out);
    }
}

KERNEL void dsi_cpu_glu_bwd(dsi_stype_t type, int gelu, int64_t rows, int64_t cols, const void *dy,
                            const void *x, void *dx, float *scratch)
{
    float *x_row = scratch, *dy_row = scratch + 2 * cols, *dx_row = scratch + 3 * cols;
    for (int64_t r = 0; r < rows; r++) {
        const float *in = row_in(x, type, r * 2 * cols, 2 * cols, x_row);
        const float *d = row_in(dy, type, r * cols, cols, dy_row);
        float *out = row_out(dx, type, r * 2 * cols, dx_row);
        if (gelu) {
            for (int64_t j = 0; j < cols; j++) {
                float gate = in[j], up = in[cols + j];
                out[j] = d[j] * up * gelu_grad_of(gate);
                out[cols + j] = d[j] * gelu_of(gate);
            }
        } else {
            for (int64_t j = 0; j < cols; j++) {
                float gate = in[j], up = in[cols + j];
                out[j] = d[j] * up * silu_grad_of(gate);
                out[cols + j] = d[j] * silu_of(gate);
            }
        }
        row_commit(dx, type, r * 2 * cols, 2 * cols, out);
    }
}

/* ---- dropout --------------------------------------------------------------------------------- */

/* Mask bytes for elements [start, start + len), start a multiple of 8: byte
 * b of draw (start + i) / 8 decides element start + i. */
static inline void dropout_mask(uint64_t seed, int64_t start, int64_t len, float p, uint8_t *mask)
{
    unsigned threshold = (unsigned)lrintf(p * 256.0f);
    int64_t full = len / 8;
    for (int64_t g = 0; g < full; g++) {
        uint64_t r = dsi_rng_bits(seed, (uint64_t)(start / 8 + g));
        for (int b = 0; b < 8; b++)
            mask[8 * g + b] = ((r >> (8 * b)) & 0xffu) >= threshold;
    }
    if (full * 8 < len) {
        uint64_t r = dsi_rng_bits(seed, (uint64_t)(start / 8 + full));
        for (int64_t b = 0; full * 8 + b < len; b++)
            mask[8 * full + b] = ((r >> (8 * b)) & 0xffu) >= threshold;
    }
}

KERNEL void dsi_cpu_dropout_fwd(dsi_stype_t type, int64_t n, float p, uint64_t seed, const void *x,
                                void *y, uint8_t *mask, float *scratch)
{
    float scale = 1.0f / (1.0f - p);
    float *xs = scratch, *ys = scratch + DSI_CPU_CHUNK;
    for (int64_t start = 0; start < n; start += DSI_CPU_CHUNK) {
        int64_t len = n - start < DSI_CPU_CHUNK ? n - start : DSI_CPU_CHUNK;
        dropout_mask(seed, start, len, p, mask + start);
        const float *in = row_in(x, type, start, len, xs);
        float *out = row_out(y, type, start, ys);
        for (int64_t i = 0; i < len; i++)
            out[i] = mask[start + i] ? in[i] * scale : 0.0f;
        row_commit(y, type, start, len, out);
    }
}

KERNEL void dsi_cpu_dropout_bwd(dsi_stype_t type, int64_t n, float p, const void *dy,
                                const uint8_t *mask, void *dx, float *scratch)
{
    float scale = 1.0f / (1.0f - p);
    float *ds = scratch, *xs = scratch + DSI_CPU_CHUNK;
    for (int64_t start = 0; start < n; start += DSI_CPU_CHUNK) {
        int64_t len = n - start < DSI_CPU_CHUNK ? n - start : DSI_CPU_CHUNK;
        const float *in = row_in(dy, type, start, len, ds);
        float *out = row_out(dx, type, start, xs);
        for (int64_t i = 0; i < len; i++)
            out[i] = mask[start + i] ? in[i] * scale : 0.0f;
        row_commit(dx, type, start, len, out);
    }
}

KERNEL void dsi_cpu_dropout_add_fwd(dsi_stype_t type, int64_t rows, int64_t cols, float p,
                                    uint64_t seed, const void *x, const void *bias,
                                    const void *residual, void *out, uint8_t *mask, float *scratch)
{
    float scale = 1.0f / (1.0f - p);
    float *b = scratch, *x_row = scratch + cols, *res_row = scratch + 2 * cols;
    dsi_cpu_load(bias, type, 0, cols, b);
    int64_t n = rows * cols;
    for (int64_t start = 0; start < n; start += DSI_CPU_CHUNK) /* mask in aligned chunks */
        dropout_mask(seed, start, n - start < DSI_CPU_CHUNK ? n - start : DSI_CPU_CHUNK, p,
                     mask + start);
    for (int64_t r = 0; r < rows; r++) {
        const float *xr = row_in(x, type, r * cols, cols, x_row);
        const float *res = row_in(residual, type, r * cols, cols, res_row);
        const uint8_t *m = mask + r * cols;
        /* out may be written over x's converted row: each element reads first. */
        float *o = row_out(out, type, r * cols, x_row);
        for (int64_t j = 0; j < cols; j++)
            o[j] = res[j] + (m[j] ? (xr[j] + b[j]) * scale : 0.0f);
        row_commit(out, type, r * cols, cols, o);
    }
}

KERNEL void dsi_cpu_dropout_add_bwd(dsi_stype_t type, int64_t rows, int64_t cols, float p,
                                    const void *dout, const uint8_t *mask, void *dx, float *dbias,
                                    float *scratch)
{
    float scale = 1.0f / (1.0f - p);
    float *d_row = scratch, *x_row = scratch + cols;
    for (int64_t r = 0; r < rows; r++) {
        const float *d = row_in(dout, type, r * cols, cols, d_row);
        const uint8_t *m = mask + r * cols;
        float *o = row_out(dx, type, r * cols, x_row);
        for (int64_t j = 0; j < cols; j++) {
            o[j] = m[j] ? d[j] * scale : 0.0f;
            dbias[j] += o[j];
        }
        row_commit(dx, type, r * cols, cols, o);
    }
}

/* ---- rotary embedding ------------------------------------------------------------------------ */

void dsi_cpu_rope_table(int64_t rows, int64_t head_dim, float *cos_sin)
{
    int64_t half = head_dim / 2;
    float *cosine = cos_sin, *sine = cos_sin + rows * half;
    for (int64_t i = 0; i < half; i++) {
        double theta = pow(10000.0, -2.0 * (double)i / (double)head_dim);
        for (int64_t r = 0; r < rows; r++) {
            cosine[r * half + i] = (float)cos((double)r * theta);
            sine[r * half + i] = (float)sin((double)r * theta);
        }
    }
}

KERNEL void dsi_cpu_rope(dsi_stype_t type, int backward, int64_t rows, int64_t cols,
                         int64_t head_dim, const float *cos_sin, const void *x, void *y,
                         float *scratch)
{
    int64_t half = head_dim / 2;
    float sign = backward ? -1.0f : 1.0f;
    for (int64_t r = 0; r < rows; r++) {
        const float *in = row_in(x, type, r * cols, cols, scratch);
        float *out = row_out(y, type, r * cols, scratch + cols);
        if (head_dim == 0) {
            memcpy(out, in, (size_t)cols * sizeof(float));
        } else {
            const float *c = cos_sin + r * half, *s = cos_sin + rows * half + r * half;
            for (int64_t h = 0; h < cols; h += head_dim) {
                for (int64_t i = 0; i < half; i++) {
                    float a = in[h + i], b = in[h + half + i], sn = sign * s[i];
                    out[h + i] = a * c[i] - b * sn;
                    out[h + half + i] = b * c[i] + a * sn;
                }
            }
        }
        row_commit(y, type, r * cols, cols, out);
    }
}

/* ---- embedding ------------------------------------------------------------------------------- */

void dsi_cpu_embedding_fwd(dsi_stype_t type, int64_t tokens, int64_t hidden, const int32_t *ids,
                           const void *table, void *out)
{
    size_t row_bytes = (size_t)hidden * dsi_stype_size(type);
    for (int64_t t = 0; t < tokens; t++)
        memcpy((char *)out + (size_t)t * row_bytes,
               (const char *)table + (size_t)ids[t] * row_bytes, row_bytes);
}

KERNEL void dsi_cpu_embedding_bwd(dsi_stype_t type, int64_t tokens, int64_t hidden,
                                  const int32_t *ids, const void *dout, float *dtable,
                                  float *scratch)
{
    for (int64_t t = 0; t < tokens; t++) {
        const float *d = row_in(dout, type, t * hidden, hidden, scratch);
        float *row = dtable + (int64_t)ids[t] * hidden;
        for (int64_t j = 0; j < hidden; j++)
            row[j] += d[j];
    }
}

/* ---- cross-entropy --------------------------------------------------------------------------- */

KERNEL void dsi_cpu_cross_entropy_fwd(dsi_stype_t type, int64_t tokens, int64_t vocab,
                                      const void *logits, const int32_t *targets, float *softmax,
                                      float *loss, float *scratch)
{
    for (int64_t t = 0; t < tokens; t++) {
        const float *x = row_in(logits, type, t * vocab, vocab, scratch);
        float *s = softmax + t * vocab;
        float max = -INFINITY;
#pragma omp simd reduction(max : max)
        for (int64_t j = 0; j < vocab; j++)
            max = max > x[j] ? max : x[j];
        float target = x[targets[t]]; /* before s overwrites x when they alias */
        float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
        for (int64_t j = 0; j < vocab; j++) {
            s[j] = fast_exp(x[j] - max);
            sum += s[j];
        }
        float inv = 1.0f / sum;
        for (int64_t j = 0; j < vocab; j++)
            s[j] *= inv;
        loss[t] = logf(sum) + max - target;
    }
}

KERNEL void dsi_cpu_cross_entropy_bwd(dsi_stype_t type, int64_t tokens, int64_t vocab,
                                      const float *softmax, const int32_t *targets,
                                      const float *dloss, void *dlogits, float *scratch)
{
    for (int64_t t = 0; t < tokens; t++) {
        const float *s = softmax + t * vocab;
        float *out = row_out(dlogits, type, t * vocab, scratch);
        float g = dloss[t];
        for (int64_t j = 0; j < vocab; j++)
            out[j] = s[j] * g;
        out[targets[t]] -= g;
        row_commit(dlogits, type, t * vocab, vocab, out);
    }
}

/* ---- optimizer ------------------------------------------------------------------------------- */

KERNEL void dsi_cpu_adam(int64_t n, int64_t step, const dsi_adam_t *hp, float *w, float *m,
                         float *v, const float *grad, void *low, dsi_stype_t low_type)
{
    float b1 = hp->beta1, b2 = hp->beta2;
    float correction1 = 1.0f - powf(b1, (float)step), correction2 = 1.0f - powf(b2, (float)step);
    float step_size = hp->lr / correction1, inv_sqrt_c2 = 1.0f / sqrtf(correction2);
    float decay = 1.0f - hp->lr * hp->weight_decay;
    uint16_t *low16 = low_type == DSI_STYPE_BF16 ? (uint16_t *)low : NULL;
    float *low32 = low_type == DSI_STYPE_F32 ? (float *)low : NULL;
    for (int64_t i = 0; i < n; i++) {
        float g = grad[i];
        float mi = b1 * m[i] + (1.0f - b1) * g;
        float vi = b2 * v[i] + (1.0f - b2) * g * g;
        float wi = w[i] * decay - step_size * mi / (sqrtf(vi) * inv_sqrt_c2 + hp->eps);
        m[i] = mi;
        v[i] = vi;
        w[i] = wi;
        if (low16 != NULL)
            low16[i] = bf16_round(bits_of(wi));
        else if (low32 != NULL)
            low32[i] = wi;
    }
}

/* ---- pooling --------------------------------------------------------------------------------- */

KERNEL void dsi_cpu_pool_fwd(dsi_stype_t type, int64_t rows, int64_t cols, const void *x, void *y,
                             int8_t *argmax, float *scratch)
{
    for (int64_t r = 0; r < rows; r++) {
        const float *in = row_in(x, type, r * cols, cols, scratch);
        float *out = row_out(y, type, r * cols, scratch + cols);
        int8_t *arg = argmax + r * cols;
        for (int64_t j = 0; j < cols; j++) {
            int8_t best = 0;
            float value = in[j];
            if (j > 0 && in[j - 1] > value) {
                value = in[j - 1];
                best = -1;
            }
            if (j + 1 < cols && in[j + 1] > value) {
                value = in[j + 1];
                best = 1;
            }
            out[j] = value;
            arg[j] = best;
        }
        row_commit(y, type, r * cols, cols, out);
    }
}

KERNEL void dsi_cpu_pool_bwd(dsi_stype_t type, int64_t rows, int64_t cols, const void *dy,
                             const int8_t *argmax, void *dx, float *scratch)
{
    float *d_row = scratch, *out_row = scratch + cols;
    for (int64_t r = 0; r < rows; r++) {
        const float *d = row_in(dy, type, r * cols, cols, d_row);
        const int8_t *arg = argmax + r * cols;
        float *out = row_out(dx, type, r * cols, out_row);
        memset(out, 0, (size_t)cols * sizeof(float));
        for (int64_t j = 0; j < cols; j++)
            out[j + arg[j]] += d[j];
        row_commit(dx, type, r * cols, cols, out);
    }
}

/* ---- fp8 cast -------------------------------------------------------------------------------- */

/* |v| <= 448 to E4M3 (bias 7, 3 mantissa bits, no infinities), rounded to
 * nearest even; the sign in bit 7. */
static inline uint8_t e4m3_of(float v)
{
    uint32_t b = bits_of(v), sign = (b >> 24) & 0x80u;
    float a = fabsf(v);
    if (!(a < 448.0f))
        return (uint8_t)(sign | 0x7eu); /* saturate (NaN too) */
    if (a < 0.015625f)                  /* below 2^-6: subnormals in steps of 2^-9 */
        return (uint8_t)(sign | (uint32_t)lrintf(a * 512.0f));
    uint32_t m = bits_of(a);
    m += 0x7ffffu + ((m >> 20) & 1u); /* round the 23-bit mantissa to 3 bits */
    uint32_t exponent = (m >> 23) - 127u + 7u, mantissa = (m >> 20) & 7u;
    return (uint8_t)(sign | (exponent << 3) | mantissa);
}

KERNEL void dsi_cpu_fp8_cast(dsi_stype_t type, int64_t n, const void *x, uint8_t *y, float *amax_p,
                             float *scratch)
{
    float amax = 0.0f;
    for (int64_t i = 0; i < n; i += DSI_CPU_CHUNK) {
        int64_t m = n - i < DSI_CPU_CHUNK ? n - i : DSI_CPU_CHUNK;
        const float *in = row_in(x, type, i, m, scratch);
#pragma omp simd reduction(max : amax)
        for (int64_t j = 0; j < m; j++)
            amax = amax > fabsf(in[j]) ? amax : fabsf(in[j]);
    }
    /* Transformer Engine's delayed scaling uses the amax of earlier steps;
     * this one's is as good a stand-in for the work. */
    float scale = amax > 0.0f ? 448.0f / amax : 1.0f;
    for (int64_t i = 0; i < n; i += DSI_CPU_CHUNK) {
        int64_t m = n - i < DSI_CPU_CHUNK ? n - i : DSI_CPU_CHUNK;
        const float *in = row_in(x, type, i, m, scratch);
        for (int64_t j = 0; j < m; j++)
            y[i + j] = e4m3_of(scale * in[j]);
    }
    *amax_p = amax;
}

/* ---- MoE load-balancing loss ------------------------------------------------------------------
 */

#define AUX_LOSS_COEFF 1e-2f /* Megatron's --moe-aux-loss-coeff of Mixtral-style runs */

KERNEL void dsi_cpu_moe_aux_loss_fwd(dsi_stype_t type, int64_t rows, int64_t experts,
                                     const void *probs, const uint8_t *map, float *prob_sums,
                                     float *tokens, float *loss, float *scratch)
{
    for (int64_t e = 0; e < experts; e++)
        prob_sums[e] = tokens[e] = 0.0f;
    for (int64_t r = 0; r < rows; r++) {
        const float *p = row_in(probs, type, r * experts, experts, scratch);
        const uint8_t *m = map + r * experts;
#pragma omp simd
        for (int64_t e = 0; e < experts; e++) {
            prob_sums[e] += p[e];
            tokens[e] += (float)m[e];
        }
    }
    float sum = 0.0f;
    for (int64_t e = 0; e < experts; e++)
        sum += prob_sums[e] * tokens[e];
    *loss = AUX_LOSS_COEFF * sum;
}

KERNEL void dsi_cpu_moe_aux_loss_bwd(dsi_stype_t type, int64_t rows, int64_t experts,
                                     const float *tokens, void *dprobs, float *scratch)
{
    for (int64_t r = 0; r < rows; r++) {
        float *out = row_out(dprobs, type, r * experts, scratch);
#pragma omp simd
        for (int64_t e = 0; e < experts; e++)
            out[e] = AUX_LOSS_COEFF * tokens[e];
        row_commit(dprobs, type, r * experts, experts, out);
    }
}
