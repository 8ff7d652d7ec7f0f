// Convolution as implicit GEMM on NHWC tensors, shared by cuda/conv.cu and bench/conv_check.cu
// (no dependency on the core headers). This file: problem geometry and the bf16/f16 tensor-core
// kernel (mma.sync.m16n8k16 + ldmatrix, cp.async multi-stage pipeline with double-buffered
// fragments, fp32 accumulation, fused bias and residual epilogue). No im2col buffer: A/B tiles
// are gathered.
//   forward:      M = N*Ho*Wo pixels, N = Cout, K = k*k*Cin     A = x gathered, B = w [Cout][K]
//   input grad:   per stride phase (py, px), M = the dx pixels of that phase, N = Cin,
//                 K = taps(phase)*Cout                          A = gy gathered, B = w (tap subset)
//   weight grad:  M = Cout, N = k*k*Cin, K = N*Ho*Wo pixels     A = gy [P][Cout], B = x gathered
// Stride-s input gradients are split into s*s phases so no multiply is spent on the zeros a
// predicated gather would produce. When the gathered channel count is a multiple of BK, K is
// walked tap-first (each BK-channel slice through all taps). Split-K (any mode) writes fp32
// partials to a workspace that a second kernel sums in a fixed order: results never depend on
// scheduling. Limits: Cin % 8 == 0 (and Cout % 8 == 0 for the gradients), 16-byte aligned
// pointers, every tensor under 2^31 elements; other cases take the exact path (conv_simt.cuh).
// A quantized weight (forward and input gradient: Args::b_scale, core/quant.h) is read as 8-bit
// codes into registers with the A copies of a tile and converted to T (code * its Cout's scale)
// into the B tile after that iteration's mmas (QB kernels); its pointer needs 8-byte alignment.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "ggml-lite/cuda/primitives.cuh"

