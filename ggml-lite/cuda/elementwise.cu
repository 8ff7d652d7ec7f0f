// Elementwise add / sub / mul with broadcasting (dense inputs, up to 4 dims aligned at the
// last), scale, and seeded dropout (mask from ops/rng.h, identical to the CPU backend; the seed
// optionally mixed with a per-step i32 seed input read on the device), and the in-place
// accumulate (ctl read on the device).
// Index-aligned, so safe when the planner places the output over input 0 (the vector path reads
// each access of a and b before it writes y's).
#include "ggml-lite/cuda/kernel.cuh"
#include "ggml-lite/ops/rng.h"

namespace gl {

struct Bcast {
    int64_t dim[4];
    int64_t sa[4], sb[4];
    int64_t n;
};

static void bcast_strides(const Shape& in, const Shape& out, int64_t* st) {
    int64_t s = 1;
    for (int k = 0; k < 4; k++) st[k] = 0;
    for (int i = out.nd - 1, j = in.nd - 1; i >= 0; i--, j--) {
        int64_t d = j >= 0 ? in.d[size_t(j)] : 1;
        st[4 - out.nd + i] = d == 1 ? 0 : s;
        s *= d;
    }
}

enum class BinOp { add, sub, mul };

template <class T, BinOp OP>
__device__ __forceinline__ T bin(T a, T b) {
    float x = to_f32(a), y = to_f32(b);
    return from_f32<T>(OP == BinOp::add ? x + y : OP == BinOp::sub ? x - y : x * y);
}

template <class T, BinOp OP>
__global__ void binary_same_kernel(const T* __restrict__ a, const T* __restrict__ b, T* y, int64_t n) {
    kernel_entry();
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
        y[i] = bin<T, OP>(a[i], b[i]);
}

template <class T, BinOp OP>
__global__ void binary_bcast_kernel(const T* __restrict__ a, const T* __restrict__ b, T* y, Bcast d) {
    kernel_entry();
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < d.n; i += int64_t(gridDim.x) * blockDim.x) {
        int64_t r = i, ia = 0, ib = 0;
        for (int k = 3; k >= 0; k--) {
            int64_t c = r % d.dim[k];
            r /= d.dim[k];
            ia += c * d.sa[k];
            ib += c * d.sb[k];
        }
        y[i] = bin<T, OP>(a[ia], b[ib]);
    }
}

// The vector path: 8 elements an access (16 bytes in bf16 / f16). a and y have out's shape; b has it
// too (inner = 0) or is out with one run of dims collapsed to 1: out viewed as [outer, mid, inner],
// b as [outer, 1, inner] (a bias: outer 1; SD's per-sample time embedding [B, 1, 1, C]: inner C).
// inner % 8 == 0, so an access of b never crosses its rows; I: the index type (32-bit below 2^31
// elements: the broadcast's division is per access).
template <class T, BinOp OP, class I>
__global__ void binary_vec_kernel(const T* a, const T* b, T* y, I nv, I mid_inner, I inner) {
    kernel_entry();
    for (I i = I(blockIdx.x) * I(blockDim.x) + I(threadIdx.x); i < nv; i += I(gridDim.x) * I(blockDim.x)) {
        const I e = i * 8, eb = inner == 0 ? e : (e / mid_inner) * inner + e % inner;
        const Vec8<T> va = *reinterpret_cast<const Vec8<T>*>(a + e), vb = *reinterpret_cast<const Vec8<T>*>(b + eb);
        Vec8<T> vo;
#pragma unroll
        for (int k = 0; k < 8; k++) vo.v[k] = bin<T, OP>(va.v[k], vb.v[k]);
        *reinterpret_cast<Vec8<T>*>(y + e) = vo;
    }
}

// Whether b (aligned right against out) is out with one run of dims collapsed to 1; then out is
// [outer, mid, inner] and b [outer, 1, inner].
static bool one_run_broadcast(const Shape& b, const Shape& out, int64_t& mid, int64_t& inner) {
    if (b.nd > out.nd) return false;
    auto bd = [&](int i) { return i - (out.nd - b.nd) >= 0 ? b.d[size_t(i - (out.nd - b.nd))] : int64_t(1); };
    int k0 = -1, k1 = -1;
    for (int i = 0; i < out.nd; i++)
        if (bd(i) != out.d[size_t(i)]) {
            if (k0 < 0) k0 = i;
            k1 = i;
        }
    if (k0 < 0) return false;
    mid = 1;
    inner = 1;
    for (int i = k0; i <= k1; i++) {
        if (bd(i) != 1) return false;
        mid *= out.d[size_t(i)];
    }
    for (int i = k1 + 1; i < out.nd; i++) inner *= out.d[size_t(i)];
    return true;
}

