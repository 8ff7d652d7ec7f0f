// DAdaptSGD as dadaptation 3.2's DAdaptSGD: SGD in dual averaging form, x = x0 - s with s the sum of
// dlr-scaled gradients, dlr = d * lr / |g_0| (g_0: the first step's gradients), one d for every param
// (ops/optim_dadapt_more.cpp); a momentum averages x as p (1 - ck) + x ck, ck = 1 - momentum. A step
// is dadapt_sgd_accum over every param, one dadapt_sum_d, then dadapt_sgd_step over every param.
// State: dadapt.state (shared), per param s and x0 (a copy of the param at init; dadaptation's z is
// x0 - s, recomputed). Weight decay is coupled (added to the gradient); dadaptation uses the first
// group's for every group, here each group's own (kohya gives every group the same).
#include "ggml-lite/core/error.h"
#include "ggml-lite/ops/optim_dadapt_more.h"
#include "optim/dadapt.h"

namespace optim {

gl::ValueId dadapt_sum_state(UpdateBuilder& b, double d0) {
    std::vector<float> start(gl::kDsSize, 0.0f);
    gl::ds_put(start.data(), gl::kDsD, d0);
    const gl::ValueId st = b.shared_state("dadapt.state", gl::DType::f32, gl::Shape{gl::kDsSize}, StateInit::exactly(start));
    b.d_estimate = {st, gl::kDsD, /*pair*/ true};
    return st;
}

gl::ValueId dadapt_sum_acc(UpdateBuilder& b) {
    return b.scratch("dadapt.acc", gl::DType::f32, gl::Shape{gl::kDsAccWidth * int64_t(b.params.size())});
}

namespace {

void append(UpdateBuilder& b) {
    const gl::ValueId lead = b.groups[dadapt_lead_group(b, "DAdaptSGD")].hyper;
    const gl::ValueId dstate = dadapt_sum_state(b, b.cfg.number("d0"));
    const gl::ValueId acc = dadapt_sum_acc(b);
    std::vector<gl::ValueId> s(b.params.size()), x0(b.params.size());
    for (size_t i = 0; i < b.params.size(); i++) {
        const UpdateParam& p = b.params[i];
        const gl::Shape sh = b.g.shape(p.param);
        s[i] = b.state(p, "s", gl::DType::f32, sh);
        x0[i] = b.state(p, "x0", gl::DType::f32, sh, StateInit::copy(p.param));
        gl::dadapt_sgd_accum(b.g, p.param, p.grad, s[i], p.hyper, lead, dstate, acc, int(i), b.gstat);
    }
    gl::dadapt_sum_d(b.g, dstate, acc, lead, gl::DSumRule::sgd, float(b.cfg.number("growth_rate")), 0.0f, b.gstat);
    for (size_t i = 0; i < b.params.size(); i++)
        gl::dadapt_sgd_step(b.g, b.params[i].param, s[i], x0[i], b.params[i].hyper, dstate, b.gstat);
}

}  // namespace

const OptimizerDef& optimizer_dadapt_sgd() {
    static const OptimizerDef def{
        "DAdaptSGD",
        {"dadaptation.DAdaptSGD", "dadaptation.dadapt_sgd.DAdaptSGD"},
        {
            {"momentum", ArgType::number, "0.0", check_unit_closed, {&OptimizerConfig::beta1}},
            weight_decay_arg("0"),
            dadapt_log_every_arg(),
            dadapt_d0_arg(),
            dadapt_growth_rate_arg(),
            dadapt_fsdp_arg(),
        },
        nullptr,
        append,
    };
    return def;
}

}  // namespace optim
