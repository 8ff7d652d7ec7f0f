// The op test table: every op in core/op_list.h has cases here (one cases_<family>.cpp per
// op family). A case builds a tiny graph around the op; the suite checks its gradients by
// finite differences (or, for ops without gradients, its outputs against a reference
// written here), checks that a bad call throws gl::Error, and (GPU) compares backends.
#pragma once
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "ggml-lite/core/graph.h"
#include "ggml-lite/ops/builder.h"

namespace gltest {

using gl::DType;
using gl::Graph;
using gl::Shape;
using gl::ValueId;

struct CaseBuilder {
    Graph g;
    // dtype the case computes in: x() and f32 c() leaves are cast to it (GPU parity runs bf16).
    DType compute = DType::f32;
    std::mt19937 rng{1234};
    std::vector<std::pair<ValueId, std::vector<float>>> data;  // initial leaf contents
    std::vector<ValueId> outs;

    // A differentiable f32 input (a parameter), uniform in [lo, hi).
    ValueId x(const std::string& name, const Shape& s, float lo = -1.0f, float hi = 1.0f);
    // A constant input (no gradient), uniform in [lo, hi), of any float dtype.
    ValueId c(const std::string& name, const Shape& s, float lo = -1.0f, float hi = 1.0f, DType t = DType::f32);
    // A constant input kept in dtype t whatever the compute dtype (a quantized weight's codes and
    // f32 scales); integer-valued for non-float t, as c() makes them.
    ValueId kept(const std::string& name, const Shape& s, float lo, float hi, DType t);
    // Integer ids in [0, n).
    ValueId ids(const std::string& name, const Shape& s, int n);
    // Replaces a leaf's initial contents.
    void set(ValueId v, std::vector<float> values);
    void out(ValueId y) { outs.push_back(y); }
    std::vector<float> random(int64_t n, float lo, float hi);

private:
    ValueId to_compute(ValueId leaf);
    std::vector<std::pair<ValueId, ValueId>> alias_;  // cast value -> its leaf
};

struct OpCase {
    std::string op;     // op name as in the op list
    std::string label;  // what this case covers
    std::function<void(CaseBuilder&)> build;
    // Must throw gl::Error (a shape or dtype misuse of this op).
    std::function<void(Graph&)> bad;
    // For ops without gradients: expected outputs from the leaves' initial data, in the
    // order of CaseBuilder::data. Left empty for differentiable ops.
    std::function<std::vector<std::vector<float>>(const std::vector<std::vector<float>>&)> reference;
    double tol = 2e-2;  // finite-difference (or reference) tolerance, relative to the largest value
    float fd_eps = 1e-2f;  // finite-difference step
};

// Registration: each cases_<family>.cpp holds `static Register r({...});`.
std::vector<OpCase>& registry();
struct Register {
    explicit Register(std::vector<OpCase> cs);
};

}  // namespace gltest
