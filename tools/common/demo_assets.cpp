// The embedded demo's model, dataset and prompts (see demo_assets.h).
#include "tools/common/demo_assets.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "data/png_file.h"
#include "ggml-lite/core/error.h"
#include "ggml-lite/io/safetensors.h"

namespace demo {

namespace fs = std::filesystem;
using nlohmann::ordered_json;

ModelConfig model_config() {
    ModelConfig c;
    c.clip.width = 32;
    c.clip.layers = 2;
    c.clip.heads = 4;
    c.clip.mlp = 64;
    c.unet.block_out = {32, 64, 64};
    c.unet.down = {sd::UnetBlock::cross_attn, sd::UnetBlock::cross_attn, sd::UnetBlock::plain};
    c.unet.up = {sd::UnetBlock::plain, sd::UnetBlock::cross_attn, sd::UnetBlock::cross_attn};
    c.unet.layers_per_block = 1;
    c.unet.heads = 2;
    c.unet.cross_attention_dim = int(c.clip.width);
    c.unet.norm_groups = 8;
    c.vae.block_out = {12, 12, 12, 12};
    c.vae.layers_per_block = 1;
    c.vae.norm_groups = 3;
    c.vae.scaling_factor = 1.0f;
    return c;
}

ModelConfig model_config_sd2() {
    ModelConfig c = model_config();
    c.clip.act = gl::Act::gelu_erf;
    c.unet.level_heads = {2, 4, 4};
    c.unet.linear_projection = true;
    c.unet.upcast_attention = true;
    return c;
}

// ---- config.json ----

std::string unet_config_json(const sd::UnetConfig& c) {
    ordered_json j;
    j["_class_name"] = "UNet2DConditionModel";
    j["_diffusers_version"] = "0.30.0";
    j["act_fn"] = "silu";
    if (c.level_heads.empty()) j["attention_head_dim"] = c.heads;
    else j["attention_head_dim"] = c.level_heads;
    j["block_out_channels"] = c.block_out;
    j["center_input_sample"] = false;
    j["cross_attention_dim"] = c.cross_attention_dim;
    std::vector<std::string> down, up;
    for (sd::UnetBlock b : c.down) down.push_back(b == sd::UnetBlock::cross_attn ? "CrossAttnDownBlock2D" : "DownBlock2D");
    for (sd::UnetBlock b : c.up) up.push_back(b == sd::UnetBlock::cross_attn ? "CrossAttnUpBlock2D" : "UpBlock2D");
    j["down_block_types"] = down;
    j["downsample_padding"] = 1;
    j["flip_sin_to_cos"] = c.flip_sin_to_cos;
    j["freq_shift"] = c.freq_shift;
    j["in_channels"] = c.in_channels;
    j["layers_per_block"] = c.layers_per_block;
    j["mid_block_scale_factor"] = 1;
    j["norm_eps"] = c.norm_eps;
    j["norm_num_groups"] = c.norm_groups;
    j["out_channels"] = c.out_channels;
    j["sample_size"] = 16;
    j["up_block_types"] = up;
    j["upcast_attention"] = c.upcast_attention;
    j["use_linear_projection"] = c.linear_projection;
    return j.dump(2) + "\n";
}

std::string clip_config_json(const sd::ClipConfig& c) {
    GL_CHECK(c.act == gl::Act::quick_gelu || c.act == gl::Act::gelu_erf,
             "demo model: the text encoder must use quick_gelu (SD1.x) or gelu (SD2.x)");
    ordered_json j;
    j["architectures"] = {"CLIPTextModel"};
    j["model_type"] = "clip_text_model";
    j["bos_token_id"] = 49406;
    j["eos_token_id"] = 49407;
    j["pad_token_id"] = 1;
    j["hidden_act"] = c.act == gl::Act::gelu_erf ? "gelu" : "quick_gelu";
    j["hidden_size"] = c.width;
    j["intermediate_size"] = c.mlp;
    j["layer_norm_eps"] = c.eps;
    j["max_position_embeddings"] = c.max_pos;
    j["num_attention_heads"] = c.heads;
    j["num_hidden_layers"] = c.layers;
    j["projection_dim"] = c.width;
    j["vocab_size"] = c.vocab;
    return j.dump(2) + "\n";
}

std::string vae_config_json(const sd::VaeConfig& c) {
    ordered_json j;
    j["_class_name"] = "AutoencoderKL";
    j["_diffusers_version"] = "0.30.0";
    j["act_fn"] = "silu";
    j["block_out_channels"] = c.block_out;
    j["down_block_types"] = std::vector<std::string>(c.block_out.size(), "DownEncoderBlock2D");
    j["in_channels"] = c.in_channels;
    j["latent_channels"] = c.latent_channels;
    j["layers_per_block"] = c.layers_per_block;
    j["norm_num_groups"] = c.norm_groups;
    j["out_channels"] = c.out_channels;
    j["sample_size"] = 128;
    j["scaling_factor"] = c.scaling_factor;
    j["up_block_types"] = std::vector<std::string>(c.block_out.size(), "UpDecoderBlock2D");
    return j.dump(2) + "\n";
}

// ---- weights ----

namespace {

// splitmix64: a small, fully specified generator, so the same seed writes the same bytes everywhere.
struct Rng {
    uint64_t s;
    uint64_t next() {
        uint64_t z = (s += 0x9E3779B97F4A7C15ull);
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
        return z ^ (z >> 31);
    }
    double uniform() { return double(next() >> 11) * 0x1p-53; }  // [0, 1)
    double normal() {
        const double u = 1.0 - uniform(), v = uniform();
        return std::sqrt(-2.0 * std::log(u)) * std::cos(2.0 * M_PI * v);
    }
};

uint64_t name_hash(const std::string& s) {
    uint64_t h = 1469598103934665603ull;  // FNV-1a
    for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
    return h;
}

// Every weight a model graph creates, with its checkpoint shape ([O, I, kh, kw] for convolutions).
std::vector<NamedTensor> leaves(nn::Weights& w) {
    std::vector<NamedTensor> out;
    for (const nn::WeightEntry& e : w.entries()) {
        const gl::Shape s = w.graph().shape(e.id);
        NamedTensor t{e.name, {}, {}};
        if (e.layout == nn::WeightLayout::conv_ohwi) t.shape = {s[0], s[3], s[1], s[2]};
        else
            for (int i = 0; i < s.nd; i++) t.shape.push_back(s[i]);
        int64_t n = 1;
        for (int64_t d : t.shape) n *= d;
        t.data.assign(size_t(n), 0.0f);
        out.push_back(std::move(t));
    }
    return out;
}

// Norm layers by their module's name: norm1, conv_norm_out, group_norm, final_layer_norm, ...
bool is_norm(const std::string& name) {
    const std::string path = name.substr(0, name.rfind('.'));
    return path.substr(path.rfind('.') + 1).find("norm") != std::string::npos;
}

// PyTorch's default initialisation of Linear / Conv2d (uniform within 1 / sqrt(fan_in) for weights
// and biases), norms at weight 1 and bias 0, position embeddings N(0, 0.02) as transformers' CLIP;
// token embeddings N(0, 1), not 0.02: at 0.02 the random text encoder's outputs for two captions
// differ by a few percent, and a LoRA takes far longer to tell "red" from "blue".
void init_random(std::vector<NamedTensor>& ts, uint64_t seed) {
    std::map<std::string, int64_t> fan_in;
    for (const NamedTensor& t : ts)
        if (t.shape.size() >= 2) fan_in[t.name] = int64_t(t.data.size()) / t.shape[0];
    for (NamedTensor& t : ts) {
        Rng rng{seed ^ name_hash(t.name)};
        if (is_norm(t.name)) {
            std::fill(t.data.begin(), t.data.end(), t.name.ends_with(".weight") ? 1.0f : 0.0f);
        } else if (t.name.ends_with("embedding.weight")) {
            const double sd = t.name.ends_with("token_embedding.weight") ? 1.0 : 0.02;
            for (float& v : t.data) v = float(sd * rng.normal());
        } else {
            const std::string weight = t.name.ends_with(".bias") ? t.name.substr(0, t.name.size() - 5) + ".weight" : t.name;
            const auto it = fan_in.find(weight);
            GL_CHECK(it != fan_in.end(), "demo model: no fan-in known for ", t.name);
            const double bound = 1.0 / std::sqrt(double(it->second));
            for (float& v : t.data) v = float(bound * (2.0 * rng.uniform() - 1.0));
        }
    }
}

// Makes the UNet pass its input to its output (eps = x_t: the right answer at high noise levels)
// beside its random features: conv_in puts latent channel k in channels 4k .. 4k + 3 as
// (e x, -e x, 1, -1); the last up block's last resnet carries them through its shortcut (its
// residual branch and the transformer after it add nothing there); conv_norm_out keeps their level
// (as in the VAE) and conv_out takes SiLU(a) - SiLU(b) = x. The other channels stay random, and
// conv_out reads them at a tenth of its random scale.
void set_denoiser_path(std::vector<NamedTensor>& ts, const sd::UnetConfig& c) {
    const int64_t L = c.in_channels, P = 4 * L, C0 = c.block_out[0];
    GL_CHECK(c.out_channels == L && P <= C0 && 4 % (C0 / c.norm_groups) == 0 && C0 / c.norm_groups <= 4,
             "demo model: the UNet's first level needs 4 channels per latent channel in groups of at most 4");
    const float eps = 0.1f;
    // The group (e x, -e x, 1, -1) has mean 0 and variance (1 + e^2 x^2) / 2, x^2 averaged over the group.
    const float gamma = float(std::sqrt(0.5) / eps);
    const std::string last = "up_blocks." + std::to_string(c.up.size() - 1),
                      res = last + ".resnets." + std::to_string(c.layers_per_block),
                      attn = last + ".attentions." + std::to_string(c.layers_per_block);
    for (NamedTensor& t : ts) {
        const std::string& n = t.name;
        const int64_t rows = t.shape[0], row = int64_t(t.data.size()) / rows;
        auto zero_rows = [&](int64_t upto) { std::fill(t.data.begin(), t.data.begin() + upto * row, 0.0f); };
        auto at = [&](int64_t o, int64_t i, int64_t y, int64_t x) -> float& {
            return t.data[size_t(((o * t.shape[1] + i) * t.shape[2] + y) * t.shape[3] + x)];
        };
        if (n == "conv_in.weight") {
            zero_rows(P);
            for (int64_t k = 0; k < L; k++) at(4 * k, k, 1, 1) = eps, at(4 * k + 1, k, 1, 1) = -eps;
        } else if (n == "conv_in.bias") {
            zero_rows(P);
            for (int64_t k = 0; k < L; k++) t.data[size_t(4 * k + 2)] = 1, t.data[size_t(4 * k + 3)] = -1;
        } else if (n == res + ".conv_shortcut.weight") {
            // Input: the features from below, then the skip (conv_in's output) in the last C0 channels.
            zero_rows(P);
            for (int64_t ch = 0; ch < P; ch++) at(ch, t.shape[1] - C0 + ch, 0, 0) = 1;
        } else if (n == res + ".conv_shortcut.bias" || n == res + ".conv2.weight" || n == res + ".conv2.bias" ||
                   n == attn + ".proj_out.weight" || n == attn + ".proj_out.bias") {
            zero_rows(P);
        } else if (n == "conv_norm_out.weight") {
            zero_rows(P);
            for (int64_t k = 0; k < L; k++) t.data[size_t(4 * k)] = t.data[size_t(4 * k + 1)] = gamma;
        } else if (n == "conv_out.weight") {
            for (float& v : t.data) v *= 0.1f;
            for (int64_t o = 0; o < rows; o++)
                for (int64_t i = 0; i < P; i++)
                    for (int64_t y = 0; y < 3; y++)
                        for (int64_t x = 0; x < 3; x++) at(o, i, y, x) = 0;
            for (int64_t k = 0; k < L; k++) at(k, 4 * k, 1, 1) = 1, at(k, 4 * k + 1, 1, 1) = -1;
        } else if (n == "conv_out.bias") {
            std::fill(t.data.begin(), t.data.end(), 0.0f);
        }
    }
}

void write_tensors(const fs::path& file, const std::vector<NamedTensor>& ts) {
    std::vector<gl::io::TensorToWrite> out;
    for (const NamedTensor& t : ts) out.push_back({t.name, gl::DType::f32, t.shape, t.data.data()});
    gl::io::write_safetensors(file.string(), out);
}

void write_text(const fs::path& file, const std::string& text) {
    std::ofstream f(file, std::ios::binary | std::ios::trunc);
    f << text;
    f.close();
    GL_CHECK(f, file.string(), ": cannot write");
}

}  // namespace

std::vector<NamedTensor> analytic_vae_weights(const sd::VaeConfig& c) {
    c.validate();
    constexpr int64_t C = 12;
    GL_CHECK(c.in_channels == 3 && c.out_channels == 3 && c.latent_channels == 4 && c.norm_groups == 3,
             "analytic VAE: needs 3 image channels, 4 latent channels and 3 groups");
    for (int ch : c.block_out) GL_CHECK(ch == C, "analytic VAE: every level needs 12 channels, got ", ch);
    gl::Graph g;
    nn::Weights w(g, gl::DType::f32);
    const int64_t f = c.downscale();
    vae_encode(w, c, g.input("x", gl::DType::f32, {1, f, f, 3}));
    vae_decode(w, c, g.input("z", gl::DType::f32, {1, 1, 1, 4}));
    std::vector<NamedTensor> ts = leaves(w);

    // Image channel k travels as the group (eps c, -eps c, 1, -1) in channels 4k .. 4k + 3.
    const float eps = 0.01f, gamma = float(std::sqrt(0.5) / 0.01);
    for (NamedTensor& t : ts) {
        const std::string& n = t.name;
        auto at = [&](int64_t o, int64_t i, int64_t y, int64_t x) -> float& {
            return t.data[size_t(((o * t.shape[1] + i) * t.shape[2] + y) * t.shape[3] + x)];
        };
        if (n == "encoder.conv_in.weight" || n == "decoder.conv_in.weight") {
            for (int64_t k = 0; k < 3; k++) at(4 * k, k, 1, 1) = eps, at(4 * k + 1, k, 1, 1) = -eps;
        } else if (n == "encoder.conv_in.bias" || n == "decoder.conv_in.bias") {
            for (int64_t k = 0; k < 3; k++) t.data[size_t(4 * k + 2)] = 1, t.data[size_t(4 * k + 3)] = -1;
        } else if (n.ends_with(".downsamplers.0.conv.weight")) {
            // Zero-padded right and bottom, 3x3 stride 2: taps (0..1, 0..1) average a 2x2 block.
            for (int64_t ch = 0; ch < C; ch++)
                for (int64_t y = 0; y < 2; y++)
                    for (int64_t x = 0; x < 2; x++) at(ch, ch, y, x) = 0.25f;
        } else if (n.ends_with(".upsamplers.0.conv.weight")) {
            for (int64_t ch = 0; ch < C; ch++) at(ch, ch, 1, 1) = 1;
        } else if (n == "encoder.conv_norm_out.weight" || n == "decoder.conv_norm_out.weight") {
            for (int64_t k = 0; k < 3; k++) t.data[size_t(4 * k)] = t.data[size_t(4 * k + 1)] = gamma;
        } else if (n == "encoder.conv_out.weight" || n == "decoder.conv_out.weight") {
            for (int64_t k = 0; k < 3; k++) at(k, 4 * k, 1, 1) = 1, at(k, 4 * k + 1, 1, 1) = -1;
        } else if (n == "encoder.conv_out.bias") {
            for (int64_t k = 4; k < 8; k++) t.data[size_t(k)] = -30;  // log-variance: a point distribution
        } else if (n == "quant_conv.weight" || n == "post_quant_conv.weight") {
            for (int64_t k = 0; k < t.shape[0]; k++) at(k, k, 0, 0) = 1;
        } else if (is_norm(n) && n.ends_with(".weight")) {
            std::fill(t.data.begin(), t.data.end(), 1.0f);  // inside branches whose output is zero
        }
    }
    return ts;
}

void write_model(const fs::path& dir, const ModelConfig& c, uint64_t seed) {
    c.unet.validate();
    c.vae.validate();
    for (const char* sub : {"unet", "text_encoder", "vae"}) fs::create_directories(dir / sub);
    write_text(dir / "model_index.json", R"({
  "_class_name": "StableDiffusionPipeline",
  "_diffusers_version": "0.30.0",
  "text_encoder": ["transformers", "CLIPTextModel"],
  "unet": ["diffusers", "UNet2DConditionModel"],
  "vae": ["diffusers", "AutoencoderKL"]
}
)");
    write_text(dir / "unet" / "config.json", unet_config_json(c.unet));
    write_text(dir / "text_encoder" / "config.json", clip_config_json(c.clip));
    write_text(dir / "vae" / "config.json", vae_config_json(c.vae));
    {
        gl::Graph g;
        nn::Weights w(g, gl::DType::f32);
        const int64_t m = c.unet.size_multiple();
        sd::unet_forward(w, c.unet, g.input("x", gl::DType::f32, {1, m, m, c.unet.in_channels}),
                         g.input("t", gl::DType::f32, {1}),
                         g.input("context", gl::DType::f32, {1, 77, c.unet.cross_attention_dim}));
        std::vector<NamedTensor> ts = leaves(w);
        init_random(ts, seed);
        set_denoiser_path(ts, c.unet);
        write_tensors(dir / "unet" / "diffusion_pytorch_model.safetensors", ts);
    }
    {
        gl::Graph g;
        nn::Weights w(g, gl::DType::f32);
        sd::build_clip(w, g, g.input("ids", gl::DType::i32, {1, 77}), c.clip);
        std::vector<NamedTensor> ts = leaves(w);
        init_random(ts, seed + 1);
        write_tensors(dir / "text_encoder" / "model.safetensors", ts);
    }
    write_tensors(dir / "vae" / "diffusion_pytorch_model.safetensors", analytic_vae_weights(c.vae));
}

