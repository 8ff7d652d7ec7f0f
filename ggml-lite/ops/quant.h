// How the weight-taking ops (linear, matmul, conv2d, conv2d_grad_input) carry a quantized weight
// (core/quant.h): Params::i[kQuantSlot] = 1, the weight input holds the codes (i8 or f8e4m3) and
// the op's LAST input is the f32 scale per row of the weight (its dim 0). The other inputs keep
// their places, so an optional bias is still recognised by the input count. Shared by the shape
// rules and CPU kernels (ops/matmul.cpp, ops/conv.cpp) and the CUDA launchers.
#pragma once
#include <vector>

#include "ggml-lite/core/cpu_kernel.h"
#include "ggml-lite/core/graph.h"
#include "ggml-lite/core/quant.h"

namespace gl {

constexpr int kQuantSlot = 7;

inline bool is_quantized(const Params& p) { return p.i[size_t(kQuantSlot)] != 0; }
inline bool is_code_dtype(DType t) { return t == DType::i8 || t == DType::f8e4m3; }
// Inputs of a node without the trailing scale of a quantized weight.
inline int inputs_without_scale(const Params& p, int n_in) { return is_quantized(p) ? n_in - 1 : n_in; }

// Checks the quantized weight of a call: codes at input wi, the f32 scale [rows] last.
inline void check_quant_weight(const OpCall& c, int wi) {
    c.check(is_code_dtype(c.dtype(wi)), "a quantized weight must be i8 or f8e4m3");
    const int si = c.n_in() - 1;
    c.check(si > wi, "a quantized weight needs its scale as the last input");
    c.check(c.dtype(si) == DType::f32, "a quantized weight's scale must be f32");
    c.check(c.shape(wi).nd >= 1 && c.shape(si) == Shape{c.shape(wi).d[0]},
            "a quantized weight's scale must be [", c.shape(wi).nd >= 1 ? c.shape(wi).d[0] : 0, "]");
}

// The weight of a CPU call as dense f32: input wi itself, or, quantized, its codes times their
// row scales in `storage`.
inline const float* cpu_weight(CpuCtx& c, int wi, std::vector<float>& storage) {
    const float* w = c.in_f32(wi);
    if (!is_quantized(c.p())) return w;
    const Shape& s = c.in_shape(wi);
    const int64_t rows = s.d[0], cols = rows > 0 ? s.numel() / rows : 0;
    const float* scale = c.in_f32(c.n_in() - 1);
    storage.resize(size_t(s.numel()));
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < cols; j++) storage[size_t(r * cols + j)] = scale[r] * w[r * cols + j];
    return storage.data();
}

}  // namespace gl
