// Shared fixtures of the gl-merge tests (test_merge_file.cpp: results; test_merge_safety.cpp: the
// base stays untouched, output rules, temporaries, non-finite values): the tiny golden UNet and
// text encoder, a LoRA on them, and opened models assembled by hand (the tiny models are no SD1.5
// pipeline, so open_sd15 would refuse them).
#pragma once
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <random>

#include "ggml-lite/core/error.h"
#include "models/sd15/model_files.h"
#include "ggml-lite/core/planner.h"
#include "ggml-lite/core/runtime.h"
#include "ggml-lite/io/safetensors.h"
#include "lora/kohya.h"
#include "pipelines/merge_file.h"
#include "op_harness.h"
#include "test_util.h"

namespace merge_test {

using namespace gl;
namespace fs = std::filesystem;

inline fs::path golden(const char* area, const char* file) {
    return fs::path(__FILE__).parent_path() / "golden" / "data" / area / file;
}

using gltest::TempDir;

// Copies every tensor of the given files into one safetensors file (float tensors as f32: the tiny
// UNet's golden weights are f16, and merged weights are stored back in their file's dtype).
inline void concat_files(const std::vector<fs::path>& in, const fs::path& out) {
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

inline models::ModelFiles tiny_files(std::shared_ptr<const io::TensorSource> unet, std::shared_ptr<const io::TensorSource> te,
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
    return sd::model_files(std::move(f), models::sd15_family());
}

// The tiny UNet and text encoder, optionally with a LoRA, outputs on fixed inputs.
struct TinyModels {
    Graph g;
    nn::Weights wu{g, DType::f32}, wc{g, DType::f32};
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
inline std::pair<std::vector<float>, std::vector<float>> make_lora(const io::TensorSource& unet, const io::TensorSource& te,
                                                            const fs::path& out, size_t* modules) {
    lora::LoraConfig cfg{4, 2.0f, 1.0f};
    TinyModels m(&cfg);
    m.load(unet, te);
    m.net->init(*m.rt, 9);
    std::mt19937 rng(6);
    std::normal_distribution<float> z(0.0f, 0.2f);
    for (const lora::Module& mod : m.net->modules()) {
        std::vector<float> up(size_t(mod.layer().out * mod.rank()));
        for (float& e : up) e = z(rng);
        m.rt->write_f32(mod.param("lora_up.weight"), up);
    }
    lora::SaveOptions so;
    so.precision = lora::SavePrecision::fp32;
    lora::save_kohya(out.string(), *m.net, *m.rt, so);
    *modules = m.net->modules().size();
    return m.run();
}

}  // namespace merge_test
