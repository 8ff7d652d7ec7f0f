// Embeddings: row gather (token / position tables), its gradient as an ordered scatter-add
// (one thread per column walks the positions in order: deterministic, no atomics), and
// diffusers' sinusoidal timestep embedding. Out-of-range ids read and write nothing (their
// output rows are zero); the CPU backend rejects them with an error, and the trainer
// validates ids when it tokenises.
#include "ggml-lite/cuda/kernel.cuh"

namespace gl {

template <class T>
__global__ void embedding_kernel(const T* table, const int32_t* ids, T* y, int64_t V, int64_t D, int64_t n) {
    kernel_entry();
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n * D; i += int64_t(gridDim.x) * blockDim.x) {
        int64_t r = i / D, j = i - r * D;
        int32_t id = ids[r];
        y[i] = (id >= 0 && id < V) ? table[int64_t(id) * D + j] : from_f32<T>(0.0f);
    }
}

static void embedding_run(CudaCtx& c) {
    const int64_t V = c.in_shape(0).d[0], D = c.in_shape(0).d[1], n = c.in[1].numel();
    if (n * D == 0) return;
    dispatch_float(c.out_dtype(0), "embedding", [&](auto tag) {
        using T = decltype(tag);
        embedding_kernel<T><<<grid_for(n * D, 256), 256, 0, c.stream>>>(c.in_ptr<T>(0), c.in_ptr<int32_t>(1),
                                                                         c.out_ptr<T>(0), V, D, n);
    });
    GL_CUDA_LAUNCHED();
}
const CudaKernel cuda_embedding{embedding_run};

template <class T>
__global__ void embedding_grad_kernel(const T* gy, const int32_t* ids, float* gt, int64_t V, int64_t D, int64_t n) {
    kernel_entry();
    int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
    if (j >= D) return;
    for (int64_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id >= 0 && id < V) gt[int64_t(id) * D + j] += to_f32(gy[i * D + j]);
    }
}

static void embedding_grad_run(CudaCtx& c) {
    const int64_t V = c.p().i[0], D = c.in_shape(0).last(), n = c.in[1].numel();
    GL_CUDA_CHECK(cudaMemsetAsync(c.out_ptr(0), 0, size_t(V * D) * sizeof(float), c.stream));
    if (n * D == 0) return;
    dispatch_float(c.in_dtype(0), "embedding_grad", [&](auto tag) {
        using T = decltype(tag);
        embedding_grad_kernel<T><<<unsigned(ceil_div(D, 128)), 128, 0, c.stream>>>(c.in_ptr<T>(0), c.in_ptr<int32_t>(1),
                                                                                   c.out_ptr<float>(0), V, D, n);
    });
    GL_CUDA_LAUNCHED();
}
const CudaKernel cuda_embedding_grad{embedding_grad_run};

template <class T>
__global__ void timestep_kernel(const T* t, float* y, int64_t B, int64_t dim, bool flip, float shift, float neg_log_period) {
    kernel_entry();
    const int64_t half = dim / 2;
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < B * dim; i += int64_t(gridDim.x) * blockDim.x) {
        int64_t b = i / dim, j = i - b * dim;
        float v = 0.0f;
        if (j < 2 * half) {
            bool first = j < half;
            int64_t k = first ? j : j - half;
            float freq = expf(neg_log_period * float(k) / (float(half) - shift));
            float arg = to_f32(t[b]) * freq;
            bool is_sin = first != flip;
            v = is_sin ? sinf(arg) : cosf(arg);
        }
        y[i] = v;
    }
}

static void timestep_run(CudaCtx& c) {
    const int64_t B = c.in_shape(0).d[0], dim = c.p().i[0];
    if (B * dim == 0) return;
    dispatch_float(c.in_dtype(0), "timestep_embedding", [&](auto tag) {
        using T = decltype(tag);
        timestep_kernel<T><<<grid_for(B * dim, 256), 256, 0, c.stream>>>(c.in_ptr<T>(0), c.out_ptr<float>(0), B, dim,
                                                                          c.p().i[1] != 0, c.p().f[0],
                                                                          -std::log(c.p().f[1]));
    });
    GL_CUDA_LAUNCHED();
}
const CudaKernel cuda_timestep_embedding{timestep_run};

}  // namespace gl
