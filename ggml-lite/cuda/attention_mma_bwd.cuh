// Flash attention backward on tensor cores (attention_mma.cuh has the layouts, the tile
// configurations and the forward), and the launchers. Used by cuda/attention.cu through
// attention_impl.cuh.
// dkdv_kernel: one CTA per 16*NW-key block (and per query split / column split): each warp owns
//              16 keys and computes S^T = K Q^T directly, so P^T and dS^T sit in registers in
//              exactly the A-operand layout of dV += P^T dO and dK += dS^T Q: no smem transposes.
// dq_kernel:   one CTA per query block, loops over key blocks: dQ += dS K in registers.
// dQ is a second pass rather than fp32 atomics: every output element is summed by one thread in a
// fixed order, so results are bitwise deterministic (cost: S and dP are computed twice in backward).
// Tried and withdrawn (bench/RESULTS.md, session 13): a single pass whose key-block CTAs also make
// dS K, staged through smem and joined into f32 dQ sums in a counter-ordered rotation (TMA bulk
// reduce-add, release one step later). Correct and deterministic, but at 245 registers and one CTA
// per SM it took 3.50 ms at d=40 L=4096 B8 H8 against the two passes' 2.71, and 2.94 ms even with
// the ordering switched off: the extra MMA, staging and barriers cost more than the dQ pass.
// Query splits of dkdv (used when there are too few key blocks to fill the GPU, e.g. cross-attention
// to 77 keys) write fp32 partials that a separate pass sums in split order.
#pragma once
#include "ggml-lite/cuda/attention_mma.cuh"

