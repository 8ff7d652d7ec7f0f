// How the library touches the file system, for files it did not make itself:
// - opening for reading checks the file's type first and never blocks: a FIFO, socket, device or
//   folder given where a checkpoint, config or vocabulary belongs is refused naming the path and
//   its type (a plain open() of a FIFO would wait for a writer forever);
// - writes report a full disk as such ("no space left on the device ..., N bytes needed, M free");
// - atomic writes go through temporary names that carry the writer's host and process id
//   ("<path>.tmp-<host>-<pid>-XXXXXX" files, "<path>.partial-<host>-<pid>" folders), so that a
//   later run on the same host can tell the leftovers of a killed writer from those of one still
//   running, and remove them (those of other hosts sharing the folder are left alone).
// All functions throw gl::Error naming the path.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace gl::io {

// Opens a regular file read-only (O_CLOEXEC; symlinks are followed) and returns its descriptor,
// which the caller closes; *size receives its size.
int open_regular(const std::string& path, uint64_t* size);

// The whole content of a small regular file (configs, vocabularies), refused beyond max_bytes.
std::string read_small_file(const std::string& path, uint64_t max_bytes = uint64_t(256) << 20);

// Writes n bytes to fd, retrying short writes. `path` names the file in errors; `remaining` is
// what the file still needs from here on (this write included), for the full-disk message.
void write_fully(int fd, const void* data, size_t n, const std::string& path, uint64_t remaining);

// Copies the regular file `from` to `to`, which must not exist yet (created 0644, fsynced).
void copy_file_contents(const std::string& from, const std::string& to);

// Why `path` cannot be created, from the errno of the failed call, in the words a user looks for:
// "PATH: read-only file system", "PATH: permission denied", "PATH: no space left on the device".
std::string cannot_create(const std::string& path, int err);
// Refuses up front, with cannot_create's message for `path`, when the folder `dir` that is to hold
// it takes no new files (a read-only file system, no write permission).
void check_can_create(const std::string& dir, const std::string& path);

// Bytes an unprivileged writer may still put on the file system holding `dir` (UINT64_MAX when
// unknown).
uint64_t free_bytes(const std::string& dir);
// Refuses up front when `need` bytes will not fit on the file system holding `dir`.
void check_free_space(const std::string& dir, uint64_t need, const std::string& what);

// The mkstemp / mkdtemp pattern of an atomic write to path, and the name of a folder built
// beside path, for process `pid` of this host (0: this process).
std::string temp_file_pattern(const std::string& path, long pid = 0);
std::string partial_dir_name(const std::string& path, long pid = 0);
// Removes what atomic writes to `path` left behind when their process was killed: files and
// folders (never symlinks) named as above with this host and a process id that no longer exists.
// Leftovers of running processes stay. Returns the paths removed.
std::vector<std::string> remove_stale_temps(const std::string& path);
// The same for every path in the folder `dir` (not below it): the temporaries of any writer.
std::vector<std::string> remove_stale_temps_in(const std::string& dir);
// Whether a process of this id runs on this host (the rule for every pid-named temporary).
bool process_alive(long pid);

// Test seam: when set, called before each write() write_fully makes, with its byte count; a
// non-zero result makes that write fail with that errno (ENOSPC, EIO), as a full or failing disk
// would. nullptr (the default) turns it off.
using WriteFault = int (*)(size_t bytes);
void set_write_fault(WriteFault f);

}  // namespace gl::io
