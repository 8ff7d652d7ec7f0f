// What the D-Adaptation descriptors share (optim/optimizers/dadapt_adam.cpp defines the first three
// and dadapt_adam_state, dadapt_sgd.cpp the sum state, dadapt_adan.cpp the Adan pair's): the group
// whose lr leads the shared d estimate, checked as dadaptation checks it, the shared state, and the
// arguments every one of them takes.
#pragma once
#include "optim/descriptor.h"

namespace optim {

// The index of the group with the largest lr; throws gl::Error (naming `optimizer` and the groups)
// when another group's lr is neither that nor 0, as dadaptation raises.
size_t dadapt_lead_group(const UpdateBuilder& b, const char* optimizer);
// dstate (shared, DAdaptSlot order, d = d0 at first) and the per-step scratch acc (two floats per param).
gl::ValueId dadapt_state(UpdateBuilder& b, double d0);
gl::ValueId dadapt_acc(UpdateBuilder& b);

// DAdaptSGD / AdaGrad / Adan (ops/optim_dadapt_more.h): dadapt.state (shared, DSumSlot order, d = d0
// at first; the running scalars as f32 pairs) and the scratch dadapt.acc (kDsAccWidth floats per param).
gl::ValueId dadapt_sum_state(UpdateBuilder& b, double d0);
gl::ValueId dadapt_sum_acc(UpdateBuilder& b);

// growth_rate: >= 1 (inf: unbounded).
const char* check_growth_rate(const ArgValue& v);
// The d0 and growth_rate arguments, with dadaptation's (and Prodigy's) defaults.
inline ArgDef dadapt_d0_arg() { return {"d0", ArgType::number, "1e-6", check_positive}; }
inline ArgDef dadapt_growth_rate_arg() { return {"growth_rate", ArgType::number, "float('inf')", check_growth_rate}; }

// DAdaptAdam's and DAdaptAdamPreprint's per-param state: exp_avg, exp_avg_sq and s (made in that order).
struct DAdaptAdamState {
    gl::ValueId m, v, s;
};
DAdaptAdamState dadapt_adam_state(UpdateBuilder& b, const UpdateParam& p);

// DAdaptAdan and DAdaptAdanIP (dadapt_adan.cpp): the same state, EMAs and step, the d estimate of
// DSumRule::adan or (ip) DSumRule::adan_ip; and the arguments both take.
void dadapt_adan_append(UpdateBuilder& b, bool ip);
std::vector<ArgDef> dadapt_adan_args();
// The arguments dadaptation's logging and FSDP take, which change nothing here.
inline ArgDef dadapt_log_every_arg() {
    return {"log_every", ArgType::number, "0", nullptr, {}, "dadaptation's logging of d; ignored"};
}
inline ArgDef dadapt_fsdp_arg() {
    return {"fsdp_in_use", ArgType::flag, "False", nullptr, {}, "one process here: nothing to reduce across"};
}

}  // namespace optim
