// CUDA kernels of the backend: every operator but the GEMMs (cuBLAS), for
// fp32, bf16 and fp16 storage, computing in fp32.  They follow the CPU
// kernels' definitions (cpu/dsi_cpu.h) exactly: the same masks, the same
// softmax scale, the same rotary convention, the same fills, so a key's
// outputs agree between backends up to rounding.
#include "dsi_cuda_impl.h"

#include "dsi_rng.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <math.h>

namespace
{

const int kBlock = 256;

__device__ __forceinline__ float to_f(float v)
{
    return v;
}
__device__ __forceinline__ float to_f(__nv_bfloat16 v)
{
    return __bfloat162float(v);
}
__device__ __forceinline__ float to_f(__half v)
{
    return __half2float(v);
}

template <typename T> __device__ __forceinline__ T from_f(float v);
template <> __device__ __forceinline__ float from_f<float>(float v)
{
    return v;
}
template <> __device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float v)
{
    return __float2bfloat16_rn(v);
}
template <> __device__ __forceinline__ __half from_f<__half>(float v)
{
    return __float2half_rn(v);
}

// Grid for n elements with a grid-stride loop.
unsigned grid_for(int64_t n)
{
    int64_t blocks = (n + kBlock - 1) / kBlock;
    return (unsigned)(blocks < 1 ? 1 : blocks > 65535 * 4 ? 65535 * 4 : blocks);
}

int launched(const char *what)
{
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        return dsc_fail(DS_ERR_CUDA, "launching %s: %s", what, cudaGetErrorString(e));
    return DS_OK;
}

#define GRID_STRIDE(i, n)                                                                          \
    for (int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);                      \
         i += (int64_t)gridDim.x * blockDim.x)

// Block-wide reductions (blockDim.x == kBlock).
__device__ float block_sum(float v, float *shared)
{
    for (int o = 16; o > 0; o >>= 1)
        v += __shfl_xor_sync(0xffffffffu, v, o);
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    __syncthreads();
    if (lane == 0)
        shared[warp] = v;
    __syncthreads();
    float total = 0.0f;
    for (int w = 0; w < kBlock / 32; w++)
        total += shared[w];
    return total;
}

__device__ float block_max(float v, float *shared)
{
    for (int o = 16; o > 0; o >>= 1)
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    __syncthreads();
    if (lane == 0)
        shared[warp] = v;
    __syncthreads();
    float best = -INFINITY;
    for (int w = 0; w < kBlock / 32; w++)
        best = fmaxf(best, shared[w]);
    return best;
}

// ---- fills --------------------------------------------------------------------------------------

template <typename T>
__global__ void fill_normal_k(T *p, int64_t n, int kind, float scale, uint64_t seed)
{
    GRID_STRIDE(i, n)
    {
        float v = __fmul_rn(scale, dsi_rng_normal_of(dsi_rng_bits(seed, (uint64_t)i)));
        if (kind == DSI_FILL_POSITIVE)
            v = fabsf(v);
        else if (kind == DSI_FILL_ONE_NORMAL)
            v = __fadd_rn(1.0f, v);
        p[i] = from_f<T>(v);
    }
}

__global__ void fill_index_k(int32_t *p, int64_t n, int64_t limit, uint64_t seed)
{
    GRID_STRIDE(i, n) p[i] = (int32_t)(dsi_rng_bits(seed, (uint64_t)i) % (uint64_t)limit);
}

__global__ void fill_constant_k(float *p, int64_t n, float value)
{
    GRID_STRIDE(i, n) p[i] = value;
}

template <typename T> __global__ void fill_verify_k(T *p, int64_t n, int member, int64_t offset)
{
    GRID_STRIDE(i, n) p[i] = from_f<T>((float)((member + offset + i) % 4 + 1));
}

// ---- softmax ------------------------------------------------------------------------------------

