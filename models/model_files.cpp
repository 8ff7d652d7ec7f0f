#include "models/model_files.h"

#include "ggml-lite/core/error.h"

namespace models {

const char* layout_name(Layout l) { return l == Layout::diffusers ? "diffusers" : "single-file"; }

const Family& ModelFiles::fam() const {
    GL_CHECK(family != nullptr, "model ", unet_path, ": opened by no family");
    return *family;
}

const ModelConfig& ModelFiles::cfg() const {
    GL_CHECK(config != nullptr, "model ", unet_path, ": no configuration");
    return *config;
}

const sd::VaeConfig& ModelFiles::vae_config() const {
    GL_CHECK(vae_cfg != nullptr, "model ", vae_path, ": no VAE configuration");
    return *vae_cfg;
}

}  // namespace models
