#include "planner_nets.h"

#include <algorithm>

#include "ggml-lite/core/error.h"
#include "ggml-lite/ops/builder.h"

namespace gltest {

using namespace gl;

ValueId Net::leaf(Role role, const std::string& name, Shape s) {
    ValueId v = role == Role::param ? g.param(name, DType::f32, s)
              : role == Role::weight ? g.weight(name, DType::f32, s)
                                     : g.input(name, DType::f32, s);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> d(size_t(s.numel()));
    for (float& e : d) e = u(rng);
    data.emplace_back(v, std::move(d));
    if (role == Role::param) params.push_back(v);
    return v;
}

void Net::differentiate(const std::vector<ValueId>& terms) {
    for (ValueId t : terms) {
        ValueId r = leaf(Role::weight, cat("proj", t), g.shape(t));
        ValueId term = sum(g, mul(g, t, r));
        loss = loss == kNoValue ? term : add(g, loss, term);
    }
    g.mark_output(loss);
    grads = backward(g, loss);
}

namespace {

struct Picker {
    std::mt19937& rng;
    int uni(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); }
    bool coin(double p = 0.5) { return std::bernoulli_distribution(p)(rng); }
};

}  // namespace

Net random_net(uint32_t seed, int n_ops, bool backward, bool segments) {
    Net n;
    n.rng.seed(seed);
    Graph& g = n.g;
    Picker r{n.rng};
    static const int64_t kDims[] = {1, 2, 3, 4, 6, 8, 16};
    auto dim = [&] { return kDims[r.uni(0, 6)]; };

    std::vector<ValueId> pool;
    const int n_leaves = r.uni(1, 4);
    for (int k = 0; k < n_leaves; k++) {
        Role role = (k == 0 && backward) || r.coin() ? Role::param : r.coin() ? Role::input : Role::weight;
        pool.push_back(n.leaf(role, cat("leaf", k), {dim(), dim()}));
    }
    // A random pool value satisfying pred, or kNoValue.
    auto find = [&](auto pred) {
        std::vector<ValueId> c;
        for (ValueId v : pool)
            if (pred(g.shape(v))) c.push_back(v);
        return c.empty() ? kNoValue : c[size_t(r.uni(0, int(c.size()) - 1))];
    };

    bool in_segment = false;
    for (int i = 0; i < n_ops; i++) {
        if (segments && r.coin(in_segment ? 0.15 : 0.3)) {
            if (in_segment) g.end_segment();
            else g.begin_segment(cat("seg", i));
            in_segment = !in_segment;
        }
        // Mostly chains (recent values), sometimes a long edge.
        const int pn = int(pool.size());
        const ValueId x = pool[size_t(r.coin(0.7) ? r.uni(std::max(0, pn - 3), pn - 1) : r.uni(0, pn - 1))];
        const Shape s = g.shape(x);
        const int64_t rows = s[0], cols = s[1];
        ValueId y = kNoValue;
        switch (r.uni(0, 11)) {
            case 0: y = scale(g, x, 0.5f + 0.25f * float(r.uni(0, 3))); break;
            case 1: y = silu(g, x); break;
            case 2: {
                ValueId o = find([&](const Shape& t) { return t == s; });
                int k = r.uni(0, 2);
                y = k == 0 ? add(g, x, o) : k == 1 ? mul(g, x, o) : sub(g, x, o);
                break;
            }
            case 3: {  // broadcast one row of another value over x
                ValueId o = find([&](const Shape& t) { return t[1] == cols; });
                y = add(g, x, slice(g, o, 0, r.uni(0, int(g.shape(o)[0]) - 1), 1));
                break;
            }
            case 4: {
                int axis = r.uni(0, 1);
                int64_t len = r.uni(1, int(s[axis]));
                y = slice(g, x, axis, r.uni(0, int(s[axis] - len)), len);
                break;
            }
            case 5: y = permute(g, x, {1, 0}); break;
            case 6: y = r.coin() ? reshape(g, x, {cols, rows}) : reshape(g, x, {1, rows * cols}); break;
            case 7: y = expand(g, slice(g, x, 0, r.uni(0, int(rows) - 1), 1), {dim(), cols}); break;
            case 8: {
                if (s.numel() > 512) {
                    y = scale(g, x, 2.0f);
                } else if (ValueId o = find([&](const Shape& t) { return t[1] == cols; }); r.coin()) {
                    y = concat(g, {x, o}, 0);
                } else {
                    ValueId o2 = find([&](const Shape& t) { return t[0] == rows; });
                    y = concat(g, {o2, x, o2}, 1);
                }
                break;
            }
            case 9: {
                ValueId o = find([&](const Shape& t) { return t[0] == cols && t[1] <= 16; });
                y = o != kNoValue && r.coin() ? matmul(g, x, o) : matmul(g, x, x, false, true);
                break;
            }
            case 10: y = r.coin() ? contiguous(g, x, true) : cast(g, cast(g, x, DType::f16), DType::f32); break;
            default: y = dropout(g, x, 0.25f, uint64_t(seed) * 131 + uint64_t(i)); break;
        }
        pool.push_back(y);
        if (r.coin(0.05)) g.mark_output(y);
    }
    if (in_segment) g.end_segment();

    if (backward) {
        std::vector<ValueId> terms{pool.back()};
        for (int k = 0, m = r.uni(0, 2); k < m; k++) terms.push_back(pool[size_t(r.uni(0, int(pool.size()) - 1))]);
        n.differentiate(terms);
    }
    return n;
}

std::vector<std::vector<float>> run_net(const Net& net, const Plan& plan) {
    auto rt = make_cpu_runtime(plan);
    rt->poison(0xff);
    for (auto& [v, d] : net.data) rt->write_f32(v, d);
    rt->run();
    std::vector<std::vector<float>> r;
    for (ValueId p : net.params)
        if (net.grads[p] != kNoValue) r.push_back(rt->read_f32(net.grads[p]));
    for (ValueId v = 0; v < net.g.value_count(); v++)
        if (net.g.v(v).output && net.g.v(v).role == Role::computed) r.push_back(rt->read_f32(v));
    return r;
}

std::string check_topology(const Graph& g) {
    std::vector<int> made(size_t(g.value_count()), -1);
    for (size_t i = 0; i < g.nodes.size(); i++) {
        const Node& n = g.nodes[i];
        for (ValueId x : n.in) {
            if (x < 0 || x >= g.value_count()) return cat("node ", i, " reads invalid value ", x);
            if (g.v(x).producer >= 0 && made[size_t(x)] < 0) return cat("node ", i, " reads ", g.describe(x), " before it is made");
        }
        for (ValueId y : n.out) {
            if (y < 0 || y >= g.value_count()) return cat("node ", i, " writes invalid value ", y);
            if (made[size_t(y)] >= 0) return cat(g.describe(y), " written by nodes ", made[size_t(y)], " and ", i);
            if (g.v(y).producer != int(i)) return cat(g.describe(y), " names producer ", g.v(y).producer, ", made by ", i);
            made[size_t(y)] = int(i);
        }
    }
    for (ValueId v = 0; v < g.value_count(); v++) {
        const Value& x = g.v(v);
        if (x.producer >= 0 && made[size_t(v)] < 0) return cat(g.describe(v), " names producer ", x.producer, " but no node makes it");
        if (x.base < 0 || x.base >= g.value_count() || g.v(x.base).base != x.base) return cat(g.describe(v), " has a bad base");
    }
    return "";
}

}  // namespace gltest
