// bench_presets: the verified-presets table. For each card (a device memory size, the CUDA context
// included) and image size it finds the largest batch, without gradient accumulation, whose SD1.5
// LoRA step fits (train::largest_batch: within --max-slowdown of the same batch without recompute,
// by the cost model; and, planned only, the largest with any recompute), then on CUDA runs that
// configuration with RuntimeOptions::memory_limit = card - context and measures its device memory
// (cudaMemGetInfo's peak over the steps with the runtime alive, plus the context; nvidia-smi's
// memory.used after the steps less its figure before the context) and ms/image (median of --steps
// steps after --warmup), and the same batch without recompute and without a limit, for the ratio.
// Beside them, kohya's 8 GB preset on our runtime (batch 1 x 8 accumulation, every block
// recomputed, fp16, AdamW8bit). Steps as bench_step runs them: random UNet weights (drawn once on
// the host and written into each configuration's runtime: every configuration allocates its own
// memory, which is what is measured, so one shared copy of the weights cannot serve them), random
// text-encoder context (its outputs cached), LoRA rank 16, AdamW. Planning runs on --jobs threads;
// runs one after another. --plan-only (any machine) and --tiny (the golden tests' UNet, on the CPU
// too) make the table without a GPU; --out writes it as TSV. Built by `ninja bench_presets`.
#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include "bench/step_fixtures.h"
#include "ggml-lite/core/autofit.h"
#include "ggml-lite/core/error.h"
#include "ggml-lite/io/atomic_file.h"
#include "optim/optimizer_config.h"
#include "tools/common/cli.h"
#include "models/sd15/sd_config.h"
#include "train/autofit.h"
#include "train/trainer.h"
#if GL_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
    bool tiny = false, plan_only = false, no_any = false, no_kohya = false;
    gl::Backend backend = gl::Backend::automatic;
    std::vector<size_t> cards;
    std::vector<int64_t> sizes;
    double max_slowdown = 1.05, deadline = 0;
    std::string context = "auto", out;
    size_t kohya_card = gl::parse_bytes("8G");
    int steps = 10, warmup = 2, rank = 16, jobs = 0;
    int64_t effective = 8, max_batch = 4096;
    train::Precision precision = train::Precision::bf16;
    std::vector<std::pair<size_t, int64_t>> goals;  // (card, batch): fastest fit of that batch, first size
};

// "8G:8": a card and a batch.
std::pair<size_t, int64_t> parse_goal(const std::string& s) {
    const size_t colon = s.rfind(':');
    GL_CHECK(colon != std::string::npos, "'", s, "' is not CARD:BATCH (e.g. 8G:8)");
    const std::string b = s.substr(colon + 1);
    char* end = nullptr;
    const long long batch = std::strtoll(b.c_str(), &end, 10);
    GL_CHECK(!b.empty() && *end == 0 && batch >= 1 && batch <= 4096, "'", s, "': the batch must be 1 to 4096");
    return {gl::parse_bytes(s.substr(0, colon)), int64_t(batch)};
}

