// Block-wise 8-bit AdamW, in place (CPU reference: ops/adam8bit.cpp): one warp per quantisation
// block of 256 elements, 8 per lane; shared-memory copies of both dynamic maps and of the O(1)
// code-search tables (ops/adam8bit_codes.h); the block max is a warp max; one reciprocal of it
// per block scales the moments for requantisation. Arithmetic uses explicit round-to-nearest
// intrinsics (no FMA contraction) so results match the CPU reference bit for bit.
#include <algorithm>
#include <cstring>
#include <mutex>
#include <vector>

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

__global__ void __launch_bounds__(256, 4) adamw8bit_kernel(float* p, const float* g, uint8_t* cm, uint8_t* cv,
                                                                   float* am, float* av, const float* hyper,
                                                                   const float* gstat, int64_t n) {
    const Gate gate = load_gate(gstat);
    if (gate.skip) return;
    __shared__ float qs[256], qu[256];
    __shared__ __align__(16) uint32_t tables[kTableWords];
    qs[threadIdx.x] = g_qmaps[threadIdx.x];
    qu[threadIdx.x] = g_qmaps[256 + threadIdx.x];
    for (int i = threadIdx.x; i < kTableWords / 4; i += blockDim.x)
        reinterpret_cast<uint4*>(tables)[i] = reinterpret_cast<const uint4*>(g_code_tables)[i];
    __syncthreads();
    const uint32_t* ts = tables;
    const uint32_t* tu = tables + kAdam8bitSignedEntries;
    const AdamConsts k = adam_consts(hyper, true);
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
        float m[8], v[8], mmax = 0.0f, vmax = 0.0f;
        bool ok[8];
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const bool in = base + j < n;
            float gi = __fmul_rn(__fmul_rn(gv[j], k.gs), gate.mul);
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
        const float inv_m = adam8bit_inverse(mmax), inv_v = adam8bit_inverse(vmax);
#pragma unroll
        for (int j = 0; j < 8; j++) {
            if (ok[j]) {
                float upd = __fdiv_rn(m[j], __fadd_rn(__fsqrt_rn(v[j]), __fmul_rn(k.corr2, k.eps)));
                pv[j] = __fmul_rn(__fadd_rn(pv[j], __fmul_rn(k.step_size, upd)), k.decay);
            }
            c1[j] = uint8_t(adam8bit_code<true>(ts, adam8bit_normalize(m[j], mmax, inv_m)));
            c2[j] = uint8_t(adam8bit_code<false>(tu, adam8bit_normalize(v[j], vmax, inv_v)));
        }
        if (base + 8 <= n) {
            *reinterpret_cast<float4*>(p + base) = *reinterpret_cast<float4*>(pv);
            *reinterpret_cast<float4*>(p + base + 4) = *reinterpret_cast<float4*>(pv + 4);
            *reinterpret_cast<uint2*>(cm + base) = *reinterpret_cast<uint2*>(c1);
            *reinterpret_cast<uint2*>(cv + base) = *reinterpret_cast<uint2*>(c2);
        } else {
            for (int j = 0; j < 8; j++)
                if (base + j < n) {
                    p[base + j] = pv[j];
                    cm[base + j] = c1[j];
                    cv[base + j] = c2[j];
                }
        }
        __syncwarp();  // every lane has read the old absmax before lane 0 replaces it
        if (lane == 0) {
            am[b] = mmax;
            av[b] = vmax;
        }
    }
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
    int64_t n = c.in[0].numel();
    if (n == 0) return;
    int64_t blocks = (n + 255) / 256;
    unsigned grid = unsigned(std::min<int64_t>((blocks + kWarps8bit - 1) / kWarps8bit, 132 * 16));
    adamw8bit_kernel<<<grid, 256, 0, c.stream>>>(
        const_cast<float*>(c.in_ptr<float>(0)), c.in_ptr<float>(1), const_cast<uint8_t*>(c.in_ptr<uint8_t>(2)),
        const_cast<uint8_t*>(c.in_ptr<uint8_t>(3)), const_cast<float*>(c.in_ptr<float>(4)),
        const_cast<float*>(c.in_ptr<float>(5)), c.in_ptr<float>(6), gstat_ptr(c, 7), n);
    GL_CUDA_LAUNCHED();
}
const CudaKernel cuda_adamw8bit_step{adamw8bit_run};

}  // namespace gl
