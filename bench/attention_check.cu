// Standalone correctness + speed check of the CUDA attention kernels (ggml-lite/cuda/attention_*.cuh)
// against a naive fp64 reference kernel (one thread per row, two-pass softmax).
// Build (device machine):
//   nvcc -O3 -std=c++20 -gencode=arch=compute_90a,code=sm_90a -I. bench/attention_check.cu -o attention_check
// Prints one line per correctness case (normalised max error of o, lse, dq, dk, dv; bitwise determinism
// of the backward) and one line per timed SD1.5 shape (TFLOP/s counted as 4*B*H*L*S*d forward,
// 2.5x that backward, 3.5x fwd+bwd, the TARGETS.md convention), then a sweep of tile variants.
// Arguments: "bench" skips the correctness cases, "nosweep" skips the variant sweep.
//
// Measured on one H200 (CUDA 13, bf16, B8 H8, non-causal), per pass; the mma.sync tiles first
// (attention_mma*.cuh), then the sm_90a wgmma kernels (attention_sm90.cuh) where they are dispatched:
//   shape              fwd ms (TF/s)  delta  dK/dV          dQ     fwd+bwd TF/s  (cuDNN / FA2, floor)
//   L=S=4096 d=40      0.788 (218)    0.014  1.566          1.061  175           (260 / 147, 130)
//     wgmma            0.723 (238)    0.014  1.291          0.759  215
//   L=S=1024 d=80      0.077 (279)    0.008  0.174          0.140  188           (173 / 148, 87)
//     wgmma (bwd)      -              0.009  0.145          0.110  219
//   L=S=256  d=160     0.018 (149)    0.009  0.063          0.024  82            (20 / 35, 18)
//   L=4096 S=77 d=40   0.052 (62)     0.014  0.068 (9 splits)  0.052  61        (cuDNN 25.6, 13)
//   CLIP B8 H12 L=S=77 d=64 causal: ~0.03 ms fwd+bwd (launch bound).
// fwd+bwd is 3.5 * 4BHLSd over the sum of the passes. The backward does 7 GEMM passes instead of
// FA2's 5 (separate deterministic dQ pass) and d=40 runs with the head dim padded to 48 in the
// score products. An estimate, not a measurement: per 128-key x 64-query block the dK/dV pass
// issues ~700 tensor-core clocks of products but ~1000 clocks of quarter-rate work (one ex2 and
// two fp32 -> bf16 packs per two scores, 16 a clock per SM); it measures ~2300, so what is left
// is the dependency chain inside a warpgroup (products, exponentials, packs, products) with two
// warpgroups per SM to hide it. Halving the ex2 count (the H2 variant) did not help.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "ggml-lite/cuda/attention_impl.cuh"

using namespace gl;
using namespace gl::attn;

