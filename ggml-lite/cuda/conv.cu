// CUDA kernels of the conv family (semantics: ops/conv.cpp). NHWC maps, weights [Cout, k, k, Cin].
//   conv2d            x [N,H,W,Cin], w, bias?, r? -> y [N,Ho,Wo,Cout]  p.i = {stride, pad}
//   conv2d_grad_input gy, w, r? -> dx [N,H,W,Cin]                     p.i = {stride, pad, H, W}
//   conv2d_grad_weight gy, x -> dw [Cout,k,k,Cin]                     p.i = {stride, pad, k}
//   upsample2x / upsample2x_grad: nearest 2x and its 2x2 block sum.
// bf16/f16: implicit GEMM on tensor cores (conv_mma.cuh) when Cin % 8 == 0 (and Cout % 8 == 0
// for the gradients), else the FFMA path; f32: the exact FFMA path (conv_simt.cuh). Split-K
// partials go through this node's workspace and are summed in a fixed order: deterministic.
// A quantized w (ops/quant.h: codes, its f32 scale per Cout as the last input) is converted to
// the compute dtype inside the kernels' weight loads. A residual r (ops/residual.h: the output's
// shape, the fusion pass's folded add) is added in the epilogue, after the split sum, and may be
// the output's own bytes. Limit: every tensor under 2^31 elements.
#include "ggml-lite/cuda/conv_launch.cuh"
#include "ggml-lite/cuda/kernel.cuh"
#include "ggml-lite/ops/quant.h"
#include "ggml-lite/ops/residual.h"

namespace gl {
namespace {

using convk::Geom;

// The geometry of a conv node from its shapes and parameters (mode per convk::Mode).
Geom geom_of(int mode, const Node& n, const Shape& in0, const Shape& in1, const Shape& out) {
    Geom g{};
    g.S = int(n.p.i[0]);
    g.pad = int(n.p.i[1]);
    if (mode == convk::kFwd) {  // x, w -> y
        g.N = int(in0[0]); g.H = int(in0[1]); g.W = int(in0[2]); g.C = int(in0[3]);
        g.Co = int(in1[0]); g.k = int(in1[1]); g.Ho = int(out[1]); g.Wo = int(out[2]);
    } else if (mode == convk::kDgrad) {  // gy, w -> dx
        g.N = int(in0[0]); g.Ho = int(in0[1]); g.Wo = int(in0[2]); g.Co = int(in0[3]);
        g.k = int(in1[1]); g.C = int(in1[3]); g.H = int(out[1]); g.W = int(out[2]);
    } else {  // gy, x -> dw
        g.N = int(in0[0]); g.Ho = int(in0[1]); g.Wo = int(in0[2]); g.Co = int(in0[3]);
        g.H = int(in1[1]); g.W = int(in1[2]); g.C = int(in1[3]); g.k = int(out[1]);
    }
    return g;
}

bool fits_int32(const Shape& s) { return s.numel() < (int64_t(1) << 31); }

template <int MODE>
size_t conv_ws(const Graph& g, const Node& n) {
    const Shape &a = g.shape(n.in[0]), &b = g.shape(n.in[1]), &o = g.shape(n.out[0]);
    if (!fits_int32(a) || !fits_int32(b) || !fits_int32(o)) return 0;  // the launch reports it
    const Geom geo = geom_of(MODE, n, a, b, o);
    size_t bytes = 0;  // other dtypes: the launch reports them
    visit_float(g.dtype(n.out[0]),
                [&](auto tag) { bytes = convk::conv_workspace<decltype(tag)>(MODE, geo, is_quantized(n.p)); });
    return bytes;
}

template <int MODE>
void conv_run(CudaCtx& c) {
    const char* op = op_name(c.node.op);
    for (int i = 0; i < int(c.in.size()); i++)
        GL_CHECK(fits_int32(c.in_shape(i)), op, ": input ", i, " ", c.in_shape(i).str(), " exceeds 2^31 elements");
    GL_CHECK(fits_int32(c.out_shape(0)), op, ": output ", c.out_shape(0).str(), " exceeds 2^31 elements");
    Geom geo = geom_of(MODE, c.node, c.in_shape(0), c.in_shape(1), c.out_shape(0));
    const int n_in = int(c.in.size());
    const void* bias = MODE == convk::kFwd && operand_inputs(c.p(), n_in) > 2 ? c.in_ptr(2) : nullptr;
    const void* residual = has_residual(c.p()) ? c.in_ptr(residual_index(c.p(), n_in)) : nullptr;
    convk::QuantB qb;
    if (is_quantized(c.p())) {
        qb.scale = c.in_ptr<float>(n_in - 1);
        qb.codes = c.in_dtype(1);
    }
    dispatch_float(c.out_dtype(0), op, [&](auto t) {
        using T = decltype(t);
        const char* err = convk::launch_conv<T>(MODE, geo, c.in_ptr(0), c.in_ptr(1), bias, c.out_ptr(0),
                                                c.workspace, c.workspace_bytes, c.stream, -1, 0, 0, qb, residual);
        if (err) fail(op, ": ", err, " (in ", c.in_shape(0).str(), ", out ", c.out_shape(0).str(), ")");
    });
    GL_CUDA_LAUNCHED();
}

void upsample_run(CudaCtx& c) {
    const Shape& x = c.in_shape(0);
    int64_t row_bytes = x[3] * int64_t(dtype_size(c.in_dtype(0)));
    convk::launch_upsample2x(c.in_ptr(0), c.out_ptr(0), int(x[0]), int(x[1]), int(x[2]), row_bytes, c.stream);
    GL_CUDA_LAUNCHED();
}

void upsample_grad_run(CudaCtx& c) {
    const Shape& o = c.out_shape(0);
    dispatch_float(c.out_dtype(0), op_name(c.node.op), [&](auto t) {
        using T = decltype(t);
        convk::launch_upsample2x_grad<T>(c.in_ptr<T>(0), c.out_ptr<T>(0), int(o[0]), int(o[1]), int(o[2]), int(o[3]),
                                         c.stream);
    });
    GL_CUDA_LAUNCHED();
}

}  // namespace

const CudaKernel cuda_conv2d{conv_run<convk::kFwd>, conv_ws<convk::kFwd>};
const CudaKernel cuda_conv2d_grad_input{conv_run<convk::kDgrad>, conv_ws<convk::kDgrad>};
const CudaKernel cuda_conv2d_grad_weight{conv_run<convk::kWgrad>, conv_ws<convk::kWgrad>};
const CudaKernel cuda_upsample2x{upsample_run};
const CudaKernel cuda_upsample2x_grad{upsample_grad_run};

}  // namespace gl
