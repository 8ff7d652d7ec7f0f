// PLACEHOLDER family file (being written).
#include "ggml-lite/ops/family.h"
namespace gl {
static std::vector<OutSpec> todo_infer(const OpCall& c) { c.fail("not written yet"); }
static Cost todo_cost(const OpCall&) { return {}; }
const OpDef def_conv2d{"conv2d", "conv", todo_infer, todo_cost, nullptr, nullptr, 0};
const OpDef def_conv2d_grad_input{"conv2d_grad_input", "conv", todo_infer, todo_cost, nullptr, nullptr, 0};
const OpDef def_conv2d_grad_weight{"conv2d_grad_weight", "conv", todo_infer, todo_cost, nullptr, nullptr, 0};
const OpDef def_upsample2x{"upsample2x", "conv", todo_infer, todo_cost, nullptr, nullptr, 0};
const OpDef def_upsample2x_grad{"upsample2x_grad", "conv", todo_infer, todo_cost, nullptr, nullptr, 0};
}  // namespace gl
