// SHA-256 (FIPS 180-4), for content-addressed cache keys. Incremental; no dependency.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace data {

class Sha256 {
public:
    Sha256();
    Sha256& update(const void* data, size_t n);
    Sha256& update(const std::string& s) { return update(s.data(), s.size()); }
    std::array<uint8_t, 32> digest();  // finishes; the object is spent afterwards
    static std::string hex(const std::array<uint8_t, 32>& d);

private:
    void block(const uint8_t* p);
    uint32_t h_[8];
    uint8_t buf_[64];
    size_t used_ = 0;
    uint64_t total_ = 0;
};

}  // namespace data
