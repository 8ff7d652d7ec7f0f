// parallel_for under stress: back-to-back regions of changing sizes (so a worker still leaving one
// region meets the next being set up) must each cover every index exactly once, with valid ranges;
// an exception in a chunk reaches the caller; nested calls run inline; regions from several threads
// at once, and from tasks of another pool, each cover their own indices. The pool under it
// (gl::ThreadPool, the one the dataset pipeline runs on too): order, results and errors.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <stdexcept>
#include <thread>
#include <vector>

#include "ggml-lite/core/error.h"
#include "ggml-lite/core/parallel.h"
#include "ggml-lite/core/thread_pool.h"

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

TEST_CASE("parallel_for: regions from several threads at once, and from another pool's tasks") {
    const int saved = cpu_threads();
    set_cpu_threads(4);
    // Each caller's sums are its own: a chunk of one region never runs another region's job.
    auto region_sums = [](int64_t salt) {
        int64_t wrong = 0;
        for (int round = 0; round < 500; round++) {
            const int64_t n = 64 + (round * 131 + salt) % 2048;
            std::atomic<int64_t> sum{0};
            parallel_for(n, 8, [&](int64_t lo, int64_t hi) {
                for (int64_t i = lo; i < hi; i++) sum += i + salt;
            });
            wrong += sum != n * (n - 1) / 2 + n * salt;
        }
        return wrong;
    };
    std::vector<std::future<int64_t>> callers;
    for (int64_t t = 0; t < 3; t++) callers.push_back(std::async(std::launch::async, region_sums, t * 1000));
    ThreadPool other(2);  // a dataset-style pool whose tasks run kernels
    std::future<int64_t> from_task = other.submit([&] { return region_sums(7); });
    int64_t wrong = region_sums(5) + from_task.get();
    for (auto& c : callers) wrong += c.get();
    set_cpu_threads(saved);
    CHECK(wrong == 0);
}

TEST_CASE("thread pool: one thread runs tasks in submission order, futures carry results and errors") {
    CHECK_THROWS_WITH_AS(ThreadPool(0), doctest::Contains("worker threads must be >= 1, got 0"), gl::Error);
    std::vector<int> order;
    std::future<int> last, failed;  // outlive the pool
    {
        ThreadPool one(1);
        CHECK(one.threads() == 1);
        std::promise<void> open;
        std::shared_future<void> gate = open.get_future().share();
        one.submit([gate] { gate.wait(); });  // holds the thread while the rest is queued
        for (int i = 0; i < 50; i++) last = one.submit([&order, i] { order.push_back(i); return i; });
        failed = one.submit([]() -> int { throw std::runtime_error("task failed"); });
        open.set_value();
        CHECK(last.get() == 49);
        CHECK_THROWS_WITH(failed.get(), "task failed");
    }
    std::vector<int> expected(50);
    for (int i = 0; i < 50; i++) expected[size_t(i)] = i;
    CHECK(order == expected);
}
