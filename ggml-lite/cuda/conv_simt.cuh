// Convolution, part 2 (see conv_mma.cuh for the geometry): the exact path. A tiled implicit GEMM
// on FFMA with fp32 accumulation in a fixed order (no TF32), used for f32 graphs and as the
// fallback for half types whose channels or pointers do not suit the tensor-core loader (e.g.
// conv_in's Cin = 4), quantized weights included (Args::b_scale). Any k, stride, pad, channel
// count. Also: the split-K reduction and the nearest-2x upsample kernels (NHWC, vectorized when
// the channel bytes allow).
#pragma once
#include "ggml-lite/cuda/conv_mma.cuh"

namespace gl::convk {

template <class T>
__device__ __forceinline__ void store_one(const Args& a, const Prob& p, int mode, int split, int m, int n, float v) {
    if (m >= p.M || n >= p.NG) return;
    const int64_t idx = out_index(a.g, p, mode, m, n);
    if (a.splits > 1) {
        a.ws[int64_t(split) * a.out_elems + idx] = v;
        return;
    }
    if (a.bias) v += to_f32(static_cast<const T*>(a.bias)[n]);
    if (a.residual) v += to_f32(static_cast<const T*>(a.residual)[idx]);
    static_cast<T*>(a.out)[idx] = from_f32<T>(v);
}

// Element (m, kk) of A and (kk, n) of B, gathered from the tensors (0 outside them).
struct SimtGather {
    const Geom& g;
    const Prob& p;
    FastDiv dv_c, dv_t;  // kk -> (tap, channel) and tap -> (row, column) (wgrad: column index j)

    template <class T, int MODE>
    __device__ __forceinline__ float a(const T* A, int m, int kk) const {
        if (m >= p.M || kk >= p.K) return 0.f;
        if (MODE == kWgrad) return to_f32(A[int64_t(kk) * g.Co + m]);
        int b = p.dv_hw.div(m), rem = m - b * int(p.dv_hw.d);
        int qy = p.dv_w.div(rem), qx = rem - qy * int(p.dv_w.d);
        int tap = dv_c.div(kk), c = kk - tap * p.Cg;
        int r = dv_t.div(tap), s = tap - r * p.ns;
        int y, x, Hs, Ws;
        if (MODE == kFwd) { y = qy * g.S - g.pad + r; x = qx * g.S - g.pad + s; Hs = g.H; Ws = g.W; }
        else { y = qy + p.dy0 - r; x = qx + p.dx0 - s; Hs = g.Ho; Ws = g.Wo; }
        if (unsigned(y) >= unsigned(Hs) || unsigned(x) >= unsigned(Ws)) return 0.f;
        return to_f32(A[((int64_t(b) * Hs + y) * Ws + x) * p.Cg + c]);
    }

    // Offset of element (kk, n) of the weight operand (forward, input grad) in w; co: its Cout.
    template <int MODE>
    __device__ __forceinline__ int64_t w_offset(int kk, int n, int& co) const {
        if (MODE == kFwd) {
            co = n;
            return int64_t(n) * p.K + kk;
        }
        int tap = dv_c.div(kk);
        co = kk - tap * p.Cg;
        int jr = dv_t.div(tap), js = tap - jr * p.ns;
        return ((int64_t(co) * g.k + p.r0 + jr * g.S) * g.k + p.s0 + js * g.S) * g.C + n;
    }

    // Element (kk, n) of a quantized weight B (Args::b_scale): its code times its Cout's scale.
    template <int MODE>
    __device__ __forceinline__ float b_quant(const Args& a, int kk, int n) const {
        if (kk >= p.K || n >= p.NG) return 0.f;
        int co;
        const int64_t o = w_offset<MODE>(kk, n, co);
        return code_to_f32(static_cast<const uint8_t*>(a.b)[o], a.b_codes) * a.b_scale[co];
    }

