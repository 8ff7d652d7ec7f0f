#include "ggml-lite/io/files.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <optional>

#include "ggml-lite/core/error.h"

namespace gl::io {

namespace {

std::atomic<WriteFault> g_write_fault{nullptr};

const char* type_name(mode_t m) {
    if (S_ISDIR(m)) return "a directory";
    if (S_ISFIFO(m)) return "a FIFO (named pipe)";
    if (S_ISSOCK(m)) return "a socket";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISBLK(m)) return "a block device";
    return "a special file";
}

std::string bytes_str(uint64_t b) {
    char buf[48];
    const double mib = double(b) / double(1 << 20);
    std::snprintf(buf, sizeof buf, mib >= 1024 ? "%.2f GiB" : "%.1f MiB", mib >= 1024 ? mib / 1024 : mib);
    return cat(b, " bytes (", buf, ")");
}

// path without trailing slashes ("out/" names the folder "out").
std::string trimmed(std::string path) {
    while (path.size() > 1 && path.back() == '/') path.pop_back();
    return path;
}

// This host's name as it goes into temporary names: letters, digits, '.' and '_' only.
std::string host_tag() {
    char buf[256] = {};
    if (::gethostname(buf, sizeof buf - 1) != 0 || !buf[0]) return "host";
    std::string h(buf);
    if (h.size() > 64) h.resize(64);
    for (char& c : h)
        if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_') c = '_';
    return h;
}

// "<digits>" at the start of s: its value and length (0 when there are none).
size_t leading_pid(const std::string& s, long* pid) {
    size_t n = 0;
    long v = 0;
    while (n < s.size() && n < 10 && s[n] >= '0' && s[n] <= '9') v = v * 10 + (s[n++] - '0');
    *pid = v;
    return n;
}

}  // namespace

int open_regular(const std::string& path, uint64_t* size) {
    GL_CHECK(!path.empty(), "an empty path was given where a file belongs");
    // The type is checked before open(): opening a FIFO for reading waits for a writer.
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) fail(path, ": cannot open: ", std::strerror(errno));
    if (!S_ISREG(st.st_mode)) fail(path, ": is ", type_name(st.st_mode), ", not a regular file");
    // O_NONBLOCK: should the path have become a FIFO since the stat, open() still returns at once.
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) fail(path, ": cannot open: ", std::strerror(errno));
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        ::close(fd);
        fail(path, ": is ", type_name(st.st_mode), ", not a regular file");
    }
    *size = uint64_t(st.st_size);
    return fd;
}

std::string read_small_file(const std::string& path, uint64_t max_bytes) {
    uint64_t size = 0;
    const int fd = open_regular(path, &size);
    std::string out;
    try {
        GL_CHECK(size <= max_bytes, path, ": ", size, " bytes; a file of this kind is at most ", max_bytes);
        out.resize(size_t(size));
        size_t got = 0;
        while (got < out.size()) {
            const ssize_t r = ::read(fd, out.data() + got, out.size() - got);
            if (r < 0 && errno == EINTR) continue;
            if (r < 0) fail(path, ": cannot read: ", std::strerror(errno));
            if (r == 0) break;  // shrank while being read: take what is there
            got += size_t(r);
        }
        out.resize(got);
    } catch (...) {
        ::close(fd);
        throw;
    }
    ::close(fd);
    return out;
}

void write_fully(int fd, const void* data, size_t n, const std::string& path, uint64_t remaining) {
    const char* c = static_cast<const char*>(data);
    while (n > 0) {
        const size_t chunk = std::min<size_t>(n, size_t(1) << 30);
        ssize_t w = -1;
        const WriteFault fault = g_write_fault.load();
        if (const int injected = fault ? fault(chunk) : 0) errno = injected;
        else w = ::write(fd, c, chunk);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            const int e = w < 0 ? errno : ENOSPC;  // a write of 0 bytes to a regular file means no room
            if (e == ENOSPC || e == EDQUOT) {
                struct statvfs vs {};
                const std::string free_part =
                    ::fstatvfs(fd, &vs) == 0 ? cat(", ", bytes_str(uint64_t(vs.f_bavail) * vs.f_frsize), " free") : "";
                fail(path, ": no space left on the device", e == EDQUOT ? " (disk quota exceeded)" : "", ": ",
                     bytes_str(remaining), " still to write", free_part);
            }
            if (e == EFBIG) fail(path, ": the file system refuses a file this large (", std::strerror(e), ")");
            fail(path, ": write failed: ", std::strerror(e));
        }
        c += w;
        n -= size_t(w);
        remaining -= std::min<uint64_t>(remaining, uint64_t(w));
    }
}

