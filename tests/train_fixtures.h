// The tiny training-step setup shared by the CPU and GPU training tests: the golden tiny UNet's
// weights, 8x8 latents, 8 context tokens, a rank-4 LoRA.
#pragma once
#include <cmath>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "train/step.h"
#include "models/sd15/sd_config.h"

namespace train_test {

inline const std::string kTinyUnet =
    (std::filesystem::path(__FILE__).parent_path() / "golden" / "data" / "unet" / "unet_diffusers.safetensors").string();
constexpr int64_t kSide = 8, kTokens = 8;

inline train::StepOptions tiny_options(train::Precision p, int64_t batch, int accum, float lr) {
    train::StepOptions o;
    o.config = sd::sd_config(sd::UnetConfig::tiny());
    o.batch = batch;
    o.latent_h = o.latent_w = kSide;
    o.context_tokens = kTokens;
    o.precision = p;
    o.lora = lora::LoraConfig{4, 4.0f, 1.0f};
    o.grad_accum = accum;
    o.unet_lr = lr;
    return o;
}

// n draws of N(0, sd) from mt19937(seed).
inline std::vector<float> normal(size_t n, uint32_t seed, float sd = 1.0f) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> z(0.0f, sd);
    std::vector<float> v(n);
    for (float& e : v) e = z(rng);
    return v;
}

// A fixed tiny "dataset": n kSide x kSide latents with structure a LoRA can learn (per-channel
// offsets and smooth waves), channels last.
inline std::vector<float> structured_latents(int64_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> z(0.0f, 1.0f);
    std::vector<float> v;
    for (int64_t s = 0; s < n; s++) {
        const float f = 0.5f + 0.3f * z(rng), ph = z(rng), off[4] = {z(rng), z(rng), z(rng), z(rng)};
        for (int64_t y = 0; y < kSide; y++)
            for (int64_t x = 0; x < kSide; x++)
                for (int c = 0; c < 4; c++) v.push_back(0.5f * off[c] + std::sin(f * float(x + 2 * y) + ph + float(c)));
    }
    return v;
}

}  // namespace train_test
