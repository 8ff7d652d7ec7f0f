// SD2.x, the second family: its UNet settings (per-level heads, linear projections, upcast
// attention, 1024-wide context) against diffusers on a tiny config in both checkpoint layouts
// (tests/golden/make_sd2_unet_golden.py); its OpenCLIP text tower read from a single file against
// diffusers' converter and transformers (make_sd2_clip_golden.py); its tokenizer's "!" padding
// and kohya's long-prompt chunks; the family's strings and its refusals of SD1.x files.
#include <doctest/doctest.h>

#include "ggml-lite/core/autodiff.h"
#include "ggml-lite/core/error.h"
#include "ggml-lite/core/runtime.h"
#include "ggml-lite/io/safetensors.h"
#include "ggml-lite/ops/builder.h"
#include "lora/module.h"
#include "models/family.h"
#include "models/sd15/clip.h"
#include "models/sd15/tokenizer.h"
#include "models/sd15/unet.h"
#include "models/sd2/model_files.h"
#include "test_util.h"

using namespace gl;
using gltest::read_f32;
using gltest::rel_error;
using sd::UnetConfig;

namespace {

struct UnetRun {
    std::vector<float> eps, grad_x, grad_ctx;
    nn::LoadReport report;
};

UnetRun run_unet(const UnetConfig& c, const io::TensorSource& inputs, const io::TensorSource& weights) {
    Graph g;
    nn::Weights w(g, DType::f32);
    const auto shape = [&](const char* n) { return Shape::of(inputs.info(n).shape); };
    ValueId x = g.param("x", DType::f32, shape("x")), t = g.input("t", DType::f32, shape("t"));
    ValueId ctx = g.param("context", DType::f32, shape("context")), r = g.input("r", DType::f32, shape("r"));
    ValueId eps = sd::unet_forward(w, c, x, t, ctx);
    g.mark_output(eps);
    ValueId loss = sum(g, mul(g, eps, r));
    g.mark_output(loss);
    Gradients gr = backward(g, loss);
    auto rt = make_cpu_runtime(make_plan(g));
    rt->poison(0xff);
    UnetRun out;
    out.report = sd::load_unet(w, c, weights, *rt);
    for (const auto& [id, name] : {std::pair{x, "x"}, {t, "t"}, {ctx, "context"}, {r, "r"}})
        rt->write_f32(id, read_f32(inputs, name));
    rt->run();
    out.eps = rt->read_f32(eps);
    out.grad_x = rt->read_f32(gr[x]);
    out.grad_ctx = rt->read_f32(gr[ctx]);
    return out;
}

}  // namespace

TEST_CASE("sd2 golden: the tiny SD2.x UNet matches diffusers (f64) in both checkpoint layouts") {
    const std::string dir = gltest::golden_dir("sd2");
    io::SafetensorsFile inputs(dir + "unet_io.safetensors");
    io::SafetensorsFile diffusers(dir + "unet_diffusers.safetensors");
    io::SafetensorsFile original(dir + "unet_original.safetensors");
    // Linear projections: [C, C], not SD1.x's [C, C, 1, 1].
    CHECK(diffusers.info("down_blocks.0.attentions.0.proj_in.weight").shape == std::vector<int64_t>{16, 16});
    const UnetConfig c = UnetConfig::tiny_sd2();
    UnetRun a = run_unet(c, inputs, diffusers), b = run_unet(c, inputs, original);
    for (const UnetRun* run : {&a, &b}) {
        CHECK(run->report.missing.empty());
        CHECK(run->report.unexpected.empty());
        CHECK(run->report.tensors == diffusers.list().size());
    }
    CHECK(a.eps == b.eps);
    CHECK(a.grad_ctx == b.grad_ctx);
    const double e_eps = rel_error(a.eps, read_f32(inputs, "eps"));
    const double e_gx = rel_error(a.grad_x, read_f32(inputs, "grad_x"));
    const double e_gc = rel_error(a.grad_ctx, read_f32(inputs, "grad_context"));
    CHECK(e_eps <= 1e-4);
    CHECK(e_gx <= 1e-4);
    CHECK(e_gc <= 1e-4);
    MESSAGE("sd2 unet rel. errors vs diffusers: eps ", e_eps, ", grad x ", e_gx, ", grad context ", e_gc);

    // The same weights with SD1.x's uniform head count give other outputs: the per-level heads act.
    UnetConfig uniform = c;
    uniform.level_heads.clear();
    CHECK(rel_error(run_unet(uniform, inputs, diffusers).eps, read_f32(inputs, "eps")) > 1e-2);
}

