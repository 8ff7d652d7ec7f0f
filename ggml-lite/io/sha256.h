// SHA-256 (FIPS 180-4), for the model hashes UIs key files by (A1111's sha256 of a file, kohya's
// sshs_model_hash of a safetensors data area). Incremental: update() any number of times.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace gl::io {

class Sha256 {
public:
    Sha256();
    void update(const void* data, size_t n);
    std::array<uint8_t, 32> digest();  // finishes; the object is not reused after
    std::string hex();                 // digest() as 64 lowercase hex digits

private:
    void block(const uint8_t* p);
    std::array<uint32_t, 8> h_;
    std::array<uint8_t, 64> buf_{};
    size_t used_ = 0;
    uint64_t total_ = 0;
};

// The digest of one buffer as 64 lowercase hex digits.
std::string sha256_hex(const void* data, size_t n);
inline std::string sha256_hex(const std::string& s) { return sha256_hex(s.data(), s.size()); }

}  // namespace gl::io
