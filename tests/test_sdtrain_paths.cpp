// sdtrain never writes among the user's files (train/run/run_paths.h): a corpus of bad invocations
// about files (an output folder that is, or lies inside, the dataset, a subset, the model or its
// unet/, reached directly or through a symlink; inputs where the run writes; overlapping training
// and regularisation folders), each refused naming both paths with every input byte for byte as
// it was and no output folder made. What killed runs left in the output folder is removed by the
// next run, and a run refused after start-up (a NaN weight) leaves the folder as it found it (the
// recording opens with the first record).
#include <doctest/doctest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <map>

#include "ggml-lite/core/dtype.h"
#include "ggml-lite/io/files.h"
#include "ggml-lite/io/sha256.h"
#include "sdtrain_fixtures.h"
#include "train/metrics.h"
#include "train/run/recording.h"
#include "train/run/save.h"
#include "train/run/session.h"

using namespace sdtrain_test;

namespace {

// Every entry below root (symlinks not followed) -> its content's hash ("dir", "link", "special").
std::map<std::string, std::string> tree(const fs::path& root) {
    std::map<std::string, std::string> out;
    if (!fs::exists(root)) return out;
    for (auto it = fs::recursive_directory_iterator(root); it != fs::recursive_directory_iterator(); ++it) {
        const std::string rel = it->path().lexically_relative(root).string();
        if (it->is_symlink()) out[rel] = "link " + fs::read_symlink(it->path()).string();
        else if (it->is_directory()) out[rel] = "dir";
        else if (!it->is_regular_file()) out[rel] = "special";  // a FIFO is never opened
        else {
            const std::string bytes = gltest::slurp(it->path());
            gl::io::Sha256 h;
            h.update(bytes.data(), bytes.size());
            out[rel] = h.hex();
        }
    }
    return out;
}

std::string run_error(const train::RunConfig& c, train::RunObserver* obs = nullptr) {
    try {
        train::Session(c, obs).run();
    } catch (const gl::Error& e) {
        return e.what();
    }
    return "(no error)";
}

pid_t dead_pid() {
    const pid_t p = ::fork();
    if (p == 0) ::_exit(0);
    ::waitpid(p, nullptr, 0);
    return p;
}

struct Messages : train::RunObserver {
    std::vector<std::string> lines;
    void on_message(const std::string& m) override { lines.push_back(m); }
};

}  // namespace

