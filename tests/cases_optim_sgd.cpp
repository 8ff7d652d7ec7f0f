// SGD (momentum, Nesterov) op cases. The reference is torch.optim.SGD's single-tensor step written out
// per element in double.
#include <cmath>

#include "op_cases.h"

namespace gltest {
namespace {

using namespace gl;

struct SgdCase {
    float momentum = 0.9f, dampening = 0.0f, step = 5.0f, gstat = -1.0f;  // gstat < 0: none; else its flag
    bool nesterov = true;
};

// in: param, grad, buf, hyper[, gstat]
std::vector<std::vector<float>> sgd_reference(const SgdCase& k, const std::vector<std::vector<float>>& in) {
    std::vector<float> p = in[0], buf = in[2];
    const auto& g = in[1];
    const auto& h = in[3];
    if (k.gstat >= 0 && in[4][1] != 0.0f) return {p, buf};
    const double mul = k.gstat >= 0 ? in[4][0] : 1.0;
    const double lr = h[0], wd = h[4], gs = h[6], mom = k.momentum;
    for (size_t i = 0; i < p.size(); i++) {
        const double gi = double(g[i]) * gs * mul + wd * p[i];
        const double b = h[5] == 1.0f ? gi : mom * buf[i] + (1.0 - k.dampening) * gi;
        const double step = k.nesterov ? gi + mom * b : b;
        p[i] = float(p[i] - lr * step);
        buf[i] = float(b);
    }
    return {p, buf};
}

void build_sgd(CaseBuilder& b, const SgdCase& k, int64_t n) {
    ValueId p = b.c("param", {n});
    ValueId g = b.c("grad", {n});
    ValueId buf = b.c("buf", {n}, -0.1f, 0.1f);
    ValueId h = b.c("hyper", {kHyperSize});
    b.set(h, {1e-2f, 0.0f, 0.0f, 0.0f, 0.05f, k.step, 0.5f, 0.0f});
    ValueId gs = kNoValue;
    if (k.gstat >= 0.0f) {
        gs = b.c("gstat", {kGstatSize});
        b.set(gs, {0.5f, k.gstat, 1.0f, 1.0f});
    }
    sgd_step(b.g, p, g, buf, h, k.momentum, k.dampening, k.nesterov, gs);
    b.out(p);
    b.out(buf);
}

OpCase sgd_case(const std::string& label, SgdCase k, int64_t n, std::function<void(Graph&)> bad, double tol = 1e-6) {
    return {"sgd_step", label, [k, n](CaseBuilder& b) { build_sgd(b, k, n); }, std::move(bad),
            [k](const std::vector<std::vector<float>>& in) { return sgd_reference(k, in); }, tol};
}

SgdCase first_step() {
    SgdCase k;
    k.step = 1.0f;
    return k;
}
SgdCase plain_momentum() {
    SgdCase k;
    k.nesterov = false;
    k.dampening = 0.1f;
    k.momentum = 0.5f;
    k.gstat = 0.0f;
    return k;
}
SgdCase skipped() {
    SgdCase k;
    k.gstat = 1.0f;
    return k;
}

Register r({
    sgd_case("Nesterov, weight decay, ragged size", SgdCase{}, 1000 + 3,
             [](Graph& g) {  // buf of another size
                 sgd_step(g, g.param("p", DType::f32, {8}), g.input("g", DType::f32, {8}), g.state("b", DType::f32, {9}),
                          g.input("h", DType::f32, {8}), 0.9f, 0.0f, true);
             }),
    sgd_case("first step: the buffer starts as the gradient", first_step(), 77,
             [](Graph& g) {  // Nesterov with dampening
                 sgd_step(g, g.param("p", DType::f32, {8}), g.input("g", DType::f32, {8}), g.state("b", DType::f32, {8}),
                          g.input("h", DType::f32, {8}), 0.9f, 0.1f, true);
             }),
    sgd_case("plain momentum with dampening, gstat multiplier", plain_momentum(), 300,
             [](Graph& g) {  // no momentum
                 sgd_step(g, g.param("p", DType::f32, {8}), g.input("g", DType::f32, {8}), g.state("b", DType::f32, {8}),
                          g.input("h", DType::f32, {8}), 0.0f, 0.0f, false);
             }),
    sgd_case("gstat non-finite flag: nothing changes", skipped(), 50,
             [](Graph& g) {
                 sgd_step(g, g.param("p", DType::f32, {8}), g.input("g", DType::f32, {8}), g.state("b", DType::f32, {8}),
                          g.input("h", DType::f32, {7}), 0.9f, 0.0f, true);
             },
             0.0),
});

}  // namespace
}  // namespace gltest
