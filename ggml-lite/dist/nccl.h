// The NCCL communicator: libnccl.so.2 loaded with dlopen at run time (GL_NCCL_LIBRARY names
// another file), so a build runs without NCCL on one GPU and a missing library is an error only
// when a run asks for it. The unique id travels from rank 0 over `bootstrap` (a TCP communicator
// on the launcher's rendezvous), which also carries broadcast and barrier; all_reduce_sum is
// ncclAllReduce (f32, sum) of device memory on the given stream, which CUDA-graph capture records.
// The caller selects the rank's GPU (cudaSetDevice) before connecting. NCCL refuses two ranks on
// one GPU: several processes on one GPU use the TCP communicator instead.
// Before NCCL starts, NCCL_NVLS_ENABLE is set to 0 in the process' environment (NVLink multicast
// stays off, whatever it held).
#pragma once
#include <memory>

#include "ggml-lite/dist/communicator.h"

namespace gl::dist {

// Loads the library (once per process) and returns "" or why it cannot be used.
std::string nccl_unavailable();
std::unique_ptr<Communicator> connect_nccl(std::unique_ptr<Communicator> bootstrap);

// Sets NCCL_NVLS_ENABLE=0 in this process' environment (for NCCL here and the ranks it starts).
void disable_nvls();

}  // namespace gl::dist
