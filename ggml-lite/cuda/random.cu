// Random draws (CPU reference: ops/random.cpp): normal_noise, one element per thread, grid-stride.
// The seed, position and offset are read from the draw tensor on the device, so a captured graph
// draws new noise when the host writes a new position. The double math is ops/rng_normal.h's,
// whose device path uses round-to-nearest intrinsics only: the floats equal the CPU's.
#include "ggml-lite/cuda/kernel.cuh"
#include "ggml-lite/ops/rng_normal.h"

namespace gl {

__global__ void normal_noise_kernel(const int32_t* draw, float* y, int64_t n, int64_t batch, int64_t channels) {
    kernel_entry();
    const uint64_t seed = noise_draw_u64(draw, kNdSeed), counter = noise_draw_u64(draw, kNdCounter);
    const double offset = __longlong_as_double((long long)noise_draw_u64(draw, kNdOffset));
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
        y[i] = noise_element(seed, counter, offset, i, n, batch, channels);
}

static void normal_noise_run(CudaCtx& c) {
    const Shape& s = c.out_shape(0);
    const int64_t n = s.numel();
    normal_noise_kernel<<<grid_for(n, 256), 256, 0, c.stream>>>(c.in_ptr<int32_t>(0), c.out_ptr<float>(0), n, s.d[0],
                                                                s.last());
    GL_CUDA_LAUNCHED();
}
const CudaKernel cuda_normal_noise{normal_noise_run};

}  // namespace gl
