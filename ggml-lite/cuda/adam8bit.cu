// Block-wise 8-bit AdamW, Lion, SGD and AdEMAMix, in place (CPU reference: ops/adam8bit.cpp,
// ops/optim_ademamix.cpp); Lion8bit, SGD8bit and AdEMAMix8bit below AdamW8bit reuse its maps, tables,
// loads and layout. AdamW8bit: every tensor of a parameter
// group in one launch (cuda/multi_tensor.cuh): one warp per quantisation block of 256 elements of
// one tensor, 8 per lane; shared-memory copies of both dynamic maps and of the O(1)
// code-search tables (ops/adam8bit_codes.h); the block max is a warp max; one reciprocal of it
// per block scales the moments for requantisation, and a block whose reciprocals are finite
// (all but all-zero or overflowed blocks) takes the in-range code search, about a dozen integer
// operations per moment. Arithmetic uses explicit round-to-nearest intrinsics (no FMA
// contraction) so results match the CPU reference bit for bit. The kernel is bound by issued
// instructions, not bytes, so every instruction per element counts (its bandwidth against a
// device copy: bench/RESULTS.md). Tried and dropped as slower: loads pipelined through shared
// memory by cp.async (fewer resident warps), fewer registers for more warps.
#include <algorithm>
#include <cstring>
#include <mutex>
#include <vector>

#include "ggml-lite/cuda/device.cuh"
#include "ggml-lite/cuda/kernel.cuh"
#include "ggml-lite/cuda/multi_tensor.cuh"
#include "ggml-lite/cuda/optim_common.cuh"
#include "ggml-lite/ops/adam8bit_codes.h"
#include "ggml-lite/ops/optim_ademamix.h"

