// Correctness and speed of gl::gemm (ggml-lite/cuda/gemm.cuh) against cuBLAS.
// Build (from the repo root):
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I. bench/gemm_check.cu -lcublas -o gemm_check
// Run: ./gemm_check [--no-perf] [--no-sweep] [--txt2img: only txt2img's batch-2 shapes, timed]
//      [--probe: only checks that it starts]
// Correctness: random inputs in [-1, 1]; output poisoned with NaN first; relative L2 error and
// max |diff| / max |ref| against cuBLAS (bf16/f16 tolerance 1e-2, f32 1e-5). Every tile config is
// run on a ragged shape in all four layouts; the unaligned (scalar-load) path, batching (shared
// and per-batch B), split-K, bias/residual epilogues and K = 0 are covered.
// Speed: median over 11 samples of 10 back-to-back launches (cudaEvents), TFLOP/s = 2MNK*batch/t.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "ggml-lite/cuda/gemm.cuh"

using namespace gl;
using namespace gl::gemm;

static int g_fail = 0;

__global__ void fill_kernel(void* p, DType t, int64_t n, uint32_t seed) {
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
        uint32_t h = uint32_t(i) * 0x9E3779B1u ^ seed * 0x85EBCA77u ^ uint32_t(i >> 32) * 0xC2B2AE3Du;
        h ^= h >> 15;
        h *= 0x2C1B3C6Du;
        h ^= h >> 12;
        h *= 0x297A2D39u;
        h ^= h >> 15;
        const float v = float(h >> 8) * (2.0f / 16777216.0f) - 1.0f;
        if (t == DType::f32) static_cast<float*>(p)[i] = v;
        else if (t == DType::bf16) static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(v);
        else static_cast<__half*>(p)[i] = __float2half_rn(v);
    }
}

static size_t esize(DType t) { return t == DType::f32 ? 4 : 2; }
static const char* dname(DType t) { return t == DType::f32 ? "f32" : t == DType::bf16 ? "bf16" : "f16"; }

struct Buf {
    void* p = nullptr;
    size_t bytes = 0;
    explicit Buf(size_t b) : bytes(b) { GL_CUDA_CHECK(cudaMalloc(&p, b ? b : 16)); }
    ~Buf() { cudaFree(p); }
};

static void fill(void* p, DType t, int64_t n, uint32_t seed) {
    fill_kernel<<<1024, 256>>>(p, t, n, seed);
    GL_CUDA_LAUNCHED();
}

static std::vector<double> to_host(const void* p, DType t, int64_t n) {
    std::vector<double> out(static_cast<size_t>(n));
    std::vector<unsigned char> raw(static_cast<size_t>(n) * esize(t));
    GL_CUDA_CHECK(cudaMemcpy(raw.data(), p, raw.size(), cudaMemcpyDeviceToHost));
    for (int64_t i = 0; i < n; i++) {
        if (t == DType::f32) {
            float f;
            std::memcpy(&f, &raw[size_t(i) * 4], 4);
            out[size_t(i)] = f;
        } else {
            uint16_t h;
            std::memcpy(&h, &raw[size_t(i) * 2], 2);
            if (t == DType::bf16) {
                out[size_t(i)] = std::bit_cast<float>(uint32_t(h) << 16);
            } else {
                __half_raw hr;
                hr.x = h;
                out[size_t(i)] = double(__half2float(__half(hr)));
            }
        }
    }
    return out;
}

