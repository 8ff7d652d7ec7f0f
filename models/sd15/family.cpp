// The SD1.x family: sd-scripts' / diffusers' UNet2DConditionModel with SD1.5's configuration,
// transformers' CLIP ViT-L/14 text encoder (one, its last hidden state), the 4-channel VAE
// latent at 1/8 scale, kohya's "lora_unet" / "lora_te" keys and its "sd_v1" metadata; and the
// rules it shares with SD2.x (models/sd15/sd_family.h).
#include <algorithm>
#include <sstream>

#include "ggml-lite/core/error.h"
#include "models/sd15/clip.h"
#include "models/sd15/model_files.h"
#include "models/sd15/sd_config.h"
#include "models/sd15/sd_family.h"
#include "models/sd15/unet.h"

namespace models {

namespace {

bool starts_with(const std::string& s, const char* p) { return s.rfind(p, 0) == 0; }
bool ends_with(const std::string& s, const std::string& p) {
    return s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
}
bool has(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

// The place of `name` in a class's definition order (unknown names last, in path order).
int64_t place(const std::string& name, std::initializer_list<const char*> order) {
    int64_t i = 0;
    for (const char* o : order) {
        if (name == o) return i;
        i++;
    }
    return i;
}

int64_t number(const std::string& s) {
    if (s.empty() || !std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; })) return -1;
    return std::stoll(s);
}

}  // namespace

bool SdFamily::in_class(ModuleClass c, Part part, const std::string& path) const {
    if (part == Part::text_encoder) {
        if (!starts_with(path, "text_model.encoder.layers.")) return false;
        if (c == ModuleClass::text_attention) return has(path, ".self_attn.");
        if (c == ModuleClass::text_mlp) return has(path, ".mlp.");
        return false;
    }
    if (!starts_with(path, "down_blocks.") && !starts_with(path, "mid_block.") && !starts_with(path, "up_blocks."))
        return false;
    switch (c) {
        case ModuleClass::transformer: return has(path, ".attentions.");
        case ModuleClass::resnet: return has(path, ".resnets.");
        case ModuleClass::downsample: return has(path, ".downsamplers.");
        case ModuleClass::upsample: return has(path, ".upsamplers.");
        case ModuleClass::cross_attention: return has(path, ".attn1.") || has(path, ".attn2.");
        case ModuleClass::text_attention:
        case ModuleClass::text_mlp: return false;
    }
    return false;
}

// Each path component: its index when it is a number, else its place among its class's
// children (sd-scripts' UNet, transformers' CLIPTextModel).
std::vector<int64_t> SdFamily::definition_order(Part part, const std::string& path) const {
    std::vector<std::string> p;
    std::stringstream ss(path);
    for (std::string s; std::getline(ss, s, '.');) p.push_back(s);
    std::vector<int64_t> key;
    for (size_t i = 0; i < p.size(); i++) {
        const std::string& s = p[i];
        int64_t k = number(s);
        if (k < 0) {
            if (part == Part::text_encoder)
                k = place(s, {"self_attn", "mlp", "k_proj", "v_proj", "q_proj", "out_proj", "fc1", "fc2"});
            else if (i == 0)
                k = place(s, {"conv_in", "time_embedding", "down_blocks", "up_blocks", "mid_block", "conv_out"});
            else if (p[i - 1] == "time_embedding")
                k = place(s, {"linear_1", "linear_2"});
            else
                k = place(s, {"attentions", "resnets", "downsamplers", "upsamplers", "proj_in",
                              "transformer_blocks", "proj_out", "attn1", "ff", "attn2", "to_q", "to_k", "to_v",
                              "to_out", "net", "proj", "conv1", "time_emb_proj", "conv2", "conv_shortcut", "conv"});
        }
        key.push_back(k);
    }
    return key;
}

std::vector<std::string> SdFamily::io_modules(bool linear) const {
    if (linear) return {"time_embedding.linear_1", "time_embedding.linear_2"};
    return {"conv_in", "conv_out"};
}

