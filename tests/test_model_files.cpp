// open_sd15: diffusers folders assembled in a temporary directory from the committed tiny golden
// weights (tests/golden/data/{unet,clip,vae}/) and a single file merged from their original-layout
// files must load to the golden outputs; fp16 variant choice; SD2 / SDXL configs and files, bad
// JSON and missing pieces are refused with the file and field named.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unistd.h>

#include "ggml-lite/core/error.h"
#include "ggml-lite/core/planner.h"
#include "ggml-lite/core/runtime.h"
#include "ggml-lite/io/safetensors.h"
#include "ggml-lite/ops/builder.h"
#include "models/sd15/model_files.h"
#include "test_util.h"

using namespace gl;
using gltest::read_f32;
using gltest::rel_error;
using gltest::TempDir;
namespace fs = std::filesystem;

namespace {

fs::path golden(const char* area) { return fs::path(__FILE__).parent_path() / "golden" / "data" / area; }


void write_text(const fs::path& p, const std::string& s) {
    fs::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << s;
}

void copy_file_to(const fs::path& from, const fs::path& to) {
    fs::create_directories(to.parent_path());
    fs::copy_file(from, to, fs::copy_options::overwrite_existing);
}

// The tiny configs as diffusers / transformers write them (mirroring the golden scripts).
const char* kUnetConfig = R"({"_class_name": "UNet2DConditionModel", "_diffusers_version": "0.30.0",
  "act_fn": "silu", "addition_embed_type": null, "attention_head_dim": 2, "block_out_channels": [16, 32],
  "center_input_sample": false, "class_embed_type": null, "cross_attention_dim": 16,
  "down_block_types": ["CrossAttnDownBlock2D", "DownBlock2D"], "downsample_padding": 1, "flip_sin_to_cos": true,
  "freq_shift": 0, "in_channels": 4, "layers_per_block": 1, "mid_block_scale_factor": 1, "norm_eps": 1e-05,
  "norm_num_groups": 8, "num_attention_heads": null, "out_channels": 4, "sample_size": 8,
  "up_block_types": ["UpBlock2D", "CrossAttnUpBlock2D"], "use_linear_projection": false})";
const char* kClipConfig = R"({"architectures": ["CLIPTextModel"], "model_type": "clip_text_model",
  "vocab_size": 1000, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
  "max_position_embeddings": 77, "hidden_act": "quick_gelu", "layer_norm_eps": 1e-05, "projection_dim": 512})";
const char* kVaeConfig = R"({"_class_name": "AutoencoderKL", "act_fn": "silu", "block_out_channels": [8, 16],
  "down_block_types": ["DownEncoderBlock2D", "DownEncoderBlock2D"], "in_channels": 3, "latent_channels": 4,
  "layers_per_block": 1, "norm_num_groups": 4, "out_channels": 3, "sample_size": 16, "scaling_factor": 0.18215,
  "up_block_types": ["UpDecoderBlock2D", "UpDecoderBlock2D"]})";

// A tokenizer whose ids fit the tiny text encoder's 1000: the tiny golden vocabulary's 512 byte
// symbols, no merges, BOS 512 and EOS 513.
void write_small_tokenizer(const fs::path& dir) {
    std::ifstream f(golden("tokenizer") / "tiny" / "vocab.json");
    const nlohmann::json full = nlohmann::json::parse(f);
    nlohmann::json small = nlohmann::json::object();
    for (const auto& [tok, id] : full.items())
        if (id.get<int>() < 512) small[tok] = id;
    REQUIRE(small.size() == 512);
    small["<|startoftext|>"] = 512;
    small["<|endoftext|>"] = 513;
    write_text(dir / "vocab.json", small.dump());
    write_text(dir / "merges.txt", "#version: 0.2\n");
}

