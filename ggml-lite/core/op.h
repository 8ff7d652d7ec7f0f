// Op identity and the per-op definition table. An op is defined in ONE place: an entry
// in core/op_list.h and a `const OpDef def_<name>` in its family file.
#pragma once
#include <array>
#include <cstdint>
#include <vector>

#include "ggml-lite/core/dtype.h"
#include "ggml-lite/core/op_list.h"
#include "ggml-lite/core/shape.h"

namespace gl {

enum class Op : uint16_t {
#define GL_X(name, family) name,
    GL_OP_LIST(GL_X)
#undef GL_X
};
constexpr int kOpCount = 0
#define GL_X(name, family) +1
    GL_OP_LIST(GL_X)
#undef GL_X
    ;

// Small POD parameters of a node (axes, strides, flags, scales). Each op documents its slots.
struct Params {
    std::array<int64_t, 8> i{};
    std::array<float, 4> f{};
};

class Graph;
struct Node;
struct BackwardCtx;
struct CpuCtx;

// What a shape rule sees: the op's inputs (dtype, layout) and its parameters.
struct OpCall {
    Op op;
    const Graph& g;
    const std::vector<int32_t>& in;
    const Params& p;

    DType dtype(int i) const;
    const Shape& shape(int i) const;
    const Layout& layout(int i) const;
    int n_in() const { return int(in.size()); }
    // Throws gl::Error prefixed with the op name and every input's dtype and shape.
    [[noreturn]] void fail(const std::string& why) const;
    // The message is formatted only when cond fails: shape rules run for every node a graph
    // builds, and formatting eagerly was most of the time it takes to build a training step.
    template <class... Why>
    void check(bool cond, const Why&... why) const {
        if (!cond) fail(cat(why...));
    }
};

// Output of a shape rule. For view ops, layout is expressed in the storage of input 0's base.
struct OutSpec {
    DType dtype;
    Layout layout;
};

struct Cost {
    double flops = 0;  // floating-point operations (a multiply-add counts 2)
    double bytes = 0;  // bytes read + written, assuming each operand is touched once
};

enum OpFlags : uint32_t {
    kOpView = 1u << 0,        // output aliases input 0's storage (no kernel runs)
    kOpInplace = 1u << 1,     // output 0 may take input 0's bytes when input 0 dies here
    kOpGradHelper = 1u << 2,  // built only by backward rules; verified through its forward op's gradient check
    kOpNoGrad = 1u << 3,      // no gradient flows through it (ids, constants, random masks' seeds)
    kOpMutates = 1u << 4,     // updates some inputs in place (optimizer steps); has no outputs
    // Recomputing its outputs costs one memory-bound pass over inputs of about their size
    // (norms, GEGLU, casts): Recompute::cheap drops and recomputes them.
    kOpCheapRecompute = 1u << 5,
    // out = in0 + in1 elementwise (NumPy broadcasting) and nothing else: the fusion pass
    // (core/fusion.h) may fold it into the epilogue of the op that produces one of its inputs.
    kOpPlainAdd = 1u << 6,
};

struct OpDef {
    const char* name;
    const char* family;
    std::vector<OutSpec> (*infer)(const OpCall&);
    Cost (*cost)(const OpCall&);
    void (*backward)(BackwardCtx&);  // nullptr only for kOpNoGrad ops and grad helpers
    void (*cpu)(CpuCtx&);            // nullptr only for view ops
    uint32_t flags = 0;
    // Ops whose kernels end in a GEMM-like epilogue (linear, matmul, conv2d, conv2d_grad_input), and
    // the norm gradients that make dx alone, can add a residual r there: out = op(...) + r, r of
    // out's shape and dtype, added in f32 before the one rounding; their kernels read r[i] before
    // they write out[i], so out may take r's bytes.
    // residual_input: the index of n's residual among its inputs, -1 when it has none.
    // take_residual: gives n the residual r; false (n unchanged) when n cannot take one.
    // Both nullptr for every other op.
    int (*residual_input)(const Node& n) = nullptr;
    bool (*take_residual)(Node& n, int32_t r) = nullptr;
    // linear and matmul (ops/pair.h): q takes product p as its second pair (out = q's product +
    // p's product, summed in f32, rounded once) when the two can be one node; false (q unchanged)
    // otherwise. The fusion pass checks the graph side (core/fusion.h). nullptr for other ops.
    bool (*join_pair)(Node& q, const Node& p) = nullptr;
};

const OpDef& op_def(Op op);
const char* op_name(Op op);

}  // namespace gl
