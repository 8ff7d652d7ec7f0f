// Frozen weights in 8 bits: how a model's base weights are stored (WeightFormat) and the host
// side quantization at load. A quantized weight is a pair of leaves: codes q (i8 or f8e4m3) of
// the weight's shape and an f32 scale per row (dim 0: a linear weight's output feature, a conv
// weight's Cout), so that w[r, ...] = scale[r] * q[r, ...]. The ops that take weights
// (ops/quant.h: linear, matmul, conv2d and their input gradients) read the pair directly; the
// CUDA kernels convert codes to bf16 / f16 while loading their B tiles, so no 16-bit copy of a
// quantized weight ever exists.
#pragma once
#include <cstdint>
#include <string>

#include "ggml-lite/core/dtype.h"

namespace gl {

// How frozen matrices (linear and conv weights) are stored; norms, biases and embeddings stay in
// the compute dtype whatever the format.
enum class WeightFormat : uint8_t {
    dense,  // the compute dtype (bf16, f16 or f32), as before
    int8,   // i8 codes, symmetric per row: scale = absmax / 127, q = round(w / scale) in [-127, 127]
    fp8,    // f8e4m3 codes of w / scale per row, scale = absmax / 448 (the format's largest value);
            // kohya's --fp8_base casts w itself (scale 1), which loses small rows to subnormals
};
const char* weight_format_name(WeightFormat f);  // "dense", "int8", "fp8"
// One of those names; throws gl::Error naming s otherwise.
WeightFormat parse_weight_format(const std::string& s);
// The codes' dtype of a quantized format (i8 or f8e4m3); throws for dense.
DType weight_format_dtype(WeightFormat f);

// Quantizes a row-major [rows, cols] matrix into codes q (rows * cols elements of
// weight_format_dtype(f)) and scale[rows]. A row of zeros gets scale 0 and zero codes. Throws
// gl::Error naming `what` (the weight) and the row for a non-finite value, writing nothing useful.
void quantize_rows(const float* w, int64_t rows, int64_t cols, WeightFormat f, void* q, float* scale,
                   const std::string& what);
// w = scale[r] * q in f32 (exact: the product of an 8-bit code and an f32 scale is rounded once).
void dequantize_rows(const void* q, DType qt, const float* scale, int64_t rows, int64_t cols, float* w);

}  // namespace gl
