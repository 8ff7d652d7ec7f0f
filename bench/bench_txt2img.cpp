// bench_txt2img: our side of the text-to-image comparison (bench/txt2img_round.sh runs both sides;
// bench/txt2img_torch.py is diffusers'). A plain program, built by `ninja bench_txt2img`.
//
//   bench_txt2img MODEL [--size 512] [--steps 20] [--cfg 7.5] [--sampler euler] [--batch 1] [--runs 5]
//       seconds per image (text encoder + every UNet call + VAE decode, median of the runs after two
//       warm-up generations) and UNet iterations per second (model calls after the first over the
//       time between them; with CFG each is a batch of 2 per image), one JSON line per configuration.
//       --profile N: then N more generations with every node timed (eagerly), and where the
//       time went in each graph (text encoder, UNet, VAE decode).
//   bench_txt2img MODEL --check REF.safetensors
//       the request txt2img_torch.py reference made, from its noise, in bf16: the image against
//       diffusers' fp32 image; passes (exit 0) within 3x diffusers' own bf16 spread (at least 4e-3;
//       --dtype f32: within 1e-4).
//   bench_txt2img --plan-only [--size 512,1024] [--batch 1,4] [--vae-budget MIB]
//       the memory plans of SD1.5 requests (bf16) without weights or a GPU, with the VAE decode mode
//       each gets under the budget (default 2048 MiB, as gl-txt2img's).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "ggml-lite/core/error.h"
#include "ggml-lite/core/runtime.h"
#include "ggml-lite/io/safetensors.h"
#include "models/model_files.h"
#include "pipelines/pipeline.h"
#include "tools/common/cli.h"
#include "tools/common/request_json.h"

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

struct Options {
    std::string model, check;
    bool v2 = false;  // an SD2.x model (the family opens it)
    std::vector<int> sizes = {512}, batches = {1};
    int steps = 20, runs = 5, profile = 0;
    double cfg = 7.5, vae_budget_mib = 2048;
    std::string sampler = "euler", dtype = "bf16";
    gl::Backend backend = gl::Backend::cuda;
    std::vector<std::string> loras;
    bool merge = false, plan_only = false;
};

Options parse(int argc, char** argv) {
    Options o;
    gl::cli::Parser p("bench_txt2img", "bench_txt2img: our side of the text-to-image comparison (seconds per image, "
                                       "UNet it/s), the full-size check against diffusers, or SD1.5's memory plans");
    CLI::App& app = p.app();
    app.add_option("MODEL", o.model, "SD1.5 single file or diffusers folder (not with --plan-only)");
    p.add_int_list("--size", o.sizes, 8, 8192, "image sides (square)");
    p.add_int_list("--batch", o.batches, 1, 64, "images per request");
    p.add_int("--steps", o.steps, 1, 1000, "sampling steps");
    p.add_int("--runs", o.runs, 1, 1000, "timed generations after two warm-up ones (the median is printed)");
    p.add_int("--profile", o.profile, 1, 1000, "N more generations timed node by node, then where the time went");
    p.add_real("--cfg", o.cfg, 0.0, 1000.0, "CFG scale");
    app.add_option("--sampler", o.sampler, "sampler (kohya's names)")->capture_default_str();
    p.add_backend(o.backend);
    p.add_choice("--dtype", o.dtype, {"bf16", "f16", "f32"}, "weights and activations");
    app.add_option("--lora", o.loras, "LoRA file FILE[:MULT] (repeatable)");
    p.add_flag("--merge-lora", o.merge, "merge the LoRAs into the weights");
    p.add_flag("--v2", o.v2, "an SD2.x model (sdtrain's --v2)");
    p.add_path("--check", o.check, "reference from txt2img_torch.py reference: compare instead of timing");
    p.add_real("--vae-budget", o.vae_budget_mib, 1.0, 1e7, "MiB of activations one VAE decode pass may plan");
    p.add_flag("--plan-only", o.plan_only, "print SD1.5's memory plans (no weights, no GPU) and exit");
    p.parse(argc, argv);
    if (!o.plan_only && o.model.empty()) throw gl::cli::UsageError("MODEL is required (unless --plan-only)");
    return o;
}

gl::DType dtype_of(const std::string& s) {
    if (s == "bf16") return gl::DType::bf16;
    if (s == "f16") return gl::DType::f16;
    if (s == "f32") return gl::DType::f32;
    gl::fail("--dtype must be bf16, f16 or f32, got '", s, "'");
}

sd::GenerationParams request(const Options& o, int size, int batch) {
    sd::GenerationParams p;
    p.prompt = "a photograph of an astronaut riding a horse on the moon, detailed, 8k";
    p.negative = "blurry, lowres, watermark";
    p.width = p.height = size;
    p.steps = o.steps;
    p.cfg_scale = o.cfg;
    p.batch = batch;
    p.seed = 1;
    const diffusion::SamplerName n = diffusion::parse_sampler_name(o.sampler);
    p.sampler = diffusion::SamplerOptions::diffusers_sd15(n.kind);
    p.sampler.karras = n.karras;
    return p;
}

models::ModelFiles open_model(const Options& o) {
    return (o.v2 ? models::sd2_family() : models::sd15_family()).open(o.model);
}

// SD1.5's configs with no weights behind them: enough to plan.
models::ModelFiles plan_only_model() {
    models::ModelFiles f;
    f.family = &models::sd15_family();
    f.config = f.family->config();
    f.vae_cfg = std::make_shared<const sd::VaeConfig>(sd::VaeConfig::sd15());
    f.tokenizer = std::shared_ptr<const sd::ClipTokenizer>(&sd::ClipTokenizer::builtin(), [](const sd::ClipTokenizer*) {});
    return f;
}

