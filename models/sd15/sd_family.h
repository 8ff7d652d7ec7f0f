// What SD1.x and SD2.x share as families: one UNet layout (diffusers' UNet2DConditionModel and
// its module names), one CLIP text encoder slot ("lora_te"), the 4-channel latent at 1/8 scale,
// 77-id sequences, kohya's 25-block list, and the graphs built by the one implementation of each
// layer (models/sd15/unet.h, clip.h). Each family file derives from it and says what differs:
// its name, metadata strings, how the UNet's proj_in / proj_out run, the configuration of the model
// as distributed, which files it opens and where they store the text encoder.
#pragma once
#include "models/family.h"

namespace models {

class SdFamily : public Family {
public:
    const TokenLayout& tokens() const override { return tokens_; }
    const LatentSpec& latent() const override { return latent_; }
    std::span<const TextEncoderSpec> text_encoders() const override { return text_; }
    std::string lora_prefix(Part part) const override { return part == Part::unet ? "lora_unet" : "lora_te"; }
    bool in_class(ModuleClass c, Part part, const std::string& path) const override;
    std::vector<int64_t> definition_order(Part part, const std::string& path) const override;
    std::vector<std::string> io_modules(bool linear) const override;
    LoraBlocks lora_blocks() const override { return {12, 1}; }
    int lora_block(const std::string& path) const override;
    gl::ValueId denoiser(nn::Weights& w, const ModelConfig& c, gl::ValueId x, gl::ValueId t,
                         gl::ValueId context) const override;
    gl::ValueId text_context(nn::Weights& w, gl::Graph& g, gl::ValueId ids, int chunks, const ModelConfig& c,
                             int clip_skip) const override;
    gl::ValueId text_states(nn::Weights& w, gl::Graph& g, gl::ValueId ids, const ModelConfig& c,
                            int clip_skip) const override;
    void load(Part part, nn::Weights& w, const ModelFiles& m, gl::Runtime& rt) const override;
    std::function<std::string(const std::string&)> ldm_names(const ModelConfig& c) const override;
    // The UNet's keys in the layout its weights hold (diffusers' or the single file's), the text
    // encoder's in its (transformers', or the single file's cond_stage_model.transformer.*).
    std::string weight_key(const ModelFiles& m, Part part, const std::string& name) const override;

private:
    TokenLayout tokens_{};
    LatentSpec latent_{};
    // SD2.x's text encoder as diffusers and kohya hold it keeps 23 of OpenCLIP's 24 layers, so its
    // last hidden state (with the final layer norm) is OpenCLIP's penultimate.
    TextEncoderSpec text_[1] = {{Part::text_encoder, "text_encoder", "lora_te", 1, false}};
};

}  // namespace models