// The tiny model as a diffusers folder.
void make_folder(const fs::path& root, bool with_index = true) {
    if (with_index)
        write_text(root / "model_index.json", R"({"_class_name": "StableDiffusionPipeline",
            "unet": ["diffusers", "UNet2DConditionModel"], "safety_checker": [null, null]})");
    write_text(root / "unet" / "config.json", kUnetConfig);
    write_text(root / "text_encoder" / "config.json", kClipConfig);
    write_text(root / "vae" / "config.json", kVaeConfig);
    copy_file_to(golden("unet") / "unet_diffusers.safetensors", root / "unet" / "diffusion_pytorch_model.safetensors");
    copy_file_to(golden("clip") / "clip_tiny.safetensors", root / "text_encoder" / "model.safetensors");
    copy_file_to(golden("vae") / "weights_diffusers.safetensors", root / "vae" / "diffusion_pytorch_model.safetensors");
    write_small_tokenizer(root / "tokenizer");
}

// Forward passes of the three models loaded from `m`, compared with the golden references;
// returns the largest relative error.
double check_against_golden(const sd::Sd15Files& m) {
    double worst = 0;
    {
        io::SafetensorsFile io((golden("unet") / "io.safetensors").string());
        Graph g;
        nn::Weights w(g, DType::f32);
        ValueId x = g.input("x", DType::f32, Shape::of(io.info("x").shape));
        ValueId t = g.input("t", DType::f32, Shape::of(io.info("t").shape));
        ValueId ctx = g.input("context", DType::f32, Shape::of(io.info("context").shape));
        ValueId eps = sd::unet_forward(w, m.unet_cfg, x, t, ctx);
        g.mark_output(eps);
        auto rt = make_cpu_runtime(make_plan(g));
        nn::LoadReport rep = sd::load_unet(w, m.unet_cfg, *m.unet, *rt);
        CHECK(rep.missing.empty());
        CHECK(rep.unexpected.empty());
        for (auto [v, n] : {std::pair{x, "x"}, {t, "t"}, {ctx, "context"}}) rt->write_f32(v, read_f32(io, n));
        rt->run();
        const double e = rel_error(rt->read_f32(eps), read_f32(io, "eps"));
        CHECK(e <= 1e-4);
        worst = std::max(worst, e);
    }
    {
        io::SafetensorsFile io((golden("clip") / "clip_tiny_io.safetensors").string());
        const io::TensorInfo ii = io.info("ids");
        std::vector<int32_t> ids(size_t(ii.numel()));
        io.read("ids", ids.data(), DType::i32);
        Graph g;
        nn::Weights w(g, DType::f32);
        ValueId in = g.input("ids", DType::i32, Shape::of(ii.shape));
        ValueId out = sd::build_clip(w, g, in, m.clip_cfg, 1);
        g.mark_output(out);
        auto rt = make_cpu_runtime(make_plan(g));
        nn::LoadReport rep = sd::load_clip(w, *m.text_encoder, *rt);
        CHECK(rep.missing.empty());
        rt->write(in, ids.data(), DType::i32);
        rt->run();
        const double e = rel_error(rt->read_f32(out), read_f32(io, "out_last"));
        CHECK(e <= 1e-4);
        worst = std::max(worst, e);
    }
    {
        io::SafetensorsFile io((golden("vae") / "io.safetensors").string());
        Graph g;
        nn::Weights w(g, DType::f32);
        ValueId x = g.input("x", DType::f32, Shape::of(io.info("x").shape));
        ValueId z = g.input("z", DType::f32, Shape::of(io.info("z").shape));
        sd::VaeEncoded enc = sd::vae_encode(w, m.vae_cfg, x);
        ValueId image = sd::vae_decode(w, m.vae_cfg, z);
        g.mark_output(enc.moments);
        g.mark_output(image);
        auto rt = make_cpu_runtime(make_plan(g));
        nn::LoadReport rep = sd::load_vae(w, m.vae_cfg, *m.vae, *rt);
        CHECK(rep.missing.empty());
        CHECK(rep.unexpected.empty());
        rt->write_f32(x, read_f32(io, "x"));
        rt->write_f32(z, read_f32(io, "z"));
        rt->run();
        const double e1 = rel_error(rt->read_f32(enc.moments), read_f32(io, "moments"));
        const double e2 = rel_error(rt->read_f32(image), read_f32(io, "image"));
        CHECK(e1 <= 1e-4);
        CHECK(e2 <= 1e-4);
        worst = std::max({worst, e1, e2});
    }
    return worst;
}

