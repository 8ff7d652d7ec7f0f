// Training metrics: the step meter's running mean, moving rates, ETA and pauses on a fake clock;
// the JSONL file written and read back exactly (non-finite numbers, user text), appended across
// writers, a torn last line skipped, a resume replacing the steps it redid, a new start beginning
// the history anew; refusals.
#include <doctest/doctest.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unistd.h>

#include "test_util.h"
#include "train/metrics.h"

namespace fs = std::filesystem;
using gltest::TempDir;
using gltest::slurp;
using gltest::error_of;
using train::EventKind;
using train::MetricsEvent;
using train::StepMetrics;

namespace {



StepMetrics facts(int64_t step, double loss, int64_t images = 4) {
    StepMetrics m;
    m.step = step;
    m.epoch = 1 + (step - 1) / 10;
    m.loss = loss;
    m.images = images;
    m.lr = {{"unet", 1e-4}, {"text_encoder", 5e-5}};
    return m;
}

}  // namespace

TEST_CASE("metrics: step meter running mean, moving rates, ETA and pauses") {
    double now = 100, wall = 1.7e9;
    train::MeterOptions o;
    o.total_steps = 10;
    o.total_epochs = 2;
    o.loss_window = 3;
    o.rate_window = 2;
    train::StepMeter meter(o, [&] { return now; }, [&] { return wall; });

    now = 101;
    StepMetrics a = meter.update(facts(1, 1.0));
    CHECK(a.loss_mean == 1.0);
    CHECK(std::isnan(a.it_per_s));  // one point: no rate yet
    CHECK(std::isnan(a.eta_s));
    CHECK(a.elapsed_s == 1.0);
    CHECK(a.time == wall);
    CHECK(a.total_steps == 10);
    CHECK(a.total_epochs == 2);

    now = 101.5;
    StepMetrics b = meter.update(facts(2, 2.0));
    CHECK(b.loss_mean == 1.5);
    CHECK(b.it_per_s == doctest::Approx(2.0));
    CHECK(b.images_per_s == doctest::Approx(8.0));
    CHECK(b.eta_s == doctest::Approx(4.0));  // 8 steps left at 2 it/s

    now = 102.5;
    meter.update(facts(3, 3.0));
    now = 103.5;
    StepMetrics d = meter.update(facts(4, 4.0, 8));
    CHECK(d.loss_mean == doctest::Approx(3.0));  // the last three: 2, 3, 4
    // The window holds the last rate_window steps: from step 2 (101.5) to step 4 (103.5).
    CHECK(d.it_per_s == doctest::Approx(1.0));
    CHECK(d.images_per_s == doctest::Approx(6.0));  // 4 + 8 images over 2 s
    CHECK(d.eta_s == doctest::Approx(6.0));

    // A 100 s sample after step 4 is not training time.
    now = 203.5;
    meter.idle();
    now = 204.5;
    StepMetrics e = meter.update(facts(5, 5.0));
    CHECK(e.it_per_s == doctest::Approx(1.0));
    CHECK(e.elapsed_s == doctest::Approx(104.5));  // the elapsed time keeps the pause

    // Non-finite losses stay out of the mean; steps must increase.
    now = 205.5;
    StepMetrics f = meter.update(facts(6, train::kUnknown));
    CHECK(f.loss_mean == doctest::Approx(4.0));  // still 3, 4, 5
    // A trainer's own running mean is kept.
    StepMetrics own = facts(7, 1.0);
    own.loss_mean = 0.25;
    CHECK(meter.update(own).loss_mean == 0.25);
    CHECK(error_of([&] { meter.update(facts(7, 1.0)); }).find("step 7 does not follow step 7") != std::string::npos);
    CHECK(error_of([&] { train::StepMeter(train::MeterOptions{.loss_window = 0}); }).find("loss_window") !=
          std::string::npos);
}

