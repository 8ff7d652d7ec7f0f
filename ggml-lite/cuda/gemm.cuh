// GEMM for the CUDA backend: one entry, gemm(), that picks a kernel by arch, dtype, layout and
// shape. Used by cuda/matmul.cu; bench/gemm_check.cu checks and times it against cuBLAS.
//   C[b] = alpha * op(A[b]) op(B[b])  (+ bias[N]) (+ residual[b]),  C row-major M x N (ldc).
//   A: stored M x K row-major (lda >= K) or, ta, K x M (lda >= M).
//   B: stored K x N row-major (ldb >= N) or, tb, N x K (ldb >= K; linear weights [out, in]).
//   Batch strides sA, sB, sC (sB = 0 shares B); indices are 64-bit, M, N, K < 2^31.
// Kernels (all fp32 accumulation, one rounding to C's dtype after the epilogue):
//   sm_90a, bf16/f16 (gemm_tma.cuh): persistent, warp-specialised, TMA into an mbarrier ring,
//     wgmma, tiles 128 x {64, 128, 160}, all four layouts; taken unless the problem splits K.
//   sm_90a, bf16/f16 (gemm_sm90.cuh): wgmma from 128-B-swizzled smem filled by cp.async, tiles
//     128 x {64, 128, 160}, all four layouts; split-K (its speed against cuBLAS: bench/RESULTS.md).
//   sm_80+, bf16/f16 (gemm_kernels.cuh): mma.sync m16n8k16 + ldmatrix + cp.async pipeline.
//   The 16-byte paths need the contiguous dims, leading dims and batch strides to be multiples of
//   8 and 16-byte aligned pointers; otherwise a mma.sync kernel with scalar predicated loads runs.
//   f32: exact FFMA tiled kernel (no TF32), for parity tests.
// A quantized B (GemmArgs::b_quant: 8-bit codes and f32 row scales, a frozen weight) runs the
//   mma.sync kernel (tiles 128 x 128 x 64, or 64 x 64) whose B loader converts codes to T in
//   registers on their way to smem, or the FFMA kernel for f32; never wgmma nor cuBLAS. B's 8-byte
//   chunks need K (tb) or N (else) and ldb to be multiples of 8 and an 8-byte aligned B.
// Few output tiles and a long K: split-K with fp32 partials in the caller's workspace, summed in
//   a fixed order (deterministic: no atomics anywhere). A^T B with a side of at most 16 and a long K
//   (LoRA's weight gradients): the tall-skinny kernel (gemm_skinny.cuh), partials in the workspace too.
// A B^T with at most 16 rows of A (a linear layer on a few rows: the time-embedding projections):
//   the few-row kernel (gemm_rows.cuh), which streams B once with 16-byte loads and FMAs.
// GL_GEMM=cublas routes everything to cuBLAS (comparison; f32 uses CUBLAS_COMPUTE_32F).
#pragma once
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "ggml-lite/core/dtype.h"
#include "ggml-lite/core/error.h"
#include "ggml-lite/cuda/check.cuh"
#include "ggml-lite/cuda/device.cuh"
#include "ggml-lite/cuda/gemm_args.cuh"
#include "ggml-lite/cuda/gemm_kernels.cuh"
#include "ggml-lite/cuda/gemm_rows.cuh"
#include "ggml-lite/cuda/gemm_sm90.cuh"
#include "ggml-lite/cuda/gemm_skinny.cuh"
#include "ggml-lite/cuda/gemm_tma.cuh"

