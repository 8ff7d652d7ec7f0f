#include "ggml-lite/core/quant.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>

#include "ggml-lite/core/error.h"
#include "ggml-lite/core/parallel.h"

namespace gl {

const char* weight_format_name(WeightFormat f) {
    switch (f) {
        case WeightFormat::dense: return "dense";
        case WeightFormat::int8: return "int8";
        case WeightFormat::fp8: return "fp8";
    }
    return "invalid";
}

WeightFormat parse_weight_format(const std::string& s) {
    for (WeightFormat f : {WeightFormat::dense, WeightFormat::int8, WeightFormat::fp8})
        if (s == weight_format_name(f)) return f;
    fail("unknown weight format '", s, "' (dense, int8 or fp8)");
}

DType weight_format_dtype(WeightFormat f) {
    switch (f) {
        case WeightFormat::int8: return DType::i8;
        case WeightFormat::fp8: return DType::f8e4m3;
        case WeightFormat::dense: break;
    }
    fail("weight format ", weight_format_name(f), " has no code dtype");
}

namespace {

constexpr float kFp8Max = 448.0f;

// Quantizes one row; returns false when it holds a value the format cannot take.
bool quantize_row(const float* w, int64_t cols, WeightFormat f, void* q, float& scale) {
    float absmax = 0.0f;
    for (int64_t j = 0; j < cols; j++) {
        if (!std::isfinite(w[j])) return false;
        absmax = std::max(absmax, std::fabs(w[j]));
    }
    const float top = f == WeightFormat::int8 ? 127.0f : kFp8Max;
    scale = absmax / top;
    // Divide in double by the rounded f32 scale, so that scale * q is as near w as the codes allow;
    // the absmax element may land a hair above `top`, which the clamp (int8) or the conversion
    // (fp8 saturates at 448) takes back. fp8 rounds twice (the quotient to f32, then to 3 mantissa
    // bits), which can move only a value within 2^-24 of a tie.
    const double inv = scale > 0.0f ? 1.0 / double(scale) : 0.0;
    if (f == WeightFormat::int8) {
        auto* out = static_cast<int8_t*>(q);
        for (int64_t j = 0; j < cols; j++) {
            const double r = std::nearbyint(double(w[j]) * inv);
            out[j] = int8_t(std::min(127.0, std::max(-127.0, r)));
        }
    } else {
        auto* out = static_cast<uint8_t*>(q);
        for (int64_t j = 0; j < cols; j++) out[j] = f32_to_f8e4m3(float(double(w[j]) * inv));
    }
    return true;
}

}  // namespace

void quantize_rows(const float* w, int64_t rows, int64_t cols, WeightFormat f, void* q, float* scale,
                   const std::string& what) {
    const DType qt = weight_format_dtype(f);
    GL_CHECK(rows >= 0 && cols >= 0, "quantize ", what, ": negative size");
    std::atomic<int64_t> bad{std::numeric_limits<int64_t>::max()};
    parallel_for(rows, std::max<int64_t>(1, (int64_t(1) << 16) / std::max<int64_t>(cols, 1)), [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; r++) {
            void* qr = static_cast<uint8_t*>(q) + r * cols * int64_t(dtype_size(qt));
            if (!quantize_row(w + r * cols, cols, f, qr, scale[r])) {
                int64_t cur = bad.load();
                while (r < cur && !bad.compare_exchange_weak(cur, r)) {
                }
            }
        }
    });
    const int64_t r = bad.load();
    if (r == std::numeric_limits<int64_t>::max()) return;
    const float* row = w + r * cols;
    int64_t j = 0;
    while (j + 1 < cols && std::isfinite(row[j])) j++;
    fail("quantize ", what, " to ", weight_format_name(f), ": element ", j, " of row ", r, " is ", row[j],
         "; a frozen weight must be finite");
}

void dequantize_rows(const void* q, DType qt, const float* scale, int64_t rows, int64_t cols, float* w) {
    GL_CHECK(qt == DType::i8 || qt == DType::f8e4m3, "dequantize: ", dtype_name(qt), " is not a code dtype");
    parallel_for(rows, std::max<int64_t>(1, (int64_t(1) << 16) / std::max<int64_t>(cols, 1)), [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; r++)
            for (int64_t j = 0; j < cols; j++) w[r * cols + j] = scale[r] * load_as_f32(q, qt, r * cols + j);
    });
}

}  // namespace gl
