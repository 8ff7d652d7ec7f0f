// D-Adaptation Adam, in place (CPU reference: ops/optim_dadapt.cpp), f32 param / grad / m / v / s.
//   dadapt_adam_accum  parts blocks (grid-stride): the dot with the old s, v, then the EMAs; per-block
//                      double partials -> workspace; one block adds them in a fixed order into the slot
//   dadapt_adam_d      one block: slot sums in a fixed order, then the shared d update (optim_dadapt.h)
//   dadapt_adam_step   grid-stride elementwise update
//   dadapt_lion_step   as accum (parts blocks, then one block adds them): DAdaptLion's whole per-param step
// Every kernel reads the gstat gate first and does nothing when it says skip; no float atomics.
#include "ggml-lite/cuda/optim_common.cuh"
#include "ggml-lite/ops/optim_dadapt.h"
#include "ggml-lite/ops/optim_math.h"

namespace gl {

constexpr int64_t kDaDecouple = 1, kDaBiasCorrection = 2;

struct DaAccumArgs {
    const float* p;
    const float* g;
    float *m, *v, *s;
    const float* h;
    const float* ds;
    float* acc;
    const float* gstat;
    int64_t n, flags, slot;
    int parts;
    double* ws;  // [2 * parts]
};

__global__ void __launch_bounds__(256) da_accum_parts_kernel(DaAccumArgs a) {
    kernel_entry();
    __shared__ double sh[32];
    const Gate gate = load_gate(a.gstat);
    if (gate.skip) return;
    const float lr = a.h[kLr], b1 = a.h[kBeta1], b2 = a.h[kBeta2], eps = a.h[kEps], wd = a.h[kWeightDecay];
    const float gs = a.h[kGradScale];
    const double dlr = prodigy_dlr(a.ds[kDaD], lr, b1, b2, a.h[kStep], a.flags & kDaBiasCorrection);
    const double sqrt_b2 = sqrt(double(b2));
    const float cm = float(dlr * (1.0 - double(b1))), cs = float(dlr * (1.0 - sqrt_b2)), fb2 = float(sqrt_b2);
    const float cv = __fsub_rn(1.0f, b2);
    const bool coupled = !(a.flags & kDaDecouple) && wd != 0.0f;
    double dot = 0.0, sabs = 0.0;
    if (lr > 0.0f) {
        for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < a.n; i += int64_t(a.parts) * blockDim.x) {
            float gi = __fmul_rn(__fmul_rn(a.g[i], gs), gate.mul);
            if (coupled) gi = __fadd_rn(gi, __fmul_rn(wd, a.p[i]));
            const float vi = a.v[i], si = a.s[i];
            const float denom = __fadd_rn(__fsqrt_rn(vi), eps);
            dot += double(gi) * double(__fdiv_rn(si, denom));
            a.m[i] = __fadd_rn(__fmul_rn(a.m[i], b1), __fmul_rn(cm, gi));
            a.v[i] = __fadd_rn(__fmul_rn(vi, b2), __fmul_rn(cv, __fmul_rn(gi, gi)));
            const float sn = __fadd_rn(__fmul_rn(si, fb2), __fmul_rn(cs, gi));
            a.s[i] = sn;
            sabs += double(fabsf(sn));
        }
    }
    dot = block_sum(dot, sh);
    sabs = block_sum(sabs, sh);
    if (threadIdx.x == 0) {
        a.ws[2 * blockIdx.x] = dot * dlr;
        a.ws[2 * blockIdx.x + 1] = sabs;
    }
}

__global__ void da_accum_finish_kernel(DaAccumArgs a) {
    kernel_entry();
    if (load_gate(a.gstat).skip) return;
    double num = 0.0, sabs = 0.0;
    for (int k = 0; k < a.parts; k++) {
        num += a.ws[2 * k];
        sabs += a.ws[2 * k + 1];
    }
    a.acc[2 * a.slot] = float(num);
    a.acc[2 * a.slot + 1] = float(sabs);
}

static size_t da_accum_workspace(const Graph& g, const Node& n) {
    return size_t(2 * reduction_parts(g.v(n.in[0]).numel())) * sizeof(double);
}

static void da_accum_run(CudaCtx& c) {
    DaAccumArgs a{};
    a.p = c.in_ptr<float>(0);
    a.g = c.in_ptr<float>(1);
    a.m = mut_ptr<float>(c, 2);
    a.v = mut_ptr<float>(c, 3);
    a.s = mut_ptr<float>(c, 4);
    a.h = c.in_ptr<float>(5);
    a.ds = c.in_ptr<float>(6);
    a.acc = mut_ptr<float>(c, 7);
    a.gstat = gstat_ptr(c, 8);
    a.n = c.in[0].numel();
    a.flags = c.p().i[0];
    a.slot = c.p().i[1];
    a.parts = reduction_parts(a.n);
    a.ws = reinterpret_cast<double*>(c.workspace);
    da_accum_parts_kernel<<<a.parts, 256, 0, c.stream>>>(a);
    da_accum_finish_kernel<<<1, 1, 0, c.stream>>>(a);
    GL_CUDA_LAUNCHED();
}
const CudaKernel cuda_dadapt_adam_accum{da_accum_run, da_accum_workspace};

struct DaLionArgs {
    float *p, *m, *s;
    const float* g;
    const float *h, *lead, *ds;
    float* acc;
    const float* gstat;
    int64_t n, slot;
    int parts;
    double* ws;  // [2 * parts]
};