void copy_file_contents(const std::string& from, const std::string& to) {
    uint64_t size = 0;
    const int in = open_regular(from, &size);
    int out = ::open(to.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (out < 0) {
        const int e = errno;
        ::close(in);
        fail(cannot_create(to, e));
    }
    try {
        std::vector<char> buf(size_t(8) << 20);
        uint64_t done = 0;
        for (;;) {
            const ssize_t r = ::read(in, buf.data(), buf.size());
            if (r < 0 && errno == EINTR) continue;
            if (r < 0) fail(from, ": cannot read: ", std::strerror(errno));
            if (r == 0) break;
            write_fully(out, buf.data(), size_t(r), to, size > done ? size - done : uint64_t(r));
            done += uint64_t(r);
        }
        if (::fsync(out) != 0) fail(to, ": fsync failed: ", std::strerror(errno));
        const int rc = ::close(out);
        out = -1;
        if (rc != 0) fail(to, ": close failed: ", std::strerror(errno));
    } catch (...) {
        if (out >= 0) ::close(out);
        ::close(in);
        ::unlink(to.c_str());
        throw;
    }
    ::close(in);
}

std::string cannot_create(const std::string& path, int err) {
    switch (err) {
        case EROFS: return path + ": read-only file system";
        case EACCES:
        case EPERM: return path + ": permission denied";
        case ENOSPC: return path + ": no space left on the device";
        case EDQUOT: return path + ": disk quota exceeded";
        case ENOENT: return path + ": its folder does not exist";
        case ENOTDIR: return path + ": a part of the path is not a folder";
        default: return cat(path, ": cannot be created (", std::strerror(err), ")");
    }
}

void check_can_create(const std::string& dir, const std::string& path) {
    struct statvfs vs {};
    if (::statvfs(dir.c_str(), &vs) == 0 && (vs.f_flag & ST_RDONLY)) fail(cannot_create(path, EROFS));
    if (::access(dir.c_str(), W_OK | X_OK) != 0) fail(cannot_create(path, errno));
}

uint64_t free_bytes(const std::string& dir) {
    struct statvfs vs {};
    if (::statvfs(dir.c_str(), &vs) != 0) return UINT64_MAX;
    return uint64_t(vs.f_bavail) * uint64_t(vs.f_frsize);
}

void check_free_space(const std::string& dir, uint64_t need, const std::string& what) {
    const uint64_t free = free_bytes(dir);
    GL_CHECK(free == UINT64_MAX || need <= free, what, " needs ", bytes_str(need), " but the file system holding ",
             dir, " has only ", bytes_str(free), " free");
}

std::string temp_file_pattern(const std::string& path, long pid) {
    return cat(trimmed(path), ".tmp-", host_tag(), "-", pid ? pid : long(::getpid()), "-XXXXXX");
}

std::string partial_dir_name(const std::string& path, long pid) {
    return cat(trimmed(path), ".partial-", host_tag(), "-", pid ? pid : long(::getpid()));
}

namespace {

// When name is a temporary of this host ("<base>.tmp-<host>-<pid>-XXXXXX" or
// "<base>.partial-<host>-<pid>", base not empty): the length of <base> and the writer's pid.
std::optional<std::pair<size_t, long>> temp_name_parts(const std::string& name) {
    const std::string host = host_tag();
    for (const bool file : {true, false}) {
        const std::string marker = (file ? ".tmp-" : ".partial-") + host + "-";
        const size_t at = name.rfind(marker);
        if (at == std::string::npos || at == 0) continue;
        const size_t from = at + marker.size();
        long pid = 0;
        const size_t n = leading_pid(name.substr(from), &pid);
        const bool whole = file ? name.size() == from + n + 7 && name[from + n] == '-' : name.size() == from + n;
        if (n > 0 && whole) return std::pair{at, pid};
    }
    return std::nullopt;
}

// Removes dir/name when it is a file or a folder (never a symlink: only what a writer made itself).
bool remove_entry(const std::string& full) {
    struct stat st {};
    if (::lstat(full.c_str(), &st) != 0) return false;
    if (S_ISREG(st.st_mode)) return ::unlink(full.c_str()) == 0;
    if (!S_ISDIR(st.st_mode)) return false;
    std::error_code ec;
    std::filesystem::remove_all(full, ec);  // links inside are removed, not followed
    return !ec;
}

std::vector<std::string> entries(const std::string& dir) {
    std::vector<std::string> names;
    DIR* d = ::opendir(dir.c_str());
    if (!d) return names;  // nothing to clean where nothing can be listed
    while (const dirent* e = ::readdir(d)) names.emplace_back(e->d_name);
    ::closedir(d);
    std::sort(names.begin(), names.end());
    return names;
}

// Removes the stale temporaries in dir ("": the current folder) whose name `matches` (given the
// length of its base).
std::vector<std::string> remove_stale(const std::string& dir, const std::function<bool(const std::string&, size_t)>& matches) {
    std::vector<std::string> removed;
    for (const std::string& name : entries(dir.empty() ? "." : dir)) {
        const auto parts = temp_name_parts(name);
        if (!parts || !matches(name, parts->first) || process_alive(parts->second)) continue;
        const std::string full = (std::filesystem::path(dir) / name).string();
        if (remove_entry(full)) removed.push_back(full);
    }
    return removed;
}

}  // namespace

bool process_alive(long pid) {
    if (pid <= 0 || pid != long(pid_t(pid))) return false;
    return ::kill(pid_t(pid), 0) == 0 || errno == EPERM;
}

std::vector<std::string> remove_stale_temps(const std::string& path_in) {
    const std::string path = trimmed(path_in);
    const std::string base = std::filesystem::path(path).filename().string();
    if (base.empty() || base == "." || base == "..") return {};
    return remove_stale(std::filesystem::path(path).parent_path().string(), [&](const std::string& name, size_t base_len) {
        return base_len == base.size() && name.compare(0, base.size(), base) == 0;
    });
}

std::vector<std::string> remove_stale_temps_in(const std::string& dir) {
    return remove_stale(dir, [](const std::string&, size_t) { return true; });
}

void set_write_fault(WriteFault f) { g_write_fault.store(f); }

}  // namespace gl::io