template <typename T>
__global__ void softmax_fwd_k(const T *x, T *y, int64_t cols, int causal, float scale)
{
    __shared__ float shared[kBlock / 32];
    int64_t r = blockIdx.x;
    const T *xr = x + r * cols;
    T *yr = y + r * cols;
    int64_t valid = causal ? r % cols + 1 : cols;
    float m = -INFINITY;
    for (int64_t j = threadIdx.x; j < valid; j += kBlock)
        m = fmaxf(m, scale * to_f(xr[j]));
    m = block_max(m, shared);
    float s = 0.0f;
    for (int64_t j = threadIdx.x; j < valid; j += kBlock)
        s += expf(scale * to_f(xr[j]) - m);
    s = block_sum(s, shared);
    float inv = 1.0f / s;
    for (int64_t j = threadIdx.x; j < cols; j += kBlock)
        yr[j] = from_f<T>(j < valid ? expf(scale * to_f(xr[j]) - m) * inv : 0.0f);
}

template <typename T>
__global__ void softmax_bwd_k(const T *y, const T *dy, T *dx, int64_t cols, int causal, float scale)
{
    __shared__ float shared[kBlock / 32];
    int64_t r = blockIdx.x;
    int64_t valid = causal ? r % cols + 1 : cols;
    const T *yr = y + r * cols, *dyr = dy + r * cols;
    float dot = 0.0f;
    for (int64_t j = threadIdx.x; j < valid; j += kBlock)
        dot += to_f(yr[j]) * to_f(dyr[j]);
    dot = block_sum(dot, shared);
    for (int64_t j = threadIdx.x; j < cols; j += kBlock)
        dx[r * cols + j] = from_f<T>(j < valid ? scale * to_f(yr[j]) * (to_f(dyr[j]) - dot) : 0.0f);
}

// ---- normalisation ------------------------------------------------------------------------------

template <typename T>
__global__ void norm_fwd_k(const T *x, const T *gamma, const T *beta, T *y, float *mean,
                           float *rstd, int64_t cols)
{
    __shared__ float shared[kBlock / 32];
    int64_t r = blockIdx.x;
    const T *xr = x + r * cols;
    float mu = 0.0f;
    if (beta != nullptr) {
        float s = 0.0f;
        for (int64_t j = threadIdx.x; j < cols; j += kBlock)
            s += to_f(xr[j]);
        mu = block_sum(s, shared) / (float)cols;
    }
    float q = 0.0f;
    for (int64_t j = threadIdx.x; j < cols; j += kBlock) {
        float d = to_f(xr[j]) - mu;
        q += d * d;
    }
    float rs = rsqrtf(block_sum(q, shared) / (float)cols + DSI_NORM_EPS);
    for (int64_t j = threadIdx.x; j < cols; j += kBlock) {
        float v = (to_f(xr[j]) - mu) * rs * to_f(gamma[j]);
        if (beta != nullptr)
            v += to_f(beta[j]);
        y[r * cols + j] = from_f<T>(v);
    }
    if (threadIdx.x == 0) {
        if (mean != nullptr)
            mean[r] = mu;
        rstd[r] = rs;
    }
}

template <typename T>
__global__ void norm_bwd_dx_k(const T *dy, const T *x, const T *gamma, const float *mean,
                              const float *rstd, T *dx, int64_t cols)
{
    __shared__ float shared[kBlock / 32];
    int64_t r = blockIdx.x;
    float mu = mean != nullptr ? mean[r] : 0.0f, rs = rstd[r];
    const T *xr = x + r * cols, *dyr = dy + r * cols;
    float a = 0.0f, b = 0.0f;
    for (int64_t j = threadIdx.x; j < cols; j += kBlock) {
        float xhat = (to_f(xr[j]) - mu) * rs, gdy = to_f(gamma[j]) * to_f(dyr[j]);
        a += gdy;
        b += gdy * xhat;
    }
    a = mean != nullptr ? block_sum(a, shared) / (float)cols : 0.0f;
    b = block_sum(b, shared) / (float)cols;
    for (int64_t j = threadIdx.x; j < cols; j += kBlock) {
        float xhat = (to_f(xr[j]) - mu) * rs;
        dx[r * cols + j] = from_f<T>(rs * (to_f(gamma[j]) * to_f(dyr[j]) - a - xhat * b));
    }
}

