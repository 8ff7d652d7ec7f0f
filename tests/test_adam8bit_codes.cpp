// The O(1) code search of 8-bit AdamW (ops/adam8bit_codes.h) against the binary search over the
// sorted maps, at every place its result can change: both ends of every bucket, a few floats
// around every threshold between codes, the codes themselves, special values, and random bit
// patterns over the whole float range. (The GPU suite repeats the comparison on all 2^32 floats.)
#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <random>
#include <vector>

#include "ggml-lite/ops/adam8bit_codes.h"
#include "ggml-lite/ops/builder.h"

using namespace gl;

namespace {

float from_bits(uint32_t b) { return std::bit_cast<float>(b); }

template <bool Signed>
int64_t count_mismatches(const std::vector<float>& xs) {
    const float* q = adam8bit_qmap(Signed);
    const uint32_t* t = adam8bit_code_table(Signed);
    int64_t bad = 0;
    for (float x : xs) {
        int want = adam8bit_quantize(q, x), got = adam8bit_code<Signed>(t, x);
        if (want != got && bad++ < 5) MESSAGE("x = ", x, " (bits ", adam8bit_float_bits(x), "): search ", want, ", table ", got);
        // the requantisation fast path's search, inside its domain
        if (std::isfinite(x) && std::fabs(x) < 2.0f && (Signed || !std::signbit(x))) {
            got = adam8bit_code_in_range<Signed>(t, x);
            if (want != got && bad++ < 5)
                MESSAGE("x = ", x, " (bits ", adam8bit_float_bits(x), "): search ", want, ", in-range table ", got);
        }
    }
    return bad;
}

// Floats within `ulps` of x on both sides (stepping through the bit patterns of its sign).
void around(std::vector<float>& out, float x, int ulps) {
    uint32_t b = adam8bit_float_bits(x);
    for (int d = -ulps; d <= ulps; d++) {
        int64_t c = int64_t(b & 0x7fffffffu) + d;
        if (c >= 0 && c < 0x7f800000) out.push_back(from_bits(uint32_t(c) | (b & 0x80000000u)));
    }
}

template <int M>
void bucket_edges(std::vector<float>& out) {
    using B = Adam8bitBuckets<M>;
    for (uint32_t k = 0; k <= uint32_t(B::kCount); k++) {
        uint32_t first = (k + B::kFirst) << B::kLowBits;
        for (float s : {1.0f, -1.0f}) {
            around(out, s * from_bits(first), 2);
            around(out, s * from_bits(first + B::kLowMask / 2), 1);
        }
    }
}

}  // namespace

TEST_CASE("adam8bit: the O(1) code search equals the binary search") {
    std::vector<float> xs = {0.0f, -0.0f, 1.0f, -1.0f, 2.0f, -2.0f, 1e-30f, -1e-30f, 1e-45f, -1e-45f, 3e38f, -3e38f,
                             INFINITY, -INFINITY, NAN, -NAN};
    bucket_edges<6>(xs);
    bucket_edges<7>(xs);
    for (bool s : {true, false}) {
        const float* q = adam8bit_qmap(s);
        for (int j = 0; j < 256; j++) {
            around(xs, q[j], 3);
            if (j < 255) {
                // the floats where the nearest code switches: around the midpoint, found by bisection
                float lo = q[j], hi = q[j + 1];
                for (int it = 0; it < 64 && adam8bit_float_bits(lo) + 1 < adam8bit_float_bits(hi); it++) {
                    float mid = lo + (hi - lo) / 2;
                    if (mid == lo || mid == hi) break;
                    (adam8bit_quantize(q, mid) == j ? lo : hi) = mid;
                }
                around(xs, lo, 3);
                around(xs, hi, 3);
            }
        }
    }
    std::mt19937 rng(8);
    for (int i = 0; i < 1 << 20; i++) {
        xs.push_back(from_bits(uint32_t(rng())));
        xs.push_back(std::uniform_real_distribution<float>(-1.1f, 1.1f)(rng));
        xs.push_back(std::ldexp(std::uniform_real_distribution<float>(0.5f, 1.0f)(rng), -int(rng() % 28)));
    }
    CHECK(count_mismatches<true>(xs) == 0);
    CHECK(count_mismatches<false>(xs) == 0);
    INFO(xs.size(), " values checked per map");
}

TEST_CASE("adam8bit: requantisation scales by one reciprocal per block") {
    CHECK(adam8bit_normalize(0.5f, 2.0f, adam8bit_inverse(2.0f)) == 0.25f);
    CHECK(adam8bit_normalize(3.0f, 0.0f, adam8bit_inverse(0.0f)) == 0.0f);
    // 1 / 1e-40 overflows to inf: the value is divided instead (no inf or NaN reaches the search)
    const float tiny = 1e-40f;
    CHECK(std::isinf(adam8bit_inverse(tiny)));
    CHECK(adam8bit_normalize(tiny, tiny, adam8bit_inverse(tiny)) == 1.0f);
    CHECK(adam8bit_normalize(-tiny / 2, tiny, adam8bit_inverse(tiny)) == -0.5f);
}
