// The SD2.x family: SD1.x's UNet layout with SD2's configuration (per-level heads, Linear
// proj_in / proj_out, 1024-wide context), OpenCLIP ViT-H/14's text tower held as transformers'
// CLIPTextModel (23 layers: the penultimate hidden state), SD2's tokenizer padding with "!",
// kohya's "sd_v2" metadata and sai_model_spec's stable-diffusion-v2 architectures.
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
    sd::Sd15Files open(const std::string& path, bool prefer_fp16) const override {
        sd::Sd15Files m = sd::open_sd2(path, prefer_fp16);
        m.family = this;
        return m;
    }
};

}  // namespace

const Family& sd2_family() {
    static const Sd2 f;
    return f;
}

}  // namespace models
