// Device code of the portable (sm_80+) GEMM paths: mma.sync tensor-core kernel, split-K
// reduction, exact fp32 FFMA kernel, and their launchers. Included by gemm.cuh (which documents
// the layouts) and gemm_sm90.cuh (which shares the epilogue and the launch plumbing).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "ggml-lite/cuda/check.cuh"
#include "ggml-lite/cuda/device.cuh"
#include "ggml-lite/cuda/gemm_args.cuh"
#include "ggml-lite/cuda/primitives.cuh"

namespace gl::gemm {

// alpha, bias, residual on one fp32 value of C[b][m][n].
template <class T>
__device__ __forceinline__ float apply_epilogue(const Epilogue& e, float v, int64_t b, int64_t m, int64_t n) {
    v *= e.alpha;
    if (e.bias) v += to_f32(static_cast<const T*>(e.bias)[n]);
    if (e.residual) v += to_f32(static_cast<const T*>(e.residual)[b * e.sr + m * e.ldr + n]);
    return v;
}

// ---------------- tensor-core kernel ----------------

// Block tile BM x BN x BK, WM x WN warps (warp tile BM/WM x BN/WN), STAGES-deep pipeline,
// MINB blocks per SM asked of the register allocator.
template <int BM_, int BN_, int BK_, int WM_, int WN_, int STAGES_, int MINB_>
struct TileCfg {
    static constexpr int BM = BM_, BN = BN_, BK = BK_, WM = WM_, WN = WN_, STAGES = STAGES_, MINB = MINB_;
    static constexpr int kThreads = WM * WN * 32;
    static constexpr int WTM = BM / WM, WTN = BN / WN, MT = WTM / 16, NT = WTN / 8;
    static constexpr int kPad = 8;  // elements: makes every smem row pitch 16 B mod 128 B
    static_assert(WTM % 16 == 0 && WTN % 16 == 0 && BK % 16 == 0, "warp tile must be whole mma tiles");
    // Elements of one pipeline stage of A (K-contiguous: [BM][BK+pad], else [BK][BM+pad]) and B.
    __host__ __device__ static constexpr int a_elems(bool ta) { return ta ? BK * (BM + kPad) : BM * (BK + kPad); }
    __host__ __device__ static constexpr int b_elems(bool tb) { return tb ? BN * (BK + kPad) : BK * (BN + kPad); }
    __host__ __device__ static constexpr int pipe_bytes(bool ta, bool tb) { return STAGES * (a_elems(ta) + b_elems(tb)) * 2; }
    // The fp32 epilogue tile is staged in passes of whole warp rows so that it fits the pipeline's smem.
    static constexpr int kLds = BN + 8;  // floats; 8 mod 32 banks keeps the float2 writes conflict-free
    __host__ __device__ static constexpr int passes(bool ta, bool tb) {
        int p = 1;
        while (p < WM && (BM / p) * kLds * 4 > pipe_bytes(ta, tb)) p *= 2;
        return p;
    }
    __host__ __device__ static constexpr int smem_bytes(bool ta, bool tb) {
        int stage = (BM / passes(ta, tb)) * kLds * 4, pipe = pipe_bytes(ta, tb);
        return stage > pipe ? stage : pipe;
    }
};

struct MmaParams {
    const void* A;
    const void* B;
    const float* b_scale;  // a quantized B's row scales (GemmArgs), else nullptr
    DType b_codes;
    void* C;
    float* partial;  // split-K: fp32 [splits][batch][M][N]; nullptr writes C through the epilogue
    int M, N, K;
    int64_t lda, ldb, ldc, sA, sB, sC;
    int tiles_n;
    int k_per_split;  // multiple of BK
    int batch;        // total batch (partial indexing)
    int batch0;       // first batch index of this launch (chunks of 65535)
    Epilogue epi;
};

// Writes `rows` rows of a staged fp32 tile (pitch lds floats, BN columns; global rows from gm0,
// columns from n0) to C through the epilogue, or raw to the split-K partials (blockIdx.y = split).
// The NTH threads storing it are numbered tid = 0..NTH-1.
template <class T, int BN, int NTH, bool VEC>
__device__ __forceinline__ void store_staged(const float* stage, int lds, int rows, int gm0, int n0, const MmaParams& p,
                                             int64_t bz, int tid) {
    T* C = static_cast<T*>(p.C) + bz * p.sC;
    for (int i = tid; i < rows * (BN / 8); i += NTH) {
        const int r = i / (BN / 8), c = (i % (BN / 8)) * 8;
        const int gm = gm0 + r, gn = n0 + c;
        if (gm >= p.M || gn >= p.N) continue;
        float v[8];
        *reinterpret_cast<float4*>(v) = *reinterpret_cast<const float4*>(stage + r * lds + c);
        *reinterpret_cast<float4*>(v + 4) = *reinterpret_cast<const float4*>(stage + r * lds + c + 4);
        const int cnt = min(8, p.N - gn);
        if (p.partial) {
            float* dst = p.partial + ((int64_t(blockIdx.y) * p.batch + bz) * p.M + gm) * int64_t(p.N) + gn;
            if (VEC && cnt == 8) {
                *reinterpret_cast<float4*>(dst) = *reinterpret_cast<const float4*>(v);
                *reinterpret_cast<float4*>(dst + 4) = *reinterpret_cast<const float4*>(v + 4);
            } else {
                for (int e = 0; e < cnt; e++) dst[e] = v[e];
            }
            continue;
        }
        T* dst = C + int64_t(gm) * p.ldc + gn;
        if (VEC && cnt == 8) {
            alignas(16) T o[8];
            if (p.epi.alpha == 1.0f && !p.epi.residual && !p.epi.bias) {
#pragma unroll
                for (int e = 0; e < 8; e++) o[e] = from_f32<T>(v[e]);
            } else {
                // apply_epilogue's order; the residual's 8 values in one 16-byte load (vec_ok
                // checked its alignment and strides), read before dst, which it may be.
                alignas(16) T r[8];
                if (p.epi.residual)
                    *reinterpret_cast<uint4*>(r) = *reinterpret_cast<const uint4*>(
                        static_cast<const T*>(p.epi.residual) + bz * p.epi.sr + int64_t(gm) * p.epi.ldr + gn);
#pragma unroll
                for (int e = 0; e < 8; e++) {
                    float x = v[e] * p.epi.alpha;
                    if (p.epi.bias) x += to_f32(static_cast<const T*>(p.epi.bias)[gn + e]);
                    if (p.epi.residual) x += to_f32(r[e]);
                    o[e] = from_f32<T>(x);
                }
            }
            copy16(dst, o);
        } else {
            for (int e = 0; e < cnt; e++) dst[e] = from_f32<T>(apply_epilogue<T>(p.epi, v[e], bz, gm, gn + e));
        }
    }
}

// Loads one operand tile (S strided rows x W contiguous elements, 8-element chunks) into smem
// rows of W + pad. KC: the contiguous dim is k (rows are m or n), else rows are k. Global
// addresses are formed once; each k-tile only adds an offset.
template <class T, int S, int W, int NTH, bool KC, bool VEC>
struct TileLoader {
    static constexpr int CPR = W / 8, CHUNKS = S * CPR, ITERS = ceil_div(CHUNKS, NTH), PITCH = W + 8;
    const T* src[ITERS];
    const T* base0;     // a valid address for zero-filling copies, which read nothing
    int64_t kstep;      // elements per k (1 when KC, else the leading dim)
    int kc[ITERS];      // chunk's k relative to the k-tile start
    int fixed[ITERS];   // valid elements along the fixed (m or n) coordinate, <= 0: none
    int dst[ITERS];     // smem offset; -1: this thread has no chunk in iteration it

