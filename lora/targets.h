// Which layers a network adapts, in the terms kohya's networks.lora and LyCORIS's presets use:
// the classes of the blocks whose Linear and Conv2d layers are wrapped, and layers named directly.
// The family (models/family.h) says which of its module paths fall in each class.
//   kohya networks.lora: Transformer2DModel + CLIPAttention + CLIPMLP; with conv_dim also
//     ResnetBlock2D, Downsample2D, Upsample2D (LoCon).
//   LyCORIS (lycoris/config.py PRESET): full (its default; Transformer2DModel, ResnetBlock2D,
//     Downsample2D, Upsample2D, the family's I/O modules (SD: conv_in, conv_out,
//     time_embedding.linear_1/2), CLIPAttention, CLIPMLP, 3x3 convs), full-lin, attn-mlp,
//     attn-only (sd-scripts' CrossAttention, CLIPAttention), unet-only, unet-transformer-only,
//     unet-convblock-only. Without enable_conv the k x k convs are skipped; 1x1 convs
//     (proj_in/out, conv_shortcut) keep the linear rank.
#pragma once
#include <optional>
#include <string>
#include <vector>

#include "lora/module.h"
#include "models/family.h"

namespace lora {

using models::ModuleClass;

struct Targets {
    std::vector<ModuleClass> unet, text_encoder;
    std::vector<std::string> unet_names;  // module paths adapted themselves
    bool conv = true;                     // k x k convs (with the conv rank); LyCORIS's enable_conv
    bool covers(const models::Family& f, Part part, const std::string& path) const;
};

// kohya networks.lora's targets; with LoCon (conv_dim > 0) its conv blocks too.
Targets kohya_targets(bool locon);
// A LyCORIS preset by name on the family's modules, or nothing; the names sdtrain knows.
std::optional<Targets> lycoris_preset(const models::Family& f, const std::string& name);
std::vector<std::string> lycoris_preset_names();

}  // namespace lora
