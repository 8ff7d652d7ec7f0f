// bench_step: times whole SD1.5 LoRA training steps (train::build_step + train::Trainer), the way
// /work/shared/TARGETS.md measures PyTorch: UNet with random bf16 weights, frozen text encoder
// (random 77 x 768 context), LoRA rank 16 on kohya's default targets, AdamW, MSE on epsilon, at
// 512 x 512 (64 x 64 latents), batch 1 and 8, recompute none and blocks. For each configuration it
// prints the planned memory (plan report), the runtime's memory report, cudaMemGetInfo's device
// memory in use, and the median time of a trainer step (host draws + input writes + the captured
// CUDA graph replay + the loss / statistics reads) and of a bare graph replay, over >= 20 steps
// after warm-up. --tiny runs the golden tests' tiny UNet instead (on the CPU too). --base-format
// int8,fp8 adds configurations with the UNet's matrices stored in 8 bits (core/quant.h). The node
// count is the planned graph's, after the fusion pass (core/fusion.h); --no-fusion plans without it,
// --no-pairs without its joined products (ops/pair.h) alone.
// A plain program (no Google Benchmark); built by `ninja bench_step`, not by `make bench`.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "ggml-lite/core/autofit.h"
#include "ggml-lite/core/error.h"
#include "ggml-lite/core/plan_svg.h"
#include "ggml-lite/core/planner.h"
#include "models/sd15/sd_config.h"
#include "ggml-lite/io/atomic_file.h"
#include "bench/step_fixtures.h"
#include "tools/common/cli.h"
#include "optim/optimizer_config.h"
#include "train/trainer.h"
#if GL_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace {

using bench::median;
using bench::randn;
using bench::write_random_weights;
using Clock = std::chrono::steady_clock;

struct Options {
    bool tiny = false;
    gl::Backend backend = gl::Backend::automatic;
    std::vector<int64_t> batches;
    std::vector<gl::Recompute> recompute = {gl::Recompute::none, gl::Recompute::blocks};
    int steps = 20, warmup = 3, rank = 16, size = 512;
    int profile = 0;  // > 0: after timing, that many more steps with per-node timing, then the report
    bool plan_only = false;  // build and plan each config, print the memory plan, run nothing (no GPU needed)
    bool fusion = true;      // PlanOptions::fusion: adds folded into GEMM / conv epilogues
    bool pairs = true;       // PlanOptions::pairs: products joined to the product their residual is
    std::vector<size_t> budgets;  // more configs: recompute budget with these plan totals
    std::string timeline;         // write each config's memory timeline (SVG) here
    std::string frontier;         // per batch: the recompute frontier table, its plot (SVG) here
    train::Precision precision = train::Precision::bf16;
    std::vector<gl::WeightFormat> formats = {gl::WeightFormat::dense};  // frozen matrices' storage
    gl::WeightFormat format = gl::WeightFormat::dense;                  // the one being run
    optim::OptimizerConfig optimizer = optim::parse_optimizer("AdamW", {});  // kohya's --optimizer_type
};

optim::OptimizerConfig parse_optimizer_type(const std::string& s) { return optim::parse_optimizer(s, {}); }

