// Device primitives that every CUDA kernel builds on, defined once. Dependency-free: CUDA headers
// and core/dtype.h (for the DType enum) only, so bench/*_check.cu compile the kernels without the
// core library. The device functions are __forceinline__: a kernel compiles as if the helper
// were written in place.
//   element types  to_f32 / from_f32 (float, __nv_bfloat16, __half; round to nearest even),
//                  load_any (an element of a run-time float dtype), pack2 (two values rounded
//                  into one 32-bit register, low half first), visit_float (run-time DType ->
//                  device type), ex2 (the hardware 2^x)
//   8-bit codes    code_to_f32, dequant8: a quantized weight's i8 / f8e4m3 codes (core/quant.h)
//                  times their row scale, as the GEMM and conv loaders convert them
//   arithmetic     ceil_div
//   launch order   kernel_entry: the first statement of every kernel (programmatic dependent
//                  launch on sm_90: see below and cuda/runtime.cu)
//   memory         smem_u32, cp.async (cp_async, cp_async_commit, cp_async_wait), copy16, Vec8 (8
//                  elements moved as one 16- or 32-byte access)
//   tensor cores   ldmatrix x4 (ldsm_x4, transposed ldsm_x4_t) and mma.sync m16n8k16 with fp32
//                  accumulation (mma16816): sm_80 and later
//   reductions     warp_sum / warp_max over 32 lanes, quad_sum / quad_max over the 4 lanes that
//                  hold one row of an mma accumulator, block_sum / block_max over a block; every
//                  lane gets the result, and the order is fixed (deterministic)
// Host-side launch helpers (device facts, grid sizes, alignment) are in device.cuh; checked CUDA
// calls in check.cuh; what an op launcher sees in kernel.cuh.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "ggml-lite/core/dtype.h"

