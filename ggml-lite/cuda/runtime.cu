// CUDA backend: one device allocation per memory category sized from the plan, one stream,
// a workspace sized once for the largest node, and the whole step captured into a CUDA
// graph after its first (eager) run and replayed from then on (on sm_90 with programmatic edges
// between our kernels: make_edges_programmatic). On a shared memory the arenas,
// the workspace and the stream are the memory's: allocated once for all its runtimes, never
// moved, so every runtime's captured graph stays valid. Inputs are written through pinned
// staging buffers without waiting (cuda/staging.cuh); other writes wait for their copy.
#include <cstdlib>
#include <cstring>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ggml-lite/core/cuda_devices.h"
#include "ggml-lite/core/runtime.h"
#include "ggml-lite/core/shared_memory.h"
#include "ggml-lite/cuda/kernel.cuh"
#include "ggml-lite/cuda/staging.cuh"

namespace gl {

static const CudaKernel* const kCudaTable[] = {
#define GL_X(name, family) &cuda_##name,
    GL_OP_LIST(GL_X)
#undef GL_X
};

const CudaKernel& cuda_kernel(Op op) { return *kCudaTable[int(op)]; }

// ---- densify: strided gather of up to 4 dims, element size 1, 2 or 4 ----

struct StridedDesc {
    int64_t dim[4], stride[4];
    int64_t offset, n;
};

template <class E>
__global__ void densify_kernel(const E* __restrict__ src, E* __restrict__ dst, StridedDesc d) {
    kernel_entry();
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < d.n; i += int64_t(gridDim.x) * blockDim.x) {
        int64_t r = i, idx = d.offset;
        for (int k = 3; k >= 0; k--) {
            idx += (r % d.dim[k]) * d.stride[k];
            r /= d.dim[k];
        }
        dst[i] = src[idx];
    }
}

void launch_densify(const TensorRef& t, void* dst, cudaStream_t s) {
    if (t.dense()) {  // already dense (a forced copy): a plain device copy runs at full bandwidth
        size_t es = dtype_size(t.dtype);
        GL_CUDA_CHECK(cudaMemcpyAsync(dst, static_cast<const char*>(t.data) + t.layout.offset * int64_t(es),
                                      size_t(t.numel()) * es, cudaMemcpyDeviceToDevice, s));
        return;
    }
    StridedDesc d{};
    const Shape& sh = t.layout.shape;
    for (int k = 0; k < 4; k++) {
        int j = k - (4 - sh.nd);
        d.dim[k] = j >= 0 ? sh.d[size_t(j)] : 1;
        d.stride[k] = j >= 0 ? t.layout.stride[size_t(j)] : 0;
    }
    d.offset = t.layout.offset;
    d.n = t.numel();
    if (d.n == 0) return;
    unsigned grid = grid_for(d.n, 256);
    switch (dtype_size(t.dtype)) {
        case 1: densify_kernel<uint8_t><<<grid, 256, 0, s>>>((const uint8_t*)t.data, (uint8_t*)dst, d); break;
        case 2: densify_kernel<uint16_t><<<grid, 256, 0, s>>>((const uint16_t*)t.data, (uint16_t*)dst, d); break;
        default: densify_kernel<uint32_t><<<grid, 256, 0, s>>>((const uint32_t*)t.data, (uint32_t*)dst, d); break;
    }
    GL_CUDA_LAUNCHED();
}

int cuda_device_count() {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();  // clear the sticky error of a failed probe
        return 0;
    }
    return n;
}

bool cuda_available(std::string* why) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        if (why) *why = e != cudaSuccess ? cat("no usable CUDA device (", cudaGetErrorString(e), ")") : "no CUDA device found";
        cudaGetLastError();  // clear the sticky error of a failed probe
        return false;
    }
    return true;
}

namespace {

constexpr size_t kAlign = 256;
size_t align_up(size_t x) { return ceil_div(x, kAlign) * kAlign; }

size_t device_bytes_in_use() {
    size_t free = 0, total = 0;
    GL_CUDA_CHECK(cudaMemGetInfo(&free, &total));
    return total - free;
}

void start_cuda(const char* who) {
    std::string why;
    GL_CHECK(cuda_available(&why), who, ": ", why);
    GL_CUDA_CHECK(cudaFree(nullptr));  // creates the context
}

// One device allocation for the arenas (by category, each aligned) and the scratch after them: a
// single block is rounded to the allocation page once, where one per arena would be rounded each.
struct DeviceBlock {
    void* base = nullptr;
    std::array<void*, kCategoryCount> arenas{};
    void* scratch = nullptr;

