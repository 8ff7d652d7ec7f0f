// Matrix products: batched matmul with transpose flags, and linear (x w^T + bias).
// CPU kernel: B is packed [K, N] so the innermost loop runs over contiguous columns; each
// task computes a 4 x 256 tile of C in 64-deep blocks whose 4 x 8 strips of float sums stay
// in registers (gemm_block, also used by the conv family); the float block sums are folded
// into double accumulators, in the same order whatever the thread count.
#include <algorithm>

#include "ggml-lite/ops/cpu_gemm.h"
#include "ggml-lite/ops/family.h"
#include "ggml-lite/ops/pair.h"
#include "ggml-lite/ops/quant.h"
#include "ggml-lite/ops/residual.h"

// On x86-64 glibc the block is also compiled for AVX2, picked at load time. Without FMA
// contraction (ISO C++ mode) both versions round every product and sum alike, so the
// choice never changes a result.
#if defined(__x86_64__) && defined(__linux__) && defined(__GLIBC__) && (defined(__GNUC__) || defined(__clang__))
#define GL_SIMD_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define GL_SIMD_CLONES
#endif

namespace gl {

GL_SIMD_CLONES void gemm_block(const float* a_blk, const float* b, int64_t ldb, int64_t depth, int64_t nc,
                               float* part, int64_t ldp) {
    constexpr int64_t R = kGemmRows, W = 8;
    const int64_t strips = nc / W;
    for (int64_t s = 0; s < strips; s++) {
        float c[R][W] = {};
        const float* bs = b + s * W;
        for (int64_t k = 0; k < depth; k++) {
            const float* bk = bs + k * ldb;
            const float* ak = a_blk + k * R;
            for (int64_t r = 0; r < R; r++)
                for (int64_t j = 0; j < W; j++) c[r][j] += ak[r] * bk[j];
        }
        for (int64_t r = 0; r < R; r++)
            for (int64_t j = 0; j < W; j++) part[r * ldp + s * W + j] = c[r][j];
    }
    for (int64_t j = strips * W; j < nc; j++)
        for (int64_t r = 0; r < R; r++) {
            float sum = 0.0f;
            for (int64_t k = 0; k < depth; k++) sum += a_blk[k * R + r] * b[k * ldb + j];
            part[r * ldp + j] = sum;
        }
}

namespace {

constexpr int64_t kRowTile = kGemmRows;
constexpr int64_t kColTile = 256;

// C[b] = A[b] (M x K) * B[b] (K x N) (+ A2[b] (M x K2) * B2[b] (K2 x N)) (+ bias[N]); all
// row-major and dense. A batch stride of 0 shares that operand across the batch. The second
// product (ops/pair.h) sums into the first's double accumulators: one rounding for both.
struct Gemm {
    int64_t batch = 1, M = 0, N = 0, K = 0;
    const float* A = nullptr;
    int64_t sA = 0;
    const float* B = nullptr;
    int64_t sB = 0;
    int64_t K2 = 0;
    const float* A2 = nullptr;
    int64_t sA2 = 0;
    const float* B2 = nullptr;
    int64_t sB2 = 0;
    float* C = nullptr;
    int64_t sC = 0;
    const float* bias = nullptr;
};

void gemm_tile(const Gemm& g, int64_t b, int64_t m0, int64_t n0) {
    const int64_t rows = std::min(kRowTile, g.M - m0), nc = std::min(kColTile, g.N - n0);
    float a_blk[kGemmDepth][kRowTile];  // k-major; rows past M stay zero
    float part[kRowTile][kColTile];
    double acc[kRowTile][kColTile] = {};
    // The first product, then the second (when there is one) into the same sums.
    for (int pass = 0; pass < (g.A2 ? 2 : 1); pass++) {
        const int64_t K = pass == 0 ? g.K : g.K2;
        const float* A = pass == 0 ? g.A + b * g.sA + m0 * K : g.A2 + b * g.sA2 + m0 * K;
        const float* B = pass == 0 ? g.B + b * g.sB + n0 : g.B2 + b * g.sB2 + n0;
        for (int64_t k0 = 0; k0 < K; k0 += kGemmDepth) {
            const int64_t depth = std::min(K - k0, kGemmDepth);
            for (int64_t k = 0; k < depth; k++)
                for (int64_t r = 0; r < kRowTile; r++) a_blk[k][r] = r < rows ? A[r * K + k0 + k] : 0.0f;
            gemm_block(&a_blk[0][0], B + k0 * g.N, g.N, depth, nc, &part[0][0], kColTile);
            for (int64_t r = 0; r < rows; r++)
                for (int64_t j = 0; j < nc; j++) acc[r][j] += double(part[r][j]);
        }
    }
    float* C = g.C + b * g.sC + m0 * g.N + n0;
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < nc; j++)
            C[r * g.N + j] = float(acc[r][j] + (g.bias ? double(g.bias[n0 + j]) : 0.0));
}

void gemm(const Gemm& g) {
    if (g.M == 0 || g.N == 0) return;
    const int64_t mt = (g.M + kRowTile - 1) / kRowTile, nt = (g.N + kColTile - 1) / kColTile;
    const int64_t tile_work = kRowTile * std::min(kColTile, g.N) * std::max<int64_t>(g.K + g.K2, 1);
    parallel_for(g.batch * mt * nt, std::max<int64_t>(1, (int64_t(1) << 16) / tile_work), [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; t++) {
            const int64_t b = t / (mt * nt), rest = t % (mt * nt);
            gemm_tile(g, b, (rest / nt) * kRowTile, (rest % nt) * kColTile);
        }
    });
}

