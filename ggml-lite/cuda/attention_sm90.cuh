// sm_90a flash attention on wgmma: the forward and the backward's two passes (dK/dV, dQ) for head
// dims up to 80 without a causal mask (SD's self-attention; dispatched at d = 40 and 80).
// attention_impl.cuh takes them in place of the mma.sync kernels (attention_mma*.cuh) where
// covers() / covers_fwd() say they are faster and the binary carries their sm_90a bodies
// (usable()); the backward's dK/dV pass only when it needs no query split. Measured variants
// (bench/attention_check.cu, kept as template parameters): RS (the scores' A operand from
// registers: faster in dK/dV and the forward, slower in dQ, whose two CTAs per SM it would cost),
// NWG = 1 (one warpgroup per CTA, more CTAs per SM: slower in all three), H2 (exp2 through one
// f16x2 MUFU op per two scores: slower in all three, so MUFU throughput is not the bound), PF (blocks
// j + 1 .. j + PF loading while block j is worked on, PF + 2 stages: 2 and 3 within noise of 1).
//
// Every smem tile is R rows x D columns (D = the head dim padded to 16) stored as 8-column planes:
// element (r, c) at byte (c / 8) * R * 16 + r * 16 + (c % 8) * 2. Each 8 x 8 block is one 128-byte
// core matrix, so one tile serves, without a swizzle or a transpose, as the K-major operand of a
// product over the head dim (S = Q K^T: lbo = the plane stride, sbo = 128) and as the N-major
// operand of a product over its rows (dV += P^T dO: lbo = 128, sbo = the plane stride). The planes
// past the head dim are zeroed once; rows past the sequence are zero-filled by the loads, which
// makes their products vanish (a zero query row gives dV, dK contributions of 0 dO and 0 Q; a zero
// key row gives 0 in dQ = dS K), so only the forward masks keys.
//
// Warpgroup w of a 256-thread CTA owns 64 rows (keys in dK/dV, queries in dQ and the forward). The
// scores are m64n64k16 products from smem (SS); the outputs are m64nDNk16 products whose A operand is
// the just-computed P or dS in registers (an m64n64 accumulator's n8 blocks 2kk, 2kk+1 are k-step
// kk's A fragment). fp32 accumulators; tiles in PF + 2 (three) cp.async stages, so that a block's output
// products (O, dV, dK or dQ) stay in flight while the next block's score products are issued
// (they are waited for with those). The dK/dV kernel runs one CTA per SM (~190 registers at
// DN = 40; two CTAs spill), dQ two up to DN = 48 and the forward two up to DN = 64.
//   dkdv_kernel: 128 keys per CTA, loops over 64-query blocks: S^T = K Q^T, dP^T = V dO^T,
//                P^T = exp(S^T scale - lse), dS^T = P^T (dP^T - delta), dV += P^T dO, dK += dS^T Q.
//   dq_kernel:   128 queries per CTA, loops over 64-key blocks: S = Q K^T, dP = dO V^T, dQ += dS K.
//   fwd_kernel:  128 queries per CTA, loops over 64-key blocks: online softmax (exp2, log2e folded
//                into the scale), O += P V; lse = max * scale + log(sum).
// Deterministic: every output element is summed by one thread in a fixed order.
#pragma once

#include "ggml-lite/cuda/attention_mma.cuh"
#include "ggml-lite/cuda/wgmma_rs.cuh"

