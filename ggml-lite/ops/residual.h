// How the epilogue ops (linear, matmul, conv2d, conv2d_grad_input; group_norm_grad and
// layer_norm_grad when they make dx alone, ops/norm_params.h) carry a residual (OpDef::
// take_residual, core/fusion.h): Params::i[kResidualSlot] = 1 and the residual r sits after the
// op's own inputs, before a quantized weight's scale (which stays last, ops/quant.h). r has the
// output's shape and dtype; out = op(...) + r, added in f32 before the one rounding. Shared by the
// shape rules and CPU kernels (ops/matmul.cpp, ops/conv.cpp, ops/norms.cpp) and the CUDA launchers.
#pragma once
#include <vector>

#include "ggml-lite/core/cpu_kernel.h"
#include "ggml-lite/core/graph.h"
#include "ggml-lite/core/parallel.h"
#include "ggml-lite/ops/quant.h"

namespace gl {

constexpr int kResidualSlot = 6;

inline bool has_residual(const Params& p) { return p.i[size_t(kResidualSlot)] != 0; }
// The residual's input index (only meaningful when has_residual).
inline int residual_index(const Params& p, int n_in) { return inputs_without_scale(p, n_in) - 1; }
// Inputs of a node without its residual and a quantized weight's scale: what the op's own
// rules count (an optional bias is recognised by this count).
inline int operand_inputs(const Params& p, int n_in) { return inputs_without_scale(p, n_in) - (has_residual(p) ? 1 : 0); }

// Checks the residual of a call whose output is `out`: the flag, then r's dtype and shape.
inline void check_residual(const OpCall& c, const OutSpec& out) {
    c.check(c.p.i[size_t(kResidualSlot)] == 0 || c.p.i[size_t(kResidualSlot)] == 1, "the residual flag must be 0 or 1");
    if (!has_residual(c.p)) return;
    const int r = residual_index(c.p, c.n_in());
    c.check(r >= 0, "a residual needs its input");
    c.check(c.dtype(r) == out.dtype, "the residual must have the output's dtype ", dtype_name(out.dtype));
    c.check(c.shape(r) == out.layout.shape, "the residual must have the output's shape ", out.layout.shape.str());
}

// The residual of a CPU call as dense f32 (nullptr without one), taken before the kernel runs:
// copied when the output y takes its bytes, which the kernel overwrites.
inline const float* cpu_residual(CpuCtx& c, const float* y, std::vector<float>& copy) {
    if (!has_residual(c.p())) return nullptr;
    const float* r = c.in_f32(residual_index(c.p(), c.n_in()));
    if (r != y) return r;
    copy.assign(r, r + c.out[0].numel());
    return copy.data();
}

// y += r after the kernel rounded its product to f32: the same two f32 roundings as the op
// followed by an f32 add, so fused and unfused f32 graphs agree bit for bit; in a half dtype the
// sum is rounded once (CpuCtx::finish).
inline void add_cpu_residual(const float* r, float* y, int64_t n) {
    if (!r) return;
    parallel_for(n, 1 << 14, [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; i++) y[i] = y[i] + r[i];
    });
}

// OpDef::residual_input and OpDef::take_residual of the epilogue ops.
inline int residual_input_of(const Node& n) { return has_residual(n.p) ? residual_index(n.p, int(n.in.size())) : -1; }
inline bool take_residual(Node& n, int32_t r) {
    if (has_residual(n.p) || n.out.size() != 1) return false;
    n.in.insert(n.in.begin() + inputs_without_scale(n.p, int(n.in.size())), r);
    n.p.i[size_t(kResidualSlot)] = 1;
    return true;
}

}  // namespace gl
