// The shared layer set (models/nn/): how layers name weights, values and segments, what the hooks
// see, and the attention's checks. The numbers of the layers are the ops' (tests/cases_*.cpp) and
// the models' golden tests'; the graphs the models build are pinned by test_model_graphs.cpp.
#include <doctest/doctest.h>

#include "ggml-lite/core/error.h"
#include "models/nn/layers.h"

using namespace gl;

namespace {

// The id of the first value with this name, kNoValue when none.
ValueId find(const Graph& g, const std::string& name) {
    for (size_t i = 0; i < g.values.size(); i++)
        if (g.values[i].name == name) return ValueId(i);
    return kNoValue;
}

}  // namespace

TEST_CASE("nn: layers name weights and values by the module path, blocks their segment") {
    Graph g;
    nn::Weights w(g, DType::f32);
    ValueId x = g.input("x", DType::f32, {2, 4, 4, 8});
    ValueId y;
    {
        nn::Scope outer(w, "up.0");
        nn::Block blk(w, "res");
        y = nn::group_norm(w, "norm", x, 4, 1e-5f, true);
        y = nn::conv2d(w, "conv", y, 6, 3, 1, 1);
    }
    y = nn::linear(w, "proj", y, 5, false);

    CHECK(g.shape(find(g, "up.0.res.conv.weight")) == Shape{6, 3, 3, 8});
    CHECK(g.shape(find(g, "up.0.res.norm.bias")) == Shape{8});
    CHECK(find(g, "proj.weight") != kNoValue);
    CHECK(find(g, "proj.bias") == kNoValue);
    CHECK(find(g, "up.0.res.conv.conv2d") != kNoValue);
    CHECK(g.v(y).name == "proj.linear");
    REQUIRE(g.segment_names == std::vector<std::string>{"up.0.res"});
    const Node& conv = g.nodes[size_t(g.v(find(g, "up.0.res.conv.conv2d")).producer)];
    CHECK(conv.segment == 0);
    CHECK(g.nodes[size_t(g.v(y).producer)].segment == -1);

    const auto& e = w.entries();
    REQUIRE(e.size() == 5);
    CHECK(e[2].name == "up.0.res.conv.weight");
    CHECK(e[2].layout == nn::WeightLayout::conv_ohwi);
    CHECK(e[4].layout == nn::WeightLayout::plain);
}

TEST_CASE("nn: the hooks see every linear and conv with its module path, weight and bias and replace its output") {
    Graph g;
    nn::Weights w(g, DType::f32);
    std::vector<std::string> seen;
    std::vector<std::string> weights;
    w.linear_hook = [&](Graph& gg, const nn::Weights::LayerCall& c) {
        seen.push_back("linear " + c.module);
        weights.push_back(gg.v(c.weight.q).name + (c.bias == kNoValue ? "" : " " + gg.v(c.bias).name));
        return gl::scale(gg, c.y, 2.0f);
    };
    w.conv_hook = [&](Graph& gg, const nn::Weights::LayerCall& c) {
        seen.push_back(gl::cat("conv ", c.module, " ", c.k, " ", c.stride, " ", c.pad));
        weights.push_back(gg.v(c.weight.q).name + " " + gg.v(c.bias).name);
        return gl::scale(gg, c.y, 3.0f);
    };
    ValueId x = g.input("x", DType::f32, {1, 4, 4, 2});
    ValueId c = nn::conv2d(w, "down.conv", x, 3, 3, 2, 1);
    ValueId t = g.input("t", DType::f32, {1, 5, 3});
    ValueId a = nn::attention(w, "attn", t, t, {.heads = 3});
    CHECK(seen == std::vector<std::string>{"conv down.conv 3 2 1", "linear attn.to_q", "linear attn.to_k",
                                           "linear attn.to_v", "linear attn.to_out.0"});
    // Each hook sees the weight and bias its layer computed with (adapters that rebuild the weight need them).
    CHECK(weights == std::vector<std::string>{"down.conv.weight down.conv.bias", "attn.to_q.weight", "attn.to_k.weight",
                                              "attn.to_v.weight", "attn.to_out.0.weight attn.to_out.0.bias"});
    CHECK(g.nodes[size_t(g.v(c).producer)].op == Op::scale);
    CHECK(g.nodes[size_t(g.v(a).producer)].op == Op::scale);
    CHECK(find(g, "attn.to_q.bias") == kNoValue);  // diffusers: no q/k/v bias by default
    CHECK(find(g, "attn.to_out.0.bias") != kNoValue);
}

TEST_CASE("nn: without layer value scopes, values keep the enclosing name and weights their full path") {
    Graph g;
    nn::Weights w(g, DType::f32);
    w.layer_value_scopes = false;
    ValueId x = g.input("x", DType::f32, {2, 3, 8});
    nn::Scope s(w, "mlp");
    ValueId y = nn::layer_norm(w, "ln", x, 1e-5f);
    y = nn::activation(g, nn::linear(w, "fc1", y, 4), Act::quick_gelu);
    CHECK(g.v(y).name == "mlp.quick_gelu");
    CHECK(find(g, "mlp.linear") != kNoValue);
    CHECK(find(g, "mlp.fc1.linear") == kNoValue);
    CHECK(find(g, "mlp.fc1.weight") != kNoValue);
    CHECK(find(g, "mlp.ln.weight") != kNoValue);
}

TEST_CASE("nn: attention refuses inputs and head counts that do not fit, naming the module") {
    Graph g;
    nn::Weights w(g, DType::f32);
    ValueId x = g.input("x", DType::f32, {2, 5, 6});
    ValueId kv = g.input("kv", DType::f32, {3, 7, 4});
    CHECK_THROWS_WITH_AS(nn::attention(w, "attn1", x, kv, {.heads = 2}), doctest::Contains("attention attn1"),
                         gl::Error);
    CHECK_THROWS_WITH_AS(nn::attention(w, "attn2", x, x, {.heads = 4}), doctest::Contains("not a multiple of 4 heads"),
                         gl::Error);
    CHECK(w.entries().empty());
}
