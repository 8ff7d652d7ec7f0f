// AdamW as torch.optim.AdamW, kohya's default optimizer: decoupled weight decay (p *= 1 - lr * wd)
// before the Adam step. State per param, named as torch's state_dict names it: exp_avg, exp_avg_sq
// (f32, the param's shape).
#include "ggml-lite/ops/builder.h"
#include "optim/descriptor.h"

namespace optim {

namespace {
// One step node per parameter group.
void append(UpdateBuilder& b) {
    for (size_t gi = 0; gi < b.groups.size(); gi++) {
        std::vector<gl::ValueId> params, grads, m, v;
        for (const UpdateParam& p : b.of_group(gi)) {
            const gl::Shape s = b.g.shape(p.param);
            params.push_back(p.param);
            grads.push_back(p.grad);
            m.push_back(b.state(p, "exp_avg", gl::DType::f32, s));
            v.push_back(b.state(p, "exp_avg_sq", gl::DType::f32, s));
        }
        if (!params.empty())
            gl::adamw_step(b.g, params, grads, m, v, b.groups[gi].hyper, /*decay_after*/ false, b.gstat);
    }
}
}  // namespace

const OptimizerDef& optimizer_adamw() {
    static const OptimizerDef def{
        "AdamW",
        {"torch.optim.AdamW", "torch.optim.adamw.AdamW"},
        torch_inert_args({betas_arg("(0.9, 0.999)"), eps_arg("1e-8"), weight_decay_arg("1e-2")}),
        nullptr,
        append,
    };
    return def;
}

}  // namespace optim
