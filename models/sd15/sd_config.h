// The configuration SD1.x and SD2.x models carry as models::ModelConfig: the UNet's and the CLIP
// text encoder's (one implementation of each, models/sd15/unet.h and clip.h, parametrised by them).
#pragma once
#include <memory>

#include "models/family.h"
#include "models/sd15/clip.h"
#include "models/sd15/unet.h"

namespace sd {

struct SdConfig final : models::ModelConfig {
    UnetConfig unet = UnetConfig::sd15();
    ClipConfig clip = ClipConfig::vit_l14();

    SdConfig() = default;
    SdConfig(UnetConfig u, ClipConfig c) : unet(std::move(u)), clip(std::move(c)) {}
    int64_t latent_channels() const override { return unet.in_channels; }
    int64_t context_width() const override { return unet.cross_attention_dim; }
    int size_multiple() const override { return unet.size_multiple(); }
    int64_t text_width() const override { return clip.width; }
    int text_layers() const override { return int(clip.layers); }
    void validate() const override;  // the UNet's config
};

// The configs as a ModelConfig (CLIP ViT-L/14 unless given: a frozen text encoder's is not read).
std::shared_ptr<const SdConfig> sd_config(UnetConfig unet, ClipConfig clip = ClipConfig::vit_l14());
// c as SD's configs; throws gl::Error when c is another family's.
const SdConfig& sd_config(const models::ModelConfig& c);

}  // namespace sd
