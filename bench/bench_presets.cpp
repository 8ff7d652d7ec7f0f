// bench_presets: the verified-presets table. For each card (a device memory size, the CUDA context
// included) and image size it finds the largest batch, without gradient accumulation, whose SD1.5
// LoRA step fits (train::largest_batch: within --max-slowdown of the same batch without recompute,
// by the cost model; and, planned only, the largest with any recompute), then on CUDA runs that
// configuration with RuntimeOptions::memory_limit = card - context and measures its device memory
// (cudaMemGetInfo with the runtime alive, plus the context; nvidia-smi's per-process figure when it
// answers) and ms/image (median of --steps steps after --warmup), and the same batch without
// recompute and without a limit, for the ratio. Steps as bench_step runs them: random bf16 UNet
// weights, random text-encoder context (its outputs cached), LoRA rank 16, AdamW. Planning runs on
// --jobs threads; runs one after another. --plan-only (any machine) and --tiny (the golden tests'
// UNet, on the CPU too) make the table without a GPU. Built by `ninja bench_presets`.
#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

#include "bench/step_fixtures.h"
#include "ggml-lite/core/autofit.h"
#include "ggml-lite/core/error.h"
#include "tools/common/cli.h"
#include "train/autofit.h"
#include "train/trainer.h"
#if GL_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace {

using Clock = std::chrono::steady_clock;

struct Options {
    bool tiny = false, plan_only = false, no_any = false;
    gl::Backend backend = gl::Backend::automatic;
    std::vector<size_t> cards;
    std::vector<int64_t> sizes;
    double max_slowdown = 1.05, deadline = 0;
    std::string context = "auto";
    int steps = 10, warmup = 2, rank = 16, jobs = 0;
    int64_t effective = 8, max_batch = 4096;
    train::Precision precision = train::Precision::bf16;
};

Options parse(int argc, char** argv) {
    Options o;
    gl::cli::Parser p("bench_presets",
                      "bench_presets: per card (device memory, CUDA context included) and image size, the largest "
                      "SD1.5 LoRA batch without accumulation that fits, its recompute, predicted and measured peak "
                      "and ms/image against the same batch without a limit; a markdown table.");
    p.add_parsed_list("--presets", o.cards, &gl::parse_bytes, "BYTES,...", "card sizes, CUDA context included",
                      "6G,8G,12G,16G,24G");
    p.add_int_list("--size", o.sizes, int64_t(8), int64_t(4096), "square image sides in pixels (default 512,768; "
                                                                  "64,96 with --tiny)");
    p.add_real("--max-slowdown", o.max_slowdown, 1.0, 100.0,
               "the batch's predicted step over the same batch without recompute");
    p.add_flag("--no-any", o.no_any, "skip the largest batch with any recompute (planned only)");
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

// nvidia-smi's figures (MiB; < 0: no answer). "memory.used" is the whole device's, for the device
// CUDA sees first (CUDA_VISIBLE_DEVICES' first entry, an index or UUID, else 0); a query of compute
// apps gives this process's (by pid; when the pid is not listed, as in a container, the one process
// listed is taken, else none).
std::string smi_device() {
    const char* v = std::getenv("CUDA_VISIBLE_DEVICES");
    std::string d = v && *v ? std::string(v) : "0";
    d = d.substr(0, d.find(','));
    const bool plain = !d.empty() && std::all_of(d.begin(), d.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '-';
    });
    return plain ? d : "0";  // it goes into a shell command
}

double smi_device_used_mib() {
    const std::string s =
        command_output("nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -i " + smi_device());
    char* end = nullptr;
    const double v = std::strtod(s.c_str(), &end);
    return end != s.c_str() ? v : -1.0;
}