// ---- dataset ----

namespace {

struct Colour {
    const char* name;
    uint8_t r, g, b;
};
constexpr Colour kColours[] = {{"red", 215, 40, 40}, {"green", 40, 170, 60}, {"blue", 40, 80, 215}, {"yellow", 235, 200, 30}};
constexpr const char* kShapes[] = {"circle", "square", "triangle"};
constexpr uint8_t kBackground = 225;

// Whether (x, y) lies in the shape centred at (cx, cy) with radius r.
bool inside(int shape, double x, double y, double cx, double cy, double r) {
    const double dx = x - cx, dy = y - cy;
    if (shape == 0) return dx * dx + dy * dy <= r * r;
    if (shape == 1) return std::fabs(dx) <= 0.85 * r && std::fabs(dy) <= 0.85 * r;
    // An upward triangle: apex above the centre, base below it.
    const double h = 1.6 * r, half = std::fabs(dx), top = cy - 0.9 * r;
    return y >= top && y <= top + h && half <= 0.95 * r * (y - top) / h;
}

}  // namespace

DatasetInfo write_dataset(const fs::path& dir, const DatasetOptions& o) {
    GL_CHECK(o.repeats >= 1 && o.variants >= 1 && o.side >= 32 && o.side <= 4096,
             "demo dataset: repeats and variants must be >= 1 and side in [32, 4096]");
    DatasetInfo info;
    info.subset_dir = dir / (std::to_string(o.repeats) + "_shapes");
    fs::create_directories(info.subset_dir);
    Rng rng{o.seed};
    int index = 0;
    for (int v = 0; v < o.variants; v++)
        for (const Colour& col : kColours)
            for (int shape = 0; shape < 3; shape++, index++) {
                const int aspect = (index + index / 3) % 3;  // square, wide, tall; not tied to the shape
                const int W = aspect == 1 ? o.side * 3 / 2 : o.side, H = aspect == 2 ? o.side * 3 / 2 : o.side;
                const double r = std::min(W, H) * (0.22 + 0.12 * rng.uniform());
                const double cx = r + (W - 2 * r) * rng.uniform(), cy = r + (H - 2 * r) * rng.uniform();
                data::Bitmap im{W, H, 3, std::vector<uint8_t>(size_t(W) * size_t(H) * 3)};
                for (int y = 0; y < H; y++)
                    for (int x = 0; x < W; x++) {
                        int hits = 0;  // 4x4 samples per pixel: smooth edges
                        for (int sy = 0; sy < 4; sy++)
                            for (int sx = 0; sx < 4; sx++) hits += inside(shape, x + (sx + 0.5) / 4, y + (sy + 0.5) / 4, cx, cy, r);
                        const double a = hits / 16.0;
                        uint8_t* p = &im.pixels[(size_t(y) * size_t(W) + size_t(x)) * 3];
                        p[0] = uint8_t(std::lround(a * col.r + (1 - a) * kBackground));
                        p[1] = uint8_t(std::lround(a * col.g + (1 - a) * kBackground));
                        p[2] = uint8_t(std::lround(a * col.b + (1 - a) * kBackground));
                    }
                char stem[16];
                std::snprintf(stem, sizeof stem, "%03d", index);
                const fs::path png = info.subset_dir / (std::string(stem) + ".png");
                data::write_png(png.string(), im);
                const std::string caption = std::string("a ") + col.name + " " + kShapes[shape];
                write_text(info.subset_dir / (std::string(stem) + ".txt"), caption + "\n");
                info.images.push_back(png.filename().string());
                info.captions.push_back(caption);
            }
    return info;
}

std::vector<std::string> sample_prompts(int side) {
    const int wide = (side * 5 / 4 + 31) / 32 * 32, narrow = std::max(32, (side * 3 / 4) / 32 * 32);
    const std::string sq = " --w " + std::to_string(side) + " --h " + std::to_string(side);
    return {"a red circle" + sq + " --d 1 --s 20 --l 5",
            "a blue square" + sq + " --d 2 --s 20 --l 5",
            "a green triangle --w " + std::to_string(wide) + " --h " + std::to_string(narrow) + " --d 3 --s 20 --l 5",
            "a yellow circle --w " + std::to_string(narrow) + " --h " + std::to_string(wide) + " --d 4 --s 20 --l 5"};
}

void write_prompts(const fs::path& file, int side) {
    std::string text = "# Sample prompts (kohya's format: --w / --h size, --d seed, --s steps, --l CFG scale)\n";
    for (const std::string& p : sample_prompts(side)) text += p + "\n";
    write_text(file, text);
}

}  // namespace demo
