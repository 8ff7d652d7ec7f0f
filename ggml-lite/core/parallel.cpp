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

// One parallel region at a time. Its state lives in a Run on the caller's stack; a worker joins a
// region only under the mutex (so it sees the whole Run), and the caller returns only once every
// worker that joined has left, so no worker ever touches a finished region or a half-set-up one.
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

    void run(int64_t chunks, const std::function<void(int64_t)>& job) {
        std::unique_lock<std::mutex> run_lock(run_mu_);
        Run r(&job, chunks);
        {
            std::lock_guard<std::mutex> lk(mu_);
            run_ = &r;
            generation_++;
        }
        cv_.notify_all();
        work(r);  // the caller takes chunks too
        std::unique_lock<std::mutex> lk(mu_);
        run_ = nullptr;  // no worker joins from here on
        done_cv_.wait(lk, [this] { return active_ == 0; });
        if (r.error) std::rethrow_exception(r.error);
    }

private:
    struct Run {
        Run(const std::function<void(int64_t)>* j, int64_t n) : job(j), chunks(n) {}
        const std::function<void(int64_t)>* job;
        int64_t chunks;
        std::atomic<int64_t> next{0};
        std::exception_ptr error;  // the first exception of a chunk (guarded by mu_)
    };

    void work(Run& r) {
        t_in_worker = true;
        for (int64_t c; (c = r.next.fetch_add(1)) < r.chunks;) {
            try {
                (*r.job)(c);
            } catch (...) {
                std::lock_guard<std::mutex> lk(mu_);
                if (!r.error) r.error = std::current_exception();
            }
        }
        t_in_worker = false;
    }
    void loop() {
        uint64_t seen = 0;
        for (;;) {
            Run* r = nullptr;
            {
                std::unique_lock<std::mutex> lk(mu_);
                cv_.wait(lk, [&] { return stop_ || (generation_ != seen && run_); });
                if (stop_) return;
                seen = generation_;
                r = run_;
                active_++;
            }
            work(*r);
            std::lock_guard<std::mutex> lk(mu_);
            if (--active_ == 0) done_cv_.notify_all();
        }
    }

    std::vector<std::thread> workers_;
    std::mutex mu_, run_mu_;
    std::condition_variable cv_, done_cv_;
    Run* run_ = nullptr;  // the region workers may join (guarded by mu_)
    int active_ = 0;      // workers inside run_ (guarded by mu_)
    uint64_t generation_ = 0;
    bool stop_ = false;
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