// One problem: operands allocated and filled, C and a cuBLAS reference of C.
struct Problem {
    GemmArgs a;
    Buf *A, *B, *C, *R, *bias, *res;
    Problem(DType t, int64_t M, int64_t N, int64_t K, bool ta, bool tb, int64_t batch = 1, bool shared_b = false,
            bool with_bias = false, bool with_res = false, int64_t pad = 0) {
        a.dtype = t;
        a.M = M, a.N = N, a.K = K, a.batch = batch, a.ta = ta, a.tb = tb;
        a.lda = (ta ? M : K) + pad;
        a.ldb = (tb ? K : N) + pad;
        a.ldc = N;
        a.sA = (ta ? K : M) * a.lda;
        a.sB = shared_b ? 0 : (tb ? N : K) * a.ldb;
        a.sC = M * N;
        const int64_t na = a.sA * batch, nb = shared_b ? (tb ? N : K) * a.ldb : a.sB * batch, nc = a.sC * batch;
        A = new Buf(size_t(na) * esize(t));
        B = new Buf(size_t(nb) * esize(t));
        C = new Buf(size_t(nc) * esize(t));
        R = new Buf(size_t(nc) * esize(t));
        bias = new Buf(size_t(N) * esize(t));
        res = new Buf(size_t(nc) * esize(t));
        fill(A->p, t, na, 1);
        fill(B->p, t, nb, 2);
        fill(bias->p, t, N, 3);
        fill(res->p, t, nc, 4);
        a.A = A->p;
        a.B = B->p;
        a.C = C->p;
        if (with_bias) a.epi.bias = bias->p;
        if (with_res) {
            a.epi.residual = res->p;
            a.epi.ldr = N;
            a.epi.sr = a.sC;
        }
        GemmArgs r = a;
        r.C = R->p;
        launch_cublas(r, 0);
        GL_CUDA_CHECK(cudaDeviceSynchronize());
    }
    ~Problem() {
        delete A; delete B; delete C; delete R; delete bias; delete res;
    }
    double flops() const { return 2.0 * double(a.M) * double(a.N) * double(a.K) * double(a.batch); }
    void poison() { GL_CUDA_CHECK(cudaMemset(C->p, 0xFF, C->bytes)); }
    // Relative L2 error and max|diff|/max|ref| of C against the reference.
    bool check(const char* what) {
        GL_CUDA_CHECK(cudaDeviceSynchronize());
        const int64_t n = a.sC * a.batch;
        std::vector<double> c = to_host(C->p, a.dtype, n), r = to_host(R->p, a.dtype, n);
        double se = 0, sr = 0, md = 0, mr = 0;
        bool nan = false;
        for (size_t i = 0; i < c.size(); i++) {
            if (!std::isfinite(c[i])) nan = true;
            const double d = c[i] - r[i];
            se += d * d;
            sr += r[i] * r[i];
            md = std::max(md, std::fabs(d));
            mr = std::max(mr, std::fabs(r[i]));
        }
        const double rel = sr > 0 ? std::sqrt(se / sr) : std::sqrt(se), rmax = mr > 0 ? md / mr : md;
        const double tol = a.dtype == DType::f32 ? 1e-5 : 1e-2;
        const bool ok = !nan && rel < tol && rmax < 4 * tol;
        if (!ok) g_fail++;
        std::printf("%-4s %-44s %-5s M=%-5lld N=%-5lld K=%-5lld b=%-2lld t=%d%d rel=%.2e max=%.2e%s\n", ok ? "ok" : "FAIL",
                    what, dname(a.dtype), (long long)a.M, (long long)a.N, (long long)a.K, (long long)a.batch, a.ta, a.tb,
                    rel, rmax, nan ? " NaN" : "");
        return ok;
    }
};

static double time_ms(const std::function<void()>& f) {
    cudaEvent_t e0, e1;
    GL_CUDA_CHECK(cudaEventCreate(&e0));
    GL_CUDA_CHECK(cudaEventCreate(&e1));
    for (int i = 0; i < 3; i++) f();
    std::vector<float> v;
    for (int s = 0; s < 11; s++) {
        GL_CUDA_CHECK(cudaEventRecord(e0));
        for (int i = 0; i < 10; i++) f();
        GL_CUDA_CHECK(cudaEventRecord(e1));
        GL_CUDA_CHECK(cudaEventSynchronize(e1));
        float ms = 0;
        GL_CUDA_CHECK(cudaEventElapsedTime(&ms, e0, e1));
        v.push_back(ms / 10);
    }
    std::sort(v.begin(), v.end());
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return v[v.size() / 2];
}