#define CK(...)                                                                                 \
    do {                                                                                        \
        cudaError_t e_ = (__VA_ARGS__);                                                                \
        if (e_ != cudaSuccess) {                                                                \
            std::printf("CUDA error %s at %s:%d (%s)\n", cudaGetErrorString(e_), __FILE__, __LINE__, #__VA_ARGS__); \
            std::exit(1);                                                                       \
        }                                                                                       \
    } while (0)

constexpr int kRefMax = 256;  // largest d / dv the reference handles

// ---- naive fp64 reference (inputs as f32 copies of what the kernels read) ----
struct Ref {
    int B, L, S, H, d, dv, causal;
    double scale;
    const float *q, *k, *v, *go;
    float *o, *lse, *dq, *dk, *dv_, *delta;
};

__global__ void ref_fwd(Ref r) {
    const int64_t row = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;  // (b, i, h)
    if (row >= int64_t(r.B) * r.L * r.H) return;
    const int h = row % r.H, i = row / r.H % r.L, b = row / (int64_t(r.H) * r.L);
    const float* q = r.q + row * r.d;
    const int jend = r.causal ? min(r.S, i + 1) : r.S;
    auto score = [&](int j) {
        const float* k = r.k + ((int64_t(b) * r.S + j) * r.H + h) * r.d;
        double s = 0;
        for (int c = 0; c < r.d; c++) s += double(q[c]) * k[c];
        return s * r.scale;
    };
    double m = -INFINITY;
    for (int j = 0; j < jend; j++) m = fmax(m, score(j));
    double l = 0, acc[kRefMax];
    for (int c = 0; c < r.dv; c++) acc[c] = 0;
    for (int j = 0; j < jend; j++) {
        const double p = exp(score(j) - m);
        l += p;
        const float* v = r.v + ((int64_t(b) * r.S + j) * r.H + h) * r.dv;
        for (int c = 0; c < r.dv; c++) acc[c] += p * v[c];
    }
    double dl = 0;
    for (int c = 0; c < r.dv; c++) {
        r.o[row * r.dv + c] = float(acc[c] / l);
        dl += acc[c] / l * r.go[row * r.dv + c];
    }
    r.lse[(int64_t(b) * r.H + h) * r.L + i] = float(m + log(l));
    r.delta[(int64_t(b) * r.H + h) * r.L + i] = float(dl);
}

__device__ double ref_p_ds(const Ref& r, int b, int h, int i, int j, double* ds) {
    if (r.causal && j > i) return *ds = 0, 0.0;
    const float* q = r.q + ((int64_t(b) * r.L + i) * r.H + h) * r.d;
    const float* k = r.k + ((int64_t(b) * r.S + j) * r.H + h) * r.d;
    const float* g = r.go + ((int64_t(b) * r.L + i) * r.H + h) * r.dv;
    const float* v = r.v + ((int64_t(b) * r.S + j) * r.H + h) * r.dv;
    double s = 0, dp = 0;
    for (int c = 0; c < r.d; c++) s += double(q[c]) * k[c];
    for (int c = 0; c < r.dv; c++) dp += double(g[c]) * v[c];
    const int64_t hl = (int64_t(b) * r.H + h) * r.L + i;
    const double p = exp(s * r.scale - double(r.lse[hl]));
    *ds = p * (dp - double(r.delta[hl]));
    return p;
}

__global__ void ref_dq(Ref r) {
    const int64_t row = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
    if (row >= int64_t(r.B) * r.L * r.H) return;
    const int h = row % r.H, i = row / r.H % r.L, b = row / (int64_t(r.H) * r.L);
    double acc[kRefMax];
    for (int c = 0; c < r.d; c++) acc[c] = 0;
    for (int j = 0; j < r.S; j++) {
        double ds;
        ref_p_ds(r, b, h, i, j, &ds);
        const float* k = r.k + ((int64_t(b) * r.S + j) * r.H + h) * r.d;
        for (int c = 0; c < r.d; c++) acc[c] += ds * k[c];
    }
    for (int c = 0; c < r.d; c++) r.dq[row * r.d + c] = float(acc[c] * r.scale);
}

__global__ void ref_dkdv(Ref r) {
    const int64_t row = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;  // (b, j, h)
    if (row >= int64_t(r.B) * r.S * r.H) return;
    const int h = row % r.H, j = row / r.H % r.S, b = row / (int64_t(r.H) * r.S);
    double ak[kRefMax], av[kRefMax];
    for (int c = 0; c < r.d; c++) ak[c] = 0;
    for (int c = 0; c < r.dv; c++) av[c] = 0;
    for (int i = 0; i < r.L; i++) {
        double ds;
        const double p = ref_p_ds(r, b, h, i, j, &ds);
        const float* q = r.q + ((int64_t(b) * r.L + i) * r.H + h) * r.d;
        const float* g = r.go + ((int64_t(b) * r.L + i) * r.H + h) * r.dv;
        for (int c = 0; c < r.d; c++) ak[c] += ds * q[c];
        for (int c = 0; c < r.dv; c++) av[c] += p * g[c];
    }
    for (int c = 0; c < r.d; c++) r.dk[row * r.d + c] = float(ak[c] * r.scale);
    for (int c = 0; c < r.dv; c++) r.dv_[row * r.dv + c] = float(av[c]);
}

// ---- host helpers ----
static uint16_t to_half_bits(float x, DType t) {
    if (t == DType::bf16) {
        __nv_bfloat16 h = __float2bfloat16(x);
        return *reinterpret_cast<uint16_t*>(&h);
    }
    __half h = __float2half(x);
    return *reinterpret_cast<uint16_t*>(&h);
}
static float from_bits(const void* p, DType t, size_t i) {
    if (t == DType::f32) return static_cast<const float*>(p)[i];
    uint16_t u = static_cast<const uint16_t*>(p)[i];
    if (t == DType::bf16) return __bfloat162float(*reinterpret_cast<__nv_bfloat16*>(&u));
    return __half2float(*reinterpret_cast<__half*>(&u));
}

struct DevBuf {
    void* p = nullptr;
    size_t bytes = 0;
    explicit DevBuf(size_t b) : bytes(b) { CK(cudaMalloc(&p, b ? b : 1)); }
    ~DevBuf() { cudaFree(p); }
    template <class T = void> T* as() const { return static_cast<T*>(p); }
};

// Random values of dtype t: device storage plus the f32 copy of the rounded values.
static void fill(DevBuf& dev, DevBuf& f32, size_t n, DType t, std::mt19937& rng, float amp) {
    std::uniform_real_distribution<float> u(-amp, amp);
    std::vector<float> h(n);
    std::vector<uint16_t> hb(n);
    for (size_t i = 0; i < n; i++) {
        h[i] = u(rng);
        if (t != DType::f32) {
            hb[i] = to_half_bits(h[i], t);
            h[i] = from_bits(hb.data(), t, i);
        }
    }
    CK(cudaMemcpy(dev.p, t == DType::f32 ? (void*)h.data() : (void*)hb.data(), n * elt_size(t), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(f32.p, h.data(), n * 4, cudaMemcpyHostToDevice));
}

static std::vector<float> download(const DevBuf& b, DType t, size_t n) {
    std::vector<unsigned char> raw(n * elt_size(t));
    CK(cudaMemcpy(raw.data(), b.p, raw.size(), cudaMemcpyDeviceToHost));
    std::vector<float> out(n);
    for (size_t i = 0; i < n; i++) out[i] = from_bits(raw.data(), t, i);
    return out;
}

// max |x - ref| / max |ref| (NaN-aware: a NaN anywhere gives +inf).
static double nerr(const std::vector<float>& x, const std::vector<float>& ref) {
    double e = 0, m = 1e-12;
    for (size_t i = 0; i < x.size(); i++) {
        if (!std::isfinite(x[i])) return INFINITY;
        e = std::max(e, (double)std::fabs(x[i] - ref[i]));
        m = std::max(m, (double)std::fabs(ref[i]));
    }
    return e / m;
}

struct Case {
    DType t;
    int B, H, L, S, d, dv, causal;
    float scale;  // 0 -> 1/sqrt(d)
    DType go_t;
};

static const char* name(DType t) { return t == DType::f32 ? "f32" : t == DType::bf16 ? "bf16" : "f16"; }

static bool run_case(const Case& c) {
    std::mt19937 rng(1234 + c.d + c.L);
    const size_t nq = size_t(c.B) * c.L * c.H * c.d, nk = size_t(c.B) * c.S * c.H * c.d;
    const size_t nv = size_t(c.B) * c.S * c.H * c.dv, no = size_t(c.B) * c.L * c.H * c.dv, nl = size_t(c.B) * c.H * c.L;
    const size_t es = elt_size(c.t);
    DevBuf q(nq * es), k(nk * es), v(nv * es), go(no * elt_size(c.go_t)), o(no * es), lse(nl * 4);
    DevBuf dq(nq * es), dk(nk * es), dv(nv * es);
    DevBuf fq(nq * 4), fk(nk * 4), fv(nv * 4), fgo(no * 4);
    DevBuf ro(no * 4), rlse(nl * 4), rdq(nq * 4), rdk(nk * 4), rdv(nv * 4), rdelta(nl * 4);
    fill(q, fq, nq, c.t, rng, 1.7f);
    fill(k, fk, nk, c.t, rng, 1.7f);
    fill(v, fv, nv, c.t, rng, 1.0f);
    fill(go, fgo, no, c.go_t, rng, 1.0f);
    const float scale = c.scale != 0.f ? c.scale : float(1.0 / std::sqrt(double(c.d)));

    Ref r{c.B, c.L, c.S, c.H, c.d, c.dv, c.causal, scale, fq.as<float>(), fk.as<float>(), fv.as<float>(), fgo.as<float>(),
          ro.as<float>(), rlse.as<float>(), rdq.as<float>(), rdk.as<float>(), rdv.as<float>(), rdelta.as<float>()};
    ref_fwd<<<unsigned((nl + 127) / 128), 128>>>(r);
    ref_dq<<<unsigned((nl + 127) / 128), 128>>>(r);
    ref_dkdv<<<unsigned((size_t(c.B) * c.S * c.H + 127) / 128), 128>>>(r);
    CK(cudaGetLastError());

    Problem p;
    p.B = c.B, p.L = c.L, p.S = c.S, p.H = c.H, p.d = c.d, p.dv = c.dv, p.scale = scale, p.causal = c.causal, p.t = c.t;
    p.q = q.p, p.k = k.p, p.v = v.p, p.o = o.p, p.lse = lse.as<float>();
    p.o_in = o.p, p.o_t = c.t, p.lse_in = lse.as<float>(), p.go = go.p, p.go_t = c.go_t;
    p.grad_q = dq.p, p.grad_k = dk.p, p.grad_v = dv.p;
    DevBuf ws(backward_workspace(p));
    for (DevBuf* b : {&o, &lse, &dq, &dk, &dv, &ws}) CK(cudaMemset(b->p, 0xff, b->bytes));  // poison
    CK(forward(p, 0));
    CK(backward(p, ws.p, ws.bytes, 0));
    CK(cudaDeviceSynchronize());
    auto o1 = download(o, c.t, no), l1 = download(lse, DType::f32, nl);
    auto q1 = download(dq, c.t, nq), k1 = download(dk, c.t, nk), v1 = download(dv, c.t, nv);
    // Determinism: a second backward must match bitwise.
    CK(cudaMemset(dq.p, 0, dq.bytes));
    CK(cudaMemset(dk.p, 0, dk.bytes));
    CK(backward(p, ws.p, ws.bytes, 0));
    CK(cudaDeviceSynchronize());
    bool det = download(dq, c.t, nq) == q1 && download(dk, c.t, nk) == k1;

    double eo = nerr(o1, download(ro, DType::f32, no)), eq = nerr(q1, download(rdq, DType::f32, nq));
    double ek = nerr(k1, download(rdk, DType::f32, nk)), ev = nerr(v1, download(rdv, DType::f32, nv));
    double el = 0;
    auto rl = download(rlse, DType::f32, nl);
    for (size_t i = 0; i < nl; i++) el = std::max(el, std::isfinite(l1[i]) ? (double)std::fabs(l1[i] - rl[i]) : INFINITY);
    const double tol = c.t == DType::f32 ? 2e-5 : c.t == DType::f16 ? 1e-2 : 3e-2;
    const bool ok = det && eo < tol && eq < tol && ek < tol && ev < tol && el < tol;
    Problem shape = p;
    std::printf("%s %-4s B%d H%d L%d S%d d%d dv%d%s%s path=%s split=%d | o %.2e lse %.2e dq %.2e dk %.2e dv %.2e det %d\n",
                ok ? "PASS" : "FAIL", name(c.t), c.B, c.H, c.L, c.S, c.d, c.dv, c.causal ? " causal" : "",
                c.go_t != c.t ? " go:f32" : "", mma_ok(shape, true) ? (sm90::covers(mma_args(shape)) ? (sm90::covers_fwd(mma_args(shape)) ? "wgmma" : "mma fwd, wgmma bwd") : "mma") : "exact", bwd_layout(p).nsplit, eo, el, eq, ek, ev, det);
    return ok;
}

// ---- timing ----
template <class F>
static float time_ms(F&& f, int iters) {
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    f();
    CK(cudaEventRecord(a));
    for (int i = 0; i < iters; i++) f();
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, a, b));
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    return ms / iters;
}

