// AdamW8bit as bitsandbytes.optim.AdamW8bit (Dettmers et al. 2021): both moments block-wise 8-bit
// (ops/adam8bit.cpp), weight decay after the step as bitsandbytes applies it. Tensors under
// kAdam8bitMinElements (bitsandbytes' min_8bit_size, 4096) keep fp32 state and run the fp32 op in
// bitsandbytes' order. State per param: exp_avg, exp_avg_sq (f32) for small tensors; otherwise
// exp_avg.q8, exp_avg_sq.q8 (u8 codes into the signed / unsigned maps, starting at the code of zero)
// and exp_avg.absmax, exp_avg_sq.absmax (f32, one per block of kAdam8bitBlock).
#include "ggml-lite/ops/builder.h"
#include "optim/descriptor.h"

namespace optim {

namespace {
void append(UpdateBuilder& b) {
    const float zero_signed = float(gl::adam8bit_quantize(gl::adam8bit_qmap(true), 0.0f));
    const float zero_unsigned = float(gl::adam8bit_quantize(gl::adam8bit_qmap(false), 0.0f));
    for (const UpdateParam& p : b.params) {
        const gl::Shape s = b.g.shape(p.param);
        if (s.numel() < gl::kAdam8bitMinElements) {
            const gl::ValueId m = b.state(p, "exp_avg", gl::DType::f32, s);
            const gl::ValueId v = b.state(p, "exp_avg_sq", gl::DType::f32, s);
            gl::adamw_step(b.g, p.param, p.grad, m, v, p.hyper, /*decay_after*/ true, b.gstat);
            continue;
        }
        const gl::Shape blocks{(s.numel() + gl::kAdam8bitBlock - 1) / gl::kAdam8bitBlock};
        const gl::ValueId m = b.state(p, "exp_avg.q8", gl::DType::u8, s, StateInit::filled(zero_signed));
        const gl::ValueId v = b.state(p, "exp_avg_sq.q8", gl::DType::u8, s, StateInit::filled(zero_unsigned));
        const gl::ValueId am = b.state(p, "exp_avg.absmax", gl::DType::f32, blocks);
        const gl::ValueId av = b.state(p, "exp_avg_sq.absmax", gl::DType::f32, blocks);
        gl::adamw8bit_step(b.g, p.param, p.grad, m, v, am, av, p.hyper, b.gstat);
    }
}
}  // namespace

const OptimizerDef& optimizer_adamw8bit() {
    static const OptimizerDef def{
        "AdamW8bit",
        {"bitsandbytes.optim.AdamW8bit", "bitsandbytes.optim.adamw.AdamW8bit"},
        bnb_inert_args({betas_arg("(0.9, 0.999)"), eps_arg("1e-8"), weight_decay_arg("1e-2")}),
        nullptr,
        append,
    };
    return def;
}

}  // namespace optim
