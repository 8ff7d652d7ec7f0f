// Group normalisation, shared by cuda/norms.cu: the problem's shape (Gn) and the kernels that take
// a set of adjacent groups of one sample per cluster of blocks, for groups small enough to stream
// twice from L2.
#pragma once
#include <algorithm>
#include <initializer_list>
#include <type_traits>

#include <cooperative_groups.h>

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

// ---- a set of groups per cluster ----
// For groups of up to kGroupMaxElems elements (every group norm of SD1.5's UNet, the smaller ones
// of its VAE) one kernel makes the statistics and the affine map (forward) or dx (the frozen-affine
// backward), streaming the groups twice (the second time from L2) instead of three or four kernels.
// Work unit: a set of S adjacent groups of one sample (S Cg channels, at least 64 bytes a position,
// so a position's accesses are whole sectors: one group of 10 channels alone is 20 bytes of a 640-byte
// row, which left the L2 two-thirds busy for a third of the bytes), split over the Q blocks of a
// cluster (positions [q span, q span + span) each), so that a batch of 2 still fills the GPU.
// Thread (r, j) of a block owns the VW channels [j VW, j VW + VW) of the set (all in group
// j VW / Cg) at positions p0 + r, p0 + r + rows, ...: one VW-element access per position, several in
// flight. Sums are per thread in float, across the block in double by a fixed tree over the rows
// then the group's lanes in order, across the cluster in block-rank order through distributed shared
// memory (every block gets the same totals: deterministic). The forward sums x - x[group's first
// element] (a shift from inside the group, so E[x^2] - E[x]^2 does not cancel).
constexpr int64_t kGroupMaxElems = 131072;
constexpr int kSetThreads = 512, kSetMaxGroups = 64, kSetMaxBlocks = 8;

template <class T, int VW>
struct alignas(VW * sizeof(T)) Pack {
    T v[VW];
};

struct GnSet {
    int S, Q;        // groups per set, blocks per set (a cluster)
    int lanes, rows; // threads per position (S Cg / VW), positions per sweep (blockDim = rows lanes)
    int h0;          // the largest power of two below rows (the row tree's first stride; 0: one row)
    int64_t span;    // positions per block (the last block of a set may have fewer)
};

// Positions r0, r0 + rows, ... below p1 in batches of U: load(u, p) for each position of a batch
// first, then use(u, p), so the loads of a batch overlap. The forward takes U = 16 / VW (32 bytes a
// thread in flight), the backward 8 / VW of each of its two tensors.
template <int U, class Load, class Use>
__device__ __forceinline__ void gn_group_sweep(int64_t r0, int64_t p1, int rows, Load&& load, Use&& use) {
    for (int64_t p = r0; p < p1; p += int64_t(U) * rows) {
#pragma unroll
        for (int u = 0; u < U; u++)
            if (p + int64_t(u) * rows < p1) load(u, p + int64_t(u) * rows);
#pragma unroll
        for (int u = 0; u < U; u++)
            if (p + int64_t(u) * rows < p1) use(u, p + int64_t(u) * rows);
    }
}

// Where thread threadIdx.x of block blockIdx.x works: sample n, set, rank q in the cluster; its row
// r, lane j and group (gi in the set, g in the sample); positions [p0, p1); the element offset of
// the set's first channel at position 0 (base) and of its own first access (off), and the affine
// terms of its VW channels.
template <int VW>
struct GnThread {
    int64_t base, off, p0, p1, g;
    int q, r, j, gi;
    float ga[VW], be[VW];
    __device__ GnThread(const Gn& d, const GnSet& gs, const void* gm, DType tg, const void* bt, DType tb) {
        const int64_t sets = d.G / gs.S, pair = blockIdx.x / gs.Q;
        const int64_t n = pair / sets, set = pair % sets;
        q = int(blockIdx.x % gs.Q);
        j = int(threadIdx.x) % gs.lanes;
        r = int(threadIdx.x) / gs.lanes;
        gi = int(j * VW / d.Cg);
        g = set * gs.S + gi;
        p0 = q * gs.span;
        p1 = p0 + gs.span < d.P ? p0 + gs.span : d.P;
        base = n * d.P * d.C + set * gs.S * d.Cg;
        off = base + j * VW;
#pragma unroll
        for (int e = 0; e < VW; e++) {
            ga[e] = load_any(gm, tg, set * gs.S * d.Cg + j * VW + e);
            be[e] = load_any(bt, tb, set * gs.S * d.Cg + j * VW + e);
        }
    }
};

