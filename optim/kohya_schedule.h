// kohya's get_scheduler_fix (sd-scripts library/train_util.py): which schedule kohya's options
// select and the arguments it passes to it, step counts already resolved (an int or a ratio of the
// total, as kohya's int_or_float reads them).
//
//     optim::KohyaScheduleArgs a;
//     a.lr_scheduler = "warmup_stable_decay";
//     a.warmup_steps = 10; a.decay_steps = 30; a.min_lr_ratio = 0.1; a.total_steps = 1000;
//     a.base_lr = 1e-4; a.group_lrs = {1e-4, 5e-5};
//     optim::LrSchedule s = optim::kohya_schedule(a, &notes);   // s.multiplier(step)
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "optim/schedule.h"

namespace optim {

struct KohyaScheduleArgs {
    std::string lr_scheduler = "constant";        // --lr_scheduler ("adafactor": the factor stays 1)
    std::string lr_scheduler_type;                // --lr_scheduler_type: a torch class, before lr_scheduler
    std::vector<std::string> lr_scheduler_args;   // --lr_scheduler_args key=value, Python literals
    int64_t warmup_steps = 0, decay_steps = 0;    // --lr_warmup_steps, --lr_decay_steps, as steps
    int num_cycles = 1;                           // --lr_scheduler_num_cycles
    double power = 1.0;                           // --lr_scheduler_power
    std::optional<int64_t> timescale;             // --lr_scheduler_timescale
    std::optional<double> min_lr_ratio;           // --lr_scheduler_min_lr_ratio
    int64_t total_steps = 0;                      // --max_train_steps (one process)
    double base_lr = 1e-4;                        // the optimizer's default lr (--learning_rate)
    std::vector<double> group_lrs;                // every trained group's lr (absolute torch lrs need one)
    bool schedule_free = false;                   // a *ScheduleFree optimizer (kohya's is_schedulefree_optimizer)
};

// The schedule kohya builds, validated. Throws gl::Error where kohya (or the function it calls)
// raises, naming the option: warm-up steps given to a schedule without a warm-up, cosine_with_min_lr
// without a floor, an argument the schedule does not take, a torch class not supported here. notes
// (may be null) receives what kohya accepts but ignores (warm-up steps for piecewise_constant, any
// --lr_scheduler_args for adafactor).
// A schedule-free optimizer gets kohya's dummy scheduler: the factor stays 1 and the schedule options
// are neither read nor checked (notes says so when one is given).
LrSchedule kohya_schedule(const KohyaScheduleArgs& a, std::vector<std::string>* notes = nullptr);

}  // namespace optim