namespace gl::attn::sm90 {


template <int DN> struct Dim {
    static_assert(DN % 8 == 0 && DN <= 80, "head dims up to 80");
    static constexpr int D = (DN + 15) / 16 * 16;  // K of the score products
    static constexpr int P = D / 8, LP = DN / 8;    // planes, planes loaded
};

// Rows [r0, r0 + R) of one head's [n, 8 * LP] matrix (rows ld elements apart) into the plane tile at
// `tile` (rows >= n zero-filled). Consecutive threads take consecutive rows of one plane.
template <class T, int R, int LP, int NT>
__device__ __forceinline__ void load_planes(uint32_t tile, const T* g, int r0, int n, int ld, int tid) {
#pragma unroll
    for (int it = 0; it < ceil_div(R * LP, NT); ++it) {
        const int idx = it * NT + tid;
        if ((R * LP) % NT != 0 && idx >= R * LP) break;
        const int r = idx % R, c = idx / R;
        const bool ok = r0 + r < n;
        cp_async<16>(tile + uint32_t(c * R * 16 + r * 16), ok ? g + int64_t(r0 + r) * ld + c * 8 : g, ok ? 16 : 0);
    }
}
// Zeroes planes [LP, P) of an R-row tile (plain stores: a fence.proxy.async must follow before wgmma).
template <int R, int LP, int P, int NT>
__device__ __forceinline__ void zero_pad(unsigned char* tile, int tid) {
    for (int i = tid; i < (P - LP) * R; i += NT) *reinterpret_cast<uint4*>(tile + LP * R * 16 + i * 16) = make_uint4(0, 0, 0, 0);
}
// K-major over the head dim: k-step ks covers planes 2ks, 2ks + 1; rows from row0.
template <int R>
__device__ __forceinline__ uint64_t kdesc(uint32_t tile, int row0, int ks) {
    return gemm::interleave_desc(tile + uint32_t(ks * 2 * R * 16 + row0 * 16), R * 16, 128);
}
// N-major over the head dim, K = the tile's rows: k-step kk covers rows 16kk .. 16kk + 15.
template <int R>
__device__ __forceinline__ uint64_t ndesc(uint32_t tile, int kk) {
    return gemm::interleave_desc(tile + uint32_t(kk * 256), 128, R * 16);
}
// A fragments of rows row0 .. row0 + 15 (this warp's 16 of a warpgroup's 64) over the head dim of an
// R-row plane tile: ldmatrix x4, lanes 0-15 rows of plane 2ks, lanes 16-31 of plane 2ks + 1.
template <int R, int NK>
__device__ __forceinline__ void load_afrags(uint32_t (&f)[NK][4], uint32_t tile, int row0, int lane) {
#pragma unroll
    for (int ks = 0; ks < NK; ++ks) ldsm_x4(f[ks], tile + uint32_t((2 * ks + (lane >> 4)) * R * 16 + (row0 + (lane & 15)) * 16));
}
// S (m64n64) = A B over the head dim: A from registers (RS) or from the plane tile (SS).
template <class T, bool RS, int RA, int RB, int NK>
__device__ __forceinline__ void scores(float (&acc)[32], const uint32_t (&af)[RS ? NK : 1][4], uint32_t ta, int arow, uint32_t tb) {
#pragma unroll
    for (int ks = 0; ks < NK; ++ks) {
        if constexpr (RS) gemm::WgmmaRS<64, T, 0>::run(acc, af[ks], kdesc<RB>(tb, 0, ks), ks > 0);
        else gemm::Wgmma<64, T, 0, 0>::run(acc, kdesc<RA>(ta, arow, ks), kdesc<RB>(tb, 0, ks), ks > 0);
    }
}
// k-step kk's A fragment from an m64nN accumulator (n8 blocks 2kk, 2kk + 1), rounded to T.
template <class T, int N>
__device__ __forceinline__ void frag(uint32_t (&a)[4], const float (&c)[N], int kk) {
#pragma unroll
    for (int x = 0; x < 4; ++x) a[x] = pack2<T>(c[8 * kk + 2 * x], c[8 * kk + 2 * x + 1]);
}
// x0, x1 <- 2^x0, 2^x1. H2: one packed f16 MUFU op (ex2.approx.f16x2) for both, half the MUFU
// issue of two fp32 ex2 (the arguments rounded to f16: a relative error of ~0.3 % for x >= -8,
// the size of P's own rounding to bf16 before its product); else two ex2.approx.f32.
template <bool H2>
__device__ __forceinline__ void exp2_pair(float& x0, float& x1) {
    if constexpr (H2) {
        uint32_t in, out;
        asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(in) : "f"(x1), "f"(x0));
        asm("ex2.approx.f16x2 %0, %1;\n" : "=r"(out) : "r"(in));
        const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&out));
        x0 = f.x, x1 = f.y;
    } else {
        x0 = ex2(x0), x1 = ex2(x1);
    }
}
template <int N>
__device__ __forceinline__ void pin_all(float (&c)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) gemm::pin(c[i]);
}
template <int N>
__device__ __forceinline__ void zero_all(float (&c)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) c[i] = 0.f;
}
// acc (m64nDN) * mul -> rows row0 (+8) of a [n, DN] global matrix (rows ld apart); rows >= n skipped.
template <class T, int DN>
__device__ __forceinline__ void store_acc(T* g, const float (&acc)[DN / 2], float mul0, float mul1, int row0, int n, int ld, int t) {
#pragma unroll
    for (int j = 0; j < DN / 8; ++j) {
        const int c = 8 * j + 2 * t;
        if (row0 < n) *reinterpret_cast<uint32_t*>(g + int64_t(row0) * ld + c) = pack2<T>(acc[4 * j] * mul0, acc[4 * j + 1] * mul0);
        if (row0 + 8 < n)
            *reinterpret_cast<uint32_t*>(g + int64_t(row0 + 8) * ld + c) = pack2<T>(acc[4 * j + 2] * mul1, acc[4 * j + 3] * mul1);
    }
}

