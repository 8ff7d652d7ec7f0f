// sdtrain's refusals before a run (bad paths, FIFOs, an unwritable output folder, a plan that does
// not fit) leave existing files untouched; --dry_run and auto-fit plan without training; the console
// (lines, the progress line below them, the summary, the recording behind it); the binary trains
// the tiny model from a kohya config file; a signal mid-run saves, exits with 130 and leaves
// a state to resume from, a second one ends the program at once, both leaving earlier saves whole.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <sstream>
#include <thread>

#include "ggml-lite/io/safetensors.h"
#include "sdtrain_fixtures.h"
#include "tools/sdtrain/console.h"
#include "train/metrics.h"
#include "train/run/session.h"

using namespace sdtrain_test;

namespace {

std::string slurp(const fs::path& p) {
    std::ifstream f(p, std::ios::binary);
    std::ostringstream s;
    s << f.rdbuf();
    return s.str();
}

// The gl::Error message of preparing and running c, or "(no error)".
std::string run_error(const train::RunConfig& c) {
    try {
        train::Session(c).run();
    } catch (const gl::Error& e) {
        return e.what();
    }
    return "(no error)";
}

}  // namespace

TEST_CASE("sdtrain run: bad paths, unwritable output and bad states are refused, existing files untouched") {
    Scratch s("refusals");
    const fs::path model = make_tiny_model(s.root), data = make_dataset(s.root), out = s.root / "out";
    write_text(out / "tiny.safetensors", "an earlier LoRA");
    write_text(out / "tiny-step00000002.safetensors", "an earlier step save");
    const train::RunConfig good = tiny_config(model, data, out);

    const struct {
        std::function<void(train::RunConfig&)> change;
        std::string error;
    } cases[] = {
        {[&](train::RunConfig& c) { c.pretrained_model_name_or_path = (s.root / "no-such-model").string(); },
         "no-such-model"},
        {[&](train::RunConfig& c) { c.train_data_dir = (s.root / "no-such-data").string(); }, "no-such-data"},
        {[&](train::RunConfig& c) { c.train_data_dir = model.string(); }, "no <repeats>_<name> folder"},
        {[&](train::RunConfig& c) { c.reg_data_dir = (s.root / "no-reg").string(); }, "no-reg"},
        {[&](train::RunConfig& c) { c.output_dir = (out / "tiny.safetensors").string(); }, "exists and is not a folder"},
        {[&](train::RunConfig& c) { c.output_dir = (out / "tiny.safetensors" / "sub").string(); }, "cannot be created"},
        // Unwritable, even by root: procfs takes no new files or folders.
        {[&](train::RunConfig& c) { c.output_dir = "/proc/gl-sdtrain-out"; },
         "--output_dir /proc/gl-sdtrain-out: cannot be created"},
        {[&](train::RunConfig& c) { c.output_dir = "/proc/self"; },
         "--output_dir /proc/self: files cannot be created there"},
        {[&](train::RunConfig& c) { c.resume = (s.root / "no-state").string(); }, "--resume"},
        {[&](train::RunConfig& c) { c.resume = data.string(); }, "train_state.json"},
        {[&](train::RunConfig& c) { c.network_weights = (s.root / "no-lora.safetensors").string(); }, "--network_weights"},
        {[&](train::RunConfig& c) { c.dataset_config = (s.root / "no.toml").string(), c.train_data_dir.reset(); },
         "no.toml"},
        {[&](train::RunConfig& c) { c.vram_limit = "1M"; }, "--vram_limit 1M"},
        {[&](train::RunConfig& c) { c.clip_skip = 5; }, "--clip_skip 5: the text encoder has 2 layers"},
        {[&](train::RunConfig& c) { c.sample_prompts = "p.txt"; }, "--sample_prompts"},
        // A FIFO would block the reader forever; a folder is not a file.
        {[&](train::RunConfig& c) { c.dataset_config = (s.root / "fifo").string(), c.train_data_dir.reset(); },
         "--dataset_config: dataset config " + (s.root / "fifo").string() +
             ": is a FIFO (named pipe), not a regular file"},
        {[&](train::RunConfig& c) { c.sample_prompts = (s.root / "fifo").string(); }, "is a FIFO (named pipe)"},
        {[&](train::RunConfig& c) { c.sample_prompts = data.string(); }, "not a regular file"},
        {[&](train::RunConfig& c) { c.network_weights = (s.root / "fifo").string(); }, "--network_weights"},
        {[&](train::RunConfig& c) { c.resume = (s.root / "fifo").string(); }, "--resume"},
    };
    REQUIRE(::mkfifo((s.root / "fifo").c_str(), 0644) == 0);
    if (::geteuid() != 0) {  // root writes anywhere: the permission case needs another user
        REQUIRE(::mkdir((s.root / "read-only").c_str(), 0555) == 0);
        train::RunConfig c = good;
        c.output_dir = (s.root / "read-only").string();
        CHECK(run_error(c).find("files cannot be created there") != std::string::npos);
    }
    for (const auto& k : cases) {
        train::RunConfig c = good;
        k.change(c);
        const std::string e = run_error(c);
        CAPTURE(e);
        CHECK(e.find(k.error) != std::string::npos);
        CHECK(slurp(out / "tiny.safetensors") == "an earlier LoRA");
        CHECK(slurp(out / "tiny-step00000002.safetensors") == "an earlier step save");
        CHECK_FALSE(fs::exists(out / "metrics.jsonl"));  // nothing recorded before the run starts
    }
    // A state of another run (other batch size) is refused naming why.
    train::RunConfig a = tiny_config(model, data, s.root / "a");
    a.max_train_steps = 2;
    a.save_state_on_train_end = true;
    train::Session(a).run();
    train::RunConfig b = good;
    b.resume = (s.root / "a" / "tiny-state").string();
    b.train_batch_size = 3;
    CHECK(run_error(b).find("differ from the run that saved the state") != std::string::npos);
    b.train_batch_size = 2;
    b.seed = 7;
    CHECK(run_error(b).find("the state was trained with --seed 42") != std::string::npos);
    CHECK(slurp(out / "tiny.safetensors") == "an earlier LoRA");
}

