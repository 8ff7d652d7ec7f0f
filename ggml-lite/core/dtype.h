// Element types and exact scalar conversions (round-to-nearest-even for f16 and bf16).
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace gl {

enum class DType : uint8_t { f32, f16, bf16, i32, u8, i8 };
constexpr int kDTypeCount = 6;

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
        const float v = float(mant) * 5.9604644775390625e-8f;
        std::memcpy(&u, &v, 4);
        u |= sign;
    } else if (exp == 31) {
        u = sign | 0x7f800000u | (mant << 13);
    } else {
        u = sign | ((exp + 112u) << 23) | (mant << 13);
    }
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}
// bf16 is the top half of an f32: inline, since checkpoint loading converts every weight.
inline uint16_t f32_to_bf16(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x0040u);  // quiet NaN
    u += 0x7fffu + ((u >> 16) & 1u);  // ties to even; a carry into the exponent gives inf correctly
    return uint16_t(u >> 16);
}
inline float bf16_to_f32(uint16_t b) {
    uint32_t u = uint32_t(b) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

// Reads element i of a contiguous buffer of type t as float (integers convert exactly
// when representable).
float load_as_f32(const void* data, DType t, int64_t i);
// Stores v into element i; integer types round to nearest and saturate.
void store_from_f32(void* data, DType t, int64_t i, float v);

}  // namespace gl
