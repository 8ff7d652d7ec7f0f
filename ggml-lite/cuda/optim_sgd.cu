// SGD with momentum / Nesterov, in place (CPU reference: ops/optim_sgd.cpp): grid-stride, one
// element per thread, explicit round-to-nearest intrinsics (no FMA contraction) as the CPU computes.
#include "ggml-lite/cuda/optim_common.cuh"

namespace gl {

__global__ void sgd_kernel(float* p, const float* g, float* buf, const float* h, const float* gstat, int64_t n,
                           float momentum, float dampening, bool nesterov) {
    kernel_entry();
    const Gate gate = load_gate(gstat);
    if (gate.skip) return;
    const float lr = h[kLr], wd = h[kWeightDecay], gs = h[kGradScale];
    const float keep = __fsub_rn(1.0f, dampening);
    const bool first = h[kStep] == 1.0f;
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
        const float pi = p[i];
        float gi = __fmul_rn(__fmul_rn(g[i], gs), gate.mul);
        if (wd != 0.0f) gi = __fadd_rn(gi, __fmul_rn(wd, pi));
        const float b = first ? gi : __fadd_rn(__fmul_rn(buf[i], momentum), __fmul_rn(keep, gi));
        const float step = nesterov ? __fadd_rn(gi, __fmul_rn(momentum, b)) : b;
        p[i] = __fsub_rn(pi, __fmul_rn(lr, step));
        buf[i] = b;
    }
}

static void sgd_run(CudaCtx& c) {
    const int64_t n = c.in[0].numel();
    if (n == 0) return;
    const Params& p = c.p();
    sgd_kernel<<<grid_for(n, 256, sm_count() * 16), 256, 0, c.stream>>>(
        mut_ptr<float>(c, 0), c.in_ptr<float>(1), mut_ptr<float>(c, 2), c.in_ptr<float>(3), gstat_ptr(c, 4), n, p.f[0],
        p.f[1], p.i[0] != 0);
    GL_CUDA_LAUNCHED();
}
const CudaKernel cuda_sgd_step{sgd_run};

}  // namespace gl
