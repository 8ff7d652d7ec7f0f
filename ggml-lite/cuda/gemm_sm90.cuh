// sm_90a GEMM: wgmma (m64nNk16, fp32 accumulate) reading both operands from shared memory
// through matrix descriptors, 128-byte swizzled tiles filled by cp.async. Included by gemm.cuh.
//   CTA = 2 warpgroups (256 threads), tile 128 x BN x 64; warpgroup w owns rows 64w..64w+63.
//   A: K-major ([m][k], rows of 128 B) or, A_MN, M-major (per 64-wide m atom, [k][m] rows);
//   B: K-major ([n][k]) or, B_MN, N-major (per 64-wide n atom, [k][n] rows) via the wgmma
//   transpose bits. Swizzle: 16-byte chunk c of row r sits at chunk c ^ (r % 8) (1024-B atoms).
//   Pipeline: STAGES slots, loads run STAGES-2 k-tiles ahead; one wgmma group stays in flight
//   (wait_group 1), so a slot is refilled only after every warpgroup waited for its readers.
// Needs the 16-byte path's alignment (vec_ok); M, N, K edges are zero-filled. The body exists
// only in sm_90a code; wgmma_usable() checks that the loaded binary has it.
#pragma once
#include "ggml-lite/cuda/gemm_kernels.cuh"
#include "ggml-lite/cuda/wgmma.cuh"

namespace gl::gemm {

template <int BN, int STAGES>
struct WgCfg {
    static constexpr int BM = 128, BK = 64, kThreads = 256;
    static constexpr int A_BYTES = BM * BK * 2, B_BYTES = BN * BK * 2, STAGE_BYTES = A_BYTES + B_BYTES;
    static constexpr int kLds = BN + 8;
    static constexpr int pipe = STAGES * STAGE_BYTES, staged = BM * kLds * 4;
    static constexpr int smem_bytes = (pipe > staged ? pipe : staged) + 1024;  // + alignment slack
    static_assert(BN % 16 == 0 && BN <= 256 && STAGES >= 3, "wgmma tile");
};

template <class T, int BN, int STAGES, bool A_MN, bool B_MN>
__global__ void __launch_bounds__(256, (WgCfg<BN, STAGES>::smem_bytes * 2 <= 227 * 1024 ? 2 : 1))
    wgmma_gemm_kernel(MmaParams p) {
    kernel_entry();
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using Cfg = WgCfg<BN, STAGES>;
    constexpr int BM = Cfg::BM, BK = Cfg::BK, NTH = Cfg::kThreads;
    static_assert(!B_MN || BN % 64 == 0, "N-major B needs whole 64-wide atoms");
    extern __shared__ unsigned char smem_dyn[];
    unsigned char* smem = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(smem_dyn) + 1023) & ~uintptr_t(1023));
    const uint32_t sbase = smem_u32(smem);
    const int tid = threadIdx.x, wg = tid >> 7;
    const int m0 = (blockIdx.x / p.tiles_n) * BM, n0 = (blockIdx.x % p.tiles_n) * BN;
    const int64_t bz = int64_t(blockIdx.z) + p.batch0;
    const T* A = static_cast<const T*>(p.A) + bz * p.sA;
    const T* B = static_cast<const T*>(p.B) + bz * p.sB;
    const int kbeg = blockIdx.y * p.k_per_split;
    const int kend = max(0, min(p.K, kbeg + p.k_per_split) - kbeg);  // relative to kbeg
    // written out: through ceil_div the compiler no longer uses kend >= 0 (a signed division)
    const int ktiles = (kend + BK - 1) / BK;

    auto load_stage = [&](int slot, int kt) {
        const int kr = kt * BK;  // relative to kbeg
        const uint32_t sa = sbase + slot * Cfg::STAGE_BYTES, sb = sa + Cfg::A_BYTES;
        if constexpr (!A_MN) {
#pragma unroll
            for (int it = 0; it < BM * 8 / NTH; it++) {
                const int i = tid + it * NTH, r = i >> 3, c = i & 7;
                const bool ok = m0 + r < p.M && kr + c * 8 < kend;
                const T* g = A + int64_t(m0 + r) * p.lda + kbeg + kr + c * 8;
                cp_async<16>(sa + r * 128 + ((c ^ (r & 7)) << 4), ok ? g : A, ok ? 16 : 0);
            }
        } else {
#pragma unroll
            for (int it = 0; it < BK * (BM / 8) / NTH; it++) {
                const int i = tid + it * NTH, k = i / (BM / 8), cc = i % (BM / 8), c = cc & 7;
                const bool ok = kr + k < kend && m0 + cc * 8 < p.M;
                const T* g = A + int64_t(kbeg + kr + k) * p.lda + m0 + cc * 8;
                cp_async<16>(sa + (cc >> 3) * (BK * 128) + k * 128 + ((c ^ (k & 7)) << 4), ok ? g : A, ok ? 16 : 0);
            }
        }
        if constexpr (!B_MN) {
#pragma unroll
            for (int it = 0; it < ceil_div(BN * 8, NTH); it++) {
                const int i = tid + it * NTH, r = i >> 3, c = i & 7;
                if ((BN * 8) % NTH != 0 && i >= BN * 8) break;
                const bool ok = n0 + r < p.N && kr + c * 8 < kend;
                const T* g = B + int64_t(n0 + r) * p.ldb + kbeg + kr + c * 8;
                cp_async<16>(sb + r * 128 + ((c ^ (r & 7)) << 4), ok ? g : B, ok ? 16 : 0);
            }
        } else {
#pragma unroll
            for (int it = 0; it < BK * (BN / 8) / NTH; it++) {
                const int i = tid + it * NTH, k = i / (BN / 8), cc = i % (BN / 8), c = cc & 7;
                const bool ok = kr + k < kend && n0 + cc * 8 < p.N;
                const T* g = B + int64_t(kbeg + kr + k) * p.ldb + n0 + cc * 8;
                cp_async<16>(sb + (cc >> 3) * (BK * 128) + k * 128 + ((c ^ (k & 7)) << 4), ok ? g : B, ok ? 16 : 0);
            }
        }
    };

    float acc[BN / 2];
