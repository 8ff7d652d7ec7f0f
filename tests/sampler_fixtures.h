// The tiny text-to-image model of the sampler tests (CPU suite and GPU suite): the UNet and VAE of
// the unet / vae golden tests, the text encoder and LoRA files made by
// tests/golden/make_sampler_golden.py, the tiny tokenizer; test_util.h's comparison helpers.
#pragma once
#include <doctest/doctest.h>

#include <memory>
#include <string>
#include <vector>

#include "ggml-lite/io/safetensors.h"
#include "models/sd15/model_files.h"
#include "pipelines/pipeline.h"
#include "test_util.h"

namespace sampler_test {

inline std::string golden(const std::string& rel) {
    std::string f = __FILE__;
    return f.substr(0, f.find_last_of('/')) + "/golden/data/" + rel;
}

inline models::ModelFiles tiny_model() {
    sd::Sd15Files f;
    f.unet = std::make_shared<gl::io::SafetensorsFile>(golden("unet/unet_diffusers.safetensors"));
    f.text_encoder = std::make_shared<gl::io::SafetensorsFile>(golden("sampler/text_encoder.safetensors"));
    f.vae = std::make_shared<gl::io::SafetensorsFile>(golden("vae/weights_diffusers.safetensors"));
    f.unet_cfg = sd::UnetConfig::tiny();
    f.clip_cfg = sd::ClipConfig{3514, 16, 2, 2, 32, 77, gl::Act::quick_gelu, 1e-5f};
    f.vae_cfg = sd::VaeConfig::tiny();
    f.tokenizer = std::make_shared<sd::ClipTokenizer>(sd::ClipTokenizer::from_folder(golden("tokenizer/tiny")));
    return sd::model_files(std::move(f), models::sd15_family());
}

inline sd::PipelineOptions options(const char* backend, gl::DType dtype) {
    sd::PipelineOptions o;
    o.backend = gl::parse_backend(backend);
    o.dtype = dtype;
    return o;
}

using gltest::read_f32;
using gltest::rel_error;

}  // namespace sampler_test
