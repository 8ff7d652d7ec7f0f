#include "ggml-lite/core/op.h"

#include "ggml-lite/core/error.h"
#include "ggml-lite/core/graph.h"

namespace gl {

#define GL_X(name, family) extern const OpDef def_##name;
GL_OP_LIST(GL_X)
#undef GL_X

static const OpDef* const kOpTable[] = {
#define GL_X(name, family) &def_##name,
    GL_OP_LIST(GL_X)
#undef GL_X
};

const OpDef& op_def(Op op) {
    int i = int(op);
    GL_CHECK(i >= 0 && i < kOpCount, "op_def: invalid op ", i);
    return *kOpTable[i];
}

const char* op_name(Op op) { return op_def(op).name; }

DType OpCall::dtype(int i) const { return g.v(in[i]).dtype; }
const Shape& OpCall::shape(int i) const { return g.v(in[i]).layout.shape; }
const Layout& OpCall::layout(int i) const { return g.v(in[i]).layout; }

void OpCall::fail(const std::string& why) const {
    std::string msg = std::string(op_name(op)) + ": " + why + " (inputs:";
    for (size_t k = 0; k < in.size(); k++) {
        const Value& v = g.v(in[k]);
        msg += cat(" ", v.name.empty() ? "?" : v.name, "=", dtype_name(v.dtype), v.shape().str());
    }
    throw Error(msg + ")");
}

}  // namespace gl
