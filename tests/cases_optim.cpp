// Optimizer-step ops: the case outputs are the updated leaves themselves; the references are
// straightforward scalar ports of the published update rules.
#include <cmath>

#include "op_cases.h"

namespace gltest {
namespace {

using namespace gl;

std::vector<float> hyper_values(float step) { return {1e-2f, 0.9f, 0.999f, 1e-8f, 0.1f, step, 0.5f, 0.0f}; }

// PyTorch AdamW (decay first) or bitsandbytes order (decay after), one step, in double.
std::vector<std::vector<float>> adamw_reference(const std::vector<std::vector<float>>& in, bool after) {
    std::vector<float> p = in[0], m = in[2], v = in[3];
    const auto& g = in[1];
    const auto& h = in[4];
    double lr = h[0], b1 = h[1], b2 = h[2], eps = h[3], wd = h[4], t = h[5], gs = h[6];
    for (size_t i = 0; i < p.size(); i++) {
        double gi = double(g[i]) * gs, pi = p[i];
        if (!after) pi *= 1 - lr * wd;
        double mi = b1 * m[i] + (1 - b1) * gi, vi = b2 * v[i] + (1 - b2) * gi * gi;
        pi -= lr / (1 - std::pow(b1, t)) * mi / (std::sqrt(vi) / std::sqrt(1 - std::pow(b2, t)) + eps);
        if (after) pi *= 1 - lr * wd;
        p[i] = float(pi);
        m[i] = float(mi);
        v[i] = float(vi);
    }
    return {p, m, v};
}

void build_adamw(CaseBuilder& b, bool after) {
    b.compute = DType::f32;
    ValueId p = b.c("param", {4, 37});
    ValueId g = b.c("grad", {4, 37});
    ValueId m = b.c("m", {4, 37}, -0.1f, 0.1f);
    ValueId v = b.c("v", {4, 37}, 0.0f, 0.01f);
    ValueId h = b.c("hyper", {kHyperSize});
    b.set(h, hyper_values(3.0f));
    adamw_step(b.g, p, g, m, v, h, after);
    b.out(p);
    b.out(m);
    b.out(v);
}

Register r({
    {"adamw_step", "PyTorch order, one step",
     [](CaseBuilder& b) { build_adamw(b, false); },
     [](Graph& g) {
         ValueId p = g.param("p", DType::f32, {8});
         adamw_step(g, p, g.input("g", DType::f32, {7}), g.state("m", DType::f32, {8}), g.state("v", DType::f32, {8}),
                    g.input("h", DType::f32, {8}));
     },
     [](const std::vector<std::vector<float>>& in) { return adamw_reference(in, false); }, 1e-5},
    {"adamw_step", "bitsandbytes order (decay after)",
     [](CaseBuilder& b) { build_adamw(b, true); },
     [](Graph& g) {
         ValueId p = g.param("p", DType::bf16, {8});
         adamw_step(g, p, g.input("g", DType::bf16, {8}), g.state("m", DType::f32, {8}), g.state("v", DType::f32, {8}),
                    g.input("h", DType::f32, {8}));
     },
     [](const std::vector<std::vector<float>>& in) { return adamw_reference(in, true); }, 1e-5},
});

}  // namespace
}  // namespace gltest
