// The shared layout: persistent values once by name, the largest activation arena and scratch.
#include "ggml-lite/core/shared_memory.h"

#include <algorithm>
#include <cstdio>

#include "ggml-lite/core/error.h"
#include "ggml-lite/core/runtime.h"

namespace gl {

namespace {

size_t align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

bool is_persistent_owner(const Graph& g, ValueId v) {
    const Value& x = g.v(v);
    return x.base == v && x.category != Category::activations;
}

const char* role_name(Role r) {
    switch (r) {
        case Role::input: return "input";
        case Role::weight: return "weight";
        case Role::param: return "parameter";
        case Role::state: return "optimizer state";
        case Role::computed: return "computed";
    }
    return "?";
}

std::string describe_slot(const SharedLayout::Slot& s) {
    return cat(role_name(s.role), " ", dtype_name(s.dtype), s.shape.str(), " in ", category_name(s.category));
}

std::string describe_value(const Graph& g, ValueId v) {
    const Value& x = g.v(v);
    return cat(role_name(x.role), " ", dtype_name(x.dtype), x.shape().str(), " in ", category_name(x.category));
}

bool same_value(const SharedLayout::Slot& s, const Value& x) {
    return s.category == x.category && s.role == x.role && s.dtype == x.dtype && s.shape == x.shape();
}


// "%10.2f MiB" in the table's column, "%.2f MiB" inline.
std::string mib(size_t b, bool column = true) {
    char buf[32];
    std::snprintf(buf, sizeof buf, column ? "%10.2f MiB" : "%.2f MiB", double(b) / (1024.0 * 1024.0));
    return buf;
}

}  // namespace

LayoutRules layout_rules(const std::string& backend) {
    GL_CHECK(backend == "cpu" || backend == "cuda", "shared layout: unknown backend '", backend,
             "' (expected cpu or cuda)");
    LayoutRules r;
    r.backend = backend;
    if (backend == "cuda") {
        r.scratch = [](const Graph& g) { return cuda_workspace_bytes(g); };
        r.graph = [](const Graph& g) { return cuda_graph_bytes(g); };
        r.page = kCudaAllocationPage;
    }
    return r;
}

SharedLayout make_shared_layout(const std::vector<const Plan*>& plans, const std::string& backend) {
    return make_shared_layout(plans, layout_rules(backend));
}

SharedLayout make_shared_layout(const std::vector<const Plan*>& plans, const LayoutRules& rules) {
    GL_CHECK(rules.backend == "cpu" || rules.backend == "cuda", "shared layout: unknown backend '", rules.backend,
             "' (expected cpu or cuda)");
    GL_CHECK(!plans.empty(), "shared layout: no plans to share memory");
    SharedLayout L;
    L.backend = rules.backend;
    L.rules = rules;
    for (const Plan* p : plans) {
        GL_CHECK(p != nullptr, "shared layout: a null plan");
        L.alignment = std::max(L.alignment, p->options.alignment);
    }
    std::vector<int> last_plan;  // per slot: the last plan that used it (duplicate names)
    for (size_t i = 0; i < plans.size(); i++) {
        const Plan& p = *plans[i];
        const Graph& g = p.graph;
        SharedLayout::Member m;
        m.nodes = g.nodes.size();
        m.activations = p.arena_bytes[size_t(Category::activations)];
        m.scratch = rules.scratch_of(g);
        m.graph = rules.graph_of(g);
        m.alone = p.total_bytes() + m.scratch + m.graph + rules.page;
        L.runtime_bytes += m.graph;
        for (ValueId v = 0; v < g.value_count(); v++) {
            if (!is_persistent_owner(g, v)) continue;
            const Value& x = g.v(v);
            auto [it, added] = L.index.emplace(x.name, L.slots.size());
            if (added) {
                SharedLayout::Slot s{x.name, x.category, x.role, x.dtype, x.shape(), 0, 0};
                size_t& top = L.arena_bytes[size_t(x.category)];
                s.offset = top;
                top = align_up(top + x.bytes(), L.alignment);
                L.slots.push_back(std::move(s));
                last_plan.push_back(-1);
            }
            SharedLayout::Slot& s = L.slots[it->second];
            GL_CHECK(same_value(s, x), "shared layout: '", x.name, "' is a ", describe_slot(s), " in plan ",
                     last_plan[it->second], " but a ", describe_value(g, v), " in plan ", i);
            GL_CHECK(last_plan[it->second] != int(i), "shared layout: plan ", i, " holds two persistent values named '",
                     x.name, "' (values are shared by name, so their names must be unique)");
            last_plan[it->second] = int(i);
            s.plans++;
            m.persistent += x.bytes();
        }
        L.arena_bytes[size_t(Category::activations)] =
            std::max(L.arena_bytes[size_t(Category::activations)], m.activations);
        L.scratch_bytes = std::max(L.scratch_bytes, m.scratch);
        L.members.push_back(m);
    }
    L.runtime_bytes += rules.page;
    // What only one plan holds (a sampler's text encoder, a step's gradients when it is the only step).
    for (size_t i = 0; i < plans.size(); i++) {
        const Graph& g = plans[i]->graph;
        for (ValueId v = 0; v < g.value_count(); v++) {
            if (!is_persistent_owner(g, v) || L.slots[L.index.at(g.v(v).name)].plans > 1) continue;
            L.members[i].unshared += g.v(v).bytes();
            L.members[i].unshared_values++;
        }
    }
    return L;
}

size_t SharedLayout::total_bytes() const {
    size_t t = scratch_bytes + runtime_bytes;
    for (size_t b : arena_bytes) t += b;
    return t;
}

size_t SharedLayout::unshared_bytes() const {
    size_t t = 0;
    for (const Member& m : members) t += m.alone;
    return t;
}

std::string SharedLayout::report() const {
    std::string s = cat("shared memory (", backend, ", ", members.size(), " plans, ", slots.size(),
                        " persistent values held once)\n");
    char line[192];
    for (int c = 0; c < kCategoryCount; c++) {
        std::snprintf(line, sizeof line, "  %-20s %s\n", category_name(Category(c)), mib(arena_bytes[size_t(c)]).c_str());
        s += line;
    }
    std::snprintf(line, sizeof line, "  %-20s %s (%s scratch of the largest plan)\n", "backend scratch",
                  mib(scratch_bytes).c_str(), backend.c_str());
    s += line;
    if (runtime_bytes) {
        std::snprintf(line, sizeof line, "  %-20s %s (CUDA graph executables of %zu plans, allocation page)\n",
                      "runtimes", mib(runtime_bytes).c_str(), members.size());
        s += line;
    }
    std::snprintf(line, sizeof line, "  %-20s %s (each plan on its own: %s)\n", "total", mib(total_bytes()).c_str(),
                  mib(unshared_bytes()).c_str());
    s += line;
    for (size_t i = 0; i < members.size(); i++) {
        const Member& m = members[i];
        s += cat("  plan ", i, ": ", m.nodes, " nodes, activations ", mib(m.activations, false), ", scratch ",
                 mib(m.scratch, false), ", persistent ", mib(m.persistent, false), " (only here: ", m.unshared_values,
                 " values, ", mib(m.unshared, false), ")\n");
    }
    return s;
}

Plan SharedLayout::bind(Plan p) const {
    const Graph& g = p.graph;
    GL_CHECK(alignment % p.options.alignment == 0, "shared memory: the plan aligns values to ", p.options.alignment,
             " bytes, the shared layout to ", alignment);
    std::vector<bool> used(slots.size(), false);
    for (ValueId v = 0; v < g.value_count(); v++) {
        if (!is_persistent_owner(g, v)) continue;
        const Value& x = g.v(v);
        auto it = index.find(x.name);
        GL_CHECK(it != index.end(), "shared memory: ", g.describe(v), " (", describe_value(g, v),
                 ") is not in the shared layout; list its plan in make_shared_layout");
        const Slot& s = slots[it->second];
        GL_CHECK(same_value(s, x), "shared memory: '", x.name, "' is a ", describe_value(g, v),
                 " in this plan but a ", describe_slot(s), " in the shared layout");
        GL_CHECK(!used[it->second], "shared memory: the plan holds two persistent values named '", x.name, "'");
        used[it->second] = true;
        p.offset[size_t(v)] = int64_t(s.offset);
    }
    for (int c = 0; c < kCategoryCount; c++)
        if (Category(c) != Category::activations) p.arena_bytes[size_t(c)] = arena_bytes[size_t(c)];
    const size_t act = p.arena_bytes[size_t(Category::activations)];
    GL_CHECK(act <= arena_bytes[size_t(Category::activations)], "shared memory: the plan's activations need ", act,
             " bytes, the shared arena holds ", arena_bytes[size_t(Category::activations)],
             "; list its plan in make_shared_layout");
    const size_t scratch = rules.scratch_of(p.graph);
    GL_CHECK(scratch <= scratch_bytes, "shared memory: the plan's ", backend, " scratch needs ", scratch,
             " bytes, the shared scratch holds ", scratch_bytes, "; list its plan in make_shared_layout");
    return p;
}

std::shared_ptr<SharedMemory> make_shared_memory(SharedLayout layout) {
    if (layout.backend == "cpu") return make_cpu_shared_memory(std::move(layout));
    if (layout.backend == "cuda") return make_cuda_shared_memory(std::move(layout));
    fail("make_shared_memory: unknown backend '", layout.backend, "' (expected cpu or cuda)");
}

}  // namespace gl
