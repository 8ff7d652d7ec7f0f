// The nearest-code search of 8-bit AdamW in O(1): one table lookup and a few integer operations
// per value, exactly equal to the binary search (adam8bit_quantize) for every float.
//
// Why it is exact: between two adjacent codes q[j] < q[j+1], the search picks j while
// RN(x - q[j]) <= RN(q[j+1] - x), a predicate that holds on a prefix of [q[j], q[j+1]) since the
// left side rounds monotonically up in x and the right side down. So the result is the number of
// thresholds s_j (the last float of each prefix) below x: code(x) = #{j : s_j < x}, NaN -> 0.
// Floats are grouped into buckets by sign, exponent and the top M mantissa bits; M is chosen per
// map so that no bucket holds more than one threshold (checked when the table is built). A
// bucket's entry holds the count of thresholds below it and, if one lies inside, that threshold's
// remaining mantissa bits, so code(x) = count + (threshold inside and below x).
//
// Buckets start at 2^-23 (below it, down to 0, no threshold lies: the smallest codes are
// ~3e-7) and end at 2 (above 1 there is none either); values outside are clamped into the
// first / last bucket. Entry: bits 24..31 the count; bits 0..23 the inside threshold's low
// mantissa bits t, or 0xffffff when the bucket holds none. For x < 0 the comparison flips
// (code + 1 when the threshold's magnitude is above |x|'s); the negative half stores t with its
// low bits complemented and the search complements x's likewise, so one unsigned compare serves
// both signs: code = count + (t < low bits of x, complemented if x < 0).
#pragma once
#include <bit>
#include <cmath>
#include <cstdint>

#include "ggml-lite/ops/rng.h"

namespace gl {

template <int M>
struct Adam8bitBuckets {
    static constexpr int kLowBits = 23 - M;
    static constexpr int kCount = 24 << M;              // binades 2^-23 .. 2^0, 2^M buckets each
    static constexpr uint32_t kFirst = 104u << M;       // bucket key of 2^-23 (biased exponent 104)
    static constexpr uint32_t kLowMask = (1u << kLowBits) - 1;
    static constexpr uint32_t kNone = 0xffffffu;        // "no threshold inside"
};
using Adam8bitSignedBuckets = Adam8bitBuckets<6>;    // signed map: tables for x >= 0, then x < 0
using Adam8bitUnsignedBuckets = Adam8bitBuckets<7>;  // unsigned map: x >= 0 only (x < 0 -> code 0)
constexpr int kAdam8bitSignedEntries = 2 * Adam8bitSignedBuckets::kCount;
constexpr int kAdam8bitUnsignedEntries = Adam8bitUnsignedBuckets::kCount;

GL_HD uint32_t adam8bit_float_bits(float x) {
#ifdef __CUDA_ARCH__
    return __float_as_uint(x);
#else
    return std::bit_cast<uint32_t>(x);
#endif
}

GL_HD float adam8bit_float_bits_to_float(uint32_t b) {
#ifdef __CUDA_ARCH__
    return __uint_as_float(b);
#else
    return std::bit_cast<float>(b);
#endif
}

// Requantisation scales each moment by its block's new absmax through one reciprocal per block
// (a multiply per element instead of a division); an absmax so small that its reciprocal
// overflows falls back to dividing. absmax 0 (or NaN) gives 0.
GL_HD float adam8bit_inverse(float absmax) {
#ifdef __CUDA_ARCH__
    return absmax > 0.0f ? __frcp_rn(absmax) : 0.0f;
#else
    return absmax > 0.0f ? 1.0f / absmax : 0.0f;
#endif
}
GL_HD float adam8bit_normalize(float x, float absmax, float inverse) {
    if (!(absmax > 0.0f)) return 0.0f;
#ifdef __CUDA_ARCH__
    return isinf(inverse) ? __fdiv_rn(x, absmax) : __fmul_rn(x, inverse);
#else
    return std::isinf(inverse) ? x / absmax : x * inverse;
#endif
}

// Nearest code of x in a map whose bucket table is `table` (signed: kAdam8bitSignedEntries,
// half for x >= 0 first; unsigned: kAdam8bitUnsignedEntries), for x finite with |x| < 2 and,
// for the unsigned map, x >= +0 (not -0): what requantisation feeds it when the block's absmax
// and its reciprocal are finite and positive. About a dozen integer operations and one load.
template <bool Signed>
GL_HD int adam8bit_code_in_range(const uint32_t* table, float x) {
    using B = Adam8bitBuckets<Signed ? 6 : 7>;
    const uint32_t b = adam8bit_float_bits(x);
    int key = int((b & 0x7fffffffu) >> B::kLowBits) - int(B::kFirst);
    key = key < 0 ? 0 : key;
    uint32_t low = b & B::kLowMask;
    if constexpr (Signed) {
        const uint32_t neg = uint32_t(int32_t(b) >> 31);  // all ones for x < 0
        key += int(neg & uint32_t(B::kCount));
        low ^= neg & B::kLowMask;
    }
    const uint32_t e = table[key];
    return int(e >> 24) + int((e & 0xffffffu) < low);
}

// The same for every float (clamped into the end buckets; NaN -> 0; x < 0 -> 0 in the unsigned map).
template <bool Signed>
GL_HD int adam8bit_code(const uint32_t* table, float x) {
    using B = Adam8bitBuckets<Signed ? 6 : 7>;
    const uint32_t b = adam8bit_float_bits(x), a = b & 0x7fffffffu;
    if (a > 0x7f800000u) return 0;                  // NaN
    if (!Signed && (b >> 31) != 0) return 0;        // below the unsigned map's first code (0)
    const uint32_t last = (B::kFirst + B::kCount - 1) << B::kLowBits;  // first float of the last bucket
    return adam8bit_code_in_range<Signed>(table, adam8bit_float_bits_to_float((a < last ? a : last) | (b & 0x80000000u)));
}

// The tables for the two maps of adam8bit_qmap (built once, on first use).
const uint32_t* adam8bit_code_table(bool is_signed);

}  // namespace gl
