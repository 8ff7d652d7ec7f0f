// Facts about the current CUDA device that launchers size their grids by, read once per device
// and thread. Self-contained (CUDA runtime only): bench/*_check.cu include the launchers without
// the core. When the runtime cannot answer, an H100/H200's figures stand in.
#pragma once
#include <cuda_runtime.h>

namespace gl {

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

}  // namespace gl
