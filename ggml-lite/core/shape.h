// Shapes (up to 4 dims, outermost first, PyTorch order) and strided layouts.
#pragma once
#include <array>
#include <cstdint>
#include <initializer_list>
#include <iosfwd>
#include <string>
#include <vector>

namespace gl {

constexpr int kMaxDims = 4;

struct Shape {
    int nd = 0;
    std::array<int64_t, kMaxDims> d{1, 1, 1, 1};

    Shape() = default;
    Shape(std::initializer_list<int64_t> dims);
    static Shape of(const std::vector<int64_t>& dims);

    int64_t numel() const;  // throws gl::Error when the count exceeds int64
    int64_t operator[](int i) const { return d[i]; }
    int64_t& operator[](int i) { return d[i]; }
    // Dimension counted from the end when negative (-1 = last).
    int64_t dim(int i) const { return d[i < 0 ? nd + i : i]; }
    int64_t last() const { return nd ? d[nd - 1] : 1; }
    std::vector<int64_t> vec() const { return {d.begin(), d.begin() + nd}; }
    bool operator==(const Shape& o) const;
    bool operator!=(const Shape& o) const { return !(*this == o); }
    std::string str() const;  // "[2, 3, 4]"
};
std::ostream& operator<<(std::ostream& os, const Shape& s);  // as str()

// Element strides and an element offset into the storage of a base value.
struct Layout {
    Shape shape;
    std::array<int64_t, kMaxDims> stride{0, 0, 0, 0};
    int64_t offset = 0;

    static Layout contiguous(const Shape& s);
    bool is_contiguous() const;
    // Number of storage elements spanned, from offset to the last element + 1.
    int64_t span() const;
    // Storage index of the element with logical (row-major) index i.
    int64_t index_of(int64_t i) const;
};

// Shape of broadcasting a and b (NumPy rules, aligned at the last dim); throws on mismatch.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);
// The same without throwing: false when a and b do not broadcast.
bool try_broadcast(const Shape& a, const Shape& b, Shape* out);
// Normalises axis (negative counts from the end) and checks range.
int norm_axis(int axis, int nd, const char* op);

}  // namespace gl