TEST_CASE("sdtrain paths: an output folder in an input and inputs where the run writes are refused, nothing touched") {
    Scratch s("paths");
    const fs::path model = make_tiny_model(s.root), data = make_dataset(s.root), out = s.root / "out";
    const fs::path subset = data / "1_tiny";
    fs::create_directory_symlink(data, s.root / "data-link");
    // A second copy of the model whose unet/ links to a shared folder (as model collections do).
    const fs::path shared = s.root / "shared-unet", linked_model = s.root / "linked-model";
    fs::copy(model, linked_model, fs::copy_options::recursive);
    fs::rename(linked_model / "unet", shared);
    fs::create_directory_symlink(shared, linked_model / "unet");
    // Regularisation images, and a dataset config using one folder for both kinds of subsets.
    write_bmp(s.root / "reg" / "1_reg" / "r0.bmp", 32, 32, 9);
    write_bmp(s.root / "reg" / "nested" / "1_n" / "n0.bmp", 32, 32, 8);
    const fs::path toml = s.root / "same.toml";
    write_text(toml, "[[datasets]]\n[[datasets.subsets]]\nimage_dir = '" + subset.string() +
                         "'\n[[datasets.subsets]]\nimage_dir = '" + subset.string() + "'\nis_reg = true\n");
    write_text(out / "report.html", "the user's own page");
    write_text(out / "prompts.txt", "a cat --w 16 --h 16 --s 1\n");
    const train::RunConfig good = tiny_config(model, data, out);
    const std::string data_s = data.string(), model_s = model.string();

    const struct {
        std::function<void(train::RunConfig&)> change;
        std::string error;
    } cases[] = {
        {[&](train::RunConfig& c) { c.output_dir = data_s; }, "--output_dir " + data_s + " is --train_data_dir " + data_s},
        {[&](train::RunConfig& c) { c.output_dir = data_s + "/"; }, " is --train_data_dir "},
        {[&](train::RunConfig& c) { c.output_dir = (data / "." / "1_tiny" / "..").string(); }, " is --train_data_dir "},
        {[&](train::RunConfig& c) { c.output_dir = (s.root / "data-link").string(); }, " is --train_data_dir "},
        {[&](train::RunConfig& c) { c.output_dir = subset.string(), c.cache_latents_to_disk = true; },
         "--output_dir " + subset.string() + " lies inside --train_data_dir"},
        {[&](train::RunConfig& c) { c.output_dir = (subset / "new" / "deeper").string(); }, " lies inside "},
        {[&](train::RunConfig& c) { c.output_dir = (s.root / "data-link" / "1_tiny" / "out").string(); },
         " lies inside --train_data_dir"},
        {[&](train::RunConfig& c) { c.output_dir = model_s; },
         "--output_dir " + model_s + " is --pretrained_model_name_or_path " + model_s},
        {[&](train::RunConfig& c) { c.output_dir = (model / "unet").string(); }, " lies inside --pretrained_model_name_or_path"},
        {[&](train::RunConfig& c) { c.output_dir = (model / "unet" / "diffusion_pytorch_model.safetensors").string(); },
         " lies inside --pretrained_model_name_or_path"},
        {[&](train::RunConfig& c) { c.pretrained_model_name_or_path = linked_model.string(), c.output_dir = shared.string(); },
         "--output_dir " + shared.string() + " is the model's UNet folder"},
        {[&](train::RunConfig& c) { c.reg_data_dir = (s.root / "reg").string(), c.output_dir = (s.root / "reg" / "o").string(); },
         " lies inside --reg_data_dir"},
        {[&](train::RunConfig& c) { c.sample_prompts = (out / "prompts.txt").string(), c.output_dir = (out / "prompts.txt").string(); },
         " is --sample_prompts"},
        // The output's sample/ folder is a symlink into the dataset.
        {[&](train::RunConfig& c) {
             c.output_dir = (s.root / "out-linked").string();
             c.sample_prompts = (out / "prompts.txt").string();
         },
         ": its sample/ leads into --train_data_dir"},
        // Inputs at names the run writes.
        {[&](train::RunConfig& c) { c.sample_prompts = (out / "report.html").string(); },
         "--sample_prompts " + (out / "report.html").string() + " lies where the run writes in --output_dir " +
             out.string() + " (report.html)"},
        {[&](train::RunConfig& c) { c.dataset_config = (out / "tiny-step00000004.safetensors").string(), c.train_data_dir.reset(); },
         "(tiny-step00000004.safetensors)"},
        // Training and regularisation images from one folder.
        {[&](train::RunConfig& c) { c.reg_data_dir = data_s; }, "--reg_data_dir " + data_s + " is --train_data_dir " + data_s},
        {[&](train::RunConfig& c) { c.reg_data_dir = subset.string(); }, " lies inside --train_data_dir "},
        {[&](train::RunConfig& c) {
             c.train_data_dir = (s.root / "reg" / "nested").string();
             c.reg_data_dir = (s.root / "reg" / "1_reg" / "..").string();
         },
         " holds --train_data_dir "},
        {[&](train::RunConfig& c) { c.dataset_config = toml.string(), c.train_data_dir.reset(); },
         "the regularisation subset " + subset.string() + " is the training subset " + subset.string()},
    };
    fs::create_directories(s.root / "out-linked");
    fs::create_directory_symlink(subset, s.root / "out-linked" / "sample");
    write_text(out / "tiny-step00000004.safetensors",
               "[[datasets]]\n[[datasets.subsets]]\nimage_dir = '" + subset.string() + "'\n");
    const auto inputs = tree(s.root);
    for (const auto& k : cases) {
        train::RunConfig c = good;
        k.change(c);
        const std::string e = run_error(c);
        CAPTURE(c.output_dir);
        CHECK_MESSAGE(e.find(k.error) != std::string::npos, e);
        CHECK(tree(s.root) == inputs);  // no folder made, no file written or changed anywhere
    }
    // Inputs elsewhere in the output folder are safe, and a state there resumes (the normal case).
    train::RunConfig c = good;
    c.sample_prompts = (out / "prompts.txt").string();
    c.sample_every_n_steps = 2;
    c.max_train_steps = 2;
    c.save_state_on_train_end = true;
    CHECK(run_error(c) == "(no error)");
    c.resume = (out / "tiny-state").string();
    c.max_train_steps = 4;
    CHECK(run_error(c) == "(no error)");
    CHECK(fs::exists(out / "sample"));
}

