// Opening an SD2.x model (stable-diffusion-2-base, -2-1-base: 512 epsilon; -2, -2-1: 768 v) as it
// is distributed. A diffusers folder has SD1.x's layout (sd::open_sd15_folder reads it); an
// original single file holds the OpenCLIP ViT-H/14 text tower under cond_stage_model.model.*
// (resblocks.N.attn.in_proj_weight: q, k and v in one tensor), which the text encoder sees under
// transformers' CLIPTextModel keys, as kohya's model_util and diffusers' single-file converter
// read it: 23 of its 24 layers (SD2.x conditions on the penultimate), in_proj split in three,
// text_projection and logit_scale unused.
#pragma once
#include <memory>
#include <string>

#include "models/sd15/model_files.h"

namespace sd {

// An OpenCLIP text tower (keys under `prefix`, "cond_stage_model.model.") as transformers'
// text_model.* keys: layers 0 .. layers - 1 of its resblocks.
std::shared_ptr<const gl::io::TensorSource> openclip_text_view(std::shared_ptr<const gl::io::TensorSource> src,
                                                               int64_t layers,
                                                               const std::string& prefix = "cond_stage_model.model.");

// Where an OpenCLIP view (openclip_text_view) reads the tensor `name` from: its key in the
// file and which third of it (q, k, v: 0, 1, 2; -1 the whole tensor). false when src is no such
// view or has no such name.
bool openclip_stored(const gl::io::TensorSource& src, const std::string& name, std::string* key, int* third);

// An SD2.x single file checked against the given configs (SD2's by default; tests pass tiny
// ones). An SD1.x file is refused by name (it is opened without --v2).
Sd15Files open_sd2_single_file(const std::string& file, const UnetConfig& unet_cfg = UnetConfig::sd2(),
                               const ClipConfig& clip_cfg = ClipConfig::vit_h14(),
                               const VaeConfig& vae_cfg = VaeConfig::sd15(),
                               std::shared_ptr<const ClipTokenizer> tokenizer = nullptr);
// A folder or a single file, its three models checked against each other and to be SD2.x's.
Sd15Files open_sd2(const std::string& path, bool prefer_fp16 = false);

}  // namespace sd
