// The host memory this process may still allocate, for plans that run on the CPU backend: they are
// refused before allocation when larger, as device plans are against the GPU's free memory.
//
// It is the smaller of the machine's and the process's cgroups' (a container's, a systemd slice's):
//   machine:  /proc/meminfo MemAvailable (the kernel's estimate of what can be allocated without
//             swapping: free memory plus the page cache and slabs it can reclaim);
//   cgroup:   at every level from the process's own cgroup up to the hierarchy's root, the limit
//             minus what the group uses that cannot be reclaimed (its usage less its inactive
//             file cache, the "working set" container runtimes evict by):
//             v2  memory.max ("max": no limit), memory.current, memory.stat inactive_file;
//             v1  memory.limit_in_bytes (a value near 2^63: no limit), memory.usage_in_bytes,
//                 memory.stat total_inactive_file.
// The cgroup files are found from /proc/self/cgroup under /sys/fs/cgroup (v2, also at
// /sys/fs/cgroup/unified on hybrid systems) and /sys/fs/cgroup/memory (v1); a level whose files
// are missing or unreadable sets no limit.
#pragma once
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace gl {

// The bytes this process may still allocate on the host. Throws gl::Error when /proc/meminfo cannot
// be read or holds no MemAvailable line (Linux before 3.14).
size_t host_available_bytes();

// One cgroup level's memory files, as text (nullopt: the file is absent).
struct CgroupMemoryFiles {
    std::optional<std::string> limit;  // memory.max / memory.limit_in_bytes
    std::optional<std::string> usage;  // memory.current / memory.usage_in_bytes
    std::optional<std::string> stat;   // memory.stat
};

// What host_available_bytes() computes from the files' texts (exposed for tests): meminfo is
// /proc/meminfo's text, levels the cgroup levels from the process's own to the root.
size_t host_available_bytes(std::string_view meminfo, const std::vector<CgroupMemoryFiles>& levels);

}  // namespace gl