// Column sums over a slice of rows, then one atomic per block and column.
template <typename T>
__global__ void norm_bwd_params_k(const T *dy, const T *x, const float *mean, const float *rstd,
                                  float *dgamma, float *dbeta, int64_t rows, int64_t cols,
                                  int64_t rows_per_block)
{
    int64_t j = (int64_t)blockIdx.x * kBlock + threadIdx.x;
    if (j >= cols)
        return;
    int64_t first = (int64_t)blockIdx.y * rows_per_block;
    int64_t last = first + rows_per_block < rows ? first + rows_per_block : rows;
    float g = 0.0f, b = 0.0f;
    for (int64_t r = first; r < last; r++) {
        float d = to_f(dy[r * cols + j]);
        float xhat = (to_f(x[r * cols + j]) - (mean != nullptr ? mean[r] : 0.0f)) * rstd[r];
        g += d * xhat;
        b += d;
    }
    atomicAdd(&dgamma[j], g);
    if (dbeta != nullptr)
        atomicAdd(&dbeta[j], b);
}

// ---- elementwise --------------------------------------------------------------------------------

__device__ __forceinline__ float gelu(float x)
{
    return 0.5f * x * (1.0f + tanhf(0.7978845608f * (x + 0.044715f * x * x * x)));
}

__device__ __forceinline__ float gelu_grad(float x)
{
    float t = tanhf(0.7978845608f * (x + 0.044715f * x * x * x));
    return 0.5f * (1.0f + t) +
           0.5f * x * (1.0f - t * t) * 0.7978845608f * (1.0f + 3.0f * 0.044715f * x * x);
}

__device__ __forceinline__ float silu(float x)
{
    return x / (1.0f + expf(-x));
}

__device__ __forceinline__ float silu_grad(float x)
{
    float s = 1.0f / (1.0f + expf(-x));
    return s * (1.0f + x * (1.0f - s));
}

template <typename T> __global__ void map_k(int op, int64_t n, const T *a, const T *b, T *out)
{
    GRID_STRIDE(i, n)
    {
        float x = to_f(a[i]), v = 0.0f;
        switch (op) {
        case DSC_GELU: v = gelu(x); break;
        case DSC_GELU_GRAD: v = x * gelu_grad(to_f(b[i])); break;
        case DSC_RELU: v = x > 0.0f ? x : 0.0f; break;
        case DSC_RELU_GRAD: v = to_f(b[i]) > 0.0f ? x : 0.0f; break;
        case DSC_ADD: v = x + to_f(b[i]); break;
        }
        out[i] = from_f<T>(v);
    }
}

template <typename T>
__global__ void glu_fwd_k(int use_gelu, int64_t rows, int64_t cols, const T *x, T *y)
{
    GRID_STRIDE(i, rows * cols)
    {
        int64_t r = i / cols, j = i % cols;
        float gate = to_f(x[r * 2 * cols + j]), up = to_f(x[r * 2 * cols + cols + j]);
        y[i] = from_f<T>((use_gelu ? gelu(gate) : silu(gate)) * up);
    }
}

template <typename T>
__global__ void glu_bwd_k(int use_gelu, int64_t rows, int64_t cols, const T *dy, const T *x, T *dx)
{
    GRID_STRIDE(i, rows * cols)
    {
        int64_t r = i / cols, j = i % cols;
        float gate = to_f(x[r * 2 * cols + j]), up = to_f(x[r * 2 * cols + cols + j]);
        float d = to_f(dy[i]);
        float act = use_gelu ? gelu(gate) : silu(gate);
        float grad = use_gelu ? gelu_grad(gate) : silu_grad(gate);
        dx[r * 2 * cols + j] = from_f<T>(d * up * grad);
        dx[r * 2 * cols + cols + j] = from_f<T>(d * act);
    }
}

