// AdEMAMix with fp32 state, in place (CPU reference: ops/optim_ademamix.cpp; the 8-bit step is in
// cuda/adam8bit.cu): grid-stride, one element per thread, the shared element update of
// ops/optim_ademamix.h (explicit round-to-nearest intrinsics, as the CPU computes).
#include "ggml-lite/cuda/optim_common.cuh"
#include "ggml-lite/ops/optim_ademamix.h"

namespace gl {

__global__ void ademamix_kernel(float* p, const float* g, float* m1, float* m2, float* nu, const float* h,
                                const float* gstat, int64_t n, AdemamixOptions o) {
    kernel_entry();
    const Gate gate = load_gate(gstat);
    if (gate.skip) return;
    const float f[4] = {o.alpha, o.beta3, o.t_alpha, o.t_beta3};
    const AdemamixConsts k = ademamix_consts(h, f);
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
        float a = m1[i], b = m2[i], v = nu[i];
        ademamix_moments(k, __fmul_rn(__fmul_rn(g[i], k.gs), gate.mul), a, b, v);
        p[i] = ademamix_param(k, p[i], a, b, v);
        m1[i] = a;
        m2[i] = b;
        nu[i] = v;
    }
}

static void ademamix_run(CudaCtx& c) {
    const int64_t n = c.in[0].numel();
    if (n == 0) return;
    const Params& p = c.p();
    const AdemamixOptions o{p.f[0], p.f[1], p.f[2], p.f[3]};
    ademamix_kernel<<<grid_for(n, 256, sm_count() * 16), 256, 0, c.stream>>>(
        mut_ptr<float>(c, 0), c.in_ptr<float>(1), mut_ptr<float>(c, 2), mut_ptr<float>(c, 3), mut_ptr<float>(c, 4),
        c.in_ptr<float>(5), gstat_ptr(c, 6), n, o);
    GL_CUDA_LAUNCHED();
}
const CudaKernel cuda_ademamix_step{ademamix_run};

}  // namespace gl