namespace gl {

__device__ float g_qmaps[512];  // [0, 256): signed map, [256, 512): unsigned map
__device__ uint32_t g_code_tables[kAdam8bitSignedEntries + kAdam8bitUnsignedEntries];

// One warp per quantisation block of 256 elements, 8 consecutive elements per lane (16- and
// 8-byte loads); the block's new absmax is a warp max. Each CTA copies both maps (for
// dequantisation) and both code tables (for the O(1) nearest-code search, 24 KiB) to shared
// memory once and walks quantisation blocks in a grid-stride loop (64 registers: 4 CTAs per SM).
constexpr int kWarps8bit = 8;
constexpr int kTableWords = kAdam8bitSignedEntries + kAdam8bitUnsignedEntries;
static_assert(kTableWords % 4 == 0, "tables are copied as uint4");

__device__ __forceinline__ void load8(float (&dst)[8], const float* src, int64_t base, int64_t n) {
    if (base + 8 <= n) {
        *reinterpret_cast<float4*>(dst) = *reinterpret_cast<const float4*>(src + base);
        *reinterpret_cast<float4*>(dst + 4) = *reinterpret_cast<const float4*>(src + base + 4);
    } else {
#pragma unroll
        for (int j = 0; j < 8; j++) dst[j] = base + j < n ? src[base + j] : 0.0f;
    }
}
__device__ __forceinline__ void load8(uint8_t (&dst)[8], const uint8_t* src, int64_t base, int64_t n, uint8_t pad) {
    if (base + 8 <= n) {
        *reinterpret_cast<uint2*>(dst) = *reinterpret_cast<const uint2*>(src + base);
    } else {
#pragma unroll
        for (int j = 0; j < 8; j++) dst[j] = base + j < n ? src[base + j] : pad;
    }
}

// The update of one lane's 8 elements of quantisation block b (gv, pv, c1, c2 loaded; pv and the
// codes are updated in place), the block max as a warp max. Returns the block's new absmax pair.
struct Consts8bit {
    AdamConsts k;
    Gate gate;
};
__device__ __forceinline__ void update8(const Consts8bit& kc, const float* qs, const float* qu, const uint32_t* ts,
                                        const uint32_t* tu, int64_t base, int64_t n, float am_old, float av_old,
                                        const float (&gv)[8], float (&pv)[8], uint8_t (&c1)[8], uint8_t (&c2)[8],
                                        float& mmax, float& vmax) {
    const AdamConsts& k = kc.k;
    float m[8], v[8];
    bool ok[8];
    mmax = 0.0f;
    vmax = 0.0f;
#pragma unroll
    for (int j = 0; j < 8; j++) {
        const bool in = base + j < n;
        float gi = __fmul_rn(__fmul_rn(gv[j], k.gs), kc.gate.mul);
        m[j] = __fmul_rn(qs[c1[j]], am_old);
        v[j] = __fmul_rn(qu[c2[j]], av_old);
        ok[j] = in && isfinite(gi);
        if (ok[j]) {
            v[j] = __fadd_rn(__fmul_rn(k.b2, v[j]), __fmul_rn(__fsub_rn(1.0f, k.b2), __fmul_rn(gi, gi)));
            m[j] = __fadd_rn(__fmul_rn(k.b1, m[j]), __fmul_rn(__fsub_rn(1.0f, k.b1), gi));
        }
        if (in) {
            mmax = fmaxf(mmax, fabsf(m[j]));
            vmax = fmaxf(vmax, v[j]);
        }
    }
    mmax = warp_max(mmax);
    vmax = warp_max(vmax);
    const float eps = __fmul_rn(k.corr2, k.eps);
#pragma unroll
    for (int j = 0; j < 8; j++) {  // computed for every element, kept where the gradient was finite
        const float upd = __fdiv_rn(m[j], __fadd_rn(__fsqrt_rn(v[j]), eps));
        const float np = __fmul_rn(__fadd_rn(pv[j], __fmul_rn(k.step_size, upd)), k.decay);
        pv[j] = ok[j] ? np : pv[j];
    }
    // Requantisation. When both reciprocals are finite and positive (always, but for an all-zero
    // block or an overflowed moment) every scaled moment is finite, below 2 in magnitude and, for
    // v, >= +0: one multiply and the in-range search each (ops/adam8bit_codes.h); else the
    // general path, which is what the CPU reference does in every case.
    const float inv_m = adam8bit_inverse(mmax), inv_v = adam8bit_inverse(vmax);
    if (inv_m > 0.0f && inv_v > 0.0f && !isinf(inv_m) && !isinf(inv_v)) {
#pragma unroll
        for (int j = 0; j < 8; j++) {
            c1[j] = uint8_t(adam8bit_code_in_range<true>(ts, __fmul_rn(m[j], inv_m)));
            c2[j] = uint8_t(adam8bit_code_in_range<false>(tu, __fmul_rn(v[j], inv_v)));
        }
    } else {
#pragma unroll
        for (int j = 0; j < 8; j++) {
            c1[j] = uint8_t(adam8bit_code<true>(ts, adam8bit_normalize(m[j], mmax, inv_m)));
            c2[j] = uint8_t(adam8bit_code<false>(tu, adam8bit_normalize(v[j], vmax, inv_v)));
        }
    }
}

// Writes one lane's 8 updated elements (vector stores, scalar ones in a tensor's last block).
__device__ __forceinline__ void store8(float* p, uint8_t* cm, uint8_t* cv, int64_t base, int64_t n,
                                       const float (&pv)[8], const uint8_t (&c1)[8], const uint8_t (&c2)[8]) {
    if (base + 8 <= n) {
        *reinterpret_cast<float4*>(p + base) = *reinterpret_cast<const float4*>(pv);
        *reinterpret_cast<float4*>(p + base + 4) = *reinterpret_cast<const float4*>(pv + 4);
        *reinterpret_cast<uint2*>(cm + base) = *reinterpret_cast<const uint2*>(c1);
        *reinterpret_cast<uint2*>(cv + base) = *reinterpret_cast<const uint2*>(c2);
    } else {
        for (int j = 0; j < 8; j++)
            if (base + j < n) {
                p[base + j] = pv[j];
                cm[base + j] = c1[j];
                cv[base + j] = c2[j];
            }
    }
}

// Each CTA copies both maps (dequantisation) and both code tables (the O(1) nearest-code search,
// 24 KiB) to shared memory once.
struct Tables8bit {
    float qs[256], qu[256];
    __align__(16) uint32_t codes[kTableWords];
    __device__ __forceinline__ void fill() {
        for (int i = threadIdx.x; i < 256; i += blockDim.x) {
            qs[i] = g_qmaps[i];
            qu[i] = g_qmaps[256 + i];
        }
        for (int i = threadIdx.x; i < kTableWords / 4; i += blockDim.x)
            reinterpret_cast<uint4*>(codes)[i] = reinterpret_cast<const uint4*>(g_code_tables)[i];
        __syncthreads();
    }
    __device__ __forceinline__ const uint32_t* ts() const { return codes; }
    __device__ __forceinline__ const uint32_t* tu() const { return codes + kAdam8bitSignedEntries; }
};

using Adam8bitTable = TensorTable<6, table_capacity<6>()>;  // param, grad, m codes, v codes, absmax m, absmax v

// Each warp loads a quantisation block into registers, updates, stores; the blocks of every tensor
// of the table (a parameter group) are one grid-stride sequence. 4 CTAs of 8 warps per SM.
__global__ void __launch_bounds__(256, 4) adamw8bit_kernel(const __grid_constant__ Adam8bitTable tt,
                                                                const float* hyper, const float* gstat) {
    kernel_entry();
    const Gate gate = load_gate(gstat);
    if (gate.skip) return;
    __shared__ Tables8bit t;
    t.fill();
    const Consts8bit kc{adam_consts(hyper, true), gate};
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t all = tt.tiles();
    for (int64_t q = int64_t(blockIdx.x) * kWarps8bit + warp; q < all; q += int64_t(gridDim.x) * kWarps8bit) {
        const int k = tt.find(q);
        const int64_t b = q - tt.first_tile[k], n = tt.n[k];
        float* p = tt.at<float>(0, k);
        const float* g = tt.at<float>(1, k);
        uint8_t *cm = tt.at<uint8_t>(2, k), *cv = tt.at<uint8_t>(3, k);
        float *am = tt.at<float>(4, k), *av = tt.at<float>(5, k);
        const int64_t base = b * 256 + lane * 8;
        float gv[8], pv[8];
        uint8_t c1[8], c2[8];
        load8(gv, g, base, n);
        load8(c1, cm, base, n, 127);
        load8(c2, cv, base, n, 0);
        load8(pv, p, base, n);
        const float am_old = am[b], av_old = av[b];
        float mmax, vmax;
        update8(kc, t.qs, t.qu, t.ts(), t.tu(), base, n, am_old, av_old, gv, pv, c1, c2, mmax, vmax);
        store8(p, cm, cv, base, n, pv, c1, c2);
        __syncwarp();  // every lane has read the old absmax before lane 0 replaces it
        if (lane == 0) {
            am[b] = mmax;
            av[b] = vmax;
        }
    }
}

static void upload_tables() {
    static std::once_flag once;
    std::call_once(once, [] {
        float host[512];
        std::memcpy(host, adam8bit_qmap(true), 256 * sizeof(float));
        std::memcpy(host + 256, adam8bit_qmap(false), 256 * sizeof(float));
        GL_CUDA_CHECK(cudaMemcpyToSymbol(g_qmaps, host, sizeof host));  // once, during the first (eager) run
        std::vector<uint32_t> tables(kTableWords);
        std::memcpy(tables.data(), adam8bit_code_table(true), kAdam8bitSignedEntries * sizeof(uint32_t));
        std::memcpy(tables.data() + kAdam8bitSignedEntries, adam8bit_code_table(false),
                    kAdam8bitUnsignedEntries * sizeof(uint32_t));
        GL_CUDA_CHECK(cudaMemcpyToSymbol(g_code_tables, tables.data(), tables.size() * sizeof(uint32_t)));
    });
}

static void adamw8bit_run(CudaCtx& c) {
    upload_tables();
    const int n = int(c.p().i[1]);
    const float *hyper = c.in_ptr<float>(6 * n), *gstat = gstat_ptr(c, 6 * n + 1);
    for_each_input_table<6>(c, n, 256, [&](const Adam8bitTable& t) {
        const unsigned grid = unsigned(std::min<int64_t>(ceil_div(t.tiles(), kWarps8bit), sm_count() * 16));
        adamw8bit_kernel<<<grid, 256, 0, c.stream>>>(t, hyper, gstat);
        GL_CUDA_LAUNCHED();
    });
}
const CudaKernel cuda_adamw8bit_step{adamw8bit_run};

// Lion8bit: the same warp per quantisation block; one moment, the signed map and table only.
using Lion8bitTable = TensorTable<4, table_capacity<4>()>;  // param, grad, m codes, absmax m

__device__ __forceinline__ void store8(float* p, uint8_t* cm, int64_t base, int64_t n, const float (&pv)[8],
                                       const uint8_t (&c1)[8]) {
    if (base + 8 <= n) {
        *reinterpret_cast<float4*>(p + base) = *reinterpret_cast<const float4*>(pv);
        *reinterpret_cast<float4*>(p + base + 4) = *reinterpret_cast<const float4*>(pv + 4);
        *reinterpret_cast<uint2*>(cm + base) = *reinterpret_cast<const uint2*>(c1);
    } else {
        for (int j = 0; j < 8; j++)
            if (base + j < n) {
                p[base + j] = pv[j];
                cm[base + j] = c1[j];
            }
    }
}

__global__ void __launch_bounds__(256, 4) lion8bit_kernel(const __grid_constant__ Lion8bitTable tt, const float* h,
                                                          const float* gstat) {
    kernel_entry();
    const Gate gate = load_gate(gstat);
    if (gate.skip) return;
    __shared__ Tables8bit t;
    t.fill();
    const float lr = h[kLr], b1 = h[kBeta1], b2 = h[kBeta2], gs = h[kGradScale];
    const float decay = __fsub_rn(1.0f, __fmul_rn(lr, h[kWeightDecay]));
    const float c1 = __fsub_rn(1.0f, b1), c2 = __fsub_rn(1.0f, b2);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t all = tt.tiles();
    for (int64_t q = int64_t(blockIdx.x) * kWarps8bit + warp; q < all; q += int64_t(gridDim.x) * kWarps8bit) {
        const int k = tt.find(q);
        const int64_t b = q - tt.first_tile[k], n = tt.n[k];
        float* p = tt.at<float>(0, k);
        const float* g = tt.at<float>(1, k);
        uint8_t* cm = tt.at<uint8_t>(2, k);
        float* am = tt.at<float>(3, k);
        const int64_t base = b * 256 + lane * 8;
        float gv[8], pv[8], m[8];
        uint8_t codes[8];
        load8(gv, g, base, n);
        load8(codes, cm, base, n, 127);
        load8(pv, p, base, n);
        const float am_old = am[b];
        float mmax = 0.0f;
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const float gi = __fmul_rn(__fmul_rn(gv[j], gs), gate.mul), mi = __fmul_rn(t.qs[codes[j]], am_old);
            const float ci = __fadd_rn(__fmul_rn(mi, b1), __fmul_rn(c1, gi));
            const float u = ci > 0.0f ? 1.0f : (ci < 0.0f ? -1.0f : 0.0f);
            pv[j] = __fsub_rn(__fmul_rn(pv[j], decay), __fmul_rn(lr, u));
            m[j] = __fadd_rn(__fmul_rn(mi, b2), __fmul_rn(c2, gi));
            if (base + j < n) mmax = fmaxf(mmax, fabsf(m[j]));
        }
        mmax = warp_max(mmax);
        const float inv = adam8bit_inverse(mmax);
#pragma unroll
        for (int j = 0; j < 8; j++) {
            int code = adam8bit_code<true>(t.ts(), adam8bit_normalize(m[j], mmax, inv));
            if (signbit(t.qs[code]) != signbit(m[j])) code += m[j] > 0.0f ? 1 : -1;
            codes[j] = uint8_t(code);
        }
        store8(p, cm, base, n, pv, codes);
        __syncwarp();  // every lane has read the old absmax before lane 0 replaces it
        if (lane == 0) am[b] = mmax;
    }
}

