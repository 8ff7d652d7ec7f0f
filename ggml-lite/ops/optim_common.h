// Input checks and cost shared by the optimizer-step families (ops/optim.cpp, ops/adam8bit.cpp).
#pragma once
#include "ggml-lite/ops/family.h"

namespace gl {

inline void check_state_f32(const OpCall& c, int i, const char* what) {
    c.check(c.dtype(i) == DType::f32, cat(what, " must be f32"));
    c.check(c.layout(i).is_contiguous() && c.g.v(c.in[size_t(i)]).base == c.in[size_t(i)], cat(what, " must be a dense storage owner"));
}

inline void check_hyper_input(const OpCall& c, int i) {
    check_state_f32(c, i, "hyper");
    c.check(c.shape(i).numel() == kHyperSize, cat("hyper must hold ", int(kHyperSize), " floats"));
}

inline Cost step_cost(const OpCall& c) { return {12.0 * double(c.shape(0).numel()), call_bytes_all_in(c) * 1.6}; }

}  // namespace gl
