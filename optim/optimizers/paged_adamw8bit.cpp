// PagedAdamW8bit as kohya names it (bitsandbytes.optim.PagedAdamW8bit): AdamW8bit whose state
// bitsandbytes may page to host memory under pressure. The plan here holds the state on the device,
// so it runs as AdamW8bit (optim/optimizers/adamw8bit.cpp): the same arguments, state and steps.
#include "optim/descriptor.h"

namespace optim {

const OptimizerDef& optimizer_adamw8bit();

const OptimizerDef& optimizer_paged_adamw8bit() {
    static const OptimizerDef def{
        "PagedAdamW8bit",
        {"bitsandbytes.optim.PagedAdamW8bit", "bitsandbytes.optim.adamw.PagedAdamW8bit"},
        optimizer_adamw8bit().args,
        optimizer_adamw8bit().check,
        optimizer_adamw8bit().append,
        "runs as AdamW8bit (bitsandbytes pages the state to host memory under pressure; the plan here holds "
        "it on the device)",
    };
    return def;
}

}  // namespace optim
