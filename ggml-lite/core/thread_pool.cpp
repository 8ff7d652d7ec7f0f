#include "ggml-lite/core/thread_pool.h"

#include "ggml-lite/core/error.h"

namespace gl {

ThreadPool::ThreadPool(int threads) {
    GL_CHECK(threads >= 1, "worker threads must be >= 1, got ", threads);
    for (int t = 0; t < threads; t++) threads_.emplace_back([this] { work(); });
}

ThreadPool::~ThreadPool() {
    {
        std::lock_guard<std::mutex> lock(mu_);
        stop_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : threads_) t.join();
}

void ThreadPool::post(const std::function<void()>& fn, int copies) {
    if (copies <= 0) return;
    {
        std::lock_guard<std::mutex> lock(mu_);
        for (int i = 0; i < copies; i++) queue_.push_back(fn);
    }
    if (copies == 1)
        cv_.notify_one();
    else
        cv_.notify_all();
}

void ThreadPool::work() {
    for (;;) {
        std::function<void()> fn;
        {
            std::unique_lock<std::mutex> lock(mu_);
            cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
            if (stop_) return;
            fn = std::move(queue_.front());
            queue_.pop_front();
        }
        fn();  // a packaged task's exception goes to its future
    }
}

}  // namespace gl
