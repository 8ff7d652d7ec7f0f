// sdtrain on a tiny SD2.x model (--v2): a diffusers folder with SD2's settings (the golden tiny
// SD2 UNet, a gelu text encoder 24 wide, the tiny tokenizer padding with "!") trains, its loss is
// finite, the LoRA holds 2-D proj_in / proj_out modules and kohya's SD2 metadata; the model is
// refused without --v2, an SD1.x model with it; modelspec's resolution for 768-v; the SD2.x demo
// model (tools/common/demo_assets.h) opens as SD2.x and trains.
#include <doctest/doctest.h>

#include <cmath>

#include "ggml-lite/io/safetensors.h"
#include "models/sd15/sd_config.h"
#include "models/sd15/tokenizer.h"
#include "nlohmann/json.hpp"
#include "sdtrain_fixtures.h"
#include "train/run/metadata.h"
#include "tools/common/demo_assets.h"
#include "train/run/session.h"

using namespace sdtrain_test;

namespace {

struct Losses : train::RunObserver {
    std::vector<double> loss;
    void on_step(const train::StepEvent& e) override { loss.push_back(e.loss); }
};

}  // namespace

TEST_CASE("sdtrain sd2: --v2 trains a tiny SD2.x model, its LoRA with Linear projections and kohya's SD2 metadata") {
    Scratch s("sd2");
    const fs::path model = make_tiny_sd2_model(s.root), data = make_dataset(s.root);
    train::RunConfig c = tiny_config(model, data, s.root / "out");
    c.v2 = true;
    c.max_train_steps = 2;
    Losses rec;
    const train::RunSummary r = train::Session(c, &rec).run();
    CHECK(r.steps == 2);
    REQUIRE(rec.loss.size() == 2);
    for (double l : rec.loss) CHECK(std::isfinite(l));
    gl::io::SafetensorsFile lora((s.root / "out" / "tiny.safetensors").string());
    CHECK(lora.info("lora_unet_down_blocks_0_attentions_0_proj_in.lora_down.weight").shape == std::vector<int64_t>{4, 16});
    CHECK(lora.info("lora_unet_up_blocks_1_attentions_1_proj_out.lora_up.weight").shape == std::vector<int64_t>{16, 4});
    CHECK(lora.info("lora_unet_down_blocks_0_attentions_0_transformer_blocks_0_attn2_to_k.lora_down.weight").shape ==
          std::vector<int64_t>{4, 24});
    CHECK(lora.has("lora_te_text_model_encoder_layers_1_self_attn_q_proj.lora_down.weight"));
    const auto& md = lora.metadata();
    CHECK(md.at("ss_v2") == "True");
    CHECK(md.at("ss_base_model_version") == "sd_v2");
    CHECK(md.at("modelspec.architecture") == "stable-diffusion-v2-512/lora");
    CHECK(md.at("modelspec.resolution") == "48x48");

    // Without --v2 the SD2.x folder is named for what it is; an SD1.x folder with --v2 likewise.
    train::RunConfig no_v2 = c;
    no_v2.v2 = false;
    no_v2.output_dir = (s.root / "no_v2").string();
    CHECK_THROWS_WITH_AS(train::Session(no_v2).run(), doctest::Contains("an SD2.x model (the UNet's linear projections"),
                         gl::Error);
    train::RunConfig sd1 = tiny_config(make_tiny_model(s.root), data, s.root / "sd1");
    sd1.v2 = true;
    CHECK_THROWS_WITH_AS(train::Session(sd1).run(), doctest::Contains("an SD1.x model"), gl::Error);
    CHECK_THROWS_WITH_AS(train::Session(sd1).run(), doctest::Contains("without --v2"), gl::Error);
}

TEST_CASE("sdtrain sd2: modelspec for 768-v (--v2 --v_parameterization): architecture and kohya's default 768x768") {
    train::RunConfig c;
    c.v2 = true;
    c.v_parameterization = true;
    lora::SaveOptions so = train::lora_save_options(c, {});
    CHECK(so.resolution_w == 768);
    CHECK(so.resolution_h == 768);
    CHECK(so.prediction_type == "v");
    CHECK(c.family().base_model(c.v_parameterization).modelspec_architecture == "stable-diffusion-v2-768-v");
    c.resolution = std::array<int, 2>{640, 512};
    so = train::lora_save_options(c, {});
    CHECK(so.resolution_w == 640);
    c.v2 = false;
    c.resolution.reset();
    CHECK(train::lora_save_options(c, {}).resolution_w == 512);
}

TEST_CASE("sdtrain sd2: the SD2.x demo model opens as SD2.x (built-in tokenizer padding with \"!\") and trains a step") {
    Scratch s("sd2demo");
    const demo::ModelConfig mc = demo::model_config_sd2();
    demo::write_model(s.root / "demo", mc, 3);
    const models::ModelFiles m = models::sd2_family().open((s.root / "demo").string());
    CHECK(m.family == &models::sd2_family());
    CHECK(m.tokenizer->pad() == 0);
    CHECK(sd::sd_config(m.cfg()).unet.level_heads == mc.unet.level_heads);
    CHECK(sd::sd_config(m.cfg()).unet.linear_projection);
    CHECK(sd::sd_config(m.cfg()).clip.act == gl::Act::gelu_erf);
    CHECK_THROWS_WITH_AS(models::sd15_family().open((s.root / "demo").string()),
                         doctest::Contains("an SD2.x model (the UNet's linear projections, the UNet's per-level attention "
                                           "heads, the text encoder's gelu), not SD1.x"),
                         gl::Error);
    train::RunConfig c = tiny_config(s.root / "demo", make_dataset(s.root), s.root / "out");
    c.v2 = true;
    c.v_parameterization = true;
    c.max_train_steps = 1;
    c.gradient_accumulation_steps = 1;
    c.max_token_length = 150;
    // The demo's UNet halves the latents twice and its VAE downscales 8x: 32x32 images, no buckets.
    c.enable_bucket = false;
    c.bucket_no_upscale = false;
    c.resolution = std::array<int, 2>{32, 32};
    Losses rec;
    train::Session(c, &rec).run();
    REQUIRE(rec.loss.size() == 1);
    CHECK(std::isfinite(rec.loss[0]));
    const gl::io::SafetensorsFile lora((s.root / "out" / "tiny.safetensors").string());
    const auto& md = lora.metadata();
    CHECK(md.at("ss_base_model_version") == "sd_v2_v");
    CHECK(md.at("modelspec.architecture") == "stable-diffusion-v2-768-v/lora");
    CHECK(md.at("modelspec.prediction_type") == "v");
}
