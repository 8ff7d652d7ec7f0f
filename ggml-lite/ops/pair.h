// How linear and matmul carry a second product (the fusion pass's joined pair, core/fusion.h):
// Params::i[kPairSlot] = 1 and the pair's operands a2, b2 follow the op's own operands (after
// linear's bias), before a residual (ops/residual.h):
//   linear {x1, w1, [bias], x2, w2, [r]}: out = x1 w1^T + x2 w2^T (+ bias) (+ r)
//   matmul {a1, b1, a2, b2, [r]}:          out = op(a1) op(b1) + op(a2) op(b2) (+ r)
// The second product has the first's output: linear's x2 has x1's leading dims and w2 w1's rows
// (K2 = x2's last dim, any size); matmul's a2 has a1's batch dims and M, b2 b1's N, both read
// with the node's one pair of transpose flags (b2 2-D and shared, or batched, independently of
// b1). One float dtype for all, no quantized weight. Both products are summed in f32 (the CPU
// kernel: one double accumulator over K1 then K2) and rounded once, as one product over the
// concatenated K would be. The pair only exists after fusion: it has no backward rule (asking
// for one is an error). Shared by the shape rules and CPU kernels (ops/matmul.cpp), the fusion
// pass (through OpDef::join_pair) and the CUDA launcher (cuda/matmul.cu).
#pragma once
#include "ggml-lite/core/graph.h"
#include "ggml-lite/ops/quant.h"
#include "ggml-lite/ops/residual.h"

namespace gl {

constexpr int kPairSlot = 5;

inline bool has_pair(const Params& p) { return p.i[size_t(kPairSlot)] != 0; }
// The input index of a2 (b2 follows); only meaningful when has_pair.
inline int pair_index(const Params& p, int n_in) { return operand_inputs(p, n_in) - 2; }
// Inputs of the first product (with linear's bias): what the op's own rules count.
inline int first_operands(const Params& p, int n_in) { return operand_inputs(p, n_in) - (has_pair(p) ? 2 : 0); }

// OpDef::join_pair of linear and matmul: q takes p's product as its second pair when both are one
// op with one pair of transpose flags, neither quantized nor joined yet, p without a bias. q's
// output stays as it is (the caller gives it p's); its inputs become {q's own, p.a, p.b, q's residual}.
inline bool join_pair(Node& q, const Node& p) {
    if (q.op != p.op || q.out.size() != 1 || p.out.size() != 1) return false;
    if (is_quantized(q.p) || is_quantized(p.p) || has_pair(q.p) || has_pair(p.p)) return false;
    if (q.p.i[0] != p.p.i[0] || q.p.i[1] != p.p.i[1]) return false;  // matmul's transpose flags (0 for linear)
    if (first_operands(p.p, int(p.in.size())) != 2) return false;     // p's bias has no place
    const auto at = q.in.begin() + operand_inputs(q.p, int(q.in.size()));
    q.in.insert(at, {p.in[0], p.in[1]});
    q.p.i[size_t(kPairSlot)] = 1;
    return true;
}

}  // namespace gl