static const char* kname(GemmKernel k) {
    switch (k) {
        case GemmKernel::mma_wide: return "mma256x160";
        case GemmKernel::mma_k64: return "mma128x128k64";
        case GemmKernel::mma_w4: return "mma128x128w4";
        case GemmKernel::mma_small: return "mma64x64";
        case GemmKernel::wg128: return "wg128";
        case GemmKernel::wg160: return "wg160";
        case GemmKernel::wg64: return "wg64";
        case GemmKernel::tma128: return "tma128";
        case GemmKernel::tma160: return "tma160";
        case GemmKernel::tma64: return "tma64";
        case GemmKernel::tma256: return "tma256";
        case GemmKernel::skinny: return "skinny";
        case GemmKernel::rows: return "rows";
        case GemmKernel::ffma_f32: return "ffma";
        default: return "cublas";
    }
}

// Tile shapes tried only here (the dispatcher's own are CfgWide/K64/W4/Small and wg64/128/160).
using XBig = TileCfg<128, 256, 32, 2, 4, 3, 1>;
using XTall = TileCfg<256, 128, 32, 4, 2, 3, 1>;
using XSq = TileCfg<128, 128, 32, 2, 4, 4, 2>;
using XNarrow = TileCfg<256, 64, 32, 4, 2, 4, 2>;
using X128x256k64 = TileCfg<128, 256, 64, 2, 4, 3, 1>;
using X128x64w4 = TileCfg<128, 64, 32, 2, 2, 4, 3>;

struct CfgEntry {
    const char* name;
    std::function<void(const GemmArgs&)> run;
    bool k_major_b_only = false;  // wgmma tiles whose N is not a multiple of 64
};
template <class Cfg>
CfgEntry entry(const char* name) {
    return {name, [](const GemmArgs& a) { launch_mma_layout<__nv_bfloat16, Cfg, true>(a, 1, nullptr, 0); }};
}
template <int BN, int S>
CfgEntry wentry(const char* name) {
    return {name, [](const GemmArgs& a) { launch_wgmma_layout<__nv_bfloat16, BN, S>(a, 1, nullptr, 0); }, BN % 64 != 0};
}
template <int BN, int S>
CfgEntry tentry(const char* name) {
    return {name, [](const GemmArgs& a) { launch_tma_layout<__nv_bfloat16, BN, S>(a, 0); }, BN % 64 != 0};
}
static std::vector<CfgEntry> all_cfgs(bool with_wgmma) {
    std::vector<CfgEntry> v = {
        entry<CfgWide>("mma256x160"),    entry<CfgK64>("mma128x128k64"), entry<CfgW4>("mma128x128w4"),
        entry<CfgSmall>("mma64x64"),     entry<XBig>("x128x256"),        entry<XTall>("x256x128"),
        entry<XSq>("x128x128"),          entry<XNarrow>("x256x64"),      entry<X128x256k64>("x128x256k64"),
        entry<X128x64w4>("x128x64w4")};
    if (with_wgmma) {
        v.push_back(wentry<128, kWg128Stages>("wg128"));
        v.push_back(wentry<160, kWg160Stages>("wg160"));
        v.push_back(wentry<64, kWg64Stages>("wg64"));
        v.push_back(wentry<128, 4>("xwg128s4"));
        v.push_back(wentry<160, 4>("xwg160s4"));
        v.push_back(wentry<256, 3>("xwg256s3"));
        v.push_back(wentry<256, 4>("xwg256s4"));
        if (tma_usable()) {
            v.push_back(tentry<128, kTma128Stages>("tma128"));
            v.push_back(tentry<160, kTma160Stages>("tma160"));
            v.push_back(tentry<64, kTma64Stages>("tma64"));
            v.push_back(tentry<256, kTma256Stages>("tma256"));
        }
    }
    return v;
}

