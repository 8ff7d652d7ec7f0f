// Optimizer steps, in place: AdamW on fp32 state (grid-stride, one element per thread) and
// block-wise 8-bit AdamW (one CUDA block of 256 threads per quantisation block of 256
// elements; shared-memory copies of both dynamic maps; block max via warp shuffles).
// Arithmetic uses explicit round-to-nearest intrinsics (no FMA contraction) so results
// match the CPU reference bit for bit on the same inputs.
#include <cstring>
#include <mutex>

#include "ggml-lite/cuda/kernel.cuh"
#include "ggml-lite/ops/builder.h"

namespace gl {

struct AdamConsts {
    float lr, b1, b2, eps, decay, gs, step_size, corr2;
};

__device__ AdamConsts adam_consts(const float* h, bool bnb) {
    AdamConsts k;
    k.lr = h[kLr];
    k.b1 = h[kBeta1];
    k.b2 = h[kBeta2];
    k.eps = h[kEps];
    k.gs = h[kGradScale];
    k.decay = __fsub_rn(1.0f, __fmul_rn(k.lr, h[kWeightDecay]));
    double t = h[kStep];
    if (bnb) {
        k.corr2 = float(sqrt(1.0 - pow(double(k.b2), t)));
        k.step_size = float(-double(k.lr) * double(k.corr2) / (1.0 - pow(double(k.b1), t)));
    } else {
        k.step_size = float(double(k.lr) / (1.0 - pow(double(k.b1), t)));
        k.corr2 = float(sqrt(1.0 - pow(double(k.b2), t)));
    }
    return k;
}

__global__ void adamw_kernel(float* p, const float* g, float* m, float* v, const float* hyper, int64_t n, bool after) {
    AdamConsts k = adam_consts(hyper, false);
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
        float gi = __fmul_rn(g[i], k.gs);
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
    adamw_kernel<<<grid_for(n, 256, 132 * 16), 256, 0, c.stream>>>(
        const_cast<float*>(c.in_ptr<float>(0)), c.in_ptr<float>(1), const_cast<float*>(c.in_ptr<float>(2)),
        const_cast<float*>(c.in_ptr<float>(3)), c.in_ptr<float>(4), n, c.p().i[0] != 0);
    GL_CUDA_LAUNCHED();
}
const CudaKernel cuda_adamw_step{adamw_run};

// ---- 8-bit ----

__device__ float g_qmaps[512];  // [0, 256): signed map, [256, 512): unsigned map

__device__ __forceinline__ int quantize(const float* q, float x) {
    if (!(x > q[0])) return 0;
    if (!(x < q[255])) return 255;
    int lo = 0, hi = 255;
#pragma unroll
    for (int it = 0; it < 8; it++) {
        if (hi - lo > 1) {
            int mid = (lo + hi) >> 1;
            if (q[mid] <= x) lo = mid; else hi = mid;
        }
    }
    return (__fsub_rn(x, q[lo]) <= __fsub_rn(q[hi], x)) ? lo : hi;
}

__device__ __forceinline__ float block_max(float x, float* red) {
    for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
    int w = threadIdx.x >> 5;
    if ((threadIdx.x & 31) == 0) red[w] = x;
    __syncthreads();
    float r = red[0];
    for (int i = 1; i < int(blockDim.x >> 5); i++) r = fmaxf(r, red[i]);
    __syncthreads();
    return r;
}

__global__ void __launch_bounds__(256) adamw8bit_kernel(float* p, const float* g, uint8_t* cm, uint8_t* cv, float* am,
                                                        float* av, const float* hyper, int64_t n) {
    __shared__ float qs[256], qu[256], red[8];
    qs[threadIdx.x] = g_qmaps[threadIdx.x];
    qu[threadIdx.x] = g_qmaps[256 + threadIdx.x];
    __syncthreads();
    AdamConsts k = adam_consts(hyper, true);
    const int64_t b = blockIdx.x, i = b * 256 + threadIdx.x;
    const bool in = i < n;
    float m = 0.0f, v = 0.0f;
    bool ok = false;
    if (in) {
        float gi = __fmul_rn(g[i], k.gs);
        m = __fmul_rn(qs[cm[i]], am[b]);
        v = __fmul_rn(qu[cv[i]], av[b]);
        ok = isfinite(gi);
        if (ok) {
            v = __fadd_rn(__fmul_rn(k.b2, v), __fmul_rn(__fsub_rn(1.0f, k.b2), __fmul_rn(gi, gi)));
            m = __fadd_rn(__fmul_rn(k.b1, m), __fmul_rn(__fsub_rn(1.0f, k.b1), gi));
        }
    }
    float new_am = block_max(in ? fabsf(m) : 0.0f, red);
    float new_av = block_max(in ? v : 0.0f, red);
    if (in) {
        if (ok) {
            float upd = __fdiv_rn(m, __fadd_rn(__fsqrt_rn(v), __fmul_rn(k.corr2, k.eps)));
            p[i] = __fmul_rn(__fadd_rn(p[i], __fmul_rn(k.step_size, upd)), k.decay);
        }
        cm[i] = uint8_t(quantize(qs, new_am > 0.0f ? __fdiv_rn(m, new_am) : 0.0f));
        cv[i] = uint8_t(quantize(qu, new_av > 0.0f ? __fdiv_rn(v, new_av) : 0.0f));
    }
    if (threadIdx.x == 0) {
        am[b] = new_am;
        av[b] = new_av;
    }
}

static void adamw8bit_run(CudaCtx& c) {
    static std::once_flag once;
    std::call_once(once, [] {
        float host[512];
        std::memcpy(host, adam8bit_qmap(true), 256 * sizeof(float));
        std::memcpy(host + 256, adam8bit_qmap(false), 256 * sizeof(float));
        GL_CUDA_CHECK(cudaMemcpyToSymbol(g_qmaps, host, sizeof host));  // once, during the first (eager) run
    });
    int64_t n = c.in[0].numel();
    if (n == 0) return;
    int64_t blocks = (n + 255) / 256;
    adamw8bit_kernel<<<unsigned(blocks), 256, 0, c.stream>>>(
        const_cast<float*>(c.in_ptr<float>(0)), c.in_ptr<float>(1), const_cast<uint8_t*>(c.in_ptr<uint8_t>(2)),
        const_cast<uint8_t*>(c.in_ptr<uint8_t>(3)), const_cast<float*>(c.in_ptr<float>(4)),
        const_cast<float*>(c.in_ptr<float>(5)), c.in_ptr<float>(6), n);
    GL_CUDA_LAUNCHED();
}
const CudaKernel cuda_adamw8bit_step{adamw8bit_run};

}  // namespace gl
