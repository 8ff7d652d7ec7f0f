// PLACEHOLDER family file (being written).
#include "ggml-lite/ops/family.h"
namespace gl {
static std::vector<OutSpec> todo_infer(const OpCall& c) { c.fail("not written yet"); }
static Cost todo_cost(const OpCall&) { return {}; }
const OpDef def_group_norm{"group_norm", "norms", todo_infer, todo_cost, nullptr, nullptr, 0};
const OpDef def_group_norm_grad{"group_norm_grad", "norms", todo_infer, todo_cost, nullptr, nullptr, 0};
const OpDef def_layer_norm{"layer_norm", "norms", todo_infer, todo_cost, nullptr, nullptr, 0};
const OpDef def_layer_norm_grad{"layer_norm_grad", "norms", todo_infer, todo_cost, nullptr, nullptr, 0};
const OpDef def_softmax{"softmax", "norms", todo_infer, todo_cost, nullptr, nullptr, 0};
const OpDef def_softmax_grad{"softmax_grad", "norms", todo_infer, todo_cost, nullptr, nullptr, 0};
}  // namespace gl