    // align: the plans' value alignment (every arena starts on it; cudaMalloc's base is 256-aligned).
    void allocate(const std::array<size_t, kCategoryCount>& arena_bytes, size_t scratch_bytes, size_t align) {
        align = std::max(align, kAlign);
        size_t offsets[kCategoryCount + 1], top = 0;
        for (int c = 0; c < kCategoryCount; c++) {
            offsets[c] = top;
            top += ceil_div(arena_bytes[size_t(c)], align) * align;
        }
        offsets[kCategoryCount] = top;
        top += scratch_bytes;
        if (top == 0) return;
        GL_CUDA_CHECK(cudaMalloc(&base, top));
        if (reinterpret_cast<uintptr_t>(base) % align) {
            release();
            fail("cuda: the device allocation is not aligned to the plans' ", align, " bytes");
        }
        char* b = static_cast<char*>(base);
        for (int c = 0; c < kCategoryCount; c++)
            if (arena_bytes[size_t(c)]) arenas[size_t(c)] = b + offsets[c];
        if (scratch_bytes) scratch = b + offsets[kCategoryCount];
    }
    void release() {
        if (base) cudaFree(base);
        *this = DeviceBlock{};
    }
};

// The arenas, workspace and stream of runtimes that share them.
class CudaSharedMemory final : public SharedMemory {
public:
    explicit CudaSharedMemory(SharedLayout l) : SharedMemory(std::move(l)) {
        start_cuda("make_cuda_shared_memory");
        used_before_ = device_bytes_in_use();
        try {
            GL_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
            block_.allocate(layout_.arena_bytes, layout_.scratch_bytes, layout_.alignment);
            arenas_ = block_.arenas;
            scratch_ = block_.scratch;
        } catch (...) {
            release();
            throw;
        }
        used_after_ = device_bytes_in_use();
    }
    ~CudaSharedMemory() override { release(); }

    cudaStream_t stream() const { return stream_; }
    size_t used_before() const { return used_before_; }
    size_t used_after() const { return used_after_; }

private:
    void release() {
        if (stream_) cudaStreamSynchronize(stream_);
        block_.release();
        arenas_ = {};
        scratch_ = nullptr;
        if (stream_) cudaStreamDestroy(std::exchange(stream_, nullptr));
    }
    DeviceBlock block_;
    cudaStream_t stream_ = nullptr;
    size_t used_before_ = 0, used_after_ = 0;
};

}  // namespace

void cuda_memory_info(size_t* free_bytes, size_t* total_bytes) {
    start_cuda("cuda_memory_info");  // the context it creates is then no longer free memory
    size_t f = 0, t = 0;
    GL_CUDA_CHECK(cudaMemGetInfo(&f, &t));
    if (free_bytes) *free_bytes = f;
    if (total_bytes) *total_bytes = t;
}

size_t cuda_workspace_bytes(const Graph& g) {
    size_t most = 0;  // the largest node's need: its kernel's scratch plus densified inputs
    for (const Node& n : g.nodes) {
        const CudaKernel& k = cuda_kernel(n.op);
        if (!k.run) continue;
        size_t need = k.workspace ? align_up(k.workspace(g, n)) : 0;
        if (!(k.flags & kCudaStrided))
            for (ValueId x : n.in)
                if (!g.v(x).layout.is_contiguous()) need += align_up(g.v(x).bytes());
        most = std::max(most, need);
    }
    return most;
}

size_t cuda_runtime_bytes(const Graph& g) {
    return align_up(cuda_workspace_bytes(g)) + cuda_graph_bytes(g) + kCudaAllocationPage;
}

