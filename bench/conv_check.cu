// Standalone correctness and speed check of the conv family CUDA kernels (cuda/conv_*.cuh)
// against a direct-convolution reference kernel (double accumulation). No core library needed:
//   nvcc -O3 -std=c++20 -gencode=arch=compute_90a,code=sm_90a -I. bench/conv_check.cu -o conv_check
//   ./conv_check [--sweep] [--batch N]   (--sweep also times every tile configuration and split
//   count; --batch sets the SD1.5 shapes' batch, default 8: txt2img's CFG batch is 2)
// Measured on one H200 (bf16, batch 8, 3x3 pad 1, TFLOP/s; configuration the planner picks,
// from the --sweep table): fwd / input grad / weight grad. Configurations 8-11 are the sm_90a
// wgmma tiles (conv_sm90.cuh); the weight gradient stays on mma.sync.
//   64x64 320->320     473 / 361 / 223      (mma.sync alone: 311 / 292)   cuDNN fwd 434
//   32x32 640->640     524 / 344 / 282      (282 / 259)                   cuDNN fwd 454
//   16x16 1280->1280   361 / 330 / 272      (351 / 293)                   cuDNN fwd 468
//   8x8 1280->1280     264 / 222 / 166      (270 / 248)                   cuDNN fwd 257
// Stride-2 downsamples 263-342 fwd, 203-239 input grad; 1x1 convs 141-253 (small K).
// f32 exact path 11-18 TFLOP/s; upsample2x and its gradient ~3.3-3.5 TB/s.
#include <cstdio>
#include <cstdlib>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "ggml-lite/cuda/conv_launch.cuh"

using namespace gl;
using namespace gl::convk;

#define CK(x)                                                                                      \
    do {                                                                                           \
        cudaError_t e_ = (x);                                                                      \
        if (e_ != cudaSuccess) { printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__); exit(1); } \
    } while (0)

// Whether tile configuration c exists for mode m on this GPU (the wgmma ones: sm_90a only).
static bool cfg_exists(int m, int c) {
    MmaTable t = mma_table_for<__nv_bfloat16>(m);
    return c < t.n && t.e[c].launch;
}

static const char* mode_name(int m) { return m == kFwd ? "fwd " : m == kDgrad ? "dgrad" : "wgrad"; }

template <class T> __global__ void fill_kernel(T* p, int64_t n, uint32_t seed) {
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
        uint32_t h = uint32_t(i) * 2654435761u ^ seed * 0x9e3779b9u ^ uint32_t(i >> 32);
        h ^= h >> 16; h *= 0x7feb352du; h ^= h >> 15; h *= 0x846ca68bu; h ^= h >> 16;
        p[i] = from_f32<T>(float(h) * (2.0f / 4294967296.0f) - 1.0f);
    }
}
template <class T> __global__ void to_float_kernel(const T* p, float* q, int64_t n) {
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) q[i] = to_f32(p[i]);
}

