// What the optimizer-step ops (ops/optim*.cpp, ops/adam8bit.cpp) share with the code that builds and
// feeds them: the layout of the per-step hyper tensor, of the gradient statistics (gstat) and of
// Prodigy's shared state, the options some steps take, and the 8-bit blocks and maps. Small on purpose:
// optim/, train/ and the CUDA kernels include this, not the whole builder API.
#pragma once
#include <cmath>
#include <cstdint>

namespace gl {

// hyper: f32 [8] = {lr, beta1, beta2, eps, weight_decay, step (1-based), grad_scale, unused}, written
// by the host each step so a schedule never rebuilds the graph. grad_scale multiplies the gradient
// first (loss-scale undo, clipping).
enum HyperSlot { kLr = 0, kBeta1, kBeta2, kEps, kWeightDecay, kStep, kGradScale, kHyperSize = 8 };

// gstat: f32 [kGstatSize], written by grad_stats over ALL trainable gradients of a step, read by every
// optimizer step op given it as its optional trailing input:
//   kGsMul        the factor each op applies to its gradient (after hyper's grad_scale):
//                 min(1, max_norm / (norm + 1e-6)) / loss_scale (torch's clip_grad_norm_ after
//                 GradScaler.unscale_); 1 / loss_scale without clipping; 0 when non-finite.
//   kGsNonfinite  1 when any gradient element (or their sum of squares) is inf/NaN, else 0. An op
//                 given gstat with this set changes NOTHING (parameter and state bit-identical): the
//                 fp16 overflow skip of GradScaler, inside a captured graph.
//   kGsNorm       global L2 norm of the unscaled gradients (raw norm / loss_scale; inf/NaN if non-finite).
//   kGsLossScale  the loss scale that was read (1 without a loss-scale input).
enum GstatSlot { kGsMul = 0, kGsNonfinite, kGsNorm, kGsLossScale, kGstatSize = 4 };

// Adafactor's options (adafactor_step), as transformers.optimization.Adafactor's arguments.
struct AdafactorOptions {
    bool relative_step = true, scale_parameter = true, warmup_init = false;
    float decay_rate = -0.8f, eps2 = 1e-3f, clip_threshold = 1.0f;
};

// Prodigy's state shared by all params, pstate f32 [kProdigyStateSize] (initialise d = d_max = d0,
// the rest 0), and its options (prodigy_accum / prodigy_d / prodigy_step), as prodigyopt's arguments.
enum ProdigySlot { kPdD = 0, kPdDMax, kPdNumerator, kPdDenom, kPdDHat, kPdDlr, kPdApplied, kProdigyStateSize = 8 };
struct ProdigyOptions {
    float beta3 = -1.0f;  // < 0: sqrt(beta2) (prodigyopt's None)
    float d0 = 1e-6f, d_coef = 1.0f, growth_rate = INFINITY;
    bool decouple = true, use_bias_correction = false, safeguard_warmup = false;
};

// Block-wise 8-bit AdamW (adamw8bit_step): one fp32 absmax per block of kAdam8bitBlock elements.
constexpr int kAdam8bitBlock = 256;
constexpr int64_t kAdam8bitMinElements = 4096;  // smaller tensors keep fp32 state
// The 256-entry dynamic quantisation maps (sorted ascending): signed for m, unsigned for v.
const float* adam8bit_qmap(bool is_signed);
// Index of the code nearest to x (ties to the lower index) in a sorted 256-entry map.
int adam8bit_quantize(const float* qmap, float x);
// Lion8bit's code of moment m in a block of `absmax` (inverse: adam8bit_inverse(absmax)): the nearest
// code of m / absmax, moved one code toward m's sign when that code's value has the other sign.
int lion8bit_code(const float* signed_qmap, float m, float absmax, float inverse);

}  // namespace gl