Options parse(int argc, char** argv) {
    Options o;
    gl::cli::Parser p("bench_presets",
                      "bench_presets: per card (device memory, CUDA context included) and image size, the largest "
                      "SD1.5 LoRA batch without accumulation that fits, its recompute, predicted and measured peak "
                      "and ms/image against the same batch without a limit, and kohya's 8 GB preset on our runtime; "
                      "a markdown table (and TSV with --out).");
    p.add_parsed_list("--presets", o.cards, &gl::parse_bytes, "BYTES,...", "card sizes, CUDA context included",
                      "6G,8G,12G,16G,24G");
    p.add_int_list("--size", o.sizes, int64_t(8), int64_t(4096), "square image sides in pixels (default 512,768; "
                                                                  "64,96 with --tiny)");
    p.add_real("--max-slowdown", o.max_slowdown, 1.0, 100.0,
               "the batch's predicted step over the same batch without recompute");
    p.add_flag("--no-any", o.no_any, "skip the largest batch with any recompute (planned only)");
    p.add_flag("--no-kohya", o.no_kohya, "skip kohya's preset (batch 1 x 8 accumulation, blocks, fp16, AdamW8bit)");
    p.add_parsed("--kohya-card", o.kohya_card, &gl::parse_bytes, "BYTES", "the card kohya's preset runs within",
                 "8G");
    p.add_parsed_list("--goal", o.goals, &parse_goal, "CARD:BATCH,...",
                      "rows for a given batch (no accumulation) on a card: its fastest fit, at the first --size",
                      "6G:4,8G:8,12G:16");
    o.goals = {parse_goal("6G:4"), parse_goal("8G:8"), parse_goal("12G:16")};  // the goals
    p.add_int("--max-batch", o.max_batch, int64_t(1), int64_t(1) << 20, "the largest batch tried");
    p.app().add_option("--context", o.context,
                       "the CUDA context's bytes beside the plans: 'auto' measures it (CUDA; 549M assumed without), "
                       "or a size")
        ->default_val("auto");
    p.add_int("--effective", o.effective, int64_t(1), int64_t(4096),
              "where even batch 1 needs recompute: the effective batch an accumulation alternative is fitted for");
    p.add_flag("--plan-only", o.plan_only, "the table's planned columns, nothing run (no GPU needed)");
    p.add_flag("--tiny", o.tiny, "the golden tests' tiny UNet (runs on the CPU too)");
    p.add_backend(o.backend, "where the steps run");
    p.add_int("--steps", o.steps, 1, 100000, "timed steps per configuration (the median is reported)");
    p.add_int("--warmup", o.warmup, 1, 100000, "untimed steps first (the first captures the CUDA graph)");
    p.add_int("--rank", o.rank, 1, 4096, "LoRA rank");
    p.add_parsed("--precision", o.precision, &train::parse_precision, "bf16|fp16|fp32", "weights and activations",
                 train::precision_name(o.precision));
    p.add_int("--jobs", o.jobs, 0, 1024, "planning threads (0: one per core, at most one per table cell)");
    p.add_real("--deadline", o.deadline, 0.0, 1e6, "seconds after the start past which no new run starts (0: none)");
    p.app().add_option("--out", o.out, "also write the table as TSV (one row per configuration) to this file");
    p.parse(argc, argv);
    if (o.cards.empty()) o.cards = {gl::parse_bytes("6G"), gl::parse_bytes("8G"), gl::parse_bytes("12G"),
                                    gl::parse_bytes("16G"), gl::parse_bytes("24G")};
    if (o.sizes.empty()) o.sizes = o.tiny ? std::vector<int64_t>{64, 96} : std::vector<int64_t>{512, 768};
    for (int64_t s : o.sizes)
        if (s % 8) throw gl::cli::UsageError(gl::cat("--size: ", s, " is not a multiple of 8"));
    return o;
}

double mib(double bytes) { return bytes / (1024.0 * 1024.0); }

std::string fmt(const char* f, double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, f, v);
    return buf;
}

// A command's standard output ("" when it cannot run).
std::string command_output(const std::string& cmd) {
    std::string out;
    if (FILE* f = popen((cmd + " 2>/dev/null").c_str(), "r")) {
        char buf[512];
        while (size_t n = fread(buf, 1, sizeof buf, f)) out.append(buf, n);
        pclose(f);
    }
    return out;
}

// nvidia-smi's memory.used (MiB; < 0: no answer) of the device CUDA sees first
// (CUDA_VISIBLE_DEVICES' first entry, an index or UUID, else 0). The whole device's figure: the
// per-process query lists nothing inside many containers.
double smi_device_used_mib() {
    const char* v = std::getenv("CUDA_VISIBLE_DEVICES");
    std::string d = v && *v ? std::string(v) : "0";
    d = d.substr(0, d.find(','));
    const bool plain = !d.empty() && std::all_of(d.begin(), d.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '-';
    });
    const std::string s = command_output("nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i " +
                                         (plain ? d : std::string("0")));  // it goes into a shell command
    char* end = nullptr;
    const double mib = std::strtod(s.c_str(), &end);
    return end != s.c_str() ? mib : -1.0;
}

size_t device_used_bytes() {
#if GL_HAVE_CUDA
    size_t free = 0, total = 0;
    if (cudaMemGetInfo(&free, &total) == cudaSuccess) return total - free;
#endif
    return 0;
}