static void correctness() {
    std::printf("== correctness (reference: cuBLAS) ==\n");
    Buf ws(size_t(256) << 20);
    auto run_auto = [&](Problem& p, const char* what) {
        p.poison();
        gl::gemm::gemm(p.a, ws.p, ws.bytes, 0);
        p.check(what);
    };
    for (DType t : {DType::bf16, DType::f16, DType::f32})
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                Problem p(t, 1000, 520, 328, ta, tb, 1, false, true);
                run_auto(p, "auto +bias");
            }
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            Problem p(DType::bf16, 200, 136, 72, ta, tb, 3, false, true, true);
            run_auto(p, "batched +bias +residual");
            Problem q(DType::bf16, 200, 136, 72, ta, tb, 3, true);
            run_auto(q, "batched, shared B");
            // the 256-wide TMA tile forced: ragged M and N, bias and residual, then the residual in place
            if (tma_usable()) {
                Problem t1(DType::bf16, 1000, 600, 328, ta, tb, 2, false, true, true);
                t1.poison();
                launch_tma_layout<__nv_bfloat16, 256, kTma256Stages>(t1.a, 0);
                t1.check("tma256 batched +bias +residual");
                Problem t2(DType::bf16, 1000, 520, 328, ta, tb, 1, false, true, true);
                GL_CUDA_CHECK(cudaMemcpy(t2.C->p, t2.res->p, size_t(t2.a.sC) * esize(t2.a.dtype), cudaMemcpyDeviceToDevice));
                t2.a.epi.residual = t2.C->p;
                launch_tma_layout<__nv_bfloat16, 256, kTma256Stages>(t2.a, 0);
                t2.check("tma256 in place +bias");
                Problem t3(DType::f16, 704, 1280, 1000, ta, tb);  // M a multiple of 8: the 16-byte path
                t3.poison();
                launch_tma_layout<__half, 256, kTma256Stages>(t3.a, 0);
                t3.check("tma256 f16");
            }
            // the residual is C itself (gradient accumulation in place), batched, ragged tiles
            Problem ip(DType::bf16, 1000, 520, 328, ta, tb, 2, false, true, true);
            GL_CUDA_CHECK(cudaMemcpy(ip.C->p, ip.res->p, size_t(ip.a.sC * 2) * esize(ip.a.dtype), cudaMemcpyDeviceToDevice));
            ip.a.epi.residual = ip.C->p;
            gl::gemm::gemm(ip.a, ws.p, ws.bytes, 0);
            ip.check("in place: the residual is C, batched +bias");
            Problem u(DType::bf16, 333, 257, 131, ta, tb, 2, false, true);
            run_auto(u, "unaligned (scalar loads) +bias");
            Problem v(DType::bf16, 96, 64, 40, ta, tb, 1, false, false, false, 3);
            run_auto(v, "padded leading dims (scalar loads)");
            Problem w(DType::f32, 333, 257, 131, ta, tb, 2, true, true, true);
            run_auto(w, "f32 unaligned shared B +bias +res");
        }
    {
        Problem p(DType::bf16, 320, 320, 32768, true, false);
        run_auto(p, "split-K (wgrad shape)");
        Problem q(DType::bf16, 16, 320, 32768, true, false, 1, false, true);
        run_auto(q, "split-K (LoRA grad shape) +bias");
        Problem r(DType::f16, 77, 320, 9000, false, true, 2, false, true, true);
        run_auto(r, "split-K batched +bias +res");
        // the tall-skinny kernel: dA / dB shapes, ragged K, a narrow side of 8, residual, f16
        Problem s1(DType::bf16, 16, 320, 32768, true, false, 1, false, false, true);
        run_auto(s1, "skinny dA 16x320 +residual");
        Problem s2(DType::bf16, 320, 16, 32768, true, false, 1, false, true, true);
        run_auto(s2, "skinny dB 320x16 +bias +residual");
        Problem s3(DType::bf16, 1280, 8, 5000, true, false);
        run_auto(s3, "skinny 1280x8, ragged K");
        Problem s4(DType::f16, 16, 2568, 4100, true, false);
        run_auto(s4, "skinny f16 16x2568, ragged K and W");
        Problem z(DType::bf16, 64, 72, 0, true, false, 1, false, true);
        run_auto(z, "K = 0 (bias only)");
        Problem y(DType::bf16, 616, 320, 768, false, true, 1, false, true);
        run_auto(y, "77-token K/V projection +bias");
        // the few-row kernel: every row-count instance, K past and short of a lane sweep, batches
        for (int64_t M : {1, 2, 3, 5, 8, 11, 16}) {
            Problem r1(DType::bf16, M, 1288, 1000, false, true, 1, false, true);
            run_auto(r1, ("few rows M=" + std::to_string(M) + " +bias").c_str());
            Problem r2(DType::f16, M, 320, 5128, false, true, 2, M % 2 == 1, true, true);
            run_auto(r2, ("few rows f16 M=" + std::to_string(M) + " batched +bias +res").c_str());
        }
        Problem r3(DType::bf16, 4, 40, 24, false, true, 3, false, false, true);
        run_auto(r3, "few rows, K = 24, 40 columns +res");
        Problem r4(DType::bf16, 2, 64, 0, false, true, 1, false, true);
        run_auto(r4, "few rows, K = 0 (bias only)");
    }
    // short K (a LoRA rank: one padded k-tile): both B layouts, ragged M, bias and residual, f16 too
    for (DType t : {DType::bf16, DType::f16})
        for (int tb = 0; tb < 2; tb++)
            for (int64_t K : {8, 16, 32}) {
                Problem p(t, 1003, 328, K, false, tb, 1, false, true, true);
                run_auto(p, (std::string("short K=") + std::to_string(K) + " +bias +residual").c_str());
                Problem q(t, 517, 2560, K, false, tb, 3, tb == 1, false, true);
                run_auto(q, (std::string("short K=") + std::to_string(K) + " batched +residual").c_str());
            }
    for (const CfgEntry& c : all_cfgs(wgmma_usable()))
        for (int ta = 0; ta < 2; ta++)
            for (int tb = 0; tb < 2; tb++) {
                if (c.k_major_b_only && !tb) continue;
                Problem p(DType::bf16, 1000, 520, 328, ta, tb, 2, false, true);
                p.poison();
                c.run(p.a);
                p.check((std::string("cfg ") + c.name + " +bias").c_str());
            }
}

