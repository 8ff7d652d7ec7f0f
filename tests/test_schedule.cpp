// LR schedules against diffusers' get_scheduler driven through torch's LambdaLR
// (tests/golden/make_schedule_golden.py -> tests/golden/data/schedule/lr.json).
#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "ggml-lite/core/error.h"
#include "optim/schedule.h"

using optim::LrKind;
using optim::LrSchedule;

namespace {
std::string golden(const std::string& name) {
    std::string f = __FILE__;
    return f.substr(0, f.find_last_of('/')) + "/golden/data/schedule/" + name;
}
}  // namespace

TEST_CASE("lr schedule: matches diffusers get_scheduler over every step") {
    std::ifstream f(golden("lr.json"));
    REQUIRE(f.good());
    const auto doc = nlohmann::json::parse(f);
    int cases = 0;
    double worst = 0.0;
    for (const auto& c : doc.at("cases")) {
        LrSchedule s = LrSchedule::make(optim::parse_lr_kind(c.at("kind").get<std::string>()),
                                        c.at("base_lr").get<double>(), c.at("warmup_steps").get<int64_t>(),
                                        c.at("total_steps").get<int64_t>());
        if (s.kind == LrKind::CosineWithRestarts) s.num_cycles = c.at("num_cycles").get<double>();
        s.power = c.at("power").get<double>();
        s.lr_end = c.at("lr_end").get<double>();
        const auto& lrs = c.at("lr");
        for (size_t k = 0; k < lrs.size(); ++k) {
            const double want = lrs[k].get<double>();
            const double got = s.base_lr * s.multiplier(int64_t(k));
            const double rel = std::abs(got - want) / std::max(std::abs(want), 1e-30);
            if (want == 0.0) {
                CHECK(std::abs(got) <= 1e-12 * s.base_lr);
            } else {
                CHECK_MESSAGE(rel <= 1e-6, c.at("kind"), " warmup ", s.warmup_steps, " step ", k, ": ", got,
                              " vs ", want);
                worst = std::max(worst, rel);
            }
            // lr_at is the same value in f32.
            CHECK(std::abs(double(s.lr_at(int64_t(k))) - want) <= 1e-6 * std::abs(want) + 1e-30);
        }
        ++cases;
    }
    CHECK(cases == 13);
    MESSAGE("lr schedules: ", cases, " cases, worst relative error ", worst);
}

TEST_CASE("lr schedule: names, warmup ratio as kohya, bad settings") {
    for (const char* n : {"constant", "constant_with_warmup", "linear", "cosine", "cosine_with_restarts", "polynomial"})
        CHECK(std::string(optim::lr_kind_name(optim::parse_lr_kind(n))) == n);
    CHECK_THROWS_AS(optim::parse_lr_kind("cosine_annealing"), gl::Error);

    // kohya: int(ratio * total) truncates.
    CHECK(optim::warmup_steps_from_ratio(0.1, 1000) == 100);
    CHECK(optim::warmup_steps_from_ratio(0.05, 99) == 4);  // 4.95 -> 4
    CHECK(optim::warmup_steps_from_ratio(0.0, 50) == 0);
    CHECK(optim::warmup_steps_from_ratio(1.0, 50) == 50);
    CHECK_THROWS_AS(optim::warmup_steps_from_ratio(1.5, 50), gl::Error);
    CHECK_THROWS_AS(optim::warmup_steps_from_ratio(-0.1, 50), gl::Error);
    CHECK_THROWS_AS(optim::warmup_steps_from_ratio(NAN, 50), gl::Error);

    // Constant ignores the warmup, as get_constant_schedule does.
    auto c = LrSchedule::make(LrKind::Constant, 1e-3, 10, 100);
    CHECK(c.multiplier(0) == 1.0);
    // Warmup starts at 0 and reaches 1 at the warmup step.
    auto w = LrSchedule::make(LrKind::ConstantWithWarmup, 1e-3, 4, 100);
    CHECK(w.multiplier(0) == 0.0);
    CHECK(w.multiplier(2) == 0.5);
    CHECK(w.multiplier(4) == 1.0);

    auto p = LrSchedule::make(LrKind::Polynomial, 1e-3, 10, 10);
    CHECK_THROWS_AS(p.multiplier(3), gl::Error);  // no decay steps
    p.total_steps = 20;
    p.lr_end = 2e-3;
    CHECK_THROWS_AS(p.validate(), gl::Error);  // lr_end above the base lr
    auto neg = LrSchedule::make(LrKind::Linear, 1e-3, -1, 10);
    CHECK_THROWS_AS(neg.validate(), gl::Error);
    auto lin = LrSchedule::make(LrKind::Linear, 1e-3, 0, 10);
    CHECK_THROWS_AS(lin.multiplier(-1), gl::Error);
    lin.base_lr = INFINITY;
    CHECK_THROWS_AS(lin.validate(), gl::Error);
}
