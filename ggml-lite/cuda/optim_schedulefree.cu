// Schedule-free AdamW / SGD / RAdam, in place (CPU reference: ops/optim_schedulefree.cpp), f32 param / grad / z
// / v. The group's scalars come from sfstate and hyper on the device (ops/optim_schedulefree.h); the
// elementwise kernel uses round-to-nearest intrinsics (no FMA contraction) so both backends agree bit
// for bit on the same inputs. schedulefree_advance is one thread.
#include "ggml-lite/cuda/optim_common.cuh"
#include "ggml-lite/ops/optim_schedulefree.h"

namespace gl {

struct SfStepArgs {
    float *y, *z, *v;
    const float* g;
    const float* h;
    const float* sf;
    const float* gstat;
    int64_t n;
    float r, wlp, warmup;
    int variant, silent;  // sf_params' i[0] (0 SGD, 1 AdamW, 2 RAdam) and i[1]
};

// The lr factor of the variant (RAdam's rectification, else 1) and whether the step divides by sqrt(v).
__device__ double sf_factor(int variant, int silent, const float* h, bool* adaptive) {
    *adaptive = variant == 1;
    return variant == 2 ? radam_rect(h[kBeta2], h[kStep], silent != 0, adaptive) : 1.0;
}

__device__ __forceinline__ float lerp_rn(float start, float end, float w) {
    const float d = __fsub_rn(end, start);
    return fabsf(w) < 0.5f ? __fadd_rn(start, __fmul_rn(w, d)) : __fsub_rn(end, __fmul_rn(d, __fsub_rn(1.0f, w)));
}

__global__ void sf_step_kernel(SfStepArgs a) {
    kernel_entry();
    const Gate gate = load_gate(a.gstat);
    if (gate.skip) return;
    bool adaptive = false;
    const double factor = sf_factor(a.variant, a.silent, a.h, &adaptive);
    const SfScalars s = schedulefree_scalars(a.sf, a.h, a.r, a.wlp, a.warmup, factor);
    const float b1 = a.h[kBeta1], b2 = a.h[kBeta2], eps = a.h[kEps], wd = a.h[kWeightDecay], gs = a.h[kGradScale];
    const float ckp1 = float(s.ckp1), lr = float(s.lr), ystep = float(s.lr * (double(b1) * (1.0 - s.ckp1) - 1.0));
    const float cv = float(1.0 - double(b2)), bc2 = float(1.0 - pow(double(b2), double(a.h[kStep])));
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < a.n; i += int64_t(gridDim.x) * blockDim.x) {
        float gi = __fmul_rn(__fmul_rn(a.g[i], gs), gate.mul);
        const float yi = a.y[i], zi = a.z[i];
        if (a.v) {
            const float vi = __fadd_rn(__fmul_rn(a.v[i], b2), __fmul_rn(__fmul_rn(cv, gi), gi));
            a.v[i] = vi;
            if (adaptive) gi = __fdiv_rn(gi, __fadd_rn(__fsqrt_rn(__fdiv_rn(vi, bc2)), eps));
        }
        if (wd != 0.0f) gi = __fadd_rn(gi, __fmul_rn(wd, yi));
        a.y[i] = __fadd_rn(lerp_rn(yi, zi, ckp1), __fmul_rn(ystep, gi));
        a.z[i] = __fsub_rn(zi, __fmul_rn(lr, gi));
    }
}

static void sf_step_run(CudaCtx& c) {
    const bool adam = c.p().i[0] != 0;
    const int fixed = adam ? 6 : 5;
    SfStepArgs a{};
    a.y = mut_ptr<float>(c, 0);
    a.g = c.in_ptr<float>(1);
    a.z = mut_ptr<float>(c, 2);
    a.v = adam ? mut_ptr<float>(c, 3) : nullptr;
    a.h = c.in_ptr<float>(fixed - 2);
    a.sf = c.in_ptr<float>(fixed - 1);
    a.gstat = gstat_ptr(c, fixed);
    a.n = c.in[0].numel();
    a.r = c.p().f[0];
    a.wlp = c.p().f[1];
    a.warmup = c.p().f[2];
    a.variant = int(c.p().i[0]);
    a.silent = int(c.p().i[1]);
    if (a.n == 0) return;
    sf_step_kernel<<<grid_for(a.n, 256, sm_count() * 16), 256, 0, c.stream>>>(a);
    GL_CUDA_LAUNCHED();
}
const CudaKernel cuda_schedulefree_step{sf_step_run};

__global__ void sf_advance_kernel(float* sf, const float* h, const float* gstat, float r, float wlp, float warmup,
                                  int variant, int silent) {
    kernel_entry();
    if (load_gate(gstat).skip) return;
    bool adaptive = false;
    const double factor = sf_factor(variant, silent, h, &adaptive);
    schedulefree_store(sf, schedulefree_scalars(sf, h, r, wlp, warmup, factor));
}

static void sf_advance_run(CudaCtx& c) {
    sf_advance_kernel<<<1, 1, 0, c.stream>>>(mut_ptr<float>(c, 0), c.in_ptr<float>(1), gstat_ptr(c, 2), c.p().f[0],
                                             c.p().f[1], c.p().f[2], int(c.p().i[0]), int(c.p().i[1]));
    GL_CUDA_LAUNCHED();
}
const CudaKernel cuda_schedulefree_advance{sf_advance_run};

}  // namespace gl
