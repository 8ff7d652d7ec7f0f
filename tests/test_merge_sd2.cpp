// gl-merge on SD2.x (the family opens the base): a LoRA merged into a tiny SD2.x single file, whose
// text encoder is OpenCLIP's tower (q, k and v joined in each resblock's attn.in_proj_weight),
// writes the merged q, k, v back into their rows of that tensor, in the file's own layout, and
// leaves every other tensor as it was (in_proj_bias, the last resblock the view drops,
// text_projection, logit_scale); the rows match W0 + alpha / rank * up @ down computed here from
// the LoRA file, the unmerged text tensors diffusers' convert_open_clip_checkpoint (golden,
// make_sd2_clip_golden.py), and the merged file reopens as SD2.x with the outputs of the LoRA run
// as branches on the base. The same for a tiny SD2.x diffusers folder (Linear proj_in / proj_out),
// and gl-merge itself: --v2 merges the folder, without it the SD1.x family refuses it naming --v2.
#include <doctest/doctest.h>

#include <cstdlib>
#include <fstream>
#include <random>
#include <sstream>

#include <sys/wait.h>

#include "ggml-lite/core/planner.h"
#include "ggml-lite/core/runtime.h"
#include "ggml-lite/io/safetensors.h"
#include "lora/kohya.h"
#include "lora/lora.h"
#include "models/model_files.h"
#include "models/sd15/sd_config.h"
#include "models/sd2/model_files.h"
#include "pipelines/merge_file.h"
#include "sdtrain_fixtures.h"
#include "test_util.h"

