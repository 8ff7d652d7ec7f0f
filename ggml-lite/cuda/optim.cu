// Optimizer steps, in place: AdamW on fp32 state (grid-stride, one element per thread).
// (8-bit AdamW: cuda/adam8bit.cu.) Arithmetic uses explicit round-to-nearest intrinsics (no FMA contraction) so results
// match the CPU reference bit for bit on the same inputs.
#include <algorithm>

#include "ggml-lite/cuda/kernel.cuh"
#include "ggml-lite/cuda/optim_common.cuh"

namespace gl {

__global__ void adamw_kernel(float* p, const float* g, float* m, float* v, const float* hyper, int64_t n, bool after) {
    AdamConsts k = adam_consts(hyper, false);
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
        float gi = __fmul_rn(g[i], k.gs);
        float pi = after ? p[i] : __fmul_rn(p[i], k.decay);
        float mi = __fadd_rn(m[i], __fmul_rn(__fsub_rn(1.0f, k.b1), __fsub_rn(gi, m[i])));
        float vi = __fadd_rn(__fmul_rn(v[i], k.b2), __fmul_rn(__fsub_rn(1.0f, k.b2), __fmul_rn(gi, gi)));
        float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), k.corr2), k.eps);
        pi = __fsub_rn(pi, __fmul_rn(k.step_size, __fdiv_rn(mi, denom)));
        p[i] = after ? __fmul_rn(pi, k.decay) : pi;
        m[i] = mi;
        v[i] = vi;
    }
}

static void adamw_run(CudaCtx& c) {
    int64_t n = c.in[0].numel();
    if (n == 0) return;
    adamw_kernel<<<grid_for(n, 256, 132 * 16), 256, 0, c.stream>>>(
        const_cast<float*>(c.in_ptr<float>(0)), c.in_ptr<float>(1), const_cast<float*>(c.in_ptr<float>(2)),
        const_cast<float*>(c.in_ptr<float>(3)), c.in_ptr<float>(4), n, c.p().i[0] != 0);
    GL_CUDA_LAUNCHED();
}
const CudaKernel cuda_adamw_step{adamw_run};

}  // namespace gl
