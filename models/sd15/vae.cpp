#include "models/sd15/vae.h"

#include <cmath>

#include "ggml-lite/core/error.h"
#include "ggml-lite/ops/builder.h"
#include "models/nn/layers.h"

namespace sd {

using gl::Graph;
using gl::ValueId;

VaeConfig VaeConfig::tiny() {
    VaeConfig c;
    c.block_out = {8, 16};
    c.layers_per_block = 1;
    c.norm_groups = 4;
    return c;
}

void VaeConfig::validate() const {
    // Ranges far beyond SD1.x's VAE, small enough that derived widths fit an int (diffusers' keys).
    constexpr int kMaxChannels = 1 << 16, kMaxLayers = 64;
    const auto in_range = [](const std::string& key, int v, int hi) {
        GL_CHECK(v >= 1 && v <= hi, "vae config: ", key, " = ", v, " is out of range (1..", hi, ")");
    };
    for (size_t i = 0; i < block_out.size(); i++) in_range(gl::cat("block_out_channels[", i, "]"), block_out[i], kMaxChannels);
    in_range("in_channels", in_channels, kMaxChannels);
    in_range("out_channels", out_channels, kMaxChannels);
    in_range("latent_channels", latent_channels, kMaxChannels);
    in_range("norm_num_groups", norm_groups, kMaxChannels);
    in_range("layers_per_block", layers_per_block, kMaxLayers);
    GL_CHECK(in_channels > 0 && out_channels > 0 && latent_channels > 0, "vae config: channel counts must be positive (in ",
             in_channels, ", out ", out_channels, ", latent ", latent_channels, ")");
    GL_CHECK(!block_out.empty() && block_out.size() <= 16, "vae config: needs 1 to 16 blocks, got ", block_out.size());
    GL_CHECK(layers_per_block > 0, "vae config: layers_per_block must be positive, got ", layers_per_block);
    GL_CHECK(norm_groups > 0, "vae config: norm_groups must be positive, got ", norm_groups);
    for (int ch : block_out)
        GL_CHECK(ch > 0 && ch % norm_groups == 0, "vae config: block channels ", ch,
                 " must be positive and divisible by norm_groups ", norm_groups);
    GL_CHECK(eps > 0 && std::isfinite(eps), "vae config: eps must be positive, got ", eps);
    GL_CHECK(scaling_factor != 0 && std::isfinite(scaling_factor), "vae config: scaling_factor must be finite and non-zero");
}

namespace {

// Builds the blocks; weight names follow diffusers' module paths, graph scopes and segments the
// same paths, so a value or a segment in a plan report reads like the module it belongs to
// ("decoder.up_blocks.3.resnets.0.norm1.group_norm").
struct Builder {
    nn::Weights& w;
    Graph& g;
    const VaeConfig& c;

    ValueId norm(const std::string& name, ValueId x, bool silu) {
        return nn::group_norm(w, name, x, c.norm_groups, c.eps, silu);
    }

    // diffusers ResnetBlock2D without a time embedding (output_scale_factor 1, dropout 0).
    ValueId resnet(const std::string& name, ValueId x, int64_t cout) {
        nn::Block blk(w, name);
        const int64_t cin = g.shape(x)[3];
        ValueId h = norm("norm1", x, true);
        h = nn::conv2d(w, "conv1", h, cout, 3, 1, 1);
        h = norm("norm2", h, true);
        h = nn::conv2d(w, "conv2", h, cout, 3, 1, 1);
        ValueId skip = cin == cout ? x : nn::conv2d(w, "conv_shortcut", x, cout, 1, 1, 0);
        return gl::add(g, skip, h);
    }

    // The VAE's attention: group norm, one head as wide as the channels over all positions,
    // output projection, residual.
    ValueId attention(const std::string& name, ValueId x) {
        nn::Block blk(w, name);
        const gl::Shape s = g.shape(x);
        const int64_t C = s[3];
        ValueId h = norm("group_norm", x, false);
        h = gl::reshape(g, h, gl::Shape{s[0], s[1] * s[2], 1, C});  // [B, L, heads 1, C]
        ValueId q = nn::linear(w, "to_q", h, C), k = nn::linear(w, "to_k", h, C), v = nn::linear(w, "to_v", h, C);
        ValueId o;  // softmax(q k^T / sqrt(C)) v
        if (C <= c.max_fused_attention_width) {
            o = gl::attention(g, q, k, v);
        } else {
            auto tokens = [&](ValueId t) { return gl::reshape(g, t, gl::Shape{s[0], s[1] * s[2], C}); };
            ValueId scores = gl::matmul(g, tokens(q), tokens(k), false, true);  // [B, L, L]
            ValueId probs = gl::softmax(g, scores, 1.0f / std::sqrt(float(C)));
            o = gl::matmul(g, probs, tokens(v));  // [B, L, C]
        }
        o = nn::linear(w, "to_out.0", o, C);
        return gl::add(g, x, gl::reshape(g, o, s));
    }

