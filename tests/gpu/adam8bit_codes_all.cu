// Every one of the 2^32 float bit patterns through the O(1) code search (ops/adam8bit_codes.h)
// and through a plain binary search over the sorted map, on the GPU, counting disagreements (the
// in-range search too, on every float of its domain).
#include <cstdint>
#include <vector>

#include "ggml-lite/cuda/check.cuh"
#include "ggml-lite/ops/adam8bit_codes.h"
#include "ggml-lite/ops/builder.h"
#include "adam8bit_codes_all.h"

namespace {

__device__ int binary_search_code(const float* q, float x) {
    if (!(x > q[0])) return 0;
    if (!(x < q[255])) return 255;
    int lo = 0, hi = 255;
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (q[mid] <= x) lo = mid; else hi = mid;
    }
    return (x - q[lo] <= q[hi] - x) ? lo : hi;
}

template <bool Signed>
__global__ void compare_all(const float* q, const uint32_t* table, unsigned long long* mismatches, uint32_t* first) {
    unsigned long long bad = 0;
    for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < (1ull << 32); i += uint64_t(gridDim.x) * blockDim.x) {
        float x = __uint_as_float(uint32_t(i));
        const int want = binary_search_code(q, x);
        const bool in_range = isfinite(x) && fabsf(x) < 2.0f && (Signed || !signbit(x));  // the fast path's domain
        if (gl::adam8bit_code<Signed>(table, x) != want ||
            (in_range && gl::adam8bit_code_in_range<Signed>(table, x) != want)) {
            if (bad == 0) atomicMin(first, uint32_t(i));
            bad++;
        }
    }
    if (bad) atomicAdd(mismatches, bad);
}

}  // namespace

namespace gltest {

Adam8bitCodeCheck adam8bit_codes_all_floats(bool is_signed) {
    using namespace gl;
    const int entries = is_signed ? kAdam8bitSignedEntries : kAdam8bitUnsignedEntries;
    float* q = nullptr;
    uint32_t *table = nullptr, *first = nullptr;
    unsigned long long* count = nullptr;
    GL_CUDA_CHECK(cudaMalloc(&q, 256 * sizeof(float)));
    GL_CUDA_CHECK(cudaMalloc(&table, entries * sizeof(uint32_t)));
    GL_CUDA_CHECK(cudaMalloc(&first, sizeof(uint32_t)));
    GL_CUDA_CHECK(cudaMalloc(&count, sizeof(unsigned long long)));
    GL_CUDA_CHECK(cudaMemcpy(q, adam8bit_qmap(is_signed), 256 * sizeof(float), cudaMemcpyHostToDevice));
    GL_CUDA_CHECK(cudaMemcpy(table, adam8bit_code_table(is_signed), entries * sizeof(uint32_t), cudaMemcpyHostToDevice));
    GL_CUDA_CHECK(cudaMemset(first, 0xff, sizeof(uint32_t)));
    GL_CUDA_CHECK(cudaMemset(count, 0, sizeof(unsigned long long)));
    if (is_signed) compare_all<true><<<132 * 8, 256>>>(q, table, count, first);
    else compare_all<false><<<132 * 8, 256>>>(q, table, count, first);
    GL_CUDA_CHECK(cudaGetLastError());
    Adam8bitCodeCheck r;
    GL_CUDA_CHECK(cudaMemcpy(&r.mismatches, count, sizeof r.mismatches, cudaMemcpyDeviceToHost));
    GL_CUDA_CHECK(cudaMemcpy(&r.first_bits, first, sizeof r.first_bits, cudaMemcpyDeviceToHost));
    for (void* ptr : {static_cast<void*>(q), static_cast<void*>(table), static_cast<void*>(first), static_cast<void*>(count)})
        GL_CUDA_CHECK(cudaFree(ptr));
    return r;
}

}  // namespace gltest
