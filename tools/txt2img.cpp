// gl-txt2img: images from an SD1.5 checkpoint (single file or diffusers folder) with zero or more
// LoRA / LoCon files, from --prompt flags or a kohya sample-prompt file (pipelines/pipeline.h,
// models/diffusion/sampler.h, sampler_prompts.h). Every image is a PNG named NNNNN-SEED.png (numbering continues
// after what the output folder holds) carrying its generation parameters in A1111's "parameters"
// text chunk; --grid adds one grid of the run (a row per prompt). The memory plan of the largest
// request is printed before anything runs; requests over the GPU's free memory, the host's
// available memory on the CPU, or --memory-limit, are refused before anything is allocated,
// naming the largest size and batch that fit. Flags and prompt files share diffusion::kSampleBounds.
//
// Exit status (tools/common/cli.h): 0 done, 2 a bad command line, 1 an error (bad file, size,
// sampler, CUDA failure), each error on one line naming the culprit.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "data/png_file.h"
#include "ggml-lite/core/autofit.h"
#include "ggml-lite/core/error.h"
#include "ggml-lite/core/runtime.h"
#include "models/diffusion/sampler_prompts.h"
#include "models/model_files.h"
#include "pipelines/a1111.h"
#include "pipelines/pipeline.h"
#include "pipelines/sample_prompt_files.h"
#include "tools/common/cli.h"

#ifndef GL_VERSION
#define GL_VERSION "unknown"
#endif

namespace fs = std::filesystem;

namespace {

struct Args {
    std::string model;
    std::vector<std::string> loras;
    bool merge_loras = false;
    std::vector<std::string> prompts;
    std::string negative, prompt_file;
    std::string sampler = "euler_a", sampler_config = "diffusers";
    double eta = 0.0;
    int steps = 20;
    double cfg = 7.5;
    std::optional<uint64_t> seed;  // none: random
    int width = 512, height = 512, batch = 1, clip_skip = 1;
    std::string out = "outputs";
    bool grid = false, plan_only = false, prefer_fp16 = false;
    bool v2 = false, v_prediction = false;  // the SD2.x family; a v-prediction model (SD2.x 768-v)
    gl::Backend backend = gl::Backend::automatic;
    std::string dtype = "auto";
    double vae_budget_mib = 2048;
    std::optional<size_t> memory_limit;  // none: what is free
};

// One request of the run and where it came from (for messages).
struct Request {
    sd::GenerationParams p;
    std::string where;
};

// --seed: -1 (random) or any uint64, as a prompt file's --d.
std::optional<uint64_t> parse_seed(const std::string& text) {
    if (text == "-1") return std::nullopt;
    return gl::cli::parse_int<uint64_t>("--seed", text, 0, std::numeric_limits<uint64_t>::max());
}

std::optional<size_t> parse_limit(const std::string& text) {
    const size_t bytes = gl::parse_bytes(text);
    GL_CHECK(bytes > 0, "a limit of 0 bytes fits nothing, got '", text, "'");
    return bytes;
}

uint64_t random_seed() {
    std::random_device rd;
    return uint64_t(rd());  // 32 bits, as A1111's seeds
}

diffusion::SamplerOptions sampler_of(const std::string& name, const Args& a) {
    const diffusion::SamplerName n = diffusion::parse_sampler_name(name);
    diffusion::SamplerOptions o = a.sampler_config == "kohya" ? diffusion::SamplerOptions::kohya(n.kind)
                                                      : diffusion::SamplerOptions::diffusers_sd15(n.kind);
    o.karras = n.karras;
    if (n.kind.def().takes_eta) o.eta = a.eta;
    if (a.v_prediction) o.prediction = diffusion::Prediction::v_prediction;
    o.validate();
    return o;
}

std::vector<Request> requests_of(const Args& a) {
    diffusion::SamplePrompt defaults = diffusion::kohya_prompt_defaults();
    defaults.negative = a.negative;
    defaults.width = a.width;
    defaults.height = a.height;
    defaults.steps = a.steps;
    defaults.cfg_scale = a.cfg;
    defaults.seed = a.seed;
    std::vector<diffusion::SamplePrompt> prompts;
    if (!a.prompt_file.empty()) {
        prompts = sd::read_sample_prompt_file(a.prompt_file, defaults);
    } else {
        for (const std::string& text : a.prompts) {
            diffusion::SamplePrompt p = defaults;
            p.prompt = text;
            diffusion::validate_prompt(p, "--prompt '" + text + "'");
            prompts.push_back(p);
        }
    }
    std::vector<Request> out;
    for (size_t i = 0; i < prompts.size(); i++) {
        const diffusion::SamplePrompt& sp = prompts[i];
        Request r;
        r.where = sp.where.empty() ? gl::cat("prompt ", i + 1) : sp.where;
        r.p.prompt = sp.prompt;
        r.p.negative = sp.negative;
        r.p.width = sp.width;
        r.p.height = sp.height;
        r.p.steps = sp.steps;
        r.p.cfg_scale = sp.cfg_scale;
        r.p.batch = a.batch;
        r.p.seed = sp.seed ? *sp.seed : random_seed();
        try {
            r.p.sampler = sampler_of(sp.sampler.empty() ? a.sampler : sp.sampler, a);
        } catch (const gl::Error& e) {
            gl::fail(r.where, ": ", e.what());
        }
        out.push_back(std::move(r));
    }
    return out;
}

// The first free number after `prefix` in dir's file names ("00042-..." or "grid-00003...").
int next_index(const fs::path& dir, const std::string& prefix) {
    int next = 0;
    for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
        const std::string n = e.path().filename().string();
        const size_t p = prefix.size();
        if (n.size() > p + 5 && n.compare(0, p, prefix) == 0 &&
            std::all_of(n.begin() + ptrdiff_t(p), n.begin() + ptrdiff_t(p + 5), [](char c) { return c >= '0' && c <= '9'; }))
            next = std::max(next, std::stoi(n.substr(p, 5)) + 1);
    }
    return next;
}

