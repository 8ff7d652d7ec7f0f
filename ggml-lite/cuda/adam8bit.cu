// Block-wise 8-bit AdamW, in place (CPU reference: ops/adam8bit.cpp): one warp per quantisation
// block of 256 elements, 8 per lane; shared-memory copies of both dynamic maps and of the O(1)
// code-search tables (ops/adam8bit_codes.h); the block max is a warp max; one reciprocal of it
// per block scales the moments for requantisation. Arithmetic uses explicit round-to-nearest
// intrinsics (no FMA contraction) so results match the CPU reference bit for bit.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include "ggml-lite/cuda/async_copy.cuh"
#include "ggml-lite/cuda/device.cuh"
#include "ggml-lite/cuda/kernel.cuh"
#include "ggml-lite/cuda/optim_common.cuh"
#include "ggml-lite/ops/adam8bit_codes.h"

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
template <bool Full = false>  // Full: all 8 elements exist (no bounds checks)
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
        const bool in = Full || base + j < n;
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
    for (int o = 16; o > 0; o >>= 1) {
        mmax = fmaxf(mmax, __shfl_xor_sync(0xffffffffu, mmax, o));
        vmax = fmaxf(vmax, __shfl_xor_sync(0xffffffffu, vmax, o));
    }
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

// Synchronous version: each warp loads its block into registers, updates, stores (64 registers,
// 4 CTAs of 8 warps per SM). Kept as the reference point of the benchmark (GL_ADAM8BIT=sync).
__global__ void __launch_bounds__(256, 4) adamw8bit_sync_kernel(float* p, const float* g, uint8_t* cm, uint8_t* cv,
                                                                float* am, float* av, const float* hyper,
                                                                const float* gstat, int64_t n) {
    const Gate gate = load_gate(gstat);
    if (gate.skip) return;
    __shared__ Tables8bit t;
    t.fill();
    const Consts8bit kc{adam_consts(hyper, true), gate};
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t blocks = (n + 255) / 256;
    for (int64_t b = int64_t(blockIdx.x) * kWarps8bit + warp; b < blocks; b += int64_t(gridDim.x) * kWarps8bit) {
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

// Lean version: full quantisation blocks only (a tensor's last partial block goes to the sync
// kernel in a second launch), 32-bit indices (tensors under 2^31 elements), no bounds checks, the
// parameter loaded only after the block max: fewer registers, so more warps per SM hide the
// latency of each element's dependent chain (dequantise, update, warp max, requantise).
template <int MinBlocks>
__global__ void __launch_bounds__(256, MinBlocks)
    adamw8bit_lean_kernel(float* __restrict__ p, const float* __restrict__ g, uint8_t* __restrict__ cm,
                          uint8_t* __restrict__ cv, float* __restrict__ am, float* __restrict__ av,
                          const float* hyper, const float* gstat, int blocks) {
    const Gate gate = load_gate(gstat);
    if (gate.skip) return;
    __shared__ Tables8bit t;
    t.fill();
    const Consts8bit kc{adam_consts(hyper, true), gate};
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    for (int b = blockIdx.x * kWarps8bit + warp; b < blocks; b += gridDim.x * kWarps8bit) {
        const int base = b * 256 + lane * 8;
        float gv[8], pv[8];
        uint8_t c1[8], c2[8];
        *reinterpret_cast<float4*>(gv) = *reinterpret_cast<const float4*>(g + base);
        *reinterpret_cast<float4*>(gv + 4) = *reinterpret_cast<const float4*>(g + base + 4);
        *reinterpret_cast<uint2*>(c1) = *reinterpret_cast<const uint2*>(cm + base);
        *reinterpret_cast<uint2*>(c2) = *reinterpret_cast<const uint2*>(cv + base);
        *reinterpret_cast<float4*>(pv) = *reinterpret_cast<const float4*>(p + base);
        *reinterpret_cast<float4*>(pv + 4) = *reinterpret_cast<const float4*>(p + base + 4);
        const float am_old = am[b], av_old = av[b];
        float mmax, vmax;
        update8<true>(kc, t.qs, t.qu, t.ts(), t.tu(), base, base + 8, am_old, av_old, gv, pv, c1, c2, mmax, vmax);
        *reinterpret_cast<float4*>(p + base) = *reinterpret_cast<const float4*>(pv);
        *reinterpret_cast<float4*>(p + base + 4) = *reinterpret_cast<const float4*>(pv + 4);
        *reinterpret_cast<uint2*>(cm + base) = *reinterpret_cast<const uint2*>(c1);
        *reinterpret_cast<uint2*>(cv + base) = *reinterpret_cast<const uint2*>(c2);
        __syncwarp();  // every lane has read the old absmax before lane 0 replaces it
        if (lane == 0) {
            am[b] = mmax;
            av[b] = vmax;
        }
    }
}

// Pipelined version: each warp walks its quantisation blocks with the next Stages-1 blocks' bytes
// already on their way into shared memory by cp.async, so loads stay in flight while the warp does
// its arithmetic, and without the registers a prefetch into registers costs. A lane copies and
// reads only its own slots (no synchronisation but each thread's own wait_group). Slot layout: the
// two 16-byte halves of a lane's 8 floats in separate rows, so a warp's float4 reads hit every bank
// once.
struct Stage8bit {
    float4 g[2][32], p[2][32];
    uint2 cm[32], cv[32];
};
static_assert(sizeof(Stage8bit) == 2560, "one stage: 256 gradients and parameters, 2 x 256 codes");

__device__ __forceinline__ void stage_issue(Stage8bit& st, const float* p, const float* g, const uint8_t* cm,
                                            const uint8_t* cv, int64_t base, int64_t n, int lane) {
    if (base + 8 <= n) {
        cp_async<16>(&st.g[0][lane], g + base, true);
        cp_async<16>(&st.g[1][lane], g + base + 4, true);
        cp_async<16>(&st.p[0][lane], p + base, true);
        cp_async<16>(&st.p[1][lane], p + base + 4, true);
        cp_async<8>(&st.cm[lane], cm + base, true);
        cp_async<8>(&st.cv[lane], cv + base, true);
    } else {  // a tensor's last, partial block: plain loads into this lane's own slots
        float gv[8], pv[8];
        uint8_t c1[8], c2[8];
        load8(gv, g, base, n);
        load8(pv, p, base, n);
        load8(c1, cm, base, n, 127);
        load8(c2, cv, base, n, 0);
        st.g[0][lane] = *reinterpret_cast<float4*>(gv);
        st.g[1][lane] = *reinterpret_cast<float4*>(gv + 4);
        st.p[0][lane] = *reinterpret_cast<float4*>(pv);
        st.p[1][lane] = *reinterpret_cast<float4*>(pv + 4);
        st.cm[lane] = *reinterpret_cast<uint2*>(c1);
        st.cv[lane] = *reinterpret_cast<uint2*>(c2);
    }
}

template <int Warps, int Stages, int MinBlocks>
__global__ void __launch_bounds__(Warps * 32, MinBlocks)
    adamw8bit_pipe_kernel(float* p, const float* g, uint8_t* cm, uint8_t* cv, float* am, float* av,
                          const float* hyper, const float* gstat, int64_t n) {
    const Gate gate = load_gate(gstat);
    if (gate.skip) return;
    __shared__ Tables8bit t;
    extern __shared__ __align__(16) unsigned char dyn8bit[];
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    Stage8bit* ring = reinterpret_cast<Stage8bit*>(dyn8bit) + warp * Stages;
    const int64_t blocks = (n + 255) / 256, stride = int64_t(gridDim.x) * Warps;
    const int64_t first = int64_t(blockIdx.x) * Warps + warp;
    // Start the first Stages-1 blocks' copies before the table fill, so they overlap it.
#pragma unroll
    for (int s = 0; s < Stages - 1; s++) {
        const int64_t b = first + s * stride;
        if (b < blocks) stage_issue(ring[s], p, g, cm, cv, b * 256 + lane * 8, n, lane);
        cp_async_commit();
    }
    t.fill();
    const Consts8bit kc{adam_consts(hyper, true), gate};
    int slot = 0;
    for (int64_t b = first; b < blocks; b += stride) {
        const int64_t ahead = b + (Stages - 1) * stride;
        const int ahead_slot = slot + Stages - 1 < Stages ? slot + Stages - 1 : slot - 1;
        if (ahead < blocks) stage_issue(ring[ahead_slot], p, g, cm, cv, ahead * 256 + lane * 8, n, lane);
        cp_async_commit();  // (an empty group past the end keeps the count uniform)
        const float am_old = am[b], av_old = av[b];
        cp_async_wait<Stages - 1>();  // this block's group (and every older one) has landed
        const Stage8bit& st = ring[slot];
        const int64_t base = b * 256 + lane * 8;
        float gv[8], pv[8];
        uint8_t c1[8], c2[8];
        *reinterpret_cast<float4*>(gv) = st.g[0][lane];
        *reinterpret_cast<float4*>(gv + 4) = st.g[1][lane];
        *reinterpret_cast<float4*>(pv) = st.p[0][lane];
        *reinterpret_cast<float4*>(pv + 4) = st.p[1][lane];
        *reinterpret_cast<uint2*>(c1) = st.cm[lane];
        *reinterpret_cast<uint2*>(c2) = st.cv[lane];
        float mmax, vmax;
        update8(kc, t.qs, t.qu, t.ts(), t.tu(), base, n, am_old, av_old, gv, pv, c1, c2, mmax, vmax);
        store8(p, cm, cv, base, n, pv, c1, c2);
        __syncwarp();  // every lane has read the old absmax before lane 0 replaces it
        if (lane == 0) {
            am[b] = mmax;
            av[b] = vmax;
        }
        slot = slot + 1 < Stages ? slot + 1 : 0;
    }
    cp_async_wait<0>();
}

// The kernel variants, by name; GL_ADAM8BIT picks one for benchmarking and tests, unset the default.
// sync: the synchronous kernel; leanK: the lean kernel at K CTAs of 8 warps per SM (registers for
// 4: 56, 5: 48, 6: 40 with a 16-byte spill); WxS: the pipelined kernel with W warps per CTA and S
// stages per warp (CTAs per SM as the shared memory allows: W * S * 2.5 KiB + 26 KiB of tables).
using Launch8bit = void (*)(cudaStream_t, float*, const float*, uint8_t*, uint8_t*, float*, float*, const float*,
                            const float*, int64_t);
struct Variant8bit {
    const char* name;
    Launch8bit launch;
};
void launch_sync(cudaStream_t s, float* p, const float* g, uint8_t* cm, uint8_t* cv, float* am, float* av,
                 const float* hyper, const float* gstat, int64_t n) {
    const int64_t blocks = (n + 255) / 256;
    const unsigned grid = unsigned(std::min<int64_t>((blocks + kWarps8bit - 1) / kWarps8bit, sm_count() * 16));
    adamw8bit_sync_kernel<<<grid, 256, 0, s>>>(p, g, cm, cv, am, av, hyper, gstat, n);
}
template <int MinBlocks>
void launch_lean(cudaStream_t s, float* p, const float* g, uint8_t* cm, uint8_t* cv, float* am, float* av,
                 const float* hyper, const float* gstat, int64_t n) {
    if (n >= (int64_t(1) << 31)) return launch_sync(s, p, g, cm, cv, am, av, hyper, gstat, n);
    const int64_t full = n / 256, done = full * 256;
    if (full > 0) {
        const unsigned grid = unsigned(std::min<int64_t>((full + kWarps8bit - 1) / kWarps8bit, sm_count() * MinBlocks));
        adamw8bit_lean_kernel<MinBlocks><<<grid, 256, 0, s>>>(p, g, cm, cv, am, av, hyper, gstat, int(full));
    }
    if (done < n)  // the partial last block
        adamw8bit_sync_kernel<<<1, 32, 0, s>>>(p + done, g + done, cm + done, cv + done, am + full, av + full, hyper,
                                               gstat, n - done);
}
template <int Warps, int Stages, int MinBlocks>
void launch_pipe(cudaStream_t s, float* p, const float* g, uint8_t* cm, uint8_t* cv, float* am, float* av,
                 const float* hyper, const float* gstat, int64_t n) {
    constexpr int bytes = Warps * Stages * int(sizeof(Stage8bit));
    static const cudaError_t set = [] {
        cudaError_t e = cudaFuncSetAttribute(adamw8bit_pipe_kernel<Warps, Stages, MinBlocks>,
                                             cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
        if (e == cudaSuccess)
            e = cudaFuncSetAttribute(adamw8bit_pipe_kernel<Warps, Stages, MinBlocks>,
                                     cudaFuncAttributePreferredSharedMemoryCarveout, 100);
        return e;
    }();
    GL_CUDA_CHECK(set);
    const int64_t blocks = (n + 255) / 256;
    const unsigned grid = unsigned(std::min<int64_t>((blocks + Warps - 1) / Warps, int64_t(sm_count()) * MinBlocks));
    adamw8bit_pipe_kernel<Warps, Stages, MinBlocks><<<grid, Warps * 32, bytes, s>>>(p, g, cm, cv, am, av, hyper,
                                                                                   gstat, n);
}
constexpr Variant8bit kVariants8bit[] = {
    {"sync", launch_sync},          {"lean4", launch_lean<4>},      {"lean5", launch_lean<5>},
    {"lean6", launch_lean<6>},      {"8x2", launch_pipe<8, 2, 3>},  {"16x2", launch_pipe<16, 2, 2>},
    {"8x3", launch_pipe<8, 3, 2>},  {"8x4", launch_pipe<8, 4, 2>},
};
Variant8bit variant_8bit() {
    const char* want = std::getenv("GL_ADAM8BIT");
    if (want == nullptr || *want == 0) return kVariants8bit[0];
    for (const Variant8bit& v : kVariants8bit)
        if (std::strcmp(v.name, want) == 0) return v;
    fail("GL_ADAM8BIT=", want, ": not a kernel variant (sync, lean4, lean5, lean6, 8x2, 16x2, 8x3, 8x4)");
}

static void adamw8bit_run(CudaCtx& c) {
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
    const int64_t n = c.in[0].numel();
    if (n == 0) return;
    float* p = mut_ptr<float>(c, 0);
    const float* g = c.in_ptr<float>(1);
    uint8_t *cm = mut_ptr<uint8_t>(c, 2), *cv = mut_ptr<uint8_t>(c, 3);
    float *am = mut_ptr<float>(c, 4), *av = mut_ptr<float>(c, 5);
    const float *hyper = c.in_ptr<float>(6), *gstat = gstat_ptr(c, 7);
    variant_8bit().launch(c.stream, p, g, cm, cv, am, av, hyper, gstat, n);  // read per launch: tests switch it
    GL_CUDA_LAUNCHED();
}
const CudaKernel cuda_adamw8bit_step{adamw8bit_run};

}  // namespace gl