static void perf(bool sweep, bool txt2img) {
    std::printf("== speed, bf16, TFLOP/s (median of 11 x 10 launches) ==\n");
    struct Shape { int64_t M, N, K; bool ta, tb; const char* what; bool res = false; bool b2 = false; };
    const Shape shapes[] = {
        // txt2img's UNet call: CFG's batch of 2 at 512² (64x64 latents)
        {8192, 320, 320, false, true, "b2 64x64 linear 320->320", false, true},
        {8192, 2560, 320, false, true, "b2 64x64 GEGLU proj", false, true},
        {2048, 640, 640, false, true, "b2 32x32 linear 640->640", false, true},
        {512, 1280, 1280, false, true, "b2 16x16 linear 1280->1280", false, true},
        {512, 10240, 1280, false, true, "b2 16x16 GEGLU proj", false, true},
        {512, 1280, 5120, false, true, "b2 16x16 ff out 5120->1280", false, true},
        {154, 1280, 768, false, true, "b2 K/V of the context", false, true},
        {2, 1280, 1280, false, true, "b2 time embedding proj", false, true},
        {2, 320, 1280, false, true, "b2 res-block time proj 320", false, true},
        {8, 1280, 1280, false, true, "b8 time embedding proj", false, true},
        {32768, 320, 320, false, true, "linear 320->320 (fwd)"},
        {32768, 2560, 320, false, true, "linear 320->2560 GEGLU proj (fwd)"},
        {32768, 320, 1280, false, true, "linear 1280->320 (fwd)"},
        {4096, 1280, 1280, false, true, "linear 1280->1280 M=4096 (fwd)"},
        {616, 320, 768, false, true, "K/V proj 77 tok x8 (fwd)"},
        {32768, 320, 320, false, false, "dX of 320->320"},
        {32768, 320, 2560, false, false, "dX of 320->2560"},
        {32768, 1280, 320, false, false, "dX of 1280->320"},
        {4096, 1280, 1280, false, false, "dX of 1280->1280"},
        {320, 320, 32768, true, false, "dW 320x320 over 32768 rows"},
        {4096, 4096, 4096, false, true, "square 4096"},
        // a rank-16 LoRA on a 320-wide projection of 32768 rows: forward, then the backward products
        {32768, 16, 320, false, true, "LoRA down h = x A^T"},
        {32768, 320, 16, false, true, "LoRA up u = h B^T"},
        {32768, 16, 320, false, false, "LoRA dh = du B"},
        {32768, 320, 16, false, false, "LoRA dx = dh A"},
        {32768, 320, 16, false, true, "LoRA up u = h B^T +residual", true},
        {32768, 2560, 16, false, true, "LoRA up 320->2560 +residual", true},
        {32768, 320, 320, false, false, "dX of 320->320 +residual", true},
        {16, 320, 32768, true, false, "LoRA dA = dh^T x"},
        {320, 16, 32768, true, false, "LoRA dB = du^T h"},
        {16, 640, 8192, true, false, "LoRA dA 640-wide over 8192 rows"},
        {1280, 16, 2048, true, false, "LoRA dB 1280-wide over 2048 rows"},
    };
    Buf ws(size_t(256) << 20);
    for (const Shape& s : shapes) {
        if (txt2img && !s.b2) continue;
        Problem p(DType::bf16, s.M, s.N, s.K, s.ta, s.tb, 1, false, false, s.res);
        const double fl = p.flops();
        GemmArgs ref = p.a;
        ref.C = p.R->p;
        const double t_cublas = time_ms([&] { launch_cublas(ref, 0); });
        const double t_auto = time_ms([&] { gl::gemm::gemm(p.a, ws.p, ws.bytes, 0); });
        p.poison();
        gl::gemm::gemm(p.a, ws.p, ws.bytes, 0);
        const bool ok = p.check("  (auto result)");
        GemmPlan pl = plan_gemm(p.a, vec_ok(p.a));
        std::printf("PERF %-34s %5lldx%-5lldx%-5lld t=%d%d cublas %6.1f  ours %6.1f (%.2fx) [%s split %d]%s\n", s.what,
                    (long long)s.M, (long long)s.N, (long long)s.K, s.ta, s.tb, fl / t_cublas * 1e-9, fl / t_auto * 1e-9,
                    t_cublas / t_auto, kname(pl.kernel), pl.splits, ok ? "" : " WRONG");
        if (!sweep) continue;
        std::string line = "   sweep:";
        for (const CfgEntry& c : all_cfgs(wgmma_usable())) {
            if (c.k_major_b_only && !s.tb) continue;
            const double t = time_ms([&] { c.run(p.a); });
            char buf[64];
            std::snprintf(buf, sizeof buf, " %s %.0f", c.name, fl / t * 1e-9);
            line += buf;
        }
        if (pl.kernel == GemmKernel::skinny)  // the tall-skinny kernel at other split counts
            for (int sp : {16, 24, 32, 43, 64, 86, 128, 172}) {
                const double t = time_ms([&] { launch_skinny<__nv_bfloat16>(p.a, sp, static_cast<float*>(ws.p), 0); });
                char buf[64];
                std::snprintf(buf, sizeof buf, " skinny/%d %.1f", sp, fl / t * 1e-9);
                line += buf;
            }
        std::printf("%s\n", line.c_str());
    }
}