namespace gl::convk {

enum Mode : int { kFwd = 0, kDgrad = 1, kWgrad = 2 };

// x [N,H,W,C], w [Co,k,k,C], y [N,Ho,Wo,Co].
struct Geom {
    int N, H, W, C, Ho, Wo, Co, k, S, pad;
};

// Division by a run-time invariant (n < 2^31): q = (umulhi(n, mul) + n) >> shift.
struct FastDiv {
    uint32_t d = 1, mul = 0, shift = 0;
    __host__ __device__ void init(uint32_t div) {
        d = div;
        shift = 0;
        while ((1u << shift) < div) shift++;
        mul = uint32_t(((uint64_t(1) << 32) * ((uint64_t(1) << shift) - div)) / div + 1);
    }
    __device__ __forceinline__ int div(int n) const { return int((__umulhi(uint32_t(n), mul) + uint32_t(n)) >> shift); }
};

struct Args {
    Geom g;
    const void* a;     // forward: x; input grad: gy; weight grad: gy
    const void* b;     // forward: w; input grad: w;  weight grad: x
    const void* bias;  // forward only (nullptr: none), same dtype as the tensors
    void* out;
    float* ws;         // split-K partials [splits][out_elems]
    int64_t out_elems;
    int splits, m_tiles, n_tiles;
    int linear_k = 0;  // 1: walk K in memory order even where the tap-first order applies (bench)
    // A quantized weight b (forward and input grad): 8-bit codes of dtype b_codes (i8 or f8e4m3)
    // and one f32 scale per Cout; nullptr: b is dense T.
    const float* b_scale = nullptr;
    DType b_codes = DType::i8;
    // Forward and input grad: added to the output before its rounding (nullptr: none); the
    // output's dtype and dense layout, 4-byte aligned; may alias out exactly (read before written).
    const void* residual = nullptr;
};

// The GEMM one block works on (a stride phase of the input gradient, or the whole problem).
struct Prob {
    int M = 0, NG = 0, K = 0;
    int Cg = 1, nr = 1, ns = 1;    // forward / input grad: K = nr * ns taps of Cg channels
    int r0 = 0, s0 = 0, dy0 = 0, dx0 = 0, py = 0, px = 0;
    FastDiv dv_hw, dv_w;           // row (fwd, dgrad) or pixel (wgrad) -> (n, y, x)
};

__host__ __device__ inline Prob make_prob(const Geom& g, int mode, int phase) {
    Prob p;
    if (mode == kFwd) {
        p.M = g.N * g.Ho * g.Wo; p.NG = g.Co; p.K = g.k * g.k * g.C; p.Cg = g.C; p.nr = p.ns = g.k;
        if (p.M > 0) { p.dv_hw.init(uint32_t(g.Ho * g.Wo)); p.dv_w.init(uint32_t(g.Wo)); }
    } else if (mode == kDgrad) {
        // dx[iy] takes gy[oy] * w[r] where oy*S - pad + r = iy. With iy = qy*S + py, the taps are
        // r = r0 + j*S (r0 = (py + pad) mod S) and oy = qy + dy0 - j.
        p.py = phase / g.S; p.px = phase % g.S;
        p.r0 = (p.py + g.pad) % g.S; p.s0 = (p.px + g.pad) % g.S;
        p.nr = p.r0 < g.k ? (g.k - 1 - p.r0) / g.S + 1 : 0;
        p.ns = p.s0 < g.k ? (g.k - 1 - p.s0) / g.S + 1 : 0;
        p.dy0 = (p.py + g.pad - p.r0) / g.S; p.dx0 = (p.px + g.pad - p.s0) / g.S;
        int Hq = p.py < g.H ? (g.H - 1 - p.py) / g.S + 1 : 0;
        int Wq = p.px < g.W ? (g.W - 1 - p.px) / g.S + 1 : 0;
        p.M = g.N * Hq * Wq; p.NG = g.C; p.K = p.nr * p.ns * g.Co; p.Cg = g.Co;
        if (p.M > 0) { p.dv_hw.init(uint32_t(Hq * Wq)); p.dv_w.init(uint32_t(Wq)); }
    } else {
        p.M = g.Co; p.NG = g.k * g.k * g.C; p.K = g.N * g.Ho * g.Wo;
        p.dv_hw.init(uint32_t(g.Ho * g.Wo)); p.dv_w.init(uint32_t(g.Wo));
    }
    return p;
}

// Element offset of GEMM output (m, n) in the output tensor.
__device__ __forceinline__ int64_t out_index(const Geom& g, const Prob& p, int mode, int m, int n) {
    if (mode == kDgrad) {
        int b = p.dv_hw.div(m), rem = m - b * int(p.dv_hw.d);
        int qy = p.dv_w.div(rem), qx = rem - qy * int(p.dv_w.d);
        return ((int64_t(b) * g.H + qy * g.S + p.py) * g.W + qx * g.S + p.px) * g.C + n;
    }
    return int64_t(m) * p.NG + n;
}

// Stores GEMM outputs (m, n) and (m, n+1) (the second only if n+1 < NG): straight into the
// output with the bias and the residual, or as fp32 partials into this split's workspace slice.
template <class T>
__device__ __forceinline__ void store_pair(const Args& a, const Prob& p, int mode, int split, int m, int n,
                                           float v0, float v1) {
    if (m >= p.M || n >= p.NG) return;
    const int64_t idx = out_index(a.g, p, mode, m, n);
    const bool two = n + 1 < p.NG;
    if (a.splits > 1) {
        float* dst = a.ws + int64_t(split) * a.out_elems + idx;
        if (two && (p.NG % 2 == 0)) { *reinterpret_cast<float2*>(dst) = make_float2(v0, v1); return; }
        dst[0] = v0;
        if (two) dst[1] = v1;
        return;
    }
    if (a.bias) {
        v0 += to_f32(static_cast<const T*>(a.bias)[n]);
        if (two) v1 += to_f32(static_cast<const T*>(a.bias)[n + 1]);
    }
    if (a.residual) {
        const T* r = static_cast<const T*>(a.residual) + idx;
        if constexpr (sizeof(T) == 2) {
            if (two && (p.NG % 2 == 0)) {  // idx is even: one 4-byte load
                struct alignas(4) Pair { T x, y; };
                const Pair rr = *reinterpret_cast<const Pair*>(r);
                v0 += to_f32(rr.x);
                v1 += to_f32(rr.y);
                r = nullptr;
            }
        }
        if (r) {
            v0 += to_f32(r[0]);
            if (two) v1 += to_f32(r[1]);
        }
    }
    T* dst = static_cast<T*>(a.out) + idx;
    if constexpr (sizeof(T) == 2) {
        if (two && (p.NG % 2 == 0)) {
            *reinterpret_cast<uint32_t*>(dst) = pack2<T>(v0, v1);
            return;
        }
    }
    dst[0] = from_f32<T>(v0);
    if (two) dst[1] = from_f32<T>(v1);
}

// Shared-memory tiles, XOR-swizzled on 16-byte chunks so ldmatrix and cp.async are conflict-free.
// K-major tile: [rows][BK] (BK = 32: 64-byte rows; 64: 128-byte rows). MN-major: [BK][R], R >= 64.
template <int BK>
__device__ __forceinline__ int off_k(int row, int chunk) {
    if constexpr (BK == 32) return row * 32 + ((chunk ^ ((row >> 1) & 3)) << 3);
    else return row * BK + ((chunk ^ (row & 7)) << 3);
}
template <int R>
__device__ __forceinline__ int off_mn(int row, int chunk) { return row * R + ((chunk ^ (row & 7)) << 3); }

// Position (tap row, tap column, channel) of a K tile, advanced without divisions.
struct KPos {
    int r, s, c;
    // Memory order, channel fastest (a step may cross taps).
    __device__ __forceinline__ void step_linear(int d, int Cg, int ns) {
        c += d;
        while (c >= Cg) { c -= Cg; if (++s == ns) { s = 0; ++r; } }
    }
    // Tap-first order (Cg % BK == 0): every tap of one BK-channel slice, then the next slice, so
    // the gathered rows of the next taps are mostly still in L1.
    __device__ __forceinline__ void step_tap(int bk, int nr, int ns) {
        if (++s == ns) { s = 0; if (++r == nr) { r = 0; c += bk; } }
    }
};

// Offset (elements) of 16-byte chunk `chunk` of row `row` of an MN-major tile [BK][R]: rows of R
// elements (the mma.sync kernel's ldmatrix layout) or, ATOMS, 64-wide atoms of BK rows of 128 B
// one after another (the wgmma layout: its descriptor's LBO steps from atom to atom).
template <int R, int BK, bool ATOMS>
__device__ __forceinline__ int off_mn_tile(int row, int chunk) {
    if constexpr (ATOMS) return (chunk >> 3) * (BK * 64) + row * 64 + (((chunk & 7) ^ (row & 7)) << 3);
    else return off_mn<R>(row, chunk);
}

// One block's gathers of its A and B tiles (every mode), a k-tile at a time into a pipeline slot
// (A then B): cp.async of 16-byte chunks, zero-filled off the tensors. QB: B's chunks are 8-bit
// codes held in registers until store_codes converts them into the slot. Used by the mma.sync
// kernel below and the wgmma kernel (conv_sm90.cuh).
template <class T, int MODE, int BM, int BN, int BK, int NT, bool QB, bool ATOMS>
struct TileLoader {
    static constexpr bool A_KMAJ = MODE != kWgrad, B_KMAJ = MODE == kFwd;
    static constexpr int A_ELEMS = BM * BK;
    static constexpr int A_CPR = A_KMAJ ? BK / 8 : BM / 8, B_CPR = B_KMAJ ? BK / 8 : BN / 8;
    static constexpr int A_RSTEP = NT / A_CPR, B_RSTEP = NT / B_CPR;
    static constexpr int A_ROWS = (A_KMAJ ? BM : BK) / A_RSTEP, B_ROWS = (B_KMAJ ? BN : BK) / B_RSTEP;
    static_assert(NT % A_CPR == 0 && NT % B_CPR == 0 && A_ROWS >= 1 && B_ROWS >= 1, "loader");
    static_assert(!ATOMS || (BK == 64 && (BM % 64 == 0 || A_KMAJ) && (BN % 64 == 0 || B_KMAJ)), "atom tiles");

