// What a CUDA op launcher sees: CudaCtx (a node's tensors, stream and workspace), the per-op
// kernel table and dtype dispatch. Every op in core/op_list.h has `const CudaKernel cuda_<name>`
// in cuda/<family>.cu (view ops included: their entry has run = nullptr). A kernel file includes
// this header and gets the device primitives (primitives.cuh), the launch helpers (device.cuh)
// and the checked calls (check.cuh) with it.
#pragma once
#include <cuda_runtime.h>

#include <vector>

#include "ggml-lite/core/tensor_ref.h"
#include "ggml-lite/core/error.h"
#include "ggml-lite/core/graph.h"
#include "ggml-lite/cuda/check.cuh"
#include "ggml-lite/cuda/device.cuh"
#include "ggml-lite/cuda/primitives.cuh"

namespace gl {
namespace dist {
class Communicator;
}

struct CudaCtx {
    CudaCtx(const Node& n, cudaStream_t s) : node(n), stream(s) {}
    const Node& node;
    cudaStream_t stream;
    std::vector<TensorRef> in, out;  // data: device storage of the base value; layout.offset applies
    char* workspace = nullptr;       // this node's scratch (CudaKernel::workspace bytes)
    size_t workspace_bytes = 0;
    dist::Communicator* comm = nullptr;  // the runtime's (Runtime::set_communicator)

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

// Calls f(T{}) with T the device type of float dtype t; throws for other dtypes.
template <class F>
void dispatch_float(DType t, const char* op, F&& f) {
    if (!visit_float(t, f)) fail(op, ": CUDA kernel has no ", dtype_name(t), " variant");
}

// Copies a strided tensor (any dtype) into dense storage of the same dtype.
void launch_densify(const TensorRef& src, void* dst, cudaStream_t s);

}  // namespace gl