TEST_CASE("sdtrain run: --dry_run and --vram_limit plan without training") {
    Scratch s("plan");
    const fs::path model = make_tiny_model(s.root), data = make_dataset(s.root);
    train::RunConfig c = tiny_config(model, data, s.root / "out");
    c.dry_run = true;
    const train::RunSummary r = train::Session(c).run();
    CHECK(r.dry_run);
    CHECK(r.planned_device_bytes > 0);
    CHECK(fs::is_empty(s.root / "out"));

    // The memory plan refuses before loading anything and lists what would fit.
    c.vram_limit = "64K";
    try {
        train::Session(c).prepare();
        FAIL("a plan above --vram_limit was accepted");
    } catch (const train::PlanRefused& e) {
        const std::string t = e.what();
        CHECK(t.find("--vram_limit 64K") != std::string::npos);
        CHECK(t.find("batch") != std::string::npos);  // the table of configurations tried
    }
    // A limit that fits: auto-fit picks a configuration and says so.
    c.vram_limit = "1G";
    train::Session fit(c);
    const train::RunPlan& p = fit.prepare();
    CHECK(p.memory.choice.find("auto-fit (--vram_limit 1G)") != std::string::npos);
    CHECK(p.memory.limit == size_t(1) << 30);
    CHECK(p.memory.predicted_peak <= p.memory.limit);

    // The VAE encoder on the device (latents not cached) shares the run's memory with the steps:
    // a limit under the unconstrained plan fits the whole layout, not the step graphs alone.
    c.cache_latents = false;
    c.vram_limit.reset();
    const size_t unconstrained = train::Session(c).prepare().memory.predicted_peak;
    for (double share : {0.95, 0.85}) {
        const size_t limit = size_t(double(unconstrained) * share) / 1024 * 1024;
        c.vram_limit = std::to_string(limit / 1024) + "K";
        CAPTURE(c.vram_limit);
        train::Session tight(c);
        const train::RunPlan& q = tight.prepare();
        CHECK(q.memory.predicted_peak <= limit);
        CHECK(q.memory.planned_bytes <= limit);
    }
}

