// Adafactor step, in place (CPU reference: ops/optim_adafactor.cpp). f32 param [O, R, C, I] factored
// as [B = O*I, R, C] (I > 1 only for conv weights [Cout, kh, kw, Cin]); v_row [B, R], v_col [B, C].
// Kernels, all reading the gstat gate first and doing nothing when it says skip:
//   sumsq_p       partial sums of p^2 (parts blocks)                       -> ws[0, parts)
//   line_update   factored: one warp per row (mean over C) / per column (mean over R) of g^2 + eps1,
//                 folded into v_row / v_col; unfactored: v elementwise and the update's partial sums
//   row_mean      factored: one warp per b, mean of v_row over R            -> ws_rmean[b]
//   sumsq_u       factored: partial sums of the update^2                    -> ws[parts, 2 parts)
//   apply         sums the partials (fixed order), lr and the RMS clip, then the update
// The update is recomputed in apply rather than stored: no param-sized scratch.
#include "ggml-lite/cuda/optim_common.cuh"
#include "ggml-lite/ops/optim_math.h"

namespace gl {

constexpr int64_t kAfRelative = 1, kAfScaleParam = 2, kAfWarmup = 4, kAfHasM = 8, kAfFactored = 16;

struct AfArgs {
    float* p;
    const float* g;
    float* m;   // null without a first moment
    float* vr;  // v_row, or the full v when unfactored
    float* vc;  // null when unfactored
    const float* h;
    const float* gstat;
    int64_t O, R, C, I, n;
    int64_t flags;
    float decay_rate, eps2, clip;
    int parts;
    double* ws;  // [2 * parts] partial sums, then [B] row means of v_row
};

__device__ __forceinline__ float af_grad(const AfArgs& a, int64_t i, float mul) {
    return __fmul_rn(__fmul_rn(a.g[i], a.h[kGradScale]), mul);
}
__device__ __forceinline__ int64_t af_at(const AfArgs& a, int64_t b, int64_t r, int64_t c) {
    return ((b / a.I * a.R + r) * a.C + c) * a.I + b % a.I;
}
// The unclipped update of element i (memory index): g / sqrt(v) or g * rsqrt(v_row/mean) * rsqrt(v_col).
__device__ __forceinline__ float af_update(const AfArgs& a, int64_t i, float gi) {
    if (!a.vc) return __fmul_rn(__fdiv_rn(1.0f, __fsqrt_rn(a.vr[i])), gi);
    const int64_t ii = i % a.I, c = (i / a.I) % a.C, r = (i / (a.I * a.C)) % a.R, o = i / (a.I * a.C * a.R);
    const int64_t b = o * a.I + ii;
    const float rmean = float(a.ws[2 * a.parts + b]);
    const float rf = __fdiv_rn(1.0f, __fsqrt_rn(__fdiv_rn(a.vr[b * a.R + r], rmean)));
    const float cf = __fdiv_rn(1.0f, __fsqrt_rn(a.vc[b * a.C + c]));
    return __fmul_rn(__fmul_rn(rf, cf), gi);
}

__global__ void __launch_bounds__(256) af_sumsq_p_kernel(AfArgs a) {
    kernel_entry();
    __shared__ double sh[32];
    if (load_gate(a.gstat).skip) return;
    double acc = 0.0;
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < a.n; i += int64_t(a.parts) * blockDim.x) {
        const double e = a.p[i];
        acc += e * e;
    }
    acc = block_sum(acc, sh);
    if (threadIdx.x == 0) a.ws[blockIdx.x] = acc;
}

// Unfactored: v = beta2t v + (1 - beta2t)(g^2 + eps1) and the update's partial sums of squares.
__global__ void __launch_bounds__(256) af_full_kernel(AfArgs a) {
    kernel_entry();
    __shared__ double sh[32];
    const Gate gate = load_gate(a.gstat);
    if (gate.skip) return;
    const float beta2t = adafactor_beta2t(a.h[kStep], a.decay_rate), keep = __fsub_rn(1.0f, beta2t), eps1 = a.h[kEps];
    double acc = 0.0;
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < a.n; i += int64_t(a.parts) * blockDim.x) {
        const float gi = af_grad(a, i, gate.mul);
        a.vr[i] = __fadd_rn(__fmul_rn(a.vr[i], beta2t), __fmul_rn(keep, __fadd_rn(__fmul_rn(gi, gi), eps1)));
        const double u = af_update(a, i, gi);
        acc += u * u;
    }
    acc = block_sum(acc, sh);
    if (threadIdx.x == 0) a.ws[a.parts + blockIdx.x] = acc;
}