int plan_only(const Options& o) {
    sd::PipelineOptions po;
    po.backend = gl::Backend::cpu;  // the CUDA scratch is not known without a CUDA build; the arenas are the same
    po.dtype = dtype_of(o.dtype);
    po.vae_budget_bytes = size_t(o.vae_budget_mib * 1048576.0);
    sd::Pipeline pipe(plan_only_model(), po);
    for (int size : o.sizes)
        for (int batch : o.batches) {
            std::printf("\n== SD1.5 %dx%d, batch %d, %s ==\n", size, size, batch, o.dtype.c_str());
            std::fputs(pipe.plan_report(request(o, size, batch)).c_str(), stdout);
        }
    return 0;
}

int check(const Options& o) {
    const gl::io::SafetensorsFile ref(o.check);
    const nlohmann::json r = nlohmann::json::parse(ref.metadata().at("request"));
    const sd::GenerationParams p = gl::cli::request_from_json(r);
    auto read = [&](const char* k) {
        std::vector<float> v(size_t(ref.info(k).numel()));
        ref.read(k, v.data(), gl::DType::f32);
        return v;
    };
    sd::PipelineOptions po;
    po.backend = o.backend;
    po.dtype = dtype_of(o.dtype);
    sd::Pipeline pipe(open_model(o), po);
    const std::vector<float> noise = read("noise"), want = read("image_fp32"), theirs = read("image_bf16");
    const auto t0 = Clock::now();
    const std::vector<float> got = pipe.generate_pixels(p, &noise);
    double d2 = 0, r2 = 0, dt2 = 0, worst = 0;
    for (size_t i = 0; i < want.size(); i++) {
        d2 += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
        dt2 += (double(theirs[i]) - want[i]) * (double(theirs[i]) - want[i]);
        r2 += double(want[i]) * want[i];
        worst = std::max(worst, std::abs(double(got[i]) - want[i]));
    }
    const double rel = std::sqrt(d2 / r2), spread = r.at("spread").get<double>();
    // f32: both sides compute in fp32 (only summation order differs); bf16: as gl-sd15check.
    const double tol = po.dtype == gl::DType::f32 ? 1e-4 : std::max(3 * spread, 4e-3);
    std::printf("txt2img check (%s, %s, %dx%d, %d %s steps, CFG %g): image rel %.3e (diffusers bf16 %.3e from its "
                "fp32; tolerance %.3e), max abs %.3e, %.1f s: %s\n",
                gl::backend_name(o.backend), o.dtype.c_str(), p.width, p.height, p.steps, r.at("sampler").get<std::string>().c_str(),
                p.cfg_scale, rel, std::sqrt(dt2 / r2), tol, worst, since(t0), rel <= tol ? "ok" : "FAIL");
    return rel <= tol ? 0 : 1;
}

int bench(const Options& o) {
    sd::PipelineOptions po;
    po.backend = o.backend;
    po.dtype = dtype_of(o.dtype);
    for (const std::string& l : o.loras) {
        const gl::cli::LoraArg arg = gl::cli::parse_lora_arg(l);
        po.loras.push_back({arg.path, arg.multiplier});
    }
    po.merge_loras = o.merge;
    auto t0 = Clock::now();
    sd::Pipeline pipe(open_model(o), po);
    std::vector<sd::GenerationParams> all;
    for (int size : o.sizes)
        for (int batch : o.batches) all.push_back(request(o, size, batch));
    pipe.reserve(all);
    std::fprintf(stderr, "loaded in %.1f s\n", since(t0));
    for (const sd::GenerationParams& p : all) {
        std::fputs(pipe.plan_report(p).c_str(), stderr);
        for (int w = 0; w < 2; w++) pipe.generate(p);  // eager, then captured: the timed runs replay
        std::vector<double> per_image, rates, decode_ms;
        for (int r = 0; r < o.runs; r++) {
            Clock::time_point first{}, last{};
            int calls = 0;
            const auto start = Clock::now();
            pipe.generate(p, nullptr, [&](int k, int n) {
                if (k == 1) first = Clock::now();
                last = Clock::now();
                calls = n;
            });
            const double total = since(start);
            per_image.push_back(total / p.batch);
            rates.push_back(double(calls - 1) / std::chrono::duration<double>(last - first).count());
            decode_ms.push_back(since(last) * 1e3);  // after the last model call: the VAE decode and PNG-free tail
        }
        std::sort(per_image.begin(), per_image.end());
        std::sort(rates.begin(), rates.end());
        std::sort(decode_ms.begin(), decode_ms.end());
        const size_t m = per_image.size() / 2;
        std::printf("{\"side\": \"ggml-lite %s\", \"size\": %d, \"steps\": %d, \"cfg\": %g, \"sampler\": \"%s\", "
                    "\"batch\": %d, \"loras\": %zu, \"merged\": %s, \"seconds_per_image\": %.4f, \"unet_it_s\": %.2f, "
                    "\"vae_decode_ms\": %.1f}\n",
                    o.dtype.c_str(), p.width, p.steps, p.cfg_scale, o.sampler.c_str(), p.batch, o.loras.size(),
                    o.merge ? "true" : "false", per_image[m], rates[m], decode_ms[m]);
        if (o.profile > 0) {
            pipe.reset_profile();
            pipe.set_profiling(true);
            for (int r = 0; r < o.profile; r++) pipe.generate(p);
            pipe.set_profiling(false);
            std::printf("%s", pipe.profile_report(p, 30).c_str());
        }
    }
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    std::setvbuf(stdout, nullptr, _IOLBF, 0);
    return gl::cli::run_main("bench_txt2img", [&] {
        const Options o = parse(argc, argv);
        if (o.plan_only) return plan_only(o);
        if (!o.check.empty()) return check(o);
        return bench(o);
    });
}