void check_tiny_configs(const sd::Sd15Files& m) {
    const sd::UnetConfig u = sd::UnetConfig::tiny();
    CHECK(m.unet_cfg.block_out == u.block_out);
    CHECK(m.unet_cfg.down == u.down);
    CHECK(m.unet_cfg.up == u.up);
    CHECK(m.unet_cfg.heads == u.heads);
    CHECK(m.unet_cfg.layers_per_block == u.layers_per_block);
    CHECK(m.unet_cfg.cross_attention_dim == u.cross_attention_dim);
    CHECK(m.unet_cfg.norm_groups == u.norm_groups);
    const sd::ClipConfig c = sd::ClipConfig::tiny();
    CHECK(m.clip_cfg.vocab == c.vocab);
    CHECK(m.clip_cfg.width == c.width);
    CHECK(m.clip_cfg.layers == c.layers);
    CHECK(m.clip_cfg.heads == c.heads);
    CHECK(m.clip_cfg.mlp == c.mlp);
    CHECK(m.clip_cfg.act == c.act);
    const sd::VaeConfig v = sd::VaeConfig::tiny();
    CHECK(m.vae_cfg.block_out == v.block_out);
    CHECK(m.vae_cfg.layers_per_block == v.layers_per_block);
    CHECK(m.vae_cfg.norm_groups == v.norm_groups);
    CHECK(m.vae_cfg.scaling_factor == v.scaling_factor);
}

// The three original-layout golden files merged into one single-file checkpoint (their keys
// already carry model.diffusion_model. / cond_stage_model.transformer. / first_stage_model.).
void write_single_file(const fs::path& out, std::vector<io::TensorToWrite> extra = {}) {
    std::vector<std::unique_ptr<io::SafetensorsFile>> files;
    for (auto [area, name] : {std::pair{"unet", "unet_original.safetensors"}, {"clip", "clip_tiny_original.safetensors"},
                              {"vae", "weights_original.safetensors"}})
        files.push_back(std::make_unique<io::SafetensorsFile>((golden(area) / name).string()));
    std::vector<std::vector<uint8_t>> data;
    std::vector<io::TensorToWrite> all = std::move(extra);
    for (const auto& f : files)
        for (const io::TensorInfo& t : f->list()) {
            data.emplace_back(size_t(t.numel()) * dtype_size(t.dtype));
            f->read(t.name, data.back().data(), t.dtype);
            all.push_back({t.name, t.dtype, t.shape, data.back().data()});
        }
    io::write_safetensors(out.string(), all);
}

}  // namespace

TEST_CASE("model_files: a diffusers folder opens to the tiny configs and the golden outputs") {
    TempDir tmp;
    make_folder(tmp.path);
    // The tiny golden models were made separately: the UNet's context is 16 wide, the text
    // encoder's output 32, which open_sd15's cross-check refuses (naming both files).
    CHECK_THROWS_WITH_AS(sd::open_sd15(tmp.path.string()),
                         doctest::Contains("cross_attention_dim 16 does not match the text encoder's hidden_size 32"),
                         gl::Error);
    sd::Sd15Files m = sd::open_sd15_folder(tmp.path.string());
    CHECK(m.layout == sd::Sd15Layout::diffusers);
    CHECK(std::string(sd::sd15_layout_name(m.layout)) == "diffusers");
    check_tiny_configs(m);
    CHECK(m.unet_path == (tmp.path / "unet" / "diffusion_pytorch_model.safetensors").string());
    CHECK(m.text_encoder_path == (tmp.path / "text_encoder" / "model.safetensors").string());
    CHECK(m.tokenizer->bos() == 512);
    CHECK(m.tokenizer->encode("a cat").size() == 77);
    const double e = check_against_golden(m);
    MESSAGE("open_sd15 (diffusers folder): max rel. error vs golden ", e);

    // model_index.json is optional.
    fs::remove(tmp.path / "model_index.json");
    CHECK(sd::open_sd15_folder(tmp.path.string()).layout == sd::Sd15Layout::diffusers);
}