    const Args& args;
    const Prob& p;
    const int m0, n0;
    bool tapfirst;
    const T* A;
    const T* B;
    const uint8_t* Bq;  // QB: the codes, same element offsets
    uint2 b_codes[QB ? B_ROWS : 1];  // QB: this thread's chunks of the tile in flight and their scales
    float b_scale[QB ? B_ROWS : 1];
    // Source of the gathered operand (fwd, dgrad: A; wgrad: B). Offsets fit 32 bits (checked on launch).
    int Hs, Ws, Cs, a_cc, a_r0, b_cc, b_r0;
    int a_off[A_KMAJ ? A_ROWS : 1], a_y[A_KMAJ ? A_ROWS : 1], a_x[A_KMAJ ? A_ROWS : 1];
    int b_off[B_KMAJ ? B_ROWS : 1];
    bool a_col_ok = true, b_col_ok = true;  // MN-major tiles: this thread's column chunk is in range
    int wb_r = 0, wb_s = 0, wb_c = 0;
    KPos kb{0, 0, 0};  // K position of the next tile to load

    __device__ __forceinline__ TileLoader(const Args& args_, const Prob& p_, int tid, int m0_, int n0_, int kt0)
        : args(args_), p(p_), m0(m0_), n0(n0_) {
        const Geom& g = args.g;
        tapfirst = MODE != kWgrad && !args.linear_k && p.Cg % BK == 0;
        A = static_cast<const T*>(args.a);
        B = static_cast<const T*>(args.b);
        Bq = static_cast<const uint8_t*>(args.b);
        Hs = MODE == kDgrad ? g.Ho : g.H; Ws = MODE == kDgrad ? g.Wo : g.W; Cs = MODE == kDgrad ? g.Co : g.C;
        a_cc = tid % A_CPR; a_r0 = tid / A_CPR; b_cc = tid % B_CPR; b_r0 = tid / B_CPR;
        if constexpr (A_KMAJ) {
#pragma unroll
            for (int i = 0; i < A_ROWS; i++) {
                int m = m0 + a_r0 + i * A_RSTEP;
                a_off[i] = 0; a_y[i] = -(1 << 29); a_x[i] = 0;
                if (m < p.M) {
                    int b = p.dv_hw.div(m), rem = m - b * int(p.dv_hw.d);
                    int qy = p.dv_w.div(rem), qx = rem - qy * int(p.dv_w.d);
                    int y = MODE == kFwd ? qy * g.S - g.pad : qy + p.dy0;
                    int x = MODE == kFwd ? qx * g.S - g.pad : qx + p.dx0;
                    a_y[i] = y; a_x[i] = x;
                    a_off[i] = ((b * Hs + y) * Ws + x) * Cs;
                }
            }
        } else {
            a_col_ok = m0 + a_cc * 8 < p.M;
        }
        if constexpr (B_KMAJ) {
#pragma unroll
            for (int i = 0; i < B_ROWS; i++) {
                int n = n0 + b_r0 + i * B_RSTEP;
                b_off[i] = n < p.NG ? n * p.K : -1;
            }
        } else {
            int j = n0 + b_cc * 8;
            b_col_ok = j < p.NG;
            if (MODE == kWgrad) {
                int tap = j / g.C;
                wb_c = j - tap * g.C; wb_r = tap / g.k; wb_s = tap - wb_r * g.k;
            }
        }

        if (MODE != kWgrad && p.K > 0) {
            if (tapfirst) {
                int taps = p.nr * p.ns, cb = kt0 / taps, t = kt0 - cb * taps;
                kb.r = t / p.ns; kb.s = t - kb.r * p.ns; kb.c = cb * BK;
            } else {
                int k = kt0 * BK, tap = k / p.Cg;
                kb.c = k - tap * p.Cg; kb.r = tap / p.ns; kb.s = tap - kb.r * p.ns;
            }
        }
    }