double smi_process_mib(std::string* how) {
    const std::string s = command_output("nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader,nounits");
    std::vector<std::pair<long, double>> rows;
    long pid = 0;
    double used = 0;
    for (size_t a = 0; a < s.size();) {
        const size_t b = std::min(s.find('\n', a), s.size());
        if (std::sscanf(s.substr(a, b - a).c_str(), "%ld, %lf", &pid, &used) == 2) rows.push_back({pid, used});
        a = b + 1;
    }
    for (const auto& [p, u] : rows)
        if (p == long(getpid())) return *how = "by pid", u;
    if (rows.size() == 1) return *how = "the one process listed", rows[0].second;
    return *how = rows.empty() ? "no process listed" : "several processes, none with this pid", -1.0;
}

size_t device_used_bytes() {
#if GL_HAVE_CUDA
    size_t free = 0, total = 0;
    if (cudaMemGetInfo(&free, &total) == cudaSuccess) return total - free;
#endif
    return 0;
}

struct Device {
    bool cuda = false;  // steps run on CUDA
    bool workspace = false;  // the CUDA workspace is counted beside the plans
    size_t context = 0;  // bytes held beside the plans (the CUDA context)
    size_t used0 = 0;    // device bytes in use right after the context exists
    std::string note;    // how the context was found
};

// The CUDA context, measured before anything else touches the device: nvidia-smi's device figure
// before the context exists against cudaMemGetInfo's right after (every kernel module loaded at
// once, CUDA_MODULE_LOADING=EAGER unless set, so the code the steps run is in it).
Device find_device(const Options& o) {
    Device d;
    std::string why;
    d.cuda = !o.plan_only && gl::resolve_backend(o.backend, &why) == gl::Backend::cuda;
    if (!d.cuda && !o.tiny && !o.plan_only)
        gl::fail("the full-size table needs CUDA (", why, "); --tiny runs on the CPU, --plan-only runs nothing");
    // The workspace depends on the device (which GEMM kernels it can run): counted where one is.
    d.workspace = d.cuda || (o.plan_only && gl::cuda_available());
    const bool given = o.context != "auto";
    if (given) d.context = gl::parse_bytes(o.context);
    if (d.cuda) {
        const double idle = smi_device_used_mib();
        setenv("CUDA_MODULE_LOADING", "EAGER", 0);
        size_t free = 0, total = 0;
        gl::cuda_memory_info(&free, &total);
        d.used0 = total - free;
        const size_t measured = idle >= 0 ? d.used0 - std::min(d.used0, size_t(idle * 1048576.0)) : d.used0;
        d.note = gl::cat("measured ", gl::format_bytes(measured), ": cudaMemGetInfo's ", gl::format_bytes(d.used0),
                         " in use once the context exists (CUDA_MODULE_LOADING=", std::getenv("CUDA_MODULE_LOADING"),
                         ")",
                         idle >= 0 ? gl::cat(" less nvidia-smi's ", idle, " MiB before it") : std::string(
                                                                                                 ", nvidia-smi silent"));
        if (given) d.note = gl::cat("given ", gl::format_bytes(d.context), "; ", d.note);
        else d.context = measured;
    } else {
        if (!given) d.context = gl::parse_bytes("549M");  // the H200's, CUDA 13 (bench/RESULTS.md)
        d.note = gl::cat(given ? "given " : "assumed (no device measured) ", gl::format_bytes(d.context));
    }
    if (!d.workspace) d.note += "; no CUDA workspace counted (no usable CUDA device here)";
    return d;
}

train::StepOptions step_options(const Options& o, int64_t size) {
    train::StepOptions so;
    so.unet = o.tiny ? sd::UnetConfig::tiny() : sd::UnetConfig::sd15();
    so.latent_h = so.latent_w = size / 8;
    so.context_tokens = o.tiny ? 8 : 77;
    so.precision = o.precision;
    so.lora = lora::LoraConfig{o.rank, float(o.rank), 1.0f};
    return so;
}

struct Measured {
    bool ran = false;
    std::string note;         // why not, or what happened
    double ms_image = 0;      // median step over the batch
    size_t device_bytes = 0;  // cudaMemGetInfo with the runtime alive, less what was in use before the context
    double smi_mib = -1;      // nvidia-smi's figure for this process
    std::string smi_how;
};

