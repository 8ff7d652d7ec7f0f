// The assets of the embedded demo (`make demo`), written on the fly by gl-make-demo and by the
// tests: a tiny model with SD1.5's architecture as a diffusers folder, a small dataset of
// coloured shapes in kohya's folder layout, and a sample-prompt file in kohya's format. Nothing is
// downloaded; the same seed writes the same bytes.
//
// The model: a small UNet (three levels, SD1.5's block types, cross-attention on the text encoder's
// width) and text encoder (CLIP's vocabulary and the built-in tokenizer, two layers) with random
// weights as PyTorch / transformers initialise them, and a VAE of SD1.5's structure whose weights
// are set by hand so that it is (to about 1e-4) a fixed linear map: the encoder averages 8x8
// pixel blocks into latents (channels R, G, B in [-1, 1], and 0), the decoder repeats each latent
// pixel over an 8x8 block. Its ResNet and attention branches are switched off (zero output
// convolutions), its down / up samplers average / copy, and its group norms see every image
// channel c as a group (e c, -e c, 1, -1): the group's mean is exactly 0 and its variance depends
// on c only through e^2, so the norm keeps c's level, and SiLU(c) - SiLU(-c) = c undoes the SiLU.
// The UNet gets the same kind of hand-set path from its input to its output beside its random
// features, so that it starts out predicting the noise as the noisy latent itself (right at high
// noise levels); a random UNet's predictions there are far off, and sampling from pure noise
// magnifies them. A LoRA then learns the rest in a few hundred steps, and the samples show what it
// learned, latent pixel for 8x8 block.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "models/sd15/clip.h"
#include "models/sd15/unet.h"
#include "models/sd15/vae.h"

namespace demo {

struct ModelConfig {
    sd::UnetConfig unet;
    sd::ClipConfig clip;
    sd::VaeConfig vae;
};
// The demo's model: UNet (32, 64, 64) channels, CLIP width 32 with 2 layers, VAE with 4 levels of
// 12 channels (8x downscale, as SD1.5's).
ModelConfig model_config();
// The same with SD2.x's settings: per-level heads (2, 4, 4), linear projections, upcast
// attention, a gelu text encoder (opened with --v2).
ModelConfig model_config_sd2();

// The config.json files as diffusers / transformers write them (what open_sd15 parses).
std::string unet_config_json(const sd::UnetConfig& c);
std::string clip_config_json(const sd::ClipConfig& c);
std::string vae_config_json(const sd::VaeConfig& c);

// Writes a diffusers folder at dir (created): model_index.json and unet/, text_encoder/, vae/, each
// with config.json and f32 safetensors weights (the UNet and text encoder drawn from `seed`). No tokenizer/: open_sd15 uses the built-in CLIP
// tokenizer. Existing files of the same names are replaced. Throws gl::Error naming the file.
void write_model(const std::filesystem::path& dir, const ModelConfig& c, uint64_t seed);

// The hand-set VAE's weights in checkpoint layout (diffusers names, convolutions [O, I, kh, kw]):
// every tensor of vae_encode + vae_decode for config c, which must have 3 image channels, 4 latent
// channels and 12 channels at every level in groups of 4.
struct NamedTensor {
    std::string name;
    std::vector<int64_t> shape;
    std::vector<float> data;
};
std::vector<NamedTensor> analytic_vae_weights(const sd::VaeConfig& c);

struct DatasetOptions {
    int repeats = 10;   // the folder's <repeats>_ prefix
    int variants = 2;   // images per (colour, shape) pair
    int side = 128;     // the short side; wide and tall images are 1.5x longer
    uint64_t seed = 1;
};
struct DatasetInfo {
    std::filesystem::path subset_dir;  // <dir>/<repeats>_shapes
    std::vector<std::string> images;   // file names, in order
    std::vector<std::string> captions; // parallel to images
};
// Writes <dir>/<repeats>_shapes/NNN.png with NNN.txt captions ("a red circle"): every colour (red,
// green, blue, yellow) and shape (circle, square, triangle), `variants` times at random positions
// and sizes, in three aspect ratios (square, 3:2 wide, 2:3 tall) so that bucketing has work.
DatasetInfo write_dataset(const std::filesystem::path& dir, const DatasetOptions& o);

// kohya's sample-prompt lines for the demo ("a red circle --w 128 --h 128 --d 1 --s 20 --l 5"),
// sizes on the 32-pixel bucket grid around `side`.
std::vector<std::string> sample_prompts(int side);
void write_prompts(const std::filesystem::path& file, int side);

}  // namespace demo