struct Device {
    bool cuda = false;       // steps run on CUDA
    bool runtime = false;    // the CUDA runtime's bytes (workspace, graph, page) are counted beside the plans
    size_t context = 0;      // bytes held beside the plans (the CUDA context)
    size_t used0 = 0;        // device bytes in use right after the context exists
    double idle_mib = -1;    // nvidia-smi's figure before the context (< 0: no answer)
    std::string note;        // how the context was found
};

// The CUDA context, measured before anything else touches the device: nvidia-smi's device figure
// before the driver starts against cudaMemGetInfo's right after the context exists (every kernel
// module loaded at once, CUDA_MODULE_LOADING=EAGER unless set, so the code the steps run is in it;
// the variable is read when the driver starts, so it is set before the first CUDA call).
Device find_device(const Options& o) {
    Device d;
    const bool want_cuda = !o.plan_only && o.backend != gl::Backend::cpu;
    if (want_cuda) {
        d.idle_mib = smi_device_used_mib();
        setenv("CUDA_MODULE_LOADING", "EAGER", 0);
    }
    std::string why;
    d.cuda = want_cuda && gl::resolve_backend(o.backend, &why) == gl::Backend::cuda;
    if (!d.cuda && !o.tiny && !o.plan_only)
        gl::fail("the full-size table needs CUDA (", why, "); --tiny runs on the CPU, --plan-only runs nothing");
    // The workspace depends on the device (which GEMM kernels it can run): counted where one is.
    d.runtime = d.cuda || (o.plan_only && gl::cuda_available());
    const bool given = o.context != "auto";
    if (given) d.context = gl::parse_bytes(o.context);
    if (d.cuda) {
        size_t free = 0, total = 0;
        gl::cuda_memory_info(&free, &total);
        d.used0 = total - free;
        const double idle = d.idle_mib;
        const size_t measured = idle >= 0 ? d.used0 - std::min(d.used0, size_t(idle * 1048576.0)) : d.used0;
        d.note = gl::cat("measured ", gl::format_bytes(measured), ": cudaMemGetInfo's ", gl::format_bytes(d.used0),
                         " in use once the context exists (CUDA_MODULE_LOADING=", std::getenv("CUDA_MODULE_LOADING"),
                         ")",
                         idle >= 0 ? gl::cat(" less nvidia-smi's ", idle, " MiB before it")
                                   : std::string(", nvidia-smi silent"));
        if (given) d.note = gl::cat("given ", gl::format_bytes(d.context), "; ", d.note);
        else d.context = measured;
    } else {
        if (!given) d.context = gl::parse_bytes("549M");  // the H200's, CUDA 13 (bench/RESULTS.md)
        d.note = gl::cat(given ? "given " : "assumed (no device measured) ", gl::format_bytes(d.context));
    }
    if (!d.runtime) d.note += "; no CUDA runtime bytes counted (no usable CUDA device here)";
    return d;
}

train::StepOptions step_options(const Options& o, int64_t size) {
    train::StepOptions so;
    so.config = sd::sd_config(o.tiny ? sd::UnetConfig::tiny() : sd::UnetConfig::sd15());
    so.latent_h = so.latent_w = size / 8;
    so.context_tokens = o.tiny ? 8 : 77;
    so.precision = o.precision;
    so.lora = lora::LoraConfig{o.rank, float(o.rank), 1.0f};
    return so;
}

struct Measured {
    bool ran = false;
    std::string note;         // why not, or what happened
    double ms_image = 0;      // median step over its images
    size_t device_bytes = 0;  // cudaMemGetInfo's peak over the steps less what was in use with the context alone,
                              // plus the context
    double smi_mib = -1;      // nvidia-smi's memory.used after the steps less its figure before the context
};

// One line of the table: a configuration, its plan and what running it measured.
struct Row {
    size_t card = 0;
    int64_t size = 0;
    std::string batch;  // "14", or "1 x 8 kohya (fp16, AdamW8bit)"
    train::StepOptions step;
    gl::PlanOptions plan;
    double seconds = 0, none_seconds = 0;  // predicted per optimizer step: as planned, and without recompute
    size_t predicted = 0;    // the plan, its runtime's bytes and the context; 0: nothing fits
    int64_t any_batch = 0;   // the largest batch with any recompute (0: not searched or none)
    double any_slowdown = 0;  // its predicted step over its step without recompute
    Measured run, free;      // within the card; the same step without limit or recompute
    double slowdown() const { return seconds / none_seconds; }
    bool recomputes() const { return plan.recompute != gl::Recompute::none; }
};

