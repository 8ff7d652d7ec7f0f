// Where a merged checkpoint goes, and the rules that keep the base safe (gl-merge, pipelines/merge_file.h):
// - the output is never part of the base (compared as ggml-lite/io/paths.h compares places: real
//   paths, device and inode, so symlinks, hard links, bind mounts and other spellings count): not
//   the base file or folder, not a file or folder inside the base or reached through one of its
//   symlinks (a shared unet/ folder, a blob of the Hugging Face cache), not a folder that holds
//   any of those;
// - an output that exists is refused unless `overwrite` is set, for single files and folders alike;
// - a folder base is copied by walking it: symlinked sub-folders and files (shared model folders,
//   the Hugging Face cache, whose files all link into blobs/) are followed and copied as real
//   folders and files, so nothing written afterwards can reach the base through a link. The
//   merged weight files are written into the copy, never copied first;
// - the free space is checked before the first byte is written.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace lora {

// What copying a base folder involves: every folder and file to create in the copy, by path
// relative to the base folder. Weight files of the folders in `merged` (relative paths of the
// weight files the merge writes) are left out: the merged ones replace them, and other variants
// (.fp16.safetensors, .bin) would hold unmerged weights. Hidden folders (.git, .cache) are not
// copied. Refuses FIFOs, sockets and devices, dangling symlinks and symlink loops by name.
struct FolderCopy {
    std::vector<std::string> dirs;                           // relative, parents first
    std::vector<std::pair<std::string, std::string>> files;  // source path, relative destination
    uint64_t bytes = 0;                                      // total size of the files
    std::vector<std::string> parts;  // every folder and file of the base, copied or not, resolved
};
FolderCopy plan_folder_copy(const std::string& base_dir, const std::vector<std::string>& merged);

// Refuses `out` by the rules above. base_path: the single file or the folder that was opened;
// parts: what the base consists of, resolved (a folder's FolderCopy::parts, or the file itself).
void check_merge_output(const std::string& base_path, const std::vector<std::string>& parts, bool base_is_folder,
                        const std::string& out, bool overwrite);

// Creates the folder `to` (which must not exist) and copies plan into it.
void copy_folder(const FolderCopy& plan, const std::string& to);

// Renames the finished folder `partial` to `out`; with `replace`, an existing `out` is swapped out
// atomically and then removed.
void publish_folder(const std::string& partial, const std::string& out, bool replace);

}  // namespace lora
