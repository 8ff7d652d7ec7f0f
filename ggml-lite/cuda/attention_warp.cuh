// Warp-level building blocks of the tensor-core attention kernels (attention_mma.cuh), on top of
// the primitives (ldmatrix, mma.sync m16n8k16, cp.async): accumulator -> A-operand conversion,
// ldmatrix fragment addressing for tiles whose smem rows are SD = D + 8 elements apart
// (conflict-free without a swizzle), cp.async tile loads with zero fill, and the staged 16-byte
// row stores of the epilogues.
#pragma once
#include <cstdint>

#include "ggml-lite/cuda/primitives.cuh"

namespace gl::attn {

// The A operand of k-step kk from an m16 x n8 accumulator row (C layout -> A layout, rounded to T).
template <class T, int N>
__device__ __forceinline__ void acc_to_a(uint32_t (&a)[4], const float (&c)[N][4], int kk) {
    a[0] = pack2<T>(c[2 * kk][0], c[2 * kk][1]);
    a[1] = pack2<T>(c[2 * kk][2], c[2 * kk][3]);
    a[2] = pack2<T>(c[2 * kk + 1][0], c[2 * kk + 1][1]);
    a[3] = pack2<T>(c[2 * kk + 1][2], c[2 * kk + 1][3]);
}

// ldmatrix addresses (elements, relative to a tile with rows SD apart) for one lane:
// A operand (16 rows x k16, row-major): rows lane%16, k half lane/16.
template <int SD> __device__ __forceinline__ int a_off(int lane) { return (lane & 15) * SD + (lane >> 4) * 8; }
// B operand from an [n][k] tile (two n8 tiles x k16), non-transposed.
template <int SD> __device__ __forceinline__ int bn_off(int lane) { return ((lane >> 4) * 8 + (lane & 7)) * SD + ((lane >> 3) & 1) * 8; }
// B operand from a [k][n] tile (k16 x two n8 tiles), transposed.
template <int SD> __device__ __forceinline__ int bt_off(int lane) { return (((lane >> 3) & 1) * 8 + (lane & 7)) * SD + (lane >> 4) * 8; }

// c[2np + x] += A * B for the n16 block np, B fragments b = {b0, b1 of tile 2np, b0, b1 of 2np+1}.
template <class T, int N>
__device__ __forceinline__ void mma2(float (&c)[N][4], int np, const uint32_t (&a)[4], const uint32_t (&b)[4]) {
    mma16816<T>(c[2 * np], a, b[0], b[1]);
    mma16816<T>(c[2 * np + 1], a, b[2], b[3]);
}

// Rows [r0, r0 + R) of one head's [n, d] matrix (rows ld elements apart) -> smem rows of SD = D + 8
// elements; rows >= n and columns >= d are zero-filled.
template <class T, int R, int D, int NT>
__device__ __forceinline__ void load_tile(T* sm, const T* g, int r0, int n, int ld, int d, int tid) {
    constexpr int CH = D / 8, SD = D + 8, TOTAL = R * CH;
#pragma unroll
    for (int it = 0; it < ceil_div(TOTAL, NT); ++it) {
        const int idx = it * NT + tid;
        if (TOTAL % NT != 0 && idx >= TOTAL) break;
        const int r = idx / CH, c = idx % CH;
        const bool ok = r0 + r < n && c * 8 < d;
        cp_async<16>(sm + r * SD + c * 8, ok ? g + int64_t(r0 + r) * ld + c * 8 : g, ok);
    }
}
// Rows [r0, r0 + R) of an f32 [n] vector -> smem (zero past n).
template <int R, int NT>
__device__ __forceinline__ void load_vec(float* sm, const float* g, int r0, int n, int tid) {
    for (int r = tid; r < R; r += NT) cp_async<4>(sm + r, r0 + r < n ? g + r0 + r : g, r0 + r < n);
}
// A warp's rows (staged in smem, rows SD apart) -> global rows [g0, ...) < n, columns [c0, c0+CN) < d.
template <class T, int ROWS, int CN, int SD>
__device__ __forceinline__ void store_rows(T* g, const T* sm, int g0, int n, int ld, int c0, int d, int lane) {
    constexpr int CH = CN / 8;
    for (int idx = lane; idx < ROWS * CH; idx += 32) {
        const int r = idx / CH, c = c0 + (idx % CH) * 8;
        if (g0 + r < n && c < d)
            copy16(g + int64_t(g0 + r) * ld + c, sm + r * SD + c);
    }
}

}  // namespace gl::attn
