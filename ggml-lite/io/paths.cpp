#include "ggml-lite/io/paths.h"

#include <sys/stat.h>

#include <filesystem>

namespace gl::io {

namespace fs = std::filesystem;

std::string resolved_path(const std::string& p) {
    std::error_code ec;
    const fs::path abs = fs::absolute(p, ec);
    if (ec) return fs::path(p).lexically_normal().string();
    fs::path r = fs::weakly_canonical(abs, ec);
    if (ec) r = abs.lexically_normal();
    std::string s = r.string();
    while (s.size() > 1 && s.back() == '/') s.pop_back();
    return s;
}

std::optional<std::string> path_below(const std::string& a, const std::string& b) {
    const fs::path ra = resolved_path(a), rb = resolved_path(b);
    struct stat sb {};
    const bool b_exists = ::stat(rb.c_str(), &sb) == 0;
    // From a upwards: the first folder that is b, by real path or by object.
    fs::path rel;
    for (fs::path p = ra;; p = p.parent_path()) {
        struct stat sp {};
        if (p == rb || (b_exists && ::stat(p.c_str(), &sp) == 0 && sp.st_dev == sb.st_dev && sp.st_ino == sb.st_ino))
            return rel.string();
        if (p == p.parent_path()) return std::nullopt;
        rel = rel.empty() ? p.filename() : p.filename() / rel;
    }
}

bool same_object(const std::string& a, const std::string& b) {
    struct stat sa {}, sb {};
    return ::stat(a.c_str(), &sa) == 0 && ::stat(b.c_str(), &sb) == 0 && sa.st_dev == sb.st_dev &&
           sa.st_ino == sb.st_ino;
}

}  // namespace gl::io