TEST_CASE("sdtrain console: plan and messages as lines, the progress line redrawn below them, the summary") {
    Scratch s("console");
    std::string screen;
    double now = 0;
    gl::cli::ProgressOptions po;
    po.tty = true;
    po.redraw_seconds = 0;
    sdtrain::Console con(gl::cli::Progress(
        po, [&](std::string_view w) { screen += w; }, [] { return 160; }, [&] { return now; }));
    train::RunPlan plan;
    plan.dataset = "dataset (folders):\n";
    plan.memory.by_category = "memory plan (cuda; ...):\n  predicted peak 1.5 GiB\n";
    plan.config = {{"Model", {{"pretrained_model_name_or_path", "m.safetensors"}}}};
    con.on_plan(plan);
    con.on_message("caching latents: 6/6");
    CHECK_FALSE(fs::exists(s.root / "metrics.jsonl"));  // nothing written before training starts
    con.on_start({.output_dir = s.root.string(), .name = "sks", .total_steps = 3, .epochs = 1, .updates_per_epoch = 3});
    for (int64_t step = 1; step <= 3; step++) {
        now += 0.5;
        train::StepEvent e;
        e.step = step;
        e.total_steps = 3;
        e.loss = e.loss_mean = 0.25;
        e.lr_unet = 1e-4;
        e.images = 4;
        e.device_bytes_in_use = size_t(1) << 30;  // as on CUDA
        e.planned_bytes = size_t(3) << 29;
        con.on_step(e);
        if (step == 2) con.on_save({(s.root / "sks-step00000002.safetensors").string(), false, false, 2, 1, {}});
    }
    train::RunSummary sum;
    sum.steps = 3;
    sum.final_file = (s.root / "sks.safetensors").string();
    sum.peak_host_anon_bytes = size_t(80) << 20;
    sum.peak_host_bytes = size_t(120) << 20;
    sum.planned_device_bytes = size_t(3) << 29;
    sum.peak_device_bytes = size_t(1) << 30;
    con.on_end(sum);
    CAPTURE(screen);
    CHECK(screen.rfind(plan.text() + "caching latents: 6/6\n", 0) == 0);
    // The save's line clears the progress line, which is drawn again below it.
    const size_t saved =
        screen.find("\r\x1b[Ksaved " + (s.root / "sks-step00000002.safetensors").string() + "\n\rstep 2/3");
    CHECK(saved != std::string::npos);
    CHECK(screen.find("mem 1.00/1.50 GiB", saved) != std::string::npos);
    CHECK(screen.find("\rstep 3/3", saved) != std::string::npos);
    for (const std::string& l :
         {std::string("done: 3 steps"), std::string("host memory: peak 80.0 MiB of its own, 120.0 MiB resident"),
          std::string("device memory: planned 1.50 GiB, measured peak 1.00 GiB"),
          "the LoRA: " + (s.root / "sks.safetensors").string(), "report:   " + (s.root / "report.html").string()})
        CHECK_MESSAGE(screen.find("\n" + l) != std::string::npos, l);
    // The recording behind it: three steps, the save, the end; the report with the run's figures.
    const train::MetricsHistory h = train::read_metrics(s.root / "metrics.jsonl");
    CHECK(h.steps.size() == 3);
    CHECK(h.steps[2].mem_used == size_t(1) << 30);
    CHECK(h.events.back().message == "finished: 3 steps");
    const std::string html = slurp(s.root / "report.html");
    CHECK(html.find("<th>Peak host memory</th><td>80.0 MiB of its own") != std::string::npos);
    CHECK(html.find("<th>Device memory, measured</th><td>1.00 GiB peak in use, 1.50 GiB predicted") !=
          std::string::npos);
    CHECK(html.find("<th>pretrained_model_name_or_path</th><td>m.safetensors</td>") != std::string::npos);
}

