// Attention dispatch shared by cuda/attention.cu and bench/attention_check.cu (no ggml-lite core
// library needed: of the core only the DType enum), plus the exact path and the small backward
// passes.
// Semantics (ops/attention.cpp): q [B, L, H, d], k [B, S, H, d], v [B, S, H, dv], dense;
// o [B, L, H, dv]; lse [B, H, L] f32 = natural-log log-sum-exp of the scaled scores; causal masks
// keys j > i. Backward: dq, dk, dv from (q, k, v, o, lse, go).
// Paths:
//   tensor cores (attention_mma.cuh): bf16 / f16 with d == dv, d % 8 == 0, d <= 256, scale > 0 and
//     16-byte aligned pointers.
//   exact (everything else, and all f32): one warp per query row (forward, dQ) or key row (dK, dV),
//     lanes over keys for the dot products (double accumulation) and over channels for the weighted
//     sums, online softmax in fp32/double. Correct for any d, dv (d + dv <= 1536) but not fast: it is
//     the reference-grade path for f32 graphs and odd shapes.
// Backward workspace: delta [B, H, L] f32, go cast to q's dtype when it differs, and the dK/dV split
// partials of the tensor-core path. Everything is deterministic (fixed reduction orders, no atomics).
#pragma once
#include <cmath>
#include <type_traits>

#include "ggml-lite/cuda/attention_mma_bwd.cuh"
#include "ggml-lite/cuda/attention_sm90.cuh"
#include "ggml-lite/cuda/device.cuh"