TEST_CASE("metrics: a resumed meter starts at its first step") {
    double now = 0;
    train::StepMeter meter({.first_step = 50, .total_steps = 60}, [&] { return now; }, [] { return 0.0; });
    CHECK(error_of([&] { meter.update(facts(50, 1.0)); }).find("does not follow step 50") != std::string::npos);
    now = 1;
    meter.update(facts(51, 1.0));
    now = 3;
    CHECK(meter.update(facts(52, 1.0)).eta_s == doctest::Approx(16.0));  // 8 steps at 0.5 it/s
}

TEST_CASE("metrics: records written and read back exactly") {
    TempDir dir;
    const fs::path file = dir.path / "metrics.jsonl";
    std::vector<StepMetrics> steps;
    {
        train::MetricsWriter w(file);
        MetricsEvent start{.kind = EventKind::start, .time = 1.7e9 + 0.125, .message = "run \"x\" <1>"};
        w.write(start);
        for (int i = 1; i <= 5; i++) {
            StepMetrics m = facts(i, 0.1 / i);
            m.loss_mean = 0.3 / (i + 0.7);
            m.it_per_s = i == 1 ? train::kUnknown : 3.25 + i;
            m.images_per_s = i == 1 ? train::kUnknown : 13.0 * i;
            m.eta_s = i == 1 ? train::kUnknown : 10.0 / i;
            m.elapsed_s = 0.1 * i;
            m.time = 1.7e9 + i / 3.0;
            m.mem_used = (size_t(3) << 30) + size_t(i);
            m.mem_plan = size_t(5) << 30;
            m.grad_norm = i == 3 ? std::nan("") : 0.5 * i;
            m.applied = i != 3;
            m.total_steps = 300;
            m.total_epochs = 30;
            w.write(m);
            steps.push_back(m);
        }
        w.write(MetricsEvent{.kind = EventKind::sample,
                             .step = 5,
                             .epoch = 1,
                             .time = 1.7e9 + 9,
                             .images = {{"sample/a b.png", "a \"red\" <circle>\nline2 \xff"}, {"sample/c.png", ""}}});
        w.write(MetricsEvent{.kind = EventKind::save, .step = 5, .path = "/out/x.safetensors"});
    }
    const std::string text = slurp(file);
    // One JSON object per line.
    int lines = 0;
    for (std::istringstream in(text); !in.eof();) {
        std::string line;
        if (!std::getline(in, line) || line.empty()) continue;
        CHECK(nlohmann::json::parse(line).is_object());
        lines++;
    }
    CHECK(lines == 8);
    CHECK(text.find("\"loss\":null") == std::string::npos);
    CHECK(text.find("\"it_per_s\":null") != std::string::npos);

    const train::MetricsHistory h = train::read_metrics(file);
    CHECK(h.skipped_lines == 0);
    REQUIRE(h.steps.size() == 5);
    for (size_t i = 0; i < 5; i++) {
        const StepMetrics &a = h.steps[i], &b = steps[i];
        CHECK(a.step == b.step);
        CHECK(a.epoch == b.epoch);
        CHECK(a.loss == b.loss);  // exact: the shortest round-trip decimal
        CHECK(a.loss_mean == b.loss_mean);
        CHECK((a.it_per_s == b.it_per_s || (std::isnan(a.it_per_s) && std::isnan(b.it_per_s))));
        CHECK((a.eta_s == b.eta_s || (std::isnan(a.eta_s) && std::isnan(b.eta_s))));
        CHECK((a.grad_norm == b.grad_norm || (std::isnan(a.grad_norm) && std::isnan(b.grad_norm))));
        CHECK(a.time == b.time);
        CHECK(a.elapsed_s == b.elapsed_s);
        CHECK(a.mem_used == b.mem_used);
        CHECK(a.mem_plan == b.mem_plan);
        CHECK(a.applied == b.applied);
        CHECK(a.total_steps == 300);
        REQUIRE(a.lr.size() == 2);
        CHECK(a.lr[0].group == "unet");  // group order kept
        CHECK(a.lr[0].lr == 1e-4);
        CHECK(a.lr[1].group == "text_encoder");
    }
    REQUIRE(h.events.size() == 3);
    CHECK(h.events[0].kind == EventKind::start);
    CHECK(h.events[0].message == "run \"x\" <1>");
    CHECK(h.events[0].time == 1.7e9 + 0.125);
    CHECK(h.events[1].kind == EventKind::sample);
    REQUIRE(h.events[1].images.size() == 2);
    CHECK(h.events[1].images[0].path == "sample/a b.png");
    CHECK(h.events[1].images[0].prompt == "a \"red\" <circle>\nline2 \xef\xbf\xbd");  // invalid UTF-8 replaced
    CHECK(h.events[2].kind == EventKind::save);
    CHECK(h.events[2].path == "/out/x.safetensors");
    CHECK(h.events[2].time > 1.6e9);  // filled in by the writer
}

