// What the D-Adaptation descriptors share (optim/optimizers/dadapt_adam.cpp defines it): the group
// whose lr leads the shared d estimate, checked as dadaptation checks it, and the shared state.
#pragma once
#include "optim/descriptor.h"

namespace optim {

// The index of the group with the largest lr; throws gl::Error (naming `optimizer` and the groups)
// when another group's lr is neither that nor 0, as dadaptation raises.
size_t dadapt_lead_group(const UpdateBuilder& b, const char* optimizer);
// dstate (shared, DAdaptSlot order, d = d0 at first) and the per-step scratch acc (two floats per param).
gl::ValueId dadapt_state(UpdateBuilder& b, double d0);
gl::ValueId dadapt_acc(UpdateBuilder& b);

}  // namespace optim
