// Learning-rate schedules, exactly as diffusers' get_scheduler (diffusers/optimization.py) and
// transformers 4.54.1's (kohya's pinned version; optimization.py) build them, which is what kohya's
// sd-scripts and the diffusers training scripts use for these names, and torch's own schedulers by
// class (optim/torch_schedule.h). The schedule is a pure function of the optimizer step, so resuming
// needs only the step count. kohya's get_scheduler_fix, which picks a schedule and its arguments
// from kohya's options: optim/kohya_schedule.h.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "optim/torch_schedule.h"

namespace optim {

enum class LrKind {
    Constant,
    ConstantWithWarmup,
    Linear,
    Cosine,
    CosineWithRestarts,
    Polynomial,
    CosineWithMinLr,
    WarmupStableDecay,
    InverseSqrt,
    PiecewiseConstant,
    Torch,  // one of torch.optim.lr_scheduler's classes (LrSchedule::torch)
};

// The warm-up and decay curves of warmup_stable_decay (transformers' warmup_type / decay_type).
enum class WsdShape { linear, cosine, one_minus_sqrt };

// "constant", "constant_with_warmup", "linear", "cosine", "cosine_with_restarts", "polynomial",
// "cosine_with_min_lr", "warmup_stable_decay", "inverse_sqrt", "piecewise_constant" (diffusers' /
// transformers' / kohya's --lr_scheduler names; not Torch). Throws gl::Error naming the valid ones.
LrKind parse_lr_kind(const std::string& name);
const char* lr_kind_name(LrKind kind);
std::vector<std::string> lr_kind_names();  // every name parse_lr_kind takes, in LrKind order

// kohya's --lr_warmup_steps accepts an int (steps) or a float (a ratio of the total steps); the
// ratio becomes int(ratio * total), i.e. it is truncated (sd-scripts train_util.get_scheduler_fix).
// ratio must lie in [0, 1].
int64_t warmup_steps_from_ratio(double ratio, int64_t total_steps);

struct LrSchedule {
    LrKind kind = LrKind::Constant;
    double base_lr = 1e-4;
    int64_t warmup_steps = 0;  // linear ramp 0 -> base_lr over these steps (not used by Constant)
    int64_t total_steps = 0;   // num_training_steps: where the decays reach their end
    // Cosine: diffusers' get_scheduler always uses 0.5 (a half cosine to zero); kept settable for
    // get_cosine_schedule_with_warmup callers. CosineWithRestarts: the number of hard restarts
    // (get_scheduler's num_cycles, default 1; kohya's --lr_scheduler_num_cycles).
    double num_cycles = 0.5;
    double power = 1.0;    // Polynomial (kohya's --lr_scheduler_power)
    double lr_end = 1e-7;  // Polynomial: the absolute final lr (diffusers' default; must be < base_lr)
    // CosineWithMinLr (transformers' min_lr_rate) and WarmupStableDecay (min_lr_ratio): the floor as a
    // ratio of the lr; WarmupStableDecay's warm-up also starts there.
    double min_lr_ratio = 0.0;
    // WarmupStableDecay: the phases after the warm-up (stable_steps may be negative: kohya passes
    // total - warmup - decay), their curves; the lr stays at min_lr_ratio after the decay.
    int64_t stable_steps = 0, decay_steps = 0;
    WsdShape warmup_shape = WsdShape::linear, decay_shape = WsdShape::cosine;
    int64_t timescale = 10000;  // InverseSqrt: 1 / sqrt((step + timescale - warmup) / timescale)
    // PiecewiseConstant (diffusers' step_rules): the factor of the first rule whose step exceeds the
    // step (rules sorted by step, one per step), rules_last after them all.
    std::vector<std::pair<int64_t, double>> rules;
    double rules_last = 1.0;
    TorchLrScheduler torch;  // Torch

    // A schedule of `kind` with the num_cycles default get_scheduler gives that kind.
    static LrSchedule make(LrKind kind, double base_lr, int64_t warmup_steps, int64_t total_steps);

    // Throws gl::Error when a field is out of range (negative counts, non-finite values, a
    // polynomial with lr_end >= base_lr or no decay steps, a timescale <= 0, unsorted rules).
    void validate() const;

    // The factor LambdaLR applies at optimizer step `step` (0-based: the first optimizer step uses
    // multiplier(0)). Steps past total_steps follow diffusers' formulas unchanged (cosine rises
    // again, the restarts and linear stay at 0, polynomial stays at lr_end).
    double multiplier(int64_t step) const;
    float lr_at(int64_t step) const { return float(base_lr * multiplier(step)); }
};

}  // namespace optim