    __device__ __forceinline__ void init(const T* base, int64_t ld, int tid, int mn0, int MN, int kbeg) {
        kstep = KC ? 1 : ld;
        base0 = base;
#pragma unroll
        for (int it = 0; it < ITERS; it++) {
            const int i = tid + it * NTH;
            const int r = i / CPR, c = (i % CPR) * 8;
            dst[it] = i < CHUNKS ? r * PITCH + c : -1;
            if (KC) {  // row r is m/n = mn0 + r; k = kbeg + c
                fixed[it] = mn0 + r < MN ? 8 : 0;
                kc[it] = c;
                src[it] = base + int64_t(mn0 + r) * ld + kbeg + c;
            } else {  // row r is k = kbeg + r; m/n = mn0 + c
                fixed[it] = MN - (mn0 + c);
                kc[it] = r;
                src[it] = base + int64_t(kbeg + r) * ld + mn0 + c;
            }
        }
    }
    // k0: k-tile start relative to kbeg; kend: end of this block's k range relative to kbeg.
    __device__ __forceinline__ void load(T* sm, int k0, int kend) const {
#pragma unroll
        for (int it = 0; it < ITERS; it++) {
            if (CHUNKS % NTH != 0 && dst[it] < 0) continue;
            const int kk = k0 + kc[it];
            const T* g = src[it] + int64_t(k0) * kstep;
            T* d = sm + dst[it];
            if constexpr (VEC) {
                const bool ok = fixed[it] > 0 && kk < kend;
                cp_async<16>(smem_u32(d), ok ? g : base0, ok ? 16 : 0);
            } else {
                alignas(16) T v[8];
#pragma unroll
                for (int e = 0; e < 8; e++) {
                    const bool ok = KC ? (fixed[it] > 0 && kk + e < kend) : (e < fixed[it] && kk < kend);
                    v[e] = ok ? g[e] : from_f32<T>(0.0f);
                }
                // spelled out: through copy16 the compiler schedules these loads differently
                *reinterpret_cast<uint4*>(d) = *reinterpret_cast<const uint4*>(v);
            }
        }
    }
};

// The B tile of a quantized weight: TileLoader's chunks and smem layout, read from 8-bit codes
// (8 bytes a chunk) and converted to T with the scale of the chunk's stored row (KC: its n, fixed;
// else its k, per tile). Two steps, so that the global loads of a tile are in flight while the
// previous tile's mmas run: fetch() reads the codes and scales into registers, store() converts
// them and writes the smem tile. Zero codes stand for everything out of range.
template <class T, int S, int W, int NTH, bool KC, bool VEC>
struct CodeTileLoader {
    static constexpr int CPR = W / 8, CHUNKS = S * CPR, ITERS = ceil_div(CHUNKS, NTH), PITCH = W + 8;
    const uint8_t* src[ITERS];
    const float* scale;  // per stored row, from the block's k start (!KC) or absolute (KC)
    DType kind;
    int64_t kstep;
    int kc[ITERS], fixed[ITERS], dst[ITERS];  // as TileLoader's
    uint2 codes[ITERS];
    float row_scale[ITERS];

