#include "ggml-lite/io/convert.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#include "ggml-lite/core/checked.h"
#include "ggml-lite/core/parallel.h"

namespace gl::io {

size_t stored_size(StoredType t) {
    switch (t) {
        case StoredType::f64: case StoredType::i64: return 8;
        case StoredType::f32: case StoredType::i32: return 4;
        case StoredType::f16: case StoredType::bf16: return 2;
        case StoredType::i8: case StoredType::u8: case StoredType::boolean: return 1;
    }
    fail("stored_size: invalid stored type ", int(t));
}

const char* stored_name(StoredType t) {
    switch (t) {
        case StoredType::f64: return "F64";
        case StoredType::f32: return "F32";
        case StoredType::f16: return "F16";
        case StoredType::bf16: return "BF16";
        case StoredType::i64: return "I64";
        case StoredType::i32: return "I32";
        case StoredType::i8: return "I8";
        case StoredType::u8: return "U8";
        case StoredType::boolean: return "BOOL";
    }
    return "invalid";
}

bool stored_is_float(StoredType t) {
    return t == StoredType::f64 || t == StoredType::f32 || t == StoredType::f16 || t == StoredType::bf16;
}

DType natural_dtype(StoredType t) {
    switch (t) {
        case StoredType::f64: case StoredType::f32: return DType::f32;
        case StoredType::f16: return DType::f16;
        case StoredType::bf16: return DType::bf16;
        case StoredType::i64: case StoredType::i32: return DType::i32;
        case StoredType::i8: return DType::i8;
        case StoredType::u8: case StoredType::boolean: return DType::u8;
    }
    fail("natural_dtype: invalid stored type ", int(t));
}

StoredType stored_of(DType t) {
    switch (t) {
        case DType::f32: return StoredType::f32;
        case DType::f16: return StoredType::f16;
        case DType::bf16: return StoredType::bf16;
        case DType::i32: return StoredType::i32;
        case DType::u8: return StoredType::u8;
        case DType::i8: return StoredType::i8;
        case DType::f8e4m3: break;  // quantized weights live in arenas only; no checkpoint holds them
    }
    fail("stored_of: no checkpoint type for dtype ", dtype_name(t));
}

namespace {

template <class T>
T load(const uint8_t* p) {
    T v;
    std::memcpy(&v, p, sizeof(T));
    return v;
}
template <class T>
void store(uint8_t* p, T v) {
    std::memcpy(p, &v, sizeof(T));
}

// f64 -> f32 rounded to odd: truncate toward zero, then set the last bit when anything was
// dropped. A later round-to-nearest-even to f16 or bf16 (11 and 8 significant bits, both far
// fewer than f32's 24) then gives the correctly rounded result, with no double rounding.
float f64_to_f32_odd(double d) {
    if (std::isnan(d)) return float(d);
    float f = float(d);
    if (std::fabs(double(f)) > std::fabs(d)) f = std::nextafter(f, 0.0f);
    if (double(f) != d) {
        f = std::bit_cast<float>(std::bit_cast<uint32_t>(f) | 1u);
    }
    return f;
}

// Reads element i of a strided run of a float stored type as f32 (exact except f64, which is
// rounded to odd unless the target is f32 itself).
template <StoredType From>
float load_float(const uint8_t* p, bool f64_nearest) {
    if constexpr (From == StoredType::f32) return load<float>(p);
    if constexpr (From == StoredType::f16) return f16_to_f32(load<uint16_t>(p));
    if constexpr (From == StoredType::bf16) return bf16_to_f32(load<uint16_t>(p));
    if constexpr (From == StoredType::f64) {
        double d = load<double>(p);
        return f64_nearest ? float(d) : f64_to_f32_odd(d);
    }
    return 0.0f;
}

template <StoredType From>
void float_run(const uint8_t* src, int64_t step, uint8_t* dst, DType to, int64_t n) {
    const bool nearest = to == DType::f32;
    switch (to) {
        case DType::f32:
            for (int64_t i = 0; i < n; i++) store<float>(dst + 4 * i, load_float<From>(src + i * step, nearest));
            return;
        case DType::f16:
            for (int64_t i = 0; i < n; i++)
                store<uint16_t>(dst + 2 * i, f32_to_f16(load_float<From>(src + i * step, nearest)));
            return;
        case DType::bf16:
            for (int64_t i = 0; i < n; i++)
                store<uint16_t>(dst + 2 * i, f32_to_bf16(load_float<From>(src + i * step, nearest)));
            return;
        default: return;
    }
}

bool convertible(StoredType from, DType to) {
    if (stored_is_float(from)) return dtype_is_float(to);
    switch (from) {
        case StoredType::i64: case StoredType::i32: return to == DType::i32;
        case StoredType::i8: return to == DType::i8;
        case StoredType::u8: case StoredType::boolean: return to == DType::u8;
        default: return false;
    }
}

// One run of n elements, src elements `step` bytes apart, dst contiguous.
void convert_run(const uint8_t* src, int64_t step, StoredType from, uint8_t* dst, DType to, int64_t n,
                 const std::string& what) {
    if (n <= 0) return;
    const size_t es = stored_size(from);
    if (from == stored_of(to)) {
        if (step == int64_t(es)) {
            std::memcpy(dst, src, size_t(n) * es);
        } else {
            for (int64_t i = 0; i < n; i++) std::memcpy(dst + size_t(i) * es, src + i * step, es);
        }
        return;
    }
    switch (from) {
        case StoredType::f32: return float_run<StoredType::f32>(src, step, dst, to, n);
        case StoredType::f16: return float_run<StoredType::f16>(src, step, dst, to, n);
        case StoredType::bf16: return float_run<StoredType::bf16>(src, step, dst, to, n);
        case StoredType::f64: return float_run<StoredType::f64>(src, step, dst, to, n);
        case StoredType::i64:
            for (int64_t i = 0; i < n; i++) {
                int64_t v = load<int64_t>(src + i * step);
                GL_CHECK(v >= INT32_MIN && v <= INT32_MAX, what, ": I64 value ", v, " does not fit in i32");
                store<int32_t>(dst + 4 * i, int32_t(v));
            }
            return;
        case StoredType::boolean:
            for (int64_t i = 0; i < n; i++) dst[i] = src[i * step] != 0 ? 1 : 0;
            return;
        default: fail(what, ": cannot convert ", stored_name(from), " to ", dtype_name(to));
    }
}

void check_convertible(StoredType from, DType to, const std::string& what) {
    if (convertible(from, to)) return;
    if (stored_is_float(from))
        fail(what, ": cannot read ", stored_name(from), " data as ", dtype_name(to),
             " (float tensors read only into f32, f16 or bf16)");
    fail(what, ": cannot read ", stored_name(from), " data as ", dtype_name(to),
         " (integer tensors read only into their own integer type; I64 into i32, BOOL into u8)");
}

}  // namespace

void convert_elements(const void* src, StoredType from, void* dst, DType to, int64_t n, const std::string& what) {
    check_convertible(from, to, what);
    const auto* s = static_cast<const uint8_t*>(src);
    auto* d = static_cast<uint8_t*>(dst);
    const size_t es = stored_size(from), ds = dtype_size(to);
    if (stored_is_float(from)) {  // float conversions cannot throw: split big tensors over threads
        parallel_for(n, int64_t(1) << 18, [&](int64_t lo, int64_t hi) {
            convert_run(s + size_t(lo) * es, int64_t(es), from, d + size_t(lo) * ds, to, hi - lo, what);
        });
        return;
    }
    convert_run(s, int64_t(es), from, d, to, n, what);
}

void gather_elements(const void* src, StoredType from, int64_t offset, const int64_t* sizes, const int64_t* strides,
                     int rank, void* dst, DType to, const std::string& what) {
    check_convertible(from, to, what);
    const int64_t numel = checked_numel(sizes, size_t(rank), what);
    if (numel == 0) return;
    const size_t es = stored_size(from), ds = dtype_size(to);
    const uint8_t* base = static_cast<const uint8_t*>(src) + size_t(offset) * es;
    uint8_t* out = static_cast<uint8_t*>(dst);
    if (rank == 0) return convert_run(base, int64_t(es), from, out, to, 1, what);
    // Rows along the last dimension, the outer dimensions walked by an odometer.
    const int64_t inner = sizes[rank - 1], step = strides[rank - 1] * int64_t(es);
    std::vector<int64_t> idx(size_t(rank), 0);
    int64_t at = 0;  // element offset of the current row's start
    for (int64_t row = 0, rows = numel / inner; row < rows; row++) {
        convert_run(base + at * int64_t(es), step, from, out + size_t(row * inner) * ds, to, inner, what);
        for (int d = rank - 2; d >= 0; d--) {
            if (++idx[size_t(d)] < sizes[d]) {
                at += strides[d];
                break;
            }
            at -= strides[d] * (sizes[d] - 1);
            idx[size_t(d)] = 0;
        }
    }
}

}  // namespace gl::io
