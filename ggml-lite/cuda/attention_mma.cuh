// Flash attention on tensor cores (bf16 / f16 in, fp32 accumulate), mma.sync.m16n8k16 + ldmatrix +
// cp.async, for sm_80..sm_90: the arguments, tile configurations and forward kernel here, the
// backward in attention_mma_bwd.cuh. Used by cuda/attention.cu through attention_impl.cuh.
// Layouts: q, k, v, o, go, dq, dk, dv are dense [B, L|S, H, d] (row of one head = d elements, H*d
// apart); lse and delta are [B, H, L] f32. d == dv, d % 8 == 0, d <= 256, scale > 0; the head dim is
// padded to a template D (48, 64, 80, 96, 128, 160, 192, 256) by zero-filled smem columns.
// Kernels (per (b, h) tile; NW warps of 16*MT rows; tile sizes per head dim in Tiles<D>; smem rows
// padded by 8 elements so that ldmatrix is conflict-free without a swizzle; K/V or Q/dO tiles
// double-buffered with cp.async):
//   fwd_kernel:  FA2 forward, grid (L/BM, H, B). Online softmax in fp32 with exp2 (log2e folded into
//                the scale); saves lse = max*scale + log(sum) (natural log).
//   the backward kernels (dkdv_kernel, dq_kernel): attention_mma_bwd.cuh.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "ggml-lite/cuda/attention_warp.cuh"

namespace gl::attn {

constexpr float kLog2e = 1.4426950408889634f;

struct MmaArgs {
    const void *q, *k, *v, *go;  // [B, L|S, H, d]
    const float *lse, *delta;    // [B, H, L]
    void* o;                     // fwd: o; dq_kernel: dq
    float* lse_out;              // fwd: lse
    void *dk, *dv;               // dkdv_kernel when nsplit == 1
    float* part;                 // dkdv_kernel when nsplit > 1: [2][nsplit][B, S, H, d] (dk, dv)
    int B, L, S, H, d, causal, nsplit;
    float scale, scale_log2;     // scale_log2 = scale * log2(e)
};

// Head (b, h)'s first row as an element offset into the query-length tensors (q, o, go, dq:
// [B, L, H, d]) and the key-length ones (k, v, dk, dv: [B, S, H, d]).
__device__ __forceinline__ int64_t query_off(const MmaArgs& a, int b, int h) { return (int64_t(b) * a.L * a.H + h) * a.d; }
__device__ __forceinline__ int64_t key_off(const MmaArgs& a, int b, int h) { return (int64_t(b) * a.S * a.H + h) * a.d; }
template <class T> struct HeadInputs {
    const T *q, *go, *k, *v;  // go is null when a.go is (the forward)
};
template <class T>
__device__ __forceinline__ HeadInputs<T> head_inputs(const MmaArgs& a, int b, int h) {
    const int64_t qo = query_off(a, b, h), ko = key_off(a, b, h);
    return {static_cast<const T*>(a.q) + qo, a.go ? static_cast<const T*>(a.go) + qo : nullptr,
            static_cast<const T*>(a.k) + ko, static_cast<const T*>(a.v) + ko};
}

// Tile configurations (types, so benches can try alternatives). Every warp owns 16*MT rows.
// Padded head-dim columns are computed, not skipped: skipping their MMAs with run-time branches
// was slower, even when nothing is skipped, as it breaks the unrolled MMA schedule (bench/RESULTS.md).
// Fwd: NW warps, MT m16 tiles per warp, BN keys per step.
template <int D_, int NW_, int MT_, int BN_> struct FwdCfg {
    static constexpr int D = D_, NW = NW_, MT = MT_, BN = BN_, BM = 16 * MT * NW, SD = D + 8;
    static constexpr int smem = (BM + 4 * BN) * SD * 2;
};
// dK/dV: 16*NW keys per CTA; BM queries per stage, processed in QC chunks; DO output columns per
// CTA (a column split when the dK/dV accumulators would not fit in registers).
template <int D_, int NW_, int BM_, int QC_, int DO_> struct DkdvCfg {
    static constexpr int D = D_, NW = NW_, BN = 16 * NW, BM = BM_, QC = QC_, DO = DO_, NCS = D / DO, SD = D + 8;
    static constexpr int smem = (2 * BN + 4 * BM) * SD * 2 + 4 * BM * 4;
};
// dQ: NW warps of 16*MT queries, BN keys per step.
template <int D_, int NW_, int BN_, int MT_ = 1> struct DqCfg {
    static constexpr int D = D_, NW = NW_, MT = MT_, BM = 16 * MT * NW, BN = BN_, SD = D + 8;
    static constexpr int smem = (2 * BM + 4 * BN) * SD * 2;
};
// Defaults per padded head dim: the fastest variants of the bench/attention_check.cu sweep on H200.
template <int D> struct Tiles;
template <> struct Tiles<48> { using Fwd = FwdCfg<48, 4, 2, 128>; using Dkdv = DkdvCfg<48, 8, 64, 64, 48>; using Dq = DqCfg<48, 4, 32>; };
template <> struct Tiles<64> { using Fwd = FwdCfg<64, 4, 2, 64>; using Dkdv = DkdvCfg<64, 4, 64, 64, 64>; using Dq = DqCfg<64, 4, 64>; };
template <> struct Tiles<80> { using Fwd = FwdCfg<80, 4, 2, 64>; using Dkdv = DkdvCfg<80, 4, 64, 64, 80>; using Dq = DqCfg<80, 4, 32>; };
template <> struct Tiles<96> { using Fwd = FwdCfg<96, 4, 2, 64>; using Dkdv = DkdvCfg<96, 4, 64, 32, 96>; using Dq = DqCfg<96, 4, 64>; };
template <> struct Tiles<128> { using Fwd = FwdCfg<128, 4, 1, 64>; using Dkdv = DkdvCfg<128, 4, 32, 32, 128>; using Dq = DqCfg<128, 4, 64>; };
template <> struct Tiles<160> { using Fwd = FwdCfg<160, 4, 1, 32>; using Dkdv = DkdvCfg<160, 2, 32, 32, 80>; using Dq = DqCfg<160, 4, 32>; };
template <> struct Tiles<192> { using Fwd = FwdCfg<192, 4, 1, 32>; using Dkdv = DkdvCfg<192, 4, 32, 16, 96>; using Dq = DqCfg<192, 4, 32>; };
template <> struct Tiles<256> { using Fwd = FwdCfg<256, 4, 1, 32>; using Dkdv = DkdvCfg<256, 4, 32, 16, 128>; using Dq = DqCfg<256, 4, 32>; };

// ---------------- forward ----------------

template <class T, class C>
__global__ void __launch_bounds__(C::NW * 32) fwd_kernel(MmaArgs a) {
    kernel_entry();
    constexpr int D = C::D, MT = C::MT, BN = C::BN, BM = C::BM, SD = C::SD, NT = C::NW * 32;
    constexpr int NTN = BN / 8, NTD = D / 8;
    extern __shared__ __align__(16) unsigned char smem[];
    T* sQ = reinterpret_cast<T*>(smem);  // [BM][SD], later the staged output
    T* sK = sQ + BM * SD;                // [2][BN][SD]
    T* sV = sK + 2 * BN * SD;            // [2][BN][SD]
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int m0 = blockIdx.x * BM, h = blockIdx.y, b = blockIdx.z, ld = a.H * a.d;
    const HeadInputs<T> in = head_inputs<T>(a, b, h);
    const T *q = in.q, *k = in.k, *v = in.v;
    int nkb = ceil_div(a.S, BN);
    if (a.causal) nkb = min(nkb, ceil_div(min(m0 + BM, a.L), BN));

    load_tile<T, BM, D, NT>(sQ, q, m0, a.L, ld, a.d, tid);
    load_tile<T, BN, D, NT>(sK, k, 0, a.S, ld, a.d, tid);
    cp_async_commit();
    load_tile<T, BN, D, NT>(sV, v, 0, a.S, ld, a.d, tid);
    cp_async_commit();

    const int wrow = warp * 16 * MT;
    const float sl2 = a.scale_log2;
    float o[MT][NTD][4], mrow[MT][2], lrow[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int ct = 0; ct < NTD; ++ct) o[mt][ct][0] = o[mt][ct][1] = o[mt][ct][2] = o[mt][ct][3] = 0.f;
        mrow[mt][0] = mrow[mt][1] = -INFINITY;
        lrow[mt][0] = lrow[mt][1] = 0.f;
    }

