// Adafactor as transformers.optimization.Adafactor (Shazeer & Stern 2018): factored second moments,
// relative step size and update clipping (ops/optim_adafactor.cpp). A param is factored as PyTorch
// holds it: its torch shape when one is given (kohya's 1x1-conv LoRA weights are [r, in, 1, 1] there,
// factored 1 x 1), a 4-D conv weight as [Cout, Cin, kh, kw]. State per param: exp_avg (only with a
// beta1), and exp_avg_sq_row, exp_avg_sq_col (factored) or exp_avg_sq (f32).
#include <cmath>

#include "ggml-lite/core/error.h"
#include "ggml-lite/ops/builder.h"
#include "optim/descriptor.h"

namespace optim {

namespace {

gl::AdafactorOptions options(const OptimizerConfig& c) {
    gl::AdafactorOptions o;
    o.relative_step = c.flag("relative_step");
    o.scale_parameter = c.flag("scale_parameter");
    o.warmup_init = c.flag("warmup_init");
    o.decay_rate = float(c.number("decay_rate"));
    o.eps2 = float(c.pair("eps").second);
    o.clip_threshold = float(c.number("clip_threshold"));
    return o;
}

void check(const OptimizerConfig& c) {
    if (c.flag("warmup_init") && !c.flag("relative_step"))
        gl::fail("optimizer_args: warmup_init=True requires relative_step=True (as transformers' Adafactor)");
}

void append(UpdateBuilder& b) {
    const gl::AdafactorOptions o = options(b.cfg);
    const bool first_moment = !b.cfg.is_none("beta1");
    for (const UpdateParam& p : b.params) {
        const gl::Shape s = b.g.shape(p.param);
        const gl::ValueId m = first_moment ? b.state(p, "exp_avg", gl::DType::f32, s) : gl::kNoValue;
        const gl::Shape torch_shape = p.torch_shape.nd >= 2 && s.nd >= 2 ? p.torch_shape : gl::Shape{};
        const auto [rows, cols] = gl::adafactor_state_sizes(s, torch_shape);
        gl::ValueId v_row, v_col = gl::kNoValue;
        if (cols == 0) {
            v_row = b.state(p, "exp_avg_sq", gl::DType::f32, s);
        } else {
            v_row = b.state(p, "exp_avg_sq_row", gl::DType::f32, gl::Shape{rows});
            v_col = b.state(p, "exp_avg_sq_col", gl::DType::f32, gl::Shape{cols});
        }
        gl::adafactor_step(b.g, p.param, p.grad, m, v_row, v_col, p.hyper, o, b.gstat, torch_shape);
    }
}

const char* check_eps(const ArgValue& v) {
    const bool ok = v.x[0] >= 0 && v.x[1] > 0 && std::isfinite(v.x[0]) && std::isfinite(v.x[1]);
    return ok ? nullptr : "eps1 must be >= 0 and eps2 > 0";
}
const char* check_negative(const ArgValue& v) {
    return v.x[0] < 0 && std::isfinite(v.x[0]) ? nullptr : "must be negative (beta2_t = 1 - t^decay_rate)";
}

}  // namespace

// eps = (eps1, eps2): eps1 is the hyper tensor's eps (added to the squared gradient), eps2 scales the
// relative step; beta1 None: no first moment (the hyper's beta1 is then 0).
const OptimizerDef& optimizer_adafactor() {
    static const OptimizerDef def{
        "Adafactor",
        {"transformers.optimization.Adafactor", "transformers.Adafactor"},
        {
            {"eps", ArgType::pair, "(1e-30, 1e-3)", check_eps, {&OptimizerConfig::eps}},
            {"clip_threshold", ArgType::number, "1.0", check_positive},
            {"decay_rate", ArgType::number, "-0.8", check_negative},
            {"beta1", ArgType::number_or_none, "None", check_unit_open, {&OptimizerConfig::beta1}},
            weight_decay_arg("0.0"),
            {"scale_parameter", ArgType::flag, "True"},
            {"relative_step", ArgType::flag, "True"},
            {"warmup_init", ArgType::flag, "False"},
        },
        check,
        append,
    };
    return def;
}

}  // namespace optim
