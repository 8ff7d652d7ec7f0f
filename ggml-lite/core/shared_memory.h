// Several plans on one copy of memory: a trainer's step graphs, one per bucket shape, and its
// sampler's forward-only graphs hold the same frozen weights, LoRA parameters and optimizer state.
// A SharedLayout places the persistent values of all of them once, by name, and one activation
// arena and one backend scratch sized for the largest plan; it is a pure function of the plans, so
// the exact device bytes of the whole run are known before anything is allocated. A SharedMemory
// allocates that layout once, and runtimes made on it (make_cpu_runtime / make_cuda_runtime with
// the memory) bind their values into it instead of allocating arenas of their own.
//
// Rules:
// - Persistent values are the storage owners outside the activation category: weights, parameters,
//   their gradients (named "grad.<param>" by gl::backward) and optimizer state. Values of two plans
//   are one value when their names are equal; their category, role, dtype and shape must be equal
//   too, or the layout is refused with a gl::Error naming the value. Within one plan the names of
//   persistent values must be unique. Writing a weight through one runtime changes it for all, and a
//   training step run by one changes the parameters the others see.
// - Activations (inputs included) and the backend scratch are one allocation that every runtime on
//   the memory overwrites. Runtimes on one memory never run at the same time: on the CPU they are
//   called from one thread; on CUDA they share the memory's stream, so their work is ordered on the
//   device (calls from several host threads at once are not supported). Write a plan's inputs before
//   each of its runs and read its outputs before another plan runs.
// - The layout is fixed when the memory is allocated and never grows, so the addresses a CUDA
//   runtime captured into its CUDA graph stay valid. A plan that was not listed can still run on the
//   memory when it fits (its persistent values are all in the layout, its activations and scratch are
//   no larger); otherwise it is refused naming what does not fit.
#pragma once
#include <array>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "ggml-lite/core/planner.h"

namespace gl {

// What a backend holds on the device beside the arenas of the plans it runs: the node scratch
// (the CUDA workspace) of the largest plan, a graph executable per plan, and the rounding of the
// one allocation to a page. layout_rules("cpu" | "cuda") gives the backends' own; a caller may
// give other functions to plan for a device it does not have (tests simulate a GPU on the CPU).
struct LayoutRules {
    std::string backend = "cpu";  // whose memory make_shared_memory allocates
    std::function<size_t(const Graph&)> scratch;  // per plan, of its (planned) graph; none: 0
    std::function<size_t(const Graph&)> graph;    // per plan: its executable; none: 0
    size_t page = 0;                              // added once to the layout
    size_t scratch_of(const Graph& g) const { return scratch ? scratch(g) : 0; }
    size_t graph_of(const Graph& g) const { return graph ? graph(g) : 0; }
};
// cpu: nothing beside the arenas; cuda: cuda_workspace_bytes, cuda_graph_bytes and one
// kCudaAllocationPage (the workspace rule needs a CUDA build when a plan is laid out).
LayoutRules layout_rules(const std::string& backend);

struct SharedLayout {
    // One persistent value, placed once in its category's arena.
    struct Slot {
        std::string name;
        Category category = Category::frozen;
        Role role = Role::weight;
        DType dtype = DType::f32;
        Shape shape;
        size_t offset = 0;  // in its category's arena
        int plans = 0;      // how many of the listed plans hold it
    };
    // What each listed plan needs (in the order given).
    struct Member {
        size_t nodes = 0;
        size_t activations = 0;  // its activation arena
        size_t scratch = 0;      // its backend scratch
        size_t persistent = 0;   // bytes of the persistent values it holds
        size_t unshared = 0;     // of those, bytes no other listed plan holds
        int unshared_values = 0;
        size_t graph = 0;        // its CUDA graph executable (cuda_graph_bytes; cpu: 0)
        size_t alone = 0;        // what a runtime of this plan alone holds (arenas, scratch, graph, page)
    };

    std::string backend;  // "cpu" or "cuda": whose memory it is (rules.backend)
    LayoutRules rules;    // what sized scratch_bytes and runtime_bytes
    size_t alignment = 0;  // of every slot's offset: the largest alignment of the plans
    std::vector<Slot> slots;  // in order of first appearance (plan order, then value order)
    std::unordered_map<std::string, size_t> index;  // name -> slot
    // Persistent categories: the sum of their slots (aligned); activations: the largest plan's.
    std::array<size_t, kCategoryCount> arena_bytes{};
    size_t scratch_bytes = 0;  // the backend's node scratch (CUDA workspace) of the largest plan
    // CUDA: what the runtimes on the memory hold beside it, their graph executables (cuda_graph_bytes
    // of every plan), and the rounding of the one allocation to a page; cpu: 0.
    size_t runtime_bytes = 0;
    std::vector<Member> members;

    // Every byte the memory and its runtimes hold: the arenas, the scratch and runtime_bytes.
    size_t total_bytes() const;
    // What the plans would allocate each on its own (runtimes without sharing).
    size_t unshared_bytes() const;
    // The arenas by category, the scratch, the total against the unshared sum, and per plan its
    // needs and the persistent values only it holds.
    std::string report() const;

    // The plan with its persistent values placed in this layout (their offsets and the persistent
    // arenas' sizes replaced; its activation layout unchanged). Throws gl::Error naming the value
    // that is missing or differs, or the arena that is too small for it.
    Plan bind(Plan p) const;
};

// The layout of `plans` sharing one memory on `backend` ("cpu" or "cuda"; the CUDA scratch is
// known only to a CUDA build). Throws gl::Error naming the value when two plans disagree on a
// persistent value, or when one plan holds two persistent values of one name.
SharedLayout make_shared_layout(const std::vector<const Plan*>& plans, const std::string& backend);
SharedLayout make_shared_layout(const std::vector<const Plan*>& plans, const LayoutRules& rules);

// The bytes of one layout, allocated once; runtimes made on it hold it (std::shared_ptr) and it
// lives until the last of them is gone.
class SharedMemory {
public:
    SharedMemory(const SharedMemory&) = delete;
    SharedMemory& operator=(const SharedMemory&) = delete;
    virtual ~SharedMemory() = default;
    const SharedLayout& layout() const { return layout_; }
    const std::string& backend() const { return layout_.backend; }
    // A category's arena (nullptr when it holds no bytes) and the backend scratch.
    void* arena(Category c) const { return arenas_[size_t(c)]; }
    void* scratch() const { return scratch_; }
    // Bytes allocated for a category's arena / the scratch: the layout's, once allocated.
    size_t allocated_bytes(Category c) const { return arenas_[size_t(c)] ? layout_.arena_bytes[size_t(c)] : 0; }
    size_t allocated_scratch() const { return scratch_ ? layout_.scratch_bytes : 0; }

protected:
    explicit SharedMemory(SharedLayout l) : layout_(std::move(l)) {}
    SharedLayout layout_;
    std::array<void*, kCategoryCount> arenas_{};
    void* scratch_ = nullptr;
};

// Allocates the layout on its backend (gl::Error when that backend is unavailable).
std::shared_ptr<SharedMemory> make_shared_memory(SharedLayout layout);

// Backend hooks behind make_shared_memory.
std::shared_ptr<SharedMemory> make_cpu_shared_memory(SharedLayout layout);
std::shared_ptr<SharedMemory> make_cuda_shared_memory(SharedLayout layout);

}  // namespace gl
