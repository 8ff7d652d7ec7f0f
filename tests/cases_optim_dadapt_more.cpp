// DAdaptSGD / AdaGrad / Adan op cases. Each case runs a whole step over two params (5000 and 37
// elements) from mid-training state or from the first step: accum, accum, dadapt_sum_d, step, step;
// the reference is dadaptation 3.2's step() written out in double.
#include <algorithm>
#include <cmath>

#include "dadapt_sum_fixtures.h"

namespace gltest {
namespace {

using namespace gl;

struct DsCase {
    DSumRule rule = DSumRule::sgd;
    bool first = false, gstat = false, zero_lr_second = false, no_prox = false;
    float skip = 0.0f, momentum = 0.0f, growth = INFINITY, beta3 = 0.99f;
};

using dsum::hy;
using dsum::st;

int n_state(DSumRule r) { return r == DSumRule::sgd ? 2 : (r == DSumRule::adagrad ? 3 : 5); }

// Leaf order: hyper, hyper2, dstate, acc, [gstat], then per param p, g and its state (SGD: s, x0;
// AdaGrad: alpha, sk, x0; Adan: m, diff, v, s, pre).
std::vector<std::vector<float>> ds_reference(const DsCase& k, const std::vector<std::vector<float>>& in) {
    dsum::Leaves l = dsum::unpack(in, k.gstat, n_state(k.rule));
    auto& [h, h2, ds, acc, qs, skipped, mul] = l;
    if (skipped) return l.outputs();
    const double lr = h[kLr], d0 = ds_get(ds.data(), kDsD);
    double d = d0, sum[3] = {0, 0, 0}, dlr = d * lr;
    const double g0_old = ds_get(ds.data(), kDsG0);
    // first loop
    for (size_t j = 0; j < 2; j++) {
        auto& q = qs[j];
        const auto& hj = j == 0 ? h : h2;
        const double wd = hj[kWeightDecay], gs = hj[kGradScale] * mul, eps = hj[kEps];
        double a = 0, b = 0, c = 0;
        for (size_t i = 0; i < q.p.size(); i++) {
            const double gi = q.g[i] * gs;
            if (k.rule == DSumRule::sgd) {
                if (hj[kLr] <= 0) break;
                const double gd = gi + wd * q.p[i];
                auto& s = q.st[0];
                if (k.first) {
                    a += gi * gi;
                    s[i] = float(gd);
                    b += gd * gd;
                } else {
                    const double dl = d * lr / g0_old;
                    a += dl * gd * s[i];
                    s[i] = float(s[i] + dl * gd);
                    b += double(s[i]) * s[i];
                }
            } else if (k.rule == DSumRule::adagrad) {
                auto &al = q.st[0], &sk = q.st[1];
                const double gd = gi + wd * q.p[i];
                const double old = double(sk[i]) * sk[i] / (std::sqrt(double(al[i])) + eps), old_l1 = std::fabs(sk[i]);
                al[i] = float(al[i] + gd * gd);
                const double den = std::sqrt(double(al[i])) + eps;
                a += gd * gd / den;
                sk[i] = float(sk[i] + dlr * gd);
                b += double(sk[i]) * sk[i] / den - old;
                c += std::fabs(sk[i]) - old_l1;
            } else {
                auto &m = q.st[0], &df = q.st[1], &v = q.st[2], &s = q.st[3], &pre = q.st[4];
                const double b1 = h[kBeta1], b2 = h[kBeta2], b3 = k.beta3;
                if (k.first) pre[i] = float(gi);
                const double gd = gi - pre[i], up = gi + b2 * gd;
                m[i] = float(m[i] * b1 + dlr * (1 - b1) * gi);
                df[i] = float(df[i] * b2 + dlr * (1 - b2) * gd);
                v[i] = float(v[i] * b3 + (1 - b3) * up * up);
                const double den = std::sqrt(double(v[i])) + eps;
                a += gi * gi / den;
                s[i] = float(s[i] * b3 + dlr * (1 - b3) * gi);
                b += double(s[i]) * s[i] / den;
                c += std::fabs(s[i]);
            }
        }
        dsum::put_sums(acc, j, a, b, c);
        sum[0] += a, sum[1] += b, sum[2] += c;
    }
    // the d rule
    double d_hat = d;
    auto grow = [&](double dh) { d = std::max(d, std::min(dh, d * double(k.growth))); };
    bool first_sgd = false;
    if (k.rule == DSumRule::sgd) {
        const double g0 = k.first ? std::sqrt(sum[0]) : g0_old;
        dlr = d * lr / g0;
        const double sk_sq = k.first ? dlr * dlr * sum[1] : sum[1];
        const double num = ds_get(ds.data(), kDsA) + (k.first ? 0.0 : sum[0]);
        d_hat = 2 * num / std::sqrt(sk_sq);
        grow(d_hat);
        ds_put(ds.data(), kDsG0, g0);
        ds_put(ds.data(), kDsA, num);
        first_sgd = k.first;
    } else if (k.rule == DSumRule::adagrad) {
        const double sksq = ds_get(ds.data(), kDsB) + sum[1], skl1 = ds_get(ds.data(), kDsC) + sum[2];
        const double gsq = ds_get(ds.data(), kDsA) + dlr * dlr * sum[0];
        d_hat = (sksq - gsq) / skl1;
        grow(d_hat);
        ds_put(ds.data(), kDsA, gsq);
        ds_put(ds.data(), kDsB, sksq);
        ds_put(ds.data(), kDsC, skl1);
    } else {
        const double b3 = k.beta3, gsq = b3 * ds_get(ds.data(), kDsA) + sum[0] * dlr * dlr * (1 - b3);
        d_hat = (sum[1] / (1 - b3) - gsq) / sum[2];
        grow(d_hat);
        ds_put(ds.data(), kDsA, gsq);
    }
    dsum::record_d(ds, d, dlr, d_hat, first_sgd);
    // second loop
    for (size_t j = 0; j < 2; j++) {
        auto& q = qs[j];
        const auto& hj = j == 0 ? h : h2;
        const double eps = hj[kEps], ck = 1.0 - double(hj[kBeta1]);
        for (size_t i = 0; i < q.p.size(); i++) {
            if (k.rule == DSumRule::sgd) {
                auto& s = q.st[0];
                if (first_sgd) s[i] = float(dlr * s[i]);
                const double z = double(q.st[1][i]) - s[i];
                q.p[i] = float(q.p[i] * (1 - ck) + ck * z);
            } else if (k.rule == DSumRule::adagrad) {
                const double z = q.st[2][i] - q.st[1][i] / (std::sqrt(double(q.st[0][i])) + eps);
                q.p[i] = float(q.p[i] * (1 - ck) + ck * z);
            } else {
                dsum::adan_step(q, i, hj, h[kBeta2], dlr, k.no_prox, mul);
            }
        }
    }
    return l.outputs();
}

void build_ds(CaseBuilder& b, const DsCase& k) {
    std::vector<float> d0(kDsSize, 0.0f);
    ds_put(d0.data(), kDsD, 0.05);
    if (!k.first) {
        ds_put(d0.data(), kDsG0, 0.8);
        ds_put(d0.data(), kDsA, k.rule == DSumRule::sgd ? 2e-3 : 1e-4);
        ds_put(d0.data(), kDsB, 3e-3);
        ds_put(d0.data(), kDsC, 0.5);
        d0[kDsSteps] = 3.0f;
    }
    const float b1 = k.rule == DSumRule::adan ? 0.98f : k.momentum;
    dsum::Built x = dsum::fixed_leaves(b, {1.0f, b1, 0.92f, 1e-6f, 0.05f, 4.0f, 0.5f, 0.0f},
                                       {k.zero_lr_second ? 0.0f : 1.0f, b1, 0.92f, 1e-6f, 0.02f, 4.0f, 0.5f, 0.0f}, d0,
                                       k.gstat, k.skip);
    for (int64_t n : dsum::kN) {
        dsum::Built::Param q = dsum::param_leaves(b, n);
        if (k.rule == DSumRule::sgd) {
            q.st.push_back(b.c("s", {n}, -1e-3f, 1e-3f));
            q.st.push_back(b.c("x0", {n}, -0.2f, 0.2f));
        } else if (k.rule == DSumRule::adagrad) {
            q.st.push_back(b.c("alpha", {n}, 1e-6f, 1e-3f));
            q.st.push_back(b.c("sk", {n}, -1e-3f, 1e-3f));
            q.st.push_back(b.c("x0", {n}, -0.2f, 0.2f));
        } else {
            for (const char* s : {"m", "diff"}) q.st.push_back(b.c(s, {n}, -1e-3f, 1e-3f));
            q.st.push_back(b.c("v", {n}, 1e-6f, 1e-4f));
            q.st.push_back(b.c("s", {n}, -1e-3f, 1e-3f));
            q.st.push_back(b.c("pre", {n}, -0.02f, 0.02f));
        }
        x.qs.push_back(q);
    }
    const ValueId h = x.h, ds = x.ds, acc = x.acc, gs = x.gs;
    const auto& qs = x.qs;
    for (size_t i = 0; i < 2; i++) {
        const auto& q = qs[i];
        const ValueId hi = i == 0 ? h : x.h2;
        if (k.rule == DSumRule::sgd)
            dadapt_sgd_accum(b.g, q.p, q.g, q.st[0], hi, h, ds, acc, int(i), gs);
        else if (k.rule == DSumRule::adagrad)
            dadapt_adagrad_accum(b.g, q.p, q.g, q.st[0], q.st[1], hi, h, ds, acc, int(i), gs);
        else
            dadapt_adan_accum(b.g, q.p, q.g, q.st[0], q.st[1], q.st[2], q.st[3], q.st[4], hi, h, ds, acc, int(i),
                              0.98f, 0.92f, k.beta3, gs);
    }
    dadapt_sum_d(b.g, ds, acc, h, k.rule, k.growth, k.rule == DSumRule::adan ? k.beta3 : 0.0f, gs);
    for (size_t i = 0; i < 2; i++) {
        const auto& q = qs[i];
        const ValueId hi = i == 0 ? h : x.h2;
        if (k.rule == DSumRule::sgd)
            dadapt_sgd_step(b.g, q.p, q.st[0], q.st[1], hi, ds, gs);
        else if (k.rule == DSumRule::adagrad)
            dadapt_adagrad_step(b.g, q.p, q.st[0], q.st[1], q.st[2], hi, ds, gs);
        else
            dadapt_adan_step(b.g, q.p, q.g, q.st[0], q.st[1], q.st[2], q.st[4], hi, h, ds, k.no_prox, gs);
    }
    dsum::add_outputs(b, x);
}

OpCase ds_case(const char* op, const std::string& label, DsCase k, std::function<void(Graph&)> bad,
               double tol = 1e-5) {
    return dsum::make_case(op, label, k, build_ds, ds_reference, std::move(bad), tol);
}
constexpr auto with = dsum::with<DsCase>;

DsCase make(DSumRule r, bool first = false) {
    DsCase k;
    k.rule = r;
    k.first = first;
    return k;
}

Register r({
    ds_case("dadapt_sgd_accum", "DAdaptSGD, whole step, mid-run, a second group at lr 0",
            with(make(DSumRule::sgd), [](DsCase& k) { k.zero_lr_second = true; }),
            [](Graph& g) {  // acc too small for the slot
                dadapt_sgd_accum(g, g.param("p", DType::f32, {8}), hy(g, "g"), st(g, "s"), hy(g, "h"), hy(g, "l"),
                                 st(g, "ds", kDsSize), st(g, "acc", kDsAccWidth), 1);
            }),
    ds_case("dadapt_sgd_step", "DAdaptSGD, whole first step (g0, s scaled by dlr), momentum 0.5, gstat multiplier",
            with(make(DSumRule::sgd, true), [](DsCase& k) { k.momentum = 0.5f, k.gstat = true; }),
            [](Graph& g) {  // x0 of another size
                dadapt_sgd_step(g, g.param("p", DType::f32, {8}), st(g, "s"), st(g, "x0", 7), hy(g, "h"),
                                st(g, "ds", kDsSize));
            }),
    ds_case("dadapt_adagrad_accum", "DAdaptAdaGrad, whole step, mid-run", make(DSumRule::adagrad),
            [](Graph& g) {  // dstate of DAdaptAdam's size
                dadapt_adagrad_accum(g, g.param("p", DType::f32, {8}), hy(g, "g"), st(g, "a"), st(g, "sk"), hy(g, "h"),
                                     hy(g, "l"), st(g, "ds", 8), st(g, "acc", 2 * kDsAccWidth), 0);
            }),
    ds_case("dadapt_adagrad_step", "DAdaptAdaGrad, whole first step, momentum 0.3, growth 1.02",
            with(make(DSumRule::adagrad, true), [](DsCase& k) { k.momentum = 0.3f, k.growth = 1.02f; }),
            [](Graph& g) {  // hyper of the wrong size
                dadapt_adagrad_step(g, g.param("p", DType::f32, {8}), st(g, "a"), st(g, "sk"), st(g, "x0"),
                                    hy(g, "h", 4), st(g, "ds", kDsSize));
            }),
    ds_case("dadapt_adan_accum", "DAdaptAdan, whole first step (pre = g), gstat multiplier",
            with(make(DSumRule::adan, true), [](DsCase& k) { k.gstat = true; }),
            [](Graph& g) {  // beta3 outside [0, 1)
                dadapt_adan_accum(g, g.param("p", DType::f32, {8}), hy(g, "g"), st(g, "m"), st(g, "d"), st(g, "v"),
                                  st(g, "s"), st(g, "pre"), hy(g, "h"), hy(g, "l"), st(g, "ds", kDsSize),
                                  st(g, "acc", kDsAccWidth), 0, 0.98, 0.92, 1.0);
            }),
    ds_case("dadapt_adan_step", "DAdaptAdan, whole step, mid-run, no_prox",
            with(make(DSumRule::adan), [](DsCase& k) { k.no_prox = true; }),
            [](Graph& g) {  // pre of another size
                dadapt_adan_step(g, g.param("p", DType::f32, {8}), hy(g, "g"), st(g, "m"), st(g, "d"), st(g, "v"),
                                 st(g, "pre", 9), hy(g, "h"), hy(g, "l"), st(g, "ds", kDsSize), false);
            }),
    ds_case("dadapt_adan_step", "DAdaptAdan, whole step, mid-run, proximal decay, growth 1.05",
            with(make(DSumRule::adan), [](DsCase& k) { k.growth = 1.05f; }),
            [](Graph& g) {  // param not f32
                dadapt_adan_step(g, g.param("p", DType::bf16, {8}), hy(g, "g"), st(g, "m"), st(g, "d"), st(g, "v"),
                                 st(g, "pre"), hy(g, "h"), hy(g, "l"), st(g, "ds", kDsSize), false);
            }),
    ds_case("dadapt_sum_d", "DAdaptAdaGrad, gstat non-finite flag: nothing changes",
            with(make(DSumRule::adagrad), [](DsCase& k) { k.gstat = true, k.skip = 1.0f; }),
            [](Graph& g) {  // acc not a whole number of slots
                dadapt_sum_d(g, st(g, "ds", kDsSize), st(g, "acc", 7), hy(g, "h"), DSumRule::sgd, INFINITY);
            },
            0.0),
});

}  // namespace
}  // namespace gltest
