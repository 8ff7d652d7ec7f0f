// Block-wise 8-bit AdamW, in place (CPU reference: ops/adam8bit.cpp): one warp per quantisation
// block of 256 elements, 8 per lane; shared-memory copies of both dynamic maps; the block max is a
// warp max. Arithmetic uses explicit round-to-nearest intrinsics (no FMA contraction) so results
// match the CPU reference bit for bit on the same inputs.
#include <algorithm>
#include <cstring>
#include <mutex>

#include "ggml-lite/cuda/kernel.cuh"
#include "ggml-lite/cuda/optim_common.cuh"

namespace gl {

__device__ float g_qmaps[512];  // [0, 256): signed map, [256, 512): unsigned map

// The maps live in shared memory padded by one word every 32, so the midpoints a binary search
// visits (all multiples of a power of two) fall in different banks instead of one.
__device__ __forceinline__ int qpad(int i) { return i + (i >> 5); }
constexpr int kQPadded = 256 + 8;

// Nearest code (ties to the lower index) for 8 values of m (signed map) and 8 of v (unsigned map)
// at once: a branchless search with power-of-two steps finds the last code <= x (8 loads, no
// range bookkeeping), the 16 searches advancing level by level so their loads are independent.
__device__ __forceinline__ void quantize16(const float* qs, const float* qu, const float (&x)[16], uint8_t (&code)[16]) {
    int lo[16];
#pragma unroll
    for (int j = 0; j < 16; j++) lo[j] = 0;
#pragma unroll
    for (int step = 128; step > 0; step >>= 1) {
#pragma unroll
        for (int j = 0; j < 16; j++) {
            const float* q = j < 8 ? qs : qu;
            lo[j] += q[qpad(lo[j] + step)] <= x[j] ? step : 0;
        }
    }
#pragma unroll
    for (int j = 0; j < 16; j++) {
        const float* q = j < 8 ? qs : qu;
        const int hi = min(lo[j] + 1, 255);
        const float xj = x[j], ql = q[qpad(lo[j])], qh = q[qpad(hi)];
        int c = (__fsub_rn(xj, ql) <= __fsub_rn(qh, xj)) ? lo[j] : hi;
        if (!(xj < q[qpad(255)])) c = 255;  // at or above its top: the last code
        if (!(xj > q[qpad(0)])) c = 0;      // at or below its bottom, and NaN: the first code
        code[j] = uint8_t(c);
    }
}

// One warp per quantisation block of 256 elements, 8 consecutive elements per lane (16- and
// 8-byte loads); the block's new absmax is a warp max. Each CTA copies the two maps to shared
// memory once and walks quantisation blocks in a grid-stride loop.
constexpr int kWarps8bit = 8;

__global__ void __launch_bounds__(256) adamw8bit_kernel(float* p, const float* g, uint8_t* cm, uint8_t* cv, float* am,
                                                        float* av, const float* hyper, int64_t n) {
    __shared__ float qs[kQPadded], qu[kQPadded];
    qs[qpad(threadIdx.x)] = g_qmaps[threadIdx.x];
    qu[qpad(threadIdx.x)] = g_qmaps[256 + threadIdx.x];
    __syncthreads();
    const AdamConsts k = adam_consts(hyper, true);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int64_t blocks = (n + 255) / 256;
    for (int64_t b = int64_t(blockIdx.x) * kWarps8bit + warp; b < blocks; b += int64_t(gridDim.x) * kWarps8bit) {
        const int64_t base = b * 256 + lane * 8;
        const bool full = base + 8 <= n;
        float gv[8], pv[8];
        uint8_t c1[8], c2[8];
        if (full) {
            *reinterpret_cast<float4*>(gv) = *reinterpret_cast<const float4*>(g + base);
            *reinterpret_cast<float4*>(gv + 4) = *reinterpret_cast<const float4*>(g + base + 4);
            *reinterpret_cast<float4*>(pv) = *reinterpret_cast<const float4*>(p + base);
            *reinterpret_cast<float4*>(pv + 4) = *reinterpret_cast<const float4*>(p + base + 4);
            *reinterpret_cast<uint2*>(c1) = *reinterpret_cast<const uint2*>(cm + base);
            *reinterpret_cast<uint2*>(c2) = *reinterpret_cast<const uint2*>(cv + base);
        } else {
#pragma unroll
            for (int j = 0; j < 8; j++) {
                bool in = base + j < n;
                gv[j] = in ? g[base + j] : 0.0f;
                pv[j] = in ? p[base + j] : 0.0f;
                c1[j] = in ? cm[base + j] : uint8_t(127);
                c2[j] = in ? cv[base + j] : uint8_t(0);
            }
        }
        const float am_old = am[b], av_old = av[b];
        float m[8], v[8], mmax = 0.0f, vmax = 0.0f;
        bool ok[8];
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const bool in = full || base + j < n;
            float gi = __fmul_rn(gv[j], k.gs);
            m[j] = __fmul_rn(qs[qpad(c1[j])], am_old);
            v[j] = __fmul_rn(qu[qpad(c2[j])], av_old);
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
#pragma unroll
        for (int j = 0; j < 8; j++) {
            if (ok[j]) {
                float upd = __fdiv_rn(m[j], __fadd_rn(__fsqrt_rn(v[j]), __fmul_rn(k.corr2, k.eps)));
                pv[j] = __fmul_rn(__fadd_rn(pv[j], __fmul_rn(k.step_size, upd)), k.decay);
            }
        }
        float norm[16];
        uint8_t codes[16];
#pragma unroll
        for (int j = 0; j < 8; j++) {
            norm[j] = mmax > 0.0f ? __fdiv_rn(m[j], mmax) : 0.0f;
            norm[8 + j] = vmax > 0.0f ? __fdiv_rn(v[j], vmax) : 0.0f;
        }
        quantize16(qs, qu, norm, codes);
#pragma unroll
        for (int j = 0; j < 8; j++) {
            c1[j] = codes[j];
            c2[j] = codes[8 + j];
        }
        if (full) {
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
    });
    int64_t n = c.in[0].numel();
    if (n == 0) return;
    int64_t blocks = (n + 255) / 256;
    unsigned grid = unsigned(std::min<int64_t>((blocks + kWarps8bit - 1) / kWarps8bit, 132 * 16));
    adamw8bit_kernel<<<grid, 256, 0, c.stream>>>(
        const_cast<float*>(c.in_ptr<float>(0)), c.in_ptr<float>(1), const_cast<uint8_t*>(c.in_ptr<uint8_t>(2)),
        const_cast<uint8_t*>(c.in_ptr<uint8_t>(3)), const_cast<float*>(c.in_ptr<float>(4)),
        const_cast<float*>(c.in_ptr<float>(5)), c.in_ptr<float>(6), n);
    GL_CUDA_LAUNCHED();
}
const CudaKernel cuda_adamw8bit_step{adamw8bit_run};

}  // namespace gl