namespace gl::attn {

// ---------------- backward: dK, dV ----------------

template <class T, class C>
__global__ void __launch_bounds__(C::NW * 32) dkdv_kernel(MmaArgs a) {
    kernel_entry();
    constexpr int D = C::D, BM = C::BM, QC = C::QC, DO = C::DO, NCS = C::NCS, NT = C::NW * 32;
    constexpr int BN = C::BN, SD = C::SD, NQC = QC / 8, NTO = DO / 8;
    constexpr bool KV_REGS = D <= 64;  // keep this warp's K and V rows as A fragments
    extern __shared__ __align__(16) unsigned char smem[];
    T* sK = reinterpret_cast<T*>(smem);  // [BN][SD]
    T* sV = sK + BN * SD;                // [BN][SD]
    T* sQ = sV + BN * SD;                // [2][BM][SD]
    T* sG = sQ + 2 * BM * SD;            // [2][BM][SD] (dO)
    float* sL = reinterpret_cast<float*>(sG + 2 * BM * SD);  // [2][BM] lse
    float* sDl = sL + 2 * BM;                                 // [2][BM] delta
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    int z = blockIdx.z;
    const int cs = z % NCS;
    z /= NCS;
    const int split = z % a.nsplit, b = z / a.nsplit, h = blockIdx.y;
    const int n0 = blockIdx.x * BN, c0 = cs * DO, ld = a.H * a.d;
    const int64_t head = int64_t(b) * a.H + h;
    const HeadInputs<T> in = head_inputs<T>(a, b, h);
    const T *q = in.q, *go = in.go, *k = in.k, *v = in.v;
    const float* lse = a.lse + head * a.L;
    const float* delta = a.delta + head * a.L;

    const int nqb = ceil_div(a.L, BM), per = ceil_div(nqb, a.nsplit);
    int qb0 = split * per;
    const int qb1 = min(nqb, qb0 + per);
    if (a.causal) qb0 = max(qb0, n0 / BM);  // queries before the first key see none of these keys

    auto load_stage = [&](int st, int qb) {
        load_tile<T, BM, D, NT>(sQ + st * BM * SD, q, qb * BM, a.L, ld, a.d, tid);
        load_tile<T, BM, D, NT>(sG + st * BM * SD, go, qb * BM, a.L, ld, a.d, tid);
        load_vec<BM, NT>(sL + st * BM, lse, qb * BM, a.L, tid);
        load_vec<BM, NT>(sDl + st * BM, delta, qb * BM, a.L, tid);
    };
    load_tile<T, BN, D, NT>(sK, k, n0, a.S, ld, a.d, tid);
    load_tile<T, BN, D, NT>(sV, v, n0, a.S, ld, a.d, tid);
    cp_async_commit();
    if (qb0 < qb1) load_stage(0, qb0);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();

    const T* wK = sK + warp * 16 * SD;
    const T* wV = sV + warp * 16 * SD;
    uint32_t kf[KV_REGS ? D / 16 : 1][4], vf[KV_REGS ? D / 16 : 1][4];
    if constexpr (KV_REGS) {
#pragma unroll
        for (int ks = 0; ks < D / 16; ++ks) {
            ldsm_x4(kf[ks], wK + ks * 16 + a_off<SD>(lane));
            ldsm_x4(vf[ks], wV + ks * 16 + a_off<SD>(lane));
        }
    }
    float dk[NTO][4], dv[NTO][4];
#pragma unroll
    for (int ct = 0; ct < NTO; ++ct) dk[ct][0] = dk[ct][1] = dk[ct][2] = dk[ct][3] = dv[ct][0] = dv[ct][1] = dv[ct][2] = dv[ct][3] = 0.f;
    const float sl2 = a.scale_log2;
    const int jmax = n0 + warp * 16 + 15;  // last key of this warp

    for (int qb = qb0, it = 0; qb < qb1; ++qb, ++it) {
        const int cur = it & 1, i0 = qb * BM;
        cp_async_wait<0>();
        __syncthreads();
        if (qb + 1 < qb1) load_stage(cur ^ 1, qb + 1);
        cp_async_commit();
        const T* cQ = sQ + cur * BM * SD;
        const T* cG = sG + cur * BM * SD;
        const float* cL = sL + cur * BM;
        const float* cDl = sDl + cur * BM;

#pragma unroll
        for (int qc = 0; qc < BM / QC; ++qc) {
            const T* qQ = cQ + qc * QC * SD;
            const T* qG = cG + qc * QC * SD;
            // S^T = K_w Q^T and dP^T = V_w dO^T for this chunk of queries.
            float st[NQC][4], dp[NQC][4];
#pragma unroll
            for (int nt = 0; nt < NQC; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e) st[nt][e] = dp[nt][e] = 0.f;
#pragma unroll
            for (int ks = 0; ks < D / 16; ++ks) {
                uint32_t ka[4], va[4];
                if constexpr (KV_REGS) {
#pragma unroll
                    for (int x = 0; x < 4; ++x) ka[x] = kf[ks][x], va[x] = vf[ks][x];
                } else {
                    ldsm_x4(ka, wK + ks * 16 + a_off<SD>(lane));
                    ldsm_x4(va, wV + ks * 16 + a_off<SD>(lane));
                }
#pragma unroll
                for (int np = 0; np < QC / 16; ++np) {
                    uint32_t bq[4], bg[4];
                    ldsm_x4(bq, qQ + np * 16 * SD + ks * 16 + bn_off<SD>(lane));
                    ldsm_x4(bg, qG + np * 16 * SD + ks * 16 + bn_off<SD>(lane));
                    mma2<T>(st, np, ka, bq);
                    mma2<T>(dp, np, va, bg);
                }
            }
            // P^T = exp(S^T * scale - lse[query]); dS^T = P^T * (dP^T - delta[query]).
            const bool mask = a.causal && jmax > i0 + qc * QC;
#pragma unroll
            for (int nt = 0; nt < NQC; ++nt) {
                const int col = qc * QC + nt * 8 + (lane & 3) * 2;
                const float l0 = cL[col] * kLog2e, l1 = cL[col + 1] * kLog2e;
                const float d0 = cDl[col], d1 = cDl[col + 1];
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    float p = ex2(fmaf(st[nt][e], sl2, -((e & 1) ? l1 : l0)));
                    if (mask && n0 + warp * 16 + (lane >> 2) + (e >> 1) * 8 > i0 + col + (e & 1)) p = 0.f;
                    st[nt][e] = p;
                    dp[nt][e] = p * (dp[nt][e] - ((e & 1) ? d1 : d0));
                }
            }
            // dV += P^T dO, dK += dS^T Q over this warp's output columns.
#pragma unroll
            for (int kk = 0; kk < QC / 16; ++kk) {
                uint32_t pa[4], sa[4];
                acc_to_a<T>(pa, st, kk);
                acc_to_a<T>(sa, dp, kk);
#pragma unroll
                for (int cp = 0; cp < DO / 16; ++cp) {
                    uint32_t bg[4], bq[4];
                    ldsm_x4_t(bg, qG + kk * 16 * SD + c0 + cp * 16 + bt_off<SD>(lane));
                    ldsm_x4_t(bq, qQ + kk * 16 * SD + c0 + cp * 16 + bt_off<SD>(lane));
                    mma2<T>(dv, cp, pa, bg);
                    mma2<T>(dk, cp, sa, bq);
                }
            }
        }
    }
    cp_async_wait<0>();

