// Prodigy, in place (CPU reference: ops/optim_prodigy.cpp), f32 param / grad / moments / s / p0.
//   prodigy_accum  accum_parts (parts blocks, grid-stride): EMAs and s with the old d, per-block
//                  double partials of dot(g, p0 - p) and sum|s| -> workspace; accum_finish (one
//                  block) adds them in a fixed order into the param's acc slot
//   prodigy_d      one block: slot sums in a fixed order, then the shared d update (optim_math.h)
//   prodigy_step   grid-stride elementwise update with the new d
// Every kernel reads the gstat gate first and does nothing when it says skip.
#include "ggml-lite/cuda/optim_common.cuh"
#include "ggml-lite/ops/optim_math.h"

namespace gl {

constexpr int64_t kPdHasM = 1, kPdDecouple = 2, kPdBiasCorrection = 4, kPdSafeguard = 8;

struct PdAccumArgs {
    float* p;
    const float* g;
    float* m;  // null when beta1 = 0
    float* v;
    float* s;
    const float* p0;
    const float* h;
    const float* ps;
    float* acc;
    const float* gstat;
    int64_t n, flags, slot;
    float beta3, d0;
    int parts;
    double* ws;  // [2 * parts]
};

__global__ void __launch_bounds__(256) pd_accum_parts_kernel(PdAccumArgs a) {
    kernel_entry();
    __shared__ double sh[32];
    const Gate gate = load_gate(a.gstat);
    if (gate.skip) return;
    const float b1 = a.h[kBeta1], b2 = a.h[kBeta2], wd = a.h[kWeightDecay], gs = a.h[kGradScale];
    const double d = a.ps[kPdD];
    const double dlr = prodigy_dlr(d, a.h[kLr], b1, b2, a.h[kStep], a.flags & kPdBiasCorrection);
    const float beta3 = a.beta3 < 0.0f ? float(sqrt(double(b2))) : a.beta3;
    const float cm = float(d * (1.0 - double(b1))), cv = float(d * d * (1.0 - double(b2)));
    const float cs = float((d / double(a.d0)) * ((a.flags & kPdSafeguard) ? d : dlr));
    const bool coupled = !(a.flags & kPdDecouple) && wd != 0.0f;
    double dot = 0.0, sabs = 0.0;
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < a.n; i += int64_t(a.parts) * blockDim.x) {
        const float pi = a.p[i];
        float gi = __fmul_rn(__fmul_rn(a.g[i], gs), gate.mul);
        if (coupled) gi = __fadd_rn(gi, __fmul_rn(wd, pi));
        dot += double(gi) * double(__fsub_rn(a.p0[i], pi));
        if (a.m) a.m[i] = __fadd_rn(__fmul_rn(a.m[i], b1), __fmul_rn(cm, gi));
        a.v[i] = __fadd_rn(__fmul_rn(a.v[i], b2), __fmul_rn(cv, __fmul_rn(gi, gi)));
        const float si = __fadd_rn(__fmul_rn(a.s[i], beta3), __fmul_rn(cs, gi));
        a.s[i] = si;
        sabs += double(fabsf(si));
    }
    dot = block_sum(dot, sh);
    sabs = block_sum(sabs, sh);
    if (threadIdx.x == 0) {
        a.ws[2 * blockIdx.x] = dot;
        a.ws[2 * blockIdx.x + 1] = sabs;
    }
}

__global__ void pd_accum_finish_kernel(PdAccumArgs a) {
    kernel_entry();
    if (load_gate(a.gstat).skip) return;
    double dot = 0.0, sabs = 0.0;
    for (int k = 0; k < a.parts; k++) {
        dot += a.ws[2 * k];
        sabs += a.ws[2 * k + 1];
    }
    a.acc[2 * a.slot] = float(dot);
    a.acc[2 * a.slot + 1] = float(sabs);
}

static size_t pd_accum_workspace(const Graph& g, const Node& n) {
    return size_t(2 * reduction_parts(g.v(n.in[0]).numel())) * sizeof(double);
}

