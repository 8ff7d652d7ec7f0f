// The host side of a training step: per micro-batch it draws the timesteps (the step graph draws
// the noise from the position it is given), writes the step graph's inputs, runs it, reads the
// loss and the update's gradient statistics. A NaN/inf
// loss stops training with a gl::Error naming the step; the update of that run is skipped in the
// graph (train/update.h), so the LoRA and the optimizer state stay as they were. fp16 runs use a
// dynamic loss scale (optim::LossScaler, torch.amp.GradScaler's rule): an overflowing step is
// skipped and the scale halves; after growth_interval clean steps it doubles.
#pragma once
#include <cstdint>
#include <span>
#include <variant>
#include <vector>

#include "ggml-lite/core/runtime.h"
#include "train/step.h"

namespace train {

struct TrainerOptions {
    Objective objective;
    uint64_t seed = 0;              // noise and timestep draws (diffusion::NoiseRng), LoRA dropout
    optim::LossScaler::Options loss_scale;  // fp16 only; bf16 and fp32 run with scale 1
};

struct StepReport {
    int64_t step = 0;               // 1-based optimizer step this report is about
    double loss = 0.0;              // mean of the micro-batches' (unscaled) losses
    std::vector<float> per_sample;  // every micro-batch's per-sample losses, in order
    bool applied = false;           // the update ran (false: fp16 overflow, skipped)
    double grad_norm = 0.0;         // of the (accumulated) unscaled gradients
    double loss_scale = 1.0;        // the scale this step ran with
};

// What the UNet is conditioned on: the frozen text encoder's context (f32) or, when the text
// encoder is trained, the token ids (i32).
using StepCond = std::variant<std::span<const float>, std::span<const int32_t>>;

// Writes one micro-batch's inputs into s's graph on rt (latents [B, h, w, C], the draw d, the
// condition of this micro-batch, the loss scale, for a masked-loss graph the mask [B, h, w] at the
// latents' size, for a sample-weighted graph the weights [B] and for a token-weighted one the
// context rows' weights [B, T] (empty means ones)), runs it and
// returns the unscaled loss. A NaN/inf loss throws gl::Error naming report_step, micro-batch k of
// s.opt.grad_accum and the timesteps.
float run_micro_batch(StepGraph& s, gl::Runtime& rt, const float* latents, StepCond cond, const StepDraw& d,
                      const optim::LossScaler& scaler, int64_t report_step, int k,
                      std::span<const float> loss_mask = {}, std::span<const float> sample_weights = {},
                      std::span<const float> token_weights = {});
// Checks that graph s was built for objective o (prediction, loss, input perturbation, host-drawn
// noise); `who` names the caller in the error.
void check_objective_fits(const Objective& o, const StepGraph& s, const std::string& who);

class Trainer {
public:
    // The runtime must run a plan of s.g (CPU or CUDA, any recompute policy). Writes the
    // objective's tables.
    Trainer(StepGraph& s, gl::Runtime& rt, const TrainerOptions& o);

    // Initialises the LoRA (down Kaiming-uniform from lora_seed, up zero) and zeroes the optimizer
    // state. Skip it when loading a LoRA / optimizer state instead.
    void init(uint64_t lora_seed);

    // One optimizer step over opt.grad_accum micro-batches. latents: grad_accum * B samples
    // ([B, h, w, C] each, f32, NHWC); cond: the frozen text encoder's context for each micro-batch
    // (f32, grad_accum * context_numel) or, when the text encoder is trained, the token ids
    // (grad_accum * ids_numel). lr_factor multiplies the groups' learning rates (LR schedules).
    // Throws gl::Error naming the step and micro-batch when a loss is NaN or inf.
    StepReport step(std::span<const float> latents, std::span<const float> context, double lr_factor = 1.0);
    StepReport step(std::span<const float> latents, std::span<const int32_t> ids, double lr_factor = 1.0);

    // The loss of one micro-batch at draws fixed by `seed` (validation, and a loss curve without
    // the sampling noise): LoRA dropouts off, the update skipped, nothing changes but the
    // accumulators (reset by the next step anyway). cond: one micro-batch's context or ids.
    // Refused for a network with network dropout (its graph cannot switch it off).
    StepReport evaluate(std::span<const float> latents, std::span<const float> context, uint64_t seed);
    StepReport evaluate(std::span<const float> latents, std::span<const int32_t> ids, uint64_t seed);

    int64_t steps_done() const { return step_; }  // optimizer steps run (applied or skipped)
    int64_t updates_applied() const { return s_.update->optimizer().steps_applied(); }
    const StepDraw& last_draw() const { return last_; }
    const optim::LossScaler& loss_scaler() const { return scaler_; }
    optim::LossScaler& loss_scaler() { return scaler_; }  // resume: Optimizer::load_state restores it

private:
    using Cond = StepCond;  // one or grad_accum micro-batches of it
    StepReport run(std::span<const float> latents, Cond cond, double lr_factor);
    StepReport eval(std::span<const float> latents, Cond cond, uint64_t seed);
    StepGraph& s_;
    gl::Runtime& rt_;
    TrainerOptions o_;
    diffusion::DdpmSchedule sched_;
    diffusion::NoiseRng rng_;
    optim::LossScaler scaler_;
    StepDraw last_;
    int64_t step_ = 0;
};

}  // namespace train