struct Cell {
    size_t card = 0;
    int64_t size = 0;
    train::AutoFitRequest request;
    train::BatchFit fit;
    std::string accumulation;  // where even batch 1 needs recompute: the accumulated alternative
    double plan_s = 0;
};

void plan_cell(const Options& o, Cell& c) {
    const auto t0 = Clock::now();
    train::BatchSearch s;
    s.max_slowdown = o.max_slowdown;
    s.max_batch = o.max_batch;
    s.any_recompute = !o.no_any;
    c.fit = train::largest_batch(c.request, s);
    if (c.fit.batch1_needs_recompute) {
        train::AutoFitRequest q = c.request;
        q.step.batch = o.effective;
        try {
            const train::AutoFitChoice a = train::auto_fit_step(q);
            const gl::FitRow& row = *a.result.chosen();
            c.accumulation = gl::cat("effective batch ", o.effective, " by accumulation: '", row.label, "', ",
                                     gl::recompute_name(row.recompute), ", ", gl::format_bytes(row.peak_bytes), ", ",
                                     fmt("%.2f", row.seconds * 1e3 / double(o.effective)), " ms/image predicted\n",
                                     a.result.table());
        } catch (const gl::Error& e) {
            c.accumulation = e.what();
        }
    }
    c.plan_s = std::chrono::duration<double>(Clock::now() - t0).count();
}

// Plans every cell on `jobs` threads; the first error is thrown once all are done.
void plan_cells(const Options& o, std::vector<Cell>& cells) {
    const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    const size_t jobs = std::min(cells.size(), size_t(o.jobs > 0 ? unsigned(o.jobs) : cores));
    std::atomic<size_t> next{0};
    std::vector<std::exception_ptr> errors(cells.size());
    auto work = [&] {
        for (size_t i; (i = next++) < cells.size();) try {
                plan_cell(o, cells[i]);
            } catch (...) {
                errors[i] = std::current_exception();
            }
    };
    std::vector<std::thread> pool;
    for (size_t k = 1; k < jobs; k++) pool.emplace_back(work);
    work();
    for (std::thread& t : pool) t.join();
    for (const std::exception_ptr& e : errors)
        if (e) std::rethrow_exception(e);
}

Row cell_row(const Options& o, const Cell& c) {
    Row r;
    r.card = c.card;
    r.size = c.size;
    const train::BatchFit& f = c.fit;
    if (!o.no_any && f.any_batch > 0) {
        r.any_batch = f.any_batch;
        r.any_slowdown = f.any_seconds / f.any_none_seconds;
    }
    if (f.batch == 0) return r;
    r.batch = gl::cat(f.batch);
    r.step = f.choice.step;
    r.plan = f.choice.plan_options(0);
    r.seconds = f.seconds;
    r.none_seconds = f.none_seconds;
    r.predicted = f.choice.result.chosen()->peak_bytes;
    return r;
}

// A given batch without accumulation on a card: the fastest configuration of it that fits
// (recompute only where needed); predicted 0 when none does.
Row goal_row(const Options& o, const Device& d, size_t card, int64_t batch, int64_t size) {
    Row r;
    r.card = card;
    r.size = size;
    r.batch = gl::cat(batch, " (goal)");
    train::AutoFitRequest q;
    q.step = step_options(o, size);
    q.step.batch = batch;
    q.micro_batches = {batch};
    q.vram = card;
    q.reserve = d.context;
    q.cache_text_encoder = true;
    if (d.runtime) q.rules = gl::layout_rules("cuda");
    const train::AutoFitChoice a = train::auto_fit_step(q);
    const gl::FitRow* row = a.result.chosen();
    if (!row) return r;
    r.step = a.step;
    r.plan = a.plan_options(0);
    r.seconds = row->seconds;
    r.none_seconds = row->seconds - row->recompute_seconds;
    r.predicted = row->peak_bytes;
    return r;
}

