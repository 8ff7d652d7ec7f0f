// The training progress line (see progress.h).
#include "tools/common/progress.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace gl::cli {

namespace {

// The descriptor of an on_fd() progress whose line is open (-1: none), for end_line_from_signal.
std::atomic<int> g_open_line_fd{-1};

void write_all(int fd, std::string_view s) {
    while (!s.empty()) {
        const ssize_t n = ::write(fd, s.data(), s.size());
        if (n <= 0) return;  // nothing sensible to do about a failing terminal
        s.remove_prefix(size_t(n));
    }
}

int terminal_columns(int fd) {
    winsize ws{};
    if (::ioctl(fd, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0) return ws.ws_col;
    if (const char* c = std::getenv("COLUMNS")) {
        const int n = std::atoi(c);
        if (n > 0) return n;
    }
    return 80;
}

template <class... A>
std::string fmt(const char* f, A... a) {
    char buf[128];
    std::snprintf(buf, sizeof buf, f, a...);
    return buf;
}

bool known(double x) { return std::isfinite(x); }

std::string percent(const train::StepMetrics& m) {
    return fmt("%.0f%%", 100.0 * double(std::min(m.step, m.total_steps)) / double(m.total_steps));
}

// "1.21/1.50 GiB", "300/512 MiB", "1.21 GiB" (no plan); "" when nothing is known.
std::string memory(const train::StepMetrics& m) {
    const size_t ref = std::max(m.mem_used, m.mem_plan);
    if (ref == 0) return "";
    const bool gib = ref >= (size_t(1) << 30);
    const double unit = gib ? double(size_t(1) << 30) : double(size_t(1) << 20);
    const char* f = gib ? "%.2f" : "%.0f";
    std::string s = m.mem_used ? fmt(f, double(m.mem_used) / unit) : "?";
    if (m.mem_plan) s.append("/").append(fmt(f, double(m.mem_plan) / unit));
    return s + (gib ? " GiB" : " MiB");
}

std::string loss_text(double x) { return known(x) ? fmt("%.4g", x) : "--"; }

std::string rate(double x) { return known(x) ? fmt("%.3g", x) : "--"; }

}  // namespace

std::string format_duration(double seconds) {
    if (!std::isfinite(seconds) || seconds < 0) return "--:--";
    const long long s = std::llround(seconds);
    if (s >= 3600) return fmt("%lld:%02lld:%02lld", s / 3600, s / 60 % 60, s % 60);
    return fmt("%lld:%02lld", s / 60, s % 60);
}

std::string Progress::terminal_line(const train::StepMetrics& m, int width) {
    struct Field {
        std::string text;
        int priority;  // dropped from the highest number down until the line fits
    };
    std::string lr;
    for (const train::LrValue& v : m.lr) lr += (lr.empty() ? "lr " : ",") + fmt("%.1e", v.lr);
    const std::string mem = memory(m);
    std::vector<Field> fields = {
        {m.total_steps > 0 ? fmt("step %lld/%lld", (long long)m.step, (long long)m.total_steps)
                           : fmt("step %lld", (long long)m.step),
         0},
        {m.total_epochs > 0 ? fmt("ep %lld/%lld", (long long)m.epoch, (long long)m.total_epochs)
                            : fmt("ep %lld", (long long)m.epoch),
         5},
        {"loss " + loss_text(m.loss_mean), 1},
        {std::isfinite(m.val_loss) ? "val " + loss_text(m.val_loss) : "", 2},
        {lr, 4},
        {rate(m.it_per_s) + " it/s", 3},
        {rate(m.images_per_s) + " img/s", 6},
        {mem.empty() ? "" : "mem " + mem, 7},
        {m.keys_scaled >= 0 ? fmt("keys scaled %lld", (long long)m.keys_scaled) : "", 8},
        {m.total_steps > 0 ? "ETA " + format_duration(m.eta_s) : "", 2},
    };
    std::erase_if(fields, [](const Field& f) { return f.text.empty(); });
    const int room = std::max(width - 1, 1);
    auto joined = [&] {
        std::string s;
        for (const Field& f : fields) s += (s.empty() ? "" : " | ") + f.text;
        return s;
    };
    while (fields.size() > 1 && int(joined().size()) > room) {
        auto worst = std::max_element(fields.begin(), fields.end(),
                                      [](const Field& a, const Field& b) { return a.priority < b.priority; });
        fields.erase(worst);
    }
    std::string line = joined();
    // A bar after the step count with the room left, when there is a total and room for one.
    if (m.total_steps > 0) {
        std::string pct = " ";
        pct += percent(m);
        const int free = room - int(line.size()) - int(pct.size()) - 3;  // " [" ... "]"
        const int bar = std::min(free, 30);
        if (bar >= 8) {
            const int filled = int(double(bar) * double(std::min(m.step, m.total_steps)) / double(m.total_steps));
            const std::string b = " [" + std::string(size_t(filled), '#') + std::string(size_t(bar - filled), '.') + "]" + pct;
            line.insert(fields.front().text.size(), b);
        }
    }
    if (int(line.size()) > room) line.resize(size_t(room));
    return line;
}

std::string Progress::plain_line(const train::StepMetrics& m) {
    std::string s = fmt("step %lld", (long long)m.step);
    if (m.total_steps > 0) s += fmt("/%lld (%s)", (long long)m.total_steps, percent(m).c_str());
    s += fmt("  epoch %lld", (long long)m.epoch);
    if (m.total_epochs > 0) s += fmt("/%lld", (long long)m.total_epochs);
    s += "  loss " + loss_text(m.loss_mean) + " (last " + loss_text(m.loss) + ")";
    if (std::isfinite(m.val_loss)) s += "  validation loss " + loss_text(m.val_loss);
    if (!m.lr.empty()) {
        s += "  lr";
        for (const train::LrValue& v : m.lr) s += (m.lr.size() > 1 ? " " + v.group + " " : " ") + fmt("%.2e", v.lr);
    }
    s += "  " + rate(m.it_per_s) + " it/s  " + rate(m.images_per_s) + " images/s";
    if (const std::string mem = memory(m); !mem.empty()) s += "  mem " + mem;
    if (m.keys_scaled >= 0)
        s += fmt("  max norm: %lld keys scaled, average key norm %.4g, max %.4g", (long long)m.keys_scaled,
                 m.average_key_norm, m.max_key_norm);
    s += "  elapsed " + format_duration(m.elapsed_s);
    if (m.total_steps > 0) s += "  ETA " + format_duration(m.eta_s);
    if (!m.applied) s += "  (update skipped)";
    return s;
}

Progress::Progress(const ProgressOptions& o, Sink sink, Columns columns, train::Clock clock)
    : o_(o), sink_(std::move(sink)), columns_(std::move(columns)), clock_(std::move(clock)) {}

Progress::Progress(Progress&& o) noexcept
    : o_(o.o_),
      sink_(std::move(o.sink_)),
      columns_(std::move(o.columns_)),
      clock_(std::move(o.clock_)),
      last_(std::move(o.last_)),
      open_(o.open_),
      held_(o.held_),
      fd_(o.fd_),
      last_draw_(o.last_draw_) {
    o.open_ = o.held_ = false;
    o.fd_ = -1;
}

Progress Progress::on_fd(int fd, int every_steps, double every_seconds) {
    ProgressOptions o;
    o.tty = ::isatty(fd) == 1;
    o.every_steps = every_steps;
    o.every_seconds = every_seconds;
    Progress p(o, [fd](std::string_view s) { write_all(fd, s); }, [fd] { return terminal_columns(fd); });
    p.fd_ = fd;
    return p;
}

Progress::~Progress() { finish(); }

void Progress::draw(const train::StepMetrics& m) {
    std::string s = "\r";  // built by appending: GCC 12 warns falsely on "literal" + std::string&&
    s += terminal_line(m, columns_());
    s += "\x1b[K";
    sink_(s);
    open_ = true;
    held_ = false;
    if (fd_ >= 0) g_open_line_fd = fd_;
}

void Progress::update(const train::StepMetrics& m) {
    const double now = clock_();
    const bool first = !last_.has_value();
    const bool final = m.total_steps > 0 && m.step >= m.total_steps;
    last_ = m;
    if (o_.tty) {
        if (first || final || now - last_draw_ >= o_.redraw_seconds) {
            draw(m);
            last_draw_ = now;
        } else {
            held_ = true;
        }
        return;
    }
    const bool by_steps = o_.every_steps > 0 && m.step % o_.every_steps == 0;
    const bool by_time = o_.every_seconds > 0 && now - last_draw_ >= o_.every_seconds;
    if (first || final || by_steps || by_time) {
        sink_(plain_line(m) + "\n");
        last_draw_ = now;
    }
}

void Progress::print(std::string_view line) {
    if (open_) {
        std::string s = "\r\x1b[K";
        s += line;
        s += "\n";
        sink_(s);
        draw(*last_);
    } else {
        sink_(std::string(line) + "\n");
    }
}

void Progress::finish() {
    if (!open_) return;
    if (held_) draw(*last_);
    sink_("\n");
    open_ = false;
    if (fd_ >= 0) g_open_line_fd = -1;
}

void Progress::end_line_from_signal() {
    const int fd = g_open_line_fd.exchange(-1);
    if (fd >= 0) {
        const ssize_t n = ::write(fd, "\n", 1);
        (void)n;
    }
}

}  // namespace gl::cli
