// D-Adaptation SGD, AdaGrad, Adan, AdamPreprint and AdanIP, in place (CPU reference: ops/optim_dadapt_more.cpp), f32 state.
//   <rule>_accum   parts blocks (grid-stride): the per-element state update and three double sums;
//                  per-block partials -> workspace; one thread adds them in a fixed order into acc
//   dadapt_sum_d   one block: slot sums in a fixed order, then the shared d rule (optim_dadapt_more.h)
//   <rule>_step    grid-stride elementwise update
// Every kernel reads the gstat gate first and does nothing when it says skip; no float atomics.
#include "ggml-lite/cuda/optim_common.cuh"
#include "ggml-lite/ops/optim_dadapt_more.h"

namespace gl {

namespace {

struct DsAccumArgs {
    const float* p;
    const float* g;
    float* st[5];      // the rule's state tensors, in op input order
    const float* h;    // the param's group
    const float* lead;
    const float* ds;
    float* acc;
    const float* gstat;
    int64_t n, slot, flags;
    float beta3;
    double beta[3];  // the Adan / AdanIP / preprint accum's betas as doubles (Params i[3..5])
    int parts;
    double* ws;  // [3 * parts]
};

// Per-rule element updates: each updates element i of its state and adds to sum[3].
struct SgdRule {
    float wd, gs, fdlr;
    bool on, first;
    __device__ SgdRule(const DsAccumArgs& a, float) {
        wd = a.h[kWeightDecay];
        gs = a.h[kGradScale];
        on = a.h[kLr] > 0.0f;
        first = a.ds[kDsSteps] == 0.0f;
        const double dlr = first ? 0.0 : ds_get(a.ds, kDsD) * double(a.lead[kLr]) / ds_get(a.ds, kDsG0);
        fdlr = float(dlr);
    }
    __device__ void at(const DsAccumArgs& a, int64_t i, float mul, double* sum) const {
        if (!on) return;
        const float gi = __fmul_rn(__fmul_rn(a.g[i], gs), mul);
        const float gd = wd != 0.0f ? __fadd_rn(gi, __fmul_rn(wd, a.p[i])) : gi;
        float* s = a.st[0];
        if (first) {
            sum[0] += double(gi) * double(gi);
            s[i] = gd;
            sum[1] += double(gd) * double(gd);
        } else {
            const float si = s[i];
            sum[0] += double(gd) * double(si);
            const float sn = __fadd_rn(si, __fmul_rn(fdlr, gd));
            s[i] = sn;
            sum[1] += double(sn) * double(sn);
        }
    }
};

struct AdagradRule {
    float wd, gs, eps, fdlr;
    __device__ AdagradRule(const DsAccumArgs& a, float) {
        wd = a.h[kWeightDecay];
        gs = a.h[kGradScale];
        eps = a.h[kEps];
        fdlr = float(ds_get(a.ds, kDsD) * double(a.lead[kLr]));
    }
    __device__ void at(const DsAccumArgs& a, int64_t i, float mul, double* sum) const {
        float* alpha = a.st[0];
        float* sk = a.st[1];
        float gi = __fmul_rn(__fmul_rn(a.g[i], gs), mul);
        if (wd != 0.0f) gi = __fadd_rn(gi, __fmul_rn(wd, a.p[i]));
        const float al = alpha[i], si = sk[i];
        const float old_den = __fadd_rn(__fsqrt_rn(al), eps);
        const float an = __fadd_rn(al, __fmul_rn(gi, gi));
        alpha[i] = an;
        const float den = __fadd_rn(__fsqrt_rn(an), eps);
        const float sn = __fadd_rn(si, __fmul_rn(fdlr, gi));
        sk[i] = sn;
        sum[0] += double(__fdiv_rn(__fmul_rn(gi, gi), den));
        sum[1] += double(__fdiv_rn(__fmul_rn(sn, sn), den)) - double(__fdiv_rn(__fmul_rn(si, si), old_den));
        sum[2] += double(fabsf(sn)) - double(fabsf(si));
    }
};

struct AdanRule {
    float gs, eps, b1, b2, b3, c1, c2, c3, cs;
    bool first;
    __device__ AdanRule(const DsAccumArgs& a, float) {
        gs = a.h[kGradScale];
        eps = a.h[kEps];
        b1 = a.lead[kBeta1];
        b2 = a.lead[kBeta2];
        b3 = a.beta3;
        const double dlr = ds_get(a.ds, kDsD) * double(a.lead[kLr]);
        c1 = float(dlr * (1.0 - a.beta[0]));
        c2 = float(dlr * (1.0 - a.beta[1]));
        c3 = float(1.0 - a.beta[2]);
        cs = float(dlr * (1.0 - a.beta[2]));
        first = a.ds[kDsSteps] == 0.0f;
    }
    __device__ void at(const DsAccumArgs& a, int64_t i, float mul, double* sum) const {
        float *m = a.st[0], *diff = a.st[1], *v = a.st[2], *s = a.st[3], *pre = a.st[4];
        const float gi = __fmul_rn(__fmul_rn(a.g[i], gs), mul);
        const float pr = first ? gi : pre[i];
        if (first) pre[i] = gi;
        const float gd = __fsub_rn(gi, pr);
        const float up = __fadd_rn(gi, __fmul_rn(b2, gd));
        m[i] = __fadd_rn(__fmul_rn(m[i], b1), __fmul_rn(c1, gi));
        diff[i] = __fadd_rn(__fmul_rn(diff[i], b2), __fmul_rn(c2, gd));
        const float vn = __fadd_rn(__fmul_rn(v[i], b3), __fmul_rn(c3, __fmul_rn(up, up)));
        v[i] = vn;
        const float den = __fadd_rn(__fsqrt_rn(vn), eps);
        const float sn = __fadd_rn(__fmul_rn(s[i], b3), __fmul_rn(cs, gi));
        s[i] = sn;
        sum[0] += double(__fdiv_rn(__fmul_rn(gi, gi), den));
        sum[1] += double(__fdiv_rn(__fmul_rn(sn, sn), den));
        sum[2] += double(fabsf(sn));
    }
};

// DAdaptAdamPreprint: state m, v, s; flags & 1 = decouple.
struct PreprintRule {
    float wd, gs, eps, b1, b2, c1, c2, cs;
    bool on, coupled;
    __device__ PreprintRule(const DsAccumArgs& a, float) {
        wd = a.h[kWeightDecay];
        gs = a.h[kGradScale];
        eps = a.h[kEps];
        on = a.h[kLr] > 0.0f;
        coupled = !(a.flags & 1);
        b1 = a.lead[kBeta1];
        b2 = a.lead[kBeta2];
        const double dlr = ds_get(a.ds, kDsD) * double(a.lead[kLr]);
        c1 = float(dlr * (1.0 - a.beta[0]));
        c2 = float(1.0 - a.beta[1]);
        cs = float(dlr * (1.0 - a.beta[1]));
    }
    __device__ void at(const DsAccumArgs& a, int64_t i, float mul, double* sum) const {
        if (!on) return;
        float *m = a.st[0], *v = a.st[1], *s = a.st[2];
        float gi = __fmul_rn(__fmul_rn(a.g[i], gs), mul);
        if (coupled && wd != 0.0f) gi = __fadd_rn(gi, __fmul_rn(wd, a.p[i]));
        const float gg = __fmul_rn(gi, gi);
        m[i] = __fadd_rn(__fmul_rn(m[i], b1), __fmul_rn(c1, gi));
        const float vn = __fadd_rn(__fmul_rn(v[i], b2), __fmul_rn(c2, gg));
        v[i] = vn;
        const float den = __fadd_rn(__fsqrt_rn(vn), eps);
        const float sn = __fadd_rn(__fmul_rn(s[i], b2), __fmul_rn(cs, gi));
        s[i] = sn;
        sum[0] += double(__fdiv_rn(gg, den));
        sum[1] += double(__fdiv_rn(__fmul_rn(sn, sn), den));
        sum[2] += double(fabsf(sn));
    }
};

// DAdaptAdanIP: Adan's state; the dot of g with s / denom before their updates.
struct AdanIpRule {
    float gs, eps, b1, b2, b3, c1, c2, c3, cs;
    bool first;
    __device__ AdanIpRule(const DsAccumArgs& a, float) {
        gs = a.h[kGradScale];
        eps = a.h[kEps];
        b1 = a.lead[kBeta1];
        b2 = a.lead[kBeta2];
        b3 = a.beta3;
        const double dlr = ds_get(a.ds, kDsD) * double(a.lead[kLr]);
        c1 = float(dlr * (1.0 - a.beta[0]));
        c2 = float(dlr * (1.0 - a.beta[1]));
        c3 = float(1.0 - a.beta[2]);
        cs = float(dlr * (1.0 - a.beta[2]));
        first = a.ds[kDsSteps] == 0.0f;
    }
    __device__ void at(const DsAccumArgs& a, int64_t i, float mul, double* sum) const {
        float *m = a.st[0], *diff = a.st[1], *v = a.st[2], *s = a.st[3], *pre = a.st[4];
        const float gi = __fmul_rn(__fmul_rn(a.g[i], gs), mul);
        const float pr = first ? gi : pre[i];
        if (first) pre[i] = gi;
        const float gd = __fsub_rn(gi, pr);
        const float up = __fadd_rn(gi, __fmul_rn(b2, gd));
        const float si = s[i];
        sum[0] += double(gi) * double(__fdiv_rn(si, __fadd_rn(__fsqrt_rn(v[i]), eps)));
        m[i] = __fadd_rn(__fmul_rn(m[i], b1), __fmul_rn(c1, gi));
        diff[i] = __fadd_rn(__fmul_rn(diff[i], b2), __fmul_rn(c2, gd));
        v[i] = __fadd_rn(__fmul_rn(v[i], b3), __fmul_rn(c3, __fmul_rn(up, up)));
        const float sn = __fadd_rn(__fmul_rn(si, b3), __fmul_rn(cs, gi));
        s[i] = sn;
        sum[2] += double(fabsf(sn));
    }
};

template <class Rule>
__global__ void __launch_bounds__(256) ds_accum_parts_kernel(DsAccumArgs a) {
    kernel_entry();
    __shared__ double sh[32];
    const Gate gate = load_gate(a.gstat);
    if (gate.skip) return;
    const Rule r(a, gate.mul);
    double sum[3] = {0.0, 0.0, 0.0};
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < a.n; i += int64_t(a.parts) * blockDim.x)
        r.at(a, i, gate.mul, sum);
    for (int j = 0; j < 3; j++) {
        const double t = block_sum(sum[j], sh);
        if (threadIdx.x == 0) a.ws[3 * blockIdx.x + j] = t;
    }
}

// SGD's first-part sum at k > 0 is dlr * dot (the partials hold the dot).
__global__ void ds_accum_finish_kernel(DsAccumArgs a, double scale0) {
    kernel_entry();
    if (load_gate(a.gstat).skip) return;
    double sum[3] = {0.0, 0.0, 0.0};
    for (int k = 0; k < a.parts; k++)
        for (int j = 0; j < 3; j++) sum[j] += a.ws[3 * k + j];
    double s0 = sum[0];
    if (scale0 < 0.0 && a.ds[kDsSteps] != 0.0f)  // SGD: the dot times this step's dlr
        s0 *= ds_get(a.ds, kDsD) * double(a.lead[kLr]) / ds_get(a.ds, kDsG0);
    float* acc = a.acc + kDsAccWidth * a.slot;
    ds_put(acc, 0, s0);
    ds_put(acc, 2, sum[1]);
    ds_put(acc, 4, sum[2]);
}

size_t ds_accum_workspace(const Graph& g, const Node& n) {
    return size_t(3 * reduction_parts(g.v(n.in[0]).numel())) * sizeof(double);
}

// Inputs: param, grad, then n_state state tensors, hyper, lead, dstate, acc, [gstat].
template <class Rule>
void ds_accum_run(CudaCtx& c, int n_state, bool sgd) {
    DsAccumArgs a{};
    a.p = c.in_ptr<float>(0);
    a.g = c.in_ptr<float>(1);
    for (int k = 0; k < n_state; k++) a.st[k] = mut_ptr<float>(c, 2 + k);
    const int at = 2 + n_state;
    a.h = c.in_ptr<float>(at);
    a.lead = c.in_ptr<float>(at + 1);
    a.ds = c.in_ptr<float>(at + 2);
    a.acc = mut_ptr<float>(c, at + 3);
    a.gstat = gstat_ptr(c, at + 4);
    a.n = c.in[0].numel();
    a.slot = c.p().i[1];
    a.flags = c.p().i[2];
    a.beta3 = c.p().f[1];
    for (int k = 0; k < 3; k++) a.beta[k] = ds_bits_double(c.p().i[3 + k]);
    a.parts = reduction_parts(a.n);
    a.ws = reinterpret_cast<double*>(c.workspace);
    ds_accum_parts_kernel<Rule><<<a.parts, 256, 0, c.stream>>>(a);
    ds_accum_finish_kernel<<<1, 1, 0, c.stream>>>(a, sgd ? -1.0 : 1.0);
    GL_CUDA_LAUNCHED();
}

// p = p keep + take (x0 - s), s first scaled by dlr at SGD's first step.
__global__ void ds_sgd_step_kernel(float* p, float* s, const float* x0, const float* h, const float* ds,
                                   const float* gstat, int64_t n) {
    kernel_entry();
    if (load_gate(gstat).skip || ds[kDsApplied] == 0.0f) return;
    const double ck = 1.0 - double(h[kBeta1]);
    const float keep = float(1.0 - ck), take = float(ck);
    const bool first = ds[kDsFirst] != 0.0f;
    const float fdlr = float(ds_get(ds, kDsDlr));
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
        float si = s[i];
        if (first) s[i] = si = __fadd_rn(0.0f, __fmul_rn(fdlr, si));
        const float z = __fsub_rn(x0[i], si);
        p[i] = __fadd_rn(__fmul_rn(p[i], keep), __fmul_rn(take, z));
    }
}