TEST_CASE("model_files: fp16 variants and .bin files are chosen by preference, the other used when alone") {
    TempDir tmp;
    make_folder(tmp.path);
    const fs::path unet = tmp.path / "unet";
    copy_file_to(unet / "diffusion_pytorch_model.safetensors", unet / "diffusion_pytorch_model.fp16.safetensors");
    CHECK(sd::open_sd15_folder(tmp.path.string(), false).unet_path == (unet / "diffusion_pytorch_model.safetensors").string());
    sd::Sd15Files m16 = sd::open_sd15_folder(tmp.path.string(), true);
    CHECK(m16.unet_path == (unet / "diffusion_pytorch_model.fp16.safetensors").string());
    CHECK(m16.vae_path == (tmp.path / "vae" / "diffusion_pytorch_model.safetensors").string());  // no fp16 there
    fs::remove(unet / "diffusion_pytorch_model.safetensors");
    CHECK(sd::open_sd15_folder(tmp.path.string(), false).unet_path ==
          (unet / "diffusion_pytorch_model.fp16.safetensors").string());
    // A torch .bin (zip) is opened by content when no safetensors file is there.
    const fs::path te = tmp.path / "text_encoder";
    fs::remove(te / "model.safetensors");
    copy_file_to(golden("ckpt") / "module.ckpt", te / "pytorch_model.bin");
    sd::Sd15Files mb = sd::open_sd15_folder(tmp.path.string());
    CHECK(mb.text_encoder_path == (te / "pytorch_model.bin").string());
    CHECK(!mb.text_encoder->list().empty());
}

TEST_CASE("model_files: a single file merged from the original layouts loads to the golden outputs") {
    TempDir tmp;
    const fs::path file = tmp.path / "model.safetensors";
    write_single_file(file);
    TempDir tokdir;
    write_small_tokenizer(tokdir.path);
    auto tok = std::make_shared<const sd::ClipTokenizer>(sd::ClipTokenizer::from_folder(tokdir.path.string()));
    sd::Sd15Files m = sd::open_sd15_single_file(file.string(), sd::UnetConfig::tiny(), sd::ClipConfig::tiny(),
                                                sd::VaeConfig::tiny(), tok);
    CHECK(m.layout == sd::Sd15Layout::single_file);
    CHECK(std::string(sd::sd15_layout_name(m.layout)) == "single-file");
    CHECK(m.unet.get() == m.text_encoder.get());
    CHECK(m.unet.get() == m.vae.get());
    CHECK(m.unet_cfg.in_channels == 4);
    const double e = check_against_golden(m);
    MESSAGE("open_sd15 (single file): max rel. error vs golden ", e);

    // With SD1.5's configs the tiny file is refused by the first shape that differs, named.
    CHECK_THROWS_WITH_AS(sd::open_sd15(file.string()),
                         doctest::Contains("token_embedding.weight has shape [1000, 32], expected [49408, 768]"),
                         gl::Error);
    // The built-in vocabulary does not fit the tiny text encoder.
    CHECK_THROWS_WITH_AS(sd::open_sd15_single_file(file.string(), sd::UnetConfig::tiny(), sd::ClipConfig::tiny(),
                                                   sd::VaeConfig::tiny()),
                         doctest::Contains("embeds only 1000"), gl::Error);
}