template <BinOp OP>
static void binary_run(CudaCtx& c) {
    const Shape& out = c.out_shape(0);
    int64_t n = out.numel();
    if (n == 0) return;
    dispatch_float(c.out_dtype(0), op_name(c.node.op), [&](auto tag) {
        using T = decltype(tag);
        // The vector path: a full operand first (add and mul commute), b full or one run broadcast.
        // GL_BINARY_VEC=0 keeps the scalar kernels (a comparison in one binary).
        static const bool vec_on = env_number("GL_BINARY_VEC", 1) != 0;
        int ia = 0, ib = 1;
        if (OP != BinOp::sub && c.in_shape(0) != out && c.in_shape(1) == out) std::swap(ia, ib);
        int64_t mid = 0, inner = 0;
        const bool same = c.in_shape(ib) == out;
        const bool vec = vec_on && c.in_shape(ia) == out && (same || (one_run_broadcast(c.in_shape(ib), out, mid, inner) &&
                                                           inner % 8 == 0 && mid > 1)) &&
                         n % 8 == 0 && vec8_aligned<T>(c.in_ptr(ia)) && vec8_aligned<T>(c.in_ptr(ib)) &&
                         vec8_aligned<T>(c.out_ptr(0));
        if (vec) {
            if (same) inner = 0;
            const int64_t nv = n / 8;
            const unsigned grid = grid_for(nv, 256);
            if (n < (int64_t(1) << 31))
                binary_vec_kernel<T, OP, int32_t><<<grid, 256, 0, c.stream>>>(
                    c.in_ptr<T>(ia), c.in_ptr<T>(ib), c.out_ptr<T>(0), int32_t(nv), int32_t(mid * inner), int32_t(inner));
            else
                binary_vec_kernel<T, OP, int64_t><<<grid, 256, 0, c.stream>>>(c.in_ptr<T>(ia), c.in_ptr<T>(ib),
                                                                           c.out_ptr<T>(0), nv, mid * inner, inner);
        } else if (c.in_shape(0) == out && c.in_shape(1) == out) {
            binary_same_kernel<T, OP><<<grid_for(n, 256), 256, 0, c.stream>>>(c.in_ptr<T>(0), c.in_ptr<T>(1), c.out_ptr<T>(0), n);
        } else {
            Bcast d{};
            for (int k = 0; k < 4; k++) d.dim[k] = 1;
            for (int i = 0; i < out.nd; i++) d.dim[4 - out.nd + i] = out.d[size_t(i)];
            bcast_strides(c.in_shape(0), out, d.sa);
            bcast_strides(c.in_shape(1), out, d.sb);
            d.n = n;
            binary_bcast_kernel<T, OP><<<grid_for(n, 256), 256, 0, c.stream>>>(c.in_ptr<T>(0), c.in_ptr<T>(1), c.out_ptr<T>(0), d);
        }
    });
    GL_CUDA_LAUNCHED();
}

const CudaKernel cuda_add{binary_run<BinOp::add>};
const CudaKernel cuda_sub{binary_run<BinOp::sub>};
const CudaKernel cuda_mul{binary_run<BinOp::mul>};

template <class T>
__global__ void scale_kernel(const T* x, T* y, int64_t n, float s) {
    kernel_entry();
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
        y[i] = from_f32<T>(s * to_f32(x[i]));
}
static void scale_run(CudaCtx& c) {
    int64_t n = c.out[0].numel();
    if (n == 0) return;
    dispatch_float(c.out_dtype(0), "scale", [&](auto tag) {
        using T = decltype(tag);
        scale_kernel<T><<<grid_for(n, 256), 256, 0, c.stream>>>(c.in_ptr<T>(0), c.out_ptr<T>(0), n, c.p().f[0]);
    });
    GL_CUDA_LAUNCHED();
}
const CudaKernel cuda_scale{scale_run};

// seed_input (nullable): the per-step i32 seed, read on the device so a replayed CUDA graph
// picks up the value the host wrote for this step.
template <class T>
__global__ void dropout_kernel(const T* x, T* y, int64_t n, float p, uint64_t seed, const int32_t* seed_input) {
    kernel_entry();
    const float keep_scale = 1.0f / (1.0f - p);
    if (seed_input) seed = dropout_step_seed(seed, *seed_input);
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
        y[i] = from_f32<T>(dropout_keep(seed, uint64_t(i), p) ? to_f32(x[i]) * keep_scale : 0.0f);
}
static void dropout_run(CudaCtx& c) {
    int64_t n = c.out[0].numel();
    if (n == 0) return;
    const int32_t* seed_input = c.in.size() > 1 ? c.in_ptr<int32_t>(1) : nullptr;
    dispatch_float(c.out_dtype(0), "dropout", [&](auto tag) {
        using T = decltype(tag);
        dropout_kernel<T><<<grid_for(n, 256), 256, 0, c.stream>>>(c.in_ptr<T>(0), c.out_ptr<T>(0), n, c.p().f[0],
                                                                    uint64_t(c.p().i[0]), seed_input);
    });
    GL_CUDA_LAUNCHED();
}
const CudaKernel cuda_dropout{dropout_run};

// acc = (ctl[0] != 0 ? 0 : acc) + ctl[1] * x; ctl is read on the device (written per micro-step).
template <class T>
__global__ void accumulate_kernel(float* acc, const T* x, const float* ctl, int64_t n) {
    kernel_entry();
    const bool reset = ctl[0] != 0.0f;
    const float w = ctl[1];
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
        acc[i] = (reset ? 0.0f : acc[i]) + w * to_f32(x[i]);
}
static void accumulate_run(CudaCtx& c) {
    const int64_t n = c.in[0].numel();
    if (n == 0) return;
    GL_CHECK(c.in_dtype(2) == DType::f32, "accumulate: ctl must be f32");
    dispatch_float(c.in_dtype(1), "accumulate", [&](auto tag) {
        using T = decltype(tag);
        accumulate_kernel<T><<<grid_for(n, 256), 256, 0, c.stream>>>(const_cast<float*>(c.in_ptr<float>(0)),
                                                                       c.in_ptr<T>(1), c.in_ptr<float>(2), n);
    });
    GL_CUDA_LAUNCHED();
}
const CudaKernel cuda_accumulate{accumulate_run};

}  // namespace gl
