// Lion op cases: the reference is lion-pytorch's update_fn written out per element.
#include <cmath>

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

Register r({
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
