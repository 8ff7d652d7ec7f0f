// CUDA attention: o, lse = attention(q, k, v) and dq, dk, dv = attention_grad(q, k, v, o, lse, go).
// Layouts as ops/attention.cpp: q [B, L, H, d], k [B, S, H, d], v [B, S, H, dv], o [B, L, H, dv],
// lse [B, H, L] f32; p.f[0] = scale (0 -> 1/sqrt(d)), p.i[0] = causal. Inputs are dense (the runtime
// densifies views).
// bf16 / f16 with d == dv, d % 8 == 0, d <= 256: flash-attention-2 style tensor-core kernels
// (attention_mma.cuh); everything else, f32 included, takes the exact path (attention_impl.cuh).
// The backward is deterministic: a dK/dV pass and a separate dQ pass, no atomics.
// Workspace (attention_grad only): delta [B, H, L] f32, go in q's dtype when it differs, and fp32
// dK/dV partials when the key axis alone cannot fill the GPU (cross-attention).
#include "ggml-lite/cuda/attention_impl.cuh"
#include "ggml-lite/cuda/kernel.cuh"

namespace gl {

namespace {

DType float_only(DType t) {
    if (!dtype_is_float(t)) fail("attention: CUDA kernels take f32, bf16 or f16, not ", dtype_name(t));
    return t;
}

// Shapes, scale and dtypes of a node (pointers are filled in by the launchers).
attn::Problem problem(const Node& n, const std::vector<Shape>& in, const std::vector<DType>& types) {
    attn::Problem p;
    const Shape &q = in[0], &k = in[1], &v = in[2];
    p.B = int(q[0]), p.L = int(q[1]), p.H = int(q[2]), p.d = int(q[3]), p.S = int(k[1]), p.dv = int(v[3]);
    p.scale = n.p.f[0] != 0.0f ? n.p.f[0] : float(1.0 / std::sqrt(double(p.d)));
    p.causal = n.p.i[0] != 0;
    p.t = float_only(types[0]);
    if (n.op == Op::attention_grad) p.o_t = float_only(types[3]), p.go_t = float_only(types[5]);
    return p;
}

attn::Problem problem(const CudaCtx& c) {
    std::vector<Shape> s;
    std::vector<DType> t;
    for (size_t i = 0; i < c.in.size(); i++) s.push_back(c.in_shape(int(i))), t.push_back(c.in_dtype(int(i)));
    return problem(c.node, s, t);
}

void check(cudaError_t e, const CudaCtx& c, const attn::Problem& p) {
    if (e == cudaErrorInvalidValue)
        fail(op_name(c.node.op), ": unsupported on CUDA (d ", p.d, ", dv ", p.dv,
             "): the exact path needs d + dv <= 1536 and enough workspace");
    GL_CUDA_CHECK(e);
}

void run_attention(CudaCtx& c) {
    attn::Problem p = problem(c);
    p.q = c.in_ptr(0), p.k = c.in_ptr(1), p.v = c.in_ptr(2);
    p.o = c.out_ptr(0), p.lse = c.out_ptr<float>(1);
    check(attn::forward(p, c.stream), c, p);
}

void run_attention_grad(CudaCtx& c) {
    attn::Problem p = problem(c);
    p.q = c.in_ptr(0), p.k = c.in_ptr(1), p.v = c.in_ptr(2);
    p.o_in = c.in_ptr(3), p.lse_in = c.in_ptr<float>(4), p.go = c.in_ptr(5);
    p.grad_q = c.out_ptr(0), p.grad_k = c.out_ptr(1), p.grad_v = c.out_ptr(2);
    check(attn::backward(p, c.workspace, c.workspace_bytes, c.stream), c, p);
}

size_t attention_grad_workspace(const Graph& g, const Node& n) {
    std::vector<Shape> s;
    std::vector<DType> t;
    for (ValueId x : n.in) s.push_back(g.shape(x)), t.push_back(g.dtype(x));
    return attn::backward_workspace(problem(n, s, t));
}

}  // namespace

const CudaKernel cuda_attention{run_attention};
const CudaKernel cuda_attention_grad{run_attention_grad, attention_grad_workspace};

}  // namespace gl
