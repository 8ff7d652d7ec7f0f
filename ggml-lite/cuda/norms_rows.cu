// The row normalisations of the norms family (the last dim of [..., D]): layer_norm, a warp per row
// held in registers (a block per row for odd widths), its dgamma / dbeta column sums over fixed row
// chunks, a frozen affine's dx alone with an optional residual (ops/norm_params.h, ops/residual.h);
// softmax, a block per row. Group norm is in norms.cu. All reductions use fixed orders: deterministic.
#include <algorithm>

#include "ggml-lite/cuda/device.cuh"
#include "ggml-lite/cuda/kernel.cuh"
#include "ggml-lite/ops/norm_params.h"
#include "ggml-lite/ops/residual.h"

namespace gl {

// ---------------- layer norm ----------------
// Rows of width D % 8 == 0 up to 2048 (SD's 320 / 640 / 1280, CLIP's 768), 16-byte aligned: a warp
// per row holding it in registers (NV vectors of 8 per lane), read once, no block barriers; the
// other widths: a block per row. Both sum in double; dgamma / dbeta (column sums over fixed row
// chunks) only when the node makes them (not for a frozen affine, ops/norm_params.h).

namespace {

constexpr int kLnWarpRows = 8;  // rows (warps) per block of the warp kernels
constexpr int kLnMaxNV = 8;     // D <= 32 lanes x 8 vectors x 8

template <class T>
bool ln_warp_ok(int64_t D, std::initializer_list<const void*> ptrs) {
    if (D % 8 != 0 || D > 32 * 8 * kLnMaxNV) return false;
    for (const void* p : ptrs)
        if (reinterpret_cast<uintptr_t>(p) % sizeof(Vec8<T>) != 0) return false;
    return true;
}
inline unsigned ln_warp_grid(int64_t rows) { return unsigned(ceil_div(rows, int64_t(kLnWarpRows))); }

template <class T, int NV>
__global__ void ln_forward_warp(const T* x, const void* gm, DType tg, const void* bt, DType tb, T* y, float* mean,
                                float* rstd, int64_t rows, int D, float eps) {
    kernel_entry();
    const int lane = threadIdx.x & 31;
    const int64_t r = int64_t(blockIdx.x) * kLnWarpRows + (threadIdx.x >> 5);
    if (r >= rows) return;  // whole warps
    const int nv = D / 8;
    // A lane's sums (at most 8 NV terms) in float, the warp's in double; the variance is of the
    // centred values (two passes over the registers).
    float v[NV][8];
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < NV; i++) {
        const int q = lane + 32 * i;
        if (q >= nv) continue;
        const Vec8<T> in = reinterpret_cast<const Vec8<T>*>(x + r * D)[q];
#pragma unroll
        for (int j = 0; j < 8; j++) {
            v[i][j] = to_f32(in.v[j]);
            s += v[i][j];
        }
    }
    const float mu = float(warp_sum(double(s)) / double(D));
    float var = 0.0f;
#pragma unroll
    for (int i = 0; i < NV; i++)
        if (lane + 32 * i < nv)
#pragma unroll
            for (int j = 0; j < 8; j++) {
                const float e = v[i][j] - mu;
                var += e * e;
            }
    const float rs = float(1.0 / sqrt(warp_sum(double(var)) / double(D) + double(eps)));
    if (lane == 0) {
        mean[r] = mu;
        rstd[r] = rs;
    }
#pragma unroll
    for (int i = 0; i < NV; i++) {  // y may be x's bytes: a lane writes only what it read
        const int q = lane + 32 * i;
        if (q >= nv) continue;
        Vec8<T> out;
#pragma unroll
        for (int j = 0; j < 8; j++)
            out.v[j] = from_f32<T>((v[i][j] - mu) * rs * load_any(gm, tg, q * 8 + j) + load_any(bt, tb, q * 8 + j));
        reinterpret_cast<Vec8<T>*>(y + r * D)[q] = out;
    }
}

// dx = rstd * (gy * gamma - mean(gy * gamma) - xhat * mean(gy * gamma * xhat)) (+ res).
template <class T, int NV>
__global__ void ln_backward_dx_warp(const T* gy, const T* x, const void* gm, DType tg, const float* mean,
                                    const float* rstd, const T* res, T* dx, int64_t rows, int D) {
    kernel_entry();
    const int lane = threadIdx.x & 31;
    const int64_t r = int64_t(blockIdx.x) * kLnWarpRows + (threadIdx.x >> 5);
    if (r >= rows) return;
    const int nv = D / 8;
    const float mu = mean[r], rs = rstd[r];
    // gy * gamma, xhat. A lane's sums (at most 8 NV terms) are in float, the warp's in double: the
    // per-element arithmetic stays off the FP64 and conversion pipes (it was, and the pass ran at a
    // third of its memory rate).
    float g[NV][8], xh[NV][8];
    float s1 = 0.0f, s2 = 0.0f;
#pragma unroll
    for (int i = 0; i < NV; i++) {
        const int q = lane + 32 * i;
        if (q >= nv) continue;
        const Vec8<T> gv = reinterpret_cast<const Vec8<T>*>(gy + r * D)[q];
        const Vec8<T> xv = reinterpret_cast<const Vec8<T>*>(x + r * D)[q];
#pragma unroll
        for (int j = 0; j < 8; j++) {
            g[i][j] = to_f32(gv.v[j]) * load_any(gm, tg, q * 8 + j);
            xh[i][j] = (to_f32(xv.v[j]) - mu) * rs;
            s1 += g[i][j];
            s2 += g[i][j] * xh[i][j];
        }
    }
    const float a = float(warp_sum(double(s1)) / double(D)), b = float(warp_sum(double(s2)) / double(D));
#pragma unroll
    for (int i = 0; i < NV; i++) {  // dx may be res's bytes: each element is read before it is written
        const int q = lane + 32 * i;
        if (q >= nv) continue;
        Vec8<T> rv;
        if (res) rv = reinterpret_cast<const Vec8<T>*>(res + r * D)[q];
        Vec8<T> out;
#pragma unroll
        for (int j = 0; j < 8; j++) {
            float d = rs * (g[i][j] - a - xh[i][j] * b);
            if (res) d += to_f32(rv.v[j]);
            out.v[j] = from_f32<T>(d);
        }
        reinterpret_cast<Vec8<T>*>(dx + r * D)[q] = out;
    }
}

template <template <class, int> class K, class T, class... A>
void ln_launch_warp(int64_t D, cudaStream_t st, unsigned grid, A... args) {
    const int nv = int(ceil_div(D / 8, int64_t(32)));
    const unsigned threads = 32 * kLnWarpRows;
    switch (nv) {
        case 1: K<T, 1>::launch(grid, threads, st, args...); break;
        case 2: K<T, 2>::launch(grid, threads, st, args...); break;
        case 3: K<T, 3>::launch(grid, threads, st, args...); break;
        case 4: K<T, 4>::launch(grid, threads, st, args...); break;
        case 5: K<T, 5>::launch(grid, threads, st, args...); break;
        case 6: K<T, 6>::launch(grid, threads, st, args...); break;
        case 7: K<T, 7>::launch(grid, threads, st, args...); break;
        default: K<T, 8>::launch(grid, threads, st, args...); break;
    }
}
template <class T, int NV>
struct LnForwardWarp {
    template <class... A>
    static void launch(unsigned grid, unsigned threads, cudaStream_t st, A... args) {
        ln_forward_warp<T, NV><<<grid, threads, 0, st>>>(args...);
    }
};
template <class T, int NV>
struct LnBackwardWarp {
    template <class... A>
    static void launch(unsigned grid, unsigned threads, cudaStream_t st, A... args) {
        ln_backward_dx_warp<T, NV><<<grid, threads, 0, st>>>(args...);
    }
};

template <class T>
__global__ void ln_forward(const T* x, const void* gm, DType tg, const void* bt, DType tb, T* y, float* mean,
                           float* rstd, int64_t D, float eps) {
    kernel_entry();
    __shared__ double sh[32];
    int64_t r = blockIdx.x;
    const T* xr = x + r * D;
    double s = 0;
    for (int64_t k = threadIdx.x; k < D; k += blockDim.x) s += to_f32(xr[k]);
    double mu_d = block_sum(s, sh) / double(D);
    double v = 0;
    for (int64_t k = threadIdx.x; k < D; k += blockDim.x) {
        double e = double(to_f32(xr[k])) - mu_d;
        v += e * e;
    }
    v = block_sum(v, sh);
    float mu = float(mu_d), rs = float(1.0 / sqrt(v / double(D) + double(eps)));
    if (threadIdx.x == 0) {
        mean[r] = mu;
        rstd[r] = rs;
    }
    __syncthreads();  // every thread has read the row before any writes over it (in place)
    for (int64_t k = threadIdx.x; k < D; k += blockDim.x)
        y[r * D + k] = from_f32<T>((to_f32(xr[k]) - mu) * rs * load_any(gm, tg, k) + load_any(bt, tb, k));
}

template <class T>
__global__ void ln_backward_dx(const T* gy, const T* x, const void* gm, DType tg, const float* mean, const float* rstd,
                               const T* res, T* dx, int64_t D) {
    kernel_entry();
    __shared__ double sh[32];
    int64_t r = blockIdx.x;
    float mu = mean[r], rs = rstd[r];
    double s1 = 0, s2 = 0;
    for (int64_t k = threadIdx.x; k < D; k += blockDim.x) {
        double dxh = double(to_f32(gy[r * D + k])) * load_any(gm, tg, k);
        s1 += dxh;
        s2 += dxh * double((to_f32(x[r * D + k]) - mu) * rs);
    }
    double a = block_sum(s1, sh) / double(D);
    double b = block_sum(s2, sh) / double(D);
    for (int64_t k = threadIdx.x; k < D; k += blockDim.x) {
        double xh = double((to_f32(x[r * D + k]) - mu) * rs);
        float d = float(double(rs) * (double(to_f32(gy[r * D + k])) * load_any(gm, tg, k) - a - xh * b));
        if (res) d += to_f32(res[r * D + k]);
        dx[r * D + k] = from_f32<T>(d);
    }
}

// part[(chunk * D + k) * 2 + {0, 1}] = {sum gy * xhat, sum gy} over the chunk's rows.
template <class T>
__global__ void ln_backward_partial(const T* gy, const T* x, const float* mean, const float* rstd, double* part,
                                    int64_t rows, int64_t D, int64_t rows_per_chunk) {
    kernel_entry();
    int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x, ch = blockIdx.y;
    if (k >= D) return;
    int64_t r0 = ch * rows_per_chunk, r1 = min(rows, r0 + rows_per_chunk);
    double sg = 0, sb = 0;
    for (int64_t r = r0; r < r1; r++) {
        double g = to_f32(gy[r * D + k]);
        sg += g * double((to_f32(x[r * D + k]) - mean[r]) * rstd[r]);
        sb += g;
    }
    part[(ch * D + k) * 2] = sg;
    part[(ch * D + k) * 2 + 1] = sb;
}

template <class TG>
__global__ void ln_backward_final(const double* part, TG* dgamma, TG* dbeta, int64_t D, int64_t chunks) {
    kernel_entry();
    int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
    if (k >= D) return;
    double sg = 0, sb = 0;
    for (int64_t ch = 0; ch < chunks; ch++) {
        sg += part[(ch * D + k) * 2];
        sb += part[(ch * D + k) * 2 + 1];
    }
    dgamma[k] = from_f32<TG>(float(sg));
    dbeta[k] = from_f32<TG>(float(sb));
}

int64_t ln_chunks(int64_t rows) { return std::min<int64_t>(rows, 64); }

}  // namespace

