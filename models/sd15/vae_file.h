// kohya's --vae: a VAE of its own replacing the model's, for caching latents and for sample
// images. As kohya's model_util.load_vae takes it: a folder is a diffusers AutoencoderKL
// (config.json and diffusion_pytorch_model[.fp16].{safetensors,bin}), or a whole diffusers model
// whose vae/ sub-folder is one (kohya's retry with subfolder="vae"); a file is a checkpoint
// (.safetensors, or .ckpt / .pt / .bin read by the restricted unpickler) holding the VAE in the
// original layout, alone (the fine-tuned "vae-ft-mse-840000-ema-pruned" and its kin) or under a
// whole single file's first_stage_model., wrapped in {"state_dict": ...} or not. The VAE keeps
// the model's config (kohya builds SD1.x's own, whose scaling factor it trains with): its shapes
// must be the model's, and a folder's config must describe the same network.
#pragma once
#include <memory>
#include <string>

#include "ggml-lite/io/tensor_source.h"
#include "models/model_files.h"
#include "models/sd15/vae.h"

namespace sd {

struct VaeFile {
    std::shared_ptr<const gl::io::TensorSource> weights;
    std::string weights_path;  // the file opened (within a folder: its weights file)
};

// Opens path as a VAE of the network `model` (the model's VAE config), checking the layout and
// the shapes that tell its size. Throws gl::Error naming the path and what is wrong.
VaeFile open_vae_file(const std::string& path, const VaeConfig& model);

// m with its VAE replaced by the one at path (open_vae_file with m's VAE config).
void replace_vae(models::ModelFiles& m, const std::string& path);

}  // namespace sd
