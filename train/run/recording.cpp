// A run's metrics file and report from its Session's events (see recording.h).
#include "train/run/recording.h"

#include <cstdio>

#include "ggml-lite/core/autofit.h"
#include "ggml-lite/core/error.h"
#include "ggml-lite/io/atomic_file.h"
#include "train/run/session.h"

namespace train {

namespace fs = std::filesystem;

namespace {

std::string joined_lines(const std::vector<std::string>& lines, const char* prefix) {
    std::string s;
    for (const std::string& l : lines) s += prefix + l + "\n";
    return s;
}

std::string skipped_text(const std::vector<data::SkippedImage>& skipped) {
    return gl::cat(skipped.size(), skipped.size() == 1 ? " file" : " files", ", grouped by reason:\n",
                   data::describe_skipped(skipped, SIZE_MAX, "  "));
}

// The report's section of the skipped images, added or replaced (none when nothing was skipped).
void set_skipped_section(std::vector<ReportBlock>& sections, const std::vector<data::SkippedImage>& skipped) {
    const char* title = "Images skipped";
    std::erase_if(sections, [&](const ReportBlock& t) { return t.title == title; });
    if (!skipped.empty()) sections.push_back({title, skipped_text(skipped)});
}

// skipped_images.txt in the output folder, written whole; when this run skipped nothing, the list
// an earlier run into the folder left is removed (it no longer describes the images).
void write_skipped_file(const fs::path& dir, const std::vector<data::SkippedImage>& skipped) {
    const fs::path path = dir / kSkippedImagesFile;
    std::error_code ec;
    if (skipped.empty()) {
        if (fs::is_regular_file(fs::symlink_status(path, ec))) fs::remove(path, ec);
        return;
    }
    gl::io::write_file_atomic(path.string(), "images sdtrain skipped: " + skipped_text(skipped));
}

std::string seconds_text(double s) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f s", s);
    return buf;
}

}  // namespace

StepMetrics step_metrics(const StepEvent& e) {
    StepMetrics m;
    m.step = e.step;
    m.epoch = e.epoch;
    m.loss = e.loss;
    m.loss_mean = e.loss_mean;
    m.images = e.images;
    if (e.lr_unet) m.lr.push_back({"unet", *e.lr_unet});
    if (e.lr_text_encoder) m.lr.push_back({"text_encoder", *e.lr_text_encoder});
    for (const auto& [group, lr] : e.group_lrs) m.group_lr.push_back({group, lr});
    if (e.d_estimate) m.d = *e.d_estimate;
    if (e.keys_scaled) {
        m.keys_scaled = *e.keys_scaled;
        m.average_key_norm = e.average_key_norm.value_or(kUnknown);
        m.max_key_norm = e.max_key_norm.value_or(kUnknown);
    }
    m.grad_norm = e.grad_norm;
    m.applied = e.applied;
    if (e.device_bytes_in_use) {
        m.mem_used = e.device_bytes_in_use;
        m.mem_plan = e.planned_bytes;
    }
    return m;
}

RunRecording::RunRecording(Clock monotonic, Clock wall) : mono_(std::move(monotonic)), wall_(std::move(wall)) {}

RunRecording::~RunRecording() = default;

fs::path RunRecording::metrics_path() const { return dir_.empty() ? fs::path() : dir_ / "metrics.jsonl"; }
fs::path RunRecording::report_path() const { return dir_.empty() ? fs::path() : dir_ / "report.html"; }

std::string RunRecording::relative(const std::string& path) const {
    std::error_code ec;
    const fs::path a = fs::absolute(path, ec).lexically_normal(), d = fs::absolute(dir_, ec).lexically_normal();
    const fs::path r = a.lexically_relative(d);
    if (r.empty() || *r.begin() == "..") return a.string();  // outside the folder: as it is
    return r.generic_string();
}

void RunRecording::on_plan(const RunPlan& p) {
    report_.dataset_text = {{"Folders and buckets", p.dataset}, {"Steps", p.counts.arithmetic}};
    if (!p.warnings.empty()) report_.dataset_text.push_back({"Warnings", joined_lines(p.warnings, "warning: ")});
    set_skipped_section(report_.dataset_text, p.skipped);
    plan_skipped_ = p.skipped;
    report_.config_text = {{"Summary", p.configuration + "\n"}};
    if (!p.notes.empty()) report_.config_text.push_back({"Notes", joined_lines(p.notes, "note: ")});
    report_.config.clear();
    for (const ConfigSection& s : p.config) {
        ReportTable t{s.title + " options", {}, {}};
        for (const auto& [k, v] : s.entries) t.rows.push_back({k, v});
        report_.config.push_back(std::move(t));
    }
    const MemoryPlan& m = p.memory;
    report_.memory = {{"The whole run", m.by_category + m.choice, ""},
                      {"Largest training step: " + m.largest_step, m.largest_step_report, m.largest_step_timeline_svg}};
}

