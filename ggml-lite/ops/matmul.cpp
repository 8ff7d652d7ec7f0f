// PLACEHOLDER family file (being written).
#include "ggml-lite/ops/family.h"
namespace gl {
static std::vector<OutSpec> todo_infer(const OpCall& c) { c.fail("not written yet"); }
static Cost todo_cost(const OpCall&) { return {}; }
const OpDef def_matmul{"matmul", "matmul", todo_infer, todo_cost, nullptr, nullptr, 0};
const OpDef def_linear{"linear", "matmul", todo_infer, todo_cost, nullptr, nullptr, 0};
}  // namespace gl
