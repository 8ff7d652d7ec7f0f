// The memory timeline and the frontier plot: live bytes by kind add up to the planner's own count
// at every node, and the pictures carry Plan::report()'s figures.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <unistd.h>

#include "ggml-lite/core/error.h"
#include "ggml-lite/core/plan_svg.h"
#include "ggml-lite/io/atomic_file.h"
#include "planner_nets.h"
#include "train/step.h"

using namespace gl;

namespace {

std::string mib2(size_t b) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.2f MiB", double(b) / (1024.0 * 1024.0));
    return buf;
}

// The figures of Plan::report(): each arena, the total and the activation peak.
void check_report_figures(const Plan& p, const std::string& svg) {
    const std::string rep = p.report();
    for (int c = 0; c < kCategoryCount; c++) {
        const std::string fig = mib2(p.arena_bytes[size_t(c)]);
        CHECK_MESSAGE(rep.find(fig) != std::string::npos, fig);  // the same number, as report() prints it
        CHECK_MESSAGE(svg.find(cat(category_name(Category(c)), ": ", fig)) != std::string::npos, category_name(Category(c)));
    }
    CHECK(svg.find("total: " + mib2(p.total_bytes())) != std::string::npos);
    CHECK(rep.find(mib2(p.peak_live_bytes)) != std::string::npos);
    CHECK(svg.find("activation peak: " + mib2(p.peak_live_bytes)) != std::string::npos);
    CHECK(svg.find(cat("at node ", p.peak_node, " (")) != std::string::npos);
    CHECK(svg.rfind("<svg", 0) == 0);
    CHECK(svg.size() > 20);
    CHECK(svg.substr(svg.size() - 7) == "</svg>\n");
    CHECK(svg.find("nan") == std::string::npos);
    CHECK(svg.find("inf") == std::string::npos);
}

void check_live(const Plan& p) {
    const auto live = live_by_kind(p);
    REQUIRE(live.size() == p.graph.nodes.size());
    REQUIRE(p.live_bytes.size() == live.size());
    size_t most = 0;
    for (size_t i = 0; i < live.size(); i++) {
        size_t sum = 0;
        for (size_t b : live[i]) sum += b;
        CHECK(sum == p.live_bytes[i]);
        most = std::max(most, sum);
    }
    if (p.peak_node >= 0) {
        CHECK(most == p.peak_live_bytes);
        CHECK(p.live_bytes[size_t(p.peak_node)] == p.peak_live_bytes);
    }
}

}  // namespace

TEST_CASE("timeline: live bytes by kind add up to the planner's count, on random graphs and policies") {
    for (uint32_t seed = 900; seed < 940; seed++) {
        CAPTURE(seed);
        gltest::Net net = gltest::random_net(seed, 10 + int(seed % 25), true, true);
        for (Recompute rc : {Recompute::none, Recompute::blocks, Recompute::cheap}) check_live(make_plan(net.g, {rc, 64}));
        RecomputeSearch search(net.g, {Recompute::none, 64});
        check_live(search.plan(search.min_bytes()));
    }
}

TEST_CASE("timeline: the SD1.5 step's picture carries the report's figures, and the frontier plot and files") {
    train::StepOptions o;
    o.lora = lora::LoraConfig{16, 16.0f, 1.0f};
    auto s = train::build_step(o);
    const Plan none = make_plan(s->g);
    RecomputeSearch search(s->g, {});
    const Plan half = search.plan((search.frontier()[0].total_bytes + search.min_bytes()) / 2);
    check_live(none);
    check_live(half);
    const std::string a = timeline_svg(none, nullptr, "SD1.5 LoRA step, batch 1, recompute none");
    check_report_figures(none, a);
    const std::string b = timeline_svg(half, &none, "budget");
    check_report_figures(half, b);
    CHECK(b.find("without recompute: " + mib2(none.total_bytes())) != std::string::npos);
    CHECK(b.find("recomputed values") != std::string::npos);
    // The largest value alive at the peak is listed with its size.
    CHECK(b.find(mib2(half.graph.v(half.live_at_peak[0]).bytes())) != std::string::npos);
    CHECK_THROWS_AS(timeline_svg(none, &half), gl::Error);  // the comparison must be without recompute

    const std::string f = frontier_svg(search.frontier(), {{"cheap", 1u << 30, 0.02}}, "frontier");
    CHECK(f.rfind("<svg", 0) == 0);
    CHECK(f.find("cheap (1024 MiB, 20.0 ms)") != std::string::npos);
    CHECK(f.find("nan") == std::string::npos);
    CHECK_THROWS_AS(frontier_svg({}), gl::Error);

    const auto dir = std::filesystem::temp_directory_path() / cat("gl_plan_svg_", ::getpid());
    std::filesystem::create_directories(dir);
    const std::string path = (dir / "t.svg").string();
    io::write_file_atomic(path, b);
    io::write_file_atomic(path, a);  // replaces it whole
    std::ifstream in(path);
    std::stringstream got;
    got << in.rdbuf();
    CHECK(got.str() == a);
    CHECK_THROWS_AS(io::write_file_atomic((dir / "missing" / "t.svg").string(), a), gl::Error);
    std::filesystem::remove_all(dir);
}