// ---- reference: one thread per output element ----
template <class T> __global__ void ref_fwd(Geom g, const T* x, const T* w, const T* bias, float* y) {
    int64_t n = int64_t(g.N) * g.Ho * g.Wo * g.Co;
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
        int co = int(i % g.Co); int64_t t = i / g.Co;
        int ox = int(t % g.Wo); t /= g.Wo; int oy = int(t % g.Ho); int b = int(t / g.Ho);
        double s = bias ? double(to_f32(bias[co])) : 0.0;
        for (int r = 0; r < g.k; r++) for (int q = 0; q < g.k; q++) {
            int iy = oy * g.S - g.pad + r, ix = ox * g.S - g.pad + q;
            if (iy < 0 || iy >= g.H || ix < 0 || ix >= g.W) continue;
            const T* xp = x + ((int64_t(b) * g.H + iy) * g.W + ix) * g.C;
            const T* wp = w + ((int64_t(co) * g.k + r) * g.k + q) * g.C;
            for (int c = 0; c < g.C; c++) s += double(to_f32(xp[c])) * double(to_f32(wp[c]));
        }
        y[i] = float(s);
    }
}
template <class T> __global__ void ref_dgrad(Geom g, const T* gy, const T* w, float* dx) {
    int64_t n = int64_t(g.N) * g.H * g.W * g.C;
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
        int c = int(i % g.C); int64_t t = i / g.C;
        int ix = int(t % g.W); t /= g.W; int iy = int(t % g.H); int b = int(t / g.H);
        double s = 0;
        for (int r = 0; r < g.k; r++) for (int q = 0; q < g.k; q++) {
            int ty = iy + g.pad - r, tx = ix + g.pad - q;
            if (ty < 0 || tx < 0 || ty % g.S || tx % g.S) continue;
            int oy = ty / g.S, ox = tx / g.S;
            if (oy >= g.Ho || ox >= g.Wo) continue;
            const T* gp = gy + ((int64_t(b) * g.Ho + oy) * g.Wo + ox) * g.Co;
            for (int co = 0; co < g.Co; co++)
                s += double(to_f32(gp[co])) * double(to_f32(w[((int64_t(co) * g.k + r) * g.k + q) * g.C + c]));
        }
        dx[i] = float(s);
    }
}
template <class T> __global__ void ref_wgrad(Geom g, const T* gy, const T* x, float* dw) {
    int64_t n = int64_t(g.Co) * g.k * g.k * g.C;
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
        int c = int(i % g.C); int64_t t = i / g.C;
        int q = int(t % g.k); t /= g.k; int r = int(t % g.k); int co = int(t / g.k);
        double s = 0;
        for (int b = 0; b < g.N; b++) for (int oy = 0; oy < g.Ho; oy++) {
            int iy = oy * g.S - g.pad + r;
            if (iy < 0 || iy >= g.H) continue;
            for (int ox = 0; ox < g.Wo; ox++) {
                int ix = ox * g.S - g.pad + q;
                if (ix < 0 || ix >= g.W) continue;
                s += double(to_f32(gy[((int64_t(b) * g.Ho + oy) * g.Wo + ox) * g.Co + co])) *
                     double(to_f32(x[((int64_t(b) * g.H + iy) * g.W + ix) * g.C + c]));
            }
        }
        dw[i] = float(s);
    }
}

static Geom make_geom(int N, int H, int W, int C, int Co, int k, int S, int pad) {
    Geom g{N, H, W, C, (H + 2 * pad - k) / S + 1, (W + 2 * pad - k) / S + 1, Co, k, S, pad};
    return g;
}
static double gflop(const Geom& g) { return 2.0 * g.N * g.Ho * g.Wo * g.Co * double(g.k * g.k) * g.C * 1e-9; }
// GFLOP / us = PFLOP/s; x1000 = TFLOP/s
static double tflops(const Geom& g, double us) { return gflop(g) / us * 1e3; }

struct Bufs {
    void *x = nullptr, *w = nullptr, *bias = nullptr, *y = nullptr, *dx = nullptr, *dw = nullptr, *ws = nullptr;
    float *ref = nullptr, *got = nullptr;
    size_t ws_bytes = size_t(64) << 20;
};
static Bufs B;
static int g_fail = 0;

static unsigned blocks_for(int64_t n) { return grid_for(n, 256, 132 * 64); }

template <class T>
static void setup(const Geom& g) {
    int64_t nx = int64_t(g.N) * g.H * g.W * g.C, nw = int64_t(g.Co) * g.k * g.k * g.C, ny = int64_t(g.N) * g.Ho * g.Wo * g.Co;
    fill_kernel<T><<<blocks_for(nx), 256>>>((T*)B.x, nx, 1);
    fill_kernel<T><<<blocks_for(nw), 256>>>((T*)B.w, nw, 2);
    fill_kernel<T><<<blocks_for(g.Co), 256>>>((T*)B.bias, g.Co, 3);
    fill_kernel<T><<<blocks_for(ny), 256>>>((T*)B.dx, ny, 4);  // dx buffer doubles as gy storage below
}