    const int jw = n0 + warp * 16;
    if (a.nsplit > 1) {  // fp32 partials, summed in split order by reduce_parts
        const int64_t n = int64_t(a.B) * a.S * a.H * a.d;
        float* pk = a.part + int64_t(split) * n;
        float* pv = a.part + int64_t(a.nsplit + split) * n;
#pragma unroll
        for (int ct = 0; ct < NTO; ++ct)
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                const int j = jw + (lane >> 2) + r * 8, c = c0 + ct * 8 + (lane & 3) * 2;
                if (j < a.S && c < a.d) {
                    const int64_t at = ((int64_t(b) * a.S + j) * a.H + h) * a.d + c;
                    *reinterpret_cast<float2*>(pk + at) = make_float2(dk[ct][2 * r] * a.scale, dk[ct][2 * r + 1] * a.scale);
                    *reinterpret_cast<float2*>(pv + at) = make_float2(dv[ct][2 * r], dv[ct][2 * r + 1]);
                }
            }
        return;
    }
    // Stage in this warp's own rows of sK / sV (only this warp read them), then store.
    T* wKs = sK + warp * 16 * SD;
    T* wVs = sV + warp * 16 * SD;
#pragma unroll
    for (int ct = 0; ct < NTO; ++ct)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const int off = ((lane >> 2) + r * 8) * SD + c0 + ct * 8 + (lane & 3) * 2;
            *reinterpret_cast<uint32_t*>(wKs + off) = pack2<T>(dk[ct][2 * r] * a.scale, dk[ct][2 * r + 1] * a.scale);
            *reinterpret_cast<uint32_t*>(wVs + off) = pack2<T>(dv[ct][2 * r], dv[ct][2 * r + 1]);
        }
    __syncwarp();
    T* dkg = static_cast<T*>(a.dk) + key_off(a, b, h);
    T* dvg = static_cast<T*>(a.dv) + key_off(a, b, h);
    store_rows<T, 16, DO, SD>(dkg, wKs, jw, a.S, ld, c0, a.d, lane);
    store_rows<T, 16, DO, SD>(dvg, wVs, jw, a.S, ld, c0, a.d, lane);
}

// ---------------- backward: dQ ----------------