    __device__ __forceinline__ void init(const uint8_t* base, const float* sc, DType t, int64_t ld, int tid, int mn0,
                                         int MN, int kbeg) {
        kstep = KC ? 1 : ld;
        kind = t;
        scale = KC ? sc : sc + kbeg;
#pragma unroll
        for (int it = 0; it < ITERS; it++) {
            const int i = tid + it * NTH;
            const int r = i / CPR, c = (i % CPR) * 8;
            dst[it] = i < CHUNKS ? r * PITCH + c : -1;
            if (KC) {
                fixed[it] = mn0 + r < MN ? 8 : 0;
                kc[it] = c;
                src[it] = base + int64_t(mn0 + r) * ld + kbeg + c;
                row_scale[it] = fixed[it] > 0 && dst[it] >= 0 ? sc[mn0 + r] : 0.0f;
            } else {
                fixed[it] = MN - (mn0 + c);
                kc[it] = r;
                src[it] = base + int64_t(kbeg + r) * ld + mn0 + c;
            }
        }
    }
    __device__ __forceinline__ void fetch(int k0, int kend) {
#pragma unroll
        for (int it = 0; it < ITERS; it++) {
            if (CHUNKS % NTH != 0 && dst[it] < 0) continue;
            const int kk = k0 + kc[it];
            const uint8_t* g = src[it] + int64_t(k0) * kstep;
            if constexpr (VEC) {
                const bool ok = fixed[it] > 0 && kk < kend;
                codes[it] = ok ? *reinterpret_cast<const uint2*>(g) : make_uint2(0u, 0u);
            } else {
                uint32_t w[2] = {0u, 0u};
#pragma unroll
                for (int e = 0; e < 8; e++) {
                    const bool ok = KC ? (fixed[it] > 0 && kk + e < kend) : (e < fixed[it] && kk < kend);
                    if (ok) w[e / 4] |= uint32_t(g[e]) << (8 * (e % 4));
                }
                codes[it] = make_uint2(w[0], w[1]);
            }
            if (!KC) row_scale[it] = kk < kend ? scale[kk] : 0.0f;
        }
    }
    __device__ __forceinline__ void store(T* sm) const {
#pragma unroll
        for (int it = 0; it < ITERS; it++) {
            if (CHUNKS % NTH != 0 && dst[it] < 0) continue;
            *reinterpret_cast<uint4*>(sm + dst[it]) = dequant8<T>(codes[it], row_scale[it], kind);
        }
    }
};

// QB: B is a quantized weight (MmaParams::b_scale; TA is false then), loaded by CodeTileLoader.
template <class T, class Cfg, bool TA, bool TB, bool VEC, bool QB>
__global__ void __launch_bounds__(Cfg::kThreads, Cfg::MINB) mma_gemm_kernel(MmaParams p) {
    kernel_entry();
    constexpr int BM = Cfg::BM, BN = Cfg::BN, BK = Cfg::BK, STAGES = Cfg::STAGES, NTH = Cfg::kThreads;
    constexpr int MT = Cfg::MT, NT = Cfg::NT, PAD = Cfg::kPad;
    constexpr int A_EL = Cfg::a_elems(TA), B_EL = Cfg::b_elems(TB);
    extern __shared__ __align__(128) unsigned char smem_raw[];
    T* smA = reinterpret_cast<T*>(smem_raw);
    T* smB = smA + STAGES * A_EL;

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm = warp / Cfg::WN, wn = warp % Cfg::WN;
    const int tile = blockIdx.x;
    const int m0 = (tile / p.tiles_n) * BM, n0 = (tile % p.tiles_n) * BN;
    const int64_t bz = int64_t(blockIdx.z) + p.batch0;
    const T* A = static_cast<const T*>(p.A) + bz * p.sA;
    const int kbeg = blockIdx.y * p.k_per_split;
    const int kend = max(0, min(p.K, kbeg + p.k_per_split) - kbeg);  // relative to kbeg
    // written out: through ceil_div the compiler no longer uses kend >= 0 (a signed division)
    const int ktiles = (kend + BK - 1) / BK;

    // A tile is S strided rows of W contiguous elements: K-contiguous operands have S = BM or BN
    // rows (m or n) of W = BK; the others S = BK rows (k) of W = BM or BN.
    static_assert(!QB || !TA, "a quantized B takes a row-major A");
    TileLoader<T, (TA ? BK : BM), (TA ? BM : BK), NTH, !TA, VEC> la;
    std::conditional_t<QB, CodeTileLoader<T, (TB ? BN : BK), (TB ? BK : BN), NTH, TB, VEC>,
                       TileLoader<T, (TB ? BN : BK), (TB ? BK : BN), NTH, TB, VEC>>
        lb;
    la.init(A, p.lda, tid, m0, p.M, kbeg);
    if constexpr (QB)
        lb.init(static_cast<const uint8_t*>(p.B), p.b_scale, p.b_codes, p.ldb, tid, n0, p.N, kbeg);
    else
        lb.init(static_cast<const T*>(p.B) + bz * p.sB, p.ldb, tid, n0, p.N, kbeg);
    // A quantized B tile is fetched with A's copies and stored after the mmas of the tile in flight.
    auto load_stage = [&](int slot, int kt) {
        la.load(smA + slot * A_EL, kt * BK, kend);
        if constexpr (QB) lb.fetch(kt * BK, kend);
        else lb.load(smB + slot * B_EL, kt * BK, kend);
    };

    float acc[MT][NT][4];
#pragma unroll
    for (int i = 0; i < MT; i++)
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int q = 0; q < 4; q++) acc[i][j][q] = 0.0f;

#pragma unroll
    for (int s = 0; s < STAGES - 1; s++) {
        if (s < ktiles) {
            load_stage(s, s);
            if constexpr (QB) lb.store(smB + s * B_EL);
        }
        cp_async_commit();
    }

