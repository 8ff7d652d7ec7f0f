// The training report: the page's structure (sections, balanced elements, nothing external, no
// script), escaping of user text everywhere (titles, prompts, paths, tables, plan text; the
// timeline only as a base64 image), the figures equal to the metrics file's records (table values
// and plotted points), the plot's reduction of long series, and the atomic rewrite.
#include <doctest/doctest.h>

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "test_util.h"
#include "train/report.h"

namespace fs = std::filesystem;
using gltest::TempDir;
using gltest::slurp;
using gltest::error_of;
using train::EventKind;
using train::MetricsEvent;
using train::StepMetrics;

namespace {


size_t count(const std::string& s, const std::string& part) {
    size_t n = 0;
    for (size_t i = s.find(part); i != std::string::npos; i = s.find(part, i + 1)) n++;
    return n;
}

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }


std::string fmt6(double v) {
    char b[64];
    std::snprintf(b, sizeof b, "%.6g", v);
    return b;
}

// A run of `n` steps through the meter and the metrics file, with a sample and a save, read back.
train::MetricsHistory recorded_run(const fs::path& dir, int n) {
    double now = 0;
    train::StepMeter meter({.total_steps = 40, .total_epochs = 4, .loss_window = 5}, [&] { return now; },
                           [&] { return 1.7e9 + now; });
    {
        train::MetricsWriter w(dir / "metrics.jsonl");
        w.write(MetricsEvent{.kind = EventKind::start, .time = 1.7e9});
        for (int i = 1; i <= n; i++) {
            now = 0.4 * i;
            StepMetrics m;
            m.step = i;
            m.epoch = 1 + (i - 1) / 10;
            m.loss = 0.2 + 0.1 * std::sin(i * 1.7) - 0.002 * i;
            m.images = 4;
            m.lr = {{"unet", 1e-4 * std::min(1.0, i / 5.0)}, {"text_encoder", 5e-5}};
            m.mem_used = (size_t(1) << 30) + size_t(i) * 4096;
            m.mem_plan = size_t(3) << 29;
            m.applied = i != 7;
            w.write(meter.update(m));
            if (i == 10) {
                w.write(MetricsEvent{.kind = EventKind::sample,
                                     .step = 10,
                                     .epoch = 1,
                                     .images = {{"sample/a red <circle> #1.png", "a red \"circle\" <script>alert(1)</script>"},
                                                {(dir / "sample" / "b.png").string(), "a blue square & 'more'"}}});
                w.write(MetricsEvent{.kind = EventKind::save, .step = 10, .path = (dir / "lora-000010.safetensors").string()});
            }
        }
    }
    return train::read_metrics(dir / "metrics.jsonl");
}

train::ReportInput input_for(train::MetricsHistory h) {
    train::ReportInput in;
    in.title = "sdtrain: <my_lora> & co";
    in.status = "running";
    in.metrics = std::move(h);
    in.dataset_text = {{"Steps", "epochs = ceil(40 / 10) = 4 <ok>"}};
    in.dataset = {{"Buckets", {"bucket", "images", "with repeats"}, {{"128x128", "6", "60"}, {"160x96", "3", "30"}}}};
    in.config_text = {{"", "note: --xformers & co are not needed"}};
    in.memory = {{"bucket 128x128, batch 2", "activations 1.0 MiB\n<peak> & 'x'",
                  "<svg xmlns=\"http://www.w3.org/2000/svg\"><text>a</text></svg></pre><script>x()</script>"}};
    in.config = {{"Options", {}, {{"output_name", "my<lora>"}, {"learning_rate", "0.0001"}, {"caption", "\xff\xfe bad"}}}};
    in.timings = {"", {}, {{"latent caching", "1.5 s"}}};
    return in;
}

}  // namespace