TEST_CASE("model_files: SD2 and SDXL single files and non-model files are named as such") {
    TempDir tmp;
    const float one = 1.0f;
    auto file_with = [&](const char* name, const std::string& key) {
        const fs::path p = tmp.path / name;
        io::write_safetensors(p.string(), {{key, DType::f32, {1}, &one}});
        return p.string();
    };
    CHECK_THROWS_WITH_AS(sd::open_sd15(file_with("xl.safetensors", "conditioner.embedders.0.transformer.x")),
                         doctest::Contains("an SDXL checkpoint"), gl::Error);
    CHECK_THROWS_WITH_AS(sd::open_sd15(file_with("sd2.safetensors", "cond_stage_model.model.token_embedding.weight")),
                         doctest::Contains("an SD2.x checkpoint"), gl::Error);
    CHECK_THROWS_WITH_AS(sd::open_sd15(file_with("other.safetensors", "foo")),
                         doctest::Contains("not an SD1.x single-file checkpoint (text encoder)"), gl::Error);
    // A lone diffusers UNet file is not a whole model.
    TempDir tok;
    write_small_tokenizer(tok.path);
    const fs::path mixed = tmp.path / "mixed.safetensors";
    {
        // The single file with its UNet under diffusers keys.
        io::SafetensorsFile u((golden("unet") / "unet_diffusers.safetensors").string());
        io::SafetensorsFile c((golden("clip") / "clip_tiny_original.safetensors").string());
        io::SafetensorsFile v((golden("vae") / "weights_original.safetensors").string());
        std::vector<std::vector<uint8_t>> data;
        std::vector<io::TensorToWrite> all;
        for (const io::SafetensorsFile* f : {&u, &c, &v})
            for (const io::TensorInfo& t : f->list()) {
                data.emplace_back(size_t(t.numel()) * dtype_size(t.dtype));
                f->read(t.name, data.back().data(), t.dtype);
                all.push_back({t.name, t.dtype, t.shape, data.back().data()});
            }
        io::write_safetensors(mixed.string(), all);
    }
    CHECK_THROWS_WITH_AS(sd::open_sd15_single_file(mixed.string(), sd::UnetConfig::tiny(), sd::ClipConfig::tiny(),
                                                   sd::VaeConfig::tiny()),
                         doctest::Contains("the UNet is in the diffusers layout"), gl::Error);
    CHECK_THROWS_WITH_AS(sd::open_sd15((tmp.path / "nope.ckpt").string()), doctest::Contains("nope.ckpt: no such file"),
                         gl::Error);
}

