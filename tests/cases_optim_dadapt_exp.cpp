// DAdaptAdamPreprint / DAdaptAdanIP op cases (dadaptation's experimental module). Each case runs a
// whole step over two params (5000 and 37 elements) from mid-training state or from the first step:
// accum, accum, dadapt_sum_d, step, step; the reference is the experimental step() written out in
// double here.
#include <algorithm>
#include <cmath>

#include "dadapt_sum_fixtures.h"

namespace gltest {
namespace {

using namespace gl;

struct ExpCase {
    bool ip = false;  // DAdaptAdanIP, else DAdaptAdamPreprint
    bool first = false, gstat = false, zero_lr_second = false, decouple = false, no_prox = false;
    float skip = 0.0f, growth = INFINITY, beta3 = 0.99f;
};

using dsum::hy;
using dsum::st;
constexpr float kB1 = 0.9f, kB2 = 0.95f;

int n_state(const ExpCase& k) { return k.ip ? 5 : 3; }

// Leaf order: hyper, hyper2, dstate, acc, [gstat], then per param p, g and its state (preprint: m, v,
// s; AdanIP: m, diff, v, s, pre).
std::vector<std::vector<float>> exp_reference(const ExpCase& k, const std::vector<std::vector<float>>& in) {
    dsum::Leaves l = dsum::unpack(in, k.gstat, n_state(k));
    auto& [h, h2, ds, acc, qs, skipped, mul] = l;
    if (skipped) return l.outputs();
    const double lr = h[kLr], b1 = h[kBeta1], b2 = h[kBeta2], b3 = k.ip ? double(k.beta3) : b2;
    double d = ds_get(ds.data(), kDsD);
    const double dlr = d * lr;
    double sum[3] = {0, 0, 0};
    for (size_t j = 0; j < 2; j++) {
        auto& q = qs[j];
        const auto& hj = j == 0 ? h : h2;
        const double wd = hj[kWeightDecay], gs = hj[kGradScale] * mul, eps = hj[kEps];
        double a = 0, b = 0, c = 0;
        for (size_t i = 0; i < q.p.size(); i++) {
            double gi = q.g[i] * gs;
            if (!k.ip) {
                if (hj[kLr] <= 0) break;
                if (!k.decouple) gi += wd * q.p[i];
                auto &m = q.st[0], &v = q.st[1], &s = q.st[2];
                m[i] = float(m[i] * b1 + dlr * (1 - b1) * gi);
                v[i] = float(v[i] * b2 + (1 - b2) * gi * gi);
                const double den = std::sqrt(double(v[i])) + eps;
                a += gi * gi / den;
                s[i] = float(s[i] * b2 + dlr * (1 - b2) * gi);
                b += double(s[i]) * s[i] / den;
                c += std::fabs(s[i]);
            } else {
                auto &m = q.st[0], &df = q.st[1], &v = q.st[2], &s = q.st[3], &pre = q.st[4];
                if (k.first) pre[i] = float(gi);
                const double gd = gi - pre[i], up = gi + b2 * gd;
                a += gi * (s[i] / (std::sqrt(double(v[i])) + eps));
                m[i] = float(m[i] * b1 + dlr * (1 - b1) * gi);
                df[i] = float(df[i] * b2 + dlr * (1 - b2) * gd);
                v[i] = float(v[i] * b3 + (1 - b3) * up * up);
                s[i] = float(s[i] * b3 + dlr * (1 - b3) * gi);
                c += std::fabs(s[i]);
            }
        }
        dsum::put_sums(acc, j, a, b, c);
        sum[0] += a, sum[1] += b, sum[2] += c;
    }
    double d_hat;
    if (!k.ip) {
        const double gsq = b3 * ds_get(ds.data(), kDsA) + sum[0] * dlr * dlr * (1 - b3);
        d_hat = (sum[1] / (1 - b3) - gsq) / sum[2];
        ds_put(ds.data(), kDsA, gsq);
    } else {
        const double num = b3 * ds_get(ds.data(), kDsA) + (1 - b3) * dlr * sum[0];
        d_hat = 2 * (b3 / (1 - b3)) * num / sum[2];
        ds_put(ds.data(), kDsA, num);
    }
    d = std::max(d, std::min(d_hat, d * double(k.growth)));
    dsum::record_d(ds, d, dlr, d_hat, false);
    for (size_t j = 0; j < 2; j++) {
        auto& q = qs[j];
        const auto& hj = j == 0 ? h : h2;
        const double eps = hj[kEps], wd = hj[kWeightDecay];
        for (size_t i = 0; i < q.p.size(); i++) {
            if (!k.ip) {
                double p = q.p[i];
                if (k.decouple && hj[kLr] > 0) p -= wd * dlr * p;
                q.p[i] = float(p - q.st[0][i] / (std::sqrt(double(q.st[1][i])) + eps));
            } else {
                dsum::adan_step(q, i, hj, b2, dlr, k.no_prox, mul);
            }
        }
    }
    return l.outputs();
}

void build_exp(CaseBuilder& b, const ExpCase& k) {
    std::vector<float> d0(kDsSize, 0.0f);
    ds_put(d0.data(), kDsD, 0.05);
    if (!k.first) {
        ds_put(d0.data(), kDsA, k.ip ? 2e-3 : 1e-4);
        d0[kDsSteps] = 3.0f;
    }
    dsum::Built x = dsum::fixed_leaves(b, {1.0f, kB1, kB2, 1e-6f, 0.05f, 4.0f, 0.5f, 0.0f},
                                       {k.zero_lr_second ? 0.0f : 1.0f, kB1, kB2, 1e-5f, 0.02f, 4.0f, 0.5f, 0.0f}, d0,
                                       k.gstat, k.skip);
    for (int64_t n : dsum::kN) {
        dsum::Built::Param q = dsum::param_leaves(b, n);
        q.st.push_back(b.c("m", {n}, -1e-3f, 1e-3f));
        if (k.ip) q.st.push_back(b.c("diff", {n}, -1e-3f, 1e-3f));
        q.st.push_back(b.c("v", {n}, 1e-6f, 1e-4f));
        q.st.push_back(b.c("s", {n}, -1e-3f, 1e-3f));
        if (k.ip) q.st.push_back(b.c("pre", {n}, -0.02f, 0.02f));
        x.qs.push_back(q);
    }
    const ValueId h = x.h, ds = x.ds, acc = x.acc, gs = x.gs;
    const auto& qs = x.qs;
    for (size_t i = 0; i < 2; i++) {
        const auto& q = qs[i];
        const ValueId hi = i == 0 ? h : x.h2;
        if (k.ip)
            dadapt_adan_ip_accum(b.g, q.p, q.g, q.st[0], q.st[1], q.st[2], q.st[3], q.st[4], hi, h, ds, acc, int(i), kB1,
                                 kB2, k.beta3, gs);
        else
            dadapt_adam_preprint_accum(b.g, q.p, q.g, q.st[0], q.st[1], q.st[2], hi, h, ds, acc, int(i), kB1, kB2,
                                       k.decouple, gs);
    }
    dadapt_sum_d(b.g, ds, acc, h, k.ip ? DSumRule::adan_ip : DSumRule::adam_preprint, k.growth, k.ip ? k.beta3 : kB2,
                 gs);
    for (size_t i = 0; i < 2; i++) {
        const auto& q = qs[i];
        const ValueId hi = i == 0 ? h : x.h2;
        if (k.ip)
            dadapt_adan_step(b.g, q.p, q.g, q.st[0], q.st[1], q.st[2], q.st[4], hi, h, ds, k.no_prox, gs);
        else
            dadapt_adam_preprint_step(b.g, q.p, q.st[0], q.st[1], hi, ds, k.decouple, gs);
    }
    dsum::add_outputs(b, x);
}

OpCase exp_case(const char* op, const std::string& label, ExpCase k, std::function<void(Graph&)> bad,
                double tol = 1e-5) {
    return dsum::make_case(op, label, k, build_exp, exp_reference, std::move(bad), tol);
}
constexpr auto with = dsum::with<ExpCase>;

Register r({
    exp_case("dadapt_adam_preprint_accum", "DAdaptAdamPreprint, whole step, mid-run, coupled decay, gstat multiplier",
             with({}, [](ExpCase& k) { k.gstat = true; }),
             [](Graph& g) {  // s of another size
                 dadapt_adam_preprint_accum(g, g.param("p", DType::f32, {8}), hy(g, "g"), st(g, "m"), st(g, "v"),
                                            st(g, "s", 9), hy(g, "h"), hy(g, "l"), st(g, "ds", kDsSize),
                                            st(g, "acc", kDsAccWidth), 0, 0.9, 0.99, false);
             }),
    exp_case("dadapt_adam_preprint_accum", "DAdaptAdamPreprint, whole first step, a second group at lr 0, growth 1.02",
             with({}, [](ExpCase& k) { k.first = true, k.zero_lr_second = true, k.growth = 1.02f; }),
             [](Graph& g) {  // acc too small for the slot
                 dadapt_adam_preprint_accum(g, g.param("p", DType::f32, {8}), hy(g, "g"), st(g, "m"), st(g, "v"),
                                            st(g, "s"), hy(g, "h"), hy(g, "l"), st(g, "ds", kDsSize),
                                            st(g, "acc", kDsAccWidth), 1, 0.9, 0.99, false);
             }),
    exp_case("dadapt_adam_preprint_step", "DAdaptAdamPreprint, whole step, mid-run, decoupled decay",
             with({}, [](ExpCase& k) { k.decouple = true; }),
             [](Graph& g) {  // dstate of DAdaptAdam's size
                 dadapt_adam_preprint_step(g, g.param("p", DType::f32, {8}), st(g, "m"), st(g, "v"), hy(g, "h"),
                                           st(g, "ds", 8), false);
             }),
    exp_case("dadapt_adan_ip_accum", "DAdaptAdanIP, whole first step (pre = g), proximal decay",
             with({}, [](ExpCase& k) { k.ip = true, k.first = true; }),
             [](Graph& g) {  // beta3 outside [0, 1)
                 dadapt_adan_ip_accum(g, g.param("p", DType::f32, {8}), hy(g, "g"), st(g, "m"), st(g, "d"), st(g, "v"),
                                      st(g, "s"), st(g, "pre"), hy(g, "h"), hy(g, "l"), st(g, "ds", kDsSize),
                                      st(g, "acc", kDsAccWidth), 0, 0.98, 0.92, 1.0);
             }),
    exp_case("dadapt_adan_ip_accum", "DAdaptAdanIP, whole step, mid-run, no_prox, growth 1.05, gstat multiplier",
             with({}, [](ExpCase& k) { k.ip = true, k.no_prox = true, k.growth = 1.05f, k.gstat = true; }),
             [](Graph& g) {  // hyper of the wrong size
                 dadapt_adan_ip_accum(g, g.param("p", DType::f32, {8}), hy(g, "g"), st(g, "m"), st(g, "d"), st(g, "v"),
                                      st(g, "s"), st(g, "pre"), hy(g, "h", 4), hy(g, "l"), st(g, "ds", kDsSize),
                                      st(g, "acc", kDsAccWidth), 0, 0.98, 0.92, 0.9);
             }),
    exp_case("dadapt_adam_preprint_step", "DAdaptAdamPreprint, gstat non-finite flag: nothing changes",
             with({}, [](ExpCase& k) { k.gstat = true, k.skip = 1.0f; }),
             [](Graph& g) {  // param not f32
                 dadapt_adam_preprint_step(g, g.param("p", DType::bf16, {8}), st(g, "m"), st(g, "v"), hy(g, "h"),
                                           st(g, "ds", kDsSize), true);
             },
             0.0),
});

}  // namespace
}  // namespace gltest
