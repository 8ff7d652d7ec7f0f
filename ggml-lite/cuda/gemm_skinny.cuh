// Tall-skinny weight-gradient products for gemm(): C (M x N) = alpha A^T B (+ bias, + residual) with
// A stored K x M (ta), B stored K x N (!tb), min(M, N) <= 16 and a long K: LoRA's dA = dh^T x and
// dB = du^T h, reduced over batch x tokens rows. The generic kernels give such a product 3 or so
// 128-wide output tiles and split K 32 ways at most, so most of a tile's MMA is padding and the GPU
// is a quarter full; here the narrow side S (A when M <= 16, else B) is the m16 operand of
// mma.sync.m16n8k16 and the wide side W is n.
//   Grid (ceil(w / 128) column blocks, splits). A CTA of 8 warps takes the rows [k0, k0 + chunk) of
//   its split in 64-row stages (cp.async, 3 deep; past K and past the matrices' edges zero-filled);
//   warp i owns the column block's columns 16 i .. 16 i + 15 (two n8 tiles), its A fragment is S^T
//   (ldmatrix .trans of the [k][s] tile), its B fragments the [k][w] tile (.trans).
//   The CTA writes its f32 partial P (s x w, P = S^T W) to the workspace [splits][s][w];
//   skinny_reduce sums the splits in a fixed order (deterministic), applies the epilogue and writes C = P,
//   or C = P^T when S is B.
// Needs the 16-byte path (vec_ok), batch 1, bf16 / f16, and a workspace for the partials
// (skinny_plan's splits x M x N floats, as gemm_workspace_bytes counts split-K).
#pragma once
#include "ggml-lite/cuda/gemm_args.cuh"
#include "ggml-lite/cuda/gemm_kernels.cuh"

