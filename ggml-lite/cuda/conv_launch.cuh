// Convolution, part 3: tile-configuration table, the planner (tile shape and split-K count from
// the shapes alone, so the runtime can size the workspace once) and the raw launchers used by
// cuda/conv.cu and bench/conv_check.cu. Launchers allocate nothing and never synchronize.
#pragma once
#include <algorithm>
#include <cmath>

#include "ggml-lite/cuda/conv_simt.cuh"
#include "ggml-lite/cuda/conv_sm90.cuh"
#include "ggml-lite/cuda/device.cuh"

namespace gl::convk {

// Tensor-core tile configurations: block tile BMxBNxBK, warps WMxWN, pipeline stages. Each one
// wins on some SD1.5 shape (bench/conv_check.cu --sweep, H200).
using Cfg0 = MmaCfg<128, 128, 64, 2, 2, 3>;
using Cfg1 = MmaCfg<256, 128, 32, 4, 2, 4>;
using Cfg2 = MmaCfg<256, 128, 64, 4, 2, 3>;
using Cfg3 = MmaCfg<128, 64, 64, 2, 2, 3>;
using Cfg4 = MmaCfg<128, 64, 32, 2, 2, 4>;
using Cfg5 = MmaCfg<64, 128, 64, 2, 2, 3>;
using Cfg6 = MmaCfg<64, 64, 64, 2, 2, 4>;
using Cfg7 = MmaCfg<128, 128, 64, 2, 4, 3>;
constexpr int kNumCfg = 8;
constexpr int kMaxSplits = 8;

struct MmaEntry {
    int bm, bn, bk, threads, smem;
    double eff;  // fitted relative per-SM throughput (see est_seconds)
    bool wgmma = false;  // a conv_sm90.cuh tile (its own utilisation curve in est_seconds)
    void (*launch)(const Args&, dim3, cudaStream_t);  // nullptr: the entry does not exist for this mode
    int (*occupancy)();  // resident blocks per SM
};

// One kernel of the table: Kern is a conv_mma_kernel or conv_wgmma_kernel instance, Cfg its tile.
template <auto Kern, class Cfg>
struct TableKernel {
    static void set_attr() {
        // Once per kernel (raising the dynamic shared-memory limit is not a stream operation).
        static const cudaError_t e = cudaFuncSetAttribute(Kern, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmem);
        (void)e;
    }
    static void launch(const Args& a, dim3 grid, cudaStream_t s) {
        set_attr();
        Kern<<<grid, Cfg::kThreads, Cfg::kSmem, s>>>(a);
    }
    static int occupancy() {
        static const int occ = [] {
            set_attr();
            int n = 0;
            if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, Kern, Cfg::kThreads, Cfg::kSmem) != cudaSuccess) n = 1;
            return std::max(n, 1);
        }();
        return occ;
    }
    static MmaEntry entry(double eff) {
        return {Cfg::kBM, Cfg::kBN, Cfg::kBK, Cfg::kThreads, Cfg::kSmem, eff, false, &launch, &occupancy};
    }
};
template <class T, int MODE, class Cfg, bool QB = false>
using MmaKernel = TableKernel<conv_mma_kernel<T, MODE, Cfg, QB>, Cfg>;

// The wgmma tiles (sm_90a, conv_sm90.cuh): forward and input gradient; the input gradient's
// N-major B needs BN % 64 == 0, so WgCfgC (BN = 160) is forward only.
using WgCfgA = WgConvCfg<64, 4>;
using WgCfgB = WgConvCfg<128, 3>;
using WgCfgC = WgConvCfg<160, 3>;
using WgCfgD = WgConvCfg<128, 4>;
constexpr int kNumWg = 4, kMaxCfg = kNumCfg + kNumWg;

template <class T, int MODE, class Cfg>
MmaEntry wg_entry(double eff) {
    if constexpr (MODE == kWgrad || (MODE == kDgrad && Cfg::kBN % 64 != 0)) {
        return {Cfg::kBM, Cfg::kBN, Cfg::kBK, Cfg::kThreads, Cfg::kSmem, eff, false, nullptr, nullptr};
    } else {
        MmaEntry e = TableKernel<conv_wgmma_kernel<T, MODE, Cfg>, Cfg>::entry(eff);
        e.wgmma = true;
        return e;
    }
}

