// Opened models assembled by hand for the tests whose tiny models are no consistent pipeline (the
// families' openers would refuse them): SD1.x's family with the given configs and weights.
#pragma once
#include <memory>

#include "ggml-lite/io/tensor_source.h"
#include "models/model_files.h"
#include "models/sd15/sd_config.h"

namespace gltest {

// A source the caller keeps alive, shared without ownership.
inline std::shared_ptr<const gl::io::TensorSource> borrowed(const gl::io::TensorSource& s) {
    return std::shared_ptr<const gl::io::TensorSource>(&s, [](const gl::io::TensorSource*) {});
}

// Only a text encoder (CLIP config c, its weights), for the text encoder graphs and caches.
inline models::ModelFiles text_encoder_model(const sd::ClipConfig& c, const gl::io::TensorSource& weights) {
    models::ModelFiles m;
    m.family = &models::sd15_family();
    m.config = sd::sd_config(sd::UnetConfig::tiny(), c);
    m.text_encoder = borrowed(weights);
    return m;
}

}  // namespace gltest
