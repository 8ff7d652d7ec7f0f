// The tiny sdtrain setup of the CPU tests: a consistent tiny SD1.5 model as a diffusers folder
// (the golden tiny UNet and VAE, a CLIP text encoder 16 wide with seeded random weights so its
// width is the UNet's cross-attention width, the tiny golden tokenizer), and a generated kohya
// dataset of 6 BMP images in two aspect buckets (32x32 and 48x24 with bucket_no_upscale) with
// .txt captions.
#pragma once
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "ggml-lite/io/safetensors.h"
#include "models/diffusion/noise.h"
#include "models/sd15/clip.h"
#include "nlohmann/json.hpp"
#include "test_util.h"
#include "train/run/config.h"

namespace sdtrain_test {

namespace fs = std::filesystem;

// A scratch folder removed at the end of the test.
struct Scratch {
    fs::path root;
    explicit Scratch(const std::string& tag)
        : root(fs::temp_directory_path() / ("gl_sdtrain_" + tag + "_" + std::to_string(getpid()))) {
        fs::remove_all(root);
        fs::create_directories(root);
    }
    ~Scratch() {
        std::error_code ec;
        if (!std::getenv("GL_KEEP_SCRATCH")) fs::remove_all(root, ec);  // set it to look at a run's files
    }
};

inline void write_text(const fs::path& p, const std::string& s) {
    fs::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << s;
}

inline const char* kUnetConfig = R"({"_class_name": "UNet2DConditionModel", "act_fn": "silu",
  "attention_head_dim": 2, "block_out_channels": [16, 32], "center_input_sample": false, "cross_attention_dim": 16,
  "down_block_types": ["CrossAttnDownBlock2D", "DownBlock2D"], "downsample_padding": 1, "flip_sin_to_cos": true,
  "freq_shift": 0, "in_channels": 4, "layers_per_block": 1, "mid_block_scale_factor": 1, "norm_eps": 1e-05,
  "norm_num_groups": 8, "out_channels": 4, "sample_size": 8, "up_block_types": ["UpBlock2D", "CrossAttnUpBlock2D"],
  "use_linear_projection": false})";
inline const char* kClipConfig = R"({"architectures": ["CLIPTextModel"], "model_type": "clip_text_model",
  "vocab_size": 3514, "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
  "max_position_embeddings": 77, "hidden_act": "quick_gelu", "layer_norm_eps": 1e-05, "projection_dim": 16})";
inline const char* kVaeConfig = R"({"_class_name": "AutoencoderKL", "act_fn": "silu", "block_out_channels": [8, 16],
  "down_block_types": ["DownEncoderBlock2D", "DownEncoderBlock2D"], "in_channels": 3, "latent_channels": 4,
  "layers_per_block": 1, "norm_num_groups": 4, "out_channels": 3, "sample_size": 16, "scaling_factor": 0.18215,
  "up_block_types": ["UpDecoderBlock2D", "UpDecoderBlock2D"]})";

// The text encoder's weights (kClipConfig's unless given): N(0, 0.02) from a fixed seed, layer
// norms at identity.
inline void write_random_clip(const fs::path& file,
                              const sd::ClipConfig& c = {3514, 16, 2, 2, 32, 77, gl::Act::quick_gelu, 1e-5f}) {
    gl::Graph g;
    nn::Weights w(g, gl::DType::f32);
    sd::build_clip(w, g, g.input("ids", gl::DType::i32, {1, 77}), c);
    diffusion::NoiseRng rng{20240611, 0};
    std::vector<std::vector<float>> data;
    std::vector<gl::io::TensorToWrite> out;
    data.reserve(w.entries().size());
    for (const nn::WeightEntry& e : w.entries()) {
        const gl::Shape& s = g.shape(e.id);
        std::vector<float> v(size_t(s.numel()));
        const bool norm = e.name.find("norm") != std::string::npos;
        const bool bias = e.name.size() > 5 && e.name.compare(e.name.size() - 5, 5, ".bias") == 0;
        for (float& x : v) x = norm ? (bias ? 0.0f : 1.0f) : bias ? 0.0f : float(0.02 * rng.normal());
        data.push_back(std::move(v));
        out.push_back({e.name, gl::DType::f32, std::vector<int64_t>(s.d.begin(), s.d.begin() + s.nd), data.back().data()});
    }
    fs::create_directories(file.parent_path());
    gl::io::write_safetensors(file.string(), out);
}

// The tiny model as a diffusers folder under root/model.
inline fs::path make_tiny_model(const fs::path& root) {
    const fs::path m = root / "model";
    const std::string golden = gltest::golden_dir("unet"), vae = gltest::golden_dir("vae"),
                      tok = gltest::golden_dir("tokenizer") + "tiny/";
    write_text(m / "model_index.json", R"({"_class_name": "StableDiffusionPipeline"})");
    write_text(m / "unet" / "config.json", kUnetConfig);
    write_text(m / "text_encoder" / "config.json", kClipConfig);
    write_text(m / "vae" / "config.json", kVaeConfig);
    fs::copy_file(golden + "unet_diffusers.safetensors", m / "unet" / "diffusion_pytorch_model.safetensors");
    fs::copy_file(vae + "weights_diffusers.safetensors", m / "vae" / "diffusion_pytorch_model.safetensors");
    write_random_clip(m / "text_encoder" / "model.safetensors");
    fs::create_directories(m / "tokenizer");
    fs::copy_file(tok + "vocab.json", m / "tokenizer" / "vocab.json");
    fs::copy_file(tok + "merges.txt", m / "tokenizer" / "merges.txt");
    return m;
}

