// Activations (SiLU, GELU erf/tanh, QuickGELU), their gradient act_grad, GEGLU and its
// gradient (on 8-element vectors where the rows allow). Elementwise, index-aligned (safe in
// place); fp32 math, any float dtype.
#include "ggml-lite/cuda/kernel.cuh"
#include "ggml-lite/ops/act_math.h"

namespace gl {

namespace {

#define GRID_STRIDE(i, n) \
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < (n); i += int64_t(gridDim.x) * blockDim.x)

template <class T, Act K>
__global__ void act_kernel(const T* x, T* y, int64_t n) {
    kernel_entry();
    GRID_STRIDE(i, n) y[i] = from_f32<T>(act::value<K>(to_f32(x[i])));
}

template <class T, Act K>
__global__ void act_grad_kernel(const T* gy, const void* x, DType tx, T* gx, int64_t n) {
    kernel_entry();
    GRID_STRIDE(i, n) gx[i] = from_f32<T>(to_f32(gy[i]) * act::slope<K>(load_any(x, tx, i)));
}

template <class T>
__global__ void geglu_kernel(const T* x, T* y, int64_t F, int64_t n) {
    kernel_entry();
    GRID_STRIDE(i, n) {
        int64_t r = i / F, j = i - r * F;
        const T* h = x + r * 2 * F;
        y[i] = from_f32<T>(to_f32(h[j]) * act::value<Act::gelu_erf>(to_f32(h[F + j])));
    }
}

// One thread per pair (j, F + j): both are read before either is written (safe in place).
template <class T>
__global__ void geglu_grad_kernel(const T* x, const void* gy, DType tg, T* gx, int64_t F, int64_t n) {
    kernel_entry();
    GRID_STRIDE(i, n) {
        int64_t r = i / F, j = i - r * F;
        float h = to_f32(x[r * 2 * F + j]), gate = to_f32(x[r * 2 * F + F + j]), g = load_any(gy, tg, i);
        gx[r * 2 * F + j] = from_f32<T>(g * act::value<Act::gelu_erf>(gate));
        gx[r * 2 * F + F + j] = from_f32<T>(g * h * act::slope<Act::gelu_erf>(gate));
    }
}

// The same on 8-element vectors (F % 8 == 0, aligned rows): one index division per 8 outputs.
template <class T>
__global__ void geglu_vec_kernel(const T* x, T* y, int64_t F, int64_t nv) {
    kernel_entry();
    const int64_t Fv = F / 8;
    GRID_STRIDE(i, nv) {
        const int64_t r = i / Fv, q = i - r * Fv;
        const Vec8<T> h = reinterpret_cast<const Vec8<T>*>(x + r * 2 * F)[q];
        const Vec8<T> g = reinterpret_cast<const Vec8<T>*>(x + r * 2 * F + F)[q];
        Vec8<T> o;
#pragma unroll
        for (int e = 0; e < 8; e++) o.v[e] = from_f32<T>(to_f32(h.v[e]) * act::value<Act::gelu_erf>(to_f32(g.v[e])));
        reinterpret_cast<Vec8<T>*>(y)[i] = o;
    }
}

template <class T>
__global__ void geglu_grad_vec_kernel(const T* x, const T* gy, T* gx, int64_t F, int64_t nv) {
    kernel_entry();
    const int64_t Fv = F / 8;
    GRID_STRIDE(i, nv) {
        const int64_t r = i / Fv, q = i - r * Fv;
        const Vec8<T> h = reinterpret_cast<const Vec8<T>*>(x + r * 2 * F)[q];
        const Vec8<T> g = reinterpret_cast<const Vec8<T>*>(x + r * 2 * F + F)[q];
        const Vec8<T> d = reinterpret_cast<const Vec8<T>*>(gy)[i];
        Vec8<T> dh, dg;
#pragma unroll
        for (int e = 0; e < 8; e++) {
            const float gate = to_f32(g.v[e]), gye = to_f32(d.v[e]);
            dh.v[e] = from_f32<T>(gye * act::value<Act::gelu_erf>(gate));
            dg.v[e] = from_f32<T>(gye * to_f32(h.v[e]) * act::slope<Act::gelu_erf>(gate));
        }
        reinterpret_cast<Vec8<T>*>(gx + r * 2 * F)[q] = dh;  // both halves read above: safe in place
        reinterpret_cast<Vec8<T>*>(gx + r * 2 * F + F)[q] = dg;
    }
}

template <class T>
bool geglu_vec_ok(int64_t F, std::initializer_list<const void*> ptrs) {
    if (F % 8 != 0) return false;
    for (const void* p : ptrs)
        if (!vec8_aligned<T>(p)) return false;
    return true;
}

}  // namespace