    // Issues the copies of k-tile kt into the slot at sA (B at sA + A_ELEMS).
    __device__ __forceinline__ void load(T* sA, int kt) {
        const Geom& g = args.g;
        T* sB = sA + A_ELEMS;
        const int k0 = kt * BK;
        if constexpr (A_KMAJ) {
            KPos q = kb;
            bool kval = true;
            if (tapfirst) q.c += a_cc * 8;
            else { kval = k0 + a_cc * 8 < p.K; q.step_linear(a_cc * 8, p.Cg, p.ns); }
            const int dy = MODE == kFwd ? q.r : -q.r, dx = MODE == kFwd ? q.s : -q.s;
            const int koff = (dy * Ws + dx) * Cs + q.c;
#pragma unroll
            for (int i = 0; i < A_ROWS; i++) {
                int y = a_y[i] + dy, x = a_x[i] + dx;
                bool v = kval && unsigned(y) < unsigned(Hs) && unsigned(x) < unsigned(Ws);
                // .ca: the tap-first gather re-reads these lines for the next taps
                cp_async<16, true>(sA + off_k<BK>(a_r0 + i * A_RSTEP, a_cc), v ? A + (a_off[i] + koff) : A, v);
            }
        } else {
#pragma unroll
            for (int i = 0; i < A_ROWS; i++) {
                int row = a_r0 + i * A_RSTEP, pix = k0 + row;
                bool v = a_col_ok && pix < p.K;
                cp_async<16>(sA + off_mn_tile<BM, BK, ATOMS>(row, a_cc), v ? A + (pix * g.Co + m0 + a_cc * 8) : A, v);
            }
        }
        // One B chunk: an async copy, or (QB) its codes and scale into registers (zeros: off the tensor).
        auto b_chunk = [&](int i, int smem_off, bool v, int o, float scale) {
            if constexpr (QB) {
                b_codes[i] = v ? *reinterpret_cast<const uint2*>(Bq + o) : make_uint2(0u, 0u);
                b_scale[i] = v ? scale : 0.f;
            } else {
                cp_async<16>(sB + smem_off, v ? B + o : B, v);
            }
        };
        if constexpr (B_KMAJ) {
            int kk = k0 + b_cc * 8;
            if (tapfirst) kk = (kb.r * p.ns + kb.s) * p.Cg + kb.c + b_cc * 8;
            const bool kval = kk < p.K;
#pragma unroll
            for (int i = 0; i < B_ROWS; i++) {
                bool v = kval && b_off[i] >= 0;
                b_chunk(i, off_k<BK>(b_r0 + i * B_RSTEP, b_cc), v, b_off[i] + kk,
                        QB && v ? args.b_scale[n0 + b_r0 + i * B_RSTEP] : 0.f);  // row n's scale (an L1 hit)
            }
        } else if constexpr (MODE == kDgrad) {
            const int ci = n0 + b_cc * 8;
            if (tapfirst) {  // one tap per tile: rows are the channels kb.c + row
                const int co_stride = g.k * g.k * g.C;
                const int base = ((kb.c * g.k + p.r0 + kb.r * g.S) * g.k + p.s0 + kb.s * g.S) * g.C + ci;
#pragma unroll
                for (int i = 0; i < B_ROWS; i++) {
                    int row = b_r0 + i * B_RSTEP;
                    b_chunk(i, off_mn_tile<BN, BK, ATOMS>(row, b_cc), b_col_ok, base + row * co_stride,
                            QB && b_col_ok ? args.b_scale[kb.c + row] : 0.f);
                }
            } else {
#pragma unroll
                for (int i = 0; i < B_ROWS; i++) {
                    int row = b_r0 + i * B_RSTEP;
                    KPos q = kb;
                    q.step_linear(row, p.Cg, p.ns);
                    bool v = b_col_ok && k0 + row < p.K;
                    int o = ((q.c * g.k + p.r0 + q.r * g.S) * g.k + p.s0 + q.s * g.S) * g.C + ci;
                    b_chunk(i, off_mn_tile<BN, BK, ATOMS>(row, b_cc), v, o, QB && v ? args.b_scale[q.c] : 0.f);
                }
            }
        } else {
#pragma unroll
            for (int i = 0; i < B_ROWS; i++) {
                int row = b_r0 + i * B_RSTEP, pix = k0 + row;
                bool v = b_col_ok && pix < p.K;
                int o = 0;
                if (v) {
                    int b = p.dv_hw.div(pix), rem = pix - b * int(p.dv_hw.d);
                    int oy = p.dv_w.div(rem), ox = rem - oy * int(p.dv_w.d);
                    int y = oy * g.S - g.pad + wb_r, x = ox * g.S - g.pad + wb_s;
                    v = unsigned(y) < unsigned(g.H) && unsigned(x) < unsigned(g.W);
                    o = ((b * g.H + y) * g.W + x) * g.C + wb_c;
                }
                cp_async<16>(sB + off_mn_tile<BN, BK, ATOMS>(row, b_cc), v ? B + o : B, v);
            }
        }
        if (MODE != kWgrad) {
            if (tapfirst) kb.step_tap(BK, p.nr, p.ns);
            else kb.step_linear(BK, p.Cg, p.ns);
        }
    }

