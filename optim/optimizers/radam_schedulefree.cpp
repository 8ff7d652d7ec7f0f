// RAdamScheduleFree as schedulefree 1.4's (Defazio et al. 2024): AdamWScheduleFree's averaged step
// with RAdam's rectified lr instead of a warm-up (ops/optim_schedulefree.h radam_rect): while the
// rectification is undefined (rho_t <= 4, the first steps) the step is SGD's, at lr 0 with
// silent_sgd_phase (the default), so the params stay put. The step graph holds y; the weights kohya
// saves and samples are x = lerp(y, z, 1 - 1 / beta1) (Optimizer::to_eval). State per param: z (a
// copy of the param at init), exp_avg_sq; per group schedulefree.<group>.
#include "optim/schedulefree.h"

namespace optim {

namespace {

void append(UpdateBuilder& b) { append_schedulefree(b, SfKind::radam); }

}  // namespace

const OptimizerDef& optimizer_radam_schedulefree() {
    static const OptimizerDef def{
        "RAdamScheduleFree",
        {"schedulefree.RAdamScheduleFree", "schedulefree.radam_schedulefree.RAdamScheduleFree"},
        {
            betas_arg("(0.9, 0.999)", check_schedulefree_betas),
            eps_arg("1e-8"),
            weight_decay_arg("0"),
            {"r", ArgType::number, "0.0"},
            {"weight_lr_power", ArgType::number, "2.0"},
            {"foreach", ArgType::flag_or_none, "True", nullptr, {}, "chooses schedulefree's kernel; the step here is "
                                                                     "one graph op per param either way"},
            {"silent_sgd_phase", ArgType::flag, "True"},
        },
        nullptr,
        append,
    };
    return def;
}

}  // namespace optim