struct Cell {
    size_t card = 0;
    int64_t size = 0;
    train::AutoFitRequest request;
    train::BatchFit fit;
    size_t predicted = 0;  // the chosen plan, its workspace and the context
    std::string accumulation;  // where even batch 1 needs recompute: the accumulated alternative
    double plan_s = 0;
    Measured run, free;  // the chosen configuration within the card; the same batch without limit or recompute
};

void plan_cell(const Options& o, Cell& c) {
    const auto t0 = Clock::now();
    train::BatchSearch s;
    s.max_slowdown = o.max_slowdown;
    s.max_batch = o.max_batch;
    s.any_recompute = !o.no_any;
    c.fit = train::largest_batch(c.request, s);
    if (const gl::FitRow* row = c.fit.choice.result.chosen(); c.fit.batch > 0) c.predicted = row->peak_bytes;
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

// Builds, plans and runs one configuration; measures it.
Measured run_config(const Options& o, const Device& d, const train::StepOptions& so, const gl::PlanOptions& po,
                    size_t memory_limit) {
    Measured m;
    auto s = train::build_step(so);
    gl::Plan plan = gl::make_plan(s->g, po);
    if (d.cuda && memory_limit == 0) {  // without a limit: is there room on this device at all?
        size_t free = 0, total = 0;
        gl::cuda_memory_info(&free, &total);
        const size_t need = plan.total_bytes() + gl::cuda_workspace_bytes(plan.graph);
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
    bench::write_random_weights(*s->unet_weights, *rt);
    train::Trainer tr(*s, *rt, train::TrainerOptions{});
    tr.init(1);
    const std::vector<float> lat = bench::randn(size_t(s->latent_numel()), 7), ctx = bench::randn(size_t(s->context_numel()), 8);
    std::vector<double> ms;
    for (int k = 0; k < o.warmup + o.steps; k++) {
        const auto a = Clock::now();
        tr.step(lat, ctx);
        if (k >= o.warmup) ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - a).count());
    }
    m.ran = true;
    m.ms_image = bench::median(ms) / double(so.batch);
    if (d.cuda) {
        m.device_bytes = std::max(device_used_bytes(), d.used0) - d.used0 + d.context;
        m.smi_mib = smi_process_mib(&m.smi_how);
    }
    return m;
}