    template <class T, int MODE>
    __device__ __forceinline__ float b(const T* B, int kk, int n) const {
        if (kk >= p.K || n >= p.NG) return 0.f;
        if (MODE != kWgrad) {
            int co;
            return to_f32(B[w_offset<MODE>(kk, n, co)]);
        }
        int b = p.dv_hw.div(kk), rem = kk - b * int(p.dv_hw.d);
        int oy = p.dv_w.div(rem), ox = rem - oy * int(p.dv_w.d);
        int tap = dv_c.div(n), c = n - tap * g.C;
        int r = dv_t.div(tap), s = tap - r * g.k;
        int y = oy * g.S - g.pad + r, x = ox * g.S - g.pad + s;
        if (unsigned(y) >= unsigned(g.H) || unsigned(x) >= unsigned(g.W)) return 0.f;
        return to_f32(B[((int64_t(b) * g.H + y) * g.W + x) * g.C + c]);
    }
};

constexpr int kSimtBM = 64, kSimtBN = 64, kSimtBK = 16;

// 256 threads, 64x64 tile, each thread 4x4 outputs strided by 16 (conflict-free smem reads).
// Loads walk the operand's contiguous dimension across neighbouring threads.
template <class T, int MODE>
__global__ void __launch_bounds__(256) conv_simt_kernel(const Args args) {
    kernel_entry();
    constexpr int BM = kSimtBM, BN = kSimtBN, BK = kSimtBK;
    __shared__ float As[BK][BM + 4], Bs[BK][BN + 4];
    const Geom& g = args.g;
    const int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
    const int phase = int(blockIdx.z) / args.splits, split = int(blockIdx.z) % args.splits;
    const int m0 = int(blockIdx.x / args.n_tiles) * BM, n0 = int(blockIdx.x % args.n_tiles) * BN;
    const Prob p = make_prob(g, MODE, phase);
    if (m0 >= p.M) return;
    SimtGather ga{g, p, {}, {}};
    if (MODE == kWgrad) { ga.dv_c.init(uint32_t(g.C)); ga.dv_t.init(uint32_t(g.k)); }
    else if (p.K > 0) { ga.dv_c.init(uint32_t(p.Cg)); ga.dv_t.init(uint32_t(p.ns)); }
    const int KT = ceil_div(p.K, BK);
    const int kt0 = int(int64_t(KT) * split / args.splits), kt1 = int(int64_t(KT) * (split + 1) / args.splits);
    const T* A = static_cast<const T*>(args.a);
    const T* B = static_cast<const T*>(args.b);

    float acc[4][4] = {};
    for (int kt = kt0; kt < kt1; kt++) {
        const int k0 = kt * BK;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            int e = tid + 256 * i;
            int am = MODE == kWgrad ? e % BM : e / BK, ak = MODE == kWgrad ? e / BM : e % BK;
            As[ak][am] = ga.a<T, MODE>(A, m0 + am, k0 + ak);
            int bn = MODE == kFwd ? e / BK : e % BN, bk = MODE == kFwd ? e % BK : e / BN;
            if (MODE != kWgrad && args.b_scale) Bs[bk][bn] = ga.b_quant<MODE>(args, k0 + bk, n0 + bn);
            else Bs[bk][bn] = ga.b<T, MODE>(B, k0 + bk, n0 + bn);
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < BK; kk++) {
            float av[4], bv[4];
#pragma unroll
            for (int i = 0; i < 4; i++) { av[i] = As[kk][ty + 16 * i]; bv[i] = Bs[kk][tx + 16 * i]; }
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) store_one<T>(args, p, MODE, split, m0 + ty + 16 * i, n0 + tx + 16 * j, acc[i][j]);
}

// out[i] = sum over splits of ws[s][i] (in split order) + bias[i % Co] + residual[i]; the
// residual may be out itself.
template <class T>
__global__ void splitk_reduce_kernel(const float* __restrict__ ws, int splits, int64_t n, T* out,
                                     const T* __restrict__ bias, int Co, const T* residual) {
    kernel_entry();
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
        float s = ws[i];
        for (int z = 1; z < splits; z++) s += ws[int64_t(z) * n + i];
        if (bias) s += to_f32(bias[i % Co]);
        if (residual) s += to_f32(residual[i]);
        out[i] = from_f32<T>(s);
    }
}

// ---- nearest 2x upsample: one thread per input vector of V (bytes-wide word type W) ----

template <class Wd>
__global__ void upsample2x_kernel(const Wd* __restrict__ x, Wd* __restrict__ y, int64_t pixels, int W, int CV) {
    kernel_entry();
    const int64_t n = pixels * CV;
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
        int64_t pix = i / CV;
        int cv = int(i - pix * CV);
        int64_t row = pix / W;  // = b*H + h
        int w = int(pix - row * W);
        Wd v = x[i];
        int64_t o = ((row * 2) * (2 * W) + 2 * w) * CV + cv;  // (b, 2h, 2w)
        y[o] = v;
        y[o + CV] = v;
        y[o + int64_t(2 * W) * CV] = v;
        y[o + int64_t(2 * W) * CV + CV] = v;
    }
}

// dx[b,h,w,c] = gy(2h,2w) + gy(2h,2w+1) + gy(2h+1,2w) + gy(2h+1,2w+1), fp32, in that order.
template <class T, int V>
__global__ void upsample2x_grad_kernel(const T* __restrict__ gy, T* __restrict__ dx, int64_t pixels, int W, int C) {
    kernel_entry();
    const int CV = C / V;
    const int64_t n = pixels * CV;
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
        int64_t pix = i / CV;
        int cv = int(i - pix * CV);
        int64_t row = pix / W;
        int w = int(pix - row * W);
        const int64_t o = ((row * 2) * (2 * W) + 2 * w) * C + int64_t(cv) * V, rs = int64_t(2 * W) * C;
        const int64_t src[4] = {o, o + C, o + rs, o + rs + C};
        float s[V];
#pragma unroll
        for (int e = 0; e < V; e++) s[e] = 0.f;
#pragma unroll
        for (int q = 0; q < 4; q++) {
            T v[V];
            if constexpr (V * sizeof(T) == 16) copy16(v, gy + src[q]);
            else
#pragma unroll
                for (int e = 0; e < V; e++) v[e] = gy[src[q] + e];
#pragma unroll
            for (int e = 0; e < V; e++) s[e] += to_f32(v[e]);
        }
        T r[V];
#pragma unroll
        for (int e = 0; e < V; e++) r[e] = from_f32<T>(s[e]);
        T* d = dx + pix * C + int64_t(cv) * V;
        if constexpr (V * sizeof(T) == 16) copy16(d, r);
        else
#pragma unroll
            for (int e = 0; e < V; e++) d[e] = r[e];
    }
}

}  // namespace gl::convk
