// safetensors files: read through a read-only memory map (tensors are used in place), and
// written atomically (temporary file, fsync, rename).
//
// Format: 8-byte little-endian header length N, N bytes of JSON
//   {"name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...,
//    "__metadata__": {"key": "value", ...}}
// then the data area; offsets are relative to its start. Everything in the header is checked
// before any of it is used: length inside the file, valid JSON without duplicate names, known
// dtypes, non-negative shapes, offsets inside the data area, byte length = numel x dtype size,
// no two tensors overlapping, metadata a string -> string map.
#pragma once
#include <map>
#include <string>
#include <unordered_map>
#include <vector>

#include "ggml-lite/io/convert.h"
#include "ggml-lite/io/mapped_file.h"
#include "ggml-lite/io/tensor_source.h"

namespace gl::io {

class SafetensorsFile : public TensorSource {
public:
    struct Entry {
        std::string name;
        StoredType stored = StoredType::f32;
        std::vector<int64_t> shape;
        int64_t begin = 0, end = 0;  // byte offsets in the data area
    };

    // Maps and validates the file; throws gl::Error naming the file (and tensor) on any defect.
    explicit SafetensorsFile(const std::string& path);
    // The same over bytes already in memory (tests, fuzzing); origin names them in errors.
    SafetensorsFile(std::vector<uint8_t> bytes, const std::string& origin);

    std::string origin() const override { return bytes_.origin(); }
    std::vector<TensorInfo> list() const override;  // sorted by name
    bool has(const std::string& name) const override { return index_.count(name) != 0; }
    TensorInfo info(const std::string& name) const override;
    void read(const std::string& name, void* dst, DType to) const override;

    const Entry& entry(const std::string& name) const;
    // The tensor's bytes in the file, zero-copy (little-endian, possibly unaligned).
    const void* raw(const std::string& name) const;
    size_t nbytes(const std::string& name) const;
    const std::map<std::string, std::string>& metadata() const { return metadata_; }

private:
    void parse();
    FileBytes bytes_;
    const uint8_t* data_area_ = nullptr;
    std::vector<Entry> entries_;  // sorted by name
    std::unordered_map<std::string, size_t> index_;
    std::map<std::string, std::string> metadata_;
};

struct TensorToWrite {
    std::string name;
    DType dtype = DType::f32;
    std::vector<int64_t> shape;
    const void* data = nullptr;  // numel x dtype_size bytes, contiguous
};

// Writes a safetensors file: header keys sorted, header padded with spaces to a multiple of 8
// bytes, tensor data packed without gaps (wider dtypes first, so every tensor stays aligned to
// its element size). Goes through `path.tmp-<host>-<pid>-XXXXXX` + fsync + rename, so `path` is
// either the old file or the complete new one; temporaries a killed writer of `path` left are
// removed first (io/files.h). Throws gl::Error naming the path (and tensor); a full disk is named
// as such.
void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace gl::io
