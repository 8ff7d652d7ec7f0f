// Writing a whole file so that readers see either the old file or the complete new one: the bytes
// go to `path.tmp-XXXXXX` in the same folder, are fsynced, and the temporary file is renamed onto
// `path` (then the folder is fsynced, best effort).
#pragma once
#include <cstddef>
#include <string>

namespace gl::io {

// Throws gl::Error naming the path when any step fails; the temporary file is removed then.
void write_file_atomic(const std::string& path, const void* data, size_t size);

}  // namespace gl::io
