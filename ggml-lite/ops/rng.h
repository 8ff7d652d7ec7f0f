// Counter-based random numbers shared by the CPU and CUDA backends, so a seeded op gives
// the same result everywhere and when recomputed.
#pragma once
#include <cstdint>

#if defined(__CUDACC__)
#define GL_HD __host__ __device__ __forceinline__
#else
#define GL_HD inline
#endif

namespace gl {

// splitmix64 finaliser of (seed, i): a uniform 64-bit hash.
GL_HD uint64_t rng_hash(uint64_t seed, uint64_t i) {
    uint64_t z = seed + (i + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// Uniform in [0, 1) with 24 bits.
GL_HD float rng_uniform(uint64_t seed, uint64_t i) { return float(rng_hash(seed, i) >> 40) * (1.0f / 16777216.0f); }

GL_HD bool dropout_keep(uint64_t seed, uint64_t i, float p) { return rng_uniform(seed, i) >= p; }

// The seed a dropout node uses when it also takes a per-step seed input: its build-time seed
// mixed with the step's value, so modules sharing one step input still draw different masks.
GL_HD uint64_t dropout_step_seed(uint64_t build_seed, int32_t step_value) {
    return rng_hash(build_seed, uint64_t(uint32_t(step_value)));
}

}  // namespace gl
