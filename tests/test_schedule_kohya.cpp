// kohya's get_scheduler_fix as optim::kohya_schedule builds it: the lr of every step against kohya's
// own function run with the schedules of the versions it pins (tests/golden/make_kohya_schedule_golden.py
// -> tests/golden/data/schedule/kohya.json), and where kohya (or what it calls) refuses.
#include <doctest/doctest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "ggml-lite/core/error.h"
#include "optim/kohya_schedule.h"
#include "test_util.h"

using gltest::error_of;
using optim::KohyaScheduleArgs;

namespace {

std::string golden(const std::string& name) {
    std::string f = __FILE__;
    return f.substr(0, f.find_last_of('/')) + "/golden/data/schedule/" + name;
}

// kohya's int_or_float: a float is a ratio of the total, truncated.
int64_t steps_of(const nlohmann::json& v, int64_t total) {
    return v.is_number_integer() ? v.get<int64_t>() : int64_t(std::floor(v.get<double>() * double(total)));
}

KohyaScheduleArgs args_of(const nlohmann::json& o, double base_lr) {
    KohyaScheduleArgs a;
    a.total_steps = o.at("max_train_steps").get<int64_t>();
    a.lr_scheduler = o.at("lr_scheduler").get<std::string>();
    a.lr_scheduler_type = o.at("lr_scheduler_type").get<std::string>();
    if (!o.at("lr_scheduler_args").is_null()) a.lr_scheduler_args = o.at("lr_scheduler_args").get<std::vector<std::string>>();
    a.warmup_steps = steps_of(o.at("lr_warmup_steps"), a.total_steps);
    a.decay_steps = steps_of(o.at("lr_decay_steps"), a.total_steps);
    a.num_cycles = o.at("lr_scheduler_num_cycles").get<int>();
    a.power = o.at("lr_scheduler_power").get<double>();
    if (!o.at("lr_scheduler_timescale").is_null()) a.timescale = o.at("lr_scheduler_timescale").get<int64_t>();
    if (!o.at("lr_scheduler_min_lr_ratio").is_null()) a.min_lr_ratio = o.at("lr_scheduler_min_lr_ratio").get<double>();
    a.base_lr = base_lr;
    a.group_lrs = {base_lr};
    return a;
}

KohyaScheduleArgs args(const std::string& scheduler, std::vector<std::string> kw = {}, int64_t warmup = 0) {
    KohyaScheduleArgs a;
    a.lr_scheduler = scheduler;
    a.lr_scheduler_args = std::move(kw);
    a.warmup_steps = warmup;
    a.total_steps = 100;
    a.base_lr = 1e-3;
    a.group_lrs = {1e-3, 1e-3};
    return a;
}
KohyaScheduleArgs torch_args(const std::string& type, std::vector<std::string> kw) {
    KohyaScheduleArgs a = args("constant", std::move(kw));
    a.lr_scheduler_type = type;
    return a;
}

}  // namespace

TEST_CASE("kohya schedules: every step as kohya's get_scheduler_fix with transformers 4.54.1, diffusers and torch") {
    std::ifstream f(golden("kohya.json"));
    REQUIRE(f.good());
    const auto doc = nlohmann::json::parse(f);
    int cases = 0;
    double worst = 0.0;
    for (const auto& c : doc.at("cases")) {
        const auto& o = c.at("options");
        const double base = c.at("base_lr").get<double>();
        const std::string label = o.at("lr_scheduler_type").get<std::string>().empty()
                                      ? o.at("lr_scheduler").get<std::string>()
                                      : o.at("lr_scheduler_type").get<std::string>();
        CAPTURE(label);
        CAPTURE(o.dump());
        const optim::LrSchedule s = optim::kohya_schedule(args_of(o, base));
        const auto& lrs = c.at("lr");
        for (size_t k = 0; k < lrs.size(); ++k) {
            const double want = lrs[k].get<double>(), got = base * s.multiplier(int64_t(k));
            const double err = std::abs(got - want) / base;  // relative to the base lr: zeros pass through
            CHECK_MESSAGE(err <= 1e-9, label, " step ", k, ": ", got, " vs ", want);
            worst = std::max(worst, err);
        }
        ++cases;
    }
    CHECK(cases == 32);
    MESSAGE("kohya schedules: ", cases, " cases, worst error relative to the base lr ", worst);
}

