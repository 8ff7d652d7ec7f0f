#include "data/workers.h"

#include "ggml-lite/core/error.h"

namespace data {

Workers::Workers(int threads) {
    GL_CHECK(threads >= 1, "worker threads must be >= 1, got ", threads);
    for (int t = 0; t < threads; t++) threads_.emplace_back([this] { work(); });
}

Workers::~Workers() {
    {
        std::lock_guard<std::mutex> lock(mu_);
        stop_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : threads_) t.join();
}

void Workers::enqueue(std::function<void()> fn) {
    {
        std::lock_guard<std::mutex> lock(mu_);
        queue_.push_back(std::move(fn));
    }
    cv_.notify_one();
}

void Workers::work() {
    for (;;) {
        std::function<void()> fn;
        {
            std::unique_lock<std::mutex> lock(mu_);
            cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
            if (stop_) return;
            fn = std::move(queue_.front());
            queue_.pop_front();
        }
        fn();  // a packaged task: its exception goes to its future
    }
}

int default_worker_threads() { return int(std::max(1u, std::thread::hardware_concurrency())); }

}  // namespace data
