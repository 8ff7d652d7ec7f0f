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
// Per parameter group two step nodes: the fp32 step over its small tensors, the 8-bit step over the rest.
void append(UpdateBuilder& b) {
    const float zero_signed = float(gl::adam8bit_quantize(gl::adam8bit_qmap(true), 0.0f));
    const float zero_unsigned = float(gl::adam8bit_quantize(gl::adam8bit_qmap(false), 0.0f));
    for (size_t gi = 0; gi < b.groups.size(); gi++) {
        struct Tensors {
            std::vector<gl::ValueId> params, grads, m, v, am, av;
        } small, big;
        for (const UpdateParam& p : b.of_group(gi)) {
            const gl::Shape s = b.g.shape(p.param);
            Tensors& t = s.numel() < gl::kAdam8bitMinElements ? small : big;
            t.params.push_back(p.param);
            t.grads.push_back(p.grad);
            if (&t == &small) {
                t.m.push_back(b.state(p, "exp_avg", gl::DType::f32, s));
                t.v.push_back(b.state(p, "exp_avg_sq", gl::DType::f32, s));
                continue;
            }
            const gl::Shape blocks{(s.numel() + gl::kAdam8bitBlock - 1) / gl::kAdam8bitBlock};
            t.m.push_back(b.state(p, "exp_avg.q8", gl::DType::u8, s, StateInit::filled(zero_signed)));
            t.v.push_back(b.state(p, "exp_avg_sq.q8", gl::DType::u8, s, StateInit::filled(zero_unsigned)));
            t.am.push_back(b.state(p, "exp_avg.absmax", gl::DType::f32, blocks));
            t.av.push_back(b.state(p, "exp_avg_sq.absmax", gl::DType::f32, blocks));
        }
        const gl::ValueId hyper = b.groups[gi].hyper;
        if (!small.params.empty())
            gl::adamw_step(b.g, small.params, small.grads, small.m, small.v, hyper, /*decay_after*/ true, b.gstat);
        if (!big.params.empty())
            gl::adamw8bit_step(b.g, big.params, big.grads, big.m, big.v, big.am, big.av, hyper, b.gstat);
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
