// UNet checkpoint keys: internal (diffusers) names to the original CompVis/LDM single-file
// layout. The LDM UNet is a flat list of sequential blocks:
//   input_blocks.0          conv_in
//   input_blocks.k          k = 1 + i (L + 1) + j: [resnet j of down block i, its transformer]
//   input_blocks.(i+1)(L+1) [downsampler of down block i] (op = the strided conv)
//   middle_block.0/1/2      resnet, transformer, resnet
//   output_blocks.k         k = i (L + 1) + j: [resnet j of up block i, its transformer,
//                           and after the last one the upsampler]
//   time_embed.0/2, out.0/2 time embedding linears, final norm and conv
// with L = layers_per_block. Resnets rename their layers (in_layers, emb_layers, out_layers,
// skip_connection); transformers keep diffusers' names.
#include <string_view>

#include "ggml-lite/core/error.h"
#include "models/sd15/unet.h"

namespace sd {

namespace {

// Consumes "<digits>." from s; returns false (and leaves n unspecified) when absent.
bool take_index(std::string_view& s, int& n) {
    size_t k = 0;
    n = 0;
    while (k < s.size() && k < 4 && s[k] >= '0' && s[k] <= '9') n = n * 10 + (s[k++] - '0');
    if (k == 0 || k >= s.size() || s[k] != '.') return false;
    s.remove_prefix(k + 1);
    return true;
}

bool take(std::string_view& s, std::string_view prefix) {
    if (s.substr(0, prefix.size()) != prefix) return false;
    s.remove_prefix(prefix.size());
    return true;
}

// ResnetBlock2D member -> ResBlock member; "" when s is no resnet member.
std::string resnet_rest(std::string_view s) {
    static const std::pair<std::string_view, std::string_view> kMap[] = {
        {"norm1.", "in_layers.0."},          {"conv1.", "in_layers.2."}, {"time_emb_proj.", "emb_layers.1."},
        {"norm2.", "out_layers.0."},         {"conv2.", "out_layers.3."},
        {"conv_shortcut.", "skip_connection."},
    };
    for (const auto& [from, to] : kMap)
        if (take(s, from)) return std::string(to) + std::string(s);
    return "";
}

// "<list>.<k>.<slot>.<rest>", or "" when rest is (an unknown member).
std::string block(const char* list, int k, int slot, const std::string& rest) {
    if (rest.empty()) return "";
    return std::string(list) + "." + std::to_string(k) + "." + std::to_string(slot) + "." + rest;
}

std::string map_name(const UnetConfig& c, std::string_view s) {
    const int n = int(c.block_out.size()), L = c.layers_per_block;
    int i = 0, j = 0;
    if (take(s, "time_embedding.linear_1.")) return "time_embed.0." + std::string(s);
    if (take(s, "time_embedding.linear_2.")) return "time_embed.2." + std::string(s);
    if (take(s, "conv_in.")) return "input_blocks.0.0." + std::string(s);
    if (take(s, "conv_norm_out.")) return "out.0." + std::string(s);
    if (take(s, "conv_out.")) return "out.2." + std::string(s);
    if (take(s, "down_blocks.")) {
        if (!take_index(s, i) || i >= n) return "";
        const bool attn = c.down[size_t(i)] == UnetBlock::cross_attn;
        if (take(s, "resnets.") && take_index(s, j) && j < L)
            return block("input_blocks", 1 + i * (L + 1) + j, 0, resnet_rest(s));
        if (attn && take(s, "attentions.") && take_index(s, j) && j < L)
            return block("input_blocks", 1 + i * (L + 1) + j, 1, std::string(s));
        if (i + 1 < n && take(s, "downsamplers.0.conv."))
            return block("input_blocks", (i + 1) * (L + 1), 0, "op." + std::string(s));
        return "";
    }
    if (take(s, "mid_block.")) {
        if (take(s, "resnets.") && take_index(s, j) && j < 2) {
            std::string rest = resnet_rest(s);
            return rest.empty() ? rest : "middle_block." + std::to_string(2 * j) + "." + rest;
        }
        if (take(s, "attentions.0.")) return "middle_block.1." + std::string(s);
        return "";
    }
    if (take(s, "up_blocks.")) {
        if (!take_index(s, i) || i >= n) return "";
        const bool attn = c.up[size_t(i)] == UnetBlock::cross_attn;
        if (take(s, "resnets.") && take_index(s, j) && j <= L)
            return block("output_blocks", i * (L + 1) + j, 0, resnet_rest(s));
        if (attn && take(s, "attentions.") && take_index(s, j) && j <= L)
            return block("output_blocks", i * (L + 1) + j, 1, std::string(s));
        if (i + 1 < n && take(s, "upsamplers.0.conv."))
            return block("output_blocks", i * (L + 1) + L, attn ? 2 : 1, "conv." + std::string(s));
        return "";
    }
    return "";
}

}  // namespace

std::string unet_key_diffusers(const std::string& name) { return name; }

const char* unet_layout_name(UnetLayout l) { return l == UnetLayout::diffusers ? "diffusers" : "original"; }

UnetLayout detect_unet_layout(const gl::io::TensorSource& src) {
    const std::string probe = "conv_in.weight";
    if (src.has(probe)) return UnetLayout::diffusers;
    if (src.has(kUnetOriginalPrefix + map_name(UnetConfig::sd15(), probe))) return UnetLayout::original;
    gl::fail(src.origin(), ": no UNet found (looked for ", probe, " and ", kUnetOriginalPrefix,
             map_name(UnetConfig::sd15(), probe), ")");
}

nn::LoadReport load_unet(const nn::Weights& w, const UnetConfig& c, const gl::io::TensorSource& src, gl::Runtime& rt) {
    const UnetLayout l = detect_unet_layout(src);
    if (l == UnetLayout::diffusers) return nn::load_weights(w, src, unet_key_diffusers, rt);
    // A single file holds the whole pipeline: everything outside model.diffusion_model. is some
    // other model's business. Those keys are passed whole (a shorter prefix such as "model."
    // could hide a stray UNet key).
    std::vector<std::string> others;
    for (const gl::io::TensorInfo& t : src.list())
        if (t.name.rfind(kUnetOriginalPrefix, 0) != 0) others.push_back(t.name);
    return nn::load_weights(w, src, [&c](const std::string& name) { return unet_key_original(c, name); }, rt, others);
}

std::string unet_key_original(const UnetConfig& c, const std::string& name) {
    c.validate();
    std::string m = map_name(c, name);
    return m.empty() ? m : kUnetOriginalPrefix + m;
}

std::string unet_module_original(const UnetConfig& c, const std::string& path) {
    c.validate();
    const std::string m = map_name(c, path + ".weight"), s = ".weight";
    if (m.size() <= s.size() || m.compare(m.size() - s.size(), s.size(), s) != 0) return "";
    return m.substr(0, m.size() - s.size());
}

std::function<std::string(const std::string& path)> unet_ldm_names(const UnetConfig& c) {
    return [c](const std::string& path) { return unet_module_original(c, path); };
}

}  // namespace sd
