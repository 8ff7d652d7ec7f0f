#include "ggml-lite/core/dtype.h"

#include <bit>
#include <cmath>

#include "ggml-lite/core/error.h"

namespace gl {

size_t dtype_size(DType t) {
    switch (t) {
        case DType::f32: return 4;
        case DType::f16: return 2;
        case DType::bf16: return 2;
        case DType::i32: return 4;
        case DType::u8: return 1;
        case DType::i8: return 1;
        case DType::f8e4m3: return 1;
    }
    fail("dtype_size: invalid dtype ", int(t));
}

const char* dtype_name(DType t) {
    switch (t) {
        case DType::f32: return "f32";
        case DType::f16: return "f16";
        case DType::bf16: return "bf16";
        case DType::i32: return "i32";
        case DType::u8: return "u8";
        case DType::i8: return "i8";
        case DType::f8e4m3: return "f8e4m3";
    }
    return "invalid";
}

bool dtype_is_float(DType t) { return t == DType::f32 || t == DType::f16 || t == DType::bf16; }

static uint32_t bits_of(float f) { return std::bit_cast<uint32_t>(f); }

uint16_t f32_to_f16(float f) {
    uint32_t u = bits_of(f);
    uint16_t sign = uint16_t((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return uint16_t(sign | 0x7e00u | ((a >> 13) & 0x3ffu));  // NaN
    if (a >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // rounds to >= 65520: inf
    if (a < 0x38800000u) {
        // Result is an f16 subnormal (or zero): value = m * 2^-24 with m < 1024.
        // Shift the 24-bit significand into place and round to nearest even.
        if (a < 0x33000000u) return sign;  // below half the smallest subnormal: +-0
        uint32_t exp = a >> 23;
        uint32_t mant = (a & 0x7fffffu) | 0x800000u;
        uint32_t shift = 126u - exp;  // 14..24
        uint32_t half = 1u << (shift - 1);
        uint32_t rest = mant & ((1u << shift) - 1u);
        uint32_t m = mant >> shift;
        if (rest > half || (rest == half && (m & 1u))) m++;
        return uint16_t(sign | m);
    }
    // Normal: rebias the exponent (127 -> 15) and round the 13 dropped bits.
    uint32_t r = a - 0x38000000u;
    uint32_t lsb = (r >> 13) & 1u;
    r += 0xfffu + lsb;
    return uint16_t(sign | (r >> 13));
}

uint8_t f32_to_f8e4m3(float f) {
    const uint32_t u = bits_of(f);
    const uint8_t sign = uint8_t((u >> 24) & 0x80u);
    const uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u) return uint8_t(sign | 0x7fu);  // NaN
    // Above 448, the largest finite value, infinities included: 448, as PyTorch's cast saturates.
    if (a > 0x43e00000u) return uint8_t(sign | 0x7eu);
    if (a < 0x3c800000u) {
        // Below 2^-6, the smallest normal: a subnormal m * 2^-9, m in 0..8 (8 is 2^-6 itself, whose
        // code 0x08 follows 0x07). The scaling by 2^9 is exact, and nearbyint rounds ties to even.
        return uint8_t(sign | uint8_t(std::nearbyint(std::bit_cast<float>(a) * 512.0f)));
    }
    // Normal: keep 3 of the 23 mantissa bits, rounding ties to even (a carry may raise the
    // exponent; nothing at or below 448 reaches the NaN code 0x7f), and rebias 127 -> 7.
    const uint32_t r = a + 0x7ffffu + ((a >> 20) & 1u);
    return uint8_t(sign | uint8_t((r >> 20) - (120u << 3)));
}

float load_as_f32(const void* data, DType t, int64_t i) {
    switch (t) {
        case DType::f32: return static_cast<const float*>(data)[i];
        case DType::f16: return f16_to_f32(static_cast<const uint16_t*>(data)[i]);
        case DType::bf16: return bf16_to_f32(static_cast<const uint16_t*>(data)[i]);
        case DType::i32: return float(static_cast<const int32_t*>(data)[i]);
        case DType::u8: return float(static_cast<const uint8_t*>(data)[i]);
        case DType::i8: return float(static_cast<const int8_t*>(data)[i]);
        case DType::f8e4m3: return f8e4m3_to_f32(static_cast<const uint8_t*>(data)[i]);
    }
    fail("load_as_f32: invalid dtype");
}

template <class T>
static T saturate(float v, double lo, double hi) {
    if (std::isnan(v)) return T(0);
    double r = std::nearbyint(double(v));
    if (r < lo) r = lo;
    if (r > hi) r = hi;
    return T(r);
}

void store_from_f32(void* data, DType t, int64_t i, float v) {
    switch (t) {
        case DType::f32: static_cast<float*>(data)[i] = v; return;
        case DType::f16: static_cast<uint16_t*>(data)[i] = f32_to_f16(v); return;
        case DType::bf16: static_cast<uint16_t*>(data)[i] = f32_to_bf16(v); return;
        case DType::i32: static_cast<int32_t*>(data)[i] = saturate<int32_t>(v, -2147483648.0, 2147483647.0); return;
        case DType::u8: static_cast<uint8_t*>(data)[i] = saturate<uint8_t>(v, 0, 255); return;
        case DType::i8: static_cast<int8_t*>(data)[i] = saturate<int8_t>(v, -128, 127); return;
        case DType::f8e4m3: static_cast<uint8_t*>(data)[i] = f32_to_f8e4m3(v); return;
    }
    fail("store_from_f32: invalid dtype");
}

}  // namespace gl
