// sm_90a convolution: the implicit GEMM of conv_mma.cuh (the same Args, gathers and epilogue:
// TileLoader, store_pair) with its products on wgmma instead of mma.sync + ldmatrix. Forward and
// input gradient (the weight gradient's A is M-major gy, kept on mma.sync).
//   CTA = 2 warpgroups (256 threads), tile 128 x BN x 64; warpgroup w owns rows 64w..64w+63 and
//   its m64nBNk16 accumulators. A (gathered x or gy) is K-major: rows of 128 B. B: forward K-major
//   ([Cout][K] rows), input gradient N-major (the weight's Cin runs along memory), stored as
//   64-wide atoms (TileLoader's ATOMS layout), so BN % 64 == 0 there. Both 128-byte swizzled.
//   Pipeline as the GEMM's (gemm_sm90.cuh): STAGES slots, loads STAGES-2 k-tiles ahead, one wgmma
//   group in flight; a slot is refilled only after both warpgroups retired its readers.
// The body exists only in sm_90a code; conv_wgmma_usable() checks that the loaded binary has it.
#pragma once
#include "ggml-lite/cuda/conv_mma.cuh"
#include "ggml-lite/cuda/wgmma.cuh"

namespace gl::convk {

template <int BN, int STAGES>
struct WgConvCfg {
    static constexpr int kBM = 128, kBN = BN, kBK = 64, kThreads = 256, kStages = STAGES;
    static constexpr int kABytes = kBM * kBK * 2, kStageBytes = kABytes + BN * kBK * 2;
    static constexpr int kSmem = STAGES * kStageBytes + 1024;  // + slack to align the slots to 1024 B
    static constexpr int kMinBlocks = kSmem * 2 <= 227 * 1024 ? 2 : 1;
    static_assert(BN % 16 == 0 && BN <= 256 && STAGES >= 3, "wgmma conv tile");
};

template <class T, int MODE, class Cfg>
__global__ void __launch_bounds__(256, Cfg::kMinBlocks) conv_wgmma_kernel(const Args args) {
    kernel_entry();
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr int BM = Cfg::kBM, BN = Cfg::kBN, BK = Cfg::kBK, STAGES = Cfg::kStages;
    static_assert(MODE == kFwd || MODE == kDgrad, "the weight gradient stays on mma.sync");
    using Ld = TileLoader<T, MODE, BM, BN, BK, 256, false, true>;
    static_assert(Ld::A_KMAJ, "A is K-major in both modes");
    extern __shared__ unsigned char smem_dyn[];
    unsigned char* smem =
        reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(smem_dyn) + 1023) & ~uintptr_t(1023));
    const uint32_t sbase = smem_u32(smem);
    const int tid = threadIdx.x, wg = tid >> 7;
    const int phase = int(blockIdx.z) / args.splits, split = int(blockIdx.z) % args.splits;
    const int m0 = int(blockIdx.x / args.n_tiles) * BM, n0 = int(blockIdx.x % args.n_tiles) * BN;
    const Prob p = make_prob(args.g, MODE, phase);
    if (m0 >= p.M) return;
    const int KT = ceil_div(p.K, BK);
    const int kt0 = int(int64_t(KT) * split / args.splits), kt1 = int(int64_t(KT) * (split + 1) / args.splits);
    const int nkt = kt1 - kt0;
    Ld ld(args, p, tid, m0, n0, kt0);
    auto slot = [&](int s) { return reinterpret_cast<T*>(smem + s * Cfg::kStageBytes); };

    float acc[BN / 2];
#pragma unroll
    for (int i = 0; i < BN / 2; i++) acc[i] = 0.0f;
#pragma unroll
    for (int s = 0; s < STAGES - 2; s++) {
        if (s < nkt) ld.load(slot(s), kt0 + s);
        cp_async_commit();
    }
    for (int it = 0; it < nkt; it++) {
        cp_async_wait<STAGES - 3>();
        gemm::fence_proxy_async();
        __syncthreads();  // k-tile it is in smem for all; the wgmma of it-2 retired in both warpgroups
        const int nk = it + STAGES - 2;
        if (nk < nkt) ld.load(slot(nk % STAGES), kt0 + nk);
        cp_async_commit();
        const uint32_t sa = sbase + (it % STAGES) * Cfg::kStageBytes, sb = sa + Cfg::kABytes;
#pragma unroll
        for (int i = 0; i < BN / 2; i++) gemm::pin(acc[i]);
        gemm::wgmma_fence();
#pragma unroll
        for (int ks = 0; ks < BK / 16; ks++) {
            // K-major: a k16 step is 32 B along the swizzled row; N-major: 16 rows of an atom.
            const uint64_t da = gemm::sw128_desc(sa + wg * (64 * 128) + ks * 32, 16, 1024);
            const uint64_t db = Ld::B_KMAJ ? gemm::sw128_desc(sb + ks * 32, 16, 1024)
                                           : gemm::mn_desc(sb + ks * 2048, BK * 128);
            gemm::Wgmma<BN, T, 0, Ld::B_KMAJ ? 0 : 1>::run(acc, da, db, 1);
        }
        gemm::wgmma_commit();
        gemm::wgmma_wait<1>();
#pragma unroll
        for (int i = 0; i < BN / 2; i++) gemm::pin(acc[i]);
    }
    gemm::wgmma_wait<0>();
#pragma unroll
    for (int i = 0; i < BN / 2; i++) gemm::pin(acc[i]);
    cp_async_wait<0>();

    // Accumulator j of an m64nN fragment: rows w4*16 + g (+8), columns 8j + 2t (+1), as mma.sync's.
    const int lane = tid & 31, w4 = (tid >> 5) & 3, g = lane >> 2, t = lane & 3;
    const int m = m0 + wg * 64 + w4 * 16 + g;
#pragma unroll
    for (int j = 0; j < BN / 8; j++) {
        const int n = n0 + j * 8 + 2 * t;
        store_pair<T>(args, p, MODE, split, m, n, acc[4 * j], acc[4 * j + 1]);
        store_pair<T>(args, p, MODE, split, m + 8, n, acc[4 * j + 2], acc[4 * j + 3]);
    }
#else
    __trap();  // not built for sm_90a; conv_wgmma_usable() keeps the planner away
#endif
}

// Whether this binary carries the sm_90a body and the current device can run it.
inline bool conv_wgmma_usable() {
    return gemm::sm90a_image(reinterpret_cast<const void*>(conv_wgmma_kernel<__nv_bfloat16, kFwd, WgConvCfg<128, 3>>));
}

}  // namespace gl::convk
