// sdtrain's refusals before a run (bad paths, an unwritable output folder, a plan that does not fit)
// leave existing files untouched; --dry_run and auto-fit plan without training; the binary trains
// the tiny model from a kohya config file.
#include <doctest/doctest.h>

#include <cstdio>
#include <sstream>

#include "sdtrain_fixtures.h"
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

    struct Case {
        std::function<void(train::RunConfig&)> change;
        const char* error;
    };
    const Case cases[] = {
        {[&](train::RunConfig& c) { c.pretrained_model_name_or_path = (s.root / "no-such-model").string(); },
         "no-such-model"},
        {[&](train::RunConfig& c) { c.train_data_dir = (s.root / "no-such-data").string(); }, "no-such-data"},
        {[&](train::RunConfig& c) { c.train_data_dir = model.string(); }, "no <repeats>_<name> folder"},
        {[&](train::RunConfig& c) { c.reg_data_dir = (s.root / "no-reg").string(); }, "no-reg"},
        {[&](train::RunConfig& c) { c.output_dir = (out / "tiny.safetensors").string(); }, "exists and is not a folder"},
        {[&](train::RunConfig& c) { c.output_dir = (out / "tiny.safetensors" / "sub").string(); }, "cannot be created"},
        {[&](train::RunConfig& c) { c.resume = (s.root / "no-state").string(); }, "--resume"},
        {[&](train::RunConfig& c) { c.resume = data.string(); }, "train_state.json"},
        {[&](train::RunConfig& c) { c.network_weights = (s.root / "no-lora.safetensors").string(); }, "--network_weights"},
        {[&](train::RunConfig& c) { c.dataset_config = (s.root / "no.toml").string(), c.train_data_dir.reset(); },
         "no.toml"},
        {[&](train::RunConfig& c) { c.vram_limit = "1M"; }, "--vram_limit 1M"},
        {[&](train::RunConfig& c) { c.clip_skip = 5; }, "--clip_skip 5: the text encoder has 2 layers"},
        {[&](train::RunConfig& c) { c.sample_prompts = "p.txt"; }, "--sample_prompts"},
    };
    for (const Case& k : cases) {
        train::RunConfig c = good;
        k.change(c);
        const std::string e = run_error(c);
        CAPTURE(e);
        CHECK(e.find(k.error) != std::string::npos);
        CHECK(slurp(out / "tiny.safetensors") == "an earlier LoRA");
        CHECK(slurp(out / "tiny-step00000002.safetensors") == "an earlier step save");
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
}

#ifdef GL_SDTRAIN_BIN
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
#endif
