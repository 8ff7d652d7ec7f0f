// PagedAdamW32bit as kohya names it (bitsandbytes.optim.PagedAdamW32bit): the same optimizer as
// PagedAdamW (optim/optimizers/paged_adamw.cpp) under bitsandbytes' other name.
#include "optim/descriptor.h"

namespace optim {

const OptimizerDef& optimizer_paged_adamw();

const OptimizerDef& optimizer_paged_adamw32bit() {
    static const OptimizerDef def{
        "PagedAdamW32bit",
        {"bitsandbytes.optim.PagedAdamW32bit", "bitsandbytes.optim.adamw.PagedAdamW32bit"},
        optimizer_paged_adamw().args,
        optimizer_paged_adamw().check,
        optimizer_paged_adamw().append,
        optimizer_paged_adamw().note,
    };
    return def;
}

}  // namespace optim