// dst[b] (cols x rows) = transpose of src[b] (rows x cols), in 32 x 32 blocks.
std::vector<float> transpose_batched(const float* src, int64_t batch, int64_t rows, int64_t cols) {
    std::vector<float> dst(size_t(batch * rows * cols));
    const int64_t bt = (rows + 31) / 32;
    parallel_for(batch * bt, 4, [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; t++) {
            const int64_t b = t / bt, r0 = (t % bt) * 32, r1 = std::min(rows, r0 + 32);
            const float* s = src + b * rows * cols;
            float* d = dst.data() + b * rows * cols;
            for (int64_t c0 = 0; c0 < cols; c0 += 32)
                for (int64_t r = r0; r < r1; r++)
                    for (int64_t c = c0; c < std::min(cols, c0 + 32); c++) d[c * rows + r] = s[r * cols + c];
        }
    });
    return dst;
}

bool all_float_same(const OpCall& c) {
    for (int i = 0; i < c.n_in(); i++) {
        if (!dtype_is_float(c.dtype(i))) return false;
        if (c.dtype(i) != c.dtype(0)) return false;
    }
    return true;
}

std::vector<int> swap_last2_perm(int nd) {
    std::vector<int> perm(static_cast<size_t>(nd));
    for (int k = 0; k < nd; k++) perm[size_t(k)] = k;
    std::swap(perm[size_t(nd - 2)], perm[size_t(nd - 1)]);
    return perm;
}

}  // namespace

// ---------------- matmul: p.i[0] trans_a, p.i[1] trans_b, p.i[kQuantSlot] quantized b, p.i[kResidualSlot] residual ----------------
// Inputs {a, b}, same float dtype; output in that dtype. a [..., M, K] (trans_a: [..., K, M]),
// b [..., K, N] (trans_b: [..., N, K]); b's batch dims equal a's, or b is 2-D and shared.
// Quantized (ops/quant.h): {a, b codes, b's scale [b rows]}, b 2-D, a not transposed, output in
// a's dtype. With a residual (ops/residual.h) r [..., M, N] follows b: out = a b + r. With a
// second pair (ops/pair.h, made by the fusion pass) {a, b, a2, b2 (, r)}: out = a b + a2 b2 (+ r).

