// sm_90a GEMM, persistent and warp-specialised: TMA copies into a STAGES-deep ring of
// 128-byte-swizzled tiles guarded by mbarriers, wgmma from shared memory. Included by gemm.cuh.
//   One CTA of 3 warpgroups (384 threads) per SM walks the 128 x BN output tiles t, t + grid, ...
//   (n fastest: the resident CTAs share rows of A, and B stays in L2).
//   Warpgroup 0, one thread: the producer. For each k-tile it waits until the consumers released
//   ring slot s (empty[s]), then issues the slot's copies, which complete full[s]'s transaction
//   count: A as one 64 k x 128 m box (K-major) or two 64 m x 64 k boxes (M-major), B as one
//   64 k x BN box (K-major) or BN / 64 boxes of 64 n x 64 k (N-major). Each box lands in the same
//   swizzled layout the cp.async kernel (gemm_sm90.cuh) builds, so the descriptors are the same.
//   Warpgroups 1 and 2: rows 0..63 and 64..127 of the tile. Per k-tile: wait full[s], four k16
//   wgmma, one group left in flight; a slot is released once its group retired. Epilogue: each
//   consumer stages its 64 fp32 rows in smem of its own (not the ring, which the producer is
//   already filling with the next tile) and stores them with 16-byte accesses through the
//   epilogue (alpha, bias, residual: store_rows64, whose residual loads are all in flight at
//   once), so a tile's epilogue overlaps the next tile's loads. With TMA stores (store_tma, the
//   default) the consumer rounds alpha * acc + bias (+ residual) to T in registers, writes its 64
//   rows into 64-byte-swizzled boxes of 32 columns (conflict-free) and one thread hands them to
//   TMA stores that run while the warpgroup goes on to the next tile's products; the buffer is
//   rewritten only after the stores read it (bulk wait_group.read). A residual comes in the same
//   boxes by a TMA load that one consumer thread issues when the tile starts (its own mbarrier),
//   so it lands during the tile's products. GL_GEMM_TMA_STORE=0 keeps the staged path (1: for residuals).
//   Tried and withdrawn: ping-pong consumers (a 64-row tile each, a ring per consumer), slower
//   on every SD shape (bench/RESULTS.md).
//   A second pair of operands (GemmArgs::A2, B2, K2: out = A B + A2 B2, one rounding) is read as
//   more k-tiles through maps of its own: LoRA's up projection joined to its base product.
// Needs the 16-byte path's alignment (vec_ok), K > 0 and no split-K; the M, N and K edges are the
// TMA's zero fill. The body exists only in sm_90a code (wgmma_usable() decides), and the maps need
// the driver's cuTensorMapEncodeTiled (tma_usable()).
#pragma once
#include <cuda.h>
#include <cudaTypedefs.h>

#include "ggml-lite/cuda/gemm_sm90.cuh"