// The mask byte of element i: the CPU's rule (cpu_kernels.c, dropout_mask).
__device__ __forceinline__ uint8_t keep_of(uint64_t seed, int64_t i, unsigned threshold)
{
    uint64_t r = dsi_rng_bits(seed, (uint64_t)i >> 3);
    return ((r >> (8 * (i & 7))) & 0xffu) >= threshold;
}

template <typename T>
__global__ void dropout_fwd_k(int64_t n, unsigned threshold, float scale, uint64_t seed, const T *x,
                              T *y, uint8_t *mask)
{
    GRID_STRIDE(i, n)
    {
        uint8_t keep = keep_of(seed, i, threshold);
        mask[i] = keep;
        y[i] = from_f<T>(keep ? to_f(x[i]) * scale : 0.0f);
    }
}

template <typename T>
__global__ void dropout_bwd_k(int64_t n, float scale, const T *dy, const uint8_t *mask, T *dx)
{
    GRID_STRIDE(i, n) dx[i] = from_f<T>(mask[i] ? to_f(dy[i]) * scale : 0.0f);
}

template <typename T>
__global__ void dropout_add_fwd_k(int64_t rows, int64_t cols, unsigned threshold, float scale,
                                  uint64_t seed, const T *x, const T *bias, const T *residual,
                                  T *out, uint8_t *mask)
{
    GRID_STRIDE(i, rows * cols)
    {
        uint8_t keep = keep_of(seed, i, threshold);
        mask[i] = keep;
        float v = keep ? (to_f(x[i]) + to_f(bias[i % cols])) * scale : 0.0f;
        out[i] = from_f<T>(to_f(residual[i]) + v);
    }
}

template <typename T>
__global__ void dropout_add_bwd_dx_k(int64_t n, float scale, const T *dout, const uint8_t *mask,
                                     T *dx)
{
    GRID_STRIDE(i, n) dx[i] = from_f<T>(mask[i] ? to_f(dout[i]) * scale : 0.0f);
}

template <typename T>
__global__ void dropout_add_bwd_bias_k(int64_t rows, int64_t cols, float scale, const T *dout,
                                       const uint8_t *mask, float *dbias, int64_t rows_per_block)
{
    int64_t j = (int64_t)blockIdx.x * kBlock + threadIdx.x;
    if (j >= cols)
        return;
    int64_t first = (int64_t)blockIdx.y * rows_per_block;
    int64_t last = first + rows_per_block < rows ? first + rows_per_block : rows;
    float s = 0.0f;
    for (int64_t r = first; r < last; r++)
        s += mask[r * cols + j] ? to_f(dout[r * cols + j]) * scale : 0.0f;
    atomicAdd(&dbias[j], s);
}

// ---- rotary embedding ---------------------------------------------------------------------------

__global__ void rope_table_k(int64_t rows, int64_t half, int64_t head_dim, float *cos_sin)
{
    GRID_STRIDE(idx, rows * half)
    {
        int64_t r = idx / half, i = idx % half;
        double theta = pow(10000.0, -2.0 * (double)i / (double)head_dim);
        cos_sin[r * half + i] = (float)cos((double)r * theta);
        cos_sin[rows * half + r * half + i] = (float)sin((double)r * theta);
    }
}

template <typename T>
__global__ void rope_k(int backward, int64_t rows, int64_t cols, int64_t head_dim,
                       const float *cos_sin, const T *x, T *y)
{
    GRID_STRIDE(idx, rows * cols)
    {
        int64_t r = idx / cols, c = idx % cols;
        if (head_dim == 0) {
            y[idx] = x[idx];
            continue;
        }
        int64_t half = head_dim / 2, h = c - c % head_dim, i = c % head_dim;
        int64_t pair = i < half ? i : i - half;
        float cs = cos_sin[r * half + pair];
        float sn = (backward ? -1.0f : 1.0f) * cos_sin[rows * half + r * half + pair];
        float a = to_f(x[r * cols + h + pair]), b = to_f(x[r * cols + h + half + pair]);
        y[idx] = from_f<T>(i < half ? a * cs - b * sn : b * cs + a * sn);
    }
}

