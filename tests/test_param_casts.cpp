// merge_param_casts: a graph's per-use casts of f32 parameter masters become one cast_multi at the
// start, its backward one cast_multi back, and nothing computed changes (CPU, bit for bit, with
// and without recompute); fold_param_scales: a LoRA branch's scale goes into its up weight's copy
// (bit for bit at a power of two, within fp32 rounding otherwise). The SD1.5 training step's
// nodes: test_step_launches.cpp.
#include <doctest/doctest.h>

#include <random>

#include "ggml-lite/core/autodiff.h"
#include "ggml-lite/core/error.h"
#include "ggml-lite/ops/param_casts.h"
#include "ggml-lite/core/planner.h"
#include "ggml-lite/core/runtime.h"
#include "ggml-lite/ops/builder.h"

using namespace gl;

namespace {

int count_op(const Graph& g, Op op, bool backward) {
    int n = 0;
    for (const Node& x : g.nodes) n += x.op == op && x.backward == backward;
    return n;
}

// Two checkpoint blocks, each a linear with a LoRA-like branch of two f32 masters (cast where used
// when the activations are bf16), the branch scaled by `s`; a frozen f32 weight cast too (not a
// parameter: left alone).
struct Net {
    Graph g;
    ValueId x, w, loss;
    std::vector<ValueId> params;
    Gradients grads;

    explicit Net(bool merge, bool fold = false, DType act = DType::bf16, float s = 0.5f) {
        x = g.input("x", DType::f32, {6, 8});
        w = g.weight("w", DType::f32, {8, 8});
        ValueId h = cast(g, x, act);
        for (int b = 0; b < 2; b++) {
            Segment seg(g, "block" + std::to_string(b));
            const ValueId down = g.param("down" + std::to_string(b), DType::f32, {3, 8});
            const ValueId up = g.param("up" + std::to_string(b), DType::f32, {8, 3});
            params.insert(params.end(), {down, up});
            const ValueId base = linear(g, h, cast(g, w, act));
            const ValueId d = linear(g, h, cast(g, down, act));
            const ValueId branch = linear(g, d, cast(g, up, act));
            h = silu(g, add(g, base, scale(g, branch, s)));
        }
        loss = mean(g, cast(g, h, DType::f32));
        g.mark_output(loss);
        if (fold) CHECK(fold_param_scales(g) == 2);
        if (merge) CHECK(merge_param_casts(g) == (act == DType::bf16 ? 4 : fold ? 2 : 0));
        grads = backward(g, loss);
    }

    // Every parameter's gradient and the loss, on the CPU.
    std::vector<std::vector<float>> run(Recompute rc, bool fusion = true) {
        PlanOptions po;
        po.recompute = rc;
        po.fusion = fusion;
        auto rt = make_cpu_runtime(make_plan(g, po));
        rt->poison(0xff);
        std::mt19937 rng(3);
        std::uniform_real_distribution<float> u(-1.0f, 1.0f);
        for (ValueId v : {x, w}) {
            std::vector<float> d(size_t(g.v(v).numel()));
            for (float& e : d) e = u(rng);
            rt->write_f32(v, d);
        }
        for (ValueId p : params) {
            std::vector<float> d(size_t(g.v(p).numel()));
            for (float& e : d) e = u(rng);
            rt->write_f32(p, d);
        }
        rt->run();
        std::vector<std::vector<float>> r{rt->read_f32(loss)};
        for (ValueId p : params) r.push_back(rt->read_f32(grads[p]));
        return r;
    }
};

}  // namespace

TEST_CASE("merge_param_casts: one cast_multi forward and one back, the same loss and gradients bit for bit") {
    Net plain(false), merged(true);
    CHECK(count_op(plain.g, Op::cast, false) == 8);  // x, w twice, four masters, h to f32
    CHECK(count_op(merged.g, Op::cast, false) == 4);
    CHECK(count_op(merged.g, Op::cast_multi, false) == 1);
    REQUIRE(merged.g.nodes[0].op == Op::cast_multi);  // first, outside every checkpoint segment
    CHECK(merged.g.nodes[0].segment == -1);
    CHECK(merged.g.nodes[0].in == merged.params);
    // The gradients of the four bf16 copies go back to f32 in one node, not four casts.
    CHECK(count_op(merged.g, Op::cast_multi, true) == 1);
    CHECK(count_op(merged.g, Op::cast, true) + 4 == count_op(plain.g, Op::cast, true));
    for (size_t i = 0; i < merged.g.nodes.size(); i++)
        for (ValueId y : merged.g.nodes[i].out) CHECK(merged.g.v(y).producer == int(i));
    for (Recompute rc : {Recompute::none, Recompute::blocks, Recompute::cheap}) {
        CAPTURE(recompute_name(rc));
        CHECK(merged.run(rc) == plain.run(Recompute::none));
    }
}