namespace gl::gemm {

struct SkinnyCfg {
    static constexpr int kRows = 64, kCols = 128, kStages = 3, kThreads = 256;
    static constexpr int kSds = 16 + 8, kSdw = kCols + 8;  // smem row pitches (elements): ldmatrix without conflicts
    static constexpr int kStageElems = kRows * (kSds + kSdw);
    static constexpr int kSmemBytes = kStages * kStageElems * 2;
};

// ldmatrix lane addresses (elements) for tiles with rows SD apart: the A operand (16 x k16) of a tile
// stored [k][m] (.trans), and the B operand (k16 x two n8 tiles) of a tile stored [k][n] (.trans).
template <int SD> __device__ __forceinline__ int skinny_a_off(int lane) {
    return (((lane >> 4) & 1) * 8 + (lane & 7)) * SD + ((lane >> 3) & 1) * 8;
}
template <int SD> __device__ __forceinline__ int skinny_b_off(int lane) {
    return (((lane >> 3) & 1) * 8 + (lane & 7)) * SD + (lane >> 4) * 8;
}

struct SkinnyParams {
    const void* S;  // narrow operand, K x s (row pitch lds)
    const void* W;  // wide operand, K x w (row pitch ldw)
    int64_t lds, ldw;
    int s, w, K, chunk;  // chunk: rows per split, a multiple of 64
    float* part;         // [splits][s][w]
};

template <class T>
__global__ void __launch_bounds__(SkinnyCfg::kThreads) skinny_kernel(SkinnyParams p) {
    kernel_entry();
    using C = SkinnyCfg;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    T* sm = reinterpret_cast<T*>(smem_raw);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int c0 = blockIdx.x * C::kCols, split = blockIdx.y;
    const int k0 = split * p.chunk, k1 = min(p.K, k0 + p.chunk);
    const int nst = (k1 - k0 + C::kRows - 1) / C::kRows;
    const T* S = static_cast<const T*>(p.S);
    const T* W = static_cast<const T*>(p.W);

    auto load = [&](int st, int buf) {
        T* sS = sm + buf * C::kStageElems;
        T* sW = sS + C::kRows * C::kSds;
        const int r0 = k0 + st * C::kRows;
        if (tid < C::kRows * 2) {  // S: 64 rows x 2 chunks of 8
            const int r = tid >> 1, c = (tid & 1) * 8;
            const bool ok = r0 + r < k1 && c < p.s;
            cp_async<16>(sS + r * C::kSds + c, ok ? S + int64_t(r0 + r) * p.lds + c : S, ok);
        }
#pragma unroll
        for (int i = 0; i < C::kRows * (C::kCols / 8) / C::kThreads; i++) {  // W: 64 rows x 16 chunks
            const int idx = tid + i * C::kThreads, r = idx >> 4, c = (idx & 15) * 8;
            const bool ok = r0 + r < k1 && c0 + c < p.w;
            cp_async<16>(sW + r * C::kSdw + c, ok ? W + int64_t(r0 + r) * p.ldw + c0 + c : W, ok);
        }
    };

    float acc[2][4] = {};
#pragma unroll
    for (int st = 0; st < C::kStages - 1; st++) {
        if (st < nst) load(st, st);
        cp_async_commit();
    }
    for (int st = 0; st < nst; st++) {
        cp_async_wait<C::kStages - 2>();
        __syncthreads();  // stage st is in; every warp is past stage st - 1, whose buffer is refilled below
        if (st + C::kStages - 1 < nst) load(st + C::kStages - 1, (st + C::kStages - 1) % C::kStages);
        cp_async_commit();
        const T* sS = sm + (st % C::kStages) * C::kStageElems;
        const T* sW = sS + C::kRows * C::kSds;
#pragma unroll
        for (int kk = 0; kk < C::kRows / 16; kk++) {
            uint32_t a[4], b[4];
            ldsm_x4_t(a, sS + kk * 16 * C::kSds + skinny_a_off<C::kSds>(lane));  // S^T from its [k][s] tile
            ldsm_x4_t(b, sW + kk * 16 * C::kSdw + warp * 16 + skinny_b_off<C::kSdw>(lane));
            mma16816<T>(acc[0], a, b[0], b[1]);
            mma16816<T>(acc[1], a, b[2], b[3]);
        }
    }
    cp_async_wait<0>();
    float* part = p.part + int64_t(split) * p.s * p.w;
#pragma unroll
    for (int j = 0; j < 2; j++)
#pragma unroll
        for (int r = 0; r < 2; r++) {
            const int m = (lane >> 2) + 8 * r, n = c0 + warp * 16 + j * 8 + (lane & 3) * 2;
            if (m < p.s && n < p.w)
                *reinterpret_cast<float2*>(part + int64_t(m) * p.w + n) = make_float2(acc[j][2 * r], acc[j][2 * r + 1]);
        }
}

// C[i][j] = epilogue(sum over splits of P[i][j]) (S is A), or of P[j][i] (S is B). A block takes 32
// adjacent partial elements (coalesced reads) with 8 rows of threads: row y sums the splits y, y + 8,
// ... in order, then the 8 row sums are added in row order (deterministic, and 8 times the loads in
// flight of one thread per element: a split count near 90 made that a chain of L2 latencies).
constexpr int kSkinnyReduceRows = 8;
template <class T>
__global__ void __launch_bounds__(32 * kSkinnyReduceRows) skinny_reduce(const float* __restrict__ part, int splits,
                                                                       int M, int N, int w, bool s_is_a, T* C,
                                                                       int64_t ldc, Epilogue epi) {
    kernel_entry();
    __shared__ float rows[kSkinnyReduceRows][32];
    const int64_t n = int64_t(M) * N;  // s x w == M x N
    const int64_t at = int64_t(blockIdx.x) * 32 + threadIdx.x;
    float v = 0.f;
    if (at < n) {
#pragma unroll 4
        for (int z = int(threadIdx.y); z < splits; z += kSkinnyReduceRows) v += part[z * n + at];
    }
    rows[threadIdx.y][threadIdx.x] = v;
    __syncthreads();
    if (threadIdx.y != 0 || at >= n) return;
    float t = 0.f;
#pragma unroll
    for (int y = 0; y < kSkinnyReduceRows; y++) t += rows[y][threadIdx.x];
    const int si = int(at / w), wi = int(at % w);
    const int i = s_is_a ? si : wi, j = s_is_a ? wi : si;
    C[int64_t(i) * ldc + j] = from_f32<T>(apply_epilogue<T>(epi, t, 0, i, j));
}

// Whether the skinny kernel takes the problem and with how many splits (0: it does not).
inline int skinny_splits(const GemmArgs& a, bool vec, int sms) {
    if (!vec || a.b_quant || a.batch != 1 || !a.ta || a.tb || a.K2 > 0 || a.dtype == DType::f32) return 0;
    const int64_t s = a.M <= 16 ? a.M : a.N, w = a.M <= 16 ? a.N : a.M;
    if (s > 16 || a.K < 2048 || s % 8 != 0 || w % 8 != 0) return 0;
    if (s * w > int64_t(INT32_MAX) * 32) return 0;  // skinny_reduce's grid: 32 outputs a block
    const int64_t cols = ceil_div(w, int64_t(SkinnyCfg::kCols));
    int64_t splits = ceil_div(int64_t(2) * sms, cols);  // about two CTAs per SM
    int64_t chunk = ceil_div(ceil_div(a.K, splits), int64_t(SkinnyCfg::kRows)) * SkinnyCfg::kRows;
    chunk = chunk < 256 ? 256 : chunk;  // at least 4 stages per CTA
    splits = ceil_div(a.K, chunk);
    return int(splits);
}

template <class T>
void launch_skinny(const GemmArgs& a, int splits, float* part, cudaStream_t st) {
    SkinnyParams p{};
    const bool s_is_a = a.M <= 16;
    p.S = s_is_a ? a.A : a.B;
    p.W = s_is_a ? a.B : a.A;
    p.lds = s_is_a ? a.lda : a.ldb;
    p.ldw = s_is_a ? a.ldb : a.lda;
    p.s = int(s_is_a ? a.M : a.N);
    p.w = int(s_is_a ? a.N : a.M);
    p.K = int(a.K);
    p.chunk = int(ceil_div(ceil_div(a.K, int64_t(splits)), int64_t(SkinnyCfg::kRows)) * SkinnyCfg::kRows);
    p.part = part;
    const int used = int(ceil_div(a.K, int64_t(p.chunk)));  // the same as splits for skinny_splits' answer
    static thread_local uint64_t smem_set = 0;
    allow_smem(reinterpret_cast<const void*>(skinny_kernel<T>), SkinnyCfg::kSmemBytes, smem_set);
    skinny_kernel<T><<<dim3(unsigned(ceil_div(int64_t(p.w), int64_t(SkinnyCfg::kCols))), unsigned(used)), SkinnyCfg::kThreads,
                       SkinnyCfg::kSmemBytes, st>>>(p);
    GL_CUDA_LAUNCHED();
    skinny_reduce<T><<<unsigned(ceil_div(a.M * a.N, int64_t(32))), dim3(32, kSkinnyReduceRows), 0, st>>>(
        part, used, int(a.M), int(a.N), p.w, s_is_a, static_cast<T*>(a.C), a.ldc, a.epi);
    GL_CUDA_LAUNCHED();
}

}  // namespace gl::gemm