static void act_run(CudaCtx& c) {
    int64_t n = c.out[0].numel();
    if (n == 0) return;
    dispatch_float(c.out_dtype(0), op_name(c.node.op), [&](auto tag) {
        using T = decltype(tag);
        act::dispatch(act::kind_of(c.node.op, c.p()), [&]<Act K>() {
            act_kernel<T, K><<<grid_for(n, 256), 256, 0, c.stream>>>(c.in_ptr<T>(0), c.out_ptr<T>(0), n);
        });
    });
    GL_CUDA_LAUNCHED();
}
const CudaKernel cuda_silu{act_run};
const CudaKernel cuda_gelu{act_run};
const CudaKernel cuda_quick_gelu{act_run};

static void act_grad_run(CudaCtx& c) {
    int64_t n = c.out[0].numel();
    if (n == 0) return;
    GL_CHECK(c.in_dtype(0) == c.out_dtype(0), "act_grad: gy and the output must share a dtype");
    dispatch_float(c.out_dtype(0), "act_grad", [&](auto tag) {
        using T = decltype(tag);
        act::dispatch(Act(c.p().i[0]), [&]<Act K>() {
            act_grad_kernel<T, K><<<grid_for(n, 256), 256, 0, c.stream>>>(c.in_ptr<T>(0), c.in_ptr(1), c.in_dtype(1),
                                                                          c.out_ptr<T>(0), n);
        });
    });
    GL_CUDA_LAUNCHED();
}
const CudaKernel cuda_act_grad{act_grad_run};

static void geglu_run(CudaCtx& c) {
    int64_t n = c.out[0].numel(), F = c.out_shape(0).last();
    if (n == 0) return;
    dispatch_float(c.out_dtype(0), "geglu", [&](auto tag) {
        using T = decltype(tag);
        if (geglu_vec_ok<T>(F, {c.in_ptr(0), c.out_ptr(0)}))
            geglu_vec_kernel<T><<<grid_for(n / 8, 256), 256, 0, c.stream>>>(c.in_ptr<T>(0), c.out_ptr<T>(0), F, n / 8);
        else
            geglu_kernel<T><<<grid_for(n, 256), 256, 0, c.stream>>>(c.in_ptr<T>(0), c.out_ptr<T>(0), F, n);
    });
    GL_CUDA_LAUNCHED();
}
const CudaKernel cuda_geglu{geglu_run};

static void geglu_grad_run(CudaCtx& c) {
    int64_t n = c.in[1].numel(), F = c.in_shape(1).last();
    if (n == 0) return;
    GL_CHECK(c.in_dtype(0) == c.out_dtype(0), "geglu_grad: x and the output must share a dtype");
    dispatch_float(c.out_dtype(0), "geglu_grad", [&](auto tag) {
        using T = decltype(tag);
        if (c.in_dtype(1) == c.out_dtype(0) && geglu_vec_ok<T>(F, {c.in_ptr(0), c.in_ptr(1), c.out_ptr(0)}))
            geglu_grad_vec_kernel<T><<<grid_for(n / 8, 256), 256, 0, c.stream>>>(c.in_ptr<T>(0), c.in_ptr<T>(1),
                                                                               c.out_ptr<T>(0), F, n / 8);
        else
            geglu_grad_kernel<T><<<grid_for(n, 256), 256, 0, c.stream>>>(c.in_ptr<T>(0), c.in_ptr(1), c.in_dtype(1),
                                                                         c.out_ptr<T>(0), F, n);
    });
    GL_CUDA_LAUNCHED();
}
const CudaKernel cuda_geglu_grad{geglu_grad_run};

}  // namespace gl