// kohya's 8 GB preset (the seed's): batch 1, 8 micro-batches accumulated, every block recomputed
// (gradient checkpointing), fp16, AdamW8bit; planned for the card it is meant for.
Row kohya_row(const Options& o, const Device& d, int64_t size) {
    Row r;
    r.card = o.kohya_card;
    r.size = size;
    r.batch = "1 x 8 kohya (fp16, AdamW8bit)";
    r.step = step_options(o, size);
    r.step.precision = train::Precision::fp16;
    r.step.grad_accum = 8;
    r.step.optimizer = optim::parse_optimizer("AdamW8bit", {});
    r.plan.recompute = gl::Recompute::blocks;
    const auto s = train::build_step(r.step);
    const gl::Plan blocks = gl::make_plan(s->g, r.plan), none = gl::make_plan(s->g);
    r.seconds = 8 * blocks.predicted_seconds;
    r.none_seconds = 8 * none.predicted_seconds;
    r.predicted = blocks.total_bytes() + (d.runtime ? gl::cuda_runtime_bytes(blocks.graph) : 0) + d.context;
    return r;
}

// Builds, plans and runs one configuration (random weights from `weights`); measures it.
Measured run_config(const Options& o, const Device& d, bench::RandomWeights& weights, const train::StepOptions& so,
                    const gl::PlanOptions& po, size_t memory_limit) {
    Measured m;
    auto s = train::build_step(so);
    gl::Plan plan = gl::make_plan(s->g, po);
    if (d.cuda && memory_limit == 0) {  // without a limit: is there room on this device at all?
        size_t free = 0, total = 0;
        gl::cuda_memory_info(&free, &total);
        const size_t need = plan.total_bytes() + gl::cuda_runtime_bytes(plan.graph);
        if (need > free) {
            m.note = gl::cat("needs ", gl::format_bytes(need), ", ", gl::format_bytes(free), " free");
            return m;
        }
    }
    std::unique_ptr<gl::Runtime> rt;
    try {
        rt = gl::make_runtime(std::move(plan), d.cuda ? gl::Backend::cuda : gl::Backend::cpu,
                              gl::RuntimeOptions{memory_limit});
    } catch (const gl::Error& e) {
        m.note = gl::cat("refused: ", e.what());
        return m;
    }
    weights.write(*s->unet_weights, *rt);
    train::Trainer tr(*s, *rt, train::TrainerOptions{});
    tr.init(1);
    const size_t accum = size_t(so.grad_accum);
    const std::vector<float> lat = bench::randn(size_t(s->latent_numel()) * accum, 7),
                             ctx = bench::randn(size_t(s->context_numel()) * accum, 8);
    std::vector<double> ms;
    size_t peak = 0;
    try {
        for (int k = 0; k < o.warmup + o.steps; k++) {
            const auto a = Clock::now();
            tr.step(lat, ctx);
            if (k >= o.warmup) ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - a).count());
            if (d.cuda) peak = std::max(peak, device_used_bytes());
        }
    } catch (const gl::Error& e) {
        m.note = gl::cat("failed after ", ms.size(), " timed steps: ", e.what());
        return m;
    }
    m.ran = true;
    m.ms_image = bench::median(ms) / double(so.batch * so.grad_accum);
    if (d.cuda) {
        m.device_bytes = std::max(peak, d.used0) - d.used0 + d.context;
        // Once, after the steps: the plan's memory is all allocated when the runtime is made.
        if (const double now = smi_device_used_mib(); now >= 0 && d.idle_mib >= 0) m.smi_mib = now - d.idle_mib;
    }
    return m;
}

std::string error_pct(const Row& r) {
    return fmt("%+.2f %%", 100.0 * (double(r.run.device_bytes) / double(r.predicted) - 1));
}

std::string any_text(const Row& r) {
    return r.any_batch ? gl::cat(r.any_batch, " (", fmt("%.3f", r.any_slowdown), ")") : std::string();
}

