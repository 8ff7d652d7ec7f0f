// Where a path really is, for the rules that keep a program's outputs out of its inputs (gl-merge's
// output against the base it reads, sdtrain's output folder against the model and the dataset):
// two spellings name the same place when their real paths (absolute, every symlink of the existing
// part resolved) agree, or when an existing folder along one is the other's object by device and
// inode (a bind mount, a second mount of the same file system).
#pragma once
#include <optional>
#include <string>

namespace gl::io {

// p absolute and free of ".", ".." and symlinks in the part that exists; the rest appended as
// spelled (an output that does not exist yet still has a place).
std::string resolved_path(const std::string& p);

// When a is b or lies below it: a's path relative to b ("" for b itself); nullopt otherwise.
std::optional<std::string> path_below(const std::string& a, const std::string& b);
inline bool path_within(const std::string& a, const std::string& b) { return path_below(a, b).has_value(); }

// a and b are the same existing object (device and inode, symlinks followed).
bool same_object(const std::string& a, const std::string& b);

}  // namespace gl::io