// Shared-memory bytes of the three kernels for NWG warpgroups per CTA and NS stages (tw: a tile of the CTA's
// own 64 * NWG rows, t64: a tile of the 64 rows of one step).
template <int DN, int NWG, int NS = 3> struct Smem {
    static constexpr int P = Dim<DN>::P;
    static constexpr int t64 = 64 * 16 * P, tw = NWG * t64;
    static constexpr int dkdv = 2 * tw + 2 * NS * t64 + 2 * NS * 64 * 4;  // K, V; [NS] x (Q, dO); [NS] x (lse, delta)
    static constexpr int dq = 2 * tw + 2 * NS * t64;                     // Q, dO; [NS] x (K, V)
    static constexpr int fwd = tw + 2 * NS * t64;                        // Q; [NS] x (K, V)
};

// ---------------- backward: dK, dV ----------------

template <class T, int DN, bool RS = (DN <= 64), int NWG = 2, bool H2 = false, int PF = 1>
__global__ void __launch_bounds__(128 * NWG, NWG == 1 ? 2 : 1) dkdv_kernel(MmaArgs a) {
    kernel_entry();
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using G = Dim<DN>;
    constexpr int NS = PF + 2;  // stages: the current block, PF loading, one under the last output products
    using S = Smem<DN, NWG, NS>;
    constexpr int NT = 128 * NWG, BN = 64 * NWG, BM = 64, NK = G::D / 16;
    extern __shared__ __align__(128) unsigned char smem[];
    const uint32_t sK = smem_u32(smem), sV = sK + S::tw, sQ0 = sV + S::tw;  // stage s: Q at sQ0 + 2s t64, dO after it
    float* sL = reinterpret_cast<float*>(smem + 2 * S::tw + 2 * NS * S::t64);  // [NS][BM]
    float* sDl = sL + NS * BM;                                                   // [NS][BM]
    const int tid = threadIdx.x, wg = tid >> 7, lane = tid & 31, w4 = (tid >> 5) & 3, g = lane >> 2, t = lane & 3;
    const int h = blockIdx.y, b = blockIdx.z, n0 = blockIdx.x * BN, ld = a.H * a.d;
    const int64_t head = int64_t(b) * a.H + h;
    const HeadInputs<T> in = head_inputs<T>(a, b, h);
    const T *q = in.q, *go = in.go, *k = in.k, *v = in.v;
    const float* lse = a.lse + head * a.L;
    const float* delta = a.delta + head * a.L;
    if constexpr (G::LP < G::P) {
        zero_pad<BN, G::LP, G::P, NT>(smem, tid);
        zero_pad<BN, G::LP, G::P, NT>(smem + S::tw, tid);
#pragma unroll
        for (int x = 0; x < 2 * NS; ++x) zero_pad<BM, G::LP, G::P, NT>(smem + 2 * S::tw + x * S::t64, tid);
    }
    auto load_stage = [&](int st, int qb) {
        load_planes<T, BM, G::LP, NT>(sQ0 + 2 * st * S::t64, q, qb * BM, a.L, ld, tid);
        load_planes<T, BM, G::LP, NT>(sQ0 + (2 * st + 1) * S::t64, go, qb * BM, a.L, ld, tid);
        load_vec<BM, NT>(sL + st * BM, lse, qb * BM, a.L, tid);
        load_vec<BM, NT>(sDl + st * BM, delta, qb * BM, a.L, tid);
    };
    load_planes<T, BN, G::LP, NT>(sK, k, n0, a.S, ld, tid);
    load_planes<T, BN, G::LP, NT>(sV, v, n0, a.S, ld, tid);
    cp_async_commit();
    load_stage(0, 0);
    cp_async_commit();
    for (int st = 1; st < PF; ++st) {
        if (st < ceil_div(a.L, BM)) load_stage(st, st);
        cp_async_commit();
    }
    uint32_t kf[RS ? NK : 1][4], vf[RS ? NK : 1][4];  // this warp's K and V rows as A fragments
    if constexpr (RS) {
        cp_async_wait<PF>();
        __syncthreads();
        load_afrags<BN, NK>(kf, sK, wg * 64 + w4 * 16, lane);
        load_afrags<BN, NK>(vf, sV, wg * 64 + w4 * 16, lane);
    }

    float dk[DN / 2], dv[DN / 2];  // set by the first block's products (scale-d 0)
    const float sl2 = a.scale_log2;
    const int nqb = ceil_div(a.L, BM);

    for (int qb = 0; qb < nqb; ++qb) {
        const int cur = qb % NS;
        cp_async_wait<PF - 1>();
        gemm::fence_proxy_async();
        __syncthreads();  // stage cur is in smem for all; both warpgroups retired the products of block qb - 2
        if (qb + PF < nqb) load_stage((qb + PF) % NS, qb + PF);
        cp_async_commit();
        const uint32_t cQ = sQ0 + 2 * cur * S::t64, cG = cQ + S::t64;
        const float* cL = sL + cur * BM;
        const float* cD = sDl + cur * BM;

        float st[32], dp[32];  // no zeroing: the first k-step overwrites (scale-d 0)
        gemm::wgmma_fence();
        scores<T, RS, BN, BM, NK>(st, kf, sK, wg * 64, cQ);
        gemm::wgmma_commit();
        scores<T, RS, BN, BM, NK>(dp, vf, sV, wg * 64, cG);
        gemm::wgmma_commit();
        gemm::wgmma_wait<1>();  // block qb - 1's dV, dK and these scores
        pin_all(st);
        // P^T = exp(S^T scale - lse[query]): accumulator 4j + e is key row g (+8 for e >= 2),
        // query column 8j + 2t (+1 for odd e).
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            const float l0 = cL[8 * j + 2 * t] * kLog2e, l1 = cL[8 * j + 2 * t + 1] * kLog2e;
#pragma unroll
            for (int e = 0; e < 4; e += 2) {
                st[4 * j + e] = fmaf(st[4 * j + e], sl2, -l0);
                st[4 * j + e + 1] = fmaf(st[4 * j + e + 1], sl2, -l1);
                exp2_pair<H2>(st[4 * j + e], st[4 * j + e + 1]);
            }
        }
        gemm::wgmma_wait<0>();
        pin_all(dp);
#pragma unroll
        for (int j = 0; j < 8; ++j) {
            const float d0 = cD[8 * j + 2 * t], d1 = cD[8 * j + 2 * t + 1];
#pragma unroll
            for (int e = 0; e < 4; ++e) dp[4 * j + e] = st[4 * j + e] * (dp[4 * j + e] - ((e & 1) ? d1 : d0));
        }
        uint32_t pa[4][4], sa[4][4];
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
            frag<T>(pa[kk], st, kk);
            frag<T>(sa[kk], dp, kk);
        }
        gemm::wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) gemm::WgmmaRS<DN, T, 1>::run(dv, pa[kk], ndesc<BM>(cG, kk), qb > 0 || kk > 0);
        gemm::wgmma_commit();
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) gemm::WgmmaRS<DN, T, 1>::run(dk, sa[kk], ndesc<BM>(cQ, kk), qb > 0 || kk > 0);
        gemm::wgmma_commit();
    }
    gemm::wgmma_wait<0>();
    pin_all(dk);
    pin_all(dv);
    cp_async_wait<0>();
    const int row = n0 + wg * 64 + w4 * 16 + g;
    store_acc<T, DN>(static_cast<T*>(a.dk) + key_off(a, b, h), dk, a.scale, a.scale, row, a.S, ld, t);
    store_acc<T, DN>(static_cast<T*>(a.dv) + key_off(a, b, h), dv, 1.f, 1.f, row, a.S, ld, t);
