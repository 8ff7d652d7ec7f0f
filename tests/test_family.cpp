// The model-family seam (models/family.h): SD1.5's facts as the family states them, the registry,
// and a stand-in family whose prefixes, classes, module kinds, order and metadata strings differ
// from SD1.5's: the LoRA network, its file keys and its metadata follow the family they are given.
#include <doctest/doctest.h>

#include <algorithm>

#include "lora_fixtures.h"
#include "ggml-lite/core/error.h"
#include "models/family.h"
#include "models/model_files.h"
#include "models/sd15/model_files.h"

namespace {

using models::Family;
using models::ModuleClass;

// SD1.5's module paths with other prefixes, classes and metadata: only the transformer blocks of
// the down path are "transformer", proj_in / proj_out run as Linear, the order is reversed.
class StandIn final : public Family {
public:
    std::string_view name() const override { return "stand-in"; }
    std::string_view description() const override { return "a test family"; }
    const models::TokenLayout& tokens() const override { return tokens_; }
    const models::LatentSpec& latent() const override { return latent_; }
    std::span<const models::TextEncoderSpec> text_encoders() const override { return {}; }
    models::BaseModelStrings base_model(bool v) const override {
        return {v ? "stand_in_v" : "stand_in", "True", "stand-in-arch"};
    }
    std::string lora_prefix(models::Part p) const override { return p == models::Part::unet ? "lora_x" : "lora_y"; }
    bool in_class(ModuleClass c, models::Part p, const std::string& path) const override {
        return p == models::Part::unet && c == ModuleClass::transformer && path.rfind("down_blocks.", 0) == 0 &&
               path.find(".attentions.") != std::string::npos;
    }
    models::ModuleKind unet_linear_kind(const std::string&) const override { return models::ModuleKind::linear; }
    std::vector<int64_t> definition_order(models::Part, const std::string& path) const override {
        return {-int64_t(std::hash<std::string>{}(path) % 1000)};
    }
    std::vector<std::string> io_modules(bool linear) const override {
        return linear ? std::vector<std::string>{} : std::vector<std::string>{"conv_in"};
    }
    models::ModelFiles open(const std::string& path, bool) const override {
        gl::fail(path, ": the stand-in opens no files");
    }
    std::shared_ptr<const models::ModelConfig> config() const override { return nullptr; }
    gl::ValueId denoiser(nn::Weights&, const models::ModelConfig&, gl::ValueId x, gl::ValueId, gl::ValueId) const override {
        return x;
    }
    gl::ValueId text_context(nn::Weights&, gl::Graph&, gl::ValueId ids, int, const models::ModelConfig&,
                             int) const override {
        return ids;
    }
    gl::ValueId text_states(nn::Weights&, gl::Graph&, gl::ValueId ids, const models::ModelConfig&, int) const override {
        return ids;
    }
    void load(models::Part, nn::Weights&, const models::ModelFiles&, gl::Runtime&) const override {
        gl::fail("the stand-in loads no weights");
    }
    std::function<std::string(const std::string&)> ldm_names(const models::ModelConfig&) const override {
        return [](const std::string&) { return std::string(); };
    }
    std::string weight_key(const models::ModelFiles&, models::Part, const std::string& name) const override {
        return name;
    }

private:
    models::TokenLayout tokens_{10, 8, 2};
    models::LatentSpec latent_{16, 16, 1.0, 0.5};
};

}  // namespace