namespace gl::gemm {

template <int BN, int STAGES>
struct TmaCfg {
    static constexpr int BM = 128, BK = 64, kThreads = 384;
    static constexpr int A_BYTES = BM * BK * 2, B_BYTES = BN * BK * 2, STAGE_BYTES = A_BYTES + B_BYTES;
    static constexpr int kLds = BN + 8;                   // floats: conflict-free float2 staging
    static constexpr int BOX_BYTES = 64 * BN * 2;         // one consumer's rows in T (store_tma's boxes)
    // Up to BN = 160 a consumer's epilogue area holds its fp32 rows (the staged path) or the output
    // boxes then the residual's; at BN = 256 only the boxes (TMA stores only, the residual in place).
    static constexpr bool kStaged = BN <= 160;
    static constexpr int EPI_BYTES = kStaged ? 64 * kLds * 4 : BOX_BYTES;
    static constexpr int RES_OFF = kStaged ? BOX_BYTES : 0;  // the residual's boxes in the area
    static constexpr int RING = STAGES * STAGE_BYTES;
    static constexpr int smem_bytes = RING + 2 * EPI_BYTES + 2 * STAGES * 8 + 16 + 1024;  // + barriers, alignment
    static_assert(STAGE_BYTES % 1024 == 0, "ring slots stay 1024-B aligned (the swizzle's atom)");
    static_assert(BN % 16 == 0 && BN <= 256, "wgmma tile");
    static_assert(smem_bytes <= 227 * 1024, "tile and ring do not fit in shared memory");
    static_assert(BN % 32 == 0 && RES_OFF + BOX_BYTES <= EPI_BYTES && EPI_BYTES % 1024 == 0 && BOX_BYTES % 1024 == 0,
                  "store_tma's boxes in the epilogue rows");
};

struct TmaParams {
    MmaParams p;  // shapes, C and the epilogue (A and B come through the tensor maps)
    int tiles_m, tiles_n, tiles;
    int store_tma;               // 1: C through map_c's TMA stores, 2: and the residual through map_r; 0: staged fp32 rows
    int r_batched;               // whether the residual has a batch coordinate
    int a_batched, b_batched;    // whether A / B have a batch coordinate (a stride of 0 shares one)
    int ktiles2;                 // k-tiles of the second pair (A2, B2: GemmArgs::K2), 0 without one
    int a2_batched, b2_batched;
};

__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}
// Returns once the phase of parity `parity` completed (a fresh barrier: parity 1 at once).
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
    uint32_t done = 0;
    do {
        asm volatile(
            "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
            : "=r"(done)
            : "r"(bar), "r"(parity)
            : "memory");
    } while (!done);
}
__device__ __forceinline__ void tma_load_3d(uint32_t dst, const CUtensorMap* map, uint32_t bar, int c0, int c1,
                                            int c2) {
    asm volatile(
        "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(
            dst),
        "l"(reinterpret_cast<uint64_t>(map)), "r"(c0), "r"(c1), "r"(c2), "r"(bar)
        : "memory");
}
// TMA store of the box at smem `src` to coordinates (c0, c1, c2) of `map`, in this thread's bulk group.
__device__ __forceinline__ void tma_store_3d(const CUtensorMap* map, uint32_t src, int c0, int c1, int c2) {
    asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%2, %3, %4}], [%1];\n" ::"l"(
                     reinterpret_cast<uint64_t>(map)),
                 "r"(src), "r"(c0), "r"(c1), "r"(c2)
                 : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// Waits until this thread's bulk stores have read their shared memory (READ) or completed.
template <bool READ>
__device__ __forceinline__ void bulk_wait_all() {
    if constexpr (READ) asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory");
    else asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
}
__device__ __forceinline__ void named_sync(int id, int threads) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(threads) : "memory");
}

// Stores 64 staged fp32 rows (pitch lds, BN columns; global rows from gm0, columns from n0) through
// the epilogue, 128 threads (ctid). Each thread's residual chunks are all loaded before the first
// is used, so the rows cost one memory latency, not one per chunk. N is a multiple of 8 (vec_ok).
template <class T, int BN>
__device__ __forceinline__ void store_rows64(const float* stage, int lds, int gm0, int n0, const MmaParams& p, int64_t bz,
                                             int ctid) {
    constexpr int CPR = BN / 8, ITERS = 64 * CPR / 128;
    static_assert((64 * CPR) % 128 == 0, "whole iterations");
    T* C = static_cast<T*>(p.C) + bz * p.sC;
    const T* R = static_cast<const T*>(p.epi.residual);
    const T* bias = static_cast<const T*>(p.epi.bias);
    uint4 res[ITERS];
#pragma unroll
    for (int it = 0; it < ITERS; it++) {
        const int i = ctid + it * 128, r = i / CPR, c = (i % CPR) * 8;
        const bool in = gm0 + r < p.M && n0 + c < p.N;
        res[it] = make_uint4(0, 0, 0, 0);
        if (R && in) res[it] = *reinterpret_cast<const uint4*>(R + bz * p.epi.sr + int64_t(gm0 + r) * p.epi.ldr + n0 + c);
    }
#pragma unroll
    for (int it = 0; it < ITERS; it++) {
        const int i = ctid + it * 128, r = i / CPR, c = (i % CPR) * 8;
        const int gm = gm0 + r, gn = n0 + c;
        if (gm >= p.M || gn >= p.N) continue;
        float v[8];
        *reinterpret_cast<float4*>(v) = *reinterpret_cast<const float4*>(stage + r * lds + c);
        *reinterpret_cast<float4*>(v + 4) = *reinterpret_cast<const float4*>(stage + r * lds + c + 4);
        const T* rv = reinterpret_cast<const T*>(&res[it]);
        alignas(16) T o[8];
#pragma unroll
        for (int e = 0; e < 8; e++) {  // apply_epilogue's order
            float x = v[e] * p.epi.alpha;
            if (bias) x += to_f32(bias[gn + e]);
            if (R) x += to_f32(rv[e]);
            o[e] = from_f32<T>(x);
        }
        copy16(C + int64_t(gm) * p.ldc + gn, o);
    }
}