// The wgmma tiles' ratings: fitted (bench/RESULTS.md, eighteenth session) to conv_check's sweep of
// the SD1.5 shapes at batches 8 and 2 on an H200, per mode (forward, input gradient), with the
// utilisation of one resident block an SM at kWgOneBlock of two. GL_CONV_MODEL=0 restores the
// earlier ratings (one rating for both modes, no such penalty) for comparisons.
inline bool conv_model_v0() {
    static const bool v0 = env_number("GL_CONV_MODEL", 1) == 0;
    return v0;
}
constexpr double kWgEff[2][kNumWg] = {{1.52, 1.36, 1.81, 2.01}, {1.03, 1.41, 1.0, 1.62}};
constexpr double kWgEffV0[kNumWg] = {1.30, 1.45, 1.50, 1.45};
constexpr double kWgOneBlock = 0.775;
template <int MODE>
double wg_eff(int i) {
    return conv_model_v0() || MODE == kWgrad ? kWgEffV0[i] : kWgEff[MODE == kFwd ? 0 : 1][i];
}

// The mma.sync entries (every GPU) followed by the wgmma ones (taken where conv_wgmma_usable()).
template <class T, int MODE>
const MmaEntry* mma_table() {
    static const MmaEntry t[kMaxCfg] = {
        MmaKernel<T, MODE, Cfg0>::entry(1.062), MmaKernel<T, MODE, Cfg1>::entry(0.992),
        MmaKernel<T, MODE, Cfg2>::entry(1.135), MmaKernel<T, MODE, Cfg3>::entry(0.877),
        MmaKernel<T, MODE, Cfg4>::entry(0.591), MmaKernel<T, MODE, Cfg5>::entry(0.859),
        MmaKernel<T, MODE, Cfg6>::entry(0.773), MmaKernel<T, MODE, Cfg7>::entry(1.030),
        wg_entry<T, MODE, WgCfgA>(wg_eff<MODE>(0)), wg_entry<T, MODE, WgCfgB>(wg_eff<MODE>(1)),
        wg_entry<T, MODE, WgCfgC>(wg_eff<MODE>(2)), wg_entry<T, MODE, WgCfgD>(wg_eff<MODE>(3)),
    };
    return t;
}

// A quantized weight (forward, input grad): three of the BK = 64 tiles (fewer configurations keep
// the build short). Its B chunks wait in registers for a k-tile, so the 4-warp 128 x 128 tile
// (64 x 64 per warp) would spill (ptxas, sm_90a): its 8-warp form takes that size.
constexpr int kNumQuantCfg = 3;
template <class T, int MODE>
const MmaEntry* mma_quant_table() {
    static const MmaEntry t[kNumQuantCfg] = {
        MmaKernel<T, MODE, Cfg7, true>::entry(1.030),
        MmaKernel<T, MODE, Cfg3, true>::entry(0.877),
        MmaKernel<T, MODE, Cfg6, true>::entry(0.773),
    };
    return t;
}

struct MmaTable {
    const MmaEntry* e;
    int n;  // entries to consider; an entry with launch == nullptr is skipped
};
template <class T>
MmaTable mma_table_for(int mode, bool quant = false) {
    if (quant) return {mode == kFwd ? mma_quant_table<T, kFwd>() : mma_quant_table<T, kDgrad>(), kNumQuantCfg};
    const int n = mode != kWgrad && conv_wgmma_usable() ? kMaxCfg : kNumCfg;
    return {mode == kFwd ? mma_table<T, kFwd>() : mode == kDgrad ? mma_table<T, kDgrad>() : mma_table<T, kWgrad>(), n};
}

constexpr size_t kMaxSplitWorkspace = size_t(32) << 20;

struct ConvPlan {
    bool mma = false;
    int cfg = -1, splits = 1, phases = 1, m_tiles = 1, n_tiles = 1;
    int64_t out_elems = 0;
    size_t ws_bytes = 0;
};

inline int64_t out_elems_of(int mode, const Geom& g) {
    if (mode == kFwd) return int64_t(g.N) * g.Ho * g.Wo * g.Co;
    if (mode == kDgrad) return int64_t(g.N) * g.H * g.W * g.C;
    return int64_t(g.Co) * g.k * g.k * g.C;
}