namespace gl::attn {

struct Problem {
    int B = 0, L = 0, S = 0, H = 0, d = 0, dv = 0;
    float scale = 0.f;  // already resolved (0 -> 1/sqrt(d) done by the caller)
    bool causal = false;
    DType t = DType::f32;  // dtype of q, k, v, o, dq, dk, dv (f32, bf16 or f16, as are o_t, go_t)
    const void *q = nullptr, *k = nullptr, *v = nullptr;
    void* o = nullptr;  // forward outputs
    float* lse = nullptr;
    const void* o_in = nullptr;  // backward inputs
    DType o_t = DType::f32;
    const float* lse_in = nullptr;
    const void* go = nullptr;
    DType go_t = DType::f32;
    void *grad_q = nullptr, *grad_k = nullptr, *grad_v = nullptr;  // backward outputs
};

// Dot product of an smem f32 row with a global row, in double.
template <class T>
__device__ __forceinline__ double dot_row(const float* a, const T* b, int n) {
    double s = 0;
    for (int c = 0; c < n; ++c) s += double(a[c]) * double(to_f32(b[c]));
    return s;
}
// acc[c] += sum_t w_t * rows[t][c] for the 32 lanes' weights w (lane t holds w_t), t < nt.
template <class T>
__device__ __forceinline__ void axpy_rows(double* acc, int n, double w, const T* rows, int64_t rs, int nt, int lane) {
    for (int c0 = 0; c0 < n; c0 += 32) {
        const int c = c0 + lane;
        double a = c < n ? acc[c] : 0.0;
        for (int t = 0; t < nt; ++t) {
            const double wt = __shfl_sync(0xffffffffu, w, t);
            if (c < n) a += wt * double(to_f32(rows[t * rs + c]));
        }
        if (c < n) acc[c] = a;
    }
}

constexpr int kSimpleWarps = 4;

struct SimpleArgs {
    Problem p;
    const float* delta;
    const void* go;  // as T
};

// Forward: one warp per query row (b, i, h); smem per warp: q (f32) then o accumulator (double).
template <class T>
__global__ void simple_fwd(SimpleArgs a) {
    kernel_entry();
    const Problem& p = a.p;
    extern __shared__ double sm_d[];
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const int64_t row = int64_t(blockIdx.x) * kSimpleWarps + w;
    if (row >= int64_t(p.B) * p.L * p.H) return;
    const int h = int(row % p.H), i = int(row / p.H % p.L), b = int(row / (int64_t(p.H) * p.L));
    double* so = sm_d + w * (p.d + p.dv);
    float* sq = reinterpret_cast<float*>(so + p.dv);
    const T* qr = static_cast<const T*>(p.q) + row * p.d;
    for (int c = lane; c < p.d; c += 32) sq[c] = to_f32(qr[c]);
    for (int c = lane; c < p.dv; c += 32) so[c] = 0.0;
    __syncwarp();
    const int64_t krs = int64_t(p.H) * p.d, vrs = int64_t(p.H) * p.dv;
    const T* kb = static_cast<const T*>(p.k) + int64_t(b) * p.S * krs + int64_t(h) * p.d;
    const T* vb = static_cast<const T*>(p.v) + int64_t(b) * p.S * vrs + int64_t(h) * p.dv;
    const int jend = p.causal ? min(p.S, i + 1) : p.S;
    double m = -INFINITY, l = 0.0;
    for (int j0 = 0; j0 < jend; j0 += 32) {
        const int j = j0 + lane;
        const double s = j < jend ? double(p.scale) * dot_row(sq, kb + j * krs, p.d) : -INFINITY;
        const double mn = fmax(m, warp_max(s));
        const double alpha = exp(m - mn), pr = j < jend ? exp(s - mn) : 0.0;
        l = l * alpha + warp_sum(pr);
        for (int c = lane; c < p.dv; c += 32) so[c] *= alpha;
        __syncwarp();
        axpy_rows(so, p.dv, pr, vb + j0 * vrs, vrs, min(32, jend - j0), lane);
        __syncwarp();
        m = mn;
    }
    T* orow = static_cast<T*>(p.o) + row * p.dv;
    for (int c = lane; c < p.dv; c += 32) orow[c] = from_f32<T>(float(so[c] / l));
    if (lane == 0) p.lse[(int64_t(b) * p.H + h) * p.L + i] = float(m + log(l));
}

// dQ: one warp per query row; smem per warp: dq accumulator (double), q, go (f32).
template <class T>
__global__ void simple_dq(SimpleArgs a) {
    kernel_entry();
    const Problem& p = a.p;
    extern __shared__ double sm_d[];
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const int64_t row = int64_t(blockIdx.x) * kSimpleWarps + w;
    if (row >= int64_t(p.B) * p.L * p.H) return;
    const int h = int(row % p.H), i = int(row / p.H % p.L), b = int(row / (int64_t(p.H) * p.L));
    double* sdq = sm_d + w * (2 * p.d + p.dv);
    float* sq = reinterpret_cast<float*>(sdq + p.d);
    float* sg = sq + p.d;
    const T* qr = static_cast<const T*>(p.q) + row * p.d;
    const T* gr = static_cast<const T*>(a.go) + row * p.dv;
    for (int c = lane; c < p.d; c += 32) sq[c] = to_f32(qr[c]), sdq[c] = 0.0;
    for (int c = lane; c < p.dv; c += 32) sg[c] = to_f32(gr[c]);
    __syncwarp();
    const int64_t krs = int64_t(p.H) * p.d, vrs = int64_t(p.H) * p.dv, hl = (int64_t(b) * p.H + h) * p.L + i;
    const T* kb = static_cast<const T*>(p.k) + int64_t(b) * p.S * krs + int64_t(h) * p.d;
    const T* vb = static_cast<const T*>(p.v) + int64_t(b) * p.S * vrs + int64_t(h) * p.dv;
    const double lse = p.lse_in[hl], di = a.delta[hl];
    const int jend = p.causal ? min(p.S, i + 1) : p.S;
    for (int j0 = 0; j0 < jend; j0 += 32) {
        const int j = j0 + lane;
        double ds = 0.0;
        if (j < jend) {
            const double pr = exp(double(p.scale) * dot_row(sq, kb + j * krs, p.d) - lse);
            ds = pr * (dot_row(sg, vb + j * vrs, p.dv) - di);
        }
        axpy_rows(sdq, p.d, ds, kb + j0 * krs, krs, min(32, jend - j0), lane);
    }
    __syncwarp();
    T* out = static_cast<T*>(p.grad_q) + row * p.d;
    for (int c = lane; c < p.d; c += 32) out[c] = from_f32<T>(float(double(p.scale) * sdq[c]));
}

// dK, dV: one warp per key row (b, j, h); smem per warp: dk, dv accumulators (double), k, v (f32).
template <class T>
__global__ void simple_dkdv(SimpleArgs a) {
    kernel_entry();
    const Problem& p = a.p;
    extern __shared__ double sm_d[];
    const int lane = threadIdx.x & 31, w = threadIdx.x >> 5;
    const int64_t row = int64_t(blockIdx.x) * kSimpleWarps + w;
    if (row >= int64_t(p.B) * p.S * p.H) return;
    const int h = int(row % p.H), j = int(row / p.H % p.S), b = int(row / (int64_t(p.H) * p.S));
    double* sdk = sm_d + w * (2 * p.d + 2 * p.dv);
    double* sdv = sdk + p.d;
    float* sk = reinterpret_cast<float*>(sdv + p.dv);
    float* sv = sk + p.d;
    const T* kr = static_cast<const T*>(p.k) + row * p.d;
    const T* vr = static_cast<const T*>(p.v) + row * p.dv;
    for (int c = lane; c < p.d; c += 32) sk[c] = to_f32(kr[c]), sdk[c] = 0.0;
    for (int c = lane; c < p.dv; c += 32) sv[c] = to_f32(vr[c]), sdv[c] = 0.0;
    __syncwarp();
    const int64_t qrs = int64_t(p.H) * p.d, grs = int64_t(p.H) * p.dv, hl = (int64_t(b) * p.H + h) * p.L;
    const T* qb = static_cast<const T*>(p.q) + int64_t(b) * p.L * qrs + int64_t(h) * p.d;
    const T* gb = static_cast<const T*>(a.go) + int64_t(b) * p.L * grs + int64_t(h) * p.dv;
    for (int i0 = p.causal ? j : 0; i0 < p.L; i0 += 32) {
        const int i = i0 + lane;
        double pr = 0.0, ds = 0.0;
        if (i < p.L) {
            pr = exp(double(p.scale) * dot_row(sk, qb + i * qrs, p.d) - double(p.lse_in[hl + i]));
            ds = pr * (dot_row(sv, gb + i * grs, p.dv) - double(a.delta[hl + i]));
        }
        const int nt = min(32, p.L - i0);
        axpy_rows(sdv, p.dv, pr, gb + i0 * grs, grs, nt, lane);
        axpy_rows(sdk, p.d, ds, qb + i0 * qrs, qrs, nt, lane);
    }
    __syncwarp();
    T* ok = static_cast<T*>(p.grad_k) + row * p.d;
    T* ov = static_cast<T*>(p.grad_v) + row * p.dv;
    for (int c = lane; c < p.d; c += 32) ok[c] = from_f32<T>(float(double(p.scale) * sdk[c]));
    for (int c = lane; c < p.dv; c += 32) ov[c] = from_f32<T>(float(sdv[c]));
}

// delta[b, h, i] = sum_c go[b, i, h, c] * o[b, i, h, c]; one warp per row, fixed reduction order.
static __global__ void delta_kernel(const void* o, DType ot, const void* go, DType gt, float* delta, int B, int L, int H, int dv) {
    kernel_entry();
    const int lane = threadIdx.x & 31;
    const int64_t row = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
    if (row >= int64_t(B) * L * H) return;
    double s = 0.0;
    for (int c = lane; c < dv; c += 32) s += double(load_any(o, ot, row * dv + c)) * double(load_any(go, gt, row * dv + c));
    s = warp_sum(s);
    const int h = int(row % H), i = int(row / H % L), b = int(row / (int64_t(H) * L));
    if (lane == 0) delta[(int64_t(b) * H + h) * L + i] = float(s);
}

// The same for half-precision rows with dv % 8 == 0 and 16-byte alignment: one thread per row,
// 16-byte loads, fp32 sums (the tensor-core path's tolerance; delta_kernel serves the exact path).
template <class T>
__global__ void delta_vec(const T* o, const T* go, float* delta, int B, int L, int H, int dv) {
    kernel_entry();
    const int64_t row = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
    if (row >= int64_t(B) * L * H) return;
    const uint4* po = reinterpret_cast<const uint4*>(o + row * dv);
    const uint4* pg = reinterpret_cast<const uint4*>(go + row * dv);
    float s = 0.f;
    for (int c = 0; c < dv / 8; ++c) {
        const uint4 x = po[c], y = pg[c];
        const T* tx = reinterpret_cast<const T*>(&x);
        const T* ty = reinterpret_cast<const T*>(&y);
#pragma unroll
        for (int e = 0; e < 8; ++e) s = fmaf(to_f32(tx[e]), to_f32(ty[e]), s);
    }
    const int h = int(row % H), i = int(row / H % L), b = int(row / (int64_t(H) * L));
    delta[(int64_t(b) * H + h) * L + i] = s;
}

template <class T>
__global__ void cast_kernel(const void* src, DType t, T* dst, int64_t n) {
    kernel_entry();
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
        dst[i] = from_f32<T>(load_any(src, t, i));
}

// dk/dv = sum over splits (in split order) of the fp32 partials [2][nsplit][n].
template <class T>
__global__ void reduce_parts(const float* part, int nsplit, int64_t n, T* dk, T* dv) {
    kernel_entry();
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
        float sk = 0.f, sv = 0.f;
        for (int z = 0; z < nsplit; ++z) sk += part[z * n + i], sv += part[(nsplit + z) * n + i];
        dk[i] = from_f32<T>(sk);
        dv[i] = from_f32<T>(sv);
    }
}

