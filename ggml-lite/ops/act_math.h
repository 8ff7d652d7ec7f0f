// The activation functions and their slopes, written once for the CPU kernels and the CUDA
// kernels (host and device), so both backends evaluate the same formulas.
#pragma once
#include <math.h>

#include "ggml-lite/core/error.h"
#include "ggml-lite/core/op.h"  // Op, Params
#include "ggml-lite/ops/op_kinds.h"
#include "ggml-lite/ops/rng.h"  // GL_HD

namespace gl::act {

constexpr float kInvSqrt2 = 0.70710678118654752f;
constexpr float kInvSqrt2Pi = 0.39894228040143268f;  // 1 / sqrt(2 pi): the normal density's scale
constexpr float kSqrt2OverPi = 0.79788456080286536f;
constexpr float kTanhCubic = 0.044715f;
constexpr float kQuickGeluScale = 1.702f;

GL_HD float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

template <Act K>
GL_HD float value(float x) {
    if constexpr (K == Act::silu) return x * sigmoid(x);
    if constexpr (K == Act::gelu_erf) return 0.5f * x * (1.0f + erff(x * kInvSqrt2));
    if constexpr (K == Act::gelu_tanh) return 0.5f * x * (1.0f + tanhf(kSqrt2OverPi * (x + kTanhCubic * x * x * x)));
    if constexpr (K == Act::quick_gelu) return x * sigmoid(kQuickGeluScale * x);
    return 0.0f;
}

// d value / dx
template <Act K>
GL_HD float slope(float x) {
    if constexpr (K == Act::silu) {
        float s = sigmoid(x);
        return s * (1.0f + x * (1.0f - s));
    }
    if constexpr (K == Act::gelu_erf) return 0.5f * (1.0f + erff(x * kInvSqrt2)) + x * kInvSqrt2Pi * expf(-0.5f * x * x);
    if constexpr (K == Act::gelu_tanh) {
        float t = tanhf(kSqrt2OverPi * (x + kTanhCubic * x * x * x));
        return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * kSqrt2OverPi * (1.0f + 3.0f * kTanhCubic * x * x);
    }
    if constexpr (K == Act::quick_gelu) {
        float s = sigmoid(kQuickGeluScale * x);
        return s + kQuickGeluScale * x * s * (1.0f - s);
    }
    return 0.0f;
}

// Calls f.template operator()<K>() for the run-time kind k: one dispatch per kernel, not per element.
template <class F>
void dispatch(Act k, F&& f) {
    switch (k) {
        case Act::silu: f.template operator()<Act::silu>(); return;
        case Act::gelu_erf: f.template operator()<Act::gelu_erf>(); return;
        case Act::gelu_tanh: f.template operator()<Act::gelu_tanh>(); return;
        case Act::quick_gelu: f.template operator()<Act::quick_gelu>(); return;
    }
    fail("activation: invalid kind ", int(k));
}

// The kind an activation node computes (silu, gelu with p.i[0] = tanh form, quick_gelu, act_grad).
inline Act kind_of(Op op, const Params& p) {
    switch (op) {
        case Op::silu: return Act::silu;
        case Op::gelu: return p.i[0] ? Act::gelu_tanh : Act::gelu_erf;
        case Op::quick_gelu: return Act::quick_gelu;
        default: return Act(p.i[0]);  // act_grad
    }
}

}  // namespace gl::act
