// A runtime executes a Plan on one backend: it owns one allocation per memory category (or runs
// on a SharedMemory that several runtimes hold: ggml-lite/core/shared_memory.h), binds leaves
// (inputs, weights, parameters, state) and runs the node list.
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "ggml-lite/core/cpu_kernel.h"
#include "ggml-lite/core/planner.h"

namespace gl {

class SharedMemory;

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

private:
    bool profiling_ = false;
    std::vector<double> node_ms_;
    int profiled_runs_ = 0;
};

// The CPU reference backend: computes in f32 (double accumulation where it matters). With a
// SharedMemory (made for "cpu"), the runtime allocates nothing and runs the plan in it.
std::unique_ptr<Runtime> make_cpu_runtime(Plan plan);
std::unique_ptr<Runtime> make_cpu_runtime(Plan plan, std::shared_ptr<SharedMemory> shared);

// The CUDA backend (ggml-lite/cuda). Throws gl::Error when the library was built without
// CUDA or no usable GPU is present; cuda_available says which, without throwing. With a
// SharedMemory (made for "cuda"), the runtime allocates nothing and runs on the memory's stream.
std::unique_ptr<Runtime> make_cuda_runtime(Plan plan);
std::unique_ptr<Runtime> make_cuda_runtime(Plan plan, std::shared_ptr<SharedMemory> shared);
bool cuda_available(std::string* why = nullptr);
// The CUDA workspace a plan needs: its largest node's kernel scratch plus densified inputs.
size_t cuda_workspace_bytes(const Plan& plan);

}  // namespace gl