TEST_CASE("sd2: the SD2.x UNet config (head dim 64 at every level) and its bad per-level heads") {
    const UnetConfig c = UnetConfig::sd2();
    c.validate();
    for (size_t i = 0; i < c.block_out.size(); i++) CHECK(c.block_out[i] / c.heads_at(i) == 64);
    CHECK(c.cross_attention_dim == 1024);
    CHECK(c.linear_projection);
    UnetConfig bad = UnetConfig::tiny_sd2();
    bad.level_heads = {2, 4, 8};
    CHECK_THROWS_WITH_AS(bad.validate(), doctest::Contains("3 per-level head counts for 2 blocks"), gl::Error);
    bad.level_heads = {2, 5};
    CHECK_THROWS_WITH_AS(bad.validate(), doctest::Contains("block_out[1] = 32 is not divisible by 5 heads"), gl::Error);
}

namespace {

const sd::ClipConfig kTinyOpenClip{1000, 32, 3, 4, 64, 77, gl::Act::gelu_erf, 1e-5f};

std::vector<float> encode(const io::TensorSource& weights, const std::vector<int32_t>& iv, int clip_skip) {
    Graph g;
    nn::Weights w(g, DType::f32);
    ValueId ids = g.input("ids", DType::i32, {2, 77});
    ValueId out = sd::build_clip(w, g, ids, kTinyOpenClip, clip_skip);
    g.mark_output(out);
    auto rt = make_cpu_runtime(make_plan(g));
    const nn::LoadReport r = sd::load_clip(w, weights, *rt);
    CHECK(r.missing.empty());
    CHECK(r.unexpected.empty());
    rt->write(ids, iv.data(), DType::i32);
    rt->run();
    return rt->read_f32(out);
}

}  // namespace

TEST_CASE("sd2 golden: the OpenCLIP text tower of a single file reads as diffusers converts it and encodes as transformers") {
    const std::string dir = gltest::golden_dir("sd2");
    auto tower = std::make_shared<io::SafetensorsFile>(dir + "clip_openclip.safetensors");
    io::SafetensorsFile converted(dir + "clip_diffusers.safetensors"), io(dir + "clip_io.safetensors");
    const auto view = sd::openclip_text_view(tower, kTinyOpenClip.layers);
    // Key for key and bit for bit diffusers' convert_open_clip_checkpoint (last layer dropped).
    CHECK(view->list().size() == converted.list().size());
    for (const io::TensorInfo& t : converted.list()) {
        CAPTURE(t.name);
        REQUIRE(view->has(t.name));
        CHECK(view->info(t.name).shape == t.shape);
        CHECK(read_f32(*view, t.name) == read_f32(converted, t.name));
    }
    CHECK(sd::detect_clip_layout(*view) == sd::ClipLayout::transformers);
    std::vector<int32_t> ids(size_t(io.info("ids").numel()));
    io.read("ids", ids.data(), DType::i32);
    for (int skip : {1, 2}) {
        CAPTURE(skip);
        const std::vector<float> want = read_f32(io, skip == 1 ? "out" : "out_skip2");
        const std::vector<float> got = encode(*view, ids, skip);
        CHECK(got == encode(converted, ids, skip));
        const double e = rel_error(got, want);
        CHECK(e <= 1e-4);
        MESSAGE("sd2 text encoder rel. error vs transformers (clip_skip ", skip, "): ", e);
    }
}

