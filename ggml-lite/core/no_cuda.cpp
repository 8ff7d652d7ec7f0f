// Stand-ins for a build without CUDA: they say so instead of failing to link.
#ifndef GL_HAVE_CUDA
#include "ggml-lite/core/cuda_devices.h"
#include "ggml-lite/core/error.h"
#include "ggml-lite/core/runtime.h"
#include "ggml-lite/core/shared_memory.h"

namespace gl {

int cuda_device_count() { return 0; }

bool cuda_available(std::string* why) {
    if (why) *why = "ggml-lite was built without CUDA (configure with -DGL_CUDA=ON where nvcc exists)";
    return false;
}

std::unique_ptr<Runtime> make_cuda_runtime(Plan, const RuntimeOptions&) {
    fail("make_cuda_runtime: ggml-lite was built without CUDA (configure with -DGL_CUDA=ON where nvcc exists)");
}

std::unique_ptr<Runtime> make_cuda_runtime(Plan, std::shared_ptr<SharedMemory>) {
    fail("make_cuda_runtime: ggml-lite was built without CUDA (configure with -DGL_CUDA=ON where nvcc exists)");
}

std::shared_ptr<SharedMemory> make_cuda_shared_memory(SharedLayout) {
    fail("make_cuda_shared_memory: ggml-lite was built without CUDA (configure with -DGL_CUDA=ON where nvcc exists)");
}

void cuda_memory_info(size_t*, size_t*) {
    fail("cuda_memory_info: ggml-lite was built without CUDA (configure with -DGL_CUDA=ON where nvcc exists)");
}

size_t cuda_workspace_bytes(const Graph&) {
    fail("cuda_workspace_bytes: ggml-lite was built without CUDA (configure with -DGL_CUDA=ON where nvcc exists)");
}

size_t cuda_runtime_bytes(const Graph&) {
    fail("cuda_runtime_bytes: ggml-lite was built without CUDA (configure with -DGL_CUDA=ON where nvcc exists)");
}

}  // namespace gl
#endif