#else
    __trap();  // not built for sm_90a; usable() keeps the dispatch away
#endif
}

// ---------------- backward: dQ ----------------

template <class T, int DN, bool RS = false, int NWG = 2, bool H2 = false, int PF = 1>
__global__ void __launch_bounds__(128 * NWG, (DN <= 48 && !RS ? 2 : 1) * (NWG == 1 ? 2 : 1)) dq_kernel(MmaArgs a) {
    kernel_entry();
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using G = Dim<DN>;
    constexpr int NS = PF + 2;  // stages: the current block, PF loading, one under the last output products
    using S = Smem<DN, NWG, NS>;
    constexpr int NT = 128 * NWG, BM = 64 * NWG, BN = 64, NK = G::D / 16;
    extern __shared__ __align__(128) unsigned char smem[];
    const uint32_t sQ = smem_u32(smem), sG = sQ + S::tw, sK0 = sG + S::tw;  // stage s: K at sK0 + 2s t64, V after it
    const int tid = threadIdx.x, wg = tid >> 7, lane = tid & 31, w4 = (tid >> 5) & 3, g = lane >> 2, t = lane & 3;
    const int m0 = blockIdx.x * BM, h = blockIdx.y, b = blockIdx.z, ld = a.H * a.d;
    const int64_t head = int64_t(b) * a.H + h;
    const HeadInputs<T> in = head_inputs<T>(a, b, h);
    const T *q = in.q, *go = in.go, *k = in.k, *v = in.v;
    if constexpr (G::LP < G::P) {
        zero_pad<BM, G::LP, G::P, NT>(smem, tid);
        zero_pad<BM, G::LP, G::P, NT>(smem + S::tw, tid);
#pragma unroll
        for (int x = 0; x < 2 * NS; ++x) zero_pad<BN, G::LP, G::P, NT>(smem + 2 * S::tw + x * S::t64, tid);
    }
    auto load_stage = [&](int st, int kb) {
        load_planes<T, BN, G::LP, NT>(sK0 + 2 * st * S::t64, k, kb * BN, a.S, ld, tid);
        load_planes<T, BN, G::LP, NT>(sK0 + (2 * st + 1) * S::t64, v, kb * BN, a.S, ld, tid);
    };
    load_planes<T, BM, G::LP, NT>(sQ, q, m0, a.L, ld, tid);
    load_planes<T, BM, G::LP, NT>(sG, go, m0, a.L, ld, tid);
    cp_async_commit();
    load_stage(0, 0);
    cp_async_commit();
    for (int st = 1; st < PF; ++st) {
        if (st < ceil_div(a.S, BN)) load_stage(st, st);
        cp_async_commit();
    }
    uint32_t qf[RS ? NK : 1][4], gf[RS ? NK : 1][4];  // this warp's Q and dO rows as A fragments
    if constexpr (RS) {
        cp_async_wait<PF>();
        __syncthreads();
        load_afrags<BM, NK>(qf, sQ, wg * 64 + w4 * 16, lane);
        load_afrags<BM, NK>(gf, sG, wg * 64 + w4 * 16, lane);
    }

    const int row = m0 + wg * 64 + w4 * 16 + g;  // and row + 8
    float lse2[2], dl[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const int i = row + 8 * r;
        lse2[r] = i < a.L ? a.lse[head * a.L + i] * kLog2e : 0.f;
        dl[r] = i < a.L ? a.delta[head * a.L + i] : 0.f;
    }
    float dq[DN / 2];
    zero_all(dq);
    const float sl2 = a.scale_log2;
    const int nkb = ceil_div(a.S, BN);
    for (int kb = 0; kb < nkb; ++kb) {
        const int cur = kb % NS;
        cp_async_wait<PF - 1>();
        gemm::fence_proxy_async();
        __syncthreads();  // stage cur is in smem for all; both warpgroups retired the products of block kb - 2
        if (kb + PF < nkb) load_stage((kb + PF) % NS, kb + PF);
        cp_async_commit();
        const uint32_t cK = sK0 + 2 * cur * S::t64, cV = cK + S::t64;

        float s[32], dp[32];
        gemm::wgmma_fence();
        scores<T, RS, BM, BN, NK>(s, qf, sQ, wg * 64, cK);
        gemm::wgmma_commit();
        scores<T, RS, BM, BN, NK>(dp, gf, sG, wg * 64, cV);
        gemm::wgmma_commit();
        gemm::wgmma_wait<1>();  // block kb - 1's dQ and these scores
        pin_all(s);
#pragma unroll
        for (int i = 0; i < 32; i += 2) {
            s[i] = fmaf(s[i], sl2, -lse2[(i >> 1) & 1]);
            s[i + 1] = fmaf(s[i + 1], sl2, -lse2[(i >> 1) & 1]);
            exp2_pair<H2>(s[i], s[i + 1]);
        }
        gemm::wgmma_wait<0>();
        pin_all(dp);
#pragma unroll
        for (int i = 0; i < 32; ++i) dp[i] = s[i] * (dp[i] - dl[(i >> 1) & 1]);
        uint32_t sa[4][4];
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) frag<T>(sa[kk], dp, kk);
        gemm::wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) gemm::WgmmaRS<DN, T, 1>::run(dq, sa[kk], ndesc<BN>(cK, kk), 1);
        gemm::wgmma_commit();
    }
    gemm::wgmma_wait<0>();
    pin_all(dq);
    cp_async_wait<0>();
    store_acc<T, DN>(static_cast<T*>(a.o) + query_off(a, b, h), dq, a.scale, a.scale, row, a.L, ld, t);