    // ldmatrix lane roles: lane l addresses row (l % 8) of 8x8 matrix (l / 8).
    const int mi = lane >> 3, mr = lane & 7;
    for (int kt = 0; kt < ktiles; kt++) {
        cp_async_wait<STAGES - 2>();
        __syncthreads();  // stage kt landed for everyone; slot (kt-1) % STAGES is free again
        const int nk = kt + STAGES - 1;
        if (nk < ktiles) load_stage(nk % STAGES, nk);
        cp_async_commit();
        const T* sa = smA + (kt % STAGES) * A_EL;
        const T* sb = smB + (kt % STAGES) * B_EL;
#pragma unroll
        for (int ks = 0; ks < BK / 16; ks++) {
            uint32_t af[MT][4], bf[NT][2];
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                const int rb = wm * Cfg::WTM + mt * 16;
                if constexpr (!TA) {
                    ldsm_x4(af[mt], sa + (rb + (lane & 15)) * (BK + PAD) + ks * 16 + (lane >> 4) * 8);
                } else {
                    ldsm_x4_t(af[mt], sa + (ks * 16 + (mi >> 1) * 8 + mr) * (BM + PAD) + rb + (mi & 1) * 8);
                }
            }
#pragma unroll
            for (int np = 0; np < NT / 2; np++) {
                const int cb = wn * Cfg::WTN + np * 16;
                uint32_t r[4];
                if constexpr (TB) {
                    ldsm_x4(r, sb + (cb + (mi >> 1) * 8 + mr) * (BK + PAD) + ks * 16 + (mi & 1) * 8);
                } else {
                    ldsm_x4_t(r, sb + (ks * 16 + (mi & 1) * 8 + mr) * (BN + PAD) + cb + (mi >> 1) * 8);
                }
                bf[2 * np][0] = r[0];
                bf[2 * np][1] = r[1];
                bf[2 * np + 1][0] = r[2];
                bf[2 * np + 1][1] = r[3];
            }
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int nt = 0; nt < NT; nt++) mma16816<T>(acc[mt][nt], af[mt], bf[nt][0], bf[nt][1]);
        }
        // The slot of tile nk was freed by this iteration's barrier and is read after a later one.
        if constexpr (QB)
            if (nk < ktiles) lb.store(smB + (nk % STAGES) * B_EL);
    }
    cp_async_wait<0>();
    __syncthreads();  // the pipeline smem is reused for the epilogue tile

    constexpr int P = Cfg::passes(TA, TB), RP = BM / P, LDS = Cfg::kLds, WPP = Cfg::WM / P;
    float* stage = reinterpret_cast<float*>(smem_raw);
    const int g = lane >> 2, t = lane & 3;
