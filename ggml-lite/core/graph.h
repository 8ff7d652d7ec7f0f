// The graph: values (typed, shaped, named) and nodes (op applications) in topological order.
// Building a graph allocates no tensor memory; the planner decides where every byte lives.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "ggml-lite/core/checked.h"
#include "ggml-lite/core/dtype.h"
#include "ggml-lite/core/op.h"
#include "ggml-lite/core/shape.h"

namespace gl {

using ValueId = int32_t;
constexpr ValueId kNoValue = -1;

// Memory categories: each is one arena, planned and reported separately.
enum class Category : uint8_t { frozen, trainable, optimizer, activations, workspace };
constexpr int kCategoryCount = 5;
const char* category_name(Category c);

// Where a value comes from. Leaves (everything but computed) are bound by the caller.
enum class Role : uint8_t {
    input,     // data fed each step (images, latents, ids): lives in the activation arena
    weight,    // frozen weight: never gets a gradient
    param,     // trainable parameter: gets a gradient
    state,     // optimizer state
    computed,  // produced by a node
};

struct Value {
    std::string name;
    DType dtype = DType::f32;
    Layout layout;          // shape, strides and offset, in elements of the base's storage
    Role role = Role::computed;
    Category category = Category::activations;
    int producer = -1;      // index of the producing node, -1 for leaves
    ValueId base = kNoValue;  // the value that owns the storage (itself unless a view)
    bool output = false;    // kept alive until the end of the graph

    const Shape& shape() const { return layout.shape; }
    int64_t numel() const { return layout.shape.numel(); }
    bool is_view(ValueId self) const { return base != self; }
    // Throws gl::Error naming the value when its size exceeds int64 bytes.
    size_t bytes() const { return size_t(checked_bytes(numel(), dtype_size(dtype), "value '", name, "'")); }
};

struct Node {
    Op op;
    std::vector<ValueId> in;
    std::vector<ValueId> out;
    Params p;
    int segment = -1;      // checkpoint segment (forward nodes only), -1 when none
    bool backward = false; // built by autodiff
    int recompute_of = -1; // for a recompute clone: the forward node it repeats
};

class Graph {
public:
    std::vector<Value> values;
    std::vector<Node> nodes;
    std::vector<std::string> segment_names;

    // Leaves.
    ValueId input(const std::string& name, DType t, const Shape& s);
    ValueId weight(const std::string& name, DType t, const Shape& s);
    ValueId param(const std::string& name, DType t, const Shape& s);
    ValueId state(const std::string& name, DType t, const Shape& s);

    // Appends a node applying op to inputs; validates through the op's shape rule (throws
    // gl::Error naming the op, shapes and dtypes) and returns the new output values.
    std::vector<ValueId> apply(Op op, const std::vector<ValueId>& in, const Params& p = {});
    // Single-output convenience.
    ValueId apply1(Op op, const std::vector<ValueId>& in, const Params& p = {}) { return apply(op, in, p)[0]; }

    const Value& v(ValueId id) const;
    Value& v(ValueId id);
    const Shape& shape(ValueId id) const { return v(id).shape(); }
    DType dtype(ValueId id) const { return v(id).dtype; }
    int value_count() const { return int(values.size()); }

    void set_name(ValueId id, const std::string& name) { v(id).name = name; }
    void mark_output(ValueId id);

    // Name scopes: values built inside get "scope.op" names ("down.0.res.conv2d").
    void push_scope(const std::string& s);
    void pop_scope();
    // Checkpoint segments: forward nodes built between begin and end belong to it.
    void begin_segment(const std::string& name);
    void end_segment();
    int current_segment() const { return segment_; }

    // Index of the first node built by autodiff (nodes.size() when there is no backward).
    int backward_begin() const;
    bool in_backward = false;  // set by autodiff while it builds nodes

    std::string describe(ValueId id) const;  // "name f32[2, 3]"
private:
    ValueId add_leaf(const std::string& name, DType t, const Shape& s, Role r, Category c);
    std::string scope_;
    std::vector<size_t> scope_stack_;
    int segment_ = -1;
};

// RAII helpers for scopes and segments.
struct Scope {
    Graph& g;
    Scope(Graph& g_, const std::string& s) : g(g_) { g.push_scope(s); }
    ~Scope() { g.pop_scope(); }
};
struct Segment {
    Graph& g;
    Segment(Graph& g_, const std::string& s) : g(g_) { g.begin_segment(s); }
    ~Segment() { g.end_segment(); }
};

}  // namespace gl