// prefix + the index in five digits + suffix: "00042-1234.png".
std::string numbered(const char* prefix, int index, const std::string& suffix) {
    char n[16];
    std::snprintf(n, sizeof n, "%05d", index);
    return prefix + std::string(n) + suffix;
}

std::string model_name(const std::string& path) {
    fs::path p(path);
    while (!p.empty() && p.filename().empty()) p = p.parent_path();  // "folder/" names the folder
    return p.stem().string();
}

int run(const Args& a) {
    const gl::Backend backend = gl::resolve_backend(a.backend);  // cuda without a GPU: an error saying why
    sd::PipelineOptions po;
    po.backend = backend;
    po.dtype = a.dtype == "auto" ? (backend == gl::Backend::cuda ? gl::DType::bf16 : gl::DType::f32)
               : a.dtype == "bf16" ? gl::DType::bf16
               : a.dtype == "f16"  ? gl::DType::f16
                                   : gl::DType::f32;
    po.clip_skip = a.clip_skip;
    po.merge_loras = a.merge_loras;
    po.vae_budget_bytes = size_t(a.vae_budget_mib * 1048576.0);
    po.memory_limit = a.memory_limit;
    for (const std::string& l : a.loras) {
        const gl::cli::LoraArg arg = gl::cli::parse_lora_arg(l);
        po.loras.push_back({arg.path, arg.multiplier});
    }

    const std::vector<Request> reqs = requests_of(a);
    using Clock = std::chrono::steady_clock;
    auto t0 = Clock::now();
    const models::Family& family = a.v2 ? models::sd2_family() : models::sd15_family();
    models::ModelFiles files = family.open(a.model, a.prefer_fp16);
    std::printf("model %s (%s)\n", a.model.c_str(), models::layout_name(files.layout));
    for (const sd::LoraFile& l : po.loras)
        std::printf("LoRA %s at %g (%s)\n", l.path.c_str(), double(l.multiplier), a.merge_loras ? "merged" : "runtime");
    sd::Pipeline pipe(std::move(files), po);
    for (const Request& r : reqs) {
        try {
            pipe.validate(r.p);
        } catch (const gl::Error& e) {
            gl::fail(r.where, ": ", e.what());
        }
    }
    const Request& biggest = *std::max_element(reqs.begin(), reqs.end(), [](const Request& x, const Request& y) {
        return int64_t(x.p.width) * x.p.height * x.p.batch < int64_t(y.p.width) * y.p.height * y.p.batch;
    });
    std::fputs(pipe.plan_report(biggest.p).c_str(), stdout);
    if (a.plan_only) return 0;

    std::vector<sd::GenerationParams> all;
    for (const Request& r : reqs) all.push_back(r.p);
    pipe.reserve(all);
    std::printf("loaded in %.1f s (%s, %s)\n", std::chrono::duration<double>(Clock::now() - t0).count(),
                gl::backend_name(backend), gl::dtype_name(po.dtype));

    fs::create_directories(a.out);
    int index = next_index(a.out, "");
    sd::InfotextFields info;
    info.model_name = model_name(a.model);
    for (const sd::LoraFile& l : po.loras) info.loras.push_back({fs::path(l.path).stem().string(), l.multiplier});
    info.clip_skip = a.clip_skip;
    info.version = "gl-txt2img " GL_VERSION;
    std::vector<data::Bitmap> grid;
    std::string grid_text;
    for (size_t i = 0; i < reqs.size(); i++) {
        const sd::GenerationParams& p = reqs[i].p;
        std::printf("[%zu/%zu] %s: %dx%d, %d steps, %s, CFG %g, seed %llu, batch %d\n", i + 1, reqs.size(),
                    reqs[i].where.c_str(), p.width, p.height, p.steps,
                    diffusion::a1111_sampler_name(p.sampler.kind, p.sampler.karras).c_str(), p.cfg_scale,
                    (unsigned long long)p.seed, p.batch);
        t0 = Clock::now();
        Clock::time_point t_unet0{}, t_unet1{};
        const std::vector<data::Bitmap> images = pipe.generate(p, nullptr, [&](int k, int calls) {
            if (k == 1) t_unet0 = Clock::now();
            if (k == calls) t_unet1 = Clock::now();
        });
        const double total = std::chrono::duration<double>(Clock::now() - t0).count();
        const int calls = diffusion::Sampler(p.sampler, p.steps).model_calls();
        const double unet_s = std::chrono::duration<double>(t_unet1 - t_unet0).count();
        for (size_t b = 0; b < images.size(); b++) {
            const uint64_t seed = p.seed + b;
            const std::string text = sd::a1111_infotext(p, seed, info);
            const fs::path file = fs::path(a.out) / numbered("", index, gl::cat("-", seed, ".png"));
            data::write_png(file.string(), images[b], {{"parameters", text}});
            std::printf("  %s\n", file.string().c_str());
            index++;
            if (a.grid) grid.push_back(images[b]);
            if (grid_text.empty()) grid_text = text;
        }
        std::printf("  %.2f s (%.2f s per image), UNet %.1f it/s%s\n", total, total / double(p.batch),
                    calls > 1 && unet_s > 0 ? double(calls - 1) / unet_s : 0.0,
                    p.cfg_scale > 1 ? " (each a batch of 2 with CFG)" : "");
    }
    if (a.grid && grid.size() > 1) {
        const fs::path file = fs::path(a.out) / numbered("grid-", next_index(a.out, "grid-"), ".png");
        data::write_png(file.string(), sd::make_grid(grid), {{"parameters", grid_text}});
        std::printf("grid %s\n", file.string().c_str());
    }
    return 0;
}