// ---------------- dispatch ----------------

inline size_t align256(size_t x) { return ceil_div(x, 256) * 256; }
inline size_t elt_size(DType t) { return t == DType::f32 ? 4 : 2; }  // dtype_size without the core library

// The shape allows the tensor-core path (pointer alignment is checked at launch).
inline bool mma_shape(const Problem& p) {
    return p.t != DType::f32 && p.d == p.dv && p.d % 8 == 0 && p.d <= 256 && p.scale > 0.f;
}
inline bool mma_ok(const Problem& p, bool backward) {
    if (!mma_shape(p) || !aligned16(p.q) || !aligned16(p.k) || !aligned16(p.v)) return false;
    if (!backward) return aligned16(p.o);
    return aligned16(p.go) && aligned16(p.grad_q) && aligned16(p.grad_k) && aligned16(p.grad_v);
}
inline int bwd_splits(const Problem& p) {
    int n = 1;
    with_head_dim(p.d, [&](auto D) { n = dkdv_splits<typename Tiles<decltype(D)::value>::Dkdv>(p.B, p.L, p.S, p.H, sm_count()); });
    return n;
}
// Exact-path smem per block; fails (returns 0) past the 48 KiB default.
inline size_t simple_smem(const Problem& p) {
    const size_t per = 8 * size_t(2 * p.d + 2 * p.dv);  // the largest of the three kernels
    return per * kSimpleWarps <= 48 * 1024 ? per * kSimpleWarps : 0;
}

