#include "ggml-lite/core/parallel.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>

#include "ggml-lite/core/thread_pool.h"

namespace gl {
namespace {

thread_local bool t_in_worker = false;

// A parallel region: its chunks go to the caller and to helper tasks queued on the pool. Its state
// is shared with the helpers, so a helper that starts after the region closed finds it closed and
// leaves; the caller returns only once every helper that joined has left, so the job (on the
// caller's stack) is touched only while it lives.
struct Region {
    Region(const std::function<void(int64_t)>* j, int64_t n) : job(j), chunks(n) {}
    const std::function<void(int64_t)>* job;
    int64_t chunks;
    std::atomic<int64_t> next{0};
    std::mutex mu;
    std::condition_variable left;
    bool closed = false;       // guarded by mu
    int active = 0;            // helpers inside (guarded by mu)
    std::exception_ptr error;  // the first exception of a chunk (guarded by mu)

    void work() {
        t_in_worker = true;
        for (int64_t c; (c = next.fetch_add(1)) < chunks;) {
            try {
                (*job)(c);
            } catch (...) {
                std::lock_guard<std::mutex> lk(mu);
                if (!error) error = std::current_exception();
            }
        }
        t_in_worker = false;
    }
    void help() {
        {
            std::lock_guard<std::mutex> lk(mu);
            if (closed) return;
            active++;
        }
        work();
        std::lock_guard<std::mutex> lk(mu);
        if (--active == 0) left.notify_all();
    }
};

// The caller and threads - 1 workers share each region.
class Pool {
public:
    explicit Pool(int threads) : helpers_(std::max(threads - 1, 1)) {}

    void run(int64_t chunks, const std::function<void(int64_t)>& job) {
        auto r = std::make_shared<Region>(&job, chunks);
        helpers_.post([r] { r->help(); }, int(std::min<int64_t>(helpers_.threads(), chunks - 1)));
        r->work();  // the caller takes chunks too
        std::unique_lock<std::mutex> lk(r->mu);
        r->closed = true;  // no helper joins from here on
        r->left.wait(lk, [&] { return r->active == 0; });
        if (r->error) std::rethrow_exception(r->error);
    }

private:
    ThreadPool helpers_;
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
