// Where a value lives on a backend, as every backend's kernels see it: the base value's storage,
// the value's own dtype and its (possibly strided) layout within that storage.
#pragma once
#include <cstdint>

#include "ggml-lite/core/dtype.h"
#include "ggml-lite/core/shape.h"

namespace gl {

struct TensorRef {
    void* data = nullptr;  // start of the base value's storage; layout.offset applies
    DType dtype = DType::f32;
    Layout layout;
    const Shape& shape() const { return layout.shape; }
    int64_t numel() const { return layout.shape.numel(); }
    bool dense() const { return layout.is_contiguous(); }
};

}  // namespace gl
