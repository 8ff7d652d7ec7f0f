// Optimizer-step ops: the case outputs are the updated leaves themselves; the references are
// straightforward scalar ports of the published update rules. Also grad_stats, the global gradient
// statistics (gstat) every step op can take; here gstat is a leaf so its two effects (the gradient
// factor, the skip flag) are tested on their own.
#include <cmath>
#include <vector>

#include "op_cases.h"

namespace gltest {
namespace {

using namespace gl;

std::vector<float> hyper_values(float step) { return {1e-2f, 0.9f, 0.999f, 1e-8f, 0.1f, step, 0.5f, 0.0f}; }

// PyTorch AdamW (decay first) or bitsandbytes order (decay after), one step, in double. With a gstat
// leaf (in[5]): the gradient is also multiplied by gstat[0], and gstat[1] != 0 changes nothing. (The
// harness appends its projection leaves to `in`, so the case says whether gstat is there.)
std::vector<std::vector<float>> adamw_reference(const std::vector<std::vector<float>>& in, bool after,
                                                bool has_gstat = false) {
    std::vector<float> p = in[0], m = in[2], v = in[3];
    const auto& g = in[1];
    const auto& h = in[4];
    double mul = has_gstat ? in[5][0] : 1.0;
    if (has_gstat && in[5][1] != 0.0f) return {p, m, v};
    double lr = h[0], b1 = h[1], b2 = h[2], eps = h[3], wd = h[4], t = h[5], gs = h[6];
    for (size_t i = 0; i < p.size(); i++) {
        double gi = double(g[i]) * gs * mul, pi = p[i];
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

// gstat_flag < 0: no gstat input; else a gstat leaf {0.25, flag, 1, 4}.
void build_adamw(CaseBuilder& b, bool after, float gstat_flag = -1.0f) {
    b.compute = DType::f32;
    ValueId p = b.c("param", {4, 37});
    ValueId g = b.c("grad", {4, 37});
    ValueId m = b.c("m", {4, 37}, -0.1f, 0.1f);
    ValueId v = b.c("v", {4, 37}, 0.0f, 0.01f);
    ValueId h = b.c("hyper", {kHyperSize});
    b.set(h, hyper_values(3.0f));
    ValueId gs = kNoValue;
    if (gstat_flag >= 0.0f) {
        gs = b.c("gstat", {kGstatSize});
        b.set(gs, {0.25f, gstat_flag, 1.0f, 4.0f});
    }
    adamw_step(b.g, p, g, m, v, h, after, gs);
    b.out(p);
    b.out(m);
    b.out(v);
}

// Sum of squares over the three gradients, clip, unscale (in[3]: the loss scale, when given).
std::vector<std::vector<float>> grad_stats_reference(const std::vector<std::vector<float>>& in, bool has_ls,
                                                     float max_norm) {
    const size_t n_grads = 3;
    double ss = 0;
    for (size_t k = 0; k < n_grads; k++)
        for (float x : in[k]) ss += double(x) * double(x);
    double ls = has_ls ? in[3][0] : 1.0;
    double norm = std::sqrt(ss) / ls;
    double coef = max_norm > 0 ? std::min(1.0, max_norm / (norm + 1e-6)) : 1.0;
    return {{float(coef / ls), 0.0f, float(norm), float(ls)}};
}

// Three gradients, one over 4096 elements (several partial blocks on CUDA), one of one element.
void build_grad_stats(CaseBuilder& b, bool has_ls, float max_norm) {
    std::vector<ValueId> grads = {b.c("g0", {5000}, -0.5f, 0.5f), b.c("g1", {3, 7}), b.c("g2", {1})};
    ValueId ls = kNoValue;
    if (has_ls) {
        ls = b.c("loss_scale", {1});
        b.set(ls, {1024.0f});
    }
    b.out(grad_stats(b.g, grads, ls, max_norm));
}

// `sizes.size()` tensors of one group in one node, leaves made tensor by tensor (param, grad, m, v),
// then hyper and an optional gstat leaf {0.25, 0, 1, 4}; outputs param, m, v of each tensor.
void build_adamw_multi(CaseBuilder& b, const std::vector<int64_t>& sizes, bool after, bool gstat) {
    b.compute = DType::f32;
    std::vector<ValueId> ps, gs, ms, vs;
    for (int64_t n : sizes) {
        ps.push_back(b.c("param", {n}));
        gs.push_back(b.c("grad", {n}));
        ms.push_back(b.c("m", {n}, -0.1f, 0.1f));
        vs.push_back(b.c("v", {n}, 0.0f, 0.01f));
    }
    ValueId h = b.c("hyper", {kHyperSize});
    b.set(h, hyper_values(3.0f));
    ValueId st = kNoValue;
    if (gstat) {
        st = b.c("gstat", {kGstatSize});
        b.set(st, {0.25f, 0.0f, 1.0f, 4.0f});
    }
    adamw_step(b.g, ps, gs, ms, vs, h, after, st);
    for (size_t k = 0; k < sizes.size(); k++)
        for (ValueId x : {ps[k], ms[k], vs[k]}) b.out(x);
}

// Each tensor of a multi-tensor case as the single-tensor reference sees it.
std::vector<std::vector<float>> adamw_multi_reference(const std::vector<std::vector<float>>& in, size_t count,
                                                      bool after, bool gstat) {
    std::vector<std::vector<float>> out;
    for (size_t k = 0; k < count; k++) {
        std::vector<std::vector<float>> one(in.begin() + long(4 * k), in.begin() + long(4 * k + 4));
        one.push_back(in[4 * count]);
        if (gstat) one.push_back(in[4 * count + 1]);
        for (auto& t : adamw_reference(one, after, gstat)) out.push_back(std::move(t));
    }
    return out;
}

void bad_adamw(Graph& g, DType pt, int64_t gn) {
    ValueId p = g.param("p", pt, {8});
    adamw_step(g, p, g.input("g", pt, {gn}), g.state("m", DType::f32, {8}), g.state("v", DType::f32, {8}),
               g.input("h", DType::f32, {8}));
}

Register r({
    {"adamw_step", "PyTorch order, one step",
     [](CaseBuilder& b) { build_adamw(b, false); },
     [](Graph& g) { bad_adamw(g, DType::f32, 7); },
     [](const std::vector<std::vector<float>>& in) { return adamw_reference(in, false); }, 1e-5},
    {"adamw_step", "bitsandbytes order (decay after)",
     [](CaseBuilder& b) { build_adamw(b, true); },
     [](Graph& g) { bad_adamw(g, DType::bf16, 8); },
     [](const std::vector<std::vector<float>>& in) { return adamw_reference(in, true); }, 1e-5},
    {"adamw_step", "gstat multiplier applied",
     [](CaseBuilder& b) { build_adamw(b, false, 0.0f); },
     [](Graph& g) {
         ValueId p = g.param("p", DType::f32, {8});
         adamw_step(g, p, g.input("g", DType::f32, {8}), g.state("m", DType::f32, {8}), g.state("v", DType::f32, {8}),
                    g.input("h", DType::f32, {8}), false, g.input("gstat", DType::f32, {3}));
     },
     [](const std::vector<std::vector<float>>& in) { return adamw_reference(in, false, true); }, 1e-5},
    {"adamw_step", "gstat non-finite flag: nothing changes",
     [](CaseBuilder& b) { build_adamw(b, true, 1.0f); },
     [](Graph& g) {
         ValueId p = g.param("p", DType::f32, {8});
         adamw_step(g, p, g.input("g", DType::f32, {8}), g.state("m", DType::f32, {8}), g.state("v", DType::f16, {8}),
                    g.input("h", DType::f32, {8}), false, g.input("gstat", DType::f32, {4}));
     },
     [](const std::vector<std::vector<float>>& in) { return adamw_reference(in, true, true); }, 0.0},
    {"adamw_step", "three tensors of one group in one node (tiles of 1024 across tensors)",
     [](CaseBuilder& b) { build_adamw_multi(b, {1003, 1, 4101}, false, true); },
     [](Graph& g) {
         const ValueId p = g.param("p", DType::f32, {8}), q = g.param("q", DType::f32, {4});
         adamw_step(g, {p, q}, {g.input("g", DType::f32, {8}), g.input("gq", DType::f32, {5})},
                    {g.state("m", DType::f32, {8}), g.state("mq", DType::f32, {4})},
                    {g.state("v", DType::f32, {8}), g.state("vq", DType::f32, {4})}, g.input("h", DType::f32, {8}));
     },
     [](const std::vector<std::vector<float>>& in) { return adamw_multi_reference(in, 3, false, true); }, 1e-5},
    {"adamw_step", "700 tensors in one node (more than one CUDA launch table), decay after",
     [](CaseBuilder& b) { build_adamw_multi(b, std::vector<int64_t>(700, 2), true, false); },
     [](Graph& g) {
         const ValueId p = g.param("p", DType::f32, {8});
         adamw_step(g, {p, p}, {g.input("g", DType::f32, {8})}, {g.state("m", DType::f32, {8})},
                    {g.state("v", DType::f32, {8})}, g.input("h", DType::f32, {8}));
     },
     [](const std::vector<std::vector<float>>& in) { return adamw_multi_reference(in, 700, true, false); }, 1e-5},
    {"grad_stats", "loss scale 1024, clipped to max_norm 1",
     [](CaseBuilder& b) { build_grad_stats(b, true, 1.0f); },
     [](Graph& g) { grad_stats(g, {g.input("g", DType::f32, {4})}, g.input("ls", DType::f32, {2}), 1.0f); },
     [](const std::vector<std::vector<float>>& in) { return grad_stats_reference(in, true, 1.0f); }, 1e-6},
    {"grad_stats", "no loss scale, max_norm above the norm (no clipping)",
     [](CaseBuilder& b) { build_grad_stats(b, false, 1e4f); },
     [](Graph& g) { grad_stats(g, {g.input("g", DType::bf16, {4})}, kNoValue, 0.0f); },
     [](const std::vector<std::vector<float>>& in) { return grad_stats_reference(in, false, 1e4f); }, 1e-6},
    {"grad_stats", "max_norm 0: no clipping",
     [](CaseBuilder& b) { build_grad_stats(b, true, 0.0f); },
     [](Graph& g) { grad_stats(g, {}, kNoValue, 1.0f); },
     [](const std::vector<std::vector<float>>& in) { return grad_stats_reference(in, true, 0.0f); }, 1e-6},
});

}  // namespace
}  // namespace gltest
