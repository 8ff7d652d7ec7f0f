// Lion as lion_pytorch.Lion (Chen et al. 2023): the sign of an interpolated momentum, decoupled
// weight decay. Its betas may be 1 (lion-pytorch checks [0, 1]); it has no eps. State per param:
// exp_avg (f32, the param's shape).
#include "ggml-lite/ops/builder.h"
#include "optim/descriptor.h"

namespace optim {

namespace {
// One step node per parameter group.
void append(UpdateBuilder& b) {
    for (size_t gi = 0; gi < b.groups.size(); gi++) {
        std::vector<gl::ValueId> params, grads, m;
        for (const UpdateParam& p : b.of_group(gi)) {
            params.push_back(p.param);
            grads.push_back(p.grad);
            m.push_back(b.state(p, "exp_avg", gl::DType::f32, b.g.shape(p.param)));
        }
        if (!params.empty()) gl::lion_step(b.g, params, grads, m, b.groups[gi].hyper, b.gstat);
    }
}
}  // namespace

const OptimizerDef& optimizer_lion() {
    static const OptimizerDef def{
        "Lion",
        {"lion_pytorch.Lion", "lion_pytorch.lion_pytorch.Lion"},
        {betas_arg("(0.9, 0.99)", check_unit_closed), weight_decay_arg("0.0")},
        nullptr,
        append,
    };
    return def;
}

}  // namespace optim
