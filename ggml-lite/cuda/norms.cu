// Group normalisation (NHWC, x [N, P, C] with P all positions): per-channel partial sums over chunks of
// positions (coalesced along C; on 8-channel vectors where the channels allow), combined per
// (sample, group) by one block each into mean / rstd, then an elementwise affine map (+ SiLU). The
// backward pass needs only two per-(sample, channel) sums, A = sum gh*xhat and B = sum gh, from which
// dgamma, dbeta and the per-group terms of dx follow; a frozen affine makes dx alone, with an optional
// residual added before the rounding (ops/norm_params.h, ops/residual.h). Layer norm and softmax are in
// norms_rows.cu; the one-block-per-group kernels in norms_group.cuh. All reductions use fixed orders: deterministic.
#include <algorithm>

#include "ggml-lite/cuda/device.cuh"
#include "ggml-lite/cuda/kernel.cuh"
#include "ggml-lite/ops/norm_params.h"
#include "ggml-lite/ops/residual.h"
#include "ggml-lite/cuda/norms_group.cuh"

namespace gl {

using namespace gnk;

namespace {

// part[((n * chunks + k) * C + c) * 2 + {0, 1}] = sums over the chunk's positions of {x, x^2}.
template <class T>
__global__ void gn_stats_partial(const T* x, double* part, Gn d) {
    kernel_entry();
    int64_t n = blockIdx.y, k = blockIdx.x, p0 = k * d.rows_per_chunk, p1 = min(d.P, p0 + d.rows_per_chunk);
    for (int64_t c = threadIdx.x; c < d.C; c += blockDim.x) {
        double s = 0, ss = 0;
        for (int64_t p = p0; p < p1; p++) {
            double v = to_f32(x[(n * d.P + p) * d.C + c]);
            s += v;
            ss += v * v;
        }
        double* o = part + ((n * d.chunks + k) * d.C + c) * 2;
        o[0] = s;
        o[1] = ss;
    }
}

// One block per (sample, group): the group's chunk partials, thread t taking items t, t + 256,
// ... and a fixed tree after (deterministic).
__global__ void gn_stats_final(const double* part, float* mean, float* rstd, Gn d) {
    kernel_entry();
    __shared__ double sh[32];
    const int64_t t = blockIdx.x, n = t / d.G, c0 = (t % d.G) * d.Cg, items = d.chunks * d.Cg;
    double s = 0, ss = 0;
    for (int64_t i = threadIdx.x; i < items; i += blockDim.x) {
        const double* o = part + ((n * d.chunks + i / d.Cg) * d.C + c0 + i % d.Cg) * 2;
        s += o[0];
        ss += o[1];
    }
    s = block_sum(s, sh);
    ss = block_sum(ss, sh);
    if (threadIdx.x == 0) {
        double M = double(d.P * d.Cg), mu = s / M, var = fmax(ss / M - mu * mu, 0.0);
        mean[t] = float(mu);
        rstd[t] = float(1.0 / sqrt(var + double(d.eps)));
    }
}

template <class T>
__global__ void gn_apply(const T* x, const void* gm, DType tg, const void* bt, DType tb, const float* mean,
                         const float* rstd, T* y, Gn d) {
    kernel_entry();
    int64_t total = d.N * d.P * d.C;
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
        int64_t c = i % d.C, n = i / (d.P * d.C), s = n * d.G + c / d.Cg;
        float xh = (to_f32(x[i]) - mean[s]) * rstd[s];
        float h = xh * load_any(gm, tg, c) + load_any(bt, tb, c);
        y[i] = from_f32<T>(d.act ? h * sigmoidf_(h) : h);
    }
}

// Gradient of the pre-activation (the SiLU's derivative folded in when fused).
template <class T>
__device__ __forceinline__ float gn_gh(const T* gy, const T* x, int64_t i, float gmc, float btc, float mu, float rs,
                                       bool act, float* xh_out) {
    float xh = (to_f32(x[i]) - mu) * rs;
    float gh = to_f32(gy[i]);
    if (act) {
        float h = xh * gmc + btc, s = sigmoidf_(h);
        gh *= s * (1.0f + h * (1.0f - s));
    }
    *xh_out = xh;
    return gh;
}

// part[((n * chunks + k) * C + c) * 2 + {0, 1}] = {sum gh * xhat, sum gh} over the chunk.
template <class T>
__global__ void gn_bwd_partial(const T* gy, const T* x, const void* gm, DType tg, const void* bt, DType tb,
                               const float* mean, const float* rstd, double* part, Gn d) {
    kernel_entry();
    int64_t n = blockIdx.y, k = blockIdx.x, p0 = k * d.rows_per_chunk, p1 = min(d.P, p0 + d.rows_per_chunk);
    for (int64_t c = threadIdx.x; c < d.C; c += blockDim.x) {
        int64_t s = n * d.G + c / d.Cg;
        float gmc = load_any(gm, tg, c), btc = load_any(bt, tb, c), mu = mean[s], rs = rstd[s];
        double a = 0, b = 0;
        for (int64_t p = p0; p < p1; p++) {
            float xh;
            float gh = gn_gh(gy, x, (n * d.P + p) * d.C + c, gmc, btc, mu, rs, d.act, &xh);
            a += double(gh) * xh;
            b += gh;
        }
        double* o = part + ((n * d.chunks + k) * d.C + c) * 2;
        o[0] = a;
        o[1] = b;
    }
}

// coef[(n * G + g) * 2 + {0, 1}] = {sum_c gamma_c B_c / M, sum_c gamma_c A_c / M}: one block per
// (sample, group), summed as gn_stats_final does.
__global__ void gn_bwd_coef(const double* part, const void* gm, DType tg, double* coef, Gn d) {
    kernel_entry();
    __shared__ double sh[32];
    const int64_t t = blockIdx.x, n = t / d.G, c0 = (t % d.G) * d.Cg, items = d.chunks * d.Cg;
    double s1 = 0, s2 = 0;
    for (int64_t i = threadIdx.x; i < items; i += blockDim.x) {
        const int64_t c = c0 + i % d.Cg;
        const double* o = part + ((n * d.chunks + i / d.Cg) * d.C + c) * 2;
        const double g = load_any(gm, tg, c);
        s1 += g * o[1];
        s2 += g * o[0];
    }
    s1 = block_sum(s1, sh);
    s2 = block_sum(s2, sh);
    if (threadIdx.x == 0) {
        const double M = double(d.P * d.Cg);
        coef[t * 2] = s1 / M;
        coef[t * 2 + 1] = s2 / M;
    }
}

// dgamma_c = sum A_c, dbeta_c = sum B_c over samples and chunks: blocks of 32 channels x 8 rows of
// partials, each row's sums added in row order (deterministic).
template <class TG>
__global__ void gn_bwd_channels(const double* part, TG* dgamma, TG* dbeta, Gn d) {
    kernel_entry();
    __shared__ double sa[8][33], sb[8][33];
    const int64_t c = int64_t(blockIdx.x) * 32 + threadIdx.x;
    double a = 0, b = 0;
    if (c < d.C)
        for (int64_t r = threadIdx.y; r < d.N * d.chunks; r += 8) {  // r = n * chunks + k
            const double* o = part + (r * d.C + c) * 2;
            a += o[0];
            b += o[1];
        }
    sa[threadIdx.y][threadIdx.x] = a;
    sb[threadIdx.y][threadIdx.x] = b;
    __syncthreads();
    if (threadIdx.y == 0 && c < d.C) {
        for (int y = 1; y < 8; y++) {
            a += sa[y][threadIdx.x];
            b += sb[y][threadIdx.x];
        }
        dgamma[c] = from_f32<TG>(float(a));
        dbeta[c] = from_f32<TG>(float(b));
    }
}

template <class T>
__global__ void gn_bwd_apply(const T* gy, const T* x, const void* gm, DType tg, const void* bt, DType tb,
                             const float* mean, const float* rstd, const double* coef, const T* res, T* dx, Gn d) {
    kernel_entry();
    int64_t total = d.N * d.P * d.C;
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
        int64_t c = i % d.C, n = i / (d.P * d.C), s = n * d.G + c / d.Cg;
        float gmc = load_any(gm, tg, c), rs = rstd[s], xh;
        float gh = gn_gh(gy, x, i, gmc, load_any(bt, tb, c), mean[s], rs, d.act, &xh);
        float v = float(double(rs) * (double(gh) * gmc - coef[s * 2] - double(xh) * coef[s * 2 + 1]));
        if (res) v += to_f32(res[i]);  // read before dx[i] is written: dx may be res's bytes
        dx[i] = from_f32<T>(v);
    }
}


