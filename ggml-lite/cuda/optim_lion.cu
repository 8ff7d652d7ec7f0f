// Lion step, in place (CPU reference: ops/optim_lion.cpp): grid-stride, one element per thread,
// f32 param / grad / m. Explicit round-to-nearest intrinsics (no FMA contraction) so the sign of
// the interpolation, hence the step, matches the CPU bit for bit on the same inputs.
#include "ggml-lite/cuda/optim_common.cuh"

namespace gl {

__global__ void lion_kernel(float* p, const float* g, float* m, const float* h, const float* gstat, int64_t n) {
    const Gate gate = load_gate(gstat);
    if (gate.skip) return;
    const float lr = h[kLr], b1 = h[kBeta1], b2 = h[kBeta2], gs = h[kGradScale];
    const float decay = __fsub_rn(1.0f, __fmul_rn(lr, h[kWeightDecay]));
    const float c1 = __fsub_rn(1.0f, b1), c2 = __fsub_rn(1.0f, b2);
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
        const float gi = __fmul_rn(__fmul_rn(g[i], gs), gate.mul);
        const float mi = m[i];
        const float ci = __fadd_rn(__fmul_rn(mi, b1), __fmul_rn(c1, gi));
        const float u = ci > 0.0f ? 1.0f : (ci < 0.0f ? -1.0f : 0.0f);
        p[i] = __fsub_rn(__fmul_rn(p[i], decay), __fmul_rn(lr, u));
        m[i] = __fadd_rn(__fmul_rn(mi, b2), __fmul_rn(c2, gi));
    }
}

static void lion_run(CudaCtx& c) {
    const int64_t n = c.in[0].numel();
    if (n == 0) return;
    lion_kernel<<<grid_for(n, 256, sm_count() * 16), 256, 0, c.stream>>>(mut_ptr<float>(c, 0), c.in_ptr<float>(1),
                                                                  mut_ptr<float>(c, 2), c.in_ptr<float>(3),
                                                                  gstat_ptr(c, 4), n);
    GL_CUDA_LAUNCHED();
}
const CudaKernel cuda_lion_step{lion_run};

}  // namespace gl