// The sums of a and of b over each group of the set (over the whole cluster): tot[gi] and
// tot[S + gi] for every thread once it returns. red: 2 blockDim doubles; tot: 4 S.
template <int VW>
__device__ void gn_set_sums(float a, float b, const Gn& d, const GnSet& gs, const GnThread<VW>& t, double* red,
                            double* tot) {
    const int T = int(blockDim.x), tid = int(threadIdx.x);
    red[tid] = a;
    red[T + tid] = b;
    __syncthreads();
    for (int h = gs.h0; h > 0; h >>= 1) {
        if (t.r < h && t.r + h < gs.rows) {
            red[tid] += red[tid + h * gs.lanes];
            red[T + tid] += red[T + tid + h * gs.lanes];
        }
        __syncthreads();
    }
    double* part = tot + 2 * gs.S;  // this block's sums, read by the cluster
    if (tid < gs.S) {
        const int per = int(d.Cg / VW);
        double x = 0.0, y = 0.0;
        for (int k = 0; k < per; k++) {
            x += red[tid * per + k];
            y += red[T + tid * per + k];
        }
        part[tid] = x;
        part[gs.S + tid] = y;
    }
    if (gs.Q == 1) {
        __syncthreads();
        if (tid < 2 * gs.S) tot[tid] = part[tid];
        __syncthreads();
        return;
    }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    namespace cg = cooperative_groups;
    cg::cluster_group cl = cg::this_cluster();
    cl.sync();  // every block's part is written
    if (tid < 2 * gs.S) {
        double x = 0.0;
        for (int k = 0; k < gs.Q; k++) x += cl.map_shared_rank(part, k)[tid];
        tot[tid] = x;
    }
    cl.sync();  // the peers are done reading part; tot is visible to the block
#else
    __trap();  // clusters are launched only for images built for sm_90 or later (gn_set_plan)
#endif
}