// The elementwise passes on whole 8-channel vectors (C % 8 == 0, 8-element-aligned x and y): a thread
// owns channels [8 tc, 8 tc + 8) of sample blockIdx.y, keeps their statistics and affine terms in
// registers (no per-element index arithmetic) and walks positions with 16- or 32-byte accesses.
// Block: cv = C / 8 channel vectors x `rows` positions.
struct GnVec {
    int cv, rows;
};
inline GnVec gn_vec_shape(const Gn& d) {
    const int cv = std::max(1, int(d.C / 8));  // (unused when C % 8 != 0: gn_vec_ok refuses it)
    return {cv, std::max(1, 256 / cv)};
}
inline dim3 gn_vec_grid(const Gn& d, const GnVec& v) {
    const int64_t want = std::max<int64_t>(1, int64_t(sm_count()) * 8 / d.N);  // ~8 blocks per SM in all
    return dim3(unsigned(std::min<int64_t>(ceil_div(d.P, v.rows), want)), unsigned(d.N));
}
template <class T>
bool gn_vec_ok(const Gn& d, const void* a, const void* b, const void* c = nullptr) {
    auto al = [](const void* p) { return p == nullptr || reinterpret_cast<uintptr_t>(p) % sizeof(Vec8<T>) == 0; };
    return d.C % 8 == 0 && d.C / 8 <= 1024 && al(a) && al(b) && al(c);
}

