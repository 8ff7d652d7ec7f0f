// The SD2.x family: SD1.x's UNet layout with SD2's configuration (per-level heads, Linear
// proj_in / proj_out, 1024-wide context), OpenCLIP ViT-H/14's text tower held as transformers'
// CLIPTextModel (23 layers: the penultimate hidden state), SD2's tokenizer padding with "!",
// kohya's "sd_v2" metadata and sai_model_spec's stable-diffusion-v2 architectures; a single
// file's text encoder stored as OpenCLIP's tower (gl-merge writes merged weights back into it).
#include <algorithm>

#include "models/sd15/sd_config.h"
#include "models/sd15/sd_family.h"
#include "models/sd2/model_files.h"

namespace models {

namespace {

class Sd2 final : public SdFamily {
public:
    std::string_view name() const override { return "sd2"; }
    std::string_view description() const override { return "Stable Diffusion 2.x"; }
    // kohya's get_model_version_str_for_sd1_sd2: "sd_v2", "_v" appended for v-prediction; sai_model_spec:
    // stable-diffusion-v2-512, or -768-v for a v-prediction model, whose resolution without
    // --resolution is 768x768.
    BaseModelStrings base_model(bool v_parameterization) const override {
        if (v_parameterization) return {"sd_v2_v", "True", "stable-diffusion-v2-768-v", 768};
        return {"sd_v2", "True", "stable-diffusion-v2-512", 512};
    }
    // Every Linear and 1x1 module of SD2's UNet that adapters see is an nn.Linear (proj_in /
    // proj_out included); conv_shortcut stays a 1x1 conv, as in SD1.x, outside this question.
    ModuleKind unet_linear_kind(const std::string&) const override { return ModuleKind::linear; }
    ModelFiles open(const std::string& path, bool prefer_fp16) const override {
        return sd::model_files(sd::open_sd2(path, prefer_fp16), *this);
    }
    std::shared_ptr<const ModelConfig> config() const override {
        static const std::shared_ptr<const ModelConfig> c = sd::sd_config(sd::UnetConfig::sd2(), sd::ClipConfig::vit_h14());
        return c;
    }
    // A single file's text encoder is a view of its OpenCLIP tower (sd::openclip_text_view): its
    // q, k and v are thirds of one in_proj_weight there.
    StoredWeight stored_weight(const ModelFiles& m, Part part, const std::string& name) const override {
        const std::string key = weight_key(m, part, name);
        if (part != Part::text_encoder || key.empty()) return {key};
        StoredWeight s;
        if (sd::openclip_stored(*m.text_encoder, key, &s.key, &s.slice)) {
            s.slices = s.slice >= 0 ? 3 : 1;
            s.slice = std::max(s.slice, 0);
            return s;
        }
        return {key};
    }
};

}  // namespace

const Family& sd2_family() {
    static const Sd2 f;
    return f;
}

}  // namespace models
