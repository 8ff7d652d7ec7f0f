// Normal draws from the counter-based generator (ops/rng.h), the same double on every backend:
// Box-Muller, sqrt(-2 ln u1) cos(2 pi u2) with u1 = 1 - U(c), u2 = U(c + 1), U the 53-bit uniforms
// of rng_hash: what diffusion::NoiseRng::normal() draws with the host's libm. Here the log and the cosine
// are our own, in double-double steps of round-to-nearest operations that no compiler may contract
// into fmas, so the host and the device get the same bits (CUDA's libm and glibc differ in the
// last bit). They are correctly rounded on all but about 1 in 10^5 inputs (checked against 160-bit
// references); glibc's log and cos differ from them on about 0.1 % of the draws, by one ulp, which
// rounding the normal to float hides unless the double lies within an ulp of a float's rounding
// boundary (about 2^-28 of those): tests/test_noise.cpp finds no float that differs from the libm
// formula's in 2^22 draws (none in 2^26 either, measured once).
#pragma once
#include <cstdint>
#include <cstring>

#include "ggml-lite/ops/rng.h"

#if defined(__GNUC__) && !defined(__clang__) && !defined(__CUDA_ARCH__)
#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")
#endif

namespace gl {
namespace rng_math {

// Round-to-nearest arithmetic that is never fused into an fma: intrinsics on the device; on the
// host one operation per function, with contraction off (the pragmas above and below).
#if defined(__clang__) && !defined(__CUDA_ARCH__)
#define GL_RNG_NO_CONTRACT _Pragma("clang fp contract(off)")
#else
#define GL_RNG_NO_CONTRACT
#endif
#if defined(__CUDA_ARCH__)
#define GL_RNG_OP(name, intrinsic, op)      \
    GL_HD double name(double a, double b) { \
        return intrinsic(a, b);             \
    }
#else
#define GL_RNG_OP(name, intrinsic, op)      \
    GL_HD double name(double a, double b) { \
        GL_RNG_NO_CONTRACT                  \
        return a op b;                      \
    }
#endif
GL_RNG_OP(add, __dadd_rn, +)
GL_RNG_OP(sub, __dsub_rn, -)
GL_RNG_OP(mul, __dmul_rn, *)
GL_RNG_OP(div, __ddiv_rn, /)
#undef GL_RNG_OP
#undef GL_RNG_NO_CONTRACT

GL_HD double sqrt(double a) {
#if defined(__CUDA_ARCH__)
    return __dsqrt_rn(a);
#else
    return __builtin_sqrt(a);
#endif
}
GL_HD uint64_t bits(double x) {
#if defined(__CUDA_ARCH__)
    return uint64_t(__double_as_longlong(x));
#else
    uint64_t b;
    std::memcpy(&b, &x, 8);
    return b;
#endif
}
GL_HD double from_bits(uint64_t b) {
#if defined(__CUDA_ARCH__)
    return __longlong_as_double((long long)b);
#else
    double x;
    std::memcpy(&x, &b, 8);
    return x;
#endif
}

// a + b (or a b) as an unevaluated pair (hi, lo) with hi the rounded result, exactly.
struct DD {
    double hi, lo;
};
GL_HD DD two_sum(double a, double b) {
    const double s = add(a, b), bb = sub(s, a);
    return {s, add(sub(a, sub(s, bb)), sub(b, bb))};
}
GL_HD DD fast_two_sum(double a, double b) {  // |a| >= |b|
    const double s = add(a, b);
    return {s, sub(b, sub(s, a))};
}
// Dekker's product through Veltkamp's 26-bit halves: exact without an fma instruction, which
// the host may lack (glibc's fma is then a slow software routine).
GL_HD DD split(double a) {
    const double c = mul(134217729.0, a);  // 2^27 + 1
    const double hi = sub(c, sub(c, a));
    return {hi, sub(a, hi)};
}
GL_HD DD two_prod(double a, double b) {
    const double p = mul(a, b);
    const DD x = split(a), y = split(b);
    const double err = add(add(add(sub(mul(x.hi, y.hi), p), mul(x.hi, y.lo)), mul(x.lo, y.hi)), mul(x.lo, y.lo));
    return {p, err};
}
GL_HD double madd(double a, double b, double c) { return add(mul(a, b), c); }

// Horner in z over c[0] + c[1] z + ... + c[n-1] z^(n-1).
template <int N>
GL_HD double horner(const double (&c)[N], double z) {
    double r = c[N - 1];
    for (int k = N - 2; k >= 0; k--) r = madd(r, z, c[k]);
    return r;
}

// Pair arithmetic, renormalised; lo * lo terms dropped (relative error about 2^-100).
GL_HD DD add_dd(DD a, DD b) {
    const DD s = two_sum(a.hi, b.hi);
    return fast_two_sum(s.hi, add(s.lo, add(a.lo, b.lo)));
}
GL_HD DD mul_dd(DD a, DD b) {
    const DD p = two_prod(a.hi, b.hi);
    return fast_two_sum(p.hi, add(p.lo, add(mul(a.hi, b.lo), mul(a.lo, b.hi))));
}
// c0 + z (c1 + z (c2 + z tail)) with pairs: the series' leading terms, the tail in double.
GL_HD DD series3(DD z, DD c0, DD c1, DD c2, double tail) {
    const DD t = add_dd(mul_dd(z, {tail, 0.0}), c2);
    return add_dd(mul_dd(z, add_dd(mul_dd(z, t), c1)), c0);
}

// ln x for a positive normal double. x = 2^e m with m in (sqrt(1/2), sqrt(2)]; ln m = 2 atanh(s)
// = 2 s + s^3 (2/3 + 2/5 s^2 + 2/7 s^4 + ...), s = (m - 1) / (m + 1), |s| <= 0.1716.
GL_HD double log(double x) {
    uint64_t b = bits(x);
    int e = int((b >> 52) & 0x7ff) - 1023;
    b = (b & 0x000fffffffffffffull) | 0x3ff0000000000000ull;  // m in [1, 2)
    if (b > 0x3ff6a09e667f3bcdull) {                             // m > sqrt(2): halve it
        b -= 0x0010000000000000ull;
        e += 1;
    }
    const double m = from_bits(b);
    const double f = sub(m, 1.0);       // exact (Sterbenz)
    const DD d = fast_two_sum(2.0, f);  // 2 + f
    const double s = div(f, d.hi);
    const DD q = two_prod(s, d.hi);  // f - s (d.hi + d.lo) = (f - q.hi) - q.lo - s d.lo, f - q.hi exact
    const DD sd = {s, div(sub(sub(sub(f, q.hi), q.lo), mul(s, d.lo)), d.hi)};
    const DD s2 = mul_dd(sd, sd);
    // 2 / (2k + 1) for k = 3 .. 11 in double, in powers of s^2.
    constexpr double c[9] = {2.0 / 7, 2.0 / 9, 2.0 / 11, 2.0 / 13, 2.0 / 15, 2.0 / 17, 2.0 / 19, 2.0 / 21, 2.0 / 23};
    const DD poly = series3(s2, {0.0, 0.0}, {0.6666666666666666, 3.700743415417188e-17},
                            {0.4, -2.2204460492503132e-17}, horner(c, s2.hi));  // 0 + 2/3 s^2 + 2/5 s^4 + ...
    const DD tail = mul_dd(sd, poly);  // s^3 (2/3 + ...)
    // e ln 2 with ln 2 = ln2_hi + ln2_lo, ln2_hi of 42 bits so that e ln2_hi is exact.
    constexpr double ln2_hi = 0.6931471805598903, ln2_lo = 5.497923018708371e-14;
    const double ed = double(e);
    const DD lead = two_sum(mul(ed, ln2_hi), mul(2.0, s));
    const DD sum = two_sum(lead.hi, tail.hi);
    const double small = add(add(mul(2.0, sd.lo), tail.lo), mul(ed, ln2_lo));
    return add(sum.hi, add(add(lead.lo, sum.lo), small));
}

// sin and cos of r = r_hi + r_lo, |r| <= pi/4 (a hair more where the quadrant's rounding moved
// it), by their Taylor series to r^21 / r^22: the first terms in pairs, the rest in double.
GL_HD double sin_reduced(double r, double r_lo) {
    const DD rd = {r, r_lo}, z = mul_dd(rd, rd);
    // -1/7!, 1/9!, ..., 1/21! in powers of r^2.
    constexpr double c[8] = {-1.0 / 5040,
                             1.0 / 362880,
                             -1.0 / 39916800,
                             1.0 / 6227020800,
                             -1.0 / 1307674368000,
                             1.0 / 355687428096000,
                             -1.0 / 121645100408832000.0,
                             1.0 / 51090942171709440000.0};
    const DD poly = series3(z, {0.0, 0.0}, {-0.16666666666666666, -9.25185853854297e-18},
                            {0.008333333333333333, 1.1564823173178714e-19}, horner(c, z.hi));  // -z/6 + z^2/120 ...
    const DD tail = mul_dd(rd, poly);
    const DD lead = fast_two_sum(r, tail.hi);
    return add(lead.hi, add(lead.lo, add(r_lo, tail.lo)));
}

GL_HD double cos_reduced(double r, double r_lo) {
    const DD rd = {r, r_lo}, z = mul_dd(rd, rd);
    // -1/10!, 1/12!, ..., -1/22! in powers of r^2.
    constexpr double c[7] = {-1.0 / 3628800,
                             1.0 / 479001600,
                             -1.0 / 87178291200,
                             1.0 / 20922789888000,
                             -1.0 / 6402373705728000,
                             1.0 / 2432902008176640000.0,
                             -1.0 / 1124000727777607680000.0};
    const DD inner = series3(z, {0.041666666666666664, 2.3129646346357427e-18},
                             {-0.001388888888888889, 5.300543954373577e-20}, {1.0 / 40320, 0.0},
                             horner(c, z.hi));  // 1/24 - z/720 + z^2/8! ...
    const DD tail = mul_dd(z, add_dd(mul_dd(z, inner), {-0.5, 0.0}));  // -z/2 + z^2/24 ...
    const DD lead = fast_two_sum(1.0, tail.hi);
    return add(lead.hi, add(lead.lo, tail.lo));
}

// cos x for 0 <= x < 2^20: r = x - k pi/2 with pi/2 in three parts (Cody and Waite), the
// products exact, then the quadrant's sin or cos of r.
GL_HD double cos(double x) {
    constexpr double two_over_pi = 0.6366197723675814;
    constexpr double pio2_1 = 1.5707963267948966, pio2_2 = 6.123233995736766e-17, pio2_3 = -1.4973849048591698e-33;
    const double k = double(int64_t(madd(x, two_over_pi, 0.5)));  // x >= 0: truncation rounds
    const DD p1 = two_prod(k, pio2_1);
    const DD a = two_sum(sub(x, p1.hi), -p1.lo);  // x - p1.hi is exact (Sterbenz, or k = 0)
    const DD p2 = two_prod(k, pio2_2);
    const DD r = two_sum(a.hi, -p2.hi);
    const DD rr = fast_two_sum(r.hi, sub(add(a.lo, r.lo), add(p2.lo, mul(k, pio2_3))));
    switch (int64_t(k) & 3) {
        case 0: return cos_reduced(rr.hi, rr.lo);
        case 1: return -sin_reduced(rr.hi, rr.lo);
        case 2: return -cos_reduced(rr.hi, rr.lo);
        default: return sin_reduced(rr.hi, rr.lo);
    }
}

}  // namespace rng_math

// U(c) of ops/rng.h at 53 bits: a multiple of 2^-53 in [0, 1), exactly.
GL_HD double rng_uniform53(uint64_t seed, uint64_t counter) {
    return double(rng_hash(seed, counter) >> 11) * (1.0 / 9007199254740992.0);
}

// N(0, 1) from draws counter and counter + 1 (diffusion::NoiseRng::normal takes the same two).
GL_HD double rng_normal(uint64_t seed, uint64_t counter) {
    const double u1 = rng_math::sub(1.0, rng_uniform53(seed, counter));  // in (0, 1]: the log is finite
    const double u2 = rng_uniform53(seed, counter + 1);
    constexpr double two_pi = 6.283185307179586;
    const double radius = rng_math::sqrt(-2.0 * rng_math::log(u1));
    return rng_math::mul(radius, rng_math::cos(rng_math::mul(two_pi, u2)));
}

// The draw input of normal_noise: i32 [>= kNoiseDrawSize] holding the generator's seed and
// position and the offset-noise strength, each 64 bits as two i32 halves, low half first (the
// offset as a double's bits). The host writes it per step; the rest of the tensor is the caller's.
enum NoiseDrawSlot { kNdSeed = 0, kNdCounter = 2, kNdOffset = 4, kNoiseDrawSize = 6 };

GL_HD uint64_t noise_draw_u64(const int32_t* draw, int slot) {
    return uint64_t(uint32_t(draw[slot])) | uint64_t(uint32_t(draw[slot + 1])) << 32;
}
GL_HD void noise_draw_set(int32_t* draw, int slot, uint64_t v) {
    draw[slot] = int32_t(uint32_t(v));
    draw[slot + 1] = int32_t(uint32_t(v >> 32));
}

// Element i of normal_noise's output, n elements of `batch` samples with `channels` innermost
// (NHWC): N(0, 1) from draws counter + 2i, rounded to float; with offset != 0 (kohya's
// noise_offset) plus offset * z, z one normal per (sample, channel) from the draws after the
// noise's, b-major: the order diffusion::fill_normal then train::apply_noise_offset draw them in.
GL_HD float noise_element(uint64_t seed, uint64_t counter, double offset, int64_t i, int64_t n, int64_t batch,
                          int64_t channels) {
    const float v = float(rng_normal(seed, counter + 2 * uint64_t(i)));
    if (offset == 0.0) return v;
    const int64_t b = i / (n / batch), c = i % channels;
    const double z = rng_math::mul(offset, rng_normal(seed, counter + 2 * uint64_t(n + b * channels + c)));
    return float(rng_math::add(double(v), z));
}

}  // namespace gl

#if defined(__GNUC__) && !defined(__clang__) && !defined(__CUDA_ARCH__)
#pragma GCC pop_options
#endif