void RunRecording::on_start(const RunStart& s) {
    dir_ = s.output_dir;
    start_ = s;
    start_mono_ = mono_();
    start_wall_ = wall_();
    if (!s.tensorboard_dir.empty()) tb_ = std::make_unique<TensorBoardLog>(s.tensorboard_dir, wall_);
}

void RunRecording::open() {
    if (rec_ || !start_) return;
    const RunStart& s = *start_;
    RecorderOptions o;
    o.output_dir = dir_;
    o.title = "sdtrain: " + s.name;
    o.meter.first_step = s.first_step;
    o.meter.total_steps = s.total_steps;
    o.meter.total_epochs = s.epochs;
    o.meter.loss_window = int(std::max<int64_t>(1, s.updates_per_epoch));
    o.meter.start_time = start_mono_;  // the records count from the start of training, as if opened then
    o.start_wall_time = start_wall_;
    o.resumed_from = s.resumed_from;
    rec_ = std::make_unique<Recorder>(o, mono_, wall_);
    ReportInput& r = rec_->report();
    r.dataset_text = std::move(report_.dataset_text);
    r.dataset = std::move(report_.dataset);
    r.memory = std::move(report_.memory);
    r.config_text = std::move(report_.config_text);
    r.config = std::move(report_.config);
    r.timings = {"", {"phase", "time"}, {}};
    for (const auto& [phase, seconds] : s.timings) r.timings.rows.push_back({phase, seconds_text(seconds)});
    if (!s.resumed_from.empty())
        r.run_rows.push_back({"Resumed from", s.resumed_from + " (step " + std::to_string(s.first_step) + ")"});
    write_skipped_file(dir_, plan_skipped_);
    rec_->write_report();
}

void RunRecording::on_step(const StepEvent& e) {
    GL_CHECK(start_, "run recording: a step before the run started");
    open();
    last_ = rec_->step(step_metrics(e));
    last_->val_loss = val_loss_;
    if (tb_) tb_->step(e);
}

void RunRecording::on_validation(const ValidationEvent& e) {
    open();
    if (!rec_) return;
    rec_->validation(e.step, e.epoch, e.per_epoch ? "epoch" : "step", e.loss, e.average, e.divergence);
    val_loss_ = e.loss;
    if (last_) last_->val_loss = e.loss;
    if (tb_) tb_->validation(e);
}

void RunRecording::on_epoch(const EpochEvent& e) {
    if (tb_) tb_->epoch(e);
}

void RunRecording::on_sample(const SampleEvent& e) {
    open();
    if (!rec_) return;
    std::vector<SampleImage> images;
    for (size_t i = 0; i < e.images.size(); i++)
        images.push_back({relative(e.images[i]), i < e.prompts.size() ? e.prompts[i] : std::string()});
    // Per-step samples carry no epoch of their own: the one of the step they follow.
    rec_->sample(e.step, e.epoch.value_or(last_ ? last_->epoch : 0), std::move(images));
    if (tb_) tb_->sample(e);
}

void RunRecording::on_save(const SaveEvent& e) {
    open();
    if (!rec_) return;
    rec_->save(e.step, e.epoch, relative(e.path));
}

void RunRecording::on_end(const RunSummary& s) {
    if (tb_) tb_->finish();
    if (!rec_ || ended_) return;
    ended_ = true;
    ReportInput& r = rec_->report();
    r.run_rows.push_back({"Peak host memory", gl::format_bytes(s.peak_host_anon_bytes) + " of its own (" +
                                                  gl::format_bytes(s.peak_host_bytes) +
                                                  " peak resident, the mapped model's pages included)"});
    char speed[64];
    std::snprintf(speed, sizeof speed, "%.3g images/s over the training loop", s.images_per_second);
    r.run_rows.push_back({"Speed (whole run)", speed});
    r.run_rows.push_back({"Start-up", seconds_text(s.startup_seconds) + " to the end of the first step"});
    if (s.peak_device_bytes)
        r.run_rows.push_back({"Device memory, measured", gl::format_bytes(s.peak_device_bytes) + " peak in use, " +
                                                             gl::format_bytes(s.planned_device_bytes) + " predicted"});
    set_skipped_section(r.dataset_text, s.skipped_images);
    if (s.skipped_images != plan_skipped_) write_skipped_file(dir_, s.skipped_images);
    r.timings.rows.push_back({"training loop (samples and saves included)", seconds_text(s.train_seconds)});
    if (s.interrupted)
        rec_->end("stopped at step " + std::to_string(s.steps) + " (Ctrl-C)" +
                  (s.resume_hint.empty() ? "" : "; continue with --resume " + s.resume_hint));
    else
        rec_->end("finished: " + std::to_string(s.steps) + " steps");
}

void RunRecording::on_error(const std::string& message) {
    if (!rec_ || ended_) return;
    ended_ = true;
    try {
        if (tb_) tb_->finish();
        rec_->end("failed: " + message);
    } catch (const std::exception&) {  // the disk may be why the run failed: its error is the one shown
    }
}

}  // namespace train
