// The architecture of the device code that this build loads on the current device (its
// binaryVersion, e.g. 90 for sm_90 / sm_90a, 80 when only sm_80 code runs there), read off a kernel
// compiled with the same flags as the library's: test_step.cpp expects programmatic graph
// edges only where the loaded kernels were built for sm_90 or later.
#include <cuda_runtime.h>

#include "image_arch.h"

namespace {
__global__ void probe_kernel() {}
}  // namespace

namespace gltest {

int loaded_image_arch() {
    cudaFuncAttributes fa{};
    if (cudaFuncGetAttributes(&fa, probe_kernel) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return fa.binaryVersion;
}
}  // namespace gltest