// Runs mode on geometry g (inputs from setup), compares with the reference; returns max rel err.
template <class T>
static double check(int mode, const Geom& g, int cfg, int splits, const char* tag, bool print = true, int lin = 0) {
    const void* gy = B.dx;  // gy lives in dx's buffer; the dgrad output goes to y's buffer
    int64_t n = out_elems_of(mode, g);
    void* out = mode == kDgrad ? B.y : mode == kFwd ? B.y : B.dw;
    CK(cudaMemset(out, 0xff, size_t(n) * sizeof(T)));  // poison
    const char* err = mode == kFwd ? launch_conv<T>(mode, g, B.x, B.w, B.bias, out, B.ws, B.ws_bytes, 0, cfg, splits, lin)
                    : mode == kDgrad ? launch_conv<T>(mode, g, gy, B.w, nullptr, out, B.ws, B.ws_bytes, 0, cfg, splits, lin)
                                     : launch_conv<T>(mode, g, gy, B.x, nullptr, out, B.ws, B.ws_bytes, 0, cfg, splits, lin);
    if (err) { printf("  %s %s: launch error %s\n", tag, mode_name(mode), err); g_fail++; return 1; }
    CK(cudaGetLastError());
    if (mode == kFwd) ref_fwd<T><<<blocks_for(n), 256>>>(g, (const T*)B.x, (const T*)B.w, (const T*)B.bias, B.ref);
    else if (mode == kDgrad) ref_dgrad<T><<<blocks_for(n), 256>>>(g, (const T*)gy, (const T*)B.w, B.ref);
    else ref_wgrad<T><<<blocks_for(n), 256>>>(g, (const T*)gy, (const T*)B.x, B.ref);
    to_float_kernel<T><<<blocks_for(n), 256>>>((const T*)out, B.got, n);
    CK(cudaDeviceSynchronize());
    std::vector<float> r(static_cast<size_t>(n)), o(static_cast<size_t>(n));
    CK(cudaMemcpy(r.data(), B.ref, size_t(n) * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(o.data(), B.got, size_t(n) * 4, cudaMemcpyDeviceToHost));
    double mx = 0, md = 0;
    bool nan = false;
    for (int64_t i = 0; i < n; i++) {
        mx = std::max(mx, double(std::fabs(r[size_t(i)])));
        double d = std::fabs(double(r[size_t(i)]) - double(o[size_t(i)]));
        if (!(d == d)) nan = true;
        md = std::max(md, d);
    }
    double rel = nan ? 1e9 : md / std::max(mx, 1e-30);
    double tol = sizeof(T) == 4 ? 2e-6 : 8e-3;
    bool ok = rel <= tol;
    if (!ok) g_fail++;
    if (print || !ok) {
        ConvPlan pl = plan_conv<T>(mode, g, cfg, splits);
        printf("  %-28s %s %-5s plan %s cfg %d split %d%s  rel err %.2e %s\n", tag, sizeof(T) == 4 ? "f32 " : sizeof(T) == 2 && std::is_same_v<T, __half> ? "f16 " : "bf16",
               mode_name(mode), pl.mma ? "mma " : "simt", pl.cfg, pl.splits, lin ? " lin" : "", rel, ok ? "ok" : "FAIL");
    }
    return rel;
}

template <class T>
static double time_us(int mode, const Geom& g, int cfg, int splits, int iters = 20, int lin = 0) {
    const void* gy = B.dx;
    void* out = mode == kWgrad ? B.dw : B.y;
    auto go = [&] {
        if (mode == kFwd) launch_conv<T>(mode, g, B.x, B.w, B.bias, out, B.ws, B.ws_bytes, 0, cfg, splits, lin);
        else if (mode == kDgrad) launch_conv<T>(mode, g, gy, B.w, nullptr, out, B.ws, B.ws_bytes, 0, cfg, splits, lin);
        else launch_conv<T>(mode, g, gy, B.x, nullptr, out, B.ws, B.ws_bytes, 0, cfg, splits, lin);
    };
    for (int i = 0; i < 3; i++) go();
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a)); CK(cudaEventCreate(&b));
    CK(cudaEventRecord(a));
    for (int i = 0; i < iters; i++) go();
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, a, b));
    CK(cudaGetLastError());
    return ms * 1000.0 / iters;
}