// ---- embedding ----------------------------------------------------------------------------------

template <typename T>
__global__ void embedding_fwd_k(int64_t tokens, int64_t hidden, const int32_t *ids, const T *table,
                                T *out)
{
    GRID_STRIDE(i, tokens * hidden)
    {
        int64_t t = i / hidden, j = i % hidden;
        out[i] = table[(int64_t)ids[t] * hidden + j];
    }
}

template <typename T>
__global__ void embedding_bwd_k(int64_t tokens, int64_t hidden, const int32_t *ids, const T *dout,
                                float *dtable)
{
    GRID_STRIDE(i, tokens * hidden)
    {
        int64_t t = i / hidden, j = i % hidden;
        atomicAdd(&dtable[(int64_t)ids[t] * hidden + j], to_f(dout[i]));
    }
}

// ---- cross-entropy ------------------------------------------------------------------------------

template <typename T>
__global__ void cross_entropy_fwd_k(int64_t vocab, const T *logits, const int32_t *targets,
                                    float *softmax, float *loss)
{
    __shared__ float shared[kBlock / 32];
    int64_t t = blockIdx.x;
    const T *x = logits + t * vocab;
    float *s = softmax + t * vocab;
    float m = -INFINITY;
    for (int64_t j = threadIdx.x; j < vocab; j += kBlock)
        m = fmaxf(m, to_f(x[j]));
    m = block_max(m, shared);
    float sum = 0.0f;
    for (int64_t j = threadIdx.x; j < vocab; j += kBlock)
        sum += expf(to_f(x[j]) - m);
    sum = block_sum(sum, shared);
    float target = to_f(x[targets[t]]);
    __syncthreads(); // everyone read the target logit before the row is overwritten
    float inv = 1.0f / sum;
    for (int64_t j = threadIdx.x; j < vocab; j += kBlock)
        s[j] = expf(to_f(x[j]) - m) * inv;
    if (threadIdx.x == 0)
        loss[t] = logf(sum) + m - target;
}

template <typename T>
__global__ void cross_entropy_bwd_k(int64_t tokens, int64_t vocab, const float *softmax,
                                    const int32_t *targets, const float *dloss, T *dlogits)
{
    GRID_STRIDE(i, tokens * vocab)
    {
        int64_t t = i / vocab, j = i % vocab;
        float g = dloss[t];
        dlogits[i] = from_f<T>(softmax[i] * g - (j == targets[t] ? g : 0.0f));
    }
}

// ---- optimizer and pooling ----------------------------------------------------------------------

__global__ void adam_k(int64_t n, float step_size, float inv_sqrt_c2, float decay, float b1,
                       float b2, float eps, float *w, float *m, float *v, const float *grad,
                       __nv_bfloat16 *low)
{
    GRID_STRIDE(i, n)
    {
        float g = grad[i];
        float mi = b1 * m[i] + (1.0f - b1) * g;
        float vi = b2 * v[i] + (1.0f - b2) * g * g;
        float wi = w[i] * decay - step_size * mi / (sqrtf(vi) * inv_sqrt_c2 + eps);
        m[i] = mi;
        v[i] = vi;
        w[i] = wi;
        low[i] = __float2bfloat16_rn(wi);
    }
}

template <typename T>
__global__ void pool_fwd_k(int64_t rows, int64_t cols, const T *x, T *y, int8_t *argmax)
{
    GRID_STRIDE(i, rows * cols)
    {
        int64_t j = i % cols;
        float best = to_f(x[i]);
        int8_t arg = 0;
        if (j > 0 && to_f(x[i - 1]) > best) {
            best = to_f(x[i - 1]);
            arg = -1;
        }
        if (j + 1 < cols && to_f(x[i + 1]) > best) {
            best = to_f(x[i + 1]);
            arg = 1;
        }
        y[i] = from_f<T>(best);
        argmax[i] = arg;
    }
}

