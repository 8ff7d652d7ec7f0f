// The training report page (see report.h).
#include "train/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>

#include "ggml-lite/core/autofit.h"
#include "ggml-lite/core/error.h"
#include "ggml-lite/core/plan_svg.h"
#include "ggml-lite/io/atomic_file.h"

namespace train {

namespace fs = std::filesystem;

namespace {

const char* kStyle = R"(body{font-family:system-ui,sans-serif;margin:24px auto;max-width:1180px;padding:0 16px;color:#222}
h1{font-size:22px;margin-bottom:4px}h2{font-size:18px;border-bottom:1px solid #ddd;padding-bottom:4px;margin-top:32px}
h3{font-size:15px;margin:18px 0 8px}nav a{margin-right:14px}.status{color:#555;margin-top:0}
table{border-collapse:collapse;margin:8px 0 16px}td,th{border:1px solid #ddd;padding:3px 8px;text-align:left;vertical-align:top}
th{background:#f4f4f4}td.num{text-align:right;font-variant-numeric:tabular-nums}
pre{background:#f8f8f8;border:1px solid #e4e4e4;padding:8px;overflow-x:auto;font-size:12px}
.grid{display:flex;flex-wrap:wrap;gap:12px}figure{margin:0;max-width:260px}figure img{max-width:256px;image-rendering:pixelated;border:1px solid #ccc}
figcaption{font-size:12px;white-space:pre-wrap;word-break:break-word}.missing{color:#a00}.note{color:#555;font-size:13px}
img.timeline{max-width:100%;border:1px solid #e4e4e4}svg.plot{display:block;margin:8px 0}
)";

std::string fmt(const char* f, double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, f, v);
    return buf;
}

std::string num(double v, const char* f = "%.6g") { return std::isfinite(v) ? fmt(f, v) : "–"; }

std::string local_time(double unix_s) {
    if (!std::isfinite(unix_s) || unix_s <= 0) return "–";
    const std::time_t t = std::time_t(unix_s);
    std::tm tm{};
    localtime_r(&t, &tm);
    char buf[64];
    std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
    return buf;
}

std::string duration(double s) {
    if (!std::isfinite(s) || s < 0) return "–";
    const long long n = std::llround(s);
    char buf[64];
    if (n >= 3600) std::snprintf(buf, sizeof buf, "%lldh %02lldm %02llds", n / 3600, n / 60 % 60, n % 60);
    else if (n >= 60) std::snprintf(buf, sizeof buf, "%lldm %02llds", n / 60, n % 60);
    else std::snprintf(buf, sizeof buf, "%.1fs", s);
    return buf;
}

std::string base64(std::string_view in) {
    static const char* a = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string out;
    out.reserve((in.size() + 2) / 3 * 4);
    for (size_t i = 0; i < in.size(); i += 3) {
        const uint32_t b0 = uint8_t(in[i]), b1 = i + 1 < in.size() ? uint8_t(in[i + 1]) : 0,
                       b2 = i + 2 < in.size() ? uint8_t(in[i + 2]) : 0;
        const uint32_t v = b0 << 16 | b1 << 8 | b2;
        out += a[v >> 18 & 63];
        out += a[v >> 12 & 63];
        out += i + 1 < in.size() ? a[v >> 6 & 63] : '=';
        out += i + 2 < in.size() ? a[v & 63] : '=';
    }
    return out;
}

bool numeric(const std::string& s) {
    if (s.empty()) return false;
    char* end = nullptr;
    std::strtod(s.c_str(), &end);
    return end && *end == '\0';
}

std::string table_html(const ReportTable& t) {
    std::string s;
    if (!t.title.empty()) s += "<h3>" + html_escape(t.title) + "</h3>\n";
    s += "<table>\n";
    if (!t.columns.empty()) {
        s += "<tr>";
        for (const std::string& c : t.columns) s += "<th>" + html_escape(c) + "</th>";
        s += "</tr>\n";
    }
    for (const std::vector<std::string>& row : t.rows) {
        s += "<tr>";
        for (size_t i = 0; i < row.size(); i++) {
            const bool key = t.columns.empty() && i == 0;
            s += key ? "<th>" : numeric(row[i]) ? "<td class=\"num\">" : "<td>";
            s += html_escape(row[i]);
            s += key ? "</th>" : "</td>";
        }
        s += "</tr>\n";
    }
    return s + "</table>\n";
}

std::string block_html(const ReportBlock& b) {
    std::string s;
    if (!b.title.empty()) s += "<h3>" + html_escape(b.title) + "</h3>\n";
    return s + "<pre>" + html_escape(b.text) + "</pre>\n";
}

// A sample's link: relative paths as they are (relative to the report's folder), absolute ones
// relative to the report's folder.
std::string link_path(const std::string& p, const fs::path& report_dir) {
    const fs::path path(p);
    if (path.is_relative()) return path.lexically_normal().generic_string();
    const fs::path rel = path.lexically_normal().lexically_relative(fs::absolute(report_dir).lexically_normal());
    return rel.empty() ? path.generic_string() : rel.generic_string();
}

ReportTable run_table(const ReportInput& in) {
    const MetricsHistory& h = in.metrics;
    ReportTable t;
    t.rows.push_back({"Status", in.status.empty() ? "–" : in.status});
    auto caller_rows = [&] {
        for (const auto& [k, v] : in.run_rows) t.rows.push_back({k, v});
    };
    if (h.steps.empty()) {
        t.rows.push_back({"Step", "no step recorded yet"});
        caller_rows();
        return t;
    }
    const StepMetrics& last = h.steps.back();
    std::string step = std::to_string(last.step);
    if (last.total_steps > 0)
        step += " / " + std::to_string(last.total_steps) +
                fmt(" (%.0f%%)", 100.0 * double(last.step) / double(last.total_steps));
    t.rows.push_back({"Step", step});
    t.rows.push_back({"Epoch", std::to_string(last.epoch) +
                                   (last.total_epochs > 0 ? " / " + std::to_string(last.total_epochs) : "")});
    t.rows.push_back({"Loss, running mean", num(last.loss_mean)});
    t.rows.push_back({"Loss, last step", num(last.loss)});
    const StepMetrics* best = nullptr;
    for (const StepMetrics& m : h.steps)
        if (std::isfinite(m.loss_mean) && (!best || m.loss_mean < best->loss_mean)) best = &m;
    if (best) t.rows.push_back({"Lowest running mean", num(best->loss_mean) + " at step " + std::to_string(best->step)});
    std::string lr;
    for (const LrValue& v : last.lr) lr += (lr.empty() ? "" : ", ") + v.group + " " + num(v.lr, "%.3e");
    t.rows.push_back({"Learning rate", lr.empty() ? "–" : lr});
    t.rows.push_back({"Speed (moving)", num(last.it_per_s, "%.3g") + " it/s, " + num(last.images_per_s, "%.3g") + " images/s"});
    size_t peak = 0, plan = 0;
    for (const StepMetrics& m : h.steps) peak = std::max(peak, m.mem_used), plan = std::max(plan, m.mem_plan);
    if (peak || plan)  // neither on the CPU, whose memory is the host's
        t.rows.push_back({"Device memory", (peak ? "peak " + gl::format_bytes(peak) + " in use" : std::string("in use: not known")) +
                                               (plan ? ", plan " + gl::format_bytes(plan) : std::string())});
    const auto skipped = std::count_if(h.steps.begin(), h.steps.end(), [](const StepMetrics& m) { return !m.applied; });
    t.rows.push_back({"Updates skipped", std::to_string(skipped)});
    double started = h.steps.front().time;
    for (const MetricsEvent& e : h.events)
        if (e.kind == EventKind::start && std::isfinite(e.time)) {
            started = e.time;
            break;
        }
    t.rows.push_back({"Started", local_time(started)});
    t.rows.push_back({"Last step recorded", local_time(last.time)});
    t.rows.push_back({"Elapsed (this run)", duration(last.elapsed_s)});
    if (last.total_steps > 0) t.rows.push_back({"ETA", duration(last.eta_s)});
    caller_rows();
    return t;
}

std::string plots_html(const MetricsHistory& h) {
    PlotSeries raw{"loss", "#9ab8d8", {}, {}, 1.0}, mean{"running mean", "#1f4e8c", {}, {}, 2.2};
    std::vector<PlotSeries> lrs;
    const char* colors[] = {"#c0392b", "#27ae60", "#8e44ad", "#d35400"};
    for (const StepMetrics& m : h.steps) {
        raw.x.push_back(double(m.step)), raw.y.push_back(m.loss);
        mean.x.push_back(double(m.step)), mean.y.push_back(m.loss_mean);
        for (const LrValue& v : m.lr) {
            auto it = std::find_if(lrs.begin(), lrs.end(), [&](const PlotSeries& p) { return p.label == v.group; });
            if (it == lrs.end()) {
                lrs.push_back({v.group, colors[lrs.size() % 4], {}, {}, 1.8});
                it = lrs.end() - 1;
            }
            it->x.push_back(double(m.step)), it->y.push_back(v.lr);
        }
    }
    std::vector<double> saves;
    PlotSeries validation{"validation loss", "#e67e22", {}, {}, 2.2};
    for (const MetricsEvent& e : h.events) {
        if (e.kind == EventKind::save) saves.push_back(double(e.step));
        if (e.kind == EventKind::validation) validation.x.push_back(double(e.step)), validation.y.push_back(e.loss);
    }
    std::vector<PlotSeries> losses{raw, mean};
    if (!validation.x.empty()) losses.push_back(validation);
    return line_plot_svg("Loss", "step (dashed: saves)", losses, saves) +
           line_plot_svg("Learning rate", "step", lrs, {}, "%.2e", 760, 240);
}

std::string samples_html(const MetricsHistory& h, const fs::path& report_dir) {
    std::string s;
    int shown = 0;
    for (const MetricsEvent& e : h.events) {
        if (e.kind != EventKind::sample) continue;
        shown++;
        s += "<h3>step " + std::to_string(e.step) + (e.epoch > 0 ? ", epoch " + std::to_string(e.epoch) : "") + "</h3>\n";
        s += "<div class=\"grid\">\n";
        for (const SampleImage& im : e.images) {
            const std::string rel = link_path(im.path, report_dir);
            const fs::path on_disk = fs::path(rel).is_absolute() ? fs::path(rel) : report_dir / rel;
            std::error_code ec;
            const bool present = fs::is_regular_file(on_disk, ec);
            const std::string url = html_escape(url_path(rel));
            s += "<figure><a href=\"" + url + "\"><img src=\"" + url + "\" alt=\"" + html_escape(im.prompt) +
                 "\" loading=\"lazy\"></a><figcaption>" + html_escape(im.prompt) +
                 (present ? "" : "<br><span class=\"missing\">(file missing: " + html_escape(rel) + ")</span>") +
                 "</figcaption></figure>\n";
        }
        s += "</div>\n";
    }
    if (shown == 0) return "<p class=\"note\">No samples yet.</p>\n";
    return "<p class=\"note\">The images are the PNG files the trainer wrote beside this report, linked by relative "
           "paths: keep the report in its folder (or copy the whole folder) for them to show.</p>\n" + s;
}

std::string memory_html(const std::vector<ReportPlan>& plans) {
    if (plans.empty()) return "<p class=\"note\">No memory plan was given.</p>\n";
    std::string s;
    for (const ReportPlan& p : plans) {
        s += "<h3>" + html_escape(p.name) + "</h3>\n";
        // As an image: the SVG cannot run anything or change the page.
        if (!p.timeline_svg.empty())
            s += "<img class=\"timeline\" alt=\"memory timeline of " + html_escape(p.name) +
                 "\" src=\"data:image/svg+xml;base64," + base64(p.timeline_svg) + "\">\n";
        if (!p.text.empty()) s += "<pre>" + html_escape(p.text) + "</pre>\n";
    }
    return s;
}

ReportTable timings_table(const ReportInput& in) {
    ReportTable t = in.timings;
    if (t.columns.empty() && !t.rows.empty()) t.columns = {"phase", "time"};
    const std::vector<StepMetrics>& st = in.metrics.steps;
    if (st.size() >= 2 && std::isfinite(st.front().time) && std::isfinite(st.back().time)) {
        if (t.columns.empty()) t.columns = {"phase", "time"};
        const double span = st.back().time - st.front().time;
        t.rows.push_back({"steps " + std::to_string(st.front().step) + " to " + std::to_string(st.back().step) +
                              " (wall clock, pauses included)",
                          duration(span)});
        t.rows.push_back({"per step, mean over that span", fmt("%.3f s", span / double(st.back().step - st.front().step))});
    }
    return t;
}

ReportTable events_table(const MetricsHistory& h) {
    ReportTable t{"", {"time", "event", "step", "details"}, {}};
    for (const MetricsEvent& e : h.events) {
        std::string details = e.path;
        if (e.kind == EventKind::sample) details = std::to_string(e.images.size()) + " images";
        if (e.kind == EventKind::validation)
            details = e.message + " validation: loss " + num(e.loss) + ", kohya's average " + num(e.average) +
                      ", divergence " + num(e.divergence, "%+.4g");
        if (!e.message.empty()) details += (details.empty() ? "" : "; ") + e.message;
        t.rows.push_back({local_time(e.time), event_kind_name(e.kind), std::to_string(e.step), details});
    }
    return t;
}

}  // namespace

std::string render_report(const ReportInput& in, const fs::path& report_dir) {
    const MetricsHistory& h = in.metrics;
    std::string s = "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
                    "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n<title>" +
                    html_escape(in.title) + "</title>\n<style>\n" + kStyle + "</style>\n</head>\n<body>\n";
    s += "<h1>" + html_escape(in.title) + "</h1>\n";
    s += "<p class=\"status\">" + html_escape(in.status) +
         (h.steps.empty() ? std::string() : " · step " + std::to_string(h.steps.back().step) + " · " +
                                                local_time(h.steps.back().time)) +
         "</p>\n";
    s += "<nav><a href=\"#run\">Run</a><a href=\"#curves\">Loss and learning rate</a><a href=\"#samples\">Samples</a>"
         "<a href=\"#memory\">Memory</a><a href=\"#dataset\">Dataset</a><a href=\"#config\">Configuration</a>"
         "<a href=\"#timings\">Timings</a><a href=\"#events\">Events</a></nav>\n";

    s += "<section id=\"run\"><h2>Run</h2>\n" + table_html(run_table(in));
    ReportTable saved{"Saved files", {"step", "file"}, {}};
    for (const MetricsEvent& e : h.events)
        if (e.kind == EventKind::save) saved.rows.push_back({std::to_string(e.step), e.path});
    if (!saved.rows.empty()) s += table_html(saved);
    if (h.skipped_lines > 0)
        s += "<p class=\"note\">" + std::to_string(h.skipped_lines) +
             " line(s) of the metrics file were not records (a line cut short by a crash, or foreign text) and "
             "were left out.</p>\n";
    s += "</section>\n";

    s += "<section id=\"curves\"><h2>Loss and learning rate</h2>\n" + plots_html(h) + "</section>\n";
    s += "<section id=\"samples\"><h2>Samples</h2>\n" + samples_html(h, report_dir) + "</section>\n";
    s += "<section id=\"memory\"><h2>Memory</h2>\n" + memory_html(in.memory) + "</section>\n";
    s += "<section id=\"dataset\"><h2>Dataset</h2>\n";
    if (in.dataset.empty() && in.dataset_text.empty()) s += "<p class=\"note\">No dataset was described.</p>\n";
    for (const ReportBlock& b : in.dataset_text) s += block_html(b);
    for (const ReportTable& t : in.dataset) s += table_html(t);
    s += "</section>\n<section id=\"config\"><h2>Configuration</h2>\n";
    if (in.config.empty() && in.config_text.empty()) s += "<p class=\"note\">No configuration was given.</p>\n";
    for (const ReportBlock& b : in.config_text) s += block_html(b);
    for (const ReportTable& t : in.config) s += table_html(t);
    s += "</section>\n";
    const ReportTable timings = timings_table(in);
    s += "<section id=\"timings\"><h2>Timings</h2>\n" +
         (timings.rows.empty() ? std::string("<p class=\"note\">Nothing timed yet.</p>\n") : table_html(timings)) +
         "</section>\n";
    s += "<section id=\"events\"><h2>Events</h2>\n" + table_html(events_table(h)) + "</section>\n";
    s += "</body>\n</html>\n";
    return s;
}

void write_report(const fs::path& file, const ReportInput& in) {
    const fs::path dir = file.has_parent_path() ? file.parent_path() : fs::path(".");
    gl::io::write_file_atomic(file.string(), render_report(in, dir));
}

}  // namespace train
