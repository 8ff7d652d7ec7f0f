// Prodigy as prodigyopt.Prodigy 1.1 (Mishchenko & Defazio 2023): Adam steps scaled by one d estimate
// shared by every parameter (ops/optim_prodigy.cpp). A step is prodigy_accum over every param, one
// prodigy_d, then prodigy_step over every param, in that node order. State: prodigy.state (shared,
// ProdigySlot order, d = d_max = d0 at first), and per param exp_avg (only with beta1 > 0),
// exp_avg_sq, s and p0 (a copy of the param at init); prodigy.acc is per-step scratch.
#include "ggml-lite/core/error.h"
#include "ggml-lite/ops/builder.h"
#include "optim/descriptor.h"

namespace optim {

namespace {

gl::ProdigyOptions options(const OptimizerConfig& c) {
    gl::ProdigyOptions o;
    o.beta3 = c.is_none("beta3") ? -1.0f : float(c.number("beta3"));
    o.d0 = float(c.number("d0"));
    o.d_coef = float(c.number("d_coef"));
    o.growth_rate = float(c.number("growth_rate"));
    o.decouple = c.flag("decouple");
    o.use_bias_correction = c.flag("use_bias_correction");
    o.safeguard_warmup = c.flag("safeguard_warmup");
    return o;
}

void append(UpdateBuilder& b) {
    double lr = 0;
    for (const UpdateGroup& grp : b.groups) {
        GL_CHECK(grp.lr == 0.0 || lr == 0.0 || grp.lr == lr, "Prodigy: groups '", b.groups[0].name, "' and '", grp.name,
                 "' have different learning rates; Prodigy shares one d estimate, so (as prodigyopt) every group ",
                 "must use the same lr or 0");
        if (grp.lr != 0.0) lr = grp.lr;
    }
    const gl::ProdigyOptions o = options(b.cfg);
    std::vector<float> start(gl::kProdigyStateSize, 0.0f);
    start[gl::kPdD] = start[gl::kPdDMax] = o.d0;
    const gl::ValueId pstate =
        b.shared_state("prodigy.state", gl::DType::f32, gl::Shape{gl::kProdigyStateSize}, StateInit::exactly(start));
    b.d_estimate = {pstate, gl::kPdD, /*pair*/ false};
    const gl::ValueId acc = b.scratch("prodigy.acc", gl::DType::f32, gl::Shape{2 * int64_t(b.params.size())});
    std::vector<gl::ValueId> m(b.params.size()), v(b.params.size());
    for (size_t i = 0; i < b.params.size(); i++) {
        const UpdateParam& p = b.params[i];
        const gl::Shape s = b.g.shape(p.param);
        m[i] = b.cfg.beta1 > 0.0f ? b.state(p, "exp_avg", gl::DType::f32, s) : gl::kNoValue;
        v[i] = b.state(p, "exp_avg_sq", gl::DType::f32, s);
        const gl::ValueId sv = b.state(p, "s", gl::DType::f32, s);
        const gl::ValueId p0 = b.state(p, "p0", gl::DType::f32, s, StateInit::copy(p.param));
        gl::prodigy_accum(b.g, p.param, p.grad, m[i], v[i], sv, p0, p.hyper, pstate, acc, int(i), o, b.gstat);
    }
    gl::prodigy_d(b.g, pstate, acc, b.groups[0].hyper, o, b.gstat);
    for (size_t i = 0; i < b.params.size(); i++) {
        const UpdateParam& p = b.params[i];
        gl::prodigy_step(b.g, p.param, p.grad, m[i], v[i], p.hyper, pstate, o, b.gstat);
    }
}

const char* check_growth_rate(const ArgValue& v) { return v.x[0] >= 1 ? nullptr : "must be >= 1 (inf: unbounded)"; }
const char* check_slice_p(const ArgValue& v) {
    return v.x[0] == 1.0 ? nullptr : "only slice_p=1 (every element) is supported";
}

}  // namespace

const OptimizerDef& optimizer_prodigy() {
    static const OptimizerDef def{
        "Prodigy",
        {"prodigyopt.Prodigy", "prodigyopt.prodigy.Prodigy"},
        {
            betas_arg("(0.9, 0.999)"),
            {"beta3", ArgType::number_or_none, "None", check_unit_open},
            eps_arg("1e-8"),
            weight_decay_arg("0"),
            {"decouple", ArgType::flag, "True"},
            {"use_bias_correction", ArgType::flag, "False"},
            {"safeguard_warmup", ArgType::flag, "False"},
            {"d0", ArgType::number, "1e-6", check_positive},
            {"d_coef", ArgType::number, "1.0", check_positive},
            {"growth_rate", ArgType::number, "float('inf')", check_growth_rate},
            {"slice_p", ArgType::number, "1", check_slice_p},
        },
        nullptr,
        append,
    };
    return def;
}

}  // namespace optim