Options parse(int argc, char** argv) {
    Options o;
    gl::cli::Parser p("bench_step", "bench_step: times whole SD1.5 LoRA training steps (UNet with random bf16 "
                                    "weights, LoRA on kohya's default targets, AdamW) per batch size and recompute "
                                    "policy; prints each configuration's memory plan.");
    p.add_flag("--tiny", o.tiny, "the golden tests' tiny UNet instead (runs on the CPU too)");
    p.add_flag("--plan-only", o.plan_only, "the memory plan of each configuration, nothing run (no GPU needed)");
    bool no_fusion = false;
    p.add_flag("--no-fusion", no_fusion, "plan without the fusion pass (adds stay nodes of their own), to compare");
    bool no_pairs = false;
    p.add_flag("--no-pairs", no_pairs, "fuse adds but join no products into pairs (ops/pair.h), to compare");
    p.add_backend(o.backend, "where the steps run");
    p.add_int_list("--batch", o.batches, int64_t(1), int64_t(4096), "batch sizes (default 1,8; 1,2 with --tiny)");
    p.add_parsed_list("--recompute", o.recompute, &gl::parse_recompute, "none|blocks|cheap,...", "recompute policies",
                      "none,blocks");
    p.add_int("--steps", o.steps, 1, 1'000'000, "timed steps (>= 20 counts)");
    p.add_int("--warmup", o.warmup, 1, 1'000'000, "untimed steps first");
    p.add_int("--rank", o.rank, 1, 4096, "LoRA rank");
    p.add_parsed("--optimizer", o.optimizer, &parse_optimizer_type, "NAME",
                 "kohya's --optimizer_type (AdamW, AdamW8bit, Lion, Prodigy, Adafactor), default arguments", "AdamW");
    p.add_int("--size", o.size, 8, 16384, "image side in pixels (default 512; 64 with --tiny)");
    p.add_parsed("--precision", o.precision, &train::parse_precision, "bf16|fp16|fp32", "weights and activations",
                 train::precision_name(o.precision));
    p.add_parsed_list("--base-format", o.formats, &gl::parse_weight_format, "dense|int8|fp8,...",
                      "how the frozen UNet's matrices are stored, each a configuration (dense: in the precision)",
                      "dense");
    p.add_int("--profile", o.profile, 1, 1'000'000, "N more steps timed node by node, then where the time went")
        ->default_str("");
    p.add_parsed_list("--budget", o.budgets, &gl::parse_bytes, "BYTES,...",
                      "more configs: recompute budget, the plan's total within each (4G,3.5G)");
    p.add_path("--timeline", o.timeline, "each config's memory timeline (SVG); -b<batch>-<policy> added for several");
    p.add_path("--frontier", o.frontier, "per batch: planned total against predicted time over budgets (SVG)");
    p.parse(argc, argv);
    o.fusion = !no_fusion;
    o.pairs = !no_pairs;
    if (o.batches.empty()) o.batches = o.tiny ? std::vector<int64_t>{1, 2} : std::vector<int64_t>{1, 8};
    if (o.tiny && o.size == 512) o.size = 64;
    return o;
}

double mib(double bytes) { return bytes / (1024.0 * 1024.0); }

// Device memory in use (all processes), MiB; 0 without CUDA.
double device_used_mib() {
#if GL_HAVE_CUDA
    size_t free = 0, total = 0;
    if (cudaMemGetInfo(&free, &total) == cudaSuccess) return mib(double(total - free));
#endif
    return 0.0;
}

// PyTorch figures of TARGETS.md (H200, eager / torch.compile with CUDA graphs), ms per step and
// peak MiB, for batch 1 and 8 with recompute none and full ("blocks").
std::string torch_figures(int64_t batch, gl::Recompute rc) {
    const bool none = rc == gl::Recompute::none;
    if (batch == 1)
        return none ? "PyTorch eager 152 ms / 3100 MiB; compiled 149 ms / 2686 MiB; compiled + CUDA graphs 33.7 ms / 2640 MiB"
                    : "PyTorch eager 279 ms / 2124 MiB (3680 reserved)";
    if (batch == 8)
        return none ? "PyTorch eager 21.1 ms/image / 12184 MiB; compiled 13.9 ms/image / 8644 MiB; compiled + CUDA graphs "
                      "9.2 ms/image / 8603 MiB"
                    : "PyTorch eager 35.0 ms/image / 4451 MiB";
    return "no PyTorch figure for this batch";
}

