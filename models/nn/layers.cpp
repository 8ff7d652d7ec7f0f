#include "models/nn/layers.h"

#include <optional>

#include "ggml-lite/core/error.h"

namespace nn {

using gl::Graph;
using gl::Shape;
using gl::ValueId;

namespace {

// A layer's own scope: always for its weights, for its values unless the store says otherwise
// (Weights::layer_value_scopes).
class LayerScope {
public:
    LayerScope(Weights& w, const std::string& name) : ws_(w, name) {
        if (w.layer_value_scopes) gs_.emplace(w.graph(), name);
    }

private:
    WeightScope ws_;
    std::optional<gl::Scope> gs_;
};

}  // namespace

ValueId linear(Weights& w, const std::string& name, ValueId x, int64_t out, bool bias) {
    LayerScope s(w, name);
    Graph& g = w.graph();
    const gl::QuantWeight wt = w.matrix("weight", Shape{out, g.shape(x).last()});
    ValueId b = bias ? w.get("bias", Shape{out}) : gl::kNoValue;
    ValueId y = wt.scale == gl::kNoValue ? gl::linear(g, x, wt.q, b) : gl::linear(g, x, wt, b);
    return w.linear_hook ? w.linear_hook(g, {w.module_path(), x, y, wt, b}) : y;
}

ValueId conv2d(Weights& w, const std::string& name, ValueId x, int64_t cout, int k, int stride, int pad) {
    LayerScope s(w, name);
    Graph& g = w.graph();
    const int64_t cin = g.shape(x).last();
    const gl::QuantWeight wt = w.matrix("weight", Shape{cout, k, k, cin}, WeightLayout::conv_ohwi);
    ValueId b = w.get("bias", Shape{cout});
    ValueId y = wt.scale == gl::kNoValue ? gl::conv2d(g, x, wt.q, b, stride, pad) : gl::conv2d(g, x, wt, b, stride, pad);
    return w.conv_hook ? w.conv_hook(g, {w.module_path(), x, y, wt, b, k, stride, pad}) : y;
}

ValueId group_norm(Weights& w, const std::string& name, ValueId x, int groups, float eps, bool silu) {
    LayerScope s(w, name);
    Graph& g = w.graph();
    const int64_t ch = g.shape(x).last();
    ValueId gamma = w.get("weight", Shape{ch});
    ValueId beta = w.get("bias", Shape{ch});
    return gl::group_norm(g, x, gamma, beta, groups, eps, silu);
}

ValueId layer_norm(Weights& w, const std::string& name, ValueId x, float eps) {
    LayerScope s(w, name);
    Graph& g = w.graph();
    const int64_t ch = g.shape(x).last();
    ValueId gamma = w.get("weight", Shape{ch});
    ValueId beta = w.get("bias", Shape{ch});
    return gl::layer_norm(g, x, gamma, beta, eps);
}

ValueId activation(Graph& g, ValueId x, gl::Act a) {
    switch (a) {
        case gl::Act::quick_gelu: return gl::quick_gelu(g, x);
        case gl::Act::gelu_erf: return gl::gelu(g, x, false);
        case gl::Act::gelu_tanh: return gl::gelu(g, x, true);
        case gl::Act::silu: return gl::silu(g, x);
    }
    gl::fail("activation: unknown kind ", int(a));
}

ValueId attention(Weights& w, const std::string& name, ValueId x, ValueId kv, const AttentionSpec& s) {
    Scope sc(w, name);
    Graph& g = w.graph();
    const Shape xs = g.shape(x), ks = g.shape(kv);
    GL_CHECK(xs.nd == 3 && ks.nd == 3 && ks[0] == xs[0], "attention ", w.module_path(), ": x ", g.describe(x),
             " and kv ", g.describe(kv), " must be [B, L, C] and [B, S, *]");
    const int64_t B = xs[0], L = xs[1], S = ks[1], C = xs[2], H = s.heads;
    GL_CHECK(H >= 1 && C % H == 0, "attention ", w.module_path(), ": width ", C, " is not a multiple of ", H,
             " heads");
    const int64_t d = C / H;
    ValueId q = linear(w, s.q, x, C, s.qkv_bias);
    q = gl::reshape(g, q, Shape{B, L, H, d});
    ValueId k = linear(w, s.k, kv, C, s.qkv_bias);
    k = gl::reshape(g, k, Shape{B, S, H, d});
    ValueId v = linear(w, s.v, kv, C, s.qkv_bias);
    v = gl::reshape(g, v, Shape{B, S, H, d});
    ValueId o = gl::attention(g, q, k, v, 0.0f, s.causal);
    o = gl::reshape(g, o, Shape{B, L, C});
    return linear(w, s.out, o, C);
}

}  // namespace nn