__global__ void ds_adagrad_step_kernel(float* p, const float* alpha, const float* sk, const float* x0, const float* h,
                                       const float* ds, const float* gstat, int64_t n) {
    kernel_entry();
    if (load_gate(gstat).skip || ds[kDsApplied] == 0.0f) return;
    const float eps = h[kEps];
    const bool momentum = h[kBeta1] != 0.0f;
    const double ck = 1.0 - double(h[kBeta1]);
    const float keep = float(1.0 - ck), take = float(ck);
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
        const float z = __fsub_rn(x0[i], __fdiv_rn(sk[i], __fadd_rn(__fsqrt_rn(alpha[i]), eps)));
        p[i] = momentum ? __fadd_rn(__fmul_rn(p[i], keep), __fmul_rn(take, z)) : z;
    }
}

__global__ void ds_adan_step_kernel(float* p, const float* g, const float* m, const float* diff, const float* v,
                                    float* pre, const float* h, const float* lead, const float* ds, const float* gstat,
                                    int64_t n, bool no_prox) {
    kernel_entry();
    const Gate gate = load_gate(gstat);
    if (gate.skip || ds[kDsApplied] == 0.0f) return;
    const float b2 = lead[kBeta2], eps = h[kEps], gs = h[kGradScale];
    const double dlr_wd = ds_get(ds, kDsDlr) * double(h[kWeightDecay]);
    const float mul_by = float(1.0 - dlr_wd), div_by = float(1.0 + dlr_wd);
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
        const float up = __fdiv_rn(__fadd_rn(m[i], __fmul_rn(b2, diff[i])), __fadd_rn(__fsqrt_rn(v[i]), eps));
        p[i] = no_prox ? __fsub_rn(__fmul_rn(p[i], mul_by), up) : __fdiv_rn(__fsub_rn(p[i], up), div_by);
        pre[i] = __fmul_rn(__fmul_rn(g[i], gs), gate.mul);
    }
}