TEST_CASE("sdtrain paths: what a kill -9 left in the output folder is removed by the next run, and named") {
    Scratch s("leftovers");
    const fs::path model = make_tiny_model(s.root), data = make_dataset(s.root), out = s.root / "out";
    fs::create_directories(out / "sample");
    const fs::path state = out / "tiny-step00000002-state";
    // A process killed while saving a state: inside write_dir_atomically, in the LoRA's write.
    int ready[2];
    REQUIRE(::pipe(ready) == 0);
    const pid_t child = ::fork();
    if (child == 0) {
        ::close(ready[0]);
        static int signal_fd;
        signal_fd = ready[1];
        train::write_dir_atomically(state, [](const fs::path& tmp) {
            gl::io::set_write_fault([](size_t) {
                const char c = 1;
                (void)!::write(signal_fd, &c, 1);
                for (;;) ::pause();
                return 0;
            });
            std::vector<float> x(64, 1.0f);
            gl::io::write_safetensors((tmp / "lora.safetensors").string(), {{"x", gl::DType::f32, {64}, x.data()}});
        });
        ::_exit(1);
    }
    ::close(ready[1]);
    char byte = 0;
    REQUIRE(::read(ready[0], &byte, 1) == 1);
    ::close(ready[0]);
    ::kill(child, SIGKILL);
    ::waitpid(child, nullptr, 0);
    std::vector<fs::path> left;
    for (const auto& e : fs::directory_iterator(out))
        if (e.path().filename() != "sample") left.push_back(e.path());
    REQUIRE(left.size() == 1);  // the unfinished state folder, with the LoRA's temporary inside
    REQUIRE(fs::is_directory(left[0]));
    CHECK(left[0].filename().string().rfind(".tiny-step00000002-state.partial-", 0) == 0);
    CHECK(std::distance(fs::directory_iterator(left[0]), fs::directory_iterator()) == 1);

    // Temporaries of every other kind: a LoRA file, a sample, the folder probe, the names of
    // earlier builds; those of a live process (this one), of another host and lookalikes stay.
    const long dead = dead_pid();
    const std::string lora_tmp = gl::io::temp_file_pattern((out / "tiny.safetensors").string(), dead);
    const std::string sample_tmp = gl::io::temp_file_pattern((out / "sample" / "tiny_000002_00.png").string(), dead);
    const std::string probe_tmp = gl::io::temp_file_pattern((out / ".sdtrain-probe").string(), dead);
    const fs::path legacy_tmp = out / (".tiny-step00000004-state.tmp-" + std::to_string(dead));
    const fs::path legacy_old = out / (".tiny-state.old-" + std::to_string(dead));
    for (const std::string& f : {lora_tmp, sample_tmp, probe_tmp}) write_text(f, "left");
    fs::create_directories(legacy_tmp);
    write_text(legacy_tmp / "train_state.json", "{}");
    fs::create_directories(legacy_old);
    const std::string live = gl::io::partial_dir_name((out / ".tiny-state").string(), ::getpid());
    fs::create_directories(live);
    const fs::path other_host = out / ("tiny.safetensors.tmp-elsewhere-" + std::to_string(dead) + "-abcdef");
    const fs::path lookalike = out / "notes.tmp-1";
    write_text(other_host, "theirs");
    write_text(lookalike, "mine");

    Messages m;
    train::RunConfig c = tiny_config(model, data, out);
    c.max_train_steps = 2;
    CHECK(run_error(c, &m) == "(no error)");
    for (const fs::path& p : {left[0], fs::path(lora_tmp), fs::path(sample_tmp), fs::path(probe_tmp), legacy_tmp, legacy_old})
        CHECK_MESSAGE(!fs::exists(p), p);
    CHECK(fs::exists(live));
    CHECK(fs::exists(other_host));
    CHECK(fs::exists(lookalike));
    const auto note = std::find_if(m.lines.begin(), m.lines.end(),
                                   [](const std::string& l) { return l.rfind("note: removed what killed runs", 0) == 0; });
    REQUIRE(note != m.lines.end());
    CHECK(note->find("(6): ") != std::string::npos);
    for (const fs::path& p : {left[0], fs::path(lora_tmp), legacy_tmp})
        CHECK_MESSAGE(note->find(p.string()) != std::string::npos, *note);
    // A later save of the same name works in a clean folder.
    CHECK(fs::exists(out / "tiny.safetensors"));
}

