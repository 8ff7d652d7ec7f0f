// Multi-tensor launches: one kernel over many tensors of one op (a parameter group's updates, every
// gradient's sum of squares, a step's LoRA casts). The tensors' pointers and sizes travel as one
// kernel argument (__grid_constant__, read in place from the parameter space: up to 32 KiB since
// CUDA 12.1), laid out as consecutive tiles; a block (or warp) finds its tensor by binary search
// over the tiles' prefix sums. An op with more tensors than a table holds launches once per table.
#pragma once
#include <algorithm>
#include <cstdint>

#include "ggml-lite/cuda/kernel.cuh"

namespace gl {

// kOperands pointers per tensor (param, grad, moments...), n elements each, in tiles of `tile`.
template <int kOperands, int kMaxTensors>
struct TensorTable {
    static constexpr int kMax = kMaxTensors;
    void* ptr[kOperands][kMaxTensors];
    int64_t n[kMaxTensors];
    int64_t first_tile[kMaxTensors + 1];  // tensor k holds tiles [first_tile[k], first_tile[k + 1])
    int count;

    __host__ __device__ __forceinline__ int64_t tiles() const { return first_tile[count]; }
    // The tensor holding global tile t (0 <= t < tiles()).
    __device__ __forceinline__ int find(int64_t t) const {
        int lo = 0, hi = count - 1;
        while (lo < hi) {
            const int mid = (lo + hi + 1) / 2;
            if (first_tile[mid] <= t) lo = mid;
            else hi = mid - 1;
        }
        return lo;
    }
    // Global tile t of `size` elements: its tensor and the element range [begin, end) within it.
    struct Tile {
        int tensor;
        int64_t begin, end;
    };
    __device__ __forceinline__ Tile tile(int64_t t, int64_t size) const {
        const int k = find(t);
        const int64_t begin = (t - first_tile[k]) * size;
        return {k, begin, begin + size < n[k] ? begin + size : n[k]};
    }
    template <class T>
    __device__ __forceinline__ T* at(int operand, int k) const {
        return static_cast<T*>(ptr[operand][k]);
    }
};

// Kernel arguments may hold 32764 bytes (CUDA 12.1+, sm_70+); the rest of a launch's arguments fit beside.
constexpr size_t kMaxTableBytes = 30 * 1024;

// Tensors that fit one table of kOperands pointers each.
template <int kOperands>
constexpr int table_capacity() {
    return int((kMaxTableBytes - 16) / (kOperands * 8 + 16));
}

// Calls launch(table) for each table of tensors [0, count): tensor k has size(k) elements and
// operand o at pointer(o, k); tensors of no elements are left out.
template <int kOperands, class Size, class Pointer, class Launch>
void for_each_table(int count, Size&& size, Pointer&& pointer, int64_t tile, Launch&& launch) {
    using Table = TensorTable<kOperands, table_capacity<kOperands>()>;
    static_assert(sizeof(Table) <= kMaxTableBytes, "a tensor table must fit the kernel arguments");
    Table t{};
    auto flush = [&] {
        if (t.count > 0) launch(t);
        t.count = 0;
        t.first_tile[0] = 0;
    };
    for (int k = 0; k < count; k++) {
        const int64_t n = size(k);
        if (n == 0) continue;
        if (t.count == Table::kMax) flush();
        for (int o = 0; o < kOperands; o++) t.ptr[o][t.count] = pointer(o, k);
        t.n[t.count] = n;
        t.first_tile[t.count + 1] = t.first_tile[t.count] + ceil_div(n, tile);
        t.count++;
    }
    flush();
}

// The common case: operand o of tensor k is input (o * count + k) of a multi-tensor step
// (params..., grads..., ...), its size the first operand's.
template <int kOperands, class Launch>
void for_each_input_table(const CudaCtx& c, int count, int64_t tile, Launch&& launch) {
    for_each_table<kOperands>(
        count, [&](int k) { return c.in[size_t(k)].numel(); },
        [&](int o, int k) { return const_cast<void*>(c.in_ptr(o * count + k)); }, tile, launch);
}

}  // namespace gl
