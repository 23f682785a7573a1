/* The value generator every backend fills its buffers with: counter-based,
 * deterministic from (seed, index), the same on the host and on a GPU, so
 * the same key gets the same inputs on every backend.  C and CUDA. */
#ifndef DSI_RNG_H
#define DSI_RNG_H

#include <stdint.h>

#if defined(__CUDACC__)
#define DSI_HOSTDEV __host__ __device__ __forceinline__
#else
#define DSI_HOSTDEV static inline
#endif

DSI_HOSTDEV uint64_t dsi_rng_mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

DSI_HOSTDEV uint64_t dsi_rng_bits(uint64_t seed, uint64_t index)
{
    return dsi_rng_mix64(seed * 0xd1b54a32d192ed03ULL + (index + 1) * 0x9e3779b97f4a7c15ULL);
}

/* Approximately N(0, 1): the sum of four 16-bit uniforms (mean 2, variance
 * 1/3), centred and scaled.  Every step is exact or rounded once, in the
 * same order on every device (no fused multiply-add). */
DSI_HOSTDEV float dsi_rng_normal_of(uint64_t r)
{
    /* Integer sum: exact everywhere. */
    uint32_t sum = (uint32_t)(r & 0xffff) + (uint32_t)((r >> 16) & 0xffff) +
                   (uint32_t)((r >> 32) & 0xffff) + (uint32_t)(r >> 48);
    /* (sum - 2^17) / 2^16 is exact in float; one rounding in the product. */
    float centred = (float)((int32_t)sum - 131072) * (1.0f / 65536.0f);
    return centred * 1.7320508f;
}

#endif /* DSI_RNG_H */
