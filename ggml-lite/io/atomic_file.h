// Writing a whole file so that readers see either the old file or the complete new one: the bytes
// go to a temporary file beside `path` named by io/files.h's temp_file_pattern (this host and
// process, so that a later run can remove what a killed writer left), are fsynced, and the
// temporary file is renamed onto `path` (then the folder is fsynced, best effort). Leftovers of
// killed writers of `path` are removed first; a full disk is reported as such (io::write_fully).
#pragma once
#include <cstddef>
#include <span>
#include <string>
#include <string_view>

namespace gl::io {

// One buffer of a file written from several (a header, then tensor data): no copy into one.
struct ByteRange {
    const void* data;
    size_t size;
};

// Throws gl::Error naming the path when any step fails; the temporary file is removed then.
void write_file_atomic(const std::string& path, std::span<const ByteRange> pieces);
void write_file_atomic(const std::string& path, const void* data, size_t size);
void write_file_atomic(const std::string& path, std::string_view text);

}  // namespace gl::io
