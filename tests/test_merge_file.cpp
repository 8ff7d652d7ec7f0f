// gl-merge's library side (lora/merge_file.h) on the tiny golden models: a LoRA merged into a
// single file gives the outputs of the same LoRA applied at runtime, every other tensor is copied
// bit for bit, a diffusers folder comes out as a folder, and bad requests are refused.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <random>

#include <unistd.h>

#include "ggml-lite/core/error.h"
#include "ggml-lite/core/planner.h"
#include "ggml-lite/core/runtime.h"
#include "ggml-lite/io/safetensors.h"
#include "lora/kohya.h"
#include "lora/merge_file.h"
#include "op_harness.h"

using namespace gl;
namespace fs = std::filesystem;

namespace {

fs::path golden(const char* area, const char* file) {
    return fs::path(__FILE__).parent_path() / "golden" / "data" / area / file;
}

struct TempDir {
    fs::path path = fs::temp_directory_path() / ("gl-merge-test-" + std::to_string(getpid()));
    TempDir() { fs::create_directories(path); }
    ~TempDir() { fs::remove_all(path); }
};

// Copies every tensor of the given files into one safetensors file (float tensors as f32: the tiny
// UNet's golden weights are f16, and merged weights are stored back in their file's dtype).
void concat_files(const std::vector<fs::path>& in, const fs::path& out) {
    std::vector<std::unique_ptr<io::SafetensorsFile>> files;
    std::vector<std::vector<uint8_t>> data;
    std::vector<io::TensorToWrite> all;
    for (const fs::path& p : in) {
        files.push_back(std::make_unique<io::SafetensorsFile>(p.string()));
        for (const io::TensorInfo& t : files.back()->list()) {
            const DType dt = dtype_is_float(t.dtype) ? DType::f32 : t.dtype;
            data.emplace_back(size_t(t.numel()) * dtype_size(dt));
            files.back()->read(t.name, data.back().data(), dt);
            all.push_back({t.name, dt, t.shape, data.back().data()});
        }
    }
    io::write_safetensors(out.string(), all);
}

sd::Sd15Files tiny_files(std::shared_ptr<const io::TensorSource> unet, std::shared_ptr<const io::TensorSource> te,
                         const std::string& unet_path, const std::string& te_path, sd::Sd15Layout layout) {
    sd::Sd15Files f;
    f.unet = std::move(unet);
    f.text_encoder = std::move(te);
    f.vae = f.unet;
    f.unet_cfg = sd::UnetConfig::tiny();
    f.clip_cfg = sd::ClipConfig::tiny();
    f.vae_cfg = sd::VaeConfig::tiny();
    f.layout = layout;
    f.unet_path = unet_path;
    f.text_encoder_path = te_path;
    return f;
}

// The tiny UNet and text encoder, optionally with a LoRA, outputs on fixed inputs.
struct TinyModels {
    Graph g;
    sd::Weights wu{g, DType::f32}, wc{g, DType::f32};
    std::unique_ptr<lora::LoraNetwork> net;
    ValueId x, t, ctx, ids, eps, hidden;
    std::unique_ptr<Runtime> rt;

