// Prodigy op cases. Each case runs a whole step over two params (accum, accum, d, step, step) from
// mid-training state; the reference is prodigyopt 1.1's step() written out in double.
#include <algorithm>
#include <cmath>

#include "op_cases.h"

namespace gltest {
namespace {

using namespace gl;

struct PdCase {
    bool has_m = true, gstat = false;
    float skip = 0.0f, d = 0.05f;  // d = d0 exercises "if d == d0: d = max(d, d_hat)"
    ProdigyOptions o;
};

constexpr int64_t kN0 = 5000, kN1 = 37;

// Leaf order (build_pd): hyper, pstate, acc, [gstat], then per param: p, g, [m], v, s, p0.
std::vector<std::vector<float>> pd_reference(const PdCase& k, const std::vector<std::vector<float>>& in) {
    const auto& h = in[0];
    std::vector<float> ps = in[1], acc = in[2];
    size_t at = k.gstat ? 4 : 3;
    const int per = k.has_m ? 6 : 5;
    struct P { std::vector<float> p, g, m, v, s, p0; };
    std::vector<P> P2(2);
    for (auto& q : P2) {
        q.p = in[at++];
        q.g = in[at++];
        if (k.has_m) q.m = in[at++];
        q.v = in[at++];
        q.s = in[at++];
        q.p0 = in[at++];
    }
    (void)per;
    auto outputs = [&] {
        std::vector<std::vector<float>> r = {ps, acc};
        for (auto& q : P2) {
            r.push_back(q.p);
            if (k.has_m) r.push_back(q.m);
            r.push_back(q.v);
            r.push_back(q.s);
        }
        return r;
    };
    if (k.gstat && in[3][1] != 0.0f) return outputs();
    const double mul = k.gstat ? in[3][0] : 1.0;
    const double lr = h[0], b1 = h[1], b2 = h[2], eps = h[3], wd = h[4], t = h[5], gs = h[6] * mul;
    const double beta3 = k.o.beta3 < 0 ? std::sqrt(b2) : k.o.beta3, d0 = k.o.d0;
    double d = ps[0], d_max = ps[1];
    const double bc = k.o.use_bias_correction ? std::sqrt(1 - std::pow(b2, t)) / (1 - std::pow(b1, t)) : 1.0;
    const double dlr = d * lr * bc;
    double num = ps[2] * beta3, delta = 0, den = 0;
    int slot = 0;
    for (auto& q : P2) {
        double dot = 0, sabs = 0;
        for (size_t i = 0; i < q.p.size(); i++) {
            double gi = q.g[i] * gs;
            if (!k.o.decouple) gi += wd * q.p[i];
            dot += gi * (double(q.p0[i]) - q.p[i]);
            if (k.has_m) q.m[i] = float(b1 * q.m[i] + d * (1 - b1) * gi);
            q.v[i] = float(b2 * q.v[i] + d * d * (1 - b2) * gi * gi);
            q.s[i] = float(beta3 * q.s[i] + (d / d0) * (k.o.safeguard_warmup ? d : dlr) * gi);
            sabs += std::fabs(double(q.s[i]));
        }
        delta += (d / d0) * dlr * dot;
        den += sabs;
        acc[size_t(2 * slot)] = float(dot);
        acc[size_t(2 * slot + 1)] = float(sabs);
        slot++;
    }
    num += delta;
    double d_hat = k.o.d_coef * num / den;
    if (float(d) == k.o.d0) d = std::max(d, d_hat);
    d_max = std::max(d_max, d_hat);
    d = std::min(d_max, d * double(k.o.growth_rate));
    ps = {float(d), float(d_max), float(num), float(den), float(d_hat), float(dlr), 1.0f, ps[7]};
    for (auto& q : P2)
        for (size_t i = 0; i < q.p.size(); i++) {
            double denom = std::sqrt(double(q.v[i])) + d * eps, pi = q.p[i];
            double gi = q.g[i] * gs + (k.o.decouple ? 0.0 : wd * pi);
            if (k.o.decouple) pi -= wd * dlr * pi;
            q.p[i] = float(k.has_m ? pi - dlr * q.m[i] / denom : pi - dlr * d * gi / denom);
        }
    return outputs();
}

void build_pd(CaseBuilder& b, const PdCase& k) {
    ValueId h = b.c("hyper", {kHyperSize});
    b.set(h, {1.0f, k.has_m ? 0.9f : 0.0f, 0.999f, 1e-8f, 0.05f, 4.0f, 0.5f, 0.0f});
    ValueId ps = b.c("pstate", {kProdigyStateSize});
    b.set(ps, {k.d, std::max(k.d, 0.06f), 30.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f});
    ValueId acc = b.c("acc", {4});
    ValueId gs = kNoValue;
    if (k.gstat) {
        gs = b.c("gstat", {kGstatSize});
        b.set(gs, {0.5f, k.skip, 1.0f, 1.0f});
    }
    struct Q { ValueId p, g, m, v, s, p0; };
    std::vector<Q> qs;
    // Magnitudes of a run in progress: the gradient leans towards p0 - p (so d grows this step) and
    // the update is a sizeable fraction of the parameter (so the tolerance sees it).
    for (int64_t n : {kN0, kN1}) {
        Q q;
        q.p = b.c("p", {n}, -0.2f, 0.2f);
        q.g = b.c("g", {n}, -0.02f, 0.02f);
        q.m = k.has_m ? b.c("m", {n}, -1e-2f, 1e-2f) : kNoValue;
        q.v = b.c("v", {n}, 1e-6f, 1e-4f);
        q.s = b.c("s", {n}, -1e-3f, 1e-3f);
        q.p0 = b.c("p0", {n}, -0.2f, 0.2f);
        std::vector<float> p, p0, g;
        for (auto& [id, d] : b.data) {
            if (id == q.p) p = d;
            if (id == q.p0) p0 = d;
            if (id == q.g) g = d;
        }
        for (size_t i = 0; i < g.size(); i++) g[i] += 0.1f * (p0[i] - p[i]);
        b.set(q.g, g);
        qs.push_back(q);
    }
    for (size_t i = 0; i < qs.size(); i++)
        prodigy_accum(b.g, qs[i].p, qs[i].g, qs[i].m, qs[i].v, qs[i].s, qs[i].p0, h, ps, acc, int(i), k.o, gs);
    prodigy_d(b.g, ps, acc, h, k.o, gs);
    for (auto& q : qs) prodigy_step(b.g, q.p, q.g, q.m, q.v, h, ps, k.o, gs);
    b.out(ps);
    b.out(acc);
    for (auto& q : qs)
        for (ValueId x : {q.p, q.m, q.v, q.s})
            if (x != kNoValue) b.out(x);
}

OpCase pd_case(const char* op, const std::string& label, PdCase k, std::function<void(Graph&)> bad, double tol = 1e-5) {
    return {op, label, [k](CaseBuilder& b) { build_pd(b, k); }, std::move(bad),
            [k](const std::vector<std::vector<float>>& in) { return pd_reference(k, in); }, tol};
}

PdCase variant(int which) {
    PdCase k;
    if (which == 1) {  // bias correction, safeguard warmup, coupled decay, finite growth, d at d0
        k.o.use_bias_correction = true;
        k.o.safeguard_warmup = true;
        k.o.decouple = false;
        k.o.growth_rate = 1.02f;
        k.o.d_coef = 2.0f;
        k.d = k.o.d0;
    } else if (which == 2) {  // beta1 = 0: no first moment; explicit beta3; gstat multiplier
        k.has_m = false;
        k.o.beta3 = 0.99f;
        k.gstat = true;
    } else if (which == 3) {
        k.gstat = true;
        k.skip = 1.0f;
    }
    return k;
}

Register r({
    pd_case("prodigy_accum", "whole step, defaults (decoupled decay, growth inf)", variant(0),
            [](Graph& g) {  // acc too small for the slot
                ValueId p = g.param("p", DType::f32, {8});
                prodigy_accum(g, p, g.input("g", DType::f32, {8}), g.state("m", DType::f32, {8}),
                              g.state("v", DType::f32, {8}), g.state("s", DType::f32, {8}), g.state("p0", DType::f32, {8}),
                              g.input("h", DType::f32, {8}), g.state("ps", DType::f32, {8}), g.state("acc", DType::f32, {2}),
                              1, ProdigyOptions{});
            }),
    pd_case("prodigy_d", "whole step, bias correction, safeguard warmup, coupled decay, growth 1.02", variant(1),
            [](Graph& g) {  // pstate of the wrong size
                prodigy_d(g, g.state("ps", DType::f32, {4}), g.state("acc", DType::f32, {4}), g.input("h", DType::f32, {8}),
                          ProdigyOptions{});
            }),
    pd_case("prodigy_step", "whole step, beta1 = 0 (no first moment), beta3 0.99, gstat multiplier", variant(2),
            [](Graph& g) {  // d_coef must be positive
                ProdigyOptions o;
                o.d_coef = 0.0f;
                ValueId p = g.param("p", DType::f32, {8});
                prodigy_step(g, p, g.input("g", DType::f32, {8}), kNoValue, g.state("v", DType::f32, {8}),
                             g.input("h", DType::f32, {8}), g.state("ps", DType::f32, {8}), o);
            }),
    pd_case("prodigy_step", "gstat non-finite flag: nothing changes", variant(3),
            [](Graph& g) {
                ValueId p = g.param("p", DType::f32, {8});
                prodigy_step(g, p, g.input("g", DType::f32, {8}), kNoValue, g.state("v", DType::f32, {7}),
                             g.input("h", DType::f32, {8}), g.state("ps", DType::f32, {8}), ProdigyOptions{});
            },
            0.0),
});

}  // namespace
}  // namespace gltest
