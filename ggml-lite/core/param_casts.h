// One cast for all parameter masters: a model built with f32 trainable parameters (LoRA masters)
// casts each of them to the activations' dtype where it is used, one cast node per use. This pass
// merges those casts into one cast_multi node per dtype pair at the start of the graph, so a step
// casts every master in one launch, and its backward (cast_multi's rule) every gradient back in
// one. Values keep their ids; nothing else moves. A graph pass rather than a builder call, so the
// layers and adapters that cast stay as they are.
#pragma once
#include "ggml-lite/core/graph.h"

namespace gl {

// Merges the casts whose input is a parameter leaf (g.param) when at least two share their source
// and target dtypes; call after the forward graph is built, before gl::backward (throws gl::Error
// after it). The merged node belongs to no checkpoint segment: recompute keeps its outputs.
// Returns the number of cast nodes merged away.
int merge_param_casts(Graph& g);

}  // namespace gl
