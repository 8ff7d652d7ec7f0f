// Op-list-driven tests: every op has cases; every case passes a finite-difference gradient
// check (or a reference check when the op has no gradient) and a bad-call check.
#include <doctest/doctest.h>

#include <algorithm>
#include <set>

#include "ggml-lite/core/error.h"
#include "ggml-lite/core/planner.h"
#include "op_harness.h"

using namespace gl;
using namespace gltest;

namespace {

std::vector<const OpCase*> cases_of(const std::string& op) {
    std::vector<const OpCase*> r;
    for (const OpCase& c : registry())
        if (c.op == op) r.push_back(&c);
    return r;
}

// Runs the case's forward graph with the given leaf data and returns the loss.
double forward_loss(gl::Runtime& rt, ValueId loss) { return double(rt.read_f32(loss)[0]); }

void check_gradients(const OpCase& c) {
    auto bc = build_case(c, true);
    REQUIRE_MESSAGE(bc->loss != kNoValue, c.op, "/", c.label, ": differentiable case needs a float output");
    REQUIRE_MESSAGE(!bc->params.empty(), c.op, "/", c.label, ": differentiable case needs an x() input");
    auto rt = make_cpu_runtime(make_plan(bc->b.g));
    rt->poison(0xff);
    bind_leaves(*rt, bc->b);
    rt->run();

    auto fwd = make_cpu_runtime(make_plan(bc->forward));
    bind_leaves(*fwd, bc->b);
    std::mt19937 pick(7);
    for (ValueId p : bc->params) {
        ValueId gp = bc->grads[p];
        std::vector<float> analytic = gp == kNoValue ? std::vector<float>(size_t(bc->b.g.v(p).numel()), 0.0f)
                                                     : rt->read_f32(gp);
        std::vector<float> x;
        for (auto& [v, d] : bc->b.data)
            if (v == p) x = d;
        // Check up to 48 elements (all of them for small inputs).
        std::vector<size_t> idx(x.size());
        for (size_t i = 0; i < idx.size(); i++) idx[i] = i;
        std::shuffle(idx.begin(), idx.end(), pick);
        if (idx.size() > 48) idx.resize(48);
        std::vector<float> num, ana;
        const float eps = c.fd_eps;
        for (size_t i : idx) {
            std::vector<float> xp = x;
            xp[i] = x[i] + eps;
            fwd->write_f32(p, xp);
            fwd->run();
            double lp = forward_loss(*fwd, bc->loss);
            xp[i] = x[i] - eps;
            fwd->write_f32(p, xp);
            fwd->run();
            double lm = forward_loss(*fwd, bc->loss);
            num.push_back(float((lp - lm) / (2.0 * eps)));
            ana.push_back(analytic[i]);
        }
        fwd->write_f32(p, x);
        double err = rel_err(ana, num);
        CHECK_MESSAGE(err <= c.tol, c.op, "/", c.label, ": gradient of ", bc->b.g.v(p).name, " off by ", err,
                      " (relative to its largest element)");
    }
}

void check_reference(const OpCase& c) {
    auto bc = build_case(c, false);
    auto rt = make_cpu_runtime(make_plan(bc->b.g));
    rt->poison(0xff);
    bind_leaves(*rt, bc->b);
    rt->run();
    std::vector<std::vector<float>> leaves;
    for (auto& [v, d] : bc->b.data) leaves.push_back(d);
    auto expected = c.reference(leaves);
    REQUIRE(expected.size() == bc->b.outs.size());
    for (size_t k = 0; k < expected.size(); k++) {
        auto got = rt->read_f32(bc->b.outs[k]);
        CHECK_MESSAGE(rel_err(got, expected[k]) <= c.tol, c.op, "/", c.label, ": output ", k, " differs from the reference");
    }
}

}  // namespace

TEST_CASE("every op in the op list has test cases") {
    MESSAGE(kOpCount, " ops in the op list, ", registry().size(), " cases");
    for (int i = 0; i < kOpCount; i++) {
        const OpDef& def = op_def(Op(i));
        if (def.flags & kOpGradHelper) continue;  // covered through its forward op's gradient check
        CHECK_MESSAGE(!cases_of(def.name).empty(), "op ", def.name, " has no test case in tests/cases_*.cpp");
    }
}

TEST_CASE("every gradient helper op is exercised by some gradient check") {
    std::set<int> used;
    for (const OpCase& c : registry()) {
        if (c.reference) continue;
        auto bc = build_case(c, true);
        for (const Node& n : bc->b.g.nodes)
            if (n.backward) used.insert(int(n.op));
    }
    for (int i = 0; i < kOpCount; i++) {
        const OpDef& def = op_def(Op(i));
        if (def.flags & kOpGradHelper) CHECK_MESSAGE(used.count(i), "grad helper ", def.name, " is never exercised");
    }
}

TEST_CASE("op cases: gradients by finite differences, references, bad calls") {
    for (const OpCase& c : registry()) {
        SUBCASE((c.op + "/" + c.label).c_str()) {
            const OpDef* def = nullptr;
            for (int i = 0; i < kOpCount; i++)
                if (c.op == op_def(Op(i)).name) def = &op_def(Op(i));
            REQUIRE_MESSAGE(def, "case names unknown op ", c.op);
            if (c.reference)
                check_reference(c);
            else
                check_gradients(c);
            REQUIRE_MESSAGE(c.bad, c.op, "/", c.label, ": case has no bad-call check");
            Graph g;
            CHECK_THROWS_AS(c.bad(g), gl::Error);
        }
    }
}