train::StepOptions step_options(const Options& o, int64_t batch) {
    train::StepOptions so;
    so.config = sd::sd_config(o.tiny ? sd::UnetConfig::tiny() : sd::UnetConfig::sd15());
    so.batch = batch;
    so.latent_h = so.latent_w = o.size / 8;
    so.context_tokens = o.tiny ? 8 : 77;
    so.precision = o.precision;
    so.base_format = so.text_encoder_format = o.format;
    so.lora = lora::LoraConfig{o.rank, float(o.rank), 1.0f};
    so.optimizer = o.optimizer;
    return so;
}

// "-int8" / "-fp8" in the file names of a quantized base's pictures.
std::string format_tag(const Options& o) {
    return o.format == gl::WeightFormat::dense ? "" : std::string("-") + gl::weight_format_name(o.format);
}

// FILE.svg as given for one picture, FILE-<tag>.svg for one of several.
std::string svg_path(const std::string& file, const std::string& tag, bool several) {
    if (!several) return file;
    const size_t dot = file.rfind('.');
    return dot == std::string::npos || file.find('/', dot) != std::string::npos ? file + "-" + tag
                                                                               : file.substr(0, dot) + "-" + tag + file.substr(dot);
}

// Per batch: the plan total and predicted time of recompute budgets from none's total down to the
// least, every 5 % of none's total, the fixed policies beside, and the plot.
void frontier(const Options& o, int64_t batch) {
    const auto step = train::build_step(step_options(o, batch));
    const train::StepGraph& s = *step;
    gl::PlanOptions search_po;
    search_po.fusion = o.fusion;
    search_po.pairs = o.pairs;
    gl::RecomputeSearch search(s.g, search_po);
    const auto t0 = Clock::now();
    const size_t least = search.min_bytes(), none = search.frontier()[0].total_bytes;
    const double base = search.frontier()[0].predicted_seconds;
    std::printf("\n== recompute frontier, batch %lld, %dx%d (%zu steps searched in %.2f s; times predicted by the cost "
                "model: %s)\n%14s %14s %14s %10s %14s %8s\n",
                (long long)batch, o.size, o.size, search.frontier().size(),
                std::chrono::duration<double>(Clock::now() - t0).count(), gl::PlanOptions{}.cost.describe().c_str(),
                "budget MiB", "planned MiB", "predicted ms", "x none", "recompute ms", "clones");
    for (int pct = 100;; pct -= 5) {
        const size_t budget = std::max(least, size_t(double(none) * pct / 100.0));
        const auto t1 = Clock::now();
        const gl::Plan p = search.plan(budget);
        std::printf("%14.1f %14.1f %14.2f %10.3f %14.2f %8d   (%.2f s)\n", mib(double(budget)), mib(double(p.total_bytes())),
                    p.predicted_seconds * 1e3, p.predicted_seconds / base, p.recompute_seconds * 1e3, p.recompute_nodes,
                    std::chrono::duration<double>(Clock::now() - t1).count());
        if (budget == least) break;
    }
    std::vector<gl::FrontierMark> marks;
    for (gl::Recompute rc : {gl::Recompute::cheap, gl::Recompute::blocks}) {
        gl::PlanOptions po;
        po.recompute = rc;
        po.fusion = o.fusion;
        po.pairs = o.pairs;
        const gl::Plan p = gl::make_plan(s.g, po);
        std::printf("%14s %14.1f %14.2f %10.3f %14.2f %8d\n", gl::recompute_name(rc), mib(double(p.total_bytes())),
                    p.predicted_seconds * 1e3, p.predicted_seconds / base, p.recompute_seconds * 1e3, p.recompute_nodes);
        marks.push_back({gl::recompute_name(rc), p.total_bytes(), p.predicted_seconds});
    }
    const std::string path = svg_path(o.frontier, gl::cat("b", batch, format_tag(o)), o.batches.size() * o.formats.size() > 1);
    gl::io::write_file_atomic(path, gl::frontier_svg(search.frontier(), marks,
                                               gl::cat("SD1.5 LoRA step, batch ", batch, ", ", o.size, "x", o.size,
                                                       ": recompute frontier (planned, predicted)")));
    std::printf("frontier plot: %s\n", path.c_str());
}