// p -= dlr decay p (decouple, group lr > 0), then p -= m / (sqrt v + eps).
__global__ void ds_preprint_step_kernel(float* p, const float* m, const float* v, const float* h, const float* ds,
                                        const float* gstat, int64_t n, bool decouple) {
    kernel_entry();
    if (load_gate(gstat).skip || ds[kDsApplied] == 0.0f) return;
    const float eps = h[kEps];
    const bool decay = decouple && h[kWeightDecay] != 0.0f && h[kLr] > 0.0f;
    const float by = float(-double(h[kWeightDecay]) * ds_get(ds, kDsDlr));
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
        const float pi = decay ? __fadd_rn(p[i], __fmul_rn(by, p[i])) : p[i];
        p[i] = __fsub_rn(pi, __fdiv_rn(m[i], __fadd_rn(__fsqrt_rn(v[i]), eps)));
    }
}

__global__ void __launch_bounds__(256) ds_d_kernel(float* ds, const float* acc, int64_t slots, const float* lead,
                                                   const float* gstat, int rule, float growth, double beta3) {
    kernel_entry();
    __shared__ double sh[32];
    if (load_gate(gstat).skip) return;
    double sum[3] = {0.0, 0.0, 0.0};
    for (int64_t k = threadIdx.x; k < slots; k += blockDim.x)
        for (int j = 0; j < 3; j++) sum[j] += ds_get(acc, int(kDsAccWidth * k + 2 * j));
    for (int j = 0; j < 3; j++) sum[j] = block_sum(sum[j], sh);
    if (threadIdx.x == 0) dadapt_sum_update_d(ds, DSumRule(rule), sum, lead[kLr], growth, beta3);
}

