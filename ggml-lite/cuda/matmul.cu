// CUDA matmul and linear: map the op's tensors onto one gemm::GemmArgs and call gemm::gemm()
// (cuda/gemm.cuh: tensor-core bf16/f16 kernel, exact f32 kernel, split-K, cuBLAS switch).
//   matmul(a, b, p.i[0] = trans_a, p.i[1] = trans_b): a [..., M, K] (trans: [..., K, M]),
//     b [..., K, N] (trans: [..., N, K]) with a's batch dims, or 2-D and shared -> [..., M, N].
//   linear(x [..., K], w [N, K], bias [N] optional) -> [..., N]; bias fused into the epilogue.
//   Either with a residual r of the output's shape (ops/residual.h, the fusion pass's folded add)
//   fed to the epilogue (gemm::Epilogue::residual; it may be the output's own bytes).
//   Either as a joined pair (ops/pair.h: a second product a2 b2 / x2 w2^T of the same output):
//   its operands, planned as the first's, fill GemmArgs::A2 .. K2 when they are laid out as the
//   first's (gemm() runs one TMA launch or two products), else a second gemm() call follows the
//   first with C as its residual.
// Inputs are read strided (kCudaStrided): any operand whose last two dims are row- or column-
// major with one leading stride, and whose batch dims collapse to one stride, is used in place
// (a transposed view just flips the kernel's layout flag); anything else is copied dense into
// this node's workspace first. A shared b folds a's batch into M (one larger GEMM).
// A quantized weight (ops/quant.h: codes, then the f32 row scales as the last input) is passed to
// gemm() as codes + scales (GemmArgs::b_scale), which converts it while loading; its a / x is
// made row-major first where it is not.
#include <algorithm>

#include "ggml-lite/cuda/kernel.cuh"
#include "ggml-lite/cuda/gemm.cuh"
#include "ggml-lite/ops/pair.h"
#include "ggml-lite/ops/quant.h"
#include "ggml-lite/ops/residual.h"