static void check_upsample() {
    for (int C : {320, 3, 12}) {
        int N = 2, H = 5, W = 7;
        int64_t nx = int64_t(N) * H * W * C, ny = nx * 4;
        fill_kernel<__nv_bfloat16><<<blocks_for(nx), 256>>>((__nv_bfloat16*)B.x, nx, 7);
        launch_upsample2x(B.x, B.y, N, H, W, int64_t(C) * 2, 0);
        std::vector<uint16_t> hx(static_cast<size_t>(nx)), hy(static_cast<size_t>(ny));
        CK(cudaMemcpy(hx.data(), B.x, size_t(nx) * 2, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(hy.data(), B.y, size_t(ny) * 2, cudaMemcpyDeviceToHost));
        int bad = 0;
        for (int b = 0; b < N; b++) for (int y = 0; y < 2 * H; y++) for (int x = 0; x < 2 * W; x++) for (int c = 0; c < C; c++)
            bad += hy[size_t(((int64_t(b) * 2 * H + y) * 2 * W + x) * C + c)] != hx[size_t(((int64_t(b) * H + y / 2) * W + x / 2) * C + c)];
        // grad: f32 and bf16
        fill_kernel<float><<<blocks_for(ny), 256>>>((float*)B.dx, ny, 8);
        launch_upsample2x_grad<float>((const float*)B.dx, (float*)B.dw, N, H, W, C, 0);
        std::vector<float> g(static_cast<size_t>(ny)), d(static_cast<size_t>(nx));
        CK(cudaMemcpy(g.data(), B.dx, size_t(ny) * 4, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(d.data(), B.dw, size_t(nx) * 4, cudaMemcpyDeviceToHost));
        double md = 0;
        for (int b = 0; b < N; b++) for (int y = 0; y < H; y++) for (int x = 0; x < W; x++) for (int c = 0; c < C; c++) {
            auto at = [&](int yy, int xx) { return double(g[size_t(((int64_t(b) * 2 * H + yy) * 2 * W + xx) * C + c)]); };
            double s = at(2 * y, 2 * x) + at(2 * y, 2 * x + 1) + at(2 * y + 1, 2 * x) + at(2 * y + 1, 2 * x + 1);
            md = std::max(md, std::fabs(s - d[size_t(((int64_t(b) * H + y) * W + x) * C + c)]));
        }
        bool ok = bad == 0 && md < 1e-5;
        if (!ok) g_fail++;
        printf("  upsample2x C=%-4d mismatches %d, grad max err %.1e %s\n", C, bad, md, ok ? "ok" : "FAIL");
    }
    // speed: bf16 8x32x32x640 -> 64x64
    int N = 8, H = 32, W = 32, C = 640;
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a)); CK(cudaEventCreate(&b));
    for (int rep = 0; rep < 2; rep++) {
        CK(cudaEventRecord(a));
        for (int i = 0; i < 20; i++) {
            if (rep == 0) launch_upsample2x(B.x, B.y, N, H, W, int64_t(C) * 2, 0);
            else launch_upsample2x_grad<__nv_bfloat16>((const __nv_bfloat16*)B.y, (__nv_bfloat16*)B.x, N, H, W, C, 0);
        }
        CK(cudaEventRecord(b)); CK(cudaEventSynchronize(b));
        float ms; CK(cudaEventElapsedTime(&ms, a, b));
        double bytes = double(N) * H * W * C * 2 * 5;
        printf("  %s bf16 8x32x32x640: %.1f us, %.0f GB/s\n", rep ? "upsample2x_grad" : "upsample2x     ", ms * 50, bytes / (ms / 20 * 1e-3) * 1e-9);
    }
}

