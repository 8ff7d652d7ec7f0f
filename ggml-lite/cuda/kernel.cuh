// What a CUDA kernel launcher sees, the per-op kernel table, and small device helpers.
// Every op in ops/op_list.h has `const CudaKernel cuda_<name>` in cuda/<family>.cu
// (view ops included: their entry has run = nullptr).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <vector>

#include "ggml-lite/core/tensor_ref.h"
#include "ggml-lite/cuda/check.cuh"
#include "ggml-lite/core/error.h"
#include "ggml-lite/core/graph.h"

namespace gl {

struct CudaCtx {
    CudaCtx(const Node& n, cudaStream_t s) : node(n), stream(s) {}
    const Node& node;
    cudaStream_t stream;
    std::vector<TensorRef> in, out;  // data: device storage of the base value; layout.offset applies
    char* workspace = nullptr;       // this node's scratch (CudaKernel::workspace bytes)
    size_t workspace_bytes = 0;

    const Params& p() const { return node.p; }
    const Shape& in_shape(int i) const { return in[size_t(i)].shape(); }
    const Shape& out_shape(int k) const { return out[size_t(k)].shape(); }
    DType in_dtype(int i) const { return in[size_t(i)].dtype; }
    DType out_dtype(int k) const { return out[size_t(k)].dtype; }
    // Pointer to the first element (dense tensors, which every input is unless the kernel
    // declares kCudaStrided; outputs are always dense).
    template <class T = void>
    const T* in_ptr(int i) const { return reinterpret_cast<const T*>(elem(in[size_t(i)])); }
    template <class T = void>
    T* out_ptr(int k) const { return reinterpret_cast<T*>(elem(out[size_t(k)])); }

    static char* elem(const TensorRef& t) {
        return static_cast<char*>(t.data) + t.layout.offset * int64_t(dtype_size(t.dtype));
    }
};

enum CudaKernelFlags : uint32_t {
    kCudaStrided = 1u << 0,  // the kernel reads strided inputs itself (else the runtime densifies them)
};

struct CudaKernel {
    void (*run)(CudaCtx&);  // nullptr for view ops
    // Scratch bytes the launcher needs for this node (nullptr: none). Called once, at runtime creation.
    size_t (*workspace)(const Graph&, const Node&) = nullptr;
    uint32_t flags = 0;
};

#define GL_X(name, family) extern const CudaKernel cuda_##name;
GL_OP_LIST(GL_X)
#undef GL_X

const CudaKernel& cuda_kernel(Op op);

// ---- device helpers ----

template <class T> __device__ __forceinline__ float to_f32(T x);
template <> __device__ __forceinline__ float to_f32<float>(float x) { return x; }
template <> __device__ __forceinline__ float to_f32<__nv_bfloat16>(__nv_bfloat16 x) { return __bfloat162float(x); }
template <> __device__ __forceinline__ float to_f32<__half>(__half x) { return __half2float(x); }

template <class T> __device__ __forceinline__ T from_f32(float x);
template <> __device__ __forceinline__ float from_f32<float>(float x) { return x; }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
template <> __device__ __forceinline__ __half from_f32<__half>(float x) { return __float2half_rn(x); }

// Loads element i of a float tensor of run-time dtype t (for small side inputs such as gamma).
__device__ __forceinline__ float load_any(const void* p, DType t, int64_t i) {
    if (t == DType::f32) return static_cast<const float*>(p)[i];
    if (t == DType::bf16) return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    return __half2float(static_cast<const __half*>(p)[i]);
}

// Calls f(T{}) with T the C++ type of float dtype t; throws for other dtypes.
template <class F>
void dispatch_float(DType t, const char* op, F&& f) {
    switch (t) {
        case DType::f32: f(float{}); return;
        case DType::bf16: f(__nv_bfloat16{}); return;
        case DType::f16: f(__half{}); return;
        default: fail(op, ": CUDA kernel has no ", dtype_name(t), " variant");
    }
}

inline unsigned grid_for(int64_t n, int threads, int64_t max_blocks = 65535LL * 32) {
    int64_t b = (n + threads - 1) / threads;
    if (b < 1) b = 1;
    return unsigned(b < max_blocks ? b : max_blocks);
}

// Copies a strided tensor (any dtype) into dense storage of the same dtype.
void launch_densify(const TensorRef& src, void* dst, cudaStream_t s);

}  // namespace gl