    for (int nb = 0; nb < nkb; ++nb) {
        const int cur = nb & 1, n0 = nb * BN;
        const T* cK = sK + cur * BN * SD;
        const T* cV = sV + cur * BN * SD;
        cp_async_wait<1>();
        __syncthreads();

        float s[MT][NTN][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int nt = 0; nt < NTN; ++nt) s[mt][nt][0] = s[mt][nt][1] = s[mt][nt][2] = s[mt][nt][3] = 0.f;
#pragma unroll
        for (int ks = 0; ks < D / 16; ++ks) {
            uint32_t qa[MT][4];
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) ldsm_x4(qa[mt], sQ + (wrow + mt * 16) * SD + ks * 16 + a_off<SD>(lane));
#pragma unroll
            for (int np = 0; np < BN / 16; ++np) {
                uint32_t kb[4];
                ldsm_x4(kb, cK + np * 16 * SD + ks * 16 + bn_off<SD>(lane));
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) mma2<T>(s[mt], np, qa[mt], kb);
            }
        }
        if (nb + 1 < nkb) load_tile<T, BN, D, NT>(sK + (cur ^ 1) * BN * SD, k, n0 + BN, a.S, ld, a.d, tid);
        cp_async_commit();

        if (n0 + BN > a.S || (a.causal && n0 + BN - 1 > m0 + wrow)) {
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int nt = 0; nt < NTN; ++nt)
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const int j = n0 + nt * 8 + (lane & 3) * 2 + (e & 1);
                        const int i = m0 + wrow + mt * 16 + (lane >> 2) + (e >> 1) * 8;
                        if (j >= a.S || (a.causal && j > i)) s[mt][nt][e] = -INFINITY;
                    }
        }
        // Online softmax; l stays a per-thread partial sum until the epilogue.
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                float mx = mrow[mt][r];
#pragma unroll
                for (int nt = 0; nt < NTN; ++nt) mx = fmaxf(mx, fmaxf(s[mt][nt][2 * r], s[mt][nt][2 * r + 1]));
                mx = quad_max(mx);
                const float mb = mx == -INFINITY ? 0.f : mx * sl2;
                const float alpha = ex2(mrow[mt][r] * sl2 - mb);
                mrow[mt][r] = mx;
                float rs = 0.f;
