// bench_quant: what an 8-bit frozen base (core/quant.h: int8 or fp8 e4m3 codes with an f32 scale
// per output channel) costs the SD1.5 UNet and CLIP text encoder. Each format's model runs on the
// same fixed random inputs (latents, timestep, context; token ids) and its output is compared with
// the dense model in the same precision and with the f32 model: relative errors ||a - b|| / ||b||
// and max |a - b| / max |b|. Beside them: the frozen weights' planned MiB and the forward time
// (median of --runs). Weights: a checkpoint (an original single file or a diffusers folder, e.g.
// the full-size random model tests/golden/make_fullsize.py writes) or, with --random, bench_step's
// random UNet. --tiny runs the golden tests' tiny UNet on random weights (a CPU check of the flow).
// A plain program (no Google Benchmark); built by `ninja bench_quant`, not by `make bench`.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "bench/step_fixtures.h"
#include "ggml-lite/core/error.h"
#include "ggml-lite/core/planner.h"
#include "models/diffusion/noise.h"
#include "models/model_files.h"
#include "models/sd15/sd_config.h"
#include "tools/common/cli.h"
#include "train/step.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
    std::string model;  // "" with --random / --tiny
    bool v2 = false;    // an SD2.x model (the family opens it)
    bool random = false, tiny = false;
    gl::Backend backend = gl::Backend::automatic;
    train::Precision precision = train::Precision::bf16;
    std::vector<gl::WeightFormat> formats = {gl::WeightFormat::int8, gl::WeightFormat::fp8};
    int size = 512, batch = 1, runs = 10;
    bool f32_reference = true;
};

Options parse(int argc, char** argv) {
    Options o;
    gl::cli::Parser p("bench_quant", "bench_quant: the SD1.5 UNet's (and, from a checkpoint, the CLIP text encoder's) "
                                     "output on an 8-bit frozen base against the dense and f32 models, with the "
                                     "frozen weights' memory and the forward time.");
    p.app().add_option("MODEL", o.model, "an SD1.5 checkpoint: single file or diffusers folder");
    p.add_flag("--random", o.random, "random UNet weights instead of a checkpoint (no text encoder)");
    p.add_flag("--v2", o.v2, "an SD2.x model (sdtrain's --v2)");
    p.add_flag("--tiny", o.tiny, "the golden tests' tiny UNet on random weights (runs on the CPU)");
    p.add_backend(o.backend, "where the models run");
    p.add_parsed("--precision", o.precision, &train::parse_precision, "bf16|fp16|fp32", "compute dtype of the models",
                 train::precision_name(o.precision));
    p.add_parsed_list("--base-format", o.formats, &gl::parse_weight_format, "int8|fp8,...", "formats measured",
                      "int8,fp8");
    p.add_int("--size", o.size, 8, 4096, "image side in pixels (latents: side / 8; 64 with --tiny)");
    p.add_int("--batch", o.batch, 1, 64, "UNet batch");
    p.add_int("--runs", o.runs, 1, 1000, "timed forward passes per model");
    bool no_f32 = false;
    p.add_flag("--no-f32", no_f32, "skip the f32 reference model");
    p.parse(argc, argv);
    o.f32_reference = !no_f32;
    if (o.tiny && o.size == 512) o.size = 64;
    GL_CHECK(o.model.empty() == (o.random || o.tiny), "bench_quant: give a MODEL, or --random / --tiny");
    return o;
}


double mib(double bytes) { return bytes / (1024.0 * 1024.0); }

// One model in one (dtype, format): its output, frozen bytes and forward time.
struct Run {
    std::string label;
    std::vector<float> out;
    size_t frozen = 0;
    double ms = 0;
};

// Builds the graph with a weight store of (dtype, format), plans it, loads the weights, writes
// the inputs, runs it `runs` times and reads the output.
template <class Build, class Load, class Write>
Run run_model(const Options& o, const std::string& label, gl::DType dtype, gl::WeightFormat f, Build build, Load load,
              Write write) {
    gl::Graph g;
    nn::Weights w(g, dtype, f);
    const gl::ValueId out = build(w, g);
    g.mark_output(out);
    gl::Plan plan = gl::make_plan(g);
    Run r;
    r.label = label;
    r.frozen = plan.arena_bytes[size_t(gl::Category::frozen)];
    auto rt = gl::make_runtime(std::move(plan), o.backend);
    load(w, *rt);
    write(g, *rt);
    std::vector<double> ms;
    for (int k = 0; k <= o.runs; k++) {  // the first (eager, capturing) run is not timed
        const auto t0 = Clock::now();
        rt->run();
        rt->synchronize();
        if (k > 0) ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    }
    r.ms = bench::median(ms);
    r.out = rt->read_f32(out);
    return r;
}

// ||a - b|| / ||b|| and max |a - b| / max |b|.
std::pair<double, double> errors(const std::vector<float>& a, const std::vector<float>& b) {
    double d2 = 0, b2 = 0, dmax = 0, bmax = 0;
    for (size_t i = 0; i < a.size(); i++) {
        const double d = double(a[i]) - double(b[i]);
        d2 += d * d;
        b2 += double(b[i]) * double(b[i]);
        dmax = std::max(dmax, std::fabs(d));
        bmax = std::max(bmax, std::fabs(double(b[i])));
    }
    return {std::sqrt(d2 / std::max(b2, 1e-300)), dmax / std::max(bmax, 1e-300)};
}

