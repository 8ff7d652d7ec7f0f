// SD2.x's model files (see model_files.h).
#include "models/sd2/model_files.h"

#include <cstring>
#include <filesystem>
#include <map>

#include "ggml-lite/core/error.h"
#include "ggml-lite/io/sources.h"

namespace sd {

namespace fs = std::filesystem;

namespace {

// transformers' CLIPTextModel keys over an OpenCLIP text tower: each name is one source tensor,
// or a third (q, k, v) of a layer's fused in_proj along its first axis.
class OpenClipTextView final : public gl::io::TensorSource {
public:
    OpenClipTextView(std::shared_ptr<const gl::io::TensorSource> src, int64_t layers, const std::string& prefix)
        : src_(std::move(src)) {
        const auto add = [&](const std::string& name, const std::string& key, int third = -1) {
            if (src_->has(key)) map_[name] = {key, third};
        };
        add("text_model.embeddings.token_embedding.weight", prefix + "token_embedding.weight");
        add("text_model.embeddings.position_embedding.weight", prefix + "positional_embedding");
        for (const char* p : {"weight", "bias"}) {
            const std::string s = p;
            add("text_model.final_layer_norm." + s, prefix + "ln_final." + s);
            for (int64_t l = 0; l < layers; l++) {
                const std::string ours = "text_model.encoder.layers." + std::to_string(l) + ".";
                const std::string theirs = prefix + "transformer.resblocks." + std::to_string(l) + ".";
                add(ours + "layer_norm1." + s, theirs + "ln_1." + s);
                add(ours + "layer_norm2." + s, theirs + "ln_2." + s);
                add(ours + "mlp.fc1." + s, theirs + "mlp.c_fc." + s);
                add(ours + "mlp.fc2." + s, theirs + "mlp.c_proj." + s);
                add(ours + "self_attn.out_proj." + s, theirs + "attn.out_proj." + s);
                const char* qkv[] = {"q_proj", "k_proj", "v_proj"};
                for (int i = 0; i < 3; i++) add(ours + "self_attn." + qkv[i] + "." + s, theirs + "attn.in_proj_" + s, i);
            }
        }
    }

    std::string origin() const override { return src_->origin(); }
    std::vector<gl::io::TensorInfo> list() const override {
        std::vector<gl::io::TensorInfo> out;
        for (const auto& [name, e] : map_) out.push_back(info(name));
        return out;
    }
    bool has(const std::string& name) const override { return map_.count(name) != 0; }
    gl::io::TensorInfo info(const std::string& name) const override {
        const Entry& e = entry(name);
        gl::io::TensorInfo t = src_->info(e.key);
        t.name = name;
        if (e.third >= 0) {
            GL_CHECK(!t.shape.empty() && t.shape[0] % 3 == 0, origin(), ": ", e.key, " (q, k and v in one tensor) has ",
                     t.shape.empty() ? int64_t(0) : t.shape[0], " rows, not a multiple of 3");
            t.shape[0] /= 3;
        }
        return t;
    }
    void read(const std::string& name, void* dst, gl::DType to) const override {
        const Entry& e = entry(name);
        if (e.third < 0) return src_->read(e.key, dst, to);
        const size_t part = size_t(info(name).numel()) * gl::dtype_size(to);
        std::vector<uint8_t> all(3 * part);
        src_->read(e.key, all.data(), to);
        std::memcpy(dst, all.data() + size_t(e.third) * part, part);
    }