static std::vector<OutSpec> matmul_infer(const OpCall& c) {
    c.check(c.p.i[kQuantSlot] == 0 || c.p.i[kQuantSlot] == 1, "the quantized flag must be 0 or 1");
    c.check(c.p.i[kPairSlot] == 0 || c.p.i[kPairSlot] == 1, "the pair flag must be 0 or 1");
    c.check(!has_pair(c.p) || !is_quantized(c.p), "a joined pair takes no quantized b");
    const int n = first_operands(c.p, c.n_in());
    if (is_quantized(c.p)) {
        c.check(n == 2, "takes a, quantized b (and a residual) and b's scale");
        c.check(dtype_is_float(c.dtype(0)), "a must be floating point");
        check_quant_weight(c, 1);
        c.check(c.shape(1).nd == 2, "a quantized b must be 2-D");
        c.check(c.p.i[0] == 0, "a quantized b takes a untransposed (the kernels read a row-major)");
    } else {
        c.check(n == 2, has_pair(c.p) ? "takes a, b, a2, b2 (and a residual)" : "takes two inputs (and a residual)");
        c.check(all_float_same(c), "inputs must share one floating-point dtype");
    }
    const Shape &a = c.shape(0), &b = c.shape(1);
    c.check(c.p.i[0] == 0 || c.p.i[0] == 1, "trans_a must be 0 or 1");
    c.check(c.p.i[1] == 0 || c.p.i[1] == 1, "trans_b must be 0 or 1");
    c.check(a.nd >= 2 && b.nd >= 2, "inputs need at least 2 dims");
    c.check(b.nd == 2 || b.nd == a.nd, "b must be 2-D or have a's batch dims");
    for (int k = 0; b.nd > 2 && k < a.nd - 2; k++)
        c.check(a.d[size_t(k)] == b.d[size_t(k)], "batch dim ", k, " differs");
    const bool ta = c.p.i[0] != 0, tb = c.p.i[1] != 0;
    const int64_t M = ta ? a.dim(-1) : a.dim(-2), Ka = ta ? a.dim(-2) : a.dim(-1);
    const int64_t Kb = tb ? b.dim(-1) : b.dim(-2), N = tb ? b.dim(-2) : b.dim(-1);
    c.check(Ka == Kb, "inner dims differ: ", Ka, " vs ", Kb);
    Shape out = a;
    out.d[size_t(a.nd - 2)] = M;
    out.d[size_t(a.nd - 1)] = N;
    if (has_pair(c.p)) {  // a2 [..., M, K2] with a's batch dims, b2 [..., K2, N] or 2-D; the same flags
        const int i2 = pair_index(c.p, c.n_in());
        const Shape &a2 = c.shape(i2), &b2 = c.shape(i2 + 1);
        c.check(a2.nd == a.nd, "a2 must have a's rank ", a.nd);
        for (int k = 0; k < a.nd - 2; k++) c.check(a2.d[size_t(k)] == a.d[size_t(k)], "a2's batch dim ", k, " differs");
        c.check(b2.nd == 2 || b2.nd == a.nd, "b2 must be 2-D or have a's batch dims");
        for (int k = 0; b2.nd > 2 && k < a.nd - 2; k++)
            c.check(b2.d[size_t(k)] == a.d[size_t(k)], "b2's batch dim ", k, " differs");
        const int64_t M2 = ta ? a2.dim(-1) : a2.dim(-2), K2a = ta ? a2.dim(-2) : a2.dim(-1);
        const int64_t K2b = tb ? b2.dim(-1) : b2.dim(-2), N2 = tb ? b2.dim(-2) : b2.dim(-1);
        c.check(M2 == M, "a2 has ", M2, " rows, a ", M);
        c.check(N2 == N, "b2 has ", N2, " columns, b ", N);
        c.check(K2a == K2b, "the second pair's inner dims differ: ", K2a, " vs ", K2b);
    }
    const OutSpec spec = dense(c.dtype(0), out);
    check_residual(c, spec);
    return {spec};
}