TEST_CASE("sdtrain paths: a run refused after start-up (a NaN weight) leaves the output folder as it found it") {
    Scratch s("refused");
    const fs::path model = make_tiny_model(s.root), data = make_dataset(s.root);
    // One weight of the UNet set to NaN.
    const fs::path unet = model / "unet" / "diffusion_pytorch_model.safetensors";
    {
        const gl::io::SafetensorsFile f(unet.string());
        std::vector<std::vector<uint8_t>> bufs;
        std::vector<gl::io::TensorToWrite> w;
        bufs.reserve(f.list().size());
        for (const gl::io::TensorInfo& t : f.list()) {
            bufs.emplace_back(t.nbytes());
            f.read(t.name, bufs.back().data(), t.dtype);
            if (t.name == "conv_in.weight") gl::store_from_f32(bufs.back().data(), t.dtype, 3, NAN);
            w.push_back({t.name, t.dtype, t.shape, bufs.back().data()});
        }
        gl::io::write_safetensors((unet.string() + ".new"), w);
    }
    fs::rename(unet.string() + ".new", unet);
    for (const bool earlier_run : {false, true}) {
        CAPTURE(earlier_run);
        const fs::path out = s.root / (earlier_run ? "used" : "fresh");
        if (earlier_run) {
            write_text(out / "metrics.jsonl", "{\"an\": \"earlier run\"}\n");
            write_text(out / "report.html", "an earlier report");
        }
        const auto before = tree(out);
        const std::string e = run_error(tiny_config(model, data, out));
        CHECK_MESSAGE(e.find("training step 1: the loss is ") != std::string::npos, e);
        CHECK_MESSAGE(e.find("nan") != std::string::npos, e);
        CHECK(tree(out) == before);
        CHECK(fs::exists(out) == earlier_run);  // a folder the run made is gone again
    }
}