TEST_CASE("model_files: unsupported and malformed configs are refused naming the file and field") {
    auto unet = [](const std::string& patch) {
        nlohmann::json j = nlohmann::json::parse(kUnetConfig);
        j.merge_patch(nlohmann::json::parse(patch));
        return sd::parse_unet_config(j.dump(), "unet/config.json");
    };
    CHECK(unet("{}").heads == 2);
    CHECK(unet(R"({"num_attention_heads": 4})").heads == 4);
    CHECK(unet(R"({"attention_head_dim": [2, 2]})").heads == 2);
    CHECK(unet(R"({"in_channels": 9})").in_channels == 9);
    // SD2.x: linear projections, per-level head counts, upcast attention are read (the family
    // that opens the model checks them: test_sd2.cpp).
    CHECK(unet(R"({"use_linear_projection": true})").linear_projection);
    CHECK_FALSE(unet("{}").linear_projection);
    CHECK(unet(R"({"upcast_attention": true})").upcast_attention);
    CHECK(unet(R"({"attention_head_dim": [2, 4]})").level_heads == std::vector<int>{2, 4});
    CHECK(unet(R"({"attention_head_dim": [2, 2]})").level_heads.empty());
    CHECK_THROWS_WITH_AS(unet(R"({"attention_head_dim": [2, 4, 8]})"),
                         doctest::Contains("unet/config.json: unet config: 3 per-level head counts for 2 blocks"),
                         gl::Error);
    CHECK_THROWS_WITH_AS(unet(R"({"attention_head_dim": [5, 10]})"),
                         doctest::Contains("block_out[0] = 16 is not divisible by 5 heads"), gl::Error);
    // SDXL: added embeddings, per-block transformer depths.
    CHECK_THROWS_WITH_AS(unet(R"({"addition_embed_type": "text_time"})"),
                         doctest::Contains("field 'addition_embed_type' = \"text_time\""), gl::Error);
    CHECK_THROWS_WITH_AS(unet(R"({"transformer_layers_per_block": [1, 2]})"),
                         doctest::Contains("'transformer_layers_per_block'"), gl::Error);
    CHECK_THROWS_WITH_AS(unet(R"({"down_block_types": ["CrossAttnDownBlock2D", "SimpleCrossAttnDownBlock2D"]})"),
                         doctest::Contains("SimpleCrossAttnDownBlock2D\" is not supported"), gl::Error);
    CHECK_THROWS_WITH_AS(unet(R"({"block_out_channels": "big"})"),
                         doctest::Contains("field 'block_out_channels' must be a non-empty list of integers"),
                         gl::Error);
    CHECK_THROWS_WITH_AS(unet(R"({"layers_per_block": 1.5})"), doctest::Contains("'layers_per_block' must be an integer"),
                         gl::Error);
    CHECK_THROWS_WITH_AS(unet(R"({"block_out_channels": [16, 30]})"),
                         doctest::Contains("unet/config.json: unet config: block_out[1] = 30"), gl::Error);
    CHECK_THROWS_WITH_AS(sd::parse_unet_config("{\"in_channels\": ", "unet/config.json"),
                         doctest::Contains("unet/config.json: not valid JSON"), gl::Error);
    CHECK_THROWS_WITH_AS(sd::parse_unet_config("[1]", "unet/config.json"), doctest::Contains("expected a JSON object"),
                         gl::Error);

    auto clip = [](const std::string& patch) {
        nlohmann::json j = nlohmann::json::parse(kClipConfig);
        j.merge_patch(nlohmann::json::parse(patch));
        return sd::parse_clip_config(j.dump(), "text_encoder/config.json");
    };
    CHECK(clip(R"({"hidden_act": "gelu"})").act == gl::Act::gelu_erf);
    CHECK_THROWS_WITH_AS(clip(R"({"architectures": ["CLIPTextModelWithProjection"]})"),
                         doctest::Contains("text_encoder/config.json: field 'architectures'"), gl::Error);
    CHECK_THROWS_WITH_AS(clip(R"({"hidden_act": "relu"})"), doctest::Contains("'hidden_act' = \"relu\""), gl::Error);
    CHECK_THROWS_WITH_AS(clip(R"({"num_attention_heads": 5})"), doctest::Contains("not divisible by num_attention_heads 5"),
                         gl::Error);
    CHECK_THROWS_WITH_AS(clip(R"({"max_position_embeddings": 16})"), doctest::Contains("max_position_embeddings 16"),
                         gl::Error);

    auto vae = [](const std::string& patch) {
        nlohmann::json j = nlohmann::json::parse(kVaeConfig);
        j.merge_patch(nlohmann::json::parse(patch));
        return sd::parse_vae_config(j.dump(), "vae/config.json");
    };
    CHECK(vae(R"({"scaling_factor": 0.13025})").scaling_factor == doctest::Approx(0.13025));
    CHECK_THROWS_WITH_AS(vae(R"({"shift_factor": 0.0609})"), doctest::Contains("vae/config.json: field 'shift_factor'"),
                         gl::Error);
    CHECK_THROWS_WITH_AS(vae(R"({"latent_channels": 16, "norm_num_groups": 3})"),
                         doctest::Contains("vae/config.json: vae config"), gl::Error);
    CHECK_THROWS_WITH_AS(vae(R"({"up_block_types": ["UpDecoderBlock2D"]})"),
                         doctest::Contains("up_block_types has 1 entries"), gl::Error);

    // Configs that disagree with each other inside one folder.
    TempDir tmp;
    make_folder(tmp.path);
    nlohmann::json u = nlohmann::json::parse(kUnetConfig);
    u["cross_attention_dim"] = 24;
    write_text(tmp.path / "unet" / "config.json", u.dump());
    CHECK_THROWS_WITH_AS(sd::open_sd15(tmp.path.string()),
                         doctest::Contains("cross_attention_dim 24 does not match the text encoder's hidden_size 32"), gl::Error);
}

