// DAdaptAdaGrad as dadaptation 3.2's DAdaptAdaGrad (dense gradients): AdaGrad in dual averaging
// form, x = x0 - sk / (sqrt(alpha) + eps), alpha the sum of squared gradients (starting at 1e-6), sk
// the sum of dlr-scaled gradients, dlr = d * lr, one d for every param (ops/optim_dadapt_more.cpp).
// As dadaptation, the first group's lr and momentum lead every group (no check that the groups'
// lrs agree); eps and weight decay (coupled) are each group's. A step is dadapt_adagrad_accum over
// every param, one dadapt_sum_d, then dadapt_adagrad_step over every param. State: dadapt.state
// (shared), per param alphak, sk and x0 (a copy of the param at init).
#include "ggml-lite/ops/optim_dadapt_more.h"
#include "optim/dadapt.h"

namespace optim {

namespace {

void append(UpdateBuilder& b) {
    const gl::ValueId lead = b.groups[0].hyper;
    const gl::ValueId dstate = dadapt_sum_state(b, b.cfg.number("d0"));
    const gl::ValueId acc = dadapt_sum_acc(b);
    std::vector<gl::ValueId> alpha(b.params.size()), sk(b.params.size()), x0(b.params.size());
    for (size_t i = 0; i < b.params.size(); i++) {
        const UpdateParam& p = b.params[i];
        const gl::Shape sh = b.g.shape(p.param);
        alpha[i] = b.state(p, "alphak", gl::DType::f32, sh, StateInit::filled(1e-6f));
        sk[i] = b.state(p, "sk", gl::DType::f32, sh);
        x0[i] = b.state(p, "x0", gl::DType::f32, sh, StateInit::copy(p.param));
        gl::dadapt_adagrad_accum(b.g, p.param, p.grad, alpha[i], sk[i], p.hyper, lead, dstate, acc, int(i), b.gstat);
    }
    gl::dadapt_sum_d(b.g, dstate, acc, lead, gl::DSumRule::adagrad, float(b.cfg.number("growth_rate")), 0.0f,
                     b.gstat);
    for (size_t i = 0; i < b.params.size(); i++)
        gl::dadapt_adagrad_step(b.g, b.params[i].param, alpha[i], sk[i], x0[i], b.params[i].hyper, dstate, b.gstat);
}

}  // namespace

const OptimizerDef& optimizer_dadapt_adagrad() {
    static const OptimizerDef def{
        "DAdaptAdaGrad",
        {"dadaptation.DAdaptAdaGrad", "dadaptation.dadapt_adagrad.DAdaptAdaGrad"},
        {
            {"momentum", ArgType::number, "0", check_unit_closed, {&OptimizerConfig::beta1}},
            dadapt_log_every_arg(),
            weight_decay_arg("0.0"),
            eps_arg("1e-6"),
            dadapt_d0_arg(),
            dadapt_growth_rate_arg(),
        },
        nullptr,
        append,
    };
    return def;
}

}  // namespace optim
