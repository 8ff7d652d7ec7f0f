// AdEMAMix as bitsandbytes' kernels (ops/optim_ademamix.h): the fp32 step (its 32-bit kernel, for
// tensors under min_8bit_size) and the block-wise 8-bit step (kOptimizerStatic8bit2StateBlockwise):
// m1 and m2 as u8 codes into the signed map, nu into the unsigned one, one fp32 absmax per block of
// 256 each; m1 and m2 keep their sign through requantisation as Lion8bit's moment does. As
// bitsandbytes' 8-bit kernel, an element whose gradient is inf / NaN keeps its parameter and gets
// zero moments (use gstat to skip a whole step).
#include "ggml-lite/ops/optim_ademamix.h"

#include <algorithm>

#include "ggml-lite/ops/adam8bit_codes.h"
#include "ggml-lite/ops/optim_common.h"

namespace gl {

namespace {

Params ademamix_params(const AdemamixOptions& o, int64_t n) {
    Params p;
    p.i[1] = n;
    p.f = {o.alpha, o.beta3, o.t_alpha, o.t_beta3};
    return p;
}

void check_options(const OpCall& c) {
    c.check(std::isfinite(c.p.f[0]) && c.p.f[0] >= 0.0f, "alpha must be finite and >= 0");
    c.check(c.p.f[1] >= 0.0f && c.p.f[1] < 1.0f, "beta3 must lie in [0, 1)");
    c.check(c.p.f[2] >= 0.0f && c.p.f[3] >= 0.0f, "t_alpha and t_beta3 must be >= 0 (0: None)");
}

}  // namespace

// ------ ademamix_step(param, grad, m1, m2, nu, hyper[, gstat]) ------

static std::vector<OutSpec> ademamix_infer(const OpCall& c) {
    check_gstat_input(c, 6);
    const char* names[] = {"param", "grad", "m1", "m2", "nu"};
    for (int i = 0; i < 5; i++) {
        check_state_f32(c, i, names[i]);
        c.check(c.shape(i).numel() == c.shape(0).numel(), names[i], " must have the parameter's element count");
    }
    check_hyper_input(c, 5);
    check_options(c);
    return {};
}

static void ademamix_cpu(CpuCtx& c) {
    const GradGate gate = grad_gate(c, 6);
    if (gate.skip) return;
    float* p = mut_f32(c, 0);
    const float* g = c.in_f32(1);
    float* m1 = mut_f32(c, 2);
    float* m2 = mut_f32(c, 3);
    float* nu = mut_f32(c, 4);
    const AdemamixConsts k = ademamix_consts(c.in_f32(5), c.p().f.data());
    parallel_for(c.in[0].numel(), 1 << 14, [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; i++) {
            ademamix_moments(k, (g[i] * k.gs) * gate.mul, m1[i], m2[i], nu[i]);
            p[i] = ademamix_param(k, p[i], m1[i], m2[i], nu[i]);
        }
    });
}

void ademamix_step(Graph& g, ValueId param, ValueId grad, ValueId m1, ValueId m2, ValueId nu, ValueId hyper,
                   const AdemamixOptions& o, ValueId gstat) {
    g.apply(Op::ademamix_step, present({param, grad, m1, m2, nu, hyper, gstat}), ademamix_params(o, 1));
}

// ------ ademamix8bit_step(params..., grads..., m1..., m2..., nu..., am1..., am2..., anu..., hyper[, gstat]) ------

static std::vector<OutSpec> ademamix8bit_infer(const OpCall& c) {
    const int n = multi_count(c, 8);
    check_gstat_input(c, 8 * n + 1);
    check_blockwise_8bit(c, n, 3, "m1, m2 and nu");
    check_hyper_input(c, 8 * n);
    check_options(c);
    return {};
}

