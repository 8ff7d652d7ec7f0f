// Lion8bit as bitsandbytes.optim.Lion8bit: Lion (as lion_pytorch's step) with its momentum block-wise
// 8-bit in the signed dynamic map (ops/adam8bit.cpp, the quantisation AdamW8bit uses). Tensors under
// kAdam8bitMinElements (bitsandbytes' min_8bit_size, 4096) keep fp32 state and run the fp32 Lion step,
// which is what bitsandbytes' 32-bit Lion kernel computes. State per param: exp_avg (f32) for small
// tensors; otherwise exp_avg.q8 (u8 codes, starting at the code of zero) and exp_avg.absmax (f32, one
// per block of kAdam8bitBlock).
#include "ggml-lite/ops/builder.h"
#include "optim/descriptor.h"

namespace optim {

namespace {
// Per parameter group two step nodes: the fp32 step over its small tensors, the 8-bit step over the rest.
void append(UpdateBuilder& b) {
    const float zero_code = float(gl::adam8bit_quantize(gl::adam8bit_qmap(true), 0.0f));
    for (size_t gi = 0; gi < b.groups.size(); gi++) {
        struct Tensors {
            std::vector<gl::ValueId> params, grads, m, am;
        } small, big;
        for (const UpdateParam& p : b.of_group(gi)) {
            const gl::Shape s = b.g.shape(p.param);
            Tensors& t = s.numel() < gl::kAdam8bitMinElements ? small : big;
            t.params.push_back(p.param);
            t.grads.push_back(p.grad);
            if (&t == &small) {
                t.m.push_back(b.state(p, "exp_avg", gl::DType::f32, s));
                continue;
            }
            const gl::Shape blocks{(s.numel() + gl::kAdam8bitBlock - 1) / gl::kAdam8bitBlock};
            t.m.push_back(b.state(p, "exp_avg.q8", gl::DType::u8, s, StateInit::filled(zero_code)));
            t.am.push_back(b.state(p, "exp_avg.absmax", gl::DType::f32, blocks));
        }
        const gl::ValueId hyper = b.groups[gi].hyper;
        if (!small.params.empty()) gl::lion_step(b.g, small.params, small.grads, small.m, hyper, b.gstat);
        if (!big.params.empty()) gl::lion8bit_step(b.g, big.params, big.grads, big.m, big.am, hyper, b.gstat);
    }
}
// bitsandbytes' keywords that Lion8bit takes (it has no amsgrad or optim_bits).
std::vector<ArgDef> lion8bit_args() {
    std::vector<ArgDef> args = bnb_inert_args({betas_arg("(0.9, 0.99)"), weight_decay_arg("0")});
    std::erase_if(args, [](const ArgDef& a) { return std::string(a.name) == "amsgrad" || std::string(a.name) == "optim_bits"; });
    return args;
}
}  // namespace

const OptimizerDef& optimizer_lion8bit() {
    static const OptimizerDef def{
        "Lion8bit",
        {"bitsandbytes.optim.Lion8bit", "bitsandbytes.optim.lion.Lion8bit"},
        lion8bit_args(),
        nullptr,
        append,
    };
    return def;
}

}  // namespace optim
