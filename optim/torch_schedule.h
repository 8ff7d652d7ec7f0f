// torch.optim.lr_scheduler's own classes, which kohya builds by name for --lr_scheduler_type with
// --lr_scheduler_args as their keyword arguments: the lr of optimizer step k (0-based) as each
// class's closed form gives it. torch steps most of them recursively (lr *= ...), which equals the
// closed form up to rounding (a few ulp over a run).
#pragma once
#include <cstdint>
#include <map>
#include <string>

#include "optim/py_literal.h"

namespace optim {

enum class TorchLr { CosineAnnealingLR, CosineAnnealingWarmRestarts, StepLR, ExponentialLR, OneCycleLR, LinearLR, PolynomialLR };

struct TorchLrScheduler {
    TorchLr cls = TorchLr::StepLR;
    // The group lr torch's formulas start from. CosineAnnealing*'s eta_min and OneCycleLR's lrs are
    // absolute, the same for every group, so a multiplier of the group lr holds for one lr only.
    double group_lr = 1.0;
    double T_max = 1, eta_min = 0;              // CosineAnnealingLR (T_max), both CosineAnnealing* (eta_min)
    int64_t T_0 = 1, T_mult = 1;                // CosineAnnealingWarmRestarts
    int64_t step_size = 1;                      // StepLR
    double gamma = 0.1;                         // StepLR, ExponentialLR
    double start_factor = 1.0 / 3, end_factor = 1.0;  // LinearLR
    int64_t total_iters = 5;                    // LinearLR, PolynomialLR
    double power = 1.0;                         // PolynomialLR
    double max_lr = 0, pct_start = 0.3, div_factor = 25, final_div_factor = 1e4;  // OneCycleLR
    int64_t total_steps = 0;                    // OneCycleLR (or epochs * steps_per_epoch)
    bool anneal_cos = true, three_phase = false;  // OneCycleLR

    // Whether the lr is group_lr times a factor that does not depend on group_lr (eta_min 0, not OneCycleLR).
    bool proportional() const;
    double lr(int64_t step) const;  // step >= 0; OneCycleLR: step <= total_steps (torch raises past it)
};

// The class kohya's --lr_scheduler_type names ("StepLR" or "torch.optim.lr_scheduler.StepLR") with
// its keyword arguments (kohya's --lr_scheduler_args, parsed), checked as torch checks them, and the
// names of the classes supported. Throws gl::Error naming a class not supported here, an argument the
// class does not take, a missing required one or a bad value.
TorchLrScheduler parse_torch_scheduler(const std::string& type, const std::map<std::string, PyLiteral>& kwargs,
                                       double group_lr);
const char* torch_scheduler_name(TorchLr cls);
std::string torch_scheduler_names();

}  // namespace optim