static void ademamix8bit_cpu(CpuCtx& c) {
    const int N = int(c.p().i[1]);
    const GradGate gate = grad_gate(c, 8 * N + 1);
    if (gate.skip) return;
    const AdemamixConsts k = ademamix_consts(c.in_f32(8 * N), c.p().f.data());
    const float* qs = adam8bit_qmap(true);
    const float* qu = adam8bit_qmap(false);
    for (int tensor = 0; tensor < N; tensor++) {
        float* p = mut_f32(c, tensor);
        const float* g = c.in_f32(N + tensor);
        uint8_t *c1 = mut_u8(c, 2 * N + tensor), *c3 = mut_u8(c, 3 * N + tensor), *c2 = mut_u8(c, 4 * N + tensor);
        float *a1 = mut_f32(c, 5 * N + tensor), *a3 = mut_f32(c, 6 * N + tensor), *a2 = mut_f32(c, 7 * N + tensor);
        const int64_t n = c.in[size_t(tensor)].numel(), blocks = (n + kAdam8bitBlock - 1) / kAdam8bitBlock;
        parallel_for(blocks, 16, [&](int64_t lo, int64_t hi) {
            float s1[kAdam8bitBlock], s2[kAdam8bitBlock], s3[kAdam8bitBlock];
            for (int64_t b = lo; b < hi; b++) {
                const int64_t base = b * kAdam8bitBlock, len = std::min<int64_t>(kAdam8bitBlock, n - base);
                float x1 = 0.0f, x2 = 0.0f, x3 = 0.0f;
                for (int64_t j = 0; j < len; j++) {
                    const int64_t i = base + j;
                    const float gi = (g[i] * k.gs) * gate.mul;
                    if (std::isfinite(gi)) {
                        s1[j] = qs[c1[i]] * a1[b];
                        s2[j] = qu[c2[i]] * a2[b];
                        s3[j] = qs[c3[i]] * a3[b];
                        ademamix_moments(k, gi, s1[j], s3[j], s2[j]);
                        p[i] = ademamix_param(k, p[i], s1[j], s3[j], s2[j]);
                    } else {
                        s1[j] = s2[j] = s3[j] = 0.0f;
                    }
                    x1 = std::max(x1, std::fabs(s1[j]));
                    x2 = std::max(x2, std::fabs(s2[j]));
                    x3 = std::max(x3, std::fabs(s3[j]));
                }
                const float i1 = adam8bit_inverse(x1), i2 = adam8bit_inverse(x2), i3 = adam8bit_inverse(x3);
                for (int64_t j = 0; j < len; j++) {
                    const int64_t i = base + j;
                    c1[i] = uint8_t(lion8bit_code(qs, s1[j], x1, i1));
                    c2[i] = uint8_t(adam8bit_quantize(qu, adam8bit_normalize(s2[j], x2, i2)));
                    c3[i] = uint8_t(lion8bit_code(qs, s3[j], x3, i3));
                }
                a1[b] = x1;
                a2[b] = x2;
                a3[b] = x3;
            }
        });
    }
}

void ademamix8bit_step(Graph& g, const std::vector<ValueId>& params, const std::vector<ValueId>& grads,
                       const std::vector<ValueId>& m1, const std::vector<ValueId>& m2, const std::vector<ValueId>& nu,
                       const std::vector<ValueId>& absmax_m1, const std::vector<ValueId>& absmax_m2,
                       const std::vector<ValueId>& absmax_nu, ValueId hyper, const AdemamixOptions& o, ValueId gstat) {
    g.apply(Op::ademamix8bit_step,
            multi_inputs({&params, &grads, &m1, &m2, &nu, &absmax_m1, &absmax_m2, &absmax_nu}, {hyper, gstat}),
            ademamix_params(o, int64_t(params.size())));
}

const OpDef def_ademamix_step{"ademamix_step", "optim_ademamix", ademamix_infer, step_cost, nullptr, ademamix_cpu,
                              kOpNoGrad | kOpMutates};
const OpDef def_ademamix8bit_step{"ademamix8bit_step", "optim_ademamix", ademamix8bit_infer, multi_step_cost, nullptr,
                                  ademamix8bit_cpu, kOpNoGrad | kOpMutates};

}  // namespace gl