static void layer_norm_run(CudaCtx& c) {
    const int64_t D = c.in_shape(0).last(), rows = c.in[0].numel() / D;
    dispatch_float(c.in_dtype(0), "layer_norm", [&](auto tag) {
        using T = decltype(tag);
        if (ln_warp_ok<T>(D, {c.in_ptr(0), c.out_ptr(0)})) {
            ln_launch_warp<LnForwardWarp, T>(D, c.stream, ln_warp_grid(rows), c.in_ptr<T>(0), c.in_ptr(1),
                                             c.in_dtype(1), c.in_ptr(2), c.in_dtype(2), c.out_ptr<T>(0),
                                             c.out_ptr<float>(1), c.out_ptr<float>(2), rows, int(D), c.p().f[0]);
        } else {
            ln_forward<T><<<unsigned(rows), 256, 0, c.stream>>>(c.in_ptr<T>(0), c.in_ptr(1), c.in_dtype(1),
                                                               c.in_ptr(2), c.in_dtype(2), c.out_ptr<T>(0),
                                                               c.out_ptr<float>(1), c.out_ptr<float>(2), D, c.p().f[0]);
        }
    });
    GL_CUDA_LAUNCHED();
}
const CudaKernel cuda_layer_norm{layer_norm_run};

static size_t ln_grad_ws(const Graph& g, const Node& n) {
    if (norm_dx_only(n.p)) return 0;
    const Shape& x = g.shape(n.in[1]);
    return size_t(ln_chunks(x.numel() / x.last()) * x.last() * 2) * sizeof(double);
}
static void layer_norm_grad_run(CudaCtx& c) {
    const int64_t D = c.in_shape(1).last(), rows = c.in[1].numel() / D, chunks = ln_chunks(rows);
    const int64_t per = ceil_div(rows, chunks);
    GL_CHECK(c.in_dtype(0) == c.in_dtype(1), "layer_norm_grad: gy and x must share a dtype on CUDA");
    const void* res = has_residual(c.p()) ? c.in_ptr(residual_index(c.p(), int(c.in.size()))) : nullptr;
    dispatch_float(c.in_dtype(1), "layer_norm_grad", [&](auto tag) {
        using T = decltype(tag);
        const T* r = static_cast<const T*>(res);
        if (ln_warp_ok<T>(D, {c.in_ptr(0), c.in_ptr(1), res, c.out_ptr(0)})) {
            ln_launch_warp<LnBackwardWarp, T>(D, c.stream, ln_warp_grid(rows), c.in_ptr<T>(0), c.in_ptr<T>(1),
                                              c.in_ptr(2), c.in_dtype(2), c.in_ptr<float>(4), c.in_ptr<float>(5), r,
                                              c.out_ptr<T>(0), rows, int(D));
        } else {
            ln_backward_dx<T><<<unsigned(rows), 256, 0, c.stream>>>(c.in_ptr<T>(0), c.in_ptr<T>(1), c.in_ptr(2),
                                                                   c.in_dtype(2), c.in_ptr<float>(4),
                                                                   c.in_ptr<float>(5), r, c.out_ptr<T>(0), D);
        }
        GL_CUDA_LAUNCHED();
        if (norm_dx_only(c.p())) return;
        GL_CHECK(c.out_dtype(1) == c.out_dtype(2), "layer_norm_grad: gamma and beta must share a dtype on CUDA");
        double* part = reinterpret_cast<double*>(c.workspace);
        ln_backward_partial<T><<<dim3(unsigned(ceil_div(D, 128)), unsigned(chunks)), 128, 0, c.stream>>>(
            c.in_ptr<T>(0), c.in_ptr<T>(1), c.in_ptr<float>(4), c.in_ptr<float>(5), part, rows, D, per);
        GL_CUDA_LAUNCHED();
        dispatch_float(c.out_dtype(1), "layer_norm_grad", [&](auto gtag) {
            using TG = decltype(gtag);
            ln_backward_final<TG><<<unsigned(ceil_div(D, 128)), 128, 0, c.stream>>>(part, c.out_ptr<TG>(1),
                                                                                   c.out_ptr<TG>(2), D, chunks);
        });
    });
    GL_CUDA_LAUNCHED();
}
const CudaKernel cuda_layer_norm_grad{layer_norm_grad_run, ln_grad_ws};

