// Shared pieces of the optimizer-step kernels: per-step Adam constants derived on the device from
// the hyper tensor (so a captured graph picks up each step's learning rate and step count), the
// gstat gate, and the split of per-tensor sums into fixed parts (with block_sum from
// primitives.cuh: deterministic, no float atomics anywhere).
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

// Partial sums of a per-tensor reduction: `parts` blocks, each summing a strided share.
__host__ __device__ inline int reduction_parts(int64_t n) {
    int64_t p = ceil_div(n, 4096);
    return int(p < 1 ? 1 : (p > 128 ? 128 : p));
}

template <class T>
T* mut_ptr(const CudaCtx& c, int i) {
    return const_cast<T*>(c.in_ptr<T>(i));
}

}  // namespace gl
