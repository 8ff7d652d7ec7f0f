// NumPy .npz archives (what np.savez / np.savez_compressed write: a zip of .npy members), read
// for kohya's latent cache files (latent_cache.h reuses them). Files are untrusted: the zip's end
// record and central directory, each member's local header, its method (stored or deflated, zlib
// inflating a raw stream), its sizes and CRC-32, and the .npy header (magic, version 1..3, the
// dict's 'descr', 'fortran_order' and 'shape', the data size against shape and type) are all
// checked, and every failure is a gl::Error naming the file and what is wrong. Sizes are checked
// for overflow; zip64 archives, encrypted members and multi-disk archives are refused. numpy's own
// zip64 local headers (force_zip64: placeholder sizes in the local header) are read, the central
// directory's sizes being the ones used.
#pragma once
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace data {

// One .npy array, little-endian, C order. Numbers: f2, f4, f8, i1..i8, u1..u8, b1.
struct NpyArray {
    char kind = 0;  // 'f', 'i', 'u' or 'b' (numpy's dtype.kind)
    int itemsize = 0;
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;  // count() * itemsize
    size_t count() const;
    // The values converted to float / int64 (floats truncated toward zero, as numpy's astype).
    std::vector<float> to_float() const;
    std::vector<int64_t> to_int() const;
};

// Parses one .npy blob; `name` is used in errors.
NpyArray parse_npy(const uint8_t* p, size_t n, const std::string& name);

class NpzFile {
public:
    // Reads the archive's directory (the file is read whole: at most max_bytes).
    explicit NpzFile(const std::filesystem::path& path, uint64_t max_bytes = uint64_t(1) << 30);
    // Array names, without the ".npy" numpy adds to each member.
    std::vector<std::string> names() const;
    bool has(const std::string& name) const { return members_.count(name) != 0; }
    // The array `name`: its member inflated (when deflated), its CRC-32 checked, its .npy parsed.
    NpyArray array(const std::string& name) const;

private:
    struct Member {
        uint16_t method = 0;
        uint32_t crc = 0;
        uint64_t compressed = 0, size = 0, local = 0;
    };
    std::string path_;
    std::string bytes_;
    std::map<std::string, Member> members_;
};

}  // namespace data
