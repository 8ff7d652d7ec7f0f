// Learning-rate schedules, exactly as diffusers' get_scheduler (diffusers/optimization.py) builds
// them, which is what kohya's sd-scripts and the diffusers training scripts use for these names.
// The schedule is a pure function of the optimizer step, so resuming needs only the step count.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace optim {

enum class LrKind { Constant, ConstantWithWarmup, Linear, Cosine, CosineWithRestarts, Polynomial };

// "constant", "constant_with_warmup", "linear", "cosine", "cosine_with_restarts", "polynomial"
// (diffusers' / kohya's --lr_scheduler names). Throws gl::Error naming the valid ones.
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

    // A schedule of `kind` with the num_cycles default get_scheduler gives that kind.
    static LrSchedule make(LrKind kind, double base_lr, int64_t warmup_steps, int64_t total_steps);

    // Throws gl::Error when a field is out of range (negative counts, non-finite values, a
    // polynomial with lr_end >= base_lr or no decay steps).
    void validate() const;

    // The factor LambdaLR applies at optimizer step `step` (0-based: the first optimizer step uses
    // multiplier(0)). Steps past total_steps follow diffusers' formulas unchanged (cosine rises
    // again, the restarts and linear stay at 0, polynomial stays at lr_end).
    double multiplier(int64_t step) const;
    float lr_at(int64_t step) const { return float(base_lr * multiplier(step)); }
};

}  // namespace optim