unsigned step_grid(int64_t n) { return grid_for(n, 256, sm_count() * 16); }

void sgd_accum_run(CudaCtx& c) { ds_accum_run<SgdRule>(c, 1, true); }
void adagrad_accum_run(CudaCtx& c) { ds_accum_run<AdagradRule>(c, 2, false); }
void adan_accum_run(CudaCtx& c) { ds_accum_run<AdanRule>(c, 5, false); }
void preprint_accum_run(CudaCtx& c) { ds_accum_run<PreprintRule>(c, 3, false); }
void adan_ip_accum_run(CudaCtx& c) { ds_accum_run<AdanIpRule>(c, 5, false); }

void preprint_step_run(CudaCtx& c) {
    const int64_t n = c.in[0].numel();
    if (n == 0) return;
    ds_preprint_step_kernel<<<step_grid(n), 256, 0, c.stream>>>(mut_ptr<float>(c, 0), c.in_ptr<float>(1),
                                                                c.in_ptr<float>(2), c.in_ptr<float>(3),
                                                                c.in_ptr<float>(4), gstat_ptr(c, 5), n,
                                                                (c.p().i[1] & 1) != 0);
    GL_CUDA_LAUNCHED();
}

void sgd_step_run(CudaCtx& c) {
    const int64_t n = c.in[0].numel();
    if (n == 0) return;
    ds_sgd_step_kernel<<<step_grid(n), 256, 0, c.stream>>>(mut_ptr<float>(c, 0), mut_ptr<float>(c, 1),
                                                           c.in_ptr<float>(2), c.in_ptr<float>(3), c.in_ptr<float>(4),
                                                           gstat_ptr(c, 5), n);
    GL_CUDA_LAUNCHED();
}

