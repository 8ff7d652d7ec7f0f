// Cases for the attention family. The sizes cross the kernel's query and key tiles (16 and
// 32) so that the online softmax and the blockwise backward are exercised across tiles. The
// forward (o and lse) is also held to a naive softmax(scale q k^T) v here.
#include <doctest/doctest.h>

#include <cmath>

#include "ggml-lite/core/error.h"
#include "ggml-lite/core/parallel.h"
#include "ggml-lite/core/runtime.h"
#include "op_cases.h"

namespace gltest {
namespace {

using namespace gl;

struct Qkv {
    int64_t B, L, S, H, d, dv;
};

ValueId attn(CaseBuilder& b, Qkv s, float scale, bool causal, float range = 1.5f) {
    ValueId q = b.x("q", {s.B, s.L, s.H, s.d}, -range, range);
    ValueId k = b.x("k", {s.B, s.S, s.H, s.d}, -range, range);
    ValueId v = b.x("v", {s.B, s.S, s.H, s.dv});
    return attention(b.g, q, k, v, scale, causal);
}

// Builds attention on fresh f32 inputs of the given shapes (for bad calls).
void attn_bad(Graph& g, const Shape& q, const Shape& k, const Shape& v, bool causal = false, DType kt = DType::f32) {
    attention(g, g.input("q", DType::f32, q), g.input("k", kt, k), g.input("v", DType::f32, v), 0.0f, causal);
}

// Finite differences agree to ~1e-4 here; a tight tolerance catches small formula slips.
std::vector<OpCase> tight(std::vector<OpCase> cs) {
    for (OpCase& c : cs) c.tol = 2e-3;
    return cs;
}

Register r(tight({
    {"attention", "self-attention B=2 L=S=5 H=2 d=8, default scale",
     [](CaseBuilder& b) { b.out(attn(b, {2, 5, 5, 2, 8, 8}, 0.0f, false)); },
     [](Graph& g) { attn_bad(g, {1, 5, 2, 8}, {1, 5, 2, 6}, {1, 5, 2, 8}); }},  // q / k head dims differ
    {"attention", "cross-attention L=6 S=4, d=8 dv=12, scale 0.3",
     [](CaseBuilder& b) { b.out(attn(b, {1, 6, 4, 1, 8, 12}, 0.3f, false)); },
     [](Graph& g) { attn_bad(g, {1, 6, 1, 8}, {1, 4, 1, 8}, {1, 4, 1, 8}, true); }},  // causal with L != S
    {"attention", "causal L=S=7 H=2 d=8 (CLIP)", [](CaseBuilder& b) { b.out(attn(b, {1, 7, 7, 2, 8, 8}, 0.0f, true)); },
     [](Graph& g) { attn_bad(g, {5, 2, 8}, {5, 2, 8}, {5, 2, 8}); }},  // rank 3 instead of 4
    {"attention", "head dim 40, L=3 S=5", [](CaseBuilder& b) { b.out(attn(b, {1, 3, 5, 1, 40, 40}, 0.0f, false, 0.6f)); },
     [](Graph& g) { attn_bad(g, {1, 3, 1, 40}, {1, 5, 1, 40}, {1, 4, 1, 40}); }},  // k / v lengths differ
    {"attention", "across tiles: L=37 S=70 d=8 dv=4",
     [](CaseBuilder& b) { b.out(attn(b, {1, 37, 70, 1, 8, 4}, 0.0f, false)); },
     [](Graph& g) { attn_bad(g, {2, 3, 1, 8}, {1, 3, 1, 8}, {1, 3, 1, 8}); }},  // batch sizes differ
    {"attention", "causal across tiles: L=S=40 H=2 d=8 dv=4, scale 0.5",
     [](CaseBuilder& b) { b.out(attn(b, {1, 40, 40, 2, 8, 4}, 0.5f, true)); },
     [](Graph& g) { attn_bad(g, {1, 3, 1, 8}, {1, 3, 1, 8}, {1, 3, 1, 8}, false, DType::bf16); }},  // dtypes differ
    // Long enough for sm_90a's wgmma kernels (cuda/attention_sm90.cuh: S >= 256, d 40 / 80), ragged
    // in queries and keys against their 64- and 128-row tiles.
    {"attention", "head dim 40, L=130 S=260 H=2 (the wgmma kernels on sm_90a)",
     [](CaseBuilder& b) { b.out(attn(b, {1, 130, 260, 2, 40, 40}, 0.0f, false, 0.6f)); },
     [](Graph& g) { attn_bad(g, {1, 3, 1, 40}, {1, 5, 1, 40}, {1, 5, 2, 40}); }},  // k / v head counts differ
    {"attention", "head dim 80, L=70 S=300, scale 0.2 (the wgmma kernels on sm_90a)",
     [](CaseBuilder& b) { b.out(attn(b, {1, 70, 300, 1, 80, 80}, 0.2f, false, 0.6f)); },
     [](Graph& g) { attn_bad(g, {1, 6, 1, 80}, {1, 4, 1, 80}, {1, 4, 1, 80}, true); }},  // causal with L != S
    {"attention", "strided q from [B,H,L,d], k and v sliced from a fused kv projection",
     [](CaseBuilder& b) {
         ValueId q = b.x("q", {2, 2, 5, 8}, -1.5f, 1.5f);
         ValueId kv = b.x("kv", {2, 6, 2, 16}, -1.5f, 1.5f);
         ValueId k = slice(b.g, kv, 3, 0, 8), v = slice(b.g, kv, 3, 8, 8);
         b.out(attention(b.g, permute(b.g, q, {0, 2, 1, 3}), k, v));
     },
     [](Graph& g) { attn_bad(g, {1, 3, 2, 8}, {1, 3, 1, 8}, {1, 3, 1, 8}); }},  // head counts differ
}));

std::vector<float> uniform(int64_t n, float lo, float hi, unsigned seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(lo, hi);
    std::vector<float> v(static_cast<size_t>(n));
    for (auto& e : v) e = u(rng);
    return v;
}

struct AttnRun {
    std::vector<float> o, lse, dq, dk, dv;
};

// Runs attention (and attention_grad on a random dO) on dense inputs.
AttnRun run_attention(Qkv s, float scale, bool causal, const std::vector<float>& q, const std::vector<float>& k,
                      const std::vector<float>& v, const std::vector<float>& go) {
    Graph g;
    ValueId qi = g.input("q", DType::f32, {s.B, s.L, s.H, s.d});
    ValueId ki = g.input("k", DType::f32, {s.B, s.S, s.H, s.d});
    ValueId vi = g.input("v", DType::f32, {s.B, s.S, s.H, s.dv});
    ValueId gi = g.input("go", DType::f32, {s.B, s.L, s.H, s.dv});
    attention(g, qi, ki, vi, scale, causal);
    Node fwd = g.nodes.back();
    auto d = g.apply(Op::attention_grad, {qi, ki, vi, fwd.out[0], fwd.out[1], gi}, fwd.p);
    for (ValueId y : {fwd.out[0], fwd.out[1], d[0], d[1], d[2]}) g.mark_output(y);
    auto rt = make_cpu_runtime(make_plan(g));
    rt->poison(0xff);
    rt->write_f32(qi, q);
    rt->write_f32(ki, k);
    rt->write_f32(vi, v);
    rt->write_f32(gi, go);
    rt->run();
    return {rt->read_f32(fwd.out[0]), rt->read_f32(fwd.out[1]), rt->read_f32(d[0]), rt->read_f32(d[1]),
            rt->read_f32(d[2])};
}

}  // namespace

TEST_CASE("attention matches naive softmax(scale q k^T) v, lse included") {
    struct Cfg {
        Qkv s;
        float scale;
        bool causal;
    };
    for (Cfg cfg : {Cfg{{2, 37, 70, 2, 8, 12}, 0.0f, false}, Cfg{{1, 45, 45, 3, 40, 40}, 0.0f, true},
                    Cfg{{1, 20, 77, 1, 16, 8}, 0.25f, false}}) {
        const Qkv s = cfg.s;
        auto q = uniform(s.B * s.L * s.H * s.d, -2, 2, 1), k = uniform(s.B * s.S * s.H * s.d, -2, 2, 2);
        auto v = uniform(s.B * s.S * s.H * s.dv, -1, 1, 3), go = uniform(s.B * s.L * s.H * s.dv, -1, 1, 4);
        AttnRun got = run_attention(s, cfg.scale, cfg.causal, q, k, v, go);
        const double sc = cfg.scale != 0.0f ? cfg.scale : 1.0 / std::sqrt(double(s.d));
        double err_o = 0, err_l = 0;
        for (int64_t b = 0; b < s.B; b++)
            for (int64_t h = 0; h < s.H; h++)
                for (int64_t i = 0; i < s.L; i++) {
                    std::vector<double> sc_row(size_t(s.S), -INFINITY);
                    double m = -INFINITY;
                    for (int64_t j = 0; j < s.S; j++) {
                        if (cfg.causal && j > i) continue;
                        double dot = 0;
                        for (int64_t e = 0; e < s.d; e++)
                            dot += double(q[size_t(((b * s.L + i) * s.H + h) * s.d + e)]) *
                                   k[size_t(((b * s.S + j) * s.H + h) * s.d + e)];
                        sc_row[size_t(j)] = sc * dot;
                        m = std::max(m, sc * dot);
                    }
                    double z = 0;
                    for (double x : sc_row) z += std::exp(x - m);
                    err_l = std::max(err_l, std::fabs(got.lse[size_t((b * s.H + h) * s.L + i)] - (m + std::log(z))));
                    for (int64_t e = 0; e < s.dv; e++) {
                        double acc = 0;
                        for (int64_t j = 0; j < s.S; j++)
                            acc += std::exp(sc_row[size_t(j)] - m) / z * v[size_t(((b * s.S + j) * s.H + h) * s.dv + e)];
                        err_o = std::max(err_o, std::fabs(got.o[size_t(((b * s.L + i) * s.H + h) * s.dv + e)] - acc));
                    }
                }
        CHECK(err_o < 1e-5);
        CHECK(err_l < 1e-5);
    }
}

TEST_CASE("attention forward and backward are bitwise deterministic across thread counts") {
    const int saved = cpu_threads();
    const Qkv s{2, 50, 50, 3, 8, 8};
    auto q = uniform(s.B * s.L * s.H * s.d, -2, 2, 5), k = uniform(s.B * s.S * s.H * s.d, -2, 2, 6);
    auto v = uniform(s.B * s.S * s.H * s.dv, -1, 1, 7), go = uniform(s.B * s.L * s.H * s.dv, -1, 1, 8);
    for (bool causal : {false, true}) {
        set_cpu_threads(1);
        AttnRun a = run_attention(s, 0.0f, causal, q, k, v, go);
        set_cpu_threads(5);
        AttnRun b = run_attention(s, 0.0f, causal, q, k, v, go);
        CHECK(a.o == b.o);
        CHECK(a.lse == b.lse);
        CHECK(a.dq == b.dq);
        CHECK(a.dk == b.dk);
        CHECK(a.dv == b.dv);
    }
    set_cpu_threads(saved);
}

}  // namespace gltest