// kohya's get_block_index on the module's key: down_blocks.i.<resnets|attentions>.j is 1 + 3i + j
// (downsamplers 1 + 3i + 2), up_blocks 13 + the same, anything in mid_block 12; block 0
// (conv_in, the time embedding) holds no module networks.lora makes.
int SdFamily::lora_block(const std::string& path) const {
    std::vector<std::string> p;
    std::stringstream ss(path);
    for (std::string s; std::getline(ss, s, '.');) p.push_back(s);
    if (!p.empty() && p[0] == "mid_block") return 12;
    if (p.size() < 5 || (p[0] != "down_blocks" && p[0] != "up_blocks")) return -1;
    const int64_t i = number(p[1]), j = number(p[3]);
    if (i < 0 || j < 0 || i > 3) return -1;
    int64_t idx = 0;
    if (p[2] == "resnets" || p[2] == "attentions") idx = 3 * i + j;
    else if (p[2] == "downsamplers" || p[2] == "upsamplers") idx = 3 * i + 2;
    else return -1;
    if (idx > 11) return -1;
    return int(p[0] == "down_blocks" ? 1 + idx : 13 + idx);
}

gl::ValueId SdFamily::denoiser(nn::Weights& w, const ModelConfig& c, gl::ValueId x, gl::ValueId t,
                               gl::ValueId context) const {
    return sd::unet_forward(w, sd::sd_config(c).unet, x, t, context);
}

gl::ValueId SdFamily::text_context(nn::Weights& w, gl::Graph& g, gl::ValueId ids, int chunks, const ModelConfig& c,
                                   int clip_skip) const {
    return sd::build_clip_chunked(w, g, ids, chunks, sd::sd_config(c).clip, clip_skip);
}

gl::ValueId SdFamily::text_states(nn::Weights& w, gl::Graph& g, gl::ValueId ids, const ModelConfig& c,
                                  int clip_skip) const {
    return sd::build_clip(w, g, ids, sd::sd_config(c).clip, clip_skip);
}

void SdFamily::load(Part part, nn::Weights& w, const ModelFiles& m, gl::Runtime& rt) const {
    if (part == Part::unet) {
        GL_CHECK(m.unet != nullptr, "model: no UNet weights to load (", m.unet_path, ")");
        sd::load_unet(w, sd::sd_config(m.cfg()).unet, *m.unet, rt);
    } else {
        GL_CHECK(m.text_encoder != nullptr, "model: no text encoder weights to load (", m.text_encoder_path, ")");
        sd::load_clip(w, *m.text_encoder, rt);
    }
}

std::function<std::string(const std::string&)> SdFamily::ldm_names(const ModelConfig& c) const {
    return sd::unet_ldm_names(sd::sd_config(c).unet);
}

std::string SdFamily::weight_key(const ModelFiles& m, Part part, const std::string& name) const {
    if (part == Part::text_encoder) return sd::clip_key(sd::detect_clip_layout(*m.text_encoder), name);
    return sd::detect_unet_layout(*m.unet) == sd::UnetLayout::diffusers
               ? sd::unet_key_diffusers(name)
               : sd::unet_key_original(sd::sd_config(m.cfg()).unet, name);
}

namespace {

class Sd15 final : public SdFamily {
public:
    std::string_view name() const override { return "sd15"; }
    std::string_view description() const override { return "Stable Diffusion 1.x"; }
    // kohya's get_model_version_str_for_sd1_sd2 appends "_v" for v-prediction; sai_model_spec's
    // architecture stays "stable-diffusion-v1" for SD1.x whatever the prediction.
    BaseModelStrings base_model(bool v_parameterization) const override {
        return {v_parameterization ? "sd_v1_v" : "sd_v1", "False", "stable-diffusion-v1"};
    }
    // SD1.5's proj_in / proj_out are 1x1 convs (SD2.x's are Linear).
    ModuleKind unet_linear_kind(const std::string& path) const override {
        return ends_with(path, ".proj_in") || ends_with(path, ".proj_out") ? ModuleKind::conv1x1 : ModuleKind::linear;
    }
    ModelFiles open(const std::string& path, bool prefer_fp16) const override {
        sd::Sd15Files m = sd::open_sd15(path, prefer_fp16);
        // A diffusers folder opens whatever its configs say; SD2.x's is refused here, by name.
        const std::string sd2 = sd::sd2_traits(m);
        GL_CHECK(sd2.empty(), path, ": an SD2.x model (", sd2, "), not SD1.x (sdtrain, gl-txt2img, gl-merge: --v2)");
        return sd::model_files(std::move(m), *this);
    }
    std::shared_ptr<const ModelConfig> config() const override {
        static const std::shared_ptr<const ModelConfig> c = sd::sd_config(sd::UnetConfig::sd15(), sd::ClipConfig::vit_l14());
        return c;
    }
};

}  // namespace

const Family& sd15_family() {
    static const Sd15 f;
    return f;
}

}  // namespace models