    // QB: the chunks load fetched, converted into that tile's B slot sB.
    __device__ __forceinline__ void store_codes(T* sB) {
        if constexpr (QB) {
#pragma unroll
            for (int i = 0; i < B_ROWS; i++) {
                const int row = b_r0 + i * B_RSTEP;
                const int off = B_KMAJ ? off_k<BK>(row, b_cc) : off_mn_tile<BN, BK, ATOMS>(row, b_cc);
                *reinterpret_cast<uint4*>(sB + off) = dequant8<T>(b_codes[i], b_scale[i], args.b_codes);
            }
        }
    }
};

template <int BM, int BN, int BK, int WM, int WN, int STAGES>
struct MmaCfg {
    static constexpr int kBM = BM, kBN = BN, kBK = BK, kWM = WM, kWN = WN, kStages = STAGES;
    static constexpr int kThreads = WM * WN * 32;
    static constexpr int kSmem = STAGES * (BM + BN) * BK * 2;
};

template <class T, int MODE, class Cfg, bool QB = false>
__global__ void __launch_bounds__(Cfg::kThreads) conv_mma_kernel(const Args args) {
    kernel_entry();
    constexpr int BM = Cfg::kBM, BN = Cfg::kBN, BK = Cfg::kBK, NT = Cfg::kThreads, STAGES = Cfg::kStages;
    constexpr int KS = BK / 16;
    constexpr int WTM = BM / Cfg::kWM, WTN = BN / Cfg::kWN, MT = WTM / 16, NT8 = WTN / 8;
    static_assert(WTM % 16 == 0 && WTN % 16 == 0 && (BK == 32 || BK == 64), "tile");
    using Ld = TileLoader<T, MODE, BM, BN, BK, NT, QB, false>;
    constexpr bool A_KMAJ = Ld::A_KMAJ, B_KMAJ = Ld::B_KMAJ;
    constexpr int A_ELEMS = Ld::A_ELEMS, STAGE = (BM + BN) * BK;
    static_assert(!QB || (MODE != kWgrad && STAGES >= 3), "a quantized B tile is stored one iteration late");

    extern __shared__ __align__(128) unsigned char smem_raw[];
    T* smem = reinterpret_cast<T*>(smem_raw);
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm = warp / Cfg::kWN, wn = warp % Cfg::kWN;
    const int phase = int(blockIdx.z) / args.splits, split = int(blockIdx.z) % args.splits;
    const int m0 = int(blockIdx.x / args.n_tiles) * BM, n0 = int(blockIdx.x % args.n_tiles) * BN;
    const Prob p = make_prob(args.g, MODE, phase);
    if (m0 >= p.M) return;
    const int KT = ceil_div(p.K, BK);
    const int kt0 = int(int64_t(KT) * split / args.splits), kt1 = int(int64_t(KT) * (split + 1) / args.splits);
    Ld ld(args, p, tid, m0, n0, kt0);
    auto load_tile = [&](int stage, int kt) { ld.load(smem + stage * STAGE, kt); };
    auto store_codes = [&](int stage) { ld.store_codes(smem + stage * STAGE + A_ELEMS); };

    uint32_t af[2][MT][4], bfr[2][NT8][2];
    auto load_frags = [&](int buf, int stage, int ks) {
        const T* sA = smem + stage * STAGE;
        const T* sB = sA + A_ELEMS;
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            const int mb = wm * WTM + mt * 16;
            if constexpr (A_KMAJ) {
                ldsm_x4(af[buf][mt], sA + off_k<BK>(mb + (lane & 15), ks * 2 + (lane >> 4)));
            } else {
                int kr = ks * 16 + (lane & 7) + ((lane >> 4) << 3);
                ldsm_x4_t(af[buf][mt], sA + off_mn<BM>(kr, (mb >> 3) + ((lane >> 3) & 1)));
            }
        }
#pragma unroll
        for (int np = 0; np < NT8 / 2; np++) {
            const int nb = wn * WTN + np * 16;
            uint32_t r[4];
            if constexpr (B_KMAJ) {
                ldsm_x4(r, sB + off_k<BK>(nb + (lane & 7) + ((lane >> 4) << 3), ks * 2 + ((lane >> 3) & 1)));
            } else {
                int kr = ks * 16 + (lane & 7) + (((lane >> 3) & 1) << 3);
                ldsm_x4_t(r, sB + off_mn<BN>(kr, (nb >> 3) + (lane >> 4)));
            }
            bfr[buf][2 * np][0] = r[0]; bfr[buf][2 * np][1] = r[1];
            bfr[buf][2 * np + 1][0] = r[2]; bfr[buf][2 * np + 1][1] = r[3];
        }
    };