struct WsLayout {
    size_t delta = 0, go = 0, part = 0, total = 0;
    int nsplit = 1;
};
inline WsLayout bwd_layout(const Problem& p) {
    WsLayout w;
    w.delta = 0;
    size_t at = align256(sizeof(float) * size_t(p.B) * p.H * p.L);
    w.go = at;
    if (p.go_t != p.t) at += align256(elt_size(p.t) * size_t(p.B) * p.L * p.H * p.dv);
    w.part = at;
    if (mma_shape(p)) {
        w.nsplit = bwd_splits(p);
        if (w.nsplit > 1) at += align256(sizeof(float) * 2 * size_t(w.nsplit) * p.B * p.S * p.H * p.d);
    }
    w.total = at;
    return w;
}
inline size_t backward_workspace(const Problem& p) { return bwd_layout(p).total; }

inline MmaArgs mma_args(const Problem& p) {
    MmaArgs a{};
    a.q = p.q, a.k = p.k, a.v = p.v;
    a.B = p.B, a.L = p.L, a.S = p.S, a.H = p.H, a.d = p.d, a.causal = p.causal, a.nsplit = 1;
    a.scale = p.scale, a.scale_log2 = p.scale * kLog2e;
    return a;
}

inline cudaError_t forward(const Problem& p, cudaStream_t s) {
    cudaError_t e = cudaSuccess;
    if (mma_ok(p, false)) {
        MmaArgs a = mma_args(p);
        a.o = p.o, a.lse_out = p.lse;
        visit_float(p.t, [&](auto t) {
            using T = decltype(t);
            if constexpr (!std::is_same_v<T, float>) {
                if (sm90::covers_fwd(a)) e = sm90::launch_fwd<T, 40>(a, s);
                else with_head_dim(p.d, [&](auto D) { e = mma_forward<T, decltype(D)::value>(a, s); });
            }
        });
        return e;
    }
    const size_t smem = simple_smem(p);
    if (!smem) return cudaErrorInvalidValue;
    visit_float(p.t, [&](auto t) {
        using T = decltype(t);
        simple_fwd<T><<<grid_for(int64_t(p.B) * p.L * p.H, kSimpleWarps), 32 * kSimpleWarps, smem, s>>>(SimpleArgs{p, nullptr, nullptr});
        e = cudaGetLastError();
    });
    return e;
}

