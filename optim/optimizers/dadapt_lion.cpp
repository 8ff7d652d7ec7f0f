// DAdaptLion as dadaptation 3.2's DAdaptLion: Lion's sign step scaled by dlr = d * lr, d estimated
// from the run as DAdaptAdam's (without growth bound or bias correction), one d for every param
// (ops/optim_dadapt.cpp). A step is dadapt_lion_step over every param, then one dadapt_adam_d. State:
// dadapt.state (shared, DAdaptSlot order), per param exp_avg and s; dadapt.acc is per-step scratch.
#include "ggml-lite/ops/builder.h"
#include "optim/dadapt.h"

namespace optim {

namespace {

void append(UpdateBuilder& b) {
    const size_t lead = dadapt_lead_group(b, "DAdaptLion");
    const gl::ValueId dstate = dadapt_state(b, b.cfg.number("d0"));
    const gl::ValueId acc = dadapt_acc(b);
    const gl::ValueId lead_hyper = b.groups[lead].hyper;
    for (size_t i = 0; i < b.params.size(); i++) {
        const UpdateParam& p = b.params[i];
        const gl::Shape s = b.g.shape(p.param);
        const gl::ValueId m = b.state(p, "exp_avg", gl::DType::f32, s);
        const gl::ValueId sv = b.state(p, "s", gl::DType::f32, s);
        gl::dadapt_lion_step(b.g, p.param, p.grad, m, sv, p.hyper, lead_hyper, dstate, acc, int(i), b.gstat);
    }
    gl::dadapt_adam_d(b.g, dstate, acc, lead_hyper, gl::DAdaptOptions{}, b.gstat);
}

}  // namespace

const OptimizerDef& optimizer_dadapt_lion() {
    static const OptimizerDef def{
        "DAdaptLion",
        {"dadaptation.DAdaptLion", "dadaptation.dadapt_lion.DAdaptLion"},
        {
            betas_arg("(0.9, 0.99)"),
            weight_decay_arg("0.0"),
            dadapt_log_every_arg(),
            dadapt_d0_arg(),
            dadapt_fsdp_arg(),
        },
        nullptr,
        append,
    };
    return def;
}

}  // namespace optim
