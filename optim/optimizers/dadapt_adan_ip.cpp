// DAdaptAdanIP as dadaptation 3.2's experimental DAdaptAdanIP: DAdaptAdan's EMAs and step with the
// d estimate of the inner-product form, numerator_weighted = beta3 numerator_weighted + (1 - beta3)
// dlr sum dot(g, s / denom) (s and denom before the step's update), d_hat = 2 beta3 / (1 - beta3)
// numerator_weighted / sum |s| (ops/optim_dadapt_more.h). As dadaptation, the first group's lr and
// betas lead every group (no check that the groups' lrs agree); eps and weight decay are each
// group's; the decay is proximal, p / (1 + dlr decay), unless no_prox. dadaptation's state names
// exp_avg_sq and exp_avg_diff the other way round (its two loops agree on it, so the step is
// Adan's); here each is named by what it holds, as DAdaptAdan's. State: dadapt.state (shared), per
// param exp_avg, exp_avg_diff, exp_avg_sq, s and pre_grad; all but the d rule is DAdaptAdan's
// (dadapt_adan.cpp: dadapt_adan_append, dadapt_adan_args).
#include "optim/dadapt.h"

namespace optim {

namespace {

void append(UpdateBuilder& b) { dadapt_adan_append(b, true); }

}  // namespace

const OptimizerDef& optimizer_dadapt_adan_ip() {
    static const OptimizerDef def{
        "DAdaptAdanIP",
        {"dadaptation.experimental.DAdaptAdanIP", "dadaptation.experimental.dadapt_adan_ip.DAdaptAdanIP"},
        dadapt_adan_args(),
        nullptr,
        append,
    };
    return def;
}

}  // namespace optim
