// A runtime executes a Plan on one backend: it owns one allocation per memory category (or runs
// on a SharedMemory that several runtimes hold: ggml-lite/core/shared_memory.h), binds leaves
// (inputs, weights, parameters, state) and runs the node list.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ggml-lite/core/planner.h"
#include "ggml-lite/core/tensor_ref.h"

namespace gl {

class SharedMemory;
namespace dist {
class Communicator;
}

class Runtime {
public:
    virtual ~Runtime() = default;
    virtual const char* backend_name() const = 0;
    const Plan& plan() const { return plan_; }

    // Copies host data into a value. `data` holds numel elements of type `t`, converted
    // to the value's dtype. The value must be a storage owner (not a view).
    virtual void write(ValueId v, const void* data, DType t) = 0;
    // Reads a value (views included) as numel elements of type t, contiguous.
    virtual void read(ValueId v, void* data, DType t) const = 0;
    // Runs every node of the plan once. A device backend may return before the work is done;
    // read() and synchronize() wait for it.
    virtual void run() = 0;
    virtual void synchronize() {}
    // Sets every byte of every arena to `byte` (tests poison memory with it); on shared memory,
    // the shared arenas.
    virtual void poison(unsigned char byte) = 0;
    // Bytes of the arena a category's values live in (tests hold it to the plan): allocated by
    // this runtime, or by the shared memory it runs on.
    virtual size_t allocated_bytes(Category c) const = 0;
    // The shared memory this runtime runs on (nullptr: it owns its arenas).
    const SharedMemory* shared_memory() const { return shared_.get(); }

    // What the backend holds: the plan's arenas plus backend extras (workspace, context).
    virtual std::string memory_report() const { return plan_.report(); }

    // The communicator the plan's all_reduce nodes sum over (ggml-lite/dist/communicator.h; not
    // owned, it must outlive the runtime's runs). None: the runtime is a world of one.
    void set_communicator(dist::Communicator* c) { comm_ = c; }
    dist::Communicator* communicator() const { return comm_; }

    void write_f32(ValueId v, const std::vector<float>& x);
    std::vector<float> read_f32(ValueId v) const;

    // Per-node timing. While on, every run() times each node and adds it up (CPU: wall clock;
    // CUDA: events around each node's kernels, the step run eagerly rather than replayed from its
    // captured graph, and waited for at the end of run()). profile_report() lists where the time
    // went: by op, by forward / backward / recompute / optimizer, and the `top` slowest nodes.
    void set_profiling(bool on);
    bool profiling() const { return profiling_; }
    void reset_profile();
    std::string profile_report(size_t top = 20) const;
    int profiled_runs() const { return profiled_runs_; }
    double profiled_ms(size_t node) const { return node < node_ms_.size() ? node_ms_[node] : 0.0; }

protected:
    // Backends report each node's time of a profiled run, then close the run.
    void add_node_time(size_t node, double ms) { node_ms_[node] += ms; }
    void end_profiled_run() { profiled_runs_++; }
    // Where value id lives, given each category's arena base: the base value's offset, with the
    // value's own dtype and layout (views included).
    TensorRef locate(ValueId id, const std::array<void*, kCategoryCount>& arena_base) const;
    explicit Runtime(Plan plan) : plan_(std::move(plan)) {}
    // On shared memory: the plan bound to its layout (SharedLayout::bind; throws when it does not
    // fit), so locate() finds persistent values in the shared arenas.
    Runtime(Plan plan, std::shared_ptr<SharedMemory> shared);
    Plan plan_;
    std::shared_ptr<SharedMemory> shared_;
    dist::Communicator* comm_ = nullptr;

private:
    bool profiling_ = false;
    std::vector<double> node_ms_;
    int profiled_runs_ = 0;
};

struct RuntimeOptions {
    // The most bytes the runtime may allocate: the plan's arenas plus the backend's own (for CUDA
    // cuda_runtime_bytes: workspace, graph executable, page rounding). A plan above it is refused
    // with gl::Error before anything is allocated. 0: none.
    size_t memory_limit = 0;
};

// Throws gl::Error naming the figures when plan.total_bytes() + backend_bytes exceeds
// o.memory_limit (backend: the runtime's name, for the message).
void check_memory_limit(const Plan& plan, size_t backend_bytes, const RuntimeOptions& o, const char* backend);

// The CPU reference backend: computes in f32 (double accumulation where it matters). With a
// SharedMemory (made for "cpu"), the runtime allocates nothing and runs the plan in it.
std::unique_ptr<Runtime> make_cpu_runtime(Plan plan, const RuntimeOptions& o = {});
std::unique_ptr<Runtime> make_cpu_runtime(Plan plan, std::shared_ptr<SharedMemory> shared);

// The CUDA backend (ggml-lite/cuda). Throws gl::Error when the library was built without
// CUDA or no usable GPU is present; cuda_available says which, without throwing. With a
// SharedMemory (made for "cuda"), the runtime allocates nothing and runs on the memory's stream.
std::unique_ptr<Runtime> make_cuda_runtime(Plan plan, const RuntimeOptions& o = {});
std::unique_ptr<Runtime> make_cuda_runtime(Plan plan, std::shared_ptr<SharedMemory> shared);
bool cuda_available(std::string* why = nullptr);
// The scratch the CUDA runtime allocates beside a plan of g: the largest node's kernel workspace
// plus its densified inputs (no device needed; throws gl::Error in a build without CUDA).
size_t cuda_workspace_bytes(const Graph& g);
// The device memory a CUDA graph executable of g takes (the runtime instantiates one after the
// first run): kCudaGraphBytesPerNode for every node of g, in whole allocation pages. An upper
// bound from measurement (H200, CUDA 13: 2.2-2.5 KiB per plan node, 2.4-2.8 KiB per captured
// kernel, taken in 2 MiB pages and kept by the driver after the executable is destroyed); no
// device needed, any build.
inline constexpr size_t kCudaGraphBytesPerNode = 3072;
inline constexpr size_t kCudaAllocationPage = size_t(2) << 20;  // cudaMalloc's granularity for large blocks
size_t cuda_graph_bytes(const Graph& g);
// Every device byte a CUDA runtime of a plan of g holds beside the plan's arenas: the workspace,
// the graph executable and the rounding of its one allocation to a whole page. What the runtime's
// memory limit and auto-fit count (throws gl::Error in a build without CUDA, as the workspace).
size_t cuda_runtime_bytes(const Graph& g);
// The current CUDA device's free and total memory (cudaMemGetInfo, after creating the context):
// what an automatic memory limit starts from. Throws gl::Error without CUDA or a device.
void cuda_memory_info(size_t* free_bytes, size_t* total_bytes);

// Which backend runs a plan, as programs let users choose it (`--backend auto|cpu|cuda`).
// automatic: CUDA when this build has it and a usable GPU is present, else the CPU.
enum class Backend : uint8_t { automatic, cpu, cuda };
const char* backend_name(Backend b);          // "auto" | "cpu" | "cuda"
Backend parse_backend(const std::string& s);  // one of those names; throws gl::Error naming s otherwise
// The backend b stands for here: cpu or cuda. automatic takes cuda when cuda_available(), else cpu
// (why, when given, then says why CUDA is not used); cuda throws gl::Error with the reason when
// CUDA is not available.
Backend resolve_backend(Backend b, std::string* why = nullptr);
// The one place a program's backend choice becomes a runtime: make_cpu_runtime or make_cuda_runtime
// as resolve_backend(b) says.
std::unique_ptr<Runtime> make_runtime(Plan plan, Backend b, const RuntimeOptions& o = {});

}  // namespace gl
