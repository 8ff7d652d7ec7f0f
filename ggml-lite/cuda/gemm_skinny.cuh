// GEMM with a short K (a LoRA's rank: the up projection h B^T and the input gradient dh A), where
// the product is cheap and the output's traffic (C, and the residual the fusion pass folds in) is
// the whole cost. The tensor-core kernels spend most of such a call in one padded k-tile and an
// epilogue staged through shared memory; this one streams C instead:
//   B (K x N, either layout) is staged once per block into shared memory as [K][N] rows; each thread
//   makes a 2 x 8 block of C (2 rows, 8 consecutive columns) with fp32 FMAs in k order from its rows
//   of A (16-byte loads) and B's 16-byte chunks, then applies the epilogue (alpha, bias, residual:
//   one 16-byte load a row, read before C, which it may be) and stores 16 bytes a row. A warp's 32
//   threads take consecutive column chunks, so its stores are contiguous.
// Taken by plan_gemm for bf16 / f16 with the 16-byte alignment (vec_ok), A row-major, K <= kSkinnyK
// and K % 8 == 0, N % 8 == 0, B fitting the shared memory; results are deterministic (one thread, one
// fixed order per output).
#pragma once
#include "ggml-lite/cuda/gemm_kernels.cuh"

namespace gl::gemm {

constexpr int kSkinnyK = 32, kSkinnyRows = 2;

// Whether the skinny-K kernel takes this problem (shape only; alignment is vec_ok's).
inline bool skinny_k_ok(const GemmArgs& a, int smem_optin) {
    const int64_t elem = a.dtype == DType::f32 ? 4 : 2;
    return a.dtype != DType::f32 && !a.b_quant && !a.ta && a.K > 0 && a.K <= kSkinnyK && a.K % 8 == 0 &&
           a.N % 8 == 0 && a.K * a.N * elem <= smem_optin && ceil_div(a.M, kSkinnyRows) * (a.N / 8) < (int64_t(1) << 31);
}

template <class T, bool TB>
__global__ void __launch_bounds__(256, 4) skinny_k_kernel(MmaParams p) {
    extern __shared__ __align__(16) unsigned char skinny_smem[];
    T* sB = reinterpret_cast<T*>(skinny_smem);  // [K][N]
    const int K = p.K, N = p.N, N8 = N / 8;
    const int64_t bz = int64_t(blockIdx.y) + p.batch0;
    const T* B = static_cast<const T*>(p.B) + bz * p.sB;
    if constexpr (TB) {  // B stored [N][K]: 16-byte chunks of a row, transposed into sB's columns
        const int K8 = K / 8;
        for (int i = threadIdx.x; i < N * K8; i += blockDim.x) {
            const int n = i / K8, k0 = (i - n * K8) * 8;
            alignas(16) T c8[8];
            copy16(c8, B + int64_t(n) * p.ldb + k0);
#pragma unroll
            for (int e = 0; e < 8; e++) sB[(k0 + e) * N + n] = c8[e];
        }
    } else {  // [K][N] rows: 16-byte chunks
        for (int i = threadIdx.x; i < K * N8; i += blockDim.x) {
            const int k = i / N8, c = i - k * N8;
            copy16(sB + k * N + c * 8, B + int64_t(k) * p.ldb + c * 8);
        }
    }
    __syncthreads();
    const T* A = static_cast<const T*>(p.A) + bz * p.sA;
    T* C = static_cast<T*>(p.C) + bz * p.sC;
    const T* R = p.epi.residual ? static_cast<const T*>(p.epi.residual) + bz * p.epi.sr : nullptr;
    const T* bias = static_cast<const T*>(p.epi.bias);
    const int items = int(ceil_div(int64_t(p.M), kSkinnyRows)) * N8;
    for (int it = blockIdx.x * blockDim.x + threadIdx.x; it < items; it += gridDim.x * blockDim.x) {
        const int mq = it / N8, n0 = (it - mq * N8) * 8, m0 = mq * kSkinnyRows;
        float acc[kSkinnyRows][8];
#pragma unroll
        for (int r = 0; r < kSkinnyRows; r++)
#pragma unroll
            for (int e = 0; e < 8; e++) acc[r][e] = 0.0f;
        for (int k0 = 0; k0 < K; k0 += 8) {
            alignas(16) T a8[kSkinnyRows][8];
#pragma unroll
            for (int r = 0; r < kSkinnyRows; r++) {
                if (m0 + r < p.M) copy16(a8[r], A + int64_t(m0 + r) * p.lda + k0);
                else *reinterpret_cast<uint4*>(a8[r]) = make_uint4(0u, 0u, 0u, 0u);
            }
#pragma unroll
            for (int kk = 0; kk < 8; kk++) {
                alignas(16) T b8[8];
                copy16(b8, sB + (k0 + kk) * N + n0);
                float bf[8];
#pragma unroll
                for (int e = 0; e < 8; e++) bf[e] = to_f32(b8[e]);
#pragma unroll
                for (int r = 0; r < kSkinnyRows; r++) {
                    const float av = to_f32(a8[r][kk]);
#pragma unroll
                    for (int e = 0; e < 8; e++) acc[r][e] = fmaf(av, bf[e], acc[r][e]);
                }
            }
        }
        float bv[8];
#pragma unroll
        for (int e = 0; e < 8; e++) bv[e] = bias ? to_f32(bias[n0 + e]) : 0.0f;
#pragma unroll
        for (int r = 0; r < kSkinnyRows; r++) {
            const int m = m0 + r;
            if (m >= p.M) break;
            alignas(16) T rr[8];
            if (R) copy16(rr, R + int64_t(m) * p.epi.ldr + n0);
            alignas(16) T o[8];
#pragma unroll
            for (int e = 0; e < 8; e++) {  // apply_epilogue's order: alpha, bias, residual
                float x = acc[r][e] * p.epi.alpha;
                if (bias) x += bv[e];
                if (R) x += to_f32(rr[e]);
                o[e] = from_f32<T>(x);
            }
            copy16(C + int64_t(m) * p.ldc + n0, o);
        }
    }
}

template <class T>
void launch_skinny_k(const GemmArgs& a, cudaStream_t s) {
    MmaParams p = params_of(a);
    const int smem = int(a.K * a.N * int64_t(sizeof(T)));
    // The limit is raised once to what any call may ask (skinny_k_ok: B within the opt-in).
    static thread_local uint64_t set_tb = 0, set_nt = 0;
    const int optin = device_info().smem_optin;
    if (a.tb) allow_smem(reinterpret_cast<const void*>(skinny_k_kernel<T, true>), optin, set_tb);
    else allow_smem(reinterpret_cast<const void*>(skinny_k_kernel<T, false>), optin, set_nt);
    // Enough blocks for a few waves, each staging B once and looping over its items.
    const int64_t items = ceil_div(a.M, kSkinnyRows) * (a.N / 8);
    // Resident blocks per SM for this B's shared memory (a host query, no stream operation).
    int per_sm = 0;
    const void* kern = a.tb ? reinterpret_cast<const void*>(skinny_k_kernel<T, true>)
                            : reinterpret_cast<const void*>(skinny_k_kernel<T, false>);
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kern, 256, smem) != cudaSuccess || per_sm < 1) per_sm = 1;
    cudaGetLastError();
    const unsigned blocks = unsigned(std::max<int64_t>(1, std::min<int64_t>(ceil_div(items, 256), int64_t(sm_count()) * per_sm)));
    for (int64_t b0 = 0; b0 < a.batch; b0 += 65535) {
        p.batch0 = int(b0);
        const dim3 grid(blocks, unsigned(a.batch - b0 < 65535 ? a.batch - b0 : 65535));
        if (a.tb) skinny_k_kernel<T, true><<<grid, 256, smem, s>>>(p);
        else skinny_k_kernel<T, false><<<grid, 256, smem, s>>>(p);
        GL_CUDA_LAUNCHED();
    }
}

}  // namespace gl::gemm
