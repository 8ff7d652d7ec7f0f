#include "ggml-lite/core/shape.h"

#include <ostream>

#include "ggml-lite/core/checked.h"

namespace gl {

Shape::Shape(std::initializer_list<int64_t> dims) {
    GL_CHECK(dims.size() <= kMaxDims, "Shape: at most ", kMaxDims, " dims, got ", dims.size());
    nd = int(dims.size());
    int i = 0;
    for (int64_t v : dims) {
        GL_CHECK(v >= 0, "Shape: negative dimension ", v);
        d[i++] = v;
    }
}

Shape Shape::of(const std::vector<int64_t>& dims) {
    GL_CHECK(dims.size() <= kMaxDims, "Shape: at most ", kMaxDims, " dims, got ", dims.size());
    Shape s;
    s.nd = int(dims.size());
    for (int i = 0; i < s.nd; i++) {
        GL_CHECK(dims[i] >= 0, "Shape: negative dimension ", dims[i]);
        s.d[i] = dims[i];
    }
    return s;
}

int64_t Shape::numel() const {
    int64_t n = 1;
    for (int i = 0; i < nd; i++)
        if (!mul_ok(n, d[i], &n)) fail("shape ", str(), " has more than 2^63 elements");
    return n;
}

bool Shape::operator==(const Shape& o) const {
    if (nd != o.nd) return false;
    for (int i = 0; i < nd; i++)
        if (d[i] != o.d[i]) return false;
    return true;
}

std::string Shape::str() const {
    std::string s = "[";
    for (int i = 0; i < nd; i++) {
        if (i) s += ", ";
        s += std::to_string(d[i]);
    }
    return s + "]";
}

std::ostream& operator<<(std::ostream& os, const Shape& s) { return os << s.str(); }

Layout Layout::contiguous(const Shape& s) {
    Layout l;
    l.shape = s;
    int64_t st = 1;
    for (int i = s.nd - 1; i >= 0; i--) {
        l.stride[i] = st;
        if (!mul_ok(st, s.d[i], &st)) fail("shape ", s.str(), " has more than 2^63 elements");
    }
    return l;
}

bool Layout::is_contiguous() const {
    int64_t st = 1;
    for (int i = shape.nd - 1; i >= 0; i--) {
        if (shape.d[i] != 1 && stride[i] != st) return false;
        if (!mul_ok(st, shape.d[i], &st)) return false;
    }
    return true;
}

int64_t Layout::span() const {
    if (shape.numel() == 0) return 0;
    int64_t hi = offset, step = 0;
    bool ok = true;
    for (int i = 0; i < shape.nd && ok; i++) ok = mul_ok(shape.d[i] - 1, stride[i], &step) && add_ok(hi, step, &hi);
    GL_CHECK(ok && add_ok(hi, 1, &hi), "layout ", shape.str(), ": the span of its strides overflows 64 bits");
    return hi;
}

int64_t Layout::index_of(int64_t i) const {
    int64_t idx = offset;
    for (int k = shape.nd - 1; k >= 0; k--) {
        int64_t n = shape.d[k];
        idx += (i % n) * stride[k];
        i /= n;
    }
    return idx;
}

bool try_broadcast(const Shape& a, const Shape& b, Shape* out) {
    Shape r;
    r.nd = a.nd > b.nd ? a.nd : b.nd;
    for (int i = 0; i < r.nd; i++) {
        int ia = a.nd - r.nd + i, ib = b.nd - r.nd + i;
        int64_t da = ia >= 0 ? a.d[size_t(ia)] : 1, db = ib >= 0 ? b.d[size_t(ib)] : 1;
        if (da != db && da != 1 && db != 1) return false;
        r.d[size_t(i)] = da == 1 ? db : da;
    }
    *out = r;
    return true;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
    Shape out;
    GL_CHECK(try_broadcast(a, b, &out), op, ": shapes ", a.str(), " and ", b.str(), " do not broadcast");
    return out;
}

int norm_axis(int axis, int nd, const char* op) {
    int a = axis < 0 ? axis + nd : axis;
    GL_CHECK(a >= 0 && a < nd, op, ": axis ", axis, " out of range for ", nd, " dims");
    return a;
}

}  // namespace gl