namespace gl {
namespace {

constexpr size_t kAlign = 256;
size_t align_up(size_t x) { return ceil_div(x, kAlign) * kAlign; }
int64_t round8(int64_t x) { return ceil_div(x, 8) * 8; }

// Dims [from, to) of a layout as one stride (size-1 dims ignored; 0 when all are 1).
bool collapse(const Layout& L, int from, int to, int64_t& stride) {
    stride = 0;
    int64_t span = 0;
    bool set = false;
    for (int k = to - 1; k >= from; k--) {
        const int64_t d = L.shape.d[size_t(k)];
        if (d == 1) continue;
        if (!set) {
            stride = L.stride[size_t(k)];
            span = d;
            set = true;
        } else {
            if (L.stride[size_t(k)] != stride * span) return false;
            span *= d;
        }
    }
    return true;
}

// An R x C matrix (dims rd, cd of L; rd < 0 means R = 1) in memory: row-major with leading
// dim ld, or column-major (col) with leading dim ld.
struct Mat {
    bool ok = false, col = false;
    int64_t ld = 0;
};
Mat mat_of(const Layout& L, int rd, int cd) {
    const int64_t R = rd >= 0 ? L.shape.d[size_t(rd)] : 1, C = L.shape.d[size_t(cd)];
    const int64_t sr = rd >= 0 ? L.stride[size_t(rd)] : 0, sc = L.stride[size_t(cd)];
    // A leading dim that is never stepped over is set to a harmless multiple of 8.
    if (sc == 1 || C == 1) return {true, false, R == 1 ? round8(C) : sr};
    if (sr == 1 || R == 1) return {true, true, C == 1 ? round8(R) : sc};
    return {};
}

constexpr int kMaxIn = 6;  // a joined linear pair: x, w, bias, x2, w2, residual (a quantized weight: 5, no pair)

// Everything about a node that does not depend on where its tensors live.
struct NodePlan {
    gemm::GemmArgs args;            // pointers unset
    bool dense_in[kMaxIn] = {};     // input i is first copied dense into the workspace
    size_t dense_bytes[kMaxIn] = {};
    size_t split_bytes = 0;
    int bias = -1, scale = -1;      // inputs holding the bias and a quantized weight's scale
    int residual = -1;              // the input holding the residual
    int pair = -1;                  // a joined pair's a2 (b2 follows), ops/pair.h
    // A pair whose second product is laid out otherwise than the first (GemmArgs' A2, B2 take
    // the first's ta, tb): args holds the first product, second the other (pointers unset), run
    // after it with C as its residual.
    bool two_calls = false;
    gemm::GemmArgs second;
};

// Matrix view of an operand of `rank >= 2` dims whose batch dims [0, nd-2) must collapse.
bool batched_mat(const Layout& L, Mat& m, int64_t& bs) {
    const int nd = L.shape.nd;
    m = mat_of(L, nd - 2, nd - 1);
    return m.ok && collapse(L, 0, nd - 2, bs);
}

// One product's operands as the kernel reads them: dims, layout flags, leading dims and batch
// strides. fold: matmul's shared 2-D b whose a rows of every batch are equally spaced (one GEMM of
// batch * M rows, A's leading dim rows_stride).
struct Product {
    int64_t M = 0, K = 0, N = 0, batch = 1;
    bool ta = false, tb = false;
    int64_t lda = 0, sA = 0, ldb = 0, sB = 0;
    bool fold = false;
    int64_t rows_stride = 0;
};

NodePlan plan_node(Op op, const Params& prm, const Layout* lay, const DType* dt, int n_in) {
    NodePlan np;
    gemm::GemmArgs& a = np.args;
    a.dtype = dt[0];
    Layout L[kMaxIn];
    for (int i = 0; i < n_in; i++) L[i] = lay[i];
    auto make_dense = [&](int i) {
        np.dense_in[i] = true;
        np.dense_bytes[i] = align_up(size_t(L[i].shape.numel()) * dtype_size(dt[i]));
        L[i] = Layout::contiguous(L[i].shape);
    };
    const bool quant = is_quantized(prm);
    if (quant) {  // codes row-major (their scales follow dim 0), the scales one dense vector
        np.scale = n_in - 1;
        a.b_quant = true;
        a.b_codes = dt[1];
        if (!L[1].is_contiguous()) make_dense(1);
        if (!L[np.scale].is_contiguous()) make_dense(np.scale);
    }
    // The product of inputs ia (a / x) and ib (b / w).
    auto product = [&](int ia, int ib) {
        Product pr;
        if (op == Op::matmul) {
            const bool ta = prm.i[0] != 0, tb = prm.i[1] != 0;
            const Shape &as = L[ia].shape, &bs = L[ib].shape;
            const int nd = as.nd;
            pr.M = ta ? as.dim(-1) : as.dim(-2);
            pr.K = ta ? as.dim(-2) : as.dim(-1);
            pr.N = tb ? bs.dim(-2) : bs.dim(-1);
            for (int k = 0; k < nd - 2; k++) pr.batch *= as.d[size_t(k)];
            const bool shared_b = bs.nd == 2;
            Mat ma, mb;
            int64_t sa = 0, sb = 0;
            if (!batched_mat(L[ia], ma, sa) || (quant && ma.col)) {
                make_dense(ia);
                batched_mat(L[ia], ma, sa);
            }
            if (!batched_mat(L[ib], mb, sb)) {
                make_dense(ib);
                batched_mat(L[ib], mb, sb);
            }
            pr.ta = ta != ma.col;
            pr.lda = ma.ld;
            pr.sA = pr.batch > 1 ? sa : 0;
            pr.tb = tb != mb.col;
            pr.ldb = mb.ld;
            pr.sB = shared_b || pr.batch == 1 ? 0 : sb;
            pr.fold = shared_b && pr.batch > 1 && !pr.ta && collapse(L[ia], 0, nd - 1, pr.rows_stride);
        } else {  // linear
            const Shape &xs = L[ia].shape, &ws = L[ib].shape;
            pr.N = ws.d[0];
            pr.K = ws.d[1];
            pr.M = 1;
            for (int k = 0; k < xs.nd - 1; k++) pr.M *= xs.d[size_t(k)];
            int64_t rs = 0;
            auto x_ok = [&] {
                if (xs.nd == 1) return L[ia].stride[0] == 1 || xs.d[0] == 1;
                if (!collapse(L[ia], 0, xs.nd - 1, rs)) return false;
                return L[ia].stride[size_t(xs.nd - 1)] == 1 || xs.last() == 1 || rs == 1;
            };
            const bool x_rows = xs.nd == 1 || L[ia].stride[size_t(xs.nd - 1)] == 1 || xs.last() == 1;
            if (!x_ok() || (quant && !x_rows)) {
                make_dense(ia);
                x_ok();
            }
            if (xs.nd == 1 || L[ia].stride[size_t(xs.nd - 1)] == 1 || xs.last() == 1) {
                pr.ta = false;
                pr.lda = xs.nd == 1 || pr.M == 1 ? round8(pr.K) : rs;
            } else {  // rows adjacent in memory: x is stored transposed
                pr.ta = true;
                pr.lda = L[ia].stride[size_t(xs.nd - 1)];
            }
            Mat mw = mat_of(L[ib], 0, 1);
            if (!mw.ok) {
                make_dense(ib);
                mw = mat_of(L[ib], 0, 1);
            }
            pr.tb = !mw.col;  // w [N, K] row-major is B stored N x K
            pr.ldb = mw.ld;
        }
        return pr;
    };
    Product p1 = product(0, 1), p2;
    const bool pair = has_pair(prm);
    if (pair) {
        np.pair = pair_index(prm, n_in);
        p2 = product(np.pair, np.pair + 1);
    }
    // Fold a shared b's batch into M only when both products can (they share M and the batch).
    const bool fold = p1.fold && (!pair || p2.fold);
    for (Product* pr : {&p1, &p2}) {
        if (!fold) continue;
        pr->M *= pr->batch;
        pr->lda = pr->rows_stride;
        pr->batch = 1;
        pr->sA = 0;
    }
    a.M = p1.M;
    a.N = p1.N;
    a.K = p1.K;
    a.batch = p1.batch;
    a.ta = p1.ta;
    a.lda = p1.lda;
    a.sA = p1.sA;
    a.tb = p1.tb;
    a.ldb = p1.ldb;
    a.sB = p1.sB;
    if (pair) {
        GL_CHECK(p2.M == a.M && p2.N == a.N && p2.batch == a.batch, op_name(op),
                 ": internal error, a joined pair's products differ in M, N or batch");
        if (p2.ta == p1.ta && p2.tb == p1.tb) {  // gemm() takes the pair (one TMA launch where it can)
            a.K2 = p2.K;
            a.lda2 = p2.lda;
            a.sA2 = p2.sA;
            a.ldb2 = p2.ldb;
            a.sB2 = p2.sB;
        } else if (p2.K > 0) {
            np.two_calls = true;
        }
    }
    if (op == Op::linear && first_operands(prm, n_in) == 3) {
        np.bias = 2;
        if (L[2].stride[0] != 1 && L[2].shape.d[0] != 1) make_dense(2);
    }
    a.ldc = a.N;
    a.sC = a.M * a.N;
    if (has_residual(prm)) {  // C's shape: dense, it is indexed as C is
        np.residual = residual_index(prm, n_in);
        if (!L[np.residual].is_contiguous()) make_dense(np.residual);
        a.epi.ldr = a.ldc;
        a.epi.sr = a.sC;
    }
    size_t split = gemm::gemm_workspace_bytes(a);
    if (np.two_calls) {
        gemm::GemmArgs& t = np.second;
        t = a;
        t.K = p2.K;
        t.ta = p2.ta;
        t.lda = p2.lda;
        t.sA = p2.sA;
        t.tb = p2.tb;
        t.ldb = p2.ldb;
        t.sB = p2.sB;
        t.epi = gemm::Epilogue{};
        t.epi.alpha = a.epi.alpha;
        t.epi.ldr = a.ldc;  // C as the residual
        t.epi.sr = a.sC;
        split = std::max(split, gemm::gemm_workspace_bytes(t));
    }
    np.split_bytes = align_up(split);
    return np;
}

size_t matmul_workspace(const Graph& g, const Node& n) {
    Layout L[kMaxIn];
    DType dt[kMaxIn];
    const int n_in = int(n.in.size());
    for (int i = 0; i < n_in; i++) {
        L[i] = g.v(n.in[size_t(i)]).layout;
        dt[i] = g.v(n.in[size_t(i)]).dtype;
    }
    NodePlan np = plan_node(n.op, n.p, L, dt, n_in);
    size_t total = np.split_bytes;
    for (int i = 0; i < n_in; i++) total += np.dense_bytes[i];
    return total;
}

void matmul_run(CudaCtx& c) {
    const int n_in = int(c.in.size());
    Layout L[kMaxIn];
    DType dt[kMaxIn];
    for (int i = 0; i < n_in; i++) {
        L[i] = c.in[size_t(i)].layout;
        dt[i] = c.in[size_t(i)].dtype;
    }
    NodePlan np = plan_node(c.node.op, c.p(), L, dt, n_in);
    gemm::GemmArgs& a = np.args;
    if (a.M == 0 || a.N == 0) return;
    char* ws = c.workspace;
    size_t ws_left = c.workspace_bytes;
    const void* ptr[kMaxIn] = {};
    for (int i = 0; i < n_in; i++) {
        if (np.dense_in[i]) {
            GL_CHECK(ws_left >= np.dense_bytes[i], op_name(c.node.op), ": workspace too small");
            launch_densify(c.in[size_t(i)], ws, c.stream);
            ptr[i] = ws;
            ws += np.dense_bytes[i];
            ws_left -= np.dense_bytes[i];
        } else {
            ptr[i] = CudaCtx::elem(c.in[size_t(i)]);
        }
    }
    a.A = ptr[0];
    a.B = ptr[1];
    a.C = c.out_ptr(0);
    if (np.bias >= 0) a.epi.bias = ptr[np.bias];
    if (np.residual >= 0) a.epi.residual = ptr[np.residual];
    if (np.scale >= 0) a.b_scale = static_cast<const float*>(ptr[np.scale]);
    if (np.pair >= 0 && !np.two_calls) {
        a.A2 = ptr[np.pair];
        a.B2 = ptr[np.pair + 1];
    }
    gemm::gemm(a, ws, ws_left, c.stream);
    if (np.two_calls) {  // the second product onto the first (its kernels read C before writing it)
        gemm::GemmArgs& t = np.second;
        t.A = ptr[np.pair];
        t.B = ptr[np.pair + 1];
        t.C = a.C;
        t.epi.residual = a.C;
        gemm::gemm(t, ws, ws_left, c.stream);
    }
}

}  // namespace

const CudaKernel cuda_matmul{matmul_run, matmul_workspace, kCudaStrided};
const CudaKernel cuda_linear{matmul_run, matmul_workspace, kCudaStrided};

}  // namespace gl
