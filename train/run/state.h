// --save_state / --resume: the full state of a run in kohya's state folder names
// (<name>-step00000500-state/, train_state.json with kohya's current_epoch / current_step), with
// our own files in it instead of accelerate's pickles:
//   lora.safetensors       every LoRA parameter (f32 masters, bit for bit) by its graph name
//   optimizer.safetensors  every optimizer state tensor, the applied-update count, the loss scaler
//                          (optim::Optimizer::save_state)
//   train_state.json       the step and epoch; the data position (batches consumed), the noise
//                          generator's position and the seed; what identifies the run's data order
//                          (so a resume with another dataset, batch or seed is refused, naming it)
// A resume loads these and continues with the next batch; on the CPU the result is bit-identical
// to a run that was never interrupted.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>

#include "train/bucket_trainer.h"
#include "train/run/data_plan.h"

namespace train {

// The train_state.json format: 2 identifies the dataset by content (1: by the paths as given).
constexpr int kStateVersion = 2;

struct RunPosition {
    int version = kStateVersion;
    int64_t step = 0;          // optimizer steps done
    int64_t epoch = 1;         // the epoch the next batch belongs to (1-based)
    int64_t batches_done = 0;  // loader batches consumed (the next one's index in the run)
    // Where the counting began: the step counter at batch start_batch (0, 0 but for kohya's
    // --initial_epoch / --initial_step, train/run/initial_step.h).
    int64_t start_step = 0, start_batch = 0;
    uint64_t seed = 0;
    // Data-parallel ranks (absent in the file: 1). The batches are the world's global ones, so a
    // resume must have as many ranks.
    int world_size = 1;
    BucketTrainerState trainer;
    std::string run_identity;  // data order: seed, micro-batch, accumulation, images, buckets
};

// Writes the state folder atomically (train/run/save.h write_dir_atomically).
void save_run_state(const std::filesystem::path& dir, BucketTrainer& t, const RunPosition& pos);

// Reads dir/train_state.json: every field by name, type and range (gl::Error naming the file and
// the field; a folder, FIFO or device in place of the file is refused without blocking).
RunPosition read_run_position(const std::filesystem::path& dir);
// The same from the file's text (`file` names it in errors).
RunPosition parse_run_position(const std::string& text, const std::string& file);

// What a resumed position must agree with: this run's steps arithmetic, and the noise its
// micro-batches draw (BucketTrainer::noise_draws).
struct RunShape {
    StepCounts counts;
    uint64_t min_update_draws = 0;  // the fewest draws of an update: one image of the smallest bucket
    uint64_t max_batch_draws = 0;   // the most of a micro-batch: a whole one of the largest bucket
};
// Refuses a position this run cannot continue, naming `file` and the field: the step at or past
// the run's end, batches past its epochs, a step count or epoch that the batches done do not give,
// a noise position outside what that many updates draw.
void check_run_position(const RunPosition& p, const std::string& file, const RunShape& run);

// Restores the LoRA and optimizer state into the trainer's memory (after checking both files
// against the run). Returns the optimizer's note about changed arguments ("" when none).
std::string load_run_state(const std::filesystem::path& dir, BucketTrainer& t, const RunPosition& pos);

}  // namespace train