// A joined pair: both products' flops; its bytes are every input read once and the output written
// once, the residual pass between the two products (the first's output written, then read) gone.
static Cost matmul_cost(const OpCall& c) {
    const Shape &a = c.shape(0), &b = c.shape(1);
    const bool ta = c.p.i[0] != 0, tb = c.p.i[1] != 0;
    const double m = double(ta ? a.dim(-1) : a.dim(-2));
    double k = double(ta ? a.dim(-2) : a.dim(-1));
    if (has_pair(c.p)) {
        const Shape& a2 = c.shape(pair_index(c.p, c.n_in()));
        k += double(ta ? a2.dim(-2) : a2.dim(-1));
    }
    const double n = double(tb ? b.dim(-2) : b.dim(-1));
    double batch = 1;
    for (int d = 0; d < a.nd - 2; d++) batch *= double(a.d[size_t(d)]);
    return {2.0 * batch * m * n * k, call_bytes_all_in(c) + batch * m * n * double(dtype_size(c.dtype(0)))};
}

static void matmul_backward(BackwardCtx& bc) {
    Graph& g = bc.g;
    const ValueId A = bc.in(0), B = bc.in(1), gC = bc.grad();
    const bool ta = bc.p().i[0] != 0, tb = bc.p().i[1] != 0;
    const Shape as = g.shape(A);
    const bool shared_b = g.shape(B).nd == 2 && as.nd > 2;
    const int n_in = int(bc.node.in.size());
    GL_CHECK(!has_pair(bc.p()), "matmul: a joined pair (ops/pair.h) exists only after fusion and has no backward rule; "
                                "differentiate the unfused graph");
    if (has_residual(bc.p()) && bc.wants(residual_index(bc.p(), n_in))) bc.add(residual_index(bc.p(), n_in), gC);
    if (is_quantized(bc.p())) {
        GL_CHECK(!bc.wants(1) && !bc.wants(n_in - 1), "matmul: a quantized b is frozen and has no gradient");
        // dA = gC op(B)^T: the same codes and scales, read the other way (A is never transposed).
        if (bc.wants(0)) bc.add(0, matmul(g, gC, QuantWeight{B, bc.in(n_in - 1)}, false, !tb));
        return;
    }
    // With C = op(A) op(B): d op(A) = gC op(B)^T and d op(B) = op(A)^T gC.
    if (bc.wants(0)) {
        if (!ta)
            bc.add(0, matmul(g, gC, B, false, !tb));
        else if (!shared_b)
            bc.add(0, matmul(g, B, gC, tb, true));
        else  // B cannot lead a batched product, so form d op(A) and transpose it.
            bc.add(0, contiguous(g, permute(g, matmul(g, gC, B, false, !tb), swap_last2_perm(as.nd))));
    }
    if (bc.wants(1)) {
        if (!shared_b) {
            bc.add(1, tb ? matmul(g, gC, A, true, ta) : matmul(g, A, gC, !ta, false));
        } else {
            // A shared b sums its gradient over a's batch: fold the batch into the rows.
            const Shape cs = g.shape(gC);
            const int64_t rows = as.numel() / (as.dim(-1) * as.dim(-2)) * cs.dim(-2);
            ValueId a_rows = ta ? permute(g, A, swap_last2_perm(as.nd)) : A;
            a_rows = reshape(g, a_rows, {rows, ta ? as.dim(-2) : as.dim(-1)});
            ValueId g_rows = reshape(g, gC, {rows, cs.dim(-1)});
            bc.add(1, tb ? matmul(g, g_rows, a_rows, true, false) : matmul(g, a_rows, g_rows, true, false));
        }
    }
}