// One SD1.5 shape in bf16: buffers, the default path's timing, and a sweep of tile variants (each
// checked against the default path's output).
struct Bench {
    int B, H, L, S, d;
    bool causal;
    size_t nq, nk, nl;
    DevBuf q, k, v, go, o, lse, dq, dk, dv, ws, fq, fk, fv, fgo;
    Problem p;
    std::vector<float> o0, q0, k0, v0;
    double flops;
    Bench(int B_, int H_, int L_, int S_, int d_, bool c)
        : B(B_), H(H_), L(L_), S(S_), d(d_), causal(c), nq(size_t(B) * L * H * d), nk(size_t(B) * S * H * d),
          nl(size_t(B) * H * L), q(nq * 2), k(nk * 2), v(nk * 2), go(nq * 2), o(nq * 2), lse(nl * 4), dq(nq * 2),
          dk(nk * 2), dv(nk * 2), ws(sizeof(float) * (nl + 2 * 16 * nk) + 1024), fq(nq * 4), fk(nk * 4), fv(nk * 4),
          fgo(nq * 4) {
        std::mt19937 rng(7);
        fill(q, fq, nq, DType::bf16, rng, 1.7f);
        fill(k, fk, nk, DType::bf16, rng, 1.7f);
        fill(v, fv, nk, DType::bf16, rng, 1.0f);
        fill(go, fgo, nq, DType::bf16, rng, 1.0f);
        p.B = B, p.L = L, p.S = S, p.H = H, p.d = d, p.dv = d, p.scale = float(1.0 / std::sqrt(double(d))), p.causal = causal;
        p.t = DType::bf16, p.o_t = DType::bf16, p.go_t = DType::bf16;
        p.q = q.p, p.k = k.p, p.v = v.p, p.o = o.p, p.lse = lse.as<float>(), p.o_in = o.p, p.lse_in = lse.as<float>(), p.go = go.p;
        p.grad_q = dq.p, p.grad_k = dk.p, p.grad_v = dv.p;
        flops = 4.0 * B * H * double(L) * S * d * (causal ? 0.5 : 1.0);
    }
    MmaArgs args() const {
        MmaArgs a = mma_args(p);
        a.o = o.p, a.lse_out = lse.as<float>();
        a.go = go.p, a.lse = lse.as<float>(), a.delta = ws.as<float>(), a.dk = dk.p, a.dv = dv.p;
        a.part = reinterpret_cast<float*>(ws.as<char>() + align256(sizeof(float) * nl));
        return a;
    }
    MmaArgs dq_args() const {
        MmaArgs a = args();
        a.o = dq.p;
        return a;
    }
    double tf(double mult, float ms) const { return mult * flops / (ms * 1e-3) / 1e12; }