template <class T, int VW>
__global__ void __launch_bounds__(kSetThreads, 2) gn_group_fwd(const T* x, const void* gm, DType tg, const void* bt,
                                                               DType tb, float* mean, float* rstd, T* y, Gn d, GnSet gs) {
    kernel_entry();
    constexpr int U = 16 / VW;
    using V = Pack<T, VW>;
    __shared__ double red[2 * kSetThreads], tot[4 * kSetMaxGroups];
    const GnThread<VW> t(d, gs, gm, tg, bt, tb);
    const T* xp = x + t.off;
    T* yp = y + t.off;
    const float K = to_f32(x[t.base + t.gi * d.Cg]);
    float s = 0.0f, ss = 0.0f;
    V v[U];
    gn_group_sweep<U>(
        t.p0 + t.r, t.p1, gs.rows, [&](int u, int64_t p) { v[u] = *reinterpret_cast<const V*>(xp + p * d.C); },
        [&](int u, int64_t) {
#pragma unroll
            for (int e = 0; e < VW; e++) {
                const float w = to_f32(v[u].v[e]) - K;
                s += w;
                ss += w * w;
            }
        });
    gn_set_sums(s, ss, d, gs, t, red, tot);
    const double M = double(d.P * d.Cg), m1 = tot[t.gi] / M, var = fmax(tot[gs.S + t.gi] / M - m1 * m1, 0.0);
    const float mu = float(double(K) + m1), rs = float(1.0 / sqrt(var + double(d.eps)));
    if (t.q == 0 && t.r == 0 && t.j * VW == t.gi * d.Cg) {  // the group's first lane of the cluster's first block
        const int64_t at = (t.base / (d.P * d.C)) * d.G + t.g;
        mean[at] = mu;
        rstd[at] = rs;
    }
    float gr[VW];  // gamma rstd
#pragma unroll
    for (int e = 0; e < VW; e++) gr[e] = t.ga[e] * rs;
    gn_group_sweep<U>(
        t.p0 + t.r, t.p1, gs.rows, [&](int u, int64_t p) { v[u] = *reinterpret_cast<const V*>(xp + p * d.C); },
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
__global__ void __launch_bounds__(kSetThreads, 2) gn_group_bwd(const T* gy, const T* x, const void* gm, DType tg,
                                                               const void* bt, DType tb, const float* mean,
                                                               const float* rstd, const T* res, T* dx, Gn d, GnSet gs) {
    kernel_entry();
    constexpr int U = 8 / VW;
    using V = Pack<T, VW>;
    __shared__ double red[2 * kSetThreads], tot[4 * kSetMaxGroups];
    const GnThread<VW> t(d, gs, gm, tg, bt, tb);
    const int64_t off = t.off, at = (t.base / (d.P * d.C)) * d.G + t.g;
    const float mu = mean[at], rs = rstd[at];
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
    gn_group_sweep<U>(t.p0 + t.r, t.p1, gs.rows, load, [&](int u, int64_t) {
        float gg[VW], xh[VW];
        terms(gv[u], xv[u], gg, xh);
#pragma unroll
        for (int e = 0; e < VW; e++) {
            s1 += gg[e];
            s2 += gg[e] * xh[e];
        }
    });
    gn_set_sums(s1, s2, d, gs, t, red, tot);
    const double M = double(d.P * d.Cg);
    const float k0 = float(tot[t.gi] / M), k1 = float(tot[gs.S + t.gi] / M);
    gn_group_sweep<U>(t.p0 + t.r, t.p1, gs.rows, load, [&](int u, int64_t p) {
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

// How the set kernels take d with these pointers: vw = 0 when they do not.
struct GnSetPlan {
    int vw = 0, threads = 0;
    GnSet set{};
};

// Whether the kernels' image may use clusters (built for sm_90 or later: gn_set_sums).
inline bool gn_clusters_usable(const void* kernel) {
    return per_device([&] { return kernel_image_is(kernel, 9, 90, false); });
}

// GL_GN_GROUP=0 turns the set kernels off (a comparison in one binary), =1 takes them at any group
// size; GL_GN_CLUSTER=0 keeps one block per set.

// The vector width (the widest of 8, 4, 2 that divides Cg and the pointers' alignment), the set (the
// fewest groups giving 64 bytes a position), the cluster (blocks per set doubling up to 8 while the
// grid has fewer than two blocks per SM) and the block (about 8 accesses a thread, whole positions).
template <class T>
GnSetPlan gn_set_plan(const Gn& d, std::initializer_list<const void*> ptrs, bool clusters, int sms) {
    static const int mode = int(env_number("GL_GN_GROUP", -1)), cluster_mode = int(env_number("GL_GN_CLUSTER", -1));
    GnSetPlan pl;
    if (sizeof(T) != 2 || mode == 0 || d.Cg % 2 != 0 || d.P < 1) return pl;
    if (mode != 1 && d.P * d.Cg > kGroupMaxElems) return pl;
    for (int vw : {8, 4, 2}) {
        if (d.Cg % vw != 0) continue;
        bool ok = true;
        for (const void* q : ptrs) ok = ok && (q == nullptr || reinterpret_cast<uintptr_t>(q) % (vw * sizeof(T)) == 0);
        if (!ok) continue;
        int S = 1;
        while (S < d.G && (S * d.Cg * int64_t(sizeof(T)) < 64 || d.G % S != 0)) S++;
        if (S > kSetMaxGroups || d.G % S != 0 || S * d.Cg / vw > kSetThreads) return pl;
        GnSet& gs = pl.set;
        gs.S = S;
        gs.lanes = int(S * d.Cg / vw);
        const int64_t pairs = d.N * (d.G / S);
        gs.Q = 1;
        if (clusters && cluster_mode != 0)
            while (gs.Q < kSetMaxBlocks && pairs * gs.Q < 2 * int64_t(sms) && d.P >= 16 * int64_t(gs.Q)) gs.Q *= 2;
        gs.span = ceil_div(d.P, int64_t(gs.Q));
        const int64_t accesses = gs.span * gs.lanes;
        int64_t t = std::min<int64_t>(kSetThreads, std::max<int64_t>(128, ceil_div(accesses, int64_t(8))));
        gs.rows = int(std::max<int64_t>(1, std::min<int64_t>(t / gs.lanes, gs.span)));
        gs.h0 = 0;
        while (2 * gs.h0 < gs.rows) gs.h0 = gs.h0 ? 2 * gs.h0 : 1;
        if (gs.h0 >= gs.rows) gs.h0 /= 2;
        pl.threads = gs.rows * gs.lanes;
        pl.vw = vw;
        return pl;
    }
    return pl;
}

// Launches kern on d's sets (a cluster of set.Q blocks per set when Q > 1).
template <class Kern, class... Args>
void gn_set_launch(Kern kern, const Gn& d, const GnSetPlan& pl, cudaStream_t st, Args... args) {
    const unsigned blocks = unsigned(d.N * (d.G / pl.set.S) * pl.set.Q);
    if (pl.set.Q == 1) {
        kern<<<blocks, unsigned(pl.threads), 0, st>>>(args..., d, pl.set);
        return;
    }
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(blocks);
    cfg.blockDim = dim3(unsigned(pl.threads));
    cfg.stream = st;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = unsigned(pl.set.Q);
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    GL_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kern, args..., d, pl.set));
}

template <class F>
void with_vw(int vw, F&& f) {
    if (vw == 8) f(std::integral_constant<int, 8>{});
    else if (vw == 4) f(std::integral_constant<int, 4>{});
    else f(std::integral_constant<int, 2>{});
}

}  // namespace gl::gnk