#ifdef GL_SDTRAIN_BIN
#include "sdtrain_child.h"
TEST_CASE("sdtrain binary: trains the tiny model from a kohya config file") {
    Scratch s("bin");
    const fs::path model = make_tiny_model(s.root), data = make_dataset(s.root), out = s.root / "out";
    write_text(s.root / "run.toml", "[model]\npretrained_model_name_or_path = \"" + model.string() +
                                        "\"\n[data]\ntrain_data_dir = \"" + data.string() +
                                        "\"\nresolution = \"48\"\nenable_bucket = true\nbucket_no_upscale = true\n"
                                        "bucket_reso_steps = 8\nmin_bucket_reso = 16\ncaption_extension = \".txt\"\n"
                                        "cache_latents = true\ntrain_batch_size = 2\n[train]\nnetwork_module = "
                                        "\"networks.lora\"\nmax_train_steps = 2\nlearning_rate = 1e-3\nseed = 3\n"
                                        "output_dir = \"" + out.string() + "\"\nxformers = true\n");
    const std::string cmd = std::string(GL_SDTRAIN_BIN) + " --config_file " + (s.root / "run.toml").string() +
                            " --backend cpu --output_name bin 2>&1";
    FILE* p = popen(cmd.c_str(), "r");
    REQUIRE(p);
    std::string text;
    char buf[4096];
    while (size_t n = fread(buf, 1, sizeof buf, p)) text.append(buf, n);
    const int status = pclose(p);
    CAPTURE(text);
    CHECK(WEXITSTATUS(status) == 0);
    CHECK(text.find("steps:") != std::string::npos);
    CHECK(text.find("predicted peak") != std::string::npos);
    CHECK(text.find("note: --xformers: not needed") != std::string::npos);
    CHECK(text.find("step 2/2") != std::string::npos);
    CHECK(fs::exists(out / "bin.safetensors"));
}