// The dK/dV pass then the dQ pass on tensor cores: wgmma (attention_sm90.cuh) where it covers the
// shape (its dK/dV pass only without query splits), else mma.sync.
template <class T>
cudaError_t backward_passes(const MmaArgs& a, cudaStream_t s) {
    cudaError_t e = cudaSuccess;
    if (!sm90::covers(a)) {
        with_head_dim(a.d, [&](auto D) { e = mma_backward<T, decltype(D)::value>(a, s); });
        return e;
    }
    sm90::with_dn(a.d, [&](auto D) {
        constexpr int DN = decltype(D)::value;
        e = a.nsplit == 1 ? sm90::launch_dkdv<T, DN>(a, s) : launch_dkdv<T, typename Tiles<sm90::Dim<DN>::D>::Dkdv>(a, s);
        if (e == cudaSuccess) e = sm90::launch_dq<T, DN>(a, s);
    });
    return e;
}

inline cudaError_t backward(const Problem& p, void* ws, size_t ws_bytes, cudaStream_t s) {
    const WsLayout w = bwd_layout(p);
    if (ws_bytes < w.total) return cudaErrorInvalidValue;
    char* base = static_cast<char*>(ws);
    float* delta = reinterpret_cast<float*>(base + w.delta);
    const int64_t rows = int64_t(p.B) * p.L * p.H;
    cudaError_t e = cudaSuccess;
    const void* go = p.go;
    if (p.go_t != p.t) {  // the main passes read go in q's dtype
        void* dst = base + w.go;
        visit_float(p.t, [&](auto t) {
            using T = decltype(t);
            const int64_t n = rows * p.dv;
            cast_kernel<T><<<grid_for(n, 256), 256, 0, s>>>(p.go, p.go_t, static_cast<T*>(dst), n);
        });
        go = dst;
        if ((e = cudaGetLastError()) != cudaSuccess) return e;
    }
    if (p.t != DType::f32 && p.o_t == p.t && p.dv % 8 == 0 && aligned16(p.o_in) && aligned16(go)) {
        visit_float(p.t, [&](auto t) {
            using T = decltype(t);
            delta_vec<T><<<grid_for(rows, 128), 128, 0, s>>>(static_cast<const T*>(p.o_in), static_cast<const T*>(go), delta,
                                                                 p.B, p.L, p.H, p.dv);
        });
    } else {
        delta_kernel<<<grid_for(rows * 32, 256), 256, 0, s>>>(p.o_in, p.o_t, p.go, p.go_t, delta, p.B, p.L, p.H, p.dv);
    }
    if ((e = cudaGetLastError()) != cudaSuccess) return e;
    Problem pg = p;
    pg.go = go;
    if (mma_ok(pg, true)) {
        MmaArgs a = mma_args(p);
        a.go = go, a.lse = p.lse_in, a.delta = delta, a.o = p.grad_q, a.dk = p.grad_k, a.dv = p.grad_v;
        a.nsplit = w.nsplit;
        a.part = reinterpret_cast<float*>(base + w.part);
        visit_float(p.t, [&](auto t) {
            using T = decltype(t);
            if constexpr (!std::is_same_v<T, float>) {
                e = backward_passes<T>(a, s);
                if (e == cudaSuccess && a.nsplit > 1) {
                    const int64_t n = int64_t(p.B) * p.S * p.H * p.d;
                    reduce_parts<T><<<grid_for(n, 256), 256, 0, s>>>(a.part, a.nsplit, n, static_cast<T*>(p.grad_k), static_cast<T*>(p.grad_v));
                    e = cudaGetLastError();
                }
            }
        });
        return e;
    }
    const size_t smem = simple_smem(p);
    if (!smem) return cudaErrorInvalidValue;
    visit_float(p.t, [&](auto t) {
        using T = decltype(t);
        const SimpleArgs sa{p, delta, go};
        simple_dq<T><<<grid_for(rows, kSimpleWarps), 32 * kSimpleWarps, smem, s>>>(sa);
        if ((e = cudaGetLastError()) != cudaSuccess) return;
        simple_dkdv<T><<<grid_for(int64_t(p.B) * p.S * p.H, kSimpleWarps), 32 * kSimpleWarps, smem, s>>>(sa);
        e = cudaGetLastError();
    });
    return e;
}

}  // namespace gl::attn
