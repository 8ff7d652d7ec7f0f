// gl::host_available_bytes (core/host_memory.h): /proc/meminfo's MemAvailable, lowered by every
// cgroup level's limit less its working set.
#include <doctest/doctest.h>

#include <fstream>
#include <string>

#include "ggml-lite/core/error.h"
#include "ggml-lite/core/host_memory.h"

using gl::CgroupMemoryFiles;

namespace {

const std::string kMeminfo = "MemTotal:       24683584 kB\nMemFree:         1000000 kB\n"
                             "MemAvailable:   22257240 kB\nBuffers:          123 kB\n";
constexpr size_t kMachine = size_t(22257240) * 1024;

}  // namespace

TEST_CASE("host memory: MemAvailable, whole key only") {
    CHECK(gl::host_available_bytes(kMeminfo, {}) == kMachine);
    // A key that only starts like MemAvailable is another field.
    CHECK(gl::host_available_bytes("MemAvailableX: 5 kB\nMemAvailable: 7 kB\n", {}) == 7 * 1024);
    CHECK_THROWS_AS(gl::host_available_bytes("MemTotal: 100 kB\n", {}), gl::Error);
    CHECK_THROWS_AS(gl::host_available_bytes("MemAvailable: lots\n", {}), gl::Error);
}

TEST_CASE("host memory: a cgroup limit below the machine's lowers it by its working set") {
    // v2: 4 GiB limit, 3 GiB used of which 1 GiB inactive file cache (reclaimable): 2 GiB left.
    const CgroupMemoryFiles v2{"4294967296\n", "3221225472\n", "anon 100\ninactive_file 1073741824\nactive_file 5\n"};
    CHECK(gl::host_available_bytes(kMeminfo, {v2}) == size_t(2) << 30);
    // Without memory.stat the whole usage counts.
    CHECK(gl::host_available_bytes(kMeminfo, {{"4294967296\n", "3221225472\n", std::nullopt}}) == size_t(1) << 30);
    // v1: total_inactive_file (the group with its children) wins over the group's own count.
    const CgroupMemoryFiles v1{"4294967296\n", "3221225472\n",
                               "inactive_file 0\ntotal_inactive_file 2147483648\n"};
    CHECK(gl::host_available_bytes(kMeminfo, {v1}) == size_t(3) << 30);
    // Usage over the limit: nothing is left.
    CHECK(gl::host_available_bytes(kMeminfo, {{"1000\n", "5000\n", std::nullopt}}) == 0);
    // The tightest level wins, wherever it is in the hierarchy.
    CHECK(gl::host_available_bytes(kMeminfo, {{"max\n", "10\n", std::nullopt}, v2, {"8589934592", "0", std::nullopt}}) ==
          size_t(2) << 30);
}

TEST_CASE("host memory: no limit, missing files") {
    // "max" (v2), v1's page-rounded 2^63 - 1, a limit above the machine's memory, files absent.
    for (const CgroupMemoryFiles& l : {CgroupMemoryFiles{"max\n", "4096\n", std::nullopt},
                                       CgroupMemoryFiles{"9223372036854771712\n", "10166530048\n", std::nullopt},
                                       CgroupMemoryFiles{"1099511627776\n", "1048576\n", std::nullopt},
                                       CgroupMemoryFiles{std::nullopt, "4096\n", std::nullopt},
                                       CgroupMemoryFiles{"4096\n", std::nullopt, std::nullopt},
                                       CgroupMemoryFiles{"garbage", "4096", std::nullopt}})
        CHECK(gl::host_available_bytes(kMeminfo, {l}) == kMachine);
}

TEST_CASE("host memory: this machine") {
    std::ifstream f("/proc/meminfo");
    std::string line;
    size_t total_kib = 0;
    while (std::getline(f, line))
        if (line.rfind("MemTotal:", 0) == 0) total_kib = std::stoull(line.substr(9));
    REQUIRE(total_kib > 0);
    const size_t avail = gl::host_available_bytes();
    CHECK(avail > 0);
    CHECK(avail <= total_kib * 1024);
}