namespace gl {

// ---------------- element types ----------------

template <class T> __device__ __forceinline__ float to_f32(T x);
template <> __device__ __forceinline__ float to_f32<float>(float x) { return x; }
template <> __device__ __forceinline__ float to_f32<__nv_bfloat16>(__nv_bfloat16 x) { return __bfloat162float(x); }
template <> __device__ __forceinline__ float to_f32<__half>(__half x) { return __half2float(x); }

template <class T> __device__ __forceinline__ T from_f32(float x);
template <> __device__ __forceinline__ float from_f32<float>(float x) { return x; }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
template <> __device__ __forceinline__ __half from_f32<__half>(float x) { return __float2half_rn(x); }

// Element i of a float tensor of run-time dtype t (small side inputs such as gamma, mixed dtypes).
__device__ __forceinline__ float load_any(const void* p, DType t, int64_t i) {
    if (t == DType::f32) return static_cast<const float*>(p)[i];
    if (t == DType::bf16) return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    return __half2float(static_cast<const __half*>(p)[i]);
}

// lo and hi rounded to T and packed into one register (lo in the low 16 bits): an mma A fragment
// from an fp32 accumulator, or one 4-byte store of two neighbouring outputs.
template <class T> __device__ __forceinline__ uint32_t pack2(float lo, float hi);
template <> __device__ __forceinline__ uint32_t pack2<__nv_bfloat16>(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
}
template <> __device__ __forceinline__ uint32_t pack2<__half>(float lo, float hi) {
    __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t*>(&v);
}

// Calls f(T{}) with T the device type of float dtype t (float, __nv_bfloat16, __half); returns
// false, calling nothing, for the other dtypes.
template <class F>
bool visit_float(DType t, F&& f) {
    switch (t) {
        case DType::f32: f(float{}); return true;
        case DType::bf16: f(__nv_bfloat16{}); return true;
        case DType::f16: f(__half{}); return true;
        default: return false;
    }
}

// 2^x on the special-function unit (approximate, subnormals flushed to zero): softmax exponents
// with log2(e) folded into the scale.
__device__ __forceinline__ float ex2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

// ---------------- launch order ----------------

// The first statement of every kernel in ggml-lite/cuda (tests/test_cuda_sources.cpp checks it).
// On sm_90 a CUDA graph's edge between two of our kernels may be programmatic (cuda/runtime.cu):
// the second kernel is then launched before the first one has completed (once all its blocks
// have exited, or begun: the runtime's choice). griddepcontrol.wait holds each block until the
// kernel before it has completed and its writes are visible; nothing of the kernel runs before
// it, so reads after writes and writes after reads between the two are ordered as on a plain
// edge (and, by induction, with every kernel before). No kernel triggers its dependents early
// (griddepcontrol.launch_dependents right after the wait measured slower in the step and in
// txt2img: bench/RESULTS.md). Outside such an edge the wait returns at once; below sm_90 it is
// not compiled, and the runtime makes no edge programmatic for a kernel built so.
__device__ __forceinline__ void kernel_entry() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

// ---------------- 8-bit weight codes (core/quant.h) ----------------

// A code of dtype t (DType::i8 or DType::f8e4m3, PyTorch's float8_e4m3fn) as f32, exactly.
__device__ __forceinline__ float code_to_f32(uint8_t c, DType t) {
    if (t == DType::i8) return float(int8_t(c));
    return __half2float(__half(__nv_cvt_fp8_to_halfraw(__nv_fp8_storage_t(c), __NV_E4M3)));
}

// Eight codes (first code in the low byte) times scale, each rounded once to T, packed as the 16
// bytes a dense 8-element chunk would occupy in shared memory. t is uniform over a launch, so the
// branch costs nothing; e4m3 pairs convert in one instruction on sm_89 and later.
template <class T>
__device__ __forceinline__ uint4 dequant8(uint2 codes, float scale, DType t) {
    float v[8];
    if (t == DType::i8) {
#pragma unroll
        for (int e = 0; e < 4; e++) {
            v[e] = float(int8_t(codes.x >> (8 * e))) * scale;
            v[4 + e] = float(int8_t(codes.y >> (8 * e))) * scale;
        }
    } else {
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const uint32_t w = e < 2 ? codes.x : codes.y;
            const float2 f = __half22float2(
                __half2(__nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(w >> (16 * (e & 1))), __NV_E4M3)));
            v[2 * e] = f.x * scale;
            v[2 * e + 1] = f.y * scale;
        }
    }
    uint4 r;
    r.x = pack2<T>(v[0], v[1]);
    r.y = pack2<T>(v[2], v[3]);
    r.z = pack2<T>(v[4], v[5]);
    r.w = pack2<T>(v[6], v[7]);
    return r;
}

// ---------------- arithmetic ----------------

// a / b rounded up, for a >= 0 and b > 0, in the type a + b has (tile and block counts).
template <class A, class B>
__host__ __device__ constexpr auto ceil_div(A a, B b) {
    return (a + b - 1) / b;
}

// ---------------- memory ----------------

// Eight elements of T as one aligned access (16 bytes in a half dtype): the vector paths of the
// memory-bound kernels, which need 8-element-aligned rows.
template <class T>
struct alignas(8 * sizeof(T)) Vec8 {
    T v[8];
};
template <class T>
__host__ __device__ __forceinline__ bool vec8_aligned(const void* p) {
    return reinterpret_cast<uintptr_t>(p) % sizeof(Vec8<T>) == 0;
}

__device__ __forceinline__ uint32_t smem_u32(const void* p) { return uint32_t(__cvta_generic_to_shared(p)); }

