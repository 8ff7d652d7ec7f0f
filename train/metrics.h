// Training metrics: one record per optimizer step and one per run event (start, resume, save,
// sample, end), kept in <output dir>/metrics.jsonl as one JSON object per line. Each line goes out
// in a single write(2) on a file opened for appending, so a crash loses at most the line being
// written, and a resumed run appends to the same file (the reader lets the resumed records replace
// those of the steps redone).
//
// StepMeter turns what a step knows (its loss, images, learning rates, memory) into a full record:
// the running mean loss, moving it/s and images/s, ETA, elapsed and wall time, from injectable
// clocks. The progress line (tools/common/progress.h), this file and the report
// (train/report.h) all show the same StepMetrics.
#pragma once
#include <cstdint>
#include <deque>
#include <filesystem>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

namespace train {

// Seconds from a clock: monotonic for rates, the wall clock (Unix time) for records.
using Clock = std::function<double()>;
double monotonic_seconds();
double unix_seconds();

inline constexpr double kUnknown = std::numeric_limits<double>::quiet_NaN();

struct LrValue {
    std::string group;  // parameter group ("unet", "text_encoder")
    double lr = 0;
};

struct StepMetrics {
    // What the trainer knows after a step.
    int64_t step = 0;              // optimizer steps done, counting this one (1-based)
    int64_t epoch = 0;             // 1-based epoch this step belongs to
    double loss = kUnknown;        // this step's loss (mean over its micro-batches)
    int64_t images = 0;            // images this step trained on (batch x accumulation)
    std::vector<LrValue> lr;       // per part ("unet", "text_encoder"), as applied at this step
    // Every parameter group's under kohya's names, when there are more than one per part (block
    // lr weights, LoRA+: "unet_block3", "unet plus", ...); else empty.
    std::vector<LrValue> group_lr;
    // Prodigy and the D-Adaptation optimizers: the step-size estimate d after this step (kohya's
    // TensorBoard lr/d*lr is d times each rate); kUnknown for the others (not written).
    double d = kUnknown;
    // --scale_weight_norms (kohya's max-norm figures): modules scaled at this step (-1: not used),
    // the mean and the largest norm after scaling.
    int64_t keys_scaled = -1;
    double average_key_norm = kUnknown, max_key_norm = kUnknown;
    size_t mem_used = 0;           // device memory in use, bytes (0: not known)
    size_t mem_plan = 0;           // what the memory plan reserves, bytes (0: not known)
    double grad_norm = kUnknown;   // of the unscaled gradients
    bool applied = true;           // false: the update was skipped (fp16 overflow)
    double loss_mean = kUnknown;   // running mean: the trainer's own, else StepMeter's over its window
    // Derived by StepMeter::update.
    int64_t total_steps = 0;       // of the run; 0 when open-ended
    int64_t total_epochs = 0;      // 0 when not known
    double it_per_s = kUnknown;    // moving rates over the meter's rate window (from the 2nd step)
    double images_per_s = kUnknown;
    double eta_s = kUnknown;       // remaining steps at the moving rate
    double elapsed_s = 0;          // since the meter started, pauses included
    double time = 0;               // Unix time of the record
    // The last validation's mean loss, for the progress line (its own record is a validation
    // event; not written with the step).
    double val_loss = kUnknown;
};

struct MeterOptions {
    int64_t first_step = 0;     // steps done before this run (a resumed run starts there)
    int64_t total_steps = 0;    // 0: open-ended (no ETA)
    int64_t total_epochs = 0;
    int loss_window = 100;      // steps in the running mean; kohya's avr_loss uses the steps of one epoch
    int rate_window = 20;       // steps the moving it/s, images/s and ETA look back over
    std::optional<double> start_time;  // the monotonic time elapsed_s counts from (default: when the meter is made)
};

class StepMeter {
public:
    explicit StepMeter(const MeterOptions& o, Clock monotonic = monotonic_seconds, Clock wall = unix_seconds);

    // Fills m's derived fields from this step and the ones before (loss_mean only when m has none);
    // returns the full record.
    // Steps must come in increasing order (gl::Error otherwise).
    StepMetrics update(StepMetrics m);

    // The time since the last step was not training (a sample or a save just done): it is left out
    // of the rates and the ETA.
    void idle();

    const MeterOptions& options() const { return o_; }

private:
    struct Point {
        double t;
        int64_t step, images;
    };
    MeterOptions o_;
    Clock mono_, wall_;
    double start_ = 0;
    int64_t last_step_, images_ = 0;
    std::deque<double> losses_;
    std::deque<Point> window_;
};

enum class EventKind : uint8_t { start, resume, save, sample, end, validation };
// "start" | "resume" | "save" | "sample" | "end" | "validation"
const char* event_kind_name(EventKind k);

struct SampleImage {
    std::string path;    // the PNG written (absolute, or relative to the metrics file's folder)
    std::string prompt;  // the prompt line it was sampled from
};

struct MetricsEvent {
    EventKind kind = EventKind::start;
    int64_t step = 0;                 // optimizer steps done when it happened
    int64_t epoch = 0;
    double time = 0;                  // Unix time; 0: MetricsWriter fills in the current time
    std::string path;                 // save: the file written; resume: the state resumed from
    std::vector<SampleImage> images;  // sample
    std::string message;              // free text (end: "finished", "stopped by Ctrl-C", the error)
    // validation: the pass's mean loss, kohya's recorder average and its divergence from the
    // training loss's running mean; message: "step" or "epoch" (which validation it was).
    double loss = kUnknown, average = kUnknown, divergence = kUnknown;
};

// Appends records to a JSONL file. Not copyable; one writer per file.
class MetricsWriter {
public:
    // Creates the file (not its folder) or opens it for appending. A last line a crash left
    // unterminated is ended first, so it stays one line the reader skips. Throws gl::Error
    // naming the file.
    explicit MetricsWriter(const std::filesystem::path& file);
    ~MetricsWriter();
    MetricsWriter(const MetricsWriter&) = delete;
    MetricsWriter& operator=(const MetricsWriter&) = delete;

    void write(const StepMetrics& m);
    // Events are also flushed to the disk (fdatasync), so a save's record is as durable as the file saved.
    void write(const MetricsEvent& e);
    const std::filesystem::path& path() const { return path_; }

private:
    void append(const std::string& line);
    std::filesystem::path path_;
    int fd_ = -1;
};

// One JSON line per record (what MetricsWriter writes, without the newline); non-finite numbers
// are written as null.
std::string metrics_json(const StepMetrics& m);
std::string metrics_json(const MetricsEvent& e);

struct MetricsHistory {
    // In file order, except that a resume event at step N drops the steps above N recorded before
    // it (and the save / sample events there): the resumed run redid them; and a start event
    // begins the history anew: the records before it are an earlier run's in the same folder
    // (they stay in the file).
    std::vector<StepMetrics> steps;
    std::vector<MetricsEvent> events;
    int64_t skipped_lines = 0;  // lines that are not a record (a torn last line, foreign text)
};

// Reads a metrics file. Throws gl::Error when it cannot be read; bad lines are counted, not fatal.
MetricsHistory read_metrics(const std::filesystem::path& file);
// The same from the file's text.
MetricsHistory parse_metrics(const std::string& text);

}  // namespace train
