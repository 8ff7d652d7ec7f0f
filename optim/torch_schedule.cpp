// torch.optim.lr_scheduler's classes in closed form (read from torch's lr_scheduler.py for their
// behaviour, written anew): the lr of step k of a group whose initial lr is group_lr.
#include "optim/torch_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <set>

#include "ggml-lite/core/error.h"

namespace optim {

namespace {

struct ClassName {
    TorchLr cls;
    const char* name;
};
constexpr ClassName kClasses[] = {
    {TorchLr::CosineAnnealingLR, "CosineAnnealingLR"},
    {TorchLr::CosineAnnealingWarmRestarts, "CosineAnnealingWarmRestarts"},
    {TorchLr::StepLR, "StepLR"},
    {TorchLr::ExponentialLR, "ExponentialLR"},
    {TorchLr::OneCycleLR, "OneCycleLR"},
    {TorchLr::LinearLR, "LinearLR"},
    {TorchLr::PolynomialLR, "PolynomialLR"},
};

constexpr double kPi = std::numbers::pi;

// Reads the keyword arguments one class takes, as Python binds them: an unknown one is a TypeError
// there, a missing required one too.
class Kwargs {
public:
    Kwargs(const char* cls, const std::map<std::string, PyLiteral>& kw) : cls_(cls), kw_(kw) {}