TEST_CASE("model_files: missing sub-folders, configs, weights and tokenizer files are named") {
    TempDir tmp;
    make_folder(tmp.path);
    const std::string root = tmp.path.string();

    write_text(tmp.path / "model_index.json", R"({"_class_name": "StableDiffusionXLPipeline"})");
    CHECK_THROWS_WITH_AS(sd::open_sd15(root), doctest::Contains("model_index.json: an SDXL pipeline"), gl::Error);
    write_text(tmp.path / "model_index.json", "{}");

    fs::remove(tmp.path / "tokenizer" / "merges.txt");
    CHECK_THROWS_WITH_AS(sd::open_sd15(root), doctest::Contains("tokenizer: merges.txt is missing"), gl::Error);
    fs::remove_all(tmp.path / "tokenizer");
    // Without tokenizer/ the built-in CLIP vocabulary is used; it does not fit the tiny encoder.
    CHECK_THROWS_WITH_AS(sd::open_sd15(root), doctest::Contains("built-in tokenizer: the tokenizer has 49408 ids"),
                         gl::Error);
    write_small_tokenizer(tmp.path / "tokenizer");

    fs::remove(tmp.path / "vae" / "diffusion_pytorch_model.safetensors");
    CHECK_THROWS_WITH_AS(sd::open_sd15(root),
                         doctest::Contains("vae: no weights file (looked for diffusion_pytorch_model.safetensors, "
                                           "diffusion_pytorch_model.bin, diffusion_pytorch_model.fp16.safetensors"),
                         gl::Error);
    write_text(tmp.path / "vae" / "diffusion_pytorch_model.safetensors.index.json", "{}");
    CHECK_THROWS_WITH_AS(sd::open_sd15(root), doctest::Contains("sharded checkpoints"), gl::Error);

    fs::remove(tmp.path / "text_encoder" / "config.json");
    CHECK_THROWS_WITH_AS(sd::open_sd15(root), doctest::Contains("text_encoder: config.json is missing"), gl::Error);

    fs::remove_all(tmp.path / "unet");
    CHECK_THROWS_WITH_AS(sd::open_sd15(root), doctest::Contains("sub-folder unet/ is missing"), gl::Error);
}

TEST_CASE("model_files: the tensors a single file is checked by have these keys and shapes in real SD1.5") {
    // open_sd15_single_file derives keys and shapes from the configs; the golden tables list
    // SD1.5's actual ones (diffusers key, original key, PyTorch shape).
    auto row = [](const char* area, const std::string& name) {
        std::ifstream f(golden(area) / "sd15_keys.txt");
        std::string line, diffusers, original, shape;
        while (std::getline(f, line)) {
            if (line.starts_with("#")) continue;
            std::istringstream(line) >> diffusers >> original >> shape;
            if (diffusers == name) return original + " " + shape;
        }
        return std::string("absent");
    };
    const sd::UnetConfig u = sd::UnetConfig::sd15();
    const std::string to_k = "down_blocks.0.attentions.0.transformer_blocks.0.attn2.to_k.weight";
    CHECK(row("unet", "conv_in.weight") == sd::unet_key_original(u, "conv_in.weight") + " 320,4,3,3");
    CHECK(row("unet", to_k) == sd::unet_key_original(u, to_k) + " " + std::to_string(u.block_out[0]) + "," +
                                   std::to_string(u.cross_attention_dim));
    CHECK(u.cross_attention_dim == sd::ClipConfig::vit_l14().width);
    const sd::VaeConfig v = sd::VaeConfig::sd15();
    CHECK(row("vae", "decoder.conv_in.weight") == sd::vae_keys_original(v)("decoder.conv_in.weight") + " " +
                                                      std::to_string(v.block_out.back()) + "," +
                                                      std::to_string(v.latent_channels) + ",3,3");
}
