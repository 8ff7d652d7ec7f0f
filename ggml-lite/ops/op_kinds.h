// The small enumerations ops carry in their Params: which activation, which training loss. Apart
// from builder.h so that the kernels' shared math (act_math.h, loss_math.h, used by the CUDA
// backend too) and code that only picks a kind (train/, model configs) need not see the builder API.
#pragma once

namespace gl {

// act_grad's kind (ops/activations.cpp).
enum class Act : int { silu = 0, gelu_erf = 1, gelu_tanh = 2, quick_gelu = 3 };

// weighted_loss's per-element loss (ops/reductions.cpp; formulas in loss_math.h).
enum class LossKind : int { l2 = 0, l1 = 1, huber = 2, smooth_l1 = 3 };
const char* loss_kind_name(LossKind k);
// huber and smooth_l1 take a per-sample threshold huber_c.
constexpr bool loss_takes_huber_c(LossKind k) { return k == LossKind::huber || k == LossKind::smooth_l1; }

}  // namespace gl