TEST_CASE("metrics: a torn last line is skipped, a resumed run replaces the steps it redid, a new run starts anew") {
    TempDir dir;
    const fs::path file = dir.path / "metrics.jsonl";
    {
        train::MetricsWriter w(file);
        for (int i = 1; i <= 6; i++) w.write(facts(i, 1.0 * i));
        w.write(MetricsEvent{.kind = EventKind::save, .step = 4, .path = "s4"});
        w.write(MetricsEvent{.kind = EventKind::sample, .step = 5, .images = {{"old5.png", "p"}}});
    }
    // The crash: half a record, no newline.
    std::ofstream(file, std::ios::app) << R"({"type":"step","step":7,"lo)";
    {
        // A second writer appends after ending the torn line.
        train::MetricsWriter w(file);
        w.write(MetricsEvent{.kind = EventKind::resume, .step = 4, .path = "state-4"});
        for (int i = 5; i <= 8; i++) w.write(facts(i, 10.0 * i));
    }
    const train::MetricsHistory h = train::read_metrics(file);
    CHECK(h.skipped_lines == 1);
    REQUIRE(h.steps.size() == 8);
    for (int i = 0; i < 8; i++) {
        CHECK(h.steps[size_t(i)].step == i + 1);
        CHECK(h.steps[size_t(i)].loss == (i < 4 ? 1.0 * (i + 1) : 10.0 * (i + 1)));
    }
    REQUIRE(h.events.size() == 2);  // the save at 4 and the resume; the sample at 5 was redone
    CHECK(h.events[0].kind == EventKind::save);
    CHECK(h.events[1].kind == EventKind::resume);
    CHECK(h.events[1].path == "state-4");

    // A new run started in the same folder: the history is that run's alone.
    {
        train::MetricsWriter w(file);
        w.write(MetricsEvent{.kind = EventKind::start, .step = 0});
        w.write(facts(1, 0.25));
    }
    const train::MetricsHistory fresh = train::read_metrics(file);
    REQUIRE(fresh.steps.size() == 1);
    CHECK(fresh.steps[0].loss == 0.25);
    REQUIRE(fresh.events.size() == 1);
    CHECK(fresh.events[0].kind == EventKind::start);

    // Foreign or malformed lines are counted, not fatal.
    const train::MetricsHistory g =
        train::parse_metrics("not json\n[1,2]\n{\"type\":\"step\",\"step\":\"x\"}\n{\"type\":\"other\"}\n\n"
                             "{\"type\":\"step\",\"step\":3,\"loss\":0.5}\n");
    CHECK(g.skipped_lines == 4);
    REQUIRE(g.steps.size() == 1);
    CHECK(g.steps[0].loss == 0.5);
    CHECK(std::isnan(g.steps[0].loss_mean));
}

TEST_CASE("metrics: files that cannot be written or read are named") {
    TempDir dir;
    CHECK(error_of([&] { train::MetricsWriter(dir.path / "no" / "m.jsonl"); }).find("no/m.jsonl: cannot open") !=
          std::string::npos);
    CHECK(error_of([&] { train::MetricsWriter(dir.path); }).find("cannot open") != std::string::npos);
    CHECK(error_of([&] { train::read_metrics(dir.path / "none.jsonl"); }).find("none.jsonl: cannot open") !=
          std::string::npos);
}
