// What a run tells the outside while it goes (the terminal progress, the metrics file and the HTML
// report implement it; the engine knows none of them). Callbacks run on the training thread,
// between steps; an exception thrown by one stops the run like any other error.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace train {

struct RunPlan;

struct StepEvent {
    int64_t step = 0, total_steps = 0;  // 1-based optimizer step of total
    int64_t epoch = 1, epochs = 1;
    double loss = 0;        // this update's mean loss over its micro-batches
    double loss_mean = 0;   // running mean over the last updates-per-epoch updates (kohya's avr_loss)
    double lr_unet = 0, lr_text_encoder = 0;  // this step's learning rates (0: part not trained)
    double grad_norm = 0;
    bool applied = true;    // false: an fp16 overflow skipped the update
    double loss_scale = 1;
    int64_t images = 0;     // images in this update
    double seconds = 0;     // wall time since the previous step (data waiting included)
    double data_wait_seconds = 0;  // of which waiting for the loader
    size_t device_bytes_in_use = 0;  // CUDA: the device's used memory (0 on the CPU)
    size_t planned_bytes = 0;        // the plan's total, context included
};

struct SampleEvent {
    int64_t step = 0;
    std::optional<int64_t> epoch;   // set for per-epoch samples
    std::vector<std::string> images;  // the PNG files written
    std::vector<std::string> prompts; // one per image
};

struct SaveEvent {
    std::string path;  // the LoRA file or state folder
    bool state = false;
    bool final = false;
    int64_t step = 0, epoch = 0;
    std::vector<std::string> removed;  // older saves deleted by the keep-last-N rule
};

struct RunSummary {
    int64_t steps = 0, epochs = 0;
    bool interrupted = false;       // stopped by the stop flag (Ctrl-C): saved, resumable
    bool dry_run = false;
    std::string final_file;         // the last LoRA written
    std::string resume_hint;        // the state folder to --resume from, when one was written
    double startup_seconds = 0;     // from the session's start to the end of the first step
    double train_seconds = 0;       // the training loop
    double images_per_second = 0;   // images trained / train_seconds
    size_t peak_host_bytes = 0;     // the process's peak resident set (VmHWM: mapped model pages included)
    size_t peak_host_anon_bytes = 0;  // its own memory (RssAnon), the largest seen between stages and steps
    size_t planned_device_bytes = 0;
    size_t peak_device_bytes = 0;   // CUDA: the largest device use seen at a step
    std::vector<std::string> skipped_images;  // "path: reason", images dropped while loading
};

class RunObserver {
public:
    virtual ~RunObserver() = default;
    virtual void on_plan(const RunPlan&) {}
    virtual void on_message(const std::string&) {}  // progress of the stages before training, notes
    virtual void on_step(const StepEvent&) {}
    virtual void on_sample(const SampleEvent&) {}
    virtual void on_save(const SaveEvent&) {}
    virtual void on_end(const RunSummary&) {}
};

}  // namespace train
