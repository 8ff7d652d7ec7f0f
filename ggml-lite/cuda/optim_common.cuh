// Shared pieces of the optimizer-step kernels: per-step Adam constants derived on the device from
// the hyper tensor (so a captured graph picks up each step's learning rate and step count), the
// gstat gate, and a fixed-order block sum (deterministic: no float atomics anywhere).
#pragma once
#include "ggml-lite/cuda/device.cuh"
#include "ggml-lite/cuda/kernel.cuh"
#include "ggml-lite/ops/optim_types.h"

namespace gl {

struct AdamConsts {
    float lr, b1, b2, eps, decay, gs, step_size, corr2;
};

__device__ inline AdamConsts adam_consts(const float* h, bool bnb) {
    AdamConsts k;
    k.lr = h[kLr];
    k.b1 = h[kBeta1];
    k.b2 = h[kBeta2];
    k.eps = h[kEps];
    k.gs = h[kGradScale];
    k.decay = __fsub_rn(1.0f, __fmul_rn(k.lr, h[kWeightDecay]));
    double t = h[kStep];
    if (bnb) {
        k.corr2 = float(sqrt(1.0 - pow(double(k.b2), t)));
        k.step_size = float(-double(k.lr) * double(k.corr2) / (1.0 - pow(double(k.b1), t)));
    } else {
        k.step_size = float(double(k.lr) / (1.0 - pow(double(k.b1), t)));
        k.corr2 = float(sqrt(1.0 - pow(double(k.b2), t)));
    }
    return k;
}

// What gstat asks of a step (gstat may be null: multiply by 1, never skip).
struct Gate {
    float mul;
    bool skip;
};
__device__ __forceinline__ Gate load_gate(const float* gstat) {
    if (gstat == nullptr) return {1.0f, false};
    return {gstat[kGsMul], gstat[kGsNonfinite] != 0.0f};
}
// Device pointer of the optional gstat input at index `at` (null when the call has none).
inline const float* gstat_ptr(const CudaCtx& c, int at) {
    return int(c.in.size()) > at ? c.in_ptr<float>(at) : nullptr;
}

// Sum over the block of one double per thread, in a fixed order (warp trees, then warp 0 adds the
// warp sums in warp order). Every thread gets the total. sh: 32 doubles of shared memory.
__device__ __forceinline__ double block_sum(double x, double* sh) {
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = (blockDim.x + 31) >> 5;
    __syncthreads();  // sh may still be read from a previous call
    if (lane == 0) sh[warp] = x;
    __syncthreads();
    double total = 0.0;
    for (int w = 0; w < warps; w++) total += sh[w];
    return total;
}

// Partial sums of a per-tensor reduction: `parts` blocks, each summing a strided share.
__host__ __device__ inline int reduction_parts(int64_t n) {
    int64_t p = (n + 4095) / 4096;
    return int(p < 1 ? 1 : (p > 128 ? 128 : p));
}

template <class T>
T* mut_ptr(const CudaCtx& c, int i) {
    return const_cast<T*>(c.in_ptr<T>(i));
}

}  // namespace gl
