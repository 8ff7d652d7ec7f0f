// Element types and exact scalar conversions (round-to-nearest-even for f16, bf16 and f8e4m3).
#pragma once
#include <bit>
#include <cstddef>
#include <cstdint>
#include <string>

namespace gl {

// f8e4m3: 8-bit float, 1 sign, 4 exponent (bias 7), 3 mantissa bits, no infinity, one NaN code per
// sign (PyTorch's float8_e4m3fn): a storage format for frozen weights (ops/quant.h), not a
// compute dtype, so dtype_is_float() is false for it.
enum class DType : uint8_t { f32, f16, bf16, i32, u8, i8, f8e4m3 };
constexpr int kDTypeCount = 7;

size_t dtype_size(DType t);
const char* dtype_name(DType t);
bool dtype_is_float(DType t);  // f32, f16, bf16

// f32 <-> half-precision bit patterns. Rounding is to nearest, ties to even; NaN stays NaN
// (quiet), overflow rounds to infinity, f16 subnormals are produced and read exactly.
uint16_t f32_to_f16(float f);
// f16 -> f32 is exact: inline, since SD1.5 checkpoints mostly ship in f16.
inline float f16_to_f32(uint16_t h) {
    const uint32_t sign = uint32_t(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
    uint32_t u;
    if (exp == 0) {  // zero or subnormal: exactly mant * 2^-24 (a power-of-two scale, exact)
        u = std::bit_cast<uint32_t>(float(mant) * 5.9604644775390625e-8f) | sign;
    } else if (exp == 31) {
        u = sign | 0x7f800000u | (mant << 13);
    } else {
        u = sign | ((exp + 112u) << 23) | (mant << 13);
    }
    return std::bit_cast<float>(u);
}
// bf16 is the top half of an f32: inline, since checkpoint loading converts every weight.
inline uint16_t f32_to_bf16(float f) {
    uint32_t u = std::bit_cast<uint32_t>(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x0040u);  // quiet NaN
    u += 0x7fffu + ((u >> 16) & 1u);  // ties to even; a carry into the exponent gives inf correctly
    return uint16_t(u >> 16);
}
inline float bf16_to_f32(uint16_t b) {
    return std::bit_cast<float>(uint32_t(b) << 16);
}

// f32 <-> f8e4m3 as PyTorch converts to and from float8_e4m3fn: round to nearest, ties to even;
// magnitudes above 448 (the largest finite value) and infinities saturate to +-448 (the format
// has no infinity), NaN gives NaN (0x7f / 0xff); subnormals (multiples of 2^-9) are exact.
uint8_t f32_to_f8e4m3(float f);
inline float f8e4m3_to_f32(uint8_t b) {
    const uint32_t sign = uint32_t(b & 0x80u) << 24, exp = (b >> 3) & 0xfu, mant = b & 7u;
    uint32_t u;
    if (exp == 0) {  // zero or subnormal: exactly mant * 2^-9
        u = std::bit_cast<uint32_t>(float(mant) * 0.001953125f) | sign;
    } else if (exp == 15 && mant == 7) {
        u = sign | 0x7fc00000u;
    } else {
        u = sign | ((exp + 120u) << 23) | (mant << 20);
    }
    return std::bit_cast<float>(u);
}

// Reads element i of a contiguous buffer of type t as float (integers convert exactly
// when representable).
float load_as_f32(const void* data, DType t, int64_t i);
// Stores v into element i; integer types round to nearest and saturate; f8e4m3 as f32_to_f8e4m3.
void store_from_f32(void* data, DType t, int64_t i, float v);

}  // namespace gl
