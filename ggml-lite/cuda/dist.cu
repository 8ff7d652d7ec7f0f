// all_reduce (ops/dist.cpp): y_k = sum over ranks of weight * x_k. Layout: one launch scales every
// x_k into this node's workspace, packed f32 in tensor order [sum of numel]; one collective sums
// the packed buffer; one launch copies it into the y_k. The collective runs on the stream:
// - a device communicator (NCCL) enqueues its all-reduce on the runtime's stream (capturable);
// - a host one (TCP, local) gets the buffer through a pinned host copy, a host function on the
//   stream (cudaLaunchHostFunc: captured into the step's CUDA graph as a host node) and a copy back.
//   A host function may not throw: a failed collective writes NaN into the sum (the step's update
//   is then skipped by the gradient statistics) and keeps the error for Communicator::check().
// No communicator, or a world of one: the scaled copy alone.
#include <cmath>
#include <limits>
#include <map>
#include <mutex>

#include "ggml-lite/cuda/kernel.cuh"
#include "ggml-lite/cuda/multi_tensor.cuh"
#include "ggml-lite/dist/communicator.h"

namespace gl {

constexpr int kReduceTile = 2048;
using ReduceTable = TensorTable<2, table_capacity<2>()>;  // from, to

__global__ void all_reduce_copy_kernel(const __grid_constant__ ReduceTable t, const float* w) {
    kernel_entry();
    const ReduceTable::Tile tile = t.tile(blockIdx.x, kReduceTile);
    const float* x = static_cast<const float*>(t.ptr[0][tile.tensor]);
    float* y = static_cast<float*>(t.ptr[1][tile.tensor]);
    const float s = w ? *w : 1.0f;
    for (int64_t i = tile.begin + threadIdx.x; i < tile.end; i += blockDim.x) y[i] = w ? __fmul_rn(x[i], s) : x[i];
}

static size_t all_reduce_total(const Graph& g, const Node& n) {
    size_t total = 0;
    for (ValueId y : n.out) total += size_t(g.v(y).numel());
    return total;
}
static size_t all_reduce_workspace(const Graph& g, const Node& n) { return all_reduce_total(g, n) * sizeof(float); }

// A host communicator's pinned buffer and what its host function needs; one per (node, runtime
// workspace), kept for the process (a captured graph's host node points at it).
struct HostReduce {
    dist::Communicator* comm = nullptr;
    float* pinned = nullptr;
    size_t n = 0;
};
static void CUDART_CB host_reduce(void* arg) {
    HostReduce* h = static_cast<HostReduce*>(arg);
    try {
        h->comm->all_reduce_sum(h->pinned, h->n);
    } catch (const std::exception&) {  // the communicator keeps it for check()
        for (size_t i = 0; i < h->n; i++) h->pinned[i] = std::numeric_limits<float>::quiet_NaN();
    }
}
static HostReduce* host_reduce_for(const void* key, dist::Communicator* comm, size_t n) {
    static std::mutex mu;
    static std::map<std::pair<const void*, size_t>, HostReduce> table;  // never freed: graphs point at it
    std::lock_guard<std::mutex> lock(mu);
    HostReduce& h = table[{key, n}];
    if (!h.pinned) GL_CUDA_CHECK(cudaMallocHost(&h.pinned, n * sizeof(float)));
    h.comm = comm;
    h.n = n;
    return &h;
}

static void all_reduce_run(CudaCtx& c) {
    const int n = int(c.out.size());
    float* packed = reinterpret_cast<float*>(c.workspace);
    std::vector<size_t> at(size_t(n) + 1, 0);
    for (int k = 0; k < n; k++) at[size_t(k) + 1] = at[size_t(k)] + size_t(c.out[size_t(k)].numel());
    // The runtime's scratch is sized for its largest node: this node packs into its first `total` floats.
    const size_t total = at[size_t(n)];
    GL_CHECK(total * sizeof(float) <= c.workspace_bytes, "all_reduce: workspace of ", c.workspace_bytes / sizeof(float),
             " floats for ", total);
    const float* w = c.in_ptr<float>(0);
    auto copy = [&](bool scatter) {
        for_each_table<2>(
            n, [&](int k) { return c.out[size_t(k)].numel(); },
            [&](int o, int k) -> void* {
                void* slot = packed + at[size_t(k)];
                void* tensor = scatter ? static_cast<void*>(c.out_ptr(k)) : const_cast<void*>(c.in_ptr(k + 1));
                return (o == 0) == scatter ? slot : tensor;
            },
            kReduceTile,
            [&](const ReduceTable& t) {
                all_reduce_copy_kernel<<<unsigned(t.tiles()), 256, 0, c.stream>>>(t, scatter ? nullptr : w);
                GL_CUDA_LAUNCHED();
            });
    };
    copy(false);
    if (c.comm && c.comm->world_size() > 1 && total > 0) {
        if (c.comm->device_buffers()) {
            c.comm->all_reduce_sum(packed, total, c.stream);
        } else {
            HostReduce* h = host_reduce_for(c.workspace, c.comm, total);
            GL_CUDA_CHECK(cudaMemcpyAsync(h->pinned, packed, total * sizeof(float), cudaMemcpyDeviceToHost, c.stream));
            GL_CUDA_CHECK(cudaLaunchHostFunc(c.stream, host_reduce, h));
            GL_CUDA_CHECK(cudaMemcpyAsync(packed, h->pinned, total * sizeof(float), cudaMemcpyHostToDevice, c.stream));
        }
    }
    copy(true);
}
const CudaKernel cuda_all_reduce{all_reduce_run, all_reduce_workspace};

}  // namespace gl