    void run_default(double target) {
        const int iters = 10;
        float tfw = time_ms([&] { CK(forward(p, 0)); }, iters);
        float tb = time_ms([&] { CK(backward(p, ws.p, ws.bytes, 0)); }, iters);
        CK(cudaDeviceSynchronize());
        o0 = download(o, DType::bf16, nq), q0 = download(dq, DType::bf16, nq);
        k0 = download(dk, DType::bf16, nk), v0 = download(dv, DType::bf16, nk);
        const MmaArgs a = args();
        float tdelta = time_ms([&] {
            delta_vec<__nv_bfloat16><<<grid_for(int64_t(B) * L * H, 128), 128>>>(o.as<__nv_bfloat16>(), go.as<__nv_bfloat16>(),
                                                                                ws.as<float>(), B, L, H, d);
        }, iters);
        std::printf("B%d H%d L%d S%d d%d%s: fwd %.3f ms %.0f TF/s | bwd %.3f ms %.0f TF/s (delta %.3f ms, split %d) | "
                    "fwd+bwd %.0f TF/s (target %.0f, floor %.0f)\n",
                    B, H, L, S, d, causal ? " causal" : "", tfw, tf(1, tfw), tb, tf(2.5, tb), tdelta, bwd_layout(p).nsplit,
                    tf(3.5, tfw + tb), target, target / 2);
        (void)a;
    }
    // The wgmma kernels (attention_sm90.cuh) pass by pass, against the default path's outputs.
    template <int DN> void sm90_passes() {
        const MmaArgs a = args(), aq = dq_args();
        if (!sm90::covers(a)) return;
        const float tf_ = time_ms([&] { CK(sm90::launch_fwd<__nv_bfloat16, DN>(a, 0)); }, 10);
        const float tk = time_ms([&] { CK(sm90::launch_dkdv<__nv_bfloat16, DN>(a, 0)); }, 10);
        const float tq = time_ms([&] { CK(sm90::launch_dq<__nv_bfloat16, DN>(aq, 0)); }, 10);
        CK(cudaDeviceSynchronize());
        // Variants: register-A scores in dQ, one warpgroup per CTA (more CTAs per SM, not in lockstep).
        const float tq2 = time_ms([&] { CK(sm90::launch_dq<__nv_bfloat16, DN, true>(aq, 0)); }, 10);
        std::printf("   wgmma d%d: dq with register A %.3f ms (err %.1e)\n", DN, tq2, nerr(download(dq, DType::bf16, nq), q0));
        const float tq3 = time_ms([&] { CK(sm90::launch_dq<__nv_bfloat16, DN, false, 1>(aq, 0)); }, 10);
        std::printf("   wgmma d%d: dq one warpgroup per CTA %.3f ms (err %.1e)\n", DN, tq3, nerr(download(dq, DType::bf16, nq), q0));
        const float tq4 = time_ms([&] { CK(sm90::launch_dq<__nv_bfloat16, DN, true, 1>(aq, 0)); }, 10);
        std::printf("   wgmma d%d: dq one warpgroup, register A %.3f ms (err %.1e)\n", DN, tq4, nerr(download(dq, DType::bf16, nq), q0));
        const float tk2 = time_ms([&] { CK(sm90::launch_dkdv<__nv_bfloat16, DN, (DN <= 64), 1>(a, 0)); }, 10);
        std::printf("   wgmma d%d: dkdv one warpgroup per CTA %.3f ms (err dk %.1e dv %.1e)\n", DN, tk2,
                    nerr(download(dk, DType::bf16, nk), k0), nerr(download(dv, DType::bf16, nk), v0));
        const float tf2 = time_ms([&] { CK(sm90::launch_fwd<__nv_bfloat16, DN, (DN <= 64), 1>(a, 0)); }, 10);
        std::printf("   wgmma d%d: fwd one warpgroup per CTA %.3f ms (err %.1e)\n", DN, tf2, nerr(download(o, DType::bf16, nq), o0));
        const float tf3 = time_ms([&] { CK(sm90::launch_fwd<__nv_bfloat16, DN, (DN <= 64), 2, true>(a, 0)); }, 10);
        std::printf("   wgmma d%d: fwd f16x2 exp2 %.3f ms (err %.1e)\n", DN, tf3, nerr(download(o, DType::bf16, nq), o0));
        const float tk3 = time_ms([&] { CK(sm90::launch_dkdv<__nv_bfloat16, DN, (DN <= 64), 2, true>(a, 0)); }, 10);
        std::printf("   wgmma d%d: dkdv f16x2 exp2 %.3f ms (err dk %.1e dv %.1e)\n", DN, tk3,
                    nerr(download(dk, DType::bf16, nk), k0), nerr(download(dv, DType::bf16, nk), v0));
        const float tq5 = time_ms([&] { CK(sm90::launch_dq<__nv_bfloat16, DN, false, 2, true>(aq, 0)); }, 10);
        std::printf("   wgmma d%d: dq f16x2 exp2 %.3f ms (err %.1e)\n", DN, tq5, nerr(download(dq, DType::bf16, nq), q0));
        // Deeper prefetch: blocks j + 1 .. j + PF in flight while block j is worked on (PF + 2 stages).
        auto prefetch = [&](auto pf) {
            constexpr int PF = decltype(pf)::value;
            const float f = time_ms([&] { CK(sm90::launch_fwd<__nv_bfloat16, DN, (DN <= 48), 2, false, PF>(a, 0)); }, 10);
            const float eo = nerr(download(o, DType::bf16, nq), o0);
            const float k_ = time_ms([&] { CK(sm90::launch_dkdv<__nv_bfloat16, DN, (DN <= 64), 2, false, PF>(a, 0)); }, 10);
            const float ek = nerr(download(dk, DType::bf16, nk), k0), ev = nerr(download(dv, DType::bf16, nk), v0);
            const float q_ = time_ms([&] { CK(sm90::launch_dq<__nv_bfloat16, DN, false, 2, false, PF>(aq, 0)); }, 10);
            std::printf("   wgmma d%d: prefetch %d: fwd %.3f ms dkdv %.3f ms dq %.3f ms (err o %.1e dk %.1e dv %.1e dq %.1e)\n", DN, PF, f,
                        k_, q_, eo, ek, ev, nerr(download(dq, DType::bf16, nq), q0));
        };
        prefetch(std::integral_constant<int, 2>{});
        prefetch(std::integral_constant<int, 3>{});
        CK(sm90::launch_fwd<__nv_bfloat16, DN>(a, 0));
        CK(sm90::launch_dkdv<__nv_bfloat16, DN>(a, 0));
        CK(sm90::launch_dq<__nv_bfloat16, DN>(aq, 0));
        CK(cudaDeviceSynchronize());
        std::printf("   wgmma d%d: fwd %.3f ms %.0f TF/s | dkdv %.3f ms | dq %.3f ms | bwd passes %.0f TF/s (err o %.1e dq %.1e dk %.1e dv %.1e)\n",
                    DN, tf_, tf(1, tf_), tk, tq, tf(2.5, tk + tq), nerr(download(o, DType::bf16, nq), o0),
                    nerr(download(dq, DType::bf16, nq), q0), nerr(download(dk, DType::bf16, nk), k0), nerr(download(dv, DType::bf16, nk), v0));
    }
    // d = 64 on the wgmma kernels (not dispatched: see attention_sm90.cuh), against the mma.sync path.
    void d64_variants() {
        const MmaArgs a = args(), aq = dq_args();
        auto report = [&](const char* what, float ms) {
            CK(cudaDeviceSynchronize());
            std::printf("   wgmma d64 %s: %.3f ms (err o %.1e dq %.1e dk %.1e dv %.1e)\n", what, ms, nerr(download(o, DType::bf16, nq), o0),
                        nerr(download(dq, DType::bf16, nq), q0), nerr(download(dk, DType::bf16, nk), k0), nerr(download(dv, DType::bf16, nk), v0));
        };
        report("fwd register A", time_ms([&] { CK(sm90::launch_fwd<__nv_bfloat16, 64, true>(a, 0)); }, 10));
        report("fwd smem A", time_ms([&] { CK(sm90::launch_fwd<__nv_bfloat16, 64, false>(a, 0)); }, 10));
        report("dkdv register A", time_ms([&] { CK(sm90::launch_dkdv<__nv_bfloat16, 64, true>(a, 0)); }, 10));
        report("dkdv smem A", time_ms([&] { CK(sm90::launch_dkdv<__nv_bfloat16, 64, false>(a, 0)); }, 10));
        report("dq smem A", time_ms([&] { CK(sm90::launch_dq<__nv_bfloat16, 64, false>(aq, 0)); }, 10));
    }
    template <class C> void fwd_variant() {
        const MmaArgs a = args();
        float t = time_ms([&] { CK(launch_fwd<__nv_bfloat16, C>(a, 0)); }, 10);
        CK(cudaDeviceSynchronize());
        std::printf("   fwd  D%d NW%d MT%d BN%d: %.3f ms %.0f TF/s (err %.1e)\n", C::D, C::NW, C::MT, C::BN, t, tf(1, t),
                    nerr(download(o, DType::bf16, nq), o0));
    }
    template <class C> void dkdv_variant() {
        MmaArgs a = args();
        a.nsplit = dkdv_splits<C>(B, L, S, H, gl::sm_count());
        const int64_t n = int64_t(nk);
        float t = time_ms([&] {
            CK(launch_dkdv<__nv_bfloat16, C>(a, 0));
            if (a.nsplit > 1) reduce_parts<__nv_bfloat16><<<grid_for(n, 256), 256>>>(a.part, a.nsplit, n, dk.as<__nv_bfloat16>(), dv.as<__nv_bfloat16>());
        }, 10);
        CK(cudaDeviceSynchronize());
        std::printf("   dkdv D%d NW%d BM%d QC%d DO%d split%d: %.3f ms (err dk %.1e dv %.1e)\n", C::D, C::NW, C::BM, C::QC,
                    C::DO, a.nsplit, t, nerr(download(dk, DType::bf16, nk), k0), nerr(download(dv, DType::bf16, nk), v0));
    }
    template <class C> void dq_variant() {
        const MmaArgs a = dq_args();
        float t = time_ms([&] { CK(launch_dq<__nv_bfloat16, C>(a, 0)); }, 10);
        CK(cudaDeviceSynchronize());
        std::printf("   dq   D%d NW%d BN%d MT%d: %.3f ms (err %.1e)\n", C::D, C::NW, C::BN, C::MT, t,
                    nerr(download(dq, DType::bf16, nq), q0));
    }
};

