// The host loop of a run over several step graphs: one per bucket shape and micro-batch size,
// all on one gl::SharedMemory, so their LoRA parameters, optimizer state and gradient
// accumulators are one copy (core/shared_memory.h). Whatever graph runs, the run keeps ONE
// optimizer step count, ONE loss scaler and ONE noise generator, and an update may gather its
// micro-batches from different graphs: kohya (accelerate) accumulates over consecutive batches
// whatever their bucket, and at the end of an epoch applies the update with fewer micro-batches
// than --gradient_accumulation_steps, each still weighted 1 / accumulation steps.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "train/trainer.h"

namespace train {

// One micro-batch of an update: the graph that runs it (index into the trainer's graphs), its
// latents [B, h, w, C] (f32, NHWC) and its condition (frozen text encoder: the context; trained:
// the token ids), B the graph's batch.
struct MicroInput {
    size_t graph = 0;
    std::span<const float> latents;
    StepCond cond;
    std::span<const float> loss_mask;  // [B, h, w] at the latents' size; masked-loss graphs only
    std::span<const float> sample_weights;  // [B]; sample-weighted graphs only (empty: ones)
    std::span<const float> token_weights;   // [B, T]; token-weighted graphs only (empty: ones)
    // Data parallelism (graphs built with StepOptions::data_parallel): this rank's images
    // [begin, begin + count) of a global micro-batch of `global` (0: one process, the micro-batch
    // is all of it). The draws are the global micro-batch's (train::draw_step_shard) and the rank's
    // gradient weighs count / global. count 0: the rank holds none of its images and runs the
    // graph on zeros (latents, condition) with weight 0, so it still joins the reduction.
    int64_t global = 0, begin = 0, count = 0;
};

// What a resumed run restores beside the optimizer's state file (train/run/state.h saves it).
struct BucketTrainerState {
    int64_t steps = 0;             // optimizer steps run, applied or skipped
    uint64_t noise_counter = 0;    // the noise generator's position (its seed is the run's)
};

class BucketTrainer {
public:
    struct Member {
        StepGraph* step = nullptr;
        gl::Runtime* rt = nullptr;  // runs a plan of step->g on the shared memory
    };
    // Every graph must have the same parameter groups, optimizer and accumulation steps (the
    // bucket shapes and micro-batch sizes differ). Throws gl::Error naming the graph otherwise.
    // Writes the objective's tables of every graph.
    BucketTrainer(std::vector<Member> graphs, const TrainerOptions& o);

    // Adds a graph (a shape planned late: a batch shortened by images that failed to load), checked
    // as the constructor checks; returns its index.
    size_t add(Member m);

    // Initialises the LoRA (down Kaiming-uniform from lora_seed, up zero) and zeroes the optimizer
    // state, once for all graphs. Skip it when loading a LoRA (then call init_optimizer) or a state.
    void init(uint64_t lora_seed);
    void init_optimizer();

    // One optimizer step over 1..accum micro-batches (fewer than accum: the end of an epoch).
    // Data parallelism: the report's loss is this rank's part of the global loss (each micro-batch's
    // loss times count / global): the ranks' sum is the loss of the global batch.
    // lr_factor multiplies the groups' learning rates (the LR schedule at updates_applied()).
    // Throws gl::Error naming the step when a loss is NaN/inf (the update is then not applied).
    StepReport update(const std::vector<MicroInput>& micro, double lr_factor = 1.0);

    // The loss of one micro-batch without an update, as kohya's validation computes it
    // (process_batch with is_train=False): every sample at `timestep`, the noise drawn from rng
    // (the caller's stream, not the run's), LoRA dropouts off (a network with network dropout is
    // refused: its graphs cannot switch it off). The parameters, the optimizer state, the loss
    // scale and the run's counters stay as they were, bit for bit. Call it between updates: it
    // overwrites the gradient accumulators, which an update's first micro-batch restarts.
    // Throws gl::Error naming the step and timestep when the loss is NaN/inf.
    double evaluate(const MicroInput& in, int32_t timestep, diffusion::NoiseRng& rng);

    int64_t steps_done() const { return steps_; }
    // kohya's --skip_until_initial_step: the step counter starts at `steps` on a fresh optimizer
    // (the lr schedule follows updates_applied(), from 0).
    void count_steps_from(int64_t steps) { steps_ = steps; }
    int64_t updates_applied() const { return applied_; }
    const optim::LossScaler& loss_scaler() const { return scaler_; }
    BucketTrainerState state() const { return {steps_, rng_.counter}; }
    // How far one micro-batch of update() moves the noise generator (micro_batch_draws, then the
    // dropout seed).
    static uint64_t noise_draws(const Objective& o, int64_t batch, int64_t latent_numel, int64_t channels,
                                bool rejections = false) {
        return micro_batch_draws(o, batch, latent_numel, channels, rejections) + 1;
    }
    const std::vector<Member>& graphs() const { return graphs_; }

    // The optimizer state (every state tensor, the update count, the loss scaler; extra: metadata)
    // to a file, atomically; load_state checks it against this run's optimizer, restores it and
    // the counters (state: from the same save). Returns the optimizer's note about changed args.
    void save_optimizer(const std::string& path, const std::map<std::string, std::string>& extra = {});
    std::string load_state(const std::string& optimizer_file, const BucketTrainerState& state);

private:
    void check(size_t i) const;
    void check_input(const MicroInput& in, size_t k) const;  // micro-batch k fits its graph
    StepDraw draw(const MicroInput& in, const StepGraph& s);  // its draws, moving rng_
    optim::Optimizer& optimizer(size_t g) { return graphs_[g].step->update->optimizer(); }
    std::vector<Member> graphs_;
    TrainerOptions o_;
    diffusion::DdpmSchedule sched_;
    diffusion::NoiseRng rng_;
    optim::LossScaler scaler_;
    int64_t steps_ = 0, applied_ = 0;
};

}  // namespace train
