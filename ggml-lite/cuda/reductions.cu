// Reductions (sum, mean, sum_to), the MSE loss and the weighted diffusion loss (l2 / l1 /
// pseudo-Huber, per-sample weights) with their gradients.
// A reduction maps a dense input (padded to 4 dims) onto an output whose every dim is kept
// or 1. Work splits into a fixed number of chunks along the reduced extent (a function of
// the shapes only), each writing a double partial to the workspace; a final pass adds the
// partials in chunk order. Results are therefore deterministic run to run.
#include <algorithm>

#include "ggml-lite/cuda/kernel.cuh"
#include "ggml-lite/ops/loss_math.h"

namespace gl {

namespace {

struct Red {
    int64_t xs[4], os[4], rs[4], st[4];  // input dims, output dims, reduced dims, input strides
    int64_t O, R, chunks, per_chunk;
    double mul;
};

Red make_red(const Shape& in, const Shape& out, double mul) {
    Red r{};
    for (int k = 0; k < 4; k++) r.xs[k] = r.os[k] = 1;
    for (int i = 0; i < in.nd; i++) r.xs[4 - in.nd + i] = in.d[size_t(i)];
    for (int i = 0; i < out.nd; i++) r.os[4 - out.nd + i] = out.d[size_t(i)];
    r.st[3] = 1;
    for (int k = 2; k >= 0; k--) r.st[k] = r.st[k + 1] * r.xs[k + 1];
    r.O = r.R = 1;
    for (int k = 0; k < 4; k++) {
        r.rs[k] = r.os[k] == 1 ? r.xs[k] : 1;
        r.O *= r.os[k];
        r.R *= r.rs[k];
    }
    r.chunks = std::min<int64_t>(std::max<int64_t>(1, r.R / 1024), r.O >= 1024 ? 8 : 256);
    r.per_chunk = ceil_div(r.R, r.chunks);
    r.mul = mul;
    return r;
}

__device__ __forceinline__ int64_t out_base(const Red& r, int64_t o) {
    int64_t b = 0;
    for (int k = 3; k >= 0; k--) {
        b += (o % r.os[k]) * r.st[k];
        o /= r.os[k];
    }
    return b;
}
__device__ __forceinline__ int64_t red_off(const Red& r, int64_t i) {
    int64_t b = 0;
    for (int k = 3; k >= 0; k--) {
        b += (i % r.rs[k]) * r.st[k];
        i /= r.rs[k];
    }
    return b;
}

// Sums one double per thread of a 256-thread block by a fixed tree in shared memory (sh: 256
// slots); the total lands in sh[0].
__device__ __forceinline__ void tree_sum256(double acc, double* sh) {
    sh[threadIdx.x] = acc;
    __syncthreads();
    for (int s = 128; s > 0; s >>= 1) {
        if (int(threadIdx.x) < s) sh[threadIdx.x] += sh[threadIdx.x + s];
        __syncthreads();
    }
}

// Many outputs: a thread per (output, chunk); neighbouring threads read neighbouring outputs.
template <class T>
__global__ void partial_wide(const T* x, double* part, Red r) {
    kernel_entry();
    int64_t o = blockIdx.x * int64_t(blockDim.x) + threadIdx.x, c = blockIdx.y;
    if (o >= r.O) return;
    int64_t base = out_base(r, o), lo = c * r.per_chunk, hi = min(r.R, lo + r.per_chunk);
    double acc = 0;
    for (int64_t i = lo; i < hi; i++) acc += double(to_f32(x[base + red_off(r, i)]));
    part[c * r.O + o] = acc;
}

// Few outputs: a block per (output, chunk), fixed-shape tree reduction in shared memory.
template <class T>
__global__ void partial_narrow(const T* x, double* part, Red r) {
    kernel_entry();
    __shared__ double sh[256];
    int64_t o = blockIdx.y, c = blockIdx.x;
    int64_t base = out_base(r, o), lo = c * r.per_chunk, hi = min(r.R, lo + r.per_chunk);
    double acc = 0;
    for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) acc += double(to_f32(x[base + red_off(r, i)]));
    tree_sum256(acc, sh);
    if (threadIdx.x == 0) part[c * r.O + o] = sh[0];
}

template <class T>
__global__ void finish(const double* part, T* y, Red r) {
    kernel_entry();
    int64_t o = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
    if (o >= r.O) return;
    double acc = 0;
    for (int64_t c = 0; c < r.chunks; c++) acc += part[c * r.O + o];
    y[o] = from_f32<T>(float(acc * r.mul));
}

size_t red_workspace(const Shape& in, const Shape& out) {
    Red r = make_red(in, out, 1.0);
    return size_t(r.chunks * r.O) * sizeof(double);
}

void launch_reduce(CudaCtx& c, const Red& r) {
    if (r.O == 0) return;
    double* part = reinterpret_cast<double*>(c.workspace);
    dispatch_float(c.out_dtype(0), op_name(c.node.op), [&](auto tag) {
        using T = decltype(tag);
        const T* x = c.in_ptr<T>(0);
        if (r.O <= 32)
            partial_narrow<T><<<dim3(unsigned(r.chunks), unsigned(r.O)), 256, 0, c.stream>>>(x, part, r);
        else
            partial_wide<T><<<dim3(unsigned(ceil_div(r.O, 256)), unsigned(r.chunks)), 256, 0, c.stream>>>(x, part, r);
        GL_CUDA_LAUNCHED();
        finish<T><<<unsigned(ceil_div(r.O, 256)), 256, 0, c.stream>>>(part, c.out_ptr<T>(0), r);
    });
    GL_CUDA_LAUNCHED();
}

// sum / mean: p.i[0] axis, p.i[1] along the axis (else all), p.i[2] keepdim.
Shape kept_shape(const Shape& x, const Params& p) {
    if (!p.i[1]) return Shape{};
    Shape k = x;
    k.d[size_t(p.i[0])] = 1;
    return k;
}

}  // namespace

