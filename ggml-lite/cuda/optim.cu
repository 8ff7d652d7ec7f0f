// Optimizer steps, in place: AdamW on fp32 state over every tensor of a parameter group in one
// launch (cuda/multi_tensor.cuh: a block per tile of 1024 elements of one tensor) and grad_stats,
// the global gradient statistics (partial sums of squares per block in double, one launch for up to
// 1279 gradients, then one block adds the partials in a fixed order). (Lion, Adafactor, Prodigy:
// cuda/optim_<name>.cu; 8-bit AdamW: cuda/adam8bit.cu.) AdamW uses explicit round-to-nearest
// intrinsics (no FMA contraction) so it matches the CPU bit for bit.
#include <algorithm>

#include "ggml-lite/cuda/multi_tensor.cuh"
#include "ggml-lite/cuda/optim_common.cuh"
#include "ggml-lite/ops/optim_math.h"

namespace gl {

constexpr int kAdamTile = 1024;
using AdamTable = TensorTable<4, table_capacity<4>()>;  // param, grad, m, v

__global__ void __launch_bounds__(256) adamw_kernel(const __grid_constant__ AdamTable t, const float* hyper,
                                                    const float* gstat, bool after) {
    kernel_entry();
    const Gate gate = load_gate(gstat);
    if (gate.skip) return;
    const AdamConsts k = adam_consts(hyper, false);
    const AdamTable::Tile tile = t.tile(blockIdx.x, kAdamTile);
    float* p = t.at<float>(0, tile.tensor);
    const float* g = t.at<float>(1, tile.tensor);
    float* m = t.at<float>(2, tile.tensor);
    float* v = t.at<float>(3, tile.tensor);
    for (int64_t i = tile.begin + threadIdx.x; i < tile.end; i += blockDim.x) {
        float gi = __fmul_rn(__fmul_rn(g[i], k.gs), gate.mul);
        float pi = after ? p[i] : __fmul_rn(p[i], k.decay);
        float mi = __fadd_rn(m[i], __fmul_rn(__fsub_rn(1.0f, k.b1), __fsub_rn(gi, m[i])));
        float vi = __fadd_rn(__fmul_rn(v[i], k.b2), __fmul_rn(__fsub_rn(1.0f, k.b2), __fmul_rn(gi, gi)));
        float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(vi), k.corr2), k.eps);
        pi = __fsub_rn(pi, __fmul_rn(k.step_size, __fdiv_rn(mi, denom)));
        p[i] = after ? __fmul_rn(pi, k.decay) : pi;
        m[i] = mi;
        v[i] = vi;
    }
}

static void adamw_run(CudaCtx& c) {
    const int n = int(c.p().i[1]);
    const float* hyper = c.in_ptr<float>(4 * n);
    const float* gstat = gstat_ptr(c, 4 * n + 1);
    const bool after = c.p().i[0] != 0;
    for_each_input_table<4>(c, n, kAdamTile, [&](const AdamTable& t) {
        adamw_kernel<<<unsigned(t.tiles()), 256, 0, c.stream>>>(t, hyper, gstat, after);
        GL_CUDA_LAUNCHED();
    });
}
const CudaKernel cuda_adamw_step{adamw_run};

// ---------------- grad_stats ----------------

// The gradients' parts in one table: tensor k's parts are tiles [first_tile[k], first_tile[k + 1]).
using GsTable = TensorTable<1, table_capacity<1>()>;

// One block per part: part q of a tensor of np parts sums elements q*256 + tid, stepping np*256
// (parts: this table's share of the workspace, in tensor order).
__global__ void __launch_bounds__(256) sumsq_parts_kernel(const __grid_constant__ GsTable t, double* parts) {
    kernel_entry();
    __shared__ double sh[32];
    const int k = t.find(blockIdx.x);
    const int64_t n = t.n[k], q = int64_t(blockIdx.x) - t.first_tile[k];
    const int np = reduction_parts(n);
    const float* x = t.at<const float>(0, k);
    double acc = 0.0;
    for (int64_t i = q * blockDim.x + threadIdx.x; i < n; i += int64_t(np) * blockDim.x) {
        const double e = x[i];
        acc += e * e;
    }
    acc = block_sum(acc, sh);
    if (threadIdx.x == 0) parts[blockIdx.x] = acc;
}

__global__ void __launch_bounds__(256) gstat_finish_kernel(const double* parts, int64_t count, const float* loss_scale,
                                                           float max_norm, float* out) {
    kernel_entry();
    __shared__ double sh[32];
    double acc = 0.0;
    for (int64_t i = threadIdx.x; i < count; i += blockDim.x) acc += parts[i];
    acc = block_sum(acc, sh);
    if (threadIdx.x == 0) gstat_finish(acc, loss_scale ? loss_scale[0] : 1.0f, max_norm, out);
}

static int gs_grads(const Node& n) { return int(n.in.size()) - (n.p.i[0] != 0 ? 1 : 0); }

static size_t grad_stats_workspace(const Graph& g, const Node& n) {
    size_t parts = 0;
    for (int k = 0; k < gs_grads(n); k++) parts += size_t(reduction_parts(g.v(n.in[size_t(k)]).numel()));
    return parts * sizeof(double);
}

static void grad_stats_run(CudaCtx& c) {
    const int n_grads = gs_grads(c.node);
    double* parts = reinterpret_cast<double*>(c.workspace);
    int64_t next = 0;
    for (int first = 0; first < n_grads; first += GsTable::kMax) {
        GsTable t{};
        t.count = std::min(GsTable::kMax, n_grads - first);
        for (int k = 0; k < t.count; k++) {
            t.ptr[0][k] = const_cast<void*>(c.in_ptr(first + k));
            t.n[k] = c.in[size_t(first + k)].numel();
            t.first_tile[k + 1] = t.first_tile[k] + reduction_parts(t.n[k]);
        }
        GL_CHECK(size_t(next + t.tiles()) * sizeof(double) <= c.workspace_bytes, "grad_stats: workspace too small");
        sumsq_parts_kernel<<<unsigned(t.tiles()), 256, 0, c.stream>>>(t, parts + next);
        GL_CUDA_LAUNCHED();
        next += t.tiles();
    }
    const float* ls = c.p().i[0] != 0 ? c.in_ptr<float>(n_grads) : nullptr;
    gstat_finish_kernel<<<1, 256, 0, c.stream>>>(parts, next, ls, c.p().f[0], c.out_ptr<float>(0));
    GL_CUDA_LAUNCHED();
}
const CudaKernel cuda_grad_stats{grad_stats_run, grad_stats_workspace};

}  // namespace gl