    ValueId mid(ValueId h) {
        nn::Scope sc(w, "mid_block");
        const int64_t C = g.shape(h)[3];
        h = resnet("resnets.0", h, C);
        h = attention("attentions.0", h);
        return resnet("resnets.1", h, C);
    }

    // diffusers Downsample2D with padding 0: zero-pad one column on the right and one row at the
    // bottom, then a 3x3 stride-2 convolution without padding. Our conv pads symmetrically, so the
    // asymmetric pad is built from fill + concat (both differentiable).
    ValueId downsample(const std::string& name, ValueId x) {
        nn::Scope sc(w, name);
        const gl::Shape s = g.shape(x);
        const gl::DType t = g.dtype(x);
        ValueId col = gl::fill(g, gl::Shape{s[0], s[1], 1, s[3]}, 0.0f, t);
        x = gl::concat(g, {x, col}, 2);
        ValueId row = gl::fill(g, gl::Shape{s[0], 1, s[2] + 1, s[3]}, 0.0f, t);
        x = gl::concat(g, {x, row}, 1);
        return nn::conv2d(w, "conv", x, s[3], 3, 2, 0);
    }

    // diffusers Upsample2D: nearest 2x, then a 3x3 convolution.
    ValueId upsample(const std::string& name, ValueId x) {
        nn::Scope sc(w, name);
        const int64_t C = g.shape(x)[3];
        return nn::conv2d(w, "conv", gl::upsample2x(g, x), C, 3, 1, 1);
    }
};

void check_input(const Graph& g, ValueId x, int64_t channels, int64_t multiple, const char* what) {
    const gl::Shape s = g.shape(x);
    GL_CHECK(s.nd == 4 && s[3] == channels, "vae: ", what, " must be [B, H, W, ", channels, "] (NHWC), got ",
             g.describe(x));
    GL_CHECK(gl::dtype_is_float(g.dtype(x)), "vae: ", what, " must be floating point, got ", g.describe(x));
    GL_CHECK(s[1] > 0 && s[2] > 0 && s[1] % multiple == 0 && s[2] % multiple == 0, "vae: ", what, " height and width (",
             s[1], "x", s[2], ") must be positive multiples of ", multiple);
}

std::string idx(size_t i) { return std::to_string(i); }

}  // namespace

VaeEncoded vae_encode(nn::Weights& w, const VaeConfig& c, ValueId x) {
    c.validate();
    Graph& g = w.graph();
    check_input(g, x, c.in_channels, c.downscale(), "encoder input");
    x = gl::cast(g, x, w.dtype());  // every op takes one dtype: the weights'
    Builder b{w, g, c};
    const size_t n = c.block_out.size();
    const int64_t L = c.latent_channels;
    ValueId h;
    {
        nn::Scope enc(w, "encoder");
        h = nn::conv2d(w, "conv_in", x, c.block_out[0], 3, 1, 1);
        for (size_t i = 0; i < n; i++) {
            const std::string blk = "down_blocks." + idx(i);
            for (int j = 0; j < c.layers_per_block; j++)
                h = b.resnet(blk + ".resnets." + idx(size_t(j)), h, c.block_out[i]);
            if (i + 1 < n) h = b.downsample(blk + ".downsamplers.0", h);
        }
        h = b.mid(h);
        h = b.norm("conv_norm_out", h, true);
        h = nn::conv2d(w, "conv_out", h, 2 * L, 3, 1, 1);
    }
    VaeEncoded e;
    e.moments = nn::conv2d(w, "quant_conv", h, 2 * L, 1, 1, 0);
    e.mean = gl::slice(g, e.moments, 3, 0, L);
    e.logvar = gl::slice(g, e.moments, 3, L, L);
    e.latent = gl::scale(g, e.mean, c.scaling_factor);
    return e;
}

ValueId vae_decode(nn::Weights& w, const VaeConfig& c, ValueId z) {
    c.validate();
    Graph& g = w.graph();
    check_input(g, z, c.latent_channels, 1, "decoder input");
    z = gl::cast(g, z, w.dtype());
    Builder b{w, g, c};
    const size_t n = c.block_out.size();
    ValueId h = gl::scale(g, z, 1.0f / c.scaling_factor);
    h = nn::conv2d(w, "post_quant_conv", h, c.latent_channels, 1, 1, 0);
    nn::Scope dec(w, "decoder");
    h = nn::conv2d(w, "conv_in", h, c.block_out.back(), 3, 1, 1);
    h = b.mid(h);
    // Up blocks run from the deepest level back to the first, each with one resnet more than
    // the encoder's levels.
    for (size_t i = 0; i < n; i++) {
        const std::string blk = "up_blocks." + idx(i);
        const int64_t cout = c.block_out[n - 1 - i];
        for (int j = 0; j <= c.layers_per_block; j++) h = b.resnet(blk + ".resnets." + idx(size_t(j)), h, cout);
        if (i + 1 < n) h = b.upsample(blk + ".upsamplers.0", h);
    }
    h = b.norm("conv_norm_out", h, true);
    return nn::conv2d(w, "conv_out", h, c.out_channels, 3, 1, 1);
}

std::vector<float> vae_sample_latent(const VaeConfig& c, std::span<const float> moments,
                                     std::span<const float> noise) {
    const size_t L = size_t(c.latent_channels);
    GL_CHECK(L > 0 && moments.size() % (2 * L) == 0 && noise.size() * 2 == moments.size(), "vae_sample_latent: ",
             moments.size(), " moments and ", noise.size(), " noise values do not fit ", L, " latent channels");
    std::vector<float> out(noise.size());
    for (size_t px = 0; px < moments.size() / (2 * L); px++)
        for (size_t ch = 0; ch < L; ch++) {
            const float mean = moments[px * 2 * L + ch];
            const float logvar = std::fmin(std::fmax(moments[px * 2 * L + L + ch], -30.0f), 20.0f);
            out[px * L + ch] = c.scaling_factor * (mean + std::exp(0.5f * logvar) * noise[px * L + ch]);
        }
    return out;
}

// ---- checkpoint keys ----

namespace {

std::vector<std::string> split(const std::string& s) {
    std::vector<std::string> parts;
    size_t start = 0;
    for (size_t i = 0; i <= s.size(); i++)
        if (i == s.size() || s[i] == '.') {
            parts.push_back(s.substr(start, i - start));
            start = i + 1;
        }
    return parts;
}

std::string join(const std::vector<std::string>& parts, size_t from) {
    std::string s;
    for (size_t i = from; i < parts.size(); i++) s += (s.empty() ? "" : ".") + parts[i];
    return s;
}

// A non-negative decimal index below `limit`, else -1.
int index_of(const std::string& s, size_t limit) {
    if (s.empty() || s.size() > 4) return -1;
    int v = 0;
    for (char ch : s) {
        if (ch < '0' || ch > '9') return -1;
        v = v * 10 + (ch - '0');
    }
    return size_t(v) < limit ? v : -1;
}

// Names inside one ResNet block: only the 1x1 shortcut differs.
std::string resnet_leaf(const std::string& rest) {
    if (rest.rfind("conv_shortcut.", 0) == 0) return "nin_shortcut." + rest.substr(14);
    return rest;
}

// Names inside the mid-block attention, diffusers -> original; "" when unknown.
std::string attention_leaf(const std::string& rest) {
    static const std::pair<const char*, const char*> map[] = {
        {"group_norm.", "norm."}, {"to_q.", "q."}, {"to_k.", "k."}, {"to_v.", "v."}, {"to_out.0.", "proj_out."}};
    for (auto [from, to] : map) {
        const std::string f = from;
        if (rest.rfind(f, 0) == 0) return to + rest.substr(f.size());
    }
    return "";
}

// Maps "encoder.<...>" / "decoder.<...>" (after the first part) onto the original names.
std::string original_coder(const std::vector<std::string>& p, size_t levels) {
    const bool enc = p[0] == "encoder";
    const std::string head = p[0] + ".";
    if (p.size() < 3) return "";
    if (p[1] == "conv_in" || p[1] == "conv_out") return head + join(p, 1);
    if (p[1] == "conv_norm_out") return head + "norm_out." + join(p, 2);
    if (p[1] == "mid_block" && p.size() >= 5) {
        if (p[2] == "resnets" && (p[3] == "0" || p[3] == "1"))
            return head + "mid.block_" + (p[3] == "0" ? "1." : "2.") + resnet_leaf(join(p, 4));
        if (p[2] == "attentions" && p[3] == "0") {
            std::string leaf = attention_leaf(join(p, 4));
            return leaf.empty() ? "" : head + "mid.attn_1." + leaf;
        }
        return "";
    }
    const std::string blocks = enc ? "down_blocks" : "up_blocks";
    if (p[1] != blocks || p.size() < 6) return "";
    const int i = index_of(p[2], levels);
    if (i < 0) return "";
    // The original numbers decoder levels by resolution (up.0 is the full-size level), diffusers
    // by execution order.
    const std::string level = head + (enc ? "down." : "up.") + std::to_string(enc ? i : int(levels) - 1 - i) + ".";
    if (p[3] == "resnets" && index_of(p[4], 1000) >= 0) return level + "block." + p[4] + "." + resnet_leaf(join(p, 5));
    const std::string sampler = enc ? "downsamplers" : "upsamplers";
    if (p[3] == sampler && p[4] == "0") return level + (enc ? "downsample." : "upsample.") + join(p, 5);
    return "";
}

}  // namespace

VaeKeyFn vae_keys_original(const VaeConfig& c, const std::string& prefix) {
    const size_t levels = c.block_out.size();
    return [levels, prefix](const std::string& name) -> std::string {
        std::vector<std::string> p = split(name);
        if (p.size() == 2 && (p[0] == "quant_conv" || p[0] == "post_quant_conv")) return prefix + name;
        if (p[0] != "encoder" && p[0] != "decoder") return "";
        std::string key = original_coder(p, levels);
        return key.empty() ? "" : prefix + key;
    };
}

VaeKeyFn vae_keys_diffusers(const gl::io::TensorSource& src) {
    return [&src](const std::string& name) -> std::string {
        static const std::pair<const char*, const char*> legacy[] = {
            {".to_q.", ".query."}, {".to_k.", ".key."}, {".to_v.", ".value."}, {".to_out.0.", ".proj_attn."}};
        if (src.has(name)) return name;
        for (auto [now, old] : legacy) {
            const size_t at = name.find(now);
            if (at == std::string::npos) continue;
            std::string alt = name.substr(0, at) + old + name.substr(at + std::string(now).size());
            if (src.has(alt)) return alt;
        }
        return name;
    };
}

VaeFormat detect_vae_layout(const gl::io::TensorSource& src) {
    for (const char* part : {"decoder.", "encoder."}) {
        if (src.has(part + std::string("mid_block.resnets.0.conv1.weight"))) return {VaeLayout::diffusers, ""};
        for (const char* prefix : {kVaeOriginalPrefix, ""})
            if (src.has(prefix + (part + std::string("mid.block_1.conv1.weight")))) return {VaeLayout::original, prefix};
    }
    gl::fail(src.origin(), ": no VAE found (looked for [", kVaeOriginalPrefix,
             "]{decoder,encoder}.mid.block_1.conv1.weight and {decoder,encoder}.mid_block.resnets.0.conv1.weight)");
}

nn::LoadReport load_vae(const nn::Weights& w, const VaeConfig& c, const gl::io::TensorSource& src, gl::Runtime& rt) {
    const VaeFormat f = detect_vae_layout(src);
    // The two halves by their first name parts (the same in both layouts); a half w does not
    // hold is not loaded, so its tensors are not unexpected either.
    const std::vector<std::string> encoder = {"encoder.", "quant_conv."}, decoder = {"decoder.", "post_quant_conv."};
    auto starts = [](const std::string& s, const std::string& p) { return s.rfind(p, 0) == 0; };
    bool has_encoder = false, has_decoder = false;
    for (const nn::WeightEntry& e : w.entries()) {
        for (const std::string& p : encoder) has_encoder = has_encoder || starts(e.name, p);
        for (const std::string& p : decoder) has_decoder = has_decoder || starts(e.name, p);
    }
    std::vector<std::string> ignore;
    if (!has_encoder)
        for (const std::string& p : encoder) ignore.push_back(f.prefix + p);
    if (!has_decoder)
        for (const std::string& p : decoder) ignore.push_back(f.prefix + p);
    // Tensors outside the VAE are passed by whole name: a shorter prefix could hide a stray VAE key.
    for (const gl::io::TensorInfo& t : src.list()) {
        bool vae = false;
        for (const auto* half : {&encoder, &decoder})
            for (const std::string& p : *half) vae = vae || starts(t.name, f.prefix + p);
        if (!vae) ignore.push_back(t.name);
    }
    if (f.layout == VaeLayout::diffusers) return nn::load_weights(w, src, vae_keys_diffusers(src), rt, ignore);
    return nn::load_weights(w, src, vae_keys_original(c, f.prefix), rt, ignore);
}

}  // namespace sd