    explicit TinyModels(const lora::LoraConfig* cfg) {
        if (cfg) {
            net = std::make_unique<lora::LoraNetwork>(*cfg);
            net->attach_unet(wu);
            net->attach_text_encoder(wc);
        }
        const sd::UnetConfig uc = sd::UnetConfig::tiny();
        x = g.input("x", DType::f32, {1, 8, 8, uc.in_channels});
        t = g.input("t", DType::f32, {1});
        ctx = g.input("ctx", DType::f32, {1, 8, uc.cross_attention_dim});
        ids = g.input("ids", DType::i32, {1, 77});
        eps = sd::unet_forward(wu, uc, x, t, ctx);
        hidden = sd::build_clip(wc, g, ids, sd::ClipConfig::tiny());
        g.mark_output(eps);
        g.mark_output(hidden);
        rt = make_cpu_runtime(make_plan(g));
    }
    void load(const io::TensorSource& unet, const io::TensorSource& te) {
        sd::load_unet(wu, sd::UnetConfig::tiny(), unet, *rt);
        sd::load_clip(wc, te, *rt);
    }
    std::pair<std::vector<float>, std::vector<float>> run() {
        std::mt19937 rng(5);
        std::normal_distribution<float> z;
        auto fill = [&](ValueId v) {
            std::vector<float> d(size_t(g.v(v).numel()));
            for (float& e : d) e = z(rng);
            rt->write_f32(v, d);
        };
        fill(x);
        fill(ctx);
        rt->write_f32(t, {321.0f});
        std::vector<float> tok(77);
        for (size_t i = 0; i < tok.size(); i++) tok[i] = float((i * 37 + 11) % 1000);
        rt->write_f32(ids, tok);
        rt->run();
        return {rt->read_f32(eps), rt->read_f32(hidden)};
    }
};

// A rank-4 LoRA on both models with random down and up (up is zero after init), saved as kohya.
std::pair<std::vector<float>, std::vector<float>> make_lora(const io::TensorSource& unet, const io::TensorSource& te,
                                                            const fs::path& out, size_t* modules) {
    lora::LoraConfig cfg{4, 2.0f, 1.0f};
    TinyModels m(&cfg);
    m.load(unet, te);
    m.net->init(*m.rt, 9);
    std::mt19937 rng(6);
    std::normal_distribution<float> z(0.0f, 0.2f);
    for (const lora::LoraModule& mod : m.net->modules()) {
        std::vector<float> up(size_t(mod.out * mod.rank));
        for (float& e : up) e = z(rng);
        m.rt->write_f32(mod.up, up);
    }
    lora::SaveOptions so;
    so.precision = lora::SavePrecision::fp32;
    lora::save_kohya(out.string(), *m.net, *m.rt, so);
    *modules = m.net->modules().size();
    return m.run();
}

}  // namespace

TEST_CASE("merge: a LoRA merged into a single file gives the runtime LoRA's outputs, other tensors are copied") {
    TempDir tmp;
    const fs::path base_path = tmp.path / "base.safetensors", lora_path = tmp.path / "lora.safetensors",
                   out_path = tmp.path / "merged.safetensors";
    concat_files({golden("unet", "unet_original.safetensors"), golden("clip", "clip_tiny_original.safetensors"),
                  golden("vae", "weights_original.safetensors")},
                 base_path);
    auto base_file = std::make_shared<io::SafetensorsFile>(base_path.string());
    size_t modules = 0;
    const auto with_lora = make_lora(*base_file, *base_file, lora_path, &modules);

    const sd::Sd15Files base = tiny_files(base_file, base_file, base_path.string(), base_path.string(), sd::Sd15Layout::single_file);
    io::SafetensorsFile lora_file(lora_path.string());
    const lora::MergeReport r = lora::merge_lora_into_checkpoint(base, base_path.string(), lora_file, out_path.string(), {});
    CHECK(r.rank == 4);
    CHECK(r.conv_rank == 0);
    CHECK(r.unet_modules + r.text_encoder_modules == modules);
    CHECK(r.text_encoder_modules == 12);  // 2 layers x (q, k, v, out, fc1, fc2)
    CHECK(r.tensors_written == base_file->list().size());

    io::SafetensorsFile merged(out_path.string());
    TinyModels plain(nullptr);
    plain.load(merged, merged);
    const auto got = plain.run();
    TinyModels original(nullptr);
    original.load(*base_file, *base_file);
    const auto before = original.run();
    const double moved = gltest::rel_err(before.first, with_lora.first, 1e-6);
    MESSAGE("the LoRA moves the UNet output by ", moved, " (relative); merged vs runtime: ",
            gltest::rel_err(got.first, with_lora.first, 1e-6), " / ", gltest::rel_err(got.second, with_lora.second, 1e-6));
    CHECK(moved > 1e-3);
    CHECK(gltest::rel_err(got.first, with_lora.first, 1e-6) < 1e-5);
    CHECK(gltest::rel_err(got.second, with_lora.second, 1e-6) < 1e-5);

    // Every tensor is there with its dtype and shape; the ones no module targets are bit-identical.
    size_t same = 0;
    for (const io::TensorInfo& t : base_file->list()) {
        REQUIRE(merged.has(t.name));
        const io::TensorInfo m = merged.info(t.name);
        CHECK(m.dtype == t.dtype);
        CHECK(m.shape == t.shape);
        std::vector<uint8_t> a(size_t(t.numel()) * dtype_size(t.dtype)), b(a.size());
        base_file->read(t.name, a.data(), t.dtype);
        merged.read(t.name, b.data(), t.dtype);
        same += a == b;
    }
    CHECK(same == base_file->list().size() - modules);
    CHECK(merged.metadata().at("gl.merged_lora") == "lora.safetensors");

    // A LoRA file with a tensor the network does not know is refused, not merged partly.
    {
        std::vector<io::TensorToWrite> ts;
        std::vector<std::vector<float>> data;
        for (const io::TensorInfo& t : lora_file.list()) {
            data.emplace_back(size_t(t.numel()));
            lora_file.read(t.name, data.back().data(), DType::f32);
            ts.push_back({t.name, DType::f32, t.shape, data.back().data()});
        }
        const float one[16] = {1};
        ts.push_back({"lora_unet_mystery_block.lora_down.weight", DType::f32, {4, 4}, one});
        const fs::path odd = tmp.path / "odd.safetensors";
        io::write_safetensors(odd.string(), ts);
        CHECK_THROWS_WITH_AS(lora::merge_lora_into_checkpoint(base, base_path.string(), io::SafetensorsFile(odd.string()),
                                                              (tmp.path / "x.safetensors").string(), {}),
                             doctest::Contains("merging would drop them"), gl::Error);
    }
}

