// Group normalisation, shared by cuda/norms.cu: the problem's shape (Gn) and the kernels that take
// one block per (sample, group) for groups small enough that a block streams them fast.
#pragma once
#include <algorithm>
#include <cstdlib>
#include <initializer_list>
#include <type_traits>

#include "ggml-lite/cuda/device.cuh"
#include "ggml-lite/cuda/kernel.cuh"

namespace gl::gnk {

__device__ __forceinline__ float sigmoidf_(float h) { return 1.0f / (1.0f + expf(-h)); }

struct Gn {
    int64_t N, P, C, G, Cg, chunks, rows_per_chunk;
    float eps;
    bool act;
};

inline Gn gn_of(const Shape& x, const Params& p) {
    Gn d{};
    d.N = x[0];
    d.C = x.last();
    d.P = x.numel() / (d.N * d.C);
    d.G = p.i[0];
    d.Cg = d.C / d.G;
    d.act = p.i[1] != 0;
    d.eps = p.f[0];
    // About 512 chunks over the batch, of at least 8 positions: enough blocks to fill the GPU,
    // few enough partials that combining them is cheap.
    const int64_t target = std::max<int64_t>(1, 512 / d.N);
    d.rows_per_chunk = std::max<int64_t>(ceil_div(d.P, target), std::min<int64_t>(d.P, 8));
    d.chunks = ceil_div(d.P, d.rows_per_chunk);
    return d;
}

// ---- one block per (sample, group) ----
// For groups of up to kGroupMaxElems elements (every group norm of SD1.5's UNet, the smaller ones
// of its VAE) a block of its own streams the group twice from L2: the statistics, then the
// affine map (forward) or dx (the frozen-affine backward), in one kernel instead of three or four.
// Thread (r, j) of a block owns the VW channels [j VW, j VW + VW) of the group at positions r,
// r + rows, ...: one VW-element access per position, no index division, several positions' loads
// in flight at once. Sums are per thread in
// float and across the block in double, in a fixed order (deterministic); the forward's are of
// x - x[first] (a shift from inside the group, so E[x^2] - E[x]^2 does not cancel), and its
// variance is that of the shifted values.
constexpr int64_t kGroupMaxElems = 131072;

template <class T, int VW>
struct alignas(VW * sizeof(T)) Pack {
    T v[VW];
};

struct GnGroup {
    int lanes, rows;  // threads per position (Cg / VW), positions per sweep (blockDim / lanes)
};

template <int VW>
inline GnGroup gn_group_shape(const Gn& d, int threads) {
    const int lanes = int(d.Cg / VW);
    return {lanes, threads / lanes};
}

// The block size: about 8 accesses a thread, 128 to 1024 threads, a whole number of positions.
template <int VW>
inline int gn_group_threads(const Gn& d) {
    const int64_t vecs = d.P * d.Cg / VW;
    const int lanes = int(d.Cg / VW);
    int t = int(std::min<int64_t>(1024, std::max<int64_t>(128, ceil_div(vecs, int64_t(8)))));
    t = std::max(lanes, t / lanes * lanes);
    return t;
}

// Positions r0, r0 + rows, ... in batches of U: load(u, p) for each position of a batch first,
// then use(u, p), so the loads of a batch overlap. The forward takes U = 16 / VW (32 bytes a
// thread in flight), the backward 8 / VW of each of its two tensors (more spills at 64 registers).
template <int U, class Load, class Use>
__device__ __forceinline__ void gn_group_sweep(int64_t r0, int64_t P, int rows, Load&& load, Use&& use) {
    for (int64_t p0 = r0; p0 < P; p0 += int64_t(U) * rows) {
#pragma unroll
        for (int u = 0; u < U; u++)
            if (p0 + int64_t(u) * rows < P) load(u, p0 + int64_t(u) * rows);
#pragma unroll
        for (int u = 0; u < U; u++)
            if (p0 + int64_t(u) * rows < P) use(u, p0 + int64_t(u) * rows);
    }
}

// Where thread threadIdx.x of block (sample, group) works: its channel vector j, first position r0
// (on: it has positions), the element offset of its first access in any [N, P, C] tensor of the
// problem (base: the group's first element), and the affine terms of its VW channels.
template <int VW>
struct GnThread {
    int64_t base, off;
    int r0;
    bool on;
    float ga[VW], be[VW];
    __device__ GnThread(const Gn& d, const GnGroup& gs, const void* gm, DType tg, const void* bt, DType tb) {
        const int64_t n = blockIdx.x / d.G, g = blockIdx.x % d.G;
        const int j = int(threadIdx.x) % gs.lanes;
        r0 = int(threadIdx.x) / gs.lanes;
        on = r0 < gs.rows;
        base = n * d.P * d.C + g * d.Cg;
        off = base + j * VW;
#pragma unroll
        for (int e = 0; e < VW; e++) {
            ga[e] = load_any(gm, tg, g * d.Cg + j * VW + e);
            be[e] = load_any(bt, tb, g * d.Cg + j * VW + e);
        }
    }
};

template <class T, int VW>
__global__ void __launch_bounds__(1024) gn_group_fwd(const T* x, const void* gm, DType tg, const void* bt, DType tb,
                                                     float* mean, float* rstd, T* y, Gn d, GnGroup gs) {
    kernel_entry();
    constexpr int U = 16 / VW;
    using V = Pack<T, VW>;
    __shared__ double sh[32];
    const GnThread<VW> t(d, gs, gm, tg, bt, tb);
    const T* xp = x + t.off;
    T* yp = y + t.off;
    const float K = to_f32(x[t.base]);
    float s = 0.0f, ss = 0.0f;
    V v[U];
    if (t.on)
        gn_group_sweep<U>(
            t.r0, d.P, gs.rows, [&](int u, int64_t p) { v[u] = *reinterpret_cast<const V*>(xp + p * d.C); },
            [&](int u, int64_t) {
#pragma unroll
                for (int e = 0; e < VW; e++) {
                    const float w = to_f32(v[u].v[e]) - K;
                    s += w;
                    ss += w * w;
                }
            });
    const double S = block_sum(double(s), sh), SS = block_sum(double(ss), sh);
    const double M = double(d.P * d.Cg), m1 = S / M, var = fmax(SS / M - m1 * m1, 0.0);
    const float mu = float(double(K) + m1), rs = float(1.0 / sqrt(var + double(d.eps)));
    if (threadIdx.x == 0) {
        mean[blockIdx.x] = mu;
        rstd[blockIdx.x] = rs;
    }
    if (!t.on) return;
    float gr[VW];  // gamma rstd
#pragma unroll
    for (int e = 0; e < VW; e++) gr[e] = t.ga[e] * rs;
    gn_group_sweep<U>(
        t.r0, d.P, gs.rows, [&](int u, int64_t p) { v[u] = *reinterpret_cast<const V*>(xp + p * d.C); },
        [&](int u, int64_t p) {
            V o;
#pragma unroll
            for (int e = 0; e < VW; e++) {
                const float h = (to_f32(v[u].v[e]) - mu) * gr[e] + t.be[e];
                o.v[e] = from_f32<T>(d.act ? h * sigmoidf_(h) : h);
            }
            *reinterpret_cast<V*>(yp + p * d.C) = o;
        });
}

// dx of a frozen affine: k0 = sum gh gamma / M, k1 = sum gh gamma xhat / M over the group, then
// dx = rstd (gh gamma - k0 - xhat k1) (+ the residual, read before dx is written: dx may be its bytes).
template <class T, int VW>
__global__ void __launch_bounds__(1024) gn_group_bwd(const T* gy, const T* x, const void* gm, DType tg, const void* bt,
                                                     DType tb, const float* mean, const float* rstd, const T* res,
                                                     T* dx, Gn d, GnGroup gs) {
    kernel_entry();
    constexpr int U = 8 / VW;
    using V = Pack<T, VW>;
    __shared__ double sh[32];
    const GnThread<VW> t(d, gs, gm, tg, bt, tb);
    const int64_t off = t.off;
    const float mu = mean[blockIdx.x], rs = rstd[blockIdx.x];
    const float(&ga)[VW] = t.ga;
    const float(&be)[VW] = t.be;
    // gh gamma and xhat of one access.
    auto terms = [&](const V& gv, const V& xv, float (&gg)[VW], float (&xh)[VW]) {
#pragma unroll
        for (int e = 0; e < VW; e++) {
            xh[e] = (to_f32(xv.v[e]) - mu) * rs;
            float gh = to_f32(gv.v[e]);
            if (d.act) {
                const float h = xh[e] * ga[e] + be[e], sg = sigmoidf_(h);
                gh *= sg * (1.0f + h * (1.0f - sg));
            }
            gg[e] = gh * ga[e];
        }
    };
    V gv[U], xv[U];
    auto load = [&](int u, int64_t p) {
        gv[u] = *reinterpret_cast<const V*>(gy + off + p * d.C);
        xv[u] = *reinterpret_cast<const V*>(x + off + p * d.C);
    };
    float s1 = 0.0f, s2 = 0.0f;
    if (t.on)
        gn_group_sweep<U>(t.r0, d.P, gs.rows, load, [&](int u, int64_t) {
            float gg[VW], xh[VW];
            terms(gv[u], xv[u], gg, xh);
#pragma unroll
            for (int e = 0; e < VW; e++) {
                s1 += gg[e];
                s2 += gg[e] * xh[e];
            }
        });
    const double M = double(d.P * d.Cg);
    const float k0 = float(block_sum(double(s1), sh) / M), k1 = float(block_sum(double(s2), sh) / M);
    if (!t.on) return;
    gn_group_sweep<U>(t.r0, d.P, gs.rows, load, [&](int u, int64_t p) {
        float gg[VW], xh[VW];
        terms(gv[u], xv[u], gg, xh);
        V rv;
        if (res) rv = *reinterpret_cast<const V*>(res + off + p * d.C);
        V o;
#pragma unroll
        for (int e = 0; e < VW; e++) {
            const float v = rs * (gg[e] - k0 - xh[e] * k1);
            o.v[e] = from_f32<T>(res ? v + to_f32(rv.v[e]) : v);
        }
        *reinterpret_cast<V*>(dx + off + p * d.C) = o;
    });
}

// The vector width the one-block-per-group kernels take for d and these pointers (0: not taken).
// GL_GN_GROUP=0 turns them off (a comparison in one binary), =1 takes them at any group size.
template <class T>
int gn_group_vw(const Gn& d, std::initializer_list<const void*> ptrs) {
    static const int mode = [] {
        const char* e = std::getenv("GL_GN_GROUP");
        return e ? std::atoi(e) : -1;
    }();
    if (sizeof(T) != 2 || mode == 0 || d.Cg % 2 != 0) return 0;
    if (mode != 1 && d.P * d.Cg > kGroupMaxElems) return 0;
    for (int vw : {8, 4, 2}) {
        if (d.Cg % vw != 0 || d.Cg / vw > 1024) continue;
        bool ok = true;
        for (const void* q : ptrs) ok = ok && (q == nullptr || reinterpret_cast<uintptr_t>(q) % (vw * sizeof(T)) == 0);
        if (ok) return vw;
    }
    return 0;
}

template <class F>
void with_vw(int vw, F&& f) {
    if (vw == 8) f(std::integral_constant<int, 8>{});
    else if (vw == 4) f(std::integral_constant<int, 4>{});
    else f(std::integral_constant<int, 2>{});
}

}  // namespace gl::gnk
