// The dataset pipeline's worker threads: a pool (the runtime's gl::ThreadPool, of the size the
// pipeline asks for) runs the loader's batch preparation and latent caching's reading, hashing,
// decoding and cache writes. Prefetch hands out the results of make(0), make(1), ... in order while
// the pool computes a bounded window ahead, so what a consumer sees never depends on the thread
// count or timing (make must depend on its index only).
#pragma once
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <deque>
#include <exception>
#include <functional>
#include <future>
#include <optional>

#include "ggml-lite/core/thread_pool.h"

namespace data {

using Workers = gl::ThreadPool;

// The default thread count of the pipeline's pools: the hardware's (at least 1).
int default_worker_threads();

template <class T>
class Prefetch {
public:
    // At most `window` results are computed or waiting at any time (at least 1).
    Prefetch(Workers& pool, size_t n, size_t window, std::function<T(size_t)> make)
        : pool_(pool), n_(n), window_(std::max<size_t>(window, 1)), make_(std::move(make)) {
        while (scheduled_ < n_ && inflight_.size() < window_) schedule();
    }
    // Work not started yet is skipped; work under way is waited for (it uses make's captures).
    ~Prefetch() {
        cancelled_ = true;
        for (auto& f : inflight_) f.wait();
    }
    Prefetch(const Prefetch&) = delete;
    Prefetch& operator=(const Prefetch&) = delete;

    // The next result in order; nullopt after the last. Rethrows make's exception, and keeps
    // rethrowing it on later calls.
    std::optional<T> next() {
        if (error_) std::rethrow_exception(error_);
        if (inflight_.empty()) return std::nullopt;
        std::future<std::optional<T>> f = std::move(inflight_.front());
        inflight_.pop_front();
        const auto t0 = std::chrono::steady_clock::now();
        f.wait();
        wait_s_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (scheduled_ < n_) schedule();  // its place in the window is free now
        try {
            return f.get();
        } catch (...) {
            error_ = std::current_exception();
            throw;
        }
    }
    size_t size() const { return n_; }
    // Seconds next() waited for a result that was not ready yet.
    double wait_seconds() const { return wait_s_; }

private:
    void schedule() {
        const size_t i = scheduled_++;
        inflight_.push_back(pool_.submit([this, i]() -> std::optional<T> {
            if (cancelled_) return std::nullopt;
            return make_(i);
        }));
    }
    Workers& pool_;
    size_t n_, window_, scheduled_ = 0;
    std::function<T(size_t)> make_;
    std::deque<std::future<std::optional<T>>> inflight_;
    std::atomic<bool> cancelled_{false};
    std::exception_ptr error_;
    double wait_s_ = 0;
};

}  // namespace data
