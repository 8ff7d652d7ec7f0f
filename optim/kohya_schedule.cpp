// get_scheduler_fix's decisions, in its order (read from kohya's train_util.py, written anew): a
// torch class by --lr_scheduler_type first, then adafactor, piecewise_constant, and the transformers
// schedules by name, each given the arguments kohya passes plus --lr_scheduler_args.
#include "optim/kohya_schedule.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <set>

#include "ggml-lite/core/error.h"
#include "optim/descriptor.h"
#include "optim/py_literal.h"

namespace optim {

namespace {

using Kwargs = std::map<std::string, PyLiteral>;

// The keywords a schedule function takes beyond those kohya fills in (`filled`): anything else is a
// TypeError in Python, a keyword kohya fills in too a "multiple values" TypeError.
void check_keywords(const std::string& name, const Kwargs& kw, std::set<std::string> takes,
                    std::set<std::string> filled) {
    for (const auto& [k, v] : kw) {
        GL_CHECK(k != "last_epoch", "--lr_scheduler_args last_epoch restarts the schedule mid-way; resume a run with "
                                    "--resume instead");
        GL_CHECK(!filled.count(k), "--lr_scheduler_args ", k, ": kohya already passes ", k, " to ", name,
                 " from its own option (Python refuses the keyword twice)");
        GL_CHECK(takes.count(k), "--lr_scheduler ", name, " takes no argument '", k, "' (--lr_scheduler_args)");
    }
}

double number(const Kwargs& kw, const char* key, double fallback) {
    const auto it = kw.find(key);
    if (it == kw.end()) return fallback;
    GL_CHECK(it->second.kind == PyLiteral::number, "--lr_scheduler_args ", key, "=", it->second.text,
             " must be a number");
    return it->second.x;
}

WsdShape wsd_shape(const Kwargs& kw, const char* key, WsdShape fallback) {
    const auto it = kw.find(key);
    if (it == kw.end()) return fallback;
    const std::string& v = it->second.text;
    GL_CHECK(it->second.kind == PyLiteral::string && (v == "linear" || v == "cosine" || v == "1-sqrt"),
             "--lr_scheduler_args ", key, "=", it->second.text, ": expected 'linear', 'cosine' or '1-sqrt' (quoted)");
    return v == "linear" ? WsdShape::linear : v == "cosine" ? WsdShape::cosine : WsdShape::one_minus_sqrt;
}

// diffusers' step_rules "1:10,0.1:20,0.005": factor:step pairs, then the factor after them.
void parse_step_rules(LrSchedule& s, const Kwargs& kw) {
    const auto it = kw.find("step_rules");
    GL_CHECK(it != kw.end(), "--lr_scheduler piecewise_constant needs step_rules in --lr_scheduler_args "
                             "(\"step_rules='1:10,0.1:20,0.01'\": factor:step pairs, then the last factor)");
    const PyLiteral& v = it->second;
    GL_CHECK(v.kind == PyLiteral::string, "--lr_scheduler_args step_rules=", v.text,
             " must be a quoted string (diffusers splits it): \"step_rules='1:10,0.1'\"");
    const std::string& rules = v.text;
    auto to_double = [&](const std::string& t) {
        char* end = nullptr;
        const std::string x = trim(t);
        const double d = std::strtod(x.c_str(), &end);
        GL_CHECK(!x.empty() && end == x.c_str() + x.size() && std::isfinite(d), "step_rules '", rules, "': '", t,
                 "' is not a number");
        return d;
    };
    std::map<int64_t, double> by_step;
    size_t a = 0;
    while (true) {
        const size_t b = rules.find(',', a);
        const std::string item = rules.substr(a, b == std::string::npos ? std::string::npos : b - a);
        if (b == std::string::npos) {
            s.rules_last = to_double(item);
            break;
        }
        const size_t colon = item.find(':');
        GL_CHECK(colon != std::string::npos && item.find(':', colon + 1) == std::string::npos, "step_rules '", rules,
                 "': '", item, "' is not factor:step");
        const std::string step = trim(item.substr(colon + 1));
        GL_CHECK(!step.empty() && step.find_first_not_of("0123456789") == std::string::npos, "step_rules '", rules,
                 "': the step of '", item, "' is not a non-negative int");
        by_step[std::stoll(step)] = to_double(item.substr(0, colon));  // a repeated step keeps its last factor
        a = b + 1;
    }
    s.rules.assign(by_step.begin(), by_step.end());
}

}  // namespace

LrSchedule kohya_schedule(const KohyaScheduleArgs& a, std::vector<std::string>* notes) {
    auto note = [&](std::string text) {
        if (notes) notes->push_back(std::move(text));
    };
    if (a.schedule_free) {
        const bool given = a.lr_scheduler != "constant" || !a.lr_scheduler_type.empty() ||
                           !a.lr_scheduler_args.empty() || a.warmup_steps != 0 || a.decay_steps != 0;
        if (given)
            note("a schedule-free optimizer runs at a constant lr (kohya's dummy scheduler): --lr_scheduler, "
                 "--lr_scheduler_type, --lr_scheduler_args, --lr_warmup_steps and --lr_decay_steps are ignored "
                 "(warm up with the optimizer's warmup_steps)");
        return LrSchedule::make(LrKind::Constant, a.base_lr, 0, a.total_steps);
    }
    const Kwargs kw = parse_py_kwargs("--lr_scheduler_args", a.lr_scheduler_args);
    const std::string& name = a.lr_scheduler;
    auto no_warmup = [&](const std::string& what) {
        GL_CHECK(a.warmup_steps == 0, what, " does not take --lr_warmup_steps (kohya: 'does not require "
                                            "num_warmup_steps. Set None or 0')");
    };
    // Absolute torch lrs hold for one group lr: every trained group must share it.
    double group_lr = a.group_lrs.empty() ? a.base_lr : a.group_lrs.front();
    LrSchedule s = LrSchedule::make(LrKind::Constant, a.base_lr, a.warmup_steps, a.total_steps);

    if (!a.lr_scheduler_type.empty()) {
        no_warmup("--lr_scheduler_type " + a.lr_scheduler_type);
        s.kind = LrKind::Torch;
        s.torch = parse_torch_scheduler(a.lr_scheduler_type, kw, group_lr);
        if (!s.torch.proportional())
            for (double lr : a.group_lrs)
                GL_CHECK(lr == group_lr, "--lr_scheduler_type ", a.lr_scheduler_type, ": ",
                         s.torch.cls == TorchLr::OneCycleLR ? "max_lr is one absolute lr" : "eta_min is an absolute lr",
                         " for every group, but the groups train at ", group_lr, " and ", lr,
                         " here (give them one lr, or eta_min=0)");
        if (s.torch.cls == TorchLr::OneCycleLR)
            GL_CHECK(s.torch.total_steps >= a.total_steps, "--lr_scheduler_type OneCycleLR: total_steps ",
                     s.torch.total_steps, " is less than the run's ", a.total_steps,
                     " steps (torch raises once stepped past it)");
        s.warmup_steps = 0;
        s.validate();
        return s;
    }
    if (name == "adafactor") {
        no_warmup("--lr_scheduler adafactor");
        if (!kw.empty()) note("--lr_scheduler_args: kohya passes none to the adafactor schedule; ignored");
        s.warmup_steps = 0;
        return s;
    }
    if (name == "piecewise_constant") {
        check_keywords(name, kw, {"step_rules"}, {});
        if (a.warmup_steps != 0) note("--lr_warmup_steps: kohya passes no warm-up to piecewise_constant; ignored");
        s.kind = LrKind::PiecewiseConstant;
        s.warmup_steps = 0;
        parse_step_rules(s, kw);
        s.validate();
        return s;
    }

    s = LrSchedule::make(parse_lr_kind(name), a.base_lr, a.warmup_steps, a.total_steps);
    s.power = a.power;
    switch (s.kind) {
    case LrKind::Constant:
        no_warmup("--lr_scheduler constant");
        check_keywords(name, kw, {}, {});
        break;
    case LrKind::ConstantWithWarmup:
    case LrKind::Linear:
        check_keywords(name, kw, {}, {"num_warmup_steps", "num_training_steps"});
        break;
    case LrKind::Cosine:
        check_keywords(name, kw, {"num_cycles"}, {"num_warmup_steps", "num_training_steps"});
        s.num_cycles = number(kw, "num_cycles", 0.5);
        break;
    case LrKind::CosineWithRestarts:
        check_keywords(name, kw, {}, {"num_warmup_steps", "num_training_steps", "num_cycles"});
        s.num_cycles = a.num_cycles;
        break;
    case LrKind::Polynomial:
        check_keywords(name, kw, {"lr_end"}, {"num_warmup_steps", "num_training_steps", "power"});
        s.lr_end = number(kw, "lr_end", 1e-7);
        break;
    case LrKind::InverseSqrt:
        check_keywords(name, kw, {}, {"num_warmup_steps", "timescale"});
        // transformers: timescale None -> num_warmup_steps or 10_000.
        s.timescale = a.timescale ? *a.timescale : (a.warmup_steps != 0 ? a.warmup_steps : 10000);
        break;
    case LrKind::CosineWithMinLr: {
        check_keywords(name, kw, {"min_lr"}, {"num_warmup_steps", "num_training_steps", "num_cycles", "min_lr_rate"});
        s.num_cycles = a.num_cycles / 2.0;
        const bool min_lr = kw.count("min_lr") != 0;
        GL_CHECK(!(min_lr && a.min_lr_ratio), "--lr_scheduler cosine_with_min_lr: min_lr in --lr_scheduler_args and "
                                              "--lr_scheduler_min_lr_ratio were both given (transformers: 'Only one "
                                              "of min_lr or min_lr_rate should be set')");
        GL_CHECK(min_lr || a.min_lr_ratio, "--lr_scheduler cosine_with_min_lr needs --lr_scheduler_min_lr_ratio (or "
                                           "min_lr=... in --lr_scheduler_args), as transformers requires one");
        s.min_lr_ratio = min_lr ? number(kw, "min_lr", 0) / a.base_lr : *a.min_lr_ratio;
        break;
    }
    case LrKind::WarmupStableDecay:
        check_keywords(name, kw, {"num_training_steps", "warmup_type", "decay_type"},
                       {"num_warmup_steps", "num_stable_steps", "num_decay_steps", "num_cycles", "min_lr_ratio"});
        if (kw.count("num_training_steps"))
            note("--lr_scheduler_args num_training_steps: transformers uses the stable steps kohya passes; ignored");
        s.num_cycles = a.num_cycles / 2.0;
        s.decay_steps = a.decay_steps;
        s.stable_steps = a.total_steps - a.warmup_steps - a.decay_steps;
        s.min_lr_ratio = a.min_lr_ratio.value_or(0.0);
        s.warmup_shape = wsd_shape(kw, "warmup_type", WsdShape::linear);
        s.decay_shape = wsd_shape(kw, "decay_type", WsdShape::cosine);
        break;
    case LrKind::PiecewiseConstant:
    case LrKind::Torch:
        break;
    }
    s.validate();
    return s;
}

}  // namespace optim