// cp.async (sm_80+): global -> shared copies that complete in the background, in commit groups.
// Copies Bytes (4, 8 or 16) from gmem to smem; with src_bytes < Bytes the rest is zero-filled and
// nothing past src_bytes is read (src_bytes = 0: a zero fill that reads nothing). L1 = true keeps
// the line in L1 (.ca); 16-byte copies default to .cg (L2 only), smaller ones can only be .ca.
template <int Bytes, bool L1 = (Bytes < 16)>
__device__ __forceinline__ void cp_async(uint32_t smem, const void* gmem, int src_bytes = Bytes) {
    static_assert(Bytes == 4 || Bytes == 8 || Bytes == 16, "cp.async copies 4, 8 or 16 bytes");
    static_assert(L1 || Bytes == 16, "cp.async.cg copies 16 bytes only");
    if constexpr (L1)
        asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;\n" ::"r"(smem), "l"(gmem), "n"(Bytes),
                     "r"(src_bytes));
    else
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem), "l"(gmem), "r"(src_bytes));
}
template <int Bytes, bool L1 = (Bytes < 16)>
__device__ __forceinline__ void cp_async(void* smem, const void* gmem, bool valid) {
    cp_async<Bytes, L1>(smem_u32(smem), gmem, valid ? Bytes : 0);
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most N of this thread's most recent commit groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// One 16-byte load and store (both addresses 16-byte aligned; global or shared).
__device__ __forceinline__ void copy16(void* dst, const void* src) {
    *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
}

// ---------------- tensor cores (sm_80+) ----------------

// ldmatrix x4: lane l addresses row l % 8 of 8x8 b16 matrix l / 8; register i of every lane gets
// its part of matrix i (ldsm_x4_t: of the transposed matrix). addr: a shared-memory address.
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const void* smem) { ldsm_x4(r, smem_u32(smem)); }
__device__ __forceinline__ void ldsm_x4_t(uint32_t (&r)[4], const void* smem) { ldsm_x4_t(r, smem_u32(smem)); }

// d (16 x 8, fp32) += a (16 x 16, row-major fragment) * b (16 x 8, {b0, b1} column fragment), with
// T (__nv_bfloat16 or __half) inputs.
template <class T> __device__ __forceinline__ void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);
template <> __device__ __forceinline__ void mma16816<__nv_bfloat16>(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <> __device__ __forceinline__ void mma16816<__half>(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// ---------------- reductions ----------------

// Over the 32 lanes of a warp (all active), xor offsets 16, 8, 4, 2, 1.
__device__ __forceinline__ double warp_sum(double x) {
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}
__device__ __forceinline__ float warp_max(float x) {
    for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
    return x;
}
__device__ __forceinline__ double warp_max(double x) {
    for (int o = 16; o > 0; o >>= 1) x = fmax(x, __shfl_xor_sync(0xffffffffu, x, o));
    return x;
}

// Over lanes 4r .. 4r + 3, which hold one row of an m16n8 accumulator: xor offsets 1, then 2.
__device__ __forceinline__ float quad_sum(float x) {
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    x += __shfl_xor_sync(0xffffffffu, x, 2);
    return x;
}
__device__ __forceinline__ float quad_max(float x) {
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
    return x;
}

// Over the block (blockDim.x a multiple of 32, at most 1024): warp trees, then every thread adds
// the warp results in warp order. Every thread gets the result. sh: 32 slots of shared memory,
// free to reuse after the call (the next call starts with a barrier).
__device__ __forceinline__ double block_sum(double x, double* sh) {
    x = warp_sum(x);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = (blockDim.x + 31) >> 5;
    __syncthreads();  // sh may still be read from a previous call
    if (lane == 0) sh[warp] = x;
    __syncthreads();
    double total = 0.0;
    for (int w = 0; w < warps; w++) total += sh[w];
    return total;
}
__device__ __forceinline__ float block_max(float x, float* sh) {
    x = warp_max(x);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = (blockDim.x + 31) >> 5;
    __syncthreads();  // sh may still be read from a previous call
    if (lane == 0) sh[warp] = x;
    __syncthreads();
    float m = sh[0];
    for (int w = 1; w < warps; w++) m = fmaxf(m, sh[w]);
    return m;
}

}  // namespace gl