// The second pair (GemmArgs::A2, B2, K2) through the TMA kernels: C = A B + A2 B2 (+bias +residual)
// against cuBLAS's two products (the second taking the first as its residual: rounded twice, within
// the bf16 tolerance), and its speed against our two launches (base, then up with the base as residual).
static void pair_check(bool perf) {
    if (!tma_usable()) return;
    std::printf("== second operand pair (LoRA up joined to its base) ==\n");
    struct Shape { int64_t M, N, K, K2; bool tb, bias, res; const char* what; };
    const Shape shapes[] = {
        {1003, 328, 136, 16, true, true, true, "ragged, K-major B"},
        {1003, 320, 136, 8, false, false, true, "ragged, N-major B"},
        {517, 2560, 320, 32, true, true, false, "ragged GEGLU-like"},
        {32768, 320, 320, 16, true, true, true, "LoRA fwd 320->320 +bias +res"},
        {32768, 2560, 320, 16, true, true, false, "LoRA fwd 320->2560 +bias"},
        {32768, 320, 320, 16, false, false, true, "LoRA dX 320->320 +res"},
        {8192, 640, 640, 16, true, true, true, "LoRA fwd 640->640 +bias +res"},
        {2048, 1280, 1280, 16, false, false, true, "LoRA dX 1280->1280 +res"},
        {1003, 328, 136, 4, true, true, true, "K2 = 4 (two products)"},
    };
    Buf ws(size_t(64) << 20);
    for (const Shape& s : shapes) {
        Problem p(DType::bf16, s.M, s.N, s.K, false, s.tb, 1, false, s.bias, s.res);
        const int64_t n2a = s.M * s.K2, n2b = s.N * s.K2;
        Buf A2(size_t(n2a) * 2), B2(size_t(n2b) * 2), R1(p.C->bytes);
        fill(A2.p, DType::bf16, n2a, 11);
        fill(B2.p, DType::bf16, n2b, 12);
        // reference: R1 = A B (+bias +res) by cuBLAS, then R = A2 B2 + R1
        GemmArgs r1 = p.a;
        r1.C = R1.p;
        launch_cublas(r1, 0);
        GemmArgs r2{};
        r2.dtype = DType::bf16, r2.M = s.M, r2.N = s.N, r2.K = s.K2, r2.batch = 1, r2.ta = false, r2.tb = s.tb;
        r2.A = A2.p, r2.lda = s.K2, r2.B = B2.p, r2.ldb = s.tb ? s.K2 : s.N, r2.C = p.R->p, r2.ldc = s.N;
        r2.epi.residual = R1.p, r2.epi.ldr = s.N;
        launch_cublas(r2, 0);
        GemmArgs a = p.a;
        a.A2 = A2.p, a.lda2 = s.K2, a.B2 = B2.p, a.ldb2 = s.tb ? s.K2 : s.N, a.K2 = s.K2;
        p.poison();
        gl::gemm::gemm(a, ws.p, ws.bytes, 0);
        p.check((std::string("pair auto (") + (pair_in_one(a) ? "one kernel) " : "two products) ") + s.what).c_str());
        if (!vec_ok(a)) continue;
        for (const CfgEntry& c : all_cfgs(true)) {
            if (std::strncmp(c.name, "tma", 3) != 0 || (c.k_major_b_only && !s.tb)) continue;
            p.poison();
            c.run(a);
            p.check((std::string("pair ") + c.name + " " + s.what).c_str());
            if (!perf || s.M < 2048) continue;
            // ours as two launches: base into R1 (its bias / residual), then the up product with R1 as residual
            GemmArgs up = r2;
            up.C = p.C->p;
            const double t1 = time_ms([&] { c.run(a); });
            const double t2 = time_ms([&] { c.run(r1); c.run(up); });
            std::printf("PAIR %-30s %-6s %5lldx%-5lldx%lld+%lld one kernel %.1f us, two launches %.1f us (%.2fx)\n", s.what, c.name,
                        (long long)s.M, (long long)s.N, (long long)s.K, (long long)s.K2, t1 * 1e3, t2 * 1e3, t2 / t1);
        }
    }
}

int main(int argc, char** argv) {
    bool do_perf = true, sweep = true, txt2img = false;
    for (int i = 1; i < argc; i++) {
        if (!std::strcmp(argv[i], "--probe")) return cudaFree(nullptr) == cudaSuccess ? 0 : 3;
        if (!std::strcmp(argv[i], "--no-perf")) do_perf = false;
        if (!std::strcmp(argv[i], "--no-sweep")) sweep = false;
        if (!std::strcmp(argv[i], "--txt2img")) txt2img = true;
    }
    try {
        cudaDeviceProp prop;
        GL_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
        std::printf("device: %s, %d SMs, cc %d.%d, wgmma path %s\n", prop.name, prop.multiProcessorCount, prop.major,
                    prop.minor, wgmma_usable() ? "usable" : "NOT usable");
        if (!txt2img) {
            correctness();
            pair_check(do_perf);
        }
        if (do_perf) perf(sweep, txt2img);
    } catch (const std::exception& e) {
        std::printf("ERROR: %s\n", e.what());
        return 2;
    }
    std::printf("%s: %d failure(s)\n", g_fail ? "FAILED" : "PASSED", g_fail);
    return g_fail ? 1 : 0;
}