    float acc[MT][NT8][4];
#pragma unroll
    for (int i = 0; i < MT; i++)
#pragma unroll
        for (int j = 0; j < NT8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[i][j][e] = 0.f;

    // Multistage main loop: fragments of step ks+1 are read from shared memory while the MMAs
    // of step ks run; the barrier sits one step before the stage switch.
    const int nkt = kt1 - kt0;
#pragma unroll
    for (int s = 0; s < STAGES - 1; s++) {
        if (s < nkt) {
            load_tile(s, kt0 + s);
            store_codes(s);
        }
        cp_async_commit();
    }
    cp_async_wait<STAGES - 2>();
    __syncthreads();
    int rd = 0, wr = STAGES - 1;
    if (nkt > 0) load_frags(0, 0, 0);
    for (int it = 0; it < nkt; it++) {
        // QB: the slot written this iteration was last read before the previous iteration's barrier
        // and is first read after the next one (STAGES >= 3), so its codes are stored at the end.
        const int fetched = it + STAGES - 1 < nkt ? wr : -1;
#pragma unroll
        for (int ks = 0; ks < KS; ks++) {
            if (ks == KS - 1) rd = rd + 1 == STAGES ? 0 : rd + 1;
            if (ks < KS - 1 || it + 1 < nkt) load_frags((ks + 1) & 1, rd, (ks + 1) % KS);
            if (ks == 0) {
                if (fetched >= 0) load_tile(wr, kt0 + it + STAGES - 1);
                cp_async_commit();
                wr = wr + 1 == STAGES ? 0 : wr + 1;
            }
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int nt = 0; nt < NT8; nt++)
                    mma16816<T>(acc[mt][nt], af[ks & 1][mt], bfr[ks & 1][nt][0], bfr[ks & 1][nt][1]);
            if (ks == KS - 2) {
                cp_async_wait<STAGES - 2>();
                __syncthreads();
            }
        }
        if (fetched >= 0) store_codes(fetched);
    }
    cp_async_wait<0>();

    const int gr = lane >> 2, tc = (lane & 3) * 2;
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int nt = 0; nt < NT8; nt++) {
            int m = m0 + wm * WTM + mt * 16 + gr, n = n0 + wn * WTN + nt * 8 + tc;
            store_pair<T>(args, p, MODE, split, m, n, acc[mt][nt][0], acc[mt][nt][1]);
            store_pair<T>(args, p, MODE, split, m + 8, n, acc[mt][nt][2], acc[mt][nt][3]);
        }
}

}  // namespace gl::convk
