// SGDNesterov8bit as kohya builds it: bitsandbytes.optim.SGD8bit(nesterov=True), momentum=0.9 unless
// given. bitsandbytes' SGD8bit takes nesterov and dampening and uses neither: its MOMENTUM kernels step
// heavy-ball SGD, buf = g at step 1, else momentum buf + g, p -= lr buf, with the decay coupled (g +=
// wd p). So this is not SGDNesterov's update (torch's Nesterov step) in 8 bits, but what kohya runs.
// The buffer is block-wise 8-bit in the signed dynamic map (ops/adam8bit.cpp, Lion8bit's
// quantisation); tensors under kAdam8bitMinElements (bitsandbytes' min_8bit_size, 4096) keep fp32
// state and run sgd_step without Nesterov, what bitsandbytes' 32-bit MOMENTUM kernel computes.
// State per param: momentum_buffer (f32) for small tensors; otherwise momentum_buffer.q8 (u8 codes)
// and momentum_buffer.absmax (f32, one per block of kAdam8bitBlock).
#include "ggml-lite/ops/builder.h"
#include "optim/descriptor.h"

namespace optim {

namespace {

// Per parameter group two step nodes: the fp32 step per small tensor, one 8-bit step over the rest.
void append(UpdateBuilder& b) {
    const float zero_code = float(gl::adam8bit_quantize(gl::adam8bit_qmap(true), 0.0f));
    const float momentum = float(b.cfg.number("momentum"));
    for (size_t gi = 0; gi < b.groups.size(); gi++) {
        std::vector<gl::ValueId> params, grads, buf, absmax;
        const gl::ValueId hyper = b.groups[gi].hyper;
        for (const UpdateParam& p : b.of_group(gi)) {
            const gl::Shape s = b.g.shape(p.param);
            if (s.numel() < gl::kAdam8bitMinElements) {
                const gl::ValueId m = b.state(p, "momentum_buffer", gl::DType::f32, s);
                gl::sgd_step(b.g, p.param, p.grad, m, hyper, momentum, 0.0f, /*nesterov*/ false, b.gstat);
                continue;
            }
            const gl::Shape blocks{(s.numel() + gl::kAdam8bitBlock - 1) / gl::kAdam8bitBlock};
            params.push_back(p.param);
            grads.push_back(p.grad);
            buf.push_back(b.state(p, "momentum_buffer.q8", gl::DType::u8, s, StateInit::filled(zero_code)));
            absmax.push_back(b.state(p, "momentum_buffer.absmax", gl::DType::f32, blocks));
        }
        if (!params.empty()) gl::sgd8bit_step(b.g, params, grads, buf, absmax, hyper, momentum, b.gstat);
    }
}

const char* check_momentum(const ArgValue& v) {
    return v.x[0] > 0 && v.x[0] <= 1 ? nullptr
                                     : "must lie in (0, 1] (bitsandbytes: 'SGD without momentum is not supported!')";
}
const char* check_none(const ArgValue& v) { return v.none ? nullptr : "only None is supported"; }
const char* check_4096(const ArgValue& v) {
    return v.x[0] == 4096.0 ? nullptr : "only 4096 is supported (tensors below it keep 32-bit state)";
}

}  // namespace

const OptimizerDef& optimizer_sgd_nesterov8bit() {
    static const OptimizerDef def{
        "SGDNesterov8bit",
        {},
        {
            {"momentum", ArgType::number, "0.9", check_momentum},
            {"dampening", ArgType::number, "0", nullptr, {}, "bitsandbytes' SGD8bit takes it and never uses it"},
            weight_decay_arg("0"),
            {"args", ArgType::number_or_none, "None", check_none, {}, "keeps that feature off, as here"},
            {"min_8bit_size", ArgType::number, "4096", check_4096, {}, "bitsandbytes' default, as here"},
        },
        nullptr,
        append,
        "bitsandbytes' SGD8bit ignores nesterov=True (kohya passes it): heavy-ball momentum, as kohya runs it",
        "bitsandbytes.optim.sgd.SGD8bit",
        "momentum=0.9",
    };
    return def;
}

}  // namespace optim