// ---------------- softmax ----------------

namespace {

template <class T>
__global__ void softmax_kernel(const T* x, T* y, int64_t D, float sc) {
    kernel_entry();
    __shared__ double shd[32];
    __shared__ float shf[32];
    int64_t r = blockIdx.x;
    const T* xr = x + r * D;
    float m = -INFINITY;
    for (int64_t k = threadIdx.x; k < D; k += blockDim.x) m = fmaxf(m, sc * to_f32(xr[k]));
    m = block_max(m, shf);
    double s = 0;
    for (int64_t k = threadIdx.x; k < D; k += blockDim.x) s += exp(double(sc) * to_f32(xr[k]) - double(m));
    double inv = 1.0 / block_sum(s, shd);
    __syncthreads();  // all reads of the row done before writes (in place)
    for (int64_t k = threadIdx.x; k < D; k += blockDim.x)
        y[r * D + k] = from_f32<T>(float(exp(double(sc) * to_f32(xr[k]) - double(m)) * inv));
}

template <class T>
__global__ void softmax_grad_kernel(const T* y, const void* gy, DType tg, T* dx, int64_t D, float sc) {
    kernel_entry();
    __shared__ double sh[32];
    int64_t r = blockIdx.x;
    double dot = 0;
    for (int64_t k = threadIdx.x; k < D; k += blockDim.x) dot += double(to_f32(y[r * D + k])) * load_any(gy, tg, r * D + k);
    dot = block_sum(dot, sh);
    for (int64_t k = threadIdx.x; k < D; k += blockDim.x)
        dx[r * D + k] = from_f32<T>(float(double(sc) * to_f32(y[r * D + k]) * (load_any(gy, tg, r * D + k) - dot)));
}

}  // namespace

static void softmax_run(CudaCtx& c) {
    const int64_t D = c.in_shape(0).last(), rows = c.in[0].numel() / D;
    dispatch_float(c.in_dtype(0), "softmax", [&](auto tag) {
        using T = decltype(tag);
        softmax_kernel<T><<<unsigned(rows), 256, 0, c.stream>>>(c.in_ptr<T>(0), c.out_ptr<T>(0), D, c.p().f[0]);
    });
    GL_CUDA_LAUNCHED();
}
const CudaKernel cuda_softmax{softmax_run};

static void softmax_grad_run(CudaCtx& c) {
    const int64_t D = c.in_shape(0).last(), rows = c.in[0].numel() / D;
    dispatch_float(c.in_dtype(0), "softmax_grad", [&](auto tag) {
        using T = decltype(tag);
        softmax_grad_kernel<T><<<unsigned(rows), 256, 0, c.stream>>>(c.in_ptr<T>(0), c.in_ptr(1), c.in_dtype(1),
                                                                    c.out_ptr<T>(0), D, c.p().f[0]);
    });
    GL_CUDA_LAUNCHED();
}
const CudaKernel cuda_softmax_grad{softmax_grad_run};

}  // namespace gl
