// The two-param net of the 8-bit optimizer tests (test_optim_lion8bit.cpp, test_optim_sgd8bit.cpp,
// test_optim_ademamix8bit.cpp): "big" (kBig elements: 8-bit state) and "small" (kSmall, under
// kAdam8bitMinElements: the fp32 step) in one group "unet", on the CPU runtime. The weights start at
// start(n); step k's gradient, grad(p, k), pulls every weight to 0 plus a per-step wobble. Parting
// measures how far an 8-bit trajectory parts from an fp32 one.
#pragma once
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "ggml-lite/core/planner.h"
#include "ggml-lite/core/runtime.h"
#include "optim/optimizer.h"

namespace gltest {

struct TwoParamNet {
    static constexpr int64_t kBig = 5000, kSmall = 300;
    gl::Graph g;
    gl::ValueId big, small, gbig, gsmall;
    std::unique_ptr<gl::Runtime> rt;
    std::unique_ptr<optim::Optimizer> opt;

    TwoParamNet(const std::string& kind, const std::vector<std::string>& args, double lr) {
        big = g.param("big", gl::DType::f32, gl::Shape{kBig});
        small = g.param("small", gl::DType::f32, gl::Shape{kSmall});
        gbig = g.input("grad.big", gl::DType::f32, gl::Shape{kBig});
        gsmall = g.input("grad.small", gl::DType::f32, gl::Shape{kSmall});
        opt = std::make_unique<optim::Optimizer>(optim::parse_optimizer(kind, args));
        opt->add_group(g, "unet", {big, small}, {gbig, gsmall}, lr);
        opt->finish(g);
        rt = gl::make_cpu_runtime(gl::make_plan(g));
        for (auto [p, n] : {std::pair{big, kBig}, {small, kSmall}}) rt->write_f32(p, start(n));
        opt->init_state(*rt);
    }
    static std::vector<float> start(int64_t n) {
        std::vector<float> x(static_cast<size_t>(n));
        for (size_t i = 0; i < x.size(); i++) x[i] = 0.3f * std::sin(0.11f * float(i));
        return x;
    }
    static std::vector<float> grad(const std::vector<float>& p, int k) {
        std::vector<float> x = p;
        for (size_t i = 0; i < x.size(); i++) x[i] = x[i] * 0.5f + 0.05f * std::sin(0.37f * float(i) + float(k));
        return x;
    }
    void step(int k) {
        for (auto [p, gr] : {std::pair{big, gbig}, {small, gsmall}}) rt->write_f32(gr, grad(rt->read_f32(p), k));
        opt->set_step(*rt, opt->next_step());
        rt->run();
        REQUIRE_FALSE(opt->after_step(*rt).skipped);
    }
};

// How far an 8-bit trajectory parts from its fp32 reference: worst, the largest |got - ref| over the
// steps added; moved, the largest distance |ref - start| the reference travelled.
struct Parting {
    double worst = 0, moved = 0;
    void add(const std::vector<float>& got, const std::vector<float>& ref, const std::vector<float>& start) {
        for (size_t i = 0; i < got.size(); i++) {
            worst = std::max(worst, std::fabs(double(got[i]) - ref[i]));
            moved = std::max(moved, std::fabs(double(ref[i]) - start[i]));
        }
    }
};

}  // namespace gltest