static void lion8bit_run(CudaCtx& c) {
    upload_tables();
    const int n = int(c.p().i[1]);
    const float *hyper = c.in_ptr<float>(4 * n), *gstat = gstat_ptr(c, 4 * n + 1);
    for_each_input_table<4>(c, n, 256, [&](const Lion8bitTable& t) {
        const unsigned grid = unsigned(std::min<int64_t>(ceil_div(t.tiles(), kWarps8bit), sm_count() * 16));
        lion8bit_kernel<<<grid, 256, 0, c.stream>>>(t, hyper, gstat);
        GL_CUDA_LAUNCHED();
    });
}
const CudaKernel cuda_lion8bit_step{lion8bit_run};

// SGD8bit (bitsandbytes' MOMENTUM): Lion8bit's layout, buf = g at step 1, else momentum buf + g.
__global__ void __launch_bounds__(256, 4) sgd8bit_kernel(const __grid_constant__ Lion8bitTable tt, const float* h,
                                                         const float* gstat, float mom) {
    kernel_entry();
    const Gate gate = load_gate(gstat);
    if (gate.skip) return;
    __shared__ Tables8bit t;
    t.fill();
    const float lr = h[kLr], wd = h[kWeightDecay], gs = h[kGradScale];
    const bool first = h[kStep] == 1.0f;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t all = tt.tiles();
    for (int64_t q = int64_t(blockIdx.x) * kWarps8bit + warp; q < all; q += int64_t(gridDim.x) * kWarps8bit) {
        const int k = tt.find(q);
        const int64_t b = q - tt.first_tile[k], n = tt.n[k];
        float* p = tt.at<float>(0, k);
        const float* g = tt.at<float>(1, k);
        uint8_t* cm = tt.at<uint8_t>(2, k);
        float* am = tt.at<float>(3, k);
        const int64_t base = b * 256 + lane * 8;
        float gv[8], pv[8], m[8];
        uint8_t codes[8];
        load8(gv, g, base, n);
        load8(codes, cm, base, n, 127);
        load8(pv, p, base, n);
        const float am_old = am[b];
        float mmax = 0.0f;
#pragma unroll
        for (int j = 0; j < 8; j++) {
            float gi = __fmul_rn(__fmul_rn(gv[j], gs), gate.mul);
            if (wd > 0.0f) gi = __fadd_rn(gi, __fmul_rn(pv[j], wd));
            m[j] = first ? gi : __fadd_rn(__fmul_rn(__fmul_rn(t.qs[codes[j]], am_old), mom), gi);
            pv[j] = __fsub_rn(pv[j], __fmul_rn(lr, m[j]));
            if (base + j < n) mmax = fmaxf(mmax, fabsf(m[j]));
        }
        mmax = warp_max(mmax);
        const float inv = adam8bit_inverse(mmax);
#pragma unroll
        for (int j = 0; j < 8; j++) {
            int code = adam8bit_code<true>(t.ts(), adam8bit_normalize(m[j], mmax, inv));
            if (signbit(t.qs[code]) != signbit(m[j])) code += m[j] > 0.0f ? 1 : -1;
            codes[j] = uint8_t(code);
        }
        store8(p, cm, base, n, pv, codes);
        __syncwarp();  // every lane has read the old absmax before lane 0 replaces it
        if (lane == 0) am[b] = mmax;
    }
}

