// A runtime executes a Plan on one backend: it owns one allocation per memory category,
// binds leaves (inputs, weights, parameters, state) and runs the node list.
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "ggml-lite/core/cpu_kernel.h"
#include "ggml-lite/core/planner.h"

namespace gl {

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
    // Sets every byte of every arena to `byte` (tests poison memory with it).
    virtual void poison(unsigned char byte) = 0;
    // Bytes this runtime allocated for a category's arena (tests hold it to the plan).
    virtual size_t allocated_bytes(Category c) const = 0;

    // What the backend holds: the plan's arenas plus backend extras (workspace, context).
    virtual std::string memory_report() const { return plan_.report(); }

    // Runs on `owner`'s arena for the persistent category c (frozen weights, trainable parameters,
    // optimizer state) instead of an own copy, which is released: a model built at several shapes
    // (one plan per image size, VAE tile or prompt length) holds and loads its weights once. Both
    // plans must lay c out alike (the same named values, shapes and dtypes at the same offsets;
    // checked, gl::Error naming the first difference). owner must be of the same backend and
    // outlive this runtime; what either writes there, both see.
    void share_arena(Category c, Runtime& owner);

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
    // Backends: use owner's arena for c from now on (same backend, layout checked by share_arena).
    virtual void adopt_arena(Category c, Runtime& owner) = 0;
    // Backends report each node's time of a profiled run, then close the run.
    void add_node_time(size_t node, double ms) { node_ms_[node] += ms; }
    void end_profiled_run() { profiled_runs_++; }
    // Where value id lives, given each category's arena base: the base value's offset, with the
    // value's own dtype and layout (views included).
    TensorRef locate(ValueId id, const std::array<void*, kCategoryCount>& arena_base) const;
    explicit Runtime(Plan plan) : plan_(std::move(plan)) {}
    Plan plan_;

private:
    bool profiling_ = false;
    std::vector<double> node_ms_;
    int profiled_runs_ = 0;
};

// The CPU reference backend: computes in f32 (double accumulation where it matters).
std::unique_ptr<Runtime> make_cpu_runtime(Plan plan);

// The CUDA backend (ggml-lite/cuda). Throws gl::Error when the library was built without
// CUDA or no usable GPU is present; cuda_available says which, without throwing.
std::unique_ptr<Runtime> make_cuda_runtime(Plan plan);
bool cuda_available(std::string* why = nullptr);

}  // namespace gl
