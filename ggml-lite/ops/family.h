// Shared includes and small helpers for op family files.
#pragma once
#include <cmath>
#include <cstring>
#include <vector>

#include "ggml-lite/core/autodiff.h"
#include "ggml-lite/core/cpu_kernel.h"
#include "ggml-lite/core/error.h"
#include "ggml-lite/core/graph.h"
#include "ggml-lite/core/parallel.h"
#include "ggml-lite/ops/builder.h"

namespace gl {

// Gives every def_<name> external linkage (a namespace-scope const is otherwise internal).
#define GL_X(name, family) extern const OpDef def_##name;
GL_OP_LIST(GL_X)
#undef GL_X

inline OutSpec dense(DType t, const Shape& s) { return OutSpec{t, Layout::contiguous(s)}; }

inline Shape shape_from_params(const Params& p, int first = 0) {
    Shape s;
    s.nd = int(p.i[size_t(first + 4)]);
    for (int k = 0; k < s.nd; k++) s.d[size_t(k)] = p.i[size_t(first + k)];
    return s;
}
// Stores a shape in p.i[first .. first+4] (dims, then nd).
inline void shape_to_params(Params& p, const Shape& s, int first = 0) {
    for (int k = 0; k < kMaxDims; k++) p.i[size_t(first + k)] = s.d[size_t(k)];
    p.i[size_t(first + 4)] = s.nd;
}

// Bytes of value i of a call (numel * dtype size).
inline double call_bytes_in(const OpCall& c, int i) { return double(c.shape(i).numel()) * double(dtype_size(c.dtype(i))); }
inline double call_bytes_all_in(const OpCall& c) {
    double b = 0;
    for (int i = 0; i < c.n_in(); i++) b += call_bytes_in(c, i);
    return b;
}

}  // namespace gl
