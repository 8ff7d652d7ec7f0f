// The backend choice: names, and automatic resolved against this build and machine.
#include "ggml-lite/core/error.h"
#include "ggml-lite/core/runtime.h"

namespace gl {

const char* backend_name(Backend b) {
    switch (b) {
        case Backend::automatic: return "auto";
        case Backend::cpu: return "cpu";
        case Backend::cuda: return "cuda";
    }
    return "?";
}

Backend parse_backend(const std::string& s) {
    for (Backend b : {Backend::automatic, Backend::cpu, Backend::cuda})
        if (s == backend_name(b)) return b;
    fail("unknown backend '", s, "' (expected auto, cpu or cuda)");
}

Backend resolve_backend(Backend b, std::string* why) {
    if (b == Backend::cpu) return Backend::cpu;
    std::string reason;
    const bool cuda = cuda_available(&reason);
    if (b == Backend::cuda) {
        GL_CHECK(cuda, "backend cuda: ", reason);
        return Backend::cuda;
    }
    if (!cuda && why) *why = reason;
    return cuda ? Backend::cuda : Backend::cpu;
}

size_t cuda_graph_bytes(const Graph& g) {
    const size_t b = g.nodes.size() * kCudaGraphBytesPerNode;  // nodes live in memory: no overflow
    return (b + kCudaAllocationPage - 1) / kCudaAllocationPage * kCudaAllocationPage;
}

std::unique_ptr<Runtime> make_runtime(Plan plan, Backend b, const RuntimeOptions& o) {
    return resolve_backend(b) == Backend::cuda ? make_cuda_runtime(std::move(plan), o)
                                               : make_cpu_runtime(std::move(plan), o);
}

}  // namespace gl
