// Cases for the norms family: group_norm (NHWC, fused SiLU), layer_norm, softmax. Their
// gradient helpers are exercised by the gradient checks. The forward outputs, including the
// saved statistics, are also held to direct formulas here.
#include <doctest/doctest.h>

#include <cmath>

#include "ggml-lite/core/error.h"
#include "ggml-lite/core/parallel.h"
#include "ggml-lite/core/runtime.h"
#include "ggml-lite/ops/norm_params.h"
#include "ggml-lite/ops/residual.h"
#include "op_cases.h"

namespace gltest {
namespace {

using namespace gl;

ValueId gn(CaseBuilder& b, const Shape& xs, int groups, bool act) {
    ValueId x = b.x("x", xs);
    ValueId gamma = b.x("gamma", {xs.last()}, 0.5f, 1.5f);
    ValueId beta = b.x("beta", {xs.last()});
    return group_norm(b.g, x, gamma, beta, groups, 1e-5f, act);
}

// Finite differences agree to ~1e-4 here; a tight tolerance catches small formula slips.
std::vector<OpCase> tight(std::vector<OpCase> cs) {
    for (OpCase& c : cs) c.tol = 2e-3;
    return cs;
}

Register r(tight({
    {"group_norm", "NHWC [2,3,3,4], 2 groups", [](CaseBuilder& b) { b.out(gn(b, {2, 3, 3, 4}, 2, false)); },
     [](Graph& g) {  // channels not divisible by groups
         group_norm(g, g.input("x", DType::f32, {1, 2, 2, 6}), g.input("g", DType::f32, {6}),
                    g.input("b", DType::f32, {6}), 4, 1e-5f, false);
     }},
    {"group_norm", "4 groups of 2 channels, fused SiLU, N=2", [](CaseBuilder& b) { b.out(gn(b, {2, 2, 3, 8}, 4, true)); },
     [](Graph& g) {  // gamma of the wrong length
         group_norm(g, g.input("x", DType::f32, {1, 2, 2, 8}), g.input("g", DType::f32, {4}),
                    g.input("b", DType::f32, {8}), 4, 1e-5f, false);
     }},
    {"group_norm", "1 group over a token sequence [3,5,6], fused SiLU", [](CaseBuilder& b) { b.out(gn(b, {3, 5, 6}, 1, true)); },
     [](Graph& g) {  // x without a channel dim
         group_norm(g, g.input("x", DType::f32, {6}), g.input("g", DType::f32, {6}), g.input("b", DType::f32, {6}), 1,
                    1e-5f, false);
     }},
    {"group_norm", "one channel per group (instance norm), [2,4,2,3]", [](CaseBuilder& b) { b.out(gn(b, {2, 4, 2, 3}, 3, false)); },
     [](Graph& g) {  // zero groups
         group_norm(g, g.input("x", DType::f32, {1, 2, 2, 4}), g.input("g", DType::f32, {4}),
                    g.input("b", DType::f32, {4}), 0, 1e-5f, false);
     }},
    {"group_norm", "NCHW param permuted to NHWC (strided x), frozen bf16 affine", [](CaseBuilder& b) {
         ValueId x = b.x("x", {2, 4, 3, 3});
         ValueId gamma = b.c("gamma", {4}, 0.5f, 1.5f, DType::bf16);
         ValueId beta = b.c("beta", {4}, -1.0f, 1.0f, DType::bf16);
         b.out(group_norm(b.g, permute(b.g, x, {0, 2, 3, 1}), gamma, beta, 2, 1e-5f, true));
     },
     [](Graph& g) {  // integer x
         group_norm(g, g.input("x", DType::i32, {1, 2, 2, 4}), g.input("g", DType::f32, {4}),
                    g.input("b", DType::f32, {4}), 2, 1e-5f, false);
     }},
    {"group_norm", "SD1.5 channels: [1,3,5,320], 32 groups of 10, fused SiLU (CUDA's 8-channel vector path)",
     [](CaseBuilder& b) { b.out(gn(b, {1, 3, 5, 320}, 32, true)); },
     [](Graph& g) {  // beta of the wrong length
         group_norm(g, g.input("x", DType::f32, {1, 2, 2, 320}), g.input("g", DType::f32, {320}),
                    g.input("b", DType::f32, {321}), 32, 1e-5f, true);
     }},
    {"group_norm", "[2,6,5,256], 8 groups of 32, fused SiLU (CUDA: one block per group, 8-channel accesses)",
     [](CaseBuilder& b) { b.out(gn(b, {2, 6, 5, 256}, 8, true)); },
     [](Graph& g) {  // groups that do not divide the channels
         group_norm(g, g.input("x", DType::f32, {1, 2, 2, 256}), g.input("g", DType::f32, {256}),
                    g.input("b", DType::f32, {256}), 7, 1e-5f, true);
     }},
    {"group_norm", "[1,7,9,128], 32 groups of 4, values far from 0 (CUDA: 4-channel accesses, shifted sums)",
     [](CaseBuilder& b) {
         ValueId x = b.x("x", {1, 7, 9, 128}, 7.0f, 9.0f);
         b.out(group_norm(b.g, x, b.x("gamma", {128}, 0.5f, 1.5f), b.x("beta", {128}), 32, 1e-5f, false));
     },
     [](Graph& g) {  // zero groups
         group_norm(g, g.input("x", DType::f32, {1, 2, 2, 128}), g.input("g", DType::f32, {128}),
                    g.input("b", DType::f32, {128}), 0, 1e-5f, false);
     }},
    {"group_norm", "frozen affine, 96 channels in 16 groups, fused SiLU, plus the skip: dx with the residual",
     [](CaseBuilder& b) {
         ValueId x = b.x("x", {2, 5, 4, 96});
         ValueId y = group_norm(b.g, x, b.c("gamma", {96}, 0.5f, 1.5f), b.c("beta", {96}), 16, 1e-5f, true);
         b.out(add(b.g, y, x));
     },
     [](Graph& g) {  // gamma of the wrong length
         group_norm(g, g.input("x", DType::f32, {1, 2, 2, 96}), g.input("g", DType::f32, {95}),
                    g.input("b", DType::f32, {96}), 16, 1e-5f, true);
     }},
    {"layer_norm", "[2,3,8]", [](CaseBuilder& b) {
         ValueId x = b.x("x", {2, 3, 8});
         b.out(layer_norm(b.g, x, b.x("gamma", {8}, 0.5f, 1.5f), b.x("beta", {8}), 1e-5f));
     },
     [](Graph& g) {  // gamma does not match the last dim
         layer_norm(g, g.input("x", DType::f32, {2, 8}), g.input("g", DType::f32, {7}), g.input("b", DType::f32, {8}),
                    1e-5f);
     }},
    {"layer_norm", "width 40 over a column slice (strided x)", [](CaseBuilder& b) {
         ValueId x = b.x("x", {3, 44});
         b.out(layer_norm(b.g, slice(b.g, x, 1, 2, 40), b.x("gamma", {40}, 0.5f, 1.5f), b.x("beta", {40}), 1e-5f));
     },
     [](Graph& g) {  // integer beta
         layer_norm(g, g.input("x", DType::f32, {2, 8}), g.input("g", DType::f32, {8}), g.input("b", DType::i32, {8}),
                    1e-5f);
     }},
    {"layer_norm", "single row [1,5]", [](CaseBuilder& b) {
         ValueId x = b.x("x", {1, 5}, -2.0f, 2.0f);
         b.out(layer_norm(b.g, x, b.x("gamma", {5}, 0.5f, 1.5f), b.x("beta", {5}), 1e-5f));
     },
     [](Graph& g) {  // negative eps
         layer_norm(g, g.input("x", DType::f32, {2, 8}), g.input("g", DType::f32, {8}), g.input("b", DType::f32, {8}),
                    -1.0f);
     }},
    {"layer_norm", "SD's width 320, frozen bf16 affine: dx alone (CUDA's warp path, two vectors a lane)",
     [](CaseBuilder& b) {
         ValueId x = b.x("x", {3, 4, 320});
         b.out(layer_norm(b.g, x, b.c("gamma", {320}, 0.5f, 1.5f, DType::bf16), b.c("beta", {320}, -1, 1, DType::bf16),
                          1e-5f));
     },
     [](Graph& g) {  // a residual on a grad op that makes dgamma and dbeta too
         ValueId x = g.input("x", DType::f32, {2, 8}), gm = g.input("g", DType::f32, {8});
         auto f = g.apply(Op::layer_norm, {x, gm, gm}, {});
         Params p;
         p.i[kResidualSlot] = 1;
         g.apply(Op::layer_norm_grad, {x, x, gm, gm, f[1], f[2], x}, p);
     }},
    {"layer_norm", "width 1280 with a trained affine (dgamma and dbeta; five vectors a lane)", [](CaseBuilder& b) {
         ValueId x = b.x("x", {2, 3, 1280});
         b.out(layer_norm(b.g, x, b.x("gamma", {1280}, 0.5f, 1.5f), b.x("beta", {1280}), 1e-5f));
     },
     [](Graph& g) {  // the dx-only flag is 0 or 1
         ValueId x = g.input("x", DType::f32, {2, 8}), gm = g.input("g", DType::f32, {8});
         auto f = g.apply(Op::layer_norm, {x, gm, gm}, {});
         Params p;
         p.i[kNormDxOnly] = 2;
         g.apply(Op::layer_norm_grad, {x, x, gm, gm, f[1], f[2]}, p);
     }},
    {"layer_norm", "CLIP's width 768, frozen f32 affine, 5 rows", [](CaseBuilder& b) {
         ValueId x = b.x("x", {5, 768});
         b.out(layer_norm(b.g, x, b.c("gamma", {768}, 0.5f, 1.5f), b.c("beta", {768}), 1e-5f));
     },
     [](Graph& g) {  // dx alone with a residual of the wrong shape
         ValueId x = g.input("x", DType::f32, {2, 8}), gm = g.input("g", DType::f32, {8});
         auto f = g.apply(Op::layer_norm, {x, gm, gm}, {});
         Params p;
         p.i[kNormDxOnly] = 1;
         p.i[kResidualSlot] = 1;
         g.apply(Op::layer_norm_grad, {x, x, gm, gm, f[1], f[2], gm}, p);
     }},
    {"group_norm", "frozen affine at SD's 320 channels, fused SiLU: dx alone (CUDA's vector path)",
     [](CaseBuilder& b) {
         ValueId x = b.x("x", {2, 3, 2, 320});
         b.out(group_norm(b.g, x, b.c("gamma", {320}, 0.5f, 1.5f), b.c("beta", {320}), 32, 1e-5f, true));
     },
     [](Graph& g) {  // dx alone takes (gy, x, gamma, beta, mean, rstd) and no more without a residual
         ValueId x = g.input("x", DType::f32, {1, 2, 2, 8}), gm = g.input("g", DType::f32, {8});
         Params p;
         p.i[0] = 2;
         auto f = g.apply(Op::group_norm, {x, gm, gm}, p);
         p.i[kNormDxOnly] = 1;
         g.apply(Op::group_norm_grad, {x, x, gm, gm, f[1], f[2], x}, p);
     }},
    {"group_norm",
     "frozen affine [2,23,25,40], 4 groups of 10, fused SiLU, plus the skip (CUDA: a set of 4 groups over a cluster "
     "of 8 blocks, the last one short)",
     [](CaseBuilder& b) {
         ValueId x = b.x("x", {2, 23, 25, 40}, -1.0f, 3.0f);
         ValueId y = group_norm(b.g, x, b.c("gamma", {40}, 0.5f, 1.5f), b.c("beta", {40}), 4, 1e-5f, true);
         b.out(add(b.g, y, x));
     },
     [](Graph& g) {  // a 1-D x
         group_norm(g, g.input("x", DType::f32, {40}), g.input("g", DType::f32, {40}), g.input("b", DType::f32, {40}), 4,
                    1e-5f, true);
     }},
    {"group_norm",
     "frozen affine [2,16,16,120], 4 groups of 30, fused SiLU, plus the skip (CUDA: sets of 2 groups, 2-channel "
     "accesses)",
     [](CaseBuilder& b) {
         ValueId x = b.x("x", {2, 16, 16, 120}, -2.0f, 2.0f);
         ValueId y = group_norm(b.g, x, b.c("gamma", {120}, 0.5f, 1.5f), b.c("beta", {120}), 4, 1e-5f, true);
         b.out(add(b.g, y, x));
     },
     [](Graph& g) {  // more groups than channels
         group_norm(g, g.input("x", DType::f32, {1, 2, 2, 8}), g.input("g", DType::f32, {8}),
                    g.input("b", DType::f32, {8}), 16, 1e-5f, false);
     }},
    {"group_norm",
     "frozen affine [3,8,9,160], 8 groups of 20, values far from 0 (CUDA: sets of 2 groups, 4-channel accesses, "
     "each group's own shift)",
     [](CaseBuilder& b) {
         ValueId x = b.x("x", {3, 8, 9, 160}, 4.0f, 5.0f);
         b.out(group_norm(b.g, x, b.c("gamma", {160}, 0.5f, 1.5f), b.c("beta", {160}, -1.0f, 1.0f), 8, 1e-5f, false));
     },
     [](Graph& g) {  // groups that do not divide the channels
         group_norm(g, g.input("x", DType::f32, {1, 2, 2, 12}), g.input("g", DType::f32, {12}),
                    g.input("b", DType::f32, {12}), 5, 1e-5f, false);
     }},
    {"group_norm", "[3,9,40,64], 16 groups of 4, values far from 0 (CUDA: sets of 8 groups, 4-channel accesses, clusters)",
     [](CaseBuilder& b) {
         ValueId x = b.x("x", {3, 9, 40, 64}, 5.0f, 6.0f);
         b.out(group_norm(b.g, x, b.x("gamma", {64}, 0.5f, 1.5f), b.x("beta", {64}), 16, 1e-5f, false));
     },
     [](Graph& g) {  // eps below zero
         group_norm(g, g.input("x", DType::f32, {1, 2, 2, 64}), g.input("g", DType::f32, {64}),
                    g.input("b", DType::f32, {64}), 16, -1.0f, false);
     }},
    {"softmax", "[3,7]", [](CaseBuilder& b) { b.out(softmax(b.g, b.x("x", {3, 7}, -2.0f, 2.0f))); },
     [](Graph& g) { softmax(g, g.input("x", DType::i32, {3, 7})); }},
    {"softmax", "[2,3,5] with scale 0.35", [](CaseBuilder& b) {
         b.out(softmax(b.g, b.x("x", {2, 3, 5}, -3.0f, 3.0f), 0.35f));
     },
     [](Graph& g) { softmax(g, g.input("x", DType::f32, {3, 7}), INFINITY); }},
}));

// Runs a graph whose leaves are all inputs and returns the runtime.
std::unique_ptr<Runtime> run_graph(Graph& g, const std::vector<std::pair<ValueId, std::vector<float>>>& data,
                                   const std::vector<ValueId>& outs) {
    for (ValueId y : outs) g.mark_output(y);
    auto rt = make_cpu_runtime(make_plan(g));
    rt->poison(0xff);
    for (auto& [v, d] : data) rt->write_f32(v, d);
    rt->run();
    return rt;
}

std::vector<float> uniform(int64_t n, float lo, float hi, unsigned seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(lo, hi);
    std::vector<float> v(static_cast<size_t>(n));
    for (auto& e : v) e = u(rng);
    return v;
}

}  // namespace

TEST_CASE("group_norm matches the direct formula, statistics included") {
    const int64_t N = 2, P = 6, C = 8, G = 4, Cg = C / G;
    for (bool act : {false, true}) {
        Graph g;
        ValueId x = g.input("x", DType::f32, {N, 2, 3, C});
        ValueId gm = g.input("gamma", DType::f32, {C});
        ValueId bt = g.input("beta", DType::f32, {C});
        std::vector<float> xd = uniform(N * P * C, -1, 3, 1), gd = uniform(C, 0.5f, 1.5f, 2), bd = uniform(C, -1, 1, 3);
        group_norm(g, x, gm, bt, int(G), 1e-5f, act);
        std::vector<ValueId> outs = g.nodes.back().out;  // y, mean, rstd
        auto rt = run_graph(g, {{x, xd}, {gm, gd}, {bt, bd}}, outs);
        auto y = rt->read_f32(outs[0]), mean = rt->read_f32(outs[1]), rstd = rt->read_f32(outs[2]);
        for (int64_t n = 0; n < N; n++)
            for (int64_t gi = 0; gi < G; gi++) {
                double s = 0, s2 = 0;
                for (int64_t p = 0; p < P; p++)
                    for (int64_t k = 0; k < Cg; k++) s += xd[size_t((n * P + p) * C + gi * Cg + k)];
                double mu = s / double(P * Cg);
                for (int64_t p = 0; p < P; p++)
                    for (int64_t k = 0; k < Cg; k++) {
                        double e = xd[size_t((n * P + p) * C + gi * Cg + k)] - mu;
                        s2 += e * e;
                    }
                double rs = 1.0 / std::sqrt(s2 / double(P * Cg) + 1e-5);
                CHECK(mean[size_t(n * G + gi)] == doctest::Approx(mu).epsilon(1e-6));
                CHECK(rstd[size_t(n * G + gi)] == doctest::Approx(rs).epsilon(1e-6));
                for (int64_t p = 0; p < P; p++)
                    for (int64_t k = 0; k < Cg; k++) {
                        size_t i = size_t((n * P + p) * C + gi * Cg + k), c = size_t(gi * Cg + k);
                        double h = (xd[i] - mu) * rs * gd[c] + bd[c];
                        double want = act ? h / (1.0 + std::exp(-h)) : h;
                        CHECK(y[i] == doctest::Approx(want).epsilon(1e-5));
                    }
            }
    }
}

TEST_CASE("layer_norm and softmax match the direct formulas") {
    const int64_t R = 3, D = 10;
    std::vector<float> xd = uniform(R * D, -2, 4, 4), gd = uniform(D, 0.5f, 1.5f, 5), bd = uniform(D, -1, 1, 6);
    Graph g;
    ValueId x = g.input("x", DType::f32, {R, D});
    ValueId gm = g.input("gamma", DType::f32, {D});
    ValueId bt = g.input("beta", DType::f32, {D});
    Params p;
    p.f[0] = 1e-5f;
    auto ln = g.apply(Op::layer_norm, {x, gm, bt}, p);
    ValueId sm = softmax(g, x, 0.7f);
    std::vector<ValueId> outs = ln;
    outs.push_back(sm);
    auto rt = run_graph(g, {{x, xd}, {gm, gd}, {bt, bd}}, outs);
    auto y = rt->read_f32(ln[0]), mean = rt->read_f32(ln[1]), rstd = rt->read_f32(ln[2]), s = rt->read_f32(sm);
    for (int64_t r = 0; r < R; r++) {
        double mu = 0, var = 0, m = -1e30, z = 0;
        for (int64_t k = 0; k < D; k++) mu += xd[size_t(r * D + k)] / double(D);
        for (int64_t k = 0; k < D; k++) var += std::pow(xd[size_t(r * D + k)] - mu, 2) / double(D);
        for (int64_t k = 0; k < D; k++) m = std::max(m, 0.7 * xd[size_t(r * D + k)]);
        for (int64_t k = 0; k < D; k++) z += std::exp(0.7 * xd[size_t(r * D + k)] - m);
        double rs = 1.0 / std::sqrt(var + 1e-5);
        CHECK(mean[size_t(r)] == doctest::Approx(mu).epsilon(1e-6));
        CHECK(rstd[size_t(r)] == doctest::Approx(rs).epsilon(1e-6));
        for (int64_t k = 0; k < D; k++) {
            size_t i = size_t(r * D + k);
            CHECK(y[i] == doctest::Approx((xd[i] - mu) * rs * gd[size_t(k)] + bd[size_t(k)]).epsilon(1e-5));
            CHECK(s[i] == doctest::Approx(std::exp(0.7 * xd[i] - m) / z).epsilon(1e-5));
        }
    }
}

TEST_CASE("group_norm, layer_norm and softmax give the same results when run in place") {
    const Shape xs{2, 3, 3, 8};
    std::vector<float> xd = uniform(xs.numel(), -1, 2, 11), gd = uniform(8, 0.5f, 1.5f, 12), bd = uniform(8, -1, 1, 13);
    std::vector<std::vector<float>> results[2];
    for (int keep = 0; keep < 2; keep++) {
        Graph g;
        ValueId x = g.input("x", DType::f32, xs);
        ValueId gm = g.input("gamma", DType::f32, {8});
        ValueId bt = g.input("beta", DType::f32, {8});
        // Each op's input is a temporary that dies there, unless marked as an output.
        ValueId a = scale(g, x, 2.0f), b = scale(g, x, 0.5f), s = scale(g, x, 3.0f);
        std::vector<ValueId> ins{a, b, s};
        std::vector<ValueId> outs{group_norm(g, a, gm, bt, 4, 1e-5f, true),
                                  layer_norm(g, b, gm, bt, 1e-5f), softmax(g, s, 0.5f)};
        if (keep)
            for (ValueId v : ins) g.mark_output(v);
        auto rt = run_graph(g, {{x, xd}, {gm, gd}, {bt, bd}}, outs);
        for (size_t k = 0; k < outs.size(); k++) {
            const Plan& plan = rt->plan();
            CHECK_MESSAGE((plan.inplace_of[size_t(outs[k])] == ins[k]) == !keep, "output ", k, " in place: ", !keep);
            results[keep].push_back(rt->read_f32(outs[k]));
        }
    }
    for (size_t k = 0; k < results[0].size(); k++) CHECK(results[0][k] == results[1][k]);
}

TEST_CASE("group_norm and layer_norm gradients are bitwise deterministic across thread counts") {
    const int saved = cpu_threads();
    std::vector<std::vector<float>> first;
    for (int threads : {1, 3, 8}) {
        set_cpu_threads(threads);
        Graph g;
        const Shape xs{3, 4, 4, 8};
        ValueId x = g.input("x", DType::f32, xs);
        ValueId gy = g.input("gy", DType::f32, xs);
        ValueId gm = g.input("gamma", DType::f32, {8});
        ValueId bt = g.input("beta", DType::f32, {8});
        Params p;
        p.i[0] = 2;
        p.i[1] = 1;
        p.f[0] = 1e-5f;
        auto f = g.apply(Op::group_norm, {x, gm, bt}, p);
        auto d = g.apply(Op::group_norm_grad, {gy, x, gm, bt, f[1], f[2]}, p);
        ValueId x2 = reshape(g, x, {48, 8});
        ValueId gy2 = reshape(g, gy, {48, 8});
        auto lf = g.apply(Op::layer_norm, {x2, gm, bt}, p);
        auto ld = g.apply(Op::layer_norm_grad, {gy2, x2, gm, bt, lf[1], lf[2]}, p);
        std::vector<ValueId> outs{f[0], d[0], d[1], d[2], lf[0], ld[0], ld[1], ld[2]};
        auto rt = run_graph(g,
                            {{x, uniform(xs.numel(), -1, 1, 7)}, {gy, uniform(xs.numel(), -1, 1, 8)},
                             {gm, uniform(8, 0.5f, 1.5f, 9)}, {bt, uniform(8, -1, 1, 10)}},
                            outs);
        for (size_t k = 0; k < outs.size(); k++) {
            auto got = rt->read_f32(outs[k]);
            if (first.size() <= k)
                first.push_back(got);
            else
                CHECK_MESSAGE(got == first[k], "output ", k, " differs with ", threads, " threads");
        }
    }
    set_cpu_threads(saved);
}

}  // namespace gltest
