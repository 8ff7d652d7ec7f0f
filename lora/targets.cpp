#include "lora/targets.h"

#include <algorithm>
#include <map>
#include <sstream>

namespace lora {

namespace {

bool starts_with(const std::string& s, const std::string& p) { return s.compare(0, p.size(), p) == 0; }
bool ends_with(const std::string& s, const std::string& p) {
    return s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
}
bool has(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

bool in(Block b, const std::string& path) {
    const bool unet_block = starts_with(path, "down_blocks.") || starts_with(path, "mid_block.") ||
                            starts_with(path, "up_blocks.");
    const bool clip_layer = starts_with(path, "text_model.encoder.layers.");
    switch (b) {
        case Block::transformer: return unet_block && has(path, ".attentions.");
        case Block::resnet: return unet_block && has(path, ".resnets.");
        case Block::downsample: return unet_block && has(path, ".downsamplers.");
        case Block::upsample: return unet_block && has(path, ".upsamplers.");
        case Block::cross_attention: return unet_block && (has(path, ".attn1.") || has(path, ".attn2."));
        case Block::clip_attention: return clip_layer && has(path, ".self_attn.");
        case Block::clip_mlp: return clip_layer && has(path, ".mlp.");
    }
    return false;
}

const std::vector<std::string> kTimeAndIo = {"conv_in", "conv_out", "time_embedding.linear_1",
                                             "time_embedding.linear_2"};

const std::map<std::string, Targets>& presets() {
    using B = Block;
    static const std::map<std::string, Targets> p = {
        {"full", {{B::transformer, B::resnet, B::downsample, B::upsample}, {B::clip_attention, B::clip_mlp}, kTimeAndIo, true}},
        {"full-lin",
         {{B::transformer, B::resnet}, {B::clip_attention, B::clip_mlp}, {"time_embedding.linear_1", "time_embedding.linear_2"}, false}},
        {"attn-mlp", {{B::transformer}, {B::clip_attention, B::clip_mlp}, {}, false}},
        {"attn-only", {{B::cross_attention}, {B::clip_attention}, {}, false}},
        {"unet-only", {{B::transformer, B::resnet, B::downsample, B::upsample}, {}, kTimeAndIo, true}},
        {"unet-transformer-only", {{B::transformer}, {}, {}, false}},
        {"unet-convblock-only", {{B::resnet, B::downsample, B::upsample}, {}, {"conv_in", "conv_out"}, true}},
    };
    return p;
}

// The place of `name` in a class's definition order (unknown names last, in path order).
int64_t place(const std::string& name, std::initializer_list<const char*> order) {
    int64_t i = 0;
    for (const char* o : order) {
        if (name == o) return i;
        i++;
    }
    return i;
}

std::vector<std::string> split(const std::string& path) {
    std::vector<std::string> parts;
    std::stringstream ss(path);
    for (std::string p; std::getline(ss, p, '.');) parts.push_back(p);
    return parts;
}

int64_t number(const std::string& s) {
    if (s.empty() || !std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; })) return -1;
    return std::stoll(s);
}

}  // namespace

bool Targets::covers(Part part, const std::string& path) const {
    if (part == Part::text_encoder)
        return std::any_of(text_encoder.begin(), text_encoder.end(), [&](Block b) { return in(b, path); });
    if (std::find(unet_names.begin(), unet_names.end(), path) != unet_names.end()) return true;
    return std::any_of(unet.begin(), unet.end(), [&](Block b) { return in(b, path); });
}

Targets kohya_targets(bool locon) {
    Targets t{{Block::transformer}, {Block::clip_attention, Block::clip_mlp}, {}, locon};
    if (locon) t.unet.insert(t.unet.end(), {Block::resnet, Block::downsample, Block::upsample});
    return t;
}

const Targets* lycoris_preset(const std::string& name) {
    const auto it = presets().find(name);
    return it == presets().end() ? nullptr : &it->second;
}

std::vector<std::string> lycoris_preset_names() {
    std::vector<std::string> n;
    for (const auto& [k, v] : presets()) n.push_back(k);
    return n;
}

ModuleKind unet_linear_kind(const std::string& path) {
    return ends_with(path, ".proj_in") || ends_with(path, ".proj_out") ? ModuleKind::conv1x1 : ModuleKind::linear;
}

std::vector<int64_t> definition_order(Part part, const std::string& path) {
    const std::vector<std::string> p = split(path);
    std::vector<int64_t> key;
    // Each part: its index when it is a number, else its place among its class's children.
    for (size_t i = 0; i < p.size(); i++) {
        const std::string& s = p[i];
        const std::string parent = i ? p[i - 1] : "";
        int64_t k = number(s);
        if (k < 0) {
            if (part == Part::text_encoder)
                k = place(s, {"self_attn", "mlp", "k_proj", "v_proj", "q_proj", "out_proj", "fc1", "fc2"});
            else if (i == 0)
                k = place(s, {"conv_in", "time_embedding", "down_blocks", "up_blocks", "mid_block", "conv_out"});
            else if (parent == "time_embedding")
                k = place(s, {"linear_1", "linear_2"});
            else
                k = place(s, {"attentions", "resnets", "downsamplers", "upsamplers", "proj_in", "transformer_blocks",
                              "proj_out", "attn1", "ff", "attn2", "to_q", "to_k", "to_v", "to_out", "net", "proj",
                              "conv1", "time_emb_proj", "conv2", "conv_shortcut", "conv"});
        }
        key.push_back(k);
    }
    return key;
}

}  // namespace lora
