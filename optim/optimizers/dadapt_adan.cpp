// DAdaptAdan as dadaptation 3.2's DAdaptAdan: Adan (EMAs of the gradient, of its difference to the
// previous one, and of the squared Nesterov update) with its first two scaled by dlr = d * lr, one d
// for every param (ops/optim_dadapt_more.cpp). As dadaptation, the first group's lr and betas lead
// every group (no check that the groups' lrs agree); eps and weight decay are each group's; the
// decay is the proximal p / (1 + dlr decay) unless no_prox. A step is dadapt_adan_accum over every
// param, one dadapt_sum_d, then dadapt_adan_step over every param. State: dadapt.state (shared),
// per param exp_avg, exp_avg_diff, exp_avg_sq, s and pre_grad. DAdaptAdanIP (dadapt_adan_ip.cpp) is
// the same with dadapt_adan_ip_accum and the d rule DSumRule::adan_ip: dadapt_adan_append(b, ip).
#include "ggml-lite/ops/optim_dadapt_more.h"
#include "optim/dadapt.h"

namespace optim {

void dadapt_adan_append(UpdateBuilder& b, bool ip) {
    const gl::ValueId lead = b.groups[0].hyper;
    // the doubles dadaptation computes 1 - beta from
    const double beta1 = b.cfg.triple("betas", 0), beta2 = b.cfg.triple("betas", 1), beta3 = b.cfg.triple("betas", 2);
    const bool no_prox = b.cfg.flag("no_prox");
    const gl::ValueId dstate = dadapt_sum_state(b, b.cfg.number("d0"));
    const gl::ValueId acc = dadapt_sum_acc(b);
    struct S {
        gl::ValueId m, diff, v, pre;
    };
    std::vector<S> st(b.params.size());
    for (size_t i = 0; i < b.params.size(); i++) {
        const UpdateParam& p = b.params[i];
        const gl::Shape sh = b.g.shape(p.param);
        st[i].m = b.state(p, "exp_avg", gl::DType::f32, sh);
        st[i].diff = b.state(p, "exp_avg_diff", gl::DType::f32, sh);
        st[i].v = b.state(p, "exp_avg_sq", gl::DType::f32, sh);
        const gl::ValueId s = b.state(p, "s", gl::DType::f32, sh);
        st[i].pre = b.state(p, "pre_grad", gl::DType::f32, sh);
        auto* accum = ip ? gl::dadapt_adan_ip_accum : gl::dadapt_adan_accum;
        accum(b.g, p.param, p.grad, st[i].m, st[i].diff, st[i].v, s, st[i].pre, p.hyper, lead, dstate, acc, int(i),
              beta1, beta2, beta3, b.gstat);
    }
    gl::dadapt_sum_d(b.g, dstate, acc, lead, ip ? gl::DSumRule::adan_ip : gl::DSumRule::adan,
                     float(b.cfg.number("growth_rate")), beta3, b.gstat);
    for (size_t i = 0; i < b.params.size(); i++) {
        const UpdateParam& p = b.params[i];
        gl::dadapt_adan_step(b.g, p.param, p.grad, st[i].m, st[i].diff, st[i].v, st[i].pre, p.hyper, lead, dstate,
                             no_prox, b.gstat);
    }
}

std::vector<ArgDef> dadapt_adan_args() {
    return {
        {"betas", ArgType::triple, "(0.98, 0.92, 0.99)", check_unit_open,
         {&OptimizerConfig::beta1, &OptimizerConfig::beta2}},
        eps_arg("1e-8"),
        weight_decay_arg("0.02"),
        {"no_prox", ArgType::flag, "False"},
        dadapt_log_every_arg(),
        dadapt_d0_arg(),
        dadapt_growth_rate_arg(),
    };
}

namespace {

void append(UpdateBuilder& b) { dadapt_adan_append(b, false); }

}  // namespace

const OptimizerDef& optimizer_dadapt_adan() {
    static const OptimizerDef def{
        "DAdaptAdan",
        {"dadaptation.DAdaptAdan", "dadaptation.dadapt_adan.DAdaptAdan"},
        dadapt_adan_args(),
        nullptr,
        append,
    };
    return def;
}

}  // namespace optim
