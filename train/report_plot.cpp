// The report's building blocks: HTML escaping, URL paths and the inline SVG line plots.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>

#include "ggml-lite/core/error.h"
#include "train/report.h"

namespace train {

namespace {

// Length of the valid UTF-8 sequence starting at s[i], or 0.
size_t utf8_length(std::string_view s, size_t i) {
    const auto b = [&](size_t k) { return uint8_t(s[i + k]); };
    const auto cont = [&](size_t k) { return i + k < s.size() && (b(k) & 0xC0) == 0x80; };
    const uint8_t c = b(0);
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) return cont(1) ? 2 : 0;
    if (c >= 0xE0 && c <= 0xEF) {
        if (!cont(1) || !cont(2)) return 0;
        if ((c == 0xE0 && b(1) < 0xA0) || (c == 0xED && b(1) > 0x9F)) return 0;  // overlong, surrogates
        return 3;
    }
    if (c >= 0xF0 && c <= 0xF4) {
        if (!cont(1) || !cont(2) || !cont(3)) return 0;
        if ((c == 0xF0 && b(1) < 0x90) || (c == 0xF4 && b(1) > 0x8F)) return 0;  // overlong, above U+10FFFF
        return 4;
    }
    return 0;
}

std::string fmt(const char* f, double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, f, v);
    return buf;
}

std::string coord(double v) { return fmt("%.1f", v); }

// A tick step of 1, 2 or 5 times a power of ten giving about `n` intervals over `span`.
double nice_step(double span, int n) {
    const double raw = std::max(span, 1e-300) / n, p = std::pow(10.0, std::floor(std::log10(raw)));
    for (double m : {1.0, 2.0, 5.0})
        if (m * p >= raw) return m * p;
    return 10 * p;
}

struct Point {
    double x, y;
};

// Runs of finite points, each reduced to at most first / lowest / highest / last per pixel column
// when it is denser than two points per pixel.
std::vector<std::vector<Point>> runs_of(const PlotSeries& s, double x0, double px_per_x, double plot_w) {
    std::vector<std::vector<Point>> runs(1);
    const size_t n = std::min(s.x.size(), s.y.size());
    for (size_t i = 0; i < n; i++) {
        if (std::isfinite(s.x[i]) && std::isfinite(s.y[i])) runs.back().push_back({s.x[i], s.y[i]});
        else if (!runs.back().empty()) runs.emplace_back();
    }
    if (runs.back().empty()) runs.pop_back();
    for (std::vector<Point>& r : runs) {
        if (double(r.size()) <= 2 * plot_w) continue;
        std::vector<Point> out;
        for (size_t a = 0; a < r.size();) {
            const long col = std::lround(std::floor((r[a].x - x0) * px_per_x));
            size_t b = a, lo = a, hi = a;
            while (b < r.size() && std::lround(std::floor((r[b].x - x0) * px_per_x)) == col) {
                if (r[b].y < r[lo].y) lo = b;
                if (r[b].y > r[hi].y) hi = b;
                b++;
            }
            std::vector<size_t> keep = {a, lo, hi, b - 1};
            std::sort(keep.begin(), keep.end());
            keep.erase(std::unique(keep.begin(), keep.end()), keep.end());
            for (size_t k : keep) out.push_back(r[k]);
            a = b;
        }
        r = std::move(out);
    }
    return runs;
}

}  // namespace

std::string html_escape(std::string_view s) {
    std::string r;
    r.reserve(s.size());
    for (size_t i = 0; i < s.size();) {
        const size_t n = utf8_length(s, i);
        if (n == 0) {
            r += "\xEF\xBF\xBD";
            i++;
            continue;
        }
        if (n > 1) {
            r.append(s.substr(i, n));
            i += n;
            continue;
        }
        const char c = s[i++];
        switch (c) {
            case '&': r += "&amp;"; break;
            case '<': r += "&lt;"; break;
            case '>': r += "&gt;"; break;
            case '"': r += "&quot;"; break;
            case '\'': r += "&#39;"; break;
            default:
                if ((uint8_t(c) >= 0x20 && c != 0x7F) || c == '\n' || c == '\t') r += c;
        }
    }
    return r;
}

std::string url_path(const std::string& path) {
    static const char* hex = "0123456789ABCDEF";
    std::string r;
    for (const char ch : path) {
        const uint8_t c = uint8_t(ch);
        if (std::isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~' || c == '/') {
            r += char(c);
        } else {
            r += '%';
            r += hex[c >> 4];
            r += hex[c & 15];
        }
    }
    return r;
}

