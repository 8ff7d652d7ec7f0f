// cp.async (sm_80+): global -> shared copies that complete in the background, in commit groups.
// One definition for every kernel that pipelines its loads (GEMM, conv, attention, 8-bit AdamW).
// Self-contained (CUDA headers only): bench/*_check.cu include the kernels without the core.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace gl {

__device__ __forceinline__ uint32_t smem_u32(const void* p) { return uint32_t(__cvta_generic_to_shared(p)); }

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

}  // namespace gl
