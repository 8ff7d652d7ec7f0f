// Input checks, cost and the gstat gate shared by the optimizer-step families (ops/optim*.cpp,
// ops/adam8bit.cpp).
#pragma once
#include "ggml-lite/ops/family.h"

namespace gl {

inline void check_state_f32(const OpCall& c, int i, const char* what) {
    c.check(c.dtype(i) == DType::f32, what, " must be f32");
    c.check(c.layout(i).is_contiguous() && c.g.v(c.in[size_t(i)]).base == c.in[size_t(i)], what, " must be a dense storage owner");
}

inline void check_hyper_input(const OpCall& c, int i) {
    check_state_f32(c, i, "hyper");
    c.check(c.shape(i).numel() == kHyperSize, "hyper must hold ", int(kHyperSize), " floats");
}

// gstat is optional: present when the call has one input more than `n_fixed`.
inline void check_gstat_input(const OpCall& c, int n_fixed) {
    c.check(c.n_in() == n_fixed || c.n_in() == n_fixed + 1, "takes ", n_fixed, " inputs plus an optional gstat");
    if (c.n_in() == n_fixed + 1) {
        check_state_f32(c, n_fixed, "gstat");
        c.check(c.shape(n_fixed).numel() == kGstatSize, "gstat must hold ", int(kGstatSize), " floats");
    }
}

// Inputs in builder order, dropping kNoValue (optional state and gstat).
inline std::vector<ValueId> present(std::initializer_list<ValueId> ids) {
    std::vector<ValueId> r;
    for (ValueId v : ids)
        if (v != kNoValue) r.push_back(v);
    return r;
}

// A step over N tensors (p.i[1] = N) takes `per_tensor` inputs per tensor, each kind as a run of N
// (params..., grads..., ...), then its shared inputs.
inline int multi_count(const OpCall& c, int per_tensor) {
    const int64_t n = c.p.i[1];
    c.check(n >= 1 && per_tensor * n <= c.n_in(), "needs a tensor count >= 1 (p.i[1] = ", n, ") and ", per_tensor,
            " inputs per tensor");
    return int(n);
}
// The inputs of such a step: each list (equal lengths) as a run, then the shared inputs present.
inline std::vector<ValueId> multi_inputs(std::initializer_list<const std::vector<ValueId>*> lists,
                                         std::initializer_list<ValueId> shared) {
    const size_t n = (*lists.begin())->size();
    std::vector<ValueId> r;
    for (const std::vector<ValueId>* l : lists) {
        GL_CHECK(l->size() == n, "optimizer step: ", l->size(), " tensors of one kind, ", n, " of another");
        r.insert(r.end(), l->begin(), l->end());
    }
    for (ValueId v : shared)
        if (v != kNoValue) r.push_back(v);
    return r;
}

inline Cost step_cost(const OpCall& c) { return {12.0 * double(c.shape(0).numel()), call_bytes_all_in(c) * 1.6}; }
// The same over the N updated tensors of a multi-tensor step (inputs 0 .. N - 1).
inline Cost multi_step_cost(const OpCall& c) {
    double elems = 0;
    for (int k = 0; k < int(c.p.i[1]); k++) elems += double(c.shape(k).numel());
    return {12.0 * elems, call_bytes_all_in(c) * 1.6};
}

// Mutable dense f32 view of input i (the ops update leaves in place).
inline float* mut_f32(CpuCtx& c, int i) { return static_cast<float*>(c.in[size_t(i)].data) + c.in[size_t(i)].layout.offset; }
// The same for u8 codes (the 8-bit steps' states).
inline uint8_t* mut_u8(CpuCtx& c, int i) { return static_cast<uint8_t*>(c.in[size_t(i)].data) + c.in[size_t(i)].layout.offset; }

// The inputs of a block-wise 8-bit step over n tensors (ops/adam8bit.cpp, ops/optim_ademamix.cpp):
// params... and grads... (f32), then n_codes runs of u8 codes of the parameter's element count
// (`codes` names them in messages: "m and v"), then as many runs of f32 absmax, one per block.
void check_blockwise_8bit(const OpCall& c, int n, int n_codes, const char* codes);

// What gstat (input `at`, when present) asks of a step: the gradient factor and whether to skip.
struct GradGate {
    float mul = 1.0f;
    bool skip = false;
};
inline GradGate grad_gate(CpuCtx& c, int at) {
    if (at >= c.n_in()) return {};
    const float* s = c.in_f32(at);
    return {s[kGsMul], s[kGsNonfinite] != 0.0f};
}

}  // namespace gl