// Gathers rather than scatters: dx[j] sums dy[k] over the neighbours k that chose j.
template <typename T>
__global__ void pool_bwd_k(int64_t rows, int64_t cols, const T *dy, const int8_t *argmax, T *dx)
{
    GRID_STRIDE(i, rows * cols)
    {
        int64_t j = i % cols;
        float s = argmax[i] == 0 ? to_f(dy[i]) : 0.0f;
        if (j > 0 && argmax[i - 1] == 1)
            s += to_f(dy[i - 1]);
        if (j + 1 < cols && argmax[i + 1] == -1)
            s += to_f(dy[i + 1]);
        dx[i] = from_f<T>(s);
    }
}

unsigned row_grid(int64_t rows)
{
    return (unsigned)rows;
}

// Blocks of columns x slices of rows for the column reductions.
dim3 column_grid(int64_t rows, int64_t cols, int64_t *rows_per_block)
{
    int64_t slices = rows < 64 ? rows : 64;
    *rows_per_block = (rows + slices - 1) / slices;
    return dim3((unsigned)((cols + kBlock - 1) / kBlock), (unsigned)slices);
}

} // namespace

#define LAUNCH(t, kernel, grid, ...)                                                               \
    do {                                                                                           \
        switch (t) {                                                                               \
        case DSC_F32: {                                                                            \
            typedef float T;                                                                       \
            kernel<T><<<(grid), kBlock, 0, s>>>(__VA_ARGS__);                                      \
            break;                                                                                 \
        }                                                                                          \
        case DSC_BF16: {                                                                           \
            typedef __nv_bfloat16 T;                                                               \
            kernel<T><<<(grid), kBlock, 0, s>>>(__VA_ARGS__);                                      \
            break;                                                                                 \
        }                                                                                          \
        case DSC_F16: {                                                                            \
            typedef __half T;                                                                      \
            kernel<T><<<(grid), kBlock, 0, s>>>(__VA_ARGS__);                                      \
            break;                                                                                 \
        }                                                                                          \
        }                                                                                          \
    } while (0)

#define C(x) static_cast<const T *>(x)
#define P(x) static_cast<T *>(x)

int dsc_fill(cudaStream_t s, void *p, dsi_elem_t elem, dsc_type t, int64_t count, dsi_fill_t fill,
             float scale, int64_t limit, uint64_t seed)
{
    if (count == 0 || fill == DSI_FILL_NONE || fill == DSI_FILL_SAVED)
        return DS_OK;
    switch (fill) {
    case DSI_FILL_INDEX:
        fill_index_k<<<grid_for(count), kBlock, 0, s>>>(static_cast<int32_t *>(p), count, limit,
                                                        seed);
        break;
    case DSI_FILL_CONSTANT:
        fill_constant_k<<<grid_for(count), kBlock, 0, s>>>(static_cast<float *>(p), count, scale);
        break;
    default: {
        dsc_type target = elem == DSI_ELEM_STORED ? t : elem == DSI_ELEM_BF16 ? DSC_BF16 : DSC_F32;
        LAUNCH(target, fill_normal_k, grid_for(count), P(p), count, (int)fill, scale, seed);
        break;
    }
    }
    return launched("fill");
}

int dsc_fill_verify(cudaStream_t s, void *p, dsc_type t, int64_t count, int member, int64_t offset)
{
    if (count == 0)
        return DS_OK;
    LAUNCH(t, fill_verify_k, grid_for(count), P(p), count, member, offset);
    return launched("fill_verify");
}

int dsc_softmax_fwd(cudaStream_t s, dsc_type t, int64_t rows, int64_t cols, int causal, float scale,
                    const void *x, void *y)
{
    LAUNCH(t, softmax_fwd_k, row_grid(rows), C(x), P(y), cols, causal, scale);
    return launched("softmax");
}

int dsc_softmax_bwd(cudaStream_t s, dsc_type t, int64_t rows, int64_t cols, int causal, float scale,
                    const void *y, const void *dy, void *dx)
{
    LAUNCH(t, softmax_bwd_k, row_grid(rows), C(y), C(dy), P(dx), cols, causal, scale);
    return launched("softmax backward");
}

