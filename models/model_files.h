// The model as its family opened it (models::Family::open), what the trainer, the caches, the
// sampler pipeline and gl-merge hold: the family, the weights of each part, their configuration as
// the family defines it (opaque above models/: handed back to the family's builders), the VAE's,
// the tokenizer and the files opened. Nothing above models/ names a family's own opener.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "ggml-lite/io/tensor_source.h"
#include "models/family.h"

// SD's VAE and tokenizer (models/sd15/vae.h, tokenizer.h), held by pointer: the one AutoencoderKL
// and CLIP vocabulary of every family so far.
namespace sd {
struct VaeConfig;
class ClipTokenizer;
}  // namespace sd

namespace models {

// How a model is distributed: a diffusers folder (unet/, text_encoder/, vae/, ...) or one original
// single file (.safetensors / .ckpt).
enum class Layout : uint8_t { diffusers, single_file };
const char* layout_name(Layout l);  // "diffusers" | "single-file"

struct ModelFiles {
    // The family that opened it, whose graphs and loaders the layers above ask for.
    const Family* family = nullptr;
    Layout layout = Layout::diffusers;
    // The weights of each part (Part::unet, Part::text_encoder) and of the VAE. For a single file
    // they are the same open file, or a view of it under the part's keys (SD2.x's text encoder).
    std::shared_ptr<const gl::io::TensorSource> unet, text_encoder, vae;
    // The denoiser's and text encoders' configuration, as the family defines it.
    std::shared_ptr<const ModelConfig> config;
    // The VAE's configuration (models/sd15/vae.h).
    std::shared_ptr<const sd::VaeConfig> vae_cfg;
    // The folder's tokenizer/, or the family's built-in CLIP vocabulary.
    std::shared_ptr<const sd::ClipTokenizer> tokenizer;
    // The files actually opened (which variant was chosen), for logs.
    std::string unet_path, text_encoder_path, vae_path, tokenizer_path;  // tokenizer_path "" = built in

    const Family& fam() const;         // family, checked to be set
    const ModelConfig& cfg() const;    // config, checked to be set
    const sd::VaeConfig& vae_config() const;  // vae_cfg, checked to be set
};

}  // namespace models
