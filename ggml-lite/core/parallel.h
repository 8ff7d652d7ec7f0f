// The CPU reference kernels' parallel regions, on a process-wide gl::ThreadPool (thread_pool.h).
#pragma once
#include <cstdint>
#include <functional>

namespace gl {

// Threads used by parallel_for: GL_THREADS if set, else the hardware concurrency.
int cpu_threads();
void set_cpu_threads(int n);

// Calls fn(begin, end) on disjoint chunks covering [0, n), at least `grain` items each.
// Runs inline when n is small or when called from inside another parallel_for.
void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

}  // namespace gl
