// Runtime::set_profiling / profile_report on the CPU backend: node times add up per run, views
// cost nothing, the report names the ops, and profiling changes no result.
#include <doctest/doctest.h>

#include "ggml-lite/core/autodiff.h"
#include "ggml-lite/core/planner.h"
#include "ggml-lite/core/runtime.h"
#include "ggml-lite/ops/builder.h"

using namespace gl;

TEST_CASE("runtime profile: per-node times, by op and phase, without changing results") {
    Graph g;
    ValueId x = g.input("x", DType::f32, {64, 96});
    ValueId w = g.param("w", DType::f32, {80, 96});
    ValueId y = silu(g, linear(g, x, w));
    ValueId loss = sum(g, reshape(g, y, {80 * 64}));
    g.mark_output(loss);
    Gradients gr = backward(g, loss);
    g.mark_output(gr[w]);
    auto rt = make_cpu_runtime(make_plan(g));
    std::vector<float> xs(64 * 96), ws(80 * 96);
    for (size_t i = 0; i < xs.size(); i++) xs[i] = float(i % 7) * 0.1f - 0.3f;
    for (size_t i = 0; i < ws.size(); i++) ws[i] = float(i % 5) * 0.05f - 0.1f;
    rt->write_f32(x, xs);
    rt->write_f32(w, ws);

    CHECK(rt->profile_report().find("no profiled runs") != std::string::npos);
    rt->run();
    const std::vector<float> plain = rt->read_f32(gr[w]);
    CHECK(rt->profiled_runs() == 0);  // off: nothing recorded

    rt->set_profiling(true);
    rt->run();
    rt->run();
    rt->set_profiling(false);
    rt->run();
    CHECK(rt->profiled_runs() == 2);
    CHECK(rt->read_f32(gr[w]) == plain);

    const Graph& pg = rt->plan().graph;
    double total = 0;
    for (size_t i = 0; i < pg.nodes.size(); i++) {
        const double ms = rt->profiled_ms(i);
        CHECK(ms >= 0.0);
        if (pg.nodes[i].op == Op::reshape) CHECK(ms == 0.0);  // views launch nothing
        if (pg.nodes[i].op == Op::linear) CHECK(ms > 0.0);
        total += ms;
    }
    CHECK(total > 0.0);
    const std::string r = rt->profile_report(3);
    INFO(r);
    CHECK(r.find("profile (cpu): 2 runs") != std::string::npos);
    CHECK(r.find("linear") != std::string::npos);
    CHECK(r.find("backward") != std::string::npos);
    CHECK(r.find("the 3 slowest nodes") != std::string::npos);
    CHECK(r.find("the 3 costliest op / input shapes") != std::string::npos);
    rt->reset_profile();
    CHECK(rt->profiled_runs() == 0);
    CHECK(rt->profiled_ms(0) == 0.0);
}
