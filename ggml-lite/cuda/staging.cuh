// Pinned host buffers for the values a CUDA runtime is given every step (its inputs: latents,
// context, draws, hyper-parameters). write() converts the caller's data into the value's buffer
// and queues the device copy without waiting, so the host goes on while the stream runs and a
// step costs no round trip per input; a buffer is refilled only after its last copy finished
// (one event per buffer), and the stream orders the copy after every run queued before it.
#pragma once
#include <cuda_runtime.h>

#include <cstring>
#include <unordered_map>

#include "ggml-lite/core/dtype.h"
#include "ggml-lite/core/graph.h"
#include "ggml-lite/cuda/check.cuh"

namespace gl {

class HostStaging {
public:
    HostStaging() = default;
    HostStaging(const HostStaging&) = delete;
    HostStaging& operator=(const HostStaging&) = delete;
    // The owner synchronises the stream before destroying it.
    ~HostStaging() {
        for (auto& [id, s] : slots_) {
            if (s.done) cudaEventDestroy(s.done);
            if (s.host) cudaFreeHost(s.host);
        }
    }

    // Queues host -> device of n elements of type t into dst (dtype `to`, n elements), converted in
    // the pinned buffer of value id.
    void write(ValueId id, void* dst, DType to, const void* src, DType t, int64_t n, cudaStream_t stream) {
        Slot& s = slots_[id];
        const size_t bytes = size_t(n) * dtype_size(to);
        if (s.bytes < bytes) {
            if (s.host) {
                GL_CUDA_CHECK(cudaEventSynchronize(s.done));
                GL_CUDA_CHECK(cudaFreeHost(s.host));
                s.host = nullptr;
            }
            GL_CUDA_CHECK(cudaHostAlloc(&s.host, bytes, cudaHostAllocDefault));
            s.bytes = bytes;
            if (!s.done) GL_CUDA_CHECK(cudaEventCreateWithFlags(&s.done, cudaEventDisableTiming));
        } else {
            GL_CUDA_CHECK(cudaEventSynchronize(s.done));  // its previous copy has read it
        }
        convert(s.host, to, src, t, n);
        GL_CUDA_CHECK(cudaMemcpyAsync(dst, s.host, bytes, cudaMemcpyHostToDevice, stream));
        GL_CUDA_CHECK(cudaEventRecord(s.done, stream));
    }

private:
    struct Slot {
        void* host = nullptr;
        size_t bytes = 0;
        cudaEvent_t done = nullptr;
    };

    // f32 -> bf16 / f16 (the context of every step) without a dtype switch per element.
    static void convert(void* dst, DType to, const void* src, DType t, int64_t n) {
        if (t == to) {
            std::memcpy(dst, src, size_t(n) * dtype_size(t));
        } else if (t == DType::f32 && to == DType::bf16) {
            const float* x = static_cast<const float*>(src);
            uint16_t* y = static_cast<uint16_t*>(dst);
            for (int64_t i = 0; i < n; i++) y[i] = f32_to_bf16(x[i]);
        } else {
            for (int64_t i = 0; i < n; i++) store_from_f32(dst, to, i, load_as_f32(src, t, i));
        }
    }

    std::unordered_map<ValueId, Slot> slots_;
};

}  // namespace gl