__global__ void __launch_bounds__(256) da_lion_parts_kernel(DaLionArgs a) {
    kernel_entry();
    __shared__ double sh[32];
    const Gate gate = load_gate(a.gstat);
    if (gate.skip) return;
    const DaLionConsts k = dadapt_lion_consts(a.h, a.lead, a.ds);
    double dot = 0.0, sabs = 0.0;
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < a.n; i += int64_t(a.parts) * blockDim.x) {
        const float gi = __fmul_rn(__fmul_rn(a.g[i], k.gs), gate.mul);
        const float mi = a.m[i], si = a.s[i];
        const float ci = __fadd_rn(__fmul_rn(mi, k.b1), __fmul_rn(k.c1, gi));
        const float u = ci > 0.0f ? 1.0f : (ci < 0.0f ? -1.0f : 0.0f);
        a.p[i] = __fadd_rn(__fmul_rn(a.p[i], k.decay), __fmul_rn(k.step, u));
        a.m[i] = __fadd_rn(__fmul_rn(mi, k.b2), __fmul_rn(k.cm, gi));
        dot += double(u) * double(si);
        const float sn = __fadd_rn(__fmul_rn(si, k.sqrt_b2), __fmul_rn(k.cs, u));
        a.s[i] = sn;
        sabs += double(fabsf(sn));
    }
    dot = block_sum(dot, sh);
    sabs = block_sum(sabs, sh);
    if (threadIdx.x == 0) {
        a.ws[2 * blockIdx.x] = dot * k.dlr;
        a.ws[2 * blockIdx.x + 1] = sabs;
    }
}

__global__ void da_lion_finish_kernel(DaLionArgs a) {
    kernel_entry();
    if (load_gate(a.gstat).skip) return;
    double num = 0.0, sabs = 0.0;
    for (int k = 0; k < a.parts; k++) {
        num += a.ws[2 * k];
        sabs += a.ws[2 * k + 1];
    }
    a.acc[2 * a.slot] = float(num);
    a.acc[2 * a.slot + 1] = float(sabs);
}

static void da_lion_run(CudaCtx& c) {
    DaLionArgs a{};
    a.p = mut_ptr<float>(c, 0);
    a.g = c.in_ptr<float>(1);
    a.m = mut_ptr<float>(c, 2);
    a.s = mut_ptr<float>(c, 3);
    a.h = c.in_ptr<float>(4);
    a.lead = c.in_ptr<float>(5);
    a.ds = c.in_ptr<float>(6);
    a.acc = mut_ptr<float>(c, 7);
    a.gstat = gstat_ptr(c, 8);
    a.n = c.in[0].numel();
    a.slot = c.p().i[1];
    a.parts = reduction_parts(a.n);
    a.ws = reinterpret_cast<double*>(c.workspace);
    da_lion_parts_kernel<<<a.parts, 256, 0, c.stream>>>(a);
    da_lion_finish_kernel<<<1, 1, 0, c.stream>>>(a);
    GL_CUDA_LAUNCHED();
}
const CudaKernel cuda_dadapt_lion_step{da_lion_run, da_accum_workspace};

__global__ void __launch_bounds__(256) da_d_kernel(float* ds, const float* acc, int64_t slots, const float* h,
                                                   const float* gstat, float growth, bool bias_correction) {
    kernel_entry();
    __shared__ double sh[32];
    if (load_gate(gstat).skip) return;
    double num = 0.0, sabs = 0.0;
    for (int64_t k = threadIdx.x; k < slots; k += blockDim.x) {
        num += double(acc[2 * k]);
        sabs += double(acc[2 * k + 1]);
    }
    num = block_sum(num, sh);
    sabs = block_sum(sabs, sh);
    if (threadIdx.x == 0)
        dadapt_adam_update_d(ds, num, sabs, h[kLr], h[kBeta1], h[kBeta2], h[kStep], growth, bias_correction);
}

static void da_d_run(CudaCtx& c) {
    const Params& p = c.p();
    da_d_kernel<<<1, 256, 0, c.stream>>>(mut_ptr<float>(c, 0), c.in_ptr<float>(1), c.in[1].numel() / 2,
                                         c.in_ptr<float>(2), gstat_ptr(c, 3), p.f[0], (p.i[0] & kDaBiasCorrection) != 0);
    GL_CUDA_LAUNCHED();
}
const CudaKernel cuda_dadapt_adam_d{da_d_run};

__global__ void da_step_kernel(float* p, const float* m, const float* v, const float* h, const float* ds,
                               const float* gstat, int64_t n, bool decouple) {
    kernel_entry();
    const Gate gate = load_gate(gstat);
    if (gate.skip || ds[kDaApplied] == 0.0f) return;
    const float eps = h[kEps], wd = h[kWeightDecay];
    const bool decay = decouple && wd != 0.0f;
    const float decay_by = float(-double(wd) * double(ds[kDaDlr]));
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
        float pi = p[i];
        if (decay) pi = __fadd_rn(pi, __fmul_rn(decay_by, pi));
        p[i] = __fsub_rn(pi, __fdiv_rn(m[i], __fadd_rn(__fsqrt_rn(v[i]), eps)));
    }
}

static void da_step_run(CudaCtx& c) {
    const int64_t n = c.in[0].numel();
    if (n == 0) return;
    da_step_kernel<<<grid_for(n, 256, sm_count() * 16), 256, 0, c.stream>>>(
        mut_ptr<float>(c, 0), c.in_ptr<float>(1), c.in_ptr<float>(2), c.in_ptr<float>(3), c.in_ptr<float>(4),
        gstat_ptr(c, 5), n, (c.p().i[0] & kDaDecouple) != 0);
    GL_CUDA_LAUNCHED();
}
const CudaKernel cuda_dadapt_adam_step{da_step_run};

}  // namespace gl