int main(int argc, char** argv) {
    bool sweep = false;
    int nb = 8;  // batch of the SD1.5 shapes
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--sweep")) sweep = true;
        else if (!strcmp(argv[i], "--batch") && i + 1 < argc) nb = atoi(argv[++i]);
        else { printf("usage: conv_check [--sweep] [--batch N]\n"); return 2; }
    }
    if (nb < 1 || nb > 64) { printf("--batch must be 1..64\n"); return 2; }
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, 0));
    printf("device %s, %d SMs\n", prop.name, prop.multiProcessorCount);
    size_t big = size_t(96) << 20;  // elements per buffer, generous
    CK(cudaMalloc(&B.x, big * 2)); CK(cudaMalloc(&B.w, big * 2)); CK(cudaMalloc(&B.bias, 1 << 20));
    CK(cudaMalloc(&B.y, big * 2)); CK(cudaMalloc(&B.dx, big * 2)); CK(cudaMalloc(&B.dw, big * 2));
    CK(cudaMalloc(&B.ws, B.ws_bytes)); CK(cudaMalloc(&B.ref, big * 4)); CK(cudaMalloc(&B.got, big * 4));

    printf("== small shapes (all modes, auto plan) ==\n");
    struct G { const char* name; Geom g; };
    std::vector<G> small = {
        {"N2 9x11 16->24 k3s1p1", make_geom(2, 9, 11, 16, 24, 3, 1, 1)},
        {"N2 10x11 32->40 k3s2p1", make_geom(2, 10, 11, 32, 40, 3, 2, 1)},
        {"N2 8x8 64->72 k1", make_geom(2, 8, 8, 64, 72, 1, 1, 0)},
        {"N2 9x9 24->16 k1s2", make_geom(2, 9, 9, 24, 16, 1, 2, 0)},
        {"N2 12x12 4->32 k3 (Cin 4)", make_geom(2, 12, 12, 4, 32, 3, 1, 1)},
        {"N2 12x12 32->4 k3 (Cout 4)", make_geom(2, 12, 12, 32, 4, 3, 1, 1)},
        {"N1 7x9 3->5 k5s2p2", make_geom(1, 7, 9, 3, 5, 5, 2, 2)},
        {"N2 16x16 128->96 k3s2p0", make_geom(2, 16, 16, 128, 96, 3, 2, 0)},
        {"N1 6x6 8->8 k4s3p3", make_geom(1, 6, 6, 8, 8, 4, 3, 3)},
        {"N2 16x16 320->320 k3", make_geom(2, 16, 16, 320, 320, 3, 1, 1)},
    };
    for (auto& s : small) {
        setup<__nv_bfloat16>(s.g);
        for (int m = 0; m < 3; m++) check<__nv_bfloat16>(m, s.g, -1, 0, s.name);
        setup<__half>(s.g);
        for (int m = 0; m < 3; m++) check<__half>(m, s.g, -1, 0, s.name, false);
        setup<float>(s.g);
        for (int m = 0; m < 3; m++) check<float>(m, s.g, -1, 0, s.name);
    }
    printf("== every tile config x splits {1,3} (bf16, quiet unless failing) ==\n");
    for (int gi : {1, 7, 8, 9}) {
        setup<__nv_bfloat16>(small[size_t(gi)].g);
        for (int c = 0; c < kMaxCfg; c++)
            for (int s : {1, 3})
                for (int lin : {0, 1})
                    for (int m = 0; m < 3; m++)
                        if (cfg_exists(m, c)) check<__nv_bfloat16>(m, small[size_t(gi)].g, c, s, small[size_t(gi)].name, false, lin);
    }
    setup<__half>(small[9].g);
    for (int c = 0; c < kMaxCfg; c++)
        for (int m = 0; m < 3; m++)
            if (cfg_exists(m, c)) check<__half>(m, small[9].g, c, 2, small[9].name, false);
    printf("  done (%d failures so far)\n", g_fail);

    printf("== upsample ==\n");
    check_upsample();

    printf("== SD1.5 shapes, batch %d, bf16: check + time (auto plan) ==\n", nb);
    std::vector<G> sd = {
        {"64x64 320->320 k3", make_geom(nb, 64, 64, 320, 320, 3, 1, 1)},
        {"32x32 640->640 k3", make_geom(nb, 32, 32, 640, 640, 3, 1, 1)},
        {"16x16 1280->1280 k3", make_geom(nb, 16, 16, 1280, 1280, 3, 1, 1)},
        {"8x8 1280->1280 k3", make_geom(nb, 8, 8, 1280, 1280, 3, 1, 1)},
        {"64x64 320 k3 s2 (down)", make_geom(nb, 64, 64, 320, 320, 3, 2, 1)},
        {"32x32 640 k3 s2 (down)", make_geom(nb, 32, 32, 640, 640, 3, 2, 1)},
        {"16x16 1280 k3 s2 (down)", make_geom(nb, 16, 16, 1280, 1280, 3, 2, 1)},
        {"32x32 320->640 k1", make_geom(nb, 32, 32, 320, 640, 1, 1, 0)},
        {"16x16 640->1280 k1", make_geom(nb, 16, 16, 640, 1280, 1, 1, 0)},
        {"64x64 640->320 k1", make_geom(nb, 64, 64, 640, 320, 1, 1, 0)},
        {"64x64 4->320 k3 (conv_in)", make_geom(nb, 64, 64, 4, 320, 3, 1, 1)},
        {"64x64 320->4 k3 (conv_out)", make_geom(nb, 64, 64, 320, 4, 3, 1, 1)},
    };
    for (auto& s : sd) {
        setup<__nv_bfloat16>(s.g);
        for (int m = 0; m < 3; m++) {
            check<__nv_bfloat16>(m, s.g, -1, 0, s.name, false);
            ConvPlan pl = plan_conv<__nv_bfloat16>(m, s.g);
            double us = time_us<__nv_bfloat16>(m, s.g, -1, 0);
            printf("  %-28s %s %s cfg %d split %2d: %8.1f us %6.1f TFLOP/s\n", s.name, mode_name(m), pl.mma ? "mma " : "simt",
                   pl.cfg, pl.splits, us, tflops(s.g, us));
        }
    }
    // determinism of the split-K path
    {
        Geom g = sd[0].g;
        setup<__nv_bfloat16>(g);
        int64_t n = out_elems_of(kWgrad, g);
        std::vector<uint16_t> r1(static_cast<size_t>(n)), r2(static_cast<size_t>(n));
        for (int rep = 0; rep < 2; rep++) {
            launch_conv<__nv_bfloat16>(kWgrad, g, B.dx, B.x, nullptr, B.dw, B.ws, B.ws_bytes, 0, -1, 4);
            CK(cudaMemcpy(rep ? r2.data() : r1.data(), B.dw, size_t(n) * 2, cudaMemcpyDeviceToHost));
        }
        bool same = !memcmp(r1.data(), r2.data(), size_t(n) * 2);
        if (!same) g_fail++;
        printf("  split-K wgrad bitwise repeatable: %s\n", same ? "yes" : "NO");
    }
    setup<__half>(sd[1].g);
    for (int m = 0; m < 3; m++) check<__half>(m, sd[1].g, -1, 0, sd[1].name);
    printf("== f32 exact path timing ==\n");
    for (int i : {0, 2}) {
        setup<float>(sd[size_t(i)].g);
        for (int m = 0; m < 3; m++) {
            double us = time_us<float>(m, sd[size_t(i)].g, -1, 0, 3);
            printf("  %-28s %s f32: %9.1f us %6.1f TFLOP/s\n", sd[size_t(i)].name, mode_name(m), us, tflops(sd[size_t(i)].g, us));
        }
    }
    if (sweep) {
        printf("== occupancy (blocks/SM) per cfg, bf16 fwd/dgrad/wgrad ==\n ");
        for (int c = 0; c < kMaxCfg; c++) {
            printf(" c%d:", c);
            for (int m = 0; m < 3; m++)
                printf(m ? "/%d" : "%d", cfg_exists(m, c) ? mma_table_for<__nv_bfloat16>(m).e[c].occupancy() : 0);
        }
        printf("\n== sweep: us per cfg (splits 1/2/3/4, '-' = over workspace cap), bf16; then linear-K for best ==\n");
        for (size_t i = 0; i < 10; i++) {
            setup<__nv_bfloat16>(sd[i].g);
            for (int m = 0; m < 3; m++) {
                int64_t oe = out_elems_of(m, sd[i].g);
                int maxs = int(std::max<int64_t>(1, std::min<int64_t>(16, int64_t(kMaxSplitWorkspace / 4) / oe)));
                printf("S%zu %s", i, mode_name(m));
                double best = 1e30; int bc = -1, bs = 0;
                for (int c = 0; c < kMaxCfg; c++) {
                    if (!cfg_exists(m, c)) continue;
                    printf(" |");
                    for (int s : {1, 2, 3, 4}) {
                        if (s > maxs) { printf("    -"); continue; }
                        double us = time_us<__nv_bfloat16>(m, sd[i].g, c, s, 10);
                        printf(" %4.0f", us);
                        if (us < best) { best = us; bc = c; bs = s; }
                    }
                }
                double lin = time_us<__nv_bfloat16>(m, sd[i].g, bc, bs, 10, 1);
                printf(" | best c%d s%d %.0f TF (linear-K %.0f us)\n", bc, bs, tflops(sd[i].g, best), lin);
            }
        }
    }
    printf("RESULT: %d failures\n", g_fail);
    return g_fail ? 1 : 0;
}