namespace {

// ---- programmatic edges: the next kernel launched before the one ahead of it has completed ----

// Whether a captured kernel may start before the kernel ahead of it has finished: one of ours
// (namespace gl: every kernel there begins with kernel_entry, primitives.cuh, which
// tests/test_cuda_sources.cpp checks) whose loaded image was built for sm_90 or later (below, the
// wait is not compiled in). Library kernels (cuBLAS under GL_GEMM=cublas, NCCL) never are.
bool waits_for_prior_kernel(const void* func) {
    static thread_local std::unordered_map<const void*, bool> known;
    auto it = known.find(func);
    if (it != known.end()) return it->second;
    const char* name = nullptr;
    cudaFuncAttributes fa{};
    const bool ok = func && cudaFuncGetName(&name, func) == cudaSuccess && name &&
                    std::strncmp(name, "_ZN2gl", 6) == 0 && cudaFuncGetAttributes(&fa, func) == cudaSuccess &&
                    fa.binaryVersion >= 90 && fa.ptxVersion >= 90;
    cudaGetLastError();  // a failed query leaves an error behind
    known.emplace(func, ok);
    return ok;
}

// How a programmatic edge releases the next kernel (GL_CUDA_PDL): 0 never (plain edges), `exit`
// once every block of the first kernel has exited (cudaGraphKernelNodePortProgrammatic: no kernel
// triggers early), `begin` once every block of it has begun (LaunchCompletion).
enum class Pdl { off, exit, begin };
Pdl pdl_mode() {
    const char* e = std::getenv("GL_CUDA_PDL");
    if (!e || !*e || std::strcmp(e, "1") == 0 || std::strcmp(e, "exit") == 0) return Pdl::exit;
    if (std::strcmp(e, "0") == 0) return Pdl::off;
    if (std::strcmp(e, "begin") == 0) return Pdl::begin;
    fail("GL_CUDA_PDL=", e, ": expected 0 (plain edges), 1 or exit (the default), or begin");
}

// Makes programmatic every edge of a captured graph from one of our kernels to another that
// waits for it (waits_for_prior_kernel) and depends on nothing else: the second kernel is then
// launched before the first one's completion (pdl_mode), instead of after it. Memory order is
// unchanged: kernel_entry waits for the first kernel's completion before anything else. Returns
// the edges changed (none before sm_90: no kernel image there is built for it).
size_t make_edges_programmatic(cudaGraph_t graph) {
    const Pdl mode = pdl_mode();
    if (mode == Pdl::off) return 0;
    size_t n = 0;
    GL_CUDA_CHECK(cudaGraphGetEdges(graph, nullptr, nullptr, nullptr, &n));
    std::vector<cudaGraphNode_t> from(n), to(n);
    std::vector<cudaGraphEdgeData> data(n);
    GL_CUDA_CHECK(cudaGraphGetEdges(graph, from.data(), to.data(), data.data(), &n));
    std::unordered_map<cudaGraphNode_t, int> incoming;
    for (size_t i = 0; i < n; i++) incoming[to[i]]++;
    auto our_kernel = [](cudaGraphNode_t node) {
        cudaGraphNodeType type{};
        if (cudaGraphNodeGetType(node, &type) != cudaSuccess || type != cudaGraphNodeTypeKernel) return false;
        cudaKernelNodeParams kp{};
        if (cudaGraphKernelNodeGetParams(node, &kp) != cudaSuccess) {
            cudaGetLastError();
            return false;
        }
        return waits_for_prior_kernel(kp.func);
    };
    std::vector<cudaGraphNode_t> pf, pt;
    for (size_t i = 0; i < n; i++) {
        const cudaGraphEdgeData& d = data[i];
        if (d.type != cudaGraphDependencyTypeDefault || d.from_port != cudaGraphKernelNodePortDefault) continue;
        if (incoming[to[i]] != 1 || !our_kernel(from[i]) || !our_kernel(to[i])) continue;
        pf.push_back(from[i]);
        pt.push_back(to[i]);
    }
    if (pf.empty()) return 0;
    std::vector<cudaGraphEdgeData> plain(pf.size()), programmatic(pf.size());
    for (cudaGraphEdgeData& d : programmatic) {
        d.from_port = mode == Pdl::begin ? cudaGraphKernelNodePortLaunchCompletion : cudaGraphKernelNodePortProgrammatic;
        d.type = cudaGraphDependencyTypeProgrammatic;
    }
    // Removed and added as a whole: a failure between the two would leave kernels unordered.
    GL_CUDA_CHECK(cudaGraphRemoveDependencies(graph, pf.data(), pt.data(), plain.data(), pf.size()));
    const cudaError_t e = cudaGraphAddDependencies(graph, pf.data(), pt.data(), programmatic.data(), pf.size());
    if (e != cudaSuccess) {
        cudaGetLastError();
        GL_CUDA_CHECK(cudaGraphAddDependencies(graph, pf.data(), pt.data(), plain.data(), pf.size()));
        return 0;
    }
    return pf.size();
}

class CudaRuntime final : public Runtime {
public:
    explicit CudaRuntime(Plan plan) : Runtime(std::move(plan)) {
        start_cuda("make_cuda_runtime");
        used_before_ = device_bytes_in_use();
        GL_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
        workspace_bytes_ = cuda_workspace_bytes(plan_.graph);
        try {
            block_.allocate(plan_.arena_bytes, workspace_bytes_, plan_.options.alignment);
        } catch (...) {
            cudaStreamDestroy(stream_);
            throw;
        }
        arenas_ = block_.arenas;
        workspace_ = block_.scratch;
        used_after_ = device_bytes_in_use();
        read_graph_env();
    }