namespace {

using gl::DType;
using gltest::read_f32;
using gltest::rel_error;
namespace fs = std::filesystem;

// The tower of make_sd2_clip_golden.py (4 resblocks, the view's 3 layers), its vocabulary grown
// to the tiny tokenizer's 3514 ids so that the single file opens with it.
const sd::ClipConfig kTower{3514, 32, 3, 4, 64, 77, gl::Act::gelu_erf, 1e-5f};
const std::string kPrefix = "cond_stage_model.model.";

struct Outputs {
    std::vector<float> eps, hidden;
};

// The model's denoiser and text encoder (the family's builders and loader) on fixed inputs; with
// cfg a LoRA on both as runtime branches, its up weights drawn and saved (kohya's format) to save.
Outputs run_model(const models::ModelFiles& m, const lora::LoraConfig* cfg = nullptr, const fs::path* save = nullptr) {
    const models::Family& f = m.fam();
    const models::ModelConfig& c = m.cfg();
    gl::Graph g;
    nn::Weights wu(g, DType::f32), wc(g, DType::f32);
    std::unique_ptr<lora::LoraNetwork> net;
    if (cfg) {
        net = std::make_unique<lora::LoraNetwork>(*cfg);
        net->attach_unet(wu);
        net->attach_text_encoder(wc);
    }
    const int64_t side = 2 * c.size_multiple(), L = f.tokens().sequence;
    const gl::ValueId x = g.input("x", DType::f32, {1, side, side, c.latent_channels()});
    const gl::ValueId t = g.input("t", DType::f32, {1});
    const gl::ValueId ctx = g.input("ctx", DType::f32, {1, L, c.context_width()});
    const gl::ValueId ids = g.input("ids", DType::i32, {1, L});
    const gl::ValueId eps = f.denoiser(wu, c, x, t, ctx), hidden = f.text_states(wc, g, ids, c, 1);
    g.mark_output(eps);
    g.mark_output(hidden);
    auto rt = gl::make_cpu_runtime(gl::make_plan(g));
    f.load(models::Part::unet, wu, m, *rt);
    f.load(models::Part::text_encoder, wc, m, *rt);
    if (net) {
        net->init(*rt, 9);
        std::mt19937 rng(6);
        std::normal_distribution<float> z(0.0f, 0.2f);
        for (const lora::Module& mod : net->modules()) {
            std::vector<float> up(size_t(mod.layer().out * mod.rank()));
            for (float& e : up) e = z(rng);
            rt->write_f32(mod.param("lora_up.weight"), up);
        }
        REQUIRE(save != nullptr);
        lora::SaveOptions so;
        so.precision = lora::SavePrecision::fp32;
        lora::save_kohya(save->string(), *net, *rt, so);
    }
    std::mt19937 rng(5);
    std::normal_distribution<float> z;
    for (gl::ValueId v : {x, ctx}) {
        std::vector<float> d(size_t(g.v(v).numel()));
        for (float& e : d) e = z(rng);
        rt->write_f32(v, d);
    }
    rt->write_f32(t, {321.0f});
    std::vector<float> tok(static_cast<size_t>(L));
    for (size_t i = 0; i < tok.size(); i++) tok[i] = float((i * 37 + 11) % 998);
    rt->write_f32(ids, tok);
    rt->run();
    return {rt->read_f32(eps), rt->read_f32(hidden)};
}

// A tiny SD2.x single file: the golden SD2 UNet (model.diffusion_model.*), the golden OpenCLIP
// tower (token embedding grown to kTower's vocabulary, rows past the golden's 1000 random), the
// golden VAE (first_stage_model.*); every float tensor as f32.
void write_sd2_single_file(const fs::path& out) {
    std::vector<std::unique_ptr<gl::io::SafetensorsFile>> files;
    std::vector<std::vector<float>> data;
    std::vector<gl::io::TensorToWrite> all;
    std::mt19937 rng(11);
    std::normal_distribution<float> z(0.0f, 0.5f);
    for (const std::string& p : {gltest::golden_dir("sd2") + "unet_original.safetensors",
                                 gltest::golden_dir("sd2") + "clip_openclip.safetensors",
                                 gltest::golden_dir("vae") + "weights_original.safetensors"}) {
        files.push_back(std::make_unique<gl::io::SafetensorsFile>(p));
        for (const gl::io::TensorInfo& t : files.back()->list()) {
            std::vector<int64_t> shape = t.shape;
            data.push_back(read_f32(*files.back(), t.name));
            if (t.name == kPrefix + "token_embedding.weight") {
                REQUIRE(shape[0] <= kTower.vocab);
                for (int64_t i = shape[0] * shape[1]; i < kTower.vocab * shape[1]; i++) data.back().push_back(z(rng));
                shape[0] = kTower.vocab;
            }
            all.push_back({t.name, DType::f32, shape, data.back().data()});
        }
    }
    gl::io::write_safetensors(out.string(), all);
}

models::ModelFiles open_sd2_file(const fs::path& file) {
    auto tok = std::make_shared<const sd::ClipTokenizer>(sd::ClipTokenizer::from_folder(gltest::golden_dir("tokenizer") + "tiny"));
    return sd::model_files(sd::open_sd2_single_file(file.string(), sd::UnetConfig::tiny_sd2(), kTower,
                                                    sd::VaeConfig::tiny(), tok),
                           models::sd2_family());
}

lora::LoraConfig sd2_lora() {
    lora::LoraConfig cfg{4, 2.0f, 1.0f};
    cfg.family = &models::sd2_family();
    return cfg;
}

std::vector<float> rows(const std::vector<float>& v, size_t part, size_t parts) {
    const size_t n = v.size() / parts;
    return std::vector<float>(v.begin() + std::ptrdiff_t(part * n), v.begin() + std::ptrdiff_t((part + 1) * n));
}

}  // namespace

