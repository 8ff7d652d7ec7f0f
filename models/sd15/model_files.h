// Opening an SD1.5 model as it is distributed (SD's side of models::Family::open; nothing above
// models/ names Sd15Files: the families hand out models::ModelFiles, sd::model_files): either an original single file (.safetensors or
// .ckpt holding model.diffusion_model.*, cond_stage_model.*, first_stage_model.*) or a diffusers
// folder (unet/, text_encoder/, vae/, tokenizer/, each with its config.json). The result is the
// three weight sources, the three configs and the tokenizer; load_unet / load_clip / load_vae take
// it from there (they detect the key layout themselves).
//
// Only SD1.x shapes are accepted: a config or a single file that describes something else (SD2's
// linear projections and OpenCLIP text encoder, SDXL's second text encoder and extra embeddings,
// a VAE with a shift factor) is refused with an error naming the file and the field or tensor,
// instead of failing later with a shape mismatch deep inside a loader.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "ggml-lite/io/tensor_source.h"
#include "models/family.h"
#include "models/model_files.h"
#include "models/sd15/clip.h"
#include "models/sd15/tokenizer.h"
#include "models/sd15/unet.h"
#include "models/sd15/vae.h"

namespace sd {

// How a model is distributed: a diffusers folder (unet/, text_encoder/, vae/, ...) or one original
// single file (.safetensors / .ckpt).
using Sd15Layout = models::Layout;
inline const char* sd15_layout_name(Sd15Layout l) { return models::layout_name(l); }

struct Sd15Files {
    // The weights of each model. For a single file all three are the same open file.
    std::shared_ptr<const gl::io::TensorSource> unet, text_encoder, vae;
    UnetConfig unet_cfg;
    ClipConfig clip_cfg;
    VaeConfig vae_cfg;
    // The folder's tokenizer/, or the built-in CLIP vocabulary (single files, folders without one).
    std::shared_ptr<const ClipTokenizer> tokenizer;
    Sd15Layout layout = Sd15Layout::diffusers;
    // The files actually opened (which variant was chosen), for logs.
    std::string unet_path, text_encoder_path, vae_path, tokenizer_path;  // tokenizer_path "" = built in
};

// m as the family f hands it out: its UNet and CLIP configs as an sd::SdConfig.
models::ModelFiles model_files(Sd15Files m, const models::Family& f);

// path: a single checkpoint file or a diffusers folder. prefer_fp16 picks the `.fp16.` weight
// files of a folder when both variants are there (the other one is used when only it exists;
// the loaders convert to the graph's dtype either way). Throws gl::Error naming the file and
// what was wrong or missing.
Sd15Files open_sd15(const std::string& path, bool prefer_fp16 = false);

// What open_sd15 checks across the three models once they are open: the UNet's cross-attention
// width is the text encoder's width, its output channels the VAE's latent channels. Throws
// gl::Error naming the files.
void check_sd15_pipeline(const Sd15Files& m);

// What makes m an SD2.x model rather than SD1.x ("the UNet's linear projections", ...), "" when
// it has SD1.x's shape. The families check it after opening (a folder opens whatever its configs say).
std::string sd2_traits(const Sd15Files& m);

// The two halves of open_sd15 (without check_sd15_pipeline), for callers that know what they are
// opening, and for tests whose tiny models are not one consistent pipeline.
Sd15Files open_sd15_folder(const std::string& dir, bool prefer_fp16 = false);
// A single file checked against the given configs (SD1.5's by default; tests pass tiny ones):
// CLIP width and vocabulary, the UNet's conv_in and cross-attention width, the VAE's decoder
// input. The UNet's in_channels is taken from the file (9 for inpainting models). tokenizer:
// null for the built-in CLIP vocabulary (its ids must fit the text encoder's vocabulary).
Sd15Files open_sd15_single_file(const std::string& file, const UnetConfig& unet_cfg = UnetConfig::sd15(),
                                const ClipConfig& clip_cfg = ClipConfig::vit_l14(),
                                const VaeConfig& vae_cfg = VaeConfig::sd15(),
                                std::shared_ptr<const ClipTokenizer> tokenizer = nullptr);

// The config.json parsers (text is the file's content, origin names it in errors). Each refuses
// fields it cannot honour and validates the result.
UnetConfig parse_unet_config(const std::string& text, const std::string& origin);
ClipConfig parse_clip_config(const std::string& text, const std::string& origin);
VaeConfig parse_vae_config(const std::string& text, const std::string& origin);

}  // namespace sd