// One consumer's m64nBN accumulators (alpha, bias, the residual's boxes `res` unless null, rounded
// to T) into BN / 32 boxes of 64 rows x 32 columns at `box` (4 KB apart), each in the TMA's 64-byte
// swizzle: 16-byte chunk c of row r at r * 64 + (c ^ (r / 2 % 4)) * 16, so a warp's 8 rows of one
// chunk hit 8 bank groups.
template <class T, int BN>
__device__ __forceinline__ void stage_boxes(const float (&acc)[BN / 2], unsigned char* box, const unsigned char* res,
                                            int n0, const MmaParams& p, int w4, int g, int t) {
    const T* bias = static_cast<const T*>(p.epi.bias);
#pragma unroll
    for (int j = 0; j < BN / 8; j++) {
        const int gn = n0 + 8 * j + 2 * t;
        float b0 = 0.0f, b1 = 0.0f;
        if (bias && gn < p.N) b0 = to_f32(bias[gn]), b1 = to_f32(bias[gn + 1]);
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int r = w4 * 16 + g + 8 * h;
            const int off = (j / 4) * 4096 + r * 64 + (((j % 4) ^ ((r >> 1) & 3)) << 4) + 4 * t;
            float x0 = acc[4 * j + 2 * h] * p.epi.alpha, x1 = acc[4 * j + 2 * h + 1] * p.epi.alpha;  // apply_epilogue's order
            if (bias) x0 += b0, x1 += b1;
            if (res) {
                const uint32_t rw = *reinterpret_cast<const uint32_t*>(res + off);
                const T* rv = reinterpret_cast<const T*>(&rw);
                x0 += to_f32(rv[0]), x1 += to_f32(rv[1]);
            }
            *reinterpret_cast<uint32_t*>(box + off) = pack2<T>(x0, x1);
        }
    }
}