void adagrad_step_run(CudaCtx& c) {
    const int64_t n = c.in[0].numel();
    if (n == 0) return;
    ds_adagrad_step_kernel<<<step_grid(n), 256, 0, c.stream>>>(mut_ptr<float>(c, 0), c.in_ptr<float>(1),
                                                               c.in_ptr<float>(2), c.in_ptr<float>(3),
                                                               c.in_ptr<float>(4), c.in_ptr<float>(5),
                                                               gstat_ptr(c, 6), n);
    GL_CUDA_LAUNCHED();
}

void adan_step_run(CudaCtx& c) {
    const int64_t n = c.in[0].numel();
    if (n == 0) return;
    ds_adan_step_kernel<<<step_grid(n), 256, 0, c.stream>>>(
        mut_ptr<float>(c, 0), c.in_ptr<float>(1), c.in_ptr<float>(2), c.in_ptr<float>(3), c.in_ptr<float>(4),
        mut_ptr<float>(c, 5), c.in_ptr<float>(6), c.in_ptr<float>(7), c.in_ptr<float>(8), gstat_ptr(c, 9), n,
        (c.p().i[1] & 1) != 0);
    GL_CUDA_LAUNCHED();
}

void sum_d_run(CudaCtx& c) {
    const Params& p = c.p();
    ds_d_kernel<<<1, 256, 0, c.stream>>>(mut_ptr<float>(c, 0), c.in_ptr<float>(1), c.in[1].numel() / kDsAccWidth,
                                         c.in_ptr<float>(2), gstat_ptr(c, 3), int(p.i[0]), p.f[0],
                                         ds_bits_double(p.i[3]));
    GL_CUDA_LAUNCHED();
}

}  // namespace

const CudaKernel cuda_dadapt_sgd_accum{sgd_accum_run, ds_accum_workspace};
const CudaKernel cuda_dadapt_sgd_step{sgd_step_run};
const CudaKernel cuda_dadapt_adagrad_accum{adagrad_accum_run, ds_accum_workspace};
const CudaKernel cuda_dadapt_adagrad_step{adagrad_step_run};
const CudaKernel cuda_dadapt_adan_accum{adan_accum_run, ds_accum_workspace};
const CudaKernel cuda_dadapt_adan_step{adan_step_run};
const CudaKernel cuda_dadapt_sum_d{sum_d_run};
const CudaKernel cuda_dadapt_adam_preprint_accum{preprint_accum_run, ds_accum_workspace};
const CudaKernel cuda_dadapt_adam_preprint_step{preprint_step_run};
const CudaKernel cuda_dadapt_adan_ip_accum{adan_ip_accum_run, ds_accum_workspace};

}  // namespace gl
