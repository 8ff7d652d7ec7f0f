// One cast for all parameter masters: a model built with f32 trainable parameters (LoRA masters)
// casts each of them to the activations' dtype where it is used, one cast node per use. These
// passes make those casts one cast_multi node per (dtype pair, scale) at the start of the graph, so
// a step casts every master in one launch, and its backward (cast_multi's rule) every gradient back
// in one; and they fold a LoRA branch's scale into its up weight's copy. Graph passes rather than
// builder calls, so the layers and adapters that cast stay as they are. Call both after the forward
// graph is built, before gl::backward (they throw gl::Error after it): fold_param_scales first.
#pragma once
#include "ggml-lite/core/graph.h"

namespace gl {

// scale(linear(x, cast(P)), s) with P a parameter leaf, the cast's output read only by that linear
// (its weight, no bias) and the linear's only by the scale, becomes linear(x, cast_multi({P}, s)),
// the scale node a view of the linear's output (no kernel; its backward adds no node): the same
// values up to rounding (bit for bit when s is a power of two), without the scale's pass over
// [.., out] activations each way. Returns the number of scales folded.
int fold_param_scales(Graph& g);

// Merges the casts and single-tensor cast_multi nodes (fold_param_scales') whose input is a
// parameter leaf (g.param) when at least two share their source and target dtypes and scale. The
// merged node belongs to no checkpoint segment: recompute keeps its outputs. Values keep their
// ids; nothing else moves. Returns the number of casts merged.
int merge_param_casts(Graph& g);

}  // namespace gl
