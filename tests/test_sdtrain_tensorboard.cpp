// sdtrain --logging_dir: the binary writes kohya's TensorBoard log (train/run/tensorboard_log.h),
// read back with train/tensorboard.h's reader (the reader itself is checked against tensorboard's
// EventAccumulator in test_tensorboard.cpp).
#include <doctest/doctest.h>
#include <sys/wait.h>

#include <cstdio>
#include <map>
#include <regex>

#include "sdtrain_fixtures.h"
#include "train/metrics.h"
#include "train/tensorboard.h"

using namespace sdtrain_test;

namespace {

std::pair<int, std::string> run(const std::string& args) {
    const std::string cmd = std::string(GL_SDTRAIN_BIN) + " " + args + " 2>&1";
    FILE* p = popen(cmd.c_str(), "r");
    REQUIRE(p);
    std::string text;
    char buf[4096];
    while (size_t n = fread(buf, 1, sizeof buf, p)) text.append(buf, n);
    const int status = pclose(p);
    return {WEXITSTATUS(status), text};
}

}  // namespace

TEST_CASE("sdtrain binary: --logging_dir writes kohya's TensorBoard scalars into kohya's run folder") {
    Scratch s("tb");
    const fs::path model = make_tiny_model(s.root), data = make_dataset(s.root), out = s.root / "out";
    const fs::path logs = s.root / "logs";
    // 6 images, batch 2: 4 batches an epoch (two per bucket), 6 steps: 2 epochs, the second cut short.
    const std::string common = "--pretrained_model_name_or_path " + model.string() + " --train_data_dir " +
                               data.string() + " --resolution 48 --enable_bucket --bucket_no_upscale "
                               "--bucket_reso_steps 8 --min_bucket_reso 16 --caption_extension .txt --cache_latents "
                               "--train_batch_size 2 --network_module networks.lora --network_dim 4 --seed 5 "
                               "--backend cpu --max_train_steps 6 --learning_rate 1e-3 --lr_scheduler linear "
                               "--output_dir " + out.string();
    const auto [status, text] = run(common + " --logging_dir " + logs.string() + " --log_prefix run_");
    CAPTURE(text);
    REQUIRE(status == 0);
    // logging_dir/<prefix><YYYYmmddHHMMSS>/network_train/events.out.tfevents.<seconds>.<host>.<pid>.<n>
    std::vector<fs::path> runs;
    for (const auto& e : fs::directory_iterator(logs)) runs.push_back(e.path());
    REQUIRE(runs.size() == 1);
    CHECK(std::regex_match(runs[0].filename().string(), std::regex("run_20[0-9]{12}")));
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(runs[0] / "network_train")) files.push_back(e.path());
    REQUIRE(files.size() == 1);
    CHECK(std::regex_match(files[0].filename().string(), std::regex("events\\.out\\.tfevents\\.[0-9]+\\..+\\.[0-9]+\\.[0-9]+")));

    const train::TbFile f = train::read_tensorboard_events(files[0]);
    CHECK(f.stopped.empty());
    REQUIRE(!f.events.empty());
    CHECK(f.events[0].file_version == "brain.Event:2");
    std::map<std::string, std::vector<std::pair<int64_t, float>>> by_tag;
    for (const train::TbEvent& e : f.events)
        if (e.value) by_tag[e.tag].push_back({e.step, *e.value});
    std::vector<std::string> tags;
    for (const auto& [t, v] : by_tag) tags.push_back(t);
    CHECK(tags == std::vector<std::string>{"loss/average", "loss/current", "loss/epoch_average", "lr/textencoder",
                                           "lr/unet"});
    // Per optimizer step, 1-based, as kohya's global_step after the update.
    std::vector<int64_t> steps;
    for (const auto& [step, v] : by_tag["loss/current"]) steps.push_back(step);
    CHECK(steps == std::vector<int64_t>{1, 2, 3, 4, 5, 6});
    // The rate after the scheduler's step: linear decay from 1e-3 over 6 steps, step k logs 1e-3 * (6 - k) / 6.
    for (const auto& [step, lr] : by_tag["lr/unet"]) CHECK(lr == doctest::Approx(1e-3 * double(6 - step) / 6.0));
    CHECK(by_tag["lr/unet"] == by_tag["lr/textencoder"]);
    // loss/epoch_average at the epoch (1-based): the running mean of the epoch's last step.
    REQUIRE(by_tag["loss/epoch_average"].size() == 2);
    CHECK(by_tag["loss/epoch_average"][0].first == 1);
    CHECK(by_tag["loss/epoch_average"][1].first == 2);
    CHECK(by_tag["loss/epoch_average"][0].second == by_tag["loss/average"][3].second);
    CHECK(by_tag["loss/epoch_average"][1].second == by_tag["loss/average"][5].second);
    for (const auto& [step, v] : by_tag["loss/current"]) CHECK(std::isfinite(v));

    // Kohya's rules: --log_with tensorboard needs --logging_dir; wandb needs the network.
    const auto [s2, t2] = run(common + " --log_with tensorboard");
    CHECK(s2 == 2);
    CHECK(t2.find("logging_dir is required when log_with is tensorboard") != std::string::npos);
    const auto [s3, t3] = run(common + " --log_with wandb --logging_dir " + logs.string());
    CHECK(s3 == 2);
    CHECK(t3.find("W&B needs the network") != std::string::npos);
    const auto [s4, t4] = run(common + " --log_with all --logging_dir " + logs.string() + " --dry_run");
    CHECK(s4 == 0);
    CHECK(t4.find("--log_with all: TensorBoard only") != std::string::npos);
}

