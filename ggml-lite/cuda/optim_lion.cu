// Lion step, in place (CPU reference: ops/optim_lion.cpp): every tensor of a parameter group in one
// launch (cuda/multi_tensor.cuh: a block per tile of 1024 elements of one tensor), f32 param / grad
// / m. Explicit round-to-nearest intrinsics (no FMA contraction) so the sign of the interpolation,
// hence the step, matches the CPU bit for bit on the same inputs.
#include "ggml-lite/cuda/multi_tensor.cuh"
#include "ggml-lite/cuda/optim_common.cuh"

namespace gl {

constexpr int kLionTile = 1024;
using LionTable = TensorTable<3, table_capacity<3>()>;  // param, grad, m

__global__ void __launch_bounds__(256) lion_kernel(const __grid_constant__ LionTable t, const float* h,
                                                   const float* gstat) {
    kernel_entry();
    const Gate gate = load_gate(gstat);
    if (gate.skip) return;
    const float lr = h[kLr], b1 = h[kBeta1], b2 = h[kBeta2], gs = h[kGradScale];
    const float decay = __fsub_rn(1.0f, __fmul_rn(lr, h[kWeightDecay]));
    const float c1 = __fsub_rn(1.0f, b1), c2 = __fsub_rn(1.0f, b2);
    const LionTable::Tile tile = t.tile(blockIdx.x, kLionTile);
    float* p = t.at<float>(0, tile.tensor);
    const float* g = t.at<float>(1, tile.tensor);
    float* m = t.at<float>(2, tile.tensor);
    for (int64_t i = tile.begin + threadIdx.x; i < tile.end; i += blockDim.x) {
        const float gi = __fmul_rn(__fmul_rn(g[i], gs), gate.mul);
        const float mi = m[i];
        const float ci = __fadd_rn(__fmul_rn(mi, b1), __fmul_rn(c1, gi));
        const float u = ci > 0.0f ? 1.0f : (ci < 0.0f ? -1.0f : 0.0f);
        p[i] = __fsub_rn(__fmul_rn(p[i], decay), __fmul_rn(lr, u));
        m[i] = __fadd_rn(__fmul_rn(mi, b2), __fmul_rn(c2, gi));
    }
}

static void lion_run(CudaCtx& c) {
    const int n = int(c.p().i[1]);
    const float* hyper = c.in_ptr<float>(3 * n);
    const float* gstat = gstat_ptr(c, 3 * n + 1);
    for_each_input_table<3>(c, n, kLionTile, [&](const LionTable& t) {
        lion_kernel<<<unsigned(t.tiles()), 256, 0, c.stream>>>(t, hyper, gstat);
        GL_CUDA_LAUNCHED();
    });
}
const CudaKernel cuda_lion_step{lion_run};

}  // namespace gl