// The partial sums of gn_stats_partial / gn_bwd_partial on 8-channel vectors: thread (tc, tp) of
// block (chunk, sample) sums positions p0 + tp, p0 + tp + rows, ... of its channels in double; the
// block's rows then add in tp order through shared memory (sh [rows][C][2]: deterministic).
inline size_t gn_partial_smem(const Gn& d, const GnVec& v) { return size_t(v.rows) * size_t(d.C) * 2 * sizeof(double); }
inline bool gn_partial_vec_ok(const Gn& d, const GnVec& v) { return gn_partial_smem(d, v) <= 48 * 1024; }

__device__ __forceinline__ void gn_partial_store(double* sh, const double (&u)[8], const double (&w)[8], double* part,
                                                 const Gn& d, const GnVec& v, int tc, int tp) {
    if (tp < v.rows)
#pragma unroll
        for (int j = 0; j < 8; j++) {
            sh[(int64_t(tp) * d.C + tc * 8 + j) * 2] = u[j];
            sh[(int64_t(tp) * d.C + tc * 8 + j) * 2 + 1] = w[j];
        }
    __syncthreads();
    double* o = part + (int64_t(blockIdx.y) * d.chunks + blockIdx.x) * d.C * 2;
    for (int64_t i = threadIdx.x; i < d.C * 2; i += blockDim.x) {
        double t = 0;
        for (int r = 0; r < v.rows; r++) t += sh[r * d.C * 2 + i];
        o[i] = t;
    }
}

template <class T>
__global__ void gn_stats_partial_vec(const T* x, double* part, Gn d, GnVec v) {
    kernel_entry();
    extern __shared__ double sh[];
    const int tc = int(threadIdx.x) % v.cv, tp = int(threadIdx.x) / v.cv;
    const int64_t n = blockIdx.y, p0 = int64_t(blockIdx.x) * d.rows_per_chunk, p1 = min(d.P, p0 + d.rows_per_chunk);
    double s[8] = {}, ss[8] = {};
    if (tp < v.rows)
        for (int64_t p = p0 + tp; p < p1; p += v.rows) {
            const Vec8<T> in = *reinterpret_cast<const Vec8<T>*>(x + (n * d.P + p) * d.C + tc * 8);
#pragma unroll
            for (int j = 0; j < 8; j++) {
                const double e = to_f32(in.v[j]);
                s[j] += e;
                ss[j] += e * e;
            }
        }
    gn_partial_store(sh, s, ss, part, d, v, tc, tp);
}