// kohya's generate_step_logs adds lr/d*lr/<group> = param_groups[i]["d"] * param_groups[i]["lr"] for
// the DAdapt* optimizers and Prodigy, after the step.
TEST_CASE("sdtrain binary: D-Adaptation and Prodigy runs log kohya's lr/d*lr scalars") {
    Scratch s("tb_dlr");
    const fs::path model = make_tiny_model(s.root), data = make_dataset(s.root);
    for (const char* type : {"DAdaptAdam", "DAdaptation", "Prodigy"}) {
        CAPTURE(type);
        const fs::path logs = s.root / (std::string("logs_") + type), out = s.root / (std::string("out_") + type);
        const auto [status, text] = run(
            "--pretrained_model_name_or_path " + model.string() + " --train_data_dir " + data.string() +
            " --resolution 48 --enable_bucket --bucket_no_upscale --bucket_reso_steps 8 --min_bucket_reso 16 "
            "--caption_extension .txt --cache_latents --train_batch_size 2 --network_module networks.lora "
            "--network_dim 4 --seed 5 --backend cpu --max_train_steps 4 --learning_rate 1 --lr_scheduler linear "
            "--optimizer_type " + std::string(type) + " --output_dir " + out.string() + " --logging_dir " +
            logs.string());
        CAPTURE(text);
        REQUIRE(status == 0);
        std::vector<fs::path> files;
        for (const auto& r : fs::directory_iterator(logs))
            for (const auto& e : fs::directory_iterator(r.path() / "network_train")) files.push_back(e.path());
        REQUIRE(files.size() == 1);
        std::map<std::string, std::vector<std::pair<int64_t, float>>> by_tag;
        for (const train::TbEvent& e : train::read_tensorboard_events(files[0]).events)
            if (e.value) by_tag[e.tag].push_back({e.step, *e.value});
        for (const char* t : {"lr/d*lr/textencoder", "lr/d*lr/unet"}) REQUIRE_MESSAGE(by_tag.count(t) == 1, t);
        REQUIRE(by_tag["lr/d*lr/unet"].size() == 4);
        double last_d = 0;
        for (size_t k = 0; k + 1 < 4; k++) {  // the last step's next rate is 0
            const auto [step, dlr] = by_tag["lr/d*lr/unet"][k];
            CHECK(step == int64_t(k + 1));
            const double lr = by_tag["lr/unet"][k].second, d = dlr / lr;
            CHECK(lr == doctest::Approx(double(3 - k) / 4.0));
            CHECK(by_tag["lr/d*lr/textencoder"][k].second == doctest::Approx(dlr));  // one d for every group
            CHECK(d >= 1e-6 * (1 - 1e-6));  // d0, and d never decreases
            CHECK(d >= last_d * (1 - 1e-6));
            last_d = d;
        }
        CHECK(by_tag["lr/d*lr/unet"][3].second == 0.0f);
        // metrics.jsonl holds d itself: the same as lr/d*lr / lr.
        const train::MetricsHistory h = train::read_metrics(out / "metrics.jsonl");
        REQUIRE(h.steps.size() == 4);
        CHECK(h.steps[0].d == doctest::Approx(by_tag["lr/d*lr/unet"][0].second / by_tag["lr/unet"][0].second));
        CHECK(h.steps[3].d >= h.steps[0].d);
    }
}
