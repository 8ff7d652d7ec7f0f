// parallel_for under stress: back-to-back regions of changing sizes (so a worker still leaving one
// region meets the next being set up) must each cover every index exactly once, with valid ranges;
// an exception in a chunk reaches the caller; nested calls run inline.
#include <doctest/doctest.h>

#include <atomic>
#include <stdexcept>
#include <vector>

#include "ggml-lite/core/error.h"
#include "ggml-lite/core/parallel.h"

using namespace gl;

TEST_CASE("parallel_for: back-to-back regions of changing sizes cover each index exactly once") {
    const int saved = cpu_threads();
    set_cpu_threads(4);  // more threads than this machine may have cores: more interleavings
    std::vector<std::atomic<int>> hits(4096);
    int64_t bad_ranges = 0, wrong_counts = 0;
    for (int round = 0; round < 20000; round++) {
        const int64_t n = 1 + (round * 7919) % 4096, grain = 1 + (round % 5) * 13;
        for (int64_t i = 0; i < n; i++) hits[size_t(i)].store(0, std::memory_order_relaxed);
        std::atomic<int64_t> bad{0};
        parallel_for(n, grain, [&](int64_t lo, int64_t hi) {
            if (lo < 0 || hi > n || lo >= hi) {
                bad++;
                return;
            }
            for (int64_t i = lo; i < hi; i++) hits[size_t(i)].fetch_add(1, std::memory_order_relaxed);
        });
        bad_ranges += bad.load();
        for (int64_t i = 0; i < n; i++) wrong_counts += hits[size_t(i)].load() != 1;
    }
    set_cpu_threads(saved);
    CHECK(bad_ranges == 0);
    CHECK(wrong_counts == 0);
}

TEST_CASE("parallel_for: an exception in a chunk reaches the caller, nested regions run inline") {
    const int saved = cpu_threads();
    set_cpu_threads(4);
    CHECK_THROWS_AS(parallel_for(1000, 1, [](int64_t lo, int64_t hi) {
                        if (lo <= 500 && 500 < hi) gl::fail("chunk failed");
                    }),
                    gl::Error);
    std::atomic<int64_t> total{0};
    parallel_for(64, 1, [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; i++) parallel_for(100, 1, [&](int64_t a, int64_t b) { total += b - a; });
    });
    CHECK(total == 6400);
    // the pool still works after the exception
    std::atomic<int64_t> sum{0};
    parallel_for(1000, 10, [&](int64_t lo, int64_t hi) { sum += hi - lo; });
    CHECK(sum == 1000);
    set_cpu_threads(saved);
}
