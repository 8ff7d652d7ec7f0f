// SGDNesterov as kohya builds it: torch.optim.SGD with nesterov=True, and momentum=0.9 unless given
// (kohya adds it; torch's default 0 cannot run Nesterov's step). Weight decay is coupled (added to the
// gradient). State per param, named as torch's state_dict names it: momentum_buffer (f32).
#include "ggml-lite/ops/builder.h"
#include "optim/descriptor.h"

namespace optim {

namespace {

void append(UpdateBuilder& b) {
    const float momentum = float(b.cfg.number("momentum")), dampening = float(b.cfg.number("dampening"));
    for (const UpdateParam& p : b.params) {
        const gl::ValueId buf = b.state(p, "momentum_buffer", gl::DType::f32, b.g.shape(p.param));
        gl::sgd_step(b.g, p.param, p.grad, buf, p.hyper, momentum, dampening, /*nesterov*/ true, b.gstat);
    }
}

const char* check_momentum(const ArgValue& v) {
    return v.x[0] > 0 && v.x[0] <= 1 ? nullptr : "must lie in (0, 1] (Nesterov's step needs a momentum)";
}
const char* check_dampening(const ArgValue& v) {
    return v.x[0] == 0 ? nullptr : "must be 0 (torch: 'Nesterov momentum requires a momentum and zero dampening')";
}

}  // namespace

const OptimizerDef& optimizer_sgd_nesterov() {
    static const OptimizerDef def{
        "SGDNesterov",
        {},
        torch_inert_args({{"momentum", ArgType::number, "0.9", check_momentum},
                          {"dampening", ArgType::number, "0", check_dampening},
                          weight_decay_arg("0")},
                         /*with_amsgrad*/ false),
        nullptr,
        append,
        nullptr,
        "torch.optim.sgd.SGD",
        "momentum=0.9",
    };
    return def;
}

}  // namespace optim