TEST_CASE("report: escaping and URL paths") {
    CHECK(train::html_escape("a<b>&\"c\"'d'") == "a&lt;b&gt;&amp;&quot;c&quot;&#39;d&#39;");
    CHECK(train::html_escape("tab\tnew\nbell\x07 del\x7f") == "tab\tnew\nbell del");
    CHECK(train::html_escape("caf\xc3\xa9 \xe7\x8c\xab \xf0\x9f\x90\xb1") == "caf\xc3\xa9 \xe7\x8c\xab \xf0\x9f\x90\xb1");
    // Invalid UTF-8: a stray continuation byte, a truncated sequence, an overlong form, a surrogate.
    CHECK(train::html_escape("a\x80z") == "a\xEF\xBF\xBDz");
    CHECK(train::html_escape("\xe7\x8c") == "\xEF\xBF\xBD\xEF\xBF\xBD");
    CHECK(train::html_escape("\xc0\xaf") == "\xEF\xBF\xBD\xEF\xBF\xBD");
    CHECK(train::html_escape("\xed\xa0\x80") == "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
    CHECK(train::url_path("sample/a b#1?.png") == "sample/a%20b%231%3F.png");
    CHECK(train::url_path("x/\"y\"&<z>") == "x/%22y%22%26%3Cz%3E");
    CHECK(train::url_path("caf\xc3\xa9") == "caf%C3%A9");
}

TEST_CASE("report: structure, self-contained, everything escaped") {
    TempDir dir;
    fs::create_directories(dir.path / "sample");
    std::ofstream(dir.path / "sample" / "b.png") << "png";
    const std::string html = train::render_report(input_for(recorded_run(dir.path, 20)), dir.path);

    CHECK(html.starts_with("<!DOCTYPE html>"));
    for (const char* id : {"run", "curves", "samples", "memory", "dataset", "config", "timings", "events"})
        CHECK(has(html, std::string("<section id=\"") + id + "\">"));
    for (const char* tag : {"section", "table", "figure", "svg", "pre", "h2", "h3", "tr"})
        CHECK(count(html, std::string("<") + tag + ">") + count(html, std::string("<") + tag + " ") ==
              count(html, std::string("</") + tag + ">"));
    // Nothing to fetch and nothing to run: the only URL is the SVG namespace.
    CHECK(!has(html, "<script"));
    CHECK(!has(html, "<link"));
    CHECK(!has(html, "url("));
    CHECK(count(html, "http") == count(html, "xmlns=\"http://www.w3.org/2000/svg\""));
    CHECK(!has(html, "src=\"http"));

    // User text arrives escaped wherever it appears.
    CHECK(has(html, "<title>sdtrain: &lt;my_lora&gt; &amp; co</title>"));
    CHECK(has(html, "a red &quot;circle&quot; &lt;script&gt;alert(1)&lt;/script&gt;"));
    CHECK(has(html, "a blue square &amp; &#39;more&#39;"));
    CHECK(has(html, "my&lt;lora&gt;"));
    CHECK(has(html, "\xEF\xBF\xBD\xEF\xBF\xBD bad"));
    CHECK(has(html, "<pre>activations 1.0 MiB\n&lt;peak&gt; &amp; &#39;x&#39;</pre>"));
    CHECK(has(html, "<h3>Steps</h3>\n<pre>epochs = ceil(40 / 10) = 4 &lt;ok&gt;</pre>"));
    CHECK(has(html, "<pre>note: --xformers &amp; co are not needed</pre>"));
    // The timeline is an image (base64), never markup in the page.
    CHECK(!has(html, "x()"));
    CHECK(has(html, "<img class=\"timeline\" alt=\"memory timeline of bucket 128x128, batch 2\" "
                    "src=\"data:image/svg+xml;base64,PHN2ZyB4bWxucz0i"));
    // Samples: relative links (absolute paths made relative to the report), percent-encoded, and
    // a missing file said so.
    CHECK(has(html, "<img src=\"sample/a%20red%20%3Ccircle%3E%20%231.png\""));
    CHECK(has(html, "(file missing: sample/a red &lt;circle&gt; #1.png)"));
    CHECK(has(html, "<img src=\"sample/b.png\""));
    CHECK(count(html, "(file missing") == 1);
    CHECK(has(html, "keep the report in its folder"));
    CHECK(has(html, "<h3>step 10, epoch 1</h3>"));
}

TEST_CASE("report: the figures are the metrics file's") {
    TempDir dir;
    const train::MetricsHistory h = recorded_run(dir.path, 23);
    REQUIRE(h.steps.size() == 23);
    const std::string html = train::render_report(input_for(h), dir.path);
    const StepMetrics& last = h.steps.back();
    CHECK(has(html, "<th>Step</th><td>23 / 40 (58%)</td>"));
    CHECK(has(html, "<th>Epoch</th><td>3 / 4</td>"));
    CHECK(has(html, "<th>Loss, running mean</th><td class=\"num\">" + fmt6(last.loss_mean) + "</td>"));
    CHECK(has(html, "<th>Loss, last step</th><td class=\"num\">" + fmt6(last.loss) + "</td>"));
    const StepMetrics* best = &h.steps[0];
    for (const StepMetrics& m : h.steps)
        if (m.loss_mean < best->loss_mean) best = &m;
    CHECK(has(html, "<th>Lowest running mean</th><td>" + fmt6(best->loss_mean) + " at step " +
                        std::to_string(best->step) + "</td>"));
    CHECK(has(html, "<th>Learning rate</th><td>unet 1.000e-04, text_encoder 5.000e-05</td>"));
    CHECK(has(html, "<th>Updates skipped</th><td class=\"num\">1</td>"));
    CHECK(has(html, "<th>Device memory</th><td>peak 1.00 GiB in use, plan 1.50 GiB</td>"));
    CHECK(has(html, "<td>steps 1 to 23 (wall clock, pauses included)</td><td>8.8s</td>"));
    CHECK(has(html, "<td>latent caching</td><td>1.5 s</td>"));

    // The loss plot: one point per step for the raw loss and for the running mean, each on a
    // straight line through the values (y = a - b * loss), x increasing with the step.
    const std::regex poly("<polyline[^>]*points=\"([^\"]*)\"");
    std::vector<std::vector<std::pair<double, double>>> lines;
    for (auto it = std::sregex_iterator(html.begin(), html.end(), poly); it != std::sregex_iterator(); ++it) {
        std::vector<std::pair<double, double>> pts;
        std::istringstream in((*it)[1].str());
        std::string xy;
        while (in >> xy) pts.emplace_back(std::stod(xy.substr(0, xy.find(','))), std::stod(xy.substr(xy.find(',') + 1)));
        lines.push_back(pts);
    }
    REQUIRE(lines.size() == 4);  // loss, running mean; lr unet, lr text encoder
    for (int k = 0; k < 2; k++) {
        const auto& pts = lines[size_t(k)];
        REQUIRE(pts.size() == 23);
        auto value = [&](size_t i) { return k == 0 ? h.steps[i].loss : h.steps[i].loss_mean; };
        size_t lo = 0, hi = 0;
        for (size_t i = 0; i < 23; i++) {
            if (value(i) < value(lo)) lo = i;
            if (value(i) > value(hi)) hi = i;
            if (i) CHECK(pts[i].first > pts[i - 1].first);
        }
        const double b = (pts[lo].second - pts[hi].second) / (value(hi) - value(lo));
        for (size_t i = 0; i < 23; i++)
            CHECK(std::fabs(pts[i].second - (pts[lo].second - b * (value(i) - value(lo)))) <= 0.15);  // 0.1 px rounding
    }
    // The save is marked on the loss plot.
    CHECK(count(html, "class=\"mark\"") == 1);
}

TEST_CASE("report: long series are reduced per pixel column, keeping the extremes") {
    train::PlotSeries s{"loss", "#123", {}, {}};
    for (int i = 0; i < 20000; i++) {
        s.x.push_back(i);
        s.y.push_back(i == 12345 ? 50.0 : 1.0 + 0.001 * (i % 7));
    }
    s.y[100] = std::nan("");  // a gap splits the line
    const std::string svg = train::line_plot_svg("t", "step", {s});
    CHECK(count(svg, "<polyline") == 2);
    const size_t points = count(svg, ",");
    CHECK(points < 4 * 760);
    CHECK(points > 600);
    CHECK(has(svg, ",34.0"));  // the spike reaches the top of the frame
    CHECK(has(train::line_plot_svg("empty", "step", {}), "no data yet"));
    CHECK(error_of([] { train::line_plot_svg("tiny", "x", {}, {}, "%g", 10, 10); }).find("too small") != std::string::npos);
}

TEST_CASE("report: written atomically") {
    TempDir dir;
    const fs::path file = dir.path / "report.html";
    train::ReportInput in = input_for(recorded_run(dir.path, 5));
    train::write_report(file, in);
    const std::string first = slurp(file);
    CHECK(first == train::render_report(in, dir.path));

    // A reader holding the old report keeps reading the whole old report: the new one is a new file.
    const int fd = ::open(file.c_str(), O_RDONLY);
    REQUIRE(fd >= 0);
    in.status = "finished";
    train::write_report(file, in);
    std::string old(first.size() + 10, '\0');
    const ssize_t n = ::pread(fd, old.data(), old.size(), 0);
    ::close(fd);
    CHECK(n == ssize_t(first.size()));
    CHECK(old.substr(0, size_t(n)) == first);
    CHECK(has(slurp(file), "<p class=\"status\">finished"));

    // A failed write names the file, leaves no temporary behind and the previous report whole.
    const fs::path blocked = dir.path / "blocked.html";
    fs::create_directories(blocked / "inside");
    CHECK(has(error_of([&] { train::write_report(blocked, in); }), "blocked.html"));
    CHECK(has(error_of([&] { train::write_report(dir.path / "no" / "r.html", in); }), "no/r.html"));
    int temporaries = 0;
    for (const auto& e : fs::directory_iterator(dir.path))
        if (has(e.path().filename().string(), ".tmp")) temporaries++;
    CHECK(temporaries == 0);
    CHECK(has(slurp(file), "<p class=\"status\">finished"));
}
