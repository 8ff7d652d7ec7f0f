// DAdaptAdamPreprint as dadaptation 3.2's experimental DAdaptAdamPreprint (the D-Adapt Adam of the
// paper's early preprints; kohya's --optimizer_type DAdaptation runs it: dadaptation.cpp): Adam whose
// first moment and s are scaled by dlr = d * lr, one d for every param, estimated from an EMA by beta2
// of the weighted squared gradients (ops/optim_dadapt_more.h). As dadaptation, lr is the largest group
// lr (every group that or 0), betas and decouple are the first group's (kohya gives every group the
// same), eps and weight decay each group's; the decay is coupled (added to the gradient) unless
// decouple. A step is dadapt_adam_preprint_accum over every param, one dadapt_sum_d, then
// dadapt_adam_preprint_step over every param. State: dadapt.state (shared), per param exp_avg,
// exp_avg_sq, s.
#include "ggml-lite/ops/optim_dadapt_more.h"
#include "optim/dadapt.h"

namespace optim {

namespace {

void append(UpdateBuilder& b) {
    const gl::ValueId lead = b.groups[dadapt_lead_group(b, b.cfg.name())].hyper;
    const bool decouple = b.cfg.flag("decouple");
    const auto [beta1, beta2] = b.cfg.pair("betas");  // the doubles dadaptation computes 1 - beta from
    const gl::ValueId dstate = dadapt_sum_state(b, b.cfg.number("d0"));
    const gl::ValueId acc = dadapt_sum_acc(b);
    std::vector<DAdaptAdamState> st(b.params.size());
    for (size_t i = 0; i < b.params.size(); i++) {
        const UpdateParam& p = b.params[i];
        st[i] = dadapt_adam_state(b, p);
        gl::dadapt_adam_preprint_accum(b.g, p.param, p.grad, st[i].m, st[i].v, st[i].s, p.hyper, lead, dstate, acc,
                                       int(i), beta1, beta2, decouple, b.gstat);
    }
    gl::dadapt_sum_d(b.g, dstate, acc, lead, gl::DSumRule::adam_preprint, float(b.cfg.number("growth_rate")), beta2,
                     b.gstat);
    for (size_t i = 0; i < b.params.size(); i++) {
        const UpdateParam& p = b.params[i];
        gl::dadapt_adam_preprint_step(b.g, p.param, st[i].m, st[i].v, p.hyper, dstate, decouple, b.gstat);
    }
}

}  // namespace

const OptimizerDef& optimizer_dadapt_adam_preprint() {
    static const OptimizerDef def{
        "DAdaptAdamPreprint",
        {"dadaptation.experimental.DAdaptAdamPreprint",
         "dadaptation.experimental.dadapt_adam_preprint.DAdaptAdamPreprint"},
        {
            betas_arg("(0.9, 0.999)"),
            eps_arg("1e-8"),
            weight_decay_arg("0"),
            dadapt_log_every_arg(),
            {"decouple", ArgType::flag, "False"},
            dadapt_d0_arg(),
            dadapt_growth_rate_arg(),
            dadapt_fsdp_arg(),
        },
        nullptr,
        append,
    };
    return def;
}

}  // namespace optim
