// The layers the models are built from, written once for all of them. A layer opens its module's
// name for its weights ("<module>.weight", "<module>.bias": the checkpoint's keys, created on first
// use) and for the values it builds, and passes linear and conv outputs through the store's hooks,
// where adapters (lora/) attach. Feature maps are NHWC, token sequences [B, L, C]; every layer
// works in the weights' dtype.
#pragma once
#include <cstdint>
#include <string>

#include "ggml-lite/ops/builder.h"
#include "models/nn/weights.h"

namespace nn {

// Opens one dotted name for the weights and for the graph values built inside, so that
// "down_blocks.0.resnets.1" names both the weights ("...conv1.weight") and the values computed
// there ("...conv1.conv2d").
class Scope {
public:
    Scope(Weights& w, const std::string& name) : ws_(w, name), gs_(w.graph(), name) {}

private:
    WeightScope ws_;
    gl::Scope gs_;
};

// A block that recompute treats as a unit (a ResNet or transformer block, a CLIP encoder layer):
// a checkpoint segment named by the block's full path, with the block's scope open inside.
class Block {
public:
    Block(Weights& w, const std::string& name) : seg_(w.graph(), name), scope_(w, name) {}

private:
    gl::Segment seg_;  // first: named by the enclosing scope plus name, before scope_ opens
    Scope scope_;
};

// y = x W^T (+ b) over the last dim; W [out, in]. Also serves 1x1 convs run on tokens (SD1.5's
// proj_in / proj_out, the VAE's attention): load_weights accepts their [out, in, 1, 1] tensors.
gl::ValueId linear(Weights& w, const std::string& name, gl::ValueId x, int64_t out, bool bias = true);

// Conv2d with bias on NHWC x; weight [cout, k, k, cin] (the checkpoint's OIHW, converted at load).
gl::ValueId conv2d(Weights& w, const std::string& name, gl::ValueId x, int64_t cout, int k, int stride, int pad);

// Group norm over the last dim's groups (optionally followed by SiLU, fused) and layer norm over
// the last dim, both with an affine weight and bias as wide as that dim.
gl::ValueId group_norm(Weights& w, const std::string& name, gl::ValueId x, int groups, float eps, bool silu);
gl::ValueId layer_norm(Weights& w, const std::string& name, gl::ValueId x, float eps);

// The activation a config names (CLIP's hidden_act).
gl::ValueId activation(gl::Graph& g, gl::ValueId x, gl::Act a);

// Multi-head attention with its projections, as diffusers' Attention and transformers'
// CLIPAttention compute it: q from x [B, L, C], k and v from kv [B, S, *], all projected to C,
// heads of width C / heads, softmax scale 1/sqrt(head width), output projection (with bias).
struct AttentionSpec {
    int64_t heads = 1;
    bool qkv_bias = false;  // diffusers' Attention: none on to_q/k/v; CLIP: on all
    bool causal = false;
    // Module names of the projections.
    std::string q = "to_q", k = "to_k", v = "to_v", out = "to_out.0";
};
gl::ValueId attention(Weights& w, const std::string& name, gl::ValueId x, gl::ValueId kv, const AttentionSpec& s);

}  // namespace nn
