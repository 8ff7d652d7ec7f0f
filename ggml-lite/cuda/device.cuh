// Host-side launch helpers: facts about the current CUDA device that launchers size their grids
// by (read once per device and thread; when the runtime cannot answer, an H100/H200's figures
// stand in), grid sizes for grid-stride kernels, and the alignment test of the 16-byte paths.
// Self-contained (CUDA runtime only): bench/*_check.cu include the launchers without the core.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>

namespace gl {

// A numeric comparison switch from the environment (GL_GEMM_TMA_STORE, GL_CONV_MODEL, ...), or
// `fallback` when unset. Callers read it once into a static.
inline double env_number(const char* name, double fallback) {
    const char* e = std::getenv(name);
    return e && *e ? std::strtod(e, nullptr) : fallback;
}

struct DeviceInfo {
    int sms = 132;                 // streaming multiprocessors
    int smem_optin = 227 * 1024;   // shared memory a block may opt in to
};

inline DeviceInfo device_info() {
    static thread_local int cached = -1;
    static thread_local DeviceInfo info;
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) return info;
    if (dev != cached) {
        int v = 0;
        if (cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev) == cudaSuccess && v > 0) info.sms = v;
        if (cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) == cudaSuccess && v > 0)
            info.smem_optin = v;
        cached = dev;
    }
    return info;
}
inline int sm_count() { return device_info().sms; }

// Whether `kernel`'s loaded image on the current device has a compute capability major of at least
// `major` (device) and was built from PTX and for SASS of at least `version` (ptx, binary: 90 =
// sm_90). exact: the major and the binary version must equal them instead (an sm_90a build).
// Every kernel of a binary answers the same, so callers cache the answer per device.
inline bool kernel_image_is(const void* kernel, int major, int version, bool exact) {
    int dev = 0, m = 0;
    cudaFuncAttributes fa{};
    const bool ok = cudaGetDevice(&dev) == cudaSuccess &&
                    cudaDeviceGetAttribute(&m, cudaDevAttrComputeCapabilityMajor, dev) == cudaSuccess &&
                    cudaFuncGetAttributes(&fa, kernel) == cudaSuccess &&
                    (exact ? m == major && fa.binaryVersion == version
                           : m >= major && fa.binaryVersion >= version && fa.ptxVersion >= version);
    cudaGetLastError();
    return ok;
}

// f()'s answer, computed once per device of this thread (f: a fact of the device and binary).
template <class F>
bool per_device(F&& f) {
    static thread_local int cached_dev = -1;
    static thread_local bool ok = false;
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) return false;
    if (dev != cached_dev) {
        ok = f();
        cached_dev = dev;
    }
    return ok;
}

// Blocks of `threads` for n items of a grid-stride kernel: one item per thread, at least one
// block, at most max_blocks.
inline unsigned grid_for(int64_t n, int threads, int64_t max_blocks = 65535LL * 32) {
    int64_t b = (n + threads - 1) / threads;
    if (b < 1) b = 1;
    return unsigned(b < max_blocks ? b : max_blocks);
}

// Whether p is 16-byte aligned (null counts as aligned: launchers plan before pointers exist).
inline bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

}  // namespace gl
