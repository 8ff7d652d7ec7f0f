// Step meter, JSONL writer and reader of the training metrics (see metrics.h).
#include "train/metrics.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "ggml-lite/core/error.h"

namespace train {

using ojson = nlohmann::ordered_json;

double monotonic_seconds() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double unix_seconds() {
    return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// ---- StepMeter ----

StepMeter::StepMeter(const MeterOptions& o, Clock monotonic, Clock wall)
    : o_(o), mono_(std::move(monotonic)), wall_(std::move(wall)), last_step_(o.first_step) {
    GL_CHECK(o.loss_window >= 1 && o.rate_window >= 1, "step meter: loss_window and rate_window must be >= 1 (got ",
             o.loss_window, ", ", o.rate_window, ")");
    GL_CHECK(o.first_step >= 0 && o.total_steps >= 0 && o.total_epochs >= 0,
             "step meter: first_step, total_steps and total_epochs must be >= 0");
    start_ = o.start_time ? *o.start_time : mono_();
}

void StepMeter::idle() {
    if (window_.empty()) return;
    // Moving the window's points forward keeps the rates those of training alone.
    const double d = mono_() - window_.back().t;
    for (Point& p : window_) p.t += d;
}

StepMetrics StepMeter::update(StepMetrics m) {
    GL_CHECK(m.step > last_step_, "step meter: step ", m.step, " does not follow step ", last_step_);
    GL_CHECK(m.images >= 0, "step meter: step ", m.step, " reports ", m.images, " images");
    const double now = mono_();
    last_step_ = m.step;
    images_ += m.images;
    m.total_steps = o_.total_steps;
    m.total_epochs = o_.total_epochs;

    if (std::isfinite(m.loss)) {
        losses_.push_back(m.loss);
        if (losses_.size() > size_t(o_.loss_window)) losses_.pop_front();
    }
    if (!losses_.empty() && !std::isfinite(m.loss_mean)) {
        // Summed afresh each step: a running sum drifts as values leave it.
        double s = 0;
        for (double x : losses_) s += x;
        m.loss_mean = s / double(losses_.size());
    }

    window_.push_back({now, m.step, images_});
    if (window_.size() > size_t(o_.rate_window) + 1) window_.pop_front();
    const Point& a = window_.front();
    const double dt = now - a.t;
    if (window_.size() >= 2 && dt > 0) {
        m.it_per_s = double(m.step - a.step) / dt;
        m.images_per_s = double(images_ - a.images) / dt;
        if (o_.total_steps > 0) m.eta_s = double(std::max<int64_t>(o_.total_steps - m.step, 0)) / m.it_per_s;
    }
    m.elapsed_s = now - start_;
    m.time = wall_();
    return m;
}

// ---- JSON ----

const char* event_kind_name(EventKind k) {
    switch (k) {
        case EventKind::start: return "start";
        case EventKind::resume: return "resume";
        case EventKind::save: return "save";
        case EventKind::sample: return "sample";
        case EventKind::validation: return "validation";
        default: return "end";
    }
}

namespace {

ojson num(double x) { return std::isfinite(x) ? ojson(x) : ojson(nullptr); }

}  // namespace

std::string metrics_json(const StepMetrics& m) {
    ojson j;
    j["type"] = "step";
    j["step"] = m.step;
    j["total_steps"] = m.total_steps;
    j["epoch"] = m.epoch;
    j["total_epochs"] = m.total_epochs;
    j["loss"] = num(m.loss);
    j["loss_mean"] = num(m.loss_mean);
    ojson lr = ojson::object();
    for (const LrValue& v : m.lr) lr[v.group] = num(v.lr);
    j["lr"] = std::move(lr);
    if (!m.group_lr.empty()) {
        ojson groups = ojson::object();
        for (const LrValue& v : m.group_lr) groups[v.group] = num(v.lr);
        j["group_lr"] = std::move(groups);
    }
    if (std::isfinite(m.d)) j["d"] = m.d;
    if (m.keys_scaled >= 0) {
        j["keys_scaled"] = m.keys_scaled;
        j["average_key_norm"] = num(m.average_key_norm);
        j["max_key_norm"] = num(m.max_key_norm);
    }
    j["it_per_s"] = num(m.it_per_s);
    j["images_per_s"] = num(m.images_per_s);
    j["eta_s"] = num(m.eta_s);
    j["elapsed_s"] = num(m.elapsed_s);
    j["time"] = num(m.time);
    j["images"] = m.images;
    j["mem_used"] = m.mem_used;
    j["mem_plan"] = m.mem_plan;
    j["grad_norm"] = num(m.grad_norm);
    j["applied"] = m.applied;
    // Captions, group names and paths are user text: invalid UTF-8 is replaced, not refused.
    return j.dump(-1, ' ', false, ojson::error_handler_t::replace);
}

std::string metrics_json(const MetricsEvent& e) {
    ojson j;
    j["type"] = event_kind_name(e.kind);
    j["step"] = e.step;
    j["epoch"] = e.epoch;
    j["time"] = num(e.time);
    if (!e.path.empty()) j["path"] = e.path;
    if (e.kind == EventKind::sample || !e.images.empty()) {
        ojson a = ojson::array();
        for (const SampleImage& s : e.images) a.push_back({{"path", s.path}, {"prompt", s.prompt}});
        j["images"] = std::move(a);
    }
    if (!e.message.empty()) j["message"] = e.message;
    if (e.kind == EventKind::validation) {
        j["loss"] = num(e.loss);
        j["average"] = num(e.average);
        j["divergence"] = num(e.divergence);
    }
    return j.dump(-1, ' ', false, ojson::error_handler_t::replace);
}

// ---- MetricsWriter ----

MetricsWriter::MetricsWriter(const std::filesystem::path& file) : path_(file) {
    fd_ = ::open(file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd_ < 0) gl::fail(file.string(), ": cannot open the metrics file for appending: ", std::strerror(errno));
    struct stat st {};
    if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
        ::close(fd_);
        gl::fail(file.string(), ": the metrics file is not a regular file");
    }
    if (st.st_size > 0) {
        char last = '\n';
        const int rfd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
        const bool ok = rfd >= 0 && ::pread(rfd, &last, 1, st.st_size - 1) == 1;
        if (rfd >= 0) ::close(rfd);
        if (!ok) {
            ::close(fd_);
            gl::fail(file.string(), ": cannot read the end of the metrics file");
        }
        if (last != '\n') append("");
    }
}

MetricsWriter::~MetricsWriter() {
    if (fd_ >= 0) ::close(fd_);
}

void MetricsWriter::append(const std::string& line) {
    const std::string s = line + "\n";
    size_t done = 0;
    while (done < s.size()) {
        const ssize_t n = ::write(fd_, s.data() + done, s.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) gl::fail(path_.string(), ": cannot append to the metrics file: ", std::strerror(errno));
        done += size_t(n);
    }
}

void MetricsWriter::write(const StepMetrics& m) { append(metrics_json(m)); }

void MetricsWriter::write(const MetricsEvent& e) {
    if (e.time == 0) {
        MetricsEvent timed = e;
        timed.time = unix_seconds();
        append(metrics_json(timed));
    } else {
        append(metrics_json(e));
    }
    if (::fdatasync(fd_) != 0) gl::fail(path_.string(), ": cannot flush the metrics file: ", std::strerror(errno));
}

// ---- reading ----

namespace {

double get_num(const ojson& j, const char* k) {
    const auto it = j.find(k);
    if (it == j.end() || it->is_null()) return kUnknown;
    if (!it->is_number()) throw std::invalid_argument(k);
    return it->get<double>();
}

int64_t get_int(const ojson& j, const char* k) {
    const auto it = j.find(k);
    if (it == j.end()) return 0;
    if (!it->is_number_integer()) throw std::invalid_argument(k);
    return it->get<int64_t>();
}

size_t get_size(const ojson& j, const char* k) {
    const int64_t v = get_int(j, k);
    if (v < 0) throw std::invalid_argument(k);
    return size_t(v);
}

std::string get_str(const ojson& j, const char* k) {
    const auto it = j.find(k);
    if (it == j.end()) return "";
    if (!it->is_string()) throw std::invalid_argument(k);
    return it->get<std::string>();
}

StepMetrics step_of(const ojson& j) {
    StepMetrics m;
    m.step = get_int(j, "step");
    m.total_steps = get_int(j, "total_steps");
    m.epoch = get_int(j, "epoch");
    m.total_epochs = get_int(j, "total_epochs");
    m.loss = get_num(j, "loss");
    m.loss_mean = get_num(j, "loss_mean");
    for (const char* key : {"lr", "group_lr"}) {
        const auto it = j.find(key);
        if (it == j.end()) continue;
        if (!it->is_object()) throw std::invalid_argument(key);
        for (const auto& [group, v] : it->items()) {
            if (!v.is_number() && !v.is_null()) throw std::invalid_argument(key);
            (key == std::string("lr") ? m.lr : m.group_lr).push_back({group, v.is_null() ? kUnknown : v.get<double>()});
        }
    }
    m.d = get_num(j, "d");
    if (j.contains("keys_scaled")) {
        m.keys_scaled = get_int(j, "keys_scaled");
        m.average_key_norm = get_num(j, "average_key_norm");
        m.max_key_norm = get_num(j, "max_key_norm");
    }
    m.it_per_s = get_num(j, "it_per_s");
    m.images_per_s = get_num(j, "images_per_s");
    m.eta_s = get_num(j, "eta_s");
    m.elapsed_s = get_num(j, "elapsed_s");
    m.time = get_num(j, "time");
    m.images = get_int(j, "images");
    m.mem_used = get_size(j, "mem_used");
    m.mem_plan = get_size(j, "mem_plan");
    m.grad_norm = get_num(j, "grad_norm");
    if (const auto it = j.find("applied"); it != j.end()) {
        if (!it->is_boolean()) throw std::invalid_argument("applied");
        m.applied = it->get<bool>();
    }
    return m;
}

bool event_kind_of(const std::string& s, EventKind& k) {
    for (EventKind e : {EventKind::start, EventKind::resume, EventKind::save, EventKind::sample, EventKind::end,
                        EventKind::validation})
        if (s == event_kind_name(e)) {
            k = e;
            return true;
        }
    return false;
}

MetricsEvent event_of(const ojson& j, EventKind kind) {
    MetricsEvent e;
    e.kind = kind;
    e.step = get_int(j, "step");
    e.epoch = get_int(j, "epoch");
    e.time = get_num(j, "time");
    e.path = get_str(j, "path");
    e.message = get_str(j, "message");
    if (kind == EventKind::validation) {
        e.loss = get_num(j, "loss");
        e.average = get_num(j, "average");
        e.divergence = get_num(j, "divergence");
    }
    if (const auto it = j.find("images"); it != j.end()) {
        if (!it->is_array()) throw std::invalid_argument("images");
        for (const ojson& im : *it) {
            if (!im.is_object()) throw std::invalid_argument("images");
            e.images.push_back({get_str(im, "path"), get_str(im, "prompt")});
        }
    }
    return e;
}

}  // namespace

MetricsHistory parse_metrics(const std::string& text) {
    MetricsHistory h;
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line)) {
        if (line.empty()) continue;
        const ojson j = ojson::parse(line, nullptr, /*allow_exceptions=*/false);
        try {
            if (j.is_discarded() || !j.is_object()) throw std::invalid_argument("line");
            const std::string type = get_str(j, "type");
            EventKind kind{};
            if (type == "step") {
                h.steps.push_back(step_of(j));
            } else if (event_kind_of(type, kind)) {
                MetricsEvent e = event_of(j, kind);
                if (kind == EventKind::start) {  // a new run in the same folder
                    h.steps.clear();
                    h.events.clear();
                }
                if (kind == EventKind::resume) {
                    // The steps after the state resumed from were done again: keep the new records.
                    std::erase_if(h.steps, [&](const StepMetrics& s) { return s.step > e.step; });
                    std::erase_if(h.events, [&](const MetricsEvent& x) {
                        return x.step > e.step && (x.kind == EventKind::save || x.kind == EventKind::sample ||
                                                   x.kind == EventKind::validation);
                    });
                }
                h.events.push_back(std::move(e));
            } else {
                h.skipped_lines++;
            }
        } catch (const std::exception&) {
            h.skipped_lines++;
        }
    }
    return h;
}

MetricsHistory read_metrics(const std::filesystem::path& file) {
    std::ifstream f(file, std::ios::binary);
    GL_CHECK(f, file.string(), ": cannot open the metrics file");
    std::ostringstream os;
    os << f.rdbuf();
    GL_CHECK(!f.bad(), file.string(), ": cannot read the metrics file");
    return parse_metrics(os.str());
}

}  // namespace train