static void matmul_cpu(CpuCtx& c) {
    const Shape &as = c.in_shape(0), &bs = c.in_shape(1), &cs = c.out_shape(0);
    const bool ta = c.p().i[0] != 0, tb = c.p().i[1] != 0;
    Gemm g;
    g.M = cs.dim(-2);
    g.N = cs.dim(-1);
    g.K = ta ? as.dim(-2) : as.dim(-1);
    g.batch = cs.numel() / std::max<int64_t>(1, g.M * g.N);
    if (g.M * g.N == 0) return;
    const int64_t b_batch = bs.nd == 2 ? 1 : g.batch;
    std::vector<float> a_packed, b_packed, b_dequant;
    g.A = c.in_f32(0);
    if (ta) {
        a_packed = transpose_batched(g.A, g.batch, g.K, g.M);
        g.A = a_packed.data();
    }
    g.B = cpu_weight(c, 1, b_dequant);
    if (tb) {
        b_packed = transpose_batched(g.B, b_batch, g.N, g.K);
        g.B = b_packed.data();
    }
    g.sA = g.M * g.K;
    g.sB = b_batch == 1 ? 0 : g.K * g.N;
    std::vector<float> a2_packed, b2_packed;
    if (has_pair(c.p())) {
        const int i2 = pair_index(c.p(), c.n_in());
        const Shape& a2s = c.in_shape(i2);
        g.K2 = ta ? a2s.dim(-2) : a2s.dim(-1);
        const int64_t b2_batch = c.in_shape(i2 + 1).nd == 2 ? 1 : g.batch;
        g.A2 = c.in_f32(i2);
        if (ta) {
            a2_packed = transpose_batched(g.A2, g.batch, g.K2, g.M);
            g.A2 = a2_packed.data();
        }
        g.B2 = c.in_f32(i2 + 1);
        if (tb) {
            b2_packed = transpose_batched(g.B2, b2_batch, g.N, g.K2);
            g.B2 = b2_packed.data();
        }
        g.sA2 = g.M * g.K2;
        g.sB2 = b2_batch == 1 ? 0 : g.K2 * g.N;
    }
    g.C = c.out_f32(0);
    g.sC = g.M * g.N;
    std::vector<float> r_copy;
    const float* r = cpu_residual(c, g.C, r_copy);
    gemm(g);
    add_cpu_residual(r, g.C, cs.numel());
}

ValueId matmul(Graph& g, ValueId a, ValueId b, bool trans_a, bool trans_b) {
    Params p;
    p.i[0] = trans_a ? 1 : 0;
    p.i[1] = trans_b ? 1 : 0;
    return g.apply1(Op::matmul, {a, b}, p);
}

ValueId matmul(Graph& g, ValueId a, const QuantWeight& b, bool trans_a, bool trans_b) {
    Params p;
    p.i[0] = trans_a ? 1 : 0;
    p.i[1] = trans_b ? 1 : 0;
    p.i[kQuantSlot] = 1;
    return g.apply1(Op::matmul, {a, b.q, b.scale}, p);
}

ValueId matmul_add(Graph& g, ValueId a, ValueId b, ValueId r, bool trans_a, bool trans_b) {
    Params p;
    p.i[0] = trans_a ? 1 : 0;
    p.i[1] = trans_b ? 1 : 0;
    p.i[kResidualSlot] = 1;
    return g.apply1(Op::matmul, {a, b, r}, p);
}

const OpDef def_matmul{"matmul", "matmul", matmul_infer, matmul_cost, matmul_backward, matmul_cpu, 0,
                       residual_input_of, take_residual, join_pair};