template <class T>
__global__ void gn_bwd_partial_vec(const T* gy, const T* x, const void* gm, DType tg, const void* bt, DType tb,
                                   const float* mean, const float* rstd, double* part, Gn d, GnVec v) {
    kernel_entry();
    extern __shared__ double sh[];
    const int tc = int(threadIdx.x) % v.cv, tp = int(threadIdx.x) / v.cv;
    const int64_t n = blockIdx.y, p0 = int64_t(blockIdx.x) * d.rows_per_chunk, p1 = min(d.P, p0 + d.rows_per_chunk);
    double a[8] = {}, b[8] = {};
    if (tp < v.rows) {
        float mu[8], rs[8], ga[8], be[8];
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const int c = tc * 8 + j, g = int(n) * int(d.G) + c / int(d.Cg);
            mu[j] = mean[g];
            rs[j] = rstd[g];
            ga[j] = load_any(gm, tg, c);
            be[j] = load_any(bt, tb, c);
        }
        for (int64_t p = p0 + tp; p < p1; p += v.rows) {
            const int64_t off = (n * d.P + p) * d.C + tc * 8;
            const Vec8<T> gv = *reinterpret_cast<const Vec8<T>*>(gy + off);
            const Vec8<T> xv = *reinterpret_cast<const Vec8<T>*>(x + off);
#pragma unroll
            for (int j = 0; j < 8; j++) {
                const float xh = (to_f32(xv.v[j]) - mu[j]) * rs[j];
                float gh = to_f32(gv.v[j]);
                if (d.act) {
                    const float h = xh * ga[j] + be[j], sg = sigmoidf_(h);
                    gh *= sg * (1.0f + h * (1.0f - sg));
                }
                a[j] += double(gh) * xh;
                b[j] += gh;
            }
        }
    }
    gn_partial_store(sh, a, b, part, d, v, tc, tp);
}

template <class T>
__global__ void gn_apply_vec(const T* x, const void* gm, DType tg, const void* bt, DType tb, const float* mean,
                             const float* rstd, T* y, Gn d, GnVec v) {
    kernel_entry();
    const int tc = int(threadIdx.x) % v.cv, tp = int(threadIdx.x) / v.cv, n = int(blockIdx.y);
    if (tp >= v.rows) return;
    float mu[8], rs[8], ga[8], be[8];
#pragma unroll
    for (int j = 0; j < 8; j++) {
        const int c = tc * 8 + j, s = n * int(d.G) + c / int(d.Cg);
        mu[j] = mean[s];
        rs[j] = rstd[s];
        ga[j] = load_any(gm, tg, c);
        be[j] = load_any(bt, tb, c);
    }
    const int64_t off = int64_t(n) * d.P * d.C + tc * 8;
    for (int64_t p = int64_t(blockIdx.x) * v.rows + tp; p < d.P; p += int64_t(gridDim.x) * v.rows) {
        const Vec8<T> in = *reinterpret_cast<const Vec8<T>*>(x + off + p * d.C);
        Vec8<T> out;
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const float h = (to_f32(in.v[j]) - mu[j]) * rs[j] * ga[j] + be[j];
            out.v[j] = from_f32<T>(d.act ? h * sigmoidf_(h) : h);
        }
        *reinterpret_cast<Vec8<T>*>(y + off + p * d.C) = out;
    }
}

template <class T>
__global__ void gn_bwd_apply_vec(const T* gy, const T* x, const void* gm, DType tg, const void* bt, DType tb,
                                 const float* mean, const float* rstd, const double* coef, const T* res, T* dx, Gn d,
                                 GnVec v) {
    kernel_entry();
    const int tc = int(threadIdx.x) % v.cv, tp = int(threadIdx.x) / v.cv, n = int(blockIdx.y);
    if (tp >= v.rows) return;
    float mu[8], rs[8], ga[8], be[8], k0[8], k1[8];  // k: the group's terms, in float (registers)
#pragma unroll
    for (int j = 0; j < 8; j++) {
        const int c = tc * 8 + j, s = n * int(d.G) + c / int(d.Cg);
        mu[j] = mean[s];
        rs[j] = rstd[s];
        ga[j] = load_any(gm, tg, c);
        be[j] = load_any(bt, tb, c);
        k0[j] = float(coef[s * 2]);
        k1[j] = float(coef[s * 2 + 1]);
    }
    const int64_t off = int64_t(n) * d.P * d.C + tc * 8;
    for (int64_t p = int64_t(blockIdx.x) * v.rows + tp; p < d.P; p += int64_t(gridDim.x) * v.rows) {
        const Vec8<T> gv = *reinterpret_cast<const Vec8<T>*>(gy + off + p * d.C);
        const Vec8<T> xv = *reinterpret_cast<const Vec8<T>*>(x + off + p * d.C);
        Vec8<T> rv;
        if (res) rv = *reinterpret_cast<const Vec8<T>*>(res + off + p * d.C);
        Vec8<T> out;
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const float xh = (to_f32(xv.v[j]) - mu[j]) * rs[j];
            float gh = to_f32(gv.v[j]);
            if (d.act) {
                const float h = xh * ga[j] + be[j], sg = sigmoidf_(h);
                gh *= sg * (1.0f + h * (1.0f - sg));
            }
            const float o = rs[j] * (gh * ga[j] - k0[j] - xh * k1[j]);
            out.v[j] = from_f32<T>(res ? o + to_f32(rv.v[j]) : o);
        }
        *reinterpret_cast<Vec8<T>*>(dx + off + p * d.C) = out;
    }
}


}  // namespace