static size_t reduce_ws(const Graph& g, const Node& n) { return red_workspace(g.shape(n.in[0]), kept_shape(g.shape(n.in[0]), n.p)); }
static void reduce_run(CudaCtx& c) {
    Shape kept = kept_shape(c.in_shape(0), c.p());
    int64_t count = c.in[0].numel() / std::max<int64_t>(1, kept.numel());
    double mul = c.node.op == Op::mean ? 1.0 / double(std::max<int64_t>(1, count)) : 1.0;
    launch_reduce(c, make_red(c.in_shape(0), kept, mul));
}
const CudaKernel cuda_sum{reduce_run, reduce_ws};
const CudaKernel cuda_mean{reduce_run, reduce_ws};

static size_t sum_to_ws(const Graph& g, const Node& n) { return red_workspace(g.shape(n.in[0]), g.shape(n.out[0])); }
static void sum_to_run(CudaCtx& c) { launch_reduce(c, make_red(c.in_shape(0), c.out_shape(0), 1.0)); }
const CudaKernel cuda_sum_to{sum_to_run, sum_to_ws};

// ---- MSE: partial sums of squares per (sample, chunk), then one thread adds them in order ----

namespace {

constexpr int kMseChunks = 64;

template <class T>
__global__ void mse_partial(const T* p, const T* t, double* part, int64_t M) {
    kernel_entry();
    __shared__ double sh[256];
    int64_t b = blockIdx.y, c = blockIdx.x, per = ceil_div(M, kMseChunks);
    int64_t lo = c * per, hi = min(M, lo + per);
    double acc = 0;
    for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
        double d = double(to_f32(p[b * M + i])) - double(to_f32(t[b * M + i]));
        acc += d * d;
    }
    tree_sum256(acc, sh);
    if (threadIdx.x == 0) part[b * kMseChunks + c] = sh[0];
}

__global__ void mse_finish(const double* part, const void* w, DType tw, float* y, int64_t B, int64_t M) {
    kernel_entry();
    double total = 0;
    for (int64_t b = 0; b < B; b++) {
        double se = 0;
        for (int c = 0; c < kMseChunks; c++) se += part[b * kMseChunks + c];
        total += (w ? double(load_any(w, tw, b)) : 1.0) * (M ? se / double(M) : 0.0);
    }
    y[0] = float(total / double(B));
}

