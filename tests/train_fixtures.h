// The tiny training-step setup shared by the CPU and GPU training tests: the golden tiny UNet's
// weights, 8x8 latents, 8 context tokens, a rank-4 LoRA.
#pragma once
#include <filesystem>
#include <string>

#include "train/step.h"

namespace train_test {

inline const std::string kTinyUnet =
    (std::filesystem::path(__FILE__).parent_path() / "golden" / "data" / "unet" / "unet_diffusers.safetensors").string();
constexpr int64_t kSide = 8, kTokens = 8;

inline train::StepOptions tiny_options(train::Precision p, int64_t batch, int accum, float lr) {
    train::StepOptions o;
    o.unet = sd::UnetConfig::tiny();
    o.batch = batch;
    o.latent_h = o.latent_w = kSide;
    o.context_tokens = kTokens;
    o.precision = p;
    o.lora = lora::LoraConfig{4, 4.0f, 1.0f};
    o.grad_accum = accum;
    o.unet_lr = lr;
    return o;
}

}  // namespace train_test
