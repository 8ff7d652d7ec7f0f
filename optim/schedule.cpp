// The formulas follow diffusers/optimization.py line by line (read for behaviour, written anew),
// computed in double so they agree with Python's float math to rounding.
#include "optim/schedule.h"

#include <algorithm>
#include <cstddef>
#include <cmath>
#include <numbers>

#include "ggml-lite/core/error.h"

namespace optim {

namespace {
struct KindName {
    LrKind kind;
    const char* name;
};
constexpr KindName kKinds[] = {
    {LrKind::Constant, "constant"},
    {LrKind::ConstantWithWarmup, "constant_with_warmup"},
    {LrKind::Linear, "linear"},
    {LrKind::Cosine, "cosine"},
    {LrKind::CosineWithRestarts, "cosine_with_restarts"},
    {LrKind::Polynomial, "polynomial"},
    {LrKind::CosineWithMinLr, "cosine_with_min_lr"},
    {LrKind::WarmupStableDecay, "warmup_stable_decay"},
    {LrKind::InverseSqrt, "inverse_sqrt"},
    {LrKind::PiecewiseConstant, "piecewise_constant"},
};

constexpr double kPi = std::numbers::pi;

// transformers' WSD curves: progress 0 -> 1 maps to factor 0 -> 1 (warm-up) or 1 -> 0 (decay).
double wsd_curve(WsdShape shape, double progress, bool decay, double num_cycles) {
    switch (shape) {
    case WsdShape::linear:
        return decay ? 1.0 - progress : progress;
    case WsdShape::cosine:
        return decay ? 0.5 * (1.0 + std::cos(kPi * num_cycles * 2.0 * progress)) : 0.5 * (1.0 - std::cos(kPi * progress));
    case WsdShape::one_minus_sqrt:
        return decay ? 1.0 - std::sqrt(progress) : 1.0 - std::sqrt(1.0 - progress);
    }
    return 1.0;
}

double wsd(const LrSchedule& l, int64_t step) {
    const double r = l.min_lr_ratio;
    if (step < l.warmup_steps) {
        const double progress = double(step) / double(std::max<int64_t>(1, l.warmup_steps));
        return std::max(0.0, wsd_curve(l.warmup_shape, progress, false, l.num_cycles) * (1.0 - r) + r);
    }
    const int64_t decay_start = l.warmup_steps + l.stable_steps;
    if (step < decay_start) return 1.0;
    if (step < decay_start + l.decay_steps) {
        const double progress = double(step - decay_start) / double(std::max<int64_t>(1, l.decay_steps));
        return std::max(0.0, wsd_curve(l.decay_shape, progress, true, l.num_cycles) * (1.0 - r) + r);
    }
    return r;
}
}  // namespace

LrKind parse_lr_kind(const std::string& name) {
    for (const auto& k : kKinds)
        if (name == k.name) return k.kind;
    std::string valid;
    for (const auto& k : kKinds) valid += std::string(valid.empty() ? "" : ", ") + k.name;
    gl::fail("lr scheduler: unknown name '", name, "' (valid: ", valid, ")");
}

const char* lr_kind_name(LrKind kind) {
    if (kind == LrKind::Torch) return "lr_scheduler_type";
    for (const auto& k : kKinds)
        if (k.kind == kind) return k.name;
    return "?";
}

std::vector<std::string> lr_kind_names() {
    std::vector<std::string> names;
    for (const auto& k : kKinds) names.emplace_back(k.name);
    return names;
}

int64_t warmup_steps_from_ratio(double ratio, int64_t total_steps) {
    GL_CHECK(std::isfinite(ratio) && ratio >= 0.0 && ratio <= 1.0, "lr warmup: ratio ", ratio,
             " is not in [0, 1]");
    GL_CHECK(total_steps >= 0, "lr warmup: total steps ", total_steps, " is negative");
    // Python's int() truncates toward zero; the product is non-negative, so floor.
    return int64_t(std::floor(ratio * double(total_steps)));
}

LrSchedule LrSchedule::make(LrKind kind, double base_lr, int64_t warmup_steps, int64_t total_steps) {
    LrSchedule s;
    s.kind = kind;
    s.base_lr = base_lr;
    s.warmup_steps = warmup_steps;
    s.total_steps = total_steps;
    // get_scheduler passes its num_cycles (default 1) only to the restarts schedule; cosine keeps 0.5.
    s.num_cycles = kind == LrKind::CosineWithRestarts ? 1.0 : 0.5;
    return s;
}

void LrSchedule::validate() const {
    const char* name = lr_kind_name(kind);
    GL_CHECK(std::isfinite(base_lr) && base_lr >= 0.0, "lr schedule ", name, ": base lr ", base_lr,
             " must be finite and >= 0");
    GL_CHECK(warmup_steps >= 0, "lr schedule ", name, ": warmup steps ", warmup_steps, " is negative");
    GL_CHECK(total_steps >= 0, "lr schedule ", name, ": total steps ", total_steps, " is negative");
    GL_CHECK(std::isfinite(num_cycles) && num_cycles >= 0.0, "lr schedule ", name, ": num_cycles ",
             num_cycles, " must be finite and >= 0");
    if (kind == LrKind::Polynomial) {
        GL_CHECK(std::isfinite(power) && power >= 0.0, "lr schedule polynomial: power ", power,
                 " must be finite and >= 0");
        GL_CHECK(std::isfinite(lr_end) && lr_end >= 0.0 && lr_end < base_lr, "lr schedule polynomial: lr_end ",
                 lr_end, " must be >= 0 and smaller than the base lr ", base_lr, " (as diffusers requires)");
        // diffusers divides by total - warmup without a guard.
        GL_CHECK(total_steps > warmup_steps, "lr schedule polynomial: total steps ", total_steps,
                 " must exceed the warmup steps ", warmup_steps);
    }
    GL_CHECK(std::isfinite(min_lr_ratio) && min_lr_ratio >= 0.0, "lr schedule ", name, ": min lr ratio ", min_lr_ratio,
             " must be finite and >= 0");
    GL_CHECK(decay_steps >= 0, "lr schedule ", name, ": decay steps ", decay_steps, " is negative");
    GL_CHECK(kind != LrKind::InverseSqrt || timescale > 0, "lr schedule inverse_sqrt: timescale ", timescale,
             " must be positive");
    for (size_t i = 0; i < rules.size(); i++) {
        GL_CHECK(std::isfinite(rules[i].second) && rules[i].second >= 0.0, "lr schedule ", name, ": rule factor ",
                 rules[i].second, " must be finite and >= 0");
        GL_CHECK(i == 0 || rules[i - 1].first < rules[i].first, "lr schedule ", name,
                 ": rules must be sorted by step, one per step");
    }
    GL_CHECK(std::isfinite(rules_last) && rules_last >= 0.0, "lr schedule ", name, ": last factor ", rules_last,
             " must be finite and >= 0");
}

double LrSchedule::multiplier(int64_t step) const {
    validate();  // a few comparisons; keeps a hand-built schedule from dividing by zero
    GL_CHECK(step >= 0, "lr schedule: step ", step, " is negative");
    const double s = double(step);
    if (kind == LrKind::Constant) return 1.0;
    if (kind == LrKind::WarmupStableDecay) return wsd(*this, step);
    if (kind == LrKind::PiecewiseConstant) {  // no warm-up: kohya passes it none
        for (const auto& [at, factor] : rules)
            if (step < at) return factor;
        return rules_last;
    }
    if (kind == LrKind::Torch) return torch.group_lr == 0.0 ? 0.0 : torch.lr(step) / torch.group_lr;
    // Every other kind ramps linearly from 0 during the warmup (step 0 -> 0).
    if (step < warmup_steps) return s / double(std::max<int64_t>(1, warmup_steps));
    const double w = double(warmup_steps), n = double(total_steps);
    const double decay_span = double(std::max<int64_t>(1, total_steps - warmup_steps));
    constexpr double pi = kPi;
    switch (kind) {
    case LrKind::Constant:
    case LrKind::ConstantWithWarmup:
    case LrKind::WarmupStableDecay:
    case LrKind::PiecewiseConstant:
    case LrKind::Torch:
        return 1.0;
    case LrKind::Linear:
        return std::max(0.0, (n - s) / decay_span);
    case LrKind::Cosine: {
        const double progress = (s - w) / decay_span;
        return std::max(0.0, 0.5 * (1.0 + std::cos(pi * num_cycles * 2.0 * progress)));
    }
    case LrKind::CosineWithRestarts: {
        const double progress = (s - w) / decay_span;
        if (progress >= 1.0) return 0.0;
        // Python's % on these non-negative operands equals fmod.
        return std::max(0.0, 0.5 * (1.0 + std::cos(pi * std::fmod(num_cycles * progress, 1.0))));
    }
    case LrKind::CosineWithMinLr: {
        const double progress = (s - w) / decay_span;
        const double f = 0.5 * (1.0 + std::cos(pi * num_cycles * 2.0 * progress));
        return std::max(0.0, f * (1.0 - min_lr_ratio) + min_lr_ratio);
    }
    case LrKind::InverseSqrt:
        return 1.0 / std::sqrt((s + double(timescale - warmup_steps)) / double(timescale));
    case LrKind::Polynomial: {
        // diffusers returns the lr relative to base_lr, which LambdaLR multiplies back.
        if (step > total_steps) return lr_end / base_lr;
        const double remaining = 1.0 - (s - w) / (n - w);
        return ((base_lr - lr_end) * std::pow(remaining, power) + lr_end) / base_lr;
    }
    }
    return 1.0;
}

}  // namespace optim
