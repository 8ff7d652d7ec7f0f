// The builder API: one function per op (plus a few conveniences). Each returns value ids
// and allocates nothing. Building appends to g.values, so a reference from g.shape() or g.v()
// dangles once a node is added: copy shapes into locals before building more nodes in the
// same expression (argument evaluation order is unspecified).
// Layouts: feature maps are NHWC; linear weights [out, in]; conv weights [Cout, kh, kw, Cin];
// attention q/k/v [B, L, H, d].
#pragma once
#include <cmath>
#include <utility>
#include <vector>

#include "ggml-lite/core/graph.h"
#include "ggml-lite/ops/op_kinds.h"  // Act, LossKind
#include "ggml-lite/ops/optim_dadapt.h"
#include "ggml-lite/ops/optim_schedulefree.h"
#include "ggml-lite/ops/optim_types.h"

namespace gl {

// ---- views and copies (ops/views.cpp) ----
// Free when x is contiguous; otherwise copies first.
ValueId reshape(Graph& g, ValueId x, Shape s);  // shapes by value: g.shape() refs dangle as nodes append
// out.dim(i) = x.dim(perm[i]); always a view.
ValueId permute(Graph& g, ValueId x, const std::vector<int>& perm);
// Elements [start, start+len) along axis; always a view.
ValueId slice(Graph& g, ValueId x, int axis, int64_t start, int64_t len);
// Broadcast to s (size-1 or missing leading dims repeat, stride 0); always a view.
ValueId expand(Graph& g, ValueId x, Shape s);
// Returns x itself when already dense (offset 0, contiguous) unless force_copy.
ValueId contiguous(Graph& g, ValueId x, bool force_copy = false);
// Concatenation along axis (all other dims equal, same dtype).
ValueId concat(Graph& g, const std::vector<ValueId>& xs, int axis);
ValueId fill(Graph& g, Shape s, float value, DType t = DType::f32);
// Returns x itself when it already has dtype t.
ValueId cast(Graph& g, ValueId x, DType t);
// Casts of N tensors of one float dtype to float dtype t in one node (one launch on CUDA), each
// multiplied by `scale` first (in f32); its gradient is one cast_multi back, by the same scale.
// ops/param_casts.h builds it from a graph's per-use casts of parameter masters.
std::vector<ValueId> cast_multi(Graph& g, const std::vector<ValueId>& xs, DType t, float scale = 1.0f);

// ---- elementwise with NumPy broadcasting (ops/elementwise.cpp) ----
ValueId add(Graph& g, ValueId a, ValueId b);
ValueId sub(Graph& g, ValueId a, ValueId b);
ValueId mul(Graph& g, ValueId a, ValueId b);
ValueId scale(Graph& g, ValueId x, float s);  // s * x
// y = x * keep / (1 - p), keep = dropout_keep(seed, i, p) (ops/rng.h); identical on every backend.
ValueId dropout(Graph& g, ValueId x, float p, uint64_t seed);
// The same with a per-step seed: seed_input is an i32 scalar input the host writes each step (a
// captured step then draws a new mask per replay); the mask uses dropout_step_seed(seed, value).
ValueId dropout(Graph& g, ValueId x, float p, uint64_t seed, ValueId seed_input);
// In place, no outputs: acc = (ctl[0] != 0 ? 0 : acc) + ctl[1] * x, ctl f32 [2] = {reset, weight}
// written per step (gradient accumulation over micro-batches); acc a dense f32 storage owner.
void accumulate(Graph& g, ValueId acc, ValueId x, ValueId ctl);

// ---- random draws (ops/random.cpp) ----
// f32 [shape] of N(0, 1) from the counter-based generator (ops/rng_normal.h: the same floats on
// every backend): element i takes draws c + 2i and c + 2i + 1 of the seed and position c held in
// draw, an i32 input [>= kNoiseDrawSize] the host writes per step (NoiseDrawSlot); a non-zero
// offset there adds kohya's offset noise, offset * z per (sample, channel) with shape = [B, ..., C].
ValueId normal_noise(Graph& g, ValueId draw, const Shape& shape);

// ---- activations (ops/activations.cpp) ----
ValueId silu(Graph& g, ValueId x);
ValueId gelu(Graph& g, ValueId x, bool tanh_approx = false);
ValueId quick_gelu(Graph& g, ValueId x);         // x * sigmoid(1.702 x)
ValueId act_grad(Graph& g, ValueId x, ValueId gy, Act kind);  // gy * f'(x)
// x [..., 2F] -> x[..., :F] * gelu_erf(x[..., F:])  (diffusers GEGLU after its projection)
ValueId geglu(Graph& g, ValueId x);
ValueId geglu_grad(Graph& g, ValueId x, ValueId gy);

// ---- reductions and losses (ops/reductions.cpp) ----
ValueId sum(Graph& g, ValueId x);                            // all elements -> scalar (nd 0)
ValueId sum(Graph& g, ValueId x, int axis, bool keepdim);
ValueId mean(Graph& g, ValueId x);
ValueId mean(Graph& g, ValueId x, int axis, bool keepdim);
// Sums x down to shape s, where s broadcasts to x's shape (the backward of broadcasting).
ValueId sum_to(Graph& g, ValueId x, Shape s);
// mean over samples b of w[b] * mean over sample b's elements of (pred - target)^2; w [B]
// optional (kNoValue: all ones). Scalar f32 output.
ValueId mse_loss(Graph& g, ValueId pred, ValueId target, ValueId weights = kNoValue);
ValueId mse_loss_grad(Graph& g, ValueId gy, ValueId pred, ValueId target, ValueId weights = kNoValue);
// The diffusion training loss, as kohya's sd-scripts reduces it: loss = mean_b(w[b] * per[b]) with
// per[b] = mean over sample b's elements of m * l(pred - target); l2: d^2, l1: |d|, huber (kohya's
// pseudo-Huber): 2 c (sqrt(d^2 + c^2) - c) with c = huber_c[b], smooth_l1: 2 (sqrt(d^2 + c^2) - c).
// w [B] optional (kNoValue: ones), huber_c [B] required for huber and smooth_l1 only, mask
// optional: pred's shape with the last dim 1 (an NHWC loss mask, broadcast over the channels;
// kNoValue: ones). Outputs {loss scalar f32, per [B] f32}; returns loss (the per-sample losses are
// the node's second output). No gradient flows to huber_c or the mask.
ValueId weighted_loss(Graph& g, LossKind kind, ValueId pred, ValueId target, ValueId weights = kNoValue,
                      ValueId huber_c = kNoValue, ValueId mask = kNoValue);
// The per-sample losses [B] of a weighted_loss result.
ValueId weighted_loss_per_sample(const Graph& g, ValueId loss);
// d loss / d pred = coef[b] / M * m * l'(pred - target) for coef [B] (the backward rule folds the
// incoming gradient, the weights and 1/B into coef), in pred's dtype.
ValueId weighted_loss_grad(Graph& g, LossKind kind, ValueId coef, ValueId pred, ValueId target,
                           ValueId huber_c = kNoValue, ValueId mask = kNoValue);

// ---- matmul (ops/matmul.cpp) ----
// a [..., M, K] (trans_a: [..., K, M]) times b [..., K, N] (trans_b: [..., N, K]) -> [..., M, N].
// Batch dims of a and b are equal, or b is 2-D and shared by every batch.
ValueId matmul(Graph& g, ValueId a, ValueId b, bool trans_a = false, bool trans_b = false);
// x [..., in], w [out, in], bias [out] (optional) -> [..., out].
ValueId linear(Graph& g, ValueId x, ValueId w, ValueId bias = kNoValue);
// A frozen weight stored in 8 bits (core/quant.h): codes q (i8 or f8e4m3) of the weight's shape
// and the f32 scale of each row (dim 0), w = scale[r] * q[r, ...]. The ops below take it where
// they take a weight; it never gets a gradient.
struct QuantWeight {
    ValueId q = kNoValue, scale = kNoValue;
};
// b is 2-D (shared by every batch of a).
ValueId matmul(Graph& g, ValueId a, const QuantWeight& b, bool trans_a = false, bool trans_b = false);
ValueId linear(Graph& g, ValueId x, const QuantWeight& w, ValueId bias = kNoValue);

// ---- convolution and resampling, NHWC (ops/conv.cpp) ----
// x [N, H, W, Cin], w [Cout, k, k, Cin], bias [Cout] optional -> [N, Ho, Wo, Cout].
ValueId conv2d(Graph& g, ValueId x, ValueId w, ValueId bias, int stride, int pad);
ValueId conv2d_grad_input(Graph& g, ValueId gy, ValueId w, int stride, int pad, int64_t H, int64_t W);
ValueId conv2d(Graph& g, ValueId x, const QuantWeight& w, ValueId bias, int stride, int pad);
ValueId conv2d_grad_input(Graph& g, ValueId gy, const QuantWeight& w, int stride, int pad, int64_t H, int64_t W);
ValueId conv2d_grad_weight(Graph& g, ValueId gy, ValueId x, int stride, int pad, int64_t k);
// The products with a residual r (the output's shape and dtype) added in their epilogue:
// op(...) + r in f32, rounded once. The fusion pass (core/fusion.h) makes these of op(...)
// followed by add(., r); quantized weights take a residual there too.
ValueId matmul_add(Graph& g, ValueId a, ValueId b, ValueId r, bool trans_a = false, bool trans_b = false);
ValueId linear_add(Graph& g, ValueId x, ValueId w, ValueId bias, ValueId r);
ValueId conv2d_add(Graph& g, ValueId x, ValueId w, ValueId bias, ValueId r, int stride, int pad);
ValueId conv2d_grad_input_add(Graph& g, ValueId gy, ValueId w, ValueId r, int stride, int pad, int64_t H, int64_t W);
ValueId upsample2x(Graph& g, ValueId x);          // nearest, [N, H, W, C] -> [N, 2H, 2W, C]
ValueId upsample2x_grad(Graph& g, ValueId gy);    // sums each 2x2 block

// ---- normalisation and softmax (ops/norms.cpp) ----
// x [N, ..., C]: statistics per (sample, group) over all positions and the group's C/G
// channels; gamma, beta [C]; optionally fused SiLU on the output.
// Outputs {y, mean [N, G] f32, rstd [N, G] f32}; builder returns y.
ValueId group_norm(Graph& g, ValueId x, ValueId gamma, ValueId beta, int groups, float eps, bool silu);
// Over the last dim; outputs {y, mean [rows] f32, rstd [rows] f32}; builder returns y.
ValueId layer_norm(Graph& g, ValueId x, ValueId gamma, ValueId beta, float eps);
// Softmax over the last dim of scale * x.
ValueId softmax(Graph& g, ValueId x, float scale = 1.0f);

// ---- attention (ops/attention.cpp) ----
// q [B, L, H, d], k [B, S, H, d], v [B, S, H, dv] -> o [B, L, H, dv]; also lse [B, H, L] f32.
// scale 0 means 1/sqrt(d). causal masks keys j > i (CLIP).
ValueId attention(Graph& g, ValueId q, ValueId k, ValueId v, float scale = 0.0f, bool causal = false);

// ---- embeddings (ops/embedding.cpp) ----
ValueId embedding(Graph& g, ValueId table, ValueId ids);  // table [V, D], ids i32 [...] -> [..., D]
// t [B] (f32) -> [B, dim], as diffusers' Timesteps: exponent -ln(max_period) * i / (half - shift),
// [sin, cos] (or [cos, sin] when flip_sin_to_cos), zero pad when dim is odd.
ValueId timestep_embedding(Graph& g, ValueId t, int dim, bool flip_sin_to_cos = true, float shift = 0.0f,
                           float max_period = 10000.0f);

// ---- optimizer steps (ops/optim.cpp): update parameters and state in place, no outputs ----
// The layout of hyper (HyperSlot) and gstat (GstatSlot), the option structs: ops/optim_types.h.
// AdamW on fp32 param, m, v. decay_after = false: PyTorch's order (p *= 1 - lr*wd, then the Adam
// step); true: bitsandbytes' order (Adam step, then decay).
// gstat (optional trailing input of every optimizer step): made by grad_stats below.
void adamw_step(Graph& g, ValueId param, ValueId grad, ValueId m, ValueId v, ValueId hyper, bool decay_after = false,
                ValueId gstat = kNoValue);
// The elementwise steps (adamw_step, lion_step, adamw8bit_step) also take the N tensors of one
// parameter group at once, params[k] with grads[k], m[k], ...: one node (one launch on CUDA), each
// tensor updated as its single-tensor step would update it.
void adamw_step(Graph& g, const std::vector<ValueId>& params, const std::vector<ValueId>& grads,
                const std::vector<ValueId>& m, const std::vector<ValueId>& v, ValueId hyper, bool decay_after = false,
                ValueId gstat = kNoValue);

// (ops/optim.cpp) grads: f32 dense gradients (any count >= 1); loss_scale: f32 [1] input or kNoValue;
// max_norm <= 0: no clipping. Deterministic (fixed-order double sums on every backend).
ValueId grad_stats(Graph& g, const std::vector<ValueId>& grads, ValueId loss_scale, float max_norm);

// ---- data parallelism (ops/dist.cpp) ----
// y_k = the sum over the ranks of the runtime's communicator (Runtime::set_communicator) of
// weight * x_k, for f32 tensors x_k and an f32 [1] weight (each rank's share of the global batch:
// the sum is then the global batch's mean gradient). One node for every tensor (one collective).
// No communicator: a world of one, y_k = weight * x_k. No gradient.
std::vector<ValueId> all_reduce(Graph& g, const std::vector<ValueId>& xs, ValueId weight);

// (ops/optim_lion.cpp) Lion (Chen et al. 2023, as lion-pytorch): c = b1*m + (1-b1)*g;
// p = p*(1 - lr*wd) - lr*sign(c); m = b2*m + (1-b2)*g. hyper: lr, beta1, beta2, weight_decay,
// grad_scale (eps and step unused). sign(0) = 0; a NaN gradient gives a NaN moment (use gstat).
void lion_step(Graph& g, ValueId param, ValueId grad, ValueId m, ValueId hyper, ValueId gstat = kNoValue);
void lion_step(Graph& g, const std::vector<ValueId>& params, const std::vector<ValueId>& grads,
               const std::vector<ValueId>& m, ValueId hyper, ValueId gstat = kNoValue);

// (ops/optim_adafactor.cpp) Adafactor as transformers.optimization.Adafactor. Params with >= 2 dims are
// factored over their last two dims (row means v_row [.., R], column means v_col [.., C]); a 4-D param
// is a conv weight [Cout, kh, kw, Cin] and is factored as PyTorch factors [Cout, Cin, kh, kw] (rows kh,
// cols kw, v_row [Cout*Cin*kh], v_col [Cout*Cin*kw]); 1-D params keep a full v (pass v_col = kNoValue).
// m: the first moment (kNoValue: beta1 None). hyper: lr (ignored with relative_step), beta1, eps (eps1,
// 1e-30), weight_decay, step, grad_scale (beta2 unused: beta2_t = 1 - step^decay_rate). The RMS of the
// parameter and of the update are reduced inside the op. factor_as (nd >= 2, same element count):
// the shape PyTorch holds the param in when it differs from the graph's with the same element order
// (a 1x1-conv LoRA weight [r, in] is [r, in, 1, 1] there, which transformers' Adafactor factors over
// its last two dims, 1 x 1: effectively unfactored); the param is then factored as that shape is.
void adafactor_step(Graph& g, ValueId param, ValueId grad, ValueId m, ValueId v_row, ValueId v_col, ValueId hyper,
                    const AdafactorOptions& o, ValueId gstat = kNoValue, const Shape& factor_as = {});
// Element counts of Adafactor's factored state for a param shape ({n, 0} when unfactored).
std::pair<int64_t, int64_t> adafactor_state_sizes(const Shape& param, const Shape& factor_as = {});

// (ops/optim_prodigy.cpp) Prodigy (Mishchenko & Defazio 2023, as prodigyopt 1.1). One step over all params
// is: prodigy_accum for every param (in node order; updates m, v, s with the old d and writes the param's
// dot(g, p0 - p) and sum|s| into acc[2*slot], acc[2*slot+1]), then ONE prodigy_d (new d from all slots,
// fixed order), then prodigy_step for every param. pstate f32 [kProdigyStateSize] (ProdigySlot) is shared
// by all params (initialise d = d_max = d0, the rest 0); acc f32 [2 * slots] is scratch. hyper: lr (equal
// for all params), beta1, beta2, eps, weight_decay, step (bias correction), grad_scale.
void prodigy_accum(Graph& g, ValueId param, ValueId grad, ValueId m, ValueId v, ValueId s, ValueId p0, ValueId hyper,
                   ValueId pstate, ValueId acc, int slot, const ProdigyOptions& o, ValueId gstat = kNoValue);
void prodigy_d(Graph& g, ValueId pstate, ValueId acc, ValueId hyper, const ProdigyOptions& o, ValueId gstat = kNoValue);
void prodigy_step(Graph& g, ValueId param, ValueId grad, ValueId m, ValueId v, ValueId hyper, ValueId pstate,
                  const ProdigyOptions& o, ValueId gstat = kNoValue);
// (ops/adam8bit.cpp) Block-wise 8-bit AdamW (Dettmers et al. 2021, as bitsandbytes): m, v are u8 codes into the signed /
// unsigned dynamic maps, one fp32 absmax per block of 256 (absmax_m, absmax_v: [ceil(n/256)]).
// An element whose gradient is NaN/Inf keeps its parameter and moments.
// gstat: as adamw_step's (a set non-finite flag skips the whole op).
void adamw8bit_step(Graph& g, ValueId param, ValueId grad, ValueId m, ValueId v, ValueId absmax_m, ValueId absmax_v,
                    ValueId hyper, ValueId gstat = kNoValue);
void adamw8bit_step(Graph& g, const std::vector<ValueId>& params, const std::vector<ValueId>& grads,
                    const std::vector<ValueId>& m, const std::vector<ValueId>& v, const std::vector<ValueId>& absmax_m,
                    const std::vector<ValueId>& absmax_v, ValueId hyper, ValueId gstat = kNoValue);
// (ops/adam8bit.cpp) Block-wise 8-bit Lion (as bitsandbytes' Lion8bit): lion_step's update with m held as u8
// codes into the signed map, one fp32 absmax per block of 256; a code whose value's sign differs from
// the moment's moves one code toward it (bitsandbytes keeps the momentum's sign). hyper: as lion_step's.
void lion8bit_step(Graph& g, const std::vector<ValueId>& params, const std::vector<ValueId>& grads,
                   const std::vector<ValueId>& m, const std::vector<ValueId>& absmax_m, ValueId hyper,
                   ValueId gstat = kNoValue);
// (ops/adam8bit.cpp) Block-wise 8-bit SGD with momentum (bitsandbytes' SGD8bit, kohya's SGDNesterov8bit):
// g += wd p (wd > 0); buf = g at step 1, else momentum buf + g (no dampening, no Nesterov, as
// bitsandbytes); p -= lr buf; buf held as Lion8bit's m. hyper: lr, weight_decay, step, grad_scale.
void sgd8bit_step(Graph& g, const std::vector<ValueId>& params, const std::vector<ValueId>& grads,
                  const std::vector<ValueId>& buf, const std::vector<ValueId>& absmax, ValueId hyper, float momentum,
                  ValueId gstat = kNoValue);
// The 8-bit maps (adam8bit_qmap, adam8bit_quantize): ops/optim_types.h.

// (ops/optim_sgd.cpp) SGD with momentum as torch.optim.SGD: g += wd * p; buf = g at step 1, else
// momentum * buf + (1 - dampening) * g; p -= lr * (nesterov ? g + momentum * buf : buf). momentum in
// (0, 1]; nesterov needs dampening 0. hyper: lr, weight_decay, step, grad_scale.
void sgd_step(Graph& g, ValueId param, ValueId grad, ValueId buf, ValueId hyper, float momentum, float dampening,
              bool nesterov, ValueId gstat = kNoValue);

// (ops/optim_dadapt.cpp) D-Adaptation Adam (as dadaptation 3.2's DAdaptAdam). One step over all params is:
// dadapt_adam_accum for every param (in node order; writes dlr * dot(g, s / (sqrt(v) + eps)) and sum|s|
// into acc[2*slot], acc[2*slot+1], updates m (by dlr * (1 - beta1) * g), v, s), then ONE dadapt_adam_d
// (given the hyper of the group with the largest lr), then dadapt_adam_step for every param. dstate f32
// [kDAdaptStateSize] (DAdaptSlot, ops/optim_dadapt.h) is shared by all params; acc f32 [2 * slots] is
// scratch. hyper: lr (equal for all groups, or 0), beta1, beta2, eps, weight_decay, step, grad_scale.
void dadapt_adam_accum(Graph& g, ValueId param, ValueId grad, ValueId m, ValueId v, ValueId s, ValueId hyper,
                       ValueId dstate, ValueId acc, int slot, const DAdaptOptions& o, ValueId gstat = kNoValue);
void dadapt_adam_d(Graph& g, ValueId dstate, ValueId acc, ValueId hyper, const DAdaptOptions& o, ValueId gstat = kNoValue);
void dadapt_adam_step(Graph& g, ValueId param, ValueId m, ValueId v, ValueId hyper, ValueId dstate,
                      const DAdaptOptions& o, ValueId gstat = kNoValue);

// (ops/optim_dadapt.cpp) D-Adaptation Lion (as dadaptation 3.2's DAdaptLion): dadapt_lion_step for every param
// (the sign step with dlr = d * lead_hyper's lr, m, s; dlr * dot(update, old s) and sum|s| into acc[2*slot],
// acc[2*slot+1]), then ONE dadapt_adam_d with the lead hyper and DAdaptOptions{} (growth unbounded, no bias
// correction). hyper: the param group's beta1, beta2, weight_decay, grad_scale.
void dadapt_lion_step(Graph& g, ValueId param, ValueId grad, ValueId m, ValueId s, ValueId hyper, ValueId lead_hyper,
                      ValueId dstate, ValueId acc, int slot, ValueId gstat = kNoValue);

// (ops/optim_schedulefree.cpp) Schedule-free AdamW / SGD (as schedulefree 1.4). The param holds y; a group's
// step is schedulefree_step for each of its params (v: AdamW's second moment, kNoValue for SGD), then ONE
// schedulefree_advance of its sfstate f32 [kSfStateSize] (SfSlot, ops/optim_schedulefree.h). hyper: lr,
// beta1 (SGD: momentum), beta2, eps, weight_decay, step, grad_scale.
void schedulefree_step(Graph& g, ValueId param, ValueId grad, ValueId z, ValueId v, ValueId hyper, ValueId sfstate,
                       const ScheduleFreeOptions& o, ValueId gstat = kNoValue);
void schedulefree_advance(Graph& g, ValueId sfstate, ValueId hyper, const ScheduleFreeOptions& o,
                          ValueId gstat = kNoValue);

}  // namespace gl
