// sdtrain's output while it runs (see console.h).
#include "tools/sdtrain/console.h"

#include <cstdio>
#include <filesystem>

#include "ggml-lite/core/autofit.h"
#include "ggml-lite/core/error.h"
#include "train/run/session.h"

namespace sdtrain {

namespace {
std::string fixed(double v, int digits) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.*f", digits, v);
    return buf;
}
}  // namespace

Console::Console(gl::cli::Progress progress) : progress_(std::move(progress)) {}

void Console::line(const std::string& text) {
    std::string_view t(text);
    if (!t.empty() && t.back() == '\n') t.remove_suffix(1);
    progress_.print(t);
}

void Console::on_plan(const train::RunPlan& p) {
    rec_.on_plan(p);
    line(p.text());
}

void Console::on_message(const std::string& m) { line(m); }

void Console::on_start(const train::RunStart& s) {
    rec_.on_start(s);
    output_dir_ = s.output_dir;
    line(gl::cat("metrics: ", rec_.metrics_path().string(), (s.first_step > 0 ? " (appended)" : ""),
                 ", report: ", rec_.report_path().string(), " (rewritten at every save)"));
}

void Console::on_step(const train::StepEvent& e) {
    rec_.on_step(e);
    progress_.update(*rec_.last_step());
}

void Console::on_validation(const train::ValidationEvent& e) {
    rec_.on_validation(e);
    std::string ts;
    for (int t : e.timesteps) ts += (ts.empty() ? "" : ",") + std::to_string(t);
    line(gl::cat(e.per_epoch ? gl::cat("epoch ", e.epoch, " validation") : gl::cat("validation at step ", e.step), ": loss ",
                 fixed(e.loss, 4), " (", e.batches, e.batches == 1 ? " batch" : " batches", " x timesteps ", ts,
                 "; kohya's average ", fixed(e.average, 4), ", divergence ", fixed(e.divergence, 4), ")"));
}

void Console::on_epoch(const train::EpochEvent& e) { rec_.on_epoch(e); }

void Console::on_sample(const train::SampleEvent& e) {
    rec_.on_sample(e);
    if (e.images.empty()) return;
    samples_ += int(e.images.size());
    sample_dir_ = std::filesystem::path(e.images[0]).parent_path().string();
    line(gl::cat("sampled ", e.images.size(), e.images.size() == 1 ? " image" : " images", " at step ", e.step,
                 e.epoch ? gl::cat(" (epoch ", *e.epoch, ")") : std::string(), " into ", sample_dir_, "/"));
}

void Console::on_save(const train::SaveEvent& e) {
    rec_.on_save(e);
    line(gl::cat("saved ", e.path, e.state ? " (state)" : ""));
    for (const std::string& r : e.removed) line("removed " + r);
}

void Console::on_end(const train::RunSummary& s) {
    rec_.on_end(s);
    progress_.finish();
    if (s.dry_run) {
        line(gl::cat("dry run: nothing was loaded or written (device memory planned: ",
                     gl::format_bytes(s.planned_device_bytes), ")"));
        return;
    }
    if (!s.skipped_images.empty()) {
        line(gl::cat(s.skipped_images.size(), s.skipped_images.size() == 1 ? " image" : " images",
                     " skipped (reading the dataset, buckets, caching, loading):"));
        line(data::describe_skipped(s.skipped_images));
    }
    if (s.interrupted) {
        line(s.final_file.empty() ? gl::cat("stopped at step ", s.steps, ": nothing new was saved")
                                  : gl::cat("stopped at step ", s.steps, ": the LoRA is ", s.final_file));
        if (!s.resume_hint.empty()) line("continue with --resume " + s.resume_hint);
    } else {
        line(gl::cat("done: ", s.steps, " steps in ", gl::cli::format_duration(s.train_seconds),
                     " (samples and saves included: ", fixed(s.images_per_second, 2), " images/s), start-up ",
                     fixed(s.startup_seconds, 1), " s to the first step"));
    }
    line(gl::cat("host memory: peak ", gl::format_bytes(s.peak_host_anon_bytes), " of its own, ",
                 gl::format_bytes(s.peak_host_bytes), " resident with the mapped model"));
    line(gl::cat("device memory: planned ", gl::format_bytes(s.planned_device_bytes),
                 s.peak_device_bytes ? ", measured peak " + gl::format_bytes(s.peak_device_bytes) : std::string()));
    if (!s.interrupted && !s.final_file.empty()) line("the LoRA: " + s.final_file);
    if (samples_ > 0) line(gl::cat("samples:  ", sample_dir_, "/ (", samples_, " images)"));
    if (rec_.written())
        line(gl::cat("report:   ", rec_.report_path().string(), " (metrics: ", rec_.metrics_path().string(), ")"));
}

void Console::on_error(const std::string& message) {
    progress_.finish();
    rec_.on_error(message);
}

}  // namespace sdtrain