    // On shared memory: nothing allocated here but the CUDA graph, and the memory's stream.
    CudaRuntime(Plan plan, std::shared_ptr<SharedMemory> shared, const CudaSharedMemory& mem)
        : Runtime(std::move(plan), std::move(shared)) {
        stream_ = mem.stream();
        for (int c = 0; c < kCategoryCount; c++) arenas_[size_t(c)] = mem.arena(Category(c));
        workspace_ = mem.scratch();
        workspace_bytes_ = mem.allocated_scratch();
        used_before_ = mem.used_before();
        used_after_ = mem.used_after();
        read_graph_env();
    }

    ~CudaRuntime() override {
        if (stream_) cudaStreamSynchronize(stream_);  // its graph may still run on a shared stream
        for (cudaEvent_t e : timing_) cudaEventDestroy(e);
        if (exec_) cudaGraphExecDestroy(exec_);
        if (shared_) return;  // the shared memory frees its arenas and stream
        block_.release();
        if (stream_) cudaStreamDestroy(stream_);
    }

    const char* backend_name() const override { return "cuda"; }

    TensorRef ref(ValueId id) const { return locate(id, arenas_); }

    void write(ValueId id, const void* data, DType t) override {
        const Value& v = plan_.graph.v(id);
        GL_CHECK(v.base == id, "write: ", plan_.graph.describe(id), " is a view; write its base value");
        if (v.role == Role::input) {  // per-step data: staged, not waited for
            staging_.write(id, CudaCtx::elem(ref(id)), v.dtype, data, t, v.numel(), stream_);
            return;
        }
        const void* src = data;
        std::vector<unsigned char> conv;
        if (t != v.dtype) {
            conv.resize(v.bytes());
            for (int64_t i = 0; i < v.numel(); i++) store_from_f32(conv.data(), v.dtype, i, load_as_f32(data, t, i));
            src = conv.data();
        }
        GL_CUDA_CHECK(cudaMemcpyAsync(CudaCtx::elem(ref(id)), src, v.bytes(), cudaMemcpyHostToDevice, stream_));
        GL_CUDA_CHECK(cudaStreamSynchronize(stream_));
    }

    void read(ValueId id, void* data, DType t) const override {
        TensorRef src = ref(id);
        const Value& v = plan_.graph.v(id);
        void* dense = nullptr;
        if (!src.dense()) {
            GL_CUDA_CHECK(cudaMalloc(&dense, v.bytes()));  // explicit reads are outside the step
            launch_densify(src, dense, stream_);
        }
        std::vector<unsigned char> host(v.bytes());
        cudaError_t e = cudaMemcpyAsync(host.data(), dense ? dense : CudaCtx::elem(src), v.bytes(), cudaMemcpyDeviceToHost, stream_);
        if (e == cudaSuccess) e = cudaStreamSynchronize(stream_);
        if (dense) cudaFree(dense);
        GL_CUDA_CHECK(e);
        if (t == v.dtype) {
            std::memcpy(data, host.data(), host.size());
        } else {
            for (int64_t i = 0; i < v.numel(); i++) store_from_f32(data, t, i, load_as_f32(host.data(), v.dtype, i));
        }
    }

