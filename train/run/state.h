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

namespace train {

struct RunPosition {
    int64_t step = 0;          // optimizer steps done
    int64_t epoch = 1;         // the epoch the next batch belongs to (1-based)
    int64_t batches_done = 0;  // loader batches consumed (the next one's index in the run)
    uint64_t seed = 0;
    BucketTrainerState trainer;
    std::string run_identity;  // data order: seed, micro-batch, accumulation, images, buckets
};

// Writes the state folder atomically (train/run/save.h write_dir_atomically).
void save_run_state(const std::filesystem::path& dir, BucketTrainer& t, const RunPosition& pos);

// Reads train_state.json (gl::Error naming the folder and what is missing or malformed).
RunPosition read_run_position(const std::filesystem::path& dir);

// Restores the LoRA and optimizer state into the trainer's memory (after checking both files
// against the run). Returns the optimizer's note about changed arguments ("" when none).
std::string load_run_state(const std::filesystem::path& dir, BucketTrainer& t, const RunPosition& pos);

}  // namespace train
