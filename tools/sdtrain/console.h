// What sdtrain shows while it runs, as the Session's observer: the plan and the stages as lines,
// the progress line during training (tools/common/progress.h: redrawn in place on a terminal,
// plain lines elsewhere) showing the records of train::RunRecording, which it feeds (metrics.jsonl
// and report.html in the output folder), a line per save and sampling, and at the end the summary:
// speed, start-up, peak host memory, device memory (planned, and measured on CUDA), and where the
// LoRA, the samples and the report are. Every line goes through the progress object, so lines and
// the progress line never interleave.
#pragma once
#include <string>

#include "tools/common/progress.h"
#include "train/run/recording.h"

namespace sdtrain {

class Console : public train::RunObserver {
public:
    explicit Console(gl::cli::Progress progress);

    void on_plan(const train::RunPlan& p) override;
    void on_message(const std::string& m) override;
    void on_start(const train::RunStart& s) override;
    void on_step(const train::StepEvent& e) override;
    void on_validation(const train::ValidationEvent& e) override;
    void on_epoch(const train::EpochEvent& e) override;
    void on_sample(const train::SampleEvent& e) override;
    void on_save(const train::SaveEvent& e) override;
    void on_end(const train::RunSummary& s) override;
    void on_error(const std::string& message) override;  // ends the progress line first

    const train::RunRecording& recording() const { return rec_; }

private:
    void line(const std::string& text);  // one or more lines (a trailing newline is dropped)
    gl::cli::Progress progress_;
    train::RunRecording rec_;
    std::string output_dir_, sample_dir_;
    int samples_ = 0;
};

}  // namespace sdtrain
