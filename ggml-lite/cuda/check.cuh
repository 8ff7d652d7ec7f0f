// Checked CUDA calls: every runtime call and launch goes through these, turning a CUDA
// error into a gl::Error that names the call and the place.
#pragma once
#include <cuda_runtime.h>

#include "ggml-lite/core/error.h"

#define GL_CUDA_CHECK(expr)                                                                            \
    do {                                                                                               \
        cudaError_t err_ = (expr);                                                                     \
        if (err_ != cudaSuccess)                                                                       \
            ::gl::fail("CUDA error ", cudaGetErrorString(err_), " in ", #expr, " at ", __FILE__, ":", \
                       __LINE__);                                                                      \
    } while (0)

// After a launch: reports configuration errors at once (asynchronous faults surface at the next sync).
#define GL_CUDA_LAUNCHED() GL_CUDA_CHECK(cudaGetLastError())
