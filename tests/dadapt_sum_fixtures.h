// What the op cases of the D-Adaptation sum rules share (tests/cases_optim_dadapt_more.cpp: SGD,
// AdaGrad, Adan; tests/cases_optim_dadapt_exp.cpp: AdamPreprint, AdanIP). Each case runs a whole step
// over two params (kN elements): accum, accum, dadapt_sum_d, step, step. Leaf order: hyper, hyper2,
// dstate, acc, [gstat], then per param p, g and its state; the outputs are dstate, acc, then per
// param p and its state, checked against a reference written out in double in each file.
#pragma once
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "ggml-lite/ops/optim_dadapt_more.h"
#include "op_cases.h"

namespace gltest::dsum {

constexpr int64_t kN[2] = {5000, 37};

// The reference's copy of the leaves, updated in place into the expected outputs (the cases bind the
// members in this order: auto& [h, h2, ds, acc, qs, skipped, mul]).
struct Leaves {
    struct Param {
        std::vector<float> p, g;
        std::vector<std::vector<float>> st;
    };
    std::vector<float> h, h2, ds, acc;
    std::vector<Param> qs;
    bool skipped = false;  // gstat's non-finite flag is set: the step changes nothing
    double mul = 1.0;      // gstat's gradient multiplier

    std::vector<std::vector<float>> outputs() const {
        std::vector<std::vector<float>> r = {ds, acc};
        for (const Param& q : qs) {
            r.push_back(q.p);
            for (const auto& s : q.st) r.push_back(s);
        }
        return r;
    }
};

inline Leaves unpack(const std::vector<std::vector<float>>& in, bool gstat, int n_state) {
    Leaves l;
    l.h = in[0];
    l.h2 = in[1];
    l.ds = in[2];
    l.acc = in[3];
    size_t at = gstat ? 5 : 4;
    l.qs.resize(2);
    for (Leaves::Param& q : l.qs) {
        q.p = in[at++];
        q.g = in[at++];
        for (int j = 0; j < n_state; j++) q.st.push_back(in[at++]);
    }
    l.skipped = gstat && in[4][1] != 0.0f;
    l.mul = gstat ? in[4][0] : 1.0;
    return l;
}

// The reference's first-loop sums a, b, c of param j into acc (kDsAccWidth floats a slot).
inline void put_sums(std::vector<float>& acc, size_t j, double a, double b, double c) {
    gl::ds_put(acc.data(), int(gl::kDsAccWidth * j), a);
    gl::ds_put(acc.data(), int(gl::kDsAccWidth * j + 2), b);
    gl::ds_put(acc.data(), int(gl::kDsAccWidth * j + 4), c);
}

// dstate after the d rule: d, the step's dlr and d_hat, applied, one step more, and the first-step
// flag (set only by SGD's first step).
inline void record_d(std::vector<float>& ds, double d, double dlr, double d_hat, bool first) {
    gl::ds_put(ds.data(), gl::kDsD, d);
    gl::ds_put(ds.data(), gl::kDsDlr, dlr);
    ds[gl::kDsDHat] = float(d_hat);
    ds[gl::kDsApplied] = 1.0f;
    ds[gl::kDsSteps] = ds[gl::kDsSteps] + 1.0f;
    ds[gl::kDsFirst] = first ? 1.0f : 0.0f;
}

// DAdaptAdan's step of element i (also DAdaptAdanIP's), state m, diff, v, s, pre: the update, the
// proximal decay (or with no_prox the plain one) by dlr times hj's weight decay, then pre = the
// scaled gradient (gstat multiplier mul).
inline void adan_step(Leaves::Param& q, size_t i, const std::vector<float>& hj, double b2, double dlr, bool no_prox,
                      double mul) {
    const double eps = hj[gl::kEps], wd = hj[gl::kWeightDecay];
    const double up = (q.st[0][i] + b2 * q.st[1][i]) / (std::sqrt(double(q.st[2][i])) + eps);
    q.p[i] = float(no_prox ? q.p[i] * (1 - dlr * wd) - up : (q.p[i] - up) / (1 + dlr * wd));
    q.st[4][i] = float(q.g[i] * hj[gl::kGradScale] * mul);
}

// The case graph's leaves.
struct Built {
    struct Param {
        gl::ValueId p, g;
        std::vector<gl::ValueId> st;
    };
    gl::ValueId h, h2, ds, acc, gs = gl::kNoValue;
    std::vector<Param> qs;
};

// hyper and hyper2 (kHyperSize values each), dstate (starting at d0), acc (two slots), and when gstat
// a gstat of multiplier 0.5 and non-finite flag `skip`.
inline Built fixed_leaves(CaseBuilder& b, std::vector<float> hyper, std::vector<float> hyper2, std::vector<float> d0,
                          bool gstat, float skip) {
    Built x;
    x.h = b.c("hyper", {gl::kHyperSize});
    b.set(x.h, std::move(hyper));
    x.h2 = b.c("hyper2", {gl::kHyperSize});
    b.set(x.h2, std::move(hyper2));
    x.ds = b.c("dstate", {gl::kDsSize});
    b.set(x.ds, std::move(d0));
    x.acc = b.c("acc", {2 * gl::kDsAccWidth});
    if (gstat) {
        x.gs = b.c("gstat", {gl::kGstatSize});
        b.set(x.gs, {0.5f, skip, 1.0f, 1.0f});
    }
    return x;
}

// p and g of a param of n elements; the caller adds its state leaves to st.
inline Built::Param param_leaves(CaseBuilder& b, int64_t n) {
    Built::Param q;
    q.p = b.c("p", {n}, -0.2f, 0.2f);
    q.g = b.c("g", {n}, -0.02f, 0.02f);
    return q;
}

inline void add_outputs(CaseBuilder& b, const Built& x) {
    b.out(x.ds);
    b.out(x.acc);
    for (const Built::Param& q : x.qs) {
        b.out(q.p);
        for (gl::ValueId s : q.st) b.out(s);
    }
}

// The case of description k: its graph from build, its expected outputs from reference.
template <class K>
OpCase make_case(const char* op, const std::string& label, const K& k, void (*build)(CaseBuilder&, const K&),
                 std::vector<std::vector<float>> (*reference)(const K&, const std::vector<std::vector<float>>&),
                 std::function<void(gl::Graph&)> bad, double tol) {
    return {op, label, [k, build](CaseBuilder& b) { build(b, k); }, std::move(bad),
            [k, reference](const std::vector<std::vector<float>>& in) { return reference(k, in); }, tol};
}

template <class K>
K with(K k, void (*f)(K&)) {
    f(k);
    return k;
}

// Leaves of the bad calls: f32 state and input of e elements.
inline gl::ValueId st(gl::Graph& g, const char* n, int64_t e = 8) { return g.state(n, gl::DType::f32, {e}); }
inline gl::ValueId hy(gl::Graph& g, const char* n, int64_t e = 8) { return g.input(n, gl::DType::f32, {e}); }

}  // namespace gltest::dsum