static size_t gn_ws(const Graph& g, const Node& n) {
    Gn d = gn_of(g.shape(n.op == Op::group_norm ? n.in[0] : n.in[1]), n.p);
    return size_t(d.N * d.chunks * d.C * 2) * sizeof(double) + size_t(d.N * d.G * 2) * sizeof(double);
}

static void group_norm_run(CudaCtx& c) {
    Gn d = gn_of(c.in_shape(0), c.p());
    double* part = reinterpret_cast<double*>(c.workspace);
    float* mean = c.out_ptr<float>(1);
    float* rstd = c.out_ptr<float>(2);
    dispatch_float(c.in_dtype(0), "group_norm", [&](auto tag) {
        using T = decltype(tag);
        const bool cl = gn_clusters_usable(reinterpret_cast<const void*>(gn_group_fwd<T, 2>));
        if (const GnSetPlan pl = gn_set_plan<T>(d, {c.in_ptr(0), c.out_ptr(0)}, cl, device_info().sms); pl.vw) {
            with_vw(pl.vw, [&](auto w) {
                constexpr int VW = decltype(w)::value;
                gn_set_launch(gn_group_fwd<T, VW>, d, pl, c.stream, c.in_ptr<T>(0), c.in_ptr(1), c.in_dtype(1),
                              c.in_ptr(2), c.in_dtype(2), mean, rstd, c.out_ptr<T>(0));
            });
            return;
        }
        const GnVec v = gn_vec_shape(d);
        if (gn_vec_ok<T>(d, c.in_ptr(0), nullptr) && gn_partial_vec_ok(d, v))
            gn_stats_partial_vec<T><<<dim3(unsigned(d.chunks), unsigned(d.N)), unsigned(v.cv * v.rows),
                                      gn_partial_smem(d, v), c.stream>>>(c.in_ptr<T>(0), part, d, v);
        else
            gn_stats_partial<T><<<dim3(unsigned(d.chunks), unsigned(d.N)), 256, 0, c.stream>>>(c.in_ptr<T>(0), part, d);
        GL_CUDA_LAUNCHED();
        gn_stats_final<<<unsigned(d.N * d.G), 256, 0, c.stream>>>(part, mean, rstd, d);
        GL_CUDA_LAUNCHED();
        if (gn_vec_ok<T>(d, c.in_ptr(0), c.out_ptr(0))) {
            gn_apply_vec<T><<<gn_vec_grid(d, v), unsigned(v.cv * v.rows), 0, c.stream>>>(
                c.in_ptr<T>(0), c.in_ptr(1), c.in_dtype(1), c.in_ptr(2), c.in_dtype(2), mean, rstd, c.out_ptr<T>(0), d,
                v);
        } else {
            gn_apply<T><<<grid_for(d.N * d.P * d.C, 256), 256, 0, c.stream>>>(
                c.in_ptr<T>(0), c.in_ptr(1), c.in_dtype(1), c.in_ptr(2), c.in_dtype(2), mean, rstd, c.out_ptr<T>(0), d);
        }
    });
    GL_CUDA_LAUNCHED();
}
const CudaKernel cuda_group_norm{group_norm_run, gn_ws};