static void pd_accum_run(CudaCtx& c) {
    const Params& p = c.p();
    const int has_m = (p.i[0] & kPdHasM) ? 1 : 0, v = 2 + has_m;
    PdAccumArgs a{};
    a.p = mut_ptr<float>(c, 0);
    a.g = c.in_ptr<float>(1);
    a.m = has_m ? mut_ptr<float>(c, 2) : nullptr;
    a.v = mut_ptr<float>(c, v);
    a.s = mut_ptr<float>(c, v + 1);
    a.p0 = c.in_ptr<float>(v + 2);
    a.h = c.in_ptr<float>(v + 3);
    a.ps = c.in_ptr<float>(v + 4);
    a.acc = mut_ptr<float>(c, v + 5);
    a.gstat = gstat_ptr(c, v + 6);
    a.n = c.in[0].numel();
    a.flags = p.i[0];
    a.slot = p.i[1];
    a.beta3 = p.f[0];
    a.d0 = p.f[1];
    a.parts = reduction_parts(a.n);
    a.ws = reinterpret_cast<double*>(c.workspace);
    pd_accum_parts_kernel<<<a.parts, 256, 0, c.stream>>>(a);
    pd_accum_finish_kernel<<<1, 1, 0, c.stream>>>(a);
    GL_CUDA_LAUNCHED();
}
const CudaKernel cuda_prodigy_accum{pd_accum_run, pd_accum_workspace};

// ---------------- prodigy_d ----------------

__global__ void __launch_bounds__(256) pd_d_kernel(float* ps, const float* acc, int64_t slots, const float* h,
                                                   const float* gstat, float beta3, float d0, float d_coef,
                                                   float growth, bool bias_correction) {
    kernel_entry();
    __shared__ double sh[32];
    if (load_gate(gstat).skip) return;
    double dot = 0.0, sabs = 0.0;
    for (int64_t k = threadIdx.x; k < slots; k += blockDim.x) {
        dot += double(acc[2 * k]);
        sabs += double(acc[2 * k + 1]);
    }
    dot = block_sum(dot, sh);
    sabs = block_sum(sabs, sh);
    if (threadIdx.x == 0) {
        const float b3 = beta3 < 0.0f ? float(sqrt(double(h[kBeta2]))) : beta3;
        prodigy_update_d(ps, dot, sabs, h[kLr], h[kBeta1], h[kBeta2], h[kStep], b3, d0, d_coef, growth, bias_correction);
    }
}

static void pd_d_run(CudaCtx& c) {
    const Params& p = c.p();
    pd_d_kernel<<<1, 256, 0, c.stream>>>(mut_ptr<float>(c, 0), c.in_ptr<float>(1), c.in[1].numel() / 2,
                                         c.in_ptr<float>(2), gstat_ptr(c, 3), p.f[0], p.f[1], p.f[2], p.f[3],
                                         (p.i[0] & kPdBiasCorrection) != 0);
    GL_CUDA_LAUNCHED();
}
const CudaKernel cuda_prodigy_d{pd_d_run};

// ---------------- prodigy_step ----------------

__global__ void pd_step_kernel(float* p, const float* g, const float* m, const float* v, const float* h,
                               const float* ps, const float* gstat, int64_t n, bool decouple) {
    kernel_entry();
    const Gate gate = load_gate(gstat);
    if (gate.skip || ps[kPdApplied] == 0.0f) return;
    const double d = ps[kPdD], dlr = ps[kPdDlr];
    const float wd = h[kWeightDecay], gs = h[kGradScale];
    const float deps = float(d * double(h[kEps]));
    const float decay = float(-double(wd) * dlr), step = float(-dlr), step_g = float(-dlr * d);
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
        const float denom = __fadd_rn(__fsqrt_rn(v[i]), deps);
        float pi = p[i];
        if (m) {
            if (decouple && wd != 0.0f) pi = __fadd_rn(pi, __fmul_rn(decay, pi));
            p[i] = __fadd_rn(pi, __fmul_rn(step, __fdiv_rn(m[i], denom)));
        } else {
            float gi = __fmul_rn(__fmul_rn(g[i], gs), gate.mul);
            if (!decouple && wd != 0.0f) gi = __fadd_rn(gi, __fmul_rn(wd, pi));
            if (decouple && wd != 0.0f) pi = __fadd_rn(pi, __fmul_rn(decay, pi));
            p[i] = __fadd_rn(pi, __fmul_rn(step_g, __fdiv_rn(gi, denom)));
        }
    }
}

static void pd_step_run(CudaCtx& c) {
    const Params& p = c.p();
    const int has_m = (p.i[0] & kPdHasM) ? 1 : 0;
    const int64_t n = c.in[0].numel();
    if (n == 0) return;
    pd_step_kernel<<<grid_for(n, 256, sm_count() * 16), 256, 0, c.stream>>>(
        mut_ptr<float>(c, 0), c.in_ptr<float>(1), has_m ? c.in_ptr<float>(2) : nullptr, c.in_ptr<float>(2 + has_m),
        c.in_ptr<float>(3 + has_m), c.in_ptr<float>(4 + has_m), gstat_ptr(c, 5 + has_m), n,
        (p.i[0] & kPdDecouple) != 0);
    GL_CUDA_LAUNCHED();
}
const CudaKernel cuda_prodigy_step{pd_step_run};

}  // namespace gl
