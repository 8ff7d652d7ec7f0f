// What the op cases of the block-wise 8-bit steps share (tests/cases_adam8bit.cpp, cases_lion8bit.cpp,
// cases_sgd8bit.cpp, cases_ademamix.cpp): the gstat leaf, and for the 1-state steps (Lion8bit,
// SGD8bit) the scalar reference of bitsandbytes' 1-state block-wise kernel with an exhaustive
// nearest-code search, and the two-tensor case.
#pragma once
#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include "op_cases.h"

namespace gltest::q8 {

// gate: 0 no gstat (kNoValue), 1 a gstat scaling the gradient by 0.25, 2 one with its non-finite flag set.
inline gl::ValueId gate_leaf(CaseBuilder& b, int gate) {
    if (gate <= 0) return gl::kNoValue;
    const gl::ValueId gs = b.c("gstat", {gl::kGstatSize});
    b.set(gs, {0.25f, gate == 2 ? 1.0f : 0.0f, 3.0f, 4.0f});
    return gs;
}

// One tensor of a 1-state step: leaves p, g, codes, absmax, then hyper and the optional gstat. Per
// 256-block, elem(p, g, gmul, mi) updates p from the gradient g (gstat multiplier gmul) and the
// element's dequantised state mi and returns its new state; each state is then requantised to the
// nearest code of the block's new absmax, its sign kept as bitsandbytes keeps it. Returns p, codes, absmax.
template <class Elem>
std::vector<std::vector<float>> one_state_reference(const std::vector<std::vector<float>>& in, const Elem& elem) {
    std::vector<float> p = in[0], cm = in[2], am = in[3];
    const auto& g = in[1];
    const bool has_gstat = in.size() > 5 && in[5].size() == size_t(gl::kGstatSize);
    if (has_gstat && in[5][gl::kGsNonfinite] != 0.0f) return {p, cm, am};
    const float gmul = has_gstat ? in[5][gl::kGsMul] : 1.0f;
    const float* qs = gl::adam8bit_qmap(true);
    for (size_t b0 = 0; b0 < p.size(); b0 += 256) {
        const size_t b = b0 / 256, e = std::min(p.size(), b0 + 256);
        std::vector<float> m(e - b0);
        float mx = 0;
        for (size_t i = b0; i < e; i++) {
            m[i - b0] = elem(p[i], g[i], gmul, qs[int(cm[i])] * am[b]);
            mx = std::max(mx, std::fabs(m[i - b0]));
        }
        for (size_t i = b0; i < e; i++) {
            const float mi = m[i - b0], r = mx > 0 ? 1.0f / mx : 0.0f;
            const float x = !(mx > 0) ? 0.0f : std::isinf(r) ? mi / mx : mi * r;
            int best = 0;
            for (int k = 1; k < 256; k++)
                if (std::fabs(x - qs[k]) < std::fabs(x - qs[best])) best = k;
            if (std::signbit(qs[best]) != std::signbit(mi)) best += mi > 0 ? 1 : -1;  // bitsandbytes keeps the sign
            cm[i] = float(best);
        }
        am[b] = mx;
    }
    return {p, cm, am};
}

using OneStateStep = std::function<void(gl::Graph&, const std::vector<gl::ValueId>& params,
                                        const std::vector<gl::ValueId>& grads, const std::vector<gl::ValueId>& codes,
                                        const std::vector<gl::ValueId>& absmax, gl::ValueId hyper)>;

// Two tensors (4096 + 300 and 4096 elements) of one group in one node: per tensor leaves param,
// grad, codes (named `codes`), absmax (named `absmax`), then hyper; outputs p, codes, absmax per tensor.
inline void build_two_tensors(CaseBuilder& b, const char* codes, const char* absmax, const std::vector<float>& hyper,
                              const OneStateStep& step) {
    b.compute = gl::DType::f32;
    std::vector<gl::ValueId> ps, gs, ms, ams;
    for (int64_t n : {4096 + 300, 4096}) {
        ps.push_back(b.c("param", {n}));
        gs.push_back(b.c("grad", {n}, -0.05f, 0.05f));
        ms.push_back(b.c(codes, {n}, 0.0f, 255.0f, gl::DType::u8));
        ams.push_back(b.c(absmax, {(n + 255) / 256}, 0.001f, 0.01f));
    }
    gl::ValueId h = b.c("hyper", {gl::kHyperSize});
    b.set(h, hyper);
    step(b.g, ps, gs, ms, ams, h);
    for (size_t k = 0; k < ps.size(); k++)
        for (gl::ValueId x : {ps[k], ms[k], ams[k]}) b.out(x);
}

// Each tensor of build_two_tensors' case as the single-tensor reference sees it.
inline std::vector<std::vector<float>> two_tensor_reference(
    const std::vector<std::vector<float>>& in,
    const std::function<std::vector<std::vector<float>>(const std::vector<std::vector<float>>&)>& one_tensor) {
    std::vector<std::vector<float>> out;
    for (size_t k = 0; k < 2; k++) {
        std::vector<std::vector<float>> one(in.begin() + long(4 * k), in.begin() + long(4 * k + 4));
        one.push_back(in[8]);
        for (auto& t : one_tensor(one)) out.push_back(std::move(t));
    }
    return out;
}

}  // namespace gltest::q8