#pragma unroll 1
    for (int pass = 0; pass < P; pass++) {
        if (wm / WPP == pass) {
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int nt = 0; nt < NT; nt++) {
                    const int r = (wm % WPP) * Cfg::WTM + mt * 16 + g, c = wn * Cfg::WTN + nt * 8 + 2 * t;
                    *reinterpret_cast<float2*>(stage + r * LDS + c) = make_float2(acc[mt][nt][0], acc[mt][nt][1]);
                    *reinterpret_cast<float2*>(stage + (r + 8) * LDS + c) = make_float2(acc[mt][nt][2], acc[mt][nt][3]);
                }
        }
        __syncthreads();
        store_staged<T, BN, NTH, VEC>(stage, LDS, RP, m0 + pass * RP, n0, p, bz, threadIdx.x);
        if (pass + 1 < P) __syncthreads();
    }
}

// Sums the split-K partials in split order and applies the epilogue.
template <class T>
__global__ void splitk_reduce_kernel(const float* __restrict__ part, T* C, int splits, int batch, int M, int N,
                                     int64_t ldc, int64_t sC, Epilogue epi) {
    kernel_entry();
    const int64_t per = int64_t(M) * N, total = per * batch;
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
        float s = 0.0f;
        for (int k = 0; k < splits; k++) s += part[int64_t(k) * total + i];
        const int64_t b = i / per, m = (i % per) / N, n = i % N;
        C[b * sC + m * ldc + n] = from_f32<T>(apply_epilogue<T>(epi, s, b, m, n));
    }
}

// ---------------- exact fp32 kernel ----------------