#else
    __trap();
#endif
}

// ---------------- forward ----------------

template <class T, int DN, bool RS = (DN <= 48), int NWG = 2, bool H2 = false, int PF = 1>
__global__ void __launch_bounds__(128 * NWG, (DN <= 64 ? 2 : 1) * (NWG == 1 ? 2 : 1)) fwd_kernel(MmaArgs a) {
    kernel_entry();
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using G = Dim<DN>;
    constexpr int NS = PF + 2;  // stages: the current block, PF loading, one under the last output products
    using S = Smem<DN, NWG, NS>;
    constexpr int NT = 128 * NWG, BM = 64 * NWG, BN = 64, NK = G::D / 16;
    extern __shared__ __align__(128) unsigned char smem[];
    const uint32_t sQ = smem_u32(smem), sK0 = sQ + S::tw;  // stage s: K at sK0 + 2s t64, V after it
    const int tid = threadIdx.x, wg = tid >> 7, lane = tid & 31, w4 = (tid >> 5) & 3, g = lane >> 2, t = lane & 3;
    const int m0 = blockIdx.x * BM, h = blockIdx.y, b = blockIdx.z, ld = a.H * a.d;
    const HeadInputs<T> in = head_inputs<T>(a, b, h);
    const T *q = in.q, *k = in.k, *v = in.v;
    if constexpr (G::LP < G::P) {
        zero_pad<BM, G::LP, G::P, NT>(smem, tid);
#pragma unroll
        for (int x = 0; x < 2 * NS; ++x) zero_pad<BN, G::LP, G::P, NT>(smem + S::tw + x * S::t64, tid);
    }
    auto load_stage = [&](int st, int kb) {
        load_planes<T, BN, G::LP, NT>(sK0 + 2 * st * S::t64, k, kb * BN, a.S, ld, tid);
        load_planes<T, BN, G::LP, NT>(sK0 + (2 * st + 1) * S::t64, v, kb * BN, a.S, ld, tid);
    };
    load_planes<T, BM, G::LP, NT>(sQ, q, m0, a.L, ld, tid);
    cp_async_commit();
    load_stage(0, 0);
    cp_async_commit();
    for (int st = 1; st < PF; ++st) {
        if (st < ceil_div(a.S, BN)) load_stage(st, st);
        cp_async_commit();
    }
    // This warp's Q rows as A fragments. Held across the loop at d = 64, ptxas (CUDA 13.0) gave
    // their registers to the softmax's temporaries and P's fragments inside the loop (the SASS
    // wrote R88-R103 between two blocks' score HGMMAs, which then took P for Q: attention_check's
    // d = 64 error of 0.98), although the PTX keeps them live. Above d = 48 they are therefore
    // loaded again after each block's wait, for the next block (the SASS then keeps them and nothing
    // serialises); at d <= 48, as in dK/dV and dQ, the SASS keeps the loop-invariant fragments.
    constexpr bool kReloadQ = RS && DN > 48;
    uint32_t qf[RS ? NK : 1][4];
    if constexpr (RS) {
        cp_async_wait<PF>();
        __syncthreads();
        load_afrags<BM, NK>(qf, sQ, wg * 64 + w4 * 16, lane);
    }

    float o[DN / 2], mrow[2] = {-INFINITY, -INFINITY}, lrow[2] = {0.f, 0.f};
    zero_all(o);
    const float sl2 = a.scale_log2;
    const int nkb = ceil_div(a.S, BN);
    for (int kb = 0; kb < nkb; ++kb) {
        const int cur = kb % NS, n0 = kb * BN;
        cp_async_wait<PF - 1>();
        gemm::fence_proxy_async();
        __syncthreads();
        if (kb + PF < nkb) load_stage((kb + PF) % NS, kb + PF);
        cp_async_commit();
        const uint32_t cK = sK0 + 2 * cur * S::t64, cV = cK + S::t64;

        float s[32];
        gemm::wgmma_fence();
        scores<T, RS, BM, BN, NK>(s, qf, sQ, wg * 64, cK);
        gemm::wgmma_commit();
        gemm::wgmma_wait<0>();  // block kb - 1's O += P V and these scores
        pin_all(s);
        pin_all(o);
        if constexpr (kReloadQ) load_afrags<BM, NK>(qf, sQ, wg * 64 + w4 * 16, lane);  // for block kb + 1
        if (n0 + BN > a.S) {
#pragma unroll
            for (int i = 0; i < 32; ++i)
                if (n0 + 8 * (i >> 2) + 2 * t + (i & 1) >= a.S) s[i] = -INFINITY;
        }
        // Online softmax over the two rows (r = 0: row g, r = 1: row g + 8); l stays a per-thread
        // partial sum until the epilogue.
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            float mx = mrow[r];
#pragma unroll
            for (int j = 0; j < 8; ++j) mx = fmaxf(mx, fmaxf(s[4 * j + 2 * r], s[4 * j + 2 * r + 1]));
            mx = quad_max(mx);
            const float mb = mx == -INFINITY ? 0.f : mx * sl2;
            const float alpha = ex2(mrow[r] * sl2 - mb);
            mrow[r] = mx;
            float rs = 0.f;
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                float& p0 = s[4 * j + 2 * r];
                float& p1 = s[4 * j + 2 * r + 1];
                p0 = fmaf(p0, sl2, -mb);
                p1 = fmaf(p1, sl2, -mb);
                exp2_pair<H2>(p0, p1);
                rs += p0 + p1;
            }
            lrow[r] = lrow[r] * alpha + rs;
#pragma unroll
            for (int j = 0; j < DN / 8; ++j) {
                o[4 * j + 2 * r] *= alpha;
                o[4 * j + 2 * r + 1] *= alpha;
            }
        }
        uint32_t pa[4][4];
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) frag<T>(pa[kk], s, kk);
        gemm::wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) gemm::WgmmaRS<DN, T, 1>::run(o, pa[kk], ndesc<BN>(cV, kk), 1);
        gemm::wgmma_commit();
    }
    gemm::wgmma_wait<0>();
    pin_all(o);
    cp_async_wait<0>();
    const int row = m0 + wg * 64 + w4 * 16 + g;
    float inv[2];
    float* lse = a.lse_out + (int64_t(b) * a.H + h) * a.L;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const float l = quad_sum(lrow[r]);
        inv[r] = l > 0.f ? 1.f / l : 0.f;
        if (t == 0 && row + 8 * r < a.L) lse[row + 8 * r] = mrow[r] * a.scale + logf(l);
    }
    store_acc<T, DN>(static_cast<T*>(a.o) + query_off(a, b, h), o, inv[0], inv[1], row, a.L, ld, t);
