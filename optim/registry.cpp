// The registry of optimizers: one descriptor per file in optim/optimizers/. The list below is generated
// by CMake from that folder (a GL_OPTIMIZER(<file stem>) line per file), so adding an optimizer edits
// no list, and every descriptor is referenced from here, so a static link keeps them all.
#include <algorithm>

#include "ggml-lite/core/error.h"
#include "optim/descriptor.h"

namespace optim {

#define GL_OPTIMIZER(stem) const OptimizerDef& optimizer_##stem();
#include "optim/optimizer_list.inc"
#undef GL_OPTIMIZER

const std::vector<const OptimizerDef*>& optimizer_defs() {
    static const std::vector<const OptimizerDef*> defs = [] {
        std::vector<const OptimizerDef*> r = {
#define GL_OPTIMIZER(stem) &optimizer_##stem(),
#include "optim/optimizer_list.inc"
#undef GL_OPTIMIZER
        };
        for (const OptimizerDef* a : r)
            for (const OptimizerDef* b : r)
                GL_CHECK(a == b || lower(a->name) != lower(b->name), "optimizers: two are named ", a->name);
        return r;
    }();
    return defs;
}

const OptimizerDef& find_optimizer(const std::string& type) {
    const std::string t = lower(trim(type));
    std::string supported;
    for (const OptimizerDef* d : optimizer_defs()) {
        if (lower(d->name) == t) return *d;
        for (const char* path : d->class_paths)
            if (lower(path) == t) return *d;
        supported += (supported.empty() ? "" : ", ") + std::string(d->name);
        if (!d->class_paths.empty()) supported += gl::cat(" (", d->class_paths.front(), ")");
    }
    gl::fail("optimizer_type '", type, "' is not supported; supported (any case): ", supported);
}

}  // namespace optim