    bool stored(const std::string& name, std::string* key, int* third) const {
        const auto it = map_.find(name);
        if (it == map_.end()) return false;
        *key = it->second.key;
        *third = it->second.third;
        return true;
    }

private:
    struct Entry {
        std::string key;
        int third = -1;
    };
    const Entry& entry(const std::string& name) const {
        const auto it = map_.find(name);
        GL_CHECK(it != map_.end(), origin(), ": no OpenCLIP text tensor for ", name);
        return it->second;
    }
    std::shared_ptr<const gl::io::TensorSource> src_;
    std::map<std::string, Entry> map_;
};

std::string shape_str(const std::vector<int64_t>& s) {
    std::string out = "[";
    for (size_t i = 0; i < s.size(); i++) out += (i ? ", " : "") + std::to_string(s[i]);
    return out + "]";
}

void expect_shape(const gl::io::TensorSource& src, const std::string& key, const std::vector<int64_t>& want,
                  const char* what) {
    GL_CHECK(src.has(key), src.origin(), ": tensor ", key, " (", what, ") is missing");
    const std::vector<int64_t> got = src.info(key).shape;
    bool ok = got.size() == want.size();
    for (size_t i = 0; ok && i < got.size(); i++) ok = want[i] < 0 || want[i] == got[i];
    GL_CHECK(ok, src.origin(), ": tensor ", key, " has shape ", shape_str(got), ", expected ", shape_str(want), " (",
             what, "): not an SD2.x model of this config");
}

}  // namespace

std::shared_ptr<const gl::io::TensorSource> openclip_text_view(std::shared_ptr<const gl::io::TensorSource> src,
                                                               int64_t layers, const std::string& prefix) {
    return std::make_shared<OpenClipTextView>(std::move(src), layers, prefix);
}

bool openclip_stored(const gl::io::TensorSource& src, const std::string& name, std::string* key, int* third) {
    const auto* v = dynamic_cast<const OpenClipTextView*>(&src);
    return v != nullptr && v->stored(name, key, third);
}

Sd15Files open_sd2_single_file(const std::string& file, const UnetConfig& unet_cfg, const ClipConfig& clip_cfg,
                               const VaeConfig& vae_cfg, std::shared_ptr<const ClipTokenizer> tokenizer) {
    std::shared_ptr<const gl::io::TensorSource> src = gl::io::open_checkpoint(file);
    const std::string prefix = "cond_stage_model.model.";
    bool openclip = false;
    for (const gl::io::TensorInfo& t : src->list()) {
        if (t.name.starts_with("conditioner."))
            gl::fail(file, ": an SDXL checkpoint (", t.name, "), not SD2.x");
        if (t.name.starts_with("cond_stage_model.transformer."))
            gl::fail(file, ": an SD1.x checkpoint (CLIP text encoder, ", t.name, "), not SD2.x (sdtrain, gl-txt2img, gl-merge: without --v2)");
        openclip = openclip || t.name.starts_with(prefix);
    }
    GL_CHECK(openclip, file, ": not an SD2.x single-file checkpoint (no OpenCLIP text encoder under ", prefix, "*)");
    unet_cfg.validate();
    vae_cfg.validate();
    expect_shape(*src, prefix + "token_embedding.weight", {clip_cfg.vocab, clip_cfg.width},
                 "OpenCLIP token embedding: vocabulary x width");
    expect_shape(*src, prefix + "transformer.resblocks." + std::to_string(clip_cfg.layers - 1) + ".attn.in_proj_weight",
                 {3 * clip_cfg.width, clip_cfg.width}, "OpenCLIP attention: 3 x width x width");
    // Open the rest as SD1.x's single files are, the text encoder seen under transformers' keys.
    Sd15Files out;
    out.layout = Sd15Layout::single_file;
    out.unet_cfg = unet_cfg;
    out.clip_cfg = clip_cfg;
    out.vae_cfg = vae_cfg;
    GL_CHECK(detect_unet_layout(*src) == UnetLayout::original, file,
             ": the UNet is not under a single file's model.diffusion_model.*");
    expect_shape(*src, unet_key_original(unet_cfg, "conv_in.weight"), {unet_cfg.block_out[0], -1, 3, 3}, "UNet conv_in");
    const std::vector<int64_t> conv_in = src->info(unet_key_original(unet_cfg, "conv_in.weight")).shape;
    out.unet_cfg.in_channels = int(conv_in[1]);
    for (size_t i = 0; i < unet_cfg.down.size(); i++) {
        if (unet_cfg.down[i] != UnetBlock::cross_attn) continue;
        const std::string n = "down_blocks." + std::to_string(i) + ".attentions.0.";
        expect_shape(*src, unet_key_original(unet_cfg, n + "transformer_blocks.0.attn2.to_k.weight"),
                     {unet_cfg.block_out[i], unet_cfg.cross_attention_dim}, "UNet cross-attention: channels x text width");
        expect_shape(*src, unet_key_original(unet_cfg, n + "proj_in.weight"), {unet_cfg.block_out[i], unet_cfg.block_out[i]},
                     "UNet linear proj_in");
        break;
    }
    expect_shape(*src, vae_keys_original(vae_cfg)("decoder.conv_in.weight"),
                 {vae_cfg.block_out.back(), vae_cfg.latent_channels, 3, 3}, "VAE decoder conv_in");
    out.tokenizer = tokenizer ? std::move(tokenizer)
                              : std::shared_ptr<const ClipTokenizer>(std::shared_ptr<void>(), &ClipTokenizer::builtin_sd2());
    GL_CHECK(out.tokenizer->vocab_size() <= clip_cfg.vocab, file, ": the tokenizer has ", out.tokenizer->vocab_size(),
             " ids but the text encoder embeds only ", clip_cfg.vocab);
    out.unet = out.vae = src;
    out.text_encoder = openclip_text_view(src, clip_cfg.layers, prefix);
    out.unet_path = out.text_encoder_path = out.vae_path = file;
    return out;
}

Sd15Files open_sd2(const std::string& path, bool prefer_fp16) {
    GL_CHECK(!path.empty(), "an empty path was given where a model belongs");
    std::error_code ec;
    const fs::file_status st = fs::status(path, ec);
    GL_CHECK(fs::exists(st), path, ": no such file or directory");
    Sd15Files m = fs::is_directory(st) ? open_sd15_folder(path, prefer_fp16) : open_sd2_single_file(path);
    // A folder without tokenizer/ gets the built-in vocabulary with SD2.x's pad token.
    if (m.tokenizer_path.empty())
        m.tokenizer = std::shared_ptr<const ClipTokenizer>(std::shared_ptr<void>(), &ClipTokenizer::builtin_sd2());
    check_sd15_pipeline(m);
    GL_CHECK(m.unet_cfg.linear_projection, path, ": an SD1.x model (its UNet's proj_in / proj_out are 1x1 convs, ",
             m.unet_path, "), not SD2.x (sdtrain, gl-txt2img, gl-merge: without --v2)");
    return m;
}

}  // namespace sd
