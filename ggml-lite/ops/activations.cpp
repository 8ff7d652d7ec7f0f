// PLACEHOLDER family file (being written).
#include "ggml-lite/ops/family.h"
namespace gl {
static std::vector<OutSpec> todo_infer(const OpCall& c) { c.fail("not written yet"); }
static Cost todo_cost(const OpCall&) { return {}; }
const OpDef def_silu{"silu", "activations", todo_infer, todo_cost, nullptr, nullptr, 0};
const OpDef def_gelu{"gelu", "activations", todo_infer, todo_cost, nullptr, nullptr, 0};
const OpDef def_quick_gelu{"quick_gelu", "activations", todo_infer, todo_cost, nullptr, nullptr, 0};
const OpDef def_act_grad{"act_grad", "activations", todo_infer, todo_cost, nullptr, nullptr, 0};
const OpDef def_geglu{"geglu", "activations", todo_infer, todo_cost, nullptr, nullptr, 0};
const OpDef def_geglu_grad{"geglu_grad", "activations", todo_infer, todo_cost, nullptr, nullptr, 0};
}  // namespace gl
