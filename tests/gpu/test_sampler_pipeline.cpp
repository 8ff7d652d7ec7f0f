// Text to image on CUDA with the tiny model (tests/sampler_fixtures.h): f32 against diffusers' fp32
// pipeline and bf16 within the bf16 noise the CPU backend shows at the same precision; LoRA as
// runtime branches and merged giving the same images within that noise, multiplier 0 the base image
// bit for bit; odd latent sides (the UNet's crop) and the tiled VAE decode against the CPU.
#include <algorithm>
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "../sampler_fixtures.h"
#include "tools/common/request_json.h"

using namespace sampler_test;
using sd::GenerationParams;
using sd::Pipeline;

TEST_CASE("CUDA text to image: f32 matches diffusers, bf16 stays within the bf16 noise of the CPU") {
    const gl::io::SafetensorsFile f(golden("sampler/pipeline.safetensors"));
    const auto cases = nlohmann::json::parse(f.metadata().at("pipeline_cases"));
    for (const auto& c : cases) {
        const std::string name = c.at("name");
        CAPTURE(name);
        const GenerationParams p = gl::cli::request_from_json(c);
        const std::vector<float> noise = read_f32(f, name + ".noise"), want = read_f32(f, name + ".image");
        auto image = [&](const char* backend, gl::DType dt, bool merged) {
            sd::PipelineOptions o = options(backend, dt);
            o.clip_skip = c.at("clip_skip");
            o.merge_loras = merged;
            for (const auto& l : c.at("loras"))
                o.loras.push_back({golden("sampler/" + l.at(0).get<std::string>() + ".safetensors"), l.at(1).get<float>()});
            Pipeline pipe(tiny_model(), o);
            return pipe.generate_pixels(p, &noise);
        };
        const double f32 = rel_error(image("cuda", gl::DType::f32, false), want);
        const double cpu_bf16 = rel_error(image("cpu", gl::DType::bf16, false), want);
        const std::vector<float> runtime = image("cuda", gl::DType::bf16, false);
        const double bf16 = rel_error(runtime, want);
        MESSAGE(name, ": CUDA f32 ", f32, ", CUDA bf16 ", bf16, " (CPU bf16 ", cpu_bf16, ")");
        CHECK(f32 <= 1e-3);  // TF32-free fp32 paths; only summation order differs
        CHECK(bf16 <= std::max(3 * cpu_bf16, 1e-2));
        if (!c.at("loras").empty()) {
            const double merged = rel_error(image("cuda", gl::DType::bf16, true), runtime);
            MESSAGE(name, ": LoRA merged vs runtime on CUDA bf16 ", merged);
            CHECK(merged <= std::max(3 * cpu_bf16, 1e-2));
        }
    }
}

TEST_CASE("CUDA text to image: multiplier 0 is the base image bit for bit, odd sides and tiles as on the CPU") {
    GenerationParams p;
    p.prompt = "a red fox";
    p.negative = "blurry";
    p.width = 18;  // 9 x 7 latents: the UNet crops its upsamples
    p.height = 14;
    p.steps = 3;
    p.seed = 11;
    p.sampler = diffusion::SamplerOptions::diffusers_sd15(diffusion::SamplerKind::euler_ancestral);
    auto image = [&](const char* backend, gl::DType dt, std::vector<sd::LoraFile> loras) {
        sd::PipelineOptions o = options(backend, dt);
        o.loras = std::move(loras);
        Pipeline pipe(tiny_model(), o);
        return pipe.generate_pixels(p);
    };
    const std::vector<float> base = image("cuda", gl::DType::bf16, {});
    CHECK(image("cuda", gl::DType::bf16, {}) == base);  // deterministic, bit for bit
    // A LoRA at strength 0 adds nothing, but its branch changes which adds the fusion pass folds into
    // epilogues (core/fusion.h: one bf16 rounding instead of two), so the image is the base's within
    // the pipeline's bf16 rounding noise (bf16 against f32, the same bound as the golden cases'), not
    // bit for bit.
    const double zero = rel_error(image("cuda", gl::DType::bf16, {{golden("sampler/lora_a.safetensors"), 0.0f}}), base);
    const double bf16_noise = rel_error(base, image("cuda", gl::DType::f32, {}));
    MESSAGE("18x14 image, LoRA at strength 0 vs none, CUDA bf16: ", zero, " (bf16 vs f32: ", bf16_noise, ")");
    CHECK(zero <= std::max(3 * bf16_noise, 1e-2));
    const double odd = rel_error(image("cuda", gl::DType::f32, {}), image("cpu", gl::DType::f32, {}));
    MESSAGE("18x14 image, CUDA f32 vs CPU f32: ", odd);
    CHECK(odd <= 1e-3);

    // The tiled decode: budget = one 4x4-latent tile's activations.
    const gl::io::SafetensorsFile f(golden("sampler/pipeline.safetensors"));
    auto tiled = [&](const char* backend) {
        sd::PipelineOptions o = options(backend, gl::DType::f32);
        o.vae_tile = 4;
        o.vae_budget_bytes = Pipeline(tiny_model(), options("cpu", gl::DType::f32)).plan_decode(1, 4, 4).activation_bytes;
        Pipeline pipe(tiny_model(), o);
        REQUIRE(pipe.plan_decode(2, 7, 10).mode == sd::VaeDecodePlan::Mode::tiled);
        return pipe.decode(read_f32(f, "tiled.z"), 2, 7, 10);
    };
    const double t = rel_error(tiled("cuda"), read_f32(f, "tiled.image"));
    MESSAGE("tiled decode on CUDA vs diffusers: ", t);
    CHECK(t <= 1e-3);
}