// ---------------- linear: p.i[kQuantSlot] quantized w, p.i[kResidualSlot] residual ----------------
// Inputs {x, w} or {x, w, bias}, one float dtype; x [..., in], w [out, in], bias [out] -> [..., out].
// Quantized (ops/quant.h): w holds codes and w's scale [out] follows as the last input. With a
// residual (ops/residual.h) r [..., out] follows: out = x w^T + bias + r. With a second pair
// (ops/pair.h, made by the fusion pass) {x, w, [bias], x2, w2 (, r)}: out = x w^T + x2 w2^T + ...

static bool linear_has_bias(const Params& p, int n_in) { return first_operands(p, n_in) == 3; }

static std::vector<OutSpec> linear_infer(const OpCall& c) {
    c.check(c.p.i[kQuantSlot] == 0 || c.p.i[kQuantSlot] == 1, "the quantized flag must be 0 or 1");
    c.check(c.p.i[kPairSlot] == 0 || c.p.i[kPairSlot] == 1, "the pair flag must be 0 or 1");
    c.check(!has_pair(c.p) || !is_quantized(c.p), "a joined pair takes no quantized w");
    const int n = first_operands(c.p, c.n_in());
    c.check(n == 2 || n == 3, has_pair(c.p) ? "takes x, w, an optional bias, x2, w2 (and a residual)"
                                            : "takes x, w and an optional bias (and a residual, a quantized w's scale)");
    if (is_quantized(c.p)) {
        check_quant_weight(c, 1);
        c.check(dtype_is_float(c.dtype(0)), "x must be floating point");
        c.check(n == 2 || c.dtype(2) == c.dtype(0), "bias must have x's dtype");
    } else {
        c.check(all_float_same(c), "inputs must share one floating-point dtype");
    }
    const Shape &x = c.shape(0), &w = c.shape(1);
    c.check(x.nd >= 1, "x needs at least 1 dim");
    c.check(w.nd == 2, "w must be [out, in]");
    c.check(x.last() == w.d[1], "x has ", x.last(), " features, w expects ", w.d[1]);
    if (n == 3) c.check(c.shape(2) == Shape{w.d[0]}, "bias must be [", w.d[0], "]");
    Shape out = x;
    out.d[size_t(x.nd - 1)] = w.d[0];
    if (has_pair(c.p)) {  // x2 [..., K2] with x's leading dims, w2 [out, K2]
        const int i2 = pair_index(c.p, c.n_in());
        const Shape &x2 = c.shape(i2), &w2 = c.shape(i2 + 1);
        c.check(x2.nd == x.nd, "x2 must have x's rank ", x.nd);
        for (int k = 0; k < x.nd - 1; k++) c.check(x2.d[size_t(k)] == x.d[size_t(k)], "x2's dim ", k, " differs from x's");
        c.check(w2.nd == 2 && w2.d[0] == w.d[0], "w2 must be [", w.d[0], ", in2]");
        c.check(x2.last() == w2.d[1], "x2 has ", x2.last(), " features, w2 expects ", w2.d[1]);
    }
    const OutSpec spec = dense(c.dtype(0), out);
    check_residual(c, spec);
    return {spec};
}

// A joined pair, as matmul's: both products' flops, every input read once, the output written once.
static Cost linear_cost(const OpCall& c) {
    const Shape &x = c.shape(0), &w = c.shape(1);
    const double rows = double(x.numel() / std::max<int64_t>(1, x.last()));
    const double out = rows * double(w.d[0]);
    double k = double(w.d[1]);
    if (has_pair(c.p)) k += double(c.shape(pair_index(c.p, c.n_in()) + 1).d[1]);
    return {2.0 * rows * double(w.d[0]) * k, call_bytes_all_in(c) + out * double(dtype_size(c.dtype(0)))};
}

