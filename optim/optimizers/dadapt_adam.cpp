// DAdaptAdam as dadaptation 3.2's DAdaptAdam (Defazio & Mishchenko 2023): Adam whose step size d is
// estimated from the run, one d shared by every parameter (ops/optim_dadapt.cpp). A step is
// dadapt_adam_accum over every param, one dadapt_adam_d, then dadapt_adam_step over every param, in
// that node order. State: dadapt.state (shared, DAdaptSlot order, d = d0 at first), and per param
// exp_avg, exp_avg_sq, s; dadapt.acc is per-step scratch. kohya passes --learning_rate as lr
// (dadaptation wants about 1.0; kohya warns below 0.1).
#include "ggml-lite/core/error.h"
#include "ggml-lite/ops/builder.h"
#include "optim/dadapt.h"

namespace optim {

size_t dadapt_lead_group(const UpdateBuilder& b, const char* optimizer) {
    size_t lead = 0;
    for (size_t i = 0; i < b.groups.size(); i++)
        if (b.groups[i].lr > b.groups[lead].lr) lead = i;
    for (const UpdateGroup& grp : b.groups)
        GL_CHECK(grp.lr == 0.0 || grp.lr == b.groups[lead].lr, optimizer, ": groups '", b.groups[lead].name, "' and '",
                 grp.name, "' have different learning rates; D-Adaptation shares one d estimate, so (as dadaptation) "
                 "every group must use the same lr or 0");
    return lead;
}

gl::ValueId dadapt_state(UpdateBuilder& b, double d0) {
    std::vector<float> start(gl::kDAdaptStateSize, 0.0f);
    start[gl::kDaD] = float(d0);
    const gl::ValueId st =
        b.shared_state("dadapt.state", gl::DType::f32, gl::Shape{gl::kDAdaptStateSize}, StateInit::exactly(start));
    b.d_estimate = {st, gl::kDaD, /*pair*/ false};
    return st;
}

gl::ValueId dadapt_acc(UpdateBuilder& b) {
    return b.scratch("dadapt.acc", gl::DType::f32, gl::Shape{2 * int64_t(b.params.size())});
}

DAdaptAdamState dadapt_adam_state(UpdateBuilder& b, const UpdateParam& p) {
    const gl::Shape sh = b.g.shape(p.param);
    DAdaptAdamState st;
    st.m = b.state(p, "exp_avg", gl::DType::f32, sh);
    st.v = b.state(p, "exp_avg_sq", gl::DType::f32, sh);
    st.s = b.state(p, "s", gl::DType::f32, sh);
    return st;
}

namespace {

void append(UpdateBuilder& b) {
    const size_t lead = dadapt_lead_group(b, "DAdaptAdam");
    gl::DAdaptOptions o;
    o.growth_rate = float(b.cfg.number("growth_rate"));
    o.decouple = b.cfg.flag("decouple");
    o.use_bias_correction = b.cfg.flag("use_bias_correction");
    const gl::ValueId dstate = dadapt_state(b, b.cfg.number("d0"));
    const gl::ValueId acc = dadapt_acc(b);
    std::vector<DAdaptAdamState> st(b.params.size());
    for (size_t i = 0; i < b.params.size(); i++) {
        const UpdateParam& p = b.params[i];
        st[i] = dadapt_adam_state(b, p);
        gl::dadapt_adam_accum(b.g, p.param, p.grad, st[i].m, st[i].v, st[i].s, p.hyper, dstate, acc, int(i), o,
                              b.gstat);
    }
    gl::dadapt_adam_d(b.g, dstate, acc, b.groups[lead].hyper, o, b.gstat);
    for (size_t i = 0; i < b.params.size(); i++) {
        const UpdateParam& p = b.params[i];
        gl::dadapt_adam_step(b.g, p.param, st[i].m, st[i].v, p.hyper, dstate, o, b.gstat);
    }
}

}  // namespace

const char* check_growth_rate(const ArgValue& v) { return v.x[0] >= 1 ? nullptr : "must be >= 1 (inf: unbounded)"; }

const OptimizerDef& optimizer_dadapt_adam() {
    static const OptimizerDef def{
        "DAdaptAdam",
        {"dadaptation.DAdaptAdam", "dadaptation.dadapt_adam.DAdaptAdam"},
        {
            betas_arg("(0.9, 0.999)"),
            eps_arg("1e-8"),
            weight_decay_arg("0"),
            {"decouple", ArgType::flag, "False"},
            {"use_bias_correction", ArgType::flag, "False"},
            dadapt_d0_arg(),
            dadapt_growth_rate_arg(),
            dadapt_log_every_arg(),
            dadapt_fsdp_arg(),
        },
        nullptr,
        append,
    };
    return def;
}

}  // namespace optim