TEST_CASE("merge: a diffusers folder comes out as a new folder with merged UNet and text encoder files") {
    TempDir tmp;
    const fs::path base = tmp.path / "base", out = tmp.path / "out", lora_path = tmp.path / "lora.safetensors";
    fs::create_directories(base / "unet");
    fs::create_directories(base / "text_encoder");
    fs::copy_file(golden("unet", "unet_diffusers.safetensors"), base / "unet" / "diffusion_pytorch_model.safetensors");
    fs::copy_file(golden("unet", "unet_diffusers.safetensors"), base / "unet" / "diffusion_pytorch_model.fp16.safetensors");
    fs::copy_file(golden("clip", "clip_tiny.safetensors"), base / "text_encoder" / "model.safetensors");
    {
        std::ofstream(base / "model_index.json") << "{}";
    }
    const std::string unet_file = (base / "unet" / "diffusion_pytorch_model.safetensors").string(),
                      te_file = (base / "text_encoder" / "model.safetensors").string();
    auto unet = std::make_shared<io::SafetensorsFile>(unet_file);
    auto te = std::make_shared<io::SafetensorsFile>(te_file);
    size_t modules = 0;
    const auto with_lora = make_lora(*unet, *te, lora_path, &modules);
    const sd::Sd15Files files = tiny_files(unet, te, unet_file, te_file, sd::Sd15Layout::diffusers);
    io::SafetensorsFile lora_file(lora_path.string());
    const lora::MergeReport r = lora::merge_lora_into_checkpoint(files, base.string(), lora_file, out.string(), {});
    CHECK(r.unet_modules + r.text_encoder_modules == modules);
    CHECK(fs::exists(out / "model_index.json"));
    CHECK(!fs::exists(out / "unet" / "diffusion_pytorch_model.fp16.safetensors"));  // the unmerged variant is gone
    io::SafetensorsFile mu((out / "unet" / "diffusion_pytorch_model.safetensors").string());
    io::SafetensorsFile mt((out / "text_encoder" / "model.safetensors").string());
    // The UNet file is f16: its merged weights are stored back as f16 (rounding ~2^-11 relative),
    // the text encoder's f32.
    for (const io::TensorInfo& t : mu.list()) CHECK(t.dtype == unet->info(t.name).dtype);
    TinyModels plain(nullptr);
    plain.load(mu, mt);
    const auto got = plain.run();
    CHECK(gltest::rel_err(got.first, with_lora.first, 1e-6) < 2e-3);
    CHECK(gltest::rel_err(got.second, with_lora.second, 1e-6) < 1e-5);
    // The base folder is untouched, and an existing output folder is refused.
    CHECK(fs::exists(base / "unet" / "diffusion_pytorch_model.fp16.safetensors"));
    CHECK_THROWS_WITH_AS(lora::merge_lora_into_checkpoint(files, base.string(), lora_file, out.string(), {}),
                         doctest::Contains("exists"), gl::Error);
}