TEST_CASE("merge_param_casts: single casts stay, and it refuses a graph with a backward pass") {
    Graph g;
    const ValueId p = g.param("p", DType::f32, {4}), q = g.param("q", DType::f32, {4});
    const ValueId y = add(g, cast(g, p, DType::bf16), cast(g, cast(g, q, DType::f16), DType::bf16));
    CHECK(merge_param_casts(g) == 0);  // one f32 -> bf16 and one f32 -> f16 cast: nothing to merge
    CHECK(count_op(g, Op::cast_multi, false) == 0);
    backward(g, mean(g, cast(g, y, DType::f32)));
    CHECK_THROWS_AS(merge_param_casts(g), Error);
}

TEST_CASE("fold_param_scales: a LoRA scale of 0.5 goes into the up weights' cast, no scale node either way, bit for bit") {
    Net plain(false), folded(true, true);
    CHECK(count_op(plain.g, Op::scale, false) == 2);
    CHECK(count_op(folded.g, Op::scale, false) == 0);
    CHECK(count_op(folded.g, Op::scale, true) + 2 == count_op(plain.g, Op::scale, true));  // mean's stays
    // The downs at scale 1, the ups at 0.5: a cast_multi each, forward and back.
    CHECK(count_op(folded.g, Op::cast_multi, false) == 2);
    CHECK(count_op(folded.g, Op::cast_multi, true) == 2);
    CHECK(count_op(folded.g, Op::cast, false) == 4);
    for (size_t i = 0; i < folded.g.nodes.size(); i++)
        for (ValueId y : folded.g.nodes[i].out) CHECK(folded.g.v(y).producer == int(i));
    for (Recompute rc : {Recompute::none, Recompute::blocks, Recompute::cheap}) {
        CAPTURE(recompute_name(rc));
        // A power of two commutes with rounding. Unfused: the folded scale leaves a view between
        // the up projection and its join, which the fusion pass folds into the projection (the sum
        // then rounded once, not after the product too), while the scale node keeps plain's apart.
        CHECK(folded.run(rc, false) == plain.run(Recompute::none, false));
        CHECK(folded.run(rc) == folded.run(Recompute::none));
    }
}

TEST_CASE("fold_param_scales: f32 activations take scaled copies of the masters, within fp32 rounding of the scale") {
    Net plain(false, false, DType::f32, 0.3f), folded(true, true, DType::f32, 0.3f);
    CHECK(count_op(folded.g, Op::scale, false) == 0);
    CHECK(count_op(folded.g, Op::scale, true) + 2 == count_op(plain.g, Op::scale, true));
    CHECK(count_op(folded.g, Op::cast_multi, false) == 1);  // both ups, scaled by 0.3
    REQUIRE(folded.g.nodes[0].op == Op::cast_multi);
    CHECK(folded.g.nodes[0].p.f[0] == 0.3f);
    const auto want = plain.run(Recompute::none);
    for (Recompute rc : {Recompute::none, Recompute::blocks}) {
        CAPTURE(recompute_name(rc));
        const auto got = folded.run(rc);
        REQUIRE(got.size() == want.size());
        for (size_t k = 0; k < got.size(); k++)
            for (size_t i = 0; i < got[k].size(); i++)
                CHECK(got[k][i] == doctest::Approx(want[k][i]).epsilon(1e-5));
    }
}

TEST_CASE("fold_param_scales: leaves a scale whose linear has a bias or another reader, or that is an output") {
    Graph g;
    const ValueId x = g.input("x", DType::bf16, {4, 8});
    const ValueId p = g.param("p", DType::f32, {8, 8}), q = g.param("q", DType::f32, {8, 8});
    const ValueId r = g.param("r", DType::f32, {8, 8}), bias = g.param("b", DType::f32, {8});
    const ValueId with_bias = scale(g, linear(g, x, cast(g, p, DType::bf16), cast(g, bias, DType::bf16)), 0.5f);
    const ValueId read_twice = linear(g, x, cast(g, q, DType::bf16));
    const ValueId out = scale(g, linear(g, x, cast(g, r, DType::bf16)), 0.5f);
    g.mark_output(out);
    const ValueId y = add(g, add(g, with_bias, scale(g, read_twice, 0.25f)), add(g, read_twice, out));
    CHECK(fold_param_scales(g) == 0);
    CHECK(count_op(g, Op::scale, false) == 3);
    backward(g, mean(g, cast(g, y, DType::f32)));
    CHECK_THROWS_AS(fold_param_scales(g), Error);
}