TEST_CASE("sdtrain binary: bad invocations about files exit 1 with one line naming the paths, inputs untouched") {
    Scratch s("bin_paths");
    const fs::path model = make_tiny_model(s.root), data = make_dataset(s.root), out = s.root / "out";
    const std::string m = model.string(), d = data.string(), o = out.string();
    const fs::path state = out / "t-state";
    write_text(state / "train_state.json", "{\"current_epoch\": 1, \"current_step\": 0, \"sdtrain\": {\"version\": 2, "
                                           "\"batches_done\": 0, \"seed\": 42, \"trainer_steps\": 0, "
                                           "\"noise_counter\": -1, \"run_identity\": \"" + std::string(64, '0') + "\"}}");
    fs::create_directories(s.root / "fifo-state");
    REQUIRE(::mkfifo((s.root / "fifo-state" / "train_state.json").c_str(), 0644) == 0);
    const struct {
        std::vector<std::string> args;
        std::string error;
    } corpus[] = {
        {{"--output_dir", d}, "--output_dir " + d + " is --train_data_dir " + d},
        {{"--output_dir", d + "/1_tiny", "--cache_latents_to_disk"}, "--output_dir " + d + "/1_tiny lies inside"},
        {{"--output_dir", m + "/unet"}, "--output_dir " + m + "/unet lies inside --pretrained_model_name_or_path"},
        {{"--output_dir", m}, "--output_dir " + m + " is --pretrained_model_name_or_path"},
        {{"--output_dir", o, "--reg_data_dir", d}, "--reg_data_dir " + d + " is --train_data_dir " + d},
        {{"--output_dir", o, "--resume", state.string()},
         "--resume " + (state / "train_state.json").string() + ": field 'sdtrain.noise_counter' is -1, out of range"},
        {{"--output_dir", o, "--resume", (s.root / "fifo-state").string()},
         "--resume " + (s.root / "fifo-state" / "train_state.json").string() + ": is a FIFO (named pipe), not a regular file"},
    };
    const auto inputs = tree(s.root);
    for (const auto& k : corpus) {
        std::string cmd = std::string(GL_SDTRAIN_BIN) + " --pretrained_model_name_or_path " + m + " --train_data_dir " + d +
                          " --resolution 48 --enable_bucket --bucket_no_upscale --bucket_reso_steps 8 "
                          "--min_bucket_reso 16 --caption_extension .txt --network_module networks.lora "
                          "--max_train_steps 2 --seed 42 --backend cpu --output_name t";
        for (const std::string& a : k.args) cmd += " '" + a + "'";
        FILE* p = popen((cmd + " 2>&1").c_str(), "r");
        REQUIRE(p);
        std::string text;
        char buf[4096];
        while (size_t n = fread(buf, 1, sizeof buf, p)) text.append(buf, n);
        const int status = pclose(p);
        CAPTURE(cmd);
        CAPTURE(text);
        CHECK(WEXITSTATUS(status) == 1);
        CHECK(text.find("sdtrain: error: " + k.error) != std::string::npos);
        CHECK(tree(s.root) == inputs);
    }
}

TEST_CASE("sdtrain recording: metrics and report appear with the first record, timed from the start of training") {
    gltest::TempDir dir;
    double mono = 100, wall = 1.7e9;
    auto make = [&] { return train::RunRecording([&] { return mono; }, [&] { return wall; }); };
    train::RunStart start;
    start.output_dir = dir.path.string();
    start.name = "tiny";
    start.total_steps = 4;
    start.epochs = 1;
    {
        train::RunRecording refused = make();
        refused.on_start(start);
        refused.on_error("training step 1: the loss is nan");
        CHECK(!refused.written());
        CHECK(refused.metrics_path() == dir.path / "metrics.jsonl");  // where they would have gone
        CHECK(fs::is_empty(dir.path));
    }
    train::RunRecording rec = make();
    rec.on_start(start);
    mono += 5, wall += 5;  // the first step takes 5 s
    train::StepEvent e;
    e.step = 1;
    e.total_steps = 4;
    e.epoch = 1;
    e.loss = 0.5;
    e.images = 2;
    rec.on_step(e);
    CHECK(rec.written());
    const train::MetricsHistory h = train::read_metrics(dir.path / "metrics.jsonl");
    REQUIRE(h.events.size() == 1);
    CHECK(h.events[0].kind == train::EventKind::start);
    CHECK(h.events[0].time == 1.7e9);  // on_start's time, not the first step's
    REQUIRE(h.steps.size() == 1);
    CHECK(h.steps[0].elapsed_s == 5);
    CHECK(fs::exists(dir.path / "report.html"));
}