template <class T>
__global__ void mse_grad_kernel(const void* gy, DType tg, const T* p, const T* t, const void* w, DType tw, T* gp,
                                int64_t B, int64_t M) {
    kernel_entry();
    double g = double(load_any(gy, tg, 0));
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < B * M; i += int64_t(gridDim.x) * blockDim.x) {
        int64_t b = i / M;
        float k = float(2.0 * g * (w ? double(load_any(w, tw, b)) : 1.0) / (double(B) * double(M)));
        gp[i] = from_f32<T>(k * (to_f32(p[i]) - to_f32(t[i])));
    }
}

}  // namespace

static size_t mse_ws(const Graph& g, const Node& n) { return size_t(g.shape(n.in[0]).d[0]) * kMseChunks * sizeof(double); }
static void mse_run(CudaCtx& c) {
    const int64_t B = c.in_shape(0).d[0], M = c.in[0].numel() / B;
    GL_CHECK(c.in_dtype(0) == c.in_dtype(1), "mse_loss: pred and target must share a dtype on CUDA");
    double* part = reinterpret_cast<double*>(c.workspace);
    dispatch_float(c.in_dtype(0), "mse_loss", [&](auto tag) {
        using T = decltype(tag);
        mse_partial<T><<<dim3(kMseChunks, unsigned(B)), 256, 0, c.stream>>>(c.in_ptr<T>(0), c.in_ptr<T>(1), part, M);
    });
    GL_CUDA_LAUNCHED();
    const void* w = c.in.size() > 2 ? c.in_ptr(2) : nullptr;
    mse_finish<<<1, 1, 0, c.stream>>>(part, w, c.in.size() > 2 ? c.in_dtype(2) : DType::f32, c.out_ptr<float>(0), B, M);
    GL_CUDA_LAUNCHED();
}
const CudaKernel cuda_mse_loss{mse_run, mse_ws};

static void mse_grad_run(CudaCtx& c) {
    const int64_t B = c.in_shape(1).d[0], M = c.in[1].numel() / B;
    GL_CHECK(c.in_dtype(1) == c.in_dtype(2), "mse_loss_grad: pred and target must share a dtype on CUDA");
    const void* w = c.in.size() > 3 ? c.in_ptr(3) : nullptr;
    dispatch_float(c.out_dtype(0), "mse_loss_grad", [&](auto tag) {
        using T = decltype(tag);
        mse_grad_kernel<T><<<grid_for(B * M, 256), 256, 0, c.stream>>>(c.in_ptr(0), c.in_dtype(0), c.in_ptr<T>(1),
                                                                       c.in_ptr<T>(2), w, c.in.size() > 3 ? c.in_dtype(3) : DType::f32,
                                                                       c.out_ptr<T>(0), B, M);
    });
    GL_CUDA_LAUNCHED();
}
const CudaKernel cuda_mse_loss_grad{mse_grad_run};

// ---- weighted loss: partial sums of l(d) per (sample, chunk) in double, then one thread adds
// them in chunk order (deterministic), writing per [B] and the weighted mean ----

namespace {

constexpr int kLossChunks = 64;

template <class T>
__global__ void wloss_partial(const T* p, const T* t, const void* hc, DType thc, const void* mask, DType tm,
                              LossKind kind, double* part, int64_t M, int64_t C) {
    kernel_entry();
    __shared__ double sh[256];
    const int64_t b = blockIdx.y, c = blockIdx.x, per = ceil_div(M, kLossChunks);
    const int64_t lo = c * per, hi = min(M, lo + per);
    const double cb = hc ? double(load_any(hc, thc, b)) : 0.0;
    double acc = 0;
    for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
        const double l = loss::value(kind, double(to_f32(p[b * M + i])) - double(to_f32(t[b * M + i])), cb);
        acc += mask ? l * double(load_any(mask, tm, (b * M + i) / C)) : l;
    }
    tree_sum256(acc, sh);
    if (threadIdx.x == 0) part[b * kLossChunks + c] = sh[0];
}

__global__ void wloss_finish(const double* part, const void* w, DType tw, float* loss, float* per, int64_t B,
                             int64_t M) {
    kernel_entry();
    double total = 0;
    for (int64_t b = 0; b < B; b++) {
        double s = 0;
        for (int c = 0; c < kLossChunks; c++) s += part[b * kLossChunks + c];
        const double mean = M ? s / double(M) : 0.0;
        per[b] = float(mean);
        total += (w ? double(load_any(w, tw, b)) : 1.0) * mean;
    }
    loss[0] = float(total / double(B));
}