// Factored: one warp per line; ROWS: line (b, r) runs over C, else line (b, c) runs over R.
template <bool ROWS>
__global__ void __launch_bounds__(256) af_line_kernel(AfArgs a) {
    kernel_entry();
    const Gate gate = load_gate(a.gstat);
    if (gate.skip) return;
    const int64_t B = a.O * a.I, len = ROWS ? a.C : a.R, lines = B * (ROWS ? a.R : a.C);
    const int64_t line = int64_t(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (line >= lines) return;
    const int lane = threadIdx.x & 31;
    const int64_t per = ROWS ? a.R : a.C, b = line / per, k = line % per;
    const float eps1 = a.h[kEps];
    double acc = 0.0;
    for (int64_t j = lane; j < len; j += 32) {
        const float gi = af_grad(a, ROWS ? af_at(a, b, k, j) : af_at(a, b, j, k), gate.mul);
        acc += double(__fadd_rn(__fmul_rn(gi, gi), eps1));
    }
    acc = warp_sum(acc);
    if (lane == 0) {
        const float beta2t = adafactor_beta2t(a.h[kStep], a.decay_rate), keep = __fsub_rn(1.0f, beta2t);
        float* v = ROWS ? a.vr : a.vc;
        v[line] = __fadd_rn(__fmul_rn(v[line], beta2t), __fmul_rn(keep, float(acc / double(len))));
    }
}

__global__ void __launch_bounds__(256) af_row_mean_kernel(AfArgs a) {
    kernel_entry();
    if (load_gate(a.gstat).skip) return;
    const int64_t b = int64_t(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (b >= a.O * a.I) return;
    const int lane = threadIdx.x & 31;
    double acc = 0.0;
    for (int64_t r = lane; r < a.R; r += 32) acc += double(a.vr[b * a.R + r]);
    acc = warp_sum(acc);
    if (lane == 0) a.ws[2 * a.parts + b] = double(float(acc / double(a.R)));
}

__global__ void __launch_bounds__(256) af_sumsq_u_kernel(AfArgs a) {
    kernel_entry();
    __shared__ double sh[32];
    const Gate gate = load_gate(a.gstat);
    if (gate.skip) return;
    double acc = 0.0;
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < a.n; i += int64_t(a.parts) * blockDim.x) {
        const double u = af_update(a, i, af_grad(a, i, gate.mul));
        acc += u * u;
    }
    acc = block_sum(acc, sh);
    if (threadIdx.x == 0) a.ws[a.parts + blockIdx.x] = acc;
}

__global__ void __launch_bounds__(256) af_apply_kernel(AfArgs a) {
    kernel_entry();
    const Gate gate = load_gate(a.gstat);
    if (gate.skip) return;
    double pp = 0.0, uu = 0.0;
    for (int k = 0; k < a.parts; k++) {
        pp += a.ws[k];
        uu += a.ws[a.parts + k];
    }
    const float lr = adafactor_lr(a.h[kLr], a.h[kStep], sqrt(pp / double(a.n)), a.flags & kAfRelative,
                                  a.flags & kAfScaleParam, a.flags & kAfWarmup, a.eps2);
    const float rms_u = float(sqrt(uu / double(a.n)));
    const float denom = fmaxf(1.0f, __fdiv_rn(rms_u, a.clip));
    const float b1 = a.h[kBeta1], wd = a.h[kWeightDecay], decay = __fmul_rn(-wd, lr);
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < a.n; i += int64_t(gridDim.x) * blockDim.x) {
        float ui = __fmul_rn(__fdiv_rn(af_update(a, i, af_grad(a, i, gate.mul)), denom), lr);
        if (a.m) {
            ui = __fadd_rn(__fmul_rn(a.m[i], b1), __fmul_rn(__fsub_rn(1.0f, b1), ui));
            a.m[i] = ui;
        }
        float pi = a.p[i];
        if (wd != 0.0f) pi = __fadd_rn(pi, __fmul_rn(pi, decay));
        a.p[i] = __fsub_rn(pi, ui);
    }
}

static AfArgs af_args(const CudaCtx& c, double* ws) {
    AfArgs a{};
    const Params& p = c.p();
    const bool has_m = p.i[0] & kAfHasM, factored = p.i[0] & kAfFactored;
    const int vr = has_m ? 3 : 2, hyper = vr + (factored ? 2 : 1);
    a.p = mut_ptr<float>(c, 0);
    a.g = c.in_ptr<float>(1);
    a.m = has_m ? mut_ptr<float>(c, 2) : nullptr;
    a.vr = mut_ptr<float>(c, vr);
    a.vc = factored ? mut_ptr<float>(c, vr + 1) : nullptr;
    a.h = c.in_ptr<float>(hyper);
    a.gstat = gstat_ptr(c, hyper + 1);
    a.O = p.i[1];
    a.R = p.i[2];
    a.C = p.i[3];
    a.I = p.i[4];
    a.n = c.in[0].numel();
    a.flags = p.i[0];
    a.decay_rate = p.f[0];
    a.eps2 = p.f[1];
    a.clip = p.f[2];
    a.parts = reduction_parts(a.n);
    a.ws = ws;
    return a;
}

static size_t af_workspace(const Graph& g, const Node& n) {
    const int64_t numel = g.v(n.in[0]).numel();
    const int64_t rows = (n.p.i[0] & kAfFactored) ? n.p.i[1] * n.p.i[4] : 0;
    return size_t(2 * reduction_parts(numel) + rows) * sizeof(double);
}

static void af_run(CudaCtx& c) {
    const AfArgs a = af_args(c, reinterpret_cast<double*>(c.workspace));
    if (a.n == 0) return;
    const cudaStream_t s = c.stream;
    auto warps = [](int64_t lines) { return grid_for(lines, 8); };  // 8 warps per 256-thread block
    af_sumsq_p_kernel<<<a.parts, 256, 0, s>>>(a);
    if (a.vc) {
        const int64_t B = a.O * a.I;
        af_line_kernel<true><<<warps(B * a.R), 256, 0, s>>>(a);
        af_line_kernel<false><<<warps(B * a.C), 256, 0, s>>>(a);
        af_row_mean_kernel<<<warps(B), 256, 0, s>>>(a);
        af_sumsq_u_kernel<<<a.parts, 256, 0, s>>>(a);
    } else {
        af_full_kernel<<<a.parts, 256, 0, s>>>(a);
    }
    af_apply_kernel<<<grid_for(a.n, 256, sm_count() * 16), 256, 0, s>>>(a);
    GL_CUDA_LAUNCHED();
}
const CudaKernel cuda_adafactor_step{af_run, af_workspace};

}  // namespace gl
