// A read-only collection of named tensors: what a checkpoint file (safetensors, .ckpt) or a
// folder of them looks like to a model loader. Implementations validate their file before
// returning anything, and read straight into the caller's buffer (no second full copy).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ggml-lite/core/checked.h"
#include "ggml-lite/core/dtype.h"
#include "ggml-lite/core/shape.h"

namespace gl::io {

struct TensorInfo {
    std::string name;
    DType dtype = DType::f32;
    std::vector<int64_t> shape;  // any rank (checkpoints hold 0-D and 5-D tensors too)
    // Readers refuse tensors whose element or byte count (in any dtype they read into) would
    // overflow, so these only throw for a TensorInfo built by hand.
    int64_t numel() const { return checked_numel(shape.data(), shape.size(), "tensor '", name, "'"); }
    size_t nbytes() const { return size_t(checked_bytes(numel(), dtype_size(dtype), "tensor '", name, "'")); }
};

class TensorSource {
public:
    virtual ~TensorSource() = default;
    // Where the tensors come from, for error messages ("model.safetensors").
    virtual std::string origin() const = 0;
    virtual std::vector<TensorInfo> list() const = 0;
    virtual bool has(const std::string& name) const = 0;
    // Throws gl::Error naming the source and the tensor when absent.
    virtual TensorInfo info(const std::string& name) const = 0;
    // Copies the tensor's elements, converted to `to` (f32, f16 or bf16 from any float dtype;
    // exact for integer-to-same-type), into dst: info(name).numel() elements.
    virtual void read(const std::string& name, void* dst, DType to) const = 0;
};

}  // namespace gl::io
