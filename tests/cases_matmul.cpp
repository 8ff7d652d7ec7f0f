#include "op_cases.h"

namespace gltest {
namespace {

using namespace gl;
using Outputs = std::vector<std::vector<float>>;

// Direct definition of (optionally transposed, batched) matmul, independent of the kernel:
// the gradient checks only prove backward matches forward, so forward is checked here.
// b_batch is 1 when b is shared by every batch.
std::vector<float> naive_matmul(const std::vector<float>& a, const std::vector<float>& b, int64_t batch,
                                int64_t b_batch, int64_t M, int64_t K, int64_t N, bool ta, bool tb) {
    std::vector<float> c;
    for (int64_t z = 0; z < batch; z++)
        for (int64_t m = 0; m < M; m++)
            for (int64_t n = 0; n < N; n++) {
                double acc = 0;
                const int64_t zb = b_batch == 1 ? 0 : z;
                for (int64_t k = 0; k < K; k++) {
                    const float av = a[size_t(z * M * K + (ta ? k * M + m : m * K + k))];
                    const float bv = b[size_t(zb * K * N + (tb ? n * K + k : k * N + n))];
                    acc += double(av) * double(bv);
                }
                c.push_back(float(acc));
            }
    return c;
}

// A quantized weight [rows, cols] of the case: codes of dtype t (i8 in [-127, 127]; f8e4m3 integers
// in [-lim, lim) rounded to the format) and f32 row scales in [0.002, 0.02).
QuantWeight qweight(CaseBuilder& b, const std::string& name, const Shape& s, DType t, float lim = 127.0f) {
    return {b.kept(name, s, -lim, lim + 1.0f, t), b.kept(name + ".scale", {s.d[0]}, 0.002f, 0.02f, DType::f32)};
}

// codes [rows, cols] times their row scales.
std::vector<float> dequant(const std::vector<float>& q, const std::vector<float>& scale) {
    std::vector<float> w(q.size());
    const size_t cols = q.size() / scale.size();
    for (size_t i = 0; i < q.size(); i++) w[i] = q[i] * scale[i / cols];
    return w;
}

Register r({
    {"matmul", "2-D [3,5] x [5,4]", [](CaseBuilder& b) {
         b.out(matmul(b.g, b.x("a", {3, 5}), b.x("b", {5, 4})));
     },
     [](Graph& g) { matmul(g, g.input("a", DType::f32, {3, 5}), g.input("b", DType::f32, {4, 4})); }},
    {"matmul", "trans_a [5,3]^T x [5,4]", [](CaseBuilder& b) {
         b.out(matmul(b.g, b.x("a", {5, 3}), b.x("b", {5, 4}), true, false));
     },
     [](Graph& g) { matmul(g, g.input("a", DType::f32, {3, 5}), g.input("b", DType::f32, {5, 4}), true, false); }},
    {"matmul", "trans_b [3,5] x [4,5]^T", [](CaseBuilder& b) {
         b.out(matmul(b.g, b.x("a", {3, 5}), b.x("b", {4, 5}), false, true));
     },
     [](Graph& g) { matmul(g, g.input("a", DType::f32, {5}), g.input("b", DType::f32, {5, 4})); }},
    {"matmul", "both transposed", [](CaseBuilder& b) {
         b.out(matmul(b.g, b.x("a", {6, 3}), b.x("b", {2, 6}), true, true));
     },
     [](Graph& g) { matmul(g, g.input("a", DType::f32, {3, 5}), g.input("b", DType::bf16, {5, 4})); }},
    {"matmul", "batched [2,3,4,5] x [2,3,5,3]", [](CaseBuilder& b) {
         b.out(matmul(b.g, b.x("a", {2, 3, 4, 5}), b.x("b", {2, 3, 5, 3})));
     },
     [](Graph& g) {
         matmul(g, g.input("a", DType::f32, {2, 3, 4, 5}), g.input("b", DType::f32, {2, 2, 5, 3}));
     }},
    {"matmul", "batched, both transposed (attention-like scores)", [](CaseBuilder& b) {
         b.out(matmul(b.g, b.x("a", {3, 4, 5}), b.x("b", {3, 6, 4}), true, true));
     },
     [](Graph& g) { matmul(g, g.input("a", DType::f32, {2, 4, 5}), g.input("b", DType::f32, {3, 5, 3})); }},
    {"matmul", "batch-broadcast 2-D b", [](CaseBuilder& b) {
         b.out(matmul(b.g, b.x("a", {2, 3, 4, 5}), b.x("b", {5, 3})));
     },
     [](Graph& g) { matmul(g, g.input("a", DType::f32, {4, 5}), g.input("b", DType::f32, {2, 5, 3})); }},
    {"matmul", "batch-broadcast, trans_a and trans_b", [](CaseBuilder& b) {
         b.out(matmul(b.g, b.x("a", {3, 5, 4}), b.x("b", {2, 5}), true, true));
     },
     [](Graph& g) {
         matmul(g, g.input("a", DType::f32, {3, 5, 4}), g.input("b", DType::f32, {2, 4}), true, true);
     }},
    {"matmul", "batch-broadcast, trans_a only", [](CaseBuilder& b) {
         b.out(matmul(b.g, b.x("a", {2, 5, 3}), b.x("b", {5, 4}), true, false));
     },
     [](Graph& g) { matmul(g, g.input("i", DType::i32, {3, 5}), g.input("j", DType::i32, {5, 4})); }},
    {"matmul", "wide output spans several column tiles, deep K", [](CaseBuilder& b) {
         b.out(matmul(b.g, b.x("a", {5, 130}), b.x("b", {130, 300})));
     },
     [](Graph& g) { matmul(g, g.input("a", DType::f32, {3, 5}), g.input("b", DType::f32, {3, 5}), false, false); }},
    {"matmul", "bf16 inputs", [](CaseBuilder& b) {
         ValueId a = b.c("a", {3, 4}, -1, 1, DType::bf16);
         ValueId w = b.c("b", {4, 2}, -1, 1, DType::bf16);
         b.set(a, {1, 2, 0, -1, 0.5f, 0, 0, 2, 0, 0, 1, 1});
         b.set(w, {1, 0, 0, 1, 1, 1, 2, -1});
         b.out(matmul(b.g, a, w));
     },
     [](Graph& g) { matmul(g, g.input("a", DType::bf16, {3, 4}), g.input("b", DType::bf16, {3, 2})); },
     [](const std::vector<std::vector<float>>&) {
         return std::vector<std::vector<float>>{{-1, 3, 4.5f, -2, 3, 0}};
     },
     0.0},
    {"matmul", "forward matches the direct definition",
     [](CaseBuilder& b) {
         ValueId a = b.c("a", {2, 3, 7, 5});
         ValueId bb = b.c("b", {2, 3, 5, 6});
         ValueId bt = b.c("bt", {2, 3, 6, 5});
         ValueId shared = b.c("shared", {6, 5});
         ValueId wide = b.c("wide", {70, 300});
         ValueId deep = b.c("deep", {9, 70});
         ValueId shared_k7 = b.c("shared_k7", {7, 4});
         b.out(matmul(b.g, a, bb));
         b.out(matmul(b.g, a, bt, false, true));
         b.out(matmul(b.g, a, shared_k7, true, false));
         b.out(matmul(b.g, a, shared, false, true));
         b.out(matmul(b.g, deep, wide));
     },
     [](Graph& g) { matmul(g, g.input("a", DType::f32, {3, 5}), g.input("b", DType::f32, {5, 4}), true, true); },
     [](const Outputs& d) {
         return Outputs{naive_matmul(d[0], d[1], 6, 6, 7, 5, 6, false, false),
                        naive_matmul(d[0], d[2], 6, 6, 7, 5, 6, false, true),
                        naive_matmul(d[0], d[6], 6, 1, 5, 7, 4, true, false),
                        naive_matmul(d[0], d[3], 6, 1, 7, 5, 6, false, true),
                        naive_matmul(d[5], d[4], 1, 1, 9, 70, 300, false, false)};
     },
     1e-5},

    {"matmul", "quantized i8 b [48,64] (the tensor-core tiles), gradient to a", [](CaseBuilder& b) {
         b.out(matmul(b.g, b.x("a", {2, 5, 48}), qweight(b, "b", {48, 64}, DType::i8)));
     },
     [](Graph& g) {  // a quantized b must be 2-D
         matmul(g, g.input("a", DType::f32, {2, 3, 4}), QuantWeight{g.weight("q", DType::i8, {2, 4, 5}),
                                                                     g.weight("s", DType::f32, {2})});
     }},
    {"matmul", "quantized f8e4m3 b, trans_b, odd sizes", [](CaseBuilder& b) {
         b.out(matmul(b.g, b.x("a", {3, 5, 7}), qweight(b, "b", {9, 7}, DType::f8e4m3, 300.0f), false, true));
     },
     [](Graph& g) {  // a is never transposed against a quantized b
         matmul(g, g.input("a", DType::f32, {4, 3}),
                QuantWeight{g.weight("q", DType::i8, {4, 5}), g.weight("s", DType::f32, {4})}, true, false);
     }},
    {"matmul", "quantized i8 b, one row of a, gradient to a", [](CaseBuilder& b) {
         b.out(matmul(b.g, b.x("a", {1, 64}), qweight(b, "b", {64, 40}, DType::i8)));
     },
     [](Graph& g) {  // the scale must be f32 and one per row of b
         matmul(g, g.input("a", DType::f32, {3, 5}),
                QuantWeight{g.weight("q", DType::i8, {5, 4}), g.weight("s", DType::f32, {4})});
     }},
    {"matmul", "quantized b matches the dequantized definition",
     [](CaseBuilder& b) {
         ValueId a = b.c("a", {2, 7, 5});
         const QuantWeight q = qweight(b, "q", {5, 6}, DType::i8);
         const QuantWeight qt = qweight(b, "qt", {6, 5}, DType::f8e4m3, 16.0f);
         b.out(matmul(b.g, a, q));
         b.out(matmul(b.g, a, qt, false, true));
     },
     [](Graph& g) {
         matmul(g, g.input("a", DType::f32, {3, 5}),
                QuantWeight{g.weight("q", DType::f32, {5, 4}), g.weight("s", DType::f32, {5})});
     },
     [](const Outputs& d) {
         return Outputs{naive_matmul(d[0], dequant(d[1], d[2]), 2, 1, 7, 5, 6, false, false),
                        naive_matmul(d[0], dequant(d[3], d[4]), 2, 1, 7, 5, 6, false, true)};
     },
     1e-5},

    {"linear", "[2,3,5] -> [2,3,4] with bias", [](CaseBuilder& b) {
         b.out(linear(b.g, b.x("x", {2, 3, 5}), b.x("w", {4, 5}), b.x("bias", {4})));
     },
     [](Graph& g) { linear(g, g.input("x", DType::f32, {2, 5}), g.input("w", DType::f32, {4, 6})); }},
    {"linear", "2-D without bias", [](CaseBuilder& b) {
         b.out(linear(b.g, b.x("x", {7, 6}), b.x("w", {3, 6})));
     },
     [](Graph& g) {
         linear(g, g.input("x", DType::f32, {2, 5}), g.input("w", DType::f32, {4, 5}), g.input("b", DType::f32, {5}));
     }},
    {"linear", "1-D x, 4-D x", [](CaseBuilder& b) {
         ValueId w = b.x("w", {3, 4});
         ValueId bias = b.x("bias", {3});
         b.out(linear(b.g, b.x("x1", {4}), w, bias));
         b.out(linear(b.g, b.x("x4", {2, 2, 3, 4}), w, bias));
     },
     [](Graph& g) { linear(g, g.input("x", DType::f32, {2, 5}), g.input("w", DType::f32, {2, 2, 5})); }},
    {"linear", "few rows with bias, K past a warp's sweep (the GPU's few-row kernel)", [](CaseBuilder& b) {
         b.out(linear(b.g, b.x("x", {5, 1040}), b.x("w", {24, 1040}), b.x("bias", {24})));
         b.out(linear(b.g, b.x("x2", {2, 136}), b.c("w2", {40, 136})));
     },
     [](Graph& g) { linear(g, g.input("x", DType::f32, {2, 8}), g.input("w", DType::f32, {16, 9})); }},
    {"matmul", "batched trans_b with few rows [2,3,64] x [2,24,64]^T", [](CaseBuilder& b) {
         b.out(matmul(b.g, b.x("a", {2, 3, 64}), b.x("b", {2, 24, 64}), false, true));
     },
     [](Graph& g) { matmul(g, g.input("a", DType::f32, {2, 3, 64}), g.input("b", DType::f32, {2, 64, 24}), false, true); }},
    {"linear", "frozen weight, gradient to x only", [](CaseBuilder& b) {
         b.out(linear(b.g, b.x("x", {5, 9}), b.c("w", {6, 9}), b.c("bias", {6})));
     },
     [](Graph& g) {
         linear(g, g.input("x", DType::f32, {2, 5}), g.input("w", DType::bf16, {4, 5}), g.input("b", DType::f32, {4}));
     }},
    {"linear", "quantized i8 weight with bias (the tensor-core tiles), gradient to x", [](CaseBuilder& b) {
         b.out(linear(b.g, b.x("x", {2, 5, 64}), qweight(b, "w", {48, 64}, DType::i8), b.c("bias", {48})));
     },
     [](Graph& g) {  // the bias must have x's dtype
         linear(g, g.input("x", DType::bf16, {2, 5}),
                QuantWeight{g.weight("q", DType::i8, {4, 5}), g.weight("s", DType::f32, {4})}, g.input("b", DType::f32, {4}));
     }},
    {"linear", "quantized f8e4m3 weight, odd sizes, no bias", [](CaseBuilder& b) {
         b.out(linear(b.g, b.x("x", {7, 13}), qweight(b, "w", {11, 13}, DType::f8e4m3, 300.0f)));
     },
     [](Graph& g) {  // codes must be i8 or f8e4m3
         linear(g, g.input("x", DType::f32, {2, 5}),
                QuantWeight{g.weight("q", DType::u8, {4, 5}), g.weight("s", DType::f32, {4})});
     }},
    {"linear", "quantized weight, K = 1024 over few tiles (split K)", [](CaseBuilder& b) {
         b.out(linear(b.g, b.x("x", {2, 1024}), qweight(b, "w", {64, 1024}, DType::f8e4m3, 300.0f), b.c("bias", {64})));
     },
     [](Graph& g) {  // the scale must be [out]
         linear(g, g.input("x", DType::f32, {2, 5}),
                QuantWeight{g.weight("q", DType::i8, {4, 5}), g.weight("s", DType::f32, {5})});
     }},
    {"linear", "quantized weight matches the dequantized definition",
     [](CaseBuilder& b) {
         ValueId x = b.c("x", {3, 8});
         const QuantWeight w = qweight(b, "w", {5, 8}, DType::i8);
         ValueId bias = b.c("bias", {5});
         const QuantWeight w8 = qweight(b, "w8", {5, 8}, DType::f8e4m3, 16.0f);
         b.out(linear(b.g, x, w, bias));
         b.out(linear(b.g, x, w8));
     },
     [](Graph& g) {
         linear(g, g.input("x", DType::f32, {2, 5}),
                QuantWeight{g.weight("q", DType::i8, {4, 5}), g.weight("s", DType::bf16, {4})});
     },
     [](const Outputs& d) {
         std::vector<float> y = naive_matmul(d[0], dequant(d[1], d[2]), 1, 1, 3, 8, 5, false, true);
         for (size_t i = 0; i < y.size(); i++) y[i] += d[3][i % 5];
         return Outputs{y, naive_matmul(d[0], dequant(d[4], d[5]), 1, 1, 3, 8, 5, false, true)};
     },
     1e-5},
    {"linear", "known values", [](CaseBuilder& b) {
         ValueId x = b.c("x", {2, 3});
         ValueId w = b.c("w", {2, 3});
         ValueId bias = b.c("bias", {2});
         b.set(x, {1, 2, 3, -1, 0, 1});
         b.set(w, {1, 0, -1, 2, 1, 0});
         b.set(bias, {0.5f, -1});
         b.out(linear(b.g, x, w, bias));
     },
     [](Graph& g) { linear(g, g.input("x", DType::f32, {}), g.input("w", DType::f32, {4, 1})); },
     [](const std::vector<std::vector<float>>&) {
         return std::vector<std::vector<float>>{{-1.5f, 3, -1.5f, -3}};
     },
     0.0},
});

}  // namespace
}  // namespace gltest
