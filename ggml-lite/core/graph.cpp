#include "ggml-lite/core/graph.h"

#include "ggml-lite/core/error.h"

namespace gl {

const char* category_name(Category c) {
    switch (c) {
        case Category::frozen: return "frozen weights";
        case Category::trainable: return "trainable + grads";
        case Category::optimizer: return "optimizer state";
        case Category::activations: return "activations";
        case Category::workspace: return "workspace";
    }
    return "invalid";
}

ValueId Graph::add_leaf(const std::string& name, DType t, const Shape& s, Role r, Category c) {
    Value v;
    v.name = scope_.empty() ? name : scope_ + "." + name;
    v.dtype = t;
    // A size that overflows is refused here, naming the leaf, before anything plans with it.
    checked_bytes(checked_numel(s.d.data(), size_t(s.nd), "graph: leaf '", v.name, "'"), dtype_size(t), "graph: leaf '",
                  v.name, "'");
    v.layout = Layout::contiguous(s);
    v.role = r;
    v.category = c;
    v.base = ValueId(values.size());
    values.push_back(std::move(v));
    return values.back().base;
}

ValueId Graph::input(const std::string& n, DType t, const Shape& s) { return add_leaf(n, t, s, Role::input, Category::activations); }
ValueId Graph::weight(const std::string& n, DType t, const Shape& s) { return add_leaf(n, t, s, Role::weight, Category::frozen); }
ValueId Graph::param(const std::string& n, DType t, const Shape& s) { return add_leaf(n, t, s, Role::param, Category::trainable); }
ValueId Graph::state(const std::string& n, DType t, const Shape& s) { return add_leaf(n, t, s, Role::state, Category::optimizer); }

const Value& Graph::v(ValueId id) const {
    GL_CHECK(id >= 0 && id < ValueId(values.size()), "graph: invalid value id ", id);
    return values[size_t(id)];
}
Value& Graph::v(ValueId id) {
    GL_CHECK(id >= 0 && id < ValueId(values.size()), "graph: invalid value id ", id);
    return values[size_t(id)];
}

std::vector<ValueId> Graph::apply(Op op, const std::vector<ValueId>& in, const Params& p) {
    for (ValueId x : in) v(x);  // validates ids before the shape rule reads them
    const OpDef& def = op_def(op);
    OpCall call{op, *this, in, p};
    std::vector<OutSpec> outs = def.infer(call);

    Node n;
    n.op = op;
    n.in = in;
    n.p = p;
    n.backward = in_backward;
    n.segment = in_backward ? -1 : segment_;
    int node_index = int(nodes.size());
    for (size_t k = 0; k < outs.size(); k++) {
        const Shape& os = outs[k].layout.shape;
        checked_bytes(checked_numel(os.d.data(), size_t(os.nd), "graph: ", def.name, " output"), dtype_size(outs[k].dtype),
                      "graph: ", def.name, " output ", os.str());
        Value val;
        val.name = scope_.empty() ? def.name : scope_ + "." + def.name;
        if (outs.size() > 1) val.name += cat("#", k);
        val.dtype = outs[k].dtype;
        val.layout = outs[k].layout;
        val.producer = node_index;
        val.category = Category::activations;
        ValueId id = ValueId(values.size());
        val.base = (def.flags & kOpView) && k == 0 ? v(in[0]).base : id;
        if (val.base != id) {
            // A view of a leaf (weight, param) stays in that leaf's arena.
            val.category = v(val.base).category;
        }
        values.push_back(std::move(val));
        n.out.push_back(id);
    }
    nodes.push_back(std::move(n));
    return nodes.back().out;
}

void Graph::mark_output(ValueId id) {
    v(id).output = true;
    v(v(id).base).output = true;
}

void Graph::push_scope(const std::string& s) {
    scope_stack_.push_back(scope_.size());
    scope_ = scope_.empty() ? s : scope_ + "." + s;
}

void Graph::pop_scope() {
    GL_CHECK(!scope_stack_.empty(), "graph: pop_scope without push_scope");
    scope_.resize(scope_stack_.back());
    scope_stack_.pop_back();
}

void Graph::begin_segment(const std::string& name) {
    GL_CHECK(segment_ < 0, "graph: segment '", name, "' begun inside segment '", segment_names[size_t(segment_)],
             "' (segments do not nest)");
    segment_names.push_back(scope_.empty() ? name : scope_ + "." + name);
    segment_ = int(segment_names.size()) - 1;
}

void Graph::end_segment() {
    GL_CHECK(segment_ >= 0, "graph: end_segment without begin_segment");
    segment_ = -1;
}

int Graph::backward_begin() const {
    for (size_t i = 0; i < nodes.size(); i++)
        if (nodes[i].backward) return int(i);
    return int(nodes.size());
}

std::string Graph::describe(ValueId id) const {
    const Value& x = v(id);
    return cat(x.name, " ", dtype_name(x.dtype), x.shape().str());
}

}  // namespace gl