template <class T, class C>
__global__ void __launch_bounds__(C::NW * 32) dq_kernel(MmaArgs a) {
    kernel_entry();
    constexpr int D = C::D, MT = C::MT, BN = C::BN, BM = C::BM, SD = C::SD, NT = C::NW * 32, NTN = BN / 8, NTD = D / 8;
    constexpr bool A_REGS = D * MT <= 96 && D <= 64;  // keep this warp's Q and dO rows as A fragments
    constexpr int NA = A_REGS ? D / 16 : 1;
    extern __shared__ __align__(16) unsigned char smem[];
    T* sQ = reinterpret_cast<T*>(smem);  // [BM][SD], later the staged dQ
    T* sG = sQ + BM * SD;                // [BM][SD] dO
    T* sK = sG + BM * SD;                // [2][BN][SD]
    T* sV = sK + 2 * BN * SD;            // [2][BN][SD]
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int m0 = blockIdx.x * BM, h = blockIdx.y, b = blockIdx.z, ld = a.H * a.d;
    const int64_t head = int64_t(b) * a.H + h;
    const HeadInputs<T> in = head_inputs<T>(a, b, h);
    const T *q = in.q, *go = in.go, *k = in.k, *v = in.v;
    int nkb = ceil_div(a.S, BN);
    if (a.causal) nkb = min(nkb, ceil_div(min(m0 + BM, a.L), BN));

    load_tile<T, BM, D, NT>(sQ, q, m0, a.L, ld, a.d, tid);
    load_tile<T, BM, D, NT>(sG, go, m0, a.L, ld, a.d, tid);
    cp_async_commit();
    load_tile<T, BN, D, NT>(sK, k, 0, a.S, ld, a.d, tid);
    load_tile<T, BN, D, NT>(sV, v, 0, a.S, ld, a.d, tid);
    cp_async_commit();

    const int wrow = warp * 16 * MT;
    float lse2[MT][2], dl[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const int i = m0 + wrow + mt * 16 + (lane >> 2) + r * 8;
            lse2[mt][r] = i < a.L ? a.lse[head * a.L + i] * kLog2e : 0.f;
            dl[mt][r] = i < a.L ? a.delta[head * a.L + i] : 0.f;
        }
    cp_async_wait<1>();
    __syncthreads();
    const T* wQ = sQ + wrow * SD;
    const T* wG = sG + wrow * SD;
    uint32_t qf[MT][NA][4], gf[MT][NA][4];
    if constexpr (A_REGS) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int ks = 0; ks < D / 16; ++ks) {
                ldsm_x4(qf[mt][ks], wQ + mt * 16 * SD + ks * 16 + a_off<SD>(lane));
                ldsm_x4(gf[mt][ks], wG + mt * 16 * SD + ks * 16 + a_off<SD>(lane));
            }
    }
    float dq[MT][NTD][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int ct = 0; ct < NTD; ++ct) dq[mt][ct][0] = dq[mt][ct][1] = dq[mt][ct][2] = dq[mt][ct][3] = 0.f;
    const float sl2 = a.scale_log2;

    for (int nb = 0; nb < nkb; ++nb) {
        const int cur = nb & 1, n0 = nb * BN;
        cp_async_wait<0>();
        __syncthreads();
        if (nb + 1 < nkb) {
            load_tile<T, BN, D, NT>(sK + (cur ^ 1) * BN * SD, k, n0 + BN, a.S, ld, a.d, tid);
            load_tile<T, BN, D, NT>(sV + (cur ^ 1) * BN * SD, v, n0 + BN, a.S, ld, a.d, tid);
        }
        cp_async_commit();
        const T* cK = sK + cur * BN * SD;
        const T* cV = sV + cur * BN * SD;

        // S = Q_w K^T and dP = dO_w V^T.
        float s[MT][NTN][4], dp[MT][NTN][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int nt = 0; nt < NTN; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e) s[mt][nt][e] = dp[mt][nt][e] = 0.f;
#pragma unroll
        for (int ks = 0; ks < D / 16; ++ks) {
            uint32_t qa[MT][4], ga[MT][4];
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                if constexpr (A_REGS) {
#pragma unroll
                    for (int x = 0; x < 4; ++x) qa[mt][x] = qf[mt][ks][x], ga[mt][x] = gf[mt][ks][x];
                } else {
                    ldsm_x4(qa[mt], wQ + mt * 16 * SD + ks * 16 + a_off<SD>(lane));
                    ldsm_x4(ga[mt], wG + mt * 16 * SD + ks * 16 + a_off<SD>(lane));
                }
            }
#pragma unroll
            for (int np = 0; np < BN / 16; ++np) {
                uint32_t kb[4], vb[4];
                ldsm_x4(kb, cK + np * 16 * SD + ks * 16 + bn_off<SD>(lane));
                ldsm_x4(vb, cV + np * 16 * SD + ks * 16 + bn_off<SD>(lane));
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    mma2<T>(s[mt], np, qa[mt], kb);
                    mma2<T>(dp[mt], np, ga[mt], vb);
                }
            }
        }
        // P = exp(S * scale - lse); dS = P * (dP - delta) (left in dp).
        const bool mask = n0 + BN > a.S || (a.causal && n0 + BN - 1 > m0 + wrow);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int nt = 0; nt < NTN; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    float p = ex2(fmaf(s[mt][nt][e], sl2, -lse2[mt][e >> 1]));
                    if (mask) {
                        const int j = n0 + nt * 8 + (lane & 3) * 2 + (e & 1);
                        const int i = m0 + wrow + mt * 16 + (lane >> 2) + (e >> 1) * 8;
                        if (j >= a.S || (a.causal && j > i)) p = 0.f;
                    }
                    dp[mt][nt][e] = p * (dp[mt][nt][e] - dl[mt][e >> 1]);
                }
        // dQ += dS K.