void run_one(const Options& o, bool cuda, int64_t batch, gl::Recompute rc, size_t budget = 0) {
    const auto t0 = Clock::now();
    auto s = train::build_step(step_options(o, batch));
    gl::PlanOptions po;
    po.recompute = rc;
    po.budget = budget;
    po.fusion = o.fusion;
    po.pairs = o.pairs;
    gl::Plan plan = gl::make_plan(s->g, po);
    const double plan_s = std::chrono::duration<double>(Clock::now() - t0).count();
    std::printf("\n== %s, batch %lld, %dx%d, recompute %s, %s, base %s, LoRA rank %d on %zu modules, %s (%zu nodes "
                "planned, %zu built, %d adds fused, %d products joined; planned in %.1f s)\n",
                o.tiny ? "tiny UNet" : "SD1.5 UNet", (long long)batch, o.size, o.size, gl::recompute_name(rc),
                train::precision_name(o.precision), gl::weight_format_name(o.format), o.rank, s->net->modules().size(),
                o.optimizer.name(), plan.graph.nodes.size(), s->g.nodes.size(), plan.fused_adds, plan.joined_pairs, plan_s);
    std::printf("planned total %.1f MiB\n%s", mib(double(plan.total_bytes())), plan.report(o.plan_only ? 24 : 6).c_str());
    if (!o.timeline.empty()) {
        const bool several = o.batches.size() * (o.recompute.size() + o.budgets.size()) > 1;
        const std::string tag = gl::cat("b", batch, "-", gl::recompute_name(rc), budget ? gl::cat(budget >> 20) : "",
                                        format_tag(o));
        const std::string path = svg_path(o.timeline, tag, several || o.formats.size() > 1);
        gl::PlanOptions none_po;
        none_po.fusion = o.fusion;
        none_po.pairs = o.pairs;
        const gl::Plan none = rc == gl::Recompute::none ? gl::Plan{} : gl::make_plan(s->g, none_po);
        gl::io::write_file_atomic(path, gl::timeline_svg(plan, rc == gl::Recompute::none ? nullptr : &none,
                                                   gl::cat("SD1.5 LoRA step, batch ", batch, ", ", o.size, "x", o.size,
                                                           ", recompute ", gl::recompute_name(rc))));
        std::printf("memory timeline: %s\n", path.c_str());
    }
    if (o.plan_only) return;
    const double base = device_used_mib();
    const double predicted = cuda ? mib(double(plan.total_bytes() + gl::cuda_runtime_bytes(plan.graph))) : 0.0;
    auto rt = gl::make_runtime(std::move(plan), cuda ? gl::Backend::cuda : gl::Backend::cpu);
    bench::write_random_weights(*s->unet_weights, *rt);
    train::Trainer tr(*s, *rt, train::TrainerOptions{});
    tr.init(1);
    const int64_t n = s->latent_numel(), c = s->context_numel();
    const std::vector<float> lat = randn(size_t(n), 7), ctx = randn(size_t(c), 8);
    std::vector<double> step_ms, replay_ms;
    double loss = 0;
    for (int k = 0; k < o.warmup + o.steps; k++) {
        const auto a = Clock::now();
        const train::StepReport r = tr.step(lat, ctx);
        const double ms = std::chrono::duration<double, std::milli>(Clock::now() - a).count();
        if (k >= o.warmup) step_ms.push_back(ms);
        loss = r.loss;
    }
    // The graph alone: the same inputs replayed (what the step costs the device).
    for (int k = 0; k < o.steps; k++) {
        const auto a = Clock::now();
        rt->run();
        rt->synchronize();
        replay_ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - a).count());
    }
    const double used = device_used_mib();
    std::printf("%s", rt->memory_report().c_str());
    if (cuda)
        std::printf("device memory in use (cudaMemGetInfo): %.1f MiB, %.1f MiB more than before the runtime "
                    "(predicted at most %.1f: plan + cuda_runtime_bytes)\n",
                    used, used - base, predicted);
    const double sm = median(step_ms), rm = median(replay_ms);
    std::printf("RESULT %s base %s batch %lld recompute %s: step %.2f ms (%.2f ms/image), graph replay %.2f ms; "
                "min step %.2f ms over %d steps; last loss %.4f\n",
                o.tiny ? "tiny" : "sd15", gl::weight_format_name(o.format), (long long)batch, gl::recompute_name(rc), sm,
                sm / double(batch), rm, *std::min_element(step_ms.begin(), step_ms.end()), o.steps, loss);
    if (cuda) {
        // The step's own work: the built graph before recompute (a recomputed forward is not counted).
        const double gflop = gl::graph_flops(s->g) / 1e9, tflops = gflop / sm;
        std::printf("work: %.0f GFLOP a step (%.0f a image; the op cost rules' count), %.0f TFLOP/s: MFU %.1f %% of "
                    "the H200's nominal 989 TFLOP/s, %.1f %% of the 790 a cuBLAS 8192^3 bf16 product reaches\n",
                    gflop, gflop / double(batch), tflops, 100.0 * tflops / 989.0, 100.0 * tflops / 790.0);
    }
    if (!o.tiny && o.size == 512 && o.precision == train::Precision::bf16 && o.format == gl::WeightFormat::dense)
        std::printf("beside: %s\n", torch_figures(batch, rc).c_str());
    if (o.profile > 0) {  // node by node (eagerly on CUDA), after the figures above
        rt->set_profiling(true);
        for (int k = 0; k < o.profile; k++) tr.step(lat, ctx);
        rt->set_profiling(false);
        std::printf("%s", rt->profile_report(30).c_str());
        // The cost model fitted to this profile, its step time matched to the graph replay.
        const gl::Graph& pg = rt->plan().graph;
        std::vector<double> node_ms(pg.nodes.size());
        for (size_t i = 0; i < node_ms.size(); i++) node_ms[i] = rt->profiled_ms(i) / rt->profiled_runs();
        const gl::CostModel fit = gl::fit_cost_model(pg, node_ms, rm);
        const gl::CostModel defaults = gl::PlanOptions{}.cost;
        std::printf("\nthe default cost model against this profile (step predicted %.2f ms, replayed %.2f ms):\n%s"
                    "\nfitted to this profile (step scale: graph replay over the profile's total):\n%s"
                    "fitted cost model: %s\n",
                    defaults.graph_seconds(pg) * 1e3, rm, gl::cost_model_report(defaults, pg, node_ms).c_str(),
                    gl::cost_model_report(fit, pg, node_ms).c_str(), fit.code().c_str());
    }
}

int run(const Options& o) {
    std::string why;  // why auto did not take CUDA
    const bool cuda = gl::resolve_backend(o.backend, &why) == gl::Backend::cuda;
    const std::string note = why.empty() ? "" : " (" + why + ")";
    if (!cuda && !o.tiny && !o.plan_only)
        gl::fail("the full-size benchmark needs CUDA", note, "; --tiny runs on the CPU, --plan-only runs nothing");
    std::printf("bench_step: backend %s%s\n", cuda ? "cuda" : "cpu", note.c_str());
    for (gl::WeightFormat f : o.formats) {
        Options of = o;
        of.format = f;
        for (int64_t b : o.batches) {
            for (gl::Recompute rc : o.recompute) run_one(of, cuda, b, rc);
            for (size_t budget : o.budgets) run_one(of, cuda, b, gl::Recompute::budget, budget);
            if (!o.frontier.empty()) frontier(of, b);
        }
    }
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    return gl::cli::run_main("bench_step", [&] { return run(parse(argc, argv)); });
}
