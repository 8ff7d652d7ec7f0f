// A run's metrics file and report (train/recorder.h) kept from its Session's events: plug it in as
// the observer (or forward a console's events to it, as sdtrain does) and the output folder gets
//   metrics.jsonl  every step (loss, running mean, learning rates, it/s, images/s, ETA, memory) and
//                  every event (start or resume, samples, saves, the end), appended by a resume;
//   report.html    written with the first record, at every save and at the end: the loss and
//                  LR curves, the samples, the memory plan with the largest step's timeline, the
//                  dataset and steps arithmetic, the configuration by option group, the timings,
//                  the peak host memory, the images skipped;
//   skipped_images.txt  every image the run skipped, with its reason (only when one was: written
//                  with the first step, rewritten at the end when caching or loading dropped more);
//   and with --logging_dir the run's TensorBoard event file (train/run/tensorboard_log.h).
// All are opened with the run's first step, save or sample (timed from on_start): a dry run, a
// refused plan, a run stopped while caching or refused before its first step (a NaN weight)
// leaves the output folder as it was, an earlier run's metrics.jsonl untouched. Paths in the
// records are relative to the output folder (sample/<name>.png, <name>.safetensors), so the
// folder can be moved or copied whole.
#pragma once
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

#include "train/metrics.h"
#include "train/recorder.h"
#include "train/run/observer.h"
#include "train/run/tensorboard_log.h"

namespace train {

inline constexpr const char* kSkippedImagesFile = "skipped_images.txt";

class RunRecording : public RunObserver {
public:
    // The clocks of the step meter and the records (tests pass their own).
    explicit RunRecording(Clock monotonic = monotonic_seconds, Clock wall = unix_seconds);
    ~RunRecording() override;

    void on_plan(const RunPlan& p) override;    // keeps what the report shows of the plan
    void on_start(const RunStart& s) override;  // the start; the files are opened with the first record
    void on_step(const StepEvent& e) override;
    void on_validation(const ValidationEvent& e) override;
    void on_epoch(const EpochEvent& e) override;
    void on_sample(const SampleEvent& e) override;
    void on_save(const SaveEvent& e) override;  // the report is rewritten
    void on_end(const RunSummary& s) override;  // the end record and the final report
    // The end record says the run failed; never throws (the run's own error is the one to report).
    void on_error(const std::string& message) override;

    // The last step's full record (running mean, rates, ETA), what a progress line shows; null
    // before the first step.
    const StepMetrics* last_step() const { return last_ ? &*last_ : nullptr; }
    // Where the files go once the run has started (empty before on_start), and whether they were
    // written (the run recorded a step, save or sample).
    std::filesystem::path metrics_path() const;
    std::filesystem::path report_path() const;
    bool written() const { return rec_ != nullptr; }
    // The TensorBoard event file (empty without --logging_dir or before the first record).
    std::filesystem::path tensorboard_file() const { return tb_ ? tb_->file() : std::filesystem::path(); }

private:
    std::string relative(const std::string& path) const;
    void open();  // the recorder, at the first record
    Clock mono_, wall_;
    ReportInput report_;  // the plan's part, until the recorder exists
    std::unique_ptr<Recorder> rec_;
    std::unique_ptr<TensorBoardLog> tb_;
    std::filesystem::path dir_;
    std::optional<RunStart> start_;
    double start_mono_ = 0, start_wall_ = 0;
    std::optional<StepMetrics> last_;
    double val_loss_ = kUnknown;
    std::vector<data::SkippedImage> plan_skipped_;
    bool ended_ = false;
};

// What a step event is as a metrics record (before StepMeter derives rates and ETA). Device
// memory stays 0 (not shown) when the event has none: on the CPU the plan is host memory.
StepMetrics step_metrics(const StepEvent& e);

}  // namespace train
