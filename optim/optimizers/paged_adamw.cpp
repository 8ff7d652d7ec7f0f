// PagedAdamW as kohya names it (bitsandbytes.optim.PagedAdamW): bitsandbytes' 32-bit AdamW, whose
// state bitsandbytes may page to host memory under pressure; the plan here holds it on the device.
// bitsandbytes' 32-bit step decays after the Adam step (AdamW8bit's path for small tensors, whose
// order tests/test_optim.cpp checks against a scalar port). State per param: exp_avg, exp_avg_sq (f32).
#include "ggml-lite/ops/builder.h"
#include "optim/descriptor.h"

namespace optim {

namespace {
void append(UpdateBuilder& b) {
    for (const UpdateParam& p : b.params) {
        const gl::Shape s = b.g.shape(p.param);
        const gl::ValueId m = b.state(p, "exp_avg", gl::DType::f32, s);
        const gl::ValueId v = b.state(p, "exp_avg_sq", gl::DType::f32, s);
        gl::adamw_step(b.g, p.param, p.grad, m, v, p.hyper, /*decay_after*/ true, b.gstat);
    }
}
}  // namespace

const OptimizerDef& optimizer_paged_adamw() {
    static const OptimizerDef def{
        "PagedAdamW",
        {"bitsandbytes.optim.PagedAdamW", "bitsandbytes.optim.adamw.PagedAdamW"},
        bnb_inert_args({betas_arg("(0.9, 0.999)"), eps_arg("1e-8"), weight_decay_arg("1e-2")}),
        nullptr,
        append,
        "runs as bitsandbytes' 32-bit AdamW, unpaged (bitsandbytes pages the state to host memory under "
        "pressure; the plan here holds it on the device)",
    };
    return def;
}

}  // namespace optim