template <class T, int BN, int STAGES, bool A_MN, bool B_MN>
__global__ void __launch_bounds__(384, 1)
    tma_gemm_kernel(const __grid_constant__ CUtensorMap map_a, const __grid_constant__ CUtensorMap map_b,
                    const __grid_constant__ CUtensorMap map_a2, const __grid_constant__ CUtensorMap map_b2,
                    const __grid_constant__ CUtensorMap map_c, const __grid_constant__ CUtensorMap map_r, TmaParams tp) {
    kernel_entry();
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    using Cfg = TmaCfg<BN, STAGES>;
    constexpr int BM = Cfg::BM, BK = Cfg::BK, ATOM = BK * 128;  // bytes of one 64-wide MN atom (64 k rows of 128 B)
    static_assert(!B_MN || BN % 64 == 0, "N-major B needs whole 64-wide atoms");
    extern __shared__ unsigned char smem_dyn[];
    unsigned char* smem = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(smem_dyn) + 1023) & ~uintptr_t(1023));
    const uint32_t sbase = smem_u32(smem);
    const uint32_t full0 = sbase + Cfg::RING + 2 * Cfg::EPI_BYTES, empty0 = full0 + STAGES * 8;
    const uint32_t resb0 = empty0 + STAGES * 8;  // [2]: a consumer's residual boxes landed
    const MmaParams& p = tp.p;
    const int tid = threadIdx.x, wg = tid >> 7;
    const int ktiles1 = (p.K + BK - 1) / BK, ktiles = ktiles1 + tp.ktiles2;  // the pairs' k-tiles, one run
    const int per_batch = tp.tiles_m * tp.tiles_n;
    if (tid == 0) {
        for (int s = 0; s < STAGES; s++) {
            mbar_init(full0 + 8 * s, 1);
            mbar_init(empty0 + 8 * s, 256);  // every consumer thread releases
        }
        mbar_init(resb0, 1);
        mbar_init(resb0 + 8, 1);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();

    // At BN = 256 a consumer holds 128 accumulators: registers move from the producer's warpgroup
    // to the consumers' (40 + 2 x 232 per thread of each, within the SM's 64 K).
    if constexpr (BN > 160) {
        if (wg == 0) asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
        else asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");
    }
    if (wg == 0) {  // producer
        if (tid != 0) return;
        int slot = 0;
        uint32_t phase = 0;
        for (int tile = blockIdx.x; tile < tp.tiles; tile += gridDim.x) {
            const int bz = tile / per_batch, rem = tile % per_batch;
            const int m0 = (rem / tp.tiles_n) * BM, n0 = (rem % tp.tiles_n) * BN;
            for (int kt = 0; kt < ktiles; kt++) {
                mbar_wait(empty0 + 8 * slot, phase ^ 1);
                const uint32_t full = full0 + 8 * slot, sa = sbase + slot * Cfg::STAGE_BYTES, sb = sa + Cfg::A_BYTES;
                mbar_expect_tx(full, Cfg::STAGE_BYTES);  // a box past its matrix still delivers all its bytes (zeros)
                const bool second = kt >= ktiles1;
                const CUtensorMap* ma = second ? &map_a2 : &map_a;
                const CUtensorMap* mb = second ? &map_b2 : &map_b;
                const int za = (second ? tp.a2_batched : tp.a_batched) ? bz : 0;
                const int zb = (second ? tp.b2_batched : tp.b_batched) ? bz : 0;
                const int k0 = (second ? kt - ktiles1 : kt) * BK;
                if constexpr (!A_MN) {
                    tma_load_3d(sa, ma, full, k0, m0, za);
                } else {
#pragma unroll
                    for (int j = 0; j < BM / 64; j++) tma_load_3d(sa + j * ATOM, ma, full, m0 + 64 * j, k0, za);
                }
                if constexpr (!B_MN) {
                    tma_load_3d(sb, mb, full, k0, n0, zb);
                } else {
#pragma unroll
                    for (int j = 0; j < BN / 64; j++) tma_load_3d(sb + j * ATOM, mb, full, n0 + 64 * j, k0, zb);
                }
                if (++slot == STAGES) slot = 0, phase ^= 1;
            }
        }
        return;
    }

    // consumers: warpgroup cw owns rows 64 cw .. 64 cw + 63 of every tile
    const int cw = wg - 1, ctid = tid - 128 * wg;
    float* epi = reinterpret_cast<float*>(smem + Cfg::RING + cw * Cfg::EPI_BYTES);
    const int lane = ctid & 31, w4 = ctid >> 5, g = lane >> 2, t = lane & 3;
    const int row0 = 64 * cw;  // this warpgroup's first row in the tile
    unsigned char* const box = reinterpret_cast<unsigned char*>(epi);  // store_tma: output boxes, then the residual's
    const uint32_t resb = resb0 + 8 * cw;
    float acc[BN / 2];
    int slot = 0;
    uint32_t phase = 0, rphase = 0;
    for (int tile = blockIdx.x; tile < tp.tiles; tile += gridDim.x) {
        const int bz = tile / per_batch, rem = tile % per_batch;
        const int m0 = (rem / tp.tiles_n) * BM, n0 = (rem % tp.tiles_n) * BN;
        if (tp.store_tma == 2 && ctid == 0) {  // the residual's boxes (the last tile's epilogue read them all)
            if constexpr (!Cfg::kStaged) bulk_wait_all<true>();  // in place: the last tile's stores read the boxes
            mbar_expect_tx(resb, Cfg::BOX_BYTES);
            const uint32_t rb = smem_u32(box + Cfg::RES_OFF);
#pragma unroll
            for (int b = 0; b < BN / 32; b++) tma_load_3d(rb + b * 4096, &map_r, resb, n0 + 32 * b, m0 + row0, tp.r_batched ? bz : 0);
        }
#pragma unroll
        for (int i = 0; i < BN / 2; i++) acc[i] = 0.0f;
        int held = -1;  // the slot whose wgmma group may still be reading it
        for (int kt = 0; kt < ktiles; kt++) {
            mbar_wait(full0 + 8 * slot, phase);
            const uint32_t sa = sbase + slot * Cfg::STAGE_BYTES, sb = sa + Cfg::A_BYTES;
#pragma unroll
            for (int i = 0; i < BN / 2; i++) pin(acc[i]);
            wgmma_fence();
#pragma unroll
            for (int ks = 0; ks < BK / 16; ks++) {
                const uint64_t da = A_MN ? mn_desc(sa + (row0 / 64) * ATOM + ks * 2048, ATOM)
                                         : sw128_desc(sa + row0 * 128 + ks * 32, 16, 1024);
                const uint64_t db = B_MN ? mn_desc(sb + ks * 2048, ATOM) : sw128_desc(sb + ks * 32, 16, 1024);
                Wgmma<BN, T, A_MN ? 1 : 0, B_MN ? 1 : 0>::run(acc, da, db, 1);
            }
            wgmma_commit();
            wgmma_wait<1>();
#pragma unroll
            for (int i = 0; i < BN / 2; i++) pin(acc[i]);
            if (held >= 0) mbar_arrive(empty0 + 8 * held);
            held = slot;
            if (++slot == STAGES) slot = 0, phase ^= 1;
        }
        wgmma_wait<0>();
#pragma unroll
        for (int i = 0; i < BN / 2; i++) pin(acc[i]);
        if (held >= 0) mbar_arrive(empty0 + 8 * held);

        if (tp.store_tma) {
            if (ctid == 0) bulk_wait_all<true>();  // the previous tile's stores have read the boxes
            named_sync(1 + cw, 128);
            if (tp.store_tma == 2) {
                mbar_wait(resb, rphase);
                rphase ^= 1;
            }
            stage_boxes<T, BN>(acc, box, tp.store_tma == 2 ? box + Cfg::RES_OFF : nullptr, n0, p, w4, g, t);
            fence_proxy_async();
            named_sync(1 + cw, 128);
            if (ctid == 0) {
#pragma unroll
                for (int b = 0; b < BN / 32; b++) tma_store_3d(&map_c, smem_u32(box) + b * 4096, n0 + 32 * b, m0 + row0, bz);
                bulk_commit();
            }
            continue;
        }
        if constexpr (!Cfg::kStaged) {
            __trap();  // launch_tma refuses BN = 256 without TMA stores
        } else {
#pragma unroll
            for (int j = 0; j < BN / 8; j++) {
                const int r = w4 * 16 + g, c = j * 8 + 2 * t;
                *reinterpret_cast<float2*>(epi + r * Cfg::kLds + c) = make_float2(acc[4 * j], acc[4 * j + 1]);
                *reinterpret_cast<float2*>(epi + (r + 8) * Cfg::kLds + c) = make_float2(acc[4 * j + 2], acc[4 * j + 3]);
            }
            named_sync(1 + cw, 128);
            // With a residual (its loads are what the rows wait for) all of a thread's chunks are
            // loaded first; without, the plain loop (the unrolled one measured slower there).
            if (p.epi.residual) store_rows64<T, BN>(epi, Cfg::kLds, m0 + row0, n0, p, bz, ctid);
            else store_staged<T, BN, 128, true>(epi, Cfg::kLds, 64, m0 + row0, n0, p, bz, ctid);
            named_sync(1 + cw, 128);  // the rows are out before the next tile stages its own
        }
    }
    if (tp.store_tma && ctid == 0) bulk_wait_all<false>();
#else
    __trap();  // not built for sm_90a; wgmma_usable() keeps the dispatcher away
#endif
}

