#include "ggml-lite/core/parallel.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace gl {
namespace {

thread_local bool t_in_worker = false;

class Pool {
public:
    explicit Pool(int n) {
        for (int i = 1; i < n; i++) workers_.emplace_back([this] { loop(); });
    }
    ~Pool() {
        {
            std::lock_guard<std::mutex> lk(mu_);
            stop_ = true;
        }
        cv_.notify_all();
        for (auto& t : workers_) t.join();
    }
    int size() const { return int(workers_.size()) + 1; }

    void run(int64_t chunks, const std::function<void(int64_t)>& job) {
        std::unique_lock<std::mutex> run_lock(run_mu_);  // one parallel region at a time
        {
            std::lock_guard<std::mutex> lk(mu_);
            job_ = &job;
            next_ = 0;
            chunks_ = chunks;
            pending_ = chunks;
            error_ = nullptr;
            generation_++;
        }
        cv_.notify_all();
        work();
        std::unique_lock<std::mutex> lk(mu_);
        done_cv_.wait(lk, [this] { return pending_ == 0; });
        job_ = nullptr;
        if (error_) std::rethrow_exception(error_);
    }

private:
    void work() {
        t_in_worker = true;
        for (;;) {
            int64_t c = next_.fetch_add(1);
            if (c >= chunks_) break;
            try {
                (*job_)(c);
            } catch (...) {
                std::lock_guard<std::mutex> lk(mu_);
                if (!error_) error_ = std::current_exception();
            }
            if (pending_.fetch_sub(1) == 1) {
                std::lock_guard<std::mutex> lk(mu_);
                done_cv_.notify_all();
            }
        }
        t_in_worker = false;
    }
    void loop() {
        uint64_t seen = 0;
        for (;;) {
            {
                std::unique_lock<std::mutex> lk(mu_);
                cv_.wait(lk, [&] { return stop_ || (generation_ != seen && job_); });
                if (stop_) return;
                seen = generation_;
            }
            work();
        }
    }

    std::vector<std::thread> workers_;
    std::mutex mu_, run_mu_;
    std::condition_variable cv_, done_cv_;
    const std::function<void(int64_t)>* job_ = nullptr;
    std::atomic<int64_t> next_{0}, pending_{0};
    int64_t chunks_ = 0;
    uint64_t generation_ = 0;
    bool stop_ = false;
    std::exception_ptr error_;
};

int g_threads = 0;
std::mutex g_pool_mu;
Pool* g_pool = nullptr;

Pool& pool() {
    std::lock_guard<std::mutex> lk(g_pool_mu);
    if (!g_pool) g_pool = new Pool(cpu_threads());  // lives for the process
    return *g_pool;
}

}  // namespace

int cpu_threads() {
    if (g_threads > 0) return g_threads;
    if (const char* e = std::getenv("GL_THREADS")) {
        int n = std::atoi(e);
        if (n > 0) return g_threads = n;
    }
    unsigned hw = std::thread::hardware_concurrency();
    return g_threads = int(hw ? hw : 1);
}

void set_cpu_threads(int n) {
    std::lock_guard<std::mutex> lk(g_pool_mu);
    g_threads = n > 0 ? n : 1;
    delete g_pool;
    g_pool = nullptr;
}

void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
    if (n <= 0) return;
    grain = std::max<int64_t>(grain, 1);
    int threads = cpu_threads();
    if (t_in_worker || threads == 1 || n <= grain) {
        fn(0, n);
        return;
    }
    int64_t chunks = std::min<int64_t>((n + grain - 1) / grain, int64_t(threads) * 4);
    int64_t per = (n + chunks - 1) / chunks;
    chunks = (n + per - 1) / per;
    pool().run(chunks, [&](int64_t c) { fn(c * per, std::min(n, (c + 1) * per)); });
}

}  // namespace gl
