// Which layers of SD1.5 a network adapts, in the terms kohya's networks.lora and LyCORIS's presets
// use: the classes of the blocks whose Linear and Conv2d layers are wrapped (sd-scripts' UNet and
// transformers' CLIPTextModel), recognised here by module path, and layers named directly.
//   kohya networks.lora: Transformer2DModel + CLIPAttention + CLIPMLP; with conv_dim also
//     ResnetBlock2D, Downsample2D, Upsample2D (LoCon).
//   LyCORIS (lycoris/config.py PRESET): full (its default; Transformer2DModel, ResnetBlock2D,
//     Downsample2D, Upsample2D, conv_in, conv_out, time_embedding.linear_1/2, CLIPAttention,
//     CLIPMLP, 3x3 convs), full-lin, attn-mlp, attn-only (sd-scripts' CrossAttention, CLIPAttention),
//     unet-only, unet-transformer-only, unet-convblock-only. Without enable_conv the k x k convs
//     are skipped; 1x1 convs (proj_in/out, conv_shortcut) keep the linear rank.
#pragma once
#include <string>
#include <vector>

#include "lora/module.h"

namespace lora {

enum class Block : uint8_t {
    transformer,      // Transformer2DModel: "<down|mid|up>_block(s).N.attentions.M"
    resnet,           // ResnetBlock2D: ".resnets.M"
    downsample,       // Downsample2D: ".downsamplers.0"
    upsample,         // Upsample2D: ".upsamplers.0"
    cross_attention,  // sd-scripts' CrossAttention: a transformer block's attn1 / attn2
    clip_attention,   // CLIPAttention: "text_model.encoder.layers.N.self_attn"
    clip_mlp,         // CLIPMLP: "text_model.encoder.layers.N.mlp"
};

struct Targets {
    std::vector<Block> unet, text_encoder;
    std::vector<std::string> unet_names;  // module paths adapted themselves
    bool conv = true;                     // k x k convs (with the conv rank); LyCORIS's enable_conv
    bool covers(Part part, const std::string& path) const;
};

// kohya networks.lora's targets; with LoCon (conv_dim > 0) its conv blocks too.
Targets kohya_targets(bool locon);
// A LyCORIS preset by name, or nullptr; the names sdtrain knows.
const Targets* lycoris_preset(const std::string& name);
std::vector<std::string> lycoris_preset_names();

// How a UNet Linear reaches the hooks: SD1.5's proj_in/proj_out are 1x1 convs run as Linear.
ModuleKind unet_linear_kind(const std::string& path);

// The order PyTorch defines SD1.5's modules in (sd-scripts' UNet, transformers' CLIP): LyCORIS
// saves, and hashes, its modules in it. A key to sort module paths of one part by.
std::vector<int64_t> definition_order(Part part, const std::string& path);

}  // namespace lora