#pragma unroll
                for (int nt = 0; nt < NTN; ++nt)
#pragma unroll
                    for (int e = 2 * r; e < 2 * r + 2; ++e) {
                        const float p = ex2(fmaf(s[mt][nt][e], sl2, -mb));
                        s[mt][nt][e] = p;
                        rs += p;
                    }
                lrow[mt][r] = lrow[mt][r] * alpha + rs;
#pragma unroll
                for (int ct = 0; ct < NTD; ++ct) {
                    o[mt][ct][2 * r] *= alpha;
                    o[mt][ct][2 * r + 1] *= alpha;
                }
            }

        cp_async_wait<1>();
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk) {
            uint32_t pa[MT][4];
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) acc_to_a<T>(pa[mt], s[mt], kk);
#pragma unroll
            for (int cp = 0; cp < D / 16; ++cp) {
                uint32_t vb[4];
                ldsm_x4_t(vb, cV + kk * 16 * SD + cp * 16 + bt_off<SD>(lane));
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) mma2<T>(o[mt], cp, pa[mt], vb);
            }
        }
        if (nb + 1 < nkb) load_tile<T, BN, D, NT>(sV + (cur ^ 1) * BN * SD, v, n0 + BN, a.S, ld, a.d, tid);
        cp_async_commit();
    }
    cp_async_wait<0>();

    // Epilogue: normalise, stage this warp's rows in its own part of sQ, store 16-byte chunks.
    float* lse = a.lse_out + (int64_t(b) * a.H + h) * a.L;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const float l = quad_sum(lrow[mt][r]);
            const float inv = l > 0.f ? 1.f / l : 0.f;
            const int row = wrow + mt * 16 + (lane >> 2) + r * 8;
#pragma unroll
            for (int ct = 0; ct < NTD; ++ct)
                *reinterpret_cast<uint32_t*>(sQ + row * SD + ct * 8 + (lane & 3) * 2) =
                    pack2<T>(o[mt][ct][2 * r] * inv, o[mt][ct][2 * r + 1] * inv);
            if ((lane & 3) == 0 && m0 + row < a.L) lse[m0 + row] = mrow[mt][r] * a.scale + logf(l);
        }
    __syncwarp();
    T* og = static_cast<T*>(a.o) + query_off(a, b, h);
    store_rows<T, 16 * MT, D, SD>(og, sQ + wrow * SD, m0 + wrow, a.L, ld, 0, a.d, lane);
}

// ---------------- host side ----------------

// Opts a kernel into more than 48 KiB of dynamic smem (no sync involved).
template <class K>
cudaError_t allow_smem(K kernel, int bytes) {
    return bytes > 48 * 1024 ? cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes) : cudaSuccess;
}

template <class T, class C>
cudaError_t launch_fwd(const MmaArgs& a, cudaStream_t s) {
    static const cudaError_t ready = allow_smem(fwd_kernel<T, C>, C::smem);  // once per instantiation
    if (ready != cudaSuccess) return ready;
    fwd_kernel<T, C><<<dim3(ceil_div(a.L, C::BM), a.H, a.B), C::NW * 32, C::smem, s>>>(a);
    return cudaGetLastError();
}
template <class T, int D>
cudaError_t mma_forward(const MmaArgs& a, cudaStream_t s) { return launch_fwd<T, typename Tiles<D>::Fwd>(a, s); }

// Calls f(std::integral_constant<int, D>) for the padded head dim D of d; false when d > 256.
template <class F>
bool with_head_dim(int d, F&& f) {
    if (d <= 48) f(std::integral_constant<int, 48>{});
    else if (d <= 64) f(std::integral_constant<int, 64>{});
    else if (d <= 80) f(std::integral_constant<int, 80>{});
    else if (d <= 96) f(std::integral_constant<int, 96>{});
    else if (d <= 128) f(std::integral_constant<int, 128>{});
    else if (d <= 160) f(std::integral_constant<int, 160>{});
    else if (d <= 192) f(std::integral_constant<int, 192>{});
    else if (d <= 256) f(std::integral_constant<int, 256>{});
    else return false;
    return true;
}

}  // namespace gl::attn
