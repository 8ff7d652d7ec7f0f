// What a training run leaves in its output folder besides the LoRA: metrics.jsonl (every step and
// event) and report.html (rewritten at every save and at the end), kept by one object so that a
// trainer plugs them in with a call per step and per event:
//
//   train::Recorder rec({.output_dir = out, .title = "sdtrain: " + name, .meter = {...}});
//   rec.report().config = {...};  rec.report().memory = {...};  rec.report().dataset = {...};
//   progress.update(rec.step(facts));            // per optimizer step (the progress line shows the record)
//   rec.sample(step, epoch, images);             // after sampling
//   rec.save(step, epoch, lora_file);            // after a save: the report is rewritten
//   rec.end("finished");                         // or "stopped at step N (Ctrl-C)", the error
//
// Samples and saves come right after a step: the time from that step to the sample or save
// record is left out of the rates and the ETA.
#pragma once
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "train/metrics.h"
#include "train/report.h"

namespace train {

struct RecorderOptions {
    std::filesystem::path output_dir;   // metrics.jsonl and report.html go here (it must exist)
    std::string title;                  // the report's title
    MeterOptions meter;                 // totals, windows; meter.first_step > 0 records a resume
    std::string resumed_from;           // the state resumed from (the resume event's path)
    std::optional<double> start_wall_time;  // the start / resume event's time (default: when the recorder is made)
};

class Recorder {
public:
    // Opens (appends to) metrics.jsonl and records the start, or the resume at meter.first_step.
    explicit Recorder(const RecorderOptions& o, Clock monotonic = monotonic_seconds, Clock wall = unix_seconds);

    // The step's full record (running mean, rates, ETA filled in), written to the metrics file.
    StepMetrics step(const StepMetrics& facts);

    void sample(int64_t step, int64_t epoch, std::vector<SampleImage> images);
    // A validation pass's record (kind: "step" or "epoch"); left out of the rates like a sample.
    void validation(int64_t step, int64_t epoch, const std::string& kind, double loss, double average,
                    double divergence);
    // Records the save and rewrites the report.
    void save(int64_t step, int64_t epoch, const std::string& path);
    // Records the end (message: "finished", "stopped at step 120 (Ctrl-C)", an error) and writes
    // the report with it as the status.
    void end(const std::string& message);

    // What the report shows besides the metrics: set config, dataset, memory and timings once
    // (or whenever they change); title and status are kept up to date by the recorder.
    ReportInput& report() { return report_; }
    // Reads the metrics file back and rewrites report.html (save and end do it).
    void write_report();

    std::filesystem::path metrics_path() const { return dir_ / "metrics.jsonl"; }
    std::filesystem::path report_path() const { return dir_ / "report.html"; }

private:
    std::filesystem::path dir_;
    StepMeter meter_;
    MetricsWriter writer_;
    ReportInput report_;
    int64_t last_step_ = 0, last_epoch_ = 0;
};

}  // namespace train