static void sgd8bit_run(CudaCtx& c) {
    upload_tables();
    const int n = int(c.p().i[1]);
    const float *hyper = c.in_ptr<float>(4 * n), *gstat = gstat_ptr(c, 4 * n + 1);
    const float mom = c.p().f[0];
    for_each_input_table<4>(c, n, 256, [&](const Lion8bitTable& t) {
        const unsigned grid = unsigned(std::min<int64_t>(ceil_div(t.tiles(), kWarps8bit), sm_count() * 16));
        sgd8bit_kernel<<<grid, 256, 0, c.stream>>>(t, hyper, gstat, mom);
        GL_CUDA_LAUNCHED();
    });
}
const CudaKernel cuda_sgd8bit_step{sgd8bit_run};

}  // namespace gl

namespace gl {

// AdEMAMix8bit: the same warp per quantisation block, three moments (m1, m2 signed, nu unsigned).
using Ademamix8bitTable = TensorTable<8, table_capacity<8>()>;  // param, grad, m1, m2, nu codes, their absmax

__global__ void __launch_bounds__(256, 4) ademamix8bit_kernel(const __grid_constant__ Ademamix8bitTable tt,
                                                              const float* h, const float* gstat, AdemamixOptions o) {
    kernel_entry();
    const Gate gate = load_gate(gstat);
    if (gate.skip) return;
    __shared__ Tables8bit t;
    t.fill();
    const float f[4] = {o.alpha, o.beta3, o.t_alpha, o.t_beta3};
    const AdemamixConsts k = ademamix_consts(h, f);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t all = tt.tiles();
    for (int64_t q = int64_t(blockIdx.x) * kWarps8bit + warp; q < all; q += int64_t(gridDim.x) * kWarps8bit) {
        const int e = tt.find(q);
        const int64_t b = q - tt.first_tile[e], n = tt.n[e];
        float* p = tt.at<float>(0, e);
        const float* g = tt.at<float>(1, e);
        uint8_t *cm1 = tt.at<uint8_t>(2, e), *cm2 = tt.at<uint8_t>(3, e), *cnu = tt.at<uint8_t>(4, e);
        float *am1 = tt.at<float>(5, e), *am2 = tt.at<float>(6, e), *anu = tt.at<float>(7, e);
        const int64_t base = b * 256 + lane * 8;
        float gv[8], pv[8], s1[8], s2[8], s3[8];
        uint8_t c1[8], c2[8], c3[8];
        load8(gv, g, base, n);
        load8(pv, p, base, n);
        load8(c1, cm1, base, n, 127);
        load8(c3, cm2, base, n, 127);
        load8(c2, cnu, base, n, 0);
        const float a1 = am1[b], a3 = am2[b], a2 = anu[b];
        float x1 = 0.0f, x2 = 0.0f, x3 = 0.0f;
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const float gi = __fmul_rn(__fmul_rn(gv[j], k.gs), gate.mul);
            if (isfinite(gi)) {
                s1[j] = __fmul_rn(t.qs[c1[j]], a1);
                s2[j] = __fmul_rn(t.qu[c2[j]], a2);
                s3[j] = __fmul_rn(t.qs[c3[j]], a3);
                ademamix_moments(k, gi, s1[j], s3[j], s2[j]);
                pv[j] = ademamix_param(k, pv[j], s1[j], s3[j], s2[j]);
            } else {
                s1[j] = s2[j] = s3[j] = 0.0f;
            }
            if (base + j < n) {
                x1 = fmaxf(x1, fabsf(s1[j]));
                x2 = fmaxf(x2, fabsf(s2[j]));
                x3 = fmaxf(x3, fabsf(s3[j]));
            }
        }
        x1 = warp_max(x1);
        x2 = warp_max(x2);
        x3 = warp_max(x3);
        const float i1 = adam8bit_inverse(x1), i2 = adam8bit_inverse(x2), i3 = adam8bit_inverse(x3);
#pragma unroll
        for (int j = 0; j < 8; j++) {
            int code = adam8bit_code<true>(t.ts(), adam8bit_normalize(s1[j], x1, i1));
            if (signbit(t.qs[code]) != signbit(s1[j])) code += s1[j] > 0.0f ? 1 : -1;
            c1[j] = uint8_t(code);
            code = adam8bit_code<true>(t.ts(), adam8bit_normalize(s3[j], x3, i3));
            if (signbit(t.qs[code]) != signbit(s3[j])) code += s3[j] > 0.0f ? 1 : -1;
            c3[j] = uint8_t(code);
            c2[j] = uint8_t(adam8bit_code<false>(t.tu(), adam8bit_normalize(s2[j], x2, i2)));
        }
        store8(p, cm1, base, n, pv, c1);
        if (base + 8 <= n) {
            *reinterpret_cast<uint2*>(cm2 + base) = *reinterpret_cast<const uint2*>(c3);
            *reinterpret_cast<uint2*>(cnu + base) = *reinterpret_cast<const uint2*>(c2);
        } else {
            for (int j = 0; j < 8; j++)
                if (base + j < n) cm2[base + j] = c3[j], cnu[base + j] = c2[j];
        }
        __syncwarp();  // every lane has read the old absmax before lane 0 replaces it
        if (lane == 0) am1[b] = x1, am2[b] = x3, anu[b] = x2;
    }
}

static void ademamix8bit_run(CudaCtx& c) {
    upload_tables();
    const int n = int(c.p().i[1]);
    const float *hyper = c.in_ptr<float>(8 * n), *gstat = gstat_ptr(c, 8 * n + 1);
    const Params& p = c.p();
    const AdemamixOptions o{p.f[0], p.f[1], p.f[2], p.f[3]};
    for_each_input_table<8>(c, n, 256, [&](const Ademamix8bitTable& t) {
        const unsigned grid = unsigned(std::min<int64_t>(ceil_div(t.tiles(), kWarps8bit), sm_count() * 16));
        ademamix8bit_kernel<<<grid, 256, 0, c.stream>>>(t, hyper, gstat, o);
        GL_CUDA_LAUNCHED();
    });
}
const CudaKernel cuda_ademamix8bit_step{ademamix8bit_run};

}  // namespace gl