    void run() override {
        if (profiling()) {  // eagerly, an event pair around every node, waited for here
            launch_all(true);
            GL_CUDA_CHECK(cudaStreamSynchronize(stream_));
            for (size_t i = 0; i < timing_.size(); i += 2) {
                if (!timed_[i / 2]) continue;
                float ms = 0.0f;
                GL_CUDA_CHECK(cudaEventElapsedTime(&ms, timing_[i], timing_[i + 1]));
                add_node_time(i / 2, double(ms));
            }
            end_profiled_run();
            runs_++;
            return;
        }
        if (use_graph_ && runs_ >= 1) {
            if (!exec_) {
                cudaGraph_t graph = capture();
                GL_CUDA_CHECK(cudaGraphGetNodes(graph, nullptr, &graph_nodes_));
                cudaError_t e = cudaErrorUnknown;
                try {
                    programmatic_edges_ = make_edges_programmatic(graph);
                    e = cudaGraphInstantiate(&exec_, graph, 0);
                    if (e != cudaSuccess && programmatic_edges_) {  // a driver that refuses them: plain edges
                        cudaGetLastError();
                        cudaGraphDestroy(graph);
                        graph = nullptr;
                        programmatic_edges_ = 0;
                        graph = capture();
                        e = cudaGraphInstantiate(&exec_, graph, 0);
                    }
                } catch (...) {
                    if (graph) cudaGraphDestroy(graph);
                    throw;
                }
                cudaGraphDestroy(graph);
                if (e != cudaSuccess) exec_ = nullptr;
                GL_CUDA_CHECK(e);
                used_after_instantiate_ = device_bytes_in_use();
                GL_CUDA_CHECK(cudaGraphLaunch(exec_, stream_));
                GL_CUDA_CHECK(cudaStreamSynchronize(stream_));
                used_after_graph_ = device_bytes_in_use();
                runs_++;
                return;
            }
            GL_CUDA_CHECK(cudaGraphLaunch(exec_, stream_));
        } else {
            launch_all();
            if (runs_ == 0) {  // what the first run adds (kernels' local memory, lazily loaded modules)
                GL_CUDA_CHECK(cudaStreamSynchronize(stream_));
                used_after_first_run_ = device_bytes_in_use();
            }
        }
        runs_++;  // no host synchronisation: read() waits for the stream
    }

    size_t allocated_bytes(Category c) const override {
        if (shared_) return shared_->allocated_bytes(c);
        return arenas_[size_t(c)] ? plan_.arena_bytes[size_t(c)] : 0;
    }