TEST_CASE("merge sd2: a LoRA merged into an SD2.x single file writes q, k, v back into OpenCLIP's in_proj_weight") {
    sdtrain_test::Scratch s("merge_sd2_file");
    const fs::path base_path = s.root / "sd2.safetensors", lora_path = s.root / "lora.safetensors",
                   out = s.root / "merged.safetensors";
    write_sd2_single_file(base_path);
    const models::ModelFiles base = open_sd2_file(base_path);
    REQUIRE(base.layout == models::Layout::single_file);
    const lora::LoraConfig cfg = sd2_lora();
    const Outputs plain = run_model(base), branches = run_model(base, &cfg, &lora_path);
    const double moved_eps = rel_error(branches.eps, plain.eps), moved_hidden = rel_error(branches.hidden, plain.hidden);
    CHECK(moved_eps > 1e-3);
    CHECK(moved_hidden > 1e-3);

    const gl::io::SafetensorsFile lora_file(lora_path.string());
    const lora::MergeReport r = lora::merge_lora_into_checkpoint(base, base_path.string(), lora_file, out.string());
    CHECK(r.text_encoder_modules == 3 * 6);  // q, k, v, out_proj, fc1, fc2 of the view's 3 layers
    CHECK(r.unet_modules > 0);

    // The file's own layout: the same tensors, shapes and dtypes, no transformers keys added.
    const gl::io::SafetensorsFile in(base_path.string()), merged(out.string());
    const std::vector<gl::io::TensorInfo> a = in.list(), b = merged.list();
    REQUIRE(a.size() == b.size());
    CHECK(r.tensors_written == b.size());
    for (size_t i = 0; i < a.size(); i++) {
        CAPTURE(a[i].name);
        CHECK(a[i].name == b[i].name);
        CHECK(a[i].shape == b[i].shape);
        CHECK(a[i].dtype == b[i].dtype);
    }
    CHECK_FALSE(merged.has("text_model.encoder.layers.0.self_attn.q_proj.weight"));

    // q, k, v: each third of in_proj_weight is W0 + alpha / rank * up @ down of its module, from the file.
    const int64_t W = kTower.width;
    const char* qkv[] = {"q", "k", "v"};
    double worst = 0;
    for (int64_t l = 0; l < kTower.layers; l++) {
        const std::string key = kPrefix + "transformer.resblocks." + std::to_string(l) + ".attn.in_proj_weight";
        const std::vector<float> w0 = read_f32(in, key), w1 = read_f32(merged, key);
        for (size_t p = 0; p < 3; p++) {
            CAPTURE(l);
            CAPTURE(qkv[p]);
            const std::string m = "lora_te_text_model_encoder_layers_" + std::to_string(l) + "_self_attn_" + qkv[p] + "_proj";
            const std::vector<float> down = read_f32(lora_file, m + ".lora_down.weight"),
                                     up = read_f32(lora_file, m + ".lora_up.weight");
            const float alpha = read_f32(lora_file, m + ".alpha").at(0);
            const int64_t rank = int64_t(down.size()) / W;
            REQUIRE(rank == 4);
            std::vector<float> want = rows(w0, p, 3);
            for (int64_t o = 0; o < W; o++)
                for (int64_t i = 0; i < W; i++) {
                    double d = 0;
                    for (int64_t k = 0; k < rank; k++) d += double(up[size_t(o * rank + k)]) * down[size_t(k * W + i)];
                    want[size_t(o * W + i)] += float(double(alpha) / double(rank) * d);
                }
            const std::vector<float> got = rows(w1, p, 3);
            CHECK(got != rows(w0, p, 3));
            const double e = rel_error(got, want);
            CHECK(e <= 1e-6);
            worst = std::max(worst, e);
        }
    }
    MESSAGE("sd2 merge: q, k, v rows of in_proj_weight vs W0 + alpha/rank up@down, max rel. error ", worst);

    // What no module changes is as stored: biases, the last resblock (outside the view), the
    // projection and logit scale; the view's unmerged tensors are diffusers' conversion of them.
    for (const std::string k : {std::string("transformer.resblocks.0.attn.in_proj_bias"),
                                std::string("transformer.resblocks.3.attn.in_proj_weight"),
                                std::string("transformer.resblocks.3.mlp.c_fc.weight"), std::string("text_projection"),
                                std::string("logit_scale"), std::string("ln_final.weight")}) {
        CAPTURE(k);
        CHECK(read_f32(merged, kPrefix + k) == read_f32(in, kPrefix + k));
    }
    const models::ModelFiles again = open_sd2_file(out);  // reopens as SD2.x
    const gl::io::SafetensorsFile converted(gltest::golden_dir("sd2") + "clip_diffusers.safetensors");
    for (const std::string k : {std::string("text_model.final_layer_norm.weight"),
                                std::string("text_model.encoder.layers.1.layer_norm1.bias"),
                                std::string("text_model.encoder.layers.2.self_attn.q_proj.bias"),
                                std::string("text_model.embeddings.position_embedding.weight")}) {
        CAPTURE(k);
        CHECK(read_f32(*again.text_encoder, k) == read_f32(converted, k));
    }

    // The merged file without the LoRA gives the outputs of the LoRA as branches on the base.
    const Outputs m = run_model(again);
    const double e_eps = rel_error(m.eps, branches.eps), e_hidden = rel_error(m.hidden, branches.hidden);
    CHECK(e_eps <= 1e-5);
    CHECK(e_hidden <= 1e-5);
    MESSAGE("sd2 single-file merge vs runtime branches: eps ", e_eps, ", text ", e_hidden, " (the LoRA moves them ",
            moved_eps, ", ", moved_hidden, ")");

    // SD1.x's family refuses the file, naming the option that opens it.
    CHECK_THROWS_WITH_AS(models::sd15_family().open(out.string()), doctest::Contains("--v2"), gl::Error);
}