#else
    __trap();
#endif
}

// ---------------- host side ----------------

// Calls f(std::integral_constant<int, DN>) for the head dims dispatched here (40, 80); false otherwise.
template <class F>
bool with_dn(int d, F&& f) {
    if (d == 40) f(std::integral_constant<int, 40>{});
    else if (d == 80) f(std::integral_constant<int, 80>{});
    else return false;
    return true;
}

// Whether the loaded binary has the sm_90a bodies and the current device runs them. The
// environment variable GL_ATTENTION_MMA_SYNC=1 turns these kernels off (for comparisons).
inline bool usable() {
    static const bool off = env_number("GL_ATTENTION_MMA_SYNC", 0) == 1;
    return !off && gemm::sm90a_image(reinterpret_cast<const void*>(dkdv_kernel<__nv_bfloat16, 40>));
}
// The shapes where they beat the mma.sync kernels on the H200 (bench/attention_check.cu, B8 H8):
// the backward at d = 40 (L = 4096: 2.64 -> 2.07 ms) and d = 80 (L = 1024: 0.32 -> 0.27 ms), the
// forward at d = 40 only (0.79 -> 0.72 ms; at d = 80 mma.sync's 0.077 beats 0.085), none with
// cross-attention's few keys (S = 77: the mma.sync passes are faster). d = 64 is instantiated but
// not dispatched (not timed at SD2's sizes). Its forward with register-A scores gave wrong
// results (attention_check, bf16 and f16): ptxas reused the loop-invariant Q fragments' registers
// (see fwd_kernel; bench/wgmma_regs_check.py finds such reuse in the SASS). The fix, reloading them
// per block above DN = 48, is clean in the SASS but not yet run on a GPU, so the forward's default
// still takes register-A scores only up to DN = 48; dK/dV with register A and dQ are right at d = 64.
inline bool covers(const MmaArgs& a) { return !a.causal && a.L > 0 && a.S >= 256 && (a.d == 40 || a.d == 80) && usable(); }
inline bool covers_fwd(const MmaArgs& a) { return a.d == 40 && covers(a); }