int parse_and_run(int argc, char** argv) {
    Args a;
    gl::cli::Parser cli("gl-txt2img", "gl-txt2img: images from an SD1.5 checkpoint with LoRA / LoCon files, from "
                                      "--prompt flags or a kohya sample-prompt file");
    CLI::App& app = cli.app();
    cli.add_path("MODEL", a.model, "SD1.5 checkpoint: single file (.safetensors / .ckpt) or diffusers folder");
    app.add_option("--lora", a.loras, "LoRA / LoCon file with its multiplier, FILE[:MULT] (repeatable; default 1)");
    cli.add_flag("--merge-lora", a.merge_loras, "merge the LoRAs into the weights once (faster steps) instead of "
                                                "running them beside every layer");
    auto* prompt = app.add_option("--prompt,-p", a.prompts, "a prompt (repeatable)");
    app.add_option("--negative,-n", a.negative, "negative prompt (a prompt file's --n overrides it)");
    auto* file = cli.add_path("--prompt-file", a.prompt_file,
                              "kohya sample-prompt file: one prompt per line with --n --w --h --d --l --s --ss");
    prompt->excludes(file);
    app.add_option("--sampler", a.sampler, "sampler (kohya's names): " + diffusion::supported_sampler_names())
        ->capture_default_str();
    cli.add_choice("--sampler-config", a.sampler_config, {"diffusers", "kohya"},
                   "scheduler configuration: diffusers (SD1.5's scheduler_config.json) or kohya (sd-scripts' samples)");
    cli.add_real("--eta", a.eta, 0.0, 1.0, "DDIM eta (0 deterministic)");
    const diffusion::SampleBounds& b = diffusion::kSampleBounds;  // the prompt file's bounds too
    cli.add_int("--steps", a.steps, b.steps_min, b.steps_max, "sampling steps");
    cli.add_real("--cfg", a.cfg, 0.0, b.cfg_max, "classifier-free guidance scale (<= 1: no negative pass)");
    cli.add_parsed("--seed", a.seed, &parse_seed, "INT",
                   "seed of the first image (image b uses seed + b), in [0, 2^64 - 1]; -1: random", "-1");
    cli.add_int("--width,-W", a.width, b.side_min, b.side_max, "width in pixels, a multiple of 8");
    cli.add_int("--height,-H", a.height, b.side_min, b.side_max, "height in pixels, a multiple of 8");
    cli.add_int("--batch,-b", a.batch, b.batch_min, b.batch_max, "images per prompt");
    cli.add_int("--clip-skip", a.clip_skip, 1, 12, "CLIP layers to skip from the end (kohya / A1111: 2 = penultimate)");
    cli.add_path("--out,-o", a.out, "output folder");
    cli.add_flag("--grid", a.grid, "also write a grid of all images (as A1111 lays them out: round(sqrt(n)) rows, 4 -> 2x2, 6 -> 2x3)");
    cli.add_backend(a.backend);
    cli.add_choice("--dtype", a.dtype, {"auto", "bf16", "f16", "f32"},
                   "weights and activations: auto (bf16 on CUDA, f32 on the CPU), bf16, f16, f32");
    cli.add_real("--vae-budget", a.vae_budget_mib, 1.0, 1e7,
                 "MiB of activations one VAE decode pass may plan; over it the batch decodes image by image, then in "
                 "tiles");
    cli.add_parsed("--memory-limit", a.memory_limit, &parse_limit, "SIZE",
                   "the most memory the run may lay out (8G, 512M; never more than the GPU's free memory, or the "
                   "host's available memory on the CPU); a request over it is refused naming the sizes that fit");
    cli.add_flag("--prefer-fp16", a.prefer_fp16, "diffusers folders: read the .fp16 weight files when present");
    cli.add_flag("--v2", a.v2, "an SD2.x model (sdtrain's --v2)");
    cli.add_flag("--v-prediction", a.v_prediction, "a v-prediction model (SD2.x 768-v: with --v2)");
    cli.add_flag("--plan", a.plan_only, "print the memory plan and exit");
    cli.parse(argc, argv);
    if (a.prompts.empty() && a.prompt_file.empty()) throw gl::cli::UsageError("give --prompt or --prompt-file");
    return run(a);
}

}  // namespace

int main(int argc, char** argv) {
    std::setvbuf(stdout, nullptr, _IOLBF, 0);
    return gl::cli::run_main("gl-txt2img", [&] { return parse_and_run(argc, argv); });
}