#pragma unroll
        for (int kk = 0; kk < BN / 16; ++kk) {
            uint32_t sa[MT][4];
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) acc_to_a<T>(sa[mt], dp[mt], kk);
#pragma unroll
            for (int cp = 0; cp < D / 16; ++cp) {
                uint32_t kb[4];
                ldsm_x4_t(kb, cK + kk * 16 * SD + cp * 16 + bt_off<SD>(lane));
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) mma2<T>(dq[mt], cp, sa[mt], kb);
            }
        }
    }
    cp_async_wait<0>();

    T* wQs = sQ + wrow * SD;  // only this warp read these rows
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int ct = 0; ct < NTD; ++ct)
#pragma unroll
            for (int r = 0; r < 2; ++r)
                *reinterpret_cast<uint32_t*>(wQs + (mt * 16 + (lane >> 2) + r * 8) * SD + ct * 8 + (lane & 3) * 2) =
                    pack2<T>(dq[mt][ct][2 * r] * a.scale, dq[mt][ct][2 * r + 1] * a.scale);
    __syncwarp();
    T* dqg = static_cast<T*>(a.o) + query_off(a, b, h);
    store_rows<T, 16 * MT, D, SD>(dqg, wQs, m0 + wrow, a.L, ld, 0, a.d, lane);
}

// ---------------- host side ----------------

template <class T, class C>
cudaError_t launch_dkdv(const MmaArgs& a, cudaStream_t s) {
    static const cudaError_t ready = allow_smem(dkdv_kernel<T, C>, C::smem);
    if (ready != cudaSuccess) return ready;
    const dim3 grid(ceil_div(a.S, C::BN), a.H, a.B * a.nsplit * C::NCS);
    dkdv_kernel<T, C><<<grid, C::NW * 32, C::smem, s>>>(a);
    return cudaGetLastError();
}
template <class T, class C>
cudaError_t launch_dq(const MmaArgs& a, cudaStream_t s) {
    static const cudaError_t ready = allow_smem(dq_kernel<T, C>, C::smem);
    if (ready != cudaSuccess) return ready;
    dq_kernel<T, C><<<dim3(ceil_div(a.L, C::BM), a.H, a.B), C::NW * 32, C::smem, s>>>(a);
    return cudaGetLastError();
}

// Query splits of the dK/dV pass: enough CTAs for ~4 per SM, each split at least 4 query blocks.
template <class C>
int dkdv_splits(int B, int L, int S, int H, int sms) {
    const int64_t ctas = int64_t(ceil_div(S, C::BN)) * B * H * C::NCS;
    const int nqb = ceil_div(L, C::BM);
    int want = int(ceil_div(4 * int64_t(sms), ctas));
    want = want < nqb / 4 ? want : nqb / 4;
    want = want < 16 ? want : 16;
    return want > 1 ? want : 1;
}

// dK/dV pass then dQ pass (delta must be ready; partials are reduced by the caller when nsplit > 1).
template <class T, int D>
cudaError_t mma_backward(const MmaArgs& a, cudaStream_t s) {
    const cudaError_t e = launch_dkdv<T, typename Tiles<D>::Dkdv>(a, s);
    return e != cudaSuccess ? e : launch_dq<T, typename Tiles<D>::Dq>(a, s);
}

}  // namespace gl::attn
