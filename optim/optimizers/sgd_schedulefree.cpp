// SGDScheduleFree as schedulefree 1.4's (Defazio et al. 2024): SGD with momentum replaced by the
// schedule-free average (optim/optimizers/adamw_schedulefree.cpp builds both; momentum feeds the
// hyper's beta1 slot). Coupled weight decay, added to the gradient at y.
#include "optim/schedulefree.h"

namespace optim {

namespace {
void append(UpdateBuilder& b) { append_schedulefree(b, SfKind::sgd); }
const char* check_momentum(const ArgValue& v) {
    return v.x[0] > 0 && v.x[0] < 1 ? nullptr : "must lie in (0, 1) (schedulefree: 'Momentum must be between 0 and 1 "
                                                "exclusive')";
}
}  // namespace

const OptimizerDef& optimizer_sgd_schedulefree() {
    static const OptimizerDef def{
        "SGDScheduleFree",
        {"schedulefree.SGDScheduleFree", "schedulefree.sgd_schedulefree.SGDScheduleFree"},
        {
            {"momentum", ArgType::number, "0.9", check_momentum, {&OptimizerConfig::beta1}},
            weight_decay_arg("0"),
            {"warmup_steps", ArgType::number, "0", check_warmup_steps},
            {"r", ArgType::number, "0.0"},
            {"weight_lr_power", ArgType::number, "2"},
            {"foreach", ArgType::flag_or_none, "True", nullptr, {}, "chooses schedulefree's kernel; the step here is "
                                                                     "one graph op per param either way"},
        },
        nullptr,
        append,
    };
    return def;
}

}  // namespace optim
