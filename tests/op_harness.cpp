#include "op_harness.h"

#include <algorithm>
#include <cmath>

#include "ggml-lite/core/error.h"

namespace gltest {

std::vector<float> CaseBuilder::random(int64_t n, float lo, float hi) {
    std::uniform_real_distribution<float> u(lo, hi);
    std::vector<float> v(static_cast<size_t>(n));
    for (auto& e : v) e = u(rng);
    return v;
}

ValueId CaseBuilder::to_compute(ValueId leaf) {
    if (compute == DType::f32) return leaf;
    ValueId v = gl::cast(g, leaf, compute);
    alias_.emplace_back(v, leaf);
    return v;
}

// Leaf sizes are read back from the graph: s may refer into g.values (g.shape(y)), which
// creating the leaf reallocates.
ValueId CaseBuilder::x(const std::string& name, const Shape& s, float lo, float hi) {
    ValueId v = g.param(name, DType::f32, s);
    data.emplace_back(v, random(g.v(v).numel(), lo, hi));
    return to_compute(v);
}

ValueId CaseBuilder::c(const std::string& name, const Shape& s, float lo, float hi, DType t) {
    ValueId v = g.weight(name, t, s);
    std::vector<float> d = random(g.v(v).numel(), lo, hi);
    if (!gl::dtype_is_float(t))
        for (auto& e : d) e = std::floor(e);  // integer leaves hold integers, as references expect
    data.emplace_back(v, std::move(d));
    return t == DType::f32 ? to_compute(v) : v;
}

ValueId CaseBuilder::kept(const std::string& name, const Shape& s, float lo, float hi, DType t) {
    ValueId v = g.weight(name, t, s);
    std::vector<float> d = random(g.v(v).numel(), lo, hi);
    if (!gl::dtype_is_float(t))
        for (auto& e : d) e = std::floor(e);
    data.emplace_back(v, std::move(d));
    return v;
}

ValueId CaseBuilder::ids(const std::string& name, const Shape& s, int n) {
    ValueId v = g.input(name, DType::i32, s);
    std::uniform_int_distribution<int> u(0, n - 1);
    std::vector<float> d(static_cast<size_t>(g.v(v).numel()));
    for (auto& e : d) e = float(u(rng));
    data.emplace_back(v, d);
    return v;
}

void CaseBuilder::set(ValueId v, std::vector<float> values) {
    for (auto& [cast_id, leaf] : alias_)
        if (cast_id == v) v = leaf;
    for (auto& [id, d] : data)
        if (id == v) {
            GL_CHECK(values.size() == d.size(), "CaseBuilder::set: size mismatch");
            d = std::move(values);
            return;
        }
    gl::fail("CaseBuilder::set: not a leaf of this case");
}

std::vector<OpCase>& registry() {
    static std::vector<OpCase> r;
    return r;
}

Register::Register(std::vector<OpCase> cs) {
    for (auto& c : cs) registry().push_back(std::move(c));
}

std::unique_ptr<BuiltCase> build_case(const OpCase& c, bool with_backward, DType compute) {
    auto bc = std::make_unique<BuiltCase>();
    CaseBuilder& b = bc->b;
    b.compute = compute;
    c.build(b);
    GL_CHECK(!b.outs.empty(), "case ", c.op, "/", c.label, " has no outputs");
    Graph& g = b.g;
    ValueId loss = gl::kNoValue;
    for (size_t k = 0; k < b.outs.size(); k++) {
        ValueId y = b.outs[k];
        if (!gl::dtype_is_float(g.dtype(y))) continue;
        ValueId yf = gl::cast(g, y, DType::f32);
        DType compute = b.compute;
        b.compute = DType::f32;  // the projection stays f32
        ValueId r = b.c(gl::cat("proj", k), g.shape(y), -1.0f, 1.0f);
        b.compute = compute;
        ValueId term = gl::sum(g, gl::mul(g, yf, r));
        loss = loss == gl::kNoValue ? term : gl::add(g, loss, term);
    }
    for (ValueId y : b.outs) g.mark_output(y);
    if (loss != gl::kNoValue) g.mark_output(loss);
    bc->loss = loss;
    for (auto& [v, d] : b.data)
        if (g.v(v).role == gl::Role::param) bc->params.push_back(v);
    bc->forward = g;
    if (with_backward && loss != gl::kNoValue && !bc->params.empty()) bc->grads = gl::backward(g, loss);
    return bc;
}

void bind_leaves(gl::Runtime& rt, const CaseBuilder& b) {
    for (auto& [v, d] : b.data) rt.write_f32(v, d);
}

double rel_err(const std::vector<float>& a, const std::vector<float>& b, double floor) {
    GL_CHECK(a.size() == b.size(), "rel_err: sizes differ");
    double num = 0, den = floor;
    for (size_t i = 0; i < a.size(); i++) {
        num = std::max(num, std::fabs(double(a[i]) - double(b[i])));
        den = std::max(den, std::fabs(double(b[i])));
    }
    return num / den;
}

}  // namespace gltest
