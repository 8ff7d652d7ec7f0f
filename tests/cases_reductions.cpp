#include <doctest/doctest.h>

#include <cmath>
#include <cstring>

#include "ggml-lite/core/parallel.h"
#include "ggml-lite/core/planner.h"
#include "ggml-lite/core/runtime.h"
#include "op_cases.h"

namespace gltest {
namespace {

using namespace gl;
using Leaves = std::vector<std::vector<float>>;

ValueId f32(Graph& g, const Shape& s) { return g.input("x", DType::f32, s); }

// Expected mse: mean over samples of w[b] * mean over the sample of (p - t)^2, in double.
std::vector<float> ref_mse(const std::vector<float>& p, const std::vector<float>& t, const std::vector<float>* w, int B) {
    size_t M = p.size() / size_t(B);
    double total = 0;
    for (size_t b = 0; b < size_t(B); b++) {
        double se = 0;
        for (size_t i = b * M; i < (b + 1) * M; i++) se += (double(p[i]) - t[i]) * (double(p[i]) - t[i]);
        total += (w ? double((*w)[b]) : 1.0) * se / double(M);
    }
    return {float(total / B)};
}

// Expected weighted_loss outputs {loss, per-sample}: mean_b w[b] * mean_i m_i l(p - t), in double,
// l written out separately from ops/loss_math.h; the mask m (optional) has one value per C elements.
Leaves ref_wloss(LossKind k, const std::vector<float>& p, const std::vector<float>& t, const std::vector<float>* w,
                 const std::vector<float>* c, int B, const std::vector<float>* m = nullptr, size_t C = 1) {
    const size_t M = p.size() / size_t(B);
    std::vector<float> per;
    double total = 0;
    for (size_t b = 0; b < size_t(B); b++) {
        double s = 0;
        for (size_t i = b * M; i < (b + 1) * M; i++) {
            const double d = double(p[i]) - double(t[i]);
            double l = 0;
            if (k == LossKind::l2) l = d * d;
            else if (k == LossKind::l1) l = std::fabs(d);
            else {
                const double cb = (*c)[b], r = std::sqrt(d * d + cb * cb) - cb;
                l = k == LossKind::smooth_l1 ? 2.0 * r : 2.0 * cb * r;
            }
            s += m ? l * double((*m)[i / C]) : l;
        }
        per.push_back(float(s / double(M)));
        total += (w ? double((*w)[b]) : 1.0) * s / double(M);
    }
    return {{float(total / B)}, per};
}

// A differentiable pred and target whose differences stay at least 0.1 away from 0 (l1's kink
// and finite differences do not mix), with both signs.
std::pair<ValueId, ValueId> separated(CaseBuilder& b, const Shape& s) {
    ValueId p = b.x("pred", s);
    std::vector<float> pv = b.data.back().second;
    ValueId t = b.x("target", s);
    std::vector<float> tv = b.random(int64_t(pv.size()), 0.1f, 0.6f);
    for (size_t i = 0; i < tv.size(); i++) tv[i] = pv[i] + (i % 3 == 1 ? tv[i] : -tv[i]);
    b.set(t, tv);
    return {p, t};
}

ValueId f32b(Graph& g, const std::string& name, int64_t B) { return g.input(name, DType::f32, {B}); }

Register r({
    // ---- sum ----
    {"sum", "all elements of [2,3,4] -> scalar", [](CaseBuilder& b) { b.out(sum(b.g, b.x("x", {2, 3, 4}))); },
     [](Graph& g) { sum(g, g.input("ids", DType::i32, {3})); }},
    {"sum", "axis 1 of [2,3,4], no keepdim -> [2,4]", [](CaseBuilder& b) { b.out(sum(b.g, b.x("x", {2, 3, 4}), 1, false)); },
     [](Graph& g) { sum(g, f32(g, {2, 3}), 2, false); }},
    {"sum", "axis -1 keepdim of [3,5] -> [3,1]", [](CaseBuilder& b) { b.out(sum(b.g, b.x("x", {3, 5}), -1, true)); },
     [](Graph& g) { sum(g, f32(g, {2, 3}), -3, true); }},
    {"sum", "axis 0 of a vector -> scalar", [](CaseBuilder& b) { b.out(sum(b.g, b.x("x", {7}), 0, false)); },
     [](Graph& g) { sum(g, f32(g, {}), 0, false); }},
    {"sum", "axis 2 of a permuted 4-D view", [](CaseBuilder& b) {
         b.out(sum(b.g, permute(b.g, b.x("x", {2, 3, 4, 5}), {0, 3, 1, 2}), 2, true));
     },
     [](Graph& g) { sum(g, f32(g, {2, 3, 4, 5}), 4, true); }},
    {"sum", "values along each axis", [](CaseBuilder& b) {
         ValueId x = b.c("x", {2, 3}, 0, 1);
         b.set(x, {1, 2, 3, 4, 5, 6});
         b.out(sum(b.g, x));
         b.out(sum(b.g, x, 0, false));
         b.out(sum(b.g, x, 1, true));
     },
     [](Graph& g) { sum(g, g.input("x", DType::u8, {2})); },
     [](const Leaves&) { return Leaves{{21}, {5, 7, 9}, {6, 15}}; }, 0.0},
    // ---- mean ----
    {"mean", "all elements of [4,6] -> scalar", [](CaseBuilder& b) { b.out(mean(b.g, b.x("x", {4, 6}))); },
     [](Graph& g) { mean(g, g.input("ids", DType::i32, {3})); }},
    {"mean", "axis 0 keepdim of [3,4] -> [1,4]", [](CaseBuilder& b) { b.out(mean(b.g, b.x("x", {3, 4}), 0, true)); },
     [](Graph& g) { mean(g, f32(g, {3, 4}), 2, true); }},
    {"mean", "axis 2 of [2,3,4,5] -> [2,3,5]", [](CaseBuilder& b) { b.out(mean(b.g, b.x("x", {2, 3, 4, 5}), 2, false)); },
     [](Graph& g) { mean(g, f32(g, {2}), -2, false); }},
    {"mean", "values, and bf16 input", [](CaseBuilder& b) {
         ValueId x = b.c("x", {2, 4}, 0, 1, DType::bf16);
         b.set(x, {1, 2, 3, 4, 0.5f, 0.25f, -1, 8});
         b.out(cast(b.g, mean(b.g, x), DType::f32));
         b.out(cast(b.g, mean(b.g, x, 1, false), DType::f32));
     },
     [](Graph& g) { mean(g, g.input("x", DType::i8, {2}), 0, false); },
     [](const Leaves&) { return Leaves{{17.75f / 8}, {2.5f, 7.75f / 4}}; }, 1e-2},
    // ---- sum_to ----
    {"sum_to", "[2,3,4,5] -> [3,1,5] (bias-style broadcast back)", [](CaseBuilder& b) {
         b.out(sum_to(b.g, b.x("x", {2, 3, 4, 5}), {3, 1, 5}));
     },
     [](Graph& g) { sum_to(g, f32(g, {2, 3}), {3, 3}); }},
    {"sum_to", "[2,600] -> [1,600] (runs longer than one block)", [](CaseBuilder& b) {
         b.out(sum_to(b.g, b.x("x", {2, 600}), {1, 600}));
     },
     [](Graph& g) { sum_to(g, f32(g, {2, 3}), {2}); }},
    {"sum_to", "[3,4] -> [] scalar, and [2,3,4] -> [4]", [](CaseBuilder& b) {
         b.out(sum_to(b.g, b.x("x", {3, 4}), Shape{}));
         b.out(sum_to(b.g, b.x("y", {2, 3, 4}), {4}));
     },
     [](Graph& g) { sum_to(g, f32(g, {3}), {2, 3}); }},
    {"sum_to", "values", [](CaseBuilder& b) {
         ValueId x = b.c("x", {2, 2, 3}, 0, 1);
         b.set(x, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
         b.out(sum_to(b.g, x, {2, 1, 3}));
         b.out(sum_to(b.g, x, {2, 1}));
     },
     [](Graph& g) { sum_to(g, g.input("x", DType::i32, {2, 3}), {3}); },
     [](const Leaves&) { return Leaves{{5, 7, 9, 17, 19, 21}, {30, 48}}; }, 0.0},
    // ---- mse_loss ----
    {"mse_loss", "no weights, [2,3,4]", [](CaseBuilder& b) {
         b.out(mse_loss(b.g, b.x("pred", {2, 3, 4}), b.x("target", {2, 3, 4})));
     },
     [](Graph& g) { mse_loss(g, f32(g, {2, 3}), g.input("t", DType::f32, {3, 2})); }},
    {"mse_loss", "trainable weights [3] over NHWC [3,2,2,2]", [](CaseBuilder& b) {
         ValueId p = b.x("pred", {3, 2, 2, 2});
         ValueId t = b.x("target", {3, 2, 2, 2});
         b.out(mse_loss(b.g, p, t, b.x("w", {3}, 0.5f, 1.5f)));
     },
     [](Graph& g) { mse_loss(g, f32(g, {3, 2}), g.input("t", DType::f32, {3, 2}), g.input("w", DType::f32, {2})); }},
    {"mse_loss", "constant weights, 2-D", [](CaseBuilder& b) {
         ValueId p = b.x("pred", {2, 5});
         b.out(mse_loss(b.g, p, b.c("target", {2, 5}), b.c("w", {2}, 0.5f, 2.0f)));
     },
     [](Graph& g) { mse_loss(g, f32(g, {}), g.input("t", DType::f32, {})); }},
    {"mse_loss", "values with and without weights", [](CaseBuilder& b) {
         ValueId p = b.c("pred", {3, 4});
         ValueId t = b.c("target", {3, 4});
         ValueId w = b.c("w", {3}, 0, 2);
         b.out(mse_loss(b.g, p, t));
         b.out(mse_loss(b.g, p, t, w));
     },
     [](Graph& g) { mse_loss(g, f32(g, {3, 4}), g.input("t", DType::i32, {3, 4})); },
     [](const Leaves& in) { return Leaves{ref_mse(in[0], in[1], nullptr, 3), ref_mse(in[0], in[1], &in[2], 3)}; },
     1e-6},
    // ---- weighted_loss (l2 / l1 / pseudo-Huber, per-sample weights and outputs) ----
    {"weighted_loss", "l2, no weights, [2,3,4]", [](CaseBuilder& b) {
         b.out(weighted_loss(b.g, LossKind::l2, b.x("pred", {2, 3, 4}), b.x("target", {2, 3, 4})));
     },
     [](Graph& g) { weighted_loss(g, LossKind::l2, f32(g, {2, 3}), g.input("t", DType::f32, {3, 2})); }},
    {"weighted_loss", "l1, trainable weights [3] over NHWC [3,2,2,2]", [](CaseBuilder& b) {
         auto [p, t] = separated(b, {3, 2, 2, 2});
         b.out(weighted_loss(b.g, LossKind::l1, p, t, b.x("w", {3}, 0.5f, 1.5f)));
     },
     [](Graph& g) {
         weighted_loss(g, LossKind::l1, f32(g, {3, 2}), g.input("t", DType::f32, {3, 2}), f32b(g, "w", 2));
     }},
    {"weighted_loss", "huber, per-sample huber_c and weights", [](CaseBuilder& b) {
         ValueId p = b.x("pred", {2, 4, 3}, -2.0f, 2.0f);
         ValueId t = b.x("target", {2, 4, 3});
         ValueId c = b.c("huber_c", {2}, 0.1f, 0.8f);
         b.out(weighted_loss(b.g, LossKind::huber, p, t, b.c("w", {2}, 0.5f, 2.0f), c));
     },
     // huber without its huber_c
     [](Graph& g) { weighted_loss(g, LossKind::huber, f32(g, {2, 3}), g.input("t", DType::f32, {2, 3})); }},
    {"weighted_loss", "huber without weights; the per-sample output carries a gradient too", [](CaseBuilder& b) {
         ValueId p = b.x("pred", {3, 5}, -2.0f, 2.0f);
         ValueId loss = weighted_loss(b.g, LossKind::huber, p, b.c("target", {3, 5}), kNoValue,
                                      b.c("huber_c", {3}, 0.05f, 1.0f));
         b.out(loss);
         b.out(weighted_loss_per_sample(b.g, loss));
     },
     // huber_c of the wrong length
     [](Graph& g) {
         weighted_loss(g, LossKind::huber, f32(g, {2, 3}), g.input("t", DType::f32, {2, 3}), kNoValue, f32b(g, "c", 3));
     }},
    {"weighted_loss", "l2 with trainable weights, both outputs", [](CaseBuilder& b) {
         ValueId loss = weighted_loss(b.g, LossKind::l2, b.x("pred", {2, 6}), b.c("target", {2, 6}),
                                      b.x("w", {2}, 0.5f, 1.5f));
         b.out(loss);
         b.out(weighted_loss_per_sample(b.g, loss));
     },
     // a huber_c given to l2
     [](Graph& g) {
         weighted_loss(g, LossKind::l2, f32(g, {2, 3}), g.input("t", DType::f32, {2, 3}), kNoValue, f32b(g, "c", 2));
     }},
    {"weighted_loss", "values of every kind, with and without weights", [](CaseBuilder& b) {
         ValueId p = b.c("pred", {3, 2, 2, 2}, -2.0f, 2.0f);
         ValueId t = b.c("target", {3, 2, 2, 2});
         ValueId w = b.c("w", {3}, 0.0f, 2.0f);
         ValueId c = b.c("huber_c", {3}, 0.05f, 1.0f);
         for (LossKind k : {LossKind::l2, LossKind::l1, LossKind::huber}) {
             for (ValueId wk : {kNoValue, w}) {
                 ValueId loss = weighted_loss(b.g, k, p, t, wk, k == LossKind::huber ? c : kNoValue);
                 b.out(loss);
                 b.out(weighted_loss_per_sample(b.g, loss));
             }
         }
     },
     [](Graph& g) { weighted_loss(g, LossKind::l1, g.input("p", DType::i32, {2, 3}), g.input("t", DType::i32, {2, 3})); },
     [](const Leaves& in) {
         Leaves r;
         for (LossKind k : {LossKind::l2, LossKind::l1, LossKind::huber})
             for (const std::vector<float>* w : {static_cast<const std::vector<float>*>(nullptr), &in[2]})
                 for (auto& v : ref_wloss(k, in[0], in[1], w, &in[3], 3)) r.push_back(v);
         return r;
     },
     1e-6},
    {"weighted_loss", "smooth_l1 and masked losses of every kind: values", [](CaseBuilder& b) {
         ValueId p = b.c("pred", {3, 2, 2, 2}, -2.0f, 2.0f);
         ValueId t = b.c("target", {3, 2, 2, 2});
         ValueId w = b.c("w", {3}, 0.0f, 2.0f);
         ValueId c = b.c("huber_c", {3}, 0.05f, 1.0f);
         ValueId m = b.c("mask", {3, 2, 2, 1}, 0.0f, 1.0f);
         for (LossKind k : {LossKind::l2, LossKind::l1, LossKind::huber, LossKind::smooth_l1})
             for (ValueId mk : {kNoValue, m}) {
                 ValueId loss = weighted_loss(b.g, k, p, t, w, loss_takes_huber_c(k) ? c : kNoValue, mk);
                 b.out(loss);
                 b.out(weighted_loss_per_sample(b.g, loss));
             }
     },
     // a mask with the channels kept
     [](Graph& g) {
         weighted_loss(g, LossKind::l2, f32(g, {2, 3}), g.input("t", DType::f32, {2, 3}), kNoValue, kNoValue,
                       g.input("m", DType::f32, {2, 3}));
     },
     [](const Leaves& in) {
         Leaves r;
         for (LossKind k : {LossKind::l2, LossKind::l1, LossKind::huber, LossKind::smooth_l1})
             for (const std::vector<float>* m : {static_cast<const std::vector<float>*>(nullptr), &in[4]})
                 for (auto& v : ref_wloss(k, in[0], in[1], &in[2], &in[3], 3, m, 2)) r.push_back(v);
         return r;
     },
     1e-6},
    {"weighted_loss", "smooth_l1 with huber_c, weights and a mask: gradients", [](CaseBuilder& b) {
         ValueId p = b.x("pred", {2, 3, 2, 2}, -2.0f, 2.0f);
         ValueId loss = weighted_loss(b.g, LossKind::smooth_l1, p, b.c("target", {2, 3, 2, 2}),
                                      b.x("w", {2}, 0.5f, 1.5f), b.c("huber_c", {2}, 0.1f, 1.0f),
                                      b.c("mask", {2, 3, 2, 1}, 0.0f, 1.0f));
         b.out(loss);
         b.out(weighted_loss_per_sample(b.g, loss));
     },
     // smooth_l1 without its huber_c
     [](Graph& g) { weighted_loss(g, LossKind::smooth_l1, f32(g, {2, 3}), g.input("t", DType::f32, {2, 3})); }},
    {"weighted_loss", "masked l2 over NHWC: gradients", [](CaseBuilder& b) {
         b.out(weighted_loss(b.g, LossKind::l2, b.x("pred", {2, 2, 3, 4}), b.c("target", {2, 2, 3, 4}), kNoValue,
                             kNoValue, b.c("mask", {2, 2, 3, 1}, 0.0f, 1.0f)));
     },
     // a mask of another batch
     [](Graph& g) {
         weighted_loss(g, LossKind::l2, f32(g, {2, 3, 2}), g.input("t", DType::f32, {2, 3, 2}), kNoValue, kNoValue,
                       g.input("m", DType::f32, {3, 3, 1}));
     }},
    {"weighted_loss", "pseudo-Huber is ~l2 for small d and ~2c|d| for large d", [](CaseBuilder& b) {
         ValueId p = b.c("pred", {2, 2});
         ValueId c = b.c("huber_c", {2});
         b.set(p, {1e-3f, -2e-3f, 100.0f, -300.0f});
         b.set(c, {1.0f, 0.1f});
         b.out(weighted_loss_per_sample(b.g, weighted_loss(b.g, LossKind::huber, p, fill(b.g, {2, 2}, 0.0f), kNoValue, c)));
     },
     [](Graph& g) { weighted_loss(g, LossKind(7), f32(g, {2, 3}), g.input("t", DType::f32, {2, 3})); },
     // sample 0: (1e-6 + 4e-6) / 2 (to 1e-6 relative); sample 1: 2 * 0.1 * (|d| - 0.1) averaged
     [](const Leaves&) { return Leaves{{2.5e-6f, float(0.2 * ((100.0 - 0.1) + (300.0 - 0.1)) / 2)}}; }, 1e-6},
});

// Runs `build` once per thread count and returns its output's bytes.
std::vector<float> run_with_threads(int threads, const std::function<ValueId(Graph&)>& build, const std::vector<float>& x) {
    set_cpu_threads(threads);
    Graph g;
    ValueId y = build(g);
    g.mark_output(y);
    auto rt = make_cpu_runtime(make_plan(g));
    rt->write_f32(0, x);
    rt->run();
    return rt->read_f32(y);
}

TEST_CASE("reductions are bitwise identical across thread counts and accumulate in double") {
    const int saved = cpu_threads();
    std::mt19937 rng(99);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> x(size_t(64 * 48 * 40));
    for (auto& e : x) e = u(rng) * 1000.0f;
    std::vector<std::function<ValueId(Graph&)>> builds = {
        [](Graph& g) { return sum(g, g.input("x", DType::f32, {64, 48, 40})); },
        [](Graph& g) { return mean(g, g.input("x", DType::f32, {64, 48, 40}), 1, false); },
        [](Graph& g) { return sum_to(g, g.input("x", DType::f32, {64, 48, 40}), {40}); },
        [](Graph& g) {
            ValueId a = g.input("x", DType::f32, {64, 48, 40});
            return mse_loss(g, a, fill(g, {64, 48, 40}, 0.5f));
        },
    };
    for (auto& build : builds) {
        std::vector<float> one = run_with_threads(1, build, x), many = run_with_threads(7, build, x);
        REQUIRE(one.size() == many.size());
        CHECK(std::memcmp(one.data(), many.data(), one.size() * 4) == 0);
    }
    // A sum whose float running total would drift: 2^20 copies of 0.1.
    std::vector<float> tenth(size_t(1) << 20, 0.1f);
    std::vector<float> s = run_with_threads(3, [](Graph& g) { return sum(g, g.input("x", DType::f32, {1 << 20})); }, tenth);
    CHECK(s[0] == float(double(0.1f) * double(1 << 20)));
    set_cpu_threads(saved);
}

}  // namespace
}  // namespace gltest
