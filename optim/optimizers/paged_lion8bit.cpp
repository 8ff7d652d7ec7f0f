// PagedLion8bit as kohya names it (bitsandbytes.optim.PagedLion8bit): Lion8bit whose state
// bitsandbytes may page to host memory under pressure. The plan here holds the state on the device,
// so it runs as Lion8bit (optim/optimizers/lion8bit.cpp): the same arguments, state and steps.
#include "optim/descriptor.h"

namespace optim {

const OptimizerDef& optimizer_lion8bit();

const OptimizerDef& optimizer_paged_lion8bit() {
    static const OptimizerDef def{
        "PagedLion8bit",
        {"bitsandbytes.optim.PagedLion8bit", "bitsandbytes.optim.lion.PagedLion8bit"},
        optimizer_lion8bit().args,
        optimizer_lion8bit().check,
        optimizer_lion8bit().append,
        "runs as Lion8bit (bitsandbytes pages the state to host memory under pressure; the plan here holds "
        "it on the device)",
    };
    return def;
}

}  // namespace optim