// 64 x 64 tile, K step 16, 256 threads each owning a 4 x 4 grid of outputs strided by 16
// (so neighbouring threads read neighbouring smem words).
template <bool TA, bool TB>
__global__ void __launch_bounds__(256) ffma_gemm_kernel(MmaParams p) {
    kernel_entry();
    __shared__ float As[16][64 + 1], Bs[16][64 + 1];
    const int tid = threadIdx.x, tx = tid & 15, ty = tid >> 4;
    const int m0 = (blockIdx.x / p.tiles_n) * 64, n0 = (blockIdx.x % p.tiles_n) * 64;
    const int64_t bz = int64_t(blockIdx.z) + p.batch0;
    const float* A = static_cast<const float*>(p.A) + bz * p.sA;
    const float* B = p.b_scale ? nullptr : static_cast<const float*>(p.B) + bz * p.sB;
    float acc[4][4] = {};
    for (int k0 = 0; k0 < p.K; k0 += 16) {
#pragma unroll
        for (int q = 0; q < 4; q++) {
            const int e = tid + q * 256;
            int r, k;
            if (!TA) { r = e >> 4; k = e & 15; } else { r = e & 63; k = e >> 6; }
            const int gm = m0 + r, gk = k0 + k;
            As[k][r] = (gm < p.M && gk < p.K) ? (TA ? A[int64_t(gk) * p.lda + gm] : A[int64_t(gm) * p.lda + gk]) : 0.0f;
            int n;
            if (TB) { n = e >> 4; k = e & 15; } else { n = e & 63; k = e >> 6; }
            const int gn = n0 + n, gk2 = k0 + k;
            float bv = 0.0f;
            if (gn < p.N && gk2 < p.K) {
                const int64_t bi = TB ? int64_t(gn) * p.ldb + gk2 : int64_t(gk2) * p.ldb + gn;
                if (p.b_scale)  // a quantized B: code times the scale of its stored row
                    bv = code_to_f32(static_cast<const uint8_t*>(p.B)[bi], p.b_codes) * p.b_scale[TB ? gn : gk2];
                else
                    bv = B[bi];
            }
            Bs[k][n] = bv;
        }
        __syncthreads();
#pragma unroll
        for (int k = 0; k < 16; k++) {
            float a[4], b[4];
#pragma unroll
            for (int i = 0; i < 4; i++) a[i] = As[k][ty + 16 * i];
#pragma unroll
            for (int j = 0; j < 4; j++) b[j] = Bs[k][tx + 16 * j];
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
        }
        __syncthreads();
    }
    float* C = static_cast<float*>(p.C) + bz * p.sC;
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int gm = m0 + ty + 16 * i, gn = n0 + tx + 16 * j;
            if (gm < p.M && gn < p.N) C[int64_t(gm) * p.ldc + gn] = apply_epilogue<float>(p.epi, acc[i][j], bz, gm, gn);
        }
}

// C += bias after a cuBLAS call, which wrote alpha * A B (+ the residual, as its beta * C).
template <class T>
__global__ void cublas_epilogue_kernel(T* C, int batch, int M, int N, int64_t ldc, int64_t sC, Epilogue epi) {
    kernel_entry();
    epi.alpha = 1.0f;
    const int64_t per = int64_t(M) * N, total = per * batch;
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
        const int64_t b = i / per, m = (i % per) / N, n = i % N;
        T* c = C + b * sC + m * ldc + n;
        *c = from_f32<T>(apply_epilogue<T>(epi, to_f32(*c), b, m, n));
    }
}

// C = residual before a cuBLAS call that adds C (beta = 1): the residual's strides may differ from C's.
template <class T>
__global__ void copy_residual_kernel(T* C, int batch, int M, int N, int64_t ldc, int64_t sC, Epilogue epi) {
    kernel_entry();
    const int64_t per = int64_t(M) * N, total = per * batch;
    const T* r = static_cast<const T*>(epi.residual);
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
        const int64_t b = i / per, m = (i % per) / N, n = i % N;
        C[b * sC + m * ldc + n] = r[b * epi.sr + m * epi.ldr + n];
    }
}

// ---------------- launchers ----------------

