// UNet2DConditionModel forward graph (see unet.h). The structure follows diffusers'
// unet_2d_condition.py / unet_2d_blocks.py so that names and numerics line up with it.
#include "models/sd15/unet.h"

#include <cmath>

#include "ggml-lite/core/error.h"
#include "ggml-lite/ops/builder.h"
#include "models/nn/layers.h"

namespace sd {

using gl::Graph;
using gl::Shape;
using gl::ValueId;

void UnetConfig::validate() const {
    const size_t n = block_out.size();
    GL_CHECK(n >= 1, "unet config: block_out is empty");
    // Ranges far beyond any SD1.x-like UNet, small enough that every width derived from them
    // (4 x block_out_channels[0] for the time embedding) fits an int. Named by diffusers' keys.
    constexpr int kMaxChannels = 1 << 16, kMaxLayers = 64;
    const auto in_range = [](const std::string& key, int v, int hi) {
        GL_CHECK(v >= 1 && v <= hi, "unet config: ", key, " = ", v, " is out of range (1..", hi, ")");
    };
    for (size_t i = 0; i < n; i++) in_range(gl::cat("block_out_channels[", i, "]"), block_out[i], kMaxChannels);
    in_range("in_channels", in_channels, kMaxChannels);
    in_range("out_channels", out_channels, kMaxChannels);
    in_range("cross_attention_dim", cross_attention_dim, kMaxChannels);
    in_range("norm_num_groups", norm_groups, kMaxChannels);
    in_range("attention heads (num_attention_heads / attention_head_dim)", heads, kMaxChannels);
    GL_CHECK(level_heads.empty() || level_heads.size() == n, "unet config: ", level_heads.size(),
             " per-level head counts for ", n, " blocks");
    for (size_t i = 0; i < level_heads.size(); i++)
        in_range(gl::cat("attention heads of block ", i), level_heads[i], kMaxChannels);
    in_range("layers_per_block", layers_per_block, kMaxLayers);
    in_range("transformer_layers_per_block", transformer_layers, kMaxLayers);
    GL_CHECK(std::isfinite(norm_eps) && std::isfinite(freq_shift), "unet config: norm_eps and freq_shift must be finite");
    GL_CHECK(down.size() == n && up.size() == n, "unet config: ", n, " blocks but ", down.size(), " down and ",
             up.size(), " up block types");
    GL_CHECK(in_channels >= 1 && out_channels >= 1, "unet config: in/out channels must be positive");
    GL_CHECK(layers_per_block >= 1 && transformer_layers >= 1, "unet config: layers_per_block (", layers_per_block,
             ") and transformer_layers (", transformer_layers, ") must be positive");
    GL_CHECK(norm_groups >= 1 && heads >= 1 && cross_attention_dim >= 1,
             "unet config: norm_groups, heads and cross_attention_dim must be positive");
    GL_CHECK(n <= 16, "unet config: ", n, " blocks is more than any UNet has");
    for (size_t i = 0; i < n; i++) {
        const int ch = block_out[i];
        GL_CHECK(ch >= 1 && ch % norm_groups == 0, "unet config: block_out[", i, "] = ", ch,
                 " is not a positive multiple of norm_groups ", norm_groups);
        GL_CHECK(ch % heads_at(i) == 0, "unet config: block_out[", i, "] = ", ch, " is not divisible by ", heads_at(i),
                 " heads");
    }
    GL_CHECK((block_out[0] / 2) != 0 && float(block_out[0] / 2) != freq_shift,
             "unet config: time embedding width ", block_out[0], " does not fit freq_shift ", freq_shift);
}

UnetConfig UnetConfig::sd15() { return UnetConfig{}; }

UnetConfig UnetConfig::sd2() {
    UnetConfig c;
    c.level_heads = {5, 10, 20, 20};
    c.linear_projection = true;
    c.cross_attention_dim = 1024;
    return c;
}

UnetConfig UnetConfig::tiny_sd2() {
    UnetConfig c = tiny();
    c.level_heads = {2, 4};
    c.linear_projection = true;
    c.upcast_attention = true;
    c.cross_attention_dim = 24;
    return c;
}

UnetConfig UnetConfig::tiny() {
    UnetConfig c;
    c.block_out = {16, 32};
    c.down = {UnetBlock::cross_attn, UnetBlock::plain};
    c.up = {UnetBlock::plain, UnetBlock::cross_attn};
    c.layers_per_block = 1;
    c.heads = 2;
    c.cross_attention_dim = 16;
    c.norm_groups = 8;
    return c;
}

namespace {

// What every block reads besides its input.
struct Builder {
    nn::Weights& w;
    Graph& g;
    const UnetConfig& c;
    ValueId temb_act = gl::kNoValue;  // silu(time embedding) [B, time_embed_dim], shared by every resnet
    ValueId context = gl::kNoValue;   // [B, S, cross_attention_dim]
};

std::string idx(const std::string& s, size_t i) { return s + "." + std::to_string(i); }

// ResnetBlock2D: GN+SiLU, conv3x3, + time_emb_proj(silu(temb)) per channel, GN+SiLU,
// (dropout 0), conv3x3, + x (through a 1x1 conv_shortcut when the width changes).
ValueId resnet(Builder& b, const std::string& name, ValueId x, int64_t cout) {
    nn::Block blk(b.w, name);
    const Shape xs = b.g.shape(x);
    const UnetConfig& c = b.c;
    ValueId h = nn::group_norm(b.w, "norm1", x, c.norm_groups, c.norm_eps, true);
    h = nn::conv2d(b.w, "conv1", h, cout, 3, 1, 1);
    ValueId te = nn::linear(b.w, "time_emb_proj", b.temb_act, cout);  // [B, cout]
    h = gl::add(b.g, h, gl::reshape(b.g, te, Shape{xs[0], 1, 1, cout}));
    h = nn::group_norm(b.w, "norm2", h, c.norm_groups, c.norm_eps, true);
    h = nn::conv2d(b.w, "conv2", h, cout, 3, 1, 1);
    ValueId shortcut = xs[3] == cout ? x : nn::conv2d(b.w, "conv_shortcut", x, cout, 1, 1, 0);
    return gl::add(b.g, shortcut, h);
}

// BasicTransformerBlock on tokens [B, L, C]: pre-LN self-attention, cross-attention to the
// context, GEGLU feed-forward (C -> 2 x 4C -> 4C -> C), each with a residual. Attention as
// diffusers' Attention: no bias on q/k/v.
ValueId transformer_block(Builder& b, const std::string& name, ValueId h, int heads) {
    nn::Scope s(b.w, name);
    const int64_t C = b.g.shape(h).last();
    const float eps = b.c.layer_norm_eps;
    const nn::AttentionSpec attn{.heads = heads};
    ValueId n = nn::layer_norm(b.w, "norm1", h, eps);
    h = gl::add(b.g, h, nn::attention(b.w, "attn1", n, n, attn));
    n = nn::layer_norm(b.w, "norm2", h, eps);
    h = gl::add(b.g, h, nn::attention(b.w, "attn2", n, b.context, attn));
    n = nn::layer_norm(b.w, "norm3", h, eps);
    ValueId f = gl::geglu(b.g, nn::linear(b.w, "ff.net.0.proj", n, 8 * C));
    return gl::add(b.g, h, nn::linear(b.w, "ff.net.2", f, C));
}

// Transformer2DModel: GN, proj_in, blocks, proj_out, + x. SD1.x's 1x1-conv projections and SD2.x's
// Linear ones are the same linear over the tokens (diffusers reshapes before or after them).
ValueId transformer(Builder& b, const std::string& name, ValueId x, int heads) {
    nn::Block blk(b.w, name);
    const Shape xs = b.g.shape(x);
    const int64_t B = xs[0], H = xs[1], W = xs[2], C = xs[3];
    ValueId h = nn::group_norm(b.w, "norm", x, b.c.norm_groups, b.c.transformer_norm_eps, false);
    h = nn::linear(b.w, "proj_in", gl::reshape(b.g, h, Shape{B, H * W, C}), C);
    for (int l = 0; l < b.c.transformer_layers; l++) h = transformer_block(b, idx("transformer_blocks", size_t(l)), h, heads);
    h = nn::linear(b.w, "proj_out", h, C);
    return gl::add(b.g, gl::reshape(b.g, h, Shape{B, H, W, C}), x);
}

// Timesteps (sinusoidal, width block_out[0]) -> TimestepEmbedding (linear_1, SiLU, linear_2);
// returns silu(emb), the only form the resnets use.
ValueId time_embedding(Builder& b, ValueId t) {
    ValueId e;
    {
        gl::Scope gs(b.g, "time_proj");  // no weights
        e = gl::timestep_embedding(b.g, t, b.c.time_proj_dim(), b.c.flip_sin_to_cos, b.c.freq_shift);
        e = gl::cast(b.g, e, b.w.dtype());
    }
    nn::Scope s(b.w, "time_embedding");
    e = gl::silu(b.g, nn::linear(b.w, "linear_1", e, b.c.time_embed_dim()));
    return gl::silu(b.g, nn::linear(b.w, "linear_2", e, b.c.time_embed_dim()));
}

}  // namespace

ValueId unet_forward(nn::Weights& w, const UnetConfig& c, ValueId x, ValueId t, ValueId context) {
    c.validate();
    Graph& g = w.graph();
    const Shape xs = g.shape(x), ts = g.shape(t), cs = g.shape(context);
    GL_CHECK(xs.nd == 4 && xs[3] == c.in_channels, "unet: x must be NHWC [B, h, w, ", c.in_channels, "], got ",
             xs.str());
    GL_CHECK(xs[1] >= 1 && xs[2] >= 1, "unet: empty latent size ", xs[1], "x", xs[2]);
    GL_CHECK(ts == Shape{xs[0]}, "unet: t must be [", xs[0], "], got ", ts.str());
    GL_CHECK(cs.nd == 3 && cs[0] == xs[0] && cs[2] == c.cross_attention_dim, "unet: context must be [", xs[0],
             ", S, ", c.cross_attention_dim, "], got ", cs.str());

    Builder b{w, g, c};
    b.context = gl::cast(g, context, w.dtype());
    b.temb_act = time_embedding(b, t);
    ValueId h = nn::conv2d(w, "conv_in", gl::cast(g, x, w.dtype()), c.block_out[0], 3, 1, 1);

    // Down path: every resnet/transformer output and every downsample is saved for a skip.
    std::vector<ValueId> skips{h};
    const size_t n = c.block_out.size();
    for (size_t i = 0; i < n; i++) {
        nn::Scope blk(w, idx("down_blocks", i));
        for (size_t j = 0; j < size_t(c.layers_per_block); j++) {
            h = resnet(b, idx("resnets", j), h, c.block_out[i]);
            if (c.down[i] == UnetBlock::cross_attn) h = transformer(b, idx("attentions", j), h, c.heads_at(i));
            skips.push_back(h);
        }
        if (i + 1 < n) {
            h = nn::conv2d(w, "downsamplers.0.conv", h, c.block_out[i], 3, 2, 1);
            skips.push_back(h);
        }
    }

    {
        nn::Scope mid(w, "mid_block");
        h = resnet(b, "resnets.0", h, c.block_out[n - 1]);
        h = transformer(b, "attentions.0", h, c.heads_at(n - 1));
        h = resnet(b, "resnets.1", h, c.block_out[n - 1]);
    }

    // Up path: layers_per_block + 1 resnets per block, each eating the latest skip (concatenated
    // after h along channels); nearest 2x upsample + conv between blocks. Any latent size: a
    // stride-2 conv takes an odd side n to (n + 1) / 2, as in PyTorch.
    for (size_t i = 0; i < n; i++) {
        nn::Scope blk(w, idx("up_blocks", i));
        const int64_t out = c.block_out[n - 1 - i];
        for (size_t j = 0; j <= size_t(c.layers_per_block); j++) {
            h = gl::concat(g, {h, skips.back()}, 3);
            skips.pop_back();
            h = resnet(b, idx("resnets", j), h, out);
            if (c.up[i] == UnetBlock::cross_attn) h = transformer(b, idx("attentions", j), h, c.heads_at(n - 1 - i));
        }
        if (i + 1 < n) {
            // Sides that were odd on the way down: diffusers interpolates to the skip's size, which
            // for nearest sampling is the 2x upsample with its last row / column dropped.
            h = gl::upsample2x(g, h);
            const Shape us = g.shape(h), ss = g.shape(skips.back());
            if (us[1] != ss[1] || us[2] != ss[2])
                h = gl::contiguous(g, gl::slice(g, gl::slice(g, h, 1, 0, ss[1]), 2, 0, ss[2]));
            h = nn::conv2d(w, "upsamplers.0.conv", h, out, 3, 1, 1);
        }
    }

    h = nn::group_norm(w, "conv_norm_out", h, c.norm_groups, c.norm_eps, true);
    return nn::conv2d(w, "conv_out", h, c.out_channels, 3, 1, 1);
}

}  // namespace sd
