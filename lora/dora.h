// DoRA (Liu et al. 2024) as LyCORIS applies it (apply_weight_decompose, the same in its LoCon,
// LoHa and LoKr): V = W0 + dW (dW with its scale, not the multiplier, in f32); n = the norm of V
// per output row (over every axis but 0, LyCORIS >= 3.2's default) or per input column (over every
// axis but 1), plus float32's epsilon; r = dora_scale / n; with a multiplier m != 1, r = m (r - 1) + 1;
// W' = V r. The norm is not detached: gradients flow through it, and dora_scale is an ordinary
// parameter, initialised to the norms of W0.
//
// Weights are in the graph's layout ([out, in], or [out, k, k, in] for a conv); dora_scale in the
// file's ([out, 1(, 1, 1)] per row, [1, in(, 1, 1)] per column), which holds the same elements.
#pragma once
#include <vector>

#include "ggml-lite/core/graph.h"
#include "lora/module.h"

namespace lora::dora {

// The file shape of a layer's dora_scale.
std::vector<int64_t> scale_shape(const Layer& l, bool on_output);

// W' (f32, v's shape) for v = W0 + dW, in the graph. The norm is built from existing ops: a row
// of [v, -v] has mean 0 and variance |v|^2 / D, so layer_norm (unit gain) turns its first half
// into v sqrt(D) / |v|; the epsilon enters as sqrt(|v|^2 + eps^2), which gives LyCORIS's 0 for an
// all-zero row and differs from its |v| + eps by under eps / |v| elsewhere.
gl::ValueId weight(gl::Graph& g, gl::ValueId v, gl::ValueId scale, const Layer& l, bool on_output, float multiplier);

// The norms dora_scale starts at: of w (graph layout), in dora_scale's element order.
std::vector<float> norms(const std::vector<float>& w, const Layer& l, bool on_output);

// v = W0 + dW (graph layout) -> W' in place, on the host (as LyCORIS: |v| + eps).
void apply(std::vector<float>& v, const std::vector<float>& scale, const Layer& l, bool on_output, float multiplier);

}  // namespace lora::dora
