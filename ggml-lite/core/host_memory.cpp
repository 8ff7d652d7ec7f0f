#include "ggml-lite/core/host_memory.h"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <fstream>
#include <limits>
#include <sstream>

#include "ggml-lite/core/error.h"

namespace gl {

namespace {

std::optional<std::string> read_text(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    if (!f) return std::nullopt;
    std::ostringstream s;
    s << f.rdbuf();
    if (f.bad()) return std::nullopt;
    return s.str();
}

// The whole number at the start of t (blanks first); nullopt for anything else ("max").
std::optional<uint64_t> leading_number(std::string_view t) {
    while (!t.empty() && (t.front() == ' ' || t.front() == '\t')) t.remove_prefix(1);
    uint64_t v = 0;
    const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    if (ec != std::errc() || end == t.data()) return std::nullopt;
    return v;
}

// The number after `key` on the line that starts with it and a ':' or a blank ("MemAvailable:
// 123 kB", "inactive_file 456").
std::optional<uint64_t> field(std::string_view text, std::string_view key) {
    for (size_t pos = 0; pos < text.size();) {
        const size_t nl = std::min(text.find('\n', pos), text.size());
        std::string_view line = text.substr(pos, nl - pos);
        pos = nl + 1;
        if (line.size() <= key.size() || line.substr(0, key.size()) != key) continue;
        line.remove_prefix(key.size());
        if (line.front() == ':') line.remove_prefix(1);
        else if (line.front() != ' ' && line.front() != '\t') continue;
        return leading_number(line);
    }
    return std::nullopt;
}

// cgroup v1 writes a page-rounded 2^63 - 1 for "no limit".
constexpr uint64_t kNoLimitFrom = uint64_t(1) << 62;

// The folders of one cgroup hierarchy from the process's group up to the mount's root.
std::vector<std::string> levels_of(const std::string& root, std::string path) {
    while (!path.empty() && path.back() == '/') path.pop_back();
    std::vector<std::string> dirs;
    for (;;) {
        dirs.push_back(root + path);
        if (path.empty()) return dirs;
        path.erase(path.rfind('/'));
    }
}

CgroupMemoryFiles files_in(const std::string& dir, const char* limit, const char* usage) {
    return {read_text(dir + "/" + limit), read_text(dir + "/" + usage), read_text(dir + "/memory.stat")};
}

std::vector<CgroupMemoryFiles> process_cgroup_levels() {
    std::vector<CgroupMemoryFiles> out;
    const std::optional<std::string> text = read_text("/proc/self/cgroup");
    if (!text) return out;
    std::istringstream lines(*text);
    std::string line;
    while (std::getline(lines, line)) {  // "<id>:<controllers>:<path>"
        const size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
        if (b == std::string::npos) continue;
        const std::string id = line.substr(0, a), controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
        if (id == "0" && controllers.empty()) {
            for (const char* root : {"/sys/fs/cgroup", "/sys/fs/cgroup/unified"})
                for (const std::string& dir : levels_of(root, path))
                    out.push_back(files_in(dir, "memory.max", "memory.current"));
        } else if (("," + controllers + ",").find(",memory,") != std::string::npos) {
            for (const std::string& dir : levels_of("/sys/fs/cgroup/memory", path))
                out.push_back(files_in(dir, "memory.limit_in_bytes", "memory.usage_in_bytes"));
        }
    }
    return out;
}

}  // namespace

size_t host_available_bytes(std::string_view meminfo, const std::vector<CgroupMemoryFiles>& levels) {
    const std::optional<uint64_t> kib = field(meminfo, "MemAvailable");
    GL_CHECK(kib, "host memory: /proc/meminfo has no MemAvailable line (Linux 3.14 or newer reports it)");
    uint64_t avail = *kib > std::numeric_limits<uint64_t>::max() / 1024 ? std::numeric_limits<uint64_t>::max()
                                                                         : *kib * 1024;
    for (const CgroupMemoryFiles& l : levels) {
        if (!l.limit || !l.usage) continue;
        const uint64_t limit = leading_number(*l.limit).value_or(kNoLimitFrom);  // "max": no limit
        const std::optional<uint64_t> usage = leading_number(*l.usage);
        if (limit >= kNoLimitFrom || !usage) continue;
        uint64_t inactive = 0;
        if (l.stat) {  // v1's total_ counts the group's children too
            inactive = field(*l.stat, "total_inactive_file").value_or(field(*l.stat, "inactive_file").value_or(0));
        }
        const uint64_t working = *usage - std::min(*usage, inactive);
        avail = std::min(avail, limit > working ? limit - working : 0);
    }
    return size_t(std::min<uint64_t>(avail, std::numeric_limits<size_t>::max()));
}

size_t host_available_bytes() {
    const std::optional<std::string> meminfo = read_text("/proc/meminfo");
    GL_CHECK(meminfo, "host memory: cannot read /proc/meminfo");
    return host_available_bytes(*meminfo, process_cgroup_levels());
}

}  // namespace gl