namespace gl::gemm {

// ---------------- host side: configurations and dispatch ----------------

// mma.sync tiles (sm_80+, and the unaligned fallback). Chosen from a sweep on H200
// (bench/gemm_check.cu); each must fit the device's shared memory (sm_86/89: 99 KB).
using CfgWide = TileCfg<256, 160, 32, 4, 2, 3, 1>;  // N = 320-like, mid-size problems
using CfgK64 = TileCfg<128, 128, 64, 2, 4, 3, 2>;   // large N
using CfgW4 = TileCfg<128, 128, 32, 2, 2, 4, 2>;    // 4 warps of 64 x 64
using CfgSmall = TileCfg<64, 64, 32, 2, 2, 4, 4>;   // few tiles; the unaligned fallback

// sm_90a wgmma tiles 128 x BN with their pipeline depth (2 blocks per SM for all three).
constexpr int kWg64Stages = 4, kWg128Stages = 3, kWg160Stages = 3;
// The TMA kernel's rings (one block per SM; each fills most of the 227 KB with its epilogue rows).
constexpr int kTma64Stages = 6, kTma128Stages = 4, kTma160Stages = 3, kTma256Stages = 3;

enum class GemmKernel { mma_wide, mma_k64, mma_w4, mma_small, wg128, wg160, wg64, tma128, tma160, tma64, tma256, skinny, rows, ffma_f32, cublas };

inline bool is_tma(GemmKernel k) {
    return k == GemmKernel::tma128 || k == GemmKernel::tma160 || k == GemmKernel::tma64 || k == GemmKernel::tma256;
}

inline bool use_cublas() {
    static const bool on = [] {
        const char* e = std::getenv("GL_GEMM");
        return e && std::strcmp(e, "cublas") == 0;
    }();
    return on;
}

// Kernel and split count for a problem; the same answer for gemm_workspace_bytes() and gemm().
struct GemmPlan {
    GemmKernel kernel = GemmKernel::mma_small;
    int splits = 1;
};

inline int64_t tiles_of(int64_t M, int64_t N, int64_t batch, int bm, int bn) {
    return ceil_div(M, bm) * ceil_div(N, bn) * batch;
}

// Predicted time (arbitrary units): waves of (sms * blocks-per-SM) tiles, each wave costing its
// blocks' padded tile area over the kernel's relative throughput.
inline double predict(int64_t M, int64_t N, int64_t batch, int sms, int bm, int bn, int per_sm, double eff) {
    const int64_t tiles = tiles_of(M, N, batch, bm, bn), slots = int64_t(sms) * per_sm;
    return double(ceil_div(tiles, slots)) * per_sm * bm * bn / eff;
}

template <class Cfg>
constexpr int mma_smem(bool ta, bool tb) { return Cfg::smem_bytes(ta, tb); }

// skinny: whether the tall-skinny weight-gradient kernel may be taken (gemm() asks again without
// it when the workspace cannot hold its partials).
inline GemmPlan plan_gemm(const GemmArgs& a, bool vec, bool skinny = true) {
    const bool quant = a.b_quant;
    if (use_cublas() && !quant) return {GemmKernel::cublas, 1};
    if (a.dtype == DType::f32) return {GemmKernel::ffma_f32, 1};
    const int64_t M = a.M, N = a.N, K = a.K, batch = a.batch;
    const DeviceInfo dev = device_info();
    if (const int sp = skinny ? skinny_splits(a, vec, dev.sms) : 0; sp > 0) return {GemmKernel::skinny, sp};
    if (rows_ok(a, vec)) return {GemmKernel::rows, 1};
    struct Cand {
        GemmKernel k;
        int bm, bn, per_sm;
        double eff;
        bool ok;
    };
    // Relative throughputs fitted to an H200 sweep of bench/gemm_check.cu (bench/RESULTS.md); the
    // 64-wide wgmma tile is rated lower for its short N. Earlier entries win ties.
    const bool wg = vec && !quant && wgmma_usable();
    const bool tma = wg && K > 0 && tma_usable();
    const bool ta = a.ta, tb = a.tb;
    // The 256-wide TMA tile (half the L2 and smem operand traffic a product of the 128-wide one);
    // GL_GEMM_TMA256_EFF moves its rating for comparisons.
    static const double TMA256_EFF = env_number("GL_GEMM_TMA256_EFF", 3.0);
    const Cand cands[] = {
        {GemmKernel::tma256, 128, 256, 1, TMA256_EFF, tma && tma_store_mode(a) != 0},  // needs TMA stores
        {GemmKernel::tma128, 128, 128, 1, 2.65, tma},
        {GemmKernel::tma160, 128, 160, 1, 2.62, tma && tb},
        {GemmKernel::tma64, 128, 64, 1, 2.15, tma},
        {GemmKernel::wg128, 128, 128, 2, 1.90, wg},
        {GemmKernel::wg160, 128, 160, 2, 2.00, wg && tb},  // an N-major B needs 64-wide atoms
        {GemmKernel::wg64, 128, 64, 2, 1.40, wg},
        {GemmKernel::mma_k64, 128, 128, 2, 1.00, vec && !wg && mma_smem<CfgK64>(ta, tb) <= dev.smem_optin},
        {GemmKernel::mma_w4, 128, 128, 2, 1.00, vec && !wg && !quant && mma_smem<CfgW4>(ta, tb) <= dev.smem_optin},
        {GemmKernel::mma_wide, 256, 160, 1, 1.00,
         vec && !wg && !quant && mma_smem<CfgWide>(ta, tb) <= dev.smem_optin},
        {GemmKernel::mma_small, 64, 64, 4, 0.60, !wg},
    };
    // Too few tiles for one per SM and a long K (8192 and more where the TMA kernel runs: a weight
    // gradient over the batch's tokens): split K, which the TMA kernel does not. Below that the unsplit TMA kernel measured
    // faster: 512 x 1280 x 1280 at 191 TFLOP/s against 85 for wg64 split 2, x 5120 at 310 against 213,
    // and the batch-1 step 19.0 against 19.9 ms with no split at all (bench/RESULTS.md).
    // GL_GEMM_SPLIT_MIN_K moves the bound, for a comparison in one binary.
    static const int64_t split_min_k = std::max<int64_t>(1, int64_t(env_number("GL_GEMM_SPLIT_MIN_K", 8192)));
    const int64_t min_k = tma ? split_min_k : 1024;  // without the TMA kernel (sm_80, quantized B) splits pay from 1024
    auto splits_k = [&](const Cand& c) { return tiles_of(M, N, batch, c.bm, c.bn) < dev.sms && K + a.K2 >= min_k; };
    const Cand* best = nullptr;
    double best_t = 0;
    for (const Cand& c : cands) {
        if (!c.ok || (is_tma(c.k) && splits_k(c)) || (a.K2 > 0 && !is_tma(c.k))) continue;
        const double t = predict(M, N, batch, dev.sms, c.bm, c.bn, c.per_sm, c.eff);
        if (!best || t < best_t) best = &c, best_t = t;
    }
    if (!best) return {GemmKernel::mma_small, 1};  // a pair the TMA kernel cannot take: gemm() runs two products
    GemmPlan pl{best->k, 1};
    // The split: the blocks fill about one full wave, each split keeping >= 512 of K.
    const int64_t tiles = tiles_of(M, N, batch, best->bm, best->bn), slots = int64_t(dev.sms) * best->per_sm;
    if (splits_k(*best)) {
        int64_t s = slots / tiles;
        s = s < K / 512 ? s : K / 512;
        s = s < 32 ? s : 32;
        pl.splits = int(s < 2 ? 1 : s);
    }
    return pl;
}

// Whether the 16-byte cp.async paths apply: contiguous dims, leading dims and strides in whole
// 16-byte chunks, and aligned base pointers (null pointers count as aligned: planning only).
inline bool vec_ok(const GemmArgs& a) {
    const int64_t lead_a = a.ta ? a.M : a.K, lead_b = a.tb ? a.K : a.N;
    bool ok = lead_a % 8 == 0 && lead_b % 8 == 0 && a.N % 8 == 0;
    ok = ok && a.lda % 8 == 0 && a.ldb % 8 == 0 && a.ldc % 8 == 0;
    ok = ok && a.sA % 8 == 0 && a.sB % 8 == 0 && a.sC % 8 == 0;
    ok = ok && aligned16(a.A) && aligned16(a.C);
    ok = ok && (a.b_quant ? (reinterpret_cast<uintptr_t>(a.B) & 7) == 0 : aligned16(a.B));  // codes: 8-byte chunks
    if (a.epi.residual) ok = ok && aligned16(a.epi.residual) && a.epi.ldr % 8 == 0 && a.epi.sr % 8 == 0;
    if (a.K2 > 0) {  // the second pair, laid out as the first
        const int64_t lead_a2 = a.ta ? a.M : a.K2, lead_b2 = a.tb ? a.K2 : a.N;
        ok = ok && lead_a2 % 8 == 0 && lead_b2 % 8 == 0 && a.lda2 % 8 == 0 && a.ldb2 % 8 == 0 && a.sA2 % 8 == 0 &&
             a.sB2 % 8 == 0 && aligned16(a.A2) && aligned16(a.B2);
    }
    return ok;
}

// A second pair (K2 > 0) that the TMA kernel does not take runs as two products: C = alpha A B
// (+ bias + residual), then C = alpha A2 B2 + C.
inline GemmArgs first_of_pair(const GemmArgs& a) {
    GemmArgs f = a;
    f.A2 = f.B2 = nullptr;
    f.K2 = f.lda2 = f.ldb2 = f.sA2 = f.sB2 = 0;
    return f;
}
inline GemmArgs second_of_pair(const GemmArgs& a) {
    GemmArgs t = first_of_pair(a);
    t.A = a.A2, t.lda = a.lda2, t.sA = a.sA2;
    t.B = a.B2, t.ldb = a.ldb2, t.sB = a.sB2;
    t.K = a.K2;
    t.epi.bias = nullptr;
    t.epi.residual = a.C, t.epi.ldr = a.ldc, t.epi.sr = a.sC;
    return t;
}
// Whether the TMA kernel takes the pair in one launch (the same answer for the workspace and gemm()).
inline bool pair_in_one(const GemmArgs& a) {
    return a.K2 > 0 && a.dtype != DType::f32 && vec_ok(a) && is_tma(plan_gemm(a, true).kernel);
}

// Workspace (bytes) gemm() may use for this problem (split-K partials). Pointers may be unset:
// a runtime sizes its workspace before any exist.
inline size_t gemm_workspace_bytes(const GemmArgs& a) {
    if (a.M == 0 || a.N == 0 || a.batch == 0) return 0;
    if (a.K2 > 0) {
        if (pair_in_one(a)) return 0;
        const size_t w1 = gemm_workspace_bytes(first_of_pair(a)), w2 = gemm_workspace_bytes(second_of_pair(a));
        return w1 > w2 ? w1 : w2;
    }
    GemmPlan pl = plan_gemm(a, a.dtype != DType::f32 && vec_ok(a));
    return pl.splits > 1 ? size_t(pl.splits) * size_t(a.batch * a.M * a.N) * sizeof(float) : 0;
}

template <class T, class Cfg, bool VEC>
void launch_mma_layout(const GemmArgs& a, int splits, float* partial, cudaStream_t s) {
    if (!a.ta && !a.tb) launch_mma<T, Cfg, false, false, VEC>(a, splits, partial, s);
    else if (!a.ta && a.tb) launch_mma<T, Cfg, false, true, VEC>(a, splits, partial, s);
    else if (a.ta && !a.tb) launch_mma<T, Cfg, true, false, VEC>(a, splits, partial, s);
    else launch_mma<T, Cfg, true, true, VEC>(a, splits, partial, s);
}

// gemm's tb (B stored N x K) is the wgmma kernel's K-major B; !tb is its N-major B.
template <class T, int BN, int STAGES>
void launch_wgmma_layout(const GemmArgs& a, int splits, float* partial, cudaStream_t s) {
    if (a.tb) {
        if (!a.ta) launch_wgmma<T, BN, STAGES, false, false>(a, splits, partial, s);
        else launch_wgmma<T, BN, STAGES, true, false>(a, splits, partial, s);
        return;
    }
    if constexpr (BN % 64 == 0) {
        if (!a.ta) launch_wgmma<T, BN, STAGES, false, true>(a, splits, partial, s);
        else launch_wgmma<T, BN, STAGES, true, true>(a, splits, partial, s);
    } else {
        fail("gemm: wgmma tile N = ", BN, " cannot take an N-major B");
    }
}

// A quantized B: A row-major, B either way.
template <class T, class Cfg, bool VEC>
void launch_mma_quant(const GemmArgs& a, int splits, float* partial, cudaStream_t s) {
    if (a.tb) launch_mma<T, Cfg, false, true, VEC, true>(a, splits, partial, s);
    else launch_mma<T, Cfg, false, false, VEC, true>(a, splits, partial, s);
}

template <class T>
void launch_tc(GemmKernel k, bool vec, const GemmArgs& a, int splits, float* partial, cudaStream_t s) {
    if (a.b_quant) {
        if (!vec) return launch_mma_quant<T, CfgSmall, false>(a, splits, partial, s);
        if (k == GemmKernel::mma_k64) return launch_mma_quant<T, CfgK64, true>(a, splits, partial, s);
        return launch_mma_quant<T, CfgSmall, true>(a, splits, partial, s);
    }
    if (!vec) return launch_mma_layout<T, CfgSmall, false>(a, splits, partial, s);
    switch (k) {
        case GemmKernel::wg128: return launch_wgmma_layout<T, 128, kWg128Stages>(a, splits, partial, s);
        case GemmKernel::wg160: return launch_wgmma_layout<T, 160, kWg160Stages>(a, splits, partial, s);
        case GemmKernel::wg64: return launch_wgmma_layout<T, 64, kWg64Stages>(a, splits, partial, s);
        case GemmKernel::tma128: return launch_tma_layout<T, 128, kTma128Stages>(a, s);
        case GemmKernel::tma160: return launch_tma_layout<T, 160, kTma160Stages>(a, s);
        case GemmKernel::tma64: return launch_tma_layout<T, 64, kTma64Stages>(a, s);
        case GemmKernel::tma256: return launch_tma_layout<T, 256, kTma256Stages>(a, s);
        case GemmKernel::skinny: return launch_skinny<T>(a, splits, partial, s);
        case GemmKernel::rows: return launch_rows<T>(a, s);
        case GemmKernel::mma_wide: return launch_mma_layout<T, CfgWide, true>(a, splits, partial, s);
        case GemmKernel::mma_k64: return launch_mma_layout<T, CfgK64, true>(a, splits, partial, s);
        case GemmKernel::mma_w4: return launch_mma_layout<T, CfgW4, true>(a, splits, partial, s);
        default: return launch_mma_layout<T, CfgSmall, true>(a, splits, partial, s);
    }
}

inline cublasHandle_t cublas_handle() {
    static thread_local cublasHandle_t h[64] = {};
    int dev = 0;
    GL_CUDA_CHECK(cudaGetDevice(&dev));
    GL_CHECK(dev < 64, "gemm: device index ", dev, " out of range");
    if (!h[dev]) GL_CHECK(cublasCreate(&h[dev]) == CUBLAS_STATUS_SUCCESS, "gemm: cublasCreate failed");
    return h[dev];
}

// Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T, so B goes first. A residual
// is cuBLAS's beta * C (C holding it first), so it is added before C's one rounding and may be C;
// a bias follows in a second pass.
inline void launch_cublas(const GemmArgs& a, cudaStream_t s) {
    cublasHandle_t h = cublas_handle();
    GL_CHECK(cublasSetStream(h, s) == CUBLAS_STATUS_SUCCESS, "gemm: cublasSetStream failed");
    cudaDataType_t ty = a.dtype == DType::f32 ? CUDA_R_32F : a.dtype == DType::bf16 ? CUDA_R_16BF : CUDA_R_16F;
    const int64_t total = a.batch * a.M * a.N;
    const bool residual_is_c = a.epi.residual == a.C && a.epi.ldr == a.ldc && a.epi.sr == a.sC;
    if (a.epi.residual && !residual_is_c) {
        visit_float(a.dtype, [&](auto tag) {
            using T = decltype(tag);
            copy_residual_kernel<T><<<grid_for(total, 256, 65535LL * 8), 256, 0, s>>>(
                static_cast<T*>(a.C), int(a.batch), int(a.M), int(a.N), a.ldc, a.sC, a.epi);
        });
        GL_CUDA_LAUNCHED();
    }
    const float alpha = a.epi.alpha, beta = a.epi.residual ? 1.0f : 0.0f;
    // K = 0 stores A or B with a leading dim of 0, which cuBLAS refuses (it wants at least 1).
    cublasStatus_t st = cublasGemmStridedBatchedEx(
        h, a.tb ? CUBLAS_OP_T : CUBLAS_OP_N, a.ta ? CUBLAS_OP_T : CUBLAS_OP_N, int(a.N), int(a.M), int(a.K), &alpha,
        a.B, ty, int(std::max<int64_t>(1, a.ldb)), a.sB, a.A, ty, int(std::max<int64_t>(1, a.lda)), a.sA, &beta, a.C, ty,
        int(a.ldc), a.sC, int(a.batch),
        CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    GL_CHECK(st == CUBLAS_STATUS_SUCCESS, "gemm: cublasGemmStridedBatchedEx failed (status ", int(st), ")");
    if (a.epi.bias) {
        Epilogue bias_only = a.epi;
        bias_only.residual = nullptr;
        visit_float(a.dtype, [&](auto tag) {
            using T = decltype(tag);
            cublas_epilogue_kernel<T><<<grid_for(total, 256, 65535LL * 8), 256, 0, s>>>(
                static_cast<T*>(a.C), int(a.batch), int(a.M), int(a.N), a.ldc, a.sC, bias_only);
        });
        GL_CUDA_LAUNCHED();
    }
}

// The entry point. ws: scratch of at least gemm_workspace_bytes() for split-K (with less, or
// none, the split is dropped). No allocation, no host synchronisation (cuBLAS: its handle is
// created on the first call).
inline void gemm(const GemmArgs& a, void* ws, size_t ws_bytes, cudaStream_t s) {
    GL_CHECK(a.dtype == DType::f32 || a.dtype == DType::bf16 || a.dtype == DType::f16,
             "gemm: unsupported dtype");
    GL_CHECK(a.M < (int64_t(1) << 31) && a.N < (int64_t(1) << 31) && a.K < (int64_t(1) << 31),
             "gemm: dims must be < 2^31");
    GL_CHECK(!a.b_quant || (a.b_scale && (a.b_codes == DType::i8 || a.b_codes == DType::f8e4m3) && !a.ta && a.sB == 0),
             "gemm: a quantized B needs its scales, i8 or f8e4m3 codes, a row-major A and one B for every batch");
    GL_CHECK(a.b_quant || !a.b_scale, "gemm: row scales for a B that is not quantized");
    if (a.M == 0 || a.N == 0 || a.batch == 0) return;
    if (a.K2 > 0 && !pair_in_one(a)) {
        gemm(first_of_pair(a), ws, ws_bytes, s);
        gemm(second_of_pair(a), ws, ws_bytes, s);
        return;
    }
    const bool vec = a.dtype != DType::f32 && vec_ok(a);
    GemmPlan pl = plan_gemm(a, vec);
    if (pl.kernel == GemmKernel::cublas) return launch_cublas(a, s);
    if (pl.kernel == GemmKernel::ffma_f32) return launch_ffma(a, s);
    const size_t part_bytes = size_t(pl.splits) * size_t(a.batch * a.M * a.N) * sizeof(float);
    if (pl.kernel == GemmKernel::skinny && (!ws || ws_bytes < part_bytes)) pl = plan_gemm(a, vec, false);
    if (pl.splits > 1 && (!ws || ws_bytes < size_t(pl.splits) * size_t(a.batch * a.M * a.N) * sizeof(float)))
        pl.splits = 1;
    float* part = static_cast<float*>(ws);
    if (a.dtype == DType::bf16) launch_tc<__nv_bfloat16>(pl.kernel, vec, a, pl.splits, part, s);
    else launch_tc<__half>(pl.kernel, vec, a, pl.splits, part, s);
}

}  // namespace gl::gemm