static void group_norm_grad_run(CudaCtx& c) {
    // inputs (gy, x, gamma, beta, mean, rstd) -> (dx, dgamma, dbeta)
    Gn d = gn_of(c.in_shape(1), c.p());
    GL_CHECK(c.in_dtype(0) == c.in_dtype(1), "group_norm_grad: gy and x must share a dtype on CUDA");
    double* part = reinterpret_cast<double*>(c.workspace);
    double* coef = part + d.N * d.chunks * d.C * 2;
    dispatch_float(c.in_dtype(1), "group_norm_grad", [&](auto tag) {
        using T = decltype(tag);
        const T* res = has_residual(c.p()) ? c.in_ptr<T>(residual_index(c.p(), int(c.in.size()))) : nullptr;
        if (norm_dx_only(c.p()))
            if (const GnSetPlan pl = gn_set_plan<T>(
                    d, {c.in_ptr(0), c.in_ptr(1), c.out_ptr(0), res},
                    gn_clusters_usable(reinterpret_cast<const void*>(gn_group_bwd<T, 2>)), device_info().sms);
                pl.vw) {
                with_vw(pl.vw, [&](auto w) {
                    constexpr int VW = decltype(w)::value;
                    gn_set_launch(gn_group_bwd<T, VW>, d, pl, c.stream, c.in_ptr<T>(0), c.in_ptr<T>(1), c.in_ptr(2),
                                  c.in_dtype(2), c.in_ptr(3), c.in_dtype(3), c.in_ptr<float>(4), c.in_ptr<float>(5),
                                  res, c.out_ptr<T>(0));
                });
                return;
            }
        const GnVec v = gn_vec_shape(d);
        if (gn_vec_ok<T>(d, c.in_ptr(0), c.in_ptr(1)) && gn_partial_vec_ok(d, v))
            gn_bwd_partial_vec<T><<<dim3(unsigned(d.chunks), unsigned(d.N)), unsigned(v.cv * v.rows),
                                    gn_partial_smem(d, v), c.stream>>>(c.in_ptr<T>(0), c.in_ptr<T>(1), c.in_ptr(2),
                                                                       c.in_dtype(2), c.in_ptr(3), c.in_dtype(3),
                                                                       c.in_ptr<float>(4), c.in_ptr<float>(5), part, d, v);
        else
            gn_bwd_partial<T><<<dim3(unsigned(d.chunks), unsigned(d.N)), 256, 0, c.stream>>>(
                c.in_ptr<T>(0), c.in_ptr<T>(1), c.in_ptr(2), c.in_dtype(2), c.in_ptr(3), c.in_dtype(3),
                c.in_ptr<float>(4), c.in_ptr<float>(5), part, d);
        GL_CUDA_LAUNCHED();
        GL_CHECK(norm_dx_only(c.p()) || c.out_dtype(1) == c.out_dtype(2),
                 "group_norm_grad: gamma and beta must share a dtype on CUDA");
        gn_bwd_coef<<<unsigned(d.N * d.G), 256, 0, c.stream>>>(part, c.in_ptr(2), c.in_dtype(2), coef, d);
        GL_CUDA_LAUNCHED();
        if (!norm_dx_only(c.p())) {  // a frozen affine has no dgamma / dbeta to make
            dispatch_float(c.out_dtype(1), "group_norm_grad", [&](auto gtag) {
                using TG = decltype(gtag);
                gn_bwd_channels<TG><<<unsigned(ceil_div(d.C, 32)), dim3(32, 8), 0, c.stream>>>(
                    part, c.out_ptr<TG>(1), c.out_ptr<TG>(2), d);
            });
            GL_CUDA_LAUNCHED();
        }
        if (gn_vec_ok<T>(d, c.in_ptr(0), c.in_ptr(1), c.out_ptr(0)) && gn_vec_ok<T>(d, res, nullptr)) {
            gn_bwd_apply_vec<T><<<gn_vec_grid(d, v), unsigned(v.cv * v.rows), 0, c.stream>>>(
                c.in_ptr<T>(0), c.in_ptr<T>(1), c.in_ptr(2), c.in_dtype(2), c.in_ptr(3), c.in_dtype(3),
                c.in_ptr<float>(4), c.in_ptr<float>(5), coef, res, c.out_ptr<T>(0), d, v);
        } else {
            gn_bwd_apply<T><<<grid_for(d.N * d.P * d.C, 256), 256, 0, c.stream>>>(
                c.in_ptr<T>(0), c.in_ptr<T>(1), c.in_ptr(2), c.in_dtype(2), c.in_ptr(3), c.in_dtype(3),
                c.in_ptr<float>(4), c.in_ptr<float>(5), coef, res, c.out_ptr<T>(0), d);
        }
    });
    GL_CUDA_LAUNCHED();
}
const CudaKernel cuda_group_norm_grad{group_norm_grad_run, gn_ws};

}  // namespace gl