TEST_CASE("sd2: SD2.x's tokenizer pads with \"!\" and cuts long prompts as kohya's get_input_ids") {
    const sd::ClipTokenizer& t = sd::ClipTokenizer::builtin_sd2();
    const int32_t bos = t.bos(), eos = t.eos();
    CHECK(t.pad() == 0);
    CHECK(t.token(0) == "!");
    CHECK(sd::ClipTokenizer::builtin().pad() == eos);
    const std::vector<int32_t> words = t.tokenize("a cat");
    REQUIRE(words.size() == 2);
    std::vector<int32_t> want77{bos, words[0], words[1], eos};
    want77.resize(77, 0);
    CHECK(t.encode("a cat") == want77);

    // 80 content tokens, max_token_length 225: chunk 1 is full (its last id made EOS), chunk 2
    // holds the other 5, EOS and padding, chunk 3 starts with padding (made BOS, EOS, padding).
    std::string text;
    for (int i = 0; i < 80; i++) text += "cat ";
    const int32_t cat = t.tokenize("cat").at(0);
    const std::vector<int32_t> ids = t.encode_chunks(text, 225);
    REQUIRE(ids.size() == 3 * 77);
    std::vector<int32_t> c1(77, cat), c2(77, 0), c3(77, 0);
    c1[0] = c2[0] = c3[0] = bos;
    c1[76] = eos;
    for (int i = 1; i <= 5; i++) c2[size_t(i)] = cat;
    c2[6] = eos;
    c3[1] = eos;
    CHECK(std::vector<int32_t>(ids.begin(), ids.begin() + 77) == c1);
    CHECK(std::vector<int32_t>(ids.begin() + 77, ids.begin() + 154) == c2);
    CHECK(std::vector<int32_t>(ids.begin() + 154, ids.end()) == c3);
    // 225 content tokens: the padded sequence ends in EOS, which every chunk takes as its last.
    std::string full;
    for (int i = 0; i < 230; i++) full += "cat ";
    const std::vector<int32_t> f = t.encode_chunks(full, 150);
    REQUIRE(f.size() == 2 * 77);
    CHECK(f[76] == eos);
    CHECK(f[153] == eos);
    CHECK(f[152] == cat);
}

TEST_CASE("sd2: the family's metadata strings, Linear projections, kohya keys and registry") {
    const models::Family& f = models::sd2_family();
    CHECK(models::find_family("sd2") == &f);
    CHECK(f.name() == "sd2");
    CHECK(f.base_model(false).ss_v2 == "True");
    CHECK(f.base_model(false).ss_base_model_version == "sd_v2");
    CHECK(f.base_model(false).modelspec_architecture == "stable-diffusion-v2-512");
    CHECK(f.base_model(false).resolution == 512);
    CHECK(f.base_model(true).ss_base_model_version == "sd_v2_v");
    CHECK(f.base_model(true).modelspec_architecture == "stable-diffusion-v2-768-v");
    CHECK(f.base_model(true).resolution == 768);
    CHECK(models::sd15_family().base_model(true).resolution == 512);
    // kohya's LoRA sees SD2's proj_in / proj_out as Linear (2-D lora_down / lora_up).
    CHECK(f.unet_linear_kind("down_blocks.0.attentions.0.proj_in") == models::ModuleKind::linear);
    CHECK(models::sd15_family().unet_linear_kind("down_blocks.0.attentions.0.proj_in") == models::ModuleKind::conv1x1);
    // The text encoder's keys are SD1.x's (kohya's lora_te_ prefix on transformers' names).
    CHECK(lora::kohya_key(f, lora::Part::text_encoder, "text_model.encoder.layers.22.self_attn.q_proj") ==
          "lora_te_text_model_encoder_layers_22_self_attn_q_proj");
    CHECK(lora::kohya_key(f, lora::Part::unet, "mid_block.attentions.0.proj_in") == "lora_unet_mid_block_attentions_0_proj_in");
    CHECK(f.lora_blocks().size() == 25);
}

TEST_CASE("sd2: an SD1.x single file is refused by the SD2.x opener, an SD2.x one by SD1.x's, each naming the other") {
    gltest::TempDir tmp;
    const float one = 1.0f;
    const auto file_with = [&](const char* name, const std::string& key) {
        const std::string p = (tmp.path / name).string();
        io::write_safetensors(p, {{key, DType::f32, {1}, &one}});
        return p;
    };
    const std::string sd1 = file_with("sd1.safetensors", "cond_stage_model.transformer.text_model.final_layer_norm.bias");
    const std::string sd2 = file_with("sd2.safetensors", "cond_stage_model.model.ln_final.bias");
    CHECK_THROWS_WITH_AS(models::sd2_family().open(sd1), doctest::Contains("an SD1.x checkpoint"), gl::Error);
    CHECK_THROWS_WITH_AS(models::sd2_family().open(sd1), doctest::Contains("without --v2"), gl::Error);
    CHECK_THROWS_WITH_AS(models::sd15_family().open(sd2), doctest::Contains("an SD2.x checkpoint"), gl::Error);
    CHECK_THROWS_WITH_AS(models::sd15_family().open(sd2), doctest::Contains("--v2"), gl::Error);
    CHECK_THROWS_WITH_AS(models::sd2_family().open(file_with("other.safetensors", "foo")),
                         doctest::Contains("no OpenCLIP text encoder"), gl::Error);
    // A misshapen tower is named by tensor.
    CHECK_THROWS_WITH_AS(models::sd2_family().open(sd2), doctest::Contains("token_embedding.weight (OpenCLIP token embedding"),
                         gl::Error);
}