TEST_CASE("family: SD1.5's token layout, latent space, text encoder, metadata strings and registry") {
    const Family& f = models::sd15_family();
    CHECK(f.name() == "sd15");
    CHECK(f.tokens().sequence == 77);
    CHECK(f.tokens().content == 75);
    CHECK(f.tokens().ids(2) == 154);
    CHECK(f.tokens().context_rows(1) == 77);
    CHECK(f.tokens().context_rows(3) == 227);  // kohya's max_token_length 225: 3 x 75 + BOS + EOS
    CHECK(f.latent().channels == 4);
    CHECK(f.latent().downscale == 8);
    CHECK(f.latent().scale == 0.18215);
    REQUIRE(f.text_encoders().size() == 1);
    CHECK(f.text_encoders()[0].lora_prefix == f.lora_prefix(models::Part::text_encoder));
    CHECK(f.base_model(false).ss_base_model_version == "sd_v1");
    CHECK(f.base_model(false).modelspec_architecture == "stable-diffusion-v1");
    CHECK(f.base_model(true).ss_base_model_version == "sd_v1_v");  // kohya's get_model_version_str_for_sd1_sd2
    CHECK(f.base_model(true).modelspec_architecture == "stable-diffusion-v1");
    CHECK(models::find_family("sd15") == &f);
    CHECK(models::find_family("sdxl") == nullptr);
    CHECK(models::family_names() == std::vector<std::string>{"sd15", "sd2"});
    CHECK(f.unet_linear_kind("down_blocks.0.attentions.0.proj_in") == models::ModuleKind::conv1x1);
    CHECK(f.unet_linear_kind("down_blocks.0.attentions.0.transformer_blocks.0.attn1.to_q") ==
          models::ModuleKind::linear);
    CHECK(f.in_class(ModuleClass::cross_attention, models::Part::unet,
                     "up_blocks.1.attentions.2.transformer_blocks.0.attn2.to_k"));
    CHECK(f.in_class(ModuleClass::transformer, models::Part::unet, "mid_block.attentions.0.proj_out"));
    CHECK_FALSE(f.in_class(ModuleClass::transformer, models::Part::unet, "mid_block.resnets.0.conv1"));
    CHECK(f.in_class(ModuleClass::text_mlp, models::Part::text_encoder, "text_model.encoder.layers.3.mlp.fc1"));
    // PyTorch's order: conv_in, the time embedding, down, up, mid, conv_out.
    const auto key = [&](const char* p) { return f.definition_order(models::Part::unet, p); };
    CHECK(key("conv_in") < key("time_embedding.linear_1"));
    CHECK(key("down_blocks.3.resnets.1.conv1") < key("up_blocks.0.resnets.0.conv1"));
    CHECK(key("up_blocks.3.attentions.2.proj_out") < key("mid_block.attentions.0.proj_in"));
}

TEST_CASE("family: a network on another family takes its prefixes, targets, module kinds and metadata") {
    static const StandIn fam;
    LoraConfig c{4, 4.0f, 1.0f};
    c.family = &fam;
    lora_test::Sd15Graphs s(c);
    REQUIRE(!s.net.modules().empty());
    size_t proj = 0;
    for (const lora::Module& m : s.net.modules()) {
        const lora::Layer& l = m.layer();
        CHECK_MESSAGE(l.part == Part::unet, l.path);
        CHECK_MESSAGE(l.path.rfind("down_blocks.", 0) == 0, l.path);  // the stand-in's classes only
        CHECK_MESSAGE(l.key.rfind("lora_x_down_blocks_", 0) == 0, l.key);
        CHECK(l.family == &fam);
        if (l.path.ends_with(".proj_in")) {
            proj++;
            CHECK(l.kind == lora::ModuleKind::linear);  // SD1.5 runs it as a 1x1 conv
        }
    }
    CHECK(proj > 0);
    const auto md = lora::kohya_metadata(s.net, lora::SaveOptions{});
    CHECK(md.at("ss_base_model_version") == "stand_in");
    CHECK(md.at("ss_v2") == "True");
    CHECK(md.at("modelspec.architecture") == "stand-in-arch/lora");

    // The same network on SD1.5 targets the up and mid blocks and the text encoder too.
    lora_test::Sd15Graphs sd(LoraConfig{4, 4.0f, 1.0f});
    CHECK(sd.net.modules().size() > s.net.modules().size());
    CHECK(lora::kohya_key(models::sd15_family(), Part::unet, "mid_block.attentions.0.proj_in") ==
          "lora_unet_mid_block_attentions_0_proj_in");
    CHECK(lora::kohya_key(fam, Part::text_encoder, "a.b") == "lora_y_a_b");
}

TEST_CASE("family: a LyCORIS preset names the family's own I/O modules") {
    static const StandIn fam;
    const std::optional<lora::Targets> full = lora::lycoris_preset(fam, "full");
    REQUIRE(full.has_value());
    CHECK(full->unet_names == std::vector<std::string>{"conv_in"});
    const std::optional<lora::Targets> sd = lora::lycoris_preset(models::sd15_family(), "full");
    REQUIRE(sd.has_value());
    CHECK(sd->unet_names == std::vector<std::string>{"conv_in", "conv_out", "time_embedding.linear_1",
                                                     "time_embedding.linear_2"});
    CHECK_FALSE(lora::lycoris_preset(fam, "no-such-preset").has_value());
}
