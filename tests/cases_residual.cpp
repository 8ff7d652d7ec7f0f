// Op cases of the residual epilogue (ops/residual.h) of the matmul and conv families: the builders
// with a residual (gradient checks, references, bad calls) and the graphs the fusion pass fuses
// into them (a product followed by an add, and the sums of an input's gradients). The GPU parity
// test runs every case, so each kernel path with a residual (tensor-core and exact, split-K, the
// conv phases, quantized weights) is compared with the CPU.
#include "op_cases.h"

#include "ggml-lite/ops/norm_params.h"
#include "ggml-lite/ops/residual.h"

namespace gltest {
namespace {

using namespace gl;
using Outputs = std::vector<std::vector<float>>;

ValueId in(Graph& g, const char* name, Shape s, DType t = DType::f32) { return g.input(name, t, s); }

// dx of the NHWC convolution written from its definition: dx[n, ih, iw, ci] sums gy[n, oh, ow, co] *
// w[co, kh, kw, ci] over the taps with oh * s - p + kh = ih (and likewise for w); plus r.
std::vector<float> naive_grad_input(const std::vector<float>& gy, const std::vector<float>& w,
                                    const std::vector<float>& r, Shape xs, int64_t cout, int64_t k, int64_t s,
                                    int64_t p) {
    const int64_t N = xs[0], H = xs[1], W = xs[2], C = xs[3];
    const int64_t Ho = (H + 2 * p - k) / s + 1, Wo = (W + 2 * p - k) / s + 1;
    std::vector<double> dx(size_t(N * H * W * C), 0.0);
    for (int64_t n = 0; n < N; n++)
        for (int64_t oh = 0; oh < Ho; oh++)
            for (int64_t ow = 0; ow < Wo; ow++)
                for (int64_t kh = 0; kh < k; kh++)
                    for (int64_t kw = 0; kw < k; kw++) {
                        const int64_t ih = oh * s - p + kh, iw = ow * s - p + kw;
                        if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                        for (int64_t co = 0; co < cout; co++)
                            for (int64_t ci = 0; ci < C; ci++)
                                dx[size_t(((n * H + ih) * W + iw) * C + ci)] +=
                                    double(gy[size_t(((n * Ho + oh) * Wo + ow) * cout + co)]) *
                                    double(w[size_t(((co * k + kh) * k + kw) * C + ci)]);
                    }
    std::vector<float> out(dx.size());
    for (size_t i = 0; i < dx.size(); i++) out[i] = float(dx[i] + double(r[i]));
    return out;
}

// A quantized weight [rows, ...] of the case: i8 codes and f32 row scales.
QuantWeight qweight(CaseBuilder& b, const std::string& name, const Shape& s) {
    return {b.kept(name, s, -127.0f, 128.0f, DType::i8), b.kept(name + ".scale", {s.d[0]}, 0.002f, 0.02f, DType::f32)};
}

Register r({
    {"layer_norm", "x + linear(layer_norm(x)), frozen affine at width 320: x's gradient sum in the norm gradient",
     [](CaseBuilder& b) {
         ValueId x = b.x("x", {2, 3, 320});
         ValueId h = layer_norm(b.g, x, b.c("gamma", {320}, 0.5f, 1.5f), b.c("beta", {320}), 1e-5f);
         b.out(add(b.g, x, linear(b.g, h, b.x("w", {320, 320}, -0.05f, 0.05f))));
     },
     [](Graph& g) {  // a residual of the wrong dtype
         ValueId x = g.input("x", DType::f32, {2, 8}), gm = g.input("g", DType::f32, {8});
         auto f = g.apply(Op::layer_norm, {x, gm, gm}, {});
         Params p;
         p.i[kNormDxOnly] = 1;
         p.i[kResidualSlot] = 1;
         g.apply(Op::layer_norm_grad, {x, x, gm, gm, f[1], f[2], in(g, "r", {2, 8}, DType::bf16)}, p);
     }},
    {"layer_norm", "the same at width 44 (CUDA's block-per-row kernel)", [](CaseBuilder& b) {
         ValueId x = b.x("x", {3, 44});
         ValueId h = layer_norm(b.g, x, b.c("gamma", {44}, 0.5f, 1.5f), b.c("beta", {44}), 1e-5f);
         b.out(add(b.g, x, linear(b.g, h, b.x("w", {44, 44}, -0.2f, 0.2f))));
     },
     [](Graph& g) {  // a residual needs its input
         ValueId x = g.input("x", DType::f32, {2, 8}), gm = g.input("g", DType::f32, {8});
         auto f = g.apply(Op::layer_norm, {x, gm, gm}, {});
         Params p;
         p.i[kNormDxOnly] = 1;
         p.i[kResidualSlot] = 1;
         g.apply(Op::layer_norm_grad, {x, x, gm, gm, f[1], f[2]}, p);
     }},
    {"group_norm", "x + conv(group_norm(x)), frozen affine, 32 groups of 320 channels: the sum in dx", [](CaseBuilder& b) {
         ValueId x = b.x("x", {1, 4, 3, 320});
         ValueId h = group_norm(b.g, x, b.c("gamma", {320}, 0.5f, 1.5f), b.c("beta", {320}), 32, 1e-5f, true);
         b.out(add(b.g, x, conv2d(b.g, h, b.x("w", {320, 1, 1, 320}, -0.05f, 0.05f), kNoValue, 1, 0)));
     },
     [](Graph& g) {  // a residual on a grad op that makes dgamma and dbeta too
         ValueId x = g.input("x", DType::f32, {1, 2, 2, 8}), gm = g.input("g", DType::f32, {8});
         Params p;
         p.i[0] = 2;
         auto f = g.apply(Op::group_norm, {x, gm, gm}, p);
         p.i[kResidualSlot] = 1;
         g.apply(Op::group_norm_grad, {x, x, gm, gm, f[1], f[2], x}, p);
     }},
    {"group_norm", "the same with 12 channels (CUDA's scalar kernel)", [](CaseBuilder& b) {
         ValueId x = b.x("x", {2, 3, 3, 12});
         ValueId h = group_norm(b.g, x, b.c("gamma", {12}, 0.5f, 1.5f), b.c("beta", {12}), 3, 1e-5f, false);
         b.out(add(b.g, x, conv2d(b.g, h, b.x("w", {12, 3, 3, 12}, -0.2f, 0.2f), kNoValue, 1, 1)));
     },
     [](Graph& g) {  // the residual must have dx's shape
         ValueId x = g.input("x", DType::f32, {1, 2, 2, 8}), gm = g.input("g", DType::f32, {8});
         Params p;
         p.i[0] = 2;
         auto f = g.apply(Op::group_norm, {x, gm, gm}, p);
         p.i[kNormDxOnly] = 1;
         p.i[kResidualSlot] = 1;
         g.apply(Op::group_norm_grad, {x, x, gm, gm, f[1], f[2], gm}, p);
     }},
    {"linear", "with bias and a residual, [2,3,5] -> [2,3,4]", [](CaseBuilder& b) {
         b.out(linear_add(b.g, b.x("x", {2, 3, 5}), b.x("w", {4, 5}), b.x("bias", {4}), b.x("r", {2, 3, 4})));
     },
     [](Graph& g) {  // the residual must have the output's shape
         linear_add(g, in(g, "x", {2, 5}), in(g, "w", {4, 5}), kNoValue, in(g, "r", {2, 5}));
     }},
    {"linear", "a residual, no bias, several column tiles and a deep K", [](CaseBuilder& b) {
         b.out(linear_add(b.g, b.x("x", {5, 130}), b.x("w", {300, 130}), kNoValue, b.x("r", {5, 300})));
     },
     [](Graph& g) {  // the residual must have the output's dtype
         linear_add(g, in(g, "x", {2, 5}), in(g, "w", {4, 5}), kNoValue, in(g, "r", {2, 4}, DType::bf16));
     }},
    {"linear", "quantized weight, K = 1024 over few tiles (split K), add fused into its epilogue", [](CaseBuilder& b) {
         ValueId x = b.x("x", {2, 1024});
         b.out(add(b.g, linear(b.g, x, qweight(b, "w", {64, 1024}), b.c("bias", {64})), b.x("r", {2, 64})));
     },
     [](Graph& g) {  // a residual needs its input
         Params p;
         p.i[kResidualSlot] = 1;
         g.apply(Op::linear, {in(g, "x", {2, 5}), in(g, "w", {4, 5})}, p);
     }},
    {"linear", "x read by two products (a LoRA's base and down): its gradients summed in an epilogue",
     [](CaseBuilder& b) {
         ValueId x = b.x("x", {2, 6, 16});
         ValueId base = linear(b.g, x, b.x("w", {16, 16}), b.x("bias", {16}));
         ValueId up = linear(b.g, linear(b.g, x, b.x("down", {4, 16})), b.x("up", {16, 4}));
         b.out(add(b.g, base, up));
     },
     [](Graph& g) { linear_add(g, in(g, "x", {2, 5}), in(g, "w", {4, 5}), in(g, "b", {4}), in(g, "r", {4})); }},
    {"linear", "a residual: known values", [](CaseBuilder& b) {
         ValueId x = b.c("x", {2, 3});
         ValueId w = b.c("w", {2, 3});
         ValueId bias = b.c("bias", {2});
         ValueId r = b.c("r", {2, 2});
         b.set(x, {1, 2, 3, -1, 0, 1});
         b.set(w, {1, 0, -1, 2, 1, 0});
         b.set(bias, {0.5f, -1});
         b.set(r, {1, 2, -3, 0.25f});
         b.out(linear_add(b.g, x, w, bias, r));
     },
     [](Graph& g) {  // the flag is 0 or 1
         Params p;
         p.i[kResidualSlot] = 2;
         g.apply(Op::linear, {in(g, "x", {2, 5}), in(g, "w", {4, 5}), in(g, "r", {2, 4})}, p);
     },
     [](const Outputs&) { return Outputs{{-0.5f, 5, -4.5f, -2.75f}}; },
     0.0},

    {"matmul", "2-D trans_b with a residual", [](CaseBuilder& b) {
         b.out(matmul_add(b.g, b.x("a", {3, 5}), b.x("b", {4, 5}), b.x("r", {3, 4}), false, true));
     },
     [](Graph& g) { matmul_add(g, in(g, "a", {3, 5}), in(g, "b", {5, 4}), in(g, "r", {4, 3})); }},
    {"matmul", "batched, trans_a, with a residual", [](CaseBuilder& b) {
         b.out(matmul_add(b.g, b.x("a", {2, 3, 5, 4}), b.x("b", {2, 3, 5, 3}), b.x("r", {2, 3, 4, 3}), true, false));
     },
     [](Graph& g) { matmul_add(g, in(g, "a", {2, 4, 5}), in(g, "b", {2, 5, 3}), in(g, "r", {2, 4, 3}, DType::bf16)); }},
    {"matmul", "shared 2-D b folded into one GEMM, 16-wide tiles, with a residual", [](CaseBuilder& b) {
         b.out(matmul_add(b.g, b.x("a", {2, 24, 32}), b.x("b", {32, 40}), b.x("r", {2, 24, 40})));
     },
     [](Graph& g) { matmul_add(g, in(g, "a", {2, 4, 5}), in(g, "b", {5, 3}), in(g, "r", {4, 3})); }},
    {"linear", "a LoRA's up projection: K = 16 (one padded k-tile), ragged rows, bias and a residual",
     [](CaseBuilder& b) {
         b.out(linear_add(b.g, b.x("h", {3, 37, 16}), b.x("up", {328, 16}), b.x("bias", {328}), b.x("r", {3, 37, 328})));
     },
     [](Graph& g) { linear_add(g, in(g, "h", {3, 16}), in(g, "up", {8, 16}), kNoValue, in(g, "r", {3, 16})); }},
    {"matmul", "a LoRA's input gradient dh A: K = 8 and 24, with a residual",
     [](CaseBuilder& b) {
         b.out(matmul_add(b.g, b.x("a", {2, 45, 8}), b.x("b", {8, 72}), b.x("r", {2, 45, 72})));
         b.out(matmul_add(b.g, b.x("a2", {45, 24}), b.x("b2", {24, 2560}), b.x("r2", {45, 2560})));
     },
     [](Graph& g) { matmul_add(g, in(g, "a", {3, 8}), in(g, "b", {8, 16}), in(g, "r", {3, 8})); }},
    {"matmul", "K = 2048 over few tiles (split K: the residual added once, after the split sum)", [](CaseBuilder& b) {
         b.out(matmul_add(b.g, b.x("a", {8, 2048}), b.x("b", {2048, 64}), b.x("r", {8, 64})));
     },
     [](Graph& g) { matmul_add(g, in(g, "a", {3, 5}), in(g, "b", {5, 4}), in(g, "r", {3, 4}), true, false); }},
    {"matmul", "quantized b, add fused into its epilogue", [](CaseBuilder& b) {
         ValueId a = b.x("a", {2, 5, 48});
         b.out(add(b.g, matmul(b.g, a, qweight(b, "b", {48, 64})), b.x("r", {2, 5, 64})));
     },
     [](Graph& g) {  // a quantized b takes a residual before its scale, of the output's shape
         Params p;
         p.i[kResidualSlot] = 1;
         p.i[kQuantSlot] = 1;
         g.apply(Op::matmul, {in(g, "a", {2, 4}), in(g, "q", {4, 3}, DType::i8), in(g, "s", {4}), in(g, "r", {2, 4})}, p);
     }},

    {"matmul", "quantized b with a residual before its scale: gradients to a and the residual", [](CaseBuilder& b) {
         ValueId a = b.x("a", {2, 5, 48});
         const QuantWeight q = qweight(b, "b", {48, 64});
         Params p;
         p.i[kResidualSlot] = 1;
         p.i[kQuantSlot] = 1;
         b.out(b.g.apply1(Op::matmul, {a, q.q, b.x("r", {2, 5, 64}), q.scale}, p));
     },
     [](Graph& g) {  // the residual must have the output's shape
         Params p;
         p.i[kResidualSlot] = 1;
         p.i[kQuantSlot] = 1;
         g.apply(Op::matmul, {in(g, "a", {2, 4}), in(g, "q", {4, 3}, DType::i8), in(g, "r", {2, 4}), in(g, "s", {4})}, p);
     }},

    {"conv2d", "k3 s1 p1 with bias and a residual", [](CaseBuilder& b) {
         b.out(conv2d_add(b.g, b.x("x", {2, 5, 4, 3}), b.x("w", {4, 3, 3, 3}), b.x("bias", {4}), b.x("r", {2, 5, 4, 4}),
                          1, 1));
     },
     [](Graph& g) {  // the residual has the output's shape
         conv2d_add(g, in(g, "x", {1, 4, 4, 3}), in(g, "w", {4, 3, 3, 3}), kNoValue, in(g, "r", {1, 4, 4, 3}), 1, 1);
     }},
    {"conv2d", "Cin 16 k3 s2 p1 (tensor-core tiles) with a residual", [](CaseBuilder& b) {
         b.out(conv2d_add(b.g, b.x("x", {1, 7, 6, 16}), b.x("w", {16, 3, 3, 16}), kNoValue, b.x("r", {1, 4, 3, 16}),
                          2, 1));
     },
     [](Graph& g) {
         conv2d_add(g, in(g, "x", {1, 4, 4, 3}), in(g, "w", {4, 3, 3, 3}), kNoValue, in(g, "r", {1, 4, 4, 4}, DType::bf16),
                    1, 1);
     }},
    {"conv2d", "Cin 64 on a 4x4 map (split K) with a residual", [](CaseBuilder& b) {
         b.out(conv2d_add(b.g, b.x("x", {1, 4, 4, 64}), b.x("w", {64, 3, 3, 64}), b.x("bias", {64}),
                          b.x("r", {1, 4, 4, 64}), 1, 1));
     },
     [](Graph& g) { conv2d_add(g, in(g, "x", {1, 4, 4, 3}), in(g, "w", {4, 3, 3, 3}), kNoValue, in(g, "r", {4}), 1, 1); }},
    {"conv2d", "x read by two convs (a resnet's conv1 and shortcut): its gradients summed in the input gradient's "
               "epilogue",
     [](CaseBuilder& b) {
         ValueId x = b.x("x", {1, 6, 5, 16});
         ValueId h = conv2d(b.g, x, b.x("w1", {16, 3, 3, 16}), kNoValue, 1, 1);
         ValueId s = conv2d(b.g, x, b.x("ws", {16, 1, 1, 16}), b.x("bs", {16}), 1, 0);
         ValueId x3 = b.x("x3", {1, 5, 4, 3});  // Cin 3: the exact path's input gradients
         ValueId h3 = conv2d(b.g, x3, b.x("w3", {8, 3, 3, 3}), kNoValue, 2, 1);
         b.out(add(b.g, s, h));
         b.out(add(b.g, h3, conv2d(b.g, x3, b.x("w4", {8, 1, 1, 3}), kNoValue, 2, 0)));
     },
     [](Graph& g) {
         conv2d_add(g, in(g, "x", {1, 4, 4, 3}), in(g, "w", {4, 3, 3, 3}), in(g, "b", {4}), in(g, "r", {1, 4, 4}), 1, 1);
     }},
    {"conv2d", "quantized weight, add fused into its epilogue", [](CaseBuilder& b) {
         ValueId x = b.x("x", {1, 5, 6, 16});
         b.out(add(b.g, conv2d(b.g, x, qweight(b, "w", {24, 3, 3, 16}), b.c("bias", {24}), 1, 1), b.x("r", {1, 5, 6, 24})));
     },
     [](Graph& g) {  // strided: the residual has the output's 2x2, not the input's 4x4
         conv2d_add(g, in(g, "x", {1, 4, 4, 3}), in(g, "w", {4, 3, 3, 3}), kNoValue, in(g, "r", {1, 4, 4, 4}), 2, 1);
     }},

    {"conv2d_grad_input", "with a residual matches the direct definition",
     [](CaseBuilder& b) {
         ValueId gy = b.c("gy", {2, 3, 3, 5});
         ValueId w = b.c("w", {5, 3, 3, 4});
         ValueId r = b.c("r", {2, 5, 6, 4});
         ValueId gy1 = b.c("gy1", {1, 4, 3, 16});
         ValueId w1 = b.c("w1", {16, 3, 3, 16});
         ValueId r1 = b.c("r1", {1, 4, 3, 16});
         b.out(conv2d_grad_input_add(b.g, gy, w, r, 2, 1, 5, 6));
         b.out(conv2d_grad_input_add(b.g, gy1, w1, r1, 1, 1, 4, 3));
     },
     [](Graph& g) {  // the residual has dx's shape
         conv2d_grad_input_add(g, in(g, "gy", {1, 4, 4, 4}), in(g, "w", {4, 3, 3, 3}), in(g, "r", {1, 4, 4, 4}), 1, 1, 4, 4);
     },
     [](const Outputs& d) {
         return Outputs{naive_grad_input(d[0], d[1], d[2], {2, 5, 6, 4}, 5, 3, 2, 1),
                        naive_grad_input(d[3], d[4], d[5], {1, 4, 3, 16}, 16, 3, 1, 1)};
     },
     1e-5},
});

}  // namespace
}  // namespace gltest
