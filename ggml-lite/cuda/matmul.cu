// CUDA matmul and linear: map the op's tensors onto one gemm::GemmArgs and call gemm::gemm()
// (cuda/gemm.cuh: tensor-core bf16/f16 kernel, exact f32 kernel, split-K, cuBLAS switch).
//   matmul(a, b, p.i[0] = trans_a, p.i[1] = trans_b): a [..., M, K] (trans: [..., K, M]),
//     b [..., K, N] (trans: [..., N, K]) with a's batch dims, or 2-D and shared -> [..., M, N].
//   linear(x [..., K], w [N, K], bias [N] optional) -> [..., N]; bias fused into the epilogue.
//   Either with a residual r of the output's shape (ops/residual.h, the fusion pass's folded add)
//   fed to the epilogue (gemm::Epilogue::residual; it may be the output's own bytes).
// Inputs are read strided (kCudaStrided): any operand whose last two dims are row- or column-
// major with one leading stride, and whose batch dims collapse to one stride, is used in place
// (a transposed view just flips the kernel's layout flag); anything else is copied dense into
// this node's workspace first. A shared b folds a's batch into M (one larger GEMM).
// A quantized weight (ops/quant.h: codes, then the f32 row scales as the last input) is passed to
// gemm() as codes + scales (GemmArgs::b_scale), which converts it while loading; its a / x is
// made row-major first where it is not.
#include "ggml-lite/cuda/kernel.cuh"
#include "ggml-lite/cuda/gemm.cuh"
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

constexpr int kMaxIn = 5;  // linear with a quantized weight and a residual: x, codes, bias, residual, scale

// Everything about a node that does not depend on where its tensors live.
struct NodePlan {
    gemm::GemmArgs args;            // pointers unset
    bool dense_in[kMaxIn] = {};     // input i is first copied dense into the workspace
    size_t dense_bytes[kMaxIn] = {};
    size_t split_bytes = 0;
    int bias = -1, scale = -1;      // inputs holding the bias and a quantized weight's scale
    int residual = -1;              // the input holding the residual
};

// Matrix view of an operand of `rank >= 2` dims whose batch dims [0, nd-2) must collapse.
bool batched_mat(const Layout& L, Mat& m, int64_t& bs) {
    const int nd = L.shape.nd;
    m = mat_of(L, nd - 2, nd - 1);
    return m.ok && collapse(L, 0, nd - 2, bs);
}

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
    if (op == Op::matmul) {
        const bool ta = prm.i[0] != 0, tb = prm.i[1] != 0;
        const Shape &as = L[0].shape, &bs = L[1].shape;
        const int nd = as.nd;
        a.M = ta ? as.dim(-1) : as.dim(-2);
        a.K = ta ? as.dim(-2) : as.dim(-1);
        a.N = tb ? bs.dim(-2) : bs.dim(-1);
        a.batch = 1;
        for (int k = 0; k < nd - 2; k++) a.batch *= as.d[size_t(k)];
        const bool shared_b = bs.nd == 2;
        Mat ma, mb;
        int64_t sa = 0, sb = 0;
        if (!batched_mat(L[0], ma, sa) || (quant && ma.col)) {
            make_dense(0);
            batched_mat(L[0], ma, sa);
        }
        if (!batched_mat(L[1], mb, sb)) {
            make_dense(1);
            batched_mat(L[1], mb, sb);
        }
        a.ta = ta != ma.col;
        a.lda = ma.ld;
        a.sA = a.batch > 1 ? sa : 0;
        a.tb = tb != mb.col;
        a.ldb = mb.ld;
        a.sB = shared_b || a.batch == 1 ? 0 : sb;
        int64_t rows_stride = 0;
        if (shared_b && a.batch > 1 && !a.ta && collapse(L[0], 0, nd - 1, rows_stride)) {
            a.M *= a.batch;  // rows of every batch are equally spaced: one GEMM
            a.lda = rows_stride;
            a.batch = 1;
            a.sA = 0;
        }
    } else {  // linear
        const Shape &xs = L[0].shape, &ws = L[1].shape;
        a.N = ws.d[0];
        a.K = ws.d[1];
        a.M = 1;
        for (int k = 0; k < xs.nd - 1; k++) a.M *= xs.d[size_t(k)];
        int64_t rs = 0;
        auto x_ok = [&] {
            if (xs.nd == 1) return L[0].stride[0] == 1 || xs.d[0] == 1;
            if (!collapse(L[0], 0, xs.nd - 1, rs)) return false;
            return L[0].stride[size_t(xs.nd - 1)] == 1 || xs.last() == 1 || rs == 1;
        };
        const bool x_rows = xs.nd == 1 || L[0].stride[size_t(xs.nd - 1)] == 1 || xs.last() == 1;
        if (!x_ok() || (quant && !x_rows)) {
            make_dense(0);
            x_ok();
        }
        if (xs.nd == 1 || L[0].stride[size_t(xs.nd - 1)] == 1 || xs.last() == 1) {
            a.ta = false;
            a.lda = xs.nd == 1 || a.M == 1 ? round8(a.K) : rs;
        } else {  // rows adjacent in memory: x is stored transposed
            a.ta = true;
            a.lda = L[0].stride[size_t(xs.nd - 1)];
        }
        Mat mw = mat_of(L[1], 0, 1);
        if (!mw.ok) {
            make_dense(1);
            mw = mat_of(L[1], 0, 1);
        }
        a.tb = !mw.col;  // w [N, K] row-major is B stored N x K
        a.ldb = mw.ld;
        if (operand_inputs(prm, n_in) == 3) {
            np.bias = 2;
            if (L[2].stride[0] != 1 && L[2].shape.d[0] != 1) make_dense(2);
        }
    }
    a.ldc = a.N;
    a.sC = a.M * a.N;
    if (has_residual(prm)) {  // C's shape: dense, it is indexed as C is
        np.residual = residual_index(prm, n_in);
        if (!L[np.residual].is_contiguous()) make_dense(np.residual);
        a.epi.ldr = a.ldc;
        a.epi.sr = a.sC;
    }
    np.split_bytes = align_up(gemm::gemm_workspace_bytes(a));
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
    gemm::gemm(a, ws, ws_left, c.stream);
}

}  // namespace

const CudaKernel cuda_matmul{matmul_run, matmul_workspace, kCudaStrided};
const CudaKernel cuda_linear{matmul_run, matmul_workspace, kCudaStrided};

}  // namespace gl
