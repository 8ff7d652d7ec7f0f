// sdtrain end to end on the tiny model (train/run/session.h): the plan, training over two buckets
// with short batches and accumulation across them, kohya-named files with their metadata, states,
// and a resume that continues bit for bit; the observer's events, and what RunRecording makes of
// them (metrics.jsonl consistent with the steps, report.html self-contained, a resume appending).
#include <doctest/doctest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <map>

#include "data/png_file.h"
#include "ggml-lite/io/safetensors.h"
#include "sdtrain_fixtures.h"
#include "train/run/recording.h"
#include "train/run/session.h"

using namespace sdtrain_test;

namespace {

// The events as they came, and the metrics file and report (the base class).
struct Events : train::RunRecording {
    std::vector<train::StepEvent> steps;
    std::vector<train::SaveEvent> saves;
    std::vector<train::SampleEvent> samples;
    std::string plan_text;
    std::atomic<bool>* stop_at_step_flag = nullptr;
    int64_t stop_at_step = -1;
    void on_plan(const train::RunPlan& p) override {
        RunRecording::on_plan(p);
        plan_text = p.text();
    }
    void on_step(const train::StepEvent& e) override {
        RunRecording::on_step(e);
        steps.push_back(e);
        if (e.step == stop_at_step && stop_at_step_flag) stop_at_step_flag->store(true);
    }
    void on_save(const train::SaveEvent& e) override {
        RunRecording::on_save(e);
        saves.push_back(e);
    }
    void on_sample(const train::SampleEvent& e) override {
        RunRecording::on_sample(e);
        samples.push_back(e);
    }
};

std::map<std::string, std::vector<float>> tensors(const fs::path& file) {
    const gl::io::SafetensorsFile f(file.string());
    std::map<std::string, std::vector<float>> out;
    for (const gl::io::TensorInfo& t : f.list()) {
        std::vector<float> v(size_t(t.numel()));
        f.read(t.name, v.data(), gl::DType::f32);
        out[t.name] = std::move(v);
    }
    return out;
}

std::string slurp(const std::string& p) {
    std::ifstream f(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
}

bool bitwise_equal(const std::map<std::string, std::vector<float>>& a, const std::map<std::string, std::vector<float>>& b) {
    if (a.size() != b.size()) return false;
    for (const auto& [k, v] : a) {
        auto it = b.find(k);
        if (it == b.end() || it->second.size() != v.size() ||
            std::memcmp(v.data(), it->second.data(), v.size() * sizeof(float)) != 0)
            return false;
    }
    return true;
}

// The metrics file's step records agree with the run's step events: one per step in order, the
// same loss, running mean, epoch and images, the totals, the learning rates of both parts, rates
// from the second step of each run (a resumed one starts its rates anew after step resumed_at), no
// device memory on the CPU.
void check_steps(const train::MetricsHistory& h, const std::vector<train::StepEvent>& events, int64_t epochs,
                 size_t lr_groups, int64_t resumed_at = -1) {
    REQUIRE(h.steps.size() == events.size());
    for (size_t i = 0; i < events.size(); i++) {
        const train::StepMetrics& m = h.steps[i];
        const train::StepEvent& e = events[i];
        CAPTURE(e.step);
        CHECK(m.step == e.step);
        CHECK(m.total_steps == e.total_steps);
        CHECK(m.total_epochs == epochs);
        CHECK(m.epoch == e.epoch);
        CHECK(m.loss == e.loss);  // JSON keeps every bit of a double
        CHECK(m.loss_mean == e.loss_mean);
        CHECK(m.images == e.images);
        CHECK(m.lr.size() == lr_groups);
        if (!m.lr.empty()) CHECK(m.lr[0].lr == doctest::Approx(*(e.lr_unet ? e.lr_unet : e.lr_text_encoder)));
        CHECK(m.mem_used == 0);
        CHECK(m.mem_plan == 0);
        if (i > 0 && e.step != resumed_at + 1) CHECK(m.images_per_s > 0);
    }
}

// The report stands alone: every src and href is an anchor, a data: URI or a relative path to a
// file of the output folder (no network, nothing outside it).
void check_links(const std::string& html, const fs::path& dir) {
    int files = 0;
    for (const char* attr : {" src=\"", " href=\""}) {
        for (size_t at = html.find(attr); at != std::string::npos; at = html.find(attr, at + 1)) {
            const size_t begin = at + std::strlen(attr), end = html.find('"', begin);
            REQUIRE(end != std::string::npos);
            const std::string url = html.substr(begin, end - begin);
            CAPTURE(url);
            if (url.rfind("#", 0) == 0 || url.rfind("data:image/svg+xml;base64,", 0) == 0) continue;
            CHECK(url.find(':') == std::string::npos);
            CHECK(url.find("..") == std::string::npos);
            CHECK(fs::path(url).is_relative());
            CHECK(fs::is_regular_file(dir / url));
            files++;
        }
    }
    CHECK(files > 0);
}

std::vector<std::string> event_kinds(const train::MetricsHistory& h) {
    std::vector<std::string> out;
    for (const train::MetricsEvent& e : h.events) out.push_back(train::event_kind_name(e.kind));
    return out;
}

}  // namespace

TEST_CASE("sdtrain run: plan, two buckets, kohya files and metadata, state, bit-identical resume") {
    Scratch s("run");
    const fs::path model = make_tiny_model(s.root), data = make_dataset(s.root);

    // The uninterrupted run: 6 steps, saves every 2 with states, keeping the last 2 steps' saves.
    train::RunConfig c = tiny_config(model, data, s.root / "full");
    c.save_every_n_steps = 2;
    c.save_last_n_steps = 2;
    c.save_state = true;
    c.training_comment = "tiny run";
    // Samples every 3 steps from a kohya prompt file, in the run's memory.
    write_text(s.root / "prompts.txt", "# samples\na red cat --w 32 --h 32 --s 3 --d 5 --l 4\n"
                                       "a wide room --n blurry --w 48 --h 24 --s 2 --ss euler_a\n");
    c.sample_prompts = (s.root / "prompts.txt").string();
    c.sample_every_n_steps = 3;
    c.sample_at_first = true;
    Events rec;
    train::Session full(c, &rec);
    const train::RunPlan& plan = full.prepare();
    CHECK(plan.counts.batches_per_epoch == 4);  // ceil(3/2) + ceil(3/2)
    CHECK(plan.counts.updates_per_epoch == 2);
    CHECK(plan.counts.epochs == 3);
    CHECK(plan.counts.arithmetic.find("ceil(3/2) + ceil(3/2) = 2 + 2 = 4") != std::string::npos);
    CHECK(rec.plan_text.find("frozen weights") != std::string::npos);
    CHECK(rec.plan_text.find("predicted peak") != std::string::npos);
    CHECK(plan.configuration.find("micro-batch 2 x 2 accumulation") != std::string::npos);
    CHECK(plan.memory.largest_step == "48x24 batch 2");
    CHECK(plan.memory.largest_step_timeline_svg.rfind("<svg", 0) == 0);
    REQUIRE(plan.config.size() == 8);
    CHECK(plan.config[0].title == "Model");
    CHECK(plan.config[0].entries[0] == std::pair<std::string, std::string>{"pretrained_model_name_or_path",
                                                                         model.string()});
    const train::RunSummary r = full.run();
    CHECK(r.steps == 6);
    CHECK_FALSE(r.interrupted);
    REQUIRE(rec.steps.size() == 6);
    for (const train::StepEvent& e : rec.steps) {
        CHECK(std::isfinite(e.loss));
        CHECK(e.images >= 2);  // two micro-batches, one may be short
        CHECK(e.images <= 4);
    }
    CHECK(rec.steps[5].epoch == 3);
    // Sampled before the first step and at steps 3 and 6: two images each, kohya's names, A1111's text.
    REQUIRE(rec.samples.size() == 3);
    CHECK(rec.samples[0].step == 0);
    CHECK(rec.samples[2].step == 6);
    for (const train::SampleEvent& e : rec.samples) {
        REQUIRE(e.images.size() == 2);
        const std::string first = fs::path(e.images[0]).filename().string();
        CHECK(first.rfind(gl::cat("tiny_", e.step == 0 ? "000000" : e.step == 3 ? "000003" : "000006", "_00_"), 0) == 0);
        CHECK(first.size() > 6);
        CHECK(first.substr(first.size() - 6) == "_5.png");  // --d 5
        const data::PngInfo info = data::read_png_info(e.images[0]);
        CHECK(info.width == 32);
        REQUIRE(info.text.size() == 1);
        CHECK(info.text[0].first == "parameters");
        CHECK(info.text[0].second.find("a red cat <lora:tiny:1>") != std::string::npos);
        CHECK(info.text[0].second.find("Steps: 3") != std::string::npos);
        CHECK(data::read_png_info(e.images[1]).width == 48);
    }
    // The LoRA trained in between shows in the samples: the first and last differ.
    CHECK(slurp(rec.samples[0].images[0]) != slurp(rec.samples[2].images[0]));

    // kohya's names; the step-2 save removed once step 6 is saved (keep the last 2 steps: 4, 6).
    const fs::path out = s.root / "full";
    CHECK(fs::exists(out / "tiny.safetensors"));
    CHECK(fs::exists(out / "tiny-step00000006.safetensors"));
    CHECK(fs::exists(out / "tiny-step00000004.safetensors"));
    CHECK_FALSE(fs::exists(out / "tiny-step00000002.safetensors"));
    CHECK(fs::exists(out / "tiny-step00000004-state" / "train_state.json"));
    CHECK_FALSE(fs::exists(out / "tiny-step00000002-state"));
    for (const auto& e : fs::directory_iterator(out))  // no temporaries left behind
        CHECK(e.path().filename().string().find(".tmp-") == std::string::npos);

    const gl::io::SafetensorsFile last((out / "tiny.safetensors").string());
    const auto& md = last.metadata();
    CHECK(md.at("ss_network_module") == "networks.lora");
    CHECK(md.at("ss_network_dim") == "4");
    CHECK(md.at("ss_network_alpha") == "2.0");
    CHECK(md.at("ss_steps") == "6");
    CHECK(md.at("ss_epoch") == "3");
    CHECK(md.at("ss_num_train_images") == "6");
    CHECK(md.at("ss_num_reg_images") == "0");
    CHECK(md.at("ss_num_batches_per_epoch") == "4");
    CHECK(md.at("ss_max_train_steps") == "6");
    CHECK(md.at("ss_gradient_accumulation_steps") == "2");
    CHECK(md.at("ss_learning_rate") == "0.001");
    CHECK(md.at("ss_seed") == "42");
    CHECK(md.at("ss_training_comment") == "tiny run");
    CHECK(md.at("ss_optimizer") == "torch.optim.adamw.AdamW");
    CHECK(md.at("ss_resolution") == "(48, 48)");
    CHECK(md.at("ss_dataset_dirs") == "{\"1_tiny\": {\"n_repeats\": 1, \"img_count\": 6}}");
    CHECK(md.at("ss_tag_frequency").find("\"a red cat\": 2") != std::string::npos);
    CHECK(md.at("ss_bucket_info").find("\"resolution\": [48, 24], \"count\": 3") != std::string::npos);
    CHECK(md.at("ss_sd_model_name") == "model");
    CHECK(md.at("ss_new_sd_model_hash") == "IsADirectory");
    CHECK(md.at("ss_mixed_precision") == "no");
    CHECK(md.count("ss_training_started_at"));
    CHECK(md.count("modelspec.architecture"));
    // Every LoRA module of both parts, f32 (no --save_precision: as trained).
    size_t te = 0, unet = 0;
    for (const gl::io::TensorInfo& t : last.list()) {
        te += t.name.rfind("lora_te_", 0) == 0;
        unet += t.name.rfind("lora_unet_", 0) == 0;
        CHECK(t.dtype == gl::DType::f32);
    }
    CHECK(te > 0);
    CHECK(unet > 0);
    // The step-6 file and the final one hold the same weights.
    CHECK(bitwise_equal(tensors(out / "tiny.safetensors"), tensors(out / "tiny-step00000006.safetensors")));

    // metrics.jsonl: every step, and the events in order with paths relative to the folder.
    REQUIRE(rec.metrics_path() == out / "metrics.jsonl");
    const train::MetricsHistory h = train::read_metrics(out / "metrics.jsonl");
    CHECK(h.skipped_lines == 0);
    check_steps(h, rec.steps, 3, 2);
    CHECK(h.steps[0].lr[0].group == "unet");
    CHECK(h.steps[0].lr[1].group == "text_encoder");
    CHECK(event_kinds(h) == std::vector<std::string>{"start", "sample", "save", "save", "sample", "save", "save",
                                                     "save", "save", "sample", "save", "save", "end"});
    std::vector<std::pair<int64_t, std::string>> saved;
    for (const train::MetricsEvent& e : h.events) {
        if (e.kind == train::EventKind::save) saved.emplace_back(e.step, e.path);
        if (e.kind != train::EventKind::sample) continue;
        REQUIRE(e.images.size() == 2);
        CHECK(e.epoch == (e.step == 0 ? 0 : e.step == 3 ? 2 : 3));  // the epoch of the step sampled after
        CHECK(e.images[0].prompt == "a red cat");
        CHECK(e.images[1].prompt == "a wide room");
        for (const train::SampleImage& im : e.images) {
            CHECK(im.path.rfind("sample/tiny_", 0) == 0);
            CHECK(fs::is_regular_file(out / im.path));
        }
    }
    CHECK(saved == std::vector<std::pair<int64_t, std::string>>{
                       {2, "tiny-step00000002.safetensors"}, {2, "tiny-step00000002-state"},
                       {4, "tiny-step00000004.safetensors"}, {4, "tiny-step00000004-state"},
                       {6, "tiny-step00000006.safetensors"}, {6, "tiny-step00000006-state"},
                       {6, "tiny-state"}, {6, "tiny.safetensors"}});
    CHECK(h.events.back().message == "finished: 6 steps");
    CHECK(h.events.back().step == 6);
    // report.html: status, curves, samples, the memory plan and timeline, the dataset and steps
    // arithmetic, the configuration by option group, the peak host memory; self-contained.
    const std::string html = slurp((out / "report.html").string());
    for (const char* part : {"<p class=\"status\">finished: 6 steps", ">Loss</text>", ">Learning rate</text>",
                             "<h3>step 3, epoch 2</h3>", "alt=\"a wide room\"",
                             "<h3>Largest training step: 48x24 batch 2</h3>",
                             "src=\"data:image/svg+xml;base64,", "frozen weights", "ceil(3/2) + ceil(3/2) = 2 + 2 = 4",
                             "<h3>Model options</h3>", "<h3>Sampling options</h3>",
                             "<th>sample_every_n_steps</th><td class=\"num\">3</td>",
                             "<th>Peak host memory</th>", "caching latents", "tiny-step00000004.safetensors"})
        CHECK_MESSAGE(html.find(part) != std::string::npos, std::string(part));
    check_links(html, out);

    // Resume from the step-4 state into another folder: steps 5 and 6 continue bit for bit.
    train::RunConfig rc = tiny_config(model, data, s.root / "resumed");
    rc.resume = (out / "tiny-step00000004-state").string();
    rc.seed.reset();  // taken from the state
    Events rec2;
    train::Session resumed(rc, &rec2);
    const train::RunSummary r2 = resumed.run();
    CHECK(r2.steps == 6);
    REQUIRE(rec2.steps.size() == 2);
    CHECK(rec2.steps[0].step == 5);
    CHECK(rec2.steps[0].loss == rec.steps[4].loss);
    CHECK(rec2.steps[1].loss == rec.steps[5].loss);
    CHECK(bitwise_equal(tensors(s.root / "resumed" / "tiny.safetensors"), tensors(out / "tiny.safetensors")));
    // The resumed run's metrics begin with the resume record.
    const train::MetricsHistory h2 = train::read_metrics(s.root / "resumed" / "metrics.jsonl");
    REQUIRE_FALSE(h2.events.empty());
    CHECK(h2.events[0].kind == train::EventKind::resume);
    CHECK(h2.events[0].step == 4);
    CHECK(h2.events[0].path == *rc.resume);
    check_steps(h2, rec2.steps, 3, 2);
}

TEST_CASE("sdtrain run: a stop between steps saves a LoRA and a state, the resume matches (frozen text encoder)") {
    Scratch s("stop");
    const fs::path model = make_tiny_model(s.root), data = make_dataset(s.root);
    // Latents encoded each step (no cache), the text encoder frozen and run each step.
    train::RunConfig c = tiny_config(model, data, s.root / "a");
    c.cache_latents = false;
    c.network_train_unet_only = true;
    c.max_train_steps = 4;
    write_text(s.root / "prompts.txt", "a wide field --w 16 --h 16 --s 2\n");
    c.sample_prompts = (s.root / "prompts.txt").string();
    c.sample_every_n_epochs = 1;
    Events full_rec;
    train::Session(c, &full_rec).run();
    REQUIRE(full_rec.steps.size() == 4);
    REQUIRE(full_rec.samples.size() == 2);  // every epoch: 2 updates per epoch, 2 epochs
    CHECK(full_rec.samples[1].epoch == 2);
    CHECK(fs::path(full_rec.samples[1].images.at(0)).filename().string().rfind("tiny_e000002_00_", 0) == 0);

    std::atomic<bool> stop{false};
    Events rec;
    rec.stop_at_step = 2;
    rec.stop_at_step_flag = &stop;
    train::RunConfig cb = c;
    cb.output_dir = (s.root / "b").string();
    // The stop comes at a save step, the end of epoch 1: its LoRA is not saved twice, its state is
    // saved again after the epoch's end (sampling), so that the resume does not sample epoch 1 again.
    cb.save_every_n_steps = 2;
    cb.save_state = true;
    const train::RunSummary r = train::Session(cb, &rec).run(&stop);
    CHECK(r.interrupted);
    CHECK(r.steps == 2);
    CHECK(fs::exists(s.root / "b" / "tiny-step00000002.safetensors"));
    REQUIRE(fs::exists(s.root / "b" / "tiny-step00000002-state"));
    CHECK(r.resume_hint == (s.root / "b" / "tiny-step00000002-state").string());
    CHECK(r.final_file == (s.root / "b" / "tiny-step00000002.safetensors").string());
    CHECK(rec.saves.size() == 3);
    CHECK_FALSE(fs::exists(s.root / "b" / "tiny.safetensors"));
    const train::MetricsHistory stopped = train::read_metrics(s.root / "b" / "metrics.jsonl");
    CHECK(event_kinds(stopped) == std::vector<std::string>{"start", "save", "save", "sample", "save", "end"});
    CHECK(stopped.events.back().message == "stopped at step 2 (Ctrl-C); continue with --resume " + r.resume_hint);
    CHECK(slurp((s.root / "b" / "report.html").string()).find("stopped at step 2 (Ctrl-C)") != std::string::npos);

    // Resumed in the same folder: its metrics file goes on, and reads as one run of 4 steps.
    train::RunConfig rc = cb;
    rc.resume = r.resume_hint;
    Events rec2;
    train::Session(rc, &rec2).run();
    REQUIRE(rec2.steps.size() == 2);
    CHECK(rec2.steps[1].loss == full_rec.steps[3].loss);
    CHECK(bitwise_equal(tensors(s.root / "b" / "tiny.safetensors"), tensors(s.root / "a" / "tiny.safetensors")));
    const train::MetricsHistory both = train::read_metrics(s.root / "b" / "metrics.jsonl");
    std::vector<train::StepEvent> runs = rec.steps;  // the running mean starts anew at a resume, as kohya's
    runs.insert(runs.end(), rec2.steps.begin(), rec2.steps.end());
    check_steps(both, runs, 2, 1, 2);
    for (size_t i = 0; i < both.steps.size(); i++) CHECK(both.steps[i].loss == full_rec.steps[i].loss);
    CHECK(event_kinds(both) == std::vector<std::string>{"start", "save", "save", "sample", "save", "end", "resume",
                                                        "save", "save", "sample", "save", "save", "end"});
    CHECK(both.events[6].step == 2);
    CHECK(both.events.back().message == "finished: 4 steps");
    const gl::io::SafetensorsFile f((s.root / "a" / "tiny.safetensors").string());
    for (const gl::io::TensorInfo& t : f.list()) CHECK(t.name.rfind("lora_unet_", 0) == 0);
}

TEST_CASE("sdtrain run: text encoder only, LoCon, --network_weights with --dim_from_weights, --no_metadata") {
    Scratch s("variants");
    const fs::path model = make_tiny_model(s.root), data = make_dataset(s.root);
    // The text encoder alone, saved in fp16 with the minimum metadata.
    train::RunConfig te = tiny_config(model, data, s.root / "te");
    te.network_train_text_encoder_only = true;
    te.max_train_steps = 2;
    te.save_precision = "fp16";
    te.no_metadata = true;
    train::Session(te).run();
    {
        const gl::io::SafetensorsFile f((s.root / "te" / "tiny.safetensors").string());
        for (const gl::io::TensorInfo& t : f.list()) {
            CHECK(t.name.rfind("lora_te_", 0) == 0);
            CHECK(t.dtype == gl::DType::f16);
        }
        CHECK(f.metadata().count("ss_network_dim"));
        CHECK(f.metadata().count("modelspec.architecture"));
        CHECK_FALSE(f.metadata().count("ss_tag_frequency"));
        CHECK_FALSE(f.metadata().count("ss_steps"));
    }
    // LoCon: 3x3 convs get conv_dim modules too.
    train::RunConfig lc = tiny_config(model, data, s.root / "locon");
    lc.network_args = {"conv_dim=2", "conv_alpha=1"};
    lc.optimizer_args = {"weight_decay=0.01", "betas=0.9,0.99"};
    lc.max_train_steps = 2;
    lc.network_alpha = 4;
    train::Session(lc).run();
    const fs::path locon = s.root / "locon" / "tiny.safetensors";
    bool conv = false;
    for (const gl::io::TensorInfo& t : gl::io::SafetensorsFile(locon.string()).list())
        conv = conv || (t.shape.size() == 4 && t.shape[2] == 3);
    CHECK(conv);
    CHECK(gl::io::SafetensorsFile(locon.string()).metadata().at("ss_network_args") ==
          "{\"conv_dim\": \"2\", \"conv_alpha\": \"1\", \"dropout\": null}");
    // kohya's ss_optimizer: module.Class(k=v,...), a tuple value as Python prints it.
    CHECK(gl::io::SafetensorsFile(locon.string()).metadata().at("ss_optimizer") ==
          "torch.optim.adamw.AdamW(weight_decay=0.01,betas=(0.9, 0.99))");
    // Continuing from that file: rank, alpha and conv rank read from it; the first step starts
    // from its weights (0 steps would save them unchanged: one step at learning rate 0).
    train::RunConfig cont = tiny_config(model, data, s.root / "cont");
    cont.network_weights = locon.string();
    cont.dim_from_weights = true;
    cont.network_dim.reset();
    cont.max_train_steps = 1;
    cont.learning_rate = 0;
    cont.text_encoder_lr = 0;  // the UNet's modules only: a zero lr for the text encoder leaves it out
    cont.unet_lr = 0;
    cont.network_train_unet_only = true;
    train::Session cs(cont);
    cs.prepare();
    CHECK(cs.config().network_dim == 4);
    CHECK(cs.config().network_alpha == 4.0);
    CHECK(cs.config().lora_config().conv_dim == 2);
    cs.run();
    const auto before = tensors(locon), after = tensors(s.root / "cont" / "tiny.safetensors");
    size_t same = 0;
    for (const auto& [k, v] : after) {
        REQUIRE(before.count(k));
        same += std::memcmp(v.data(), before.at(k).data(), v.size() * sizeof(float)) == 0;
    }
    CHECK(same == after.size());
}

TEST_CASE("sdtrain run: --prior_loss_weight weighs the regularisation images' loss as kohya's loss_weights") {
    Scratch s("prior");
    const fs::path model = make_tiny_model(s.root), data = make_dataset(s.root), reg = make_dataset(s.root / "reg");
    const auto run = [&](const char* name, double prior) {
        train::RunConfig c = tiny_config(model, data, s.root / name);
        c.reg_data_dir = reg.string();
        c.prior_loss_weight = prior;
        c.max_train_steps = 2;
        Events ev;
        train::Session(c, &ev).run();
        return std::pair(tensors(s.root / name / "tiny.safetensors"), ev.steps);
    };
    const auto [one, one_steps] = run("one", 1.0);
    const auto [again, again_steps] = run("again", 1.0);
    const auto [zero, zero_steps] = run("zero", 0.0);
    const auto [half, half_steps] = run("half", 0.5);
    CHECK(one == again);  // deterministic, so the differences below are the weights'
    CHECK(one != zero);
    CHECK(one != half);
    CHECK(zero != half);
    // The batches hold regularisation images, so a smaller weight gives a smaller loss.
    REQUIRE(one_steps.size() == half_steps.size());
    double l1 = 0, lh = 0, l0 = 0;
    for (size_t i = 0; i < one_steps.size(); i++) l1 += one_steps[i].loss, lh += half_steps[i].loss, l0 += zero_steps[i].loss;
    CHECK(l0 < lh);
    CHECK(lh < l1);
}