std::string table(const Options& o, const std::vector<Cell>& cells) {
    std::string s =
        "| card | size | batch | recompute | predicted × | predicted peak MiB | measured MiB | error | nvidia-smi MiB "
        "| ms/image | no limit, no recompute ms/image | × | largest with any recompute (predicted ×) |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n";
    for (const Cell& c : cells) {
        const train::BatchFit& f = c.fit;
        s += gl::cat("| ", gl::format_bytes(c.card), " | ", c.size, "² | ");
        if (f.batch == 0) {
            s += "nothing fits | | | | | | | | | | |\n";
            continue;
        }
        const bool none = f.choice.recompute == gl::Recompute::none;
        s += gl::cat(f.batch, " | ", none ? "none" : "budget", " | ", fmt("%.3f", f.seconds / f.none_seconds), " | ",
                     fmt("%.1f", mib(double(c.predicted))), " | ");
        const Measured& r = c.run;
        if (!r.ran) {
            s += gl::cat(o.plan_only ? "planned only" : r.note.empty() ? "not run" : r.note, " | | | | | | ");
        } else {
            const bool mem = r.device_bytes > 0;
            s += gl::cat(mem ? fmt("%.1f", mib(double(r.device_bytes))) : "-", " | ",
                         mem ? fmt("%+.2f %%", 100.0 * (double(r.device_bytes) / double(c.predicted) - 1)) : "-",
                         " | ", r.smi_mib >= 0 ? fmt("%.0f", r.smi_mib) : "-", " | ", fmt("%.2f", r.ms_image), " | ");
            const Measured& u = none ? r : c.free;
            s += u.ran ? gl::cat(fmt("%.2f", u.ms_image), none ? " (the same run)" : "", " | ",
                                 fmt("%.3f", r.ms_image / u.ms_image), " | ")
                       : gl::cat(u.note.empty() ? "not run" : u.note, " | | ");
        }
        s += !o.no_any && f.any_batch > 0
                 ? gl::cat(f.any_batch, " (", fmt("%.3f", f.any_seconds / f.any_none_seconds), ") |\n")
                 : std::string(" |\n");
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
            if (d.workspace) c.request.workspace = [](const gl::Graph& g) { return gl::cuda_workspace_bytes(g); };
            GL_CHECK(d.context < card, "card ", gl::format_bytes(card), " is not larger than the context (",
                     gl::format_bytes(d.context), ")");
            cells.push_back(std::move(c));
        }
    const auto t0 = Clock::now();
    plan_cells(o, cells);
    double steps_s = 0;
    for (const Cell& c : cells) {
        const train::BatchFit& f = c.fit;
        std::printf("planned %s %lld²: batch %lld %s (%d batches fitted, %.1f s)%s\n", gl::format_bytes(c.card).c_str(),
                    (long long)c.size, (long long)f.batch, f.batch ? gl::recompute_name(f.choice.recompute) : "-",
                    f.probes, c.plan_s,
                    o.no_any ? "" : gl::cat("; any recompute: batch ", f.any_batch).c_str());
        if (!c.accumulation.empty()) std::printf("  even batch 1 needs recompute; %s", c.accumulation.c_str());
        steps_s += (o.warmup + o.steps) * (f.seconds + (f.choice.recompute == gl::Recompute::none ? 0 : f.none_seconds));
    }
    std::printf("planned in %.1f s; the runs' steps take about %.0f s by the cost model\n",
                std::chrono::duration<double>(Clock::now() - t0).count(), steps_s);
    std::fflush(stdout);

    if (!o.plan_only)
        for (Cell& c : cells) {
            if (c.fit.batch == 0) continue;
            const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
            if (o.deadline > 0 && elapsed > o.deadline) {
                c.run.note = gl::cat("not run: past --deadline ", o.deadline, " s");
                continue;
            }
            const train::StepOptions so = c.fit.choice.step;
            c.run = run_config(o, d, so, c.fit.choice.plan_options(0), c.card - d.context);
            if (c.fit.choice.recompute != gl::Recompute::none) {
                gl::PlanOptions none;
                none.cost = c.fit.choice.cost;
                c.free = run_config(o, d, so, none, 0);
            }
            const Measured& r = c.run;
            if (!r.ran) {
                std::printf("RESULT %s %lld² batch %lld: %s\n", gl::format_bytes(c.card).c_str(), (long long)c.size,
                            (long long)so.batch, r.note.c_str());
                continue;
            }
            const std::string memory =
                d.cuda ? gl::cat(", measured ", fmt("%.1f", mib(double(r.device_bytes))), " MiB, nvidia-smi ",
                                 r.smi_mib >= 0 ? fmt("%.0f MiB", r.smi_mib) : std::string("-"), " (", r.smi_how, ")")
                       : std::string();
            std::printf("RESULT %s %lld² batch %lld %s: predicted %.1f MiB%s, %.2f ms/image, without limit %s\n",
                        gl::format_bytes(c.card).c_str(), (long long)c.size, (long long)so.batch,
                        gl::recompute_name(c.fit.choice.recompute), mib(double(c.predicted)), memory.c_str(),
                        r.ms_image,
                        (c.free.ran || c.fit.choice.recompute == gl::Recompute::none)
                            ? fmt("%.2f ms/image", (c.free.ran ? c.free : r).ms_image).c_str()
                            : c.free.note.c_str());
            std::fflush(stdout);
        }
    std::printf("\n%s", table(o, cells).c_str());
    std::printf("\n(%.0f s in all)\n", std::chrono::duration<double>(Clock::now() - start).count());
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    return gl::cli::run_main("bench_presets", [&] { return run(parse(argc, argv)); });
}