namespace {

using Child = gltest::SdtrainChild;  // tests/sdtrain_child.h

// Step records in a metrics file (0 while it does not exist).
int64_t steps_recorded(const fs::path& metrics) {
    const std::string t = slurp(metrics);
    int64_t n = 0;
    const std::string key = "\"type\":\"step\"";
    for (size_t at = t.find(key); at != std::string::npos; at = t.find(key, at + 1)) n++;
    return n;
}

// Waits until the run has recorded `steps` steps (false after a minute, or when it ended).
bool wait_for_steps(Child& c, const fs::path& metrics, int64_t steps) {
    for (int i = 0; i < 3000; i++) {
        if (steps_recorded(metrics) >= steps) return true;
        if (::waitpid(c.pid, nullptr, WNOHANG) == c.pid) {
            c.pid = -1;
            return false;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
}

std::vector<std::string> long_run_args(const fs::path& model, const fs::path& data, const fs::path& out) {
    return {"--pretrained_model_name_or_path", model.string(), "--train_data_dir", data.string(), "--resolution", "48",
            "--enable_bucket", "--bucket_no_upscale", "--bucket_reso_steps", "8", "--min_bucket_reso", "16",
            "--caption_extension", ".txt", "--cache_latents", "--train_batch_size", "2", "--network_module",
            "networks.lora", "--network_dim", "4", "--learning_rate", "1e-3", "--seed", "42", "--backend", "cpu",
            "--output_dir", out.string(), "--output_name", "tiny", "--save_every_n_steps", "3",
            "--max_train_steps", "1000000"};
}

// Every LoRA file in the folder opens and holds tensors; no temporary file is left.
void check_saves_whole(const fs::path& out) {
    int files = 0;
    for (const auto& e : fs::directory_iterator(out)) {
        const std::string name = e.path().filename().string();
        CAPTURE(name);
        CHECK(name.find(".tmp") == std::string::npos);
        CHECK(name.find(".partial") == std::string::npos);
        if (e.path().extension() != ".safetensors") continue;
        CHECK_FALSE(gl::io::SafetensorsFile(e.path().string()).list().empty());
        files++;
    }
    CHECK(files > 0);
}

}  // namespace

TEST_CASE("sdtrain binary: a signal mid-run saves the LoRA and a state, exits 130, and the run resumes") {
    Scratch s("signal");
    const fs::path model = make_tiny_model(s.root), data = make_dataset(s.root), out = s.root / "out";
    // An earlier LoRA of the same name: the stopped run must leave it as it was.
    train::RunConfig earlier = tiny_config(model, data, out);
    earlier.max_train_steps = 1;
    train::Session(earlier).run();
    const std::string earlier_bytes = slurp(out / "tiny.safetensors");
    fs::remove(out / "metrics.jsonl");
    fs::remove(out / "report.html");

    Child c(long_run_args(model, data, out), s.root / "log.txt");
    REQUIRE(wait_for_steps(c, out / "metrics.jsonl", 5));
    REQUIRE(::kill(c.pid, SIGINT) == 0);
    const std::optional<int> status = c.wait(120);
    const std::string log = slurp(c.log);
    CAPTURE(log);
    REQUIRE(status);
    REQUIRE(WIFEXITED(*status));
    CHECK(WEXITSTATUS(*status) == 130);
    CHECK(log.find("sdtrain: stopping after the current step") != std::string::npos);

    // The step it stopped at: saved as a LoRA that loads and a state, both named in the log.
    const train::MetricsHistory h = train::read_metrics(out / "metrics.jsonl");
    REQUIRE_FALSE(h.steps.empty());
    const int64_t step = h.steps.back().step;
    CHECK(step >= 5);
    char name[64];
    std::snprintf(name, sizeof name, "tiny-step%08lld", (long long)step);
    const fs::path lora = out / (std::string(name) + ".safetensors"), state = out / (std::string(name) + "-state");
    const gl::io::SafetensorsFile f(lora.string());
    CHECK(f.metadata().at("ss_steps") == std::to_string(step));
    CHECK(fs::is_regular_file(state / "train_state.json"));
    CHECK(log.find(gl::cat("stopped at step ", step, ": the LoRA is ", lora.string())) != std::string::npos);
    CHECK(log.find("continue with --resume " + state.string()) != std::string::npos);
    const std::string saved_line = "saved " + lora.string() + "\n";  // once, also when the stop came at a save step
    CHECK(log.find(saved_line) != std::string::npos);
    CHECK(log.find(saved_line) == log.rfind(saved_line));
    CHECK(h.events.back().kind == train::EventKind::end);
    CHECK(h.events.back().message.rfind(gl::cat("stopped at step ", step, " (Ctrl-C)"), 0) == 0);
    CHECK(slurp(out / "report.html").find(gl::cat("stopped at step ", step, " (Ctrl-C)")) != std::string::npos);
    CHECK(slurp(out / "tiny.safetensors") == earlier_bytes);
    check_saves_whole(out);

    // Resumed from the state for two more steps: it continues where it stopped.
    std::vector<std::string> args = long_run_args(model, data, out);
    args.back() = std::to_string(step + 2);
    args.insert(args.end(), {"--resume", state.string()});
    Child r(args, s.root / "resume-log.txt");
    const std::optional<int> rs = r.wait(120);
    CAPTURE(slurp(r.log));
    REQUIRE(rs);
    CHECK(WIFEXITED(*rs));
    CHECK(WEXITSTATUS(*rs) == 0);
    CHECK(gl::io::SafetensorsFile((out / "tiny.safetensors").string()).metadata().at("ss_steps") ==
          std::to_string(step + 2));
    const train::MetricsHistory after = train::read_metrics(out / "metrics.jsonl");
    REQUIRE(after.steps.size() == size_t(step + 2));
    for (size_t i = 0; i < after.steps.size(); i++) CHECK(after.steps[i].step == int64_t(i) + 1);
}

TEST_CASE("sdtrain binary: a second signal ends the program at once, earlier saves stay whole") {
    Scratch s("signal2");
    const fs::path model = make_tiny_model(s.root), data = make_dataset(s.root), out = s.root / "out";
    train::RunConfig earlier = tiny_config(model, data, out);
    earlier.max_train_steps = 1;
    train::Session(earlier).run();
    const std::string earlier_bytes = slurp(out / "tiny.safetensors");

    Child c(long_run_args(model, data, out), s.root / "log.txt");
    REQUIRE(wait_for_steps(c, out / "metrics.jsonl", 4));
    // Two signals of different kinds, so that neither merges into the other while pending: the
    // second arrives long before the step in progress could end and save.
    REQUIRE(::kill(c.pid, SIGINT) == 0);
    REQUIRE(::kill(c.pid, SIGTERM) == 0);
    const std::optional<int> status = c.wait(60);
    const std::string log = slurp(c.log);
    CAPTURE(log);
    REQUIRE(status);
    REQUIRE(WIFSIGNALED(*status));
    CHECK((WTERMSIG(*status) == SIGINT || WTERMSIG(*status) == SIGTERM));
    CHECK(log.find("sdtrain: stopped at once (second signal)") != std::string::npos);
    CHECK(slurp(out / "tiny.safetensors") == earlier_bytes);
    check_saves_whole(out);
    const train::MetricsHistory h = train::read_metrics(out / "metrics.jsonl");
    for (size_t i = 1; i < h.steps.size(); i++) CHECK(h.steps[i].step == h.steps[i - 1].step + 1);
}
#endif
