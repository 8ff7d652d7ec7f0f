// A text-to-image request as the reference scripts write it, a JSON object (the cases of
// tests/golden/make_sampler_golden.py, the "request" of bench/txt2img_torch.py reference):
// prompt, negative, width, height, steps, cfg, sampler (kohya's names; diffusers' SD1.5
// scheduler settings), and where present batch and karras. Header-only: its users link
// nlohmann-json themselves (the tests, bench_txt2img); the tools do not need it.
#pragma once
#include <nlohmann/json.hpp>

#include "pipelines/pipeline.h"

namespace gl::cli {

inline sd::GenerationParams request_from_json(const nlohmann::json& r) {
    sd::GenerationParams p;
    p.prompt = r.at("prompt");
    p.negative = r.at("negative");
    p.width = r.at("width");
    p.height = r.at("height");
    p.steps = r.at("steps");
    p.cfg_scale = r.at("cfg");
    p.sampler = diffusion::SamplerOptions::diffusers_sd15(diffusion::parse_sampler_name(r.at("sampler")).kind);
    if (r.contains("batch")) p.batch = r.at("batch");
    if (r.contains("karras")) p.sampler.karras = r.at("karras");
    return p;
}

}  // namespace gl::cli