// Variants: the defaults (Tiles<D>) first, then alternatives (all measured on H200, see the banner).
static void sweep48(Bench& b) {
    b.fwd_variant<FwdCfg<48, 4, 2, 128>>();
    b.fwd_variant<FwdCfg<48, 4, 2, 64>>();
    b.fwd_variant<FwdCfg<48, 4, 1, 64>>();
    b.fwd_variant<FwdCfg<48, 8, 2, 64>>();
    b.dkdv_variant<DkdvCfg<48, 8, 64, 64, 48>>();
    b.dkdv_variant<DkdvCfg<48, 4, 64, 64, 48>>();
    b.dkdv_variant<DkdvCfg<48, 4, 64, 32, 48>>();
    b.dq_variant<DqCfg<48, 4, 32>>();
    b.dq_variant<DqCfg<48, 4, 64>>();
    b.dq_variant<DqCfg<48, 4, 32, 2>>();
}
static void sweep80(Bench& b) {
    b.fwd_variant<FwdCfg<80, 4, 2, 64>>();
    b.fwd_variant<FwdCfg<80, 8, 1, 64>>();
    b.dkdv_variant<DkdvCfg<80, 4, 64, 64, 80>>();
    b.dkdv_variant<DkdvCfg<80, 4, 64, 32, 80>>();
    b.dq_variant<DqCfg<80, 4, 32>>();
    b.dq_variant<DqCfg<80, 8, 64>>();
}
static void sweep160(Bench& b) {
    b.fwd_variant<FwdCfg<160, 4, 1, 32>>();
    b.fwd_variant<FwdCfg<160, 4, 1, 64>>();
    b.dkdv_variant<DkdvCfg<160, 2, 32, 32, 80>>();
    b.dkdv_variant<DkdvCfg<160, 4, 32, 32, 80>>();
    b.dq_variant<DqCfg<160, 4, 32>>();
    b.dq_variant<DqCfg<160, 4, 64>>();
}

