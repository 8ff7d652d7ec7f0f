// The text-to-image pipeline on tiny models against diffusers' StableDiffusionPipeline (fp32, CPU,
// injected latents; tests/golden/make_sampler_golden.py): whole pipelines with CFG, Karras DPM++
// with clip skip, no CFG, two LoRAs (runtime and merged); the tiled VAE decode; multiplier 0 giving
// the base image bit for bit; batch independence; the plan; refusals.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ggml-lite/core/error.h"
#include "ggml-lite/io/safetensors.h"
#include "pipelines/a1111.h"
#include "pipelines/pipeline.h"
#include "sampler_fixtures.h"
#include "test_util.h"
#include "tools/common/request_json.h"

using namespace sampler_test;
using gltest::error_of;
using sd::GenerationParams;
using sd::Pipeline;
using sd::PipelineOptions;

namespace {

PipelineOptions f32_options() { return options("cpu", gl::DType::f32); }

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("pipeline: text to image matches diffusers' StableDiffusionPipeline") {
    const gl::io::SafetensorsFile f(golden("sampler/pipeline.safetensors"));
    const auto cases = nlohmann::json::parse(f.metadata().at("pipeline_cases"));
    REQUIRE(cases.size() == 4);
    for (const auto& c : cases) {
        const std::string name = c.at("name");
        CAPTURE(name);
        PipelineOptions o = f32_options();
        o.clip_skip = c.at("clip_skip");
        for (const auto& l : c.at("loras"))
            o.loras.push_back({golden("sampler/" + l.at(0).get<std::string>() + ".safetensors"), l.at(1).get<float>()});
        const GenerationParams p = gl::cli::request_from_json(c);
        const std::vector<float> noise = read_f32(f, name + ".noise");
        for (bool merged : {false, true}) {
            if (merged && o.loras.empty()) continue;
            o.merge_loras = merged;
            Pipeline pipe(tiny_model(), o);
            std::vector<float> latents;
            int calls = 0;
            const std::vector<float> px = pipe.generate_pixels(p, &noise, [&](int, int) { calls++; }, &latents);
            CHECK(calls == p.steps);
            const double el = rel_error(latents, read_f32(f, name + ".latents"));
            const double ei = rel_error(px, read_f32(f, name + ".image"));
            MESSAGE(name, std::string(merged ? " (LoRA merged)" : ""), ": final latents rel. error ", el, ", image ", ei);
            CHECK(el <= 2e-5);
            CHECK(ei <= 2e-5);
        }
    }
}

TEST_CASE("pipeline: the tiled VAE decode matches diffusers' tiled_decode") {
    const gl::io::SafetensorsFile f(golden("sampler/pipeline.safetensors"));
    PipelineOptions o = f32_options();
    o.vae_tile = 4;
    o.vae_budget_bytes = 1;  // nothing fits: tiles of 4 x 4 latents are planned, then refused...
    Pipeline refuse(tiny_model(), o);
    CHECK(has(error_of([&] { refuse.plan_decode(2, 7, 10); }), "VAE decode of one 4x4 latent tile needs"));
    // ...so give the budget exactly what one tile needs: the whole batch and one image are over it.
    const sd::VaeDecodePlan tile = [&] {
        PipelineOptions big = f32_options();
        Pipeline probe(tiny_model(), big);
        return probe.plan_decode(1, 4, 4);
    }();
    o.vae_budget_bytes = tile.activation_bytes;
    Pipeline tiled(tiny_model(), o);
    const sd::VaeDecodePlan vp = tiled.plan_decode(2, 7, 10);
    CHECK(vp.mode == sd::VaeDecodePlan::Mode::tiled);
    CHECK(vp.tiles == 3 * 4);
    CHECK(vp.activation_bytes == tile.activation_bytes);
    CHECK(vp.whole_batch_bytes > vp.activation_bytes);
    const std::vector<float> img = tiled.decode(read_f32(f, "tiled.z"), 2, 7, 10);
    const double e = rel_error(img, read_f32(f, "tiled.image"));
    MESSAGE("tiled decode rel. error ", e);
    CHECK(e <= 1e-5);
    // Per image when one image fits but the batch does not: the same pixels as the whole batch.
    PipelineOptions one = f32_options();
    Pipeline whole(tiny_model(), one);
    const sd::VaeDecodePlan single = whole.plan_decode(1, 7, 10);
    one.vae_budget_bytes = single.activation_bytes;
    Pipeline per_image(tiny_model(), one);
    CHECK(per_image.plan_decode(2, 7, 10).mode == sd::VaeDecodePlan::Mode::per_image);
    CHECK(per_image.decode(read_f32(f, "tiled.z"), 2, 7, 10) == whole.decode(read_f32(f, "tiled.z"), 2, 7, 10));
}

TEST_CASE("pipeline: the UNet at odd latent sides matches diffusers (sizes that are multiples of 8 pixels)") {
    const gl::io::SafetensorsFile f(golden("sampler/pipeline.safetensors"));
    gl::Graph g;
    nn::Weights w(g, gl::DType::f32);
    const gl::ValueId x = g.input("x", gl::DType::f32, gl::Shape::of(f.info("unet_odd.x").shape));
    const gl::ValueId t = g.input("t", gl::DType::f32, {2});
    const gl::ValueId ctx = g.input("context", gl::DType::f32, gl::Shape::of(f.info("unet_odd.context").shape));
    const gl::ValueId eps = sd::unet_forward(w, sd::UnetConfig::tiny(), x, t, ctx);
    g.mark_output(eps);
    auto rt = gl::make_cpu_runtime(gl::make_plan(g));
    const gl::io::SafetensorsFile weights(golden("unet/unet_diffusers.safetensors"));
    sd::load_unet(w, sd::UnetConfig::tiny(), weights, *rt);
    rt->write_f32(x, read_f32(f, "unet_odd.x"));
    rt->write_f32(t, read_f32(f, "unet_odd.t"));
    rt->write_f32(ctx, read_f32(f, "unet_odd.context"));
    rt->run();
    CHECK(g.shape(eps) == gl::Shape{2, 7, 5, 4});
    const double e = rel_error(rt->read_f32(eps), read_f32(f, "unet_odd.eps"));
    MESSAGE("UNet at 7x5 latents rel. error ", e);
    CHECK(e <= 1e-5);
    // The pipeline takes such sizes end to end (tiny: 2-pixel multiples; SD1.5: 8).
    Pipeline pipe(tiny_model(), f32_options());
    GenerationParams p;
    p.prompt = "x";
    p.width = 18;
    p.height = 14;
    p.steps = 2;
    const auto img = pipe.generate(p);
    CHECK(img.at(0).width == 18);
    CHECK(img.at(0).height == 14);
}

TEST_CASE("pipeline: LoRA multiplier 0 gives the base image bit for bit, other multipliers change it") {
    GenerationParams p;
    p.prompt = "a red fox";
    p.negative = "blurry";
    p.width = p.height = 16;
    p.steps = 4;
    p.seed = 5;
    p.sampler = diffusion::SamplerOptions::diffusers_sd15(diffusion::SamplerKind::euler_ancestral);
    auto image = [&](std::vector<sd::LoraFile> loras, bool merged) {
        PipelineOptions o = f32_options();
        o.loras = std::move(loras);
        o.merge_loras = merged;
        Pipeline pipe(tiny_model(), o);
        return pipe.generate(p).at(0).pixels;
    };
    const auto base = image({}, false);
    const std::string a = golden("sampler/lora_a.safetensors"), b = golden("sampler/lora_b.safetensors");
    CHECK(image({{a, 0.0f}}, false) == base);
    CHECK(image({{a, 0.0f}, {b, 0.0f}}, false) == base);
    CHECK(image({{a, 0.0f}}, true) == base);
    CHECK(image({{a, 0.8f}}, false) != base);
}

TEST_CASE("pipeline: images do not depend on the batch they are made in, seeds change them") {
    PipelineOptions o = f32_options();
    Pipeline pipe(tiny_model(), o);
    GenerationParams p;
    p.prompt = "a lighthouse";
    p.width = 16;
    p.height = 20;
    p.steps = 3;
    p.seed = 40;
    p.batch = 2;
    p.sampler = diffusion::SamplerOptions::kohya(diffusion::SamplerKind::euler_ancestral);
    const auto two = pipe.generate(p);
    REQUIRE(two.size() == 2);
    p.batch = 1;
    p.seed = 41;
    const auto one = pipe.generate(p);
    CHECK(one.at(0).width == 16);
    CHECK(one.at(0).height == 20);
    CHECK(one.at(0).pixels == two.at(1).pixels);
    CHECK(two.at(0).pixels != two.at(1).pixels);
}

TEST_CASE("pipeline: to_images rounds 255 v half to even, as NumPy's round, clamping to [0, 1]") {
    // Every tie k + 0.5 (and its neighbouring floats), the ends, values out of range, and a sweep.
    std::vector<float> px;
    for (int k = 0; k < 255; k++) {
        const float tie = (float(k) + 0.5f) / 255.0f;
        px.insert(px.end(), {tie, std::nextafter(tie, 0.0f), std::nextafter(tie, 1.0f), float(k) / 255.0f});
    }
    px.insert(px.end(), {0.0f, 1.0f, -0.0f, -1e-7f, -3.0f, 1.0000001f, 7.0f, 1e-30f});
    for (int i = 0; i <= 100000; i++) px.push_back(float(i) / 100000.0f);
    while (px.size() % 3) px.push_back(0.5f);
    const int w = int(px.size() / 3);
    const auto im = sd::to_images(px, 1, 1, w);
    REQUIRE(im.size() == 1);
    size_t bad = 0;
    for (size_t i = 0; i < px.size(); i++) {
        const double want = std::nearbyint(double(std::clamp(px[i], 0.0f, 1.0f) * 255.0f));
        if (im[0].pixels[i] != uint8_t(want)) bad++;
    }
    CHECK(bad == 0);
}

TEST_CASE("pipeline: profiling times every graph of a request and leaves the images unchanged") {
    GenerationParams p;
    p.prompt = "a lighthouse";
    p.width = p.height = 16;
    p.steps = 3;
    p.seed = 5;
    Pipeline pipe(tiny_model(), f32_options());
    CHECK(has(pipe.profile_report(p), "no graph of this request ran profiled"));
    const auto want = pipe.generate(p);
    pipe.set_profiling(true);
    const auto got = pipe.generate(p);
    pipe.generate(p);
    pipe.set_profiling(false);
    CHECK(got.at(0).pixels == want.at(0).pixels);
    const std::string r = pipe.profile_report(p, 5);
    // The text encoder runs once per generation, the UNet once per step (Euler: one call a step).
    INFO(r);
    auto runs_of = [](const std::string& report, const std::string& graph) {
        const size_t at = report.find("== " + graph);
        if (at == std::string::npos) return -1;
        const size_t colon = report.find(": ", at);
        return std::stoi(report.substr(colon + 2));
    };
    CHECK(runs_of(r, "text n2 ") == 2);
    CHECK(runs_of(r, "unet b2 ") == 6);
    CHECK(runs_of(r, "vae b1 ") == 2);
    CHECK(has(r, "conv2d"));
    pipe.generate(p);  // profiling off: the counts stay
    CHECK(runs_of(pipe.profile_report(p), "unet b2 ") == 6);
    pipe.reset_profile();
    CHECK(has(pipe.profile_report(p), "no graph of this request ran profiled"));
}

TEST_CASE("pipeline: a larger request lays the memory out again, reserve() plans ahead") {
    GenerationParams small, big;
    small.prompt = big.prompt = "a lighthouse";
    small.width = small.height = 16;
    big.width = 24;
    big.height = 32;
    small.steps = big.steps = 2;
    big.batch = 2;
    big.seed = 3;
    Pipeline fresh(tiny_model(), f32_options());
    const auto want = fresh.generate(big);
    Pipeline grown(tiny_model(), f32_options());
    grown.generate(small);
    CHECK(grown.generate(big).at(1).pixels == want.at(1).pixels);  // reloaded into the larger memory
    Pipeline planned(tiny_model(), f32_options());
    planned.reserve({small, big});
    planned.generate(small);
    CHECK(planned.generate(big).at(0).pixels == want.at(0).pixels);
}

TEST_CASE("pipeline: plan report and refusals") {
    PipelineOptions o = f32_options();
    Pipeline pipe(tiny_model(), o);
    GenerationParams p;
    p.prompt = "x";
    p.width = p.height = 16;
    const std::string plan = pipe.plan_report(p);
    CHECK(has(plan, "memory plan (f32, cpu): 16x16, batch 1 with CFG"));
    CHECK(has(plan, "UNet           weights"));
    CHECK(has(plan, "(unet b2 8x8 l77)"));
    CHECK(has(plan, "(text n2 chunks1)"));
    CHECK(has(plan, "in one shared memory"));
    CHECK(has(plan, "VAE decoder    weights"));
    CHECK(has(plan, "whole batch at once"));

    GenerationParams bad = p;
    bad.width = 17;
    CHECK(has(error_of([&] { pipe.validate(bad); }), "width 17 must be a multiple of 2"));
    bad = p;
    bad.steps = 0;
    CHECK(has(error_of([&] { pipe.validate(bad); }), "steps 0 must be in [1, 1000]"));
    bad = p;
    bad.batch = 0;
    CHECK(has(error_of([&] { pipe.generate(bad); }), "batch 0 must be in [1, 64]"));
    bad = p;
    bad.cfg_scale = NAN;
    CHECK(has(error_of([&] { pipe.validate(bad); }), "CFG scale nan must be in [0, 1000]"));
    bad.cfg_scale = 1e39;
    CHECK(has(error_of([&] { pipe.validate(bad); }), "CFG scale 1e+39 must be in [0, 1000]"));
    bad = p;
    bad.width = 2056;
    CHECK(has(error_of([&] { pipe.validate(bad); }), "width 2056 must be a multiple of 2 in [2, 2048]"));

    PipelineOptions lo = f32_options();
    lo.loras = {{"/nonexistent/lora.safetensors", 1.0f}};
    CHECK(has(error_of([&] { Pipeline(tiny_model(), lo); }), "/nonexistent/lora.safetensors"));
    lo.loras = {{golden("sampler/text_encoder.safetensors"), 1.0f}};  // not a LoRA
    CHECK(has(error_of([&] { Pipeline(tiny_model(), lo); }), "holds no LoRA down matrices"));
    lo.loras = {{golden("sampler/lora_a.safetensors"), NAN}};
    CHECK(has(error_of([&] { Pipeline(tiny_model(), lo); }), "multiplier nan is not finite"));
    PipelineOptions skip = f32_options();
    skip.clip_skip = 3;
    CHECK(has(error_of([&] { Pipeline(tiny_model(), skip); }), "clip_skip 3 must be in [1, 2]"));
}

TEST_CASE("pipeline: a request over the memory budget is refused before allocating, naming the sizes that fit") {
    GenerationParams small, big;
    small.prompt = big.prompt = "a lighthouse";
    small.steps = big.steps = 1;
    small.width = small.height = 16;
    big.width = 64;
    big.height = 32;
    small.batch = big.batch = 2;
    Pipeline probe(tiny_model(), f32_options());
    const size_t budget = probe.memory_needed(small);
    REQUIRE(budget < probe.memory_needed(big));
    const std::string plan = probe.plan_report(small);
    CHECK(has(plan, "available on the host (MemAvailable, or a cgroup's limit less its use)"));

    PipelineOptions o = f32_options();
    o.memory_limit = budget;  // exactly what the small request needs
    Pipeline pipe(tiny_model(), o);
    CHECK(has(pipe.plan_report(big), "of the memory limit (over it: refused)"));
    const Pipeline::Fits f = pipe.largest_fitting(big, budget);
    REQUIRE(f.smaller_size.has_value());
    const GenerationParams& fit = *f.smaller_size;
    // The same batch and aspect ratio, within the budget; one step larger is over it.
    CHECK(fit.batch == 2);
    auto half = [](int w) { return std::max(8, (w / 2 + 4) / 8 * 8); };  // to the nearest multiple of 8
    CHECK(fit.height == half(fit.width));
    CHECK(fit.width >= small.width);
    CHECK(pipe.memory_needed(fit) <= budget);
    GenerationParams next = fit;
    next.width += 8;
    next.height = half(next.width);
    CHECK(pipe.memory_needed(next) > budget);
    if (f.smaller_batch) {
        CHECK(f.smaller_batch->width == big.width);
        CHECK(pipe.memory_needed(*f.smaller_batch) <= budget);
    }
    const std::string e = error_of([&] { pipe.generate(big); });
    CHECK(has(e, gl::cat("memory: 64x32 at batch 2 with CFG needs ")));
    CHECK(has(e, gl::cat("of the memory limit; the largest that fits: ", fit.width, "x", fit.height,
                         " at batch 2 with CFG")));
    // What fits still runs after the refusal (the refused request's plans are forgotten), twice.
    CHECK(pipe.generate(small).size() == 2);
    CHECK(pipe.generate(fit).size() == 2);
    CHECK(has(error_of([&] { pipe.reserve({small, big}); }), "memory: 64x32 at batch 2 with CFG needs"));

    // Under the weights alone nothing fits.
    o.memory_limit = 1024;
    Pipeline none(tiny_model(), o);
    CHECK(has(error_of([&] { none.generate(small); }),
              "of the memory limit; no smaller size fits either (the weights alone take "));
}

TEST_CASE("pipeline: A1111 infotext") {
    GenerationParams p;
    p.prompt = "masterpiece, a cat";
    p.negative = "lowres";
    p.width = 512;
    p.height = 768;
    p.steps = 20;
    p.cfg_scale = 7.0;
    p.sampler = diffusion::SamplerOptions::diffusers_sd15(diffusion::SamplerKind::dpmpp_2m);
    p.sampler.karras = true;
    sd::InfotextFields f;
    f.model_name = "my model, v2";
    f.loras = {{"style", 0.8f}};
    f.clip_skip = 2;
    f.version = "gl-txt2img 0.1.0";
    CHECK(sd::a1111_infotext(p, 1234, f) ==
          "masterpiece, a cat <lora:style:0.8>\nNegative prompt: lowres\nSteps: 20, Sampler: DPM++ 2M Karras, CFG scale: 7, "
          "Seed: 1234, Size: 512x768, Model: \"my model, v2\", Clip skip: 2, Version: gl-txt2img 0.1.0");
    p.negative.clear();
    p.cfg_scale = 7.5;
    p.sampler = diffusion::SamplerOptions::kohya(diffusion::SamplerKind::ddim);
    p.sampler.eta = 0.5;
    CHECK(sd::a1111_infotext(p, 7, {}) ==
          "masterpiece, a cat\nSteps: 20, Sampler: DDIM, CFG scale: 7.5, Seed: 7, Size: 512x768, Eta DDIM: 0.5");
}

