#include "op_cases.h"

namespace gltest {
namespace {

using namespace gl;
using Outputs = std::vector<std::vector<float>>;

// Direct definition of the NHWC convolution, written independently of the kernels: the
// gradient checks only prove backward matches forward, so forward is checked against this.
std::vector<float> naive_conv(const std::vector<float>& x, const std::vector<float>& w, const std::vector<float>* bias,
                              Shape xs, int64_t cout, int64_t k, int64_t s, int64_t p) {
    const int64_t N = xs[0], H = xs[1], W = xs[2], C = xs[3];
    const int64_t Ho = (H + 2 * p - k) / s + 1, Wo = (W + 2 * p - k) / s + 1;
    std::vector<float> y;
    for (int64_t n = 0; n < N; n++)
        for (int64_t oh = 0; oh < Ho; oh++)
            for (int64_t ow = 0; ow < Wo; ow++)
                for (int64_t co = 0; co < cout; co++) {
                    double acc = bias ? (*bias)[size_t(co)] : 0.0;
                    for (int64_t kh = 0; kh < k; kh++)
                        for (int64_t kw = 0; kw < k; kw++) {
                            const int64_t ih = oh * s - p + kh, iw = ow * s - p + kw;
                            if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                            for (int64_t ci = 0; ci < C; ci++)
                                acc += double(x[size_t(((n * H + ih) * W + iw) * C + ci)]) *
                                       double(w[size_t(((co * k + kh) * k + kw) * C + ci)]);
                        }
                    y.push_back(float(acc));
                }
    return y;
}

// One differentiable conv2d case: x, w (and bias) all get gradients, so both
// conv2d_grad_input and conv2d_grad_weight are checked.
OpCase conv_case(const std::string& label, Shape xs, int64_t cout, int64_t k, int stride, int pad, bool bias,
                 std::function<void(Graph&)> bad) {
    return {"conv2d", label,
            [=](CaseBuilder& b) {
                ValueId x = b.x("x", xs);
                ValueId w = b.x("w", {cout, k, k, xs[3]});
                ValueId bv = bias ? b.x("bias", {cout}) : kNoValue;
                b.out(conv2d(b.g, x, w, bv, stride, pad));
            },
            std::move(bad)};
}

ValueId in(Graph& g, const char* name, Shape s, DType t = DType::f32) { return g.input(name, t, s); }

// A quantized conv weight [cout, k, k, cin] of the case (codes of dtype t, f32 scale per Cout in
// [0.002, 0.02)); f8e4m3 codes are integers in [-lim, lim) rounded to the format.
QuantWeight qconv(CaseBuilder& b, const std::string& name, Shape s, DType t, float lim = 127.0f) {
    return {b.kept(name, s, -lim, lim + 1.0f, t), b.kept(name + ".scale", {s[0]}, 0.002f, 0.02f, DType::f32)};
}

// A conv2d case with a quantized (frozen) weight: x and the bias get gradients, so the quantized
// conv2d_grad_input is checked.
OpCase qconv_case(const std::string& label, Shape xs, int64_t cout, int64_t k, int stride, int pad, DType t,
                  std::function<void(Graph&)> bad) {
    return {"conv2d", label,
            [=](CaseBuilder& b) {
                ValueId x = b.x("x", xs);
                ValueId bv = b.x("bias", {cout});
                const float lim = t == DType::i8 ? 127.0f : 300.0f;  // codes over most of each format's range
                b.out(conv2d(b.g, x, qconv(b, "w", {cout, k, k, xs[3]}, t, lim), bv, stride, pad));
            },
            std::move(bad)};
}

QuantWeight bad_qweight(Graph& g, Shape s, DType t = DType::i8, DType st = DType::f32) {
    return {g.weight("q", t, s), g.weight("s", st, {s[0]})};
}

Register r({
    conv_case("k3 s1 p1 with bias, Cout != Cin", {2, 5, 4, 3}, 4, 3, 1, 1, true,
              [](Graph& g) { conv2d(g, in(g, "x", {1, 4, 4, 3}), in(g, "w", {4, 3, 3, 2}), kNoValue, 1, 1); }),
    conv_case("k3 s2 p1 odd H, W, no bias", {1, 5, 7, 2}, 3, 3, 2, 1, false,
              [](Graph& g) { conv2d(g, in(g, "x", {4, 4, 3}), in(g, "w", {4, 3, 3, 3}), kNoValue, 1, 1); }),
    conv_case("k3 s2 p0, last input row unused", {1, 6, 5, 3}, 2, 3, 2, 0, true,
              [](Graph& g) { conv2d(g, in(g, "x", {1, 4, 4, 3}), in(g, "w", {4, 3, 2, 3}), kNoValue, 1, 1); }),
    conv_case("k1 s1 p0 with bias", {2, 3, 3, 4}, 6, 1, 1, 0, true,
              [](Graph& g) {
                  conv2d(g, in(g, "x", {1, 4, 4, 3}), in(g, "w", {4, 1, 1, 3}), in(g, "b", {3}), 1, 0);
              }),
    conv_case("k1 s2 p0 odd size (shortcut downsample)", {1, 5, 5, 3}, 2, 1, 2, 0, false,
              [](Graph& g) { conv2d(g, in(g, "x", {1, 4, 4, 3}), in(g, "w", {4, 1, 1, 3}), kNoValue, 0, 0); }),
    conv_case("k5 s1 p2", {1, 4, 5, 2}, 3, 5, 1, 2, true,
              [](Graph& g) { conv2d(g, in(g, "x", {1, 2, 2, 3}), in(g, "w", {4, 5, 5, 3}), kNoValue, 1, 0); }),
    conv_case("many channels span channel blocks and tiles", {1, 3, 3, 130}, 260, 1, 1, 0, true,
              [](Graph& g) {
                  conv2d(g, in(g, "x", {1, 4, 4, 3}), in(g, "w", {4, 3, 3, 3}, DType::bf16), kNoValue, 1, 1);
              }),
    conv_case("k3 s1 p1, 9 output channels (weight-grad row tile edge)", {1, 3, 6, 5}, 9, 3, 1, 1, false,
              [](Graph& g) { conv2d(g, in(g, "x", {1, 4, 4, 3}), in(g, "w", {4, 3, 3, 3}), kNoValue, 1, -1); }),
    conv_case("k3 s1 p1 on a 67-pixel-wide row", {1, 2, 67, 3}, 2, 3, 1, 1, true,
              [](Graph& g) { conv2d(g, in(g, "x", {1, 4, 4, 3}), in(g, "w", {4, 3, 3, 3}), in(g, "b", {1, 4}), 1, 1); }),
    qconv_case("quantized i8 k3 s1 p1, Cin 16 (the tensor-core tiles)", {2, 5, 6, 16}, 24, 3, 1, 1, DType::i8,
               [](Graph& g) {  // the scale must be f32
                   conv2d(g, in(g, "x", {1, 4, 4, 16}), bad_qweight(g, {8, 3, 3, 16}, DType::i8, DType::bf16), kNoValue,
                          1, 1);
               }),
    qconv_case("quantized f8e4m3 k3 s2 p1, Cin 16 (input-gradient phases)", {1, 7, 6, 16}, 16, 3, 2, 1,
               DType::f8e4m3,
               [](Graph& g) {  // codes must be i8 or f8e4m3
                   conv2d(g, in(g, "x", {1, 4, 4, 16}), bad_qweight(g, {8, 3, 3, 16}, DType::f32), kNoValue, 1, 1);
               }),
    qconv_case("quantized i8 k3 s1 p1, Cin 3 (the exact fallback)", {1, 5, 4, 3}, 5, 3, 1, 1, DType::i8,
               [](Graph& g) {  // the weight's Cin must match x
                   conv2d(g, in(g, "x", {1, 4, 4, 3}), bad_qweight(g, {8, 3, 3, 4}), kNoValue, 1, 1);
               }),
    qconv_case("quantized i8 k3 s1 p1, Cin 64 (channel slices through every tap)", {1, 4, 5, 64}, 16, 3, 1, 1,
               DType::i8,
               [](Graph& g) {  // one scale per Cout
                   conv2d(g, in(g, "x", {1, 4, 4, 64}),
                          QuantWeight{g.weight("q", DType::i8, {8, 3, 3, 64}), g.weight("s", DType::f32, {64})},
                          kNoValue, 1, 1);
               }),
    qconv_case("quantized f8e4m3 k1, Cin 32 -> 64", {1, 4, 4, 32}, 64, 1, 1, 0, DType::f8e4m3,
               [](Graph& g) {  // the input gradient needs its scale too
                   conv2d_grad_input(g, in(g, "gy", {1, 4, 4, 8}), in(g, "w", {8, 1, 1, 4}, DType::i8), 1, 0, 4, 4);
               }),
    {"conv2d", "quantized weight matches the dequantized definition",
     [](CaseBuilder& b) {
         ValueId x = b.c("x", {1, 5, 4, 8});
         const QuantWeight w = qconv(b, "w", {6, 3, 3, 8}, DType::i8);
         ValueId bias = b.c("bias", {6});
         const QuantWeight w8 = qconv(b, "w8", {4, 3, 3, 8}, DType::f8e4m3, 16.0f);
         b.out(conv2d(b.g, x, w, bias, 1, 1));
         b.out(conv2d(b.g, x, w8, kNoValue, 2, 1));
     },
     [](Graph& g) { conv2d(g, in(g, "x", {1, 4, 4, 8}), bad_qweight(g, {8, 3, 3, 8}), kNoValue, 0, 1); },
     [](const Outputs& d) {
         auto dequant = [](const std::vector<float>& q, const std::vector<float>& s) {
             std::vector<float> w(q.size());
             for (size_t i = 0; i < q.size(); i++) w[i] = q[i] * s[i / (q.size() / s.size())];
             return w;
         };
         return Outputs{naive_conv(d[0], dequant(d[1], d[2]), &d[3], {1, 5, 4, 8}, 6, 3, 1, 1),
                        naive_conv(d[0], dequant(d[4], d[5]), nullptr, {1, 5, 4, 8}, 4, 3, 2, 1)};
     },
     1e-5},
    {"conv2d", "forward matches the direct definition",
     [](CaseBuilder& b) {
         ValueId x1 = b.c("x1", {2, 5, 7, 3});
         ValueId w1 = b.c("w1", {4, 3, 3, 3});
         ValueId b1 = b.c("b1", {4});
         ValueId x2 = b.c("x2", {1, 6, 5, 130});
         ValueId w2 = b.c("w2", {5, 3, 3, 130});
         ValueId w3 = b.c("w3", {260, 1, 1, 130});
         b.out(conv2d(b.g, x1, w1, b1, 2, 1));
         b.out(conv2d(b.g, x1, w1, kNoValue, 1, 1));
         b.out(conv2d(b.g, x2, w2, kNoValue, 2, 0));
         b.out(conv2d(b.g, x2, w3, kNoValue, 1, 0));
     },
     [](Graph& g) { conv2d(g, in(g, "x", {1, 2, 2, 3}), in(g, "w", {4, 3, 3, 3}), kNoValue, 1, 0); },
     [](const Outputs& d) {
         return Outputs{naive_conv(d[0], d[1], &d[2], {2, 5, 7, 3}, 4, 3, 2, 1),
                        naive_conv(d[0], d[1], nullptr, {2, 5, 7, 3}, 4, 3, 1, 1),
                        naive_conv(d[3], d[4], nullptr, {1, 6, 5, 130}, 5, 3, 2, 0),
                        naive_conv(d[3], d[5], nullptr, {1, 6, 5, 130}, 260, 1, 1, 0)};
     },
     1e-5},

    {"upsample2x", "[2,3,2,3] -> [2,6,4,3]", [](CaseBuilder& b) { b.out(upsample2x(b.g, b.x("x", {2, 3, 2, 3}))); },
     [](Graph& g) { upsample2x(g, in(g, "x", {3, 2, 3})); }},
    {"upsample2x", "repeats each pixel over a 2x2 block",
     [](CaseBuilder& b) {
         ValueId x = b.c("x", {1, 2, 2, 2});
         b.set(x, {1, 2, 3, 4, 5, 6, 7, 8});
         b.out(upsample2x(b.g, x));
     },
     [](Graph& g) { upsample2x(g, in(g, "x", {1, 2, 2, 2}, DType::i32)); },
     [](const Outputs&) {
         return Outputs{{1, 2, 1, 2, 3, 4, 3, 4, 1, 2, 1, 2, 3, 4, 3, 4,
                         5, 6, 5, 6, 7, 8, 7, 8, 5, 6, 5, 6, 7, 8, 7, 8}};
     },
     0.0},
});

}  // namespace
}  // namespace gltest
