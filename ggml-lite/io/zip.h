// A minimal reader for the zip archives torch.save writes: the central directory (zip64
// included, since full SD checkpoints exceed 4 GB) is read and checked, and each entry is a
// byte range of the mapped file. Only stored (uncompressed, unencrypted) entries are
// accepted: torch never compresses, and reading in place is the point.
#pragma once
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace gl::io {

struct ZipEntry {
    std::string name;
    uint64_t offset = 0;  // of the entry's bytes within the archive
    uint64_t size = 0;
    uint32_t crc32 = 0;
};

class ZipIndex {
public:
    // Parses the archive in data[0, size); origin names it in errors. Throws gl::Error on any
    // inconsistency (truncation, entries outside the file, compressed or encrypted entries).
    ZipIndex(const uint8_t* data, size_t size, const std::string& origin);

    const std::vector<ZipEntry>& entries() const { return entries_; }
    const ZipEntry* find(const std::string& name) const;
    // Throws naming the entry when its bytes do not match the CRC-32 the directory records.
    void check_crc(const ZipEntry& e) const;

private:
    const uint8_t* data_;
    size_t size_;
    std::string origin_;
    std::vector<ZipEntry> entries_;
    std::unordered_map<std::string, size_t> index_;
};

uint32_t crc32(const uint8_t* p, size_t n, uint32_t crc = 0);

}  // namespace gl::io
