#include "ggml-lite/io/mapped_file.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "ggml-lite/core/error.h"
#include "ggml-lite/io/files.h"

namespace gl::io {

FileBytes FileBytes::map(const std::string& path) {
    uint64_t size = 0;
    const int fd = open_regular(path, &size);  // refuses FIFOs, devices and folders without blocking
    FileBytes f;
    f.origin_ = path;
    f.size_ = size_t(size);
    if (f.size_ > 0) {  // mmap refuses length 0; an empty file is rejected by the format check
        void* p = ::mmap(nullptr, f.size_, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            int e = errno;
            ::close(fd);
            fail(path, ": cannot map ", f.size_, " bytes: ", std::strerror(e));
        }
        f.data_ = static_cast<const uint8_t*>(p);
        f.mapped_ = true;
    }
    ::close(fd);  // the mapping keeps the file alive
    return f;
}

void FileBytes::drop_pages(const uint8_t* p, size_t n) const {
    if (!mapped_ || !data_ || p < data_ || n > size_ || size_t(p - data_) > size_ - n) return;
    const uintptr_t page = uintptr_t(::sysconf(_SC_PAGESIZE));
    const uintptr_t begin = (uintptr_t(p) + page - 1) / page * page, end = (uintptr_t(p) + n) / page * page;
    // Advice only: a failure leaves the pages resident, which costs memory, never correctness.
    if (end > begin) (void)::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

FileBytes FileBytes::own(std::vector<uint8_t> bytes, std::string origin) {
    FileBytes f;
    f.owned_ = std::move(bytes);
    f.data_ = f.owned_.data();
    f.size_ = f.owned_.size();
    f.origin_ = std::move(origin);
    return f;
}

FileBytes& FileBytes::operator=(FileBytes&& o) noexcept {
    if (this == &o) return *this;
    release();
    mapped_ = o.mapped_;
    size_ = o.size_;
    origin_ = std::move(o.origin_);
    owned_ = std::move(o.owned_);
    data_ = mapped_ ? o.data_ : owned_.data();  // a moved vector keeps its buffer
    o.data_ = nullptr;
    o.size_ = 0;
    o.mapped_ = false;
    return *this;
}

FileBytes::~FileBytes() { release(); }

void FileBytes::release() {
    if (mapped_ && data_) ::munmap(const_cast<uint8_t*>(data_), size_);
    data_ = nullptr;
    size_ = 0;
    mapped_ = false;
}

}  // namespace gl::io
