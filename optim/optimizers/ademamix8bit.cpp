// AdEMAMix8bit as bitsandbytes.optim.AdEMAMix8bit (Pagliardini et al. 2024): Adam's two moments plus a
// slow EMA m2 of the gradient by beta3, mixed into the step with weight alpha, the alpha and beta3
// warm-ups over t_alpha / t_beta3 steps when given (ops/optim_ademamix.h). Its moments are block-wise
// 8-bit (m1, m2 in the signed dynamic map, nu in the unsigned one, absmax per 256: ops/optim_ademamix.cpp);
// tensors under kAdam8bitMinElements (bitsandbytes' min_8bit_size, 4096) keep fp32 state and its
// 32-bit kernel's step. kohya has no AdEMAMix8bit name of its own (its 8-bit branch leaves it to
// the class path, --optimizer_type bitsandbytes.optim.AdEMAMix8bit); both spellings are accepted.
// bitsandbytes packs m2 behind m1 in one buffer whose 8-bit block scales it indexes at (n + i) / 256,
// which for a tensor whose size is not a multiple of 256 lands m2's first block on m1's last scale;
// here every moment has its own absmax per block (LoRA tensors are multiples of 256 for ranks
// divisible by 4). State per param: m1, m2, nu (f32) for small tensors; otherwise m1.q8, m2.q8,
// nu.q8 (u8) and m1.absmax, m2.absmax, nu.absmax (f32, one per block of kAdam8bitBlock).
#include "ggml-lite/core/error.h"
#include "ggml-lite/ops/optim_ademamix.h"
#include "optim/descriptor.h"

namespace optim {

namespace {

gl::AdemamixOptions options(const OptimizerConfig& c) {
    gl::AdemamixOptions o;
    o.alpha = float(c.number("alpha"));
    o.beta3 = float(c.triple("betas", 2));
    o.t_alpha = c.is_none("t_alpha") ? 0.0f : float(c.number("t_alpha"));
    o.t_beta3 = c.is_none("t_beta3") ? 0.0f : float(c.number("t_beta3"));
    return o;
}

void append(UpdateBuilder& b) {
    const float zero_signed = float(gl::adam8bit_quantize(gl::adam8bit_qmap(true), 0.0f));
    const float zero_unsigned = float(gl::adam8bit_quantize(gl::adam8bit_qmap(false), 0.0f));
    const gl::AdemamixOptions o = options(b.cfg);
    for (size_t gi = 0; gi < b.groups.size(); gi++) {
        std::vector<gl::ValueId> params, grads, m1, m2, nu, a1, a2, an;
        const gl::ValueId hyper = b.groups[gi].hyper;
        for (const UpdateParam& p : b.of_group(gi)) {
            const gl::Shape s = b.g.shape(p.param);
            if (s.numel() < gl::kAdam8bitMinElements) {
                gl::ademamix_step(b.g, p.param, p.grad, b.state(p, "m1", gl::DType::f32, s),
                                  b.state(p, "m2", gl::DType::f32, s), b.state(p, "nu", gl::DType::f32, s), hyper, o,
                                  b.gstat);
                continue;
            }
            const gl::Shape blocks{(s.numel() + gl::kAdam8bitBlock - 1) / gl::kAdam8bitBlock};
            params.push_back(p.param);
            grads.push_back(p.grad);
            m1.push_back(b.state(p, "m1.q8", gl::DType::u8, s, StateInit::filled(zero_signed)));
            m2.push_back(b.state(p, "m2.q8", gl::DType::u8, s, StateInit::filled(zero_signed)));
            nu.push_back(b.state(p, "nu.q8", gl::DType::u8, s, StateInit::filled(zero_unsigned)));
            a1.push_back(b.state(p, "m1.absmax", gl::DType::f32, blocks));
            a2.push_back(b.state(p, "m2.absmax", gl::DType::f32, blocks));
            an.push_back(b.state(p, "nu.absmax", gl::DType::f32, blocks));
        }
        if (!params.empty()) gl::ademamix8bit_step(b.g, params, grads, m1, m2, nu, a1, a2, an, hyper, o, b.gstat);
    }
}

const char* check_alpha(const ArgValue& v) { return v.x[0] >= 0 && v.x[0] < 1e30 ? nullptr : "must be finite and >= 0"; }
const char* check_steps(const ArgValue& v) {
    return v.none || (v.x[0] >= 0 && v.x[0] <= 1e7 && v.x[0] == double(int64_t(v.x[0])))
               ? nullptr
               : "must be None or a whole number of steps in [0, 1e7] (0: None, as bitsandbytes tests it)";
}
const char* check_4096(const ArgValue& v) {
    return v.x[0] == 4096.0 ? nullptr : "only 4096 is supported (tensors below it keep 32-bit state)";
}

// The beta3 warm-up takes the logarithms of beta1 and beta3.
void check(const OptimizerConfig& c) {
    if (c.is_none("t_beta3") || c.number("t_beta3") == 0) return;
    GL_CHECK(c.triple("betas", 0) > 0 && c.triple("betas", 2) > 0, c.name(),
             ": t_beta3 needs betas[0] and betas[2] > 0 (bitsandbytes takes their logarithms)");
}

std::vector<ArgDef> ademamix8bit_args() {
    return {
        {"betas", ArgType::triple, "(0.9, 0.999, 0.9999)", check_unit_open,
         {&OptimizerConfig::beta1, &OptimizerConfig::beta2}},
        {"alpha", ArgType::number, "5.0", check_alpha},
        {"t_alpha", ArgType::number_or_none, "None", check_steps},
        {"t_beta3", ArgType::number_or_none, "None", check_steps},
        eps_arg("1e-8"),
        weight_decay_arg("1e-2"),
        {"min_8bit_size", ArgType::number, "4096", check_4096, {}, "bitsandbytes' default, as here"},
        {"is_paged", ArgType::flag, "False", nullptr, {}, "bitsandbytes' paging; the plan here holds the state on the device"},
    };
}

}  // namespace

const OptimizerDef& optimizer_ademamix8bit() {
    static const OptimizerDef def{
        "AdEMAMix8bit",
        {"bitsandbytes.optim.AdEMAMix8bit", "bitsandbytes.optim.ademamix.AdEMAMix8bit"},
        ademamix8bit_args(),
        check,
        append,
    };
    return def;
}

}  // namespace optim