// Opts a kernel into `bytes` of dynamic shared memory once per device and thread (`done`: one
// bit per device, owned by the launcher). Not a stream operation, so graph capture is unaffected.
inline void allow_smem(const void* kern, int bytes, uint64_t& done) {
    int dev = 0;
    GL_CUDA_CHECK(cudaGetDevice(&dev));
    const uint64_t bit = uint64_t(1) << (dev & 63);
    if (done & bit) return;
    GL_CUDA_CHECK(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
    done |= bit;
}

template <class T>
void launch_splitk_reduce(const GemmArgs& a, int splits, const float* partial, cudaStream_t s) {
    splitk_reduce_kernel<T><<<grid_for(a.batch * a.M * a.N, 256, 65535LL * 8), 256, 0, s>>>(partial, static_cast<T*>(a.C), splits, int(a.batch),
                                                                       int(a.M), int(a.N), a.ldc, a.sC, a.epi);
    GL_CUDA_LAUNCHED();
}

// The problem as every kernel takes it; launchers add tiling, splits and the batch window.
inline MmaParams params_of(const GemmArgs& a) {
    MmaParams p{};
    p.A = a.A;
    p.B = a.B;
    p.b_scale = a.b_scale;
    p.b_codes = a.b_codes;
    p.C = a.C;
    p.M = int(a.M);
    p.N = int(a.N);
    p.K = int(a.K);
    p.lda = a.lda;
    p.ldb = a.ldb;
    p.ldc = a.ldc;
    p.sA = a.sA;
    p.sB = a.sB;
    p.sC = a.sC;
    p.batch = int(a.batch);
    p.epi = a.epi;
    return p;
}

template <class T, class Cfg, bool TA, bool TB, bool VEC, bool QB = false>
void launch_mma(const GemmArgs& a, int splits, float* partial, cudaStream_t s) {
    auto kern = mma_gemm_kernel<T, Cfg, TA, TB, VEC, QB>;
    constexpr int smem = Cfg::smem_bytes(TA, TB);
    static thread_local uint64_t smem_set = 0;
    allow_smem(reinterpret_cast<const void*>(kern), smem, smem_set);
    MmaParams p = params_of(a);
    p.tiles_n = int(ceil_div(a.N, Cfg::BN));
    const int64_t tiles = ceil_div(a.M, Cfg::BM) * p.tiles_n;
    int kps = int(ceil_div(a.K, splits));
    kps = ceil_div(kps, Cfg::BK) * Cfg::BK;
    const int ysplits = splits > 1 && kps > 0 ? int(ceil_div(a.K, kps)) : 1;
    p.k_per_split = ysplits > 1 ? kps : int(a.K > 0 ? a.K : 1);
    p.partial = ysplits > 1 ? partial : nullptr;
    for (int64_t b0 = 0; b0 < a.batch; b0 += 65535) {
        p.batch0 = int(b0);
        const unsigned nz = unsigned(a.batch - b0 < 65535 ? a.batch - b0 : 65535);
        kern<<<dim3(unsigned(tiles), unsigned(ysplits), nz), Cfg::kThreads, smem, s>>>(p);
        GL_CUDA_LAUNCHED();
    }
    if (ysplits > 1) launch_splitk_reduce<T>(a, ysplits, partial, s);
}

inline void launch_ffma(const GemmArgs& a, cudaStream_t s) {
    MmaParams p = params_of(a);
    p.tiles_n = int(ceil_div(a.N, 64));
    const unsigned tiles = unsigned(ceil_div(a.M, 64) * p.tiles_n);
    for (int64_t b0 = 0; b0 < a.batch; b0 += 65535) {
        p.batch0 = int(b0);
        dim3 grid(tiles, 1, unsigned(a.batch - b0 < 65535 ? a.batch - b0 : 65535));
        if (!a.ta && !a.tb) ffma_gemm_kernel<false, false><<<grid, 256, 0, s>>>(p);
        else if (!a.ta && a.tb) ffma_gemm_kernel<false, true><<<grid, 256, 0, s>>>(p);
        else if (a.ta && !a.tb) ffma_gemm_kernel<true, false><<<grid, 256, 0, s>>>(p);
        else ffma_gemm_kernel<true, true><<<grid, 256, 0, s>>>(p);
        GL_CUDA_LAUNCHED();
    }
}

}  // namespace gl::gemm