void table(const char* model, const std::vector<Run>& runs, const Run* dense, const Run* f32) {
    std::printf("\n== %s\n%-12s %12s %12s %14s %14s %14s %14s\n", model, "weights", "frozen MiB", "forward ms",
                "rel. vs dense", "max vs dense", "rel. vs f32", "max vs f32");
    for (const Run& r : runs) {
        std::printf("%-12s %12.1f %12.2f", r.label.c_str(), mib(double(r.frozen)), r.ms);
        for (const Run* ref : {dense, f32}) {
            if (!ref || ref == &r) {
                std::printf(" %14s %14s", "-", "-");
                continue;
            }
            const auto [rel, mx] = errors(r.out, ref->out);
            std::printf(" %14.3e %14.3e", rel, mx);
        }
        std::printf("\n");
    }
}

// Every format of one model: the dense and quantized ones in the precision, then f32 dense.
template <class Build, class Load, class Write>
void measure(const Options& o, const char* model, Build build, Load load, Write write) {
    const gl::DType act = train::activation_dtype(o.precision);
    std::vector<Run> runs;
    runs.push_back(run_model(o, gl::cat("dense ", gl::dtype_name(act)), act, gl::WeightFormat::dense, build, load, write));
    for (gl::WeightFormat f : o.formats)
        if (f != gl::WeightFormat::dense)
            runs.push_back(run_model(o, gl::weight_format_name(f), act, f, build, load, write));
    const bool f32 = o.f32_reference && act != gl::DType::f32;
    if (f32) runs.push_back(run_model(o, "dense f32", gl::DType::f32, gl::WeightFormat::dense, build, load, write));
    table(model, runs, &runs.front(), f32 ? &runs.back() : nullptr);
}

int run(const Options& o) {
    std::string why;
    const gl::Backend backend = gl::resolve_backend(o.backend, &why);
    std::printf("bench_quant: backend %s%s, precision %s\n", gl::backend_name(backend),
                why.empty() ? "" : (" (" + why + ")").c_str(), train::precision_name(o.precision));
    std::unique_ptr<models::ModelFiles> files;
    if (!o.model.empty())
        files = std::make_unique<models::ModelFiles>((o.v2 ? models::sd2_family() : models::sd15_family()).open(o.model));
    // The benchmark times SD's UNet and CLIP builders themselves, on the opened model's configs.
    const sd::UnetConfig ucfg = o.tiny ? sd::UnetConfig::tiny() : files ? sd::sd_config(files->cfg()).unet : sd::UnetConfig::sd15();
    const int64_t side = o.size / 8, tokens = 77;
    const std::vector<float> x = bench::randn(size_t(o.batch * side * side * ucfg.in_channels), 1);
    const std::vector<float> ctx = bench::randn(size_t(o.batch * tokens * ucfg.cross_attention_dim), 2);
    const std::vector<float> t(size_t(o.batch), 500.0f);
    gl::ValueId xi = gl::kNoValue, ti = gl::kNoValue, ci = gl::kNoValue;
    measure(
        o, gl::cat(o.tiny ? "tiny UNet" : "UNet", ", batch ", o.batch, ", ", o.size, "x", o.size).c_str(),
        [&](nn::Weights& w, gl::Graph& g) {
            xi = g.input("x", gl::DType::f32, {o.batch, side, side, ucfg.in_channels});
            ti = g.input("t", gl::DType::f32, {o.batch});
            ci = g.input("context", gl::DType::f32, {o.batch, tokens, ucfg.cross_attention_dim});
            return sd::unet_forward(w, ucfg, xi, ti, ci);
        },
        [&](const nn::Weights& w, gl::Runtime& rt) {
            if (files) sd::load_unet(w, ucfg, *files->unet, rt);
            else bench::write_random_weights(w, rt);
        },
        [&](const gl::Graph&, gl::Runtime& rt) {
            rt.write_f32(xi, x);
            rt.write_f32(ti, t);
            rt.write_f32(ci, ctx);
        });
    if (!files) return 0;
    // CLIP on fixed ids: BOS, 40 random tokens, EOS, padding with EOS (as the tokenizer pads).
    const sd::ClipConfig ccfg = sd::sd_config(files->cfg()).clip;
    std::vector<float> ids(77, float(ccfg.vocab - 1));
    ids[0] = float(ccfg.vocab - 2);
    const std::vector<float> r = bench::randn(40, 3);
    for (size_t i = 0; i < r.size(); i++) ids[i + 1] = float(int64_t(std::fabs(r[i]) * 9973.0) % (ccfg.vocab - 2));
    gl::ValueId idv = gl::kNoValue;
    measure(
        o, "CLIP text encoder, 77 tokens",
        [&](nn::Weights& w, gl::Graph& g) {
            idv = g.input("ids", gl::DType::i32, {1, 77});
            return sd::build_clip(w, g, idv, ccfg);
        },
        [&](const nn::Weights& w, gl::Runtime& rt) { sd::load_clip(w, *files->text_encoder, rt); },
        [&](const gl::Graph&, gl::Runtime& rt) { rt.write_f32(idv, ids); });
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    return gl::cli::run_main("bench_quant", [&] { return run(parse(argc, argv)); });
}