std::string line_plot_svg(const std::string& title, const std::string& x_label, const std::vector<PlotSeries>& series,
                          const std::vector<double>& marks, const char* y_format, int width, int height) {
    GL_CHECK(width >= 200 && height >= 120, "line plot '", title, "': ", width, "x", height, " is too small");
    const double L = 76, R = width - 16.0, T = 34, B = height - 46.0;
    std::string s = gl::cat("<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"plot\" width=\"", width, "\" height=\"",
                            height, "\" viewBox=\"0 0 ", width, " ", height,
                            "\" font-family=\"sans-serif\" font-size=\"12\">\n<text x=\"", L, "\" y=\"20\" font-size=\"14\" "
                            "font-weight=\"bold\">", html_escape(title), "</text>\n");
    double xmin = INFINITY, xmax = -INFINITY, ymin = INFINITY, ymax = -INFINITY;
    for (const PlotSeries& p : series)
        for (size_t i = 0; i < std::min(p.x.size(), p.y.size()); i++) {
            if (!std::isfinite(p.x[i]) || !std::isfinite(p.y[i])) continue;
            xmin = std::min(xmin, p.x[i]), xmax = std::max(xmax, p.x[i]);
            ymin = std::min(ymin, p.y[i]), ymax = std::max(ymax, p.y[i]);
        }
    s += gl::cat("<rect x=\"", L, "\" y=\"", T, "\" width=\"", R - L, "\" height=\"", B - T,
                 "\" fill=\"none\" stroke=\"#888\"/>\n");
    if (!(xmin <= xmax)) {
        s += gl::cat("<text x=\"", (L + R) / 2, "\" y=\"", (T + B) / 2, "\" text-anchor=\"middle\" fill=\"#666\">no data yet</text>\n");
        return s + "</svg>\n";
    }
    if (xmax == xmin) xmax = xmin + 1;
    if (ymax == ymin) {
        const double pad = ymin == 0 ? 1 : std::fabs(ymin) * 0.1;
        ymin -= pad, ymax += pad;
    }
    const double ys = nice_step(ymax - ymin, 6), xs = std::max(nice_step(xmax - xmin, 8), 1.0);
    ymin = std::floor(ymin / ys) * ys, ymax = std::ceil(ymax / ys) * ys;
    const auto px = [&](double x) { return L + (x - xmin) / (xmax - xmin) * (R - L); };
    const auto py = [&](double y) { return B - (y - ymin) / (ymax - ymin) * (B - T); };

    for (double y = ymin; y <= ymax + ys * 1e-6; y += ys)
        s += gl::cat("<line x1=\"", L - 4, "\" x2=\"", R, "\" y1=\"", coord(py(y)), "\" y2=\"", coord(py(y)),
                     "\" stroke=\"#e4e4e4\"/><text x=\"", L - 7, "\" y=\"", coord(py(y) + 4), "\" text-anchor=\"end\">",
                     std::fabs(y) < ys * 1e-6 ? std::string("0") : html_escape(fmt(y_format, y)), "</text>\n");
    for (double x = std::ceil(xmin / xs) * xs; x <= xmax + xs * 1e-6; x += xs)
        s += gl::cat("<line x1=\"", coord(px(x)), "\" x2=\"", coord(px(x)), "\" y1=\"", B, "\" y2=\"", B + 4,
                     "\" stroke=\"#888\"/><text x=\"", coord(px(x)), "\" y=\"", B + 17, "\" text-anchor=\"middle\">",
                     fmt("%.10g", x), "</text>\n");
    s += gl::cat("<text x=\"", (L + R) / 2, "\" y=\"", B + 36, "\" text-anchor=\"middle\">", html_escape(x_label),
                 "</text>\n");
    for (double m : marks)
        if (std::isfinite(m) && m >= xmin && m <= xmax)
            s += gl::cat("<line class=\"mark\" x1=\"", coord(px(m)), "\" x2=\"", coord(px(m)), "\" y1=\"", T, "\" y2=\"", B,
                         "\" stroke=\"#aaa\" stroke-dasharray=\"4,3\"/>\n");
    for (const PlotSeries& p : series)  // in order: the last series is drawn on top
        for (const std::vector<Point>& run : runs_of(p, xmin, (R - L) / (xmax - xmin), R - L)) {
            s += gl::cat("<polyline fill=\"none\" stroke=\"", html_escape(p.color), "\" stroke-width=\"", p.width,
                         "\" stroke-linejoin=\"round\" points=\"");
            for (size_t i = 0; i < run.size(); i++) {
                if (i) s += ' ';
                s += coord(px(run[i].x));
                s += ',';
                s += coord(py(run[i].y));
            }
            s += "\"/>\n";
        }
    // The legend, right-aligned above the plot.
    double lx = R - 8;
    for (size_t k = series.size(); k-- > 0;) {
        const PlotSeries& p = series[k];
        lx -= 26 + 7.0 * double(p.label.size());
        s += gl::cat("<line x1=\"", lx, "\" x2=\"", lx + 16, "\" y1=\"", T - 8, "\" y2=\"", T - 8, "\" stroke=\"",
                     html_escape(p.color), "\" stroke-width=\"3\"/><text x=\"", lx + 20, "\" y=\"", T - 4, "\">",
                     html_escape(p.label), "</text>\n");
    }
    return s + "</svg>\n";
}

}  // namespace train
