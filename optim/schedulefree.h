// The update both schedule-free descriptors build (optim/optimizers/adamw_schedulefree.cpp defines it,
// sgd_schedulefree.cpp shares it): per parameter group, schedulefree_step over its params and one
// schedulefree_advance. State per param: z (starting as a copy of the param, as schedulefree clones
// it at the first step) and, for AdamW, exp_avg_sq; per group: schedulefree.<group> (SfSlot order).
// The args r, weight_lr_power and warmup_steps are read from the config.
#pragma once
#include "optim/descriptor.h"

namespace optim {

enum class SfKind { sgd, adamw, radam };
// RAdam: as AdamW, its args silent_sgd_phase (read from the config) and no warmup_steps.
void append_schedulefree(UpdateBuilder& b, SfKind kind);

// schedulefree's checks: warmup_steps >= 0; the momentum (beta1) in (0, 1), as its eval weight
// 1 - 1 / beta1 needs it.
const char* check_warmup_steps(const ArgValue& v);
const char* check_schedulefree_betas(const ArgValue& v);

}  // namespace optim