std::string table(const Options& o, const std::vector<Row>& rows) {
    std::string s =
        "| card | size | batch | recompute | predicted × | predicted peak MiB | measured MiB | error | nvidia-smi MiB "
        "| ms/image | no limit, no recompute ms/image | × | largest with any recompute (predicted ×) |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
    for (const Row& r : rows) {
        s += gl::cat("| ", gl::format_bytes(r.card), " | ", r.size, "² | ");
        if (r.predicted == 0) {
            s += gl::cat("nothing fits | | | | | | | | | | ", any_text(r), " |\n");
            continue;
        }
        s += gl::cat(r.batch, " | ", gl::recompute_name(r.plan.recompute), " | ", fmt("%.3f", r.slowdown()), " | ",
                     fmt("%.1f", mib(double(r.predicted))), " | ");
        const Measured& m = r.run;
        if (!m.ran) {
            s += gl::cat(o.plan_only ? "planned only" : m.note.empty() ? "not run" : m.note, " | | | | | | ");
        } else {
            const bool mem = m.device_bytes > 0;
            s += gl::cat(mem ? fmt("%.1f", mib(double(m.device_bytes))) : "-", " | ", mem ? error_pct(r) : "-", " | ",
                         m.smi_mib >= 0 ? fmt("%.0f", m.smi_mib) : "-", " | ", fmt("%.2f", m.ms_image), " | ");
            const Measured& u = r.recomputes() ? r.free : m;
            s += u.ran ? gl::cat(fmt("%.2f", u.ms_image), r.recomputes() ? "" : " (the same run)", " | ",
                                 fmt("%.3f", m.ms_image / u.ms_image), " | ")
                       : gl::cat(u.note.empty() ? "not run" : u.note, " | | ");
        }
        s += any_text(r) + " |\n";
    }
    return s;
}

// The table as TSV: bytes and milliseconds as numbers, empty where not measured.
std::string tsv(const Device& d, const std::vector<Row>& rows) {
    std::string s =
        "card_bytes\tsize\tbatch\tgrad_accum\tprecision\toptimizer\trecompute\tpredicted_slowdown\tpredicted_bytes\t"
        "measured_bytes\terror_pct\tnvidia_smi_mib\tms_image\tfree_ms_image\tfree_ratio\tcontext_bytes\t"
        "any_recompute_batch\tany_recompute_slowdown\tnote\n";
    auto num = [](bool have, const char* f, double v) { return have ? fmt(f, v) : std::string(); };
    for (const Row& r : rows) {
        const Measured& m = r.run;
        const Measured& u = r.recomputes() ? r.free : m;
        const bool fits = r.predicted > 0, mem = m.ran && m.device_bytes > 0;
        std::string note = m.note + (r.free.note.empty() ? "" : gl::cat(m.note.empty() ? "" : "; ", "free: ", r.free.note));
        std::replace_if(note.begin(), note.end(), [](char c) { return c == '\t' || c == '\n'; }, ' ');
        s += gl::cat(r.card, "\t", r.size, "\t", fits ? gl::cat(r.step.batch) : "0", "\t",
                     fits ? gl::cat(r.step.grad_accum) : "", "\t", fits ? train::precision_name(r.step.precision) : "",
                     "\t", fits ? r.step.optimizer.name() : "", "\t", fits ? gl::recompute_name(r.plan.recompute) : "",
                     "\t", num(fits, "%.4f", r.slowdown()), "\t", fits ? gl::cat(r.predicted) : "", "\t",
                     mem ? gl::cat(m.device_bytes) : "", "\t",
                     num(mem, "%.3f", 100.0 * (double(m.device_bytes) / double(r.predicted) - 1)), "\t",
                     num(m.ran && m.smi_mib >= 0, "%.0f", m.smi_mib), "\t", num(m.ran, "%.3f", m.ms_image), "\t",
                     num(m.ran && u.ran, "%.3f", u.ms_image), "\t", num(m.ran && u.ran, "%.4f", m.ms_image / u.ms_image),
                     "\t", d.context, "\t", r.any_batch, "\t", num(r.any_batch > 0, "%.4f", r.any_slowdown), "\t",
                     note, "\n");
    }
    return s;
}

