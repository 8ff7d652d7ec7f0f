// Lion op cases: the reference is lion-pytorch's update_fn written out per element.
#include <cmath>
#include <vector>

#include "op_cases.h"

namespace gltest {
namespace {

using namespace gl;

// in: param, grad, m, hyper[, gstat] (then the harness's projection leaves)
std::vector<std::vector<float>> lion_reference(const std::vector<std::vector<float>>& in, bool has_gstat) {
    std::vector<float> p = in[0], m = in[2];
    const auto& g = in[1];
    const auto& h = in[3];
    if (has_gstat && in[4][1] != 0.0f) return {p, m};
    double mul = has_gstat ? in[4][0] : 1.0;
    double lr = h[0], b1 = h[1], b2 = h[2], wd = h[4], gs = h[6];
    for (size_t i = 0; i < p.size(); i++) {
        double gi = double(g[i]) * gs * mul;
        double c = b1 * m[i] + (1 - b1) * gi;
        double u = c > 0 ? 1.0 : (c < 0 ? -1.0 : 0.0);
        p[i] = float(double(p[i]) * (1 - lr * wd) - lr * u);
        m[i] = float(b2 * m[i] + (1 - b2) * gi);
    }
    return {p, m};
}

void build_lion(CaseBuilder& b, int64_t n, float gstat_flag) {
    ValueId p = b.c("param", {n});
    ValueId g = b.c("grad", {n});
    ValueId m = b.c("m", {n}, -0.1f, 0.1f);
    ValueId h = b.c("hyper", {kHyperSize});
    b.set(h, {1e-3f, 0.9f, 0.99f, 0.0f, 0.1f, 5.0f, 0.5f, 0.0f});
    ValueId gs = kNoValue;
    if (gstat_flag >= 0.0f) {
        gs = b.c("gstat", {kGstatSize});
        b.set(gs, {0.5f, gstat_flag, 1.0f, 1.0f});
    }
    lion_step(b.g, p, g, m, h, gs);
    b.out(p);
    b.out(m);
}

// Three tensors of one group in one node, leaves tensor by tensor (param, grad, m), then hyper and
// a gstat leaf; each checked as the single-tensor reference sees it.
void build_lion_multi(CaseBuilder& b) {
    std::vector<ValueId> ps, gs, ms;
    for (int64_t n : {5, 2049, 300}) {
        ps.push_back(b.c("param", {n}));
        gs.push_back(b.c("grad", {n}));
        ms.push_back(b.c("m", {n}, -0.1f, 0.1f));
    }
    ValueId h = b.c("hyper", {kHyperSize});
    b.set(h, {1e-3f, 0.9f, 0.99f, 0.0f, 0.1f, 5.0f, 0.5f, 0.0f});
    ValueId st = b.c("gstat", {kGstatSize});
    b.set(st, {0.5f, 0.0f, 1.0f, 1.0f});
    lion_step(b.g, ps, gs, ms, h, st);
    for (size_t k = 0; k < ps.size(); k++) {
        b.out(ps[k]);
        b.out(ms[k]);
    }
}

std::vector<std::vector<float>> lion_multi_reference(const std::vector<std::vector<float>>& in) {
    std::vector<std::vector<float>> out;
    for (size_t k = 0; k < 3; k++) {
        std::vector<std::vector<float>> one(in.begin() + long(3 * k), in.begin() + long(3 * k + 3));
        one.push_back(in[9]);
        one.push_back(in[10]);
        for (auto& t : lion_reference(one, true)) out.push_back(std::move(t));
    }
    return out;
}

Register r({
    {"lion_step", "three tensors of one group in one node",
     [](CaseBuilder& b) { build_lion_multi(b); },
     [](Graph& g) {
         const std::vector<ValueId> p{g.param("p", DType::f32, {8})}, grad{g.input("g", DType::f32, {8})}, none;
         lion_step(g, p, grad, none, g.input("h", DType::f32, {8}));
     },
     lion_multi_reference, 1e-6},
    {"lion_step", "one step, ragged size",
     [](CaseBuilder& b) { build_lion(b, 1000 + 3, -1.0f); },
     [](Graph& g) {
         lion_step(g, g.param("p", DType::f32, {8}), g.input("g", DType::f32, {8}), g.state("m", DType::f32, {9}),
                   g.input("h", DType::f32, {8}));
     },
     [](const std::vector<std::vector<float>>& in) { return lion_reference(in, false); }, 1e-6},
    {"lion_step", "gstat multiplier",
     [](CaseBuilder& b) { build_lion(b, 77, 0.0f); },
     [](Graph& g) {
         lion_step(g, g.param("p", DType::f32, {8}), g.input("g", DType::f32, {8}), g.state("m", DType::f32, {8}),
                   g.input("h", DType::f32, {7}));
     },
     [](const std::vector<std::vector<float>>& in) { return lion_reference(in, true); }, 1e-6},
    {"lion_step", "gstat non-finite flag: nothing changes",
     [](CaseBuilder& b) { build_lion(b, 77, 1.0f); },
     [](Graph& g) {
         lion_step(g, g.param("p", DType::f32, {8}), g.input("g", DType::f32, {8}), g.state("m", DType::f32, {8}),
                   g.input("h", DType::f32, {8}), g.input("gs", DType::i32, {4}));
     },
     [](const std::vector<std::vector<float>>& in) { return lion_reference(in, true); }, 0.0},
});

}  // namespace
}  // namespace gltest
