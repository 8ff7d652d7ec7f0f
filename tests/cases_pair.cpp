// Op cases of the joined pair (ops/pair.h) of linear and matmul: the pair node itself against a
// double reference written here (it has no backward rule), its bad calls, and the graphs the
// fusion pass joins (a LoRA's base and up projections, its input gradient dy W + dh A, split K,
// transposed and batched operands), whose gradients are checked by finite differences through
// the fused graph. The GPU parity test runs every case, so the CUDA pair paths (one TMA launch,
// gemm()'s two products, a second call for a second pair laid out otherwise) are compared with the CPU.
#include "op_cases.h"

#include "ggml-lite/ops/pair.h"

namespace gltest {
namespace {

using namespace gl;
using Outputs = std::vector<std::vector<float>>;

ValueId in(Graph& g, const char* name, Shape s, DType t = DType::f32) { return g.input(name, t, s); }

Params pair_params(bool ta = false, bool tb = false, bool residual = false) {
    Params p;
    p.i[0] = ta ? 1 : 0;
    p.i[1] = tb ? 1 : 0;
    p.i[kPairSlot] = 1;
    p.i[kResidualSlot] = residual ? 1 : 0;
    return p;
}

// out[b][m][n] = sum_k op(A)[b][m][k] op(B)[b][k][n] in double, accumulated into acc. A is
// [batch, M, K] (ta: [batch, K, M]); B [batch or 1, K, N] (tb: [.., N, K]).
void ref_product(std::vector<double>& acc, const std::vector<float>& A, const std::vector<float>& B, int64_t batch,
                 int64_t M, int64_t N, int64_t K, bool ta, bool tb, bool shared_b) {
    for (int64_t b = 0; b < batch; b++)
        for (int64_t m = 0; m < M; m++)
            for (int64_t n = 0; n < N; n++) {
                double s = 0;
                for (int64_t k = 0; k < K; k++) {
                    const float a = ta ? A[size_t((b * K + k) * M + m)] : A[size_t((b * M + m) * K + k)];
                    const int64_t bb = shared_b ? 0 : b;
                    const float w = tb ? B[size_t((bb * N + n) * K + k)] : B[size_t((bb * K + k) * N + n)];
                    s += double(a) * double(w);
                }
                acc[size_t((b * M + m) * N + n)] += s;
            }
}

Outputs rounded(const std::vector<double>& acc) {
    std::vector<float> out(acc.size());
    for (size_t i = 0; i < acc.size(); i++) out[i] = float(acc[i]);
    return {out};
}

Register r({
    {"linear", "a joined pair node: x w^T + x2 w2^T + bias + r against double sums (K = 40 and 16)",
     [](CaseBuilder& b) {
         const ValueId x = b.c("x", {2, 5, 40}), w = b.c("w", {24, 40}, -0.3f, 0.3f), bias = b.c("bias", {24});
         const ValueId x2 = b.c("x2", {2, 5, 16}), w2 = b.c("w2", {24, 16}), r = b.c("r", {2, 5, 24});
         b.out(b.g.apply1(Op::linear, {x, w, bias, x2, w2, r}, pair_params(false, false, true)));
     },
     [](Graph& g) {  // x2's leading dims must be x's
         g.apply1(Op::linear, {in(g, "x", {2, 5, 8}), in(g, "w", {4, 8}), in(g, "x2", {10, 3}), in(g, "w2", {4, 3})},
                  pair_params());
     },
     [](const Outputs& d) {
         // The product x w^T as a matmul with tb; the bias then the residual added in double.
         std::vector<double> acc(2 * 5 * 24, 0.0);
         ref_product(acc, d[0], d[1], 1, 10, 24, 40, false, true, true);
         ref_product(acc, d[3], d[4], 1, 10, 24, 16, false, true, true);
         for (size_t i = 0; i < acc.size(); i++) acc[i] += double(d[2][i % 24]) + double(d[5][i]);
         return rounded(acc);
     },
     1e-6},
    {"matmul", "a joined pair node: batched trans_a trans_b, b batched, b2 shared, with a residual",
     [](CaseBuilder& b) {
         const ValueId a = b.c("a", {3, 7, 6}), bm = b.c("b", {3, 9, 7});
         const ValueId a2 = b.c("a2", {3, 4, 6}), b2 = b.c("b2", {9, 4}), r = b.c("r", {3, 6, 9});
         b.out(b.g.apply1(Op::matmul, {a, bm, a2, b2, r}, pair_params(true, true, true)));
     },
     [](Graph& g) {  // a2 must have a's M rows
         g.apply1(Op::matmul, {in(g, "a", {4, 8}), in(g, "b", {8, 5}), in(g, "a2", {3, 2}), in(g, "b2", {2, 5})},
                  pair_params());
     },
     [](const Outputs& d) {
         std::vector<double> acc(3 * 6 * 9, 0.0);
         ref_product(acc, d[0], d[1], 3, 6, 9, 7, true, true, false);
         ref_product(acc, d[2], d[3], 3, 6, 9, 4, true, true, true);
         for (size_t i = 0; i < acc.size(); i++) acc[i] += double(d[4][i]);
         return rounded(acc);
     },
     1e-6},
    {"matmul", "a joined pair node, no residual, 2-D: a b + a2 b2 (known values)",
     [](CaseBuilder& b) {
         const ValueId a = b.c("a", {2, 2}), bm = b.c("b", {2, 2}), a2 = b.c("a2", {2, 1}), b2 = b.c("b2", {1, 2});
         b.set(a, {1, 2, 3, 4});
         b.set(bm, {1, 0, 0, 1});
         b.set(a2, {1, -1});
         b.set(b2, {0.5f, 2});
         b.out(b.g.apply1(Op::matmul, {a, bm, a2, b2}, pair_params()));
     },
     [](Graph& g) {  // a joined pair takes no quantized b
         Params p = pair_params();
         p.i[kQuantSlot] = 1;
         g.apply1(Op::matmul,
                  {in(g, "a", {2, 4}), in(g, "q", {4, 3}, DType::i8), in(g, "a2", {2, 2}), in(g, "b2", {2, 3}),
                   in(g, "s", {4})},
                  p);
     },
     [](const Outputs&) { return Outputs{{1.5f, 4, 2.5f, 2}}; },
     0.0},

    {"linear", "a LoRA'd linear joined to its residual stream: h + (base + up), K = 64 and 16, ragged rows",
     [](CaseBuilder& b) {
         const ValueId x = b.x("x", {2, 37, 64});
         const ValueId base = linear(b.g, x, b.x("w", {328, 64}, -0.2f, 0.2f), b.x("bias", {328}));
         const ValueId h = linear(b.g, x, b.x("down", {16, 64}, -0.2f, 0.2f));
         const ValueId up = linear(b.g, h, b.x("up", {328, 16}, -0.3f, 0.3f));
         b.out(add(b.g, b.x("hidden", {2, 37, 328}), add(b.g, base, up)));
     },
     [](Graph& g) {  // w2 must have w's rows
         g.apply1(Op::linear, {in(g, "x", {2, 8}), in(g, "w", {4, 8}), in(g, "x2", {2, 3}), in(g, "w2", {5, 3})},
                  pair_params());
     }},
    {"matmul", "a LoRA's input gradient dy W + dh A joined: K = 2048 over few tiles (split K) and K2 = 16",
     [](CaseBuilder& b) {
         const ValueId dy = b.x("dy", {8, 2048}, -0.1f, 0.1f), w = b.x("w", {2048, 64}, -0.1f, 0.1f);
         b.out(matmul_add(b.g, b.x("dh", {8, 16}), b.x("a", {16, 64}), matmul(b.g, dy, w)));
     },
     [](Graph& g) {  // the second pair's inner dims must agree
         g.apply1(Op::matmul, {in(g, "a", {4, 8}), in(g, "b", {8, 5}), in(g, "a2", {4, 2}), in(g, "b2", {3, 5})},
                  pair_params());
     }},
    {"matmul", "two products joined: batched, trans_a and trans_b, a shared b2, a residual on the first",
     [](CaseBuilder& b) {
         const ValueId q = matmul_add(b.g, b.x("a", {2, 24, 40}), b.x("b", {2, 48, 24}), b.x("r", {2, 40, 48}), true, true);
         b.out(matmul_add(b.g, b.x("a2", {2, 8, 40}), b.x("b2", {48, 8}), q, true, true));
     },
     [](Graph& g) {  // the pair flag is 0 or 1
         Params p = pair_params();
         p.i[kPairSlot] = 2;
         g.apply1(Op::matmul, {in(g, "a", {4, 8}), in(g, "b", {8, 5}), in(g, "a2", {4, 2}), in(g, "b2", {2, 5})}, p);
     }},
    {"matmul", "two products joined: a shared 2-D b folded into one GEMM, 16-wide tiles",
     [](CaseBuilder& b) {
         const ValueId q = matmul(b.g, b.x("a", {2, 24, 32}), b.x("b", {32, 40}));
         b.out(matmul_add(b.g, b.x("a2", {2, 24, 16}), b.x("b2", {16, 40}), q));
     },
     [](Graph& g) {  // b2's batch dims must be a's
         g.apply1(Op::matmul,
                  {in(g, "a", {2, 4, 8}), in(g, "b", {8, 5}), in(g, "a2", {2, 4, 2}), in(g, "b2", {3, 2, 5})},
                  pair_params());
     }},
});

}  // namespace
}  // namespace gltest
