// The one worker pool of the project: a fixed set of threads taking tasks from one queue in
// submission order. parallel_for (parallel.h) runs the CPU kernels' regions on a process-wide one;
// the dataset pipeline runs its loader and cache work on pools of its own size (data/workers.h).
#pragma once
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace gl {

class ThreadPool {
public:
    explicit ThreadPool(int threads);  // throws gl::Error unless threads >= 1
    // Joins the threads once their current task is done; tasks still queued are dropped (the
    // futures of submitted ones report std::future_errc::broken_promise).
    ~ThreadPool();
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;
    int threads() const { return int(threads_.size()); }

    // Runs f() on a worker, in submission order; its result or exception comes through the future.
    template <class F>
    auto submit(F f) -> std::future<decltype(f())> {
        auto task = std::make_shared<std::packaged_task<decltype(f())()>>(std::move(f));
        auto result = task->get_future();
        post([task] { (*task)(); }, 1);
        return result;
    }
    // Queues `copies` runs of fn, which must not throw; nothing reports back.
    void post(const std::function<void()>& fn, int copies);

private:
    void work();
    std::mutex mu_;
    std::condition_variable cv_;
    std::deque<std::function<void()>> queue_;
    bool stop_ = false;
    std::vector<std::thread> threads_;
};

}  // namespace gl
