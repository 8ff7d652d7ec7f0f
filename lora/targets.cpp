#include "lora/targets.h"

#include <algorithm>

namespace lora {

namespace {

using C = ModuleClass;
const std::vector<C> kUnetBlocks = {C::transformer, C::resnet, C::downsample, C::upsample};
const std::vector<C> kTextBlocks = {C::text_attention, C::text_mlp};

struct Preset {
    const char* name;
    std::vector<C> unet, text_encoder;
    bool linear_io, conv_io;  // the family's I/O modules named directly (models::Family::io_modules)
    bool conv;
};

const std::vector<Preset>& presets() {
    static const std::vector<Preset> p = {
        {"attn-mlp", {C::transformer}, kTextBlocks, false, false, false},
        {"attn-only", {C::cross_attention}, {C::text_attention}, false, false, false},
        {"full", kUnetBlocks, kTextBlocks, true, true, true},
        {"full-lin", {C::transformer, C::resnet}, kTextBlocks, true, false, false},
        {"unet-convblock-only", {C::resnet, C::downsample, C::upsample}, {}, false, true, true},
        {"unet-only", kUnetBlocks, {}, true, true, true},
        {"unet-transformer-only", {C::transformer}, {}, false, false, false},
    };
    return p;
}

}  // namespace

bool Targets::covers(const models::Family& f, Part part, const std::string& path) const {
    const auto in = [&](C c) { return f.in_class(c, part, path); };
    if (part == Part::text_encoder) return std::any_of(text_encoder.begin(), text_encoder.end(), in);
    if (std::find(unet_names.begin(), unet_names.end(), path) != unet_names.end()) return true;
    return std::any_of(unet.begin(), unet.end(), in);
}

Targets kohya_targets(bool locon) {
    Targets t{{C::transformer}, kTextBlocks, {}, locon};
    if (locon) t.unet.insert(t.unet.end(), {C::resnet, C::downsample, C::upsample});
    return t;
}

std::optional<Targets> lycoris_preset(const models::Family& f, const std::string& name) {
    for (const Preset& p : presets()) {
        if (name != p.name) continue;
        Targets t{p.unet, p.text_encoder, {}, p.conv};
        // LyCORIS lists the convs first ("conv_in", "conv_out", then the time embedding's).
        if (p.conv_io) t.unet_names = f.io_modules(false);
        if (p.linear_io)
            for (std::string& n : f.io_modules(true)) t.unet_names.push_back(std::move(n));
        return t;
    }
    return std::nullopt;
}

std::vector<std::string> lycoris_preset_names() {
    std::vector<std::string> n;
    for (const Preset& p : presets()) n.emplace_back(p.name);
    return n;
}

}  // namespace lora
