// The recorder: a run's steps and events in metrics.jsonl and report.html rewritten at saves and
// at the end; a resumed run appends a resume record and replaces the steps it redoes.
#include <doctest/doctest.h>

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "train/recorder.h"
#include "test_util.h"

namespace fs = std::filesystem;
using gltest::TempDir;
using gltest::slurp;

namespace {



train::StepMetrics facts(int64_t step, double loss) {
    train::StepMetrics m;
    m.step = step;
    m.epoch = 1 + (step - 1) / 4;
    m.loss = loss;
    m.images = 2;
    m.lr = {{"unet", 1e-3}};
    return m;
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("recorder: steps, samples, saves and the end in the metrics file and the report") {
    TempDir dir;
    double now = 0;
    const auto mono = [&] { return now; };
    const auto wall = [&] { return 1.7e9 + now; };
    {
        train::Recorder rec({.output_dir = dir.path, .title = "sdtrain: demo", .meter = {.total_steps = 8, .loss_window = 2}},
                            mono, wall);
        rec.report().config = {{"Options", {}, {{"learning_rate", "0.001"}}}};
        for (int s = 1; s <= 6; s++) {
            now = s < 5 ? s : 96 + s;
            const train::StepMetrics m = rec.step(facts(s, 1.0 / s));
            CHECK(m.total_steps == 8);
            if (s >= 2) CHECK(m.it_per_s == doctest::Approx(1.0));  // the sample's time left out
            if (s == 4) {
                now = 100;  // 96 s of sampling: not training time
                rec.sample(4, 1, {{"sample/x.png", "a red circle"}});
                rec.save(4, 1, (dir.path / "demo-000004.safetensors").string());
                CHECK(fs::exists(rec.report_path()));
                const std::string html = slurp(rec.report_path());
                CHECK(has(html, "<th>Step</th><td>4 / 8 (50%)</td>"));
                CHECK(has(html, "a red circle"));
                CHECK(has(html, "<p class=\"status\">running"));
                CHECK(has(html, "learning_rate"));
            }
        }
        rec.end("stopped at step 6 (Ctrl-C)");
        const std::string html = slurp(rec.report_path());
        CHECK(has(html, "<th>Step</th><td>6 / 8 (75%)</td>"));
        CHECK(has(html, "<p class=\"status\">stopped at step 6 (Ctrl-C)"));
    }
    {
        // Resumed from the save at step 4: steps 5 and 6 are done again.
        train::Recorder rec({.output_dir = dir.path,
                             .title = "sdtrain: demo",
                             .meter = {.first_step = 4, .total_steps = 8, .loss_window = 2},
                             .resumed_from = "state-4"},
                            mono, wall);
        for (int s = 5; s <= 8; s++) rec.step(facts(s, 10.0 * s));
        rec.save(8, 2, "demo.safetensors");
        rec.end("finished");
    }
    const train::MetricsHistory h = train::read_metrics(dir.path / "metrics.jsonl");
    REQUIRE(h.steps.size() == 8);
    CHECK(h.steps[3].loss == 0.25);
    CHECK(h.steps[4].loss == 50.0);  // the resumed run's step 5
    CHECK(h.steps[5].loss_mean == 55.0);
    std::vector<train::EventKind> kinds;
    for (const train::MetricsEvent& e : h.events) kinds.push_back(e.kind);
    using K = train::EventKind;
    CHECK(kinds == std::vector<K>{K::start, K::sample, K::save, K::end, K::resume, K::save, K::end});
    CHECK(h.events[4].path == "state-4");
    CHECK(h.events[4].step == 4);
    CHECK(has(slurp(dir.path / "report.html"), "<p class=\"status\">finished"));
}
