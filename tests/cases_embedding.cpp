#include <cmath>

#include "ggml-lite/core/planner.h"
#include "ggml-lite/core/runtime.h"
#include "op_cases.h"

namespace gltest {
namespace {

using namespace gl;
using Leaves = std::vector<std::vector<float>>;

// Rows of `table` ([V, D], row-major) picked by `ids`.
std::vector<float> gather_rows(const std::vector<float>& table, const std::vector<float>& ids, size_t D) {
    std::vector<float> y;
    for (float id : ids)
        for (size_t j = 0; j < D; j++) y.push_back(table[size_t(id) * D + j]);
    return y;
}

// An embedding lookup run with one bad id: must throw at run time, not read out of bounds.
void run_with_id(Graph& g, float bad_id) {
    ValueId table = g.weight("table", DType::f32, {4, 3});
    ValueId ids = g.input("ids", DType::i32, {5});
    g.mark_output(embedding(g, table, ids));
    auto rt = make_cpu_runtime(make_plan(g));
    rt->write_f32(table, std::vector<float>(12, 1.0f));
    rt->write_f32(ids, {0, 1, bad_id, 3, 2});
    rt->run();
}

// diffusers' Timesteps, written directly in double.
std::function<Leaves(const Leaves&)> ref_timesteps(int dim, bool flip, double shift, double max_period) {
    return [=](const Leaves& in) {
        const int half = dim / 2;
        std::vector<float> y;
        for (float t : in[0]) {
            std::vector<double> s, c;
            for (int i = 0; i < half; i++) {
                double arg = double(t) * std::exp(-std::log(max_period) * i / (half - shift));
                s.push_back(std::sin(arg));
                c.push_back(std::cos(arg));
            }
            const std::vector<double>& first = flip ? c : s;
            const std::vector<double>& second = flip ? s : c;
            for (double v : first) y.push_back(float(v));
            for (double v : second) y.push_back(float(v));
            if (dim % 2) y.push_back(0.0f);
        }
        return Leaves{y};
    };
}

// SD timesteps plus a fractional one; the largest arguments (~1000 rad) bound the tolerance.
const std::vector<float> kTimesteps = {0.0f, 1.0f, 250.5f, 999.0f};

Register r({
    {"embedding", "table [5,3], ids [2,4] with repeats (gradient scatter-adds)", [](CaseBuilder& b) {
         ValueId table = b.x("table", {5, 3});
         ValueId ids = b.ids("ids", {2, 4}, 5);
         b.set(ids, {0, 3, 3, 1, 4, 3, 0, 2});
         b.out(embedding(b.g, table, ids));
     },
     [](Graph& g) { embedding(g, g.weight("table", DType::f32, {5, 3}), g.input("ids", DType::f32, {2})); }},
    {"embedding", "ids [2,2,2] -> [2,2,2,4], some rows never used", [](CaseBuilder& b) {
         ValueId table = b.x("table", {9, 4});
         b.out(embedding(b.g, table, b.ids("ids", {2, 2, 2}, 9)));
     },
     [](Graph& g) { embedding(g, g.weight("table", DType::f32, {5, 3}), g.input("ids", DType::i32, {1, 2, 2, 2})); }},
    {"embedding", "table shared with another use (gradients add)", [](CaseBuilder& b) {
         ValueId table = b.x("table", {6, 2});
         ValueId e = embedding(b.g, table, b.ids("ids", {3}, 6));
         b.out(add(b.g, sum(b.g, e, 0, false), sum(b.g, table, 0, false)));
     },
     [](Graph& g) { embedding(g, g.weight("table", DType::f32, {5}), g.input("ids", DType::i32, {2})); }},
    {"embedding", "bf16 table rows (id past the table throws at run time)", [](CaseBuilder& b) {
         ValueId table = b.c("table", {4, 2}, 0, 1, DType::bf16);
         b.set(table, {0.5f, -1.0f, 2.0f, 0.25f, -3.0f, 1.5f, 8.0f, -0.125f});
         ValueId ids = b.ids("ids", {5}, 4);
         b.set(ids, {3, 0, 2, 2, 1});
         b.out(cast(b.g, embedding(b.g, table, ids), DType::f32));
     },
     [](Graph& g) { run_with_id(g, 4.0f); },
     [](const Leaves& in) { return Leaves{gather_rows(in[0], in[1], 2)}; }, 0.0},
    {"embedding", "f32 lookup values (negative id throws at run time)", [](CaseBuilder& b) {
         ValueId table = b.c("table", {7, 3});
         b.out(embedding(b.g, table, b.ids("ids", {2, 3}, 7)));
     },
     [](Graph& g) { run_with_id(g, -1.0f); },
     [](const Leaves& in) { return Leaves{gather_rows(in[0], in[1], 3)}; }, 0.0},
    {"timestep_embedding", "dim 8, flip_sin_to_cos (SD's UNet)", [](CaseBuilder& b) {
         ValueId t = b.c("t", {4});
         b.set(t, kTimesteps);
         b.out(timestep_embedding(b.g, t, 8, true));
     },
     [](Graph& g) { timestep_embedding(g, g.input("t", DType::f32, {2, 1}), 8); },
     ref_timesteps(8, true, 0.0, 10000.0), 1e-3},
    {"timestep_embedding", "odd dim 7, [sin, cos], zero padded", [](CaseBuilder& b) {
         ValueId t = b.c("t", {4});
         b.set(t, kTimesteps);
         b.out(timestep_embedding(b.g, t, 7, false));
     },
     [](Graph& g) { timestep_embedding(g, g.input("t", DType::f32, {2}), 0); },
     ref_timesteps(7, false, 0.0, 10000.0), 1e-3},
    {"timestep_embedding", "odd dim 9 flipped, shift 1, max_period 1000", [](CaseBuilder& b) {
         ValueId t = b.c("t", {4});
         b.set(t, kTimesteps);
         b.out(timestep_embedding(b.g, t, 9, true, 1.0f, 1000.0f));
     },
     [](Graph& g) { timestep_embedding(g, g.input("t", DType::f32, {2}), 8, true, 4.0f); },
     ref_timesteps(9, true, 1.0, 1000.0), 1e-3},
    {"timestep_embedding", "f16 timesteps, dim 1 is all padding", [](CaseBuilder& b) {
         ValueId t = b.c("t", {3}, 0, 1, DType::f16);
         b.set(t, {0.0f, 10.0f, 500.0f});
         b.out(timestep_embedding(b.g, t, 1));
     },
     [](Graph& g) { timestep_embedding(g, g.input("t", DType::i32, {2}), 4); },
     [](const Leaves&) { return Leaves{{0.0f, 0.0f, 0.0f}}; }, 0.0},
});

}  // namespace
}  // namespace gltest