int run(const Options& o) {
    const auto start = Clock::now();
    const Device d = find_device(o);
    std::printf("bench_presets: %s UNet, %s, LoRA rank %d, AdamW, text-encoder outputs cached; steps on %s\n"
                "context: %s\ncost model: %s; batch within %.3gx of its step without recompute\n",
                o.tiny ? "tiny" : "SD1.5", train::precision_name(o.precision), o.rank,
                o.plan_only ? "nothing (planned only)" : d.cuda ? "cuda" : "cpu", d.note.c_str(),
                gl::PlanOptions{}.cost.describe().c_str(), o.max_slowdown);
    std::vector<Cell> cells;
    for (size_t card : o.cards)
        for (int64_t size : o.sizes) {
            Cell c;
            c.card = card;
            c.size = size;
            c.request.step = step_options(o, size);
            c.request.vram = card;
            c.request.reserve = d.context;
            c.request.cache_text_encoder = true;
            if (d.runtime) c.request.rules = gl::layout_rules("cuda");
            GL_CHECK(d.context < card, "card ", gl::format_bytes(card), " is not larger than the context (",
                     gl::format_bytes(d.context), ")");
            cells.push_back(std::move(c));
        }
    GL_CHECK(o.no_kohya || d.context < o.kohya_card, "--kohya-card ", gl::format_bytes(o.kohya_card),
             " is not larger than the context (", gl::format_bytes(d.context), ")");
    const auto t0 = Clock::now();
    plan_cells(o, cells);
    std::vector<Row> rows;
    for (const Cell& c : cells) {
        const train::BatchFit& f = c.fit;
        std::printf("planned %s %lld²: batch %lld %s (%d batches fitted, %.1f s)%s\n", gl::format_bytes(c.card).c_str(),
                    (long long)c.size, (long long)f.batch, f.batch ? gl::recompute_name(f.choice.recompute) : "-",
                    f.probes, c.plan_s, o.no_any ? "" : gl::cat("; any recompute: batch ", f.any_batch).c_str());
        if (!c.accumulation.empty()) std::printf("  even batch 1 needs recompute; %s", c.accumulation.c_str());
        rows.push_back(cell_row(o, c));
    }
    for (const auto& [card, batch] : o.goals) {
        GL_CHECK(d.context < card, "--goal card ", gl::format_bytes(card), " is not larger than the context");
        rows.push_back(goal_row(o, d, card, batch, o.sizes.front()));
    }
    if (!o.no_kohya)
        for (int64_t size : o.sizes) rows.push_back(kohya_row(o, d, size));
    double steps_s = 0;  // by the cost model: each run, and the same step without recompute beside it
    for (const Row& r : rows)
        if (r.predicted) steps_s += (o.warmup + o.steps) * (r.seconds + (r.recomputes() ? r.none_seconds : 0));
    std::printf("planned in %.1f s; the runs' steps take about %.0f s by the cost model\n",
                std::chrono::duration<double>(Clock::now() - t0).count(), steps_s);
    std::fflush(stdout);

    bench::RandomWeights weights;
    if (!o.plan_only)
        for (Row& r : rows) {
            if (r.predicted == 0) continue;
            const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
            if (o.deadline > 0 && elapsed > o.deadline) {
                r.run.note = gl::cat("not run: past --deadline ", o.deadline, " s");
                continue;
            }
            r.run = run_config(o, d, weights, r.step, r.plan, r.card - d.context);
            if (r.run.ran && r.recomputes()) {
                gl::PlanOptions none;
                none.cost = r.plan.cost;
                r.free = run_config(o, d, weights, r.step, none, 0);
            }
            const Measured& m = r.run;
            const std::string head = gl::cat("RESULT ", gl::format_bytes(r.card), " ", r.size, "² batch ", r.batch);
            if (!m.ran) {
                std::printf("%s: %s\n", head.c_str(), m.note.c_str());
                continue;
            }
            const std::string memory =
                d.cuda ? gl::cat(", measured ", fmt("%.1f", mib(double(m.device_bytes))), " MiB (", error_pct(r),
                                 "), nvidia-smi ", m.smi_mib >= 0 ? fmt("%.0f MiB", m.smi_mib) : std::string("-"))
                       : std::string();
            const Measured& u = r.recomputes() ? r.free : m;
            std::printf("%s %s: predicted %.1f MiB%s, %.2f ms/image, without limit or recompute %s\n", head.c_str(),
                        gl::recompute_name(r.plan.recompute), mib(double(r.predicted)), memory.c_str(), m.ms_image,
                        u.ran ? fmt("%.2f ms/image", u.ms_image).c_str() : u.note.c_str());
            std::fflush(stdout);
        }
    std::printf("\n%s", table(o, rows).c_str());
    if (!o.out.empty()) {
        gl::io::write_file_atomic(o.out, tsv(d, rows));
        std::printf("\nTSV: %s (%zu rows)\n", o.out.c_str(), rows.size());
    }
    std::printf("\n(%.0f s in all)\n", std::chrono::duration<double>(Clock::now() - start).count());
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    return gl::cli::run_main("bench_presets", [&] { return run(parse(argc, argv)); });
}