inline int max_splits_for(int64_t out_elems, int cap) {
    int64_t by_ws = int64_t(kMaxSplitWorkspace / 4) / std::max<int64_t>(1, out_elems);
    return int(std::max<int64_t>(1, std::min<int64_t>(cap, by_ws)));
}

// Shape-only eligibility for the tensor-core path (pointer alignment is checked at launch).
inline bool mma_shape_ok(int mode, const Geom& g, int elem_bytes) {
    if (elem_bytes != 2 || g.C % 8 != 0) return false;
    return mode == kFwd || g.Co % 8 == 0;
}

// Estimated time (arbitrary units, only compared) of a tile shape and split count. Blocks run in
// waves of `occ` per SM; an SM holding fewer warps gets a lower rate; every block pays a fixed
// prologue/epilogue of a few K tiles; splits add their fp32 partial traffic. Constants fitted to
// the bf16 sweep of the SD1.5 shapes on an H200 (how close its choices come: bench/RESULTS.md).
struct ModelConst {
    static constexpr double rate = 600e12 / 132, util0 = 0.781, tiles_fixed = 3.044;
    static constexpr double split_bytes = 3.068, split_fixed = 2.6e-7;
    static constexpr double mode_scale[3] = {1.0, 1.298, 0.602};
};

inline double est_seconds(int mode, const Geom& g, const MmaEntry& e, int occ, int splits, int sms) {
    const int phases = mode == kDgrad ? g.S * g.S : 1, warps = e.threads / 32;
    int64_t blocks = 0;
    double flops_block_max = 0;
    for (int ph = 0; ph < phases; ph++) {
        Prob p = make_prob(g, mode, ph);
        if (p.M == 0) continue;
        int64_t tiles = int64_t(ceil_div(p.M, e.bm)) * ceil_div(p.NG, e.bn);
        blocks += tiles * splits;
        int kt = ceil_div(ceil_div(p.K, e.bk), splits);
        flops_block_max = std::max(flops_block_max, 2.0 * e.bm * e.bn * (kt + ModelConst::tiles_fixed) * e.bk);
    }
    if (blocks == 0) return 0;
    const double sm_rate = ModelConst::rate * e.eff * ModelConst::mode_scale[mode];
    const bool one_block_penalty = e.wgmma && !conv_model_v0();
    auto wave = [&](int j) {
        double util = one_block_penalty ? (j >= 2 ? 1.0 : kWgOneBlock)
                                        : std::min(1.0, ModelConst::util0 + (1.0 - ModelConst::util0) * j * warps / 8.0);
        return j * flops_block_max / (sm_rate * util);
    };
    const int64_t slots = int64_t(occ) * sms, full = blocks / slots, rem = blocks % slots;
    double t = double(full) * wave(occ) + (rem ? wave(int(ceil_div(rem, sms))) : 0.0);
    if (splits > 1)
        t += (splits * ModelConst::split_bytes + 2.0) * double(out_elems_of(mode, g)) / 3.0e12 + ModelConst::split_fixed;
    return t;
}

// The (config, splits) with the least estimate; splits must win by 3 %. occ[c]: blocks per SM.
// force_cfg / force_splits: bench overrides (-1 / 0 = choose).
inline void choose_mma(int mode, const Geom& g, MmaTable tab, const int* occ, int sms, int force_cfg,
                       int force_splits, int* cfg, int* splits) {
    const Prob p0 = make_prob(g, mode, 0);
    const int max_s = max_splits_for(out_elems_of(mode, g), kMaxSplits);
    double best = 1e300;
    *cfg = -1;
    *splits = 1;
    for (int c = 0; c < tab.n; c++) {
        if ((force_cfg >= 0 && c != force_cfg) || !tab.e[c].launch) continue;
        const int kt_total = (p0.K + tab.e[c].bk - 1) / tab.e[c].bk;
        for (int s = 1; s <= max_s; s++) {
            if (force_splits > 0 && s != force_splits) continue;
            if (force_splits == 0 && s > 1 && kt_total / s < 4) break;
            double t = est_seconds(mode, g, tab.e[c], occ[c], s, sms) * (s > 1 ? 1.03 : 1.0);
            if (t < best) { best = t; *cfg = c; *splits = s; }
        }
    }
    if (*cfg < 0) { *cfg = force_cfg >= 0 && force_cfg < tab.n && tab.e[force_cfg].launch ? force_cfg : 0; *splits = 1; }
}

