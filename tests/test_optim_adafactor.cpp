// Adafactor's factoring as transformers' Adafactor decides it: by the parameter's torch shape, so
// a kohya 1x1-conv LoRA weight held [r, in] but declared [r, in, 1, 1] runs unfactored. The
// trajectories against the reference: test_optim.cpp.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "ggml-lite/core/planner.h"
#include "ggml-lite/core/runtime.h"
#include "optim/optimizer.h"
#include "test_util.h"

using namespace gl;

using gltest::error_of;

TEST_CASE("Adafactor factors a param as its torch shape says: [4, 6] held as [4, 6, 1, 1] runs unfactored") {
    // transformers' Adafactor factors a 4-D [r, in, 1, 1] weight (a kohya 1x1-conv LoRA weight) over
    // its last two dims, 1 x 1: row factor 1, column factor rsqrt(v) with v the full running mean,
    // i.e. the unfactored update. The same values as a 1-D param must follow bit for bit.
    auto run = [](const Shape& shape, const std::vector<Shape>& torch_shapes, std::vector<std::string>* state_names) {
        Graph g;
        ValueId p = g.param("w", DType::f32, shape), gr = g.input("grad", DType::f32, shape);
        optim::Optimizer opt(optim::parse_optimizer("Adafactor", {}));
        opt.add_group(g, "g", {p}, {gr}, 1e-3, -1.0f, torch_shapes);
        opt.finish(g);
        auto rt = make_cpu_runtime(make_plan(g));
        std::vector<float> w(24);
        for (size_t i = 0; i < w.size(); i++) w[i] = 0.1f * std::cos(0.7f * float(i));
        rt->write_f32(p, w);
        opt.init_state(*rt);
        for (int k = 0; k < 6; k++) {
            std::vector<float> gv(24);
            for (size_t i = 0; i < gv.size(); i++) gv[i] = 0.01f * std::sin(0.3f * float(i * (k + 1)) + 0.2f);
            rt->write_f32(gr, gv);
            opt.set_step(*rt, opt.next_step());
            rt->run();
            opt.after_step(*rt);
        }
        if (state_names)
            for (ValueId s : opt.state_values()) state_names->push_back(g.v(s).name + " " + g.v(s).shape().str());
        return rt->read_f32(p);
    };
    std::vector<std::string> as_4d, as_2d;
    const auto flat = run(Shape{24}, {}, nullptr);
    CHECK(run(Shape{4, 6}, {Shape{4, 6, 1, 1}}, &as_4d) == flat);
    CHECK(run(Shape{4, 6}, {}, &as_2d) != flat);  // factored 4 x 6: another trajectory
    CHECK(as_4d == std::vector<std::string>{"optim.w.exp_avg_sq_row [24]", "optim.w.exp_avg_sq_col [24]"});
    CHECK(as_2d == std::vector<std::string>{"optim.w.exp_avg_sq_row [4]", "optim.w.exp_avg_sq_col [6]"});
    CHECK(error_of([&] { run(Shape{4, 6}, {Shape{5, 6, 1, 1}}, nullptr); }).find("element count") != std::string::npos);
}