template <class T>
__global__ void wloss_grad_kernel(const void* coef, DType tcoef, const T* p, const T* t, const void* hc, DType thc,
                                  const void* mask, DType tm, LossKind kind, T* gp, int64_t B, int64_t M, int64_t C) {
    kernel_entry();
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < B * M; i += int64_t(gridDim.x) * blockDim.x) {
        const int64_t b = i / M;
        const float k = float(double(load_any(coef, tcoef, b)) / double(M));
        const float cb = hc ? load_any(hc, thc, b) : 0.0f;
        const float s = k * loss::slope(kind, to_f32(p[i]) - to_f32(t[i]), cb);
        gp[i] = from_f32<T>(mask ? s * load_any(mask, tm, i / C) : s);
    }
}

}  // namespace

static size_t wloss_ws(const Graph& g, const Node& n) {
    return size_t(g.shape(n.in[0]).d[0]) * kLossChunks * sizeof(double);
}
static void wloss_run(CudaCtx& c) {
    const LossKind kind = LossKind(c.p().i[0]);
    const bool has_w = c.p().i[1] != 0, has_c = loss_takes_huber_c(kind), has_m = c.p().i[2] != 0;
    const Shape& shape = c.in_shape(0);
    const int64_t B = shape.d[0], M = c.in[0].numel() / B, C = shape.d[shape.nd - 1];
    GL_CHECK(c.in_dtype(0) == c.in_dtype(1), "weighted_loss: pred and target must share a dtype on CUDA");
    const int ic = has_w ? 3 : 2, im = ic + int(has_c);
    const void* hc = has_c ? c.in_ptr(ic) : nullptr;
    const DType thc = has_c ? c.in_dtype(ic) : DType::f32;
    const void* mask = has_m ? c.in_ptr(im) : nullptr;
    const DType tm = has_m ? c.in_dtype(im) : DType::f32;
    double* part = reinterpret_cast<double*>(c.workspace);
    dispatch_float(c.in_dtype(0), "weighted_loss", [&](auto tag) {
        using T = decltype(tag);
        wloss_partial<T><<<dim3(kLossChunks, unsigned(B)), 256, 0, c.stream>>>(c.in_ptr<T>(0), c.in_ptr<T>(1), hc,
                                                                               thc, mask, tm, kind, part, M, C);
    });
    GL_CUDA_LAUNCHED();
    wloss_finish<<<1, 1, 0, c.stream>>>(part, has_w ? c.in_ptr(2) : nullptr, has_w ? c.in_dtype(2) : DType::f32,
                                        c.out_ptr<float>(0), c.out_ptr<float>(1), B, M);
    GL_CUDA_LAUNCHED();
}
const CudaKernel cuda_weighted_loss{wloss_run, wloss_ws};

static void wloss_grad_run(CudaCtx& c) {
    const LossKind kind = LossKind(c.p().i[0]);
    const bool has_c = loss_takes_huber_c(kind), has_m = c.p().i[2] != 0;
    const Shape& shape = c.in_shape(1);
    const int64_t B = shape.d[0], M = c.in[1].numel() / B, C = shape.d[shape.nd - 1];
    if (B * M == 0) return;
    GL_CHECK(c.in_dtype(1) == c.in_dtype(2), "weighted_loss_grad: pred and target must share a dtype on CUDA");
    const void* hc = has_c ? c.in_ptr(3) : nullptr;
    const DType thc = has_c ? c.in_dtype(3) : DType::f32;
    const int im = 3 + int(has_c);
    const void* mask = has_m ? c.in_ptr(im) : nullptr;
    const DType tm = has_m ? c.in_dtype(im) : DType::f32;
    dispatch_float(c.out_dtype(0), "weighted_loss_grad", [&](auto tag) {
        using T = decltype(tag);
        wloss_grad_kernel<T><<<grid_for(B * M, 256), 256, 0, c.stream>>>(c.in_ptr(0), c.in_dtype(0), c.in_ptr<T>(1),
                                                                         c.in_ptr<T>(2), hc, thc, mask, tm, kind,
                                                                         c.out_ptr<T>(0), B, M, C);
    });
    GL_CUDA_LAUNCHED();
}
const CudaKernel cuda_weighted_loss_grad{wloss_grad_run};

}  // namespace gl
