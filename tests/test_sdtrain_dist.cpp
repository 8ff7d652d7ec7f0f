// sdtrain's data parallelism end to end on the CPU: the launch rules (tools/sdtrain/launch.h) for
// a host of simulated GPUs and a launcher's environment; the loader's slices of the global batches
// (data/loader.h); and the binary itself, `--num_processes 2 --dist_backend tcp` on the tiny model:
// the LoRA of 2 ranks x batch 1 against 1 process x batch 2, rank 0's outputs alone, a killed rank
// stopping the other, a resume with another world size refused; and train/run/ranks.h's gather, update
// exchange and agreement check over an in-process world.
#include <doctest/doctest.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "data/loader.h"
#include "ggml-lite/dist/local.h"
#include "ggml-lite/io/safetensors.h"
#include "sdtrain_fixtures.h"
#include "test_util.h"
#include "tools/common/cli.h"
#include "tools/sdtrain/launch.h"
#include "train/run/ranks.h"

using namespace sdtrain_test;

namespace {

gl::dist::EnvLookup env_of(std::map<std::string, std::string> vars) {
    return [vars](const std::string& k) -> std::optional<std::string> {
        const auto it = vars.find(k);
        if (it == vars.end()) return std::nullopt;
        return it->second;
    };
}

train::RunConfig launch_config(std::optional<std::string> gpus, std::optional<int> n,
                               std::optional<std::string> backend = std::nullopt) {
    train::RunConfig c;
    c.gpus = std::move(gpus);
    c.num_processes = n;
    c.dist_backend = std::move(backend);
    return c;
}

// The usage error plan_launch gives on a host of `devices` GPUs, or "(no error)".
std::string launch_error(const train::RunConfig& c, int devices, std::map<std::string, std::string> env = {}) {
    try {
        sdtrain::plan_launch(c, env_of(env), [devices] { return devices; });
    } catch (const gl::cli::UsageError& e) {
        return e.what();
    }
    return "(no error)";
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("sdtrain launch: --gpus and --num_processes on one host, a launcher's rank, refusals before any rank") {
    using Mode = sdtrain::LaunchPlan::Mode;
    const auto none = env_of({});
    auto plan = [&](const train::RunConfig& c, int devices) { return sdtrain::plan_launch(c, none, [devices] { return devices; }); };
    // Two GPUs: a rank each over NCCL.
    sdtrain::LaunchPlan p = plan(launch_config("0,1", std::nullopt), 2);
    CHECK(p.mode == Mode::supervise);
    CHECK(p.processes == 2);
    CHECK(p.child_gpus == std::vector<int>{0, 1});
    CHECK(p.dist_backend == "nccl");
    p = plan(launch_config(std::nullopt, 2), 4);  // the first two GPUs
    CHECK(p.child_gpus == std::vector<int>{0, 1});
    // Two ranks on the one GPU through TCP; on the CPU through TCP by default.
    p = plan(launch_config(std::nullopt, 2, "tcp"), 1);
    CHECK(p.mode == Mode::supervise);
    CHECK(p.child_gpus == std::vector<int>{0, 0});
    p = plan(launch_config(std::nullopt, 3), 0);
    CHECK(p.dist_backend == "tcp");
    CHECK(p.child_gpus == std::vector<int>{-1, -1, -1});
    // One process: no ranks; --gpus 1 alone picks the GPU.
    p = plan(launch_config("1", std::nullopt), 2);
    CHECK(p.mode == Mode::single);
    CHECK(p.gpu == 1);
    CHECK(plan(launch_config(std::nullopt, std::nullopt), 0).mode == Mode::single);

    // Refused, naming the options, before any rank starts.
    CHECK(has(launch_error(launch_config("7", std::nullopt), 2), "--gpus 7: GPU 7 does not exist (this host has 2 CUDA devices: 0..1)"));
    CHECK(has(launch_error(launch_config("7", std::nullopt), 0), "--gpus 7: this host has no CUDA device"));
    CHECK(has(launch_error(launch_config("0,1", 3), 4), "--num_processes 3 and --gpus 0,1 (2 GPUs) disagree"));
    CHECK(has(launch_error(launch_config("0,1", 1, "tcp"), 4), "fewer processes than GPUs"));
    CHECK(launch_error(launch_config("0", 2, "tcp"), 1) == "(no error)");
    CHECK(has(launch_error(launch_config(std::nullopt, 4), 2), "--num_processes 4: this host has 2 CUDA devices"));
    CHECK(has(launch_error(launch_config("0,a", std::nullopt), 2), "--gpus '0,a': a comma-separated list"));
    CHECK(has(launch_error(launch_config("1,1", std::nullopt), 2), "GPU 1 is listed twice"));
    CHECK(has(launch_error(launch_config(std::nullopt, 2, "mpi"), 2), "--dist_backend 'mpi': nccl or tcp"));
    CHECK(has(launch_error(launch_config(std::nullopt, 2, "nccl"), 0), "--dist_backend nccl: this run is on the CPU"));
    train::RunConfig cpu = launch_config("0", std::nullopt);
    cpu.backend = gl::Backend::cpu;
    CHECK(has(launch_error(cpu, 1), "--gpus 0 with --backend cpu"));

    // torchrun / srun: this process is a rank; --gpus maps its LOCAL_RANK to a GPU, and the
    // devices are not counted (that would fix CUDA's visible devices before the choice).
    const std::map<std::string, std::string> torchrun = {{"RANK", "3"},       {"WORLD_SIZE", "4"},
                                                         {"LOCAL_RANK", "1"}, {"MASTER_ADDR", "10.0.0.1"},
                                                         {"MASTER_PORT", "29500"}};
    bool counted = false;
    p = sdtrain::plan_launch(launch_config("2,3", 4), env_of(torchrun), [&] { counted = true; return 8; });
    CHECK(p.mode == Mode::rank);
    CHECK(p.rendezvous.rank == 3);
    CHECK(p.rendezvous.world_size == 4);
    CHECK(p.gpu == 3);
    CHECK_FALSE(counted);
    CHECK(has(launch_error(launch_config("2", std::nullopt), 8, torchrun), "local rank 1 has no GPU of its own"));
    std::map<std::string, std::string> launched = torchrun;
    launched["SDTRAIN_LAUNCHED"] = "1";  // the supervisor's child: CUDA_VISIBLE_DEVICES is chosen already
    CHECK(sdtrain::plan_launch(launch_config("2,3", 4), env_of(launched), [] { return 8; }).gpu == -1);
    // No --gpus: an NCCL rank takes GPU LOCAL_RANK, unless the launcher left it one (srun --gpus-per-task 1).
    CHECK(sdtrain::plan_launch(launch_config(std::nullopt, std::nullopt), env_of(torchrun), [] { return 8; }).gpu == 1);
    std::map<std::string, std::string> one_gpu = torchrun;
    one_gpu["CUDA_VISIBLE_DEVICES"] = "5";
    CHECK(sdtrain::plan_launch(launch_config(std::nullopt, std::nullopt), env_of(one_gpu), [] { return 8; }).gpu == -1);
}

TEST_CASE("ranks: a gather in rank order, the update exchange, and a digest that differs named by its rank") {
    gl::dist::LocalWorld world(3, std::chrono::seconds(10));
    std::vector<std::string> agree_err(3), differ_err(3);
    std::vector<std::vector<std::string>> gathered(3);
    std::vector<train::UpdateExchange> x(3);
    std::vector<std::thread> threads;
    for (int r = 0; r < 3; r++)
        threads.emplace_back([&, r] {
            gl::dist::Communicator& c = world.rank(r);
            gathered[size_t(r)] = train::gather_over_ranks(c, std::string(size_t(r + 1), char('a' + r)));
            x[size_t(r)] = train::exchange_update(c, 0.25 * (r + 1), r == 2);
            try {
                train::check_ranks_agree(c, "the plan", "same");
            } catch (const gl::Error& e) {
                agree_err[size_t(r)] = e.what();
            }
            try {
                train::check_ranks_agree(c, "the LoRA at step 3", r == 2 ? "other" : "same", "diverged");
            } catch (const gl::Error& e) {
                differ_err[size_t(r)] = e.what();
            }
        });
    for (auto& t : threads) t.join();
    for (int r = 0; r < 3; r++) {
        CAPTURE(r);
        CHECK(gathered[size_t(r)] == std::vector<std::string>{"a", "bb", "ccc"});
        CHECK(x[size_t(r)].loss == 1.5);  // 0.25 + 0.5 + 0.75 on every rank
        CHECK(x[size_t(r)].stop);         // rank 2 asked: every rank stops
        CHECK(agree_err[size_t(r)].empty());
        CHECK(has(differ_err[size_t(r)], "the ranks disagree on the LoRA at step 3: rank 2's differs from rank 0's (diverged)"));
    }
}

namespace {

// A folder dataset of `n` 16x16 images with captions, bucketed at 16x16 with flips and shuffled captions.
struct ShardFixture {
    Scratch s{"shard"};
    data::Dataset ds;
    data::BucketAssignment a;
    explicit ShardFixture(int n, int64_t batch) {
        for (int i = 0; i < n; i++) {
            write_bmp(s.root / "2_x" / gl::cat("i", i, ".bmp"), 16, 16, i);
            write_text(s.root / "2_x" / gl::cat("i", i, ".txt"), gl::cat("t", i, ", a, b, c"));
        }
        data::ConfigLevel cli = {{"resolution", std::array<int64_t, 2>{16, 16}}, {"flip_aug", true},
                                 {"shuffle_caption", true}, {"caption_extension", std::string(".txt")},
                                 {"batch_size", batch}};
        std::vector<std::string> w;
        ds = data::build_dataset(data::folder_dataset_config(s.root, std::nullopt, cli, w));
        a = data::assign_buckets(ds);
    }
    std::vector<data::Batch> batches(int rank, int world) {
        data::LoaderOptions o;
        o.seed = 11;
        o.epochs = 2;
        o.rank = rank;
        o.world = world;
        data::Loader l(ds, a, o);
        std::vector<data::Batch> out;
        while (std::optional<data::Batch> b = l.next()) out.push_back(std::move(*b));
        return out;
    }
};

std::string describe(const data::Sample& s) { return gl::cat(s.image, s.flipped ? "f" : "", ":", s.caption); }

}  // namespace

TEST_CASE("loader: 3 ranks x batch 2 take disjoint slices of 1 process x batch 6's batches, every step") {
    ShardFixture one(7, 6), three(7, 2);  // 14 images with repeats: global batches of 6, 6 and 2
    const std::vector<data::Batch> ref = one.batches(0, 1);
    std::vector<std::vector<data::Batch>> ranks;
    for (int r = 0; r < 3; r++) ranks.push_back(three.batches(r, 3));
    REQUIRE(ref.size() == 6);  // 3 per epoch
    for (int r = 0; r < 3; r++) REQUIRE(ranks[size_t(r)].size() == ref.size());  // an empty slice is handed out too
    for (size_t k = 0; k < ref.size(); k++) {
        CAPTURE(k);
        std::vector<std::string> joined;
        for (int r = 0; r < 3; r++) {
            const data::Batch& b = ranks[size_t(r)][k];
            CHECK(b.step == ref[k].step);
            CHECK(b.epoch == ref[k].epoch);
            CHECK(b.global_images == int64_t(ref[k].samples.size()));
            CHECK(b.first == int64_t(joined.size()));
            CHECK(b.planned == int64_t(b.samples.size()));
            for (const data::Sample& s : b.samples) joined.push_back(describe(s));
        }
        std::vector<std::string> want;
        for (const data::Sample& s : ref[k].samples) want.push_back(describe(s));
        CHECK(joined == want);  // the same images, flips and captions, in the same places
    }
    // The short global batch of 2 over 3 ranks: 1, 1 and none.
    const auto short_batch = std::find_if(ref.begin(), ref.end(), [](const data::Batch& b) { return b.samples.size() == 2; });
    REQUIRE(short_batch != ref.end());
    const size_t at = size_t(short_batch - ref.begin());
    CHECK(ranks[2][at].samples.empty());
    CHECK(ranks[2][at].global_images == 2);
}

#ifdef GL_SDTRAIN_BIN
#include "sdtrain_child.h"
namespace {

using Run = gltest::SdtrainChild;  // tests/sdtrain_child.h

std::vector<std::string> tiny_args(const fs::path& model, const fs::path& data, const fs::path& out, int batch,
                                   int steps) {
    return {"--pretrained_model_name_or_path", model.string(), "--train_data_dir", data.string(), "--resolution", "48",
            "--enable_bucket", "--bucket_no_upscale", "--bucket_reso_steps", "8", "--min_bucket_reso", "16",
            "--caption_extension", ".txt", "--cache_latents", "--train_batch_size", std::to_string(batch),
            "--gradient_accumulation_steps", "2", "--network_module", "networks.lora", "--network_dim", "4",
            "--learning_rate", "1e-3", "--seed", "42", "--backend", "cpu", "--max_train_steps", std::to_string(steps),
            "--output_dir", out.string(), "--output_name", "tiny", "--max_data_loader_n_workers", "1"};
}

std::vector<std::string> plus(std::vector<std::string> a, const std::vector<std::string>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
}

std::map<std::string, std::vector<float>> lora_tensors(const fs::path& f) {
    const gl::io::SafetensorsFile st(f.string());
    std::map<std::string, std::vector<float>> out;
    for (const gl::io::TensorInfo& t : st.list()) {
        int64_t n = 1;
        for (int64_t d : t.shape) n *= d;
        std::vector<float> v(static_cast<size_t>(n));
        st.read(t.name, v.data(), gl::DType::f32);
        out[t.name] = std::move(v);
    }
    return out;
}

size_t count_of(const std::string& s, const std::string& part) {
    size_t n = 0;
    for (size_t at = s.find(part); at != std::string::npos; at = s.find(part, at + 1)) n++;
    return n;
}

// The pids of the ranks a supervisor started, by rank (their RANK variable).
std::map<int, pid_t> ranks_of(pid_t supervisor) {
    std::map<int, pid_t> out;
    for (const fs::directory_entry& d : fs::directory_iterator("/proc")) {
        const std::string name = d.path().filename().string();
        if (name.find_first_not_of("0123456789") != std::string::npos) continue;
        const std::string stat = gltest::slurp(d.path() / "stat");  // pid (comm) state ppid ...
        const size_t close = stat.rfind(')');
        if (close == std::string::npos) continue;
        std::istringstream rest(stat.substr(close + 2));
        std::string state;
        pid_t ppid = 0;
        rest >> state >> ppid;
        if (ppid != supervisor) continue;
        const pid_t pid = pid_t(std::stol(name));
        const std::string env = gltest::slurp(gl::cat("/proc/", pid, "/environ"));
        for (size_t at = 0; at < env.size();) {
            const size_t end = env.find('\0', at);
            const std::string kv = env.substr(at, end - at);
            if (kv.rfind("RANK=", 0) == 0) out[std::stoi(kv.substr(5))] = pid;
            if (end == std::string::npos) break;
            at = end + 1;
        }
    }
    return out;
}

}  // namespace

TEST_CASE("sdtrain --num_processes 2 --dist_backend tcp: 2 ranks x batch 1 train 1 process x batch 2's LoRA") {
    Scratch s("dist_bin");
    const fs::path model = make_tiny_model(s.root), data = make_dataset(s.root);
    // 2 buckets of 3 images, accumulation 2: global batches of 2 and a short one of 1 per bucket
    // (rank 1 then joins with none), updates gathering batches of both buckets.
    Run two(plus(tiny_args(model, data, s.root / "two", 1, 4), {"--num_processes", "2", "--dist_backend", "tcp",
                                                               "--save_state"}),
            s.root / "two.log");
    Run one(tiny_args(model, data, s.root / "one", 2, 4), s.root / "one.log");
    const std::optional<int> st2 = two.wait(600), st1 = one.wait(600);
    const std::string t2 = two.text();
    CAPTURE(t2);
    REQUIRE(st2);
    REQUIRE(st1);
    CHECK(WIFEXITED(*st2));
    CHECK(WEXITSTATUS(*st2) == 0);
    CHECK(WEXITSTATUS(*st1) == 0);
    // Rank 0 alone shows the plan and the run (rank 1 prints nothing).
    CHECK(count_of(t2, "predicted peak") == 1);
    CHECK(has(t2, "effective batch    = 1 per rank x 2 ranks x 2 accumulation = 4 images per update"));
    CHECK(has(t2, "per rank x 2 ranks (tcp; effective batch 4)"));
    CHECK(has(t2, "step 4/4"));
    CHECK_FALSE(has(t2, "rank 1"));
    // The same steps arithmetic as one process at batch 2.
    const std::string t1 = one.text();
    CHECK(has(t2, "batches per epoch  = ceil(3/2) + ceil(3/2) = 2 + 2 = 4"));
    CHECK(has(t1, "batches per epoch  = ceil(3/2) + ceil(3/2) = 2 + 2 = 4"));

    const auto a = lora_tensors(s.root / "two" / "tiny.safetensors"), b = lora_tensors(s.root / "one" / "tiny.safetensors");
    REQUIRE(a.size() == b.size());
    REQUIRE(!a.empty());
    double worst = 0, largest = 0, moved = 0;
    for (const auto& [name, v] : a) {
        const std::vector<float>& w = b.at(name);
        REQUIRE(v.size() == w.size());
        for (size_t i = 0; i < v.size(); i++) {
            worst = std::max(worst, double(std::fabs(v[i] - w[i])));
            largest = std::max(largest, double(std::fabs(w[i])));
        }
        if (name.find("lora_up") != std::string::npos)  // zero at the start: what training moved
            for (float x : w) moved = std::max(moved, double(std::fabs(x)));
    }
    MESSAGE("2 ranks x batch 1 against 1 x batch 2 after 4 AdamW updates: max |diff| ", worst, ", max |w| ", largest,
            ", max |up| ", moved);
    CHECK(moved > 1e-3);  // training moved the LoRA
    // f32 on the CPU: the two runs differ only in where the batch's gradient sum is rounded
    // (inside one GEMM over 2 samples, or per rank and then added). AdamW divides by the gradient's
    // own scale, so a rounding difference in a near-zero gradient moves that weight by a part of
    // the learning rate: the bound is relative to what training moved. Measured over runs (each
    // makes a new random model): 7e-8 to 1.03e-6, i.e. at most 2.6e-4 of max |up|. Wrong batching
    // is far above it: 1 process at batch 1 (not 2) ends 7.7e-3 away, 1.9x max |up|.
    CHECK(worst < 1e-2 * moved);

    // Rank 0 alone wrote: one LoRA, one state with the world size, the metrics and the report.
    CHECK(fs::exists(s.root / "two" / "metrics.jsonl"));
    CHECK(fs::exists(s.root / "two" / "report.html"));
    const std::string state = gltest::slurp(s.root / "two" / "tiny-state" / "train_state.json");
    CHECK(has(state, "\"world_size\": 2"));
    const gl::io::SafetensorsFile f((s.root / "two" / "tiny.safetensors").string());
    CHECK(f.metadata().at("ss_total_batch_size") == "4");  // kohya's batch x processes x accumulation
    // A resume with another world size is refused.
    Run again(plus(tiny_args(model, data, s.root / "two", 1, 8), {"--resume", (s.root / "two" / "tiny-state").string()}),
              s.root / "again.log");
    const std::optional<int> st3 = again.wait(300);
    REQUIRE(st3);
    CHECK(WEXITSTATUS(*st3) == 1);
    CHECK(has(again.text(), "the state was saved by a run of 2 processes, this run has 1"));
}

TEST_CASE("sdtrain --num_processes 2: a killed rank stops the other, and the supervisor names it") {
    Scratch s("dist_kill");
    const fs::path model = make_tiny_model(s.root), data = make_dataset(s.root), out = s.root / "out";
    Run run(plus(tiny_args(model, data, out, 1, 100000), {"--num_processes", "2", "--dist_backend", "tcp"}),
            s.root / "run.log");
    // Training under way: rank 0 has recorded a step.
    bool started = false;
    for (int i = 0; i < 3000 && !started; i++) {
        started = has(gltest::slurp(out / "metrics.jsonl"), "\"type\":\"step\"");
        if (!started) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    REQUIRE(started);
    const std::map<int, pid_t> ranks = ranks_of(run.pid);
    REQUIRE(ranks.size() == 2);
    const auto t0 = std::chrono::steady_clock::now();
    ::kill(ranks.at(1), SIGKILL);
    const std::optional<int> st = run.wait(60);
    const std::string text = run.text();
    CAPTURE(text);
    REQUIRE(st);  // no hang
    CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(30));
    CHECK(WIFEXITED(*st));
    CHECK(WEXITSTATUS(*st) == 1);
    CHECK(has(text, "sdtrain: error: rank 1 of 2 was killed by signal 9"));
    CHECK(::kill(ranks.at(0), 0) != 0);  // rank 0 is gone too
}
#endif