static void linear_backward(BackwardCtx& bc) {
    Graph& g = bc.g;
    const ValueId x = bc.in(0), w = bc.in(1), gy = bc.grad();
    const Shape xs = g.shape(x), ws = g.shape(w);
    const int64_t rows = xs.numel() / std::max<int64_t>(1, xs.last());
    const ValueId gy_rows = reshape(g, gy, {rows, ws.d[0]});
    const int n_in = int(bc.node.in.size());
    GL_CHECK(!has_pair(bc.p()), "linear: a joined pair (ops/pair.h) exists only after fusion and has no backward rule; "
                                "differentiate the unfused graph");
    const bool quant = is_quantized(bc.p()), bias = linear_has_bias(bc.p(), n_in);
    if (quant) GL_CHECK(!bc.wants(1) && !bc.wants(n_in - 1), "linear: a quantized weight is frozen and has no gradient");
    if (bc.wants(0)) {
        // gy [..., out] times the shared w is dx in x's shape: no reshape between the product and
        // the sum of x's gradients, so the fusion pass can fold that sum into the product.
        const ValueId a = xs.nd >= 2 ? gy : gy_rows;
        const ValueId gx = quant ? matmul(g, a, QuantWeight{w, bc.in(n_in - 1)}) : matmul(g, a, w);
        bc.add(0, xs.nd >= 2 ? gx : reshape(g, gx, xs));
    }
    if (!quant && bc.wants(1)) bc.add(1, matmul(g, gy_rows, reshape(g, x, {rows, ws.d[1]}), true, false));
    if (bias && bc.wants(2)) bc.add(2, sum_to(g, gy, {ws.d[0]}));
    if (has_residual(bc.p()) && bc.wants(residual_index(bc.p(), n_in))) bc.add(residual_index(bc.p(), n_in), gy);
}

static void linear_cpu(CpuCtx& c) {
    const Shape &xs = c.in_shape(0), &ws = c.in_shape(1);
    Gemm g;
    g.N = ws.d[0];
    g.K = ws.d[1];
    g.M = xs.numel() / std::max<int64_t>(1, g.K);
    if (g.M * g.N == 0) return;
    g.A = c.in_f32(0);
    std::vector<float> dequant;
    std::vector<float> wt = transpose_batched(cpu_weight(c, 1, dequant), 1, g.N, g.K);
    g.B = wt.data();
    g.bias = linear_has_bias(c.p(), c.n_in()) ? c.in_f32(2) : nullptr;
    std::vector<float> w2t;
    if (has_pair(c.p())) {
        const int i2 = pair_index(c.p(), c.n_in());
        g.K2 = c.in_shape(i2 + 1).d[1];
        g.A2 = c.in_f32(i2);
        w2t = transpose_batched(c.in_f32(i2 + 1), 1, g.N, g.K2);
        g.B2 = w2t.data();
    }
    g.C = c.out_f32(0);
    std::vector<float> r_copy;
    const float* r = cpu_residual(c, g.C, r_copy);
    gemm(g);
    add_cpu_residual(r, g.C, c.out[0].numel());
}

ValueId linear(Graph& g, ValueId x, ValueId w, ValueId bias) {
    if (bias == kNoValue) return g.apply1(Op::linear, {x, w});
    return g.apply1(Op::linear, {x, w, bias});
}

ValueId linear(Graph& g, ValueId x, const QuantWeight& w, ValueId bias) {
    Params p;
    p.i[kQuantSlot] = 1;
    if (bias == kNoValue) return g.apply1(Op::linear, {x, w.q, w.scale}, p);
    return g.apply1(Op::linear, {x, w.q, bias, w.scale}, p);
}

ValueId linear_add(Graph& g, ValueId x, ValueId w, ValueId bias, ValueId r) {
    Params p;
    p.i[kResidualSlot] = 1;
    if (bias == kNoValue) return g.apply1(Op::linear, {x, w, r}, p);
    return g.apply1(Op::linear, {x, w, bias, r}, p);
}

const OpDef def_linear{"linear", "matmul", linear_infer, linear_cost, linear_backward, linear_cpu, 0,
                       residual_input_of, take_residual, join_pair};

}  // namespace gl