int dsc_norm_fwd(cudaStream_t s, dsc_type t, int64_t rows, int64_t cols, const void *x,
                 const void *gamma, const void *beta, void *y, float *mean, float *rstd)
{
    LAUNCH(t, norm_fwd_k, row_grid(rows), C(x), C(gamma), C(beta), P(y), mean, rstd, cols);
    return launched("norm");
}

int dsc_norm_bwd(cudaStream_t s, dsc_type t, int64_t rows, int64_t cols, const void *dy,
                 const void *x, const void *gamma, const float *mean, const float *rstd, void *dx,
                 float *dgamma, float *dbeta)
{
    LAUNCH(t, norm_bwd_dx_k, row_grid(rows), C(dy), C(x), C(gamma), mean, rstd, P(dx), cols);
    int64_t per = 0;
    dim3 grid = column_grid(rows, cols, &per);
    LAUNCH(t, norm_bwd_params_k, grid, C(dy), C(x), mean, rstd, dgamma, dbeta, rows, cols, per);
    return launched("norm backward");
}

int dsc_map(cudaStream_t s, dsc_type t, dsc_map_op op, int64_t n, const void *a, const void *b,
            void *out)
{
    LAUNCH(t, map_k, grid_for(n), (int)op, n, C(a), C(b), P(out));
    return launched("elementwise");
}

int dsc_glu_fwd(cudaStream_t s, dsc_type t, int gelu_gate, int64_t rows, int64_t cols,
                const void *x, void *y)
{
    LAUNCH(t, glu_fwd_k, grid_for(rows * cols), gelu_gate, rows, cols, C(x), P(y));
    return launched("glu");
}

int dsc_glu_bwd(cudaStream_t s, dsc_type t, int gelu_gate, int64_t rows, int64_t cols,
                const void *dy, const void *x, void *dx)
{
    LAUNCH(t, glu_bwd_k, grid_for(rows * cols), gelu_gate, rows, cols, C(dy), C(x), P(dx));
    return launched("glu backward");
}

static unsigned threshold_of(float p)
{
    return (unsigned)lrintf(p * 256.0f);
}

int dsc_dropout_fwd(cudaStream_t s, dsc_type t, int64_t n, float p, uint64_t seed, const void *x,
                    void *y, uint8_t *mask)
{
    LAUNCH(t, dropout_fwd_k, grid_for(n), n, threshold_of(p), 1.0f / (1.0f - p), seed, C(x), P(y),
           mask);
    return launched("dropout");
}

int dsc_dropout_bwd(cudaStream_t s, dsc_type t, int64_t n, float p, const void *dy,
                    const uint8_t *mask, void *dx)
{
    LAUNCH(t, dropout_bwd_k, grid_for(n), n, 1.0f / (1.0f - p), C(dy), mask, P(dx));
    return launched("dropout backward");
}

int dsc_dropout_add_fwd(cudaStream_t s, dsc_type t, int64_t rows, int64_t cols, float p,
                        uint64_t seed, const void *x, const void *bias, const void *residual,
                        void *out, uint8_t *mask)
{
    LAUNCH(t, dropout_add_fwd_k, grid_for(rows * cols), rows, cols, threshold_of(p),
           1.0f / (1.0f - p), seed, C(x), C(bias), C(residual), P(out), mask);
    return launched("bias-dropout-add");
}

int dsc_dropout_add_bwd(cudaStream_t s, dsc_type t, int64_t rows, int64_t cols, float p,
                        const void *dout, const uint8_t *mask, void *dx, float *dbias)
{
    float scale = 1.0f / (1.0f - p);
    LAUNCH(t, dropout_add_bwd_dx_k, grid_for(rows * cols), rows * cols, scale, C(dout), mask,
           P(dx));
    int64_t per = 0;
    dim3 grid = column_grid(rows, cols, &per);
    LAUNCH(t, dropout_add_bwd_bias_k, grid, rows, cols, scale, C(dout), mask, dbias, per);
    return launched("bias-dropout-add backward");
}