TEST_CASE("kohya schedules: what kohya and the schedules it calls refuse, and what it ignores") {
    // Warm-up steps where kohya's wrap_check_needless_num_warmup_steps raises.
    KohyaScheduleArgs w = torch_args("StepLR", {"step_size=5"});
    w.warmup_steps = 4;
    CHECK(error_of([&] { optim::kohya_schedule(w); }).find("does not take --lr_warmup_steps") != std::string::npos);
    CHECK(error_of([] { optim::kohya_schedule(args("adafactor", {}, 3)); }).find("does not take") != std::string::npos);
    CHECK(error_of([] { optim::kohya_schedule(args("constant", {}, 3)); }).find("does not take") != std::string::npos);

    // transformers' cosine_with_min_lr needs exactly one floor.
    CHECK(error_of([] { optim::kohya_schedule(args("cosine_with_min_lr")); }).find("--lr_scheduler_min_lr_ratio") !=
          std::string::npos);
    KohyaScheduleArgs both = args("cosine_with_min_lr", {"min_lr=1e-5"});
    both.min_lr_ratio = 0.1;
    CHECK(error_of([&] { optim::kohya_schedule(both); }).find("both given") != std::string::npos);
    KohyaScheduleArgs ratio = args("cosine_with_min_lr", {"min_lr=1e-4"});
    CHECK(optim::kohya_schedule(ratio).min_lr_ratio == doctest::Approx(0.1));  // min_lr / the optimizer's lr

    // Keywords: unknown, filled by kohya already, malformed, last_epoch.
    CHECK(error_of([] { optim::kohya_schedule(args("linear", {"num_cycles=2"})); }).find("takes no argument 'num_cycles'") !=
          std::string::npos);
    CHECK(error_of([] { optim::kohya_schedule(args("cosine_with_restarts", {"num_cycles=2"})); })
              .find("already passes num_cycles") != std::string::npos);
    CHECK(error_of([] { optim::kohya_schedule(args("cosine", {"num_cycles"})); }).find("not key=value") !=
          std::string::npos);
    CHECK(error_of([] { optim::kohya_schedule(args("cosine", {"num_cycles=abc"})); }).find("ast.literal_eval") !=
          std::string::npos);
    CHECK(error_of([] { optim::kohya_schedule(args("linear", {"last_epoch=5"})); }).find("--resume") != std::string::npos);
    CHECK(error_of([] { optim::kohya_schedule(args("warmup_stable_decay", {"decay_type='square'"})); })
              .find("'1-sqrt'") != std::string::npos);

    // piecewise_constant: step_rules required, quoted (diffusers splits a string), well formed.
    CHECK(error_of([] { optim::kohya_schedule(args("piecewise_constant")); }).find("needs step_rules") != std::string::npos);
    CHECK(error_of([] { optim::kohya_schedule(args("piecewise_constant", {"step_rules=1:10,0.1"})); })
              .find("literal") != std::string::npos);
    CHECK(error_of([] { optim::kohya_schedule(args("piecewise_constant", {"step_rules='1:x,0.1'"})); })
              .find("not a non-negative int") != std::string::npos);
    std::vector<std::string> notes;
    const optim::LrSchedule p = optim::kohya_schedule(args("piecewise_constant", {"step_rules='2:5,0.5'"}, 7), &notes);
    CHECK(p.multiplier(0) == 2.0);  // no warm-up: kohya passes none
    CHECK(p.multiplier(5) == 0.5);
    REQUIRE(notes.size() == 1);
    CHECK(notes[0].find("--lr_warmup_steps") != std::string::npos);

    // Torch classes: supported ones only, required arguments, torch's own checks.
    CHECK(error_of([] { optim::kohya_schedule(torch_args("ReduceLROnPlateau", {})); }).find("OneCycleLR") !=
          std::string::npos);
    CHECK(error_of([] { optim::kohya_schedule(torch_args("StepLR", {})); }).find("needs step_size") != std::string::npos);
    CHECK(error_of([] { optim::kohya_schedule(torch_args("StepLR", {"step_size=5", "T_max=3"})); })
              .find("takes no argument 'T_max'") != std::string::npos);
    CHECK(error_of([] { optim::kohya_schedule(torch_args("CosineAnnealingWarmRestarts", {"T_0=2.5"})); })
              .find("must be an int") != std::string::npos);
    CHECK(error_of([] { optim::kohya_schedule(torch_args("LinearLR", {"start_factor=0"})); }).find("(0, 1]") !=
          std::string::npos);
    // OneCycleLR: the momentum cycle is not the scheduler's here; its steps must cover the run.
    CHECK(error_of([] { optim::kohya_schedule(torch_args("OneCycleLR", {"max_lr=1e-3", "total_steps=100"})); })
              .find("cycle_momentum=False") != std::string::npos);
    CHECK(error_of([] {
              optim::kohya_schedule(torch_args("OneCycleLR", {"max_lr=1e-3", "total_steps=50", "cycle_momentum=False"}));
          }).find("less than the run's 100") != std::string::npos);
    CHECK(error_of([] { optim::kohya_schedule(torch_args("OneCycleLR", {"max_lr=1e-3", "cycle_momentum=False"})); })
              .find("epochs and steps_per_epoch") != std::string::npos);
    // Absolute lrs (eta_min, OneCycleLR's) need one lr for every group; proportional ones do not.
    KohyaScheduleArgs groups = torch_args("CosineAnnealingLR", {"T_max=10", "eta_min=1e-5"});
    groups.group_lrs = {1e-3, 5e-4};
    CHECK(error_of([&] { optim::kohya_schedule(groups); }).find("eta_min is an absolute lr") != std::string::npos);
    groups.lr_scheduler_args = {"T_max=10"};
    CHECK(error_of([&] { optim::kohya_schedule(groups); }) == "(no error)");
    // An eta_min with one group lr: the multiplier reaches eta_min / lr.
    KohyaScheduleArgs floor = torch_args("CosineAnnealingLR", {"T_max=10", "eta_min=1e-4"});
    CHECK(optim::kohya_schedule(floor).multiplier(10) == doctest::Approx(0.1));

    // adafactor: kohya passes it no --lr_scheduler_args.
    notes.clear();
    CHECK(optim::kohya_schedule(args("adafactor", {"foo=1"}), &notes).multiplier(50) == 1.0);
    CHECK(notes.size() == 1);
}
