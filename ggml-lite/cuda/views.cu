// Views (no kernel), dense copies, concatenation, fill and dtype casts.
// Layout: any dense tensor; contiguous() reads any strided view.
#include "ggml-lite/cuda/kernel.cuh"
#include "ggml-lite/cuda/multi_tensor.cuh"

namespace gl {

const CudaKernel cuda_reshape{nullptr};
const CudaKernel cuda_permute{nullptr};
const CudaKernel cuda_slice{nullptr};
const CudaKernel cuda_expand{nullptr};

static void contiguous_run(CudaCtx& c) { launch_densify(c.in[0], c.out_ptr(0), c.stream); }
const CudaKernel cuda_contiguous{contiguous_run, nullptr, kCudaStrided};

// Concatenation along axis: each input is `outer` rows of w bytes, placed at column `at`
// of output rows of `row` bytes: one 2-D copy per input.
static void concat_run(CudaCtx& c) {
    const Shape& out = c.out_shape(0);
    int axis = int(c.p().i[0]);
    size_t es = dtype_size(c.out_dtype(0));
    int64_t outer = 1, inner = 1;
    for (int k = 0; k < axis; k++) outer *= out.d[size_t(k)];
    for (int k = axis + 1; k < out.nd; k++) inner *= out.d[size_t(k)];
    size_t row = size_t(out.d[size_t(axis)] * inner) * es, at = 0;
    for (int i = 0; i < int(c.in.size()); i++) {
        size_t w = size_t(c.in_shape(i).d[size_t(axis)] * inner) * es;
        if (w && outer)
            GL_CUDA_CHECK(cudaMemcpy2DAsync(c.out_ptr<char>(0) + at, row, c.in_ptr(i), w, w, size_t(outer),
                                            cudaMemcpyDeviceToDevice, c.stream));
        at += w;
    }
}
const CudaKernel cuda_concat{concat_run};

template <class T>
__global__ void fill_kernel(T* y, int64_t n, float v) {
    kernel_entry();
    T tv = from_f32<T>(v);
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) y[i] = tv;
}
template <class T>
__global__ void fill_int_kernel(T* y, int64_t n, T v) {
    kernel_entry();
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) y[i] = v;
}

static void fill_run(CudaCtx& c) {
    int64_t n = c.out[0].numel();
    float v = c.p().f[0];
    DType t = c.out_dtype(0);
    if (dtype_is_float(t)) {
        dispatch_float(t, "fill", [&](auto tag) {
            using T = decltype(tag);
            fill_kernel<T><<<grid_for(n, 256), 256, 0, c.stream>>>(c.out_ptr<T>(0), n, v);
        });
    } else if (t == DType::i32) {
        fill_int_kernel<int32_t><<<grid_for(n, 256), 256, 0, c.stream>>>(c.out_ptr<int32_t>(0), n, int32_t(v));
    } else if (t == DType::u8) {
        fill_int_kernel<uint8_t><<<grid_for(n, 256), 256, 0, c.stream>>>(c.out_ptr<uint8_t>(0), n, uint8_t(v));
    } else {
        fill_int_kernel<int8_t><<<grid_for(n, 256), 256, 0, c.stream>>>(c.out_ptr<int8_t>(0), n, int8_t(v));
    }
    GL_CUDA_LAUNCHED();
}
const CudaKernel cuda_fill{fill_run};

// Any dtype to any dtype through f32 (exact for every f16/bf16/i8/u8 value), round to nearest
// even for f16/bf16, round and saturate for integers, as dtype.cpp does on the host.
__device__ __forceinline__ float load_dt(const void* p, DType t, int64_t i) {
    switch (t) {
        case DType::i32: return float(static_cast<const int32_t*>(p)[i]);
        case DType::u8: return float(static_cast<const uint8_t*>(p)[i]);
        case DType::i8: return float(static_cast<const int8_t*>(p)[i]);
        default: return load_any(p, t, i);
    }
}
__device__ __forceinline__ void store_dt(void* p, DType t, int64_t i, float v) {
    switch (t) {
        case DType::f32: static_cast<float*>(p)[i] = v; return;
        case DType::bf16: static_cast<__nv_bfloat16*>(p)[i] = from_f32<__nv_bfloat16>(v); return;
        case DType::f16: static_cast<__half*>(p)[i] = from_f32<__half>(v); return;
        default: break;
    }
    float r = isnan(v) ? 0.0f : rintf(v);
    if (t == DType::i32) static_cast<int32_t*>(p)[i] = int32_t(fminf(fmaxf(r, -2147483648.0f), 2147483520.0f));
    if (t == DType::u8) static_cast<uint8_t*>(p)[i] = uint8_t(fminf(fmaxf(r, 0.0f), 255.0f));
    if (t == DType::i8) static_cast<int8_t*>(p)[i] = int8_t(fminf(fmaxf(r, -128.0f), 127.0f));
}

__global__ void cast_kernel(const void* x, DType tx, void* y, DType ty, int64_t n) {
    kernel_entry();
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
        store_dt(y, ty, i, load_dt(x, tx, i));
}
static void cast_run(CudaCtx& c) {
    int64_t n = c.out[0].numel();
    if (c.in_dtype(0) == c.out_dtype(0)) {
        GL_CUDA_CHECK(cudaMemcpyAsync(c.out_ptr(0), c.in_ptr(0), size_t(n) * dtype_size(c.out_dtype(0)),
                                      cudaMemcpyDeviceToDevice, c.stream));
        return;
    }
    cast_kernel<<<grid_for(n, 256), 256, 0, c.stream>>>(c.in_ptr(0), c.in_dtype(0), c.out_ptr(0), c.out_dtype(0), n);
    GL_CUDA_LAUNCHED();
}
const CudaKernel cuda_cast{cast_run};

// cast_multi: every tensor in one launch (cuda/multi_tensor.cuh), a block per tile of 2048 elements;
// the scale multiplies in f32 with round-to-nearest (no contraction), as the CPU does.
constexpr int kCastTile = 2048;
using CastTable = TensorTable<2, table_capacity<2>()>;  // x, y

__global__ void cast_multi_kernel(const __grid_constant__ CastTable t, DType tx, DType ty, float s) {
    kernel_entry();
    const CastTable::Tile tile = t.tile(blockIdx.x, kCastTile);
    const void* x = t.ptr[0][tile.tensor];
    void* y = t.ptr[1][tile.tensor];
    for (int64_t i = tile.begin + threadIdx.x; i < tile.end; i += blockDim.x)
        store_dt(y, ty, i, s == 1.0f ? load_dt(x, tx, i) : __fmul_rn(load_dt(x, tx, i), s));
}
static void cast_multi_run(CudaCtx& c) {
    const int n = int(c.in.size());
    for_each_table<2>(
        n, [&](int k) { return c.in[size_t(k)].numel(); },
        [&](int o, int k) { return o == 0 ? const_cast<void*>(c.in_ptr(k)) : c.out_ptr(k); }, kCastTile,
        [&](const CastTable& t) {
            cast_multi_kernel<<<unsigned(t.tiles()), 256, 0, c.stream>>>(t, c.in_dtype(0), c.out_dtype(0), c.p().f[0]);
            GL_CUDA_LAUNCHED();
        });
}
const CudaKernel cuda_cast_multi{cast_multi_run};

}  // namespace gl
