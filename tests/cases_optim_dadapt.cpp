// D-Adaptation op cases. Each case runs a whole step over two params from mid-training state (Adam:
// accum, accum, d, step, step; Lion: step, step, d); the reference is dadaptation 3.2's step()
// written out in double.
#include <algorithm>
#include <cmath>

#include "op_cases.h"

namespace gltest {
namespace {

using namespace gl;

struct DaCase {
    bool gstat = false, zero_lr_second = false;
    float skip = 0.0f;
    DAdaptOptions o;
};

constexpr int64_t kN0 = 5000, kN1 = 37;

// Leaf order (build_da): hyper, hyper2, dstate, acc, [gstat], then per param: p, g, m, v, s.
std::vector<std::vector<float>> da_reference(const DaCase& k, const std::vector<std::vector<float>>& in) {
    const auto& h = in[0];
    const auto& h2 = in[1];
    std::vector<float> ds = in[2], acc = in[3];
    size_t at = k.gstat ? 5 : 4;
    struct P { std::vector<float> p, g, m, v, s; };
    std::vector<P> qs(2);
    for (auto& q : qs) {
        q.p = in[at++];
        q.g = in[at++];
        q.m = in[at++];
        q.v = in[at++];
        q.s = in[at++];
    }
    auto outputs = [&] {
        std::vector<std::vector<float>> r = {ds, acc};
        for (auto& q : qs)
            for (auto* x : {&q.p, &q.m, &q.v, &q.s}) r.push_back(*x);
        return r;
    };
    if (k.gstat && in[4][1] != 0.0f) return outputs();
    const double mul = k.gstat ? in[4][0] : 1.0;
    const double lr = h[0], b1 = h[1], b2 = h[2], eps = h[3], wd = h[4], t = h[5], gs = h[6] * mul;
    const double sb2 = std::sqrt(b2);
    double d = ds[0];
    const double bc = k.o.use_bias_correction ? std::sqrt(1 - std::pow(b2, t)) / (1 - std::pow(b1, t)) : 1.0;
    const double dlr = d * lr * bc;
    double num = 0, sk = 0;
    for (size_t j = 0; j < qs.size(); j++) {
        auto& q = qs[j];
        double dot = 0, sabs = 0;
        if ((j == 0 ? h : h2)[0] > 0) {
            for (size_t i = 0; i < q.p.size(); i++) {
                double gi = q.g[i] * gs + (k.o.decouple ? 0.0 : wd * q.p[i]);
                dot += gi * (q.s[i] / (std::sqrt(double(q.v[i])) + eps));
                q.m[i] = float(b1 * q.m[i] + dlr * (1 - b1) * gi);
                q.v[i] = float(b2 * q.v[i] + (1 - b2) * gi * gi);
                q.s[i] = float(sb2 * q.s[i] + dlr * (1 - sb2) * gi);
                sabs += std::fabs(double(q.s[i]));
            }
        }
        acc[2 * j] = float(dlr * dot);
        acc[2 * j + 1] = float(sabs);
        num += dlr * dot;
        sk += sabs;
    }
    const double weighted = sb2 * ds[1] + (1 - sb2) * num;
    const double d_hat = weighted / ((1 - sb2) * sk);
    d = std::max(d, std::min(d_hat, d * double(k.o.growth_rate)));
    ds = {float(d), float(weighted), float(dlr), 1.0f, float(d_hat), float(sk), ds[6], ds[7]};
    for (auto& q : qs)
        for (size_t i = 0; i < q.p.size(); i++) {
            double pi = q.p[i];
            if (k.o.decouple) pi -= wd * dlr * pi;
            q.p[i] = float(pi - q.m[i] / (std::sqrt(double(q.v[i])) + eps));
        }
    return outputs();
}

void build_da(CaseBuilder& b, const DaCase& k) {
    ValueId h = b.c("hyper", {kHyperSize});
    b.set(h, {1.0f, 0.9f, 0.999f, 1e-8f, 0.05f, 4.0f, 0.5f, 0.0f});
    ValueId h2 = b.c("hyper2", {kHyperSize});
    b.set(h2, {k.zero_lr_second ? 0.0f : 1.0f, 0.9f, 0.999f, 1e-8f, 0.05f, 4.0f, 0.5f, 0.0f});
    ValueId ds = b.c("dstate", {kDAdaptStateSize});
    b.set(ds, {0.05f, 2e-3f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f});
    ValueId acc = b.c("acc", {4});
    ValueId gs = kNoValue;
    if (k.gstat) {
        gs = b.c("gstat", {kGstatSize});
        b.set(gs, {0.5f, k.skip, 1.0f, 1.0f});
    }
    struct Q { ValueId p, g, m, v, s; };
    std::vector<Q> qs;
    for (int64_t n : {kN0, kN1}) {
        Q q;
        q.p = b.c("p", {n}, -0.2f, 0.2f);
        q.g = b.c("g", {n}, -0.02f, 0.02f);
        q.m = b.c("m", {n}, -1e-3f, 1e-3f);
        q.v = b.c("v", {n}, 1e-6f, 1e-4f);
        q.s = b.c("s", {n}, -1e-3f, 1e-3f);
        qs.push_back(q);
    }
    for (size_t i = 0; i < qs.size(); i++)
        dadapt_adam_accum(b.g, qs[i].p, qs[i].g, qs[i].m, qs[i].v, qs[i].s, i == 0 ? h : h2, ds, acc, int(i), k.o, gs);
    dadapt_adam_d(b.g, ds, acc, h, k.o, gs);
    for (size_t i = 0; i < qs.size(); i++) dadapt_adam_step(b.g, qs[i].p, qs[i].m, qs[i].v, i == 0 ? h : h2, ds, k.o, gs);
    b.out(ds);
    b.out(acc);
    for (auto& q : qs)
        for (ValueId x : {q.p, q.m, q.v, q.s}) b.out(x);
}

OpCase da_case(const char* op, const std::string& label, DaCase k, std::function<void(Graph&)> bad, double tol = 1e-5) {
    return {op, label, [k](CaseBuilder& b) { build_da(b, k); }, std::move(bad),
            [k](const std::vector<std::vector<float>>& in) { return da_reference(k, in); }, tol};
}

DaCase variant(int which) {
    DaCase k;
    if (which == 1) {  // decoupled decay, bias correction, finite growth, gstat multiplier
        k.o.decouple = true;
        k.o.use_bias_correction = true;
        k.o.growth_rate = 1.02f;
        k.gstat = true;
    } else if (which == 2) {  // the second group at lr 0 keeps its state out of the sums
        k.zero_lr_second = true;
    } else if (which == 3) {
        k.gstat = true;
        k.skip = 1.0f;
    }
    return k;
}

// DAdaptLion. Leaf order (build_lion): hyper, hyper2 (the second group: lr 0 or the lead's), dstate,
// acc, [gstat], then per param: p, g, m, s.
std::vector<std::vector<float>> lion_reference(bool gstat, const std::vector<std::vector<float>>& in) {
    const auto& h = in[0];
    std::vector<float> ds = in[2], acc = in[3];
    size_t at = gstat ? 5 : 4;
    struct P { std::vector<float> p, g, m, s; };
    std::vector<P> qs(2);
    for (auto& q : qs) {
        q.p = in[at++];
        q.g = in[at++];
        q.m = in[at++];
        q.s = in[at++];
    }
    const double mul = gstat ? in[4][0] : 1.0;
    const double lr = h[0], b1 = h[1], b2 = h[2], wd = h[4], gs = h[6] * mul, sb2 = std::sqrt(b2);
    const double d = ds[0], dlr = d * lr;
    double num = 0, sk = 0;
    for (size_t j = 0; j < qs.size(); j++) {
        auto& q = qs[j];
        double dot = 0, sabs = 0;
        for (size_t i = 0; i < q.p.size(); i++) {
            const double gi = q.g[i] * gs, c = b1 * q.m[i] + (1 - b1) * gi;
            const double u = c > 0 ? 1.0 : (c < 0 ? -1.0 : 0.0);
            q.p[i] = float(q.p[i] * (1 - dlr * wd) - dlr * u);
            q.m[i] = float(b2 * q.m[i] + (1 - b2) * dlr * gi);
            dot += u * q.s[i];
            q.s[i] = float(sb2 * q.s[i] + (1 - sb2) * dlr * u);
            sabs += std::fabs(double(q.s[i]));
        }
        acc[2 * j] = float(dlr * dot);
        acc[2 * j + 1] = float(sabs);
        num += dlr * dot;
        sk += sabs;
    }
    const double weighted = sb2 * ds[1] + (1 - sb2) * num, d_hat = weighted / ((1 - sb2) * sk);
    ds = {float(std::max(d, d_hat)), float(weighted), float(dlr), 1.0f, float(d_hat), float(sk), ds[6], ds[7]};
    std::vector<std::vector<float>> r = {ds, acc};
    for (auto& q : qs)
        for (auto* x : {&q.p, &q.m, &q.s}) r.push_back(*x);
    return r;
}

void build_lion(CaseBuilder& b, bool gstat) {
    ValueId h = b.c("hyper", {kHyperSize});
    b.set(h, {1.0f, 0.9f, 0.99f, 0.0f, 0.05f, 4.0f, 0.5f, 0.0f});
    ValueId h2 = b.c("hyper2", {kHyperSize});
    b.set(h2, {0.0f, 0.9f, 0.99f, 0.0f, 0.05f, 4.0f, 0.5f, 0.0f});  // lr 0: still stepped with the lead's dlr
    ValueId ds = b.c("dstate", {kDAdaptStateSize});
    b.set(ds, {0.05f, 2e-3f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f});
    ValueId acc = b.c("acc", {4});
    ValueId gs = kNoValue;
    if (gstat) {
        gs = b.c("gstat", {kGstatSize});
        b.set(gs, {0.5f, 0.0f, 1.0f, 1.0f});
    }
    struct Q { ValueId p, g, m, s; };
    std::vector<Q> qs;
    for (int64_t n : {kN0, kN1}) {
        Q q;
        q.p = b.c("p", {n}, -0.2f, 0.2f);
        q.g = b.c("g", {n}, -0.02f, 0.02f);
        q.m = b.c("m", {n}, -1e-3f, 1e-3f);
        q.s = b.c("s", {n}, -1e-3f, 1e-3f);
        qs.push_back(q);
    }
    for (size_t i = 0; i < qs.size(); i++)
        dadapt_lion_step(b.g, qs[i].p, qs[i].g, qs[i].m, qs[i].s, i == 0 ? h : h2, h, ds, acc, int(i), gs);
    dadapt_adam_d(b.g, ds, acc, h, DAdaptOptions{}, gs);
    b.out(ds);
    b.out(acc);
    for (auto& q : qs)
        for (ValueId x : {q.p, q.m, q.s}) b.out(x);
}

OpCase lion_case(const std::string& label, bool gstat, std::function<void(Graph&)> bad) {
    return {"dadapt_lion_step", label, [gstat](CaseBuilder& b) { build_lion(b, gstat); }, std::move(bad),
            [gstat](const std::vector<std::vector<float>>& in) { return lion_reference(gstat, in); }, 1e-5};
}

Register r({
    lion_case("DAdaptLion, whole step, a second group at lr 0", false,
              [](Graph& g) {  // s of another size
                  dadapt_lion_step(g, g.param("p", DType::f32, {8}), g.input("g", DType::f32, {8}),
                                   g.state("m", DType::f32, {8}), g.state("s", DType::f32, {7}),
                                   g.input("h", DType::f32, {8}), g.input("h2", DType::f32, {8}),
                                   g.state("ds", DType::f32, {8}), g.state("acc", DType::f32, {4}), 0);
              }),
    lion_case("DAdaptLion, whole step, gstat multiplier", true,
              [](Graph& g) {  // lead hyper of the wrong size
                  dadapt_lion_step(g, g.param("p", DType::f32, {8}), g.input("g", DType::f32, {8}),
                                   g.state("m", DType::f32, {8}), g.state("s", DType::f32, {8}),
                                   g.input("h", DType::f32, {8}), g.input("h2", DType::f32, {4}),
                                   g.state("ds", DType::f32, {8}), g.state("acc", DType::f32, {4}), 0);
              }),
    da_case("dadapt_adam_accum", "whole step, defaults (coupled decay, growth inf)", variant(0),
            [](Graph& g) {  // acc too small for the slot
                dadapt_adam_accum(g, g.param("p", DType::f32, {8}), g.input("g", DType::f32, {8}),
                                  g.state("m", DType::f32, {8}), g.state("v", DType::f32, {8}),
                                  g.state("s", DType::f32, {8}), g.input("h", DType::f32, {8}),
                                  g.state("ds", DType::f32, {8}), g.state("acc", DType::f32, {2}), 1, DAdaptOptions{});
            }),
    da_case("dadapt_adam_d", "whole step, decoupled decay, bias correction, growth 1.02, gstat multiplier", variant(1),
            [](Graph& g) {  // dstate of the wrong size
                dadapt_adam_d(g, g.state("ds", DType::f32, {4}), g.state("acc", DType::f32, {4}),
                              g.input("h", DType::f32, {8}), DAdaptOptions{});
            }),
    da_case("dadapt_adam_step", "whole step, a group at lr 0", variant(2),
            [](Graph& g) {  // growth_rate below 1
                DAdaptOptions o;
                o.growth_rate = 0.5f;
                dadapt_adam_step(g, g.param("p", DType::f32, {8}), g.state("m", DType::f32, {8}),
                                 g.state("v", DType::f32, {8}), g.input("h", DType::f32, {8}),
                                 g.state("ds", DType::f32, {8}), o);
            }),
    da_case("dadapt_adam_step", "gstat non-finite flag: nothing changes", variant(3),
            [](Graph& g) {
                dadapt_adam_step(g, g.param("p", DType::f32, {8}), g.state("m", DType::f32, {7}),
                                 g.state("v", DType::f32, {8}), g.input("h", DType::f32, {8}),
                                 g.state("ds", DType::f32, {8}), DAdaptOptions{});
            },
            0.0),
});

}  // namespace
}  // namespace gltest