int dsc_rope_table(cudaStream_t s, int64_t rows, int64_t head_dim, float *cos_sin)
{
    if (head_dim == 0)
        return DS_OK;
    int64_t half = head_dim / 2;
    rope_table_k<<<grid_for(rows * half), kBlock, 0, s>>>(rows, half, head_dim, cos_sin);
    return launched("rope table");
}

int dsc_rope(cudaStream_t s, dsc_type t, int backward, int64_t rows, int64_t cols, int64_t head_dim,
             const float *cos_sin, const void *x, void *y)
{
    LAUNCH(t, rope_k, grid_for(rows * cols), backward, rows, cols, head_dim, cos_sin, C(x), P(y));
    return launched("rope");
}

int dsc_embedding_fwd(cudaStream_t s, dsc_type t, int64_t tokens, int64_t hidden,
                      const int32_t *ids, const void *table, void *out)
{
    LAUNCH(t, embedding_fwd_k, grid_for(tokens * hidden), tokens, hidden, ids, C(table), P(out));
    return launched("embedding");
}

int dsc_embedding_bwd(cudaStream_t s, dsc_type t, int64_t tokens, int64_t hidden,
                      const int32_t *ids, const void *dout, float *dtable)
{
    LAUNCH(t, embedding_bwd_k, grid_for(tokens * hidden), tokens, hidden, ids, C(dout), dtable);
    return launched("embedding backward");
}

int dsc_cross_entropy_fwd(cudaStream_t s, dsc_type t, int64_t tokens, int64_t vocab,
                          const void *logits, const int32_t *targets, float *softmax, float *loss)
{
    LAUNCH(t, cross_entropy_fwd_k, row_grid(tokens), vocab, C(logits), targets, softmax, loss);
    return launched("cross-entropy");
}

int dsc_cross_entropy_bwd(cudaStream_t s, dsc_type t, int64_t tokens, int64_t vocab,
                          const float *softmax, const int32_t *targets, const float *dloss,
                          void *dlogits)
{
    LAUNCH(t, cross_entropy_bwd_k, grid_for(tokens * vocab), tokens, vocab, softmax, targets, dloss,
           P(dlogits));
    return launched("cross-entropy backward");
}

int dsc_adam(cudaStream_t s, int64_t n, int64_t step, float *w, float *m, float *v,
             const float *grad, uint16_t *low_bf16)
{
    // The hyper-parameters of the cpu backend (cpu_backend.c).
    const float lr = 1e-4f, b1 = 0.9f, b2 = 0.95f, eps = 1e-8f, weight_decay = 0.1f;
    float c1 = 1.0f - powf(b1, (float)step), c2 = 1.0f - powf(b2, (float)step);
    adam_k<<<grid_for(n), kBlock, 0, s>>>(n, lr / c1, 1.0f / sqrtf(c2), 1.0f - lr * weight_decay,
                                          b1, b2, eps, w, m, v, grad,
                                          reinterpret_cast<__nv_bfloat16 *>(low_bf16));
    return launched("adam");
}

int dsc_pool_fwd(cudaStream_t s, dsc_type t, int64_t rows, int64_t cols, const void *x, void *y,
                 int8_t *argmax)
{
    LAUNCH(t, pool_fwd_k, grid_for(rows * cols), rows, cols, C(x), P(y), argmax);
    return launched("pool");
}

int dsc_pool_bwd(cudaStream_t s, dsc_type t, int64_t rows, int64_t cols, const void *dy,
                 const int8_t *argmax, void *dx)
{
    LAUNCH(t, pool_bwd_k, grid_for(rows * cols), rows, cols, C(dy), argmax, P(dx));
    return launched("pool backward");
}

float dsc_to_float(const void *p, dsc_type t, int64_t i)
{
    switch (t) {
    case DSC_F32: return static_cast<const float *>(p)[i];
    case DSC_BF16: return __bfloat162float(static_cast<const __nv_bfloat16 *>(p)[i]);
    case DSC_F16: return __half2float(static_cast<const __half *>(p)[i]);
    }
    return 0.0f;
}