    const PyLiteral* get(const char* name) {
        taken_.insert(name);
        const auto it = kw_.find(name);
        return it == kw_.end() ? nullptr : &it->second;
    }
    double number(const char* name, double fallback, bool required = false) {
        const PyLiteral* v = get(name);
        if (!v) {
            GL_CHECK(!required, cls_, " needs ", name, " in --lr_scheduler_args (", name, "=...)");
            return fallback;
        }
        GL_CHECK(v->kind == PyLiteral::number, cls_, ": ", name, "=", v->text, " must be a number");
        return v->x;
    }
    int64_t whole(const char* name, int64_t fallback, bool required = false) {
        const double x = number(name, double(fallback), required);
        GL_CHECK(x == std::floor(x) && std::fabs(x) < 1e15, cls_, ": ", name, "=", x, " must be an int");
        return int64_t(x);
    }
    bool flag(const char* name, bool fallback) {
        const PyLiteral* v = get(name);
        if (!v) return fallback;
        GL_CHECK(v->kind == PyLiteral::boolean, cls_, ": ", name, "=", v->text, " must be True or False");
        return v->x != 0;
    }
    std::string text(const char* name, const char* fallback) {
        const PyLiteral* v = get(name);
        if (!v) return fallback;
        GL_CHECK(v->kind == PyLiteral::string, cls_, ": ", name, "=", v->text, " must be a quoted string");
        return v->text;
    }
    // After every read: the arguments the class does not take.
    void finish() {
        for (const auto& [k, v] : kw_) {
            if (k == "last_epoch")
                gl::fail(cls_, ": last_epoch in --lr_scheduler_args restarts torch's scheduler mid-way (it needs "
                               "the optimizer's initial_lr); resume a run with --resume instead");
            if (k == "verbose") continue;  // torch's deprecated printing switch: no effect on the lr
            GL_CHECK(taken_.count(k), cls_, " takes no argument '", k, "' (--lr_scheduler_args)");
        }
    }

private:
    const char* cls_;
    const std::map<std::string, PyLiteral>& kw_;
    std::set<std::string> taken_;
};

void parse_one_cycle(TorchLrScheduler& s, Kwargs& kw) {
    const PyLiteral* max_lr = kw.get("max_lr");
    GL_CHECK(max_lr, "OneCycleLR needs max_lr in --lr_scheduler_args (max_lr=...)");
    GL_CHECK(max_lr->kind == PyLiteral::number && max_lr->x > 0, "OneCycleLR: max_lr=", max_lr->text,
             " must be one positive number (one lr for every group)");
    s.max_lr = max_lr->x;
    const PyLiteral* total = kw.get("total_steps");
    const PyLiteral* epochs = kw.get("epochs");
    const PyLiteral* per_epoch = kw.get("steps_per_epoch");
    if (total && total->kind != PyLiteral::none) {
        s.total_steps = kw.whole("total_steps", 0);
        GL_CHECK(s.total_steps > 0, "OneCycleLR: total_steps must be a positive int");
    } else {
        GL_CHECK(epochs && per_epoch, "OneCycleLR needs total_steps, or epochs and steps_per_epoch, in "
                                      "--lr_scheduler_args (as torch)");
        const int64_t e = kw.whole("epochs", 0), n = kw.whole("steps_per_epoch", 0);
        GL_CHECK(e > 0 && n > 0, "OneCycleLR: epochs and steps_per_epoch must be positive ints");
        s.total_steps = e * n;
    }
    s.pct_start = kw.number("pct_start", 0.3);
    GL_CHECK(s.pct_start >= 0 && s.pct_start <= 1, "OneCycleLR: pct_start must lie in [0, 1]");
    const std::string anneal = kw.text("anneal_strategy", "cos");
    GL_CHECK(anneal == "cos" || anneal == "linear", "OneCycleLR: anneal_strategy must be 'cos' or 'linear'");
    s.anneal_cos = anneal == "cos";
    s.div_factor = kw.number("div_factor", 25.0);
    s.final_div_factor = kw.number("final_div_factor", 1e4);
    GL_CHECK(s.div_factor > 0 && s.final_div_factor > 0, "OneCycleLR: div_factor and final_div_factor must be positive");
    s.three_phase = kw.flag("three_phase", false);
    GL_CHECK(!kw.flag("cycle_momentum", true),
             "OneCycleLR with cycle_momentum=True (torch's default) also cycles the optimizer's beta1 / momentum "
             "each step, which the step graph takes from --optimizer_args, not from the scheduler: pass "
             "cycle_momentum=False in --lr_scheduler_args");
    kw.number("base_momentum", 0.85);  // read only by the momentum cycle
    kw.number("max_momentum", 0.95);
}

// OneCycleLR's phases: (end step, start lr, end lr), as torch lays them out.
double one_cycle_lr(const TorchLrScheduler& s, int64_t step) {
    const double initial = s.max_lr / s.div_factor, min_lr = initial / s.final_div_factor;
    const double total = double(s.total_steps), pct = s.pct_start;
    struct Phase {
        double end, from, to;
    };
    std::vector<Phase> phases;
    if (s.three_phase)
        phases = {{pct * total - 1, initial, s.max_lr}, {2 * pct * total - 2, s.max_lr, initial}, {total - 1, initial, min_lr}};
    else
        phases = {{pct * total - 1, initial, s.max_lr}, {total - 1, s.max_lr, min_lr}};
    double start = 0;
    for (size_t i = 0; i < phases.size(); i++) {
        const Phase& p = phases[i];
        if (double(step) <= p.end || i + 1 == phases.size()) {
            const double t = (double(step) - start) / (p.end - start);
            if (s.anneal_cos) return p.to + (p.from - p.to) / 2.0 * (std::cos(kPi * t) + 1);
            return (p.to - p.from) * t + p.from;
        }
        start = p.end;
    }
    return min_lr;
}

}  // namespace

const char* torch_scheduler_name(TorchLr cls) {
    for (const auto& c : kClasses)
        if (c.cls == cls) return c.name;
    return "?";
}

std::string torch_scheduler_names() {
    std::string s;
    for (const auto& c : kClasses) s += (s.empty() ? "" : ", ") + std::string(c.name);
    return s;
}

TorchLrScheduler parse_torch_scheduler(const std::string& type, const std::map<std::string, PyLiteral>& kwargs,
                                       double group_lr) {
    std::string name = type;
    const std::string module = "torch.optim.lr_scheduler.";
    if (name.rfind(module, 0) == 0) name = name.substr(module.size());
    const ClassName* found = nullptr;
    for (const auto& c : kClasses)
        if (name == c.name) found = &c;
    GL_CHECK(found, "--lr_scheduler_type ", type, " is not supported (torch.optim.lr_scheduler's ",
             torch_scheduler_names(), "; other modules' classes cannot be imported here)");
    TorchLrScheduler s;
    s.cls = found->cls;
    s.group_lr = group_lr;
    Kwargs kw(found->name, kwargs);
    switch (s.cls) {
    case TorchLr::CosineAnnealingLR:
        s.T_max = kw.number("T_max", 0, true);
        GL_CHECK(s.T_max > 0, "CosineAnnealingLR: T_max must be positive");
        s.eta_min = kw.number("eta_min", 0.0);
        break;
    case TorchLr::CosineAnnealingWarmRestarts:
        s.T_0 = kw.whole("T_0", 0, true);
        s.T_mult = kw.whole("T_mult", 1);
        GL_CHECK(s.T_0 > 0, "CosineAnnealingWarmRestarts: T_0 must be a positive int (as torch)");
        GL_CHECK(s.T_mult >= 1, "CosineAnnealingWarmRestarts: T_mult must be an int >= 1 (as torch)");
        s.eta_min = kw.number("eta_min", 0.0);
        break;
    case TorchLr::StepLR:
        s.step_size = kw.whole("step_size", 0, true);
        GL_CHECK(s.step_size > 0, "StepLR: step_size must be a positive int");
        s.gamma = kw.number("gamma", 0.1);
        break;
    case TorchLr::ExponentialLR:
        s.gamma = kw.number("gamma", 0, true);
        break;
    case TorchLr::OneCycleLR:
        parse_one_cycle(s, kw);
        break;
    case TorchLr::LinearLR:
        s.start_factor = kw.number("start_factor", 1.0 / 3);
        s.end_factor = kw.number("end_factor", 1.0);
        s.total_iters = kw.whole("total_iters", 5);
        GL_CHECK(s.start_factor > 0 && s.start_factor <= 1, "LinearLR: start_factor must lie in (0, 1] (as torch)");
        GL_CHECK(s.end_factor >= 0 && s.end_factor <= 1, "LinearLR: end_factor must lie in [0, 1] (as torch)");
        GL_CHECK(s.total_iters > 0, "LinearLR: total_iters must be a positive int");
        break;
    case TorchLr::PolynomialLR:
        s.total_iters = kw.whole("total_iters", 5);
        s.power = kw.number("power", 1.0);
        GL_CHECK(s.total_iters > 0, "PolynomialLR: total_iters must be a positive int");
        break;
    }
    GL_CHECK(std::isfinite(s.gamma) && s.gamma >= 0, found->name, ": gamma must be finite and >= 0");
    GL_CHECK(std::isfinite(s.eta_min) && s.eta_min >= 0, found->name, ": eta_min must be finite and >= 0");
    GL_CHECK(std::isfinite(s.power) && s.power >= 0, found->name, ": power must be finite and >= 0");
    kw.finish();
    return s;
}

bool TorchLrScheduler::proportional() const { return cls != TorchLr::OneCycleLR && eta_min == 0.0; }

double TorchLrScheduler::lr(int64_t step) const {
    GL_CHECK(step >= 0, "lr schedule: step ", step, " is negative");
    const double n = double(step), base = group_lr;
    switch (cls) {
    case TorchLr::CosineAnnealingLR:
        return eta_min + (base - eta_min) * (1 + std::cos(kPi * n / T_max)) / 2;
    case TorchLr::CosineAnnealingWarmRestarts: {
        // torch advances T_cur by one per step and restarts it, multiplying the period by T_mult.
        int64_t t = step, period = T_0;
        if (T_mult == 1) {
            t = step % T_0;
        } else {
            while (t >= period) t -= period, period *= T_mult;
        }
        return eta_min + (base - eta_min) * (1 + std::cos(kPi * double(t) / double(period))) / 2;
    }
    case TorchLr::StepLR:
        return base * std::pow(gamma, double(step / step_size));
    case TorchLr::ExponentialLR:
        return base * std::pow(gamma, n);
    case TorchLr::OneCycleLR:
        GL_CHECK(step <= total_steps, "OneCycleLR: step ", step, " is past its total_steps ", total_steps);
        return one_cycle_lr(*this, step);
    case TorchLr::LinearLR:
        return base * (start_factor + (end_factor - start_factor) * double(std::min(step, total_iters)) / double(total_iters));
    case TorchLr::PolynomialLR:
        return base * std::pow(1.0 - double(std::min(step, total_iters)) / double(total_iters), power);
    }
    return base;
}

}  // namespace optim
