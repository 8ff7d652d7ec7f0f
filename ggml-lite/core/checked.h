// Overflow-checked size arithmetic. Dimensions and byte counts come from untrusted files, configs
// and command lines; every product of dimensions and every byte count of a tensor goes through
// these, so that an overflow is an error naming its culprit instead of a wrapped (small) size
// that a later allocation or copy trusts.
#pragma once
#include <cstddef>
#include <cstdint>

#include "ggml-lite/core/error.h"

namespace gl {

// a * b and a + b into *out; false on signed 64-bit overflow.
inline bool mul_ok(int64_t a, int64_t b, int64_t* out) { return !__builtin_mul_overflow(a, b, out); }
inline bool add_ok(int64_t a, int64_t b, int64_t* out) { return !__builtin_add_overflow(a, b, out); }

// The same, throwing gl::Error "<what...>: <a> x <b> overflows 64 bits" on overflow.
template <class... What>
int64_t checked_mul(int64_t a, int64_t b, const What&... what) {
    int64_t r = 0;
    if (!mul_ok(a, b, &r)) fail(what..., ": ", a, " x ", b, " overflows 64 bits");
    return r;
}
template <class... What>
int64_t checked_add(int64_t a, int64_t b, const What&... what) {
    int64_t r = 0;
    if (!add_ok(a, b, &r)) fail(what..., ": ", a, " + ", b, " overflows 64 bits");
    return r;
}

// The element count of dims[0..n) (each >= 0), or gl::Error naming `what` and the dims.
template <class... What>
int64_t checked_numel(const int64_t* dims, size_t n, const What&... what) {
    int64_t r = 1;
    for (size_t i = 0; i < n; i++) {
        if (dims[i] < 0 || !mul_ok(r, dims[i], &r)) {
            std::string s = "[";
            for (size_t k = 0; k < n; k++) s += (k ? ", " : "") + std::to_string(dims[k]);
            fail(what..., ": shape ", s, "] ", dims[i] < 0 ? "has a negative dimension" : "has more than 2^63 elements");
        }
    }
    return r;
}

// numel elements of elem_size bytes, as a byte count that fits int64 (and so size_t), or gl::Error.
template <class... What>
int64_t checked_bytes(int64_t numel, size_t elem_size, const What&... what) {
    int64_t r = 0;
    if (numel < 0 || !mul_ok(numel, int64_t(elem_size), &r))
        fail(what..., ": ", numel, " elements of ", elem_size, " bytes exceed 2^63 bytes");
    return r;
}

}  // namespace gl
