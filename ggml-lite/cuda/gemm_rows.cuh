// Few-row products for gemm(): C (M x N) = alpha A B^T (+ bias, + residual) with A stored M x K
// row-major, B stored N x K (tb: a linear layer's weight) and M <= 16: a linear layer on a handful
// of rows, as the time-embedding projections of a UNet call (M = the batch: 2 in txt2img's CFG
// batch, 8 in a batch-8 step). The tiled kernels give such a product one 128-row tile per 64 to 160
// columns (at most 1/8 of its MMA useful) on a few dozen SMs and split K, which measured 14 us for a
// 1280 x 1280 weight; the product is bound by reading B once (3.3 MB: ~1 us at the H200's bandwidth).
//   Grid (ceil(N / (kWarps NC)), batch). Warp w of a block owns the NC (kColsOf<M>) columns from
//   n0 = (blockIdx.x kWarps + w) NC; lane l takes K's 8-element chunks l, l + 32, ... of those
//   rows of B (16-byte loads, kUnroll chunks of each row in flight) against the same chunks of
//   A's M rows (read through the read-only cache: every warp of the GPU reads them), with fp32
//   FMAs, then the warp sums its lanes in a fixed butterfly (every lane ends with the same,
//   deterministic sum) and lane m NC + c writes C[m][n0 + c] through the epilogue.
// Needs the 16-byte path (vec_ok: K a multiple of 8, aligned rows), bf16 / f16, B not quantized and
// no second pair; any batch (sB = 0 shares B).
#pragma once
#include "ggml-lite/cuda/gemm_args.cuh"
#include "ggml-lite/cuda/gemm_kernels.cuh"

namespace gl::gemm {

struct RowsCfg {
    static constexpr int kWarps = 4, kThreads = kWarps * 32, kMaxM = 16, kUnroll = 8;
    static constexpr int kChunk = 8;  // elements per 16-byte load
    // columns a warp owns: two share each A load for a few rows; from 8 rows one, for twice the warps
    template <int MM> static constexpr int kColsOf = MM >= 8 ? 1 : 2;
};

inline bool rows_ok(const GemmArgs& a, bool vec) {
    return vec && !a.ta && a.tb && a.M <= RowsCfg::kMaxM && !a.b_quant && a.K2 == 0 && a.dtype != DType::f32;
}

// Eight elements of a 16-byte chunk as floats.
template <class T>
__device__ __forceinline__ void unpack8(const uint4& v, float (&f)[8]) {
    const T* e = reinterpret_cast<const T*>(&v);
#pragma unroll
    for (int i = 0; i < 8; i++) f[i] = to_f32(e[i]);
}

template <class T, int MM>
__global__ void __launch_bounds__(RowsCfg::kThreads) rows_kernel(GemmArgs a) {
    kernel_entry();
    using R = RowsCfg;
    constexpr int NC = R::template kColsOf<MM>, U = R::kUnroll, STEP = 32 * R::kChunk;
    static_assert(MM * NC <= 32, "one lane writes each of a warp's sums");
    const int lane = int(threadIdx.x) & 31, warp = int(threadIdx.x) >> 5;
    const int64_t n0 = (int64_t(blockIdx.x) * R::kWarps + warp) * NC, bz = blockIdx.y;
    if (n0 >= a.N) return;  // no block-wide synchronisation follows
    const T* A = static_cast<const T*>(a.A) + bz * a.sA;
    const T* B = static_cast<const T*>(a.B) + bz * a.sB;
    const int M = int(a.M);
    const int64_t K = a.K;
    const uint4 zero = make_uint4(0, 0, 0, 0);
    float acc[MM][NC] = {};
    for (int64_t k0 = int64_t(lane) * R::kChunk; k0 < K; k0 += int64_t(U) * STEP) {
        uint4 bv[U][NC];
#pragma unroll
        for (int u = 0; u < U; u++)
#pragma unroll
            for (int c = 0; c < NC; c++) {
                const int64_t k = k0 + int64_t(u) * STEP;
                bv[u][c] = k < K && n0 + c < a.N ? __ldg(reinterpret_cast<const uint4*>(B + (n0 + c) * a.ldb + k)) : zero;
            }
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int64_t k = k0 + int64_t(u) * STEP;
            if (k >= K) break;
            float bf[NC][8];
#pragma unroll
            for (int c = 0; c < NC; c++) unpack8<T>(bv[u][c], bf[c]);
#pragma unroll
            for (int m = 0; m < MM; m++) {
                if (m >= M) break;
                float af[8];
                unpack8<T>(__ldg(reinterpret_cast<const uint4*>(A + m * a.lda + k)), af);
#pragma unroll
                for (int c = 0; c < NC; c++)
#pragma unroll
                    for (int e = 0; e < 8; e++) acc[m][c] = fmaf(af[e], bf[c][e], acc[m][c]);
            }
        }
    }
    T* C = static_cast<T*>(a.C) + bz * a.sC;
#pragma unroll
    for (int m = 0; m < MM; m++)
#pragma unroll
        for (int c = 0; c < NC; c++) {
            float v = acc[m][c];
#pragma unroll
            for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
            if (lane == m * NC + c && m < M && n0 + c < a.N)
                C[m * a.ldc + n0 + c] = from_f32<T>(apply_epilogue<T>(a.epi, v, bz, m, n0 + c));
        }
}

template <class T, int MM>
void launch_rows_mm(const GemmArgs& a, cudaStream_t s) {
    using R = RowsCfg;
    const int64_t cols_per_block = int64_t(R::kWarps) * R::template kColsOf<MM>;
    GL_CHECK(a.batch <= 65535, "gemm: few-row batch ", a.batch, " over the grid's limit");
    const dim3 grid(unsigned(ceil_div(a.N, cols_per_block)), unsigned(a.batch));
    rows_kernel<T, MM><<<grid, R::kThreads, 0, s>>>(a);
    GL_CUDA_LAUNCHED();
}

template <class T>
void launch_rows(const GemmArgs& a, cudaStream_t s) {
    if (a.M <= 1) launch_rows_mm<T, 1>(a, s);
    else if (a.M <= 2) launch_rows_mm<T, 2>(a, s);
    else if (a.M <= 4) launch_rows_mm<T, 4>(a, s);
    else if (a.M <= 8) launch_rows_mm<T, 8>(a, s);
    else launch_rows_mm<T, 16>(a, s);
}

}  // namespace gl::gemm
