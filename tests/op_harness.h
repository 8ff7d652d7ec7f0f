// Runs an OpCase: builds its graph plus a random projection loss, differentiates it,
// plans it and executes it on a runtime.
#pragma once
#include <memory>

#include "ggml-lite/core/autodiff.h"
#include "ggml-lite/core/runtime.h"
#include "op_cases.h"

namespace gltest {

struct BuiltCase {
    CaseBuilder b;
    Graph forward;                  // the case graph with its loss, before backward
    ValueId loss = gl::kNoValue;
    std::vector<ValueId> params;    // differentiable leaves
    gl::Gradients grads;
    std::vector<ValueId> grad_helpers_used;
};

// Builds the case and its loss = sum_k sum(out_k * R_k) (R_k fixed random constants),
// then appends the backward pass when with_backward.
std::unique_ptr<BuiltCase> build_case(const OpCase& c, bool with_backward, DType compute = DType::f32);
// Writes every leaf's initial data.
void bind_leaves(gl::Runtime& rt, const CaseBuilder& b);
// max_i |a_i - b_i| / max(floor, max_i |b_i|)
double rel_err(const std::vector<float>& a, const std::vector<float>& b, double floor = 1e-3);

}  // namespace gltest