int main(int argc, char** argv) {
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    std::printf("device %s, %d SMs\n", prop.name, prop.multiProcessorCount);
    const bool only_bench = argc > 1 && std::strcmp(argv[1], "bench") == 0;  // "bench": skip correctness
    int fails = 0;
    if (!only_bench) {
        const DType b = DType::bf16, h = DType::f16, f = DType::f32;
        const Case cases[] = {
            {b, 2, 3, 300, 300, 40, 40, 0, 0.f, b},    {b, 1, 2, 1000, 77, 40, 40, 0, 0.f, b},
            {b, 2, 2, 257, 257, 80, 80, 0, 0.f, b},    {b, 2, 2, 256, 256, 160, 160, 0, 0.f, b},
            {h, 2, 2, 200, 333, 64, 64, 0, 0.f, h},    {b, 2, 4, 77, 77, 64, 64, 1, 0.f, b},
            {b, 1, 2, 300, 300, 128, 128, 1, 0.f, b},  {b, 1, 2, 130, 190, 8, 8, 0, 0.f, b},
            {b, 1, 1, 100, 150, 200, 200, 0, 0.f, b},  {b, 1, 2, 64, 64, 256, 256, 0, 0.f, b},
            {b, 1, 2, 100, 100, 192, 192, 1, 0.f, b},  {b, 1, 2, 100, 90, 96, 96, 0, 0.3f, b},
            {b, 1, 2, 2048, 2048, 40, 40, 0, 0.f, b},  {b, 2, 8, 1024, 1024, 80, 80, 0, 0.f, b},
            {h, 1, 2, 500, 500, 40, 40, 1, 0.f, h},    {b, 1, 2, 100, 100, 64, 64, 0, 0.f, f},
            {f, 2, 2, 100, 120, 40, 40, 0, 0.f, f},    {f, 1, 2, 50, 50, 24, 40, 1, 0.f, f},
            {f, 1, 2, 300, 77, 160, 160, 0, 0.f, f},   {b, 1, 2, 60, 70, 36, 36, 0, 0.f, b},
            {b, 1, 2, 100, 100, 64, 64, 0, -0.2f, b},  {h, 2, 2, 333, 200, 40, 40, 0, 0.f, h},
            {b, 3, 1, 64, 700, 80, 80, 0, 0.f, b},     {h, 2, 2, 300, 280, 40, 40, 0, 0.f, h},
            {h, 1, 2, 200, 333, 80, 80, 0, 0.f, h},    {b, 2, 2, 200, 333, 64, 64, 0, 0.f, b},
        };
        for (const Case& c : cases) fails += !run_case(c);
        std::printf("correctness: %d failure(s)\n", fails);
    }
    const bool sweep = !(argc > 1 && std::strcmp(argv[1], "nosweep") == 0);
    {
        Bench b(8, 8, 4096, 4096, 40, false);
        b.run_default(300);
        b.sm90_passes<40>();
        if (sweep) sweep48(b);
    }
    {
        Bench b(8, 8, 1024, 1024, 80, false);
        b.run_default(200);
        b.sm90_passes<80>();
        if (sweep) sweep80(b);
    }
    {
        Bench b(8, 8, 256, 256, 160, false);
        b.run_default(60);
        if (sweep) sweep160(b);
    }
    {
        Bench b(8, 8, 4096, 77, 40, false);
        b.run_default(30);
        b.sm90_passes<40>();
        if (sweep) sweep48(b);
    }
    {
        Bench b(2, 4, 333, 333, 64, false);
        b.run_default(0);
        b.d64_variants();
    }
    {
        Bench b(8, 12, 77, 77, 64, true);
        b.run_default(0);
    }
    return fails ? 1 : 0;
}