// A 24-bit BMP of w x h: smooth colours that depend on the seed.
// The tiny SD2.x folder under root/model_sd2 (sd::UnetConfig::tiny_sd2, cross-attention 24; a gelu
// text encoder 24 wide, the tiny tokenizer padding with "!").
inline fs::path make_tiny_sd2_model(const fs::path& root) {
    const fs::path m = root / "model_sd2";
    const std::string tok = gltest::golden_dir("tokenizer") + "tiny/";
    nlohmann::json u = nlohmann::json::parse(kUnetConfig);
    u["attention_head_dim"] = {2, 4};
    u["use_linear_projection"] = true;
    u["upcast_attention"] = true;
    u["cross_attention_dim"] = 24;
    nlohmann::json c = nlohmann::json::parse(kClipConfig);
    c["hidden_size"] = 24;
    c["projection_dim"] = 24;
    c["hidden_act"] = "gelu";
    write_text(m / "model_index.json", R"({"_class_name": "StableDiffusionPipeline"})");
    write_text(m / "unet" / "config.json", u.dump());
    write_text(m / "text_encoder" / "config.json", c.dump());
    write_text(m / "vae" / "config.json", kVaeConfig);
    fs::copy_file(gltest::golden_dir("sd2") + "unet_diffusers.safetensors", m / "unet" / "diffusion_pytorch_model.safetensors");
    fs::copy_file(gltest::golden_dir("vae") + "weights_diffusers.safetensors", m / "vae" / "diffusion_pytorch_model.safetensors");
    write_random_clip(m / "text_encoder" / "model.safetensors", sd::ClipConfig{3514, 24, 2, 2, 32, 77, gl::Act::gelu_erf, 1e-5f});
    fs::create_directories(m / "tokenizer");
    fs::copy_file(tok + "vocab.json", m / "tokenizer" / "vocab.json");
    fs::copy_file(tok + "merges.txt", m / "tokenizer" / "merges.txt");
    write_text(m / "tokenizer" / "special_tokens_map.json", R"({"pad_token": {"content": "!", "lstrip": false}})");
    return m;
}

inline void write_bmp(const fs::path& p, int w, int h, int seed) {
    const int row = (w * 3 + 3) & ~3;
    const uint32_t size = uint32_t(54 + row * h);
    std::vector<uint8_t> b(size, 0);
    auto put32 = [&](size_t at, uint32_t v) {
        for (int i = 0; i < 4; i++) b[at + size_t(i)] = uint8_t(v >> (8 * i));
    };
    b[0] = 'B', b[1] = 'M';
    put32(2, size);
    put32(10, 54);
    put32(14, 40);
    put32(18, uint32_t(w));
    put32(22, uint32_t(h));
    b[26] = 1, b[28] = 24;
    put32(34, uint32_t(row * h));
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            uint8_t* px = &b[54 + size_t(y) * size_t(row) + size_t(x) * 3];
            px[0] = uint8_t(127 + 120 * std::sin(0.3 * x + seed));
            px[1] = uint8_t(127 + 120 * std::cos(0.2 * y + 2 * seed));
            px[2] = uint8_t((x * 7 + y * 3 + seed * 40) & 255);
        }
    fs::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
}

// root/data/1_tiny/: three 32x32 and three 48x24 images with captions (one repeat; with batch 2
// each bucket gives a full and a short batch).
inline fs::path make_dataset(const fs::path& root) {
    const fs::path d = root / "data" / "1_tiny";
    const char* captions[] = {"a red cat, sitting", "a red cat, standing", "a blue cat",
                              "a wide room, window", "a wide room", "a wide field, sky"};
    for (int i = 0; i < 6; i++) {
        const std::string name = "img" + std::to_string(i);
        write_bmp(d / (name + ".bmp"), i < 3 ? 32 : 48, i < 3 ? 32 : 24, i);
        write_text(d / (name + ".txt"), captions[i]);
    }
    return root / "data";
}

// The run configuration of the tests: 2 buckets, batch 2 with 2 accumulation steps (so updates
// gather batches of both buckets and short batches), f32 on the CPU, text encoder trained.
inline train::RunConfig tiny_config(const fs::path& model, const fs::path& data, const fs::path& out) {
    train::RunConfig c;
    c.pretrained_model_name_or_path = model.string();
    c.train_data_dir = data.string();
    c.output_dir = out.string();
    c.output_name = "tiny";
    c.network_module = "networks.lora";
    c.network_dim = 4;
    c.network_alpha = 2;
    c.resolution = std::array<int, 2>{48, 48};
    c.enable_bucket = true;
    c.bucket_no_upscale = true;
    c.bucket_reso_steps = 8;
    c.min_bucket_reso = 16;
    c.max_bucket_reso = 64;
    c.caption_extension = ".txt";
    c.train_batch_size = 2;
    c.gradient_accumulation_steps = 2;
    c.max_train_steps = 6;
    c.learning_rate = 1e-3;
    c.optimizer_type = "AdamW";
    c.cache_latents = true;
    c.seed = 42;
    c.backend = gl::Backend::cpu;
    c.max_data_loader_n_workers = 2;
    return c;
}

}  // namespace sdtrain_test