// quant: the weight operand is quantized (Args::b_scale), which has its own tile table.
template <class T>
ConvPlan plan_conv(int mode, const Geom& g, int force_cfg = -1, int force_splits = 0, bool quant = false) {
    ConvPlan pl;
    pl.phases = mode == kDgrad ? g.S * g.S : 1;
    pl.out_elems = out_elems_of(mode, g);
    const Prob p0 = make_prob(g, mode, 0);  // phase 0 has the most rows
    pl.mma = mma_shape_ok(mode, g, int(sizeof(T)));
    if constexpr (sizeof(T) == 2) {
        if (pl.mma) {
            const MmaTable tab = mma_table_for<T>(mode, quant);
            int occ[kMaxCfg];
            for (int c = 0; c < tab.n; c++) occ[c] = tab.e[c].launch ? tab.e[c].occupancy() : 0;
            choose_mma(mode, g, tab, occ, sm_count(), force_cfg, force_splits, &pl.cfg, &pl.splits);
            pl.m_tiles = (p0.M + tab.e[pl.cfg].bm - 1) / tab.e[pl.cfg].bm;
            pl.n_tiles = (p0.NG + tab.e[pl.cfg].bn - 1) / tab.e[pl.cfg].bn;
        }
    }
    if (!pl.mma) {
        const int max_s = max_splits_for(pl.out_elems, 16);
        int64_t tiles = int64_t(ceil_div(p0.M, kSimtBM)) * ceil_div(p0.NG, kSimtBN) * pl.phases;
        int kts = ceil_div(p0.K, kSimtBK);
        int s = 1;
        if (force_splits > 0) s = std::min(force_splits, max_s);
        else
            while (s < max_s && tiles * s < 2 * sm_count() && kts / (s * 2) >= 16) s *= 2;
        pl.splits = std::min(s, max_s);
        pl.m_tiles = ceil_div(p0.M, kSimtBM);
        pl.n_tiles = ceil_div(p0.NG, kSimtBN);
    }
    pl.ws_bytes = pl.splits > 1 ? size_t(pl.splits) * size_t(pl.out_elems) * 4 : 0;
    return pl;
}

template <class T, int MODE>
void launch_simt(const Args& a, dim3 grid, cudaStream_t s) {
    conv_simt_kernel<T, MODE><<<grid, 256, 0, s>>>(a);
}

// A quantized weight operand b (forward and input grad): its codes' dtype and f32 scale per Cout.
struct QuantB {
    const float* scale = nullptr;  // nullptr: b is dense
    DType codes = DType::i8;
};