// The driver's cuTensorMapEncodeTiled (through the runtime: no link to libcuda), or nullptr.
inline PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
    static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
        void* f = nullptr;
        cudaDriverEntryPointQueryResult q{};
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q) !=
                cudaSuccess ||
            q != cudaDriverEntryPointSuccess)
            f = nullptr;
        cudaGetLastError();
        return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
    }();
    return fn;
}

inline bool tma_usable() { return wgmma_usable() && tensor_map_encoder() != nullptr; }

// How the TMA kernel stores C: 1 through TMA stores, 2 also loading the residual by TMA, 0 the staged
// fp32 rows (a batch sharing one C, or GL_GEMM_TMA_STORE for comparisons: 0 the staged path, 1 TMA
// stores without a residual only, 2 the default).
inline int tma_store_mode(const GemmArgs& a) {
    static const int level = int(env_number("GL_GEMM_TMA_STORE", 2));
    if (a.batch > 1 && a.sC == 0) return 0;
    return a.epi.residual ? (level >= 2 ? 2 : 0) : (level >= 1 ? 1 : 0);
}

// A 3-D map of a bf16 / f16 matrix stored rows x cols (cols contiguous, rows ld elements apart),
// `batch` of them `sb` elements apart (sb = 0: one), read in boxes of box_cols x box_rows with
// the 128-byte swizzle (or `swizzle`); outside the matrix the box reads zeros (a store there is dropped).
inline CUtensorMap make_tensor_map(const void* base, DType t, int64_t cols, int64_t rows, int64_t ld, int64_t batch,
                                   int64_t sb, int box_cols, int box_rows,
                                   CUtensorMapSwizzle swizzle = CU_TENSOR_MAP_SWIZZLE_128B) {
    CUtensorMap m;
    const cuuint64_t dims[3] = {cuuint64_t(cols), cuuint64_t(rows), cuuint64_t(sb ? batch : 1)};
    const cuuint64_t strides[2] = {cuuint64_t(ld) * 2, cuuint64_t(sb ? sb : ld * rows) * 2};
    const cuuint32_t box[3] = {cuuint32_t(box_cols), cuuint32_t(box_rows), 1};
    const cuuint32_t elem[3] = {1, 1, 1};
    const CUresult r = tensor_map_encoder()(
        &m, t == DType::bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 3,
        const_cast<void*>(base), dims, strides, box, elem, CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle,
        CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    GL_CHECK(r == CUDA_SUCCESS, "gemm: cuTensorMapEncodeTiled failed (", int(r), ") for a ", rows, " x ", cols,
             " matrix, leading dim ", ld);
    return m;
}

template <class T, int BN, int STAGES, bool A_MN, bool B_MN>
void launch_tma(const GemmArgs& a, cudaStream_t s) {
    using Cfg = TmaCfg<BN, STAGES>;
    auto kern = tma_gemm_kernel<T, BN, STAGES, A_MN, B_MN>;
    static thread_local uint64_t smem_set = 0;
    allow_smem(reinterpret_cast<const void*>(kern), Cfg::smem_bytes, smem_set);
    TmaParams tp{};
    tp.p = params_of(a);
    tp.p.partial = nullptr;
    tp.p.batch0 = 0;
    tp.tiles_m = int(ceil_div(a.M, Cfg::BM));
    tp.tiles_n = int(ceil_div(a.N, BN));
    const int64_t tiles = int64_t(tp.tiles_m) * tp.tiles_n * a.batch;
    GL_CHECK(tiles < (int64_t(1) << 31), "gemm: ", tiles, " output tiles");
    tp.tiles = int(tiles);
    tp.a_batched = a.sA != 0 && a.batch > 1;
    tp.b_batched = a.sB != 0 && a.batch > 1;
    // A: M x K (K-major) or K x M; B: N x K (K-major) or K x N.
    const CUtensorMap ma = A_MN ? make_tensor_map(a.A, a.dtype, a.M, a.K, a.lda, a.batch, tp.a_batched ? a.sA : 0, 64, 64)
                                : make_tensor_map(a.A, a.dtype, a.K, a.M, a.lda, a.batch, tp.a_batched ? a.sA : 0, 64,
                                                  Cfg::BM);
    const CUtensorMap mb = B_MN ? make_tensor_map(a.B, a.dtype, a.N, a.K, a.ldb, a.batch, tp.b_batched ? a.sB : 0, 64, 64)
                                : make_tensor_map(a.B, a.dtype, a.K, a.N, a.ldb, a.batch, tp.b_batched ? a.sB : 0, 64, BN);
    // The second pair (A2 B2 over K2, same layouts), read after the first pair's k-tiles.
    CUtensorMap ma2 = ma, mb2 = mb;
    if (a.K2 > 0) {
        tp.ktiles2 = int(ceil_div(a.K2, int64_t(Cfg::BK)));
        tp.a2_batched = a.sA2 != 0 && a.batch > 1;
        tp.b2_batched = a.sB2 != 0 && a.batch > 1;
        ma2 = A_MN ? make_tensor_map(a.A2, a.dtype, a.M, a.K2, a.lda2, a.batch, tp.a2_batched ? a.sA2 : 0, 64, 64)
                   : make_tensor_map(a.A2, a.dtype, a.K2, a.M, a.lda2, a.batch, tp.a2_batched ? a.sA2 : 0, 64, Cfg::BM);
        mb2 = B_MN ? make_tensor_map(a.B2, a.dtype, a.N, a.K2, a.ldb2, a.batch, tp.b2_batched ? a.sB2 : 0, 64, 64)
                   : make_tensor_map(a.B2, a.dtype, a.K2, a.N, a.ldb2, a.batch, tp.b2_batched ? a.sB2 : 0, 64, BN);
    }
    // C through TMA stores, the residual through TMA loads (vec_ok made C, the residual and their
    // strides 16-byte aligned). A residual may be C itself: each tile's boxes are read before its stores.
    tp.store_tma = tma_store_mode(a);
    GL_CHECK(Cfg::kStaged || tp.store_tma, "gemm: the TMA tile N = ", BN, " needs TMA stores");
    tp.r_batched = a.epi.residual && a.batch > 1 && a.epi.sr != 0;
    const CUtensorMap mc = tp.store_tma ? make_tensor_map(a.C, a.dtype, a.N, a.M, a.ldc, a.batch, a.batch > 1 ? a.sC : 0, 32, 64,
                                                          CU_TENSOR_MAP_SWIZZLE_64B)
                                        : ma;
    const CUtensorMap mr = tp.store_tma == 2 ? make_tensor_map(a.epi.residual, a.dtype, a.N, a.M, a.epi.ldr, a.batch,
                                                               tp.r_batched ? a.epi.sr : 0, 32, 64, CU_TENSOR_MAP_SWIZZLE_64B)
                                             : ma;
    const int grid = int(std::min<int64_t>(tiles, device_info().sms));
    kern<<<grid, Cfg::kThreads, Cfg::smem_bytes, s>>>(ma, mb, ma2, mb2, mc, mr, tp);
    GL_CUDA_LAUNCHED();
}

// gemm's tb (B stored N x K) is the kernel's K-major B; !tb its N-major B (BN a multiple of 64).
template <class T, int BN, int STAGES>
void launch_tma_layout(const GemmArgs& a, cudaStream_t s) {
    if (a.tb) {
        if (!a.ta) launch_tma<T, BN, STAGES, false, false>(a, s);
        else launch_tma<T, BN, STAGES, true, false>(a, s);
        return;
    }
    if constexpr (BN % 64 == 0) {
        if (!a.ta) launch_tma<T, BN, STAGES, false, true>(a, s);
        else launch_tma<T, BN, STAGES, true, true>(a, s);
    } else {
        fail("gemm: TMA tile N = ", BN, " cannot take an N-major B");
    }
}

}  // namespace gl::gemm
