// PagedAdEMAMix8bit as bitsandbytes.optim.PagedAdEMAMix8bit: AdEMAMix8bit whose state bitsandbytes may
// page to host memory under pressure. The plan here holds the state on the device, so it runs as
// AdEMAMix8bit (optim/optimizers/ademamix8bit.cpp): the same arguments (but is_paged, which its
// signature lacks), state and steps.
#include <algorithm>
#include <string>

#include "optim/descriptor.h"

namespace optim {

const OptimizerDef& optimizer_ademamix8bit();

const OptimizerDef& optimizer_paged_ademamix8bit() {
    static const OptimizerDef def{
        "PagedAdEMAMix8bit",
        {"bitsandbytes.optim.PagedAdEMAMix8bit", "bitsandbytes.optim.ademamix.PagedAdEMAMix8bit"},
        [] {
            std::vector<ArgDef> a = optimizer_ademamix8bit().args;
            std::erase_if(a, [](const ArgDef& d) { return std::string(d.name) == "is_paged"; });
            return a;
        }(),
        optimizer_ademamix8bit().check,
        optimizer_ademamix8bit().append,
        "runs as AdEMAMix8bit (bitsandbytes pages the state to host memory under pressure; the plan here "
        "holds it on the device)",
    };
    return def;
}

}  // namespace optim
