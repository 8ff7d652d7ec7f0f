// What a run tells the outside while it goes (the terminal progress, the metrics file and the HTML
// report implement it: train/run/recording.h, tools/sdtrain/console.h; the engine knows none of
// them). Callbacks run on the training thread, between steps; an exception thrown by one stops the
// run like any other error.
//
// Order: on_plan (prepare), on_message (stages), then for a run that trains: on_start, on_step /
// on_validation / on_epoch /
// on_sample / on_save, on_end. A run that fails in Session::run gets on_error (then the error
// propagates); one stopped while caching gets on_end without on_start; a dry run gets on_end only.
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "data/dataset.h"

namespace train {

struct RunPlan;

// The training loop is about to begin: caches filled, weights loaded, the LoRA initialised or
// resumed.
struct RunStart {
    std::string output_dir;
    std::string name;                 // the LoRA's name (--output_name, else kohya's default)
    int64_t first_step = 0;           // steps done before this run (the resumed state's), else 0
    int64_t total_steps = 0, epochs = 0;
    int64_t updates_per_epoch = 0;    // the window of StepEvent::loss_mean
    std::string resumed_from;         // --resume's state folder, or empty
    std::vector<std::pair<std::string, double>> timings;  // phase, seconds (caching, loading, ...)
    // --logging_dir: the TensorBoard run folder, as kohya names it (train/run/tensorboard_log.h); else empty.
    std::string tensorboard_dir;
};

struct StepEvent {
    int64_t step = 0, total_steps = 0;  // 1-based optimizer step of total
    int64_t epoch = 1, epochs = 1;
    double loss = 0;        // this update's mean loss over its micro-batches
    double loss_mean = 0;   // running mean over the last updates-per-epoch updates (kohya's avr_loss)
    std::optional<double> lr_unet, lr_text_encoder;  // this step's learning rates (unset: part not trained)
    // The rates after the scheduler's step (the next update's): what kohya logs as lr/unet and
    // lr/textencoder at this step.
    std::optional<double> next_lr_unet, next_lr_text_encoder;
    // With more than one parameter group per part (block lr weights, LoRA+): every group's rate at
    // this step and after the scheduler's step, under kohya's lr_descriptions ("textencoder",
    // "textencoder plus", "unet", "unet plus", "unet_block3", "unet_block3 plus"); else empty.
    std::vector<std::pair<std::string, double>> group_lrs, next_group_lrs;
    // Prodigy and the D-Adaptation optimizers: the step-size estimate d after this update (every
    // group's, as they share it); kohya logs d times each next rate as lr/d*lr/<group>.
    std::optional<double> d_estimate;
    // --scale_weight_norms: kohya's max-norm figures after this update (modules scaled, the mean and
    // the largest norm after scaling).
    std::optional<int> keys_scaled;
    std::optional<double> average_key_norm, max_key_norm;
    double grad_norm = 0;
    bool applied = true;    // false: an fp16 overflow skipped the update
    double loss_scale = 1;
    int64_t images = 0;     // images in this update
    double seconds = 0;     // wall time since the previous step (data waiting included)
    double data_wait_seconds = 0;  // of which waiting for the loader
    size_t device_bytes_in_use = 0;  // CUDA: the device's used memory (0 on the CPU)
    size_t planned_bytes = 0;        // the plan's total, context included
};

// An epoch ended (its last update, or the run's): kohya's loss/epoch_average.
struct EpochEvent {
    int64_t epoch = 1, step = 0;
    double loss_mean = 0;  // the running mean of the epoch's last update (kohya's loss_recorder)
};

// A validation pass (train/run/validation.h): every validation batch (up to --max_validation_steps)
// at each of kohya's fixed timesteps, with fixed noise.
struct ValidationEvent {
    int64_t step = 0, epoch = 1;
    bool per_epoch = false;    // the epoch's validation (else --validate_every_n_steps')
    double loss = 0;           // this pass's mean loss
    double average = 0;        // kohya's recorder average (loss/validation/{step,epoch}_average)
    double divergence = 0;     // average - the training loss's running mean
    int64_t batches = 0;
    std::vector<int> timesteps;
    double seconds = 0;
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
    // Every file a stage dropped (reading the dataset, buckets, latent caching, the loader), each
    // once with the first stage's reason.
    std::vector<data::SkippedImage> skipped_images;
};

class RunObserver {
public:
    virtual ~RunObserver() = default;
    virtual void on_plan(const RunPlan&) {}
    virtual void on_message(const std::string&) {}  // progress of the stages before training, notes
    virtual void on_start(const RunStart&) {}
    virtual void on_step(const StepEvent&) {}
    virtual void on_epoch(const EpochEvent&) {}
    virtual void on_validation(const ValidationEvent&) {}
    virtual void on_sample(const SampleEvent&) {}
    virtual void on_save(const SaveEvent&) {}
    virtual void on_end(const RunSummary&) {}
    virtual void on_error(const std::string&) {}  // Session::run failed (the error's message)
};

}  // namespace train