// Runs one convolution. a/b per Args; out dense; ws at least plan.ws_bytes; residual (forward and
// input grad, nullptr: none) out's dtype and shape, dense, added once after the split sum. Returns
// an error message (nullptr on success); launch errors are left for the caller's cudaGetLastError.
template <class T>
const char* launch_conv(int mode, const Geom& g, const void* a, const void* b, const void* bias, void* out,
                        void* ws, size_t ws_bytes, cudaStream_t st, int force_cfg = -1, int force_splits = 0,
                        int linear_k = 0, QuantB qb = {}, const void* residual = nullptr) {
    const int64_t lim = int64_t(1) << 31;
    if (int64_t(g.N) * g.H * g.W * g.C >= lim || int64_t(g.N) * g.Ho * g.Wo * g.Co >= lim ||
        int64_t(g.Co) * g.k * g.k * g.C >= lim)
        return "tensor too large for 32-bit indexing";
    const bool quant = qb.scale != nullptr;
    if (quant && mode == kWgrad) return "a quantized weight has no weight gradient";
    if (quant && qb.codes != DType::i8 && qb.codes != DType::f8e4m3) return "quantized codes must be i8 or f8e4m3";
    if (residual && mode == kWgrad) return "a weight gradient takes no residual";
    ConvPlan pl = plan_conv<T>(mode, g, force_cfg, force_splits, quant);
    if (pl.out_elems == 0) return nullptr;
    if (pl.ws_bytes > ws_bytes) return "workspace too small";
    if (int64_t(pl.phases) * pl.splits > 65535) return "stride too large (grid z limit)";
    Args args{g, a, b, mode == kFwd ? bias : nullptr, out, static_cast<float*>(ws), pl.out_elems, pl.splits, 1, 1, linear_k,
              qb.scale, qb.codes, residual};
    const bool b_ok = quant ? (reinterpret_cast<uintptr_t>(b) & 7) == 0 : aligned16(b);  // codes: 8-byte chunks
    bool mma = pl.mma && aligned16(a) && b_ok && ((reinterpret_cast<uintptr_t>(out) | reinterpret_cast<uintptr_t>(residual)) & 3) == 0;
    if constexpr (sizeof(T) == 2) {
        if (mma) {
            args.m_tiles = pl.m_tiles;
            args.n_tiles = pl.n_tiles;
            dim3 grid(unsigned(int64_t(pl.m_tiles) * pl.n_tiles), 1, unsigned(pl.phases * pl.splits));
            mma_table_for<T>(mode, quant).e[pl.cfg].launch(args, grid, st);
        }
    } else {
        mma = false;
    }
    if (!mma) {
        const Prob p0 = make_prob(g, mode, 0);
        args.m_tiles = ceil_div(p0.M, kSimtBM);
        args.n_tiles = ceil_div(p0.NG, kSimtBN);
        dim3 grid(unsigned(int64_t(args.m_tiles) * args.n_tiles), 1, unsigned(pl.phases * pl.splits));
        if (mode == kFwd) launch_simt<T, kFwd>(args, grid, st);
        else if (mode == kDgrad) launch_simt<T, kDgrad>(args, grid, st);
        else launch_simt<T, kWgrad>(args, grid, st);
    }
    if (pl.splits > 1) {
        splitk_reduce_kernel<T><<<grid_for(pl.out_elems, 256, 132 * 16), 256, 0, st>>>(
            static_cast<const float*>(ws), pl.splits, pl.out_elems, static_cast<T*>(out),
            static_cast<const T*>(args.bias), g.Co, static_cast<const T*>(residual));
    }
    return nullptr;
}

template <class T>
size_t conv_workspace(int mode, const Geom& g, bool quant = false) {
    return plan_conv<T>(mode, g, -1, 0, quant).ws_bytes;
}

// ---- upsample launchers: x [N,H,W,C] -> y [N,2H,2W,C] and back ----

template <class Wd>
void launch_up_words(const void* x, void* y, int64_t pixels, int W, int64_t row_bytes, cudaStream_t s) {
    const int CV = int(row_bytes / int64_t(sizeof(Wd)));
    upsample2x_kernel<Wd><<<grid_for(pixels * CV, 256, 132 * 32), 256, 0, s>>>(static_cast<const Wd*>(x),
                                                                               static_cast<Wd*>(y), pixels, W, CV);
}

inline void launch_upsample2x(const void* x, void* y, int N, int H, int W, int64_t row_bytes, cudaStream_t s) {
    const int64_t pixels = int64_t(N) * H * W;
    if (pixels == 0 || row_bytes == 0) return;
    uintptr_t al = reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(y) | uintptr_t(row_bytes);
    if (al % 16 == 0) launch_up_words<uint4>(x, y, pixels, W, row_bytes, s);
    else if (al % 8 == 0) launch_up_words<uint2>(x, y, pixels, W, row_bytes, s);
    else if (al % 4 == 0) launch_up_words<uint32_t>(x, y, pixels, W, row_bytes, s);
    else if (al % 2 == 0) launch_up_words<uint16_t>(x, y, pixels, W, row_bytes, s);
    else launch_up_words<uint8_t>(x, y, pixels, W, row_bytes, s);
}

// gy [N,2H,2W,C] -> dx [N,H,W,C].
template <class T>
void launch_upsample2x_grad(const T* gy, T* dx, int N, int H, int W, int C, cudaStream_t s) {
    const int64_t pixels = int64_t(N) * H * W;
    if (pixels == 0 || C == 0) return;
    constexpr int V = 16 / int(sizeof(T));
    const bool vec = C % V == 0 && aligned16(gy) && aligned16(dx);
    const unsigned blocks = grid_for(pixels * (vec ? C / V : C), 256, 132 * 32);
    if (vec) upsample2x_grad_kernel<T, V><<<blocks, 256, 0, s>>>(gy, dx, pixels, W, C);
    else upsample2x_grad_kernel<T, 1><<<blocks, 256, 0, s>>>(gy, dx, pixels, W, C);
}

}  // namespace gl::convk
