// DAdaptation as kohya names it: train_util.get_optimizer maps "DAdaptation" (and "DAdaptAdamPreprint")
// to dadaptation.experimental.DAdaptAdamPreprint (optim/optimizers/dadapt_adam_preprint.cpp): the same
// arguments, state and steps; the state files record the name given.
#include "optim/descriptor.h"

namespace optim {

const OptimizerDef& optimizer_dadapt_adam_preprint();

const OptimizerDef& optimizer_dadaptation() {
    static const OptimizerDef def{
        "DAdaptation",
        optimizer_dadapt_adam_preprint().class_paths,
        optimizer_dadapt_adam_preprint().args,
        optimizer_dadapt_adam_preprint().check,
        optimizer_dadapt_adam_preprint().append,
        "runs dadaptation.experimental.DAdaptAdamPreprint, as kohya maps the name",
    };
    return def;
}

}  // namespace optim
