// AdamWScheduleFree as schedulefree 1.4's (Defazio et al. 2024): AdamW without a schedule, its
// iterate averaged in the step (ops/optim_schedulefree.cpp). The step graph holds y; the weights kohya
// saves and samples (after optimizer.eval()) are x = lerp(y, z, 1 - 1 / beta1), which
// Optimizer::to_eval writes. kohya gives it a constant schedule (its dummy scheduler): warm-up is the
// optimizer's own warmup_steps.
#include "ggml-lite/ops/builder.h"
#include "optim/schedulefree.h"

namespace optim {

const char* check_warmup_steps(const ArgValue& v) {
    return v.x[0] >= 0 && std::isfinite(v.x[0]) ? nullptr : "must be >= 0";
}

const char* check_schedulefree_betas(const ArgValue& v) {
    const bool ok = v.x[0] > 0 && v.x[0] < 1 && (v.n < 2 || (v.x[1] >= 0 && v.x[1] < 1));
    return ok ? nullptr : "must lie in (0, 1) for the momentum (its eval weight is 1 - 1 / momentum), [0, 1) for beta2";
}

void append_schedulefree(UpdateBuilder& b, SfKind kind) {
    const bool adam = kind != SfKind::sgd;
    gl::ScheduleFreeOptions o;
    o.adam = adam;
    o.radam = kind == SfKind::radam;
    o.r = float(b.cfg.number("r"));
    o.weight_lr_power = float(b.cfg.number("weight_lr_power"));
    o.warmup_steps = o.radam ? 0.0f : float(b.cfg.number("warmup_steps"));
    o.silent_sgd_phase = o.radam && b.cfg.flag("silent_sgd_phase");
    const double beta1 = adam ? b.cfg.pair("betas").first : b.cfg.number("momentum");
    const float eval_weight = float(1.0 - 1.0 / beta1);
    std::vector<float> start(gl::kSfStateSize, 0.0f);
    start[gl::kSfLrMax] = -1.0f;
    for (size_t gi = 0; gi < b.groups.size(); gi++) {
        const std::vector<UpdateParam> ps = b.of_group(gi);
        if (ps.empty()) continue;
        const UpdateGroup& grp = b.groups[gi];
        const gl::ValueId sf = b.shared_state("schedulefree." + grp.name, gl::DType::f32, gl::Shape{gl::kSfStateSize},
                                              StateInit::exactly(start));
        for (const UpdateParam& p : ps) {
            const gl::Shape s = b.g.shape(p.param);
            const gl::ValueId z = b.state(p, "z", gl::DType::f32, s, StateInit::copy(p.param));
            const gl::ValueId v = adam ? b.state(p, "exp_avg_sq", gl::DType::f32, s) : gl::kNoValue;
            gl::schedulefree_step(b.g, p.param, p.grad, z, v, grp.hyper, sf, o, b.gstat);
            b.eval_average(p, z, eval_weight);
        }
        gl::schedulefree_advance(b.g, sf, grp.hyper, o, b.gstat);
    }
}

namespace {
void append(UpdateBuilder& b) { append_schedulefree(b, SfKind::adamw); }
}  // namespace

const OptimizerDef& optimizer_adamw_schedulefree() {
    static const OptimizerDef def{
        "AdamWScheduleFree",
        {"schedulefree.AdamWScheduleFree", "schedulefree.adamw_schedulefree.AdamWScheduleFree"},
        {
            betas_arg("(0.9, 0.999)", check_schedulefree_betas),
            eps_arg("1e-8"),
            weight_decay_arg("0"),
            {"warmup_steps", ArgType::number, "0", check_warmup_steps},
            {"r", ArgType::number, "0.0"},
            {"weight_lr_power", ArgType::number, "2.0"},
            {"foreach", ArgType::flag_or_none, "True", nullptr, {}, "chooses schedulefree's kernel; the step here is "
                                                                     "one graph op per param either way"},
        },
        nullptr,
        append,
    };
    return def;
}

}  // namespace optim
