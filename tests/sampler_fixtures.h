// The tiny text-to-image model of the sampler tests (CPU suite and GPU suite): the UNet and VAE of
// the unet / vae golden tests, the text encoder and LoRA files made by
// tests/golden/make_sampler_golden.py, the tiny tokenizer; and small comparison helpers.
#pragma once
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "ggml-lite/io/safetensors.h"
#include "models/sd15/pipeline.h"

namespace sampler_test {

inline std::string golden(const std::string& rel) {
    std::string f = __FILE__;
    return f.substr(0, f.find_last_of('/')) + "/golden/data/" + rel;
}

inline sd::Sd15Files tiny_model() {
    sd::Sd15Files f;
    f.unet = std::make_shared<gl::io::SafetensorsFile>(golden("unet/unet_diffusers.safetensors"));
    f.text_encoder = std::make_shared<gl::io::SafetensorsFile>(golden("sampler/text_encoder.safetensors"));
    f.vae = std::make_shared<gl::io::SafetensorsFile>(golden("vae/weights_diffusers.safetensors"));
    f.unet_cfg = sd::UnetConfig::tiny();
    f.clip_cfg = sd::ClipConfig{3514, 16, 2, 2, 32, 77, gl::Act::quick_gelu, 1e-5f};
    f.vae_cfg = sd::VaeConfig::tiny();
    f.tokenizer = std::make_shared<sd::ClipTokenizer>(sd::ClipTokenizer::from_folder(golden("tokenizer/tiny")));
    return f;
}

inline sd::PipelineOptions options(const char* backend, gl::DType dtype) {
    sd::PipelineOptions o;
    o.backend = gl::parse_backend(backend);
    o.dtype = dtype;
    return o;
}

inline std::vector<float> read(const gl::io::SafetensorsFile& f, const std::string& name) {
    std::vector<float> v(size_t(f.info(name).numel()));
    f.read(name, v.data(), gl::DType::f32);
    return v;
}

// max |a - b| / max |b|.
inline double rel_error(const std::vector<float>& a, const std::vector<float>& b) {
    REQUIRE(a.size() == b.size());
    double d = 0, r = 0;
    for (size_t i = 0; i < a.size(); i++) {
        d = std::max(d, std::abs(double(a[i]) - b[i]));
        r = std::max(r, std::abs(double(b[i])));
    }
    return d / std::max(r, 1e-30);
}

}  // namespace sampler_test
