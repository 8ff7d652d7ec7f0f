// The bytes of a checkpoint: a read-only memory map of a file (so tensors are read in place,
// never copied whole into host memory), or a buffer the caller hands over (tests, fuzzing).
// The map stays valid for the object's lifetime; a file truncated by another process while
// mapped is outside what any reader can defend against (the OS raises SIGBUS).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace gl::io {

class FileBytes {
public:
    static FileBytes map(const std::string& path);  // throws gl::Error naming the path
    static FileBytes own(std::vector<uint8_t> bytes, std::string origin);

    FileBytes() = default;
    FileBytes(FileBytes&& o) noexcept { *this = std::move(o); }
    FileBytes& operator=(FileBytes&& o) noexcept;
    FileBytes(const FileBytes&) = delete;
    FileBytes& operator=(const FileBytes&) = delete;
    ~FileBytes();

    const uint8_t* data() const { return data_; }
    size_t size() const { return size_; }
    const std::string& origin() const { return origin_; }
    // Gives back the resident pages wholly inside [p, p + n) (a tensor read once and converted):
    // a later read of them faults them in again from the file, so the bytes never change, but a
    // model loaded tensor by tensor never holds the whole file in its resident set. A no-op for
    // owned buffers and ranges outside the map.
    void drop_pages(const uint8_t* p, size_t n) const;

private:
    void release();
    const uint8_t* data_ = nullptr;
    size_t size_ = 0;
    bool mapped_ = false;
    std::vector<uint8_t> owned_;
    std::string origin_;
};

}  // namespace gl::io
