// Optimizer steps, in place: AdamW on fp32 state (grid-stride, one element per thread) and
// grad_stats, the global gradient statistics (partial sums of squares per block in double, one
// launch per chunk of up to 64 gradients, then one block adds the partials in a fixed order).
// (Lion, Adafactor, Prodigy: cuda/optim_<name>.cu; 8-bit AdamW: cuda/adam8bit.cu.) AdamW uses
// explicit round-to-nearest intrinsics (no FMA contraction) so it matches the CPU bit for bit.
#include <algorithm>

#include "ggml-lite/cuda/optim_common.cuh"
#include "ggml-lite/ops/optim_math.h"

namespace gl {

__global__ void adamw_kernel(float* p, const float* g, float* m, float* v, const float* hyper, const float* gstat,
                             int64_t n, bool after) {
    const Gate gate = load_gate(gstat);
    if (gate.skip) return;
    AdamConsts k = adam_consts(hyper, false);
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
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
    int64_t n = c.in[0].numel();
    if (n == 0) return;
    adamw_kernel<<<grid_for(n, 256, sm_count() * 16), 256, 0, c.stream>>>(mut_ptr<float>(c, 0), c.in_ptr<float>(1),
                                                                   mut_ptr<float>(c, 2), mut_ptr<float>(c, 3),
                                                                   c.in_ptr<float>(4), gstat_ptr(c, 5), n,
                                                                   c.p().i[0] != 0);
    GL_CUDA_LAUNCHED();
}
const CudaKernel cuda_adamw_step{adamw_run};

// ---------------- grad_stats ----------------

constexpr int kGsChunk = 64;  // gradients per launch (the pointer table travels as a kernel argument)

struct GsChunk {
    const float* x[kGsChunk];
    int64_t n[kGsChunk];
    int64_t first_part[kGsChunk];  // where this tensor's partials start in the workspace
};

// grid (128, count): block b of tensor y sums elements b*256 + tid, stepping parts*256.
__global__ void __launch_bounds__(256) sumsq_parts_kernel(GsChunk ch, double* parts) {
    __shared__ double sh[32];
    const int y = blockIdx.y;
    const int64_t n = ch.n[y];
    const int np = reduction_parts(n);
    if (int(blockIdx.x) >= np) return;
    const float* x = ch.x[y];
    double acc = 0.0;
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(np) * blockDim.x) {
        const double e = x[i];
        acc += e * e;
    }
    acc = block_sum(acc, sh);
    if (threadIdx.x == 0) parts[ch.first_part[y] + blockIdx.x] = acc;
}

__global__ void __launch_bounds__(256) gstat_finish_kernel(const double* parts, int64_t count, const float* loss_scale,
                                                           float max_norm, float* out) {
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
    for (int first = 0; first < n_grads; first += kGsChunk) {
        GsChunk ch{};
        const int count = std::min(kGsChunk, n_grads - first);
        for (int k = 0; k < count; k++) {
            ch.x[k] = c.in_ptr<float>(first + k);
            ch.n[k] = c.in[size_t(first + k)].numel();
            ch.first_part[k] = next;
            next += reduction_parts(ch.n[k]);
        }
        sumsq_parts_kernel<<<dim3(128, unsigned(count)), 256, 0, c.stream>>>(ch, parts);
        GL_CUDA_LAUNCHED();
    }
    GL_CHECK(size_t(next) * sizeof(double) <= c.workspace_bytes, "grad_stats: workspace too small");
    const float* ls = c.p().i[0] != 0 ? c.in_ptr<float>(n_grads) : nullptr;
    gstat_finish_kernel<<<1, 256, 0, c.stream>>>(parts, next, ls, c.p().f[0], c.out_ptr<float>(0));
    GL_CUDA_LAUNCHED();
}
const CudaKernel cuda_grad_stats{grad_stats_run, grad_stats_workspace};

}  // namespace gl