    void synchronize() override { GL_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

    void poison(unsigned char byte) override {
        for (int c = 0; c < kCategoryCount; c++)
            if (arenas_[size_t(c)]) GL_CUDA_CHECK(cudaMemsetAsync(arenas_[size_t(c)], byte, allocated_bytes(Category(c)), stream_));
        if (workspace_) GL_CUDA_CHECK(cudaMemsetAsync(workspace_, byte, workspace_bytes_, stream_));
        GL_CUDA_CHECK(cudaStreamSynchronize(stream_));
    }

    std::string memory_report() const override {
        std::string s = plan_.report();
        if (shared_) s += shared_->layout().report();
        char line[160];
        auto mib = [](size_t b) { return double(b) / (1024.0 * 1024.0); };
        size_t arenas = 0;
        for (int c = 0; c < kCategoryCount; c++) arenas += allocated_bytes(Category(c));
        std::snprintf(line, sizeof line, "  %-20s %10.2f MiB (largest node's scratch)\n", "cuda workspace", mib(workspace_bytes_));
        s += line;
        std::snprintf(line, sizeof line, "  %-20s %10.2f MiB (context, libraries, other processes)\n", "device baseline",
                      mib(used_before_));
        s += line;
        std::snprintf(line, sizeof line, "  %-20s %10.2f MiB (cudaMemGetInfo; arenas + workspace = %.2f MiB)\n",
                      "device in use", mib(used_after_), mib(arenas + workspace_bytes_));
        s += line;
        if (used_after_first_run_) {
            size_t stack = 0;
            cudaDeviceGetLimit(&stack, cudaLimitStackSize);
            std::snprintf(line, sizeof line, "  %-20s %10.2f MiB (%+.2f MiB; stack limit %zu B per thread)\n",
                          "after the first run", mib(used_after_first_run_),
                          mib(used_after_first_run_) - mib(used_after_), stack);
            s += line;
        }
        if (used_after_graph_) {
            std::snprintf(line, sizeof line,
                          "  %-20s %10.2f MiB (%zu nodes, %zu programmatic edges: %+.2f MiB instantiated, %+.2f MiB launched)\n",
                          "after the CUDA graph", mib(used_after_graph_), graph_nodes_, programmatic_edges_,
                          mib(used_after_instantiate_) - mib(used_after_first_run_ ? used_after_first_run_ : used_after_),
                          mib(used_after_graph_) - mib(used_after_instantiate_));
            s += line;
        }
        return s;
    }

private:
    void read_graph_env() {
        if (const char* e = std::getenv("GL_CUDA_GRAPH")) use_graph_ = std::strcmp(e, "0") != 0;
    }

    // The step's launches recorded into a graph (not run).
    cudaGraph_t capture() {
        cudaGraph_t graph = nullptr;
        GL_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
        try {
            launch_all();
        } catch (...) {
            if (cudaStreamEndCapture(stream_, &graph) == cudaSuccess && graph) cudaGraphDestroy(graph);
            throw;
        }
        GL_CUDA_CHECK(cudaStreamEndCapture(stream_, &graph));
        return graph;
    }

    // timed: record an event before and after each node (profiling; never under capture).
    void launch_all(bool timed = false) {
        const Graph& g = plan_.graph;
        if (timed && timing_.empty()) {
            timing_.resize(2 * g.nodes.size());
            for (cudaEvent_t& e : timing_) GL_CUDA_CHECK(cudaEventCreate(&e));
            timed_.assign(g.nodes.size(), false);
        }
        for (size_t i = 0; i < g.nodes.size(); i++) {
            const Node& n = g.nodes[i];
            const CudaKernel& k = cuda_kernel(n.op);
            if (!k.run) continue;
            if (timed) {
                GL_CUDA_CHECK(cudaEventRecord(timing_[2 * i], stream_));
                timed_[i] = true;
            }
            CudaCtx ctx(n, stream_);
            ctx.comm = comm_;
            char* scratch = static_cast<char*>(workspace_);
            for (ValueId x : n.in) {
                TensorRef t = ref(x);
                if (!(k.flags & kCudaStrided) && !t.dense()) {
                    launch_densify(t, scratch, stream_);
                    t.data = scratch;
                    t.layout = Layout::contiguous(t.layout.shape);
                    scratch += align_up(g.v(x).bytes());
                }
                ctx.in.push_back(t);
            }
            for (ValueId y : n.out) ctx.out.push_back(ref(y));
            ctx.workspace = scratch;
            ctx.workspace_bytes = workspace_bytes_ - size_t(scratch - static_cast<char*>(workspace_));
            k.run(ctx);
            if (timed) GL_CUDA_CHECK(cudaEventRecord(timing_[2 * i + 1], stream_));
        }
    }

    cudaStream_t stream_ = nullptr;
    DeviceBlock block_;  // without shared memory: the arenas and the workspace
    std::array<void*, kCategoryCount> arenas_{};
    void* workspace_ = nullptr;
    size_t workspace_bytes_ = 0;
    size_t used_before_ = 0, used_after_ = 0;
    size_t used_after_first_run_ = 0, used_after_instantiate_ = 0, used_after_graph_ = 0, graph_nodes_ = 0;
    size_t programmatic_edges_ = 0;  // make_edges_programmatic's count
    bool use_graph_ = true;
    int runs_ = 0;
    cudaGraphExec_t exec_ = nullptr;
    std::vector<cudaEvent_t> timing_;  // profiling: start and stop event of every node
    std::vector<bool> timed_;          // nodes that launched work (views launch none)
    HostStaging staging_;              // destroyed after the destructor has synchronised the stream
};

}  // namespace

std::unique_ptr<Runtime> make_cuda_runtime(Plan plan, const RuntimeOptions& o) {
    check_memory_limit(plan, cuda_runtime_bytes(plan.graph), o, "cuda");
    return std::make_unique<CudaRuntime>(std::move(plan));
}

std::unique_ptr<Runtime> make_cuda_runtime(Plan plan, std::shared_ptr<SharedMemory> shared) {
    GL_CHECK(shared != nullptr, "make_cuda_runtime: no shared memory given");
    const auto* mem = dynamic_cast<const CudaSharedMemory*>(shared.get());
    GL_CHECK(mem != nullptr, "make_cuda_runtime: the shared memory is for ", shared->backend(), ", not cuda");
    return std::make_unique<CudaRuntime>(std::move(plan), std::move(shared), *mem);
}

std::shared_ptr<SharedMemory> make_cuda_shared_memory(SharedLayout layout) {
    GL_CHECK(layout.backend == "cuda", "make_cuda_shared_memory: the layout is for ", layout.backend, ", not cuda");
    return std::make_shared<CudaSharedMemory>(std::move(layout));
}

}  // namespace gl
