#include "ggml-lite/io/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "ggml-lite/core/error.h"
#include "ggml-lite/io/files.h"

namespace gl::io {

void write_file_atomic(const std::string& path, std::span<const ByteRange> pieces) {
    GL_CHECK(!path.empty(), "write_file_atomic: empty path");
    struct stat st {};
    GL_CHECK(::stat(path.c_str(), &st) != 0 || !S_ISDIR(st.st_mode), path, ": is a directory");
    remove_stale_temps(path);  // what a killed writer of this path left behind
    uint64_t remaining = 0;
    for (const ByteRange& r : pieces) remaining += r.size;
    std::string tmp = temp_file_pattern(path);
    int fd = ::mkstemp(tmp.data());
    if (fd < 0) fail(cannot_create(path, errno));
    try {
        ::fchmod(fd, 0644);  // mkstemp makes 0600; outputs are for others to read too
        for (const ByteRange& r : pieces) {
            if (r.size == 0) continue;
            write_fully(fd, r.data, r.size, path, remaining);
            remaining -= r.size;
        }
        if (::fsync(fd) != 0) fail(tmp, ": fsync failed: ", std::strerror(errno));
        const int rc = ::close(fd);
        fd = -1;
        if (rc != 0) fail(tmp, ": close failed: ", std::strerror(errno));
        if (::rename(tmp.c_str(), path.c_str()) != 0) fail(path, ": cannot rename ", tmp, " onto it: ", std::strerror(errno));
    } catch (...) {
        if (fd >= 0) ::close(fd);
        ::unlink(tmp.c_str());
        throw;
    }
    const size_t slash = path.rfind('/');
    const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
    const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {  // the rename's durability; a failure leaves a complete file, so it is not fatal
        ::fsync(dfd);
        ::close(dfd);
    }
}

void write_file_atomic(const std::string& path, const void* data, size_t size) {
    const ByteRange whole{data, size};
    write_file_atomic(path, std::span<const ByteRange>(&whole, 1));
}

void write_file_atomic(const std::string& path, std::string_view text) {
    write_file_atomic(path, text.data(), text.size());
}

}  // namespace gl::io