template <class T, int DN, bool RS = (DN <= 48), int NWG = 2, bool H2 = false, int PF = 1>
cudaError_t launch_fwd(const MmaArgs& a, cudaStream_t s) {
    constexpr int smem = Smem<DN, NWG, PF + 2>::fwd;
    static const cudaError_t ready = allow_smem(fwd_kernel<T, DN, RS, NWG, H2, PF>, smem);
    if (ready != cudaSuccess) return ready;
    fwd_kernel<T, DN, RS, NWG, H2, PF><<<dim3(ceil_div(a.L, 64 * NWG), a.H, a.B), 128 * NWG, smem, s>>>(a);
    return cudaGetLastError();
}
template <class T, int DN, bool RS = (DN <= 64), int NWG = 2, bool H2 = false, int PF = 1>
cudaError_t launch_dkdv(const MmaArgs& a, cudaStream_t s) {
    constexpr int smem = Smem<DN, NWG, PF + 2>::dkdv;
    static const cudaError_t ready = allow_smem(dkdv_kernel<T, DN, RS, NWG, H2, PF>, smem);
    if (ready != cudaSuccess) return ready;
    dkdv_kernel<T, DN, RS, NWG, H2, PF><<<dim3(ceil_div(a.S, 64 * NWG), a.H, a.B), 128 * NWG, smem, s>>>(a);
    return cudaGetLastError();
}
template <class T, int DN, bool RS = false, int NWG = 2, bool H2 = false, int PF = 1>
cudaError_t launch_dq(const MmaArgs& a, cudaStream_t s) {
    constexpr int smem = Smem<DN, NWG, PF + 2>::dq;
    static const cudaError_t ready = allow_smem(dq_kernel<T, DN, RS, NWG, H2, PF>, smem);
    if (ready != cudaSuccess) return ready;
    dq_kernel<T, DN, RS, NWG, H2, PF><<<dim3(ceil_div(a.L, 64 * NWG), a.H, a.B), 128 * NWG, smem, s>>>(a);
    return cudaGetLastError();
}

}  // namespace gl::attn::sm90