#pragma unroll
    for (int i = 0; i < BN / 2; i++) acc[i] = 0.0f;

#pragma unroll
    for (int s = 0; s < STAGES - 2; s++) {
        if (s < ktiles) load_stage(s, s);
        cp_async_commit();
    }
    for (int kt = 0; kt < ktiles; kt++) {
        cp_async_wait<STAGES - 3>();
        fence_proxy_async();
        __syncthreads();  // k-tile kt is in smem for all; wgmma(kt-2) of both warpgroups retired
        {
            const int nk = kt + STAGES - 2;
            if (nk < ktiles) load_stage(nk % STAGES, nk);
            cp_async_commit();
        }
        const uint32_t sa = sbase + (kt % STAGES) * Cfg::STAGE_BYTES, sb = sa + Cfg::A_BYTES;
#pragma unroll
        for (int i = 0; i < BN / 2; i++) pin(acc[i]);
        wgmma_fence();
#pragma unroll
        for (int ks = 0; ks < BK / 16; ks++) {
            // K-major: the k16 step moves 32 B along the swizzled 128-B row. MN-major: 16 k rows.
            const uint64_t da = A_MN ? mn_desc(sa + wg * (BK * 128) + ks * 2048, BK * 128)
                                     : sw128_desc(sa + wg * (64 * 128) + ks * 32, 16, 1024);
            const uint64_t db = B_MN ? mn_desc(sb + ks * 2048, BK * 128) : sw128_desc(sb + ks * 32, 16, 1024);
            Wgmma<BN, T, A_MN ? 1 : 0, B_MN ? 1 : 0>::run(acc, da, db, 1);
        }
        wgmma_commit();
        wgmma_wait<1>();
#pragma unroll
        for (int i = 0; i < BN / 2; i++) pin(acc[i]);
    }
    wgmma_wait<0>();
#pragma unroll
    for (int i = 0; i < BN / 2; i++) pin(acc[i]);
    cp_async_wait<0>();
    __syncthreads();  // pipeline smem becomes the epilogue tile

    float* stage = reinterpret_cast<float*>(smem);
    const int lane = tid & 31, w4 = (tid >> 5) & 3, g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int j = 0; j < BN / 8; j++) {
        const int r = wg * 64 + w4 * 16 + g, c = j * 8 + 2 * t;
        *reinterpret_cast<float2*>(stage + r * Cfg::kLds + c) = make_float2(acc[4 * j], acc[4 * j + 1]);
        *reinterpret_cast<float2*>(stage + (r + 8) * Cfg::kLds + c) = make_float2(acc[4 * j + 2], acc[4 * j + 3]);
    }
    __syncthreads();
    store_staged<T, BN, NTH, true>(stage, Cfg::kLds, BM, m0, n0, p, bz, tid);
#else
    __trap();  // not built for sm_90a; wgmma_usable() keeps the dispatcher away
#endif
}

// Whether this binary carries the sm_90a body and the current device can run it.
inline bool wgmma_usable() {
    return sm90a_image(reinterpret_cast<const void*>(wgmma_gemm_kernel<__nv_bfloat16, 128, 3, false, true>));
}

template <class T, int BN, int STAGES, bool A_MN, bool B_MN>
void launch_wgmma(const GemmArgs& a, int splits, float* partial, cudaStream_t s) {
    using Cfg = WgCfg<BN, STAGES>;
    auto kern = wgmma_gemm_kernel<T, BN, STAGES, A_MN, B_MN>;
    static thread_local uint64_t smem_set = 0;
    allow_smem(reinterpret_cast<const void*>(kern), Cfg::smem_bytes, smem_set);
    MmaParams p = params_of(a);
    p.tiles_n = int(ceil_div(a.N, BN));
    const int64_t tiles = ceil_div(a.M, Cfg::BM) * p.tiles_n;
    int kps = int(ceil_div(a.K, splits));
    kps = ceil_div(kps, Cfg::BK) * Cfg::BK;
    const int ysplits = splits > 1 && kps > 0 ? int(ceil_div(a.K, kps)) : 1;
    p.k_per_split = ysplits > 1 ? kps : int(a.K > 0 ? a.K : 1);
    p.partial = ysplits > 1 ? partial : nullptr;
    for (int64_t b0 = 0; b0 < a.batch; b0 += 65535) {
        p.batch0 = int(b0);
        const unsigned nz = unsigned(a.batch - b0 < 65535 ? a.batch - b0 : 65535);
        kern<<<dim3(unsigned(tiles), unsigned(ysplits), nz), Cfg::kThreads, Cfg::smem_bytes, s>>>(p);
        GL_CUDA_LAUNCHED();
    }
    if (ysplits > 1) launch_splitk_reduce<T>(a, ysplits, partial, s);
}

}  // namespace gl::gemm
