// DAdaptAdanIP as dadaptation 3.2's experimental DAdaptAdanIP: DAdaptAdan's EMAs and step with the
// d estimate of the inner-product form, numerator_weighted = beta3 numerator_weighted + (1 - beta3)
// dlr sum dot(g, s / denom) (s and denom before the step's update), d_hat = 2 beta3 / (1 - beta3)
// numerator_weighted / sum |s| (ops/optim_dadapt_more.h). As dadaptation, the first group's lr and
// betas lead every group (no check that the groups' lrs agree); eps and weight decay are each
// group's; the decay is proximal, p / (1 + dlr decay), unless no_prox. dadaptation's state names
// exp_avg_sq and exp_avg_diff the other way round (its two loops agree on it, so the step is
// Adan's); here each is named by what it holds, as DAdaptAdan's. State: dadapt.state (shared), per
// param exp_avg, exp_avg_diff, exp_avg_sq, s and pre_grad.
#include "ggml-lite/ops/optim_dadapt_more.h"
#include "optim/dadapt.h"

namespace optim {

namespace {

void append(UpdateBuilder& b) {
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
        gl::dadapt_adan_ip_accum(b.g, p.param, p.grad, st[i].m, st[i].diff, st[i].v, s, st[i].pre, p.hyper, lead,
                                 dstate, acc, int(i), beta1, beta2, beta3, b.gstat);
    }
    gl::dadapt_sum_d(b.g, dstate, acc, lead, gl::DSumRule::adan_ip, float(b.cfg.number("growth_rate")), beta3,
                     b.gstat);
    for (size_t i = 0; i < b.params.size(); i++) {
        const UpdateParam& p = b.params[i];
        gl::dadapt_adan_step(b.g, p.param, p.grad, st[i].m, st[i].diff, st[i].v, st[i].pre, p.hyper, lead, dstate,
                             no_prox, b.gstat);
    }
}

}  // namespace

const OptimizerDef& optimizer_dadapt_adan_ip() {
    static const OptimizerDef def{
        "DAdaptAdanIP",
        {"dadaptation.experimental.DAdaptAdanIP", "dadaptation.experimental.dadapt_adan_ip.DAdaptAdanIP"},
        {
            {"betas", ArgType::triple, "(0.98, 0.92, 0.99)", check_unit_open,
             {&OptimizerConfig::beta1, &OptimizerConfig::beta2}},
            eps_arg("1e-8"),
            weight_decay_arg("0.02"),
            {"no_prox", ArgType::flag, "False"},
            dadapt_log_every_arg(),
            {"d0", ArgType::number, "1e-6", check_positive},
            {"growth_rate", ArgType::number, "float('inf')", check_growth_rate},
        },
        nullptr,
        append,
    };
    return def;
}

}  // namespace optim
