#include "ggml-lite/io/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "ggml-lite/core/error.h"

namespace gl::io {

void write_file_atomic(const std::string& path, const void* data, size_t size) {
    GL_CHECK(!path.empty(), "write_file_atomic: empty path");
    std::string tmp = path + ".tmp-XXXXXX";
    int fd = ::mkstemp(tmp.data());
    if (fd < 0) fail(path, ": cannot create a temporary file ", tmp, ": ", std::strerror(errno));
    try {
        ::fchmod(fd, 0644);  // mkstemp makes 0600; outputs are for others to read too
        const char* p = static_cast<const char*>(data);
        for (size_t left = size; left > 0;) {
            const ssize_t w = ::write(fd, p, std::min<size_t>(left, size_t(1) << 30));
            if (w < 0 && errno == EINTR) continue;
            if (w <= 0) fail(tmp, ": write failed: ", std::strerror(errno));
            p += w;
            left -= size_t(w);
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

}  // namespace gl::io