TEST_CASE("merge sd2: a LoRA merged into an SD2.x diffusers folder (Linear proj_in / proj_out) reopens with its outputs") {
    sdtrain_test::Scratch s("merge_sd2_folder");
    const fs::path model = sdtrain_test::make_tiny_sd2_model(s.root), lora_path = s.root / "lora.safetensors",
                   out = s.root / "merged";
    const models::ModelFiles base = models::sd2_family().open(model.string());
    REQUIRE(base.family == &models::sd2_family());
    const lora::LoraConfig cfg = sd2_lora();
    const Outputs plain = run_model(base), branches = run_model(base, &cfg, &lora_path);
    CHECK(rel_error(branches.eps, plain.eps) > 1e-3);
    const gl::io::SafetensorsFile lora_file(lora_path.string());
    // kohya's SD2 LoRA: proj_in as nn.Linear, 2-D.
    CHECK(lora_file.info("lora_unet_down_blocks_0_attentions_0_proj_in.lora_down.weight").shape.size() == 2);
    const lora::MergeReport r = lora::merge_lora_into_checkpoint(base, model.string(), lora_file, out.string());
    CHECK(r.text_encoder_modules > 0);
    const models::ModelFiles merged = models::sd2_family().open(out.string());
    const Outputs m = run_model(merged);
    const double e_eps = rel_error(m.eps, branches.eps), e_hidden = rel_error(m.hidden, branches.hidden);
    // The folder's UNet file is f16: its merged weights are stored back as f16 (~2^-11 relative).
    CHECK(e_eps <= 2e-3);
    CHECK(e_hidden <= 1e-5);
    MESSAGE("sd2 folder merge vs runtime branches: eps ", e_eps, ", text ", e_hidden);
    CHECK_THROWS_WITH_AS(models::sd15_family().open(out.string()), doctest::Contains("--v2"), gl::Error);
}

#ifdef GL_TXT2IMG_BIN
TEST_CASE("merge sd2: gl-merge --v2 merges into an SD2.x folder, without --v2 it is refused naming the option") {
    // gl-merge is built beside gl-txt2img.
    const fs::path bin = fs::path(GL_TXT2IMG_BIN).parent_path() / "gl-merge";
    REQUIRE(fs::exists(bin));
    sdtrain_test::Scratch s("merge_sd2_cli");
    const fs::path model = sdtrain_test::make_tiny_sd2_model(s.root), lora_path = s.root / "lora.safetensors";
    const models::ModelFiles base = models::sd2_family().open(model.string());
    const lora::LoraConfig cfg = sd2_lora();
    const Outputs branches = run_model(base, &cfg, &lora_path);
    const auto merge = [&](const fs::path& out, const std::string& flags) {
        const fs::path log = s.root / "log.txt";
        const std::string cmd = "'" + bin.string() + "' '" + model.string() + "' '" + lora_path.string() + "' '" +
                                out.string() + "' " + flags + " > '" + log.string() + "' 2>&1";
        const int rc = std::system(cmd.c_str());
        std::ifstream in(log);
        std::stringstream ss;
        ss << in.rdbuf();
        return std::pair{WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, ss.str()};
    };
    const auto [refused, why] = merge(s.root / "sd1", "");
    CHECK(refused == 1);
    CHECK(why.find("an SD2.x model") != std::string::npos);
    CHECK(why.find("--v2") != std::string::npos);
    CHECK_FALSE(fs::exists(s.root / "sd1"));
    const auto [rc, log] = merge(s.root / "merged", "--v2");
    CAPTURE(log);
    REQUIRE(rc == 0);
    CHECK(log.find("Stable Diffusion 2.x, diffusers") != std::string::npos);
    const Outputs m = run_model(models::sd2_family().open((s.root / "merged").string()));
    CHECK(rel_error(m.eps, branches.eps) <= 2e-3);  // the folder's UNet is f16
    CHECK(rel_error(m.hidden, branches.hidden) <= 1e-5);
}
#endif
